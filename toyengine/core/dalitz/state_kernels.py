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

__all__ = ["event_terms", "event_weights", "kpi_block", "kpi_row_weights", "weighted_norm2",
           "weighted_sum"]


@numba.njit(cache=True)
def weighted_norm2(w: np.ndarray, g: np.ndarray, start: int) -> float:
    """``Σ_k w_k |g_{start+k}|²``: a component's normalisation integral (Eq. 5) from its
    values at the rule's points."""
    s = 0.0
    for k in range(w.shape[0]):
        v = g[start + k]
        s += w[k] * (v.real * v.real + v.imag * v.imag)
    return s


@numba.njit(cache=True)
def kpi_block(esel: np.ndarray, H: np.ndarray, pos: np.ndarray, out: np.ndarray) -> None:
    """``out[r, d, k] = Σ_a esel[r, pos_d, k, a] H*[k, a] H[pos_d, a]``: the rows ``pos`` of
    the K+π− block of every run's normalisation matrix, ``∫ F_j F_k* ε`` over the rows'
    quadrature (``esel``: the efficiency and angular weights per pair of components)."""
    n_r, _, nk, na = esel.shape
    for r in range(n_r):
        for d in range(pos.shape[0]):
            p = pos[d]
            for k in range(nk):
                s = 0j
                for a in range(na):
                    h = H[k, a]
                    s += esel[r, p, k, a] * complex(h.real, -h.imag) * H[p, a]
                out[r, d, k] = s


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
