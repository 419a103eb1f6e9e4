"""Peak memory of ``toyengine summary`` against the number of toys.

Builds hello-world stores of N toys from metadata (no toy is materialised at creation),
fills them chunk by chunk with synthetic fit records (the mean and width of 100 normal
values, the same distribution the hello-world fits give, without the fits: 10^6 real fits
would take an hour here), then runs ``toyengine summary`` in a fresh process and reports
its peak RSS (``ru_maxrss`` of the child) and the store's file count. Usage::

    PYTHONPATH=$PWD python benchmarks/bench_summary_memory.py [N ...]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
CHUNK = 10_000
#: the child: `toyengine summary STORE`, then its own peak RSS (KiB) on stderr
CHILD = ("import resource, sys; from toyengine.cli import main; "
         "rc = main(['summary', sys.argv[1]]); "
         "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
         "sys.exit(rc)")


def build(path: Path, toys: int) -> None:
    from toyengine import load_spec
    from toyengine.store import create_store, write_chunk
    from toyengine.store.lease import Lease
    from toyengine.store.location import Location
    from toyengine.study.plan import Plan
    from toyengine.study.recipe import ChunkResult

    spec = load_spec(HELLO).with_overrides(toys=toys)
    plan = Plan.of(spec)
    loc = Location(str(path))
    with Lease(loc, progress=None):
        chunks = create_store(loc, plan, CHUNK)
        rng = np.random.default_rng(1)
        for c in chunks:
            n = c.size
            x = rng.normal(size=(n, 100))
            mu, sd = x.mean(1), x.std(1)
            a = plan.empty_records(n)
            a.update({
                "value": np.stack([mu, sd], -1)[:, None, :],
                "error": np.stack([sd / 10, sd / np.sqrt(200)], -1)[:, None, :],
                "nll": rng.normal(size=(n, 1)), "valid": np.ones((n, 1), bool),
                "edm": np.full((n, 1), 1e-7), "nfcn": np.full((n, 1), 30, np.int64),
                "fit_time": np.full((n, 1), 1e-3), "status": np.ones((n, 1), np.int8),
                "n_best": np.ones((n, 1), np.int64), "n_events": np.full(n, 100, np.int64),
            })
            write_chunk(loc, ChunkResult(c, a), toys, CHUNK)


def main(sizes: list[int]) -> None:
    tmp = Path(tempfile.mkdtemp())
    try:
        for n in sizes:
            path = tmp / f"h{n}.zarr"
            t0 = time.perf_counter()
            build(path, n)
            built = time.perf_counter() - t0
            files = sum(len(f) for _, _, f in os.walk(path))
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", CHILD, str(path)],
                                 capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
            took = time.perf_counter() - t0
            assert res.returncode == 0, res.stderr[-2000:]
            peak = int(res.stderr.strip().splitlines()[-1].split()[1])
            print(f"{n:>9} toys: {files} files, built in {built:.0f} s; summary "
                  f"{took:.1f} s, peak RSS {peak / 1024:.0f} MiB", flush=True)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100_000, 400_000, 1_000_000])
