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
                    half_dlnd0: float, dlnc: float, inv_w0: float, out: np.ndarray) -> None:
    """``∂g/∂m0`` into ``out[:, 0]`` and ``∂g/∂Γ0`` into ``out[:, 1]`` (MeV⁻¹; ``out[0]``
    the real parts, ``out[1]`` the imaginary ones): with ``g = sqrt(D0) base / (re − i c
    G)``, ``∂g = g ½ ∂ln D0 − g ∂(re − i c G) / (re − i c G)``; ``half_dlnd0`` is ``0.5e-3
    ∂ln D0/∂m0``, ``dlnc`` is ``1e-3 ∂ln c/∂m0``, ``inv_w0`` is ``1e-3/Γ0``.

    Real arithmetic, operation by operation that of the complex expressions (the same
    bits for finite values); real planes, not complex rows, because stores into several
    complex rows keep the loop from being vectorised (5× slower)."""
    m0sq = m0 * m0
    u = 2e-3 * m0
    for i in range(s.shape[0]):
        re = m0sq - s[i]
        cg = c * G[i]
        inv = 1.0 / (re * re + cg * cg)
        a = re * inv
        b = cg * inv
        gr = g[i].real
        gim = g[i].imag
        hr = gr * a - gim * b  # g (re + i cg) / (re² + cg²)
        hi = gr * b + gim * a
        v = -(dlnc * cg)
        out[0, 0, i] = half_dlnd0 * gr - (hr * u - hi * v)
        out[1, 0, i] = half_dlnd0 * gim - (hr * v + hi * u)
        z = inv_w0 * cg
        out[0, 1, i] = hr * 0.0 - hi * z
        out[1, 1, i] = hr * z + hi * 0.0


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
                     dm_scale: float, dw_scale: float, nr: bool, bw: bool,
                     out: np.ndarray) -> None:
    """Derivatives of :func:`lass_values` in the pole mass and width (per MeV; zero without
    the Breit–Wigner, ``bw`` false, where the caller passes ``m0 = scale = 0``), the
    scattering length and the effective range, into ``out[:, 0..3]`` in that order
    (``out[0]`` the real parts, ``out[1]`` the imaginary ones). With ``D = q cot δ_B − i
    q``: ``∂g/∂(q cot δ_B)`` is ``−m/D²`` (non-resonant) plus ``−2 i q BW / D²`` (from
    ``e^{2iδ_B} = (q cot δ_B + i q)/D``), and ``∂(q cot δ_B)`` is ``−1/a²`` and ``q²/2``;
    the Breit–Wigner enters through ``scale = m0² Γ0/q0``: ``dm_scale`` is ``1e-3 ∂ln
    scale/∂m0 · scale`` and ``dw_scale`` ``1e-3 scale/Γ0``.

    Real arithmetic, operation by operation that of the complex expressions (the same
    bits for finite values), without branches inside the loop, into real planes: stores
    into several complex rows keep the loop from being vectorised (5× slower)."""
    m0sq = m0 * m0
    inv_a = 1.0 / a
    half_r = 0.5 * r
    da = -1.0 / (a * a)
    k_nr = 1.0 if nr else 0.0
    k_bw = 1.0 if bw else 0.0
    c_m = 2e-3 * m0
    for i in range(q.shape[0]):
        qi = q[i]
        q2i = q2[i]
        qcot = inv_a + half_r * q2i
        # 1/D = 1/(x − i y) = (x + i y)/(x² + y²): a real division, not a complex one
        f = 1.0 / (qcot * qcot + q2i)
        x = qcot * f
        y = qi * f
        n2r = x * x - y * y  # 1/D²
        n2i = x * y + y * x
        mb = k_nr * m_below[i]
        dr = 0.0 - mb * n2r  # ∂g/∂(q cot δ_B)
        di = 0.0 - mb * n2i
        b_re = m0sq - s[i]
        b_im = scale * q_over_m[i]
        fb = 1.0 / (b_re * b_re + b_im * b_im)
        ir = b_re * fb  # 1/(m0² − s − i scale q/m)
        ii = b_im * fb
        vr = scale * ir  # the Breit–Wigner
        vi = scale * ii
        tq = 2.0 * qi
        tr = tq * n2i  # −2 i q / D²
        ti = 0.0 - tq * n2r
        dr = dr + k_bw * (tr * vr - ti * vi)
        di = di + k_bw * (tr * vi + ti * vr)
        er = qcot * x - qi * y  # e^{2iδ_B}
        ei = qcot * y + qi * x
        edr = er * ir - ei * ii
        edi = er * ii + ei * ir
        pr = edr * b_re
        pim = edi * b_re
        dsr = pr * ir - pim * ii  # e^{2iδ_B} ∂BW/∂scale
        dsi = pr * ii + pim * ir
        evr = (edr * vr - edi * vi) * c_m
        evi = (edr * vi + edi * vr) * c_m
        out[0, 0, i] = dsr * dm_scale - evr
        out[1, 0, i] = dsi * dm_scale - evi
        out[0, 1, i] = dsr * dw_scale
        out[1, 1, i] = dsi * dw_scale
        out[0, 2, i] = dr * da
        out[1, 2, i] = di * da
        h = 0.5 * q2i
        out[0, 3, i] = dr * h
        out[1, 3, i] = di * h
