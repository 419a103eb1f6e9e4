"""Does the H1 fit of a significance study find its global minimum?

For toys of a significance study, refit H1 from a grid of starts over the model's two scan
parameters (plus the stored minimum) and count the toys whose t = 2 (nll_H0 − nll_H1) rises
by more than 0.01: those whose multi-start missed the global minimum. Also prints the
fitted ndof of t (censored single χ² and the zero-mass mixture).

The check's grid must differ from the study's own ``fit.profile`` grid (other cell
centres, e.g. a 12 x 4 check of a 10 x 3 profile), or the check is true by construction.

Prints the missed toys (index, rise of t, the scan parameters at the engine's and at
the grid's minimum) so that fit settings can be compared toy by toy. The grid refit does
not depend on the study's fit settings: ``--cache FILE`` keeps its minima per toy (JSON,
keyed by study, seed and grid), so a second setting costs only the engine's fits.

Usage::

    python benchmarks/global_h1_check.py studies/tcc/significance.yaml --toys 400 \\
        --workers 2 --grid 12 3 [--first K] [--starts N] [--profile NM NW BEST]
        [--refine N] [--line N] [--edges N] [--cache FILE] [--limit-row N]
        [--hyps h1|both]

With ``--limit-row N`` the check also starts from N points of the mass with the width at
its lower limit, where narrow states hide between a coarse grid's cells; ``--hyps both``
refits both hypotheses (J^P rejection: a missed minimum of the null lowers t too; for a
significance study H0 has no scan parameters and gets only the next check).

With ``--swave NAME NAME --swave-grid K`` every refitted hypothesis is also fitted (all
parameters free) from a K x K grid of cell centres over the two named parameters' ranges
(e.g. the LASS scattering length and effective range, whose second minima no start over
(m, Γ) reaches), the other parameters at the engine's minimum: a grid that coincides with
none of the engine's ``fit.restarts`` Halton points. Not cached (cheap beside the grid).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from toyengine.core.fit import fit, line_grid, scan_grid
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk, toy_nll_function
from toyengine.study.spec import build_model, load_spec
from toyengine.summary.ndof import fit_chi2_ndof


def _grid(model, shape, limit_row=0):
    """The check's starts: cell centres of a ``shape`` grid, plus ``limit_row`` points of the
    first scan parameter with the others at their lower limit (+ 0.1 % of the range; the
    engine's ``fit.profile.line`` sits at 0.2 %, and its points at other cell centres)."""
    names = model.scan_parameters
    pts = scan_grid(model.parameters, names, shape)
    if limit_row:
        row = line_grid(model.parameters, names, limit_row)
        for j, n in enumerate(names[1:], start=1):
            lo, hi = model.parameters[n].limits
            row[:, j] = lo + 0.001 * (hi - lo)
        pts = np.vstack([pts, row])
    return names, pts


def _refit(spec, t, hyp, v, shape, limit_row):
    """The lowest minimum of hypothesis ``hyp`` on toy ``t`` over full fits (all parameters
    free) from every start of :func:`_grid`: ``(nll, scan parameters there)``."""
    model = build_model(spec, v, hyp)
    names, pts = _grid(model, shape, limit_row)
    idx = [model.parameters.index(n) for n in names]
    # the likelihood exactly as the engine minimised it: the toy's data set and its
    # global observables in the constraint terms
    nll = toy_nll_function(spec, t, hyp, v.index)
    x0s = []
    for row in pts:
        x = model.parameters.values.copy()
        x[idx] = row
        x0s.append(x)
    best = fit(nll, model.parameters, extra_starts=x0s, hesse=False)
    return float(best.nll), [float(best.values[k]) for k in idx]


def _swave_refit(spec, t, hyp, v, names, k, at):
    """The lowest minimum of ``hyp`` on toy ``t`` over full fits from a ``k`` x ``k`` grid
    of cell centres over the ranges of ``names`` (the other parameters at ``at``, the
    engine's minimum): ``nll`` (inf when the model has none of ``names`` free)."""
    model = build_model(spec, v, hyp)
    present = [n for n in names if n in model.parameters and not model.parameters[n].fixed]
    if not present:
        return float("inf")
    pts = scan_grid(model.parameters, present, (k,) * len(present))
    idx = [model.parameters.index(n) for n in present]
    nll = toy_nll_function(spec, t, hyp, v.index)
    x0s = []
    for row in pts:
        x = np.array(at, dtype=float)
        x[idx] = row
        x0s.append(x)
    return float(fit(nll, model.parameters, extra_starts=x0s, hesse=False).nll)


def _work(args):
    (path, starts, profile, refine, start, stop, shape, cached, limit_row, hyps, line, edges,
     screen, swave, swave_grid) = args
    spec = load_spec(path)
    if starts is not None:
        spec = dataclasses.replace(spec, fit={**spec.fit, "starts": starts})
    if profile is not None:  # [] switches the study's profile starts off
        prof = ({"grid": profile[:-1], "best": profile[-1], "refine": refine}
                if profile else None)
        spec = dataclasses.replace(spec, fit={**spec.fit, "profile": prof})
    elif refine is not None and spec.fit.get("profile"):
        spec = dataclasses.replace(spec, fit={**spec.fit, "profile": {
            **spec.fit["profile"], "refine": refine}})
    for key, val in (("line", line), ("edges", edges), ("screen", screen)):
        if val is not None and spec.fit.get("profile"):
            spec = dataclasses.replace(spec, fit={**spec.fit, "profile": {
                **spec.fit["profile"], key: val}})
    plan = Plan.of(spec)
    cpu = time.process_time()
    res = run_chunk(plan, Chunk(0, 0, start, stop))
    cpu = (time.process_time() - cpu) / (stop - start)
    v = spec.variants[0]
    h0i = spec.hypotheses.index(spec.test["h0"])
    h1i = spec.hypotheses.index(spec.test["h1"])
    h1 = build_model(spec, v, spec.test["h1"])
    names = h1.scan_parameters
    cols = [list(plan.params).index(n) for n in names]
    todo = [spec.test["h1"], spec.test["h0"]] if hyps == "both" else [spec.test["h1"]]
    out = []
    for i, t in enumerate(range(start, stop)):
        grid = cached.get(str(t), {})
        for hyp in todo:
            if hyp not in grid:
                grid[hyp] = (_refit(spec, t, hyp, v, shape, limit_row)
                             if build_model(spec, v, hyp).scan_parameters
                             else (float("inf"), []))
        # the engine's minimum of each hypothesis, over the plan's parameter axis
        nll0 = res.arrays["nll"][i, h0i]
        nll1 = res.arrays["nll"][i, h1i]
        best = {hyp: grid[hyp][0] for hyp in todo}
        if swave:
            for hyp, h in ((spec.test["h1"], h1i), (spec.test["h0"], h0i)):
                if hyp not in todo:
                    continue
                model = build_model(spec, v, hyp)
                at = [float(res.arrays["value"][i, h, list(plan.params).index(n)])
                      for n in model.parameters.names]
                best[hyp] = min(best[hyp], _swave_refit(spec, t, hyp, v, swave, swave_grid,
                                                        at))
        ok = res.arrays["valid"][i, h0i] and res.arrays["valid"][i, h1i]
        at = [float(res.arrays["value"][i, h1i, c]) for c in cols]
        # a lower minimum of either hypothesis than the engine's: by how much (in t units)
        gain1 = max(2 * (nll1 - best[spec.test["h1"]]), 0.0)
        gain0 = max(2 * (nll0 - best[spec.test["h0"]]), 0.0) if hyps == "both" else 0.0
        out.append((t, 2 * (nll0 - nll1), 2 * (nll0 - nll1) + gain1 - gain0, ok,
                    res.arrays["n_best"][i, h1i], res.arrays["fit_time"][i].sum(),
                    at, grid, grid[spec.test["h1"]][1], gain1, gain0, cpu))
    return out


def _tail(t, observed, ndof) -> None:
    """Toy tail fractions of t beside χ²(ndof) (J^P rejection: is the χ² conversion of the
    observed t conservative?), each with its Clopper–Pearson 68 % interval."""
    from scipy import stats

    from toyengine.summary import clopper_pearson

    n = len(t)
    for c in (1.0, 2.706, 3.841, 6.635, *((observed,) if observed else ())):
        k = int((t >= c).sum())
        lo, hi = clopper_pearson(k, n)
        print(f"  t >= {c:g}: {k}/{n} = {k / n:.4f} [{lo:.4f}, {hi:.4f}]; "
              f"χ²({ndof}) {stats.chi2.sf(c, ndof):.2e}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("study")
    ap.add_argument("--toys", type=int, default=100)
    ap.add_argument("--first", type=int, default=0, help="index of the first toy")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--grid", type=int, nargs=2, default=(12, 3))
    ap.add_argument("--starts", type=int, default=None)
    ap.add_argument("--profile", type=int, nargs="*", default=None,
                    help="override fit.profile: grid sizes then best (e.g. 10 3 3); "
                    "no value: no profile starts")
    ap.add_argument("--refine", type=int, default=None,
                    help="override fit.profile.refine (with or without --profile)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="JSON file keeping the grid refit's minimum per toy")
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--limit-row", type=int, default=0,
                    help="also start from N points of the first scan parameter with the "
                    "others at their lower limit (+0.1 %% of the range)")
    ap.add_argument("--hyps", choices=("h1", "both"), default="h1",
                    help="refit H1 only, or both hypotheses (J^P rejection: a missed "
                    "minimum of either biases t)")
    ap.add_argument("--line", type=int, default=None, help="override fit.profile.line")
    ap.add_argument("--edges", type=int, default=None, help="override fit.profile.edges")
    ap.add_argument("--screen", type=int, default=None, help="override fit.profile.screen")
    ap.add_argument("--swave", nargs=2, default=None, metavar="NAME",
                    help="also refit from a grid over these two parameters (all free)")
    ap.add_argument("--swave-grid", type=int, default=3,
                    help="points per axis of the --swave grid (cell centres)")
    ap.add_argument("--save", type=Path, default=None,
                    help="write each toy's engine t and the grid refit's t (npz)")
    a = ap.parse_args()
    t0 = time.time()
    spec = load_spec(a.study)
    # the grid refit depends on the study's models and toys, not on where its file lies
    key = f"{spec.name}|seed {spec.seed}|grid {list(a.grid)}|limit row {a.limit_row}"
    store = json.loads(a.cache.read_text()) if a.cache and a.cache.exists() else {}
    cached = store.get(key, {})
    stop = a.first + a.toys
    jobs = [(a.study, a.starts, a.profile, a.refine, s, min(s + a.chunk, stop), tuple(a.grid),
             {k: v for k, v in cached.items() if s <= int(k) < min(s + a.chunk, stop)},
             a.limit_row, a.hyps, a.line, a.edges, a.screen, a.swave, a.swave_grid)
            for s in range(a.first, stop, a.chunk)]
    rows = []
    with ProcessPoolExecutor(a.workers) as ex:
        # each chunk's grid refits are cached as it ends: a stopped run keeps them
        for fut in as_completed([ex.submit(_work, j) for j in jobs]):
            chunk = fut.result()
            rows += chunk
            if a.save:  # each toy as its chunk ends: a stopped run keeps what it checked
                with a.save.with_suffix(".jsonl").open("a") as f:
                    for r in chunk:
                        f.write(json.dumps({"toy": r[0], "t": float(r[1]),
                                            "t_check": float(r[2]), "h1_gain": float(r[9]),
                                            "h0_gain": float(r[10]), "cpu": r[11]}) + "\n")
            if a.cache:
                store = json.loads(a.cache.read_text()) if a.cache.exists() else {}
                store.setdefault(key, {}).update({str(r[0]): r[7] for r in chunk})
                a.cache.write_text(json.dumps(store, indent=1))
            print(f"toys {chunk[0][0]}..{chunk[-1][0]} done ({len(rows)}/{a.toys}, "
                  f"{time.time() - t0:.0f} s): misses by > 0.01 so far "
                  f"{sum(r[2] - r[1] > 0.01 or r[9] > 0.01 or r[10] > 0.01 for r in rows)}",
                  flush=True)
    rows.sort(key=lambda r: r[0])
    _, t, t_grid, ok, n_best, ft = (np.array(c) for c in list(zip(*rows, strict=True))[:6])
    d = t_grid - t
    cpu = np.array([r[11] for r in rows])
    print(f"{a.study}: toys {a.first}..{stop - 1}, starts={a.starts}, profile={a.profile}, "
          f"refine={a.refine}, line={a.line}, edges={a.edges}, screen={a.screen}, "
          f"grid {a.grid} + limit row "
          f"{a.limit_row}, S-wave grid {a.swave} x {a.swave_grid}, "
          f"{time.time() - t0:.0f} s wall; fit time per toy {ft.mean():.2f} s (median "
          f"{np.median(ft):.2f} s); engine CPU per toy {cpu.mean():.2f} s")
    if a.hyps == "both":
        for j, label in ((9, "h1"), (10, "h0")):
            g = np.array([r[j] for r in rows])
            k = int((g > 0.01).sum())
            print(f"{label}: grid refit lowers its -2 ln L by > 0.01 in {k}/{len(g)}; "
                  f"max {g.max():.3f}")
    print(f"valid both: {ok.sum()}; t < -0.01: {(t < -0.01).sum()}; min t {np.nanmin(t):.4f}")
    n = len(d)
    for thr in (0.01, 0.5):
        k = int((d > thr).sum())
        print(f"grid refit raises t by > {thr}: {k}/{n} = {k / n:.3f} "
              f"(binomial error {np.sqrt(k * (n - k) / n) / n:.3f}); max {d.max():.3f}")
    for r, dt in zip(rows, d, strict=True):
        if dt > 0.01:
            print(f"  missed toy {r[0]}: t {r[1]:.3f} -> {r[1] + dt:.3f} (Δt {dt:.3f}); "
                  f"engine at {', '.join(f'{x:.1f}' for x in r[6])}, "
                  f"grid at {', '.join(f'{x:.1f}' for x in r[8])}")
    print(f"starts reaching the best minimum (H1): mean {n_best.mean():.2f}, "
          f"fraction with 1: {(n_best == 1).mean():.3f}")
    if a.save:
        np.savez(a.save, toy=np.array([r[0] for r in rows]), t=t, t_grid=t_grid, valid=ok)
    if a.hyps == "both":
        _tail(t[ok], spec.test.get("observed"), spec.test.get("ndof", 1))
    for label, tt in (("engine", t[ok]), ("after grid refit", t_grid[ok])):
        if a.hyps == "both" or np.count_nonzero(tt > 1e-6) < 20:
            print(f"{label}: no ndof fit (J^P t, or fewer than 20 toys with t > 0)")
            continue
        c = fit_chi2_ndof(tt)
        z = fit_chi2_ndof(tt, zero_mass=True)
        print(f"{label}: censored χ² ndof {c.ndof:.2f} ± {c.ndof_err:.2f} "
              f"(GOF p {c.gof_pvalue:.3f}); mixture ndof {z.ndof:.2f} ± {z.ndof_err:.2f}, "
              f"w0 {z.zero_fraction:.3f} "
              f"(GOF p {z.gof_pvalue:.3f})")


if __name__ == "__main__":
    main()
