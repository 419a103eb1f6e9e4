"""Compiled linear algebra of one trust-region Newton iteration (numba, ``cache=True``, no
fast-math: IEEE arithmetic, the same result on every call; numpy's error model, as in
:mod:`toyengine.core.model1d_kernels`).

:func:`toyengine.core.newton.minimize` asks the likelihood for its derivatives at a point and
hands them to :func:`propose`, which returns the next trial point: the Newton step when the
Hessian is positive definite and the step lies inside the trust region, else the exact
solution of the trust-region subproblem (:func:`subproblem`), shortened at a limit. In
NumPy the same dozen small-matrix operations cost ≈ 70 µs per iteration, mostly in
NumPy's and LAPACK's per-call overhead for a 6 × 6 matrix; compiled they cost a few µs.
Imported by :func:`~toyengine.core.newton.minimize` when first used, never by
``import toyengine``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .model1d_kernels import sphere_products

__all__ = ["CONTINUE", "CONVERGED", "LIMIT", "NOT_FINITE", "amplitude_step", "load", "propose",
           "subproblem"]

#: :func:`propose` outcomes
CONTINUE, CONVERGED, NOT_FINITE, LIMIT = 0, 1, 2, 3


@numba.njit(cache=True, error_model="numpy")
def _cholesky_solve(h: np.ndarray, g: np.ndarray) -> tuple[bool, np.ndarray]:
    """``(True, h^-1 g)`` through the Cholesky factor ``h = L L^T``, or ``(False, _)``
    when ``h`` is not positive definite (a pivot ``<= 0`` or not finite)."""
    n = h.shape[0]
    low = np.zeros((n, n))
    for j in range(n):
        d = h[j, j]
        for k in range(j):
            d -= low[j, k] * low[j, k]
        if not d > 0.0:
            return False, g
        ljj = math.sqrt(d)
        low[j, j] = ljj
        for i in range(j + 1, n):
            s = h[i, j]
            for k in range(j):
                s -= low[i, k] * low[j, k]
            low[i, j] = s / ljj
    y = np.empty(n)
    for i in range(n):
        s = g[i]
        for k in range(i):
            s -= low[i, k] * y[k]
        y[i] = s / low[i, i]
    z = np.empty(n)
    for i in range(n - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, n):
            s -= low[k, i] * z[k]
        z[i] = s / low[i, i]
    return True, z


@numba.njit(cache=True, error_model="numpy")
def subproblem(g: np.ndarray, w: np.ndarray, q: np.ndarray, radius: float) -> np.ndarray:
    """The minimiser of ``g.p + p.H.p/2`` over ``|p| <= radius`` for ``H = q diag(w) q^T``
    (``w`` ascending; Moré & Sorensen, SIAM J. Sci. Stat. Comput. 4 (1983) 553; Nocedal &
    Wright, *Numerical Optimization*, 2nd ed., Springer 2006, Theorem 4.1): the Newton step
    if ``H`` is positive definite and the step is inside, else ``p(lam) = -(H + lam I)^-1 g``
    with ``|p(lam)| = radius``, ``lam > -min(w)``, found by Newton's method on
    ``1/radius - 1/|p(lam)|`` (Nocedal & Wright, Algorithm 4.3), plus a multiple of the
    lowest eigenvector in the hard case."""
    n = g.shape[0]
    gq = q.T @ g
    lam_min = w[0]
    if lam_min > 0.0:
        p = -gq / w
        if math.sqrt(np.sum(p * p)) <= radius:
            return q @ p
    lo = max(0.0, -lam_min)
    # the hard case: g (nearly) orthogonal to the lowest eigenvector, |p(lam)| < radius
    # for every lam > -lam_min
    tiny = 1e-12 * max(1.0, np.max(np.abs(w)))
    gnorm = math.sqrt(np.sum(gq * gq))
    if abs(gq[0]) <= 1e-10 * max(gnorm, 1e-300):
        rest = np.zeros(n)
        for i in range(n):
            shift = w[i] + lo
            if shift > tiny:
                rest[i] = gq[i] / shift
        norm2 = np.sum(rest * rest)
        if norm2 < radius * radius:
            p = -rest
            p[0] = math.sqrt(radius * radius - norm2)
            return q @ p
    # |p(lam)| falls from +inf at lam = lo to 0: the root is bracketed in (lo, b] with
    # |p(b)| <= |g| / (b + lam_min) = radius; Newton steps, bisection when they leave it
    a = lo
    b = max(lo, gnorm / radius - lam_min) + tiny
    lam = b
    for _ in range(100):
        d = w + lam
        pn = math.sqrt(np.sum((gq / d) ** 2))
        if abs(pn - radius) <= 1e-6 * radius:
            break
        if pn > radius:
            a = lam
        else:
            b = lam
        # phi(lam) = 1/radius - 1/|p|, phi' = (d|p|^2/d lam) / (2 |p|^3) < 0
        dphi = -np.sum(gq * gq / d**3) / pn**3
        new = lam - (1.0 / radius - 1.0 / pn) / dphi
        lam = new if a < new < b else 0.5 * (a + b)
    return q @ (-gq / (w + lam))


@numba.njit(cache=True, error_model="numpy")
def propose(g: np.ndarray, h: np.ndarray, xf: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            s: np.ndarray, radius: float, limited: int, max_limited: int, edm_max: float
            ) -> tuple[int, float, float, int, float, float, np.ndarray]:
    """One iteration of :func:`toyengine.core.newton.minimize` up to its trial point.

    ``g`` and ``h`` are the gradient and (symmetric) Hessian in the free parameters at their
    values ``xf``; ``lo``, ``hi`` their limits, ``s`` their scales, ``radius`` the trust
    radius in ``x / s`` (NaN before the first step), ``limited`` the steps shortened by a
    limit in a row. Returns ``(outcome, edm, radius, limited, predicted reduction,
    |p / s|, trial)``: :data:`CONVERGED` when ``edm = g^T h^-1 g / 2 < edm_max`` with
    ``h`` positive definite, :data:`NOT_FINITE`, :data:`LIMIT` after ``max_limited`` shortened
    steps in a row, else :data:`CONTINUE` with the trial values ``xf + p``.
    """
    n = g.shape[0]
    for i in range(n):
        if not math.isfinite(g[i]):
            return NOT_FINITE, math.nan, radius, limited, 0.0, 0.0, xf
        for j in range(n):
            if not math.isfinite(h[i, j]):
                return NOT_FINITE, math.nan, radius, limited, 0.0, 0.0, xf
    ok, hg = _cholesky_solve(h, g)
    edm = math.nan
    newton_norm = math.inf
    if ok:
        edm = 0.5 * np.sum(g * hg)
        if edm < edm_max:
            return CONVERGED, edm, radius, limited, 0.0, 0.0, xf
        newton_norm = math.sqrt(np.sum((hg / s) ** 2))
        if math.isnan(radius):  # first: the full Newton step
            radius = newton_norm
    if newton_norm <= radius:
        p = -hg  # the subproblem's solution when it is inside the region
    else:
        hs = h * np.outer(s, s)  # in the scaled variables
        w, q = np.linalg.eigh(hs)
        if math.isnan(radius):
            radius = 1.0
        p = subproblem(g * s, w, q, radius) * s
    # stay inside the box: a step crossing a limit goes half-way to it
    end = xf + p
    crosses = False
    for i in range(n):
        if end[i] > hi[i] or end[i] < lo[i]:
            crosses = True
    if crosses:
        alpha = math.inf
        for i in range(n):
            if p[i] != 0.0:
                room = (hi[i] - xf[i]) if p[i] > 0.0 else (lo[i] - xf[i])
                alpha = min(alpha, room / p[i])
        p = 0.5 * alpha * p
        limited += 1
        if limited >= max_limited:
            return LIMIT, edm, radius, limited, 0.0, 0.0, xf
        end = xf + p
    else:
        limited = 0
    pred = -(np.sum(g * p) + 0.5 * np.sum(p * (h @ p)))
    pnorm = math.sqrt(np.sum((p / s) ** 2))
    return CONTINUE, edm, radius, limited, pred, pnorm, end


@numba.njit(cache=True, error_model="numpy")
def amplitude_step(g: np.ndarray, h: np.ndarray, xf: np.ndarray, blocks: np.ndarray,
                   integrals: np.ndarray, lo: np.ndarray, hi: np.ndarray, s: np.ndarray,
                   radius: float) -> tuple[bool, np.ndarray, float, float]:
    """The Newton step taken in amplitude coordinates: ``(ok, trial, predicted reduction,
    |p / s|)``.

    A positive polynomial's yield ``N`` and angles ``φ`` (coefficients ``c(φ)`` on the unit
    sphere, :func:`~toyengine.core.model1d_kernels.sphere_products`) enter the density as
    the amplitudes ``u_k = N c_k(φ) / Σ_j c_j(φ) I_j`` of its basis functions (``I_j`` their
    integrals over the range): the density is linear in ``u``, so −ln L is far closer to
    quadratic in ``u`` than in ``φ``, where Newton's steps from the generation values of the
    T_cc+ pulls study approach the minimum only linearly. With the gradient and Hessian
    over ``x`` (free parameters, values ``xf``), those over ``u`` are
    ``g_u = J^-T g`` and ``H_u = J^-T (H - Σ_k g_u,k ∂²u_k/∂x²) J^-1`` (``J = ∂u/∂x``);
    the Newton step ``-H_u^-1 g_u`` is mapped back through ``c = u / Σu``, ``N = u · I``.

    ``blocks[b]`` holds the free-vector positions of block ``b``'s yield, then of its
    angles (padded with -1), ``integrals[b]`` its basis integrals ``I``. ``ok`` is false
    (and the caller keeps its own step) when an amplitude at ``xf`` is not positive (an
    angle on its limit, where ``J`` is singular), ``H_u`` is not positive definite, an
    amplitude of the trial is not positive (the minimum may be where an angle is on its
    limit), or the trial leaves ``[lo, hi]`` or its scaled length exceeds ``radius`` (NaN:
    no bound).
    """
    n = g.shape[0]
    jac = np.eye(n)
    nb, width = blocks.shape
    sizes = np.zeros(nb, dtype=np.int64)
    # per block: r_k = c_k / D and its derivatives over the angles (padded to ``width``)
    r = np.zeros((nb, width))
    dr = np.zeros((nb, width, width))
    d2r = np.zeros((nb, width, width, width))
    for b in range(nb):
        m = 0
        while m < width and blocks[b, m] >= 0:
            m += 1
        sizes[b] = m
        k_ang = m - 1
        phis = np.empty(k_ang)
        for j in range(k_ang):
            phis[j] = xf[blocks[b, j + 1]]
        c, dc, d2c = sphere_products(phis, 2)
        big_i = integrals[b, :m]
        d = np.sum(c * big_i)
        if not d > 0.0:
            return False, xf, 0.0, 0.0
        dd = big_i @ dc  # (k_ang,)
        d2d = np.zeros((k_ang, k_ang))
        for i in range(k_ang):
            for j in range(k_ang):
                d2d[i, j] = np.sum(big_i * d2c[:, i, j])
        for k in range(m):
            r[b, k] = c[k] / d
            for j in range(k_ang):
                dr[b, k, j] = dc[k, j] / d - c[k] * dd[j] / d**2
                for i in range(k_ang):
                    d2r[b, k, i, j] = (d2c[k, i, j] / d
                                       - (dc[k, i] * dd[j] + dc[k, j] * dd[i]) / d**2
                                       - c[k] * d2d[i, j] / d**2
                                       + 2.0 * c[k] * dd[i] * dd[j] / d**3)
        big_n = xf[blocks[b, 0]]
        for k in range(m):
            if not (big_n > 0.0 and r[b, k] > 0.0):  # J singular: an angle on its limit
                return False, xf, 0.0, 0.0
        for k in range(m):
            row = blocks[b, k]  # u_k takes the place of the block's k-th parameter
            jac[row, blocks[b, 0]] = r[b, k]
            for j in range(k_ang):
                jac[row, blocks[b, j + 1]] = big_n * dr[b, k, j]
    jinv = np.linalg.inv(jac)
    gu = jinv.T @ g
    corr = np.zeros((n, n))
    for b in range(nb):
        m = sizes[b]
        big_n = xf[blocks[b, 0]]
        for k in range(m):
            w = gu[blocks[b, k]]
            for j in range(m - 1):
                pj = blocks[b, j + 1]
                # d2u_k / dN dphi_j = dr_kj; d2u_k / dphi_i dphi_j = N d2r_kij; d2u/dN2 = 0
                corr[blocks[b, 0], pj] += w * dr[b, k, j]
                corr[pj, blocks[b, 0]] += w * dr[b, k, j]
                for i in range(m - 1):
                    corr[blocks[b, i + 1], pj] += w * big_n * d2r[b, k, i, j]
    hu = jinv.T @ (h - corr) @ jinv
    hu = 0.5 * (hu + hu.T)
    ok, hg = _cholesky_solve(hu, gu)
    if not ok:
        return False, xf, 0.0, 0.0
    trial = xf - hg  # entries outside the blocks: the Newton step in x
    for b in range(nb):
        m = sizes[b]
        big_n = xf[blocks[b, 0]]
        u = np.empty(m)
        for k in range(m):
            u[k] = big_n * r[b, k] - hg[blocks[b, k]]
            if not u[k] > 0.0:
                return False, xf, 0.0, 0.0
        trial[blocks[b, 0]] = np.sum(u * integrals[b, :m])
        tail = np.sum(u)
        for j in range(m - 1):
            ratio = min(1.0, u[j] / tail) if tail > 0.0 else 1.0
            trial[blocks[b, j + 1]] = math.acos(math.sqrt(ratio))
            tail -= u[j]
    for i in range(n):
        if not (lo[i] <= trial[i] <= hi[i]) or not math.isfinite(trial[i]):
            return False, xf, 0.0, 0.0
    pnorm = math.sqrt(np.sum(((trial - xf) / s) ** 2))
    if pnorm > radius:  # False for NaN
        return False, xf, 0.0, 0.0
    return True, trial, 0.5 * np.sum(gu * hg), pnorm


def load() -> None:
    """Load the kernels from numba's cache (compiling them the first time) for the argument
    types :func:`~toyengine.core.newton.minimize` passes."""
    one = np.ones(2)
    propose(one, np.eye(2), one, -one, one, one, math.nan, 0, 3, 1e-4)
    propose(one, -np.eye(2), one, -one, one, one, math.nan, 0, 3, 1e-4)
    x = np.array([10.0, 0.5, 0.5])
    amplitude_step(np.ones(3), np.eye(3), x, np.array([[0, 1, 2]]), np.ones((1, 3)),
                   -10 * x, 10 * x, np.ones(3), math.nan)
