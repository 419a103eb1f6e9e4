"""Look-elsewhere effect: global p-values from the excursions of toy likelihood-ratio scans.

When a signal's position (mass, width) exists only under the alternative hypothesis, the
test statistic is the maximum of a random field ``t(θ)`` over the scan range, and no χ²
describes its tail. Gross and Vitells bound the global p-value by the local one plus the
expected number of excursions above the threshold, and fix the unknown constant of that
term at a low level ``u0`` where a few toys measure it:

* 1-D (Gross & Vitells, Eur. Phys. J. C 70 (2010) 525, Eqs. 2 and 5):
  ``p_global(u) ≈ p_local(u) + E[N_u]``, ``E[N_u] = E[N_u0] (u/u0)^((s−1)/2) e^(−(u−u0)/2)``,
  where ``N_u`` counts the upcrossings of the level ``u`` by ``t(θ)`` and ``s`` is the
  number of degrees of freedom of ``t`` at fixed θ.
* 2-D (Vitells & Gross, Astropart. Phys. 35 (2011) 230, Eqs. 5–8): the upcrossings are
  replaced by the Euler characteristic φ of the excursion set ``{θ : t(θ) > u}``,
  ``E[φ(A_u)] = p_local(u) + N1 ρ1(u) + N2 ρ2(u)`` with the χ²_s Euler-characteristic
  densities ``ρ1 = u^((s−1)/2) e^(−u/2)`` and ``ρ2 = u^((s−2)/2) (u − s + 1) e^(−u/2)``
  (constants absorbed into N1, N2), calibrated at two levels.

A signal yield bounded at zero makes the field ``max(0, Z(θ))²`` with ``Z`` Gaussian: its
local p-value is ``½ P(χ²_1 > u)`` (``one_sided=True``) while the excursion terms keep the
same functional form (their upcrossings are those of ``Z`` at ``√u``).

Usable without the runner: pass an array of toy scans (one row per background-only toy,
``t`` on a regular grid of the scan parameters) to :func:`calibrate`, then call
:meth:`LEECalibration.p_global`. The uncertainty of the result is the propagated
statistical uncertainty of the calibration (the toy-to-toy spread of the counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from ._common import SummaryError

__all__ = ["LEECalibration", "calibrate", "euler_characteristic", "upcrossings"]


def upcrossings(scans: np.ndarray, u: float) -> np.ndarray:
    """Number of upcrossings of level ``u`` along the last axis of ``scans``.

    An upcrossing is a pair of neighbouring grid points with ``t[i] ≤ u < t[i+1]``
    (Gross & Vitells 2010, Fig. 1). NaN points break no pair into a crossing.
    """
    a = np.asarray(scans, dtype=float)
    below = a[..., :-1] <= u
    above = a[..., 1:] > u
    return np.sum(below & above, axis=-1)


def euler_characteristic(scans: np.ndarray, u: float) -> np.ndarray:
    """Euler characteristic of the excursion set ``{t > u}`` on the last two axes.

    The set is the cubical complex whose vertices are the grid points above ``u``, with an
    edge between 4-neighbours above ``u`` and a face for each 2 × 2 block above ``u``:
    ``φ = V − E + F`` (the lattice Euler characteristic of Adler, *The Geometry of Random
    Fields*, 1981, used by Vitells & Gross 2011, Sect. 3). It counts connected components
    minus holes.
    """
    b = np.asarray(scans, dtype=float) > u
    v = b.sum(axis=(-2, -1))
    e = (b[..., :-1, :] & b[..., 1:, :]).sum(axis=(-2, -1)) + (
        b[..., :, :-1] & b[..., :, 1:]).sum(axis=(-2, -1))
    f = (b[..., :-1, :-1] & b[..., 1:, :-1] & b[..., :-1, 1:] & b[..., 1:, 1:]).sum(
        axis=(-2, -1))
    return v - e + f


@dataclass(frozen=True)
class LEECalibration:
    """A Gross–Vitells calibration of the excursions of a χ²_s random field.

    Attributes
    ----------
    dim : int
        1 (upcrossings) or 2 (Euler characteristic).
    dof : float
        Degrees of freedom ``s`` of ``t`` at fixed scan parameters (1 for a signal yield;
        2 for a complex amplitude).
    one_sided : bool
        The local statistic is ``½ χ²_1`` (a yield bounded at zero).
    levels : tuple of float
        Calibration levels (``u0``; or ``u1, u2`` in 2-D).
    means : tuple of float
        Toy averages of the counts at ``levels``.
    cov : ndarray
        Covariance matrix of ``means`` (sample covariance / number of scans).
    coefficients : tuple of float
        ``N`` (1-D: ``E[N_u0] / ρ1(u0)``) or ``(N1, N2)`` (2-D).
    coef_cov : ndarray
        Covariance of ``coefficients``.
    n_scans : int
        Number of toy scans behind the calibration.
    """

    dim: int
    dof: float
    one_sided: bool
    levels: tuple[float, ...]
    means: tuple[float, ...]
    cov: np.ndarray
    coefficients: tuple[float, ...]
    coef_cov: np.ndarray
    n_scans: int

    def p_local(self, u: float | np.ndarray) -> Any:
        """``P(t(θ) > u)`` at one fixed θ: ``P(χ²_s > u)``, halved when one-sided."""
        p = stats.chi2.sf(np.asarray(u, dtype=float), self.dof)
        return 0.5 * p if self.one_sided else p

    def _basis(self, u: float) -> np.ndarray:
        return _basis(float(u), self.dof, self.dim)

    def expected_excursions(self, u: float) -> float:
        """``E[N_u]`` (1-D) or ``E[φ(A_u)] − p_local(u)`` (2-D) at level ``u``."""
        return float(self._basis(u) @ np.asarray(self.coefficients))

    def p_global(self, u: float) -> tuple[float, float]:
        """Global p-value at ``u`` (the asymptotic upper bound, tight for large ``u``).

        Returns
        -------
        (p, error) : tuple of float
            ``p = p_local(u) + excursion term``, capped at 1, and the error propagated from
            the calibration counts (their toy-to-toy spread).
        """
        b = self._basis(u)
        p = float(self.p_local(u)) + float(b @ np.asarray(self.coefficients))
        err = float(math.sqrt(max(float(b @ self.coef_cov @ b), 0.0)))
        return min(p, 1.0), err

    def z_global(self, u: float) -> tuple[float, float]:
        """Two-sided significance of :meth:`p_global` (the convention of
        :func:`toyengine.summary.pvalues.p_to_z`) and its error."""
        p, err = self.p_global(u)
        z = float(stats.norm.isf(p / 2.0))
        dz = err / (2.0 * stats.norm.pdf(z)) if p < 1 else math.nan
        return z, float(dz)

    def trials_factor(self, u: float) -> float:
        """``p_global(u) / p_local(u)``."""
        return self.p_global(u)[0] / float(self.p_local(u))


def _basis(u: float, s: float, dim: int) -> np.ndarray:
    """Excursion densities at ``u`` (constants absorbed in the coefficients)."""
    r1 = u ** ((s - 1.0) / 2.0) * math.exp(-u / 2.0)
    if dim == 1:
        return np.array([r1])
    r2 = u ** ((s - 2.0) / 2.0) * (u - s + 1.0) * math.exp(-u / 2.0)
    return np.array([r1, r2])


def calibrate(scans: np.ndarray, levels: float | tuple[float, ...] = (), *, dof: float = 1.0,
              one_sided: bool = False) -> LEECalibration:
    """Calibrate the Gross–Vitells extrapolation on toy scans.

    Parameters
    ----------
    scans : array, shape (n_toys, n) or (n_toys, n1, n2)
        ``t(θ)`` of background-only toys on a regular grid of the scan parameters (1-D or
        2-D), e.g. ``2 (nll_H0 − nll_H1(θ))`` with θ fixed at each grid point and every
        other parameter fitted. Rows with NaN (failed fits) are dropped.
    levels : float or tuple of float
        ``u0`` (1-D; default 1) or ``(u1, u2)`` (2-D; default ``(1, 3)``): low levels where
        excursions are frequent, so their mean is well measured.
    dof : float
        Degrees of freedom ``s`` of ``t`` at fixed θ.
    one_sided : bool
        The field is ``max(0, Z)²`` (a yield ≥ 0): local p-value ``½ P(χ²_s > u)``.

    Returns
    -------
    LEECalibration
    """
    a = np.asarray(scans, dtype=float)
    if a.ndim not in (2, 3):
        msg = f"calibrate: scans must have shape (toys, n) or (toys, n1, n2), got {a.shape}"
        raise SummaryError(msg)
    dim = a.ndim - 1
    keep = np.all(np.isfinite(a.reshape(a.shape[0], -1)), axis=1)
    a = a[keep]
    n = int(a.shape[0])
    if n < 2:
        msg = f"calibrate: {n} complete toy scans; at least 2 are needed"
        raise SummaryError(msg)
    if isinstance(levels, (int, float)):
        levels = (float(levels),)
    levels = tuple(float(x) for x in levels) or ((1.0,) if dim == 1 else (1.0, 3.0))
    if len(levels) != dim:
        msg = f"calibrate: a {dim}-D scan needs {dim} calibration level(s), got {levels}"
        raise SummaryError(msg)
    if any(not x > 0 for x in levels) or len(set(levels)) != dim:
        msg = f"calibrate: levels must be distinct and > 0, got {levels}"
        raise SummaryError(msg)
    if dim == 1:
        counts = upcrossings(a, levels[0])[:, None].astype(float)
        p0 = np.zeros(1)
    else:
        counts = np.stack([euler_characteristic(a, u) for u in levels], axis=1).astype(float)
        p0 = np.array([0.5 if one_sided else 1.0]) * stats.chi2.sf(np.array(levels), dof)
    means = counts.mean(axis=0)
    cov = np.atleast_2d(np.cov(counts, rowvar=False, ddof=1)) / n
    basis = np.array([_basis(u, dof, dim) for u in levels])  # rows: levels
    inv = np.linalg.inv(basis)
    coef = inv @ (means - p0)
    coef_cov = inv @ cov @ inv.T
    return LEECalibration(dim, float(dof), bool(one_sided), levels, tuple(map(float, means)),
                          cov, tuple(map(float, coef)), coef_cov, n)
