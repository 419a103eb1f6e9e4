"""The T_cc+ → D0 D0 pi+ mass model of seeds 001/002 (PHYSICS.md §2, §3).

Observable ``delta_m = m(D0 D0 pi+) - (m_D*+ + m_D0)`` in MeV. Signal: P-wave relativistic
Breit–Wigner with a Blatt–Weisskopf factor (r = 3.5 GeV^-1, ``R -> (D0 D0) pi+``, i.e.
m_A = 2 m_D0, m_B = m_pi+) ⊗ resolution. Background: Phi_2(D*+ D0) × positive polynomial
⊗ resolution, optionally plus the three-body term Phi_3(D0 D0 pi+) × positive polynomial
(not convolved; B'_nm of seed 002 Eq. 3). Default resolution: the double Gaussian of seed 002
Methods (σ1 = 1.05 × 263 keV, σ2 = 2.413 σ1, f = 0.778).

Background level: the papers do not give it (PHYSICS.md §2.5, NOT FOUND). ``n_bkg = 700``
in δm ∈ [−4, 11] MeV gives σ(delta_m) ≈ 61 keV in toy fits, as the paper's 61 keV (issue 2;
measured in the issue note).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.kinematics import MASSES_PDG2020 as M
from ..core.model1d import Component, Model1D, Observable
from ..core.params import Parameter, ParameterSet
from ..core.resolution import Resolution, default_tcc_resolution, tcc_alternative_resolutions
from ..core.shapes import PhaseSpacePolynomial, RelativisticBW
from ..errors import ModelError

__all__ = ["DEFAULTS", "TCC_OFFSET", "build_tcc"]

M_D0 = M["D0"]
M_PI = M["pi+"]
M_DSTP = M["D*+"]
TCC_OFFSET = M_DSTP + M_D0  # D*+ D0 threshold, 3875.09 MeV

DEFAULTS: dict[str, Any] = {
    "range": [-4.0, 11.0],
    "signal": "bw",            # bw | unitarised | none
    "L": 1,
    "radius": 3.5,             # GeV^-1
    # DD_pi: m_A = 2 m_D0, m_B = m_pi+; D_Dpi: m_A = m_D0, m_B = m_D0 + m_pi+
    "decay_structure": "DD_pi",
    "resolution": "double_gaussian",  # or apollonios, cb2, student_t, johnson_su, novosibirsk
    "resolution_scale": 1.05,
    "background_order": 2,
    "three_body_order": None,  # m of B'_nm: add Phi3(D0D0pi+) x P_m (not convolved)
    "grid_step": 0.01,         # MeV
    "unitarised": {},          # options of toyengine.core.unitarised.UnitarisedShape
}


def _sphere_angles_for_flat(order: int) -> list[float]:
    """Angles whose sphere coefficients are all equal (a flat polynomial)."""
    angles = []
    for k in range(order):
        remaining = order + 1 - k
        angles.append(math.acos(math.sqrt(1.0 / remaining)))
    return angles


def build_tcc(options: Mapping[str, Any] | None = None,
              rng: np.random.Generator | None = None) -> Model1D:
    """Build the T_cc+ model. ``options`` override :data:`DEFAULTS` (see there)."""
    del rng  # no random variations in this model family
    opts = {**DEFAULTS, **(options or {})}
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        msg = f"tcc model: unknown option(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}"
        raise ModelError(msg)
    lo, hi = (float(v) for v in opts["range"])
    obs = Observable("delta_m", lo, hi, "MeV")
    scale = float(opts["resolution_scale"])
    if not scale > 0:
        msg = f"tcc model: resolution_scale must be > 0, got {scale}"
        raise ModelError(msg)
    reso_name = opts["resolution"]
    if isinstance(reso_name, Mapping):
        reso = Resolution(reso_name["kind"], {k: v for k, v in reso_name.items() if k != "kind"})
    elif reso_name == "double_gaussian":
        reso = default_tcc_resolution(scale)
    else:
        alts = tcc_alternative_resolutions(scale)
        if reso_name not in alts:
            msg = (f"tcc model: unknown resolution {reso_name!r}; known: "
                   f"{['double_gaussian', *sorted(alts)]}")
            raise ModelError(msg)
        reso = alts[reso_name]

    params: list[Parameter] = []
    comps: list[Component] = []
    signal = opts["signal"]
    if signal == "bw":
        if opts["decay_structure"] == "DD_pi":
            m_a, m_b = 2 * M_D0, M_PI
        elif opts["decay_structure"] == "D_Dpi":
            m_a, m_b = M_D0, M_D0 + M_PI
        else:
            msg = ("tcc model: decay_structure must be 'DD_pi' or 'D_Dpi', got "
                   f"{opts['decay_structure']!r}")
            raise ModelError(msg)
        shape = RelativisticBW("delta_m", "gamma", TCC_OFFSET, m_a, m_b, int(opts["L"]),
                               float(opts["radius"]))
        params += [Parameter("n_sig", 117.0, (-1000.0, 1e6)),
                   Parameter("delta_m", -0.273, (-3.0, 3.0), step=0.05),
                   Parameter("gamma", 0.410, (0.0, 5.0), step=0.1)]
        comps.append(Component("signal", "n_sig", shape))
    elif signal == "unitarised":
        from ..core.unitarised import UnitarisedShape

        ushape = UnitarisedShape(**dict(opts["unitarised"]))
        params += [Parameter("n_sig", 186.0, (-1000.0, 1e6)),
                   Parameter("delta_m_u", -0.359, (-3.0, 3.0), step=0.05)]
        if "g" in ushape.param_names:
            params.append(Parameter("g", float(opts["unitarised"].get("g", 8.08)), (0.1, 1e4)))
        comps.append(Component("signal", "n_sig", ushape))
    elif signal != "none":
        msg = f"tcc model: signal must be 'bw', 'unitarised' or 'none', got {signal!r}"
        raise ModelError(msg)

    order = int(opts["background_order"])
    if not 0 <= order <= 6:
        msg = f"tcc model: background_order must be in 0..6, got {order}"
        raise ModelError(msg)
    names = tuple(f"bkg_phi{k + 1}" for k in range(order))
    params.append(Parameter("n_bkg", 700.0, (0.0, 1e7)))
    for name, angle in zip(names, _sphere_angles_for_flat(order), strict=True):
        params.append(Parameter(name, angle, (0.0, math.pi / 2), step=0.1))
    comps.append(Component("background", "n_bkg",
                           PhaseSpacePolynomial(names, TCC_OFFSET, (M_DSTP, M_D0), lo, hi)))
    tb = opts["three_body_order"]
    if tb is not None:
        tb = int(tb)
        tnames = tuple(f"bkg3_phi{k + 1}" for k in range(tb))
        params.append(Parameter("n_bkg3", 100.0, (0.0, 1e7)))
        for name, angle in zip(tnames, _sphere_angles_for_flat(tb), strict=True):
            params.append(Parameter(name, angle, (0.0, math.pi / 2), step=0.1))
        comps.append(Component("background3", "n_bkg3",
                               PhaseSpacePolynomial(tnames, TCC_OFFSET, (M_D0, M_D0, M_PI), lo, hi),
                               convolve=False))
    return Model1D(obs, comps, ParameterSet(tuple(params)), reso, float(opts["grid_step"]))
