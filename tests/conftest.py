import os

# one BLAS thread: on a shared 2-core machine threaded BLAS makes small products 1000x slower
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import socket
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


@pytest.fixture(autouse=False)
def quiet_env(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    return os.environ
