"""Issue 6: a hand-started Dask cluster (cluster/start-cluster.sh: ``dask scheduler`` and
two ``dask worker`` processes on 127.0.0.1) runs a study with results identical to the
default local run, and survives one worker being SIGKILLed mid-study.

Every test starts and stops its own processes (ports chosen by the OS: ``--port 0``),
with timeouts; nothing is left running (the stop script, then SIGKILL of the recorded
process groups as a fallback).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from toyengine.store import StoreInfo, open_results

ROOT = Path(__file__).resolve().parents[1]
START = ROOT / "cluster" / "start-cluster.sh"
STOP = ROOT / "cluster" / "stop-cluster.sh"
STUDY = ROOT / "studies" / "tcc" / "pulls.yaml"
SEED = "4242"
TOYS = "40"
COMPARED = ("value", "error", "nll", "valid")


def _env() -> dict[str, str]:
    """This interpreter's environment first on PATH, so `dask`/`toyengine` are ours."""
    env = dict(os.environ)
    # another test's nanny may have left distributed's default here (it "leaks variables
    # into the nanny process"): the hand-started nannies must not see it as the user's
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHON"] = sys.executable
    return env


def _toyengine(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "toyengine.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


@dataclass
class HandCluster:
    """Processes started by start-cluster.sh (``pids`` lines: name pid kind)."""

    directory: Path
    address: str

    def processes(self) -> list[tuple[str, int, str]]:
        f = self.directory / "pids"
        if not f.exists():
            return []
        rows = [line.split() for line in f.read_text().splitlines() if line.strip()]
        return [(n, int(p), k) for n, p, k in rows]

    def workers(self) -> list[tuple[str, int, str]]:
        return [p for p in self.processes() if p[0] != "scheduler"]

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}"
                         for f in sorted(self.directory.glob("*.log")))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


@contextlib.contextmanager
def hand_cluster(directory: Path, workers: int = 2, *extra: str,
                 dashboard: tuple[str, ...] = ("--dashboard-address", "none"),
                 ) -> Iterator[HandCluster]:
    r = subprocess.run([str(START), "-d", str(directory), "-n", str(workers), "--port", "0",
                        *dashboard, "--timeout", "60", *extra],
                       capture_output=True, text=True, timeout=90, env=_env())
    cluster = HandCluster(directory, r.stdout.strip().splitlines()[-1] if r.stdout else "")
    try:
        assert r.returncode == 0, f"start-cluster.sh failed:\n{r.stderr}\n{cluster.logs()}"
        assert (directory / "address").read_text().strip() == cluster.address
        yield cluster
    finally:
        recorded = cluster.processes()
        subprocess.run([str(STOP), "-d", str(directory), "--timeout", "15"],
                       capture_output=True, text=True, timeout=60)
        for _name, pid, kind in recorded:  # fallback: only the groups we started
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    if kind == "group":
                        os.killpg(pid, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10  # SIGKILLed processes take a moment to go
        while any(_alive(pid) for _n, pid, _k in recorded) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [(n, pid, Path(f"/proc/{pid}/stat").read_text() if _alive(pid) else "")
                for n, pid, _k in recorded if _alive(pid)]
        assert not left, f"processes left running: {left}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default local run (LocalCluster, one worker) of the study."""
    store = tmp_path_factory.mktemp("ref") / "local.zarr"
    r = _toyengine("run", STUDY, "--store", store, "--workers", "1", "--toys", TOYS,
                   "--seed", SEED, "--quiet")
    assert r.returncode == 0, r.stderr
    return store


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HandCluster]:
    with hand_cluster(tmp_path_factory.mktemp("dask") / "run") as c:
        yield c


def test_scripts_start_separate_processes_and_stop_them(cluster: HandCluster) -> None:
    procs = cluster.processes()
    assert len(procs) == 3 and procs[0][0] == "scheduler"
    assert cluster.address.startswith("tcp://127.0.0.1:")
    assert all(_alive(pid) for _n, pid, _k in procs)
    assert len({pid for _n, pid, _k in procs}) == 3
    from distributed import Client

    with Client(cluster.address, timeout="10s", set_as_default=False) as client:
        info = client.scheduler_info()
        assert len(info["workers"]) == 2
        assert all(w["nthreads"] == 1 for w in info["workers"].values())
        # the script's workers start like ours (toyengine.run.preload on worker and nanny);
        # a lambda, pickled by value: these workers cannot import this test module
        kernels = client.run(lambda: bool(
            "toyengine.core.newton_kernels" in sys.modules
            and sys.modules["toyengine.core.newton_kernels"].propose.signatures
            and sys.modules["toyengine.core.newton_kernels"].amplitude_step.signatures
            and sys.modules["toyengine.core.model1d_kernels"].nll_terms.signatures))
        assert list(kernels.values()) == [True, True]
        assert list(client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values()) \
            == [None, None]


def test_hand_started_cluster_gives_identical_results(reference: Path, cluster: HandCluster,
                                                      tmp_path: Path) -> None:
    store = tmp_path / "remote.zarr"
    r = _toyengine("run", STUDY, "--store", store, "--scheduler", cluster.address,
                   "--toys", TOYS, "--seed", SEED, "--quiet")
    assert r.returncode == 0, f"{r.stderr}\n{cluster.logs()}"
    a, b = open_results(reference), open_results(store)
    assert b.sizes["toy"] == int(TOYS)
    for name in COMPARED:  # bit-identical, NaN == NaN
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
    assert np.all(b["status"].values != 0)
    # the chunks really ran on the two hand-started worker processes
    from distributed import Client

    def cached_models() -> int:
        from toyengine.study import spec

        return len(spec._MODEL_CACHE)

    with Client(cluster.address, timeout="10s", set_as_default=False) as client:
        per_worker = client.run(cached_models)
    assert len(per_worker) == 2 and all(n > 0 for n in per_worker.values()), per_worker


def _done_fraction(store: Path) -> float | None:
    try:
        done = StoreInfo(store).done()
    except Exception:  # noqa: BLE001 - the store is being created / written concurrently
        return None
    return float(done.mean()) if done.size else None


# slow: a worker SIGKILLed mid-run is in the default suite on a LocalCluster
# (test_engine.py::test_worker_killed_mid_run); this is the same on hand-started processes
@pytest.mark.slow
def test_worker_killed_mid_study_completes(reference: Path, tmp_path: Path) -> None:
    store = tmp_path / "kill.zarr"
    with hand_cluster(tmp_path / "dask") as c:
        cmd = [sys.executable, "-m", "toyengine.cli", "run", str(STUDY), "--store", str(store),
               "--scheduler", c.address, "--toys", "150", "--seed", SEED,
               "--chunk-size", "3", "--quiet"]
        t_start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env())
        try:
            deadline = time.monotonic() + 60
            frac = None
            while time.monotonic() < deadline:
                frac = _done_fraction(store)
                if frac is not None and frac >= 0.1:
                    break
                assert proc.poll() is None, "the study ended before a worker was killed"
                time.sleep(0.05)
            assert frac is not None and frac >= 0.1, "the study did not start"
            print(f"kill after {time.monotonic()-t_start:.1f} s")
            name, pid, kind = c.workers()[1]
            assert kind == "group"
            os.killpg(pid, signal.SIGKILL)  # the nanny and its worker process, like a batch kill
            killed_at = _done_fraction(store)
            t_kill = time.monotonic()
            out, err = proc.communicate(timeout=120)
            print(f"killed at {killed_at}, run ended {time.monotonic()-t_kill:.1f} s later")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        scheduler_log = (c.directory / "scheduler.log").read_text()
        survivor = c.workers()[0][1]
        assert _alive(survivor) and not _alive(pid)
    assert killed_at is not None and killed_at < 1.0, "the kill was not mid-study"
    assert proc.returncode == 0, f"{out}\n{err}"
    assert "Remove worker" in scheduler_log and name in scheduler_log
    info = StoreInfo(store)
    assert info.done().all()
    ds = open_results(store)
    assert ds.sizes["toy"] == 150
    assert np.all(ds["status"].values != 0), "toys missing after the worker loss"
    # the toys are seeded per (variant, toy): the first 40 equal the reference run's
    ref = open_results(reference)
    for var in COMPARED:
        np.testing.assert_array_equal(ds[var].values[:, :40], ref[var].values, err_msg=var)


def _preloaded() -> list[str]:
    """On a worker: which of the modules the preload loads are imported (and the 1-D
    likelihood's and the Newton fitter's kernels compiled or loaded from numba's cache)."""
    mods = [m for m in ("toyengine.store.results", "toyengine.core.model1d_kernels",
                        "toyengine.core.newton_kernels") if m in sys.modules]
    if {"toyengine.core.model1d_kernels", "toyengine.core.newton_kernels"} <= set(mods):
        kernels = sys.modules["toyengine.core.model1d_kernels"]
        newton = sys.modules["toyengine.core.newton_kernels"]
        if (all(getattr(kernels, k).signatures for k in ("nll_terms", "bw_rows"))
                and newton.propose.signatures and newton.amplitude_step.signatures):
            mods.append("kernels")
    return mods


def test_our_local_cluster_workers_keep_glibc_malloc_tuning(monkeypatch) -> None:
    """distributed's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers by default, which
    turns off glibc's adaptive thresholds (1.2 million page faults per Z_c significance
    pair): the nannies of the embedded cluster start their workers without it."""
    from toyengine.run.client import _make_client

    # another test's nanny may have left it in this process's environment ("leaks
    # variables into the nanny process", distributed's own documentation)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    client, cluster = _make_client(1, None, None, 30.0)
    try:
        got = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert list(got.values()) == [None]
    finally:
        client.close()
        cluster.close()


def test_a_malloc_setting_of_the_user_reaches_the_workers(monkeypatch) -> None:
    """Only distributed's default is dropped: a value in the environment, or another one
    in the Dask config, is what the worker gets."""
    import types

    import dask

    from toyengine.run.client import _make_client
    from toyengine.run.preload import _keep_adaptive_malloc

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    client, cluster = _make_client(1, None, None, 30.0)
    try:
        got = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert list(got.values()) == ["1048576"]
    finally:
        client.close()
        cluster.close()
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    key = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
    for configured, kept in ((65536, False), (262144, True)):
        nanny = types.SimpleNamespace(pre_spawn_env={"MALLOC_TRIM_THRESHOLD_": str(configured),
                                                     "OMP_NUM_THREADS": "1"},
                                      env={"MALLOC_TRIM_THRESHOLD_": str(configured)})
        with dask.config.set({key: configured}):
            _keep_adaptive_malloc(nanny)
        assert ("MALLOC_TRIM_THRESHOLD_" in nanny.pre_spawn_env) is kept
        assert ("MALLOC_TRIM_THRESHOLD_" in nanny.env) is kept
        assert nanny.pre_spawn_env["OMP_NUM_THREADS"] == "1"


def test_our_local_cluster_workers_run_without_the_profiler() -> None:
    # the workers of our own cluster get its Dask settings (no statistical profiler, memory
    # checked every second) through their nannies; the client process keeps its own
    import dask.config

    from toyengine.run.client import LOCAL_WORKER_CONFIG, _make_client

    ours = {k: v[1] for k, v in LOCAL_WORKER_CONFIG.items()}
    defaults = {k: v[0] for k, v in LOCAL_WORKER_CONFIG.items()}  # distributed's
    # the settings at distributed's defaults whatever this process was started with
    with dask.config.set(defaults):
        client, cluster = _make_client(1, None, None, 30.0)
        try:
            seen = client.run(lambda: {k: dask.config.get(k) for k in LOCAL_WORKER_CONFIG})
            assert list(seen.values()) == [ours]
            assert {k: dask.config.get(k) for k in LOCAL_WORKER_CONFIG} == defaults
        finally:
            client.close()
            cluster.close()


def test_a_memory_monitor_setting_of_the_user_reaches_the_workers() -> None:
    # only distributed's defaults are replaced: a value the user set is what workers get
    import dask.config

    from toyengine.run.client import _make_client

    key = "distributed.worker.memory.monitor-interval"
    with dask.config.set({key: "200ms"}):
        client, cluster = _make_client(1, None, None, 30.0)
    try:
        assert list(client.run(lambda: dask.config.get(key)).values()) == ["200ms"]
    finally:
        client.close()
        cluster.close()


def test_our_local_cluster_workers_load_the_store_writer_and_kernels_at_start() -> None:
    """The embedded cluster's workers import the store writer and load the 1-D likelihood's
    and the Newton fitter's compiled kernels at start, before they join and before any study is sent
    (toyengine.run.preload): the first chunk does not pay for them."""
    from toyengine.run.client import _make_client

    client, cluster = _make_client(1, None, None, 30.0)
    try:
        # loaded before the worker joined: nothing left to wait for once the cluster is up
        got = next(iter(client.run(_preloaded).values()))
        assert got == ["toyengine.store.results", "toyengine.core.model1d_kernels",
                       "toyengine.core.newton_kernels", "kernels"]
        # nothing of a study: no model was built or shipped
        assert not next(iter(client.run(
            lambda: "toyengine.core.model1d" in sys.modules).values()))
    finally:
        client.close()
        cluster.close()
