"""A box-constrained trust-region Newton minimiser for likelihoods with an analytic Hessian.

With the exact gradient and Hessian of −ln L, Newton's method converges quadratically near
the minimum (a T_cc+ toy fit in ~5 iterations), and the Hessian at the minimum is the
inverse covariance that HESSE would compute, so neither MIGRAD's variable-metric updates
nor HESSE's extra calls are needed. The method is the trust-region Newton method of
Nocedal & Wright, *Numerical Optimization*, 2nd ed., Springer (2006), Algorithm 4.1, with
the subproblem solved exactly through an eigendecomposition of the (small) Hessian as in
Moré & Sorensen, SIAM J. Sci. Stat. Comput. 4 (1983) 553 (Nocedal & Wright, Sec. 4.3,
Eq. 4.37–4.39, including the "hard case"). Variables are scaled by a step per parameter. The
linear algebra of an iteration (Cholesky solve, eigendecomposition, subproblem, limits) is
compiled (:mod:`toyengine.core.newton_kernels`); the likelihood's calls and the acceptance
of a step stay here.

A positive polynomial's yield and angles (the T_cc+ background) may be stepped in the
amplitudes of its basis functions instead (:func:`~toyengine.core.newton_kernels.amplitude_step`):
the density is linear in them, and from the generation values the fits of the T_cc+ pulls
study need about 4.3 Hessians instead of 5.1. Only the path changes: the convergence test,
the minimum and its Hessian are those of the parameters.

Parameter limits are kept by shortening a step that would cross one to half the distance
to it: the minimiser never evaluates outside the box, and a minimum on a limit (where the
gradient does not vanish) is reported as not converged, for the caller to hand to a
method that treats limits (MIGRAD with its own refit at the limit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["NewtonResult", "edm_threshold", "minimize"]

#: a trial step is accepted when the actual reduction is at least this fraction of the
#: model's (Nocedal & Wright, Algorithm 4.1, ``eta``)
_ETA = 1e-4
#: consecutive steps shortened by a limit after which the minimum is taken to be on it
_MAX_LIMITED = 3


def edm_threshold(tol: float, errordef: float) -> float:
    """MIGRAD's convergence threshold on the estimated distance to the minimum,
    ``0.002 tol errordef`` (James, MINUIT Reference Manual, CERN Program Library D506
    (1994), command MIGRAD; iminuit's ``Minuit.tol``)."""
    return 0.002 * tol * errordef


@dataclass(frozen=True)
class NewtonResult:
    """Outcome of :func:`minimize`.

    ``x`` is the full parameter vector (fixed entries as given); ``grad`` and ``hessian``
    are over the free parameters at ``x``; ``edm = g^T H^-1 g / 2`` (NaN unless the
    Hessian is positive definite). ``n_nll``, ``n_grad`` and ``n_hess`` count the calls of
    each function.
    """

    x: np.ndarray
    fval: float
    grad: np.ndarray
    hessian: np.ndarray
    edm: float
    converged: bool
    iterations: int
    n_nll: int
    n_grad: int
    n_hess: int
    message: str

    @property
    def ncalls(self) -> int:
        """All function calls: ``n_nll + n_grad + n_hess``."""
        return self.n_nll + self.n_grad + self.n_hess


def minimize(fcn: Callable[[np.ndarray], float], grad: Callable[[np.ndarray], np.ndarray],
             hessian: Callable[[np.ndarray], np.ndarray], x0: np.ndarray,
             free: np.ndarray, lower: np.ndarray, upper: np.ndarray, scale: np.ndarray,
             edm_max: float, max_iter: int = 100,
             amplitudes: tuple[np.ndarray, np.ndarray] | None = None) -> NewtonResult:
    """Minimise ``fcn`` over the ``free`` entries of ``x`` within ``[lower, upper]``.

    Trust-region Newton iterations (Nocedal & Wright, *Numerical Optimization*, 2nd ed.,
    Springer 2006, Algorithm 4.1; exact subproblem after Moré & Sorensen, SIAM J. Sci.
    Stat. Comput. 4 (1983) 553) in the variables ``x / scale``; the first trust radius is
    the first Newton step's length (one unit without a positive-definite Hessian). A step
    that would cross a limit is shortened to half the distance to it. At every point the
    Hessian, then the gradient, then the value are asked for, so that a function may
    compute them together in one pass.

    Parameters
    ----------
    fcn, grad, hessian : callable
        The function, its gradient and its Hessian on the full vector (fixed entries
        included; only the ``free`` rows and columns are used).
    x0 : numpy.ndarray
        Start (clipped into the limits).
    free : numpy.ndarray of bool
        The entries that vary.
    lower, upper : numpy.ndarray
        Limits (``±inf`` for none).
    scale : numpy.ndarray
        A typical step of each parameter (e.g. its expected error); the trust region is a
        ball in ``x / scale``.
    edm_max : float
        Converged when ``edm = g^T H^-1 g / 2 < edm_max`` with ``H`` positive definite
        (MIGRAD's criterion, :func:`edm_threshold`).
    max_iter : int
        Most accepted or rejected trial steps.
    amplitudes : (blocks, integrals), optional
        Positive polynomials whose Newton step is taken in amplitude coordinates
        (:func:`~toyengine.core.newton_kernels.amplitude_step`): ``blocks[b]`` the indices
        in ``x`` of a yield and its polynomial's angles (padded with -1), ``integrals[b]``
        the basis integrals over the range. A block with a fixed entry is left out. The
        step is used when it lies in the box and the trust region, else the step in ``x``.
        The minimum, the convergence test and the returned derivatives are those in ``x``.
        From the first amplitude step that cannot be taken (outside the trust region or the
        box, a Hessian in the amplitudes that is not positive definite, or an amplitude
        that would turn negative: an angle's minimum on its limit) the steps are in ``x``.

    Returns
    -------
    NewtonResult
        ``converged=False`` (with the reason in ``message``) when the iterations run out,
        a step is shortened by a limit :data:`_MAX_LIMITED` times in a row (the minimum is
        on the limit), the start is not finite, or the trust region collapses.
    """
    from .newton_kernels import CONTINUE, CONVERGED, LIMIT, NOT_FINITE, amplitude_step, propose

    idx = np.flatnonzero(free)
    all_free = len(idx) == len(free)  # then no rows or columns to pick
    block = None if all_free else np.ix_(idx, idx)
    x = np.clip(np.asarray(x0, dtype=float).copy(), lower, upper)
    lo, hi, s = lower[idx], upper[idx], np.asarray(scale, dtype=float)[idx]
    calls = {"f": 0, "g": 0, "h": 0}
    blocks, integrals = _free_blocks(amplitudes, free)

    def at(xx: np.ndarray) -> float:
        calls["f"] += 1
        v = float(fcn(xx))
        return v if math.isfinite(v) else math.inf

    def derivatives(xx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls["g"] += 1
        calls["h"] += 1
        # the Hessian first: a likelihood may keep the gradient it finds on the way
        hh = np.asarray(hessian(xx), dtype=float)
        gg = np.asarray(grad(xx), dtype=float)
        if not all_free:
            hh, gg = hh[block], gg[idx]
        hh = hh + hh.T
        hh *= 0.5
        return gg, hh

    def result(converged: bool, message: str, edm: float, it: int) -> NewtonResult:
        return NewtonResult(x, f, g, h, edm, converged, it, calls["f"], calls["g"],
                            calls["h"], message)

    g, h = derivatives(x)
    f = at(x)
    if not math.isfinite(f):
        return result(False, "function not finite at the start", math.nan, 0)
    radius = math.nan
    limited = 0
    for it in range(max_iter):
        xf = x if all_free else x[idx]
        before = radius
        outcome, edm, radius, limited, pred, pnorm, end = propose(
            g, h, xf, lo, hi, s, radius, limited, _MAX_LIMITED, edm_max)
        if outcome == CONTINUE and blocks is not None:
            ok, end_u, pred_u, pnorm_u = amplitude_step(g, h, xf, blocks, integrals, lo, hi, s,
                                                        before)
            if ok:
                end, pred, pnorm, limited = end_u, pred_u, pnorm_u, 0
                if math.isnan(before):  # the first trust radius: the first step's length
                    radius = pnorm_u
            else:  # from the first step it cannot take, the steps are in x
                blocks = None
        if outcome == CONVERGED:
            return result(True, "converged", edm, it)
        if outcome == NOT_FINITE:
            return result(False, "derivatives not finite", math.nan, it)
        if outcome == LIMIT:
            return result(False, "minimum at a parameter limit", edm, it)
        if all_free:
            trial = end
        else:
            trial = x.copy()
            trial[idx] = end
        # the derivatives first: a likelihood may compute them with its value in one pass
        # (they are wasted on a rejected step, rare once the trust region fits)
        g_new, h_new = derivatives(trial)
        f_new = at(trial)
        rho = (f - f_new) / pred if pred > 0 else -1.0
        if rho < 0.25:
            radius = 0.25 * pnorm
        elif rho > 0.75 and pnorm >= 0.99 * radius:
            radius = 2.0 * radius
        if rho > _ETA:
            x, f, g, h = trial, f_new, g_new, h_new
        elif radius < 1e-10:
            return result(False, "trust region collapsed", edm, it + 1)
    return result(False, f"no convergence in {max_iter} iterations", math.nan, max_iter)


def _free_blocks(amplitudes: tuple[np.ndarray, np.ndarray] | None, free: np.ndarray
                 ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The amplitude blocks whose entries are all free, as positions among the free
    parameters (``None`` when there are none)."""
    if amplitudes is None:
        return None, None
    blocks, integrals = amplitudes
    key = (blocks.tobytes(), blocks.shape, np.asarray(integrals, dtype=float).tobytes(),
           free.tobytes())
    hit = _FREE_BLOCKS.get(key)
    if hit is None:  # a study's fits share their blocks and free mask: found once
        pos = np.cumsum(free) - 1
        keep = [b for b in range(len(blocks)) if all(free[i] for i in blocks[b] if i >= 0)]
        hit = (None, None)
        if keep:
            out = np.array([[pos[i] if i >= 0 else -1 for i in blocks[b]] for b in keep],
                           dtype=np.int64)
            # shared by the fits (never written: writable, as numba's kernels were
            # compiled for writable arrays)
            hit = (out, np.ascontiguousarray(np.asarray(integrals, dtype=float)[keep]))
        if len(_FREE_BLOCKS) >= 64:
            _FREE_BLOCKS.clear()
        _FREE_BLOCKS[key] = hit
    return hit


#: :func:`_free_blocks` by blocks, integrals and free mask
_FREE_BLOCKS: dict[tuple, tuple[np.ndarray | None, np.ndarray | None]] = {}
