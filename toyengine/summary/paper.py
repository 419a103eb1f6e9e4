"""The significance table as a paper prints it (LHCb, Eur. Phys. J. C 78 (2018) 1019,
Sect. 6.5 and Table 5): the observed Δ(−2 ln L) on the reference data set, its p-value and
Z from the toys and from χ², the fitted ndof beside the quoted one, and the local and
look-elsewhere-corrected global Z, each with the number of toys behind it.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from ._common import CL_1SIGMA, fmt_num
from .pvalues import chi2_pvalue, empirical_pvalue, p_to_z
from .significance import gaussian_pvalue, lee_calibration, significance_summary
from .tables import Cell, Table
from .teststat import test_statistic, variant_index

__all__ = ["significance_paper_table"]


def significance_paper_table(ds: xr.Dataset, *, t_reference: float | None = None,
                             variant: int | str = 0, cl: float = CL_1SIGMA) -> Table:
    """One row per number a paper quotes for a significance (or J^P rejection), each with
    its toy count.

    Parameters
    ----------
    ds : xarray.Dataset
        Results store of a ``significance`` or ``jp_rejection`` study.
    t_reference : float, optional
        Δ(−2 ln L) of the study's fit on the reference data set (its ``data:`` file,
        fitted with the same search as the toys). Default: the study's ``test.observed``
        (the paper's value), which the table also prints as such.
    variant : int or str
        Variant index or name.
    cl : float
        Confidence level of the Clopper–Pearson interval of the plain toy p-value.

    Returns
    -------
    Table
        Rows: observed t; p and Z from χ²(quoted ndof); plain toy p and Z; for a J^P
        rejection the Gaussian extrapolation of the toys' t
        (:func:`~toyengine.summary.significance.gaussian_pvalue`); the
        importance-sampled toy p (its slot reads "not run" for a store without
        importance sampling); the fitted ndof (zero-mass χ² mixture) ± error beside the
        quoted ndof and the Z it gives; local and global Z (Gross & Vitells, Eur. Phys.
        J. C 70 (2010) 525) from the toys' look-elsewhere scans ("no fit.scan" without).
        Two-sided Z = Φ⁻¹(1 − p/2), the LHCb convention.
    """
    s = significance_summary(ds, variant, cl=cl)
    v = variant_index(ds, variant)
    t_paper = s.observed_t
    t_obs = float(t_reference) if t_reference is not None else t_paper
    tv = np.asarray(test_statistic(ds).isel(variant=v).values, dtype=float)
    if "sampled_from" in ds.variables:
        tv = tv[np.asarray(ds["sampled_from"].isel(variant=v).values) == 0]
    used = tv[np.isfinite(tv)]
    rows: list[tuple[str, str, str, float]] = []
    source = ("reference data set" if t_reference is not None else "the study's test.observed")
    rows.append((f"Δ(−2 ln L) observed ({source})", fmt_num(t_obs, 4),
                 f"paper {fmt_num(t_paper, 4)}" if t_reference is not None
                 and math.isfinite(t_paper) else "", t_obs))
    if math.isfinite(s.ndof_wilks) and math.isfinite(t_obs):
        p = float(chi2_pvalue(t_obs, s.ndof_wilks))
        rows.append((f"p, Z from χ²(ndof = {s.ndof_wilks:g})",
                     f"{fmt_num(p, 3)}, {fmt_num(float(p_to_z(p)), 3)}σ", "—", p))
    if used.size and math.isfinite(t_obs):
        e = empirical_pvalue(used, t_obs, cl)
        lower = e.n_exceed == 0
        z = float(p_to_z(e.hi if lower else e.p))
        ztxt = f"> {fmt_num(z, 3)}σ" if lower else f"{fmt_num(z, 3)}σ"
        rows.append(("p, Z from toys (plain)",
                     f"{fmt_num(e.p, 3)} [{fmt_num(e.lo, 2)}, {fmt_num(e.hi, 2)}], {ztxt}",
                     f"{e.n_exceed}/{e.n_toys}", e.p))
    if s.is_rejection and used.size >= 20 and math.isfinite(t_obs):
        g = gaussian_pvalue(used, t_obs)
        rows.append(("p, Z from the toys' Gaussian (extrapolated)",
                     f"{fmt_num(g.p, 3)} [{fmt_num(g.p_lo, 2)}, {fmt_num(g.p_hi, 2)}], "
                     f"{fmt_num(g.z_two, 3)}σ", f"{g.n_toys}", g.p))
    imp = s.importance
    if imp is not None and t_reference is None and imp["n_exceed"] == 0:
        # no toy beyond t_obs: the weight-bound upper limit and a lower limit on Z
        rows.append(("p, Z from toys (importance-sampled)",
                     f"< {fmt_num(imp['upper_limit'], 2)} (no toy beyond t_obs, weight "
                     f"bound), > {fmt_num(s.z_toys, 3)}σ", f"0/{imp['n_toys']}",
                     imp["upper_limit"]))
    elif imp is not None and t_reference is None:
        rows.append(("p, Z from toys (importance-sampled)",
                     f"{fmt_num(imp['p'], 3)} ± {fmt_num(imp['error'], 2)} (ESS "
                     f"{fmt_num(imp['ess'], 3)}, largest toy {fmt_num(imp['top_share'], 2)} "
                     f"of p, Pareto k̂ {fmt_num(imp['pareto_k'], 2)}"
                     f"{'' if imp['reliable'] else ': NOT reliable'}), "
                     f"{fmt_num(s.z_toys, 3)}σ",
                     f"{imp['n_exceed']}/{imp['n_toys']}", imp["p"]))
    else:
        rows.append(("p, Z from toys (importance-sampled)", "not run"
                     if imp is None else "at the study's test.observed only", "—", math.nan))
    f = s.chi2_fit
    if f is not None:
        dev = ((f.ndof - s.ndof_wilks) / f.ndof_err
               if f.ndof_err > 0 and math.isfinite(s.ndof_wilks) else math.nan)
        rows.append(("fitted ndof (χ² with a point mass at t = 0)",
                     f"{fmt_num(f.ndof, 3)} ± {fmt_num(f.ndof_err, 2)} (quoted "
                     f"{s.ndof_wilks:g}, {fmt_num(dev, 2)} σ apart)", f"{s.n_used}", f.ndof))
        if math.isfinite(t_obs):
            z = float(p_to_z(f.pvalue(t_obs)))
            txt = f"{fmt_num(z, 3)}σ"
            if f.rejected:  # a number the toys do not support is never shown bare
                txt += (f" (the toys reject this χ²: goodness-of-fit p "
                        f"{fmt_num(f.gof_pvalue, 2)})")
            rows.append(("Z from the fitted χ²", txt, f"{s.n_used}", z))
    lee = lee_calibration(ds, v)
    if lee is not None and math.isfinite(t_obs):
        zl = float(p_to_z(lee.p_local(t_obs)))
        zg, dzg = lee.z_global(t_obs)
        rows.append(("Z local (fixed scan parameters)", f"{fmt_num(zl, 3)}σ", "—", zl))
        rows.append(("Z global (look-elsewhere, Gross–Vitells)",
                     f"{fmt_num(zg, 3)} ± {fmt_num(dzg, 2)}σ", f"{lee.n_scans} scans", zg))
    elif not s.is_rejection:
        rows.append(("Z local / global (look-elsewhere)", "no fit.scan in the study", "—",
                     math.nan))
    what = "Rejection of h0" if s.is_rejection else "Significance"
    return Table(
        title=f"{what} — {s.study_name} (h0 = {s.h0}, h1 = {s.h1})",
        headers=(Cell.of("quantity"), Cell.of("value"), Cell.of("toys")),
        rows=tuple((Cell.of(a), Cell.of(b), Cell.of(c)) for a, b, c, _ in rows),
        csv_header=("quantity", "value", "toys"),
        csv_rows=tuple((a, x, c) for a, _, c, x in rows),
        notes=("Two-sided Z = Φ⁻¹(1 − p/2). Plain toy p = n_exceed / n_toys with its "
               "Clopper–Pearson interval; with none exceeding, Z is a lower limit.",),
        align="lll",
    )
