"""Compiled loops of the Dalitz likelihood (numba, ``cache=True``, no fast-math): the K+π−
block of the normalisation matrices and its adjoint, a component's normalisation integral
(:class:`toyengine.core.dalitz.state._State`), and the per-event amplitude, densities, log
sum and gradient weights (:class:`toyengine.core.dalitz.nll.DalitzNLL`).

Each replaces a few whole-array numpy operations on a few thousand points (temporaries,
fancy-indexed copies, a call's overhead apiece) by one pass; a Z_c(4100) likelihood makes
them on every call (LHCb, Eur. Phys. J. C 78 (2018) 1019, Eqs. 5, 11 and 14). Imported
when a likelihood is first evaluated, never at ``import toyengine``.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["coarse_cross", "event_terms", "event_weights", "kpi_block", "kpi_row_weights",
           "normalise_component", "pair_integral", "set_cross", "weighted_sum"]


@numba.njit(cache=True)
def kpi_block(esel: np.ndarray, H: np.ndarray, pos: np.ndarray, comps: np.ndarray,
              ki: np.ndarray, N: np.ndarray) -> None:
    """For each K+π− row ``p = pos_d`` (component ``comps_d``): ``N[r, comps_d, ki_k] =
    Σ_a esel[r, p, k, a] H[p, a] H*[k, a]``, the integrals ``∫ F_j F_k* ε`` over the rows'
    quadrature (``esel``: the efficiency and angular weights per pair of components), and
    their complex conjugates into ``N[r, ki_k, comps_d]`` (row, then column, component by
    component)."""
    n_r, _, nk, na = esel.shape
    val = np.empty(nk, np.complex128)
    for d in range(pos.shape[0]):
        p = pos[d]
        j = comps[d]
        for r in range(n_r):
            for k in range(nk):
                s = 0j
                for a in range(na):
                    h = H[k, a]
                    s += esel[r, p, k, a] * complex(h.real, -h.imag) * H[p, a]
                val[k] = s
            for k in range(nk):
                N[r, j, ki[k]] = val[k]
            for k in range(nk):
                N[r, ki[k], j] = val[k].conjugate()


@numba.njit(cache=True)
def set_cross(N: np.ndarray, i: int, cols: np.ndarray, col: np.ndarray) -> None:
    """``N[r, i, cols_v] = col[r, v]``, then ``N[r, cols_v, i] = col[r, v]*``."""
    for r in range(col.shape[0]):
        for v in range(cols.shape[0]):
            N[r, i, cols[v]] = col[r, v]
        for v in range(cols.shape[0]):
            N[r, cols[v], i] = col[r, v].conjugate()


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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
        f_col[i] = (g[ev_start + i] * ang[i]) * nj
    return s
