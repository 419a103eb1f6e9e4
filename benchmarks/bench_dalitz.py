"""Benchmark: one Zc(4100) significance or J^P rejection toy pair (LHCb, EPJC 78 (2018)
1019) on one core.

A significance toy = generate from the baseline model (Poisson yields, both runs), fit the
baseline model, fit the nominal (1−) model with ``--starts`` starts; a J^P rejection toy
(``--study jp_rejection``) generates and fits the 0+ model and fits the 1− one. Fits skip
HESSE as these studies do (``--hesse`` adds it). Prints the median wall and CPU
seconds per toy, the split into generate / fit baseline / fit nominal, the mean number of
function calls, and the peak resident memory of this process (``resource.getrusage``).

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_dalitz.py [--toys 10] [--starts 1]
        [--strategy -1] [--maps synthetic|files] [--study significance|jp_rejection]
        [--hesse]
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_dalitz.py --study-file \
        studies/zc4100/significance.yaml [--toys 10] [--first 0]

With ``--study-file studies/zc4100/significance.yaml`` (or ``jp_rejection.yaml``) each toy
goes through the study's own per-toy code instead
(:func:`toyengine.study.recipe.run_chunk` on a one-toy chunk: the study's streams,
generation, fit settings — starts, profile, the null minimum as an extra start of the
nested fit — and records); the models are built (and cached) by a first, untimed toy.
Prints the median wall and CPU seconds per toy pair and the median fit time and NLL calls
per hypothesis from the records.

BLAS threads are pinned to one before numpy is imported (as dask workers do by default),
so the numbers are single-core.
"""

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def _fit(nll, params, starts, rng, strategy, hesse):
    from toyengine.core.fit import fit

    strategy = None if strategy < 0 else strategy
    return fit(nll, params, starts=starts, rng=rng, strategy=strategy, hesse=hesse)


def _study_pairs(path: str, toys: int, first: int) -> int:
    """Time ``toys`` toys of the study file ``path`` through its per-toy code."""
    from toyengine.study.plan import Chunk, Plan
    from toyengine.study.recipe import run_chunk
    from toyengine.study.spec import load_spec

    spec = load_spec(path)
    plan = Plan.of(spec)
    t0 = time.perf_counter()
    run_chunk(plan, Chunk(0, 0, first + toys, first + toys + 1))  # builds the models
    t_build = time.perf_counter() - t0
    hyps = list(spec.hypotheses)
    rows = []
    for t in range(first, first + toys):
        w0, c0 = time.perf_counter(), time.process_time()
        rec = run_chunk(plan, Chunk(0, 0, t, t + 1)).arrays
        w1, c1 = time.perf_counter(), time.process_time()
        ft = [float(rec["fit_time"][0, h]) for h in range(len(hyps))]
        nf = [int(rec["nfcn"][0, h]) for h in range(len(hyps))]
        nll = [float(rec["nll"][0, h]) for h in range(len(hyps))]
        rows.append((w1 - w0, c1 - c0, ft, nf))
        fits = ", ".join(f"{h} {f:.3f} s [{n}]" for h, f, n in zip(hyps, ft, nf, strict=True))
        print(f"toy {t:3d}: wall {w1 - w0:.3f} s  cpu {c1 - c0:.3f} s  (fits: {fits})  "
              f"nll {' '.join(f'{v:.4f}' for v in nll)}", flush=True)
    med = statistics.median
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\nmodel build and first toy (untimed warm-up): {t_build:.3f} s")
    print(f"median per {spec.name} toy pair ({toys} toys from {first}; study fit settings "
          f"{dict(spec.fit)}), timed around run_chunk of one toy (perf_counter / "
          f"process_time): wall {med(r[0] for r in rows):.3f} s, "
          f"cpu {med(r[1] for r in rows):.3f} s")
    # the mean is what a campaign pays: a few toys whose search goes round again (a restart
    # that found a lower minimum) cost several times the median
    print(f"mean per pair: wall {statistics.fmean(r[0] for r in rows):.3f} s, "
          f"cpu {statistics.fmean(r[1] for r in rows):.3f} s")
    for h, name in enumerate(hyps):
        print(f"  fit {name}: median {med(r[2][h] for r in rows):.3f} s, "
              f"nfcn {med(r[3][h] for r in rows):.0f}")
    print(f"peak worker memory (ru_maxrss): {peak_kib / 1024:.1f} MiB")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toys", type=int, default=10)
    ap.add_argument("--starts", type=int, default=1)
    ap.add_argument("--strategy", type=int, default=-1,
                    help="MIGRAD strategy; -1 = toyengine.core.fit's default (0 with"
                         " a gradient)")
    ap.add_argument("--maps", default="synthetic", choices=["synthetic", "files"])
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--study", default="significance", choices=["significance", "jp_rejection"],
                    help="significance: generate baseline, fit baseline and nominal (1-); "
                         "jp_rejection: generate and fit nominal 0+, fit nominal 1-")
    ap.add_argument("--hesse", action="store_true",
                    help="run HESSE after MIGRAD (these studies do not, by default)")
    ap.add_argument("--study-file", default=None,
                    help="time the toys of this study file through its per-toy code "
                         "(toyengine.study.recipe.run_chunk) instead")
    ap.add_argument("--first", type=int, default=0,
                    help="with --study-file: index of the first timed toy")
    args = ap.parse_args(argv)
    if args.study_file is not None:
        return _study_pairs(args.study_file, args.toys, args.first)

    from toyengine.models.zc4100 import build_zc4100

    t0 = time.perf_counter()
    if args.study == "significance":
        base = build_zc4100({"hypothesis": "baseline", "maps": args.maps})
        nom = build_zc4100({"hypothesis": "nominal", "maps": args.maps})
    else:
        base = build_zc4100({"hypothesis": "nominal", "zc_spin": 0, "maps": args.maps})
        nom = build_zc4100({"hypothesis": "nominal", "zc_spin": 1, "maps": args.maps})
    t_build = time.perf_counter() - t0
    ss = np.random.SeedSequence(args.seed)
    rows = []
    for k, child in enumerate(ss.spawn(args.toys)):
        rng = np.random.default_rng(child)
        w0, c0 = time.perf_counter(), time.process_time()
        data = base.sample(base.parameters.values, rng)
        w1 = time.perf_counter()
        r0 = _fit(base.nll(data), base.parameters, 1, rng, args.strategy, args.hesse)
        w2 = time.perf_counter()
        r1 = _fit(nom.nll(data), nom.parameters, args.starts, rng, args.strategy, args.hesse)
        w3, c3 = time.perf_counter(), time.process_time()
        dnll = 2.0 * (r0.nll - r1.nll)
        rows.append((w3 - w0, c3 - c0, w1 - w0, w2 - w1, w3 - w2, r0.nfcn, r1.nfcn,
                     r0.valid and r1.valid, dnll))
        print(f"toy {k:3d}: wall {w3 - w0:.3f} s  cpu {c3 - c0:.3f} s  (gen {w1 - w0:.3f}, "
              f"base {w2 - w1:.3f} [{r0.nfcn}], nom {w3 - w2:.3f} [{r1.nfcn}])  "
              f"valid={r0.valid and r1.valid}  Δ(-2lnL)={dnll:.2f}", flush=True)
    med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\nmodel build (both hypotheses): {t_build:.3f} s")
    print(f"median per {args.study} toy pair ({args.toys} toys, starts={args.starts}, "
          f"strategy={args.strategy}, hesse={args.hesse}), timed inside this process around "
          f"generate + both fits (perf_counter / process_time): wall {med(0):.3f} s, "
          f"cpu {med(1):.3f} s")
    print(f"  generate {med(2):.3f} s, fit baseline {med(3):.3f} s, fit nominal {med(4):.3f} s")
    print(f"  mean nfcn baseline {statistics.mean(r[5] for r in rows):.0f}, nominal "
          f"{statistics.mean(r[6] for r in rows):.0f}; valid {sum(r[7] for r in rows)}/{len(rows)}")
    print(f"peak worker memory (ru_maxrss): {peak_kib / 1024:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
