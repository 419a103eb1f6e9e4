"""Significance and J^P-rejection summaries of toy studies.

:func:`significance_summary` assembles, for one variant, the toy distribution of the test
statistic (:mod:`.teststat`), its p-values and significances (:mod:`.pvalues`), the fitted
effective ndof (:mod:`.ndof`) and the look-elsewhere correction (:mod:`.lee`) into a
:class:`SignificanceSummary` and its tables; :func:`variant_significance` summarises the
spread of t over the variants of a fixed-data variation study (:class:`SpreadSummary`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from ..study.kinds import kind_info
from ._common import CL_1SIGMA, SummaryError, attr_float, fit_masks, fmt_num, jsonable
from .importance import ImportanceP, mixture_weights, pareto_k_threshold, weighted_pvalue
from .lee import LEECalibration, calibrate
from .ndof import GOF_REJECT, Chi2Fit, fit_chi2_ndof
from .pvalues import PValue, TailCheck, chi2_pvalue, empirical_pvalue, p_to_z, z_to_p
from .tables import Cell, Table
from .teststat import test_statistic, variant_index

__all__ = [
    "SignificanceSummary",
    "gaussian_pvalue",
    "importance_estimate",
    "lee_calibration",
    "significance_summary",
]


@dataclass(frozen=True)
class SignificanceSummary:
    """Toy distribution of t for one variant of a significance or J^P-rejection study.

    Attributes
    ----------
    kind, study_name, variant, variant_name, h0, h1 : str / int
        What was summarised.
    n_toys : int
        Toy slots of this variant in the store.
    n_done : int
        Toys where both fits were attempted.
    n_failed_h0, n_failed_h1 : int
        Attempted fits that did not converge, per hypothesis.
    n_used : int
        Toys with a finite t (both fits converged, unless ``include_failed``); of an
        importance-sampled store only those generated under h0.
    failed_fraction : float
        ``(n_done − n_finite) / n_done``, ``n_finite`` the toys with a finite t.
    n_negative : int
        Used toys with ``t < 0`` (for nested hypotheses: minimiser noise; for J^P: expected).
    t_mean, t_std : float
        Of the used toys.
    ndof_wilks : float
        Wilks' expected ndof (``attrs["ndof_wilks"]``; 1 by default for J^P).
    chi2_fit : Chi2Fit or None
        Fitted ndof (only for nested kinds, where t ≥ 0 holds).
    observed_t : float
        ``attrs["observed_t"]`` (NaN if the study has none).
    pvalues : tuple of PValue
        p and Z of ``observed_t`` from χ²(Wilks ndof), χ²(fitted ndof) and the toys. For a
        J^P study this is the rejection level of h0.
    tail : tuple of TailCheck
        Toy tail fractions at the χ² thresholds of 1, 2, 3σ.
    include_failed : bool
    p_toys, p_toys_interval, p_toys_count : float, (lo, hi), (n_exceed, n_toys)
        Toy p-value of ``observed_t``, its Clopper–Pearson interval and the counts. The
        toys repeat the whole fit, scan included: this p-value is a global one.
    z_toys, z_toys_is_lower_limit : float, bool
        Two-sided Z of ``p_toys``; when no toy exceeds, the Z of the interval's upper end,
        a lower limit.
    z_chi2_wilks : float
        Two-sided Z from χ²(Wilks ndof).
    ndof_mixture, ndof_mixture_err, z_mixture : float
        The χ² fit (``chi2_fit``; by default the zero-mass mixture ``w δ(0) + (1−w) χ²(k)``)
        and the Z it gives.
    z_local : float
        Z at fixed scan parameters (the local significance of Gross & Vitells: χ²_s with
        s = ``lee_dof``, halved when one-sided); NaN without a look-elsewhere scan.
    p_global, p_global_err, z_global, z_global_err : float
        Look-elsewhere-corrected p and Z from the Gross–Vitells extrapolation calibrated
        on the toys' scans (:mod:`toyengine.summary.lee`), with the calibration error.
    lee : dict or None
        The calibration (dimension, dof, levels, mean counts, coefficients, scans used).
    importance : dict or None
        For an importance-sampled store (``log_ratio``): ``p``, its standard ``error``,
        ``ess`` (effective sample size), ``top_share`` (the largest toy's share of p),
        ``pareto_k`` and ``reliable`` (the tail diagnostic of
        :attr:`~toyengine.summary.importance.ImportanceP.reliable`), ``n_exceed``,
        ``n_toys``, ``fraction``, ``inject`` and ``inject_points``. ``p_toys`` is then this
        weighted estimate with the interval ``p ± error``; every unweighted statistic (mean,
        χ² fit, tail checks) uses only the toys drawn from the null model (``n_used`` counts
        them).
    """

    kind: str
    study_name: str
    variant: int
    variant_name: str
    h0: str
    h1: str
    n_toys: int
    n_done: int
    n_failed_h0: int
    n_failed_h1: int
    n_used: int
    failed_fraction: float
    n_negative: int
    t_mean: float
    t_std: float
    ndof_wilks: float
    chi2_fit: Chi2Fit | None
    observed_t: float
    pvalues: tuple[PValue, ...] = field(default=())
    tail: tuple[TailCheck, ...] = field(default=())
    include_failed: bool = False
    p_toys: float = math.nan
    p_toys_interval: tuple[float, float] = (math.nan, math.nan)
    p_toys_count: tuple[int, int] = (0, 0)
    z_toys: float = math.nan
    z_toys_is_lower_limit: bool = False
    z_chi2_wilks: float = math.nan
    ndof_mixture: float = math.nan
    ndof_mixture_err: float = math.nan
    z_mixture: float = math.nan
    z_local: float = math.nan
    p_global: float = math.nan
    p_global_err: float = math.nan
    z_global: float = math.nan
    z_global_err: float = math.nan
    lee: dict[str, Any] | None = None
    importance: dict[str, Any] | None = None
    #: parameters fixed at their nominal values where a signal is off (flat there; store
    #: attribute ``fixed_flat``), as one line; "" for none
    fixed_flat: str = ""

    @property
    def is_rejection(self) -> bool:
        """True for J^P-style studies (p-values are rejection levels of h0)."""
        return not kind_info(self.kind).nested

    def pvalue(self, method: str) -> PValue:
        """The entry of :attr:`pvalues` whose method starts with ``method`` (wilks/fitted/toys)."""
        for pv in self.pvalues:
            if pv.method.startswith(method):
                return pv
        msg = f"no p-value by method {method!r}; have {[p.method for p in self.pvalues]}"
        raise SummaryError(msg)

    def __repr__(self) -> str:
        return "\n".join(t.to_text() for t in self.tables())

    def _repr_html_(self) -> str:
        return "\n".join(t.to_html() for t in self.tables())

    def tables(self) -> list[Table]:
        """Display tables: toy bookkeeping and χ² fit; p-values of observed t; tail checks."""
        tables = [self._toys_table()]
        head = self._headline_table()
        if head is not None:
            tables.append(head)
        if self.pvalues:
            tables.append(self._pvalue_table())
        if self.tail:
            tables.append(self._tail_table())
        return tables

    @property
    def _rejected_flag(self) -> str:
        """`` !`` after a number from a fitted χ² that the toys reject, else nothing."""
        return " !" if self.chi2_fit is not None and self.chi2_fit.rejected else ""

    @property
    def _rejected_note(self) -> tuple[str, ...]:
        """The note explaining :attr:`_rejected_flag`, where it is shown."""
        if not self._rejected_flag:
            return ()
        assert self.chi2_fit is not None
        return (f"! = the toys reject the fitted χ² (goodness-of-fit p "
                f"{fmt_num(self.chi2_fit.gof_pvalue, 2)} < {GOF_REJECT:g}): its p and Z are "
                "not supported by them; quote the toys' p.",)

    def _toys_table(self) -> Table:
        """Toy bookkeeping, the χ² description of the toy t and the observed t."""
        what = "J^P rejection" if self.is_rejection else "Significance"
        label = f"{self.variant_name} " if self.variant_name else ""
        rows: list[tuple[str, str, object]] = [
            ("hypotheses (t = 2(nll_h0 − nll_h1))", f"h0={self.h0}, h1={self.h1}", ""),
            ("toy slots / done / used" + (" (generated under h0)" if self.importance else ""),
             f"{self.n_toys} / {self.n_done} / {self.n_used}", ""),
            ("failed fits h0 / h1", f"{self.n_failed_h0} / {self.n_failed_h1}", ""),
            ("failed-fit fraction", fmt_num(self.failed_fraction), self.failed_fraction),
            ("toys with t < 0", str(self.n_negative), self.n_negative),
            ("mean / std of t", f"{fmt_num(self.t_mean)} / {fmt_num(self.t_std)}", self.t_mean),
            ("Wilks ndof", fmt_num(self.ndof_wilks), self.ndof_wilks),
        ]
        if self.fixed_flat:
            rows.append(("fixed at nominal (flat with the signal off)", self.fixed_flat, ""))
        f = self.chi2_fit
        if f is not None:
            rows.append(("fitted ndof", f"{fmt_num(f.ndof, 4)} ± {fmt_num(f.ndof_err, 2)}", f.ndof))
            if f.fit_scale:
                rows.append(
                    ("fitted scale", f"{fmt_num(f.scale, 4)} ± {fmt_num(f.scale_err, 2)}", f.scale)
                )
            if f.zero_fraction > 0:
                rows.append(
                    (
                        "fitted point mass at t = 0",
                        f"{fmt_num(f.zero_fraction, 3)} ± {fmt_num(f.zero_fraction_err, 2)}",
                        f.zero_fraction,
                    )
                )
            if math.isfinite(self.ndof_wilks) and f.ndof_err > 0:
                dev = (f.ndof - self.ndof_wilks) / f.ndof_err
                rows.append(("(fitted − Wilks) / error", fmt_num(dev, 2), dev))
            rows.append(
                (
                    "χ² description GOF p (Pearson, KS)",
                    f"{fmt_num(f.gof_pvalue, 2)} (χ²={fmt_num(f.gof_chi2)}/{f.gof_ndof}), "
                    f"{fmt_num(f.ks_pvalue, 2)}",
                    f.gof_pvalue,
                )
            )
            rows.append(
                (
                    "t<0 clipped (below −tol) / censored",
                    f"{f.n_negative} ({f.n_negative_large}) / {f.n_censored}",
                    f.n_negative,
                )
            )
        rows.append(("observed t", fmt_num(self.observed_t, 4), self.observed_t))
        return Table(
            title=f"{what} toys — {label}(variant {self.variant}, kind {self.kind})",
            headers=(Cell.of("quantity"), Cell.of("value")),
            rows=tuple((Cell.of(a), Cell.of(b)) for a, b, _ in rows),
            csv_header=("quantity", "value"),
            csv_rows=tuple((a, v if v != "" else b) for a, b, v in rows),
            align="ll",
        )

    def _pvalue_table(self) -> Table:
        """p-value and Z of the observed t, one row per method."""
        hdr = ("method", "ndof", "p", "p range", "Z one-sided", "Z two-sided", "Z2 range")
        cells = []
        raw = []
        for pv in self.pvalues:
            cnt = (f" ({pv.n_exceed}/{pv.n_toys})" if pv.n_exceed >= 0 and pv.n_toys >= 0
                   else f" ({pv.n_toys} toys)" if pv.n_toys >= 0 else "")
            prange = (
                f"[{fmt_num(pv.p_lo, 2)}, {fmt_num(pv.p_hi, 2)}]{cnt}"
                if pv.p_lo != pv.p_hi or pv.n_toys >= 0
                else ""
            )
            zr = (
                f"[{fmt_num(pv.z_two_lo, 3)}, {fmt_num(pv.z_two_hi, 3)}]"
                if pv.z_two_lo != pv.z_two_hi
                else ""
            )
            method = pv.method + (self._rejected_flag if pv.method.startswith("fitted")
                                  else "")
            if pv.n_toys > 0 and pv.n_exceed == 0:
                # no toy exceeds: p < p_hi, so Z is a lower limit (not ∞)
                z_one_txt = f"> {fmt_num(p_to_z(pv.p_hi, 'one'), 3)}"
                z_two_txt = f"> {fmt_num(pv.z_two_lo, 3)}"
                zr = ""
            else:
                z_one_txt, z_two_txt = fmt_num(pv.z_one, 3), fmt_num(pv.z_two, 3)
            cells.append(
                (
                    method,
                    fmt_num(pv.ndof, 4),
                    fmt_num(pv.p, 4),
                    prange,
                    z_one_txt,
                    z_two_txt,
                    zr,
                )
            )
            raw.append(
                (
                    pv.method,
                    pv.ndof,
                    pv.p,
                    pv.p_lo,
                    pv.p_hi,
                    pv.z_one,
                    pv.z_two,
                    pv.z_two_lo,
                    pv.z_two_hi,
                    pv.n_exceed,
                    pv.n_toys,
                )
            )
        title = "Rejection level of h0" if self.is_rejection else "Significance"
        return Table(
            title=f"{title} of observed t = {fmt_num(self.observed_t, 4)}",
            headers=tuple(Cell.of(h) for h in hdr),
            rows=tuple(tuple(Cell.of(c) for c in r) for r in cells),
            csv_header=(
                "method",
                "ndof",
                "p",
                "p_lo",
                "p_hi",
                "z_one_sided",
                "z_two_sided",
                "z_two_sided_lo",
                "z_two_sided_hi",
                "n_exceed",
                "n_toys",
            ),
            csv_rows=tuple(raw),
            notes=(
                "Z one-sided = Φ⁻¹(1−p); Z two-sided = Φ⁻¹(1−p/2) (LHCb convention). "
                "Toy p = n_exceed/n_toys with Clopper–Pearson 68.27% interval; when no "
                "toy exceeds, Z > the Z of the interval's upper end.",
                *self._rejected_note,
            ),
            align="lrrlrrl",
        )

    def _tail_table(self) -> Table:
        """Toy tail fractions at the χ² thresholds of given Z."""
        return Table(
            title="Toy tail fractions at χ² thresholds",
            headers=tuple(
                Cell.of(h)
                for h in ("Z (two-sided)", "ndof", "t threshold", "p χ²", "p toys", "CP")
            ),
            rows=tuple(
                tuple(
                    Cell.of(c)
                    for c in (
                        fmt_num(tc.z, 2),
                        fmt_num(tc.ndof, 4),
                        fmt_num(tc.threshold, 4),
                        fmt_num(tc.p_expected, 3),
                        f"{fmt_num(tc.p_toys, 3)} ({tc.n_exceed}/{tc.n_toys})",
                        f"[{fmt_num(tc.lo, 2)}, {fmt_num(tc.hi, 2)}]",
                    )
                )
                for tc in self.tail
            ),
            csv_header=(
                "z",
                "ndof",
                "threshold",
                "p_expected",
                "p_toys",
                "lo",
                "hi",
                "n_exceed",
                "n_toys",
            ),
            csv_rows=tuple(
                (
                    tc.z,
                    tc.ndof,
                    tc.threshold,
                    tc.p_expected,
                    tc.p_toys,
                    tc.lo,
                    tc.hi,
                    tc.n_exceed,
                    tc.n_toys,
                )
                for tc in self.tail
            ),
        )

    def _headline_table(self) -> Table | None:
        """Toy, Wilks, mixture, local and global Z at the observed t (the JSON keys)."""
        if self.is_rejection or not math.isfinite(self.observed_t):
            return None
        if self.n_used == 0:  # never a headline from nothing
            return Table(
                title=f"Significance of observed t = {fmt_num(self.observed_t, 4)}: headline",
                headers=(Cell.of("quantity"), Cell.of("value")),
                rows=((Cell.of("result"), Cell.of(
                    f"none: 0 usable toys of {self.n_done} done (failed fits h0 / h1 "
                    f"{self.n_failed_h0} / {self.n_failed_h1})")),),
                csv_header=("quantity", "value"), csv_rows=(("result", math.nan),),
                align="ll")
        rows: list[tuple[str, str, float]] = []
        k, n = self.p_toys_count
        imp = self.importance
        if imp is not None:
            if self.z_toys_is_lower_limit:
                rows.append(("p_toys importance-sampled (n_exceed / n_toys)",
                             f"< {fmt_num(imp['upper_limit'], 2)} ({k}/{n}, weight bound)",
                             imp["upper_limit"]))
            else:
                rows.append(("p_toys importance-sampled (n_exceed / n_toys)",
                             f"{fmt_num(self.p_toys, 3)} ± {fmt_num(imp['error'], 2)} "
                             f"({k}/{n})", self.p_toys))
            rows.append(("effective sample size", fmt_num(imp["ess"], 4), imp["ess"]))
            if imp["n_exceed"]:
                rows.append(("largest toy's share of p_toys", fmt_num(imp["top_share"], 2),
                             imp["top_share"]))
                rows.append(("Pareto k̂ of the weighted tail (reliable below "
                             f"{fmt_num(imp['k_threshold'], 2)})",
                             f"{fmt_num(imp['pareto_k'], 2)}"
                             f"{'' if imp['reliable'] else ': NOT reliable'}",
                             imp["pareto_k"]))
        elif n:
            lo, hi = self.p_toys_interval
            rows.append(("p_toys (n_exceed / n_toys) [CP 68%]",
                         f"{fmt_num(self.p_toys, 3)} ({k}/{n}) [{fmt_num(lo, 2)}, "
                         f"{fmt_num(hi, 2)}]", self.p_toys))
        if imp is not None or n:
            z = fmt_num(self.z_toys, 3)
            rows.append(("Z toys", f"> {z} (no toy exceeds)" if self.z_toys_is_lower_limit
                         else z, self.z_toys))
        rows.append(("Z χ²(Wilks ndof)", fmt_num(self.z_chi2_wilks, 3), self.z_chi2_wilks))
        if math.isfinite(self.ndof_mixture):
            rows.append(("Z mixture (ndof_mixture)",
                         f"{fmt_num(self.z_mixture, 3)} ({fmt_num(self.ndof_mixture, 3)} ± "
                         f"{fmt_num(self.ndof_mixture_err, 2)})" + self._rejected_flag,
                         self.z_mixture))
        if self.lee is not None:
            rows.append(("Z local (fixed scan parameters)", fmt_num(self.z_local, 3),
                         self.z_local))
            rows.append(("p global (Gross–Vitells)",
                         f"{fmt_num(self.p_global, 3)} ± {fmt_num(self.p_global_err, 2)}",
                         self.p_global))
            rows.append(("Z global (Gross–Vitells)",
                         f"{fmt_num(self.z_global, 3)} ± {fmt_num(self.z_global_err, 2)}",
                         self.z_global))
        notes = ["Two-sided Z = Φ⁻¹(1 − p/2). The toys repeat the whole fit (scan included), "
                 "so p_toys is a global p-value.", *self._rejected_note]
        if imp is not None:
            notes.append(
                f"Importance sampling: {fmt_num(100 * imp['fraction'], 3)} % of the toys "
                f"generated from {_injected_text(imp)}, the rest "
                "under "
                "h0; p_toys = mean of w·1[t ≥ t_obs] with w = p_h0/p_mixture, ± its "
                "standard error.")
            if imp["n_exceed"] and not imp["reliable"]:
                notes.append(
                    f"The importance-sampled p_toys is NOT reliable: the Pareto shape of its "
                    f"largest terms is k̂ = {fmt_num(imp['pareto_k'], 2)} (reliable below "
                    f"{fmt_num(imp['k_threshold'], 2)}; Vehtari et al., J. Mach. Learn. Res. "
                    "25 (2024) 72), so a few toys the injected models rarely generate carry "
                    "it, and both the estimate and its error can move by factors as more "
                    "toys come in. Inject where the largest-weight toys' H1 fits lie.")
        if self.lee is not None:
            lee = self.lee
            profiled = " (2-D scan profiled over its 2nd axis)" \
                if lee["dim"] < lee["scan_dims"] else ""
            notes.append(
                f"Look-elsewhere: {self.lee['dim']}-D Gross–Vitells extrapolation{profiled}, "
                "local "
                f"χ²({self.lee['dof']:g}){' one-sided' if self.lee['one_sided'] else ''}, "
                f"calibrated on {self.lee['n_scans']} toy scans at u = "
                f"{', '.join(f'{u:g}' for u in self.lee['levels'])}.")
        return Table(
            title=f"Significance of observed t = {fmt_num(self.observed_t, 4)}: headline",
            headers=(Cell.of("quantity"), Cell.of("value")),
            rows=tuple((Cell.of(a), Cell.of(b)) for a, b, _ in rows),
            csv_header=("quantity", "value"),
            csv_rows=tuple((a, v) for a, _, v in rows),
            notes=tuple(notes),
            align="ll",
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible dict (NaN → None)."""
        return jsonable(self)  # type: ignore[no-any-return]

    def to_text(self) -> str:
        """All tables as plain text."""
        return "\n".join(t.to_text() for t in self.tables())

    def to_markdown(self) -> str:
        """All tables as Markdown."""
        return "\n".join(t.to_markdown() for t in self.tables())


def gaussian_pvalue(t: np.ndarray, t_obs: float) -> PValue:
    """The rejection level of h0 at ``t_obs`` from a Gaussian description of the toys' t.

    For separate (non-nested) hypotheses, such as two spin-parity assignments of one state,
    t = 2 (nll_h0 − nll_h1) is asymptotically normal (D. R. Cox, J. R. Stat. Soc. B 24
    (1962) 406), and an observed t far beyond every toy is judged by the normal tail at the
    sample mean m and standard deviation s of the toys: p = 1 − Φ((t_obs − m) / s). The
    range propagates the errors of m and s (s/√n and s/√(2(n − 1))) into
    d = (t_obs − m)/s, δd = √(1/n + d²/(2(n − 1))), and is ``p`` at d ∓ δd. It is an
    extrapolation: the toys' own count (method ``toys``) is the check where it is not 0.
    """
    t = np.asarray(t, dtype=float)
    n = t.size
    m, sd = float(np.mean(t)), float(np.std(t, ddof=1))
    d = (t_obs - m) / sd
    dd = math.sqrt(1.0 / n + d * d / (2.0 * (n - 1)))
    p = float(stats.norm.sf(d))
    return PValue.make("gaussian extrapolation of the toys", math.nan, p,
                       float(stats.norm.sf(d + dd)), float(stats.norm.sf(d - dd)), -1, n)


def _fit_pvalue(fit: Chi2Fit, t_obs: float) -> PValue:
    p = fit.pvalue(t_obs)
    ks = [max(fit.ndof - fit.ndof_err, 1e-3), fit.ndof + fit.ndof_err]
    w = fit.zero_fraction
    ps = [(1.0 - w) * float(stats.chi2.sf(t_obs / fit.scale, k)) for k in ks]
    return PValue.make(f"fitted χ²(ndof={fmt_num(fit.ndof, 3)})", fit.ndof, p, min(ps), max(ps))


def _headline(ds: xr.Dataset, v: int, used: np.ndarray, t_obs: float, ndof_w: float,
              fit: Chi2Fit | None, cl: float, imp: ImportanceP | None) -> dict[str, Any]:
    """The headline numbers at ``t_obs``: toy p and Z (importance-sampled when ``imp`` is
    given), Z from Wilks and from the fitted mixture, local and look-elsewhere-corrected
    global Z (Gross–Vitells)."""
    out: dict[str, Any] = {}
    if fit is not None:
        out.update(ndof_mixture=fit.ndof, ndof_mixture_err=fit.ndof_err)
    lee = lee_calibration(ds, v)
    if lee is not None:
        out["lee"] = {"dim": lee.dim, "dof": lee.dof, "one_sided": lee.one_sided,
                      "scan_dims": len([k for k in np.atleast_1d(ds.attrs.get("scan_grid", []))
                                        if int(k) > 1]),
                      "levels": list(lee.levels), "mean_counts": list(lee.means),
                      "coefficients": list(lee.coefficients), "n_scans": lee.n_scans}
    if not math.isfinite(t_obs):
        return out
    if imp is not None:
        # no toy beyond t_obs: p = 0 ± 0 says nothing; quote the weight-bound upper limit
        # and the Z it gives as a lower limit, as the unweighted p-value does
        none = imp.n_exceed == 0
        upper = imp.upper_limit(cl)
        out.update(p_toys=imp.p, p_toys_interval=(0.0, upper) if none else
                   (max(imp.p - imp.error, 0.0), imp.p + imp.error),
                   p_toys_count=(imp.n_exceed, imp.n_toys),
                   z_toys=float(p_to_z(upper if none else imp.p)), z_toys_is_lower_limit=none,
                   importance={"p": imp.p, "error": imp.error, "ess": imp.ess,
                               "top_share": imp.top_share, "pareto_k": imp.pareto_k,
                               "k_threshold": pareto_k_threshold(imp.n_toys),
                               "reliable": imp.reliable,
                               "n_exceed": imp.n_exceed, "n_toys": imp.n_toys,
                               "fraction": imp.alt_fraction, "upper_limit": upper,
                               "family": ds.attrs.get("importance_family") or None,
                               **_injected(str(ds.attrs.get("importance_inject", "")).split())})
    elif used.size:
        e = empirical_pvalue(used, t_obs, cl)
        lower = e.n_exceed == 0
        out.update(p_toys=e.p, p_toys_interval=(e.lo, e.hi), p_toys_count=(e.n_exceed,
                   e.n_toys), z_toys=float(p_to_z(e.hi if lower else e.p)),
                   z_toys_is_lower_limit=lower)
    if math.isfinite(ndof_w):
        out["z_chi2_wilks"] = float(p_to_z(chi2_pvalue(t_obs, ndof_w)))
    if fit is not None:
        out["z_mixture"] = float(p_to_z(fit.pvalue(t_obs)))
    if lee is not None:
        p, dp = lee.p_global(t_obs)
        z, dz = lee.z_global(t_obs)
        out.update(z_local=float(p_to_z(lee.p_local(t_obs))), p_global=p, p_global_err=dp,
                   z_global=z, z_global_err=dz)
    return out


def importance_estimate(ds: xr.Dataset, variant: int, t_obs: float,
                        t: np.ndarray) -> ImportanceP | None:
    """The importance-sampled ``P_0(t ≥ t_obs)`` of variant ``variant`` of a store with
    ``log_ratio`` (:func:`~toyengine.summary.importance.weighted_pvalue` of the toys' t
    with their defensive-mixture weights), or None for a store without importance
    sampling or with fewer than two toys generated. ``t``: the variant's test statistic per
    toy (NaN: failed or not run)."""
    if "log_ratio" not in ds.variables:
        return None
    a = float(ds.attrs["importance_fraction"])
    lr = np.asarray(ds["log_ratio"].isel(variant=variant).values, dtype=float)
    done = np.asarray(ds["sampled_from"].isel(variant=variant).values) >= 0
    if np.count_nonzero(done & ~np.isnan(np.asarray(t, dtype=float))) < 2:
        return None
    return weighted_pvalue(np.asarray(t, dtype=float)[done], mixture_weights(lr[done], a),
                           t_obs, a)


def lee_calibration(ds: xr.Dataset, variant: int = 0,
                    levels: tuple[float, ...] = ()) -> LEECalibration | None:
    """Gross–Vitells calibration from the toys' look-elsewhere scans (``scan_t``), or None
    when the store has none. The grid axes with a single point are dropped (a 12 × 1 grid
    is a 1-D scan). A 2-D calibration with a non-positive coefficient (an unresolved second
    direction) falls back to 1-D upcrossings of the scan maximised over its second axis."""
    if "scan_t" not in ds.variables:
        return None
    grid = [int(k) for k in np.atleast_1d(ds.attrs.get("scan_grid", []))]
    scans = np.asarray(ds["scan_t"].isel(variant=variant).values, dtype=float)
    scans = scans[np.all(np.isfinite(scans), axis=1)]
    if scans.shape[0] < 2 or not grid:
        return None
    shape = [k for k in grid if k > 1]
    if not 1 <= len(shape) <= 2:
        return None
    kw = {"dof": float(ds.attrs.get("lee_dof", 1)),
          "one_sided": bool(ds.attrs.get("lee_one_sided", 0))}
    fields = scans.reshape(scans.shape[0], *shape)
    cal = calibrate(fields, levels, **kw)
    if cal.dim == 2 and min(cal.coefficients) <= 0:
        # Euler-characteristic coefficients are intrinsic volumes (> 0): a non-positive one
        # means the grid or the toys cannot resolve the second direction. Fall back to the
        # 1-D upcrossings of the profile over it (max over the second scan parameter).
        cal = calibrate(fields.max(axis=2), levels[:1] if levels else (), **kw)
    return cal


def significance_summary(
    ds: xr.Dataset,
    variant: int | str = 0,
    *,
    include_failed: bool = False,
    fit_scale: bool = False,
    zero_mass: bool = True,
    cl: float = CL_1SIGMA,
    tail_z: Sequence[float] = (1.0, 2.0, 3.0),
    min_toys_for_fit: int = 20,
) -> SignificanceSummary:
    """Summarise the toy t distribution of a significance or J^P-rejection study.

    LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5: the Zc significance quotes χ²(ndof = 8)
    for Δ(−2 ln L) = 41.4 (4.8σ, two-sided) after checking with toys generated under "no Zc"
    that t follows χ²(8); the 0⁺ rejection quotes χ²(1) for 18.6 (4.3σ) after checking with
    toys generated under 0⁺.

    Uses attrs ``h0``, ``h1``, ``ndof_wilks`` and ``observed_t``. For ``kind ==
    "jp_rejection"`` (non-nested hypotheses, t may be negative) no χ² is fitted and the Wilks
    ndof defaults to 1 (the paper: "assuming a χ² distribution with one degree of freedom").

    Parameters
    ----------
    ds : xarray.Dataset
        Results store.
    variant : int or str
        Variant index or name (significance studies usually have one).
    include_failed : bool
        Use attempted-but-invalid fits with finite nll (see :func:`test_statistic`).
    fit_scale : bool
        Also fit a scale in the χ²-ndof fit.
    zero_mass : bool
        Fit a point mass at t = 0 in the χ²-ndof fit (default; see
        :func:`fit_chi2_ndof`): a signal yield bounded at zero puts a finite fraction of the
        toys at t = 0, which the censored single χ² misdescribes.
    cl : float
        Clopper–Pearson confidence level.
    tail_z : sequence of float
        Two-sided Z levels of the tail checks.
    min_toys_for_fit : int
        Fewer usable toys than this → no χ² fit (``chi2_fit=None``).
    """
    v = variant_index(ds, variant)
    t_all = test_statistic(ds, include_failed=include_failed)
    h0, h1 = t_all.attrs["h0"], t_all.attrs["h1"]
    kind = str(ds.attrs.get("kind", ""))
    tv = np.asarray(t_all.isel(variant=v).values, dtype=float)
    done, valid = fit_masks(ds)
    d0 = np.asarray(done.isel(variant=v).sel(hypothesis=h0).values, bool)
    d1 = np.asarray(done.isel(variant=v).sel(hypothesis=h1).values, bool)
    v0 = np.asarray(valid.isel(variant=v).sel(hypothesis=h0).values, bool)
    v1 = np.asarray(valid.isel(variant=v).sel(hypothesis=h1).values, bool)
    n_toys = int(tv.size)
    n_done = int(np.count_nonzero(d0 & d1))
    if "sampled_from" in ds.variables:  # importance sampling: the toys of the null model
        null = np.asarray(ds["sampled_from"].isel(variant=v).values) == 0
        used = tv[np.isfinite(tv) & null]
    else:
        used = tv[np.isfinite(tv)]
    n_used = int(used.size)
    n_finite = int(np.count_nonzero(np.isfinite(tv)))
    failed_fraction = (n_done - n_finite) / n_done if n_done else math.nan

    nested = kind_info(kind).nested
    ndof_w = attr_float(ds, "ndof_wilks")
    if not (ndof_w > 0):
        ndof_w = 1.0 if not nested else math.nan
    fit = None
    if nested and n_used >= min_toys_for_fit:
        try:
            fit = fit_chi2_ndof(used, scale=fit_scale, zero_mass=zero_mass)
        except SummaryError:  # (almost) all t at 0: nothing to fit; reported as no fit
            fit = None
    t_obs = attr_float(ds, "observed_t")

    imp = importance_estimate(ds, v, t_obs, tv) if nested and math.isfinite(t_obs) else None
    pvalues: list[PValue] = []
    if math.isfinite(t_obs):
        if math.isfinite(ndof_w):
            p = float(chi2_pvalue(t_obs, ndof_w))
            pvalues.append(PValue.make(f"wilks χ²(ndof={ndof_w:g})", ndof_w, p, p, p))
        if fit is not None:
            pvalues.append(_fit_pvalue(fit, t_obs))
        if imp is not None:
            pvalues.append(PValue.make("toys (importance-sampled, p ± error)", math.nan,
                                       imp.p, max(imp.p - imp.error, 0.0), imp.p + imp.error,
                                       imp.n_exceed, imp.n_toys))
        elif n_used:
            e = empirical_pvalue(used, t_obs, cl)
            pvalues.append(PValue.make("toys", math.nan, e.p, e.lo, e.hi, e.n_exceed, e.n_toys))
        if not nested and n_used >= min_toys_for_fit:
            pvalues.append(gaussian_pvalue(used, t_obs))

    tail: list[TailCheck] = []
    ndof_ref = ndof_w if math.isfinite(ndof_w) else (fit.ndof if fit is not None else math.nan)
    if n_used and math.isfinite(ndof_ref):
        for z in tail_z:
            pe = float(z_to_p(z, "two"))
            thr = float(stats.chi2.isf(pe, ndof_ref))
            e = empirical_pvalue(used, thr, cl)
            tail.append(TailCheck(float(z), ndof_ref, thr, pe, e.p, e.lo, e.hi, e.n_exceed, n_used))

    extra = _headline(ds, v, used, t_obs, ndof_w, fit, cl, imp) if nested else {}
    names = ds["variant_name"].values if "variant_name" in ds else None
    return SignificanceSummary(**extra,
        kind=kind,
        study_name=str(ds.attrs.get("study_name", "")),
        variant=v,
        variant_name=str(names[v]) if names is not None else "",
        h0=h0,
        h1=h1,
        n_toys=n_toys,
        n_done=n_done,
        n_failed_h0=int(np.count_nonzero(d0 & ~v0)),
        n_failed_h1=int(np.count_nonzero(d1 & ~v1)),
        n_used=n_used,
        failed_fraction=failed_fraction,
        n_negative=int(np.count_nonzero(used < 0)),
        t_mean=float(np.mean(used)) if n_used else math.nan,
        t_std=float(np.std(used, ddof=1)) if n_used > 1 else math.nan,
        ndof_wilks=ndof_w,
        chi2_fit=fit,
        observed_t=t_obs,
        pvalues=tuple(pvalues),
        tail=tuple(tail),
        include_failed=include_failed,
        fixed_flat=_fixed_flat_note(ds.attrs.get("fixed_flat")),
    )


def _fixed_flat_note(raw: object) -> str:
    """The store attribute ``fixed_flat`` (``{hypothesis: {off, flat, always}}``, JSON) as
    one line: which parameters the fits fixed at nominal because a signal was off."""
    if not raw:
        return ""
    import json

    parts = []
    for h, d in json.loads(str(raw)).items():
        when = "every fit" if d["always"] else "fits with " + ", ".join(d["off"]) + " = 0"
        parts.append(f"{h}: {', '.join(d['flat'])} in {when}")
    return "; ".join(parts)


def _injected(names: list[str]) -> dict[str, Any]:
    """The injected components as the summary records them: ``inject``, the models, and
    ``inject_points``, the number of parameter points when one model is injected at the
    points of ``importance.points`` (the store names them ``H1[0]``, ``H1[1]``, …; listing
    thousands of them says nothing), else ``None``."""
    pointed = bool(names) and all(n.endswith("]") and "[" in n for n in names)
    models = sorted({n.rpartition("[")[0] for n in names}) if pointed else list(names)
    if pointed and len(models) == 1:
        return {"inject": models, "inject_points": len(names)}
    return {"inject": list(names), "inject_points": None}


def _injected_text(imp: dict[str, Any]) -> str:
    """The injected components for the summary's note: the models (equal shares), ``"H1 at
    K parameter points"`` for one model injected at K points (:func:`_injected`), or one
    model at a signal drawn for each toy (``importance.family``)."""
    if imp.get("family"):
        return (f"{imp['inject'][0]} at a signal drawn for each toy ({imp['family']}; "
                "weights in the space of data set and signal)")
    if imp.get("inject_points"):
        return f"{imp['inject'][0]} at {imp['inject_points']} parameter points (equal shares)"
    return ", ".join(imp["inject"]) + (" (equal shares)" if len(imp["inject"]) > 1 else "")
