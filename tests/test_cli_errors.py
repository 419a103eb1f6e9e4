"""Every CLI error is one line on stderr and an exit code, never a traceback or a hang
(issue 13). Servers here are the test's own, on 127.0.0.1."""

import errno
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from toyengine.store.results import DONE_PREFIX, STATE_KEY
from toyengine.study.spec import load_spec

DATA = Path(__file__).parent / "data"
STUDY = DATA / "tcc_small.yaml"
CLI = [sys.executable, "-m", "toyengine.cli"]


def _cli(*args, timeout=120):
    t0 = time.monotonic()
    res = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True,
                         timeout=timeout)
    return res, time.monotonic() - t0


def _one_line(res, code, text):
    assert res.returncode == code, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert text in lines[0], lines[0]


@pytest.mark.parametrize(("args", "text"), [
    (["--scheduler", "garbage"], "expected tcp://HOST:PORT"),
    (["--scheduler", "tcp://host:99999"], "port 99999"),
    (["--scheduler", "tls://127.0.0.1:8786"], "give --tls-config"),
    (["--workers", "0"], "--workers: 0 is not >= 1"),
    (["--workers", "-3"], "--workers: -3 is not >= 1"),
    (["--chunk-size", "0"], "--chunk-size: 0 is not >= 1"),
    (["--seed", "-1"], "--seed: -1 is not >= 0"),
    (["--toys", "x"], "'x' is not an integer"),
    (["--toys", "100000000"], "add --yes"),
])
def test_bad_run_arguments(tmp_path, args, text, cli):
    store = tmp_path / "s.zarr"
    res = cli("run", STUDY, "--store", store, *args)
    _one_line(res, 2, text)
    assert not store.exists()


def test_store_under_a_file(tmp_path, cli):
    (tmp_path / "f").write_text("x")
    res = cli("run", STUDY, "--store", tmp_path / "f" / "s.zarr", "--workers",
                      "1")
    _one_line(res, 2, "is a file, not a directory")


#: A disk on which writes under one directory fail, for tests that must also hold as root
#: (who writes into any read-only directory): ``io.open`` (what ``pathlib.Path.open``
#: calls, so what the zarr LocalStore and the store's control files write with) is
#: wrapped. ENOSPC as write(2) reports it: the file opens, the write fails, no file name;
#: EROFS as open(2) reports it, with the file name. Source text, so that a Dask worker
#: process or a CLI subprocess can install it too (``exec``).
FAULTY_DISK = """
import errno, io, os

def faulty_open(real_open, root, code, once=None):
    \"\"\"io.open, but writing a file under root fails with code (once the file once
    exists, if given).\"\"\"
    root = os.path.abspath(root) + os.sep

    class FullFile:
        def __init__(self, f):
            self.f = f
        def write(self, data):
            raise OSError(code, os.strerror(code))
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def __getattr__(self, name):
            return getattr(self.f, name)

    def open_(file, mode="r", *args, **kwargs):
        named = isinstance(file, (str, bytes, os.PathLike))
        path = os.path.abspath(os.fsdecode(file)) if named else ""
        if (path.startswith(root) and any(c in mode for c in "wxa+")
                and (once is None or os.path.exists(once))):
            if code == errno.EROFS:
                raise OSError(code, os.strerror(code), path)
            return FullFile(real_open(file, mode, *args, **kwargs))
        return real_open(file, mode, *args, **kwargs)

    return open_
"""


def _install_faulty_disk(monkeypatch, root, code, once=None):
    """The faulty disk in this process, undone after the test."""
    ns = {}
    exec(FAULTY_DISK, ns)
    monkeypatch.setattr(io, "open", ns["faulty_open"](io.open, str(root), code,
                                                      None if once is None else str(once)))


def _faulty_disk_source(root, code, once=None):
    """Python source installing the faulty disk in the process that runs it."""
    args = f"{str(root)!r}, {code}, {None if once is None else str(once)!r}"
    return FAULTY_DISK + f"\nio.open = faulty_open(io.open, {args})\n"


def test_store_in_read_only_directory(tmp_path, monkeypatch, cli):
    """A read-only file system (simulated: the test also runs as root) is refused before
    any cluster starts, naming the store and the directory, exit code 2."""
    ro = tmp_path / "ro"
    ro.mkdir()
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if os.path.abspath(os.fsdecode(path)).startswith(str(ro) + os.sep):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    _install_faulty_disk(monkeypatch, ro, errno.EROFS)
    res = cli("run", STUDY, "--store", ro / "s.zarr", "--workers", "1")
    _one_line(res, 2, f"store {ro / 's.zarr'}: cannot write in {ro} (Read-only file system)")
    assert list(ro.iterdir()) == []


def test_full_disk_before_the_first_write(tmp_path, monkeypatch, cli):
    """No space for even the store's first file: one line naming the store and the
    problem, exit code 1, nothing left behind, no cluster started."""
    store = tmp_path / "s.zarr"
    _install_faulty_disk(monkeypatch, store, errno.ENOSPC)
    res = cli("run", STUDY, "--store", store, "--workers", "1")
    _one_line(res, 1, f"store {store}: cannot write: No space left on device; the results "
                      "written so far are kept: free some disk space, then run the same "
                      "command again to resume")
    assert not store.exists()


@pytest.fixture
def dask_scheduler():
    """A scheduler with one worker process on 127.0.0.1 (its client, to reach the worker)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield cluster.scheduler_address, client


@pytest.mark.parametrize(("write", "code"), [("client", errno.ENOSPC),
                                             ("workers", errno.EROFS)])
def test_store_that_stops_being_writable_during_the_run(tmp_path, dask_scheduler, write,
                                                        code):
    """The disk fills up, or the file system turns read-only (as ext4 does on an error),
    after the store was made: whoever writes the chunks — the client, or a worker — the
    command ends with one line naming the store and the problem, exit code 1, and the
    store is intact (the chunks before, if any, and its own description)."""
    address, client = dask_scheduler
    store = tmp_path / "s.zarr"
    fault = _faulty_disk_source(store, code, once=store / STATE_KEY)
    prelude = ""
    if write == "client":
        prelude = fault  # in the CLI process
    else:
        client.run(exec, fault, {})  # in the worker process
    argv = ["run", str(STUDY), "--store", str(store), "--scheduler", address, "--write",
            write, "--toys", "4", "--chunk-size", "1", "--quiet"]
    code_line = (f"{prelude}\nimport sys\nfrom toyengine.cli import main\n"
                 f"sys.exit(main({argv!r}))\n")
    res = subprocess.run([sys.executable, "-c", code_line], capture_output=True, text=True,
                         timeout=180)
    _one_line(res, 1, f"store {store}: cannot write: {os.strerror(code)}; the results "
                      "written so far are kept")
    assert (store / STATE_KEY).exists()
    from toyengine.store import StoreInfo

    assert not StoreInfo(store).done().any()  # nothing was marked done that is not there


@pytest.mark.parametrize(("store", "text"), [
    ("foo://x.zarr", "store foo://x.zarr: unsupported URL scheme 'foo://'"),
    ("s3//bucket/x.zarr", "store s3//bucket/x.zarr: looks like a URL with a mistyped '://'; "
                          "write s3://bucket/x.zarr (or ./s3//bucket/x.zarr for a local "
                          "folder of that name)"),
    ("gs:/bucket/x.zarr", "write gs://bucket/x.zarr"),
])
def test_unsupported_or_mistyped_url(tmp_path, monkeypatch, store, text, cli):
    """An unknown URL scheme, or a known one missing its "://" (which would silently make a
    local folder "s3"): one line naming the store, exit code 2, nothing created."""
    monkeypatch.chdir(tmp_path)
    for command in (["run", STUDY, "--store", store, "--workers", "1"], ["status", store]):
        _one_line(cli(*command), 2, text)
    assert list(tmp_path.iterdir()) == []


def test_mistyped_url_as_a_local_folder(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    res = cli("status", "./s3//x.zarr")
    assert res.returncode == 2 and "mistyped" not in res.stderr  # no such store: refused
    assert "./s3//x.zarr" in res.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("name: tcc\x00small\nkind: pulls\n", "unacceptable character #x0000"),
    (STUDY.read_text().replace("seed: 7", "seed: " + "9" * 5000),
     "seed: got 'YAML (line 4)'; expected an integer of at most 100 digits"),
])
def test_study_file_with_nul_or_a_huge_integer(tmp_path, text, message, cli):
    study = tmp_path / "bad.yaml"
    study.write_text(text)
    res = cli("run", study, "--store", tmp_path / "s.zarr", "--workers", "1")
    _one_line(res, 2, f"invalid study file: {study}")
    assert message in res.stderr


def test_unreachable_object_store_is_one_line(cli, monkeypatch):
    """An S3 endpoint where nothing listens (a free port on 127.0.0.1): one line naming
    the store and the cause, exit code 1 (the same command works once it is back)."""
    pytest.importorskip("s3fs", reason="needs the [s3] extra")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(k, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # the same line after botocore's retries
    opt = f"endpoint_url=http://127.0.0.1:{port}"
    for command in (["status", "s3://toys/x.zarr"], ["summary", "s3://toys/x.zarr"],
                    ["run", STUDY, "--store", "s3://toys/x.zarr", "--workers", "1"]):
        res = cli(*command, "--storage-option", opt)
        _one_line(res, 1, "store s3://toys/x.zarr: cannot reach it: Could not connect to "
                          f"the endpoint URL: \"http://127.0.0.1:{port}/")


# EROFS takes the same path as ENOSPC (an OSError of the workers' writes): slow
@pytest.mark.parametrize("code", [errno.ENOSPC, pytest.param(errno.EROFS,
                                                             marks=pytest.mark.slow)])
def test_full_disk_in_the_workers_of_our_own_cluster(tmp_path, client, code):
    """The disk fills up (or turns read-only) while the workers that the command started
    itself write the chunks (the faulty disk installed in every process by a
    ``sitecustomize``): one line, exit code 1, none of the workers' "Compute Failed"
    tracebacks; once the disk is fine again the same command completes the store,
    identical to an uninterrupted run."""
    from toyengine import open_results, run_study

    store = tmp_path / "s.zarr"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        _faulty_disk_source(store, code, once=store / STATE_KEY))
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    argv = [*CLI, "run", str(STUDY), "--store", str(store), "--workers", "1", "--toys", "4",
            "--chunk-size", "1", "--quiet"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=full)
    _one_line(res, 1, f"store {store}: cannot write: {os.strerror(code)}; the results "
                      "written so far are kept")
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    ref = tmp_path / "ref.zarr"
    assert run_study(load_spec(STUDY).with_overrides(toys=4), ref, client=client,
                     chunk_size=1, progress=None).complete
    got, want = open_results(store), open_results(ref)
    for v in want.data_vars:
        if v != "fit_time":
            assert got[v].values.tobytes() == want[v].values.tobytes(), v


def test_store_on_proc_is_refused(cli):
    res = cli("run", STUDY, "--store", "/proc/toyengine-test.zarr",
                      "--workers", "1")
    _one_line(res, 2, "cannot write in /proc")


def test_debug_shows_the_traceback(tmp_path):
    res = subprocess.run([*CLI, "--debug", "run", str(STUDY), "--store",
                          str(tmp_path / "s.zarr"), "--scheduler", "garbage"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "Traceback" in res.stderr


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _Server:
    """A TCP server on 127.0.0.1 that answers every connection with ``reply`` (or, with
    ``None``, accepts and never speaks)."""

    def __init__(self, reply):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.conns = []
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply is not None:
                try:
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self):
        self.stop = True
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("peer", ["closed port", "garbage"])
def test_unreachable_scheduler_is_one_line(tmp_path, peer):
    """A closed port and a server answering garbage (a separate process, so that log
    output and tracebacks would show on its stderr)."""
    server = None
    if peer == "closed port":
        address = f"tcp://127.0.0.1:{_free_port()}"
    else:
        server = _Server(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(range(256)) * 64)
        address = f"tcp://127.0.0.1:{server.port}"
    store = tmp_path / "s.zarr"
    try:
        res, _ = _cli("run", STUDY, "--store", store, "--scheduler", address,
                      "--connect-timeout", "5")
    finally:
        if server is not None:
            server.close()
    _one_line(res, 2, f"could not connect to a Dask scheduler at {address}")
    assert not store.exists()


@pytest.mark.parametrize("timeout", [
    # the default (25 s) waits 25 s: slow; the same path with a short --connect-timeout runs
    # in the default suite
    pytest.param(None, marks=pytest.mark.slow), 3])
def test_silent_scheduler_answers_within_its_timeout(tmp_path, cli, timeout):
    """A server that accepts and never speaks: one line within the timeout plus 10 s (in
    this process: the interpreter start-up of a loaded test machine is not what is
    measured); the default timeout is 25 s."""
    server = _Server(None)
    address = f"tcp://127.0.0.1:{server.port}"
    extra = () if timeout is None else ("--connect-timeout", str(timeout))
    t0 = time.monotonic()
    try:
        res = cli("run", STUDY, "--store", tmp_path / "s.zarr", "--scheduler", address,
                  *extra)
    finally:
        server.close()
    assert time.monotonic() - t0 < (25 if timeout is None else timeout) + 10.0
    _one_line(res, 2, f"could not connect to a Dask scheduler at {address} (no answer")


def _store_with_one_chunk(path):
    from toyengine.store import create_store, write_chunk
    from toyengine.study.plan import Chunk, Plan
    from toyengine.study.recipe import run_chunk

    spec = load_spec(STUDY).with_overrides(toys=2)
    plan = Plan.of(spec)
    create_store(path, plan, 1)
    write_chunk(path, run_chunk(plan, Chunk(0, 0, 0, 1)), 2, 1)
    return spec


def test_store_of_the_same_study_with_another_seed(tmp_path, cli):
    store = tmp_path / "s.zarr"
    _store_with_one_chunk(store)
    res = cli("run", STUDY, "--store", store, "--toys", "2", "--seed", "8")
    _one_line(res, 2, "the seed differs (store: 7, now: 8)")


def test_corrupt_chunk_names_store_and_chunk(tmp_path, cli):
    store = tmp_path / "s.zarr"
    _store_with_one_chunk(store)
    chunk = store / "value" / "c" / "0" / "0" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:10])
    res = cli("summary", store)
    _one_line(res, 2, f"store {store} is incomplete: 1 chunk(s) damaged (variant nominal "
                      "toys 0-0: value/c/0/0/0/0 has 10 bytes")


def test_sigint_during_a_run_prints_the_saved_toys_line(tmp_path):
    store = tmp_path / "s.zarr"
    # a user's Ctrl-C at a terminal: the run must start with SIGINT's default disposition
    # also where these tests run with SIGINT ignored (a shell's background job inherits
    # SIG_IGN, a child would too, and Python keeps an inherited SIG_IGN); a handler here
    # becomes the default in the child at exec
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([*CLI, "run", str(STUDY), "--store", str(store), "--workers",
                                 "1", "--toys", "400", "--chunk-size", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, old)
    deadline = time.monotonic() + 240
    done = store / DONE_PREFIX  # the done markers, one per chunk written
    while time.monotonic() < deadline and proc.poll() is None:
        if done.is_dir() and any(done.glob("*.json")):
            break
        time.sleep(0.5)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("toyengine: interrupted: ") and last.endswith(
        "/400 toys saved; run the same command to resume"), err
    saved = int(last.split("interrupted: ")[1].split("/")[0])
    assert saved >= 1
    # the message counts what the store holds (its done markers), not what the run collected
    held = sum(int(m["stop"]) - int(m["start"])
               for m in (json.loads(f.read_text()) for f in done.glob("*.json")))
    assert saved == held, (saved, held)


def test_sigterm_is_an_interrupt(monkeypatch, capsys):
    """SIGTERM takes the Ctrl-C path: one line, exit code 130 (in this process, with a
    command that waits to be stopped)."""
    import argparse
    import importlib

    cli = importlib.import_module("toyengine.cli.main")

    def waits(args: argparse.Namespace) -> int:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        time.sleep(30)
        return 0

    old = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(cli, "_cmd_status", waits)
    t0 = time.monotonic()
    try:
        code = cli.main(["status", "x"])
    finally:
        signal.signal(signal.SIGTERM, old)
    assert code == 130 and time.monotonic() - t0 < 10
    assert capsys.readouterr().err == "toyengine: interrupted\n"


def test_own_workers_drop_only_the_shutdown_heartbeat_record():
    """The workers of the embedded cluster drop the heartbeat traceback of a stopped
    scheduler (the shutdown race behind test_sigint_during_a_run_prints_the_saved_toys_line)
    and keep every other record."""
    import logging

    from toyengine.run.client import _SHUTDOWN_QUIET

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg,
                                 None, None)

    assert not _SHUTDOWN_QUIET.filter(
        record("Failed to communicate with scheduler during heartbeat."))
    assert _SHUTDOWN_QUIET.filter(record("Compute Failed"))
    assert _SHUTDOWN_QUIET.filter(record("failed during get data with %s -> %s"))

