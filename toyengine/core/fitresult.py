"""What one fit returns: :class:`FitResult`, a flat picklable record, and which parameters
ended on a limit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .params import ParameterSet
from .status import FailReason, FitStatus


@dataclass(frozen=True)
class FitResult:
    """Flat, picklable record of one fit.

    ``values``/``errors`` follow ``names`` (all parameters, fixed ones included; the error
    of a fixed parameter is NaN). ``covariance`` is over ``free_names``. ``minos_lower`` is
    negative, ``minos_upper`` positive; both NaN when MINOS was not run. ``n_starts`` is the
    number of starting points tried and ``n_best`` how many of them reached the best minimum
    (within :data:`SAME_MINIMUM`); ``fixed_at_limit`` names the parameters that ended on a
    limit and were refitted fixed there (their error is NaN); ``reason`` why an invalid
    fit failed (:class:`FailReason`, its ``message`` the exception's type and text where
    one was raised); ``fixed_flat`` those on
    which the likelihood did not depend once a parameter was fixed at zero (the shape
    parameters of a signal whose yield is zero, :func:`flat_parameters`): fixed at their
    nominal values for that fit (error NaN); ``replaced_minima`` the parameter vectors of
    minima than which a restart (:class:`~toyengine.core.fit.Restarts`) found a lower one:
    other modes of the nuisance parameters, from which the alternative of a nested test
    searches too. ``nfcn`` counts the
    likelihood calls: of ``nll`` alone after MIGRAD, of ``nll``, its gradient and its Hessian
    together after a Newton fit (plus those of a Newton fit that fell back to MIGRAD). The
    ``errors`` of a Newton fit are ``sqrt(diag(covariance))``; those of MIGRAD + HESSE are
    iminuit's, which for a parameter near a limit map the internal error through the limit
    transformation instead.
    """

    names: tuple[str, ...]
    values: np.ndarray
    errors: np.ndarray
    free_names: tuple[str, ...]
    covariance: np.ndarray
    nll: float
    valid: bool
    status: FitStatus
    edm: float
    nfcn: int
    at_limit: bool
    covar_ok: bool
    time: float
    minos_lower: np.ndarray = field(default_factory=lambda: np.empty(0))
    minos_upper: np.ndarray = field(default_factory=lambda: np.empty(0))
    message: str = ""
    n_starts: int = 1
    n_best: int = 1
    fixed_at_limit: tuple[str, ...] = ()
    fixed_flat: tuple[str, ...] = ()
    reason: FailReason = FailReason.NONE
    replaced_minima: tuple[np.ndarray, ...] = ()

    def at_limit_mask(self, params: ParameterSet) -> np.ndarray:
        """Which parameters of ``params`` (in their order) ended on a limit: those refitted
        fixed at a limit (``fixed_at_limit``) and the free ones within ``LIMIT_TOLERANCE``
        steps of a finite limit (the result store's ``at_limit``)."""
        near = _at_limits(params, self.values) if self.values.size == len(params) else {}
        on = set(self.fixed_at_limit) | set(near)
        return np.array([p.name in on for p in params], dtype=bool)

    def value(self, name: str) -> float:
        return float(self.values[self.names.index(name)])

    def error(self, name: str) -> float:
        return float(self.errors[self.names.index(name)])

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, (float(v) for v in self.values), strict=True))

    @classmethod
    def failed(cls, params: ParameterSet, message: str, elapsed: float = 0.0,
               nfcn: int = 0) -> FitResult:
        n = len(params)
        nf = len(params.free_names)
        nan = np.full(n, np.nan)
        return cls(params.names, nan.copy(), nan.copy(), params.free_names,
                   np.full((nf, nf), np.nan), math.nan, False, FitStatus.EXCEPTION, math.nan,
                   nfcn, False, False, elapsed, nan.copy(), nan.copy(), message,
                   reason=FailReason.EXCEPTION)


#: a free parameter within this many steps (``error_guess``) of a limit ends "on" it
LIMIT_TOLERANCE = 1e-3


def _at_limits(params: ParameterSet, values: np.ndarray) -> dict[str, float]:
    """Free parameters within ``LIMIT_TOLERANCE`` steps of a finite limit -> that limit."""
    lower, upper, step = params.limit_arrays
    values = np.asarray(values, dtype=float)
    tol = LIMIT_TOLERANCE * step
    # |v - limit| is not finite (never <= tol) for an infinite limit or value; only an
    # infinite value can make it NaN (inf - inf), so finite values need no errstate (whose
    # cost is that of the rest on every fit)
    if np.isfinite(values).all():
        near_lo = np.abs(values - lower) <= tol
        near_hi = np.abs(values - upper) <= tol
    else:
        with np.errstate(invalid="ignore"):
            near_lo = np.abs(values - lower) <= tol
            near_hi = np.abs(values - upper) <= tol
    near = (near_lo | near_hi) & params.free_mask
    if not near.any():
        return {}
    out = {}
    for i in np.flatnonzero(near):
        p = params.params[i]
        out[p.name] = float(upper[i] if near_hi[i] else lower[i])
    return out
