"""The store lease fences writes: its take-over is atomic, and a run that lost it stops
writing (issue 27).

Take-over race: three processes released together by a barrier try to take over the same
expired lease, over and over; in every trial exactly one of them may hold it.
"""

import multiprocessing
import os
import shutil
import signal
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
from toyengine.errors import LeaseLost, StoreError
from toyengine.run import runner
from toyengine.store import StoreInfo, check_chunks, verify_store
from toyengine.store import location as location_mod
from toyengine.store import results as store_mod
from toyengine.store import writing as writing_mod
from toyengine.store.lease import Lease, current_epoch, lease_key
from toyengine.store.location import Location
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk

ROOT = Path(__file__).parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
COMPARED = ["value", "error", "nll", "valid", "edm", "nfcn", "status", "gof", "n_events",
            "fail_reason", "truth", "reference", "chunk_variant", "chunk_start", "chunk_stop",
            "toy"]
#: the control record's provenance, not a result: ``state.json``'s ``history`` is the toy
#: count at creation and after each extension ([97, 133] for a store extended from 97 toys,
#: [133] for one made at once); everything else in it — format, toy and chunk counts, the
#: checksum of every metadata and study-level object — must be identical
PROVENANCE = ("history",)
#: run A holds a store of A_TOYS toys in chunks of CHUNK (its last chunk, 90-96, partial);
#: run B extends it to B_TOYS, which reopens that chunk as 90-99
A_TOYS, B_TOYS, CHUNK = 97, 133, 10
TTL = 1.0

RACE_TRIALS = 500
RACE_PROCESSES = 3
#: the race on an S3 server, where every step is an HTTP request (RACE_TRIALS: slow)
S3_RACE_TRIALS = 50


def _abandoned_lease(url: str, options: dict) -> None:
    """A lease whose holder crashed: acquired, never renewed, never released."""
    lease = Lease(Location(url, options), ttl=0.05, progress=None)
    lease.acquire()
    lease._stop.set()
    lease._thread.join()


def _contender(urls, options, barrier, results) -> None:
    """One racing process: for every trial, wait for the others, try to take the lease
    over without waiting, and say whether it got it (holding it until all have tried)."""
    if options:  # a forked child: fsspec's async filesystems are built anew per process
        import fsspec

        location_mod._RESOLVED.clear()
        fsspec.AbstractFileSystem.clear_instance_cache()
    held = []
    for trial, url in enumerate(urls):
        barrier.wait()
        lease = Lease(Location(url, options), ttl=3600, wait=0, progress=None)
        try:
            lease.acquire()
        except StoreError:  # in use by the winner: the expected outcome for two of three
            got = False
        else:
            got = True
            lease._stop.set()  # no renewal thread left running; the lease stays held
            held.append(lease)
        results.put((trial, got))
        barrier.wait()  # nobody starts the next trial before every attempt of this one
    for lease in held:
        lease._thread.join()


def race(urls: list[str], options: dict | None = None) -> tuple[int, int]:
    """RACE_PROCESSES processes take over the expired lease of each of ``urls`` at the
    same instant; returns (trials with two or more holders, trials with none)."""
    options = options or {}
    for url in urls:
        _abandoned_lease(url, options)
    time.sleep(0.1)  # every lease now expired (ttl 0.05 s)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(RACE_PROCESSES)
    results = ctx.Queue()
    procs = [ctx.Process(target=_contender, args=(urls, options, barrier, results))
             for _ in range(RACE_PROCESSES)]
    for p in procs:
        p.start()
    winners = [0] * len(urls)
    try:
        for _ in range(len(urls) * RACE_PROCESSES):
            trial, got = results.get(timeout=60)
            winners[trial] += got
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    return sum(w > 1 for w in winners), sum(w == 0 for w in winners)


def test_take_over_of_an_expired_lease_has_one_winner(tmp_path):
    """RACE_TRIALS trials of RACE_PROCESSES processes taking over one expired lease at the
    same instant: exactly one holder every time (read-compare-delete, the scheme before,
    had two holders in 3, 4 and 3 of 500 trials)."""
    urls = [str(tmp_path / f"s{i}.zarr") for i in range(RACE_TRIALS)]
    assert race(urls) == (0, 0)  # (double holders, trials without a holder)


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free 127.0.0.1 port with bucket ``toys``; yields its URL."""
    pytest.importorskip("s3fs", reason="needs the [s3] extra")
    pytest.importorskip("moto", reason="needs moto[server] from the [test] extra")
    import s3fs

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    mp = pytest.MonkeyPatch()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        mp.setenv(k, env[k])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir("toys")
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield endpoint
    finally:
        mp.undo()
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("trials", [
    S3_RACE_TRIALS, pytest.param(RACE_TRIALS, marks=pytest.mark.slow)])
def test_take_over_on_s3_has_one_winner(s3, trials):
    """The same race on an S3 server (moto on 127.0.0.1): the take-over is a PUT with
    ``If-None-Match: *``, which exactly one of the racing processes wins (the scheme
    before failed there outright: a lease deleted between two reads crashed the waiting
    process)."""
    urls = [f"s3://toys/race{trials}-{i}.zarr" for i in range(trials)]
    assert race(urls, {"endpoint_url": s3}) == (0, 0)


def assert_same_store(a, b):
    da, db = xr.open_zarr(a, consolidated=False), xr.open_zarr(b, consolidated=False)
    assert dict(da.sizes) == dict(db.sizes)
    for v in COMPARED:
        np.testing.assert_array_equal(da[v].values, db[v].values, err_msg=v)
    assert da.attrs == db.attrs
    ia, ib = StoreInfo(a), StoreInfo(b)
    assert ia.done().all() and ib.done().all()
    assert check_chunks(ia) == []
    # the stores' results are bit-identical; how each came to be (PROVENANCE) may differ,
    # but both histories end at the toy count they hold
    assert {k: v for k, v in ia.state.items() if k not in PROVENANCE} == \
        {k: v for k, v in ib.state.items() if k not in PROVENANCE}
    assert ia.state["history"][-1] == ib.state["history"][-1] == ia.toys


@pytest.fixture(scope="module")
def spec():
    return load_spec(HELLO)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spec, client):
    """An uninterrupted run of B_TOYS toys, and a finished store of A_TOYS toys."""
    base = tmp_path_factory.mktemp("lease")
    ref, small = base / "ref.zarr", base / "small.zarr"
    assert run_study(spec.with_overrides(toys=B_TOYS), ref, client=client, chunk_size=CHUNK,
                     progress=None).complete
    assert run_study(spec.with_overrides(toys=A_TOYS), small, client=client,
                     chunk_size=CHUNK, progress=None).complete
    return ref, small


@pytest.fixture(scope="module")
def two_thread_client():
    """One in-process worker with two threads: run A's paused task holds one of them,
    run B computes on the other; the test's patches reach both."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as c:
        yield c


class _PausedRun:
    """Run A in a thread, paused at a step of its own: a patched step calls :meth:`hold`,
    which holds A there until :meth:`resume`; while it is held, A's client does not renew
    its lease (of lease epoch ``epoch``), so the lease expires as a frozen process's."""

    def __init__(self, monkeypatch, epoch):
        self.held, self.go, self.paused = threading.Event(), threading.Event(), threading.Event()
        self.out = {}
        self.thread = None
        real_renew = Lease.renew_once

        def renew_once(lease):
            if self.paused.is_set() and lease.epoch == epoch:  # run A's client is paused
                return True
            return real_renew(lease)

        monkeypatch.setattr(Lease, "renew_once", renew_once)

    def hold(self):
        """Called by A's patched step the first time it is reached."""
        self.held.set()
        assert self.go.wait(60)

    def start(self, run):
        """Start ``run()`` (run A) in a thread; return once it is held."""
        def target():
            try:
                self.out["a"] = run()
            except Exception as exc:  # noqa: BLE001 - examined by the test
                self.out["a"] = exc

        self.thread = threading.Thread(target=target)
        self.thread.start()
        assert self.held.wait(60)
        self.paused.set()

    def expire(self, loc, epoch):
        """Wait until the lease of ``epoch`` (A's) has expired."""
        expires = loc.read_json(lease_key(epoch))["expires"]
        time.sleep(max(0.0, expires - time.time()) + 0.2)

    def resume(self):
        """Let A go on; returns what it returned or raised."""
        self.paused.clear()
        self.go.set()
        if self.thread is not None:
            self.thread.join(60)
            assert not self.thread.is_alive()
        return self.out.get("a")


def test_paused_run_loses_its_lease_and_writes_nothing(tmp_path, spec, reference,
                                                       two_thread_client, monkeypatch, cli):
    """Run A (A_TOYS toys) pauses — its client stops renewing the lease, its worker is
    held in the partial last chunk — for longer than the lease lasts; run B (B_TOYS toys)
    takes the lease over, extends the store (reopening that chunk) and finishes. When A
    resumes, its worker finds the lease lost and writes nothing, A stops with LeaseLost,
    and the store is the one an uninterrupted run of B_TOYS toys gives (on the code before
    the fence, A's worker wrote the chunk with its view, toys 97-99 "not run", and marked
    it done)."""
    ref, _ = reference
    path = tmp_path / "s.zarr"
    client = two_thread_client
    real_run_chunk = runner.run_chunk
    a = _PausedRun(monkeypatch, epoch=1)

    def run_chunk_paused(plan, chunk):
        res = real_run_chunk(plan, chunk)
        if chunk.stop == A_TOYS:  # A's view of the last chunk: pause before writing it
            a.hold()
        return res

    monkeypatch.setattr(runner, "run_chunk", run_chunk_paused)
    loc = Location(str(path))
    try:
        a.start(lambda: run_study(spec.with_overrides(toys=A_TOYS), path, client=client,
                                  chunk_size=CHUNK, progress=None, lease_ttl=TTL))
        assert current_epoch(loc) == 1
        a.expire(loc, 1)
        report_b = run_study(spec.with_overrides(toys=B_TOYS), path, client=client,
                             progress=None, lease_ttl=TTL)
        assert report_b.complete and current_epoch(loc) == 3  # B's 2, released as 3
    finally:
        got_a = a.resume()
    assert isinstance(got_a, LeaseLost), got_a
    assert str(got_a).startswith("lease lost to another run: store ")
    assert "\n" not in str(got_a)
    assert_same_store(path, ref)
    verified = cli("verify", path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "0 missing or corrupt" in verified.stdout
    assert cli("status", path).returncode == 0


def test_write_landing_after_the_take_over_is_put_back(tmp_path, spec, reference,
                                                       two_thread_client, monkeypatch, cli):
    """Run A's worker passes its lease check for chunk 1 (toys 10-19) and pauses before
    writing it, for longer than the lease lasts; run B takes the store over, computes that
    chunk and finishes. A resumes and writes chunk 1 over B's — the same toys, but its own
    ``fit_time`` — finds the lease lost and puts B's objects back: the store stays B's,
    bit for bit, and ``verify`` finds nothing (on the code before, A's ``fit_time`` object
    stayed and failed the checksum of B's marker, the CI failure of the real-process test
    below)."""
    ref, _ = reference
    path = tmp_path / "s.zarr"
    client = two_thread_client
    loc = Location(str(path))
    a = _PausedRun(monkeypatch, epoch=1)

    def step(name):
        if name == "write:arrays:1" and not a.held.is_set():  # A's write of chunk 1
            a.hold()

    put_back = threading.Event()  # A's worker put back what its write replaced
    real_put_back = writing_mod._put_back

    def put_back_and_say(*args, **kwargs):
        try:
            real_put_back(*args, **kwargs)
        finally:
            put_back.set()

    monkeypatch.setattr(writing_mod, "_step", step)
    monkeypatch.setattr(writing_mod, "_put_back", put_back_and_say)
    try:
        a.start(lambda: run_study(spec.with_overrides(toys=B_TOYS), path, client=client,
                                  chunk_size=CHUNK, progress=None, lease_ttl=TTL))
        a.expire(loc, 1)
        assert run_study(spec.with_overrides(toys=B_TOYS), path, client=client,
                         progress=None, lease_ttl=TTL).complete
        info = StoreInfo(path)
        keys = [store_mod.chunk_key(name, info.chunks()[1], CHUNK) for name in info.toy_vars]
        b_chunk = loc.cat([*keys, store_mod.marker_key(1)])
        assert info.markers()[1]["epoch"] == 2  # B wrote chunk 1
    finally:
        got_a = a.resume()  # its write of chunk 1 lands on B's
    assert isinstance(got_a, LeaseLost), got_a
    # A's client may stop (its renewal finds the lease lost) before A's worker is through
    assert put_back.wait(60)
    assert loc.cat([*keys, store_mod.marker_key(1)]) == b_chunk
    assert_same_store(path, ref)
    verified = cli("verify", path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_run_paused_mid_extension_takes_no_further_step(tmp_path, spec, client,
                                                      monkeypatch):
    """Run A (25 → 40 toys) pauses in the middle of its extension (one array resized) for
    longer than its lease; run B (→ 60 toys) takes over, finishes A's extension and its
    own, and all chunks. A resumes: it takes no further step (without the fence it
    resized the remaining arrays back to 40 toys) and stops with LeaseLost; the store
    equals an uninterrupted 60-toy run."""
    ref, path = tmp_path / "ref.zarr", tmp_path / "s.zarr"
    assert run_study(spec.with_overrides(toys=60), ref, client=client, chunk_size=10,
                     progress=None).complete
    assert run_study(spec.with_overrides(toys=25), path, client=client, chunk_size=10,
                     progress=None).complete
    loc = Location(str(path))
    a_epoch = current_epoch(loc) + 1  # the lease A takes
    a = _PausedRun(monkeypatch, epoch=a_epoch)

    def step(name):
        if name == "extend:resize:value" and not a.held.is_set():
            a.hold()

    monkeypatch.setattr(store_mod, "_step", step)
    try:
        a.start(lambda: run_study(spec.with_overrides(toys=40), path, client=client,
                                  progress=None, lease_ttl=TTL))
        assert current_epoch(loc) == a_epoch
        a.expire(loc, a_epoch)
        assert run_study(spec.with_overrides(toys=60), path, client=client, progress=None,
                         lease_ttl=TTL).complete
    finally:
        got_a = a.resume()
    assert isinstance(got_a, LeaseLost), got_a
    assert_same_store(path, ref)


#: ``toyengine run ...`` with a lease of ARGV[1] seconds (the CLI keeps the default 60)
RUN_WITH_TTL = ("import functools, sys\n"
                "import toyengine.run.runner as r\n"
                "r.run_study = functools.partial(r.run_study, lease_ttl=float(sys.argv[1]))\n"
                "from toyengine.cli.main import main\n"
                "sys.exit(main(sys.argv[2:]))\n")


def test_stopped_process_loses_its_lease(tmp_path, client, cli):
    """The issue's scenario with real processes: ``toyengine run --toys 23`` (its client and
    its worker process) is stopped with SIGSTOP mid-run for longer than its lease lasts; a
    run with --toys 24 takes the store over, extends it (reopening the last chunk, toys
    20-22 → 20-23) and finishes; SIGCONT. The stopped run exits 5 with the one line, and
    the store equals an uninterrupted 24-toy run."""
    study = ROOT / "tests" / "data" / "tcc_small.yaml"
    spec24 = load_spec(study).with_overrides(toys=24)
    ref = tmp_path / "ref.zarr"
    assert run_study(spec24, ref, client=client, chunk_size=4, progress=None).complete
    path = tmp_path / "s.zarr"
    loc = Location(str(path))
    cmd = [sys.executable, "-c", RUN_WITH_TTL, "2", "run", str(study), "--store", str(path),
           "--toys", "23", "--workers", "1", "--chunk-size", "4", "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        done = np.zeros(1)
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                done = StoreInfo(path).done()
            except StoreError:  # not created yet
                pass
            if done.sum() >= 1:
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGSTOP)
        assert 1 <= done.sum() < len(done) and proc.poll() is None
        expires = loc.read_json(lease_key(1))["expires"]
        time.sleep(max(0.0, expires - time.time()) + 0.5)  # its lease has expired
        report = run_study(spec24, path, client=client, progress=None)
        assert report.complete and current_epoch(loc) == 3
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
        try:
            _out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    ours = [line for line in err.splitlines() if line.startswith("toyengine:")]
    assert proc.returncode == 5, err
    assert len(ours) == 1 and ours[0].startswith("toyengine: lease lost to another run: ")
    assert "Traceback" not in err
    assert_same_store(path, ref)
    assert cli("verify", path).returncode == 0


def test_lease_lost_is_one_line_and_exit_code_5(tmp_path, monkeypatch, cli):
    def lost(*args, **kwargs):
        raise LeaseLost("lease lost to another run: store x is now at lease epoch 3")

    monkeypatch.setattr(runner, "run_study", lost)
    got = cli("run", HELLO, "--store", tmp_path / "s.zarr", "--toys", 10)
    assert got.returncode == 5
    assert got.stderr == "toyengine: lease lost to another run: store x is now at lease " \
                         "epoch 3\n"


class _LostAt:
    """A fence that holds for the first ``n - 1`` checks and is lost from the n-th."""

    def __init__(self, loc, n):
        self.loc, self.n, self.epoch, self.calls = loc, n, 1, 0

    def check(self):
        self.calls += 1
        if self.calls >= self.n:
            raise LeaseLost("lease lost to another run: test")


@pytest.mark.parametrize(("lost_at", "what"), [(1, "before the arrays"),
                                               (2, "between the arrays and the marker"),
                                               (3, "after the marker")])
def test_write_under_a_lost_lease_never_leaves_a_chunk_done(tmp_path, spec, reference,
                                                            client, lost_at, what,
                                                            monkeypatch):
    """Run A's worker writes the reopened chunk with its stale view (toys 90-96 of a
    97-toy store) after B extended the store to 133 and finished: whichever of A's fence
    checks first finds the lease lost, B's chunk stands — A puts back the objects and the
    marker it wrote over, as they were just before its writes — and a rerun has nothing to
    do (on the code before, A's data were left in the chunk: with lost_at 2 and 3 it was
    not done any more, on the first code toys 97-99 were 'not run' but done)."""
    ref, small = reference
    path = tmp_path / "s.zarr"
    shutil.copytree(small, path)
    loc = Location(str(path))
    # A's worker opened the arrays before B extended the store (its own process's cache)
    arrays_a = writing_mod._writable_arrays(loc, A_TOYS, CHUNK)
    plan_a = Plan.of(spec.with_overrides(toys=A_TOYS))
    stale = run_chunk(plan_a, Chunk(9, 0, 90, A_TOYS))
    assert run_study(spec.with_overrides(toys=B_TOYS), path, client=client,
                     progress=None).complete
    b_marker = loc.cat([store_mod.marker_key(9)])
    monkeypatch.setitem(writing_mod._GROUPS, (loc.url, A_TOYS, CHUNK), arrays_a)
    fence = _LostAt(loc, lost_at)
    with pytest.raises(LeaseLost):
        writing_mod.write_chunk(loc, stale, A_TOYS, CHUNK, fence)
    assert fence.calls == lost_at
    info = StoreInfo(path)
    status = xr.open_zarr(path, consolidated=False)["status"].values[0, 90:100, 0]
    assert (status != 0).all()  # B's toys 97-99, not A's 'not run'
    assert info.done()[9] and loc.cat([store_mod.marker_key(9)]) == b_marker
    assert check_chunks(info) == [] and verify_store(info) == []
    report = run_study(spec.with_overrides(toys=B_TOYS), path, client=client, progress=None)
    assert report.chunks_run == 0
    assert_same_store(path, ref)


def test_put_back_marks_not_done_what_it_cannot_restore(tmp_path, reference):
    """A writer that lost the lease and overwrote an object of a done chunk without holding
    the bytes the chunk's marker vouches for (the other run wrote them between its read and
    its write) removes that marker: the chunk is not done, never done with other objects."""
    _, small = reference
    path = tmp_path / "s.zarr"
    shutil.copytree(small, path)
    loc = Location(str(path))
    chunk = StoreInfo(path).chunks()[3]
    keys = {name: store_mod.chunk_key(name, chunk, CHUNK) for name in StoreInfo(path).toy_vars}
    assert StoreInfo(path).done()[3]
    loc.write_bytes(keys["fit_time"], b"what the paused writer wrote")
    writing_mod._put_back(loc, chunk, keys, {k: None for k in keys.values()})
    info = StoreInfo(path)
    assert not info.done()[3] and info.done().sum() == info.n_chunks - 1
    assert check_chunks(info) == []  # not done, not damaged: the next run recomputes it


def test_stale_done_marker_is_not_done(tmp_path, spec, reference, client, cli):
    """A done marker written for another extent of its chunk (toys 90-96 where the chunk
    table says 90-99) is reported by ``status`` and ``verify`` and recomputed by ``run``."""
    ref, _ = reference
    path = tmp_path / "s.zarr"
    shutil.copytree(ref, path)
    loc = Location(str(path))
    key = store_mod.marker_key(9)
    rec = loc.read_json(key)
    # what a run that planned the chunk before the extension writes: a marker with its own
    # valid checksum (else it is refused as damaged before it can be found stale)
    stale = {k: v for k, v in rec.items() if k != "digest"}
    stale.update(stop=A_TOYS, toys=A_TOYS, epoch=1)
    stale["digest"] = store_mod._marker_digest(9, stale)
    loc.write_json(key, stale)
    problems = check_chunks(StoreInfo(path))
    assert [p.chunk.index for p in problems] == [9]
    assert "done marker is stale: written for variant 0 toys 90-96 (a run of 97 toys, " \
           "lease epoch 1), the chunk now holds toys 90-99" in problems[0].what
    status = cli("status", path)
    assert status.returncode == 1 and "done marker is stale" in status.stdout
    report = run_study(spec.with_overrides(toys=B_TOYS), path, client=client, progress=None)
    assert report.chunks_run == 1 and report.complete
    assert_same_store(path, ref)
