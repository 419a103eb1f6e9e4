"""The T_cc⁺ decay channels and their decay probabilities ϱ_f(s) (LHCb, Nature
Communications 13 (2022) 3351, Methods, Eqs. 38–49 and 65): couplings and masses, the
spin-averaged matrix elements and their Dalitz-plot integral (see :mod:`toyengine.core.unitarised`
for the method)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...errors import ModelError
from ..kinematics import MASSES_PDG2020, WIDTHS_PDG2020

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


