"""Compiled loops of the Dalitz likelihood (numba, ``cache=True``, no fast-math, numpy's
error model as in :mod:`.resonance_kernels`): the K+π− block of the normalisation matrices
and its adjoint, a component's normalisation integral and the copies of its normalised
values (:class:`toyengine.core.dalitz.state._State`); the per-event amplitude, densities,
log sum and gradient weights, the event Jacobian's rows and the restricted likelihood's
sums (:class:`toyengine.core.dalitz.nll.DalitzNLL`).

Each replaces a few whole-array numpy operations on a few thousand points (temporaries,
fancy-indexed copies, a call's overhead apiece) by one pass; a Z_c(4100) likelihood makes
them on every call (LHCb, Eur. Phys. J. C 78 (2018) 1019, Eqs. 5, 11 and 14). Imported
when a likelihood is first evaluated, never at ``import toyengine``.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["coarse_cross", "coefficient_jacobian", "coupling_sums", "event_terms",
           "event_weights", "gradient_weights", "kpi_block", "kpi_row_weights",
           "lineshape_jacobian", "normalise_component", "pair_integral", "set_cross",
           "weighted_sum"]


@numba.njit(cache=True, error_model="numpy")
def kpi_block(esel: np.ndarray, H: np.ndarray, pos: np.ndarray, comps: np.ndarray,
              ki: np.ndarray, N: np.ndarray) -> None:
    """For each K+π− row ``p = pos_d`` (component ``comps_d``): ``N[r, comps_d, ki_k] =
    Σ_a esel[r, p, k, a] H[p, a] H*[k, a]``, the integrals ``∫ F_j F_k* ε`` over the rows'
    quadrature (``esel``: the efficiency and angular weights per pair of components), and
    their complex conjugates into ``N[r, ki_k, comps_d]`` (row, then column, component by
    component)."""
    n_r, _, nk, na = esel.shape
    val = np.empty((n_r, nk), np.complex128)
    for d in range(pos.shape[0]):
        p = pos[d]
        j = comps[d]
        # two runs at a time: two independent sums over a (each in the order of a) instead
        # of one whose every addition waits for the last; an odd last run alone
        for r in range(0, n_r - 1, 2):
            for k in range(nk):
                s0 = 0j
                s1 = 0j
                for a in range(na):
                    h = H[k, a]
                    hc = complex(h.real, -h.imag)
                    hp = H[p, a]
                    s0 += esel[r, p, k, a] * hc * hp
                    s1 += esel[r + 1, p, k, a] * hc * hp
                val[r, k] = s0
                val[r + 1, k] = s1
        if n_r % 2:
            for k in range(nk):
                s0 = 0j
                for a in range(na):
                    h = H[k, a]
                    s0 += esel[n_r - 1, p, k, a] * complex(h.real, -h.imag) * H[p, a]
                val[n_r - 1, k] = s0
        for r in range(n_r):
            for k in range(nk):
                N[r, j, ki[k]] = val[r, k]
            for k in range(nk):
                N[r, ki[k], j] = val[r, k].conjugate()


@numba.njit(cache=True, error_model="numpy")
def set_cross(N: np.ndarray, i: int, cols: np.ndarray, col: np.ndarray) -> None:
    """``N[r, i, cols_v] = col[r, v]``, then ``N[r, cols_v, i] = col[r, v]*``."""
    for r in range(col.shape[0]):
        for v in range(cols.shape[0]):
            N[r, i, cols[v]] = col[r, v]
        for v in range(cols.shape[0]):
            N[r, cols[v], i] = col[r, v].conjugate()


@numba.njit(cache=True, error_model="numpy")
def coarse_cross(R: np.ndarray, var_l: np.ndarray, var_pos: np.ndarray, rows_c: np.ndarray,
                 i: int, cols: np.ndarray, N: np.ndarray) -> None:
    """``N[r, i, cols_v] = Σ_a R[r, var_l_v, a] h*_{var_pos_v}(a)`` over the coarse rows
    (an other-pair component against the floating K+π− ones), and the conjugates into
    ``N[r, cols_v, i]``."""
    n_r = R.shape[0]
    col = np.empty((n_r, var_pos.shape[0]), np.complex128)
    for r in range(n_r):
        for v in range(var_pos.shape[0]):
            s = 0j
            for a in range(R.shape[2]):
                h = rows_c[var_pos[v], a]
                s += R[r, var_l[v], a] * complex(h.real, -h.imag)
            col[r, v] = s
    set_cross(N, i, cols, col)


@numba.njit(cache=True, error_model="numpy")
def pair_integral(kap: np.ndarray, gi: np.ndarray, gk: np.ndarray, i: int, k: int,
                  N: np.ndarray) -> None:
    """``N[r, i, k] = Σ_a kap[r, a] g_i(a) g_k*(a)`` (two components of one other pair, on
    its nodes), then ``N[r, k, i]`` its conjugate."""
    for r in range(kap.shape[0]):
        s = 0j
        for a in range(kap.shape[1]):
            h = gk[a]
            s += kap[r, a] * (gi[a] * complex(h.real, -h.imag))
        N[r, i, k] = s
        N[r, k, i] = s.conjugate()


@numba.njit(cache=True, error_model="numpy")
def kpi_row_weights(fracs: np.ndarray, esel: np.ndarray, kj: int, cc: np.ndarray,
                    H: np.ndarray, out: np.ndarray, start: int) -> None:
    """``out[start + a] = Σ_k cc_k H*[k, a] Σ_r fracs_r esel[r, kj, k, a]``: the adjoint of
    :func:`kpi_block` along row ``kj`` (``cc``: the conjugate coefficients of the K+π−
    components, ``fracs``: one weight per run)."""
    n_r, _, nk, na = esel.shape
    for a in range(na):
        out[start + a] = 0j
    for k in range(nk):
        ck = cc[k]
        for a in range(na):
            e = 0.0
            for r in range(n_r):
                e += fracs[r] * esel[r, kj, k, a]
            h = H[k, a]
            out[start + a] += ck * e * complex(h.real, -h.imag)


@numba.njit(cache=True, error_model="numpy")
def event_terms(Ft: np.ndarray, c: np.ndarray, ej: np.ndarray, run_of: np.ndarray,
                scale: np.ndarray, b: np.ndarray, A: np.ndarray, a2: np.ndarray,
                sig: np.ndarray, tot: np.ndarray) -> None:
    """Per event: the amplitude ``A = Σ_j c_j F_j`` (``Ft``: one row per component),
    ``|A|²``, the signal density ``N_r ε|J| |A|² / I_r`` (``scale_r = N_r / I_r``,
    ``ej = ε|J|``) and the total, signal plus ``b`` (the backgrounds; empty: none) —
    Eqs. 4, 11 and 14 of LHCb, Eur. Phys. J. C 78 (2018) 1019."""
    nc, n = Ft.shape
    for i in range(n):
        A[i] = 0j
    for j in range(nc):
        cj = c[j]
        for i in range(n):
            A[i] += Ft[j, i] * cj
    has_b = b.shape[0] == n
    for i in range(n):
        v = A[i]
        p = v.real * v.real + v.imag * v.imag
        a2[i] = p
        s = p * ej[i] * scale[run_of[i]]
        sig[i] = s
        tot[i] = s + b[i] if has_b else s


@numba.njit(cache=True, error_model="numpy")
def weighted_sum(v: np.ndarray, w: np.ndarray) -> float:
    """``Σ_i w_i v_i`` (``w`` empty: unit weights), summed in event order with Neumaier's
    compensation (Z. Angew. Math. Mech. 54 (1974) 39): the same value on every machine,
    whatever BLAS's threads, and exact to about one rounding of the sum; unit weights give
    exactly the unweighted sum."""
    s = 0.0
    comp = 0.0
    weighted = w.shape[0] == v.shape[0]
    for i in range(v.shape[0]):
        x = w[i] * v[i] if weighted else v[i]
        t = s + x
        if abs(s) >= abs(x):
            comp += (s - t) + x
        else:
            comp += (x - t) + s
        s = t
    return s + comp


@numba.njit(cache=True, error_model="numpy")
def event_weights(A: np.ndarray, a2: np.ndarray, sig: np.ndarray, tot: np.ndarray,
                  ej: np.ndarray, run_of: np.ndarray, scale: np.ndarray, w: np.ndarray,
                  aw: np.ndarray, inv: np.ndarray, sums: np.ndarray) -> None:
    """The per-event factors of the gradient of ``−Σ_i w_i ln tot_i``: ``inv_i = w_i /
    tot_i`` (``w`` empty: unit weights), ``aw_i = A_i* scale_r ε|J|_i inv_i`` (``∂ ln
    tot_i/∂|A_i|²`` times ``A_i*``), and per run ``sums[0, r] = Σ |A|² ε|J| inv`` and
    ``sums[1, r] = Σ sig inv``."""
    weighted = w.shape[0] == tot.shape[0]
    sums[:] = 0.0
    for i in range(tot.shape[0]):
        v = 1.0 / max(tot[i], 1e-300)
        if weighted:
            v = v * w[i]
        inv[i] = v
        r = run_of[i]
        e = ej[i] * v
        sums[0, r] += a2[i] * e
        sums[1, r] += sig[i] * v
        f = scale[r] * e
        aw[i] = complex(A[i].real * f, -A[i].imag * f)


@numba.njit(cache=True, error_model="numpy")
def normalise_component(g: np.ndarray, w: np.ndarray, start: int, out1: np.ndarray,
                        start1: int, out2: np.ndarray, start2: int, f_col: np.ndarray,
                        ev_start: int, ang: np.ndarray) -> float:
    """A component's normalisation integral ``Σ_k w_k |g_{start+k}|²`` (Eq. 5), and, with
    ``n = 1/sqrt(integral)``, its normalised values copied where the state keeps them:
    ``out1 = n g[start1:]`` and ``out2 = n g[start2:]`` (its rows and coarse rows, or its
    spline nodes and grid; empty: none) and its column of the event matrix, ``f_col =
    g[ev_start:] P_L(cos θ) n``. Nothing is written unless the integral is positive and
    finite (the caller raises then)."""
    s = 0.0
    for k in range(w.shape[0]):
        v = g[start + k]
        s += w[k] * (v.real * v.real + v.imag * v.imag)
    if not (s > 0.0 and np.isfinite(s)):
        return s
    nj = 1.0 / np.sqrt(s)
    for a in range(out1.shape[0]):
        out1[a] = nj * g[start1 + a]
    for a in range(out2.shape[0]):
        out2[a] = nj * g[start2 + a]
    for i in range(f_col.shape[0]):
        # (g P_L) n in real arithmetic: the same products as the complex ones (whose extra
        # terms, times the zero imaginary part of a real factor, add nothing), ~1.5x faster
        v = g[ev_start + i]
        an = ang[i]
        f_col[i] = complex((v.real * an) * nj, (v.imag * an) * nj)
    return s


@numba.njit(cache=True, error_model="numpy")
def coupling_sums(a0: np.ndarray, beta: np.ndarray, gam3: np.ndarray, u: np.ndarray,
                  kr: np.ndarray, ej: np.ndarray, run_of: np.ndarray, b: np.ndarray,
                  w: np.ndarray, bN: np.ndarray, GN: np.ndarray, I: np.ndarray,
                  tot: np.ndarray, ga: np.ndarray, ha: np.ndarray) -> None:
    """Gradient ``ga`` and Hessian ``ha`` of ``−Σ w ln tot`` in some cartesian couplings
    ``u`` (:class:`toyengine.core.dalitz.nll._CouplingNLL`), and ``tot`` per event.

    Per event ``|A|² = a0 + β·u + u·Γu``, ``p = ∂|A|²/∂u = β + 2Γu``, ``tot = N_r/I_r
    ε|J| |A|² + b`` (``kr = N_r/I_r``, ``ej = ε|J|``; ``b`` empty: no backgrounds), ``wv =
    ∂tot/∂|A|² / tot`` and ``ww = w wv`` (``w`` empty: unit weights); per run the sums ``Sp
    = Σ ww p``, ``SP = Σ ww |A|²``, ``upp = Σ ww wv p pᵀ``, ``upP = Σ ww wv |A|² p``, ``uPP
    = Σ ww wv |A|⁴``, ``q = 2 Σ ww Γ``; with ``J = ∂ln I_r/∂u = (bN_r + 2 GN_r u)/I_r``,
    ``ga = −Σ_r (Sp − SP J)`` and ``ha = Σ_r [upp − J upPᵀ − upP Jᵀ + uPP J Jᵀ − q + J Spᵀ
    + Sp Jᵀ + SP 2GN_r/I_r − 2 SP J Jᵀ]`` (the run normalisation ``I_r = I0 + bN·u +
    u·GN u``, Eur. Phys. J. C 78 (2018) 1019, Eq. 14)."""
    nf, n = beta.shape
    n_r = I.shape[0]
    weighted = w.shape[0] == n
    has_b = b.shape[0] == n
    Sp = np.zeros((n_r, nf))
    SP = np.zeros(n_r)
    upp = np.zeros((n_r, nf, nf))
    upP = np.zeros((n_r, nf))
    uPP = np.zeros(n_r)
    q = np.zeros((n_r, nf, nf))
    p = np.empty(nf)
    for i in range(n):
        s1 = 0.0
        s2 = 0.0
        for a in range(nf):
            gu = 0.0
            for c in range(nf):
                gu += gam3[a, c, i] * u[c]
            s1 += u[a] * beta[a, i]
            s2 += u[a] * gu
            p[a] = beta[a, i] + 2.0 * gu
        P = a0[i] + s1 + s2
        r = run_of[i]
        ke = kr[r] * ej[i]
        t = ke * P + b[i] if has_b else ke * P
        tot[i] = t
        wv = ke / max(t, 1e-300)
        ww = wv * w[i] if weighted else wv
        uP = ww * wv * P
        SP[r] += ww * P
        uPP[r] += uP * P
        www = ww * wv
        for a in range(nf):
            Sp[r, a] += p[a] * ww
            upP[r, a] += p[a] * uP
            for c in range(nf):
                upp[r, a, c] += p[a] * www * p[c]
                q[r, a, c] += gam3[a, c, i] * ww
    J = np.empty(nf)
    for a in range(nf):
        ga[a] = 0.0
        for c in range(nf):
            ha[a, c] = 0.0
    for r in range(n_r):
        for a in range(nf):
            gnu = 0.0
            for c in range(nf):
                gnu += GN[r, a, c] * u[c]
            J[a] = (bN[r, a] + 2.0 * gnu) / I[r]
        for a in range(nf):
            ga[a] -= Sp[r, a] - SP[r] * J[a]
            for c in range(nf):
                jj = J[a] * J[c]
                ha[a, c] += (upp[r, a, c] - J[a] * upP[r, c] - J[c] * upP[r, a]
                             + uPP[r] * jj - 2.0 * q[r, a, c] + J[a] * Sp[r, c]
                             + J[c] * Sp[r, a] + SP[r] * (2.0 * GN[r, a, c] / I[r])
                             - 2.0 * SP[r] * jj)


@numba.njit(cache=True, error_model="numpy")
def coefficient_jacobian(Ft: np.ndarray, A: np.ndarray, scale: np.ndarray, rel: np.ndarray,
                         Nc: np.ndarray, run_of: np.ndarray, c_idx: np.ndarray, polar: bool,
                         rho: np.ndarray, phi: np.ndarray, J: np.ndarray) -> None:
    """Adds ``∂tot_i/∂`` (the coefficient parameters of every component) to the rows
    ``c_idx`` of ``J``: ``∂tot_i/∂Re c_j = 2 scale_i Re(A_i* F_ij) − rel_i 2 Re(Nc_rj)`` and
    ``∂tot_i/∂Im c_j = −2 scale_i Im(A_i* F_ij) + rel_i 2 Im(Nc_rj)`` (``scale_i = N_r
    ε|J|_i / I_r``, ``rel_i = sig_i / I_r``, ``Nc = N c*``), through ``c = ρ e^{iφ}`` for
    polar coefficients."""
    nc, n = Ft.shape
    for j in range(nc):
        ra = c_idx[j, 0]
        rb = c_idx[j, 1]
        cp = np.cos(phi[j]) if polar else 1.0
        sp = np.sin(phi[j]) if polar else 0.0
        for i in range(n):
            a = A[i]
            f = Ft[j, i]
            pre = a.real * f.real + a.imag * f.imag  # Re(A* F)
            pim = a.real * f.imag - a.imag * f.real  # Im(A* F)
            nc_ = Nc[run_of[i], j]
            d_re = (2.0 * scale[i]) * pre - rel[i] * (2.0 * nc_.real)
            d_im = (-2.0 * scale[i]) * pim + rel[i] * (2.0 * nc_.imag)
            if polar:
                J[ra, i] += d_re * cp + d_im * sp
                J[rb, i] += rho[j] * (-d_re * sp + d_im * cp)
            else:
                J[ra, i] += d_re
                J[rb, i] += d_im


@numba.njit(cache=True, error_model="numpy")
def lineshape_jacobian(dg: np.ndarray, ev_start: int, ang: np.ndarray, nj: float,
                       rho_n: np.ndarray, f_col: np.ndarray, cj: complex, A: np.ndarray,
                       scale: np.ndarray, rel: np.ndarray, dI: np.ndarray,
                       run_of: np.ndarray, rows: np.ndarray, J: np.ndarray) -> None:
    """Adds ``∂tot_i/∂θ_p`` for the lineshape parameters ``θ_p`` of one component to the
    rows ``rows_p`` of ``J``: ``scale_i 2 Re(c_j ∂F_ij A_i*) − rel_i ∂I_r/∂θ_p`` with
    ``∂F_ij = n_j ∂g_j(i) P_L(cos θ_i) + (∂n_j/n_j) F_ij`` (``dg``: ``∂g_j`` at the
    component's points, its events from ``ev_start``; ``rho_n = ∂n_j/n_j``; ``dI``: one
    column per run)."""
    n = A.shape[0]
    for p in range(rows.shape[0]):
        row = rows[p]
        rp = rho_n[p]
        for i in range(n):
            d = nj * dg[p, ev_start + i] * ang[i] + rp * f_col[i]
            v = cj * d
            a = A[i]
            da2 = 2.0 * (v.real * a.real + v.imag * a.imag)  # 2 Re(c ∂F A*)
            J[row, i] += scale[i] * da2 - rel[i] * dI[p, run_of[i]]


@numba.njit(cache=True, error_model="numpy")
def gradient_weights(W: np.ndarray, s: complex, ev_start: int, ang: np.ndarray,
                     aw: np.ndarray, sel_start: int, coef: float, norm_w: np.ndarray,
                     g: np.ndarray) -> None:
    """In place, the weights ``W`` of ``Re Σ ∂g_j W`` (a lineshape parameter's gradient
    term): the normalisation adjoint ``W`` times ``s = 2 c_j n_j``, minus ``s P_L aw`` at
    the events (``aw = A* ∂ln tot/∂|A|²``) and ``coef w g*`` at the points of the
    component's normalisation integral (``coef = n_j² k``, Eq. 5)."""
    for a in range(W.shape[0]):
        W[a] = s * W[a]
    for i in range(aw.shape[0]):
        W[ev_start + i] -= s * (ang[i] * aw[i])
    for k in range(norm_w.shape[0]):
        v = g[sel_start + k]
        W[sel_start + k] -= (coef * norm_w[k]) * complex(v.real, -v.imag)
