"""Quantities derived from the unitarised T_cc⁺ model (LHCb, Nature Communications 13
(2022) 3351, Methods and Table 1): mode and FWHM, the pole position, the low-energy
parameters and compositeness, the coupling-constant variations."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import optimize

from ...errors import ModelError
from .channels import COUPLING_UNCERTAINTIES, HBARC_GEV_FM, TccConstants
from .model import UnitarisedModel, _is_infinite

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
