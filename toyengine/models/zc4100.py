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

The builder writes these models as declarations of the generic ``dalitz`` builder
(:func:`zc4100_declaration`, :mod:`toyengine.models.dalitz`) and builds them with it: one
Dalitz code path.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from annotated_types import Len
from pydantic import Field, field_validator, model_validator

from ..errors import ModelError, OptionError
from .dalitz import DeclaredDalitzModel, GridDecl, build_dalitz
from .options import BuilderOptions, FiniteFloat, Pair, ordered_pair
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


class Zc4100Options(BuilderOptions):
    """Options of the ``zc4100`` builder: the B0 → ηc K+ π− Dalitz models of LHCb,
    Eur. Phys. J. C 78 (2018) 1019 (baseline K+π− resonances, nominal with Zc(4100)−)."""

    builder_name: ClassVar[str] = "zc4100"
    build_every_variant: ClassVar[bool] = False  # a normalisation grid per model

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
    grid: GridDecl = Field(default_factory=GridDecl, description="normalisation grid")

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


class Zc4100Model(DeclaredDalitzModel):
    """The Zc(4100)⁻ Dalitz model as a :class:`~toyengine.models.protocol.ToyModel`: the
    declared model of :mod:`toyengine.models.dalitz` (fit fractions, data loading, its
    goodness-of-fit statistic), with the Z_c mass and width as scan parameters of the
    nominal (H1) model."""


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
    preloaded = None
    if opts["maps"] == "synthetic":
        eff = efficiency_maps()
        preloaded = {f"synthetic:eff_{run}": eff[run] for run in ("run1", "run2")}
        preloaded.update({f"synthetic:bkg_{b}": h for b, h in background_maps().items()})
    try:
        model = build_dalitz(zc4100_declaration(opts), rng, name=f"zc4100[{hyp}]",
                             base_dir=STUDY_DIR, preloaded=preloaded, cls=Zc4100Model)
    except OptionError as exc:  # a check of the declaration, in zc4100's terms
        msg = f"zc4100 model: {exc.expected}"
        raise ModelError(msg) from None
    model.options = opts  # type: ignore[attr-defined]
    return model


def zc4100_declaration(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The ``dalitz`` declaration of a B0 → ηc K+ π− model: parsed :class:`Zc4100Options`
    (``Zc4100Options.parse(options).as_dict()``) as parent, daughters, isobars and runs of
    :class:`~toyengine.models.dalitz.DalitzOptions` (Eur. Phys. J. C 78 (2018) 1019,
    Sects. 5–7)."""
    hyp = opts["hypothesis"]
    ms = opts["masses"]
    r_kpi, r_ecpi = float(opts["r_kpi"]), float(opts["r_etacpi"])
    coef_over = dict(opts["coefficient_values"])
    kpi, ecpi = ["K+", "pi-"], ["pi-", "eta_c"]
    isobars: list[dict[str, Any]] = []

    def coef(name: str) -> dict[str, Any]:
        re, im = coef_over.get(name, COEFFICIENTS.get(name, (0.1, 0.0)))
        return {"coefficient": [float(re), float(im)],
                "step": STEPS.get(name, 0.06)}  # ≈ the statistical error with ~2000 decays

    def kstar(name: str, ref: bool = False) -> None:
        t = KSTAR_TABLE[name]
        isobars.append({
            "name": name, "pair": kpi, "lineshape": "rbw", "spin": int(t["spin"]),
            "radius": r_kpi, "mass": {"value": t["m"], "draw": t["dm"]},
            "width": {"value": t["w"], "draw": t["dw"]}, "reference": ref, **coef(name)})

    kstar("kst892", ref=True)
    kstar("kst1410")
    lass = opts["lass"]
    sw = opts["swave"]
    if sw in ("lass_split", "lass"):
        mc, wc = lass["m_constraint"], lass["w_constraint"]
        lp = {
            "mass": {"value": float(lass["m"]), "fixed": False, "limits": [1200.0, 1700.0],
                     "constraint": [float(mc[0]), float(mc[1])], "step": 15.0,
                     "label": "m(LASS)"},
            "width": {"value": float(lass["w"]), "fixed": False, "limits": [80.0, 600.0],
                      "constraint": [float(wc[0]), float(wc[1])], "step": 30.0,
                      "label": "Γ(LASS)"},
            "a": {"value": float(lass["a"]), "fixed": False, "limits": [0.2, 12.0],
                  "step": 2.0, "label": "a(LASS)"},
            "r": {"value": float(lass["r"]), "fixed": False, "limits": [-8.0, 25.0],
                  "step": 4.0, "label": "r(LASS)"},
        }
        cut = float(lass["cutoff"])
        kind = "lass_bw" if sw == "lass_split" else "lass"
        isobars.append({"name": "lass", "pair": kpi, "lineshape": kind, "radius": r_kpi,
                        "cutoff": cut, **lp, **coef("lass")})
        if sw == "lass_split":
            isobars.append({"name": "lass_nr", "pair": kpi, "lineshape": "lass_nr",
                            "radius": r_kpi, "cutoff": cut, "a": "a_lass", "r": "r_lass",
                            **coef("lass_nr")})
    else:  # rbw alternative S-wave
        t = KSTAR_TABLE["kst0_1430"]
        isobars.append({
            "name": "kst0_1430", "pair": kpi, "lineshape": "rbw", "radius": r_kpi,
            "mass": {"value": t["m"], "fixed": False, "limits": [1200.0, 1700.0],
                     "constraint": [t["m"], t["dm"]], "step": 10.0, "label": "m(K*0(1430))"},
            "width": {"value": t["w"], "fixed": False, "limits": [80.0, 600.0],
                      "constraint": [t["w"], t["dw"]], "step": 15.0, "label": "Γ(K*0(1430))"},
            **coef("kst0_1430")})
        kstar("kst0_700")
    kstar("kst2_1430")
    kstar("kst1680")
    kstar("kst0_1950")
    for e in opts["extra"]:
        kstar(e)
    if sw in ("lass", "rbw"):
        isobars.append({"name": "nr", "pair": kpi, "lineshape": "flat", "radius": r_kpi,
                        **coef("nr")})
    if hyp == "nominal":
        isobars.append({
            "name": "zc", "pair": ecpi, "lineshape": "rbw", "spin": int(opts["zc_spin"]),
            "radius": r_ecpi,
            "mass": {"value": float(opts["zc_mass"]), "fixed": False,
                     "limits": [float(v) for v in opts["zc_mass_limits"]], "step": 20.0,
                     "label": "m(Zc)"},
            "width": {"value": float(opts["zc_width"]), "fixed": False,
                      "limits": [float(v) for v in opts["zc_width_limits"]], "step": 50.0,
                      "label": "Γ(Zc)"},
            **coef("zc")})
    if opts["maps"] == "synthetic":
        files = {run: {"efficiency": f"synthetic:eff_{run}", "comb": "synthetic:bkg_comb",
                       "nr": "synthetic:bkg_nr"} for run in ("run1", "run2")}
    else:
        files = opts["map_files"]
    runs = {}
    for run, fs in files.items():
        runs[run] = {"efficiency": fs["efficiency"],
                     "backgrounds": {b: f for b, f in fs.items() if b != "efficiency"},
                     "yields": {k: list(v) for k, v in opts["yield_values"][run].items()
                                if k == "sig" or k in fs}}
    grid = {k: v for k, v in opts["grid"].items() if v is not None}
    return {
        "parent": {"name": "B0", "mass": ms["B0"]},
        "daughters": [{"name": "K+", "mass": ms["K+"]}, {"name": "pi-", "mass": ms["pi-"]},
                      {"name": "eta_c", "mass": ms["eta_c"]}],
        "isobars": isobars,
        "runs": runs,
        "coefficients": opts["coefficients"],
        "yields": opts["yields"],
        **({"map_dir": opts["map_dir"]} if opts["map_dir"] is not None else {}),
        "vetoes": {"border": float(opts["border_width"]) if opts["border_veto"] else 0.0,
                   **({"interval": [1845.0, 1885.0]} if opts["d0_veto"] else {})},
        "smearing": opts["smearing"],
        "smearing_bins": opts["smearing_bins"],
        "smearing_radius": opts["smearing_radius"],
        "draw": opts["draw_kind"] if opts["draw_kstar"] else "none",
        # the Z_c mass and width exist only with a Z_c: the multi-start covers their range
        "scan": ["m_zc", "w_zc"] if hyp == "nominal" else [],
        "grid": grid,
    }
