"""Two- and three-body kinematics and the particle masses used by the toy models.

All masses and momenta are in MeV. Every function is vectorised over its mass argument(s)
with numpy broadcasting and returns exact zeros (never NaN) below threshold, so callers can
evaluate on grids that start below a threshold.

References
----------
- E. Byckling, K. Kajantie, *Particle Kinematics* (Wiley 1973): the Källén function, the
  two-body break-up momentum, and three-body phase space (eq. V.2.17); also the Particle
  Data Group review "Kinematics".
- Masses: Particle Data Group, M. Tanabashi et al., Phys. Rev. D 98 (2018) 030001 (the
  edition used by LHCb, Eur. Phys. J. C 78 (2018) 1019), and P. A. Zyla et al., Prog.
  Theor. Exp. Phys. 2020 (2020) 083C01 (the edition of the T_cc+ papers, LHCb, Nature
  Physics 18 (2022) 751 and Nature Communications 13 (2022) 3351).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ModelError

__all__ = [
    "MASSES",
    "MASSES_PDG2018",
    "MASSES_PDG2020",
    "PHASE_SPACE_3BODY_NODES",
    "WIDTHS_PDG2020",
    "breakup_momentum",
    "kallen",
    "phase_space_2body",
    "phase_space_3body",
    "phase_space_3body_threshold_coefficient",
    "tcc_thresholds",
    "two_body_momentum",
]

# ---------------------------------------------------------------------------------------
# Masses (MeV). Frozen tables: plain constants, no network or file access at import time.
# ---------------------------------------------------------------------------------------

#: PDG 2026 masses as shipped by ``particle`` 1.1.0 (``mass_width_2026.txt``), read with
#: ``particle.Particle.from_pdgid(pdgid).mass`` (the PDG 2026 edition). PDG ids:
#: D0 421, D+ 411, D*+ 413, D*0 423, pi+ 211, pi0 111, K+ 321, B0 511, eta_c 441.
#: ``tests/test_kinematics.py`` checks them against the installed ``particle`` package.
MASSES: Final = MappingProxyType(
    {
        "D0": 1864.84,
        "D+": 1869.66,
        "D*+": 2010.27,
        "D*0": 2006.86,
        "pi+": 139.57039,
        "pi0": 134.9768,
        "K+": 493.677,
        "B0": 5279.72,
        "eta_c": 2984.09,
    }
)

#: PDG 2020 masses as used by the public amplitude code of the T_cc+ papers (LHCb, Nature
#: Communications 13 (2022) 3351): ``mmikhasenko/Tcc2DDpi.jl`` ``src/constants.jl``, commit
#: 3028f3f. D*+ is defined there as m(D0) + 145.4258 MeV = 2010.2558 MeV (the PDG-2020
#: MC-table value is 2010.26 ± 0.05). B0, K+ and eta_c are the PDG-2020 MC-table values.
MASSES_PDG2020: Final = MappingProxyType(
    {
        "D0": 1864.83,
        "D+": 1869.65,
        "D*+": 1864.83 + 145.4258,
        "D*0": 2006.85,
        "pi+": 139.57039,
        "pi0": 134.9768,
        "K+": 493.677,
        "B0": 5279.65,
        "eta_c": 2983.9,
    }
)

#: PDG 2018 masses (Phys. Rev. D 98 (2018) 030001), the edition of the Zc(4100) analysis
#: of B0 -> eta_c K+ pi- (LHCb, Eur. Phys. J. C 78 (2018) 1019).
MASSES_PDG2018: Final = MappingProxyType(
    {
        "D0": 1864.83,
        "D+": 1869.65,
        "D*+": 2010.26,
        "D*0": 2006.85,
        "pi+": 139.57061,
        "pi0": 134.9770,
        "K+": 493.677,
        "B0": 5279.63,
        "eta_c": 2983.9,
    }
)

#: Natural widths (MeV) of the PDG-2020 era. The D*0 width is the value derived in the
#: ``Tcc2DDpi.jl`` code of LHCb, Nature Communications 13 (2022) 3351 (55.2 keV; PDG gives
#: only Gamma < 2.1 MeV).
WIDTHS_PDG2020: Final = MappingProxyType(
    {
        "D*+": 0.0834,
        "D*0": 0.0552,
        "eta_c": 32.0,
    }
)


def tcc_thresholds(masses: Mapping[str, float] | None = None) -> dict[str, float]:
    """Two- and three-body thresholds of the Tcc+ analysis.

    Parameters
    ----------
    masses : mapping, optional
        Mass table with keys ``"D0", "D+", "D*+", "D*0", "pi+", "pi0"``. Defaults to
        :data:`MASSES_PDG2020`, the constants of the T_cc+ papers.

    Returns
    -------
    dict
        Keys ``"D*+D0"`` (3875.0858 MeV with the default table), ``"D*0D+"``,
        ``"D0D0pi+"``, ``"D0D+pi0"``, ``"D0D0"`` and ``"D0D+"``.
    """
    m = MASSES_PDG2020 if masses is None else masses
    return {
        "D*+D0": m["D*+"] + m["D0"],
        "D*0D+": m["D*0"] + m["D+"],
        "D0D0pi+": 2.0 * m["D0"] + m["pi+"],
        "D0D+pi0": m["D0"] + m["D+"] + m["pi0"],
        "D0D0": 2.0 * m["D0"],
        "D0D+": m["D0"] + m["D+"],
    }


# ---------------------------------------------------------------------------------------
# Two-body kinematics
# ---------------------------------------------------------------------------------------


def kallen(x: ArrayLike, y: ArrayLike, z: ArrayLike) -> NDArray[np.float64]:
    """Källén triangle function λ(x, y, z) = x² + y² + z² − 2xy − 2yz − 2zx.

    Arguments are squared masses (any consistent unit) and broadcast.
    For the physical combination λ(m², m1², m2²) prefer :func:`breakup_momentum`, which uses
    the factorised form and keeps full relative precision near threshold.
    """
    x, y, z = (np.asarray(v, dtype=float) for v in (x, y, z))
    return x * x + y * y + z * z - 2.0 * (x * y + y * z + z * x)


def _lambda_masses(m: NDArray, m1: NDArray, m2: NDArray) -> NDArray:
    """λ(m², m1², m2²) in the factorised form (m²−(m1+m2)²)(m²−(m1−m2)²)."""
    return (m - m1 - m2) * (m + m1 + m2) * (m - m1 + m2) * (m + m1 - m2)


def breakup_momentum(m: ArrayLike, m1: ArrayLike, m2: ArrayLike) -> NDArray[np.float64]:
    """Two-body break-up momentum k = λ^{1/2}(m², m1², m2²) / (2m).

    This is the daughter momentum in the rest frame of a parent of mass
    ``m`` decaying to masses ``m1`` and ``m2``.

    Parameters
    ----------
    m, m1, m2 : array_like
        Masses in MeV; broadcast together.

    Returns
    -------
    ndarray
        k in MeV; exactly 0 at and below threshold ``m <= m1 + m2`` (and for ``m <= 0``).
    """
    m, m1, m2 = (np.asarray(v, dtype=float) for v in (m, m1, m2))
    above = m > m1 + m2
    lam = _lambda_masses(m, m1, m2)
    safe_m = np.where(above, m, 1.0)
    k = np.sqrt(np.where(above, lam, 0.0)) / (2.0 * safe_m)
    return np.where(above, k, 0.0)


def two_body_momentum(m: np.ndarray | float, m1: float, m2: float) -> np.ndarray:
    """Momentum of either daughter in the rest frame of mass ``m`` → ``m1 m2``.

    ``λ^{1/2}(m², m1², m2²)/(2m)`` with the expanded :func:`kallen` (the form of the
    Dalitz-plot model, LHCb, Eur. Phys. J. C 78 (2018) 1019, Eq. 8); exactly 0 where
    λ < 0 (below threshold or above the kinematic limit), never NaN. Any consistent unit.
    :func:`breakup_momentum` is the factorised form, precise near threshold.
    """
    m = np.asarray(m, float)
    lam = kallen(m * m, m1 * m1, m2 * m2)
    return np.sqrt(np.clip(lam, 0.0, None)) / (2.0 * np.where(m > 0, m, 1.0))


def phase_space_2body(m: ArrayLike, m1: ArrayLike, m2: ArrayLike) -> NDArray[np.float64]:
    """Two-body phase space Φ2(m) = λ^{1/2}(m², m1², m2²) / (8π m²) = k / (4π m).

    Ostap ``PhaseSpace2`` with L = 0. Used for the Tcc background shape
    Φ_{D*+D0}(m). Dimensionless; 0 at and below threshold.
    """
    m = np.asarray(m, dtype=float)
    k = breakup_momentum(m, m1, m2)
    return np.where(k > 0.0, k / (4.0 * math.pi * np.where(k > 0.0, m, 1.0)), 0.0)


# ---------------------------------------------------------------------------------------
# Three-body phase space
# ---------------------------------------------------------------------------------------

#: default number of Gauss–Legendre nodes for :func:`phase_space_3body`
PHASE_SPACE_3BODY_NODES: Final = 64


@lru_cache(maxsize=16)
def _gauss_legendre_theta(n: int) -> tuple[NDArray, NDArray]:
    """cos θ_i and w_i sin²θ_i of an n-point Gauss–Legendre rule on θ ∈ (0, π) (read-only)."""
    x, w = np.polynomial.legendre.leggauss(n)
    theta = 0.5 * math.pi * (x + 1.0)
    cos_theta = np.cos(theta)
    weight = 0.5 * math.pi * w * np.sin(theta) ** 2
    cos_theta.setflags(write=False)
    weight.setflags(write=False)
    return cos_theta, weight


def phase_space_3body(
    m: ArrayLike,
    m1: float,
    m2: float,
    m3: float,
    n: int = PHASE_SPACE_3BODY_NODES,
) -> NDArray[np.float64]:
    """Three-body phase space Φ3(M) (Byckling–Kajantie eq. V.2.17).

    Φ3(M) = 1/(128 π³ M²) ∫_{(m2+m3)²}^{(M−m1)²} ds λ^{1/2}(s, M², m1²) λ^{1/2}(s, m2², m3²) / s,

    the integral of dΦ3 = (2π)⁻³ (16 M²)⁻¹ dm12² dm23² over the Dalitz plot.

    Numerics: with s = c + h cos θ (c, h the centre and half-length of the s interval) the
    two square-root end points become the factor h² sin²θ, and the remaining integrand
    √((s − (m2−m3)²)((M+m1)² − s)) / s is smooth, so a fixed ``n``-point Gauss–Legendre rule
    in θ ∈ [0, π] converges exponentially. With the default ``n = 64`` the relative error
    against ``scipy.integrate.quad`` is below 1e-10 for the Tcc (D0D0π+, D0D+π0, D0D+γ) and
    B0 → ηc K π configurations and for massless daughters; it degrades only when a daughter
    mass is tiny but non-zero compared with M (e.g. m3/M ~ 1e-4 needs larger ``n``), because
    then λ(s, m2², m3²) is nearly a perfect square. Exactly massless daughters are fine.

    Parameters
    ----------
    m : array_like
        Parent mass M in MeV (any shape).
    m1, m2, m3 : float
        Daughter masses in MeV (non-negative). Φ3 is symmetric in them; pair (2, 3) is the
        integration variable.
    n : int
        Number of Gauss–Legendre nodes.

    Returns
    -------
    ndarray
        Φ3 (units MeV², because of the 1/(16 M²) dm12² dm23² measure); 0 for M ≤ m1+m2+m3.

    Notes
    -----
    Checks in ``tests/test_kinematics.py``: massless daughters give Φ3 = M²/(256 π³)
    exactly; near threshold Φ3 → Q² √(m1 m2 m3 / Σ³)/(64 π²) with Q = M − Σ, Σ = m1+m2+m3
    (:func:`phase_space_3body_threshold_coefficient`).
    """
    m1, m2, m3 = float(m1), float(m2), float(m3)
    if min(m1, m2, m3) < 0.0 or not all(math.isfinite(v) for v in (m1, m2, m3)):
        msg = f"phase_space_3body: daughter masses must be finite and >= 0, got {(m1, m2, m3)}"
        raise ModelError(msg)
    if int(n) != n or n < 2:
        msg = f"phase_space_3body: n must be an integer >= 2, got {n!r}"
        raise ModelError(msg)
    m = np.asarray(m, dtype=float)
    above = m > m1 + m2 + m3
    mm = np.where(above, m, m1 + m2 + m3 + 1.0)[..., np.newaxis]

    s_lo = (m2 + m3) ** 2
    s_hi = (mm - m1) ** 2
    centre = 0.5 * (s_hi + s_lo)
    half = 0.5 * (s_hi - s_lo)
    cos_theta, weight = _gauss_legendre_theta(int(n))
    s = centre + half * cos_theta
    a = (m2 - m3) ** 2  # lower root of λ(s, m2², m3²), a <= s_lo
    b = (mm + m1) ** 2  # upper root of λ(s, M², m1²), b >= s_hi
    smooth = np.sqrt(np.maximum((s - a) * (b - s), 0.0)) / s
    integral = half[..., 0] ** 2 * (smooth @ weight)
    phi3 = integral / (128.0 * math.pi**3 * mm[..., 0] ** 2)
    return np.where(above, phi3, 0.0)


def phase_space_3body_threshold_coefficient(m1: float, m2: float, m3: float) -> float:
    """Leading near-threshold coefficient C of Φ3(M) ≈ C Q², Q = M − (m1+m2+m3).

    C = √(m1 m2 m3 / Σ³) / (64 π²), Σ = m1 + m2 + m3 (the non-relativistic limit of
    :func:`phase_space_3body`; the "O(Q²) scaling" of LHCb, Nature Physics 18 (2022) 751,
    Methods, "Systematic uncertainties"). Derivation: near threshold
    the s-interval has length ≈ 2(m2+m3)Q, ∫√((s−s_lo)(s_hi−s)) ds = π(s_hi−s_lo)²/8, and the
    smooth factor tends to √(4 m2 m3 · 4 Σ m1)/(m2+m3)². Relative corrections are O(Q/m).
    """
    total = m1 + m2 + m3
    return math.sqrt(m1 * m2 * m3 / total**3) / (64.0 * math.pi**2)
