"""Compiled inner loops of the 1-D likelihood (numba, ``cache=True``, no fast-math: IEEE
arithmetic, the same result on every call; numpy's error model: a division is a plain IEEE
division, without the zero check that would raise, so the loops vectorise).

Imported by :class:`~toyengine.core.model1d.UnbinnedNLL`, the generator of
:class:`~toyengine.core.model1d.Model1D`,
:meth:`~toyengine.core.lineshapes.BreitWignerGrid.density_derivatives` and the
``sphere_coefficients`` functions of :mod:`toyengine.core.lineshapes` when first used, never
by ``import toyengine``. The compiled code is cached next to this file (``__pycache__``, or
numba's cache directory where that is read-only), so only the first process after an
install or a change of this file pays the compilation (a few seconds); later processes pay
numba's import and start, and load the cached code (a few tenths of a second).

- :func:`nll_terms`: one pass over the events giving the densities, ``sum w ln D``, the
  gradient and the Hessian of the extended −ln L of a mixture of normalised components.
- :func:`bw_rows`: the relativistic Breit–Wigner on a grid with its first and second
  derivatives in (m0, Γ0).
- :func:`sphere_products`: the coefficients of a positive polynomial on the unit sphere
  with their first and second derivatives.
- :func:`inverse_cdf`: the exact inverse CDF of a piecewise-linear density.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["bw_rows", "inverse_cdf", "load", "nll_terms", "sphere_products"]


@numba.njit(cache=True, error_model="numpy")
def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """``sum_i x_i y_i`` in four interleaved partial sums (a fixed order, so the same
    result on every call, and four independent additions per step)."""
    n = x.shape[0]
    m = n - n % 4
    s0 = s1 = s2 = s3 = 0.0
    for i in range(0, m, 4):
        s0 += x[i] * y[i]
        s1 += x[i + 1] * y[i + 1]
        s2 += x[i + 2] * y[i + 2]
        s3 += x[i + 3] * y[i + 3]
    for i in range(m, n):
        s0 += x[i] * y[i]
    return (s0 + s1) + (s2 + s3)


@numba.njit(cache=True, error_model="numpy")
def nll_terms(k: np.ndarray, t: np.ndarray, w: np.ndarray, grid_rows: np.ndarray,
              basis: np.ndarray, lin: np.ndarray, iz: np.ndarray, zoff: np.ndarray,
              npar: np.ndarray, yidx: np.ndarray, pidx: np.ndarray, yields: np.ndarray,
              nparams: int, order: int
              ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """Event densities, ``sum_i w_i ln D_i`` and, for ``order`` 1 and 2, the gradient and
    Hessian of ``sum_c N_c - sum_i w_i ln D_i`` (constraint terms excluded).

    Every component ``c`` has rows ``z`` at each event: its unnormalised density ``g``,
    then (``order`` >= 1) its derivatives ``g_a`` in its ``npar[c]`` shape parameters,
    then (``order`` 2) ``g_ab`` for ``a <= b`` (row-major upper triangle); their integrals
    over the range ``I, I_a, I_ab`` are ``iz``, the component's rows starting at
    ``zoff[c]``. The rows of all components are, in this order, the linear interpolations
    ``(1 - t_i) G[:, k_i] + t_i G[:, k_i + 1]`` of the grid rows ``G = grid_rows`` and the
    combinations ``lin @ basis[:, i]`` of the fixed basis of the linear shapes at the
    events. With ``f = g / I``, ``D_i = sum_c N_c f_c(x_i)`` and
    ``a_i = w_i / max(D_i, 1e-300)``:

    - ``d/dN_c = 1 - sum_i a_i f_c`` and ``d/dθ_a = -N_c sum_i a_i f_a`` with
      ``f_a = (g_a - f I_a) / I``;
    - ``d2/dp dq = sum_i a_i D_p D_q / D_i - sum_i a_i D_pq`` with ``D_{N_c} = f_c``,
      ``D_θ = N_c f_θ``, ``D_{N_c θ} = f_θ`` and ``D_{θθ'} = N_c f_θθ'``, where
      differentiating ``f I = g`` twice gives
      ``f_ab = (g_ab - f_a I_b - f_b I_a - f I_ab) / I``.

    Only the sums ``sum_i a_i z_i`` of the rows enter the second term. The first is
    ``B M B^T`` with ``M = sum_i (a_i / D_i) r_i r_i^T`` over the interpolated value and
    first-derivative rows and the basis rows ``r_i``, and ``B`` the (constant) map from them
    to the derivatives of ``D_i``.

    ``yidx[c]`` is the parameter index of ``N_c`` (``yields[c]``), ``pidx`` the indices of
    the shape parameters of all components in turn. The densities are returned as
    computed (not clipped).
    """
    n = k.shape[0]
    ncomp = zoff.shape[0]
    rg = grid_rows.shape[0]
    rl = lin.shape[0]
    re = basis.shape[0]
    nraw = rg + re
    # the raw rows at the events: interpolated grid rows, then the basis rows
    raw = np.empty((nraw, n))
    for r in range(rg):
        g = grid_rows[r]
        out = raw[r]
        for i in range(n):
            ki = k[i]
            ti = t[i]
            out[i] = g[ki] * (1.0 - ti) + g[ki + 1] * ti
    raw[rg:] = basis
    # D_i: the parametric components' value rows and the basis rows, each times its
    # coefficient
    dens = np.zeros(n)
    bcoef = np.zeros(re)
    for c in range(ncomp):
        o = zoff[c]
        coef = yields[c] / iz[o]
        if o < rg:
            row = raw[o]
            for i in range(n):
                dens[i] += coef * row[i]
        else:
            for e in range(re):
                bcoef[e] += coef * lin[o - rg, e]
    for e in range(re):
        be = bcoef[e]
        row = raw[rg + e]
        for i in range(n):
            dens[i] += be * row[i]
    a = np.empty(n)
    q = np.empty(n)
    logsum = 0.0
    for i in range(n):
        d = dens[i]
        if d < 1e-300:  # a NaN stays
            d = 1e-300
        logsum += w[i] * math.log(d)
        a[i] = w[i] / d
        q[i] = a[i] / d
    grad = np.zeros(nparams)
    hess = np.zeros((nparams, nparams))
    if order == 0:
        return dens, logsum, grad, hess
    y = np.empty(rg + rl)  # sum_i a_i z_i
    for r in range(rg):
        y[r] = _dot(a, raw[r])
    ybasis = np.empty(re)
    for e in range(re):
        ybasis[e] = _dot(a, raw[rg + e])
    for r in range(rl):
        acc = 0.0
        for e in range(re):
            acc += lin[r, e] * ybasis[e]
        y[rg + r] = acc
    s = 0
    for c in range(ncomp):
        o = zoff[c]
        p = npar[c]
        inv = 1.0 / iz[o]
        sc = y[o] * inv  # sum_i a_i f_c
        yc = yidx[c]
        grad[yc] += 1.0 - sc
        cross = np.empty(p)  # sum_i a_i f_a
        for j in range(p):
            cross[j] = (y[o + 1 + j] - iz[o + 1 + j] * sc) * inv
            grad[pidx[s + j]] -= yields[c] * cross[j]
        if order == 2:
            tri = o + 1 + p
            for j in range(p):
                pj = pidx[s + j]
                hess[yc, pj] -= cross[j]
                hess[pj, yc] -= cross[j]
                for l in range(j, p):
                    pl = pidx[s + l]
                    second = (y[tri] - cross[j] * iz[o + 1 + l] - cross[l] * iz[o + 1 + j]
                              - sc * iz[tri]) * inv  # sum_i a_i f_jl
                    hess[pj, pl] -= yields[c] * second
                    if l != j:
                        hess[pl, pj] -= yields[c] * second
                    tri += 1
        s += p
    if order < 2:
        return dens, logsum, grad, hess
    # B: d D_i / d param = B r_i; the rows r: value and first-derivative rows of the
    # parametric components, then the basis rows
    used = np.empty(nraw, dtype=np.int64)
    nu = 0
    for c in range(ncomp):
        if zoff[c] < rg:
            for j in range(1 + npar[c]):
                used[nu] = zoff[c] + j
                nu += 1
    for e in range(re):
        used[nu] = rg + e
        nu += 1
    col = np.full(nraw, -1, dtype=np.int64)
    for u in range(nu):
        col[used[u]] = u
    bmat = np.zeros((nparams, nu))
    s = 0
    for c in range(ncomp):
        o = zoff[c]
        p = npar[c]
        inv = 1.0 / iz[o]
        yc = yidx[c]
        if o < rg:
            bmat[yc, col[o]] += inv
            for j in range(p):
                pj = pidx[s + j]
                bmat[pj, col[o + 1 + j]] += yields[c] * inv
                bmat[pj, col[o]] -= yields[c] * inv * (iz[o + 1 + j] * inv)
        else:
            for e in range(re):
                v = lin[o - rg, e]
                bmat[yc, col[rg + e]] += inv * v
                for j in range(p):
                    bmat[pidx[s + j], col[rg + e]] += yields[c] * inv * (
                        lin[o - rg + 1 + j, e] - iz[o + 1 + j] * inv * v)
        s += p
    # M = sum_i q_i r_i r_i^T
    qraw = np.empty((nu, n))
    for u in range(nu):
        row = raw[used[u]]
        out = qraw[u]
        for i in range(n):
            out[i] = q[i] * row[i]
    mmat = np.empty((nu, nu))
    for u in range(nu):
        for v in range(u, nu):
            mmat[u, v] = _dot(qraw[u], raw[used[v]])
            mmat[v, u] = mmat[u, v]
    bm = np.zeros((nparams, nu))  # B M
    for pp in range(nparams):
        for u in range(nu):
            acc = 0.0
            for v in range(nu):
                acc += bmat[pp, v] * mmat[v, u]
            bm[pp, u] = acc
    for pp in range(nparams):
        for qq in range(pp, nparams):
            acc = 0.0
            for u in range(nu):
                acc += bm[pp, u] * bmat[qq, u]
            hess[pp, qq] += acc
            if qq != pp:
                hess[qq, pp] += acc
    return dens, logsum, grad, hess


@numba.njit(cache=True, error_model="numpy")
def bw_rows(pref: np.ndarray, m2: np.ndarray, g: np.ndarray, m0: float, gamma0: float,
            c0: float, a: float, da: float) -> np.ndarray:
    """F, ∂F/∂m0, ∂F/∂Γ0, ∂²F/∂m0², ∂²F/∂m0∂Γ0 and ∂²F/∂Γ0² as the rows of one
    (6, n) array (the order in which a likelihood stacks them: value, gradient, upper
    triangle of the Hessian), for ``F = P w / (u² + w²)`` with ``P = pref``, ``u = m0² − m²``,
    ``w = Γ0 m0² c0 g`` (LHCb, Eur. Phys. J. C 78 (2018) 1019, Eqs. (7)–(8)).

    As a function of (u, w), with ``D = u² + w²``: ``F_w = P (u² − w²)/D²``,
    ``F_u = −2 P u w/D²``, ``F_ww = −F_uu = −2 P w (3u² − w²)/D³`` and
    ``F_uw = 2 P u (3w² − u²)/D³``; the chain rule with ``u' = 2 m0``, ``u'' = 2``,
    ``w_Γ = w/Γ0``, ``w_m = w (2/m0 + a)``, ``w_mm = w [(2/m0 + a)² − 2/m0² + a']``
    (``a = d ln c0/dm0``, ``da = a'``).
    """
    n = pref.shape[0]
    out = np.empty((6, n))
    lm = 2.0 / m0 + a
    c2 = lm * lm - 2.0 / (m0 * m0) + da  # w_mm = w c2
    u_m = 2.0 * m0
    inv_g = 1.0 / gamma0
    wscale = gamma0 * m0 * m0 * c0
    for i in range(n):
        w = wscale * g[i]
        u = m0 * m0 - m2[i]
        u2 = u * u
        w2 = w * w
        denom = u2 + w2
        r1 = pref[i] / denom  # P/D, then P/D²
        f = r1 * w
        r1 /= denom
        r2 = r1 / denom  # P/D³
        f_w = r1 * (u2 - w2)
        f_u = -2.0 * (r1 * (u * w))
        f_ww = -2.0 * ((3.0 * u2 - w2) * w * r2)
        f_uw = 2.0 * ((3.0 * w2 - u2) * u * r2)
        fw_w = f_w * w
        fww_w = f_ww * w
        d_mg = (f_uw * u_m + lm * fww_w + lm * f_w) * w * inv_g
        out[0, i] = f
        out[1, i] = f_u * u_m + lm * fw_w
        out[2, i] = fw_w * inv_g
        out[3, i] = (f_ww * (-u_m * u_m) + f_uw * (2.0 * u_m * lm) * w
                     + fww_w * w * (lm * lm) + 2.0 * f_u + fw_w * c2)
        out[4, i] = d_mg
        out[5, i] = fww_w * w * (inv_g * inv_g)
    return out


@numba.njit(cache=True, error_model="numpy")
def sphere_products(phis: np.ndarray, order: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The positive-polynomial coefficients ``b_k`` on the unit sphere (Ostap
    ``PositivePolynomial``; LHCb, Nature Communications 13 (2022) 3351, Eq. (2)) and, up to
    ``order``, ``∂b_k/∂φ_j`` and ``∂²b_k/∂φ_j∂φ_l``, shapes (n + 1,), (n + 1, n) and
    (n + 1, n, n) (zeros beyond ``order``).

    ``b_k = sin²φ_0 ⋯ sin²φ_{k−1} cos²φ_k`` (no cos² factor for ``k = n``), multiplied in
    that order. A derivative of the product replaces the factor of each differentiated
    angle by its derivative (the second derivative when both hit the same angle) and is
    zero when the angle is not a factor; (sin²)' = sin 2φ, (sin²)'' = 2 cos 2φ,
    (cos²)' = −sin 2φ, (cos²)'' = −2 cos 2φ. No division: exact at φ = 0 or π/2.
    """
    n = phis.shape[0]
    # per angle, its sin² and cos² factors: value, first and second derivative
    h = np.empty((n, 2, 3))
    for i in range(n):
        p = phis[i]
        sin_2p = math.sin(2.0 * p)
        cos_2p = math.cos(2.0 * p)
        h[i, 0, 0] = math.sin(p) ** 2
        h[i, 0, 1] = sin_2p
        h[i, 0, 2] = 2.0 * cos_2p
        h[i, 1, 0] = math.cos(p) ** 2
        h[i, 1, 1] = -sin_2p
        h[i, 1, 2] = -2.0 * cos_2p
    b = np.empty(n + 1)
    prod = 1.0
    for i in range(n):
        b[i] = prod * h[i, 1, 0]
        prod *= h[i, 0, 0]
    b[n] = prod
    jac = np.zeros((n + 1, n))
    hess = np.zeros((n + 1, n, n))
    if order == 0:
        return b, jac, hess
    for k in range(n + 1):
        m = min(k + 1, n)  # b_k has the factors of the angles 0..m-1
        for j in range(m):
            prod = 1.0
            for i in range(m):
                f = 0 if i < k else 1
                prod *= h[i, f, 1] if i == j else h[i, f, 0]
            jac[k, j] = prod
            if order < 2:
                continue
            for l in range(m):
                prod = 1.0
                for i in range(m):
                    f = 0 if i < k else 1
                    if i == j and i == l:
                        prod *= h[i, f, 2]
                    elif i == j or i == l:
                        prod *= h[i, f, 1]
                    else:
                        prod *= h[i, f, 0]
                hess[k, j, l] = prod
    return b, jac, hess


@numba.njit(cache=True, error_model="numpy")
def inverse_cdf(grid: np.ndarray, dens: np.ndarray, area: np.ndarray, below: np.ndarray,
                dx: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The inverse CDF of the piecewise-linear density through ``(grid, dens)`` at ``u``,
    given the cells' trapezoid ``area``, the cumulative area ``below`` each node (leading
    zero) and the cell widths ``dx``.

    ``u * total`` picks the last cell whose cumulative area is at most it (a binary
    search); the remainder ``w`` in ``[0, 1]`` of that cell's area is inverted exactly:
    inside a cell of densities ``a`` and ``b`` the CDF of ``a + (b - a) t`` is ``w`` at
    ``t = w (a + b) / (a + sqrt(a^2 + (b^2 - a^2) w))``.
    """
    ncell = area.shape[0]
    total = below[ncell]
    out = np.empty(u.shape[0])
    for i in range(u.shape[0]):
        target = u[i] * total
        lo = 0  # the number of nodes 1..ncell with below <= target (searchsorted right)
        hi = ncell
        while lo < hi:
            mid = (lo + hi) >> 1
            if below[mid + 1] <= target:
                lo = mid + 1
            else:
                hi = mid
        cell = min(lo, ncell - 1)
        ac = area[cell]
        wc = (target - below[cell]) / ac if ac > 0 else 0.5
        if wc < 0.0:
            wc = 0.0
        elif wc > 1.0:
            wc = 1.0
        a = dens[cell]
        b = dens[cell + 1]
        den = a + math.sqrt(a * a + (b * b - a * a) * wc)
        tc = wc * (a + b) / den if den > 0 else wc
        out[i] = grid[cell] + tc * dx[cell]
    return out


@numba.njit(cache=True, error_model="numpy")
def sphere_rows(phis: np.ndarray, order: int) -> np.ndarray:
    """:func:`sphere_products` as the rows a likelihood stacks for a positive polynomial:
    ``b``, then (``order`` >= 1) ``∂b/∂φ_j`` for each ``j``, then (``order`` 2)
    ``∂²b/∂φ_a∂φ_c`` for ``a <= c`` (row-major upper triangle); shape (rows, n + 1). The same
    numbers as :func:`sphere_products`, without the Python around it."""
    b, jac, hess = sphere_products(phis, order)
    n = phis.shape[0]
    rows = 1 + (n if order >= 1 else 0) + (n * (n + 1) // 2 if order >= 2 else 0)
    out = np.empty((rows, n + 1))
    out[0] = b
    if order >= 1:
        for j in range(n):
            out[1 + j] = jac[:, j]
    if order >= 2:
        r = 1 + n
        for a in range(n):
            for c in range(a, n):
                out[r] = hess[:, a, c]
                r += 1
    return out


def load() -> None:
    """Load every kernel from the cache (compiling it the first time) for the argument
    types the likelihood and the generator pass: a worker's warm-up calls this, so that its
    first toy does not pay numba's start (a few tenths of a second)."""
    one = np.ones(2)
    ints = np.zeros(1, dtype=np.int64)
    rows = np.ones((1, 2))
    nll_terms(ints, np.zeros(1), np.ones(1), rows, np.empty((0, 1)), np.empty((0, 0)),
              np.ones(1), ints, ints, ints, np.empty(0, dtype=np.int64), np.ones(1), 1, 2)
    bw_rows(one, one, one, 1.0, 1.0, 1.0, 0.0, 0.0)
    inverse_cdf(one, one, np.ones(1), np.array([0.0, 1.0]), np.ones(1), np.full(1, 0.5))
    sphere_products(one, 2)
    for order in range(3):
        sphere_rows(one, order)
