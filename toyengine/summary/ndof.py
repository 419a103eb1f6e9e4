"""The effective number of degrees of freedom of a toy t distribution.

An unbinned maximum-likelihood fit of ``t / scale ~ χ²(k)``, or of the mixture
``w δ(0) + (1 − w) χ²(k)`` when the alternative fit can collapse onto the null one, with a
goodness-of-fit test of the fitted description. It checks the asymptotic χ² of Wilks' theorem
(S. S. Wilks, Ann. Math. Stat. 9 (1938) 60; for a parameter on a boundary, H. Chernoff, Ann.
Math. Stat. 25 (1954) 573) with toys, as LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5,
does for its χ²(8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr
from iminuit import Minuit
from scipy import special, stats

from ._common import SummaryError

__all__ = ["GOF_REJECT", "Chi2Fit", "fit_chi2_ndof"]

#: the toys reject a fitted χ² description whose goodness-of-fit p (Pearson) is below this;
#: its p-values and Z are then flagged, not quoted as supported by the toys
GOF_REJECT = 0.01


@dataclass(frozen=True)
class Chi2Fit:
    """Unbinned maximum-likelihood fit of ``t / scale ~ χ²(ndof)`` to toy values of t.

    Attributes
    ----------
    ndof, ndof_err : float
        Fitted effective number of degrees of freedom and its HESSE uncertainty.
    scale, scale_err : float
        Fitted scale (1 and 0 when not fitted).
    gof_pvalue : float
        p-value of a Pearson χ² test with equiprobable bins of the fitted distribution
        (``gof_chi2`` / ``gof_ndof`` = bins − 1 − fitted parameters; NaN when n is too small).
    n : int
        Number of values used (NaN inputs excluded; clipped negatives included).
    n_negative : int
        Values < 0 that were clipped to 0 (imperfect minimisation of the nested fits).
    n_negative_large : int
        Of those, values below ``-neg_tol``: large enough to indicate a failed h1 fit
        (the h1 minimum did not reach the h0 one). Inspect them.
    n_censored : int
        Values below ``zero_tol`` (after clipping), treated as left-censored.
    ks_pvalue : float
        Kolmogorov–Smirnov p-value against the fitted distribution (optimistic: the
        parameters were fitted on the same sample).
    valid : bool
        MIGRAD converged and HESSE is accurate.
    zero_fraction, zero_fraction_err : float
        Fitted point mass at t = 0 (``zero_mass=True``; else 0).
    """

    ndof: float
    ndof_err: float
    scale: float
    scale_err: float
    gof_pvalue: float
    n: int
    n_negative: int = 0
    n_negative_large: int = 0
    n_censored: int = 0
    zero_tol: float = 1e-6
    fit_scale: bool = False
    gof_chi2: float = math.nan
    gof_ndof: int = 0
    ks_pvalue: float = math.nan
    valid: bool = True
    correlation: float = 0.0
    zero_fraction: float = 0.0
    zero_fraction_err: float = 0.0

    @property
    def rejected(self) -> bool:
        """Do the toys reject this description (Pearson GOF p below :data:`GOF_REJECT`)?
        E.g. the maximum of t over a signal's (mass, width) search: narrower than any χ²,
        bounded away from 0 (Gross & Vitells, Eur. Phys. J. C 70 (2010) 525)."""
        return bool(self.gof_pvalue < GOF_REJECT)

    def pvalue(self, t: float) -> float:
        """``P(t' ≥ t)`` under the fitted description (incl. the point mass at 0, if fitted)."""
        p = float(stats.chi2.sf(t / self.scale, self.ndof))
        if self.zero_fraction > 0:
            p = (1.0 - self.zero_fraction) * p + (self.zero_fraction if t <= 0 else 0.0)
        return p


def _log_gammainc(a: float, x: float) -> float:
    """ln P(a, x) (regularised lower incomplete gamma), stable for tiny x."""
    v = float(special.gammainc(a, x))
    if v > 1e-300:
        return math.log(v)
    # series leading term: P(a, x) ≈ x^a e^{-x} / Γ(a + 1)
    return a * math.log(x) - x - float(special.gammaln(a + 1.0))


def _start_values(xp: np.ndarray, scale: bool, zero_frac: float | None
                  ) -> tuple[float, float, float]:
    """Starting ndof, scale and point-mass fraction (method of moments of ``xp``)."""
    mean = float(np.mean(xp))
    var = float(np.var(xp))
    if scale and var > 0:
        s0 = max(var / (2.0 * mean), 1e-3)
        k0 = max(mean / s0, 0.05)
    else:
        s0, k0 = 1.0, max(mean, 0.05)
    w0 = min(max(zero_frac, 0.01), 0.9) if zero_frac is not None else 0.0
    return k0, s0, w0


def _pearson_gof(x: np.ndarray, dist: Any, nb: int, npar: int, w_hat: float | None,
                 zero_tol: float) -> tuple[float, int, float]:
    """Pearson χ² of ``x`` in ``nb`` bins equiprobable under the fitted χ² ``dist`` (with a
    point mass ``w_hat`` at 0: one more bin [0, zero_tol)), its ndof (bins − 1 − ``npar``)
    and p-value; NaN with fewer than ``npar + 2`` bins."""
    n = x.size
    if nb < npar + 2:
        return math.nan, 0, math.nan
    if w_hat is not None:
        f0 = float(dist.cdf(zero_tol))
        q = f0 + (1.0 - f0) * np.arange(1, nb) / nb
        inner = np.concatenate(([zero_tol], dist.ppf(q)))
        expected = np.concatenate(
            ([n * (w_hat + (1 - w_hat) * f0)], np.full(nb, n * (1 - w_hat) * (1 - f0) / nb))
        )
    else:
        inner = dist.ppf(np.arange(1, nb) / nb)
        expected = np.full(nb, n / nb)
    counts = np.bincount(np.searchsorted(inner, x, side="right"), minlength=expected.size)
    keep = expected > 0
    gof_chi2 = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    gof_ndof = int(keep.sum()) - 1 - npar
    gof_p = float(stats.chi2.sf(gof_chi2, gof_ndof)) if gof_ndof > 0 else math.nan
    return gof_chi2, gof_ndof, gof_p


def fit_chi2_ndof(
    t: np.ndarray | Sequence[float] | xr.DataArray,
    scale: bool = False,
    *,
    zero_mass: bool = False,
    zero_tol: float = 1e-6,
    neg_tol: float = 1e-3,
    n_bins: int | None = None,
) -> Chi2Fit:
    """Fit a χ²(k) distribution (optionally × a scale) to toy values of t, k free.

    This is the check of LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5 ("the Δ(−2 ln L)
    distribution ... is found to be well described by a χ² probability density function with
    ndof = 8"; 1 dof for J^P).

    Method: unbinned maximum likelihood with iminuit (MIGRAD + HESSE, ``errordef = 0.5``).
    The χ² log-density is evaluated from the sufficient statistics ``Σ ln tᵢ`` and ``Σ tᵢ``
    so every likelihood call is O(1).

    Negative and zero values (documented handling):

    * ``t < 0`` arises when the h1 minimisation stops slightly above the h0 minimum
      (nested models have ``t ≥ 0`` mathematically). They are **clipped to 0** and counted
      (``n_negative``); those below ``-neg_tol`` are counted separately
      (``n_negative_large``) because they point to failed h1 fits rather than rounding.
    * Values below ``zero_tol`` (including the clipped ones) are **left-censored**: each
      contributes ``ln P(t ≤ zero_tol)`` instead of the log-density, which would be −∞ at 0
      for k > 2. For a pure χ² this is exact. Zeros are, however, very unlikely under χ²(k)
      with k > 2, so a few percent of them pull k̂ down noticeably.
    * ``zero_mass=True`` fits instead the mixture ``w δ(0) + (1 − w) χ²(k)`` with a free
      point-mass fraction ``w`` (``zero_fraction``): the right description when the h1 fit
      can collapse onto h0 (a signal amplitude fitted to zero, a yield at a boundary — the
      χ̄² case ½δ(0) + ½χ²(1) of a yield constrained to be ≥ 0).

    Parameters
    ----------
    t : array-like
        Toy values; NaN (failed fits) are dropped.
    scale : bool
        Also fit a scale factor ``s`` with ``t/s ~ χ²(k)``.
    zero_mass : bool
        Fit a point mass at t = 0 (see above).
    zero_tol, neg_tol : float
        Censoring threshold and the "large negative" threshold (see above).
    n_bins : int, optional
        Bins of the goodness-of-fit test; default ``min(50, n // 25)`` (≥ 25 expected per
        bin), at least ``npar + 2``. The bins are equiprobable under the fitted χ² (plus one
        bin [0, zero_tol) with ``zero_mass``); the Pearson statistic is compared with
        χ²(bins − 1 − fitted parameters). Because the parameters come from the unbinned fit
        the true reference lies between that and χ²(bins − 1) (H. Chernoff and E. L.
        Lehmann, Ann. Math. Stat. 25 (1954) 579): the p-value is slightly conservative.

    Returns
    -------
    Chi2Fit
        The expected statistical uncertainty of k with the scale fixed is
        ``2 / sqrt(n ψ'(k/2))`` (Fisher information of χ²(k)); ``ndof_err`` reproduces it.
    """
    arr = np.asarray(t, dtype=float).ravel()
    arr = arr[~np.isnan(arr)]
    if np.any(np.isinf(arr)):
        msg = "fit_chi2_ndof: t contains infinite values; check the stored nll"
        raise SummaryError(msg)
    n = int(arr.size)
    n_negative = int(np.count_nonzero(arr < 0))
    n_negative_large = int(np.count_nonzero(arr < -abs(neg_tol)))
    x = np.clip(arr, 0.0, None)
    censored = x < zero_tol
    n_cens = int(np.count_nonzero(censored))
    xu = x[~censored]
    n_u = int(xu.size)
    if n_u < 5:
        msg = (
            f"fit_chi2_ndof: only {n_u} values above {zero_tol} (of {n} finite); at least 5 "
            "are needed to fit the ndof"
        )
        raise SummaryError(msg)
    s_log = float(np.sum(np.log(xu)))
    s_lin = float(np.sum(xu))
    log2 = math.log(2.0)

    def nll(k: float, s: float, w: float) -> float:
        a = 0.5 * k
        ls = math.log(s)
        val = (a - 1.0) * (s_log - n_u * ls) - 0.5 * s_lin / s
        val -= n_u * (a * log2 + float(special.gammaln(a)) + ls)
        if w > 0:
            val += n_u * math.log1p(-w)
        if n_cens:
            lf = _log_gammainc(a, 0.5 * zero_tol / s)
            if w > 0:
                lf = math.log(w + (1.0 - w) * math.exp(lf))
            val += n_cens * lf
        return -val

    k0, s0, w0 = _start_values(xu if zero_mass else x, scale, n_cens / n if zero_mass else None)
    m = Minuit(nll, k=k0, s=s0, w=w0)
    m.print_level = -1  # no Minuit2 messages on stdout (see core/fit.py)
    m.errordef = Minuit.LIKELIHOOD
    m.limits["k"] = (1e-3, 1e4)
    m.limits["s"] = (1e-6, 1e6)
    m.limits["w"] = (0.0, 1.0 - 1e-9)
    m.fixed["s"] = not scale
    m.fixed["w"] = not zero_mass
    m.migrad()
    m.hesse()
    k_hat = float(m.values["k"])
    s_hat = float(m.values["s"])
    w_hat = float(m.values["w"]) if zero_mass else 0.0
    k_err = float(m.errors["k"])
    s_err = float(m.errors["s"]) if scale else 0.0
    w_err = float(m.errors["w"]) if zero_mass else 0.0
    corr = 0.0
    if scale and m.covariance is not None:
        c = np.asarray(m.covariance)
        corr = float(c[0, 1] / math.sqrt(c[0, 0] * c[1, 1]))
    valid = bool(m.valid and m.accurate)

    # goodness of fit: Pearson χ² in bins equiprobable under the fitted χ² part
    npar = 1 + int(scale) + int(zero_mass)
    nb = n_bins if n_bins is not None else min(50, n // 25)
    dist = stats.chi2(k_hat, scale=s_hat)
    gof_chi2, gof_ndof, gof_p = _pearson_gof(x, dist, nb, npar, w_hat if zero_mass else None,
                                             zero_tol)

    def cdf(v: np.ndarray) -> np.ndarray:
        return w_hat + (1.0 - w_hat) * dist.cdf(v)

    ks_p = float(stats.kstest(x, cdf).pvalue)
    return Chi2Fit(
        ndof=k_hat,
        ndof_err=k_err,
        scale=s_hat,
        scale_err=s_err,
        gof_pvalue=gof_p,
        n=n,
        n_negative=n_negative,
        n_negative_large=n_negative_large,
        n_censored=n_cens,
        zero_tol=zero_tol,
        fit_scale=scale,
        gof_chi2=gof_chi2,
        gof_ndof=gof_ndof,
        ks_pvalue=ks_p,
        valid=valid,
        correlation=corr,
        zero_fraction=w_hat,
        zero_fraction_err=w_err,
    )
