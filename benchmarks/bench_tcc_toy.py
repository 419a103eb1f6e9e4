"""Median seconds per T_cc+ toy (generate + fit, 6 free parameters, ~820 events), one core.

Target (issue 2): <= 10 ms. Usage: python benchmarks/bench_tcc_toy.py [n_toys]
"""

import statistics
import sys
import time

import numpy as np

from toyengine.core.fit import fit
from toyengine.models.tcc import build_tcc


def main(n: int = 200) -> None:
    model = build_tcc({})
    truth = model.parameters
    times, nfcn, events = [], [], []
    for t in range(n):
        rng = np.random.default_rng(np.random.SeedSequence(1, spawn_key=(t,)))
        t0 = time.perf_counter()
        x = model.sample(truth.values, rng)
        res = fit(model.nll(x), truth)
        times.append(time.perf_counter() - t0)
        nfcn.append(res.nfcn)
        events.append(len(x))
    print(f"T_cc+ toy (generate + MIGRAD + HESSE), {n} toys, {statistics.mean(events):.0f} "
          f"events on average")
    print(f"median {1e3 * statistics.median(times):.2f} ms per toy; "
          f"mean nfcn {statistics.mean(nfcn):.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
