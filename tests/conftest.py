import os

# one BLAS thread: on a shared 2-core machine threaded BLAS makes small products 1000x slower
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import io
import socket
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


@pytest.fixture
def data_dir() -> Path:
    return DATA


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def client():
    """A Dask client on one in-process worker thread, shared by the test session (tests
    that need worker processes, their own cluster or a hand-started scheduler make their
    own). Not the default client: xarray reads in the tests stay on dask's local
    scheduler, and a test's own client is not displaced."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(autouse=False)
def quiet_env(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    return os.environ


def _run_cli(*args: object) -> subprocess.CompletedProcess[str]:
    """``toyengine ARGS`` run in this process: exit code, stdout and stderr as a
    ``CompletedProcess`` (no interpreter start-up and re-import per call; tests about the
    process boundary itself, signals or ``python -m`` run a subprocess instead)."""
    from toyengine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse
            code = exc.code
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def cli():
    """Run the ``toyengine`` CLI in this process, see :func:`_run_cli`."""
    return _run_cli
