"""Profile-likelihood scans and the confidence limits read from them.

A profile scan fixes one parameter at each value of a grid, refits all the others, and
records −Δ ln L = min ln L(global) − min ln L(fixed) ≥ 0 (with ``nll = −ln L``: the
difference of minimised negative log-likelihoods). Limits are the values where −Δ ln L
crosses a threshold. LHCb, Nature Communications 13 (2022) 3351 (Results, "T_cc+ signal in
the D0D0π+ mass spectrum") quotes the lower limits on |g| at −Δ log L = 1.35 (90 % CL) and
1.92 (95 % CL), i.e. half the χ²₁ quantile at the CL, ``scipy.stats.chi2.ppf(CL, 1) / 2``
(1.3528, 1.9207); :func:`one_sided_limit` uses exactly that convention by default. (A strict
one-sided Neyman construction would use ``chi2.ppf(2 CL − 1, 1) / 2``; pass ``threshold=`` for
other conventions.) For systematic uncertainties the paper builds the profile for each
alternative model and keeps the least stringent limit: :func:`most_conservative`.

The fitter is :func:`toyengine.core.fit.fit` (MIGRAD + HESSE); each scan point starts from the
fitted values of its neighbour, walking outwards from the global minimum, so a scan follows
one valley.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from ..errors import ModelError
from .params import ParameterSet

__all__ = [
    "ConservativeLimit",
    "ProfileScan",
    "delta_nll_threshold",
    "interval",
    "most_conservative",
    "one_sided_limit",
    "profile_scan",
]


def delta_nll_threshold(level: float) -> float:
    """−Δ ln L threshold for confidence level ``level``: χ²₁ quantile / 2 (LHCb, Nature
    Communications 13 (2022) 3351 quotes 1.35 for 90 % and 1.92 for 95 %; 0.5 for 68.27 %)."""
    if not 0.0 < level < 1.0:
        msg = f"confidence level must be in (0, 1), got {level}"
        raise ModelError(msg)
    return float(stats.chi2.ppf(level, df=1)) / 2.0


@dataclass(frozen=True)
class ProfileScan:
    """Result of :func:`profile_scan`.

    Attributes
    ----------
    name : str
        The scanned parameter.
    grid : ndarray
        Scanned values, ascending.
    nll : ndarray
        Minimised −ln L with ``name`` fixed at each grid value (NaN where the fit raised).
    delta_nll : ndarray
        ``nll − nll_min`` (= −Δ ln L ≥ 0 up to the fit tolerance).
    valid : ndarray of bool
        Fit status of each point; invalid points are ignored by the limit functions.
    nll_min, best : float
        The global minimum and the value of ``name`` there. If a scan point lies below the
        global fit (which then found a local minimum) the scan point is used instead and
        ``global_improved`` is True.
    global_fit : FitResult
    fits : tuple of FitResult
        One per grid value (in ``grid`` order).
    """

    name: str
    grid: np.ndarray
    nll: np.ndarray
    delta_nll: np.ndarray
    valid: np.ndarray
    nll_min: float
    best: float
    global_fit: Any
    fits: tuple[Any, ...] = field(repr=False)
    global_improved: bool = False

    def values_of(self, other: str) -> np.ndarray:
        """The fitted values of parameter ``other`` along the scan."""
        return np.array([f.values[list(f.names).index(other)] for f in self.fits])


def _default_fitter() -> Callable[..., Any]:
    from .fit import fit

    return fit


def _fit_values(result: Any, params: ParameterSet) -> dict[str, float] | None:
    if result is None or not bool(result.valid):
        return None
    vals = {n: float(v) for n, v in zip(result.names, result.values, strict=True)}
    if not all(math.isfinite(v) for v in vals.values()):
        return None
    return {n: v for n, v in vals.items() if n in params}


def profile_scan(nll: Callable[[np.ndarray], float], params: ParameterSet, name: str,
                 grid: ArrayLike, *, fit_kwargs: Mapping[str, Any] | None = None,
                 global_fit: Any = None,
                 fitter: Callable[..., Any] | None = None) -> ProfileScan:
    """Scan −Δ ln L of parameter ``name`` over ``grid``, refitting the other parameters.

    Parameters
    ----------
    nll : callable
        ``nll(x) -> float`` on the full parameter vector (``params`` order), including any
        Gaussian constraints (the :func:`toyengine.core.fit.fit` contract).
    params : ParameterSet
        Start values, limits and fixed flags of all parameters. ``name`` is freed for the
        global fit even if it is fixed here; the other fixed parameters stay fixed.
    name : str
        Parameter to scan.
    grid : array_like
        Values of ``name`` (inside its limits); sorted ascending in the result.
    fit_kwargs : mapping, optional
        Passed to the fitter (``starts``, ``rng``, ``strategy``, ``tol``).
    global_fit : FitResult, optional
        A fit with ``name`` free that is already available (skips the global fit).
    fitter : callable, optional
        Defaults to :func:`toyengine.core.fit.fit`; any callable with its signature and result.

    Returns
    -------
    ProfileScan
    """
    if name not in params:
        msg = f"profile_scan: unknown parameter {name!r}; known: {params.names}"
        raise ModelError(msg)
    g = np.unique(np.asarray(grid, dtype=float).ravel())
    if g.size == 0 or not np.all(np.isfinite(g)):
        msg = f"profile_scan({name}): grid must be a non-empty array of finite values"
        raise ModelError(msg)
    lo, hi = params[name].limits
    if g[0] < lo or g[-1] > hi:
        msg = (f"profile_scan({name}): grid [{g[0]}, {g[-1]}] leaves the parameter limits "
               f"({lo}, {hi})")
        raise ModelError(msg)
    fit_fn = _default_fitter() if fitter is None else fitter
    kw = dict(fit_kwargs or {})

    free_params = params.updated({name: {"fixed": False}})
    if global_fit is None:
        global_fit = fit_fn(nll, free_params, **kw)
    start = _fit_values(global_fit, params) or params.as_dict()
    best = float(start[name])

    # walk outwards from the grid point nearest the best value, each fit starting from the
    # fitted values of the previous (neighbouring) point
    k0 = int(np.argmin(np.abs(g - best)))
    order = [*range(k0, g.size), *range(k0 - 1, -1, -1)]
    fits: list[Any] = [None] * g.size
    previous = dict(start)
    for pos, k in enumerate(order):
        if pos > 0 and k == k0 - 1:
            previous = dict(start)  # second branch starts again from the global minimum
        values = {**previous, name: float(g[k])}
        p_k = params.with_values(values).updated({name: {"value": float(g[k]), "fixed": True}})
        res = fit_fn(nll, p_k, **kw)
        fits[k] = res
        nxt = _fit_values(res, params)
        if nxt is not None:
            previous = nxt
    nll_vals = np.array([float(f.nll) if f is not None else math.nan for f in fits])
    valid = np.array([bool(f.valid) and math.isfinite(float(f.nll)) for f in fits])

    nll_min = float(global_fit.nll) if bool(global_fit.valid) else math.inf
    improved = False
    if valid.any():
        kmin = int(np.nanargmin(np.where(valid, nll_vals, np.inf)))
        if nll_vals[kmin] < nll_min:
            improved = bool(global_fit.valid)
            nll_min = float(nll_vals[kmin])
            best = float(g[kmin])
    if not math.isfinite(nll_min):
        nll_min = math.nan
    return ProfileScan(name=name, grid=g, nll=nll_vals, delta_nll=nll_vals - nll_min,
                       valid=valid, nll_min=nll_min, best=best, global_fit=global_fit,
                       fits=tuple(fits), global_improved=improved)


def _crossing(x: np.ndarray, d: np.ndarray, best: float, threshold: float, side: str) -> float:
    """First crossing of ``d = threshold`` walking away from ``best`` on ``side``.

    Interpolates linearly in sign × sqrt(2 d), which is exactly linear for a parabolic
    −Δ ln L, so a Gaussian likelihood gives the textbook value on any grid.
    """
    if side == "lower":
        sel = x <= best
        xs, ds = x[sel][::-1], d[sel][::-1]  # walking downwards from best
    elif side == "upper":
        sel = x >= best
        xs, ds = x[sel], d[sel]
    else:
        msg = f"side must be 'lower' or 'upper', got {side!r}"
        raise ModelError(msg)
    prev_x, prev_z = best, 0.0
    zt = math.sqrt(2.0 * threshold)
    for xi, di in zip(xs, ds, strict=True):
        zi = math.sqrt(2.0 * max(di, 0.0))
        if zi >= zt:
            if zi == prev_z:
                return float(xi)
            return float(prev_x + (zt - prev_z) * (xi - prev_x) / (zi - prev_z))
        prev_x, prev_z = xi, zi
    return math.nan


def one_sided_limit(scan: ProfileScan, level: float = 0.90, side: str = "lower", *,
                    threshold: float | None = None) -> float:
    """The ``side`` limit at ``level`` from the first −Δ ln L crossing next to the minimum.

    The threshold is :func:`delta_nll_threshold` (χ²₁ quantile / 2, the 1.35 and 1.92 of
    LHCb, Nature Communications 13 (2022) 3351) unless ``threshold`` is given. Returns NaN when −Δ
    ln L does not reach the threshold inside the scanned range on that side. Invalid scan points are
    skipped.
    """
    thr = delta_nll_threshold(level) if threshold is None else float(threshold)
    if not thr > 0:
        msg = f"threshold must be > 0, got {thr}"
        raise ModelError(msg)
    ok = scan.valid & np.isfinite(scan.delta_nll)
    return _crossing(scan.grid[ok], scan.delta_nll[ok], scan.best, thr, side)


def interval(scan: ProfileScan, level: float = 0.6826894921370859) -> tuple[float, float]:
    """Two-sided interval [lower, upper] at ``level`` (−Δ ln L = χ²₁ quantile / 2; 0.5 for
    the 68.27 % default)."""
    return (one_sided_limit(scan, level, "lower"), one_sided_limit(scan, level, "upper"))


@dataclass(frozen=True)
class ConservativeLimit:
    """The least stringent limit over alternative models and all the individual ones."""

    value: float
    label: str
    limits: dict[str, float]


def most_conservative(scans: Mapping[str, ProfileScan] | Sequence[ProfileScan],
                      level: float = 0.90, side: str = "lower", *,
                      threshold: float | None = None) -> ConservativeLimit:
    """The most conservative ``side`` limit over profile scans of alternative models.

    For a lower limit this is the smallest, for an upper limit the largest (LHCb, Nature
    Communications 13 (2022) 3351, Results, "Systematic uncertainties": "the smallest of the
    resulting values is taken as the lower limit"). If any scan does
    not cross the threshold inside its range, that limit is unknown (NaN) and so is the
    result (``label`` names the scan).
    """
    items = list(scans.items()) if isinstance(scans, Mapping) else [
        (str(i), s) for i, s in enumerate(scans)]
    if not items:
        msg = "most_conservative: no scans given"
        raise ModelError(msg)
    limits = {lab: one_sided_limit(s, level, side, threshold=threshold) for lab, s in items}
    for lab, v in limits.items():
        if math.isnan(v):
            return ConservativeLimit(math.nan, lab, limits)
    pick = min if side == "lower" else max
    lab = pick(limits, key=lambda k: limits[k])
    return ConservativeLimit(limits[lab], lab, limits)
