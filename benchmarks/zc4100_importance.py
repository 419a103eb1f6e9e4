"""Importance-sampled Z_c(4100)− significance: write the study file and check its proposal.

``write`` prints ``studies/zc4100/significance.yaml`` (its fit and search unchanged) with
``importance:`` added: H1 (J^P = 1−) injected at a grid of points (Eur. Phys. J. C 78 (2018)
1019: t_obs = 41.4), every Z_c width of ``--widths`` (MeV) at masses ``--mass-step`` × width
apart over the fit's mass range, ``--phases`` coupling phases at each. The null's large-t
toys are narrow states at any mass (at the 40 MeV width limit most often), so the grid is
fine against the width of the likelihood's peak: half a mass step costs ≈ D (δm / (Γ/2))²
in ln L at a signal of log-likelihood ratio D, half a phase step ≈ D δφ². At each point the
coupling magnitude gives ``KL(p_k ‖ p_0) = --kl`` and the other free parameters sit where H1
is closest to the null (:func:`profiled_points`), so that the H0 fit cannot absorb the
injected signal (with ``--kl 16`` the injected toys' median t is 34 and 31 % of them reach
41.4; the true KL at the points, with the coupling's quadratic term, has median 18).

``check STORE [STORE …] [--points K] [--upto N]`` prints, at several thresholds, the
importance-sampled P_0(t ≥ c) with its error, effective sample size, largest toy's share
and Pareto k̂ (is the estimate reliable?), the count of the toys generated under h0 alone
(a plain estimate), and χ²(8), χ²(9): a proposal that covers the null tail agrees with the
plain count where that count is not small. Several stores of the same points are pooled;
with ``--points K`` only the first K points count (the toys drawn from the others left
out), so that a store whose run added points pools with the one it came from.

``heavy STUDY STORE`` prints STUDY (the file STORE was run with) with more injected points:
H1 at the full fitted vectors (every column of ``importance.points``, not only the Z_c mass,
width and coupling) of the ``--n`` toys beyond ``--threshold`` with the largest weights, and
a new ``--seed``; with ``--signal-only``, at those toys' Z_c mass, width and coupling only,
the other parameters where H1 is closest to the null (as ``write`` puts them: the weight
compares H1 and the null at the null's own values of the other parameters, which a toy's
fitted values are not). Those toys' fits moved parameters that the grid's points hold where
H1 is closest to the null, so no point explains them: the best point's log ratio lay 2–6
below t/2 for the heaviest toys of the first runs, above it for typical toys beyond 41.4. A
proposal built from one store is run with another seed (its toys are then independent of the
ones that chose it).

Usage::

    python benchmarks/zc4100_importance.py write > tmp/zc_is.yaml
    toyengine run tmp/zc_is.yaml --store tmp/zc_is.zarr --workers 2
    python benchmarks/zc4100_importance.py check tmp/zc_is.zarr
    python benchmarks/zc4100_importance.py heavy tmp/zc_is.yaml tmp/zc_is.zarr > tmp/zc_is2.yaml
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np

STUDY = Path(__file__).resolve().parents[1] / "studies" / "zc4100" / "significance.yaml"


def grid(widths: list[float], mass_step: float, phases: int,
         mass_range: tuple[float, float] = (3400.0, 4600.0)) -> np.ndarray:
    """``(K, 3)`` rows ``(mass, width, phase)`` of the injected points: for each width,
    masses from the range's lower end in steps of ``mass_step`` × width (the upper end
    included), and at each (mass, width) ``phases`` phases of the coupling."""
    rows = []
    lo, hi = mass_range
    for w in widths:
        n = math.ceil((hi - lo) / (mass_step * w))
        for m in np.linspace(lo, hi, n + 1):
            rows += [(float(m), float(w), 2.0 * math.pi * k / phases) for k in range(phases)]
    return np.array(rows)


def profiled_points(rows: np.ndarray, target: float | None) -> dict[str, list[float]]:
    """Columns of ``importance.points``: H1 at each ``(mass, width, phase)`` with the
    coupling magnitude that gives ``KL(p_k ‖ p_0) = target`` (or, with ``target`` None, at
    each ``(mass, width, re, im)`` with that coupling) and the other free parameters
    moved to where H1 is closest to the null, to first order in the coupling c:
    ``δν = −I_νν⁻¹ I_νc c``, ``KL = ½ cᵀ (I_cc − I_cν I_νν⁻¹ I_νc) c`` with I the Fisher
    information on the null's Asimov data set at c = 0 (Cowan, Cranmer, Gross, Vitells,
    Eur. Phys. J. C 71 (2011) 1554). A signal whose shape the null's parameters can partly
    mimic (broad states) is otherwise absorbed by the H0 fit: its toys reach t ≥ t_obs only
    with log ratios far above t/2, where the weights are negligible."""
    from toyengine.study.reference import generator_model
    from toyengine.study.spec import build_model, load_spec

    spec = load_spec(STUDY)
    v = spec.variants[0]
    h0, h1 = generator_model(spec, v), build_model(spec, v, "H1")
    names = list(h1.parameters.names)
    idx = {n: i for i, n in enumerate(names)}
    zc = ("m_zc", "w_zc", "re_zc", "im_zc")
    nu = [i for i in np.flatnonzero(h1.parameters.free_mask) if names[i] not in zc]
    cz = [idx["re_zc"], idx["im_zc"]]
    x0 = np.asarray(h1.parameters.values, dtype=float).copy()
    x0[cz] = 0.0
    nll = h1.nll(*h0.asimov())
    lo, hi, _ = h1.parameters.limit_arrays
    cols: dict[str, list[float]] = {n: [] for n in (*zc, *(names[i] for i in nu))}
    cache: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}
    for row in rows:
        m, w = float(row[0]), float(row[1])
        if (m, w) not in cache:
            x = x0.copy()
            x[idx["m_zc"]], x[idx["w_zc"]] = m, w
            h = nll.expected_hessian(x)
            b = -np.linalg.solve(h[np.ix_(nu, nu)], h[np.ix_(nu, cz)])
            cache[(m, w)] = (b, h[np.ix_(cz, cz)] + h[np.ix_(nu, cz)].T @ b)
        b, schur = cache[(m, w)]
        if target is None:
            c = np.array([float(row[2]), float(row[3])])
        else:
            u = np.array([math.cos(row[2]), math.sin(row[2])])
            c = u * math.sqrt(2.0 * target / float(u @ schur @ u))
        # within the limits (a few LASS points would cross a_lass's lower one): any
        # proposal gives an unbiased estimate, this one only a less efficient one there
        shift = np.clip(x0[nu] + b @ c, lo[nu], hi[nu])
        for n, val in zip(zc, (m, w, c[0], c[1]), strict=True):
            cols[n].append(float(val))
        for i, val in zip(nu, shift, strict=True):
            cols[names[i]].append(float(val))
    return cols


def write(args: argparse.Namespace) -> None:
    text = STUDY.read_text()
    text = re.sub(r"(?m)^name: .*$", "name: zc4100-significance-importance", text)
    text = re.sub(r"(?m)^seed: .*$", f"seed: {args.seed}", text)
    text = re.sub(r"(?m)^toys: .*$", f"toys: {args.toys}", text)
    cols = profiled_points(grid(args.widths, args.mass_step, args.phases), args.kl)
    body = ", ".join(f"{k}: [{', '.join(f'{v:.6g}' for v in col)}]" for k, col in cols.items())
    n = len(cols["m_zc"])
    print(f"# {n} injected points of H1: widths {args.widths} MeV, mass steps "
          f"{args.mass_step} x width, {args.phases} phases, KL to the null {args.kl}")
    print(text.rstrip("\n"))
    print(f"importance: {{inject: [H1], fraction: {args.fraction}, points: {{{body}}}}}")


def _importance_toys(store: str, points: int | None, upto: int | None) -> dict:
    """The toys of one importance-sampled store as a sample of the mixture over its first
    ``points`` injected points (all of them if None).

    The toys drawn from the other points (``sampled_from`` > ``points``) are left out: the
    component of every toy is an independent draw, so the others are an independent sample
    of the mixture restricted to h0 and the first ``points`` points, whose fraction of
    injected points is ``a' = a (K'/K) / (1 − a (K − K')/K)``."""
    import yaml

    from toyengine import open_results

    ds = open_results(store, allow_incomplete=True)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    cols = yaml.load(ds.attrs["study_yaml"], Loader=loader)["importance"]["points"]
    k_all = len(next(iter(cols.values())))
    k = k_all if points is None else points
    if not 0 < k <= k_all:
        raise SystemExit(f"{store}: --points {k} is not within its {k_all} injected points")
    upto = ds.sizes["toy"] if upto is None else upto
    nll = ds["nll"].values[0, :upto]
    sf = ds["sampled_from"].values[0, :upto]
    a = float(ds.attrs["importance_fraction"])
    keep = (sf >= 0) & (sf <= k)
    return {"store": store, "t": 2.0 * (nll[keep, 0] - nll[keep, 1]), "sf": sf[keep],
            "lr": ds["log_ratio"].values[0, :upto][keep][:, :k],
            "a": a * (k / k_all) / (1.0 - a * (k_all - k) / k_all),
            "points": {c: [float(v) for v in col[:k]] for c, col in cols.items()},
            "done": int(np.sum(sf >= 0)), "left_out": int(np.sum(sf > k))}


def check(args: argparse.Namespace) -> None:
    from scipy import stats

    from toyengine.summary.importance import mixture_weights, weighted_pvalue

    runs = [_importance_toys(s, args.points, args.upto) for s in args.store]
    for r in runs[1:]:
        if r["points"] != runs[0]["points"]:
            raise SystemExit(f"{r['store']} and {runs[0]['store']} do not share their "
                             f"injected points (--points K: pool their first K)")
    # several runs of the same points with their own fractions: one mixture whose
    # fractions are the toy-weighted means (the balance heuristic of multiple importance
    # sampling, Veach & Guibas, SIGGRAPH '95 419), every toy weighted against it
    n = [r["t"].size for r in runs]
    a = float(np.dot(n, [r["a"] for r in runs]) / sum(n))
    t = np.concatenate([r["t"] for r in runs])
    sf = np.concatenate([r["sf"] for r in runs])
    w = mixture_weights(np.concatenate([r["lr"] for r in runs]), a)
    h0 = t[(sf == 0) & np.isfinite(t)]
    for r in runs:
        print(f"{r['store']}: {r['done']} toys done, {r['left_out']} of them drawn from "
              f"points beyond the first {r['lr'].shape[1]} (left out)")
    print(f"{t.size} toys of the mixture (fraction {a:.5f} over {runs[0]['lr'].shape[1]} "
          f"points), {h0.size} generated under h0; mean weight {np.nanmean(w):.3f}")
    for c in args.thresholds:
        r = weighted_pvalue(t, w, c, a)
        print(f"t >= {c:5.1f}: importance {r.p:.3g} ± {r.error:.2g} (ess {r.ess:.1f}, "
              f"{r.n_exceed} beyond, largest toy {r.top_share:.2f} of p, Pareto k̂ "
              f"{r.pareto_k:.2f}: {'reliable' if r.reliable else 'NOT reliable'}); "
              f"h0 share {int((h0 >= c).sum())}/{h0.size}; chi2(8) {stats.chi2.sf(c, 8):.3g}, "
              f"chi2(9) {stats.chi2.sf(c, 9):.3g}")


def heavy(args: argparse.Namespace) -> None:
    import yaml

    from toyengine import open_results
    from toyengine.summary.importance import mixture_weights

    ds = open_results(args.store, allow_incomplete=True)
    nll = ds["nll"].values[0]
    t = 2.0 * (nll[:, 0] - nll[:, 1])
    w = mixture_weights(ds["log_ratio"].values[0], float(ds.attrs["importance_fraction"]))
    beyond = np.flatnonzero(np.isfinite(t) & np.isfinite(w) & (t >= args.threshold))
    chosen = beyond[np.argsort(-w[beyond], kind="stable")][:args.n]
    text = Path(args.study).read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    imp = yaml.load(text, Loader=loader)["importance"]
    points = {k: [float(v) for v in col] for k, col in imp["points"].items()}
    names = [str(n) for n in ds["param"].values]
    h1 = [str(h) for h in ds["hypothesis"].values].index(imp["inject"][0])
    fitted = ds["value"].values[0][:, h1, :]
    missing = [c for c in points if c not in names]
    if missing:
        raise SystemExit(f"the store has no values for the points' columns {missing}")
    share = w[chosen] / np.sum(w[beyond]) if beyond.size else w[chosen]
    print(f"# {len(chosen)} points added from {args.store}: H1 fitted at its toys "
          f"{chosen.tolist()} (t {np.round(t[chosen], 1).tolist()}, shares of the weight "
          f"beyond {args.threshold}: {np.round(share, 3).tolist()})")
    if args.signal_only:  # the toys' Z_c, the rest where H1 is closest to the null
        zc = [names.index(c) for c in ("m_zc", "w_zc", "re_zc", "im_zc")]
        added = profiled_points(fitted[chosen][:, zc], None)
    else:  # the toys' full fitted vectors
        added = {col: [float(fitted[toy, names.index(col)]) for toy in chosen]
                 for col in points}
    for col, values in points.items():
        values += added[col]
    body = ", ".join(f"{k}: [{', '.join(f'{v:.6g}' for v in col)}]" for k, col in points.items())
    line = (f"importance: {{inject: [{imp['inject'][0]}], fraction: {imp['fraction']}, "
            f"points: {{{body}}}}}")
    text = re.sub(r"(?m)^seed: .*$", f"seed: {args.seed}", text)
    text, n = re.subn(r"(?m)^importance: .*$", lambda _: line, text)
    if n != 1:
        raise SystemExit(f"{args.study}: expected one 'importance:' line (as `write` prints)")
    print(text.rstrip("\n"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pw = sub.add_parser("write")
    pw.add_argument("--toys", type=int, default=1000)
    # not the plain study's seed (180907): its toys stay independent of the plain ones
    pw.add_argument("--seed", type=int, default=20181019)
    pw.add_argument("--kl", type=float, default=16.0, help="KL(p_k || p_0) of every point")
    pw.add_argument("--phases", type=int, default=16)
    pw.add_argument("--mass-step", type=float, default=0.2, help="mass step / width")
    pw.add_argument("--widths", type=float, nargs="+",
                    default=[40.0, 63.4, 100.5, 159.2, 252.4, 400.0])
    pw.add_argument("--fraction", type=float, default=0.8)
    pc = sub.add_parser("check")
    pc.add_argument("store", nargs="+",
                    help="one store, or several run with the same points (pooled)")
    pc.add_argument("--points", type=int, default=None,
                    help="use the first POINTS injected points only (the toys drawn from "
                         "the others are left out), e.g. to pool stores whose points "
                         "differ only in the ones a later run added")
    pc.add_argument("--thresholds", type=float, nargs="+", default=[10, 15, 20, 30, 41.4])
    pc.add_argument("--upto", type=int, default=None,
                    help="only toys 0 … UPTO − 1 (how the estimate moved as toys came in)")
    ph = sub.add_parser("heavy")
    ph.add_argument("study", help="the study file the store was run with")
    ph.add_argument("store")
    ph.add_argument("--n", type=int, default=40, help="toys whose H1 fits join the points")
    ph.add_argument("--threshold", type=float, default=41.4)
    ph.add_argument("--seed", type=int, default=20181021)
    ph.add_argument("--signal-only", action="store_true",
                    help="take only the toys' Z_c mass, width and coupling; the other "
                         "parameters where H1 is closest to the null (as `write` does)")
    args = p.parse_args()
    {"write": write, "check": check, "heavy": heavy}[args.cmd](args)


if __name__ == "__main__":
    main()
