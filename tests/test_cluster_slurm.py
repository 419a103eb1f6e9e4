"""``toyengine submit --cluster slurm`` against a real single-node SLURM on 127.0.0.1.

The session fixture starts munged, slurmctld and slurmd with ``cluster/slurm-local.sh``
(Debian's ``slurm-wlm`` and ``munge``), each in its own directory, ports and munge key,
and stops them at the end. Every campaign is compared bit for bit with one local run of
the same study (same seed and chunk size): a plain 2-job submission over TLS, worker
``--lifetime`` retirement, a pre-empted (``scancel``) job and one killed by its wall time,
a failing ``sbatch``, a queue that starts nothing, and the client killed mid-campaign
(SIGTERM, SIGHUP, SIGKILL) and the campaign resumed. Each
test checks that no job of it is left in ``squeue``.

Without the SLURM and MUNGE executables the tests skip with one reason; with
``TOYENGINE_REQUIRE_SLURM=1`` (``.ci/run``) that is a failure instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from toyengine.store import StoreInfo

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "cluster" / "slurm-local.sh"
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
# 60 chunks of 0.15-0.5 s (0.7-2.5 ms per toy, unloaded to loaded machine): 8-30 s of work
# for one worker, which a 5 s worker lifetime cannot outlast
TOYS, SEED, CHUNK = 12000, 5, 200
COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
COMPARED = ["value", "error", "nll", "valid", "edm", "nfcn", "status", "gof", "n_events",
            "truth", "reference", "chunk_variant", "chunk_start", "chunk_stop", "toy"]


@dataclass(frozen=True)
class Slurm:
    conf: Path
    directory: Path

    def env(self, name: str, **extra: str) -> dict[str, str]:
        """Environment of a ``toyengine submit`` whose jobs are called ``name``."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
        env["DASK_JOBQUEUE__SLURM__NAME"] = name
        env["DASK_JOBQUEUE__SLURM__WORKER_EXTRA_ARGS"] = '["--host", "127.0.0.1"]'  # loopback
        # an ended job is replaced 3 s after its workers left (default 15 s)
        env["DASK_DISTRIBUTED__DEPLOY__LOST_WORKER_TIMEOUT"] = "3s"
        env.update(extra)
        return env

    def queue(self, name: str | None = None) -> list[str]:
        """Job ids in ``squeue`` (pending, running, completing), of jobs ``name`` if given."""
        args = ["squeue", "-h", "-o", "%i"] + (["-n", name] if name else [])
        r = subprocess.run(args, capture_output=True, text=True, timeout=30,
                           env={**os.environ, "SLURM_CONF": str(self.conf)})
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    def ended(self, name: str) -> dict[str, dict[str, str]]:
        """Finished jobs called ``name``: job id -> fields of the job completion log."""
        log = self.directory / "jobcomp.log"
        out = {}
        for line in log.read_text().splitlines() if log.exists() else []:
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if fields.get("Name") == name:
                out[fields["JobId"]] = fields
        return out

    def wait_empty(self, name: str, seconds: float) -> list[str]:
        t0 = time.monotonic()
        while (left := self.queue(name)) and time.monotonic() - t0 < seconds:
            time.sleep(0.5)
        return left


def _missing() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]


def _pid_files(d: Path) -> list[int]:
    return [int(p.read_text()) for p in d.glob("*.pid") if p.read_text().strip().isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    missing = _missing()
    if missing:
        reason = (f"no SLURM here ({', '.join(missing)} not found): apt-get install "
                  "--no-install-recommends slurm-wlm munge")
        if os.environ.get("TOYENGINE_REQUIRE_SLURM") == "1":
            pytest.fail(f"{reason} (TOYENGINE_REQUIRE_SLURM=1: the SLURM tests must run)")
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("slurm")
    r = subprocess.run([str(SCRIPT), "start", "-d", str(d), "--cpus", "2", "--timeout", "60"],
                       capture_output=True, text=True, timeout=120)
    pids = _pid_files(d)
    try:
        logs = "\n".join(f.read_text()[-1500:] for f in (d / "log").glob("*.log"))
        assert r.returncode == 0, f"{r.stderr}\n{logs}"
        last = r.stdout.strip().splitlines()[-1]
        assert last == f"export SLURM_CONF={d / 'slurm.conf'}"
        assert len(pids) == 3 and all(_alive(p) for p in pids)  # munged slurmctld slurmd
        yield Slurm(d / "slurm.conf", d)
    finally:
        subprocess.run([str(SCRIPT), "stop", "-d", str(d)], capture_output=True, timeout=120)
        for pid in pids:  # the daemons the script started, by pid
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, client) -> Path:
    """The study run locally (the session's in-process Dask worker)."""
    from toyengine.run.runner import run_study
    from toyengine.study.spec import load_spec

    path = tmp_path_factory.mktemp("ref") / "local.zarr"
    spec = load_spec(HELLO).with_overrides(toys=TOYS, seed=SEED)
    assert run_study(spec, path, client=client, chunk_size=CHUNK, progress=None).complete
    return path


def assert_same_store(a: Path, b: Path) -> None:
    da, db = xr.open_zarr(a, consolidated=False), xr.open_zarr(b, consolidated=False)
    assert dict(da.sizes) == dict(db.sizes)
    for v in COMPARED:  # bit-identical, NaN == NaN
        np.testing.assert_array_equal(da[v].values, db[v].values, err_msg=v)
    assert da.attrs == db.attrs
    ia, ib = StoreInfo(a), StoreInfo(b)
    assert ia.done().all() and ib.done().all()
    assert ia.state == ib.state


def _submit_args(store: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "toyengine.cli", "submit", str(HELLO), "--store", str(store),
            "--cluster", "slurm", "--cores", "1", "--processes", "1", "--memory", "1GB",
            "--scheduler-host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0",
            "--toys", str(TOYS), "--seed", str(SEED), "--chunk-size", str(CHUNK), *extra]


def _submit(slurm: Slurm, name: str, store: Path, *extra: str, timeout: float = 180,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(_submit_args(store, *extra), capture_output=True, text=True,
                          timeout=timeout, env=env or slurm.env(name), cwd=store.parent)


def _job_logs(d: Path) -> str:
    return "\n".join(f"--- {f.name}\n{f.read_text()[-1200:]}" for f in d.glob("slurm-*.out"))


def _done(store: Path) -> int:
    try:
        return int(StoreInfo(store).done().sum())
    except Exception:  # noqa: BLE001 - not created yet / being written
        return 0


def _job_processes(job_id: str) -> list[int]:
    """Pids of the processes of SLURM job ``job_id`` (their environment says so)."""
    out = []
    for e in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if f"SLURM_JOB_ID={job_id}".encode() in e.read_bytes().split(b"\0"):
                out.append(int(e.parent.name))
    return out


def test_submit_two_jobs_over_tls(slurm: Slurm, reference: Path, tmp_path: Path) -> None:
    r = _submit(slurm, "te-plain", tmp_path / "farm.zarr", "--jobs", "2", "--walltime",
                "00:10:00", "--wait-timeout", "120")
    assert r.returncode == 0, f"{r.stderr}\n{_job_logs(tmp_path)}"
    assert_same_store(reference, tmp_path / "farm.zarr")
    assert "scheduler tls://127.0.0.1:" in r.stderr
    ended = slurm.ended("te-plain")
    # two jobs, cancelled by toyengine at the end (not replaced: none ended early)
    assert sorted(j["JobState"] for j in ended.values()) == ["CANCELLED", "CANCELLED"], ended
    assert "replacement" not in r.stderr
    logs = "".join(f.read_text() for f in tmp_path.glob("slurm-*.out"))
    assert len(re.findall(r"Registered to:\s+tls://127\.0\.0\.1:", logs)) == 2, logs  # TLS
    assert len(re.findall(r"Start worker at:\s+tls://127\.0\.0\.1:", logs)) == 2, logs
    assert slurm.wait_empty("te-plain", 30) == []
    assert not list(tmp_path.glob(".toyengine-tls-*"))


def test_lifetime_retires_workers_and_jobs_are_replaced(slurm: Slurm, reference: Path,
                                                       tmp_path: Path) -> None:
    """--lifetime 5s (wall time 1 min): the workers retire gracefully long before the wall
    time, their jobs end (cancelled by toyengine once their workers have left: a retired
    worker's nanny lingers) and fresh jobs replace them until the study is done. One job
    at a time, so that the study (at least 8 s of CPU) surely outlasts the first worker."""
    r = _submit(slurm, "te-life", tmp_path / "farm.zarr", "--jobs", "1", "--walltime",
                "00:01:00", "--lifetime", "5s", "--wait-timeout", "120")
    assert r.returncode == 0, f"{r.stderr}\n{_job_logs(tmp_path)}"
    assert_same_store(reference, tmp_path / "farm.zarr")
    logs = "".join(f.read_text() for f in tmp_path.glob("slurm-*.out"))
    assert "Reason: worker-lifetime-reached" in logs  # retired, not killed
    states = [j["JobState"] for j in slurm.ended("te-life").values()]
    assert "TIMEOUT" not in states and "DUE TO TIME LIMIT" not in logs, states
    assert len(states) >= 2 and r.stderr.count("submitting a replacement") >= 1, states
    assert slurm.wait_empty("te-life", 30) == []


# slow: SLURM's wall time has a one-minute granularity, so this test waits ≈ 80 s; the
# default suite keeps the replacement of ended jobs (test_lifetime_retires_workers_and_jobs_
# are_replaced) and the cancellation paths (test_client_killed_leaves_no_jobs_...)
@pytest.mark.slow
def test_preempted_and_wall_time_killed_jobs_are_replaced(slurm: Slurm, reference: Path,
                                                         tmp_path: Path) -> None:
    """Two jobs with a 1 min wall time: job A is cancelled (pre-emption) once chunks are
    being written; job B's worker is stopped (SIGSTOP) at the same moment, holding the
    chunk it runs, so the study cannot end before SLURM kills B at its wall time (no CPU
    spent waiting for it). Both are replaced; B's chunk is re-run; the store equals the
    local one and nothing is left in the queue."""
    store = tmp_path / "farm.zarr"
    name = "te-preempt"
    proc = subprocess.Popen(_submit_args(store, "--jobs", "2", "--walltime", "00:01:00",
                                         "--wait-timeout", "120"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=slurm.env(name), cwd=tmp_path)
    try:
        t0 = time.monotonic()
        while _done(store) < 1 and proc.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.2)
        jobs = sorted(slurm.queue(name), key=int)
        assert proc.poll() is None and len(jobs) == 2, jobs
        a, b = jobs
        stopped = _job_processes(b)
        assert stopped
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        subprocess.run(["scancel", a], check=True, timeout=30, env=slurm.env(name))
        _out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"{err}\n{_job_logs(tmp_path)}"
    ended = slurm.ended(name)
    assert ended[a]["JobState"] == "CANCELLED" and ended[b]["JobState"] == "TIMEOUT", ended
    assert ended[b]["TimeLimit"] == "1"
    assert "DUE TO TIME LIMIT" in (tmp_path / f"slurm-{b}.out").read_text()
    # A's replacement ran the rest, B's chunk included (B's own replacement may come
    # after the study ended: it was not needed)
    assert len(ended) >= 3 and err.count("submitting a replacement") >= 1, err
    assert_same_store(reference, store)
    assert slurm.wait_empty(name, 30) == []


def _tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("extra", "expected"), [
    (("--queue", "nope"), "sbatch: error: invalid partition specified: nope"),
    (("--memory", "100TB"), "sbatch: error: Memory specification can not be satisfied"),
])
def test_failing_sbatch_is_one_line_and_leaves_the_store(slurm: Slurm, reference: Path,
                                                         tmp_path: Path, extra: tuple,
                                                         expected: str) -> None:
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    before = _tree_digest(store)
    name = f"te-fail-{extra[0][2:]}"
    r = _submit(slurm, name, store, "--jobs", "2", *extra, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("toyengine: submitting the 2 worker job(s) failed: ")
    assert expected in lines[0], lines[0]
    assert _tree_digest(store) == before
    assert slurm.queue(name) == []  # nothing queued; SLURM logs the refused jobs FAILED
    assert {j["JobState"] for j in slurm.ended(name).values()} <= {"FAILED"}


def test_queue_that_starts_nothing_times_out(slurm: Slurm, tmp_path: Path) -> None:
    """Both CPUs taken by another job: ours stay pending; --wait-timeout gives one line
    and exit code 2 (README: a cluster set-up to fix), and our pending jobs are cancelled."""
    env = slurm.env("te-wait")
    r = subprocess.run(["sbatch", "-J", "te-blocker", "-c", "2", "-o", "/dev/null",
                        "--wrap", "sleep 300"], capture_output=True, text=True, timeout=30,
                       env=env)
    assert r.returncode == 0, r.stderr
    blocker = r.stdout.split()[-1]
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:  # the blocker runs: nothing else can
            state = subprocess.run(["squeue", "-h", "-j", blocker, "-o", "%T"], env=env,
                                   capture_output=True, text=True, timeout=30).stdout.strip()
            if state == "RUNNING":
                break
            time.sleep(0.2)
        r = _submit(slurm, "te-wait", tmp_path / "s.zarr", "--jobs", "2", "--wait-timeout",
                    "8", "--quiet", timeout=120)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "no worker joined within 8.0 s" in lines[0], r.stderr
        assert slurm.wait_empty("te-wait", 30) == []  # cancelled, never started
        assert sorted(j["JobState"] for j in slurm.ended("te-wait").values()) == \
            ["CANCELLED", "CANCELLED"]
        assert not (tmp_path / "s.zarr").exists()
    finally:
        subprocess.run(["scancel", blocker], timeout=30, env=env)


@pytest.mark.parametrize("sig", [
    # SIGTERM takes the same path as SIGHUP (jobs cancelled, exit 130): slow
    pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGHUP, signal.SIGKILL],
    ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_client_killed_leaves_no_jobs_and_rerun_resumes(slurm: Slurm, reference: Path,
                                                        tmp_path: Path, sig: int) -> None:
    """SIGTERM / SIGHUP: toyengine cancels its jobs and exits 130. SIGKILL: nothing can
    cancel them, so each worker ends itself (and its job) after ``death-timeout``
    seconds without a scheduler (10 s here). Either way ``squeue`` empties and the same
    command resumes the store."""
    store = tmp_path / "farm.zarr"
    name = f"te-kill-{sig.name}"
    env = slurm.env(name, DASK_JOBQUEUE__SLURM__DEATH_TIMEOUT="10")
    proc = subprocess.Popen(_submit_args(store, "--jobs", "2", "--walltime", "00:10:00",
                                         "--wait-timeout", "120", "--quiet"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        t0 = time.monotonic()
        while _done(store) < 3 and proc.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        assert len(slurm.queue(name)) == 2
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        # 10 s death timeout + the worker's reconnection attempts + KillWait margin
        assert slurm.wait_empty(name, 45) == []
        assert "CANCELLED" not in {j["JobState"] for j in slurm.ended(name).values()}
    else:
        assert proc.returncode == 130, err
        assert "interrupted" in err.strip().splitlines()[-1]
        assert slurm.wait_empty(name, 20) == []  # cancelled by the client, not orphaned
        assert sorted(j["JobState"] for j in slurm.ended(name).values()) == \
            ["CANCELLED"] * 2
    partial = _done(store)
    assert 0 < partial < TOYS // CHUNK
    r = _submit(slurm, name, store, "--jobs", "2", "--walltime", "00:10:00",
                "--wait-timeout", "120", env=env)
    assert r.returncode == 0, f"{r.stderr}\n{_job_logs(tmp_path)}"
    # resumed, not restarted
    assert f"resuming: {partial}/{TOYS // CHUNK} chunks already done" in r.stderr, r.stderr
    assert_same_store(reference, store)
    assert slurm.wait_empty(name, 30) == []
