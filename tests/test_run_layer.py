"""Run layer: who writes the results, workers that stop coming back (issue 15)."""

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from toyengine import load_spec, run_study
from toyengine.cli import main
from toyengine.store import StoreInfo

ROOT = Path(__file__).parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
COMPARED = ["value", "error", "nll", "valid", "edm", "nfcn", "status", "n_events"]


def same(a, b):
    da, db = xr.open_zarr(a, consolidated=False), xr.open_zarr(b, consolidated=False)
    for v in COMPARED:
        np.testing.assert_array_equal(da[v].values, db[v].values, err_msg=v)


@pytest.fixture(scope="module")
def spec():
    return load_spec(HELLO).with_overrides(toys=30)


def test_client_and_worker_writes_give_the_same_store(tmp_path, spec):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        a = run_study(spec, tmp_path / "w.zarr", client=client, chunk_size=4, progress=None)
        b = run_study(spec, tmp_path / "c.zarr", client=client, chunk_size=4, progress=None,
                      write="client")
        # a local path and workers on this machine: auto picks the workers
        c = run_study(spec, tmp_path / "a.zarr", client=client, chunk_size=4, progress=None)
    assert (a.write, b.write, c.write) == ("workers", "client", "workers")
    assert a.complete and b.complete and c.complete
    same(tmp_path / "w.zarr", tmp_path / "c.zarr")
    same(tmp_path / "w.zarr", tmp_path / "a.zarr")


def test_run_stops_when_no_worker_is_left(tmp_path, spec, capsys):
    """All workers gone mid-run: the run ends within the timeout with one message; a
    rerun with workers completes the store identically."""
    from distributed import Client, LocalCluster

    path = tmp_path / "s.zarr"
    slow = spec.with_overrides(toys=160)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        out = {}

        def go():
            out["r"] = run_study(slow, path, client=client, chunk_size=2, progress=None,
                                 worker_timeout=2.0)

        th = threading.Thread(target=go)
        th.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if StoreInfo(path).done().sum() >= 2:
                    break
            except Exception:  # noqa: BLE001 - not created yet
                pass
            time.sleep(0.05)
        t_gone = time.monotonic()  # before scale(0): the workers may go inside it
        cluster.scale(0)
        th.join(60)
        took = time.monotonic() - t_gone
    r = out["r"]
    assert not r.complete
    assert "no Dask worker alive" in r.stopped and "run the same command again" in r.stopped
    # the watcher polls every second, so its last sighting of a worker may precede
    # scale(0) by up to 1 s: it stops between timeout - 1 s and timeout + a few polls
    assert 1.0 <= took < 20.0
    from toyengine.cli.finish import finish_run

    assert finish_run(r, str(path), False) == 3
    assert "STOPPED: no Dask worker alive" in capsys.readouterr().err
    # resume with workers: identical to an undisturbed run
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        assert run_study(slow, path, client=client, progress=None).complete
        ref = tmp_path / "ref.zarr"
        assert run_study(slow, ref, client=client, chunk_size=2, progress=None).complete
    same(path, ref)
    assert main(["verify", str(path)]) == 0


@pytest.mark.parametrize("failure", ["raises", "never_returns"])
def test_lost_batch_fetch_falls_back_to_one_by_one(tmp_path, spec, client, monkeypatch,
                                                   failure):
    """A batch gather that raises, or never returns (a fetch lost in distributed's event
    loop), does not lose or hang the run: its tasks are fetched one by one and the store
    is identical to an undisturbed one."""
    import toyengine.run.runner as runner

    ref = tmp_path / "ref.zarr"
    assert run_study(spec, ref, client=client, chunk_size=3, progress=None).complete
    calls = []
    never = threading.Event()  # never set: the abandoned daemon threads just wait

    def broken(self, client):
        calls.append(len(self.futures))
        if failure == "raises":
            self.error = OSError("connection closed while fetching")
            self.done.set()
        else:
            never.wait()

    monkeypatch.setattr(runner._BatchFetch, "_run", broken)
    monkeypatch.setattr(runner, "RESULT_WAIT", 0.05)
    monkeypatch.setattr(runner, "BATCH_WAITS", 2)
    path = tmp_path / "s.zarr"
    try:
        r = run_study(spec, path, client=client, chunk_size=3, progress=None)
    finally:
        never.set()  # let the abandoned fetch threads end
    assert r.complete and r.chunks_run == 10 and not r.errors
    assert sum(calls) == 10  # every chunk went through a (broken) batch first
    same(path, ref)


def test_auto_chunk_size_targets_task_rate_and_store_size():
    from toyengine.run.runner import auto_chunk_size

    # 10 s toys on 1000 workers: 20 s tasks (50 tasks/s), balance not binding
    assert auto_chunk_size(10.0, 10**4, 1, 1000) == 2
    # ... but 1e7 of them would be 5e6 chunks: capped at 20000 chunks
    assert auto_chunk_size(10.0, 10**7, 1, 1000) == 500
    # few workers: the 5 s floor
    assert auto_chunk_size(0.01, 10**6, 1, 10) == 500
    # a small study is cut into four tasks per worker
    assert auto_chunk_size(0.01, 400, 1, 10) == 10
    # never more than 20000 chunks: 1e7 fast toys on 1e4 workers
    assert auto_chunk_size(1e-4, 10**7, 1, 10_000) == 500


def test_worker_warm_up_builds_the_models_and_never_raises(monkeypatch):
    """``run.warm.warm_up`` (sent to every worker, not waited for, while the client prepares
    the run) leaves the study's models in the per-process cache that the chunk tasks use;
    a study it cannot build is left for the task to report."""
    import asyncio
    import pickle

    from toyengine.run.warm import warm_up
    from toyengine.study import spec as spec_module
    from toyengine.study.spec import StudySpec

    # an empty model cache: runs earlier in the session (the in-process test cluster
    # warms up this very process) may have built these models already
    monkeypatch.setattr(spec_module, "_MODEL_CACHE", {})
    spec = StudySpec.from_text((ROOT / "studies/examples/hello.yaml").read_text())
    keys = {(spec.digest, spec.plugin_sources, -1, h) for h in spec.hypotheses}
    assert not keys & set(spec_module._MODEL_CACHE)
    asyncio.run(warm_up(pickle.dumps(spec)))
    assert keys <= set(spec_module._MODEL_CACHE)
    asyncio.run(warm_up(b"not a pickle"))  # returns quietly


def test_chunk_size_above_the_toy_count_runs_and_extends(tmp_path, spec, client):
    """A chunk size larger than the study (3 for 2 toys) is cut to the study's length
    when the store is made: every write used to be refused ("store holds 2 toys in chunks
    of 2, expected 2 in chunks of 3"). Extending that store to 7 toys gives the toys of a
    store made with 7 at once."""
    path = tmp_path / "s.zarr"
    r = run_study(spec.with_overrides(toys=2), path, client=client, chunk_size=3,
                  progress=None)
    assert r.complete and not r.errors and r.chunk_size == 2
    assert run_study(spec.with_overrides(toys=7), path, client=client, progress=None).complete
    ref = tmp_path / "ref.zarr"
    assert run_study(spec.with_overrides(toys=7), ref, client=client, chunk_size=3,
                     progress=None).complete
    same(path, ref)
