"""The T_cc+ → D0 D0 pi+ mass model of LHCb, Nature Physics 18 (2022) 751 and Nature
Communications 13 (2022) 3351.

Observable ``delta_m = m(D0 D0 pi+) - (m_D*+ + m_D0)`` in MeV. Signal: P-wave relativistic
Breit–Wigner with a Blatt–Weisskopf factor (r = 3.5 GeV^-1, ``R -> (D0 D0) pi+``, i.e.
m_A = 2 m_D0, m_B = m_pi+) ⊗ resolution. Background: Phi_2(D*+ D0) × positive polynomial
⊗ resolution, optionally plus the three-body term Phi_3(D0 D0 pi+) × positive polynomial
(not convolved; B'_nm of Nature Communications 13 (2022) 3351, Eq. 3). Default resolution:
the double Gaussian of its Methods, "Resolution model for the D0D0π+ mass" (σ1 = 1.05 × 263
keV, σ2 = 2.413 σ1, f = 0.778).

Fit range and background: the papers give neither. The T_cc studies use δm ∈ [−4, 24.914]
MeV (up to 3.9 GeV, the end of the region both papers use to study the background), 286
candidates (BW: 117 signal + 169 background; unitarised: 186 + 100) and a Φ2 × P2 background
with Bernstein coefficients (1.4 : 1 : 1): a calibration, chosen so that the BW toy fits give
σ(δm_BW) ≈ 55 keV (Nature Physics 18 (2022) 751: ±61 keV) while the unitarised → BW
cross-check ensemble of Nature Communications 13 (2022) 3351 gives δm_BW ≈ −281 keV and Γ_BW
within one standard deviation of 410 keV; docs/tcc-references.md gives the reasons. The
builder's own defaults (δm ∈ [−4, 11] MeV, 700 background events, flat polynomial) are
generic start values only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import ConfigDict, Field, field_validator, model_validator

from ..core.kinematics import MASSES_PDG2020 as M
from ..core.model1d import Component, Observable
from ..core.params import Parameter, ParameterSet
from ..core.resolution import Resolution, default_tcc_resolution, tcc_alternative_resolutions
from ..core.shapes import PhaseSpacePolynomial, RelativisticBW
from .mass1d import MassModel, build_discriminants
from .options import BuilderOptions, FiniteFloat, Pair, ordered_pair

__all__ = ["TCC_OFFSET", "NonD0Options", "ResolutionShape", "TccOptions", "UnitarisedOptions",
           "build_tcc", "non_d0_declaration"]

M_D0 = M["D0"]
M_PI = M["pi+"]
M_DSTP = M["D*+"]
TCC_OFFSET = M_DSTP + M_D0  # D*+ D0 threshold, 3875.09 MeV

_RESOLUTIONS = Literal["double_gaussian", "apollonios", "cb2", "student_t", "johnson_su",
                      "novosibirsk"]


class ResolutionShape(BuilderOptions):
    """An explicit resolution function: ``kind`` plus exactly its parameters (MeV), as
    :class:`toyengine.core.resolution.Resolution` takes them."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, FiniteFloat]
    kind: Literal["gaussian", "double_gaussian", "apollonios", "cb2", "student_t",
                  "johnson_su", "novosibirsk"] = Field(description="resolution family")


class UnitarisedOptions(BuilderOptions):
    """Options of the unitarised signal shape (:class:`toyengine.core.unitarised.UnitarisedShape`;
    Nature Communications 13 (2022) 3351, Eqs. 50–52); unset means the shape's default."""

    g: Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)] | Literal["inf"] | None = Field(
        None, description="|g| in GeV (free, start value) or inf/null: the "
        "|g| → ∞ limit")
    matching: Literal["paper", "code"] | FiniteFloat = Field(
        "paper", description="matching point: paper (3.9 GeV), code (+4 MeV) or MeV above "
        "threshold")
    f2: FiniteFloat | None = Field(None, gt=0, le=1e4, description="coupling f²")
    h2: FiniteFloat | None = Field(None, gt=0, le=10.0, description="coupling h² (GeV⁻²)")
    mu0: FiniteFloat | None = Field(None, ge=-100, le=100, description="μ0")
    mu_plus: FiniteFloat | None = Field(None, ge=-100, le=100, description="μ+")
    constants: dict[str, FiniteFloat] | None = Field(
        None, description="other TccConstants fields (GeV)")
    channel: str | None = Field(None, description="final state of the profile")
    offset: FiniteFloat | None = Field(None, description="observable offset (MeV)")
    mass_param: str | None = Field(None, min_length=1, description="name of δm_U")
    g_param: str | None = Field(None, min_length=1, description="name of |g|")


class NonD0Options(BuilderOptions):
    """The non-D⁰ background ("fake D⁰" candidates) and its sPlot subtraction (Nature
    Physics 18 (2022) 751, Methods, "Non-D0 background subtraction"; Nature Communications
    13 (2022) 3351, Methods): the two D⁰ candidate masses as discriminants in ±``window``
    around m(D⁰); a genuine D⁰ is a modified Novosibirsk peak, a fake one an exponential ×
    positive first-order polynomial. Three subtracted species (fake first, fake second,
    both fake) beside the model's genuine D⁰D⁰ pairs. The fake candidates' δm density is
    B′₁₀ of Nature Communications 13 (2022) 3351, Eq. 3 (Φ₂(D*⁺D⁰) × P₁ ⊗ R + Φ₃(D⁰D⁰π⁺)),
    the function the paper overlays on the subtracted components (its Supplementary Fig. 2).
    Values the papers do not state are chosen in docs/tcc-references.md."""

    expected: FiniteFloat = Field(gt=0, le=1e6, description="expected non-D⁰ candidates "
                                  "in the δm range (all three species)")
    both_fake: FiniteFloat = Field(0.2, ge=0, le=1, description="share of them with both "
                                   "D⁰ candidates fake (the rest split equally between "
                                   "the two one-fake species)")
    window: FiniteFloat = Field(65.0, gt=0, le=500, description="D⁰ mass window half "
                                "width (MeV)")
    sigma: FiniteFloat = Field(7.0, gt=0, le=100, description="D⁰ → K⁻π⁺ mass resolution "
                               "(MeV), the Novosibirsk width")
    tau: FiniteFloat = Field(-0.1, ge=-2, le=2, description="Novosibirsk asymmetry (< 0: "
                             "low-mass tail)")
    slope: FiniteFloat = Field(-0.005, ge=-1, le=1, description="slope of the fake D⁰ "
                               "exponential (1/MeV)")
    poly: FiniteFloat = Field(0.7853981633974483, ge=0, le=1.5707963267948966,
                              description="angle of the positive P₁ of the fake D⁰ mass "
                              "(π/4: flat)")
    three_body: FiniteFloat = Field(0.5, ge=0, le=1, description="share of Φ₃(D⁰D⁰π⁺) in "
                                    "the fake candidates' δm density (B′₁₀)")
    weights: Literal["splot", "cows"] = Field(
        "splot", description="classic sWeights at the yields fitted per toy, or custom "
        "orthogonal weight functions with a uniform variance function (no fit)")


class TccOptions(BuilderOptions):
    """Options of the ``tcc`` builder: the T_cc⁺ → D0 D0 π+ δm model of LHCb, Nature
    Physics 18 (2022) 751 and Nature Communications 13 (2022) 3351."""

    builder_name: ClassVar[str] = "tcc"

    range: Pair = Field([-4.0, 11.0], description="δm fit range [lo, hi] in MeV")
    signal: Literal["bw", "unitarised", "none"] = Field(
        "bw", description="signal shape: relativistic P-wave BW, unitarised, or none (H0)")
    L: int = Field(1, ge=0, le=4, description="orbital angular momentum of the BW")
    radius: FiniteFloat = Field(3.5, gt=0, le=20, description="Blatt–Weisskopf radius "
                                "(GeV⁻¹)")
    decay_structure: Literal["DD_pi", "D_Dpi"] = Field(
        "DD_pi", description="two-body structure of the BW: (D0D0)π+ or D0(D0π+)")
    resolution: _RESOLUTIONS | ResolutionShape = Field(
        "double_gaussian", description="resolution: a named shape of the paper or "
        "{kind, parameters}")
    resolution_scale: FiniteFloat = Field(1.05, gt=0, le=10, description="scale of the "
                                          "resolution widths")
    background_order: int = Field(2, ge=0, le=6, description="order of the positive "
                                  "polynomial × Φ2(D*+ D0)")
    three_body_order: int | None = Field(None, ge=0, le=6, description="add Φ3(D0D0π+) × "
                                         "polynomial of this order (B'_nm, not convolved)")
    grid_step: FiniteFloat = Field(0.01, ge=1e-4, le=1.0, description="convolution grid "
                                   "step (MeV)")
    unitarised: UnitarisedOptions = Field(default_factory=UnitarisedOptions,
                                          description="unitarised-shape options")
    non_d0: NonD0Options | None = Field(None, description="generate the non-D⁰ background "
                                        "and fit sWeighted data (default none: the δm "
                                        "spectrum as if background-subtracted)")

    _ordered = field_validator("range")(ordered_pair)

    @model_validator(mode="after")
    def _check(self) -> Self:
        lo, hi = self.range
        if (hi - lo) / self.grid_step > 200_000:
            msg = "range / grid_step <= 200000 grid points"
            raise ValueError(msg)
        return self


def _sphere_angles_for_flat(order: int) -> list[float]:
    """Angles whose sphere coefficients are all equal (a flat polynomial)."""
    angles = []
    for k in range(order):
        remaining = order + 1 - k
        angles.append(math.acos(math.sqrt(1.0 / remaining)))
    return angles


def build_tcc(options: Mapping[str, Any] | None = None,
              rng: np.random.Generator | None = None) -> MassModel:
    """Build the T_cc+ model from ``options`` (declared by :class:`TccOptions`).

    Raises
    ------
    toyengine.models.options.OptionsError
        An option is unknown, of the wrong type or out of its range.
    """
    del rng  # no random variations in this model family
    opts = TccOptions.parse(options)
    lo, hi = opts.range
    obs = Observable("delta_m", lo, hi, "MeV")
    scale = opts.resolution_scale
    if isinstance(opts.resolution, ResolutionShape):
        reso = Resolution(opts.resolution.kind, dict(opts.resolution.model_extra or {}))
    elif opts.resolution == "double_gaussian":
        reso = default_tcc_resolution(scale)
    else:
        reso = tcc_alternative_resolutions(scale)[opts.resolution]

    params: list[Parameter] = []
    comps: list[Component] = []
    scan: tuple[str, ...] = ()  # exist only with a signal: the multi-start covers them
    signal = opts.signal
    if signal == "bw":
        if opts.decay_structure == "DD_pi":
            m_a, m_b = 2 * M_D0, M_PI
        else:
            m_a, m_b = M_D0, M_D0 + M_PI
        shape = RelativisticBW("delta_m", "gamma", TCC_OFFSET, m_a, m_b, opts.L, opts.radius)
        scan = ("delta_m", "gamma")
        params += [Parameter("n_sig", 117.0, (-1000.0, 1e6), is_yield=True, label="N_sig"),
                   Parameter("delta_m", -0.273, (-3.0, 3.0), step=0.05, unit="MeV",
                             label="δm_BW"),
                   Parameter("gamma", 0.410, (0.0, 5.0), step=0.1, unit="MeV",
                             label="Γ_BW")]
        comps.append(Component("signal", "n_sig", shape))
    elif signal == "unitarised":
        from ..core.unitarised import UnitarisedShape

        uopts = opts.unitarised.model_dump(exclude_none=True)
        ushape = UnitarisedShape(**uopts)
        scan = ("delta_m_u",)
        params += [Parameter("n_sig", 186.0, (-1000.0, 1e6), is_yield=True, label="N_sig"),
                   Parameter("delta_m_u", -0.359, (-3.0, 3.0), step=0.05, unit="MeV",
                             label="δm_U")]
        if "g" in ushape.param_names:
            params.append(Parameter("g", float(uopts.get("g", 8.08)), (0.1, 1e4), step=2.0,
                                    unit="GeV", label="|g|"))
        comps.append(Component("signal", "n_sig", ushape))

    order = opts.background_order
    names = tuple(f"bkg_phi{k + 1}" for k in range(order))
    params.append(Parameter("n_bkg", 700.0, (0.0, 1e7), is_yield=True, label="N_bkg"))
    for name, angle in zip(names, _sphere_angles_for_flat(order), strict=True):
        params.append(Parameter(name, angle, (0.0, math.pi / 2), step=0.1,
                                label=f"φ{name[len('bkg_phi'):]}(bkg)"))
    comps.append(Component("background", "n_bkg",
                           PhaseSpacePolynomial(names, TCC_OFFSET, (M_DSTP, M_D0), lo, hi)))
    tb = opts.three_body_order
    if tb is not None:
        tnames = tuple(f"bkg3_phi{k + 1}" for k in range(tb))
        params.append(Parameter("n_bkg3", 100.0, (0.0, 1e7), is_yield=True,
                                label="N_bkg(D0D0π+)"))
        for name, angle in zip(tnames, _sphere_angles_for_flat(tb), strict=True):
            params.append(Parameter(name, angle, (0.0, math.pi / 2), step=0.1,
                                    label=f"φ{name[len('bkg3_phi'):]}(D0D0π+ bkg)"))
        comps.append(Component("background3", "n_bkg3",
                               PhaseSpacePolynomial(tnames, TCC_OFFSET, (M_D0, M_D0, M_PI), lo, hi),
                               convolve=False))
    disc = None
    if opts.non_d0 is not None:
        disc = build_discriminants(non_d0_declaration(opts.non_d0), obs, opts.grid_step, reso,
                                   [c.name for c in comps])
    return MassModel(obs, comps, ParameterSet(tuple(params)), reso, opts.grid_step,
                     scan_parameters=scan, discriminants=disc)


def non_d0_declaration(o: NonD0Options) -> dict[str, Any]:
    """The ``discriminants`` declaration (:func:`toyengine.models.mass1d.build_discriminants`)
    of the non-D⁰ background :class:`NonD0Options` describes."""
    lo, hi = M_D0 - o.window, M_D0 + o.window
    obs = [{"name": f"m_D0_{k}", "range": [lo, hi], "unit": "MeV"} for k in (1, 2)]
    one = 0.5 * (1.0 - o.both_fake) * o.expected
    x_density = [
        {"shape": "phase_space", "options": {"order": 1, "masses": ["D*+", "D0"],
                                             "offset": TCC_OFFSET},
         "params": {"phi": [math.pi / 4]}, "fraction": 1.0 - o.three_body, "convolve": True},
        {"shape": "phase_space", "options": {"order": 0, "masses": ["D0", "D0", "pi+"],
                                             "offset": TCC_OFFSET},
         "fraction": o.three_body, "convolve": False},
    ]
    x_density = [p for p in x_density if p["fraction"] > 0]
    return {
        "observables": obs,
        "shapes": {"d0": {"shape": "novosibirsk",
                          "params": {"mu": M_D0, "sigma": o.sigma, "tau": o.tau}},
                   "fake": {"shape": "bernstein", "options": {"order": 1},
                            "params": {"phi": [o.poly]},
                            "times": {"shape": "exponential", "params": {"slope": o.slope}}}},
        "model": ["d0", "d0"],
        "weights": o.weights,
        "subtract": [
            {"name": "fake_first", "expected": one, "shapes": ["fake", "d0"],
             "observable": x_density},
            {"name": "fake_second", "expected": one, "shapes": ["d0", "fake"],
             "observable": x_density},
            {"name": "fake_both", "expected": o.both_fake * o.expected,
             "shapes": ["fake", "fake"], "observable": x_density},
        ],
    }
