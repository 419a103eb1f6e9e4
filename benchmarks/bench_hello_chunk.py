"""CPU per toy of the hello study (a Gaussian fit of 100 values) inside one chunk: what a
worker spends per toy on generation, fit and records, without Dask or the store.

Runs ``run_chunk`` of ``studies/examples/hello.yaml`` on one chunk of N toys (after a
one-toy chunk that builds the model) in this process and prints the process CPU per toy.
Compare checkouts with ``PYTHONPATH=CHECKOUT``; pin to one core (``taskset -c 0``) and
alternate old and new runs on a shared machine.

Usage: python benchmarks/bench_hello_chunk.py [TOYS]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk
from toyengine.study.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    toys = int(argv[0]) if argv else 10000
    spec = load_spec(ROOT / "studies" / "examples" / "hello.yaml").with_overrides(
        toys=toys + 1)
    plan = Plan.of(spec)
    run_chunk(plan, Chunk(0, 0, 0, 1))  # builds the model
    c0, w0 = time.process_time(), time.perf_counter()
    run_chunk(plan, Chunk(0, 0, 1, toys + 1))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    import toyengine

    print(f"toyengine from {Path(toyengine.__file__).parent}")
    print(f"{toys} toys: {1e6 * cpu / toys:.1f} µs CPU per toy ({1e6 * wall / toys:.1f} µs "
          f"wall); 1e7 toys on 2 cores at this rate: {cpu / toys * 1e7 / 2 / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
