"""Issue 6: batch farms through dask-jobqueue — profiles, settings priority, job scripts
(``job_script()``, nothing submitted), the ``--dry-run`` CLI, and the whole
``toyengine submit`` path with a stand-in ``sbatch`` that runs the job script on this
machine (127.0.0.1) instead of a real SLURM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import dask
import numpy as np
import pytest

from toyengine.run.cluster import (
    ClusterError,
    farm_chunk_size,
    job_script,
    load_security,
    make_certificates,
    profile_config,
    resolve_settings,
    submit_study,
    with_lifetime,
)

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "cluster" / "profiles"
STUDY = ROOT / "studies" / "tcc" / "pulls.yaml"


def _settings(system: str, **kw: object):
    with profile_config(PROFILES / f"{system}.yaml"):
        return resolve_settings(system, **kw)


def _script(system: str, security: object = None, **kw: object) -> str:
    with profile_config(PROFILES / f"{system}.yaml"):
        return job_script(resolve_settings(system, **kw), security=security)


def test_slurm_profile_renders_job_script() -> None:
    s = _script("slurm")
    header, _, command = s.partition("-m distributed.cli.dask_worker")
    assert s.startswith("#!/usr/bin/env bash\n")
    for line in ("#SBATCH -J toyengine-worker", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --mem=8G", "#SBATCH -t 04:00:00"):
        assert line in header
    assert header.rstrip().endswith(sys.executable)  # the worker runs our interpreter
    words = command.split()
    assert words[0] == "tcp://<scheduler-address>"
    for flag, value in (("--nthreads", "1"), ("--nworkers", "4"), ("--memory-limit", "1.86GiB"),
                        ("--death-timeout", "120"), ("--local-directory", "${TMPDIR:-/tmp}"),
                        ("--lifetime", "225m"), ("--lifetime-stagger", "10m")):
        assert words[words.index(flag) + 1] == value, flag
    assert "--nanny" in words and "--lifetime-restart" not in words
    # toyengine's start-up on the worker and on its nanny (toyengine.run.preload)
    assert words[words.index("--preload") + 1] == "toyengine.run.preload"
    assert words[words.index("--preload-nanny") + 1] == "toyengine.run.preload"


def test_preload_is_added_once_and_other_preloads_stay() -> None:
    from toyengine.run.cluster_settings import with_preload

    mine = ["--preload", "mysite.setup", "--preload-nanny=toyengine.run.preload"]
    out = with_preload(mine)
    assert out == [*mine, "--preload", "toyengine.run.preload"]
    assert with_preload(out) == out


def test_htcondor_profile_renders_submit_description() -> None:
    s = _script("htcondor")
    assert s.startswith("#!/usr/bin/env condor_submit\n")
    for line in ("MY.DaskWorkerCores = 1", "MY.DaskWorkerMemory = 2000000000",
                 "MY.DaskWorkerDisk = 1000000000", "RequestCpus = MY.DaskWorkerCores",
                 '+JobFlavour = "workday"', "Executable = /bin/sh", "Queue"):
        assert line in s.splitlines(), line
    args = next(line for line in s.splitlines() if line.startswith("Arguments = "))
    assert f"{sys.executable} -m distributed.cli.dask_worker tcp://<scheduler-address>" in args
    words = args.rstrip("'\"").split()
    for flag, value in (("--nthreads", "1"), ("--memory-limit", "1.86GiB"),
                        ("--local-directory", "$_CONDOR_SCRATCH_DIR"),
                        ("--lifetime", "460m"), ("--lifetime-stagger", "10m")):
        assert words[words.index(flag) + 1] == value, flag
    assert "--nworkers" not in words and "--lifetime-restart" not in words


def test_options_override_profile_and_restart_flag() -> None:
    s = _script("slurm", cores=8, memory="16GB", walltime="02:00:00", queue="short",
                lifetime="100m", lifetime_stagger="5m", lifetime_restart=True)
    for line in ("#SBATCH --cpus-per-task=8", "#SBATCH --mem=15G", "#SBATCH -t 02:00:00",
                 "#SBATCH -p short"):
        assert line in s, line
    words = s.split()
    assert words[words.index("--nworkers") + 1] == "4"  # profile processes kept
    assert words[words.index("--lifetime") + 1] == "100m"
    assert words[words.index("--lifetime-stagger") + 1] == "5m"
    assert words.count("--lifetime") == 1 and "--lifetime-restart" in words


def test_tls_job_script_passes_worker_certificates(tmp_path: Path) -> None:
    sec = load_security(make_certificates(tmp_path / "tls"))
    s = _script("slurm", security=sec)
    words = s.split()
    assert "tls://<scheduler-address>" in words
    for flag, role in (("--tls-ca-file", "ca"), ("--tls-cert", "worker"),
                       ("--tls-key", "worker-key")):
        assert words[words.index(flag) + 1] == str((tmp_path / "tls" / f"{role}.pem").resolve())


def test_settings_priority_defaults_config_profile_kwargs(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    base = {"cores": 2, "memory": "4GB"}
    assert resolve_settings("slurm", **base).jobs == 2  # toyengine/run/toyengine.yaml
    with dask.config.set({"toyengine.cluster.jobs": 5, "toyengine.cluster.adapt": False}):
        s = resolve_settings("slurm", **base)
        assert (s.jobs, s.adapt) == (5, False)  # user Dask config beats the defaults
        with profile_config(PROFILES / "slurm.yaml"):
            s = resolve_settings("slurm")
            assert (s.jobs, s.adapt, s.task_seconds) == (10, False, 120.0)  # profile
            assert resolve_settings("slurm", jobs=3).jobs == 3  # keyword / CLI wins
        assert resolve_settings("slurm", **base).jobs == 5  # profile undone on exit
    # one thread per worker process unless the profile says otherwise
    assert resolve_settings("slurm", cores=6, memory="6GB").job_kwargs["processes"] == 6
    # the profile may also be named in the Dask config
    with dask.config.set({"toyengine.cluster.profile": str(PROFILES / "htcondor.yaml")}):
        with profile_config():
            assert resolve_settings("htcondor").jobs == 40


def test_defaults_file_loaded_by_toyengine_cluster_not_by_import_toyengine() -> None:
    code = ("import dask, toyengine; assert dask.config.get('toyengine', None) is None; "
            "import toyengine.run.cluster as c; "
            "assert dask.config.get('toyengine.cluster.jobs') == 2; "
            "assert set(dask.config.get('toyengine.cluster')) == set(c.SETTING_KEYS)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"lifetime": "3h45m"}, "one unit"),
    ({"walltime": "01:00:00", "lifetime": "55m", "lifetime_stagger": "10m"}, "wall time"),
    ({"jobs": 0}, "jobs must be"),
    ({"gpus": 1}, "unknown option"),
])
def test_bad_settings_are_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ClusterError, match=match):
        _settings("slurm", **kwargs)


def test_bad_profiles_are_errors(tmp_path: Path) -> None:
    (tmp_path / "typo.yaml").write_text("jobqueue:\n  slurm:\n    wall-time: '01:00:00'\n")
    (tmp_path / "key.yaml").write_text("toyengine:\n  cluster:\n    job: 3\n")
    with pytest.raises(ClusterError, match="wall-time"):
        with profile_config(tmp_path / "typo.yaml"):
            pass
    with pytest.raises(ClusterError, match="job"):
        with profile_config(tmp_path / "key.yaml"):
            pass
    with pytest.raises(ClusterError, match="not found"):
        with profile_config(tmp_path / "nope.yaml"):
            pass
    with pytest.raises(ClusterError, match="cores and memory"):
        resolve_settings("htcondor")


def test_with_lifetime_replaces_flags() -> None:
    args = ["--foo", "1", "--lifetime", "10m", "--lifetime-stagger=1m", "--lifetime-restart"]
    assert with_lifetime(args, "20m", None, False) == [
        "--foo", "1", "--lifetime", "20m", "--lifetime-stagger=1m"]
    assert with_lifetime(args, None, "5m", None) == [
        "--foo", "1", "--lifetime", "10m", "--lifetime-stagger", "5m", "--lifetime-restart"]
    assert with_lifetime([], None, "2m", True) == ["--lifetime-stagger", "2m",
                                                   "--lifetime-restart"]


def test_farm_chunk_size() -> None:
    # 60 s tasks of 0.5 s toys = 120 toys, when there is enough work for 4 per worker
    assert farm_chunk_size(0.5, 100_000, 1, 40, 60) == 120
    # small study: 4 tasks per worker wins (1000 / (4 * 50) = 5)
    assert farm_chunk_size(0.5, 1000, 1, 50, 60) == 5
    # the chunk-count cap: 1e7 fast toys (100 per 0.1 s task) stay within 20000 chunks
    assert farm_chunk_size(0.001, 10_000_000, 1, 10, 0.1, max_chunks=20000) == 500
    # never more than the toys of one variant, never less than 1
    assert farm_chunk_size(1e-9, 10, 8, 1, 60) == 10  # 80 toys / 4 = 20 > 10
    assert farm_chunk_size(100.0, 10, 1, 1, 60) == 1


def _fake_slurm(bin_dir: Path, state: Path) -> dict[str, str]:
    """``sbatch`` that runs the job script here in its own session, ``scancel`` that
    stops that session; both log their calls. Returns the environment to use them."""
    bin_dir.mkdir()
    state.mkdir()
    (bin_dir / "sbatch").write_text(f"""#!/usr/bin/env bash
n=$(ls {state} | grep -c '^job-.*\\.sh$' || true)
cp "$1" "{state}/job-$n.sh"
echo "sbatch $*" >> "{state}/calls"
setsid bash "{state}/job-$n.sh" </dev/null >"{state}/job-$n.log" 2>&1 &
echo "$!" >> "{state}/pids"
echo "Submitted batch job $!"
""")
    (bin_dir / "scancel").write_text(f"""#!/usr/bin/env bash
echo "scancel $*" >> "{state}/calls"
for id in "$@"; do kill -TERM -- "-$id" 2>/dev/null || true; done
""")
    for f in ("sbatch", "scancel"):
        (bin_dir / f).chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}" \
                  f"{env.get('PATH', '')}"
    return env


def _kill_jobs(state: Path) -> list[int]:
    pids = [int(p) for p in (state / "pids").read_text().split()] \
        if (state / "pids").exists() else []
    for pid in pids:  # only the sessions our fake sbatch started
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return pids


@pytest.mark.parametrize("tls", [True, False])
def test_dry_run_prints_job_script_and_submits_nothing(tmp_path: Path, tls: bool) -> None:
    """TLS by default (certificates made for the submission, gone afterwards), plain TCP
    only with --no-tls."""
    env = _fake_slurm(tmp_path / "bin", tmp_path / "slurm")
    r = subprocess.run([sys.executable, "-m", "toyengine.cli", "submit", str(STUDY), "--store",
                        str(tmp_path / "s.zarr"), "--cluster", "slurm", "--profile",
                        str(PROFILES / "slurm.yaml"), "--dry-run", "--jobs", "3",
                        "--lifetime", "200m", *([] if tls else ["--no-tls"])],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/usr/bin/env bash\n\n#SBATCH")  # only the script on stdout
    assert "--lifetime 200m --lifetime-stagger 10m" in r.stdout
    assert "3 job(s)" in r.stderr and "12 Dask worker(s)" in r.stderr
    words = r.stdout.split()
    if tls:
        assert "tls://<scheduler-address>" in words and "tcp://<scheduler-address>" not in words
        key = Path(words[words.index("--tls-key") + 1])
        assert key.name == "worker-key.pem" and key.parent.parent == tmp_path
        assert key.parent.name.startswith(".toyengine-tls-")
        assert "certificates made for the submission" in r.stderr
    else:
        assert "tcp://<scheduler-address>" in words and "--tls-key" not in words
        assert "no TLS (--no-tls)" in r.stderr
    assert not list(tmp_path.glob(".toyengine-tls-*"))  # temporary certificates removed
    assert not (tmp_path / "slurm" / "calls").exists()  # sbatch never called
    assert not (tmp_path / "s.zarr").exists()


def _submit_no_worker(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``toyengine submit`` with a stand-in sbatch that accepts the jobs but never runs
    them: the scheduler starts, nobody joins, and the error names its address."""
    env = _fake_slurm(tmp_path / "bin", tmp_path / "slurm")
    (tmp_path / "bin" / "sbatch").write_text(
        f"#!/usr/bin/env bash\necho \"sbatch $*\" >> {tmp_path / 'slurm' / 'calls'}\n"
        "echo 'Submitted batch job 4242'\n")
    return subprocess.run(
        [sys.executable, "-m", "toyengine.cli", "submit", str(STUDY), "--store",
         str(tmp_path / "s.zarr"), "--cluster", "slurm", "--jobs", "1", "--cores", "1",
         "--memory", "1GB", "--scheduler-host", "127.0.0.1", "--dashboard-address",
         "127.0.0.1:0", "--wait-timeout", "2", "--quiet", *args],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)


@pytest.mark.parametrize(("args", "scheme"), [((), "tls"), (("--no-tls",), "tcp")])
def test_submit_uses_tls_unless_no_tls(tmp_path: Path, args: tuple[str, ...],
                                       scheme: str) -> None:
    """No TLS setting anywhere: the scheduler of ``toyengine submit`` listens on tls://
    (with certificates made for this submission, removed at the end); --no-tls: tcp://."""
    r = _submit_no_worker(tmp_path, *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "no worker joined within 2.0 s" in lines[0]
    assert f"reach {scheme}://127.0.0.1:" in lines[0], lines[0]
    assert (tmp_path / "slurm" / "calls").read_text().startswith("sbatch ")
    assert not list(tmp_path.glob(".toyengine-tls-*"))
    assert not (tmp_path / "s.zarr").exists()


def test_submit_asks_for_yes_before_submitting_a_huge_study(tmp_path: Path) -> None:
    """The size check of ``toyengine run`` runs before any job is submitted; --yes gets
    past it (to the submission, here one that never starts a worker)."""
    for sub in ("ask", "yes"):
        (tmp_path / sub).mkdir()
    r = _submit_no_worker(tmp_path / "ask", "--toys", "100000000")
    assert r.returncode == 2, r.stderr
    assert "add --yes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ask" / "slurm" / "calls").exists()  # nothing submitted
    r = _submit_no_worker(tmp_path / "yes", "--toys", "100000000", "--yes")
    assert r.returncode == 2, r.stderr
    assert "no worker joined" in r.stderr and "add --yes" not in r.stderr
    assert (tmp_path / "yes" / "slurm" / "calls").read_text().startswith("sbatch ")
    assert not list(tmp_path.rglob("s.zarr"))


def test_no_tls_and_tls_config_contradict() -> None:
    with pytest.raises(ClusterError, match="contradict"):
        resolve_settings("slurm", cores=1, memory="1GB", tls=False, tls_config="x.yaml")
    # --no-tls beats a tls-config from the configuration or a profile
    with dask.config.set({"toyengine.cluster.tls-config": "site.yaml"}):
        s = resolve_settings("slurm", cores=1, memory="1GB", tls=False)
        assert (s.tls, s.tls_config) == (False, None)
        assert resolve_settings("slurm", cores=1, memory="1GB").tls_config == "site.yaml"


def test_submit_through_jobqueue_runs_study(tmp_path: Path) -> None:
    """The full ``toyengine submit`` path: dask-jobqueue writes and "submits" two job
    scripts (run here by the stand-in sbatch), their workers join the scheduler of the
    submitting process, the study completes, and the jobs are cancelled at the end."""
    env = _fake_slurm(tmp_path / "bin", tmp_path / "slurm")
    store = tmp_path / "farm.zarr"
    try:
        r = subprocess.run(
            [sys.executable, "-m", "toyengine.cli", "submit", str(STUDY), "--store", str(store),
             "--cluster", "slurm", "--jobs", "2", "--cores", "1", "--memory", "1GB",
             "--walltime", "00:30:00", "--lifetime", "20m", "--scheduler-host", "127.0.0.1",
             "--dashboard-address", "127.0.0.1:0", "--wait-timeout", "60",
             "--toys", "24", "--seed", "11", "--quiet"],
            capture_output=True, text=True, timeout=150, env=env, cwd=tmp_path)
        logs = "\n".join(f.read_text()[-1500:] for f in (tmp_path / "slurm").glob("job-*.log"))
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs}"
    finally:
        pids = _kill_jobs(tmp_path / "slurm")
    calls = (tmp_path / "slurm" / "calls").read_text().splitlines()
    assert sum(c.startswith("sbatch ") for c in calls) == 2
    assert {c.split()[1] for c in calls if c.startswith("scancel")} == set(map(str, pids))
    script = (tmp_path / "slurm" / "job-0.sh").read_text()
    assert "#SBATCH -t 00:30:00" in script and "--lifetime 20m" in script
    # no TLS setting given: TLS with certificates made for this submission, in the
    # current directory (seen by the "batch nodes"), removed when the submission ended
    words = script.split()
    assert "tls://127.0.0.1:" in script and "tcp://" not in script
    assert Path(words[words.index("--tls-key") + 1]).parent.parent == tmp_path
    assert not list(tmp_path.glob(".toyengine-tls-*"))
    # the results equal toyengine's pure chunk function evaluated here, without Dask
    from toyengine.store import open_results
    from toyengine.study.plan import Chunk, Plan
    from toyengine.study.recipe import run_chunk
    from toyengine.study.spec import load_spec

    spec = load_spec(STUDY).with_overrides(toys=24, seed=11)
    direct = run_chunk(Plan.of(spec), Chunk(0, 0, 0, 24)).arrays
    ds = open_results(store)
    for name in ("value", "error", "nll", "valid"):
        np.testing.assert_array_equal(ds[name].values[0], direct[name], err_msg=name)


def test_submit_without_batch_system_is_a_clear_error(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from toyengine.study.spec import load_spec

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
    with pytest.raises(ClusterError, match="sbatch"):
        submit_study(load_spec(STUDY), tmp_path / "x.zarr", system="slurm", cores=1,
                     memory="1GB", progress=None)


def test_failing_submit_command_is_reported(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path / "bin", tmp_path / "slurm")
    (tmp_path / "bin" / "sbatch").write_text(
        "#!/usr/bin/env bash\necho 'sbatch: error: invalid partition specified: nope' >&2\n"
        "exit 1\n")
    r = subprocess.run([sys.executable, "-m", "toyengine.cli", "submit", str(STUDY), "--store",
                        str(tmp_path / "s.zarr"), "--cluster", "slurm", "--cores", "1",
                        "--memory", "1GB", "--queue", "nope", "--scheduler-host", "127.0.0.1",
                        "--dashboard-address", "127.0.0.1:0", "--quiet"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 2
    assert "submitting the 2 worker job(s) failed" in r.stderr
    assert "invalid partition specified: nope" in r.stderr and "sbatch" in r.stderr
    assert not (tmp_path / "s.zarr").exists()
