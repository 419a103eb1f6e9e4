"""Builder of the B0 → ηc K+ π− Dalitz models of LHCb, Eur. Phys. J. C 78 (2018) 1019
(arXiv:1809.07416): the baseline (K+π− resonances only) and the nominal model with the Zc(4100)−.

Component list: the text of the paper (Sect. 6.5) says the nominal model has "eight
amplitudes: seven resonances and one NR term", i.e. the baseline has six K+π− resonances and
one non-resonant term. It names K*(892)0 (the reference amplitude), the LASS S-wave built on
K*0(1430)0 (D. Aston et al., Nucl. Phys. B 296 (1988) 493) and K*0(1950)0; we fill the other
slots with K*(1410)0, K*2(1430)0 and K*(1680)0 (our assumption, as the values of its Table 3
are not reproduced here). Masses and widths are PDG 2018 (Phys. Rev. D 98 (2018) 030001),
the LASS start values the nominal-fit results of Sect. 6.5. Complex coefficients are
illustrative (the paper's Table 4 is not reproduced here): K*(892)0 dominant, and the
Zc(4100) coefficient chosen so that ~2000 signal decays give an expected Δ(−2 ln L) near the
paper's 41 (see ``studies/zc4100/README.md``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from annotated_types import Len
from pydantic import Field, field_validator, model_validator

from ..core.dalitz.dalitz_plot import DalitzKinematics, Vetoes
from ..core.dalitz.gof import adaptive_chi2
from ..core.dalitz.maps import SDPHistogram
from ..core.dalitz.model import Component, DalitzData, DalitzModel, RunSpec
from ..core.dalitz.resonances import Lineshape
from ..core.params import Constraint, Parameter, ParameterSet
from ..errors import ModelError
from .options import BuilderOptions, FiniteFloat, Pair, ordered_pair
from .protocol import ToyModelBase
from .zc4100_maps import background_maps, efficiency_maps

__all__ = ["KSTAR_TABLE", "STUDY_DIR", "Zc4100Model", "Zc4100Options", "build_zc4100"]

#: default location of the shipped maps and reference data (studies/zc4100 of the repo)
STUDY_DIR = Path(__file__).resolve().parents[2] / "studies" / "zc4100"

#: K+π− resonances: spin, mass ± σ, width ± σ in MeV (PDG 2018, Phys. Rev. D 98 (2018) 030001)
KSTAR_TABLE: dict[str, dict[str, float]] = {
    "kst892": {"spin": 1, "m": 895.55, "dm": 0.20, "w": 47.3, "dw": 0.5},
    "kst1410": {"spin": 1, "m": 1421.0, "dm": 9.0, "w": 236.0, "dw": 18.0},
    "kst2_1430": {"spin": 2, "m": 1432.4, "dm": 1.3, "w": 109.0, "dw": 5.0},
    "kst1680": {"spin": 1, "m": 1718.0, "dm": 18.0, "w": 320.0, "dw": 110.0},
    "kst0_1950": {"spin": 0, "m": 1945.0, "dm": 22.0, "w": 201.0, "dw": 90.0},
    "kst3_1780": {"spin": 3, "m": 1776.0, "dm": 7.0, "w": 159.0, "dw": 21.0},
    "kst4_2045": {"spin": 4, "m": 2045.0, "dm": 9.0, "w": 198.0, "dw": 30.0},
    "kst0_700": {"spin": 0, "m": 824.0, "dm": 30.0, "w": 478.0, "dw": 50.0},
    "kst0_1430": {"spin": 0, "m": 1430.0, "dm": 50.0, "w": 270.0, "dw": 80.0},
}

#: illustrative complex coefficients (re, im), our choice; the reference K*(892) is 1 + 0i
COEFFICIENTS: dict[str, tuple[float, float]] = {
    "kst892": (1.0, 0.0),
    "kst1410": (0.25, -0.15),
    "lass": (0.55, 0.30),
    "lass_nr": (0.30, -0.35),
    "kst2_1430": (-0.30, 0.25),
    "kst1680": (0.20, 0.25),
    "kst0_1950": (-0.20, 0.10),
    "kst3_1780": (0.08, 0.05),
    "kst4_2045": (0.05, -0.05),
    "kst0_1430": (0.6, 0.3),
    "kst0_700": (0.3, 0.1),
    "nr": (0.3, -0.2),
    "zc": (0.25, 0.135),
}

#: initial step sizes of the coefficients (≈ their errors with ~2000 decays; MIGRAD builds its
#: first covariance estimate from them)
STEPS: dict[str, float] = {"lass": 0.2, "lass_nr": 0.1, "zc": 0.05}

_MAP_FILES = {
    "run1": {"efficiency": "eff_run1.npz", "comb": "bkg_comb.npz", "nr": "bkg_nr.npz"},
    "run2": {"efficiency": "eff_run2.npz", "comb": "bkg_comb.npz", "nr": "bkg_nr.npz"},
}
_YIELD_VALUES = {
    "run1": {"sig": [950.0, 55.0], "comb": [300.0, 35.0], "nr": [250.0, 50.0]},
    "run2": {"sig": [1050.0, 60.0], "comb": [330.0, 38.0], "nr": [280.0, 55.0]},
}
_NAME = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$")]
_VALUE_SIGMA = Annotated[list[FiniteFloat], Len(2, 2)]


class LassOptions(BuilderOptions):
    """LASS K+π− S-wave: start values and the Gaussian constraints of the K*0(1430) mass and
    width (Eur. Phys. J. C 78 (2018) 1019, Eq. 9)."""

    m: FiniteFloat = Field(1427.0, ge=1200, le=1700, description="mass start value (MeV)")
    w: FiniteFloat = Field(256.0, ge=80, le=600, description="width start value (MeV)")
    a: FiniteFloat = Field(3.1, ge=0.2, le=12, description="scattering length (GeV⁻¹)")
    r: FiniteFloat = Field(7.0, ge=-8, le=25, description="effective range (GeV⁻¹)")
    cutoff: FiniteFloat = Field(1.7, gt=0.6, le=5, description="m(K+π−) cut-off (GeV)")
    m_constraint: _VALUE_SIGMA = Field([1430.0, 50.0], description="[mean, σ] (MeV)")
    w_constraint: _VALUE_SIGMA = Field([270.0, 80.0], description="[mean, σ] (MeV)")

    @model_validator(mode="after")
    def _sigmas(self) -> Self:
        for key in ("m_constraint", "w_constraint"):
            if not getattr(self, key)[1] > 0:
                msg = f"{key} = [mean, sigma] with sigma > 0"
                raise ValueError(msg)
        return self


class MassOptions(BuilderOptions):
    """Masses of the B0 → ηc K+ π− particles (MeV; PDG 2018 by default)."""

    B0: FiniteFloat = Field(5279.63, gt=0, le=10_000, description="B0 mass")
    eta_c: FiniteFloat = Field(2983.9, gt=0, le=10_000, description="ηc mass")
    K_plus: FiniteFloat = Field(493.677, gt=0, le=10_000, alias="K+", description="K+ mass")
    pi_minus: FiniteFloat = Field(139.57061, gt=0, le=10_000, alias="pi-",
                                  description="π− mass")

    @model_validator(mode="after")
    def _open(self) -> Self:
        if not self.B0 > self.eta_c + self.K_plus + self.pi_minus:
            msg = "B0 heavier than eta_c + K+ + pi- (an open decay)"
            raise ValueError(msg)
        return self


class GridOptions(BuilderOptions):
    """Normalisation-grid options of :class:`toyengine.core.dalitz.DalitzModel` (unset: its
    defaults)."""

    n_m: int | None = Field(None, ge=2, le=64, description="rows per knot interval")
    du: FiniteFloat | None = Field(None, ge=0.005, le=0.5, description="row spacing")
    n_t: int | None = Field(None, ge=2, le=64, description="points per angular panel")
    t_panels: int | None = Field(None, ge=1, le=32, description="angular panels")
    norm_n: int | None = Field(None, ge=2, le=64, description="1-D rule points")
    norm_du: FiniteFloat | None = Field(None, ge=0.005, le=0.5, description="1-D rule step")
    spline_dm: FiniteFloat | None = Field(None, ge=1e-4, le=0.1, description="spline step")
    knot_breaks: bool | None = Field(None, description="break rows at line-shape knots")
    coarse_du: FiniteFloat | None = Field(None, ge=0.005, le=0.5, description="coarse rows")


class Zc4100Options(BuilderOptions):
    """Options of the ``zc4100`` builder: the B0 → ηc K+ π− Dalitz models of LHCb,
    Eur. Phys. J. C 78 (2018) 1019 (baseline K+π− resonances, nominal with Zc(4100)−)."""

    builder_name: ClassVar[str] = "zc4100"

    hypothesis: Literal["baseline", "nominal"] = Field(
        "nominal", description="K+π− resonances only, or + Zc(4100)−")
    zc_spin: Literal[0, 1, 2] = Field(1, description="J of the Zc (0+, 1−, 2+)")
    zc_mass: FiniteFloat = Field(4096.0, ge=3000, le=5000, description="Zc mass start (MeV)")
    zc_width: FiniteFloat = Field(152.0, gt=0, le=1000, description="Zc width start (MeV)")
    zc_mass_limits: Pair = Field([3400.0, 4600.0], description="fit range of the Zc mass")
    zc_width_limits: Pair = Field([40.0, 400.0], description="fit range of the Zc width")
    r_kpi: FiniteFloat = Field(4.0, ge=0, le=20, description="BW radius, K+π− (GeV⁻¹)")
    r_etacpi: FiniteFloat = Field(4.0, ge=0, le=20, description="BW radius, ηcπ− (GeV⁻¹)")
    extra: list[Literal["kst3_1780", "kst4_2045"]] = Field(
        default_factory=list, max_length=2, description="additional K+π− resonances")
    swave: Literal["lass", "lass_split", "rbw"] = Field(
        "lass", description="K+π− S-wave: LASS, LASS as two amplitudes, or two RBWs")
    lass: LassOptions = Field(default_factory=LassOptions, description="LASS settings")
    coefficients: Literal["cartesian", "polar"] = Field(
        "cartesian", description="coefficient form: re/im or mag/phase")
    coefficient_values: dict[Literal[tuple(COEFFICIENTS)], _VALUE_SIGMA] = Field(  # type: ignore[valid-type]
        default_factory=dict, description="{component: [re, im]} start values")
    maps: Literal["files", "synthetic"] = Field(
        "files", description=".npz maps or ROOT TH2 (file.root:name) from map_dir, or "
        "the same stand-ins in memory")
    map_dir: str | None = Field(None, min_length=1, description="directory of relative "
                                "map_files (default studies/zc4100)")
    map_files: dict[_NAME, dict[_NAME, Annotated[str, Field(min_length=1)]]] = Field(
        default_factory=lambda: copy.deepcopy(_MAP_FILES), max_length=8,
        description="{run: {efficiency: file, <background>: file}} (merged per run)")
    yields: Literal["fixed", "constrained"] = Field(
        "fixed", description="yields fixed, or Gaussian-constrained")
    yield_values: dict[_NAME, dict[_NAME, _VALUE_SIGMA]] = Field(
        default_factory=lambda: copy.deepcopy(_YIELD_VALUES), max_length=8,
        description="{run: {sig|<background>: [value, σ]}} (merged per run)")
    smearing: Literal["none", "background", "efficiency", "efficiency_correlated"] = Field(
        "none", description="map smearing of random variants")
    smearing_bins: int = Field(10, ge=1, le=1000, description="bins varied (correlated)")
    smearing_radius: int = Field(2, ge=0, le=100, description="interpolation radius (bins)")
    draw_kstar: bool = Field(False, description="draw the fixed K* masses and widths")
    draw_kind: Literal["uniform", "gaussian"] = Field("uniform", description="draw law")
    border_veto: bool = Field(True, description="veto the Dalitz-plot border")
    border_width: FiniteFloat = Field(70.0, ge=0, le=500, description="border veto (MeV)")
    d0_veto: bool = Field(True, description="veto the D̄0 → K+π− band")
    masses: MassOptions = Field(default_factory=MassOptions, description="particle masses")
    grid: GridOptions = Field(default_factory=GridOptions, description="normalisation grid")

    _limits = field_validator("zc_mass_limits", "zc_width_limits")(ordered_pair)

    @model_validator(mode="before")
    @classmethod
    def _merge_runs(cls, data: Any) -> Any:
        """``map_files``/``yield_values`` given in a study are merged run by run into the
        defaults (so a variant can change one run)."""
        if isinstance(data, Mapping):
            data = dict(data)
            for key, default in (("map_files", _MAP_FILES), ("yield_values", _YIELD_VALUES)):
                if isinstance(data.get(key), Mapping):
                    data[key] = {**copy.deepcopy(default), **data[key]}
        return data

    @model_validator(mode="after")
    def _runs(self) -> Self:
        for run, files in self.map_files.items():
            if "efficiency" not in files:
                msg = f"map_files[{run}] with an 'efficiency' entry"
                raise ValueError(msg)
            yv = self.yield_values.get(run)
            if yv is None or "sig" not in yv:
                msg = f"yield_values[{run}] with a 'sig' entry"
                raise ValueError(msg)
            for bkg in files:
                if bkg != "efficiency" and bkg not in yv:
                    msg = f"yield_values[{run}] with an entry for background {bkg!r}"
                    raise ValueError(msg)
        for run, yv in self.yield_values.items():
            for key, (val, sig) in yv.items():
                if not (val >= 0 and sig > 0):
                    msg = f"yield_values[{run}][{key}] = [value >= 0, sigma > 0]"
                    raise ValueError(msg)
        return self


def _load_maps(opts: dict[str, Any]) -> dict[str, dict[str, SDPHistogram]]:
    if opts["maps"] == "synthetic":
        eff = efficiency_maps()
        bkg = background_maps()
        return {run: {"efficiency": eff[run], **bkg} for run in ("run1", "run2")}
    base = Path(opts["map_dir"]) if opts["map_dir"] is not None else STUDY_DIR
    out: dict[str, dict[str, SDPHistogram]] = {}
    cache: dict[tuple[str, str], SDPHistogram] = {}
    for run, files in opts["map_files"].items():
        out[run] = {}
        for key, fname in files.items():
            kind = "efficiency" if key == "efficiency" else "background"
            name, _, hist_key = str(fname).partition(".root:")
            is_root = bool(hist_key) or name.endswith(".root")
            path = Path(name + ".root" if hist_key else name)
            if not path.is_absolute():
                path = base / path
            ck = (f"{path}:{hist_key}", kind)
            if ck not in cache:
                cache[ck] = (SDPHistogram.from_root(path, hist_key, kind) if is_root
                             else SDPHistogram.from_npz(path, kind))
            out[run][key] = cache[ck]
    return out


class Zc4100Model(DalitzModel, ToyModelBase):
    """The Zc(4100)⁻ Dalitz model as a :class:`~toyengine.models.protocol.ToyModel`: the
    fit fractions and data loading of :class:`DalitzModel`, its goodness-of-fit statistic,
    and the Z_c mass and width as scan parameters of the nominal (H1) model."""

    def gof_statistic(self, data: DalitzData, values: np.ndarray) -> float:
        """Adaptive binned χ² with 12 × 12 equally populated SDP bins (Eur. Phys. J. C 78 (2018)
        1019, Sect. 6.4),
        recorded per toy so a goodness-of-fit study gives its toy-based p-value."""
        return float(adaptive_chi2(self, values, data)["chi2"])


def build_zc4100(options: Mapping[str, Any] | None = None,
                 rng: np.random.Generator | None = None) -> Zc4100Model:
    """Build a B0 → ηc K+ π− Dalitz model (LHCb, Eur. Phys. J. C 78 (2018) 1019, Sects. 5–7).

    Parameters
    ----------
    options : mapping
        Options declared (types, ranges, defaults) by :class:`Zc4100Options`:

        ``hypothesis``
            ``"baseline"`` (K+π− resonances only) or ``"nominal"`` (+ Zc(4100)−).
        ``zc_spin`` / ``zc_mass`` / ``zc_width`` / ``zc_mass_limits`` / ``zc_width_limits``
            J of the Zc (0 → 0+, 1 → 1−, 2 → 2+), start/generation mass and width (MeV),
            their fit ranges. Mass and width float.
        ``r_kpi`` / ``r_etacpi``
            Blatt–Weisskopf radius (GeV⁻¹) of K+π− and ηc π− resonances (default 4; the
            systematic variation of Sect. 7 is 3–5).
        ``extra``
            Additional K+π− resonances from ``["kst3_1780", "kst4_2045"]`` (Sect. 7).
        ``swave``
            ``"lass"`` (default: one LASS amplitude, Eq. 9 with both terms, plus a flat NR
            amplitude — "eight amplitudes: seven resonances and one NR term", Sect.
            6.5), ``"lass_split"`` (the LASS resonant and slowly varying terms as two
            amplitudes, Laura++ LASS_BW + LASS_NR, as the "NR term"; a and r are then nearly
            degenerate with the two coefficients) or ``"rbw"`` (the Sect. 7 alternative:
            K*0(1430) and K*0(700) RBWs + flat NR). The paper's text leaves the choice open
            (ours); ``"lass"`` gives a and r uncertainties like the paper's (±1.0, ±2.4).
        ``lass``
            LASS start values ``m``, ``w`` (MeV), ``a``, ``r`` (GeV⁻¹), ``cutoff`` (GeV),
            and the Gaussian constraints ``m_constraint``/``w_constraint`` [mean, σ] (MeV)
            of the K*0(1430) mass and width (Sect. 6.4).
        ``coefficients``
            ``"cartesian"`` (``re_*``/``im_*``) or ``"polar"`` (``mag_*``/``ph_*``).
        ``coefficient_values``
            ``{component: [re, im]}`` overrides of the illustrative start values.
        ``maps`` / ``map_dir`` / ``map_files``
            ``"files"`` reads ``.npz`` maps, or ROOT ``TH2`` histograms named
            ``"file.root:histogram"`` (x = m′, y = θ′, errors from the sum of weights
            squared; needs the ``[root]`` extra, uproot), relative names resolved in
            ``map_dir``, default ``studies/zc4100``; ``"synthetic"`` builds the same
            stand-ins in memory. ``map_files = {run: {"efficiency": f, <background name>: f, ...}}``
            defines the runs and their background components.
        ``yields`` / ``yield_values``
            ``"fixed"`` (Sect. 6) or ``"constrained"`` (Gaussian, Sect. 7);
            ``yield_values = {run: {"sig"|<bkg>: [value, σ]}}``.
        ``smearing`` / ``smearing_bins`` / ``smearing_radius``
            ``"none"``, ``"background"`` (every bin of every background map varied within
            its error), ``"efficiency"`` (every efficiency bin), or
            ``"efficiency_correlated"`` (``smearing_bins`` bins varied, neighbours within
            ``smearing_radius`` by linear interpolation); needs ``rng``.
        ``draw_kstar`` / ``draw_kind``
            Draw the fixed K*0 masses and widths within their PDG uncertainties
            (``"uniform"`` in ±1σ, or ``"gaussian"``); needs ``rng`` (Sect. 7, 100 draws).
        ``border_veto`` / ``border_width`` / ``d0_veto``
            ±70 MeV border veto on/off and width (MeV), D̄0 veto on/off.
        ``masses``
            B0, ηc, K+, π− masses in MeV (PDG 2018 by default; vary ``eta_c`` for the
            ηc-mass systematic).
        ``grid``
            Normalisation-grid options (see :class:`DalitzModel`).
    rng : numpy.random.Generator, optional
        Needed only for smearing and parameter draws.

    Returns
    -------
    DalitzModel
        With parameters: coefficients, ``m_<comp>``/``w_<comp>`` (MeV; K* fixed, LASS
        constrained, Zc free as ``m_zc``/``w_zc``), ``a_lass``/``r_lass``, and yields
        ``n_sig_<run>``, ``n_<bkg>_<run>``.
    """
    opts = Zc4100Options.parse(options).as_dict()
    hyp = opts["hypothesis"]
    if (opts["smearing"] != "none" or opts["draw_kstar"]) and rng is None:
        msg = "zc4100 model: smearing and draw_kstar need an rng (numpy.random.Generator)"
        raise ModelError(msg)
    ms = opts["masses"]
    kin = DalitzKinematics(ms["B0"] / 1e3, ms["K+"] / 1e3, ms["pi-"] / 1e3, ms["eta_c"] / 1e3)
    vetoes = Vetoes(d0=(1.845, 1.885) if opts["d0_veto"] else None,
                    border=float(opts["border_width"]) / 1e3 if opts["border_veto"] else 0.0)

    params: list[Parameter] = []
    comps: list[Component] = []
    coef_over = dict(opts["coefficient_values"])
    polar = opts["coefficients"] == "polar"
    r_kpi = float(opts["r_kpi"])

    def coef(name: str, ref: bool = False) -> None:
        re, im = coef_over.get(name, COEFFICIENTS.get(name, (0.1, 0.0)))
        re, im = float(re), float(im)
        step = STEPS.get(name, 0.06)  # ≈ the statistical error with ~2000 decays
        if polar:
            mag, ph = math.hypot(re, im), math.atan2(im, re)
            params.append(Parameter(f"mag_{name}", mag, (0.0, math.inf), fixed=ref, step=step,
                                    label=f"|c({name})|"))
            params.append(Parameter(f"ph_{name}", ph, (-2 * math.pi, 2 * math.pi), fixed=ref,
                                    step=step / max(mag, 0.05), unit="rad",
                                    label=f"arg c({name})"))
        else:
            params.append(Parameter(f"re_{name}", re, fixed=ref, step=step,
                                    label=f"Re c({name})"))
            params.append(Parameter(f"im_{name}", im, fixed=ref, step=step,
                                    label=f"Im c({name})"))

    def kstar(name: str, ref: bool = False) -> None:
        t = KSTAR_TABLE[name]
        m, w = t["m"], t["w"]
        if opts["draw_kstar"]:
            assert rng is not None
            if opts["draw_kind"] == "uniform":
                m = m + t["dm"] * rng.uniform(-1.0, 1.0)
                w = w + t["dw"] * rng.uniform(-1.0, 1.0)
            else:
                m = m + t["dm"] * rng.standard_normal()
                w = max(w + t["dw"] * rng.standard_normal(), 0.1 * t["w"])
        params.append(Parameter(f"m_{name}", m, fixed=True, unit="MeV", label=f"m({name})"))
        params.append(Parameter(f"w_{name}", w, (0.0, math.inf), fixed=True, unit="MeV",
                                label=f"Γ({name})"))
        coef(name, ref)
        comps.append(Component(name, Lineshape("rbw", "kpi", int(t["spin"]), r_kpi),
                               (f"m_{name}", f"w_{name}")))

    kstar("kst892", ref=True)
    kstar("kst1410")
    sw = opts["swave"]
    _swave(opts, params, comps, coef, kstar)
    kstar("kst2_1430")
    kstar("kst1680")
    kstar("kst0_1950")
    for e in opts["extra"]:
        kstar(e)
    if sw in ("lass", "rbw"):
        coef("nr")
        comps.append(Component("nr", Lineshape("flat", "kpi", 0, r_kpi)))
    if hyp == "nominal":
        _zc(opts, params, comps, coef)

    runs = _runs(opts, rng, params)

    model = Zc4100Model(kin, comps, ParameterSet(tuple(params)), runs, vetoes, polar=polar,
                        grid_options={k: v for k, v in opts["grid"].items() if v is not None},
                        name=f"zc4100[{hyp}]")
    model.options = opts  # type: ignore[attr-defined]
    # the Z_c mass and width exist only with a Z_c: the multi-start covers their range
    model.scan_parameters = ("m_zc", "w_zc") if hyp == "nominal" else ()
    return model


def _swave(opts: dict[str, Any], params: list[Parameter], comps: list[Component],
           coef: Callable[..., None], kstar: Callable[..., None]) -> None:
    """The K+π− S-wave of :func:`build_zc4100` (option ``swave``): its parameters, Gaussian
    constraints, coefficients and components, appended to ``params`` and ``comps``."""
    lass = opts["lass"]
    sw = opts["swave"]
    r_kpi = float(opts["r_kpi"])
    if sw in ("lass_split", "lass"):
        mc, wc = lass["m_constraint"], lass["w_constraint"]
        params += [
            Parameter("m_lass", float(lass["m"]), (1200.0, 1700.0),
                      constraint=Constraint(float(mc[0]), float(mc[1])), step=15.0, unit="MeV",
                      label="m(LASS)"),
            Parameter("w_lass", float(lass["w"]), (80.0, 600.0),
                      constraint=Constraint(float(wc[0]), float(wc[1])), step=30.0, unit="MeV",
                      label="Γ(LASS)"),
            Parameter("a_lass", float(lass["a"]), (0.2, 12.0), step=2.0, unit="GeV⁻¹",
                      label="a(LASS)"),
            Parameter("r_lass", float(lass["r"]), (-8.0, 25.0), step=4.0, unit="GeV⁻¹",
                      label="r(LASS)"),
        ]
        cut = float(lass["cutoff"])
        if sw == "lass_split":
            coef("lass")
            comps.append(Component("lass", Lineshape("lass_bw", "kpi", 0, r_kpi, cut),
                                   ("m_lass", "w_lass", "a_lass", "r_lass")))
            coef("lass_nr")
            comps.append(Component("lass_nr", Lineshape("lass_nr", "kpi", 0, r_kpi, cut),
                                   ("a_lass", "r_lass")))
        else:
            coef("lass")
            comps.append(Component("lass", Lineshape("lass", "kpi", 0, r_kpi, cut),
                                   ("m_lass", "w_lass", "a_lass", "r_lass")))
    else:  # rbw alternative S-wave
        t = KSTAR_TABLE["kst0_1430"]
        params += [
            Parameter("m_kst0_1430", t["m"], (1200.0, 1700.0),
                      constraint=Constraint(t["m"], t["dm"]), step=10.0, unit="MeV",
                      label="m(K*0(1430))"),
            Parameter("w_kst0_1430", t["w"], (80.0, 600.0),
                      constraint=Constraint(t["w"], t["dw"]), step=15.0, unit="MeV",
                      label="Γ(K*0(1430))"),
        ]
        coef("kst0_1430")
        comps.append(Component("kst0_1430", Lineshape("rbw", "kpi", 0, r_kpi),
                               ("m_kst0_1430", "w_kst0_1430")))
        kstar("kst0_700")


def _zc(opts: dict[str, Any], params: list[Parameter], comps: list[Component],
        coef: Callable[..., None]) -> None:
    """The Zc(4100)− of :func:`build_zc4100`'s ``nominal`` hypothesis: its mass, width,
    coefficients and component, appended to ``params`` and ``comps``."""
    zc_spin = opts["zc_spin"]
    r_ecpi = float(opts["r_etacpi"])
    mlo, mhi = (float(v) for v in opts["zc_mass_limits"])
    wlo, whi = (float(v) for v in opts["zc_width_limits"])
    params += [
        Parameter("m_zc", float(opts["zc_mass"]), (mlo, mhi), step=20.0, unit="MeV",
                  label="m(Zc)"),
        Parameter("w_zc", float(opts["zc_width"]), (wlo, whi), step=50.0, unit="MeV",
                  label="Γ(Zc)"),
    ]
    coef("zc")
    comps.append(Component("zc", Lineshape("rbw", "etacpi", zc_spin, r_ecpi),
                           ("m_zc", "w_zc")))


def _runs(opts: dict[str, Any], rng: np.random.Generator | None,
          params: list[Parameter]) -> list[RunSpec]:
    """The runs of :func:`build_zc4100`: their efficiency and background maps (smeared once
    each where ``smearing`` asks), and their yield parameters, appended to ``params``."""
    # maps, runs and yields
    maps = _load_maps(opts)
    smear = opts["smearing"]
    runs: list[RunSpec] = []
    smeared_cache: dict[int, SDPHistogram] = {}

    def varied(h: SDPHistogram, kind: str) -> SDPHistogram:
        """Smear each distinct map once (shared background shapes stay shared)."""
        want = (smear == "background" and kind == "background") or (
            smear.startswith("efficiency") and kind == "efficiency")
        if not want:
            return h
        if id(h) not in smeared_cache:
            assert rng is not None
            mode = "correlated" if smear == "efficiency_correlated" else "independent"
            smeared_cache[id(h)] = h.smeared(rng, mode, n_bins=int(opts["smearing_bins"]),
                                             radius=int(opts["smearing_radius"]))
        return smeared_cache[id(h)]

    yv = opts["yield_values"]
    for run, rmaps in maps.items():
        eff = varied(rmaps["efficiency"], "efficiency")
        bkgs = []
        for bname, bh in rmaps.items():
            if bname == "efficiency":
                continue
            bkgs.append((bname, varied(bh, "background"), f"n_{bname}_{run}"))
        for key in ["sig", *(b[0] for b in bkgs)]:
            val, sig = (float(v) for v in yv[run][key])
            fixed = opts["yields"] == "fixed"
            params.append(Parameter(f"n_{key}_{run}", val, (0.0, math.inf), fixed=fixed,
                                    constraint=None if fixed else Constraint(val, sig), step=sig,
                                    label=f"N_{key}({run})"))
        runs.append(RunSpec(run, eff, f"n_sig_{run}", tuple(bkgs)))
    return runs
