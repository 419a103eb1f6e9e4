"""Compiled point loops of the Dalitz lineshapes (numba, ``cache=True``, no fast-math: IEEE
arithmetic in the order of the formulas, the same result on every call; numpy's error model,
so that a division is a division — no zero check that would raise, which also keeps the
loops vectorisable — and a zero denominator gives ``inf``/``nan`` as numpy does).

The relativistic Breit–Wigner and the LASS family of LHCb, Eur. Phys. J. C 78 (2018) 1019,
Eqs. (7)–(10), and their exact parameter derivatives, one pass over the points instead of
a dozen whole-array numpy operations (a Z_c(4100) likelihood evaluates them at every
event, thousands of points, on every call). The parameter-only terms (pole momentum,
Blatt–Weisskopf factor at the pole, their derivatives) are computed by the caller,
:class:`toyengine.core.dalitz.resonances.Lineshape`, which imports this module when a
lineshape is first evaluated, never at ``import toyengine``. The compiled code is cached
next to this file (or in numba's cache directory where that is read-only).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["lass_derivatives", "lass_values", "rbw_derivatives", "rbw_values"]


@numba.njit(cache=True, error_model="numpy")
def rbw_values(s: np.ndarray, G: np.ndarray, base: np.ndarray, m0sq: float, c: float,
               sqrt_d0: float) -> np.ndarray:
    """``g = sqrt(D0) base / (m0² − s − i c G)`` (Eqs. 7–8) at every point."""
    out = np.empty(s.shape[0], np.complex128)
    for i in range(s.shape[0]):
        re = m0sq - s[i]
        im = c * G[i]
        f = (sqrt_d0 * base[i]) / (re * re + im * im)
        out[i] = complex(re * f, im * f)
    return out


@numba.njit(cache=True, error_model="numpy")
def rbw_derivatives(g: np.ndarray, s: np.ndarray, G: np.ndarray, m0: float, c: float,
                    half_dlnd0: float, dlnc: float, inv_w0: float, row_m: int, row_w: int,
                    out: np.ndarray) -> None:
    """``∂g/∂m0`` into ``out[row_m]`` and ``∂g/∂Γ0`` into ``out[row_w]`` (MeV⁻¹; a row
    index < 0 skips it): with ``g = sqrt(D0) base / (re − i c G)``,
    ``∂g = g ½ ∂ln D0 − g ∂(re − i c G) / (re − i c G)``; ``half_dlnd0`` is
    ``0.5e-3 ∂ln D0/∂m0``, ``dlnc`` is ``1e-3 ∂ln c/∂m0``, ``inv_w0`` is ``1e-3/Γ0``."""
    m0sq = m0 * m0
    for i in range(s.shape[0]):
        re = m0sq - s[i]
        cg = c * G[i]
        inv = 1.0 / (re * re + cg * cg)
        gi = g[i] * complex(re * inv, cg * inv)
        if row_m >= 0:
            out[row_m, i] = half_dlnd0 * g[i] - gi * complex(2e-3 * m0, -(dlnc * cg))
        if row_w >= 0:
            out[row_w, i] = gi * complex(0.0, inv_w0 * cg)


@numba.njit(cache=True, error_model="numpy")
def lass_values(q: np.ndarray, q2: np.ndarray, s: np.ndarray, q_over_m: np.ndarray,
                m_below: np.ndarray, inv_a: float, half_r: float, m0: float, scale: float,
                nr: bool, bw: bool) -> np.ndarray:
    """The LASS amplitude (Eqs. 9–10): with ``q cot δ_B = 1/a + r q²/2``, the
    non-resonant term ``m/(q cot δ_B − i q)`` below the cut-off (``nr``; ``m_below`` is
    ``m`` there, zero above) plus ``e^{2iδ_B}`` times the Breit–Wigner
    ``scale/(m0² − m² − i scale q/m)`` (``bw``)."""
    n = q.shape[0]
    out = np.empty(n, np.complex128)
    m0sq = m0 * m0
    for i in range(n):
        qcot = inv_a + half_r * q2[i]
        den = qcot * qcot + q2[i]
        re = 0.0
        im = 0.0
        if nr:
            f = m_below[i] / den
            re = qcot * f
            im = q[i] * f
        if bw:
            e_re = (qcot * qcot - q2[i]) / den
            e_im = 2.0 * qcot * q[i] / den
            b_re = m0sq - s[i]
            b_im = scale * q_over_m[i]
            f = scale / (b_re * b_re + b_im * b_im)
            b_re = b_re * f
            b_im = b_im * f
            re += e_re * b_re - e_im * b_im
            im += e_re * b_im + e_im * b_re
        out[i] = complex(re, im)
    return out


@numba.njit(cache=True, error_model="numpy")
def lass_derivatives(q: np.ndarray, q2: np.ndarray, s: np.ndarray, q_over_m: np.ndarray,
                     m_below: np.ndarray, a: float, r: float, m0: float, scale: float,
                     dm_scale: float, dw_scale: float, nr: bool, bw: bool, row_m: int,
                     row_w: int, row_a: int, row_r: int, out: np.ndarray) -> None:
    """Derivatives of :func:`lass_values` into the rows ``row_m, row_w, row_a, row_r`` of
    ``out`` (pole mass and width per MeV, scattering length and effective range; a row
    index < 0 skips it). With ``D = q cot δ_B − i q``: ``∂g/∂(q cot δ_B)`` is
    ``−m/D²`` (non-resonant) plus ``−2 i q BW / D²`` (from ``e^{2iδ_B} = (q cot δ_B + i
    q)/D``), and ``∂(q cot δ_B)`` is ``−1/a²`` and ``q²/2``; the Breit–Wigner enters through
    ``scale = m0² Γ0/q0``: ``dm_scale`` is ``1e-3 ∂ln scale/∂m0 · scale`` and ``dw_scale``
    ``1e-3 scale/Γ0``."""
    need_q = row_a >= 0 or row_r >= 0
    m0sq = m0 * m0
    inv_a = 1.0 / a
    half_r = 0.5 * r
    da = -1.0 / (a * a)
    for i in range(q.shape[0]):
        qcot = inv_a + half_r * q2[i]
        # 1/(x − i y) = (x + i y)/(x² + y²): a real division, not a complex one
        f = 1.0 / (qcot * qcot + q2[i])
        idn = complex(qcot * f, q[i] * f)
        idn2 = idn * idn
        dqc = 0j
        if nr and need_q:
            dqc -= m_below[i] * idn2
        if bw:
            b_re = m0sq - s[i]
            b_im = scale * q_over_m[i]
            f = 1.0 / (b_re * b_re + b_im * b_im)
            idb = complex(b_re * f, b_im * f)
            bwv = scale * idb
            if need_q:
                dqc += complex(0.0, -2.0 * q[i]) * idn2 * bwv
            if row_m >= 0 or row_w >= 0:
                e_db = complex(qcot, q[i]) * idn * idb
                dbw_ds = e_db * b_re * idb  # e^{2iδ} ∂BW/∂scale
                if row_m >= 0:
                    out[row_m, i] = dbw_ds * dm_scale - e_db * bwv * (2e-3 * m0)
                if row_w >= 0:
                    out[row_w, i] = dbw_ds * dw_scale
        if row_a >= 0:
            out[row_a, i] = dqc * da
        if row_r >= 0:
            out[row_r, i] = dqc * (0.5 * q2[i])
