"""p-values and significances: p ↔ Z, asymptotic χ² p-values and toy p-values.

Conventions:

* p-values from Wilks' theorem (S. S. Wilks, Ann. Math. Stat. 9 (1938) 60) use
  ``p = P(χ²(ndof) ≥ t)`` for the test statistic t of :mod:`.teststat`.
* A p-value converts to a significance either **one-sided**, ``Z = Φ⁻¹(1 − p)``, or
  **two-sided**, ``Z = Φ⁻¹(1 − p/2)``. The LHCb papers quote the two-sided number: 41.4 with
  ndof 8 is 4.78σ → "4.8σ", and 18.6 with 1 dof is √18.6 = 4.31σ → "4.3σ" (Eur. Phys. J. C 78
  (2018) 1019, Sect. 6.5; the one-sided numbers would be 4.64σ and 4.16σ). Both are always
  reported.
* Empirical (toy) p-values are ``p = k/n`` with ``k = #{t_toy ≥ t_obs}`` over the ``n`` toys
  whose two fits both converged, with a Clopper–Pearson interval (C. J. Clopper and E. S.
  Pearson, Biometrika 26 (1934) 404); the failed-fit count is reported next to them, never
  silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import xarray as xr
from scipy import stats

from ._common import CL_1SIGMA, SummaryError, clopper_pearson

__all__ = [
    "EmpiricalP",
    "PValue",
    "Sided",
    "TailCheck",
    "chi2_pvalue",
    "empirical_pvalue",
    "p_to_z",
    "z_to_p",
]

Sided = Literal["one", "two"]


def _check_sided(sided: str) -> None:
    if sided not in ("one", "two"):
        msg = f"sided={sided!r}: the convention must be 'one' (Φ⁻¹(1−p)) or 'two' (Φ⁻¹(1−p/2))"
        raise SummaryError(msg)


def _out(arr: np.ndarray, like: np.ndarray) -> Any:
    return float(arr) if np.ndim(like) == 0 else arr


def p_to_z(p: float | np.ndarray, sided: Sided = "two") -> Any:
    """Convert a p-value to a Gaussian significance Z.

    Parameters
    ----------
    p : float or array
        p-value(s) in [0, 1]; NaN propagates, ``p = 0`` gives ``inf``.
    sided : {"two", "one"}
        ``"two"``: ``Z = Φ⁻¹(1 − p/2)`` (the convention of the LHCb
        Zc(4100) and T_cc+ papers);
        ``"one"``: ``Z = Φ⁻¹(1 − p)`` (negative for ``p > 0.5``).

    Returns
    -------
    float or ndarray
        Same shape as ``p``. Computed with ``scipy.stats.norm.isf`` so that tiny p keep their
        precision (no ``1 − p`` cancellation).

    See Also
    --------
    z_to_p : the inverse.

    Examples
    --------
    >>> round(p_to_z(chi2_pvalue(41.4, 8)), 2)   # Zc(4100): "4.8σ"
    4.78
    """
    _check_sided(sided)
    arr = np.asarray(p, dtype=float)
    finite = arr[np.isfinite(arr)]
    if np.any((finite < 0) | (finite > 1)):
        msg = f"p_to_z: p-values must lie in [0, 1], got {arr[np.isfinite(arr)].min()!r}…"
        raise SummaryError(msg)
    z = stats.norm.isf(arr / 2.0 if sided == "two" else arr)
    return _out(z, arr)


def z_to_p(z: float | np.ndarray, sided: Sided = "two") -> Any:
    """Convert a significance Z to a p-value (inverse of :func:`p_to_z`).

    ``"two"``: ``p = 2 (1 − Φ(Z))`` for ``Z ≥ 0`` (a two-sided Z is never negative);
    ``"one"``: ``p = 1 − Φ(Z)``. Computed with ``norm.sf`` (accurate in the far tail).
    """
    _check_sided(sided)
    arr = np.asarray(z, dtype=float)
    if sided == "two" and np.any(arr[np.isfinite(arr)] < 0):
        msg = "z_to_p: a two-sided significance cannot be negative; use sided='one'"
        raise SummaryError(msg)
    p = 2.0 * stats.norm.sf(arr) if sided == "two" else stats.norm.sf(arr)
    return _out(p, arr)


def chi2_pvalue(t: float | np.ndarray, ndof: float) -> Any:
    """Asymptotic p-value ``P(χ²(ndof) ≥ t)`` of a Δ(−2 ln L) value (Wilks' theorem).

    ``ndof`` may be non-integer (a fitted effective ndof). ``t ≤ 0`` gives 1, NaN gives NaN.
    LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5, uses ndof = 2 × (free Zc parameters)
    = 8 for the Zc significance and 1 for the J^P rejection.
    """
    ndof = float(ndof)
    if not ndof > 0:
        msg = f"chi2_pvalue: ndof={ndof!r} must be positive"
        raise SummaryError(msg)
    arr = np.asarray(t, dtype=float)
    return _out(stats.chi2.sf(arr, ndof), arr)


# --------------------------------------------------------------------------- empirical p


@dataclass(frozen=True)
class EmpiricalP:
    """Toy-based tail probability ``p = n_exceed / n_toys`` with a Clopper–Pearson interval.

    Attributes
    ----------
    p, lo, hi : float
        Point estimate and the central CP interval at confidence ``cl``.
    n_exceed : int
        Number of toys with ``t ≥ t_obs``.
    n_toys : int
        Number of usable toys the estimate rests on (finite t).
    n_nan : int
        Entries of the input that were NaN (failed or missing fits), excluded and reported.
    cl : float
        Confidence level of ``[lo, hi]``.
    """

    p: float
    lo: float
    hi: float
    n_exceed: int
    n_toys: int
    n_nan: int = 0
    cl: float = CL_1SIGMA

    def z(self, sided: Sided = "two") -> float:
        """Significance of ``p`` (``inf`` when no toy exceeds)."""
        return float(p_to_z(self.p, sided))

    def z_interval(self, sided: Sided = "two") -> tuple[float, float]:
        """``(Z(hi), Z(lo))``: the significance range matching ``[lo, hi]``."""
        return float(p_to_z(self.hi, sided)), float(p_to_z(self.lo, sided))


def empirical_pvalue(
    t_toys: np.ndarray | Sequence[float] | xr.DataArray, t_obs: float, cl: float = CL_1SIGMA
) -> EmpiricalP:
    """Fraction of toys whose test statistic is at least as large as the observed one.

    Parameters
    ----------
    t_toys : array-like
        Toy values of t (any shape; NaN entries = failed fits are excluded and counted).
    t_obs : float
        Observed t.
    cl : float
        Confidence level of the Clopper–Pearson interval (default ≈ 0.6827, ±1σ).

    Returns
    -------
    EmpiricalP
        ``p = k/n`` (unbiased for the true tail probability), its CP interval and counts. With
        ``k = 0`` the interval ``[0, hi]`` is an upper limit — more toys are needed to quote a
        point significance (Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5, verifies the χ²
        shape with toys instead).

    See Also
    --------
    clopper_pearson, chi2_pvalue
    """
    t_obs = float(t_obs)
    if math.isnan(t_obs):
        msg = "empirical_pvalue: t_obs is NaN (no observed value in the study? pass t_obs=...)"
        raise SummaryError(msg)
    arr = np.asarray(t_toys, dtype=float).ravel()
    finite = arr[~np.isnan(arr)]
    n = int(finite.size)
    k = int(np.count_nonzero(finite >= t_obs))
    lo, hi = clopper_pearson(k, n, cl)
    p = k / n if n else math.nan
    return EmpiricalP(p, lo, hi, k, n, int(arr.size - n), cl)


# --------------------------------------------------------------------------- p-values of a t


@dataclass(frozen=True)
class PValue:
    """p-value of the observed t by one method, with both Z conventions.

    ``p_lo``/``p_hi`` is the Clopper–Pearson interval for toys, and the range from
    ``ndof ± ndof_err`` for the fitted-χ² method (equal to ``p`` for Wilks).
    ``z_two_lo``/``z_two_hi`` is the matching two-sided Z range. For toys ``n_exceed`` and
    ``n_toys`` are the counts it rests on (``-1`` for asymptotic methods).
    """

    method: str
    ndof: float
    p: float
    p_lo: float
    p_hi: float
    z_one: float
    z_two: float
    z_two_lo: float
    z_two_hi: float
    n_exceed: int = -1
    n_toys: int = -1

    @classmethod
    def make(
        cls, method: str, ndof: float, p: float, lo: float, hi: float, k: int = -1, n: int = -1
    ) -> PValue:
        """Build from p and its range, computing both Z conventions."""
        return cls(
            method,
            float(ndof),
            float(p),
            float(lo),
            float(hi),
            float(p_to_z(p, "one")),
            float(p_to_z(p, "two")),
            float(p_to_z(hi, "two")),
            float(p_to_z(lo, "two")),
            int(k),
            int(n),
        )


@dataclass(frozen=True)
class TailCheck:
    """Toy tail fraction beyond the χ²(ndof) threshold of a given two-sided Z.

    If the χ² description holds, ``p_toys ≈ p_expected`` within ``[lo, hi]``; ``p_toys`` below
    ``p_expected`` means the χ² p-value is conservative at that level.
    """

    z: float
    ndof: float
    threshold: float
    p_expected: float
    p_toys: float
    lo: float
    hi: float
    n_exceed: int
    n_toys: int
