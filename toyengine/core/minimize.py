"""One minimisation from one start: trust-region Newton with the analytic Hessian
(:mod:`.newton`) where the likelihood has one, else MIGRAD + HESSE (optional MINOS) on a
reused iminuit :class:`~iminuit.Minuit` (one per thread and parameter set)."""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Callable

import numpy as np
from iminuit import Minuit

from . import newton
from .fitresult import FitResult, _at_limits
from .likelihood import Likelihood, as_likelihood
from .params import ParameterSet
from .status import FailReason, FitStatus

#: iminuit's default EDM tolerance factor (``Minuit.tol``)
_DEFAULT_TOL = 0.1


class _Objective:
    """The callable a reused :class:`~iminuit.Minuit` holds: the current NLL (and its
    ``grad``/``hessian``) as a function of the free parameters alone, the fixed ones at
    their values in ``base``; one Minuit object serves every fit of a chunk that has the
    same parameters.

    Minuit sees only the free parameters because Minuit2 as bundled with iminuit 2.33 maps
    an external Hessian (and its diagonal, ``g2``) onto the floating parameters by position,
    not by name (root-project/root#20954): with a fixed parameter before a free one, HESSE
    inverted the wrong block of the analytic Hessian (a covariance wrong by O(1)), and
    MIGRAD's seed, finding zero second derivatives, fell back to a line search and a
    diagonal metric.
    """

    errordef = Minuit.LIKELIHOOD

    def __init__(self, hessian: str, free: np.ndarray, n: int) -> None:
        self.target: Likelihood | None = None
        # the target's method that MIGRAD gets as its Hessian
        self._expected = hessian == "expected_hessian"
        self.free = free
        self._block = np.ix_(free, free)
        #: the full parameter vector: the fixed parameters' values (set per fit)
        self.base = np.zeros(n)

    def full(self, u: np.ndarray) -> np.ndarray:
        """The full parameter vector with the free parameters at ``u``."""
        x = self.base.copy()
        x[self.free] = u
        return x

    def __call__(self, u: np.ndarray) -> float:
        return self.target(self.full(u))  # type: ignore[misc]

    def grad(self, u: np.ndarray) -> np.ndarray:
        return np.asarray(self.target.grad(self.full(u)))[self.free]  # type: ignore[union-attr]

    def hessian(self, u: np.ndarray) -> np.ndarray:
        t = self.target
        x = self.full(u)
        h = t.expected_hessian(x) if self._expected else t.hessian(x)  # type: ignore[union-attr]
        return np.asarray(h)[self._block]

    def g2(self, u: np.ndarray) -> np.ndarray:
        # iminuit (2.33) calls ``g2`` where it needs second derivatives without the full
        # matrix, even when it has a Hessian ("hessian overrides g2" warns otherwise),
        # and raises TypeError inside MIGRAD if there is none
        return np.diag(self.hessian(u)).copy()


#: per thread (Dask workers run tasks in threads): Minuit objects by parameter set
_MINUITS = threading.local()
_MAX_MINUITS = 16


def _seed_hessian(nll: Likelihood, hesse: bool,
                  use_hessian: bool = True) -> str | None:
    """The method of ``nll`` that MIGRAD gets as its Hessian, if any: the exact
    ``hessian`` (MIGRAD's seed and HESSE), else, when no errors are asked for (``hesse``
    false), the ``expected_hessian`` (the Fisher information, e.g.
    :meth:`toyengine.core.dalitz.DalitzNLL.expected_hessian`) as the seed of MIGRAD's
    metric only. Either replaces the seed's numerical second derivatives (two calls per
    free parameter and cycle). Needs an analytic ``grad``."""
    if not use_hessian or not nll.has_grad:
        return None
    if nll.has_hessian:
        return "hessian"
    if not hesse and nll.has_expected_hessian:
        return "expected_hessian"
    return None


def _minuit_for(nll: Likelihood, params: ParameterSet, hessian: str | None,
                x0: np.ndarray) -> Minuit:
    """A Minuit object over the free parameters of ``params``, bound to ``nll`` with the
    fixed parameters at their values in ``x0`` and the free ones starting there.

    Building one costs ~0.2 ms (more than a T_cc+ NLL call), so it is kept per thread and
    parameter set and :meth:`~iminuit.Minuit.reset` between fits. Limits and steps come
    from ``params`` once. With ``hessian`` (:func:`_seed_hessian`) that method of ``nll``
    seeds MIGRAD's metric and, if it is the exact ``hessian``, replaces HESSE's numerical
    second derivatives. ``params`` must have a free parameter.
    """
    has_grad = nll.has_grad
    cache = getattr(_MINUITS, "cache", None)
    if cache is None:
        cache = _MINUITS.cache = {}
    key = (params, has_grad, hessian)
    hit = cache.get(key)
    if hit is None:
        if len(cache) >= _MAX_MINUITS:
            cache.clear()
        free = np.flatnonzero(params.free_mask)
        obj = _Objective(hessian or "hessian", free, len(params))
        m = Minuit(obj, params.values[free], grad=obj.grad if has_grad else False,
                   g2=obj.g2 if hessian else False,
                   hessian=obj.hessian if hessian else False, name=params.free_names)
        m.errordef = Minuit.LIKELIHOOD
        # -1: no Minuit2 messages at all. At 0 its C++ code still writes states MIGRAD
        # recovers from ("E VariableMetricBuilder Initial matrix not pos.def.") to stdout,
        # where they corrupt a command's JSON or CSV output; the fit status and
        # fail_reason say what happened. (Process-wide: Minuit2 has one print level.)
        m.print_level = -1
        params.to_minuit(m)
        hit = cache[key] = (m, obj)
    m, obj = hit
    obj.target = nll
    m.reset()
    obj.base = np.array(x0, dtype=float)
    m.values = obj.base[obj.free]
    return m


def _single_fit(nll: Callable[[np.ndarray], float], params: ParameterSet, x0: np.ndarray,
                minos: bool, strategy: int | None, tol: float | None,
                hesse: bool = True, once: bool = False) -> FitResult:
    """One fit from ``x0``: Newton (:func:`_newton_fit`) when ``nll`` has an analytic
    ``grad`` and ``hessian`` and no MINOS is asked for (started at
    ``nll.closed_form_minimum(x0, free_mask)`` where the likelihood has closed-form
    estimates and that returns a point), MIGRAD (+ HESSE) otherwise and
    whenever Newton does not reach a valid interior minimum, then from Newton's last
    point; the calls Newton spent are then added to MIGRAD's ``nfcn``. With ``once``
    MIGRAD runs once: a fit that does not converge is not retried (iminuit's ``iterate=1``;
    by default up to four more MIGRADs at strategy 2, each after a SIMPLEX)."""
    spent, reason = 0, ""
    nll = as_likelihood(nll)
    if not minos and nll.has_grad and nll.has_hessian:
        found = nll.closed_form_minimum(x0, params.free_mask)
        if found is not None:  # closed-form estimates: Newton starts at the minimum
            x0 = np.asarray(found, dtype=float)
        newton = _newton_fit(nll, params, x0, tol, hesse)
        if newton.valid:
            return newton
        spent, reason = newton.nfcn, newton.message
        if math.isfinite(newton.nll) and np.all(np.isfinite(newton.values)):
            # MIGRAD goes on from where Newton stopped: no higher than x0 (every step
            # Newton took lowered -ln L), often at the minimum already (one within
            # LIMIT_TOLERANCE steps of a limit)
            x0 = newton.values
    res = _migrad_fit(nll, params, x0, minos, strategy, tol, hesse, once)
    if spent:
        res = FitResult(**{**res.__dict__, "nfcn": res.nfcn + spent,
                           "message": "; ".join(filter(None, (reason, res.message)))})
    return res


def _newton_fit(nll: Likelihood, params: ParameterSet, x0: np.ndarray,
                tol: float | None, hesse: bool) -> FitResult:
    """Trust-region Newton with the analytic gradient and Hessian (:func:`newton.minimize`)
    to MIGRAD's convergence criterion; the covariance is the inverse of the analytic
    Hessian over the free parameters at the minimum (what HESSE gives with an analytic
    Hessian: the −ln L curvature, errordef 0.5). ``nfcn`` counts the calls of ``nll``,
    its ``grad`` and its ``hessian`` together. ``valid=False`` (the caller then runs
    MIGRAD) when it does not converge, the Hessian is not positive definite, or a free
    parameter ends within ``LIMIT_TOLERANCE`` steps of a limit (where the refit at the
    limit, :func:`_refit_at_limits`, takes over after MIGRAD, as before)."""
    nll = as_likelihood(nll)
    t0 = time.perf_counter()
    free = params.free_mask
    lower, upper, scale = params.limit_arrays
    errordef = Minuit.LIKELIHOOD  # as the MIGRAD path: every NLL here is a −ln L
    try:
        with np.errstate(all="ignore"):
            r = newton.minimize(nll, nll.grad, nll.hessian, x0, free, lower, upper, scale,
                                newton.edm_threshold(_DEFAULT_TOL if tol is None else tol,
                                                     errordef),
                                amplitudes=nll.amplitude_blocks)
    except Exception as exc:
        return FitResult.failed(params, f"Newton: {type(exc).__name__}: {exc}",
                                time.perf_counter() - t0)
    nf = int(free.sum())
    cov = np.full((nf, nf), np.nan)
    valid = r.converged and math.isfinite(r.fval) and not _at_limits(params, r.x)
    if valid:
        try:
            inv_chol = np.linalg.inv(np.linalg.cholesky(r.hessian))
            cov = 2.0 * errordef * (inv_chol.T @ inv_chol)
        except np.linalg.LinAlgError:
            valid = False
    errors = np.full(len(params), np.nan)
    at_limit = False
    if valid:
        # iminuit's flag (``FMin.has_parameters_at_limit``): a bounded parameter within
        # half its error of a limit
        err = np.sqrt(np.diag(cov))
        v = r.x[free]
        at_limit = bool(np.any(np.minimum(v - lower[free], upper[free] - v) < 0.5 * err))
        if hesse:
            errors[free] = err
    if not (hesse and valid):  # as after MIGRAD without HESSE: no errors to record
        cov = np.full((nf, nf), np.nan)
    return FitResult(
        names=params.names, values=np.array(r.x, dtype=float), errors=errors,
        free_names=params.free_names, covariance=cov, nll=float(r.fval), valid=valid,
        status=FitStatus.VALID if valid else FitStatus.INVALID, edm=float(r.edm),
        nfcn=r.ncalls, at_limit=at_limit, covar_ok=hesse and valid,
        time=time.perf_counter() - t0, message="" if valid else f"Newton: {r.message}")


def _migrad_fit(nll: Likelihood, params: ParameterSet, x0: np.ndarray,
                minos: bool, strategy: int | None, tol: float | None,
                hesse: bool = True, once: bool = False) -> FitResult:
    nll = as_likelihood(nll)
    res = _single_fit_with(nll, params, x0, minos, strategy, tol, hesse, True, once)
    if res.status == FitStatus.EXCEPTION and _seed_hessian(nll, hesse) is not None:
        # iminuit fails inside MIGRAD when its seed, the analytic Hessian at x0, is not
        # positive definite (a start far from the minimum): start again without the seed
        res = _single_fit_with(nll, params, x0, minos, strategy, tol, hesse, False, once)
    return res


def _single_fit_with(nll: Likelihood, params: ParameterSet,
                     x0: np.ndarray, minos: bool, strategy: int | None, tol: float | None,
                     hesse: bool, use_hessian: bool, once: bool = False) -> FitResult:
    t0 = time.perf_counter()
    if strategy is None:
        # with an analytic gradient MIGRAD needs no numerical second derivatives to
        # converge (strategy 0: ~3x fewer calls); HESSE then gives the full covariance
        strategy = 0 if nll.has_grad else 1
    m = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if not params.free_names:  # nothing to minimise (Minuit needs a parameter)
                return _nothing_free(nll, params, x0, t0)
            m = _minuit_for(nll, params, _seed_hessian(nll, hesse, use_hessian), x0)
            m.strategy = strategy
            m.tol = _DEFAULT_TOL if tol is None else tol
            m.migrad(iterate=1 if once else 5)
            if hesse and m.fmin is not None and m.fmin.is_valid:
                m.hesse()
                if not m.fmin.is_valid:
                    # HESSE's exact covariance can push the EDM above tolerance (often
                    # after a strategy-0 MIGRAD): continue MIGRAD from there, then HESSE
                    m.migrad()
                    if m.fmin.is_valid:
                        m.hesse()
            fmin = m.fmin
            if hesse:
                valid = bool(fmin.is_valid and fmin.has_covariance and fmin.has_posdef_covar
                             and math.isfinite(fmin.fval))
            else:  # a converged MIGRAD; its covariance is only MIGRAD's running estimate
                valid = bool(fmin.is_valid and math.isfinite(fmin.fval))
            reason = FailReason.NONE
            if not valid:
                reason = (FailReason.NOT_FINITE if not math.isfinite(fmin.fval)
                          else FailReason.NOT_POSDEF if fmin.is_valid
                          else FailReason.CALL_LIMIT if fmin.has_reached_call_limit
                          else FailReason.EDM if fmin.is_above_max_edm
                          else FailReason.OTHER)
            lower = np.full(len(params), np.nan)
            upper = np.full(len(params), np.nan)
            if minos and valid:
                for i, p in enumerate(params):
                    if p.fixed:
                        continue
                    try:  # one parameter's MINOS failure (e.g. at a limit) leaves it NaN
                        m.minos(p.name)
                        me = m.merrors[p.name]
                        if me.lower_valid:
                            lower[i] = me.lower
                        if me.upper_valid:
                            upper[i] = me.upper
                    except Exception:  # a MINOS that fails leaves this parameter's
                        pass  # interval NaN in the record (the HESSE error stays)
        free = params.free_names
        errors = np.full(len(params), np.nan)
        if hesse:  # else not computed: MIGRAD's estimates are no errors to record
            errors[params.free_mask] = np.array(m.errors, dtype=float)
        if hesse and m.covariance is not None:
            cov = np.array(m.covariance, dtype=float)  # the free parameters, in order
        else:
            cov = np.full((len(free), len(free)), np.nan)
        values = np.array(x0, dtype=float)
        values[params.free_mask] = np.array(m.values, dtype=float)
        return FitResult(
            names=params.names,
            values=values,
            errors=errors,
            free_names=free,
            covariance=cov,
            nll=float(fmin.fval),
            valid=valid,
            status=FitStatus.VALID if valid else FitStatus.INVALID,
            edm=float(fmin.edm),
            nfcn=int(m.nfcn),
            at_limit=bool(fmin.has_parameters_at_limit),
            covar_ok=hesse and bool(fmin.has_accurate_covar),
            time=time.perf_counter() - t0,
            minos_lower=lower,
            minos_upper=upper,
            reason=reason,
        )
    except Exception as exc:
        nfcn = int(m.nfcn) if m is not None else 0
        return FitResult.failed(params, f"{type(exc).__name__}: {exc}",
                                time.perf_counter() - t0, nfcn)


def _nothing_free(nll: Likelihood, params: ParameterSet, x0: np.ndarray,
                  t0: float) -> FitResult:
    """The MIGRAD path's result when every parameter is fixed: −ln L at ``x0``, not a
    converged minimisation (as MIGRAD reports it), one call."""
    try:
        val = float(nll(np.asarray(x0, dtype=float)))
    except Exception as exc:  # noqa: BLE001 - reported like any failing likelihood
        return FitResult.failed(params, f"{type(exc).__name__}: {exc}",
                                time.perf_counter() - t0, 1)
    n = len(params)
    return FitResult(
        names=params.names, values=np.array(x0, dtype=float), errors=np.full(n, np.nan),
        free_names=(), covariance=np.zeros((0, 0)), nll=val, valid=False,
        status=FitStatus.INVALID, edm=0.0, nfcn=1, at_limit=False, covar_ok=False,
        time=time.perf_counter() - t0, minos_lower=np.full(n, np.nan),
        minos_upper=np.full(n, np.nan),
        reason=FailReason.NOT_FINITE if not math.isfinite(val) else FailReason.OTHER)
