"""A campaign on a hand-started cluster gives the same store as a local run.

Starts ``dask scheduler``, two ``dask worker`` processes and an S3-compatible server (moto,
from the ``[test]`` extra) on 127.0.0.1, runs the hello-world study with N toys

* locally (``toyengine run --workers 2``, the embedded cluster),
* on the hand-started cluster into ``file://`` (workers write their own chunks),
* on the hand-started cluster into ``s3://`` on the moto server,

each with its own automatic chunk size, then compares every stored array (``fit_time``
excepted: it measures the machine; the chunk table excepted: it is the layout each run
chose) and attribute (the chunk size and the checkout's paths excepted), and measures the
peak RSS of ``toyengine summary`` on each store. Usage::

    PYTHONPATH=$PWD python benchmarks/campaign_identity.py [N]    # default 100000

Prints one line per run (wall seconds, files in the store) and the comparison.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
MACHINE_FIELDS = ("fit_time",)
VOLATILE_ATTRS = ("chunk_size", "study_dir", "toyengine_version")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_s3(endpoint: str, proc: subprocess.Popen) -> None:
    import s3fs

    deadline = time.monotonic() + 60
    while True:
        try:
            s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir("toys")
            return
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.3)


def _run(args: list[str], env: dict[str, str]) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "toyengine", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def _summary_rss(store: str, env: dict[str, str], extra: list[str]) -> float:
    """Peak RSS (MiB) of ``toyengine summary STORE`` in a child process."""
    code = ("import resource, sys; from toyengine.cli import main; "
            f"rc = main(['summary', {store!r}, *{extra!r}]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return int(r.stderr.strip().splitlines()[-1]) / 1024.0


def _arrays(store: str, opts: dict[str, str]) -> tuple[dict[str, np.ndarray], dict]:
    from toyengine import open_results

    ds = open_results(store, opts)
    # the chunk table (dimension ``chunk``) is the layout each run chose, not a result
    out = {k: np.asarray(ds[k].values) for k in ds.variables
           if k not in MACHINE_FIELDS and "chunk" not in ds[k].dims}
    attrs = {k: v for k, v in ds.attrs.items() if k not in VOLATILE_ATTRS}
    return out, attrs


def _same(a: tuple[dict, dict], b: tuple[dict, dict]) -> list[str]:
    bad = [k for k in sorted(set(a[0]) | set(b[0]))
           if k not in a[0] or k not in b[0]
           or not np.array_equal(a[0][k], b[0][k], equal_nan=a[0][k].dtype.kind == "f")]
    if json.dumps(a[1], sort_keys=True, default=str) != json.dumps(b[1], sort_keys=True,
                                                                    default=str):
        bad.append("attributes")
    return bad


def main(n: int) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="campaign-"))
    sport, s3port = _port(), _port()
    endpoint = f"http://127.0.0.1:{s3port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                           "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")})
    bindir = Path(sys.executable).parent
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    procs = [subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(s3port)], **quiet),
             subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1",
                               "--port", str(sport), "--dashboard-address", ":0"], **quiet)]
    addr = f"tcp://127.0.0.1:{sport}"
    try:
        _wait_s3(endpoint, procs[0])
        time.sleep(2)
        procs += [subprocess.Popen([str(bindir / "dask"), "worker", addr, "--nthreads", "1",
                                    "--no-nanny"], **quiet) for _ in range(2)]
        common = ["run", str(HELLO), "--toys", str(n), "--quiet", "--yes"]
        stores = {"local": str(tmp / "local.zarr"),
                  "file": f"file://{tmp / 'file.zarr'}",
                  "s3": "s3://toys/hello.zarr"}
        runs = {"local": [*common, "--store", stores["local"], "--workers", "2"],
                "file": [*common, "--store", stores["file"], "--scheduler", addr],
                "s3": [*common, "--store", stores["s3"], "--scheduler", addr]}
        opts = {"endpoint_url": endpoint}
        for name, args in runs.items():
            secs = _run(args, env)
            extra = ["--storage-option", f"endpoint_url={endpoint}"] if name == "s3" else []
            rss = _summary_rss(stores[name], env, extra)
            if name == "s3":
                import s3fs

                files = len(s3fs.S3FileSystem(endpoint_url=endpoint).find("toys/hello.zarr"))
            else:
                root = tmp / f"{name}.zarr"
                files = sum(len(f) for _, _, f in os.walk(root))
            print(f"{name:>5}: {n} toys in {secs:.0f} s wall, {files} objects, "
                  f"summary peak RSS {rss:.0f} MiB", flush=True)
        ref = _arrays(stores["local"], {})
        rc = 0
        for name in ("file", "s3"):
            bad = _same(ref, _arrays(stores[name], opts if name == "s3" else {}))
            print(f"{name} vs local: {'identical' if not bad else 'DIFFER in ' + ', '.join(bad)}")
            rc |= bool(bad)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"this process: peak RSS {rss:.0f} MiB")
        return rc
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
