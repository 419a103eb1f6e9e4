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
from ..lineshapes import _BW_COEFFS, blatt_weisskopf_polynomial
from .dalitz_plot import PAIRS, DalitzKinematics

__all__ = [
    "KINDS",
    "Lineshape",
    "blatt_weisskopf_d",
    "legendre",
    "zemach_radial",
]


def blatt_weisskopf_d(z: np.ndarray | float, L: int) -> np.ndarray:
    """Blatt–Weisskopf polynomial ``D_L(z)`` (von Hippel and Quigg), so that
    ``X_L(z) = sqrt(D_L(z0)/D_L(z))``; e.g. ``D_2 = z⁴ + 3z² + 9``."""
    if L not in range(len(_BW_COEFFS)):
        msg = f"Blatt-Weisskopf factor: spin L = {L} not supported (0..5)"
        raise ModelError(msg)
    return blatt_weisskopf_polynomial(z, L)


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
        if kind == "flat":
            return np.empty((len(which), g.size), complex)
        # numba: compiled on first use, never at import toyengine
        from . import resonance_kernels as kernels

        if kind == "rbw":
            L = self.spin
            m0 = values[0] / 1000.0
            w0 = values[1] / 1000.0
            q0, d0 = self._pole_terms(kin, m0)
            dlnq0, dlnd0 = self._pole_derivatives(kin, m0)
            c = w0 * m0 * m0 * d0 / q0 ** (2 * L + 1)
            dlnc = 2.0 / m0 + dlnd0 - (2 * L + 1) * dlnq0
            planes = np.empty((2, 2, g.size))
            kernels.rbw_derivatives(g, geom["s"], geom["G"], m0, c, 0.5e-3 * dlnd0,
                                    1e-3 * dlnc, 1e-3 / w0, planes)
            rows = which
        else:  # the LASS family (Eqs. 9–10): rows (m0, Γ0, a, r) of the kernel
            m0, w0, a, rr = self._lass_values(values)
            bw = kind in ("lass", "lass_bw")
            scale = dm_scale = dw_scale = 0.0
            if bw:
                q0, _ = self._pole_terms(kin, m0)
                scale = m0 * w0 * m0 / q0
                dm_scale = 1e-3 * scale * (2.0 / m0 - self._pole_derivatives(kin, m0)[0])
                dw_scale = 1e-3 * scale / w0
            planes = np.empty((2, 4, g.size))
            kernels.lass_derivatives(
                geom["q"], geom["q2"], geom["s"], geom["q_over_m"], geom["m_below"], a, rr,
                m0 if bw else 0.0, scale, dm_scale, dw_scale, kind in ("lass", "lass_nr"), bw,
                planes)
            rows = which if bw else [k + 2 for k in which]  # lass_nr: (a, r) only
        sel = slice(None) if rows == list(range(planes.shape[1])) else rows
        out = np.empty((len(which), g.size), complex)
        out.real = planes[0, sel]
        out.imag = planes[1, sel]
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
        # numba: compiled on first use, never at import toyengine
        from . import resonance_kernels as kernels

        if kind == "rbw":
            L = self.spin
            m0 = values[0] / 1000.0
            w0 = values[1] / 1000.0
            q0, d0 = self._pole_terms(kin, m0)
            # m0 Γ(m) = [Γ0 m0² D(z0)/q0^(2L+1)] · [q^(2L+1)/(m D(z))]   (Eq. 8)
            c = w0 * m0 * m0 * d0 / q0 ** (2 * L + 1)
            return kernels.rbw_values(geom["s"], geom["G"], geom["base"], m0 * m0, c,
                                      math.sqrt(d0))
        # LASS family (Eqs. 9–10)
        m0, w0, a, rr = self._lass_values(values)
        bw = kind in ("lass", "lass_bw")
        scale = 0.0
        if bw:
            q0, _ = self._pole_terms(kin, m0)
            scale = m0 * w0 * m0 / q0
        return kernels.lass_values(geom["q"], geom["q2"], geom["s"], geom["q_over_m"],
                                   geom["m_below"], 1.0 / a, 0.5 * rr, m0 if bw else 0.0,
                                   scale, kind in ("lass", "lass_nr"), bw)
