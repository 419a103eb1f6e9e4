"""The unitarised three-body Breit–Wigner profile of T_cc+.

LHCb, "Study of the doubly charmed tetraquark T_cc+", Nature Communications 13 (2022) 3351
(arXiv:2109.01056), Methods, "Unitarised Breit–Wigner shape", replaces the two-body
Breit–Wigner of LHCb, Nature Physics 18 (2022) 751 by the profile

    F_f^U(s) = ϱ_f(s) |A_U(s)|²,   A_U(s) = 1 / (m_U² − s − |g|² Σ(s))        (Eqs. 47, 48, 53)

where ϱ_f(s) is the T_cc+ → f decay probability with the coupling g divided out (Eq. 49), for
f ∈ {D0 D0 π+, D0 D+ π0, D0 D+ γ}, and Σ(s) the self-energy: Im Σ = ϱ_tot / 2 on the real
axis (Eq. 54) and Re Σ(s) = ξ(s) − ξ(m_U²) with the once-subtracted dispersion integral
ξ(s) = (s / 2π) p.v.∫ ϱ_tot(s') / (s'(s' − s)) ds' (Eqs. 56–58), so that Re A_U(m_U²) = 0.

What is computed, and how
-------------------------
* ϱ_f(s): the Dalitz-plot integral of the spin-averaged |𝔐_f|² of Eqs. 39–46 with the
  constant-width D* propagators of Eq. 38, ϱ_f = (128 π³ s)⁻¹ ∬ ds12 ds13 |𝔐_f|²/|g|²
  (Eq. 49 = Eq. 65). The integral over s13 at fixed s12 is done semi-analytically: |𝔐|² is
  a rational function of s13 times at most one D* pole, and the pole is removed by the
  difference-quotient trick ∫ f(t)/(z − t) dt = ∫ [f(t) − f(z)]/(z − t) dt + f(z) log((z−a)/(z−b)),
  leaving a smooth integrand for a 3-point Gauss–Legendre rule. The outer integral over s12
  uses s12 = lo + (hi − lo) sin²(φ/2) (which removes the square-root end points of the Dalitz
  boundary) and composite Gauss–Legendre panels graded geometrically towards the D* pole and
  towards the two points where the Dalitz boundary crosses m²(D*) in s13. Agreement with a
  much finer rule is ~1e-7 relative; ``tests/test_unitarised.py`` checks against an
  independent Monte Carlo integration that builds |𝔐|² from explicit four-vectors.
* Above √s* the functions are replaced by c_f Φ_{D*D}(s) with c_f fixed by continuity
  (Eqs. 50–52). Φ is taken as λ^{1/2}(s, M_D*², m_D²)/s (the public amplitude code's
  ``ρ_tb``), so that the c_f are directly comparable with that code. √s* is 3.9 GeV in the
  paper (``matching="paper"``, the default) and m_th + 4 MeV in the public code
  (``matching="code"``; ``mmikhasenko/Tcc2DDpi.jl`` ``settings.json``, ``phspmatching.cutoff``).
* ϱ_f is tabulated once on a non-uniform grid in E = √s − (m_D*+ + m_D0) (spacing 7 % of the
  distance to the complex D*D branch points, at most 0.15 MeV near threshold) and
  interpolated with cubic splines (relative error < 1e-5 for E > −4 MeV; larger only near
  the three-body thresholds, where ϱ_f is tiny).
* ξ(s): ϱ_tot is represented by a piecewise-linear function on an 8× refined grid up to
  E = 500 MeV, whose Cauchy integral is exact in closed form (sums of (s − s_j) log(s_j − s)),
  plus the analytic c_f Φ tail beyond that by Gauss–Legendre quadrature in t = s_max/s'. The
  same formula evaluated at complex s gives Σ on the first sheet (Eq. 63).
* Second sheet (Eq. 64): continuity across the unitarity cut requires
  Σ^II(s) = Σ^I(s) + i ϱ_tot(s) for Im s < 0, i.e. 1/A^II = m_U² − s − |g|² Σ^I − i|g|² ϱ_tot.
  (Eq. 64 as printed carries "+ i|g|²ϱ_tot"; the public code's ``denominator_II`` uses the
  continuous sign, and only that sign reproduces the quoted pole.) ϱ_tot(s) at complex s is
  the Dalitz integral along straight lines in the complex plane (Eqs. 65–66).

Units: masses in GeV inside the physics functions (as in the paper and the public code);
energies E, δm_U, mode, FWHM and pole in MeV at the public interface.

The fast path for fits is :class:`UnitarisedShape`: everything not depending on (δm_U, |g|) is
tabulated when the shape is built, and a new parameter point costs a spline evaluation of
ξ(m_U²) plus a few vector operations (≈ 20 µs for 2000 points).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize
from scipy.interpolate import CubicSpline

from ...errors import ModelError
from ..kinematics import MASSES_PDG2020, WIDTHS_PDG2020

__all__ = [
    "CHANNEL_NAMES",
    "COUPLING_UNCERTAINTIES",
    "HBARC_GEV_FM",
    "DecayChannel",
    "LowEnergyParameters",
    "ModeWidth",
    "Pole",
    "TccConstants",
    "UnitarisedModel",
    "UnitarisedShape",
    "channel_weights",
    "compositeness",
    "coupling_variations",
    "dalitz_terms",
    "g_from_gamma0",
    "low_energy_parameters",
    "matrix_element_terms",
    "mode_and_fwhm",
    "pole_position",
    "rho_dalitz",
    "tcc_channels",
    "two_body_rho",
    "unitarised_model",
]

#: ħc in GeV fm (CODATA 2018), for lengths from inverse GeV.
HBARC_GEV_FM: Final = 0.1973269804

#: Decay channels in the order of Nat. Commun. 13 (2022) 3351, Eqs. 50–52.
CHANNEL_NAMES: Final = ("D0D0pi+", "D0D+pi0", "D0D+gamma")

#: √s* − (m_D*+ + m_D0) of the public code, in MeV (``settings.json``: phspmatching.cutoff).
CODE_MATCHING_MEV: Final = 4.0
#: √s* of the paper, in GeV (Nat. Commun. 13 (2022) 3351, below Eq. 52).
PAPER_MATCHING_GEV: Final = 3.9

#: Relative 1σ uncertainties used for the coupling-constant systematic (our choice, from the
#: PDG 2020 inputs): f² ∝ Γ(D*+) B(D*+→D0π+) = 83.4 ± 1.8 keV × (67.7 ± 0.5) % → 2.3 %; h² ∝ Γ(D*+)
#: B(D*+→D+γ) with B = (1.6 ± 0.4) % → 25 %; μ0/μ+ = −3.77, whose uncertainty the paper does not
#: give, is varied by ±10 % (an assumption).
COUPLING_UNCERTAINTIES: Final = {"f2": 0.023, "h2": 0.25, "mu0": 0.10}

_TWO_PI: Final = 2.0 * math.pi


# ---------------------------------------------------------------------------------------
# Constants and channels
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TccConstants:
    """Masses, widths (GeV) and couplings of the unitarised model.

    Defaults are the PDG-2020 constants of the public amplitude code of Nat. Commun. 13
    (2022) 3351 (``mmikhasenko/Tcc2DDpi.jl`` ``src/constants.jl``): m(D*+) = m(D0) + 145.4258 MeV,
    Γ(D*+) = 83.4 keV, the derived Γ(D*0) = 55.2 keV, f² = 282.42, h² = 20.13e-3 GeV⁻²,
    μ+ = 1 and μ0 = −3.77.
    """

    m_pi_plus: float = MASSES_PDG2020["pi+"] * 1e-3
    m_pi0: float = MASSES_PDG2020["pi0"] * 1e-3
    m_d0: float = MASSES_PDG2020["D0"] * 1e-3
    m_d_plus: float = MASSES_PDG2020["D+"] * 1e-3
    m_dstar_plus: float = MASSES_PDG2020["D*+"] * 1e-3
    m_dstar0: float = MASSES_PDG2020["D*0"] * 1e-3
    gamma_dstar_plus: float = WIDTHS_PDG2020["D*+"] * 1e-3
    gamma_dstar0: float = WIDTHS_PDG2020["D*0"] * 1e-3
    f2: float = 282.42
    h2: float = 20.13e-3
    mu_plus: float = 1.0
    mu0: float = -3.77

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v)):
                msg = f"TccConstants.{f.name}: {v!r} is not a finite number"
                raise ModelError(msg)
            object.__setattr__(self, f.name, float(v))
            if f.name.startswith(("m_", "gamma_")) and not v > 0:
                msg = f"TccConstants.{f.name}: {v} must be > 0 (GeV)"
                raise ModelError(msg)
        if self.f2 < 0 or self.h2 < 0:
            msg = f"TccConstants: f2 = {self.f2} and h2 = {self.h2} must be >= 0"
            raise ModelError(msg)
        if self.m_dstar_plus < self.m_d0 + self.m_pi_plus:
            msg = "TccConstants: m_dstar_plus must be above the D0 pi+ threshold"
            raise ModelError(msg)

    @property
    def threshold(self) -> float:
        """m(D*+) + m(D0) in GeV (3.8750858 with the defaults)."""
        return self.m_dstar_plus + self.m_d0

    @property
    def reduced_mass(self) -> float:
        """μ(D*+ D0) in GeV."""
        return self.m_dstar_plus * self.m_d0 / (self.m_dstar_plus + self.m_d0)

    def updated(self, changes: Mapping[str, float]) -> TccConstants:
        """A copy with some fields changed (unknown names raise :class:`ModelError`)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            msg = f"TccConstants: unknown constant(s) {unknown}; known: {sorted(known)}"
            raise ModelError(msg)
        return replace(self, **{k: float(v) for k, v in changes.items()})

    def kinematic_key(self) -> tuple[float, ...]:
        """The fields the Dalitz integrals depend on (masses and D* widths)."""
        return (self.m_pi_plus, self.m_pi0, self.m_d0, self.m_d_plus, self.m_dstar_plus,
                self.m_dstar0, self.gamma_dstar_plus, self.gamma_dstar0)


@dataclass(frozen=True)
class DecayChannel:
    """One three-body channel T_cc+ → 1 2 3 with D* resonances in the (12) and (13) pairs.

    Particle 1 is the pion or photon. ``res12``/``res13`` are (mass, width) of the D* in
    s12 = m²(12) and s13 = m²(13); ``two_body`` are the (D*, D) masses of Φ_{D*D} used above
    the matching point (Eqs. 50–52).
    """

    name: str
    kind: str  # "pi" (Eqs. 39–44) or "gamma" (Eqs. 45–46)
    masses: tuple[float, float, float]
    res12: tuple[float, float]
    res13: tuple[float, float]
    two_body: tuple[float, float]

    @property
    def threshold(self) -> float:
        """m1 + m2 + m3 in GeV."""
        return sum(self.masses)


def tcc_channels(c: TccConstants | None = None) -> tuple[DecayChannel, DecayChannel, DecayChannel]:
    """The three channels of Nat. Commun. 13 (2022) 3351, Eqs. 39–46 (order of
    :data:`CHANNEL_NAMES`).

    D0D0π+: 1 = π+, 2 = D0, 3 = D0, D*+ in both pairs (Eq. 39, identical D0: factor 1/2!).
    D0D+π0: 1 = π0, 2 = D+, 3 = D0, D*+ → D+π0 in (12), D*0 → D0π0 in (13) (Eq. 40).
    D0D+γ:  1 = γ, 2 = D+, 3 = D0, D*+ → D+γ in (12), D*0 → D0γ in (13) (Eq. 45).
    The D*0 → D+π− channel is neglected, as in the paper.
    """
    c = TccConstants() if c is None else c
    dsp = (c.m_dstar_plus, c.gamma_dstar_plus)
    ds0 = (c.m_dstar0, c.gamma_dstar0)
    return (
        DecayChannel("D0D0pi+", "pi", (c.m_pi_plus, c.m_d0, c.m_d0), dsp, dsp,
                     (c.m_dstar_plus, c.m_d0)),
        DecayChannel("D0D+pi0", "pi", (c.m_pi0, c.m_d_plus, c.m_d0), dsp, ds0,
                     (c.m_dstar0, c.m_d_plus)),
        DecayChannel("D0D+gamma", "gamma", (0.0, c.m_d_plus, c.m_d0), dsp, ds0,
                     (c.m_dstar0, c.m_d_plus)),
    )


def channel_weights(ch: DecayChannel, c: TccConstants) -> tuple[float, float, float]:
    """Coupling factors (w_a, w_b, w_c) with |𝔐_f|²/|g|² = w_a a|F12|² + w_b b|F13|²
    + w_c c 2Re(F12 F13*), for the term functions of :func:`matrix_element_terms`.

    π channels: 1/3 (spin average) × f²/4 (Eq. 40; Eq. 39 has f²/2 × 1/2! for the identical
    D0) = f²/12 for all three terms. γ channel (Eq. 45): h²/3 × (μ+², μ0², μ+ μ0).
    """
    if ch.kind == "pi":
        w = c.f2 / 12.0
        return (w, w, w)
    k = c.h2 / 3.0
    return (k * c.mu_plus**2, k * c.mu0**2, k * c.mu_plus * c.mu0)


# ---------------------------------------------------------------------------------------
# Matrix elements (Eqs. 39–46)
# ---------------------------------------------------------------------------------------


def matrix_element_terms(kind: str, s: Any, s12: Any, s13: Any,
                         msq: tuple[float, float, float]) -> tuple[Any, Any, Any]:
    """The kinematic functions (a, b, c) multiplying |F12|², |F13|² and 2Re(F12 F13*).

    ``kind="pi"``: a = A (Eq. 41), b = B (Eq. 42), c = C = D + E (Eqs. 43–44).
    ``kind="gamma"``: a = (p1·p2)² + G, b = (p1·p3)² + G, c = G − (p1·p2)(p1·p3), the
    expansion of Eq. 45 with G of Eq. 46 (the μ factors are in :func:`channel_weights`).
    All scalar products are written in the invariants s, s12, s13 (as in the public code's
    ``covariant_exptessions.jl``), so the functions are rational and accept complex
    arguments (needed for the analytic continuation, Eq. 65). Units GeV².
    """
    m1sq, m2sq, m3sq = msq
    p_p12 = (s + s12 - m3sq) / 2
    p12_p2 = (s12 + m2sq - m1sq) / 2
    p_p2 = (s + m2sq - s13) / 2
    p_p13 = (s + s13 - m2sq) / 2
    p13_p3 = (s13 + m3sq - m1sq) / 2
    p_p3 = (s + m3sq - s12) / 2
    p1_p2 = (s12 - m1sq - m2sq) / 2
    p1_p3 = (s13 - m1sq - m3sq) / 2
    s23 = s + m1sq + m2sq + m3sq - s12 - s13
    p2_p3 = (s23 - m2sq - m3sq) / 2
    if kind == "pi":
        p12_p13 = (s + m1sq - m2sq - m3sq) / 2
        p12_p3 = (s - s12 - m3sq) / 2
        p13_p2 = (s - s13 - m2sq) / 2
        lam12 = s12 * s12 + m1sq * m1sq + m2sq * m2sq - 2 * (s12 * m1sq + m1sq * m2sq + m2sq * s12)
        lam13 = s13 * s13 + m1sq * m1sq + m3sq * m3sq - 2 * (s13 * m1sq + m1sq * m3sq + m3sq * s13)
        a = lam12 / (4 * s12) + (p_p12 * p12_p2 / s12 - p_p2) ** 2 / s
        b = lam13 / (4 * s13) + (p_p13 * p13_p3 / s13 - p_p3) ** 2 / s
        d = (p12_p3 * p12_p2 / s12 + p13_p3 * p13_p2 / s13
             - p12_p13 * p12_p2 * p13_p3 / (s12 * s13) - p2_p3)
        e = (p_p12 * p_p13 * p12_p2 * p13_p3 / (s * s12 * s13) + p_p2 * p_p3 / s
             - p_p12 * p_p3 * p12_p2 / (s12 * s) - p_p13 * p_p2 * p13_p3 / (s13 * s))
        return a, b, d + e
    if kind == "gamma":
        g = (2 * p1_p2 * p1_p3 * p2_p3 - m2sq * p1_p3**2 - m3sq * p1_p2**2) / (2 * s)
        return p1_p2**2 + g, p1_p3**2 + g, g - p1_p2 * p1_p3
    msg = f"matrix_element_terms: kind must be 'pi' or 'gamma', got {kind!r}"
    raise ModelError(msg)


# ---------------------------------------------------------------------------------------
# Dalitz integration (Eq. 49)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quadrature:
    """Settings of the Dalitz integration: geometric grading from ``eps`` (in φ) with
    ``ratio``, ``nodes`` Gauss–Legendre nodes per outer panel, ``inner`` nodes in s13."""

    eps: float = 1e-5
    ratio: float = 3.0
    nodes: int = 6
    inner: int = 3
    chunk: int = 128


@lru_cache(maxsize=32)
def _leggauss(n: int) -> tuple[NDArray, NDArray]:
    x, w = np.polynomial.legendre.leggauss(n)
    x.setflags(write=False)
    w.setflags(write=False)
    return x, w


def _outer_nodes(centres: NDArray, q: Quadrature) -> tuple[NDArray, NDArray]:
    """φ nodes and weights on [0, π], graded towards each centre (rows = s values)."""
    n_lev = math.ceil(math.log(math.pi / q.eps) / math.log(q.ratio)) + 1
    offs = q.eps * q.ratio ** np.arange(n_lev)
    n = centres.shape[0]
    bp = np.concatenate([(centres[..., None] - offs).reshape(n, -1),
                         (centres[..., None] + offs).reshape(n, -1),
                         np.zeros((n, 1)), np.full((n, 1), math.pi)], axis=1)
    bp = np.sort(np.clip(bp, 0.0, math.pi), axis=1)
    xg, wg = _leggauss(q.nodes)
    left = bp[:, :-1, None]
    width = bp[:, 1:, None] - left
    phi = (left + 0.5 * width * (xg + 1.0)).reshape(n, -1)
    wphi = (0.5 * width * wg).reshape(n, -1)
    return phi, wphi


def _centres(ch: DecayChannel, s_re: NDArray, lo: NDArray, hi_re: NDArray) -> NDArray:
    """Outer-integral features in φ: the D* pole in s12 and the two points where the Dalitz
    boundary s13±(s12) crosses m²(D* in 13) (or comes closest to it)."""
    m1, m2, m3 = ch.masses
    m1sq, m2sq, m3sq = m1 * m1, m2 * m2, m3 * m3
    (mr12, g12), (mr13, _) = ch.res12, ch.res13
    span = hi_re - lo
    z12 = mr12**2 - 1j * mr12 * g12
    with np.errstate(divide="ignore", invalid="ignore"):
        c_pole = np.real(np.arccos(1.0 - 2.0 * (z12 - lo) / span))
        rs = np.sqrt(s_re)
        s13max = (rs - m2) ** 2
        s13e = np.clip(mr13**2, (m1 + m3) ** 2, s13max)
        l1 = np.maximum((s13e - (m1 + m3) ** 2) * (s13e - (m1 - m3) ** 2), 0.0)
        l2 = np.maximum(((rs - m2) ** 2 - s13e) * ((rs + m2) ** 2 - s13e), 0.0)
        base = m1sq + m2sq + (s13e + m1sq - m3sq) * (s_re - s13e - m2sq) / (2 * s13e)
        half = np.sqrt(l1 * l2) / (2 * s13e)
        out = [c_pole]
        for s12f in (base - half, base + half):
            out.append(np.arccos(np.clip(1.0 - 2.0 * (s12f - lo) / span, -1.0, 1.0)))
    cen = np.stack(out, axis=-1)
    return np.nan_to_num(cen, nan=0.5 * math.pi)


def _dalitz_chunk(ch: DecayChannel, s: NDArray, q: Quadrature) -> NDArray:
    """(3, N) term integrals (unit couplings) for one chunk of s values (real or complex)."""
    is_real = not np.iscomplexobj(s)
    m1, m2, m3 = ch.masses
    msq = (m1 * m1, m2 * m2, m3 * m3)
    (mr12, g12), (mr13, g13) = ch.res12, ch.res13
    n = s.shape[0]
    rs = np.sqrt(s)
    lo = np.full(n, (m1 + m2) ** 2)
    hi = (rs - m3) ** 2
    phi, wphi = _outer_nodes(_centres(ch, np.real(s), lo, np.real(hi)), q)
    u = np.sin(0.5 * phi) ** 2  # (s12 - lo)/(hi - lo)
    v = np.cos(0.5 * phi) ** 2  # (hi - s12)/(hi - lo)
    span = (hi - lo)[:, None]
    s12 = lo[:, None] + span * u
    jac = 0.5 * span * np.sin(phi) * wphi
    ss = s[:, None]
    # Dalitz limits in s13 at fixed s12 (Eq. 66 with 2 <-> 3), factorised square roots so
    # that the branch is the one continuous with the physical region for complex s
    lam12s = np.sqrt(span * u) * np.sqrt(s12 - (m1 - m2) ** 2)
    lam3s = np.sqrt(span * v) * np.sqrt((rs[:, None] + m3) ** 2 - s12)
    mid = msq[0] + msq[2] + (s12 + msq[0] - msq[1]) * (ss - s12 - msq[2]) / (2 * s12)
    half = lam12s * lam3s / (2 * s12)
    a13 = mid - half
    b13 = mid + half
    xi, wi = _leggauss(q.inner)
    t = mid[..., None] + half[..., None] * xi
    wt = half[..., None] * wi
    fa, fb, fc = matrix_element_terms(ch.kind, ss[..., None], s12[..., None], t, msq)
    ja = np.sum(wt * fa, axis=-1)
    z13m = mr13**2 - 1j * mr13 * g13  # pole of F13 (Eq. 38)
    z13p = mr13**2 + 1j * mr13 * g13  # pole of F13* (continued)
    z12m = mr12**2 - 1j * mr12 * g12
    z12p = mr12**2 + 1j * mr12 * g12
    _, fbm, fcm = matrix_element_terms(ch.kind, ss, s12, z13m, msq)
    if is_real:
        # F13(t) = 1/(z13m - t) and F13*(t) = conj(F13(t)) on the real path
        r = 1.0 / (z13m - t)
        sb = np.sum(wt * fb * r, axis=-1)
        sc = np.sum(wt * fc * r, axis=-1)
        s1 = np.sum(wt * r, axis=-1)
        log_m = np.log((z13m - a13) / (z13m - b13))
        qb = sb - fbm * s1 + fbm * log_m
        qc = sc - fcm * s1 + fcm * log_m
        jb = qb.imag / (mr13 * g13)  # (Q(z-) - Q(z+)) / (z+ - z-) with Q(z+) = conj Q(z-)
        f12 = 1.0 / (z12m - s12)
        ia = np.sum(jac * (f12.real**2 + f12.imag**2) * ja, axis=-1)
        ib = np.sum(jac * jb, axis=-1)
        ic = np.sum(jac * 2.0 * (f12 * np.conj(qc)).real, axis=-1)
        out = np.stack([ia, ib, ic])
    else:
        _, fbp, fcp = matrix_element_terms(ch.kind, ss, s12, z13p, msq)

        def qint(f_t: NDArray, f_z: NDArray, z: complex) -> NDArray:
            return (np.sum(wt * (f_t - f_z[..., None]) / (z - t), axis=-1)
                    + f_z * np.log((z - a13) / (z - b13)))

        jb = (qint(fb, fbm, z13m) - qint(fb, fbp, z13p)) / (z13p - z13m)
        jcp = qint(fc, fcp, z13p)
        jcm = qint(fc, fcm, z13m)
        f12m = 1.0 / (z12m - s12)
        f12p = 1.0 / (z12p - s12)
        ia = np.sum(jac * f12m * f12p * ja, axis=-1)
        ib = np.sum(jac * jb, axis=-1)
        ic = np.sum(jac * (f12m * jcp + f12p * jcm), axis=-1)
        out = np.stack([ia, ib, ic])
    return out / (128.0 * math.pi**3 * s)


def dalitz_terms(ch: DecayChannel, s: ArrayLike, quadrature: Quadrature | None = None
                 ) -> NDArray:
    """The three term integrals T_t(s) = (128π³ s)⁻¹ ∬ ds12 ds13 t(s, s12, s13) P_t with
    unit couplings, where P_a = |F12|², P_b = |F13|², P_c = 2Re(F12 F13*) (Eq. 49).

    ``ϱ_f = w_a T_a + w_b T_b + w_c T_c`` with :func:`channel_weights`. ``s`` in GeV²; real
    s must lie above the channel threshold; complex s gives the analytic continuation of
    Eq. 65 (integration along straight lines). Returns shape (3, N) (float for real s).
    """
    q = Quadrature() if quadrature is None else quadrature
    s_arr = np.atleast_1d(np.asarray(s))
    if np.iscomplexobj(s_arr) and not np.any(s_arr.imag):
        s_arr = s_arr.real
    if not np.iscomplexobj(s_arr):
        s_arr = s_arr.astype(float)
        if np.any(s_arr <= ch.threshold**2):
            msg = (f"dalitz_terms({ch.name}): s must be above the threshold "
                   f"{ch.threshold**2:.6f} GeV^2")
            raise ModelError(msg)
    out = [_dalitz_chunk(ch, s_arr[i:i + q.chunk], q) for i in range(0, s_arr.size, q.chunk)]
    res = np.concatenate(out, axis=1) if out else np.empty((3, 0))
    return res.real if not np.iscomplexobj(s_arr) else res


def rho_dalitz(ch: DecayChannel, s: ArrayLike, constants: TccConstants | None = None,
               quadrature: Quadrature | None = None) -> NDArray:
    """ϱ_f(s) of Eq. 49 from the Dalitz integral (no matching), real or complex s (GeV²)."""
    c = TccConstants() if constants is None else constants
    w = np.asarray(channel_weights(ch, c))
    return np.tensordot(w, dalitz_terms(ch, s, quadrature), axes=1)


def two_body_rho(s: ArrayLike, m_a: float, m_b: float) -> NDArray:
    """λ^{1/2}(s, m_a², m_b²)/s (the shape of Φ_{D*D} in Eqs. 50–52); 0 below threshold."""
    s = np.asarray(s, dtype=float)
    lam = (s - (m_a + m_b) ** 2) * (s - (m_a - m_b) ** 2)
    return np.where(s > (m_a + m_b) ** 2, np.sqrt(np.maximum(lam, 0.0)) / s, 0.0)


# ---------------------------------------------------------------------------------------
# Grids and the piecewise-linear Cauchy integral
# ---------------------------------------------------------------------------------------


def _graded_grid(e0: float, e1: float, features: tuple[tuple[float, float], ...],
                 alpha: float, h_max: float, far: float = 5.0) -> NDArray:
    """Nodes on [e0, e1] with spacing alpha × (distance to the nearest feature (position,
    width)), at most h_max × max(1, |E|/far)."""
    out = [e0]
    e = e0
    while e < e1:
        d = min(math.hypot(e - p, w) for p, w in features)
        h = min(alpha * d, h_max * max(1.0, abs(e) / far))
        e = e + h
        out.append(e)
    out[-1] = e1
    if len(out) > 2 and out[-1] - out[-2] < 0.3 * (out[-2] - out[-3]):
        del out[-2]
    return np.array(out)


def _cauchy_pl(s_nodes: NDArray, g_nodes: NDArray, s: NDArray) -> NDArray:
    """H(s) = ∫ g(s')/(s' − s) ds' over [s_0, s_N] for piecewise-linear g (exact).

    Real ``s`` means s + i0 (so Im H = π g(s)); complex ``s`` off the real axis is the
    analytic function. Uses H = Σ_i m_i Δ_i + Σ_j (m_{j−1} − m_j)(s − s_j) log(s_j − s)
    + ℓ_{N−1}(s) log(s_N − s) − ℓ_0(s) log(s_0 − s), ℓ_i the line of segment i.
    """
    s = np.asarray(s)
    real = not np.iscomplexobj(s)
    m = np.diff(g_nodes) / np.diff(s_nodes)
    sc = s.astype(complex)[..., None]
    d = s_nodes - sc
    if real:
        d = d - 1e-300j  # s + i0: log(s_j - s - i0) = log|.| - i pi for s_j < s
    with np.errstate(divide="ignore", invalid="ignore"):
        logd = np.log(d)
        inner = (m[:-1] - m[1:]) * (sc - s_nodes[1:-1]) * logd[..., 1:-1]
        inner = np.where(np.isfinite(inner), inner, 0.0)  # (s - s_j) log(s_j - s) -> 0
        h = np.sum(inner, axis=-1) + np.sum(m * np.diff(s_nodes))
        last = (g_nodes[-2] + m[-1] * (sc[..., 0] - s_nodes[-2])) * logd[..., -1]
        first = (g_nodes[0] + m[0] * (sc[..., 0] - s_nodes[0])) * logd[..., 0]
        first = np.where(np.isfinite(first), first, 0.0)
        last = np.where(np.isfinite(last), last, 0.0)
    return h + last - first


def dispersion_integral(s_nodes: ArrayLike, rho_nodes: ArrayLike, s: ArrayLike,
                        tail: Any = None, n_tail: int = 48) -> NDArray:
    """(s/2π) ∫_{s_0}^∞ ϱ(s') / (s'(s' − s)) ds' (Nat. Commun. 13 (2022) 3351, Eqs. 57, 63);
    complex.

    ϱ is the piecewise-linear function through (``s_nodes``, ``rho_nodes``) on
    [s_0, s_N] (its Cauchy integral is exact in closed form) plus, if given, ``tail(s')``
    beyond s_N, integrated with an ``n_tail``-point Gauss–Legendre rule in t = s_N/s'
    (``tail`` must be smooth in t and bounded as s' → ∞). Real ``s`` means s + i0, so the
    result is ξ(s) + iϱ(s)/2; complex ``s`` gives the analytic function of the first sheet.
    Uses s/(s'(s' − s)) = 1/(s' − s) − 1/s'. Evaluation points must lie below s_N.
    """
    s_nodes = np.asarray(s_nodes, dtype=float)
    rho_nodes = np.asarray(rho_nodes, dtype=float)
    s = np.asarray(s)
    if np.any(np.real(s) >= s_nodes[-1]):
        msg = "dispersion_integral: evaluation points must lie below the last node"
        raise ModelError(msg)
    h0 = _cauchy_pl(s_nodes, rho_nodes, np.zeros(1))[0]
    out = (_cauchy_pl(s_nodes, rho_nodes, s) - h0) / _TWO_PI
    if tail is not None:
        tx, tw = _leggauss(int(n_tail))
        t = 0.5 * (tx + 1.0)
        w = 0.5 * tw * np.asarray(tail(s_nodes[-1] / t), dtype=float)
        sc = s[..., None]
        out = out + np.sum(w * sc / (s_nodes[-1] - sc * t), axis=-1) / _TWO_PI
    return out


@dataclass(frozen=True)
class _ChannelTable:
    """ϱ_f term values (unit couplings) on an E grid from the channel threshold to E*."""

    e: NDArray  # MeV relative to m(D*+) + m(D0)
    terms: NDArray  # (3, n)


@lru_cache(maxsize=8)
def _channel_tables(key: tuple[float, ...], e_star: float) -> tuple[_ChannelTable, ...]:
    c = TccConstants(*key)
    mth = c.threshold
    feats = ((0.0, 0.5e3 * c.gamma_dstar_plus),
             (1e3 * (c.m_dstar0 + c.m_d_plus - mth), 0.5e3 * c.gamma_dstar0))
    out = []
    for ch in tcc_channels(c):
        e_th = 1e3 * (ch.threshold - mth)
        if e_star <= e_th:
            msg = f"matching point E* = {e_star} MeV is below the {ch.name} threshold"
            raise ModelError(msg)
        e = _graded_grid(e_th, e_star, feats, alpha=0.07, h_max=0.15)
        terms = np.zeros((3, e.size))
        terms[:, 1:] = dalitz_terms(ch, (mth + 1e-3 * e[1:]) ** 2)
        out.append(_ChannelTable(e, terms))
    return tuple(out)


# ---------------------------------------------------------------------------------------
# The model: ϱ_f, Σ, A_U, F^U
# ---------------------------------------------------------------------------------------


def _matching_energy(matching: str | float, c: TccConstants) -> float:
    """E* = √s* − m_th in MeV for ``"paper"`` (3.9 GeV), ``"code"`` (+4 MeV) or a number
    (MeV above the D*+ D0 threshold)."""
    if isinstance(matching, str):
        if matching == "paper":
            return 1e3 * (PAPER_MATCHING_GEV - c.threshold)
        if matching == "code":
            return CODE_MATCHING_MEV
        msg = f"matching must be 'paper', 'code' or a number in MeV, got {matching!r}"
        raise ModelError(msg)
    val = float(matching)
    if not (math.isfinite(val) and val > 0.5):
        msg = f"matching: {matching!r} MeV must be a finite number > 0.5 (above threshold)"
        raise ModelError(msg)
    return val


class _FastSpline:
    """Scalar evaluation of a scipy CubicSpline without the per-call overhead."""

    def __init__(self, spline: CubicSpline):
        self.x = [float(v) for v in spline.x]
        self.c = [[float(v) for v in row] for row in spline.c.T]

    def __call__(self, v: float) -> float:
        i = min(max(bisect_right(self.x, v) - 1, 0), len(self.c) - 1)
        d = v - self.x[i]
        c0, c1, c2, c3 = self.c[i]
        return ((c0 * d + c1) * d + c2) * d + c3


class UnitarisedModel:
    """ϱ_f(s), Σ(s), A_U(s) and F^U(s) of Nat. Commun. 13 (2022) 3351 for fixed constants
    and matching.

    Parameters
    ----------
    constants : TccConstants, optional
        Masses, widths and couplings (defaults: :class:`TccConstants`).
    matching : {"paper", "code"} or float
        √s* of Eqs. 50–52: 3.9 GeV (paper), m_th + 4 MeV (public code) or a value in MeV
        above the D*+ D0 threshold.

    Notes
    -----
    Energies ``e`` are E = √s − (m_D*+ + m_D0) in MeV; ``delta_m_u`` is m_U − m_th in MeV;
    ``g`` is |g| in GeV with ``None`` (or inf) for the |g| → ∞ limit. The profile is returned
    as |g|⁴ F^U = ϱ_f / |(m_U² − s)/|g|² − Σ(s)|², which tends to ϱ_f/|Σ|² for |g| → ∞.
    """

    #: ξ is tabulated on [E_MIN_XI, E_MAX_XI] MeV; profiles are available up to E_MAX_XI.
    E_MIN_XI: Final = -40.0
    E_MAX_XI: Final = 80.0
    #: upper end of the piecewise-linear part of the dispersion integral (MeV)
    E_MAX_DISP: Final = 500.0

    def __init__(self, constants: TccConstants | None = None, matching: str | float = "paper"):
        self.constants = TccConstants() if constants is None else constants
        c = self.constants
        self.threshold = c.threshold  # GeV
        self.e_star = _matching_energy(matching, c)
        if self.e_star > self.E_MAX_DISP - 10.0:
            msg = f"matching point {self.e_star} MeV is too far above threshold"
            raise ModelError(msg)
        self.channels = tcc_channels(c)
        tables = _channel_tables(c.kinematic_key(), self.e_star)
        self._rho_nodes: list[tuple[NDArray, NDArray]] = []
        self._splines: list[CubicSpline] = []
        cf = []
        for ch, tab in zip(self.channels, tables, strict=True):
            r = np.tensordot(np.asarray(channel_weights(ch, c)), tab.terms, axes=1)
            self._rho_nodes.append((tab.e, r))
            self._splines.append(CubicSpline(tab.e, r))
            cf.append(float(r[-1] / two_body_rho(self.s(self.e_star), *ch.two_body)))
        #: continuity constants c_f of Eqs. 50–52 (w.r.t. λ^{1/2}(s, M², m²)/s)
        self.c = np.array(cf)
        self.e_thresholds = np.array([tab.e[0] for tab in tables])
        self._build_dispersion()

    # --- kinematics ----------------------------------------------------------------------
    def s(self, e: ArrayLike) -> Any:
        """s in GeV² at E = √s − m_th (MeV); complex E allowed."""
        return (self.threshold + 1e-3 * np.asarray(e)) ** 2

    def e_of_s(self, s: ArrayLike) -> Any:
        return 1e3 * (np.sqrt(np.asarray(s)) - self.threshold)

    @property
    def rho_inf(self) -> float:
        """ϱ_tot(s → ∞) = Σ c_f (used in |g|² = 2 m_th Γ0 / ϱ_∞, as in the public code's
        ``scripts/S-002-effectiverange.jl``)."""
        return float(self.c.sum())

    # --- phase-space functions -----------------------------------------------------------
    def rho(self, e: ArrayLike, channel: int | str | None = None) -> NDArray:
        """ϱ_f(E) (Eqs. 49–52) for one channel (index or name) or ϱ_tot (``None``)."""
        e = np.asarray(e, dtype=float)
        if channel is None:
            return sum(self.rho(e, i) for i in range(3))  # type: ignore[return-value]
        i = CHANNEL_NAMES.index(channel) if isinstance(channel, str) else int(channel)
        e_nodes = self._rho_nodes[i][0]
        below = np.clip(e, e_nodes[0], self.e_star)
        inside = np.maximum(self._splines[i](below), 0.0)
        above = self.c[i] * two_body_rho(self.s(np.maximum(e, self.e_star)),
                                         *self.channels[i].two_body)
        out = np.where(e <= self.e_star, inside, above)
        return np.where(e <= e_nodes[0], 0.0, out)

    def rho_complex(self, e: complex | ArrayLike) -> NDArray:
        """ϱ_tot at complex E by the continued Dalitz integral (Eq. 65), without matching."""
        s = np.atleast_1d(self.s(np.asarray(e, dtype=complex)))
        return sum(rho_dalitz(ch, s, self.constants) for ch in self.channels)  # type: ignore[return-value]

    # --- dispersion integral ---------------------------------------------------------------
    def _build_dispersion(self) -> None:
        c = self.constants
        feats2 = ((0.0, 0.5e3 * c.gamma_dstar_plus),
                  (1e3 * (c.m_dstar0 + c.m_d_plus - self.threshold), 0.5e3 * c.gamma_dstar0))
        self._src: list[tuple[NDArray, NDArray]] = []
        tail = _graded_grid(self.e_star, self.E_MAX_DISP, feats2, alpha=0.02, h_max=5.0,
                            far=1e9)
        for i in range(3):
            e_nodes = self._rho_nodes[i][0]
            fine = np.concatenate([np.linspace(e_nodes[j], e_nodes[j + 1], 9)[:-1]
                                   for j in range(e_nodes.size - 1)])
            e_src = np.concatenate([fine, tail])
            self._src.append((self.s(e_src), self.rho(e_src, i)))
        feats = (*feats2, (self.e_star, 0.05))
        self._xi_e = _graded_grid(self.E_MIN_XI, self.E_MAX_XI, feats, alpha=0.07, h_max=0.3)
        self._xi_spline = CubicSpline(self._xi_e, self.xi_exact(self._xi_e))
        self._xi_fast = _FastSpline(self._xi_spline)

    def _tail_rho(self, i: int) -> Any:
        ch = self.channels[i]
        ci = self.c[i]
        return lambda s: ci * two_body_rho(s, *ch.two_body)

    def sigma_unsubtracted(self, s: ArrayLike) -> NDArray:
        """(s/2π) ∫ ϱ_tot(s')/(s'(s' − s)) ds' (Eqs. 57, 58, 63): ξ(s) + iϱ_tot/2 for real s
        (limit from above), the first-sheet analytic function for complex s. Each channel
        integral starts at its own threshold (Eq. 58); beyond E = 500 MeV the matched form
        c_f Φ is integrated analytically-smoothly (:func:`dispersion_integral`)."""
        s = np.asarray(s)
        return sum(dispersion_integral(sn, gn, s, tail=self._tail_rho(i))  # type: ignore[return-value]
                   for i, (sn, gn) in enumerate(self._src))

    def xi_exact(self, e: ArrayLike) -> NDArray:
        """ξ(s(E)) (Eq. 57) from the dispersion integral (no table)."""
        return np.real(self.sigma_unsubtracted(self.s(np.asarray(e, dtype=float))))

    def xi(self, e: ArrayLike) -> NDArray:
        """ξ(s(E)) from the cubic-spline table on [E_MIN_XI, E_MAX_XI] MeV."""
        e = np.asarray(e, dtype=float)
        if np.any(e > self.E_MAX_XI) or np.any(e < self.E_MIN_XI):
            msg = (f"xi: E outside the tabulated range [{self.E_MIN_XI}, {self.E_MAX_XI}] MeV "
                   f"(got {e.min():.3f} .. {e.max():.3f})")
            raise ModelError(msg)
        return self._xi_spline(e)

    def xi_at(self, e: float) -> float:
        """ξ at one energy (fast scalar path of :meth:`xi`)."""
        if not self.E_MIN_XI <= e <= self.E_MAX_XI:
            msg = f"delta_m_u = {e} MeV outside [{self.E_MIN_XI}, {self.E_MAX_XI}] MeV"
            raise ModelError(msg)
        return self._xi_fast(e)

    # --- self-energy and amplitude ------------------------------------------------------------
    def sigma(self, e: ArrayLike, delta_m_u: float, sheet: int = 1) -> NDArray:
        """Σ(s) = [unsubtracted] − ξ(m_U²) at (complex) E (Eqs. 56, 63); on ``sheet=2`` and
        Im E < 0 the continuation Σ + iϱ_tot (continuous across the cut, see module doc).

        This is the exact (untabulated) path used for poles and low-energy parameters: both
        terms come from the same dispersion integral, so Re Σ(m_U²) = 0 to rounding. The
        fit path (:meth:`profile`, :class:`UnitarisedShape`) uses the ξ spline for both
        terms (they agree to ~1e-10, i.e. ~1e-6 keV in energy)."""
        e = np.asarray(e)
        xi_u = float(self.xi_exact(np.array([float(delta_m_u)]))[0])
        val = self.sigma_unsubtracted(self.s(e)) - xi_u
        if sheet == 2:
            lower = np.imag(e) < 0
            if np.any(lower):
                val = np.asarray(val, dtype=complex)
                val[lower] = val[lower] + 1j * self.rho_complex(e[lower])
        elif sheet != 1:
            msg = f"sheet must be 1 or 2, got {sheet}"
            raise ModelError(msg)
        return val

    def inverse_amplitude(self, e: ArrayLike, delta_m_u: float, g: float | None = None,
                          sheet: int = 1) -> NDArray:
        """|g|⁻² / A_U = (m_U² − s)/|g|² − Σ(s) (Eqs. 48, 53, 64); −Σ for |g| → ∞."""
        e = np.asarray(e)
        val = -self.sigma(e, delta_m_u, sheet)
        if not _is_infinite(g):
            val = val + (self.s(delta_m_u) - self.s(e)) / float(g) ** 2  # type: ignore[arg-type]
        return val

    def profile(self, e: ArrayLike, delta_m_u: float, g: float | None = None,
                channel: int | str = 0) -> NDArray:
        """|g|⁴ F^U_f(E) = ϱ_f / |(m_U² − s)/|g|² − Σ|² (Eq. 47) on real E (MeV)."""
        e = np.asarray(e, dtype=float)
        if np.any(e > self.E_MAX_XI):
            msg = f"profile: E above {self.E_MAX_XI} MeV is not tabulated"
            raise ModelError(msg)
        rho_f = self.rho(e, channel)
        ee = np.clip(e, self.E_MIN_XI, self.E_MAX_XI)
        re = self.xi(ee) - self.xi_at(delta_m_u)
        if not _is_infinite(g):
            re = re - (self.s(delta_m_u) - self.s(ee)) / float(g) ** 2  # type: ignore[arg-type]
        im = 0.5 * self.rho(ee)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = rho_f / (re * re + im * im)
        return np.where(rho_f > 0, out, 0.0)


def _is_infinite(g: float | str | None) -> bool:
    if g is None:
        return True
    if isinstance(g, str):
        if g.lower() in ("inf", "infinity", "infinite"):
            return True
        msg = f"|g| must be a number, None or 'inf', got {g!r}"
        raise ModelError(msg)
    return math.isinf(float(g))


@lru_cache(maxsize=16)
def _cached_model(key: tuple[float, ...], matching: str | float) -> UnitarisedModel:
    return UnitarisedModel(TccConstants(*key), matching)


def unitarised_model(constants: TccConstants | None = None,
                     matching: str | float = "paper") -> UnitarisedModel:
    """A (process-wide cached) :class:`UnitarisedModel`."""
    c = TccConstants() if constants is None else constants
    key = tuple(getattr(c, f.name) for f in fields(c))
    return _cached_model(key, matching)


# ---------------------------------------------------------------------------------------
# The 1-D shape used by the mixture model
# ---------------------------------------------------------------------------------------

_DEFAULT_OFFSET_MEV: Final = 1e3 * TccConstants().threshold


class UnitarisedShape:
    """F^U of the D0D0π+ channel as a 1-D shape for :class:`toyengine.core.model1d.Model1D`.

    Parameters (all keyword, plain values so that a study file can give them)
    ----------
    g : float, "inf" or None
        ``None``/``"inf"`` (default): the |g| → ∞ limit of the default fit, one parameter
        ``mass_param``. A number: finite |g| (GeV) becomes the second parameter ``g_param``;
        the number is only its suggested start value (the model builder reads it).
    matching : "paper", "code" or float
        Matching point of Eqs. 50–52 (see :class:`UnitarisedModel`).
    f2, h2, mu0, mu_plus : float, optional
        Coupling constants (defaults: :class:`TccConstants`), for the coupling-constant
        systematic.
    constants : mapping, optional
        Other :class:`TccConstants` fields (GeV), e.g. ``{"m_dstar_plus": 2.010258}``.
    channel : str
        Final state of the profile, default ``"D0D0pi+"``.
    offset : float
        Observable offset in MeV: the shape is evaluated at E = x + offset − m_th. Default
        m(D*+) + m(D0) of the default constants (3875.0858 MeV), the model's δm offset.
    mass_param, g_param : str
        Parameter names (δm_U in MeV, |g| in GeV).

    Notes
    -----
    ``evaluate(x, values)`` returns |g|⁴ F^U (unnormalised, ≥ 0); with |g| finite it tends to
    the |g| → ∞ shape. The tables are built once per process for each set of constants
    (about 1–2 s; coupling changes reuse the Dalitz tables).
    """

    def __init__(self, *, g: float | str | None = None, matching: str | float = "paper",
                 f2: float | None = None, h2: float | None = None, mu0: float | None = None,
                 mu_plus: float | None = None, constants: Mapping[str, float] | None = None,
                 channel: str = "D0D0pi+", offset: float = _DEFAULT_OFFSET_MEV,
                 mass_param: str = "delta_m_u", g_param: str = "g"):
        changes = dict(constants or {})
        for name, val in (("f2", f2), ("h2", h2), ("mu0", mu0), ("mu_plus", mu_plus)):
            if val is not None:
                changes[name] = float(val)
        self.constants = TccConstants().updated(changes)
        self.matching = matching
        _matching_energy(matching, self.constants)  # validate early
        if channel not in CHANNEL_NAMES:
            msg = f"UnitarisedShape: channel must be one of {CHANNEL_NAMES}, got {channel!r}"
            raise ModelError(msg)
        self.channel = channel
        self.infinite_g = _is_infinite(g)
        if not self.infinite_g and not float(g) > 0:  # type: ignore[arg-type]
            msg = f"UnitarisedShape: g = {g!r} must be > 0 (GeV) or 'inf'"
            raise ModelError(msg)
        self.g_start = None if self.infinite_g else float(g)  # type: ignore[arg-type]
        self.offset = float(offset)
        self.mass_param = mass_param
        self.g_param = g_param
        self.param_names: tuple[str, ...] = ((mass_param,) if self.infinite_g
                                             else (mass_param, g_param))
        self._cache: dict[tuple, tuple[NDArray, ...]] = {}
        self._model: UnitarisedModel | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None) -> UnitarisedShape:
        """Build from a plain mapping (unknown keys raise :class:`ModelError`)."""
        opts = dict(options or {})
        known = {"g", "matching", "f2", "h2", "mu0", "mu_plus", "constants", "channel",
                 "offset", "mass_param", "g_param"}
        unknown = sorted(set(opts) - known)
        if unknown:
            msg = f"UnitarisedShape: unknown option(s) {unknown}; known: {sorted(known)}"
            raise ModelError(msg)
        return cls(**opts)

    builder = from_options

    @property
    def model(self) -> UnitarisedModel:
        if self._model is None:
            self._model = unitarised_model(self.constants, self.matching)
        return self._model

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}
        state["_model"] = None  # rebuilt (and shared) in the receiving process
        return state

    def _prepare(self, x: NDArray) -> tuple[NDArray, ...]:
        key = (x.shape, x.tobytes())
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        m = self.model
        e = x + (self.offset - 1e3 * m.threshold)
        if np.any(e > m.E_MAX_XI):
            msg = (f"UnitarisedShape: x up to {x.max():.3f} MeV exceeds the tabulated range "
                   f"(E <= {m.E_MAX_XI} MeV above threshold)")
            raise ModelError(msg)
        ee = np.clip(e, m.E_MIN_XI, m.E_MAX_XI)
        rho_f = m.rho(e, self.channel)
        live = rho_f > 0
        entry = (m.s(ee)[live], rho_f[live], m.xi(ee)[live], 0.5 * m.rho(ee)[live], live)
        if len(self._cache) > 8:
            self._cache.clear()
        self._cache[key] = entry
        return entry

    def evaluate(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray:
        """|g|⁴ F^U at the observable values ``x`` (MeV) for ``values`` = (δm_U[, |g|])."""
        x = np.asarray(x, dtype=float)
        s, rho_f, xi, half_rho, live = self._prepare(x)
        m = self.model
        dmu = float(values[0])
        re = xi - m.xi_at(dmu)
        if not self.infinite_g:
            g = abs(float(values[1]))
            if g == 0.0:
                return np.zeros_like(x)
            if math.isfinite(g):
                mu2 = (m.threshold + 1e-3 * dmu) ** 2
                re = re - (mu2 - s) / (g * g)
        out = np.zeros_like(x)
        out[live] = rho_f / (re * re + half_rho * half_rho)
        return out


# ---------------------------------------------------------------------------------------
# Derived quantities
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModeWidth:
    """Mode δ𝔪 and FWHM 𝔴 of F^U (MeV), with the half-maximum points."""

    mode: float
    fwhm: float
    left: float
    right: float


def mode_and_fwhm(model: UnitarisedModel, delta_m_u: float, g: float | None = None,
                  channel: int | str = 0) -> ModeWidth:
    """Mode and full width at half maximum of F^U_f(E) (Nat. Commun. 13 (2022) 3351, Results, and
    Methods Eq. 62).

    The maximum nearest to δm_U is bracketed on a fine scan, refined with Brent's method,
    and the half-maximum crossings are found with ``brentq`` walking outwards from the mode.
    """

    def f(e: float) -> float:
        return float(model.profile(np.array([e]), delta_m_u, g, channel)[0])

    centre, half_window, n = delta_m_u, 0.2, 4001
    for _ in range(12):
        lo = max(centre - half_window, model.E_MIN_XI)
        hi = min(centre + half_window, model.E_MAX_XI)
        grid = np.linspace(lo, hi, n)
        vals = model.profile(grid, delta_m_u, g, channel)
        k = int(np.argmax(vals))
        if k in (0, n - 1):
            half_window *= 4.0
            continue
        res = optimize.minimize_scalar(lambda e: -f(e), bounds=(grid[k - 1], grid[k + 1]),
                                       method="bounded", options={"xatol": 1e-10})
        mode = float(res.x)
        fmax = max(f(mode), float(vals[k]))
        i = k
        while i > 0 and vals[i] >= 0.5 * fmax:
            i -= 1
        j = k
        while j < n - 1 and vals[j] >= 0.5 * fmax:
            j += 1
        if vals[i] >= 0.5 * fmax or vals[j] >= 0.5 * fmax:
            half_window *= 4.0
            continue
        if j - i < 40:  # the scan is too coarse for this width: zoom in on the peak
            centre, half_window = mode, 10.0 * (grid[j] - grid[i])
            continue
        def excess(e: float, level: float = 0.5 * fmax) -> float:
            return f(e) - level

        left = optimize.brentq(excess, grid[i], grid[i + 1], xtol=1e-12)
        right = optimize.brentq(excess, grid[j - 1], grid[j], xtol=1e-12)
        return ModeWidth(mode, right - left, left, right)
    msg = f"mode_and_fwhm: could not bracket the peak for delta_m_u={delta_m_u}, g={g}"
    raise ModelError(msg)


@dataclass(frozen=True)
class Pole:
    """Pole of A_U on the second sheet: √ŝ = m_pole − iΓ_pole/2 (Nat. Commun. 13 (2022) 3351, Eqs.
    8–12)."""

    delta_m: float  # m_pole − m_th, MeV
    gamma: float  # Γ_pole, MeV
    sqrt_s: complex  # GeV
    residual: float  # |1/A^II| at the solution (units of Σ)


def pole_position(model: UnitarisedModel, delta_m_u: float, g: float | None = None,
                  start: complex | None = None) -> Pole:
    """Solve 1/A_U^II(s) = 0 (Eq. 9 with Eq. 64) in the lower half plane.

    The start defaults to mode − i FWHM/2 of F^U. The equation is solved for complex
    E = √s − m_th (MeV) with ``scipy.optimize.root`` on (Re, Im).
    """
    if start is None:
        mw = mode_and_fwhm(model, delta_m_u, g)
        start = complex(mw.mode, -0.5 * mw.fwhm)
    scale = 1e6

    def fun(v: NDArray) -> list[float]:
        e = np.array([complex(v[0], min(v[1], -1e-9))])
        d = model.inverse_amplitude(e, delta_m_u, g, sheet=2)[0] * scale
        return [d.real, d.imag]

    sol = optimize.root(fun, [start.real, start.imag], method="hybr", options={"xtol": 1e-12})
    e = complex(sol.x[0], sol.x[1])
    resid = abs(complex(*fun(sol.x))) / scale
    if not sol.success and resid > 1e-9:
        msg = f"pole_position: root finding failed ({sol.message}); residual {resid:.2e}"
        raise ModelError(msg)
    sqrt_s = model.threshold + 1e-3 * e
    return Pole(e.real, -2.0 * e.imag, sqrt_s, resid)


def g_from_gamma0(model: UnitarisedModel, gamma0: float) -> float:
    """|g| (GeV) for the asymptotic width Γ0 (GeV): |g|² = 2 m_th Γ0 / ϱ_∞ (public code,
    ``S-002-effectiverange.jl``; ϱ_∞ = Σ c_f)."""
    return math.sqrt(2.0 * model.threshold * gamma0 / model.rho_inf)


@dataclass(frozen=True)
class LowEnergyParameters:
    """Scattering length, effective range and related quantities (Nat. Commun. 13 (2022) 3351, Eqs.
    13–20)."""

    inverse_a: complex  # 1/a in MeV
    a: complex  # fm
    r: float  # effective range, fm (≤ 0; 0 for |g| → ∞)
    z: float  # compositeness, Eq. 17
    w: float  # matching factor of Eq. 74, GeV⁻¹
    gamma: float  # binding momentum sqrt(2 μ ΔE), MeV
    r_delta_e: float  # 1/γ, fm


def compositeness(r: float, a_real: float) -> float:
    """Z = 1 − sqrt(1 / (1 + 2|r / Re a|)) (Nat. Commun. 13 (2022) 3351, Eq. 17)."""
    return 1.0 - math.sqrt(1.0 / (1.0 + 2.0 * abs(r / a_real)))


def low_energy_parameters(model: UnitarisedModel, delta_m_u: float,
                          g: float | None = None) -> LowEnergyParameters:
    """a, r and Z from the threshold expansion of A_U (Nat. Commun. 13 (2022) 3351, Eqs. 72–76).

    (2/|g|²)/A_U = −2[Σ(s) − ...] + 2(m_U² − s)/|g|² is divided by w so that it matches
    1/a + r k²/2 − ik. We use w = 3 c1/(m_D*+ + m_D0), the factor of the public code
    (``S-002-effectiverange.jl``: w_matching × ϱ_∞), which reproduces the paper's a, −r
    and Z; Eq. 74 as printed, 24π/((m_D*+ + m_D0) c1), does not (see module docs).
    Then 1/a = −(1/w)[2(ξ(s_th) − ξ(m_U²)) + iϱ_tot(s_th)] (+ 2(m_U² − s_th)/(w|g|²)) and
    r = −16/(w|g|²) (Eqs. 75–76).
    """
    mth = model.threshold
    w = 3.0 * model.c[0] / mth
    two_inv = 2.0 * model.inverse_amplitude(np.array([0.0]), delta_m_u, g)[0]  # real s + i0
    inv_a = complex(two_inv) / w  # GeV
    if _is_infinite(g):
        r_gev = 0.0
    else:
        r_gev = -16.0 / (w * float(g) ** 2)  # type: ignore[arg-type]
    a = HBARC_GEV_FM / inv_a
    r_fm = r_gev * HBARC_GEV_FM
    z = compositeness(r_fm, a.real)
    mu = model.constants.reduced_mass
    binding = -1e-3 * delta_m_u
    gamma = math.sqrt(2.0 * mu * binding) * 1e3 if binding > 0 else math.nan
    return LowEnergyParameters(inv_a * 1e3, a, r_fm, z, w, gamma,
                               HBARC_GEV_FM * 1e3 / gamma if binding > 0 else math.nan)


def coupling_variations(sigmas: float = 1.0) -> dict[str, dict[str, float]]:
    """Option sets for the coupling-constant systematic: each of f², h², μ0 moved by
    ±``sigmas`` × :data:`COUPLING_UNCERTAINTIES` (assumed relative uncertainties)."""
    base = TccConstants()
    out: dict[str, dict[str, float]] = {}
    for name, rel in COUPLING_UNCERTAINTIES.items():
        for sign, tag in ((1.0, "up"), (-1.0, "down")):
            out[f"{name}_{tag}"] = {name: getattr(base, name) * (1.0 + sign * sigmas * rel)}
    return out
