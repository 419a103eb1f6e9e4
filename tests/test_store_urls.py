"""Result stores at fsspec URLs: an S3-compatible server on 127.0.0.1 (moto in server
mode, a real HTTP service), ``memory://`` and ``file://`` (issue 15)."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from toyengine import load_spec, open_results, run_study
from toyengine.cli import main

pytest.importorskip("s3fs", reason="needs the [s3] extra")
pytest.importorskip("moto", reason="needs moto[server] from the [test] extra")

ROOT = Path(__file__).parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
COMPARED = ["value", "error", "nll", "valid", "edm", "nfcn", "status", "n_events", "truth",
            "chunk_start", "chunk_stop", "chunk_done"]


def assert_same(a, b):
    for v in COMPARED:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)
    assert a.attrs == b.attrs


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a free 127.0.0.1 port with bucket ``toys``; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    mp = pytest.MonkeyPatch()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        mp.setenv(k, env[k])
    import s3fs

    deadline = time.monotonic() + 60
    while True:
        try:
            s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir("toys")
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)
    yield endpoint
    mp.undo()
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def spec():
    return load_spec(HELLO).with_overrides(toys=30)


@pytest.fixture(scope="module")
def local(tmp_path_factory, spec, client):
    path = tmp_path_factory.mktemp("local") / "ref.zarr"
    assert run_study(spec, path, client=client, chunk_size=10, progress=None).complete
    return open_results(path)


def test_s3_store_equals_local_and_commands_take_the_url(s3, spec, client, local, capsys,
                                                         monkeypatch):
    url = "s3://toys/hello.zarr"
    opts = {"endpoint_url": s3}
    report = run_study(spec, url, client=client, chunk_size=10, progress=None,
                       storage_options=opts)
    assert report.complete and report.write == "workers"
    assert_same(open_results(url, opts), local)

    assert main(["status", url, "--json", "--storage-option", f"endpoint_url={s3}"]) == 0
    assert json.loads(capsys.readouterr().out)["toys_done"] == 30
    # the endpoint from the standard environment instead of an option
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3)
    assert main(["summary", url, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["study_name"] == "hello"

    # a deleted object is found by status and recomputed by run, identical
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3, skip_instance_cache=True)
    fs.rm("toys/hello.zarr/status/c/0/1/0")
    assert main(["status", url, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert len(out["damaged_chunks"]) == 1 and "toys 10-19" in out["damaged_chunks"][0]
    report = run_study(spec, url, client=client, progress=None)
    assert report.chunks_run == 1 and report.complete
    assert_same(open_results(url), local)


def test_memory_and_file_urls(tmp_path, spec, client, local):
    report = run_study(spec, "memory://hello.zarr", client=client, chunk_size=10,
                       progress=None)
    assert report.complete and report.write == "client"  # other processes cannot see it
    assert_same(open_results("memory://hello.zarr"), local)
    url = f"file://{tmp_path}/hello.zarr"
    assert run_study(spec, url, client=client, chunk_size=10, progress=None).complete
    assert (tmp_path / "hello.zarr" / "zarr.json").exists()  # not a folder named "file:"
    assert_same(open_results(url), local)
