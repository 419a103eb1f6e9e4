"""Benchmark: toys needed for a target precision on a model-variation shift, paired vs
unpaired (T_cc+ fit-model systematics, LHCb, Nature Physics 18 (2022) 751, Methods).

Reads a model-variation store generated with common random numbers (``paired = 1``) and,
per variant, compares three estimates of the shift of parameter ``--param``:

* **paired**: mean over toys of (fit to the variant's data − fit to its nominal twin); its
  per-toy spread is ``σ_d`` and ``N = (σ_d / target)²`` toys reach the target;
* **unpaired vs reference**: ensemble mean − generation value; ``N = (σ_v / target)²``
  (this also carries the nominal fit bias into the shift);
* **unpaired vs nominal ensemble**: difference of two independent ensemble means;
  ``N = (σ_v² + σ_n²) / target²`` toys per variant.

The ensemble spreads ``σ_v``, ``σ_n`` of a paired store are those of independent ensembles
(pairing changes the joint, not the marginal, distribution), so one store gives all three.
``ρ`` is the per-toy correlation between the variant's and the nominal fit.

With ``--dalitz N`` it also measures, for the Zc(4100) Dalitz model (LHCb, Eur. Phys. J. C
78 (2018) 1019), the per-toy correlation of the fitted ``m_zc`` between the nominal model
and the barrier-radius variant (r = 3 GeV⁻¹) generated with the same data streams
(proposals and acceptance shared per component) versus independent streams.

Usage::

    python benchmarks/bench_paired_toys.py STORE [--param delta_m] [--target 0.001]
    python benchmarks/bench_paired_toys.py --dalitz 10
"""

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def store_table(store: str, param: str, target: float, hypothesis: str | None) -> None:
    from toyengine import open_results
    from toyengine.summary._common import default_hypothesis, fit_masks

    ds = open_results(store)
    hyp = hypothesis or default_hypothesis(ds)
    _, valid = fit_masks(ds)
    ok = valid.sel(hypothesis=hyp).transpose("variant", "toy").values
    vals = ds["value"].sel(hypothesis=hyp, param=param).transpose("variant", "toy").values
    names = [str(x) for x in ds["variant_name"].values]
    groups = [str(x) for x in ds["variant_group"].values]
    nom = next(i for i, g in enumerate(groups) if g.lower() == "nominal")
    print(f"store {store}: paired={ds.attrs.get('paired')}, {ds.sizes['toy']} toys, "
          f"param {param}, target {target:g}")
    head = (f"{'variant':<18} {'σ_v':>9} {'σ_d':>9} {'ρ':>7} {'N paired':>9} "
            f"{'N vs ref':>9} {'N vs nom':>9} {'gain':>7}")
    print(head)
    print("-" * len(head))
    sig_n = float(np.std(vals[nom][ok[nom]], ddof=1))
    for v, name in enumerate(names):
        if v == nom:
            continue
        m = ok[v] & ok[nom] & np.isfinite(vals[v]) & np.isfinite(vals[nom])
        if m.sum() < 3:
            print(f"{name:<18} (fewer than 3 pairs)")
            continue
        sv = float(np.std(vals[v][ok[v]], ddof=1))
        sd = float(np.std(vals[v][m] - vals[nom][m], ddof=1))
        rho = float(np.corrcoef(vals[v][m], vals[nom][m])[0, 1])
        n_p = max(1, math.ceil((sd / target) ** 2))
        n_ref = math.ceil((sv / target) ** 2)
        n_nom = math.ceil((sv**2 + sig_n**2) / target**2)
        print(f"{name:<18} {sv:9.4g} {sd:9.3g} {rho:7.4f} {n_p:9d} {n_ref:9d} {n_nom:9d} "
              f"{n_nom / n_p:7.0f}")


def dalitz_correlation(n_toys: int) -> None:
    from toyengine.core.fit import fit
    from toyengine.models.zc4100 import build_zc4100
    from toyengine.study.seeds import data_streams

    nominal = build_zc4100({"maps": "synthetic"})
    variant = build_zc4100({"maps": "synthetic", "r_kpi": 3.0, "r_etacpi": 3.0})
    k = nominal.parameters.names.index("m_zc")
    out = {"paired": ([], []), "independent": ([], [])}
    t0 = time.perf_counter()
    for t in range(n_toys):
        for mode in out:
            s_n = data_streams(101, t)
            s_v = data_streams(101, t) if mode == "paired" else data_streams(101, t, variant=1)
            for model, s, acc in ((nominal, s_n, out[mode][0]), (variant, s_v, out[mode][1])):
                data = model.sample(model.parameters.values, s)
                res = fit(nominal.nll(data), nominal.parameters)
                acc.append(res.values[k] if res.valid else math.nan)
    print(f"Dalitz Zc(4100): {n_toys} toys per mode in {time.perf_counter() - t0:.0f} s; "
          "fitted m_zc, nominal model fitted to nominal and r = 3 GeV^-1 data")
    for mode, (a, b) in out.items():
        a, b = np.asarray(a), np.asarray(b)
        m = np.isfinite(a) & np.isfinite(b)
        rho = float(np.corrcoef(a[m], b[m])[0, 1])
        sd = float(np.std(a[m] - b[m], ddof=1))
        print(f"  {mode:<12} ρ = {rho:.3f}, σ(per-toy difference) = {sd:.3g} MeV "
              f"({m.sum()} valid pairs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", nargs="?")
    ap.add_argument("--param", default="delta_m")
    ap.add_argument("--target", type=float, default=0.001, help="precision (param units)")
    ap.add_argument("--hypothesis")
    ap.add_argument("--dalitz", type=int, default=0, help="toys for the Dalitz correlation")
    a = ap.parse_args()
    if a.store:
        store_table(a.store, a.param, a.target, a.hypothesis)
    if a.dalitz:
        dalitz_correlation(a.dalitz)


if __name__ == "__main__":
    main()
