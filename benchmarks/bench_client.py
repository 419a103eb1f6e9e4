"""Client CPU per chunk with workers writing their own results.

Starts ``dask scheduler`` and two ``dask worker`` processes by hand (as on a real
cluster), then runs the hello-world study into a fresh store twice, with N1 and N2
chunks, and reports the client process's CPU time (all its threads, from
``time.process_time``) per chunk: total / chunks for each run, and the marginal cost
(difference of the two runs / difference of chunk counts), which excludes fixed costs
(connecting, creating the store, timing). Usage::

    PYTHONPATH=$PWD python benchmarks/bench_client.py [N1 N2] [--write client]
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
CHUNK = 2  # toys per chunk: tiny tasks, so the client's share dominates


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(n1: int, n2: int, write: str) -> None:
    from distributed import Client

    from toyengine import load_spec, run_study

    port = _port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    bindir = Path(sys.executable).parent
    procs = [subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--dashboard-address", ":0"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    addr = f"tcp://127.0.0.1:{port}"
    tmp = Path(tempfile.mkdtemp())
    try:
        time.sleep(2)
        for _ in range(2):
            procs.append(subprocess.Popen([str(bindir / "dask"), "worker", addr, "--nthreads",
                                           "1", "--no-nanny"], env=env,
                                          stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        with Client(addr, timeout="60s") as client:
            client.wait_for_workers(2, timeout=60)
            spec = load_spec(HELLO)
            per = {}
            for n in (n1, n2):
                s = spec.with_overrides(toys=n * CHUNK)
                c0, t0 = time.process_time(), time.perf_counter()
                r = run_study(s, tmp / f"s{n}.zarr", client=client, chunk_size=CHUNK,
                              progress=None, write=write)
                cpu, wall = time.process_time() - c0, time.perf_counter() - t0
                assert r.complete, r.errors
                per[n] = cpu
                print(f"{n} chunks ({r.write} write): client CPU {cpu:.2f} s = "
                      f"{1e3 * cpu / n:.2f} ms/chunk; wall {wall:.1f} s = "
                      f"{n / wall:.0f} chunks/s")
            marginal = (per[n2] - per[n1]) / (n2 - n1)
            print(f"marginal client CPU per chunk: {1e3 * marginal:.2f} ms")
    finally:
        for p in procs[::-1]:
            p.terminate()
            p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    w = "client" if "--write" in sys.argv and "client" in sys.argv else "workers"
    main(int(args[0]) if args else 500, int(args[1]) if len(args) > 1 else 2000, w)
