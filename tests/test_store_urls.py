"""Result stores at fsspec URLs: an S3-compatible server on 127.0.0.1 (moto in server
mode, a real HTTP service), ``memory://`` and ``file://`` (issue 15)."""

import contextlib
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
CLI_ARGS = [sys.executable, "-m", "toyengine.cli"]
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
    import s3fs

    calls: list[tuple[str, str]] = []
    call_s3 = s3fs.S3FileSystem._call_s3

    async def counted(self, method, *args, **kwargs):
        calls.append((method, kwargs.get("Key", "")))
        return await call_s3(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    assert main(["summary", url, "--format", "json"]) == 0
    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", call_s3)
    assert json.loads(capsys.readouterr().out)["study_name"] == "hello"
    # one GET per object read: no HEAD for its size first, and the status flags (which
    # every summary section selects toys by) read once per chunk, not once per section:
    # every per-toy object once
    objects = [k for m, k in calls if m == "get_object" and "/c/" in k]
    assert not [k for m, k in calls if m == "head_object" and "/c/" in k]
    assert sorted(k for k in objects if k.startswith("hello.zarr/status/c/")) == [
        f"hello.zarr/status/c/0/{i}/0" for i in range(3)]
    # (the small coordinate and chunk-table objects, read a few times a store, aside)
    per_toy = [k for k in objects if k.split("/c/")[1].count("/") >= 2]
    assert len(per_toy) == len(set(per_toy)) > 0

    # a deleted object is found by status and recomputed by run, identical
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


class _Proxy:
    """A TCP proxy on a free 127.0.0.1 port to ``target``: :meth:`cut` drops every
    connection and refuses new ones (the endpoint is gone), :meth:`restore` lets them
    through again; the S3 server behind it keeps its state."""

    def __init__(self, target: int):
        import threading

        self.target = target
        self.up = threading.Event()
        self.up.set()
        self.lock = threading.Lock()
        self.conns: list[socket.socket] = []
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while not self.closed:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            if not self.up.is_set():
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                c.close()  # a reset, as from a port where nothing listens
                continue
            try:
                t = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, t]
            for a, b in ((c, t), (t, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()

    def cut(self) -> None:
        self.up.clear()
        with self.lock:
            for s in self.conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
            self.conns.clear()

    def restore(self) -> None:
        self.up.set()

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.srv.close()


def test_s3_endpoint_gone_mid_run_then_back(s3, client, tmp_path):
    """The S3 endpoint goes away while the workers write (a proxy in front of the moto
    server is cut once a few chunks are done): the run ends with one line naming the store
    and the cause, exit code 1, no traceback (the CLI's own worker processes included);
    with the endpoint back, the same command completes the store, bit-identical to an
    uninterrupted run."""
    import s3fs

    from toyengine.store.results import DONE_PREFIX

    TOYS = 12  # one per chunk: about a second each through moto on a loaded machine
    port = int(s3.rsplit(":", 1)[1])
    proxy = _Proxy(port)
    try:
        url, opt = "s3://toys/outage.zarr", f"endpoint_url=http://127.0.0.1:{proxy.port}"
        argv = [*CLI_ARGS, "run", str(HELLO), "--toys", str(TOYS), "--chunk-size", "1",
                "--store", url, "--storage-option", opt, "--workers", "1", "--quiet"]
        # botocore's own retries (5 attempts with back-off by default) make the run stop
        # half a minute after the cut; 2 attempts are enough here
        env = {**os.environ, "AWS_MAX_ATTEMPTS": "2"}
        run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
        direct = s3fs.S3FileSystem(endpoint_url=s3, skip_instance_cache=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.poll() is None:
            direct.invalidate_cache()
            try:
                done = direct.find(f"toys/outage.zarr/{DONE_PREFIX}")
            except FileNotFoundError:
                done = []
            if len(done) >= 2:
                break
            time.sleep(0.1)
        assert run.poll() is None, "the run ended before the endpoint could be cut"
        proxy.cut()
        t_cut = time.monotonic()
        _, err = run.communicate(timeout=300)
        print(f"the run stopped {time.monotonic() - t_cut:.1f} s after the cut")
        assert run.returncode == 1, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"toyengine: store {url}: cannot reach it: Could not "
                                   "connect to the endpoint URL"), lines[0]
        direct.invalidate_cache()
        n_done = len(direct.find(f"toys/outage.zarr/{DONE_PREFIX}"))
        assert 2 <= n_done < TOYS

        proxy.restore()
        again = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
        assert again.returncode == 0, again.stderr
        assert again.stderr == ""
    finally:
        proxy.close()
    ref = tmp_path / "ref.zarr"
    assert run_study(load_spec(HELLO).with_overrides(toys=TOYS), ref, client=client,
                     chunk_size=1, progress=None).complete
    got = open_results(url, {"endpoint_url": s3})
    want = open_results(ref)
    assert sorted(got.data_vars) == sorted(want.data_vars)
    for v in want.data_vars:
        if v == "fit_time":
            continue
        assert got[v].values.tobytes() == want[v].values.tobytes(), v
    assert got.attrs == want.attrs
