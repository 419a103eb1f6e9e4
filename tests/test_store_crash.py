"""Crash-safe store metadata and the store lease (issue 15).

A kill is simulated at every step of store creation and of a ``--toys`` extension, both
as a Ctrl-C (``KeyboardInterrupt``: the lease is released on the way out) and as a node
crash (nothing runs after the kill: the lease stays until it expires). A rerun must give
the store an undisturbed run gives.
"""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from toyengine import load_spec, run_study
from toyengine.cli import main
from toyengine.errors import Interrupted, StoreError
from toyengine.store import StoreInfo
from toyengine.store import results as store_mod
from toyengine.store.lease import Lease, current_epoch, lease_key
from toyengine.store.location import Location
from toyengine.study.schema import study_fields

ROOT = Path(__file__).parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
COMPARED = ["value", "error", "nll", "valid", "edm", "nfcn", "status", "gof", "n_events",
            "truth", "reference", "chunk_variant", "chunk_start", "chunk_stop", "toy"]
TTL = 1.5  # lease lifetime in the crash tests: a crashed holder's lease expires quickly


def assert_same_store(a, b):
    da, db = xr.open_zarr(a, consolidated=False), xr.open_zarr(b, consolidated=False)
    assert dict(da.sizes) == dict(db.sizes)
    for v in COMPARED:
        np.testing.assert_array_equal(da[v].values, db[v].values, err_msg=v)
    assert da.attrs == db.attrs
    ia, ib = StoreInfo(a), StoreInfo(b)
    assert ia.done().all() and ib.done().all()
    assert ia.state == ib.state


class Killed(KeyboardInterrupt):
    pass


@pytest.fixture(scope="module")
def spec():
    return load_spec(HELLO).with_overrides(toys=40)


def record_steps(monkeypatch, fn):
    seen = []
    monkeypatch.setattr(store_mod, "_step", seen.append)
    fn()
    monkeypatch.setattr(store_mod, "_step", lambda name: None)
    return seen


@pytest.fixture(scope="module")
def created(tmp_path_factory, spec, client):
    """Undisturbed 40-toy store, and the steps its creation passes."""
    path = tmp_path_factory.mktemp("created") / "ref.zarr"
    mp = pytest.MonkeyPatch()
    steps = record_steps(mp, lambda: run_study(spec, path, client=client, chunk_size=10,
                                               progress=None))
    assert steps == ["create:begin", "create:arrays", "create:state"]
    return path, steps


@pytest.fixture(scope="module")
def extended(tmp_path_factory, spec, client):
    """A finished 25-toy store (chunks 0-9, 10-19, 20-24), and that store undisturbedly
    extended to 40 toys (the partial chunk 20-24 is reopened as 20-29), with its steps."""
    base = tmp_path_factory.mktemp("ext") / "base.zarr"
    assert run_study(spec.with_overrides(toys=25), base, client=client, chunk_size=10,
                     progress=None).complete
    ref = base.parent / "ext.zarr"
    shutil.copytree(base, ref)
    mp = pytest.MonkeyPatch()
    out = {}
    steps = record_steps(mp, lambda: out.update(r=run_study(spec, ref, client=client,
                                                            progress=None)))
    assert out["r"].chunks_run == 2  # the reopened chunk 20-29 and the new 30-39
    assert steps[0] == "extend:intent" and steps[-1] == "extend:state"
    return base, ref, steps


def kill_at(monkeypatch, step, crash):
    def hook(name):
        if name == step:
            raise Killed(step)

    monkeypatch.setattr(store_mod, "_step", hook)
    if crash:  # a node crash: the lease is left behind, its renewal stops
        def release(self):
            self._stop.set()
            if self._thread is not None:
                self._thread.join()

        monkeypatch.setattr(Lease, "release", release)


def rerun_after_kill(monkeypatch, run, check_status):
    monkeypatch.undo()
    # whatever the kill left, status answers in one line (no traceback)
    check_status()
    return run()


@pytest.mark.parametrize("crash", [False, True], ids=["ctrl-c", "crash"])
@pytest.mark.parametrize("step", ["create:begin", "create:arrays", "create:state"])
def test_kill_during_creation(tmp_path, monkeypatch, spec, client, created, step, crash,
                              capsys):
    ref, _ = created
    path = tmp_path / "s.zarr"
    kill_at(monkeypatch, step, crash)
    # creation runs inside run_study's interrupt handling: Ctrl-C there becomes Interrupted
    with pytest.raises(Interrupted):
        run_study(spec, path, client=client, chunk_size=10, progress=None, lease_ttl=TTL)

    def status():
        code = main(["status", str(path)])
        err = capsys.readouterr().err
        assert code in (0, 1, 2)
        assert "Traceback" not in err
        if code == 2:
            assert "interrupted" in err or "no result store" in err

    report = rerun_after_kill(monkeypatch, lambda: run_study(
        spec, path, client=client, chunk_size=10, progress=None, lease_ttl=TTL), status)
    assert report.complete
    assert_same_store(path, ref)


def extension_steps():
    toy_vars = [f.name for f in study_fields()]  # a study without a look-elsewhere scan
    names = ["extend:intent", *(f"extend:resize:{n}" for n in (*toy_vars, "toy")),
             "extend:toy", "extend:unmark", "extend:table:chunk_variant",
             "extend:table:chunk_start", "extend:table:chunk_stop", "extend:state"]
    return names


def test_extension_steps_are_all_tested(extended):
    assert extended[2] == extension_steps()


def _kills() -> list:
    """A crash (lease left behind) at every step, a Ctrl-C (lease released) at a few. The
    resize steps are one loop over the record fields: its first and last field and the toy
    axis stay in the default suite, the fields between them run with ``-m slow``."""
    steps = extension_steps()
    resize = [s for s in steps if s.startswith("extend:resize:") and s != "extend:resize:toy"]
    between = set(resize[1:-1])
    kills = [pytest.param(s, True, id=f"{s}-crash",
                          marks=[pytest.mark.slow] if s in between else [])
             for s in steps]
    return kills + [pytest.param(s, False, id=f"{s}-ctrl-c")
                    for s in ("extend:intent", "extend:resize:value", "extend:state")]


@pytest.mark.parametrize(("step", "crash"), _kills())
def test_kill_during_extension(tmp_path, monkeypatch, spec, client, extended, step, crash,
                               capsys):
    base, ref, _ = extended
    path = tmp_path / "s.zarr"
    shutil.copytree(base, path)
    kill_at(monkeypatch, step, crash)
    with pytest.raises(Killed):
        run_study(spec, path, client=client, progress=None, lease_ttl=TTL)

    def status():
        code = main(["status", str(path)])
        err = capsys.readouterr().err
        assert "Traceback" not in err and "format_version" not in err
        if step != "extend:state":
            assert code == 2 and "interrupted" in err  # the extension is not committed

    report = rerun_after_kill(monkeypatch, lambda: run_study(
        spec, path, client=client, progress=None, lease_ttl=TTL), status)
    assert report.complete
    assert_same_store(path, ref)


def test_two_concurrent_creations_compute_each_chunk_once(tmp_path, spec, client, created):
    ref, _ = created
    path = tmp_path / "s.zarr"
    reports = []

    def go():
        reports.append(run_study(spec, path, client=client, chunk_size=10, progress=None))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(reports) == 2 and all(r.complete for r in reports)
    assert sorted(r.chunks_run for r in reports) == [0, 4]
    assert_same_store(path, ref)


def test_two_concurrent_extensions_append_once(tmp_path, spec, client, extended):
    base, ref, _ = extended
    path = tmp_path / "s.zarr"
    shutil.copytree(base, path)
    reports = []

    def go():
        reports.append(run_study(spec, path, client=client, progress=None))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(r.chunks_run for r in reports) == [0, 2]
    assert StoreInfo(path).toys == 40
    assert_same_store(path, ref)


def test_concurrent_creation_of_another_study_is_refused(tmp_path, spec, client):
    path = tmp_path / "s.zarr"
    results = []

    def go(s):
        try:
            results.append(run_study(s, path, client=client, chunk_size=10, progress=None))
        except StoreError as exc:
            results.append(exc)

    threads = [threading.Thread(target=go, args=(s,))
               for s in (spec, spec.with_overrides(seed=99))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    errors = [r for r in results if isinstance(r, StoreError)]
    assert len(results) == 2 and len(errors) == 1
    # the loser's message names the seed of the winner's store and its own, whichever won
    assert "the seed differs" in str(errors[0])
    assert StoreInfo(path).done().all()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lease_of_dead_process_is_taken_over_at_once(tmp_path):
    loc = Location(str(tmp_path / "s.zarr"))
    loc.write_json(lease_key(1), {"owner": "x", "host": socket.gethostname(),
                                  "pid": dead_pid(), "expires": time.time() + 3600,
                                  "ttl": 3600})
    t0 = time.monotonic()
    with Lease(loc, wait=5, progress=None) as lease:
        assert lease.epoch == 2
        assert loc.read_json(lease_key(2))["pid"] == os.getpid()
        assert not loc.exists(lease_key(1))  # the superseded lease is removed
    assert time.monotonic() - t0 < 5
    assert current_epoch(loc) == 0  # no store there: no lease left behind


def test_live_lease_elsewhere_waits_then_expires(tmp_path):
    loc = Location(str(tmp_path / "s.zarr"))
    held = {"owner": "x", "host": "another-node", "pid": 1, "expires": time.time() + 2,
            "ttl": 2}
    loc.write_json(lease_key(1), held)
    with pytest.raises(StoreError, match="in use by process 1 on another-node"):
        Lease(loc, wait=0.5, progress=None).acquire()
    assert loc.read_json(lease_key(1)) == held
    t0 = time.monotonic()
    with Lease(loc, wait=10, progress=None):
        waited = time.monotonic() - t0
    assert 1.0 < waited < 10  # it waited for the expiry, and no longer


def test_lease_is_renewed_while_held(tmp_path):
    loc = Location(str(tmp_path / "s.zarr"))
    with Lease(loc, ttl=0.6, progress=None) as lease:
        first = loc.read_json(lease_key(lease.epoch))["expires"]
        time.sleep(0.8)
        assert loc.read_json(lease_key(lease.epoch))["expires"] > first
        assert not lease.lost


def test_lease_survives_a_full_disk_and_a_read_only_release(tmp_path, monkeypatch):
    """A renewal that fails (full disk) neither kills the renewing thread nor prints a
    traceback; renewals resume once there is space; a lease that cannot be deleted at
    the end (read-only file system) is left to expire, without an error."""
    loc = Location(str(tmp_path / "s.zarr"))
    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    real_write = Location.write_json

    def full(self, key, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def read_only(self, key):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), self.path(key))

    with Lease(loc, ttl=0.3, progress=None) as lease:  # renewed every 0.1 s
        key = lease_key(lease.epoch)
        first = loc.read_json(key)["expires"]
        monkeypatch.setattr(Location, "write_json", full)
        time.sleep(0.5)
        assert loc.read_json(key)["expires"] == first  # the renewals failed
        monkeypatch.setattr(Location, "write_json", real_write)
        time.sleep(0.5)
        assert loc.read_json(key)["expires"] > first  # and resumed
        assert lease._thread.is_alive() and not lease.lost
        monkeypatch.setattr(Location, "delete", read_only)
    assert thread_errors == []
    assert loc.read_json(key)["owner"] == lease.token  # left to expire


def test_foreign_directory_is_never_overwritten(tmp_path, spec, client):
    path = tmp_path / "mine"
    path.mkdir()
    (path / "thesis.tex").write_text("x")
    with pytest.raises(StoreError, match="not a toyengine result store"):
        run_study(spec, path, client=client, chunk_size=10, progress=None)
    assert (path / "thesis.tex").read_text() == "x"
    assert json.loads(json.dumps(sorted(p.name for p in path.iterdir()))) == ["thesis.tex"]
