"""Vectorised Dalitz-plot lineshapes: RBW with Blatt–Weisskopf factors, Zemach spin factors,
modified LASS and a flat non-resonant term (LHCb, Eur. Phys. J. C 78 (2018) 1019, Eqs. (6)–(10)).

Blatt–Weisskopf factors: F. von Hippel and C. Quigg, Phys. Rev. D 5 (1972) 624; Zemach spin
factors: C. Zemach, Phys. Rev. 133 (1964) B1201, in the Laura++ convention (J. Back et al.,
Comput. Phys. Commun. 231 (2018) 198); LASS: D. Aston et al., Nucl. Phys. B 296 (1988) 493.

Units: GeV (masses, momenta), GeV⁻¹ (radii, LASS a and r). Parameter *values* handed to
:meth:`Lineshape.evaluate` are in the units of the model parameters: masses and widths in
MeV, a and r in GeV⁻¹ (converted here).

A component value is split as ``F = n · g(m) · P_L(cos θ)``:

- ``g`` (this module) holds the lineshape ``T``, both barrier factors and the radial part
  of the Zemach factor ``(−2 p q)^L L!/(2L−1)!!`` — everything that depends on the pair mass;
- ``P_L(cos θ)`` (:func:`legendre`) is the angular part of the Zemach factor;
- ``n`` normalises ``∫_DP |F|² dm²(K+π−) dm²(ηc π−) = 1`` (Eur. Phys. J. C 78 (2018) 1019, Eq. (5)).

Constant factors (such as the production-vertex barrier at the pole, ``X(p0 r)``, which is
undefined when the pole lies above the kinematic limit) cancel in ``n`` and are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError
from .kinematics import PAIRS, DalitzKinematics

__all__ = [
    "KINDS",
    "Lineshape",
    "blatt_weisskopf_d",
    "legendre",
    "zemach_radial",
]

_BW_COEFFS = {
    0: (1.0,),
    1: (1.0, 1.0),
    2: (9.0, 3.0, 1.0),
    3: (225.0, 45.0, 6.0, 1.0),
    4: (11025.0, 1575.0, 135.0, 10.0, 1.0),
    5: (893025.0, 99225.0, 6300.0, 315.0, 15.0, 1.0),
}


def blatt_weisskopf_d(z: np.ndarray | float, L: int) -> np.ndarray:
    """Blatt–Weisskopf polynomial ``D_L(z)`` (von Hippel and Quigg), so that
    ``X_L(z) = sqrt(D_L(z0)/D_L(z))``; e.g. ``D_2 = z⁴ + 3z² + 9``."""
    if L not in _BW_COEFFS:
        msg = f"Blatt-Weisskopf factor: spin L = {L} not supported (0..5)"
        raise ModelError(msg)
    z2 = np.asarray(z, float) ** 2
    out = np.zeros_like(z2)
    for c in reversed(_BW_COEFFS[L]):
        out = out * z2 + c
    return out


def legendre(cos: np.ndarray, L: int) -> np.ndarray:
    """Legendre polynomial ``P_L(cos θ)`` for L = 0..5 (angular part of the Zemach factor)."""
    c = np.asarray(cos, float)
    if L == 0:
        return np.ones_like(c)
    if L == 1:
        return c
    if L == 2:
        return 0.5 * (3 * c * c - 1)
    if L == 3:
        return 0.5 * (5 * c**3 - 3 * c)
    if L == 4:
        return (35 * c**4 - 30 * c * c + 3) / 8.0
    if L == 5:
        return (63 * c**5 - 70 * c**3 + 15 * c) / 8.0
    msg = f"Zemach factor: spin L = {L} not supported (0..5)"
    raise ModelError(msg)


def zemach_radial(p: np.ndarray, q: np.ndarray, L: int) -> np.ndarray:
    """``(−2 p q)^L L!/(2L−1)!!``, so that the Zemach factor (Laura++ ``Zemach_P``) is
    ``Z_L = zemach_radial · P_L(cos θ)`` (e.g. ``Z_1 = −2 p q cos θ``,
    ``Z_2 = (4/3)(p q)²(3cos²θ − 1)``)."""
    dfact = 1.0
    for k in range(2 * L - 1, 0, -2):
        dfact *= k
    return (-2.0 * np.asarray(p, float) * np.asarray(q, float)) ** L * math.factorial(L) / dfact


#: lineshape kinds and their parameter roles (in this order)
KINDS: dict[str, tuple[str, ...]] = {
    "rbw": ("mass", "width"),
    "lass": ("mass", "width", "a", "r"),
    "lass_bw": ("mass", "width", "a", "r"),
    "lass_nr": ("a", "r"),
    "flat": (),
}


@dataclass(frozen=True)
class Lineshape:
    """The mass-dependent part ``g(m)`` of one isobar component.

    Parameters
    ----------
    kind : str
        ``"rbw"`` (Eqs. (7)–(8) with barrier factors at both vertices), ``"lass"``
        (Eq. 9, both terms), ``"lass_bw"`` (its resonant term, with the ``e^{2iδ_B}``
        factor), ``"lass_nr"`` (its slowly varying term) or ``"flat"`` (constant amplitude).
    pair : str
        ``"kpi"``, ``"etacpi"`` or ``"etack"``.
    spin : int
        Orbital angular momentum L = resonance spin (0..4; LASS and flat need 0).
    radius : float
        Blatt–Weisskopf radius r_BW in GeV⁻¹ (4 GeV⁻¹ in the paper, Sect. 5).
    cutoff : float
        LASS: the slowly varying term is zero above this K+π− mass (GeV; 1.7 in the paper,
        below Eq. (10)).
    """

    kind: str
    pair: str
    spin: int = 0
    radius: float = 4.0
    cutoff: float = 1.7

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            msg = f"lineshape kind {self.kind!r} unknown; known: {sorted(KINDS)}"
            raise ModelError(msg)
        if self.pair not in PAIRS:
            msg = f"lineshape pair {self.pair!r} unknown; known: {sorted(PAIRS)}"
            raise ModelError(msg)
        if not 0 <= self.spin <= 4:
            msg = f"lineshape spin {self.spin} not supported (0..4)"
            raise ModelError(msg)
        if self.kind != "rbw" and self.spin != 0:
            msg = f"lineshape {self.kind!r} is an S-wave shape; spin must be 0, got {self.spin}"
            raise ModelError(msg)
        if not (math.isfinite(self.radius) and self.radius >= 0):
            msg = f"lineshape radius {self.radius} GeV^-1 must be a finite number >= 0"
            raise ModelError(msg)

    @property
    def n_params(self) -> int:
        return len(KINDS[self.kind])

    def check_values(self, kin: DalitzKinematics, values: tuple[float, ...], name: str) -> None:
        """Reject parameter values that make no sense for this lineshape (build time).

        A pole mass at or below the two-body threshold of the pair has no real q0 (RBW, LASS);
        a pole at or above the parent mass lies outside any physical region; widths must be
        positive; the LASS scattering length must be non-zero.
        """
        roles = KINDS[self.kind]
        vals = dict(zip(roles, values, strict=True))
        lo, _ = kin.mass_range(self.pair)
        if "mass" in vals:
            m0 = vals["mass"] / 1000.0
            if not (math.isfinite(m0) and lo < m0 < kin.m_parent):
                msg = (f"component {name!r}: pole mass {vals['mass']} MeV lies outside "
                       f"({lo * 1000:.2f}, {kin.m_parent * 1000:.2f}) MeV, the {self.pair} "
                       "threshold to the parent mass; q0 is undefined there")
                raise ModelError(msg)
        if "width" in vals and not (math.isfinite(vals["width"]) and vals["width"] > 0):
            msg = f"component {name!r}: width {vals['width']} MeV must be positive"
            raise ModelError(msg)
        if "a" in vals and not (math.isfinite(vals["a"]) and vals["a"] != 0):
            msg = f"component {name!r}: LASS scattering length a = {vals['a']} must be non-zero"
            raise ModelError(msg)

    # --- evaluation ------------------------------------------------------------------
    def geometry(self, kin: DalitzKinematics, m: np.ndarray, q: np.ndarray,
                 p: np.ndarray) -> dict[str, np.ndarray]:
        """Parameter-independent arrays at pair masses ``m`` (cached by callers)."""
        m = np.asarray(m, float)
        q = np.asarray(q, float)
        if self.kind == "flat":
            return {"m": m}
        if self.kind == "rbw":
            L, r = self.spin, self.radius
            dq = blatt_weisskopf_d(q * r, L)
            dp = blatt_weisskopf_d(np.asarray(p, float) * r, L)
            base = zemach_radial(p, q, L) / np.sqrt(dq * dp)
            return {"s": m * m, "G": q ** (2 * L + 1) / (m * dq), "base": base}
        below = (m <= self.cutoff).astype(float)
        return {"m": m, "s": m * m, "q": q, "q2": q * q, "q_over_m": q / m,
                "m_below": m * below}

    def _pole_terms(self, kin: DalitzKinematics, m0: float) -> tuple[float, float]:
        """``q0`` and ``D_L(q0 r)`` at the pole (scalars, math module for speed)."""
        pr = PAIRS[self.pair]
        ms = kin.masses
        m1, m2 = ms[pr.first], ms[pr.second]
        lam = (m0 * m0 - (m1 + m2) ** 2) * (m0 * m0 - (m1 - m2) ** 2)
        q0 = math.sqrt(max(lam, 0.0)) / (2.0 * m0)
        z2 = (q0 * self.radius) ** 2
        d0 = 0.0
        for c in reversed(_BW_COEFFS[self.spin]):
            d0 = d0 * z2 + c
        return q0, d0

    def _pole_derivatives(self, kin: DalitzKinematics, m0: float) -> tuple[float, float]:
        """``d ln q0 / d m0`` and ``d ln D_L(q0 r) / d m0`` at the pole (GeV⁻¹)."""
        pr = PAIRS[self.pair]
        ms = kin.masses
        m1, m2 = ms[pr.first], ms[pr.second]
        a2, b2 = (m1 + m2) ** 2, (m1 - m2) ** 2
        lam = (m0 * m0 - a2) * (m0 * m0 - b2)
        dlnq0 = m0 * (2.0 * m0 * m0 - a2 - b2) / lam - 1.0 / m0  # q0 = sqrt(λ)/(2 m0)
        q0, d0 = self._pole_terms(kin, m0)
        z2 = (q0 * self.radius) ** 2
        dpoly = 0.0  # dD/dz² by Horner on the derivative coefficients
        coeffs = _BW_COEFFS[self.spin]
        for k in range(len(coeffs) - 1, 0, -1):
            dpoly = dpoly * z2 + k * coeffs[k]
        return dlnq0, dpoly * 2.0 * z2 * dlnq0 / d0

    def derivatives(self, kin: DalitzKinematics, geom: dict[str, np.ndarray],
                    values: tuple[float, ...], g: np.ndarray,
                    which: Sequence[int] | None = None) -> np.ndarray:
        """``∂g/∂value`` for the parameters ``which`` (positions in the order of
        :data:`KINDS`; default all), per unit of the model parameter (MeV⁻¹ for masses and
        widths), at the points of ``geom``; ``g`` is :meth:`evaluate` at the same ``values``.

        Exact derivatives of Eqs. (7)–(10) of LHCb, Eur. Phys. J. C 78 (2018) 1019,
        including the pole-mass dependence of ``q0`` and of the Blatt–Weisskopf factor
        ``D_L(q0 r)`` (von Hippel and Quigg, Phys. Rev. D 5 (1972) 624).
        """
        kind = self.kind
        which = list(range(self.n_params)) if which is None else list(which)
        out = np.empty((len(which), g.size), complex)
        if kind == "flat":
            return out
        rows = {k: r for r, k in enumerate(which)}
        if kind == "rbw":
            L = self.spin
            m0 = values[0] / 1000.0
            w0 = values[1] / 1000.0
            q0, d0 = self._pole_terms(kin, m0)
            dlnq0, dlnd0 = self._pole_derivatives(kin, m0)
            c = w0 * m0 * m0 * d0 / q0 ** (2 * L + 1)
            re = m0 * m0 - geom["s"]
            cg = c * geom["G"]
            # g = sqrt(D0) base / (re − i c G): ∂g = g (½ ∂ln D0) − g ∂(re − i c G)/(re − i c G)
            inv = 1.0 / (re * re + cg * cg)
            gi = g * (re * inv + 1j * (cg * inv))
            if 0 in rows:
                dlnc = 2.0 / m0 + dlnd0 - (2 * L + 1) * dlnq0
                out[rows[0]] = (0.5e-3 * dlnd0) * g - gi * (2e-3 * m0 - 1j * (1e-3 * dlnc) * cg)
            if 1 in rows:
                out[rows[1]] = gi * (1j * (1e-3 / w0) * cg)
            return out
        # LASS family (Eqs. 9–10): with qcot = q cot δ_B = 1/a + r q²/2,
        # NR = m/(qcot − i q) (below the cut-off), e^{2iδ_B} = (qcot + i q)/(qcot − i q),
        # BW = s0/(m0² − m² − i s0 q/m) with s0 = m0² Γ0/q0
        q, q2 = geom["q"], geom["q2"]
        m0, w0, a, rr = self._lass_values(values)
        n = self.n_params
        need_q = (n - 2 in rows) or (n - 1 in rows)
        qcot = (1.0 / a) + (0.5 * rr) * q2
        idn = 1.0 / (qcot - 1j * q)
        dqc = np.zeros(q.shape, complex)  # ∂g/∂qcot
        if kind in ("lass", "lass_nr") and need_q:
            dqc -= geom["m_below"] * (idn * idn)
        if kind in ("lass", "lass_bw"):
            q0, _ = self._pole_terms(kin, m0)
            scale = m0 * w0 * m0 / q0
            e2 = (qcot + 1j * q) * idn
            b_re = m0 * m0 - geom["s"]
            idb = 1.0 / (b_re - 1j * (scale * geom["q_over_m"]))
            bw = scale * idb
            if need_q:
                dqc += (-2j * q) * (idn * idn) * bw
            if 0 in rows or 1 in rows:
                e_db = e2 * idb
                dbw_ds = e_db * b_re * idb  # e^{2iδ} ∂BW/∂s0
                if 0 in rows:
                    dlnq0, _ = self._pole_derivatives(kin, m0)
                    out[rows[0]] = (dbw_ds * (1e-3 * scale * (2.0 / m0 - dlnq0))
                                    - e_db * bw * (2e-3 * m0))
                if 1 in rows:
                    out[rows[1]] = dbw_ds * (1e-3 * scale / w0)
        if n - 2 in rows:
            out[rows[n - 2]] = dqc * (-1.0 / (a * a))
        if n - 1 in rows:
            out[rows[n - 1]] = dqc * (0.5 * q2)
        return out

    def _lass_values(self, values: tuple[float, ...]) -> tuple[float, float, float, float]:
        """``(m0, Γ0, a, r)`` of a LASS-family shape: pole mass and width in GeV (NaN for
        ``lass_nr``, which has none), scattering length and effective range in GeV⁻¹."""
        if self.kind == "lass_nr":
            return math.nan, math.nan, values[0], values[1]
        return values[0] / 1000.0, values[1] / 1000.0, values[2], values[3]

    def evaluate(self, kin: DalitzKinematics, geom: dict[str, np.ndarray],
                 values: tuple[float, ...]) -> np.ndarray:
        """Complex ``g`` at the points of ``geom`` for parameter ``values`` (MeV, GeV⁻¹)."""
        kind = self.kind
        if kind == "flat":
            return np.ones(geom["m"].shape, complex)
        if kind == "rbw":
            L = self.spin
            m0 = values[0] / 1000.0
            w0 = values[1] / 1000.0
            q0, d0 = self._pole_terms(kin, m0)
            # m0 Γ(m) = [Γ0 m0² D(z0)/q0^(2L+1)] · [q^(2L+1)/(m D(z))]   (Eq. 8)
            c = w0 * m0 * m0 * d0 / q0 ** (2 * L + 1)
            re = m0 * m0 - geom["s"]
            im = c * geom["G"]
            f = (math.sqrt(d0) * geom["base"]) / (re * re + im * im)
            out = np.empty(re.shape, complex)  # 1/(re - i im) = (re + i im)/|.|², Eq. 7
            out.real = re * f
            out.imag = im * f
            return out
        # LASS family (Eqs. 9–10)
        q, q2 = geom["q"], geom["q2"]
        m0, w0, a, rr = self._lass_values(values)
        qcot = (1.0 / a) + (0.5 * rr) * q2  # q cot δ_B
        den = qcot * qcot + q2
        out = np.zeros(q.shape, complex)
        if kind in ("lass", "lass_nr"):
            # m/(q cot δ − i q) = m (q cot δ + i q)/(q² cot² δ + q²), zero above the cut-off
            f = geom["m_below"] / den
            out.real += qcot * f
            out.imag += q * f
        if kind in ("lass", "lass_bw"):
            q0, _ = self._pole_terms(kin, m0)
            scale = m0 * w0 * m0 / q0
            e_re = (qcot * qcot - q2) / den  # e^{2iδ} = (q cot δ + i q)²/(q² cot² δ + q²)
            e_im = 2.0 * qcot * q / den
            b_re = m0 * m0 - geom["s"]
            b_im = scale * geom["q_over_m"]  # BW = scale/(b_re - i b_im)
            f = scale / (b_re * b_re + b_im * b_im)
            b_re = b_re * f
            b_im = b_im * f
            out.real += e_re * b_re - e_im * b_im
            out.imag += e_re * b_im + e_im * b_re
        return out
