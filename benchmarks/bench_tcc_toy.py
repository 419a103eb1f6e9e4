"""Seconds per T_cc+ pulls toy: generate + fit (trust-region Newton with the analytic
Hessian; MIGRAD + HESSE before it), 6 free parameters.

Usage: python benchmarks/bench_tcc_toy.py [n_toys] [grid_step] [--study]   (default 200
toys; pin it to one core, e.g. ``taskset -c 0``). Each toy is timed inside this process
around ``model.sample`` and ``toyengine.core.fit.fit`` with ``time.perf_counter`` (wall) and
``time.process_time`` (CPU of this process); model building and imports are outside the
per-toy figures and printed separately, as is the first toy (it also loads the compiled
kernels of the likelihood and the generator: numba's start and its cache, or their
compilation after an install). Compare two commits side by side, alternating runs,
on the same core. ``nfcn`` counts NLL calls after MIGRAD and NLL + gradient + Hessian calls
after a Newton fit.

The default model is the ``tcc`` builder's defaults (δm ∈ [−4, 11] MeV, 117 signal + 700
background events: ~820 per toy), the workload this benchmark has always timed, on the
20 keV grid of the pulls and model-variation studies (the builder's default grid is 10 keV;
``grid_step`` in MeV times another, e.g. 0.01). ``--study`` times the model of
``studies/tcc/pulls.yaml`` instead (its range up to 3.9 GeV and 286 events per toy;
docs/tcc-references.md).
"""

import time

T_START = time.perf_counter()

import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from toyengine.core.fit import fit  # noqa: E402
from toyengine.models.tcc import build_tcc  # noqa: E402

STUDY = Path(__file__).resolve().parents[1] / "studies" / "tcc" / "pulls.yaml"


def main(n: int = 200, grid_step: float | None = None, study: bool = False) -> None:
    t_import = time.perf_counter() - T_START
    t0 = time.perf_counter()
    if study:
        from toyengine.study.spec import build_model, load_spec

        spec = load_spec(STUDY)
        if grid_step is not None:
            spec.models["nominal"]["options"]["grid_step"] = grid_step
        model = build_model(spec, spec.variants[0], "nominal")
    else:
        model = build_tcc({"grid_step": 0.02 if grid_step is None else grid_step})
    t_build = time.perf_counter() - t0
    truth = model.parameters
    wall, cpu, nfcn, events = [], [], [], []
    for t in range(n):
        rng = np.random.default_rng(np.random.SeedSequence(1, spawn_key=(t,)))
        w0, c0 = time.perf_counter(), time.process_time()
        x = model.sample(truth.values, rng)
        res = fit(model.nll(x), truth)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
        nfcn.append(res.nfcn)
        events.append(len(x))
    print(f"T_cc+ toy (generate + fit), {n} toys, {statistics.mean(events):.0f} "
          f"events on average, grid step {model.h:.3g} MeV; per toy inside one process "
          "(perf_counter / process_time):")
    print(f"median {1e3 * statistics.median(wall):.2f} ms per toy (wall), "
          f"{1e3 * statistics.median(cpu):.2f} ms (CPU); mean nfcn {statistics.mean(nfcn):.0f}")
    print(f"outside the toys: imports {t_import:.3f} s, model build {t_build:.3f} s, first "
          f"toy {wall[0]:.3f} s (wall)")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 200, float(args[1]) if len(args) > 1 else None,
         "--study" in sys.argv)
