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

Modules: :mod:`.channels` (constants, channels, matrix elements, the Dalitz integral ϱ_f),
:mod:`.dispersion` (grids and the Cauchy integral of Σ), :mod:`.model` (the model and the
fit shape), :mod:`.derived` (mode, FWHM, pole, low-energy parameters).
"""

from __future__ import annotations

from .channels import (
    CHANNEL_NAMES,
    COUPLING_UNCERTAINTIES,
    HBARC_GEV_FM,
    DecayChannel,
    Quadrature,
    TccConstants,
    channel_weights,
    dalitz_terms,
    matrix_element_terms,
    rho_dalitz,
    tcc_channels,
    two_body_rho,
)
from .derived import (
    LowEnergyParameters,
    ModeWidth,
    Pole,
    compositeness,
    coupling_variations,
    g_from_gamma0,
    low_energy_parameters,
    mode_and_fwhm,
    pole_position,
)
from .dispersion import dispersion_integral
from .model import UnitarisedModel, UnitarisedShape, unitarised_model

__all__ = [
    "CHANNEL_NAMES",
    "COUPLING_UNCERTAINTIES",
    "HBARC_GEV_FM",
    "DecayChannel",
    "LowEnergyParameters",
    "ModeWidth",
    "Pole",
    "Quadrature",
    "TccConstants",
    "UnitarisedModel",
    "UnitarisedShape",
    "channel_weights",
    "compositeness",
    "coupling_variations",
    "dalitz_terms",
    "dispersion_integral",
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

