"""Three-body kinematics of P → K+ π− ηc (all spin 0) on the Dalitz and square Dalitz plots.

Units: GeV for masses and momenta, GeV² for the Dalitz variables. The Dalitz plot (DP)
axes are ``x = m²(K+π−)`` and ``y = m²(ηc π−)`` (LHCb, Eur. Phys. J. C 78 (2018) 1019,
Sect. 5 "Dalitz plot formalism"); ``m²(ηc K+)`` follows from
``x + y + z = M² + m_K² + m_π² + m_ηc²``.

Each two-body *pair* is described by :class:`Pair`: its first and second daughters and the
bachelor. The helicity angle θ of a pair is the angle between its first daughter and the
bachelor in the pair rest frame:

- ``kpi``:    daughters (K+, π−), bachelor ηc — θ(K+, ηc) in the K+π− frame (the paper's
  definition, Sect. 6.2 "Parametrisation of the backgrounds");
- ``etacpi``: daughters (π−, ηc), bachelor K+ — θ(π−, K+) in the ηc π− frame (our
  convention; the sign of odd-L amplitudes is absorbed by the free coefficients);
- ``etack``:  daughters (ηc, K+), bachelor π− — θ(ηc, π−) in the ηc K+ frame (our convention).

The square Dalitz plot (SDP) of the paper's Eqs. (15)–(16) (as in BaBar, Phys. Rev. D 72 (2005)
052002) is built on the ``kpi`` pair:
``m' = arccos(2 (m − m_min)/(m_max − m_min) − 1)/π`` and ``θ' = θ/π``; the Jacobian is
``dx dy = 4 m p q |dm/dm'| π sin(π θ') dm' dθ'``.

The vetoes (:class:`Vetoes`) are the D̄0 veto 1845 < m(K+π−) < 1885 MeV (Sect. 4.1 "Signal
and normalisation yields") and the ±70 MeV border veto of Sect. 6 "Dalitz plot fit", which we
read as a 70 MeV band inside each one-dimensional kinematic limit of m(K+π−), m(ηc π−)
and m(ηc K+).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError
from ..kinematics import kallen, two_body_momentum

__all__ = [
    "ETAC",
    "PAIRS",
    "PI",
    "DalitzKinematics",
    "K",
    "Pair",
    "PairVariables",
    "Vetoes",
]

#: particle indices
K, PI, ETAC = 0, 1, 2

#: PDG 2018 masses in GeV (Phys. Rev. D 98 (2018) 030001, the edition of Eur. Phys. J. C 78 (2018)
#: 1019)
M_B0_2018 = 5.27963
M_ETAC_2018 = 2.9839
M_K_2018 = 0.493677
M_PI_2018 = 0.13957061


@dataclass(frozen=True)
class Pair:
    """A two-body pair: ``first`` and ``second`` daughters and the ``bachelor`` (indices)."""

    name: str
    first: int
    second: int
    bachelor: int


PAIRS: dict[str, Pair] = {
    "kpi": Pair("kpi", K, PI, ETAC),
    "etacpi": Pair("etacpi", PI, ETAC, K),
    "etack": Pair("etack", ETAC, K, PI),
}


@dataclass(frozen=True)
class PairVariables:
    """Per-point kinematics of one pair: mass ``m``, daughter momentum ``q`` and bachelor
    momentum ``p`` (both in the pair rest frame) and ``cos θ`` (first daughter vs bachelor)."""

    m: np.ndarray
    q: np.ndarray
    p: np.ndarray
    cos: np.ndarray


@dataclass(frozen=True)
class DalitzKinematics:
    """Masses of the decay P → K+ π− ηc (GeV) and the coordinate maps of the DP and SDP.

    Parameters
    ----------
    m_parent, m_k, m_pi, m_etac : float
        Masses in GeV; the defaults are PDG 2018.
    """

    m_parent: float = M_B0_2018
    m_k: float = M_K_2018
    m_pi: float = M_PI_2018
    m_etac: float = M_ETAC_2018

    def __post_init__(self) -> None:
        for name in ("m_parent", "m_k", "m_pi", "m_etac"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                msg = f"DalitzKinematics: {name} = {v} must be a positive finite mass (GeV)"
                raise ModelError(msg)
        if self.m_parent <= self.m_k + self.m_pi + self.m_etac:
            msg = (f"DalitzKinematics: parent mass {self.m_parent} GeV is below the K π ηc "
                   f"threshold {self.m_k + self.m_pi + self.m_etac:.6f} GeV")
            raise ModelError(msg)

    # --- basic quantities ------------------------------------------------------------
    @property
    def masses(self) -> tuple[float, float, float]:
        """Daughter masses by particle index (K, π, ηc)."""
        return (self.m_k, self.m_pi, self.m_etac)

    @property
    def sum_s(self) -> float:
        """``m²(Kπ) + m²(ηcπ) + m²(ηcK) = M² + Σ m_i²``."""
        return self.m_parent**2 + self.m_k**2 + self.m_pi**2 + self.m_etac**2

    def mass_range(self, pair: str) -> tuple[float, float]:
        """Kinematic range ``(m_i + m_j, M − m_k)`` of the pair mass (GeV)."""
        pr = PAIRS[pair]
        ms = self.masses
        return (ms[pr.first] + ms[pr.second], self.m_parent - ms[pr.bachelor])

    @property
    def area(self) -> float:
        """DP area in GeV⁴, ``∫ dx (y_max − y_min) = ∫ dm 2m · 4 p q`` (Gauss–Legendre in m').

        The integrand is smooth in m' (the square-root edges of p and q are absorbed by
        ``dm/dm'``), so 200 nodes are exact to machine precision.
        """
        lo, hi = self.mass_range("kpi")
        u, w = np.polynomial.legendre.leggauss(200)
        up = 0.5 * (u + 1.0)
        m = self.m_from_mprime(up)
        pv = self.pair_momenta("kpi", m)
        dm = np.pi / 2 * np.sin(np.pi * up) * (hi - lo)
        return float(np.sum(0.5 * w * 4.0 * pv[0] * pv[1] * 2.0 * m * dm))

    def pair_momenta(self, pair: str, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Daughter momentum ``q`` and bachelor momentum ``p`` in the pair frame at mass ``m``."""
        pr = PAIRS[pair]
        ms = self.masses
        m = np.asarray(m, float)
        q = two_body_momentum(m, ms[pr.first], ms[pr.second])
        mk = ms[pr.bachelor]
        lam = kallen(self.m_parent**2, m * m, mk * mk)
        p = np.sqrt(np.clip(lam, 0.0, None)) / (2.0 * m)
        return q, p

    def third(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``m²(ηc K+)`` from ``x = m²(K+π−)`` and ``y = m²(ηc π−)``."""
        return self.sum_s - np.asarray(x, float) - np.asarray(y, float)

    def invariants(self, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        """Squared pair masses by pair name."""
        x = np.asarray(x, float)
        y = np.asarray(y, float)
        return {"kpi": x, "etacpi": y, "etack": self.third(x, y)}

    def pair_variables(self, pair: str, x: np.ndarray, y: np.ndarray) -> PairVariables:
        """Mass, momenta and helicity cosine of ``pair`` at DP points ``(x, y)``.

        ``cos θ = (s_jb − m_j² − m_b² − 2 E_j E_b)/(2 q p)`` with ``j`` the second daughter and
        ``b`` the bachelor, energies in the pair frame. Clipped to [−1, 1]
        against rounding.
        """
        pr = PAIRS[pair]
        inv = self.invariants(x, y)
        s = inv[pair]
        ms = self.masses
        other = {
            frozenset((K, PI)): "kpi",
            frozenset((ETAC, PI)): "etacpi",
            frozenset((ETAC, K)): "etack",
        }[frozenset((pr.second, pr.bachelor))]
        s_jb = inv[other]
        m = np.sqrt(np.clip(s, 0.0, None))
        mj, mb, mi = ms[pr.second], ms[pr.bachelor], ms[pr.first]
        ej = (s + mj * mj - mi * mi) / (2.0 * m)
        eb = (self.m_parent**2 - s - mb * mb) / (2.0 * m)
        q, p = self.pair_momenta(pair, m)
        den = 2.0 * q * p
        with np.errstate(divide="ignore", invalid="ignore"):
            cos = (s_jb - mj * mj - mb * mb - 2.0 * ej * eb) / den
        cos = np.where(den > 0, cos, 0.0)
        return PairVariables(m, q, p, np.clip(cos, -1.0, 1.0))

    def y_from_pair(self, pair: str, m: np.ndarray,
                    cos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """DP point ``(x, y)`` from the mass and helicity cosine of ``pair`` (inverse map)."""
        pr = PAIRS[pair]
        ms = self.masses
        m = np.asarray(m, float)
        cos = np.asarray(cos, float)
        s = m * m
        mj, mb, mi = ms[pr.second], ms[pr.bachelor], ms[pr.first]
        ej = (s + mj * mj - mi * mi) / (2.0 * m)
        eb = (self.m_parent**2 - s - mb * mb) / (2.0 * m)
        q, p = self.pair_momenta(pair, m)
        s_jb = mj * mj + mb * mb + 2.0 * ej * eb + 2.0 * q * p * cos
        if pair == "kpi":  # s_jb = m²(π ηc)
            return s, s_jb
        if pair == "etacpi":  # s_jb = m²(ηc K)
            return self.sum_s - s - s_jb, s
        # etack: s_jb = m²(K π)
        return s_jb, self.sum_s - s - s_jb

    # --- boundary ----------------------------------------------------------------------
    def y_limits(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """DP boundary: ``m²(ηc π−)`` range at fixed ``x = m²(K+π−)``."""
        x = np.asarray(x, float)
        m = np.sqrt(np.clip(x, 0.0, None))
        y_lo = self.y_from_pair("kpi", m, -np.ones_like(m))[1]
        y_hi = self.y_from_pair("kpi", m, np.ones_like(m))[1]
        return y_lo, y_hi

    def inside(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """True where ``(x, y)`` lies inside the kinematically allowed DP."""
        x = np.asarray(x, float)
        y = np.asarray(y, float)
        lo, hi = self.mass_range("kpi")
        ok = (x >= lo * lo) & (x <= hi * hi)
        ylo, yhi = self.y_limits(np.clip(x, lo * lo, hi * hi))
        return ok & (y >= ylo) & (y <= yhi)

    # --- square Dalitz plot ------------------------------------------------------------
    def mprime_from_m(self, m: np.ndarray) -> np.ndarray:
        """``m'`` of Eur. Phys. J. C 78 (2018) 1019, Eq. (15), from ``m(K+π−)``."""
        lo, hi = self.mass_range("kpi")
        u = 2.0 * (np.asarray(m, float) - lo) / (hi - lo) - 1.0
        return np.arccos(np.clip(u, -1.0, 1.0)) / np.pi

    def m_from_mprime(self, mp: np.ndarray) -> np.ndarray:
        """Inverse of Eq. 15: ``m = m_min + (m_max − m_min)(1 + cos π m')/2``."""
        lo, hi = self.mass_range("kpi")
        return lo + (hi - lo) * 0.5 * (1.0 + np.cos(np.pi * np.asarray(mp, float)))

    def dm_dmprime(self, mp: np.ndarray) -> np.ndarray:
        """``|dm/dm'| = (π/2) sin(π m') (m_max − m_min)``."""
        lo, hi = self.mass_range("kpi")
        return 0.5 * np.pi * np.sin(np.pi * np.asarray(mp, float)) * (hi - lo)

    def sdp_from_dp(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(m', θ')`` of Eur. Phys. J. C 78 (2018) 1019, Eqs. (15)–(16), from
        ``(m²(K+π−), m²(ηc π−))``."""
        pv = self.pair_variables("kpi", x, y)
        return self.mprime_from_m(pv.m), np.arccos(pv.cos) / np.pi

    def dp_from_sdp(self, mp: np.ndarray, thp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(m²(K+π−), m²(ηc π−))`` from ``(m', θ')``."""
        m = self.m_from_mprime(mp)
        return self.y_from_pair("kpi", m, np.cos(np.pi * np.asarray(thp, float)))

    def sdp_jacobian(self, mp: np.ndarray, thp: np.ndarray) -> np.ndarray:
        """``|det J|`` with ``dx dy = |det J| dm' dθ'``.

        ``|det J| = 4 m p q |dm/dm'| π sin(π θ')``, with p (ηc) and q (K+) the momenta in the
        K+π− frame; it vanishes on the SDP edges.
        """
        mp = np.asarray(mp, float)
        thp = np.asarray(thp, float)
        m = self.m_from_mprime(mp)
        q, p = self.pair_momenta("kpi", m)
        return 4.0 * m * p * q * self.dm_dmprime(mp) * np.pi * np.sin(np.pi * thp)


@dataclass(frozen=True)
class Vetoes:
    """Regions removed from the DP (Eur. Phys. J. C 78 (2018) 1019, Sects. 4.1 and 6).

    Parameters
    ----------
    d0 : tuple of float or None
        Excluded ``m(K+π−)`` interval in GeV (default 1.845–1.885, the D̄0 veto).
    border : float
        Width in GeV of the border veto (0.070 by default; 0 switches it off). Events are
        removed within ``border`` of the lower and upper kinematic limit of each of
        m(K+π−), m(ηc π−) and m(ηc K+).
    """

    d0: tuple[float, float] | None = (1.845, 1.885)
    border: float = 0.070

    def __post_init__(self) -> None:
        if self.d0 is not None:
            lo, hi = (float(v) for v in self.d0)
            if not lo < hi:
                msg = f"Vetoes: d0 interval {self.d0} is empty (need lo < hi, GeV)"
                raise ModelError(msg)
            object.__setattr__(self, "d0", (lo, hi))
        if not (math.isfinite(self.border) and 0.0 <= self.border < 0.5):
            msg = f"Vetoes: border = {self.border} GeV must be in [0, 0.5)"
            raise ModelError(msg)

    def s_limits(self, kin: DalitzKinematics) -> dict[str, tuple[float, float]]:
        """Allowed squared-mass interval of each pair after the border veto."""
        out = {}
        for name in PAIRS:
            lo, hi = kin.mass_range(name)
            out[name] = ((lo + self.border) ** 2, (hi - self.border) ** 2)
        return out

    def passes(self, kin: DalitzKinematics, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """True for points inside the DP and outside every veto."""
        x = np.asarray(x, float)
        y = np.asarray(y, float)
        ok = kin.inside(x, y)
        inv = kin.invariants(x, y)
        if self.border > 0:
            for name, (lo, hi) in self.s_limits(kin).items():
                s = inv[name]
                ok &= (s >= lo) & (s <= hi)
        if self.d0 is not None:
            m = np.sqrt(np.clip(x, 0.0, None))
            ok &= ~((m > self.d0[0]) & (m < self.d0[1]))
        return ok

    def kpi_mass_intervals(self, kin: DalitzKinematics) -> list[tuple[float, float]]:
        """Allowed ``m(K+π−)`` intervals (GeV) after the border and D̄0 vetoes."""
        lo, hi = kin.mass_range("kpi")
        lo, hi = lo + self.border, hi - self.border
        if self.d0 is None or self.d0[1] <= lo or self.d0[0] >= hi:
            return [(lo, hi)]
        out = []
        if self.d0[0] > lo:
            out.append((lo, self.d0[0]))
        if self.d0[1] < hi:
            out.append((self.d0[1], hi))
        return out

    def cos_interval(self, kin: DalitzKinematics, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Allowed ``cos θ(K+π−)`` interval at each ``m(K+π−)`` from the border veto.

        ``m²(ηc π−)`` is linear and increasing in cos θ and ``m²(ηc K+)`` linear and
        decreasing, so each of their cuts bounds cos θ from one side. Empty rows have
        ``lo >= hi``.
        """
        m = np.asarray(m, float)
        x = m * m
        y_m1 = kin.y_from_pair("kpi", m, -np.ones_like(m))[1]
        y_p1 = kin.y_from_pair("kpi", m, np.ones_like(m))[1]
        lo = -np.ones_like(m)
        hi = np.ones_like(m)
        if self.border > 0:
            lim = self.s_limits(kin)
            slope = (y_p1 - y_m1) / 2.0
            slope = np.where(slope > 0, slope, np.inf)
            mid = (y_p1 + y_m1) / 2.0
            ylo = np.maximum(lim["etacpi"][0], kin.sum_s - x - lim["etack"][1])
            yhi = np.minimum(lim["etacpi"][1], kin.sum_s - x - lim["etack"][0])
            lo = np.maximum(lo, (ylo - mid) / slope)
            hi = np.minimum(hi, (yhi - mid) / slope)
        return lo, hi

    def kink_masses(self, kin: DalitzKinematics) -> list[float]:
        """``m(K+π−)`` values (GeV) where a border-veto line meets the DP boundary.

        The allowed cos θ interval of :meth:`cos_interval` has kinks there, so row-wise
        integrals over m' need panel edges at these masses to keep their high order.
        """
        if self.border <= 0:
            return []
        from scipy.optimize import brentq

        lo, hi = kin.mass_range("kpi")
        lim = self.s_limits(kin)
        m = np.linspace(lo, hi, 2001)
        out = []

        def funcs():
            for cos in (-1.0, 1.0):
                for cut in lim["etacpi"]:
                    yield lambda mm, c=cos, k=cut: kin.y_from_pair("kpi", mm, c)[1] - k
                for cut in lim["etack"]:
                    yield lambda mm, c=cos, k=cut: (kin.sum_s - mm * mm
                                                    - kin.y_from_pair("kpi", mm, c)[1] - k)

        for f in funcs():
            v = f(m)
            for i in np.flatnonzero(np.sign(v[:-1]) * np.sign(v[1:]) < 0):
                out.append(float(brentq(f, m[i], m[i + 1], xtol=1e-14)))
        return sorted(out)

