"""Seconds per evaluation of the unitarised T_cc⁺ shape at a new (δm_U, |g|) on a 2001-point
grid, after the first call has built the per-grid cache (target: well under 1 ms; measured
about 25 µs on an idle core). Usage: python benchmarks/bench_unitarised.py [n_calls]
"""

import statistics
import sys
import time

import numpy as np

from toyengine.core.unitarised import UnitarisedShape

DMU = -0.359


def main(n: int = 200) -> None:
    x = np.linspace(-4.0, 11.0, 2001)
    for label, shape, vals in (("|g| = inf", UnitarisedShape(), (DMU,)),
                               ("|g| = 8.08 GeV", UnitarisedShape(g=8.08), (DMU, 8.08))):
        shape.evaluate(x, vals)  # builds the per-grid cache
        times = []
        for k in range(n):
            t0 = time.perf_counter()
            shape.evaluate(x, (DMU + 1e-5 * k, *vals[1:]))
            times.append(time.perf_counter() - t0)
        print(f"{label}: median {1e6 * statistics.median(times):.1f} µs per evaluation "
              f"({n} calls, 2001 points)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
