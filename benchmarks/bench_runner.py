"""Runner throughput: toys/s for the T_cc+ pulls study with 1 and 2 local workers, and the
runner's overhead per chunk (store write + bookkeeping in the client).

Targets: 2 workers >= 1.8x one worker; overhead <= 50 ms per chunk.
Usage: python benchmarks/bench_runner.py [toys]
"""

import shutil
import sys
import tempfile
import time
from pathlib import Path

from toyengine import load_spec, run_study
from toyengine.store import create_store, write_chunk
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk

ROOT = Path(__file__).resolve().parent.parent


def main(toys: int = 2000) -> None:
    spec = load_spec(ROOT / "studies/tcc/pulls.yaml").with_overrides(toys=toys)
    tmp = Path(tempfile.mkdtemp())
    try:
        from distributed import Client, LocalCluster

        rates = {}
        for workers in (1, 2):
            path = tmp / f"w{workers}.zarr"
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                              host="127.0.0.1", dashboard_address=None) as cluster, \
                    Client(cluster) as client:
                client.run(lambda: None)  # workers up
                t0 = time.perf_counter()
                report = run_study(spec, path, client=client, chunk_size=100, progress=None)
                el = time.perf_counter() - t0
            rates[workers] = toys / el
            print(f"{workers} worker(s): {toys} toys in {el:.1f} s = {rates[workers]:.1f} toys/s "
                  f"(complete={report.complete}; cluster start-up excluded)")
        print(f"speed-up 2 vs 1 workers: {rates[2] / rates[1]:.2f}x")
        # overhead per chunk: writing one chunk's result into the store and marking it done
        plan = Plan.of(spec)
        res = run_chunk(plan, Chunk(0, 0, 0, 100))
        path = tmp / "ovh.zarr"
        chunks = create_store(path, plan, 100)
        t0 = time.perf_counter()
        for c in chunks:
            res.chunk = c
            write_chunk(path, res, spec.toys, 100)
        per = (time.perf_counter() - t0) / len(chunks)
        print(f"store write + done flag per chunk: {1e3 * per:.1f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
