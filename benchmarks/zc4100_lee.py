"""Global p-value of the Z_c(4100)− significance at t = 41.4 from toy scans (Gross–Vitells).

The Z_c search maximises t over the mass and width of the state, so t is the maximum of a
random field t(m, Γ) that is χ²_s at each fixed (m, Γ) (s = 2: the complex Z_c coupling).
Gross and Vitells (Eur. Phys. J. C 70 (2010) 525; Astropart. Phys. 35 (2011) 230, Eqs. 5–8)
give its tail from the expected Euler characteristic of the excursion sets
{t(m, Γ) > u}, calibrated at two low levels on a few toys:
``P(max t > u) ≈ P(χ²_s > u) + N1 ρ1(u) + N2 ρ2(u)``
(:mod:`toyengine.summary.lee`). Plain toys at t = 41.4 (p ≈ 10⁻⁶) would need ~10⁷ pairs.

The calibration is only as good as the lattice: the field varies over about a quarter of
the width in m, so a narrow state at the 40 MeV lower limit needs ~10 MeV steps in m, while
an even grid of cell centres (``fit.scan``'s default) never reaches Γ = 40 MeV. This script
therefore scans a lattice that contains the limits, even in m and geometric in Γ
(``fit.scan.spacing: [linear, log]``; the Euler characteristic is topological: any lattice
works, if it resolves the field), with the engine's own scan fits
(:func:`toyengine.study.recipe.run_chunk`: the study's search, then t at every lattice
point with the Z_c mass and width fixed and every other parameter fitted). Per toy it
stores the engine's t and the lattice, and checks the lattice's resolution: its maximum
must come close to the engine's t (which a continuous search finds). The extrapolation is
then compared with the plain toys' own tail where they reach (their fraction above u
against the prediction).

Usage::

    python benchmarks/zc4100_lee.py scan studies/zc4100/significance.yaml --toys 60 \\
        --workers 2 --m-points 121 --w-points 8 --save tmp/zc_lee.npz
    python benchmarks/zc4100_lee.py calibrate tmp/zc_lee.npz [--plain tmp/check.npz ...]

``--plain`` compares the tail with the engine's t of other toys instead (npz files with
``t``, e.g. from ``global_h1_check.py --save``; list each toy once).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# one BLAS thread per worker process (set before numpy loads its BLAS): the workers are the
# parallelism, and two threads each on two cores slowed every fit
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

_STATE: dict = {}


def _plan(study: str, m_points: int, w_points: int):
    """The study's plan with a look-elsewhere scan on the lattice: the mass evenly, the
    width geometrically spaced, both limits included (``fit.scan.spacing``)."""
    from toyengine.study.plan import Plan
    from toyengine.study.spec import StudySpec

    text = Path(study).read_text()
    scan = f"  scan: {{grid: [{m_points}, {w_points}], spacing: [linear, log]}}\n"
    text = text.replace("\nfit:\n", "\nfit:\n" + scan, 1)
    spec = StudySpec.from_text(text, source=study, base_dir=str(Path(study).resolve().parent))
    return Plan.of(spec)


def _init(study: str, m_points: int, w_points: int) -> None:
    _STATE["plan"] = _plan(study, m_points, w_points)


def _toy(t: int) -> tuple[int, float, np.ndarray, float]:
    from toyengine.study.plan import Chunk
    from toyengine.study.recipe import run_chunk

    c0 = time.process_time()
    r = run_chunk(_STATE["plan"], Chunk(0, 0, t, t + 1))
    nll = r.arrays["nll"][0]
    return t, float(2.0 * (nll[0] - nll[1])), r.arrays["scan_t"][0], time.process_time() - c0


def scan(a: argparse.Namespace) -> None:
    pts = _plan(a.study, a.m_points, a.w_points).scan.points
    m, w = np.unique(pts[:, 0]), np.unique(pts[:, 1])
    toys = list(range(a.first, a.first + a.toys))
    t0 = time.time()
    done: list[tuple[int, float, np.ndarray, float]] = []
    with ProcessPoolExecutor(a.workers, initializer=_init,
                             initargs=(a.study, a.m_points, a.w_points)) as ex:
        for t, tt, field, cpu in ex.map(_toy, toys):
            done.append((t, tt, field, cpu))
            print(f"toy {t}: t {tt:.3f}, lattice max {np.nanmax(field):.3f}, "
                  f"{cpu:.0f} CPU-s ({time.time() - t0:.0f} s)", flush=True)
            # saved after every toy: a run stopped early keeps the toys it finished
            np.savez(a.save, toy=np.array([d[0] for d in done]),
                     t=np.array([d[1] for d in done]),
                     scan=np.stack([d[2] for d in done]).reshape(len(done), m.size, w.size),
                     cpu=np.array([d[3] for d in done]), m=m, w=w)
    cpu = sum(d[3] for d in done)
    print(f"{len(done)} toys, {cpu:.0f} CPU-s ({cpu / len(done):.1f} per toy, "
          f"{cpu / len(done) / m.size / w.size * 1e3:.0f} ms per lattice point), "
          f"{time.time() - t0:.0f} s wall; saved {a.save}")


def calibrate(a: argparse.Namespace) -> None:
    from scipy import stats

    from toyengine.summary._common import clopper_pearson
    from toyengine.summary.lee import calibrate as gv

    d = np.load(a.scans)
    t, fields = d["t"], d["scan"]
    ok = np.isfinite(t) & np.all(np.isfinite(fields.reshape(len(t), -1)), axis=1)
    t, fields = t[ok], fields[ok]
    lmax = fields.reshape(len(t), -1).max(axis=1)
    gap = t - lmax
    print(f"{len(t)} toy scans on a {fields.shape[1]} x {fields.shape[2]} lattice "
          f"(m {d['m'][0]:g}..{d['m'][-1]:g}, width {d['w'][0]:g}..{d['w'][-1]:g} MeV)")
    print(f"engine t − lattice max: median {np.median(gap):.3f}, 90 % {np.quantile(gap, 0.9):.3f},"
          f" max {gap.max():.3f}; lattice above the engine by > 0.01 in "
          f"{int(np.sum(gap < -0.01))} toys")
    # the plain toys' tail: the scanned toys' own t, or the files given (which may hold
    # the scanned toys too: then they replace them)
    tp = np.concatenate([np.load(f)["t"] for f in a.plain]) if a.plain else t
    tp = tp[np.isfinite(tp)]
    for levels in a.levels:
        cal = gv(fields, tuple(levels), dof=a.dof)
        p, dp = cal.p_global(a.t_obs)
        z, dz = cal.z_global(a.t_obs)
        print(f"levels {levels}: mean φ {np.round(cal.means, 3).tolist()}, N1 "
              f"{cal.coefficients[0]:.3g}, N2 {cal.coefficients[1]:.3g}; p(t ≥ {a.t_obs}) "
              f"= {p:.3g} ± {dp:.2g} ({dp / p:.0%}), Z = {z:.2f} ± {dz:.2f}")
        # the extrapolation describes the lattice's maximum; the engine's t lies above it
        # by the toys' gaps: with those gaps at t_obs too, P(t ≥ t_obs) is the mean over
        # toys of P(lattice max ≥ t_obs − gap)
        pg = float(np.mean([cal.p_global(a.t_obs - g)[0] for g in np.maximum(gap, 0.0)]))
        print(f"    with the engine's gaps above the lattice: p = {pg:.3g} "
              f"(Z = {stats.norm.isf(pg / 2):.2f})")
        for u in a.check:
            k = int(np.sum(tp >= u))
            lo, hi = clopper_pearson(k, tp.size)
            pu, du = cal.p_global(u)
            print(f"    t ≥ {u:g}: extrapolated {pu:.4f} ± {du:.4f}; plain toys {k}/{tp.size}"
                  f" = {k / tp.size:.4f} [{lo:.4f}, {hi:.4f}]; χ²(8) {stats.chi2.sf(u, 8):.4f}")
    print(f"χ²(8) at {a.t_obs}: p = {stats.chi2.sf(a.t_obs, 8):.3g}, "
          f"Z = {stats.norm.isf(stats.chi2.sf(a.t_obs, 8) / 2):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scan")
    s.add_argument("study")
    s.add_argument("--toys", type=int, default=60)
    s.add_argument("--first", type=int, default=0)
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--m-points", type=int, default=121)
    s.add_argument("--w-points", type=int, default=8)
    s.add_argument("--save", type=Path, required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("scans", type=Path)
    c.add_argument("--plain", type=Path, nargs="*", default=[])
    c.add_argument("--dof", type=float, default=2.0)
    c.add_argument("--t-obs", type=float, default=41.4)
    c.add_argument("--levels", type=float, nargs=2, action="append", default=None)
    c.add_argument("--check", type=float, nargs="*", default=[10.0, 12.0, 15.0, 20.0])
    a = ap.parse_args()
    if a.cmd == "scan":
        scan(a)
    else:
        a.levels = a.levels or [(1.0, 3.0), (2.0, 5.0)]
        calibrate(a)


if __name__ == "__main__":
    main()
