"""Builder of the B0 → ηc K+ π− Dalitz models of seed 000 (baseline and Zc(4100)− nominal).

Component list and values: PHYSICS.md §1.6 (working assumption for the unpublished Table 3)
and §7.1. Complex coefficients are illustrative ([A]; Table 4 is not available): K*(892)0
dominant, and the Zc(4100) coefficient chosen so that ~2000 signal decays give an expected
Δ(−2 ln L) near the paper's 41 (see ``studies/zc4100/README.md``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core.dalitz.gof import adaptive_chi2
from ..core.dalitz.kinematics import DalitzKinematics, Vetoes
from ..core.dalitz.lineshapes import Lineshape
from ..core.dalitz.maps import SDPHistogram
from ..core.dalitz.model import Component, DalitzData, DalitzModel, RunSpec
from ..core.params import Constraint, Parameter, ParameterSet
from ..errors import ModelError
from .zc4100_maps import background_maps, efficiency_maps

__all__ = ["DEFAULTS", "KSTAR_TABLE", "STUDY_DIR", "Zc4100Model", "build_zc4100"]

#: default location of the shipped maps and reference data (studies/zc4100 of the repo)
STUDY_DIR = Path(__file__).resolve().parents[2] / "studies" / "zc4100"

#: K+π− resonances: spin, mass ± σ, width ± σ in MeV (PDG 2018; PHYSICS.md §1.6)
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

#: illustrative complex coefficients (re, im) [A]; the reference K*(892) is 1 + 0i
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

DEFAULTS: dict[str, Any] = {
    "hypothesis": "nominal",
    "zc_spin": 1,
    "zc_mass": 4096.0,
    "zc_width": 152.0,
    "zc_mass_limits": [3400.0, 4600.0],
    "zc_width_limits": [40.0, 400.0],
    "r_kpi": 4.0,
    "r_etacpi": 4.0,
    "extra": [],
    "swave": "lass",
    "lass": {"m": 1427.0, "w": 256.0, "a": 3.1, "r": 7.0, "cutoff": 1.7,
             "m_constraint": [1430.0, 50.0], "w_constraint": [270.0, 80.0]},
    "coefficients": "cartesian",
    "coefficient_values": {},
    "maps": "files",
    "map_dir": None,
    "map_files": {
        "run1": {"efficiency": "eff_run1.npz", "comb": "bkg_comb.npz", "nr": "bkg_nr.npz"},
        "run2": {"efficiency": "eff_run2.npz", "comb": "bkg_comb.npz", "nr": "bkg_nr.npz"},
    },
    "yields": "fixed",
    "yield_values": {
        "run1": {"sig": [950.0, 55.0], "comb": [300.0, 35.0], "nr": [250.0, 50.0]},
        "run2": {"sig": [1050.0, 60.0], "comb": [330.0, 38.0], "nr": [280.0, 55.0]},
    },
    "smearing": "none",
    "smearing_bins": 10,
    "smearing_radius": 2,
    "draw_kstar": False,
    "draw_kind": "uniform",
    "border_veto": True,
    "border_width": 70.0,
    "d0_veto": True,
    "masses": {"B0": 5279.63, "eta_c": 2983.9, "K+": 493.677, "pi-": 139.57061},
    "grid": {},
}

_SMEARING = ("none", "background", "efficiency", "efficiency_correlated")
_EXTRA = ("kst3_1780", "kst4_2045")


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if k not in out:
            msg = f"zc4100 model: unknown option {k!r}; known: {sorted(base)}"
            raise ModelError(msg)
        if isinstance(out[k], dict) and isinstance(v, Mapping) and k not in ("coefficient_values",):
            merged = dict(out[k])
            merged.update(v)
            out[k] = merged
        else:
            out[k] = copy.deepcopy(v)
    return out


def _load_maps(opts: dict[str, Any]) -> dict[str, dict[str, SDPHistogram]]:
    if opts["maps"] == "synthetic":
        eff = efficiency_maps()
        bkg = background_maps()
        return {run: {"efficiency": eff[run], **bkg} for run in ("run1", "run2")}
    if opts["maps"] != "files":
        msg = f"zc4100 model: option maps must be 'files' or 'synthetic', got {opts['maps']!r}"
        raise ModelError(msg)
    base = Path(opts["map_dir"]) if opts["map_dir"] is not None else STUDY_DIR
    out: dict[str, dict[str, SDPHistogram]] = {}
    cache: dict[tuple[str, str], SDPHistogram] = {}
    for run, files in opts["map_files"].items():
        if "efficiency" not in files:
            msg = f"zc4100 model: map_files[{run!r}] needs an 'efficiency' entry"
            raise ModelError(msg)
        out[run] = {}
        for key, fname in files.items():
            kind = "efficiency" if key == "efficiency" else "background"
            path = Path(fname)
            if not path.is_absolute():
                path = base / path
            ck = (str(path), kind)
            if ck not in cache:
                cache[ck] = SDPHistogram.from_npz(path, kind)
            out[run][key] = cache[ck]
    return out


class Zc4100Model(DalitzModel):
    """The Zc(4100)⁻ Dalitz model with its goodness-of-fit statistic."""

    def gof_statistic(self, data: DalitzData, values: np.ndarray) -> float:
        """Adaptive binned χ² with 12 × 12 equally populated SDP bins (seed 000 §6.4),
        recorded per toy so a goodness-of-fit study gives its toy-based p-value."""
        return float(adaptive_chi2(self, values, data)["chi2"])


def build_zc4100(options: Mapping[str, Any] | None = None,
                 rng: np.random.Generator | None = None) -> DalitzModel:
    """Build a B0 → ηc K+ π− Dalitz model (seed 000 §5–7).

    Parameters
    ----------
    options : mapping
        Overrides of :data:`DEFAULTS` (unknown keys are an error):

        ``hypothesis``
            ``"baseline"`` (K+π− resonances only) or ``"nominal"`` (+ Zc(4100)−).
        ``zc_spin`` / ``zc_mass`` / ``zc_width`` / ``zc_mass_limits`` / ``zc_width_limits``
            J of the Zc (0 → 0+, 1 → 1−, 2 → 2+), start/generation mass and width (MeV),
            their fit ranges. Mass and width float.
        ``r_kpi`` / ``r_etacpi``
            Blatt–Weisskopf radius (GeV⁻¹) of K+π− and ηc π− resonances (default 4; the
            §7 variation is 3–5).
        ``extra``
            Additional K+π− resonances from ``["kst3_1780", "kst4_2045"]`` (§7).
        ``swave``
            ``"lass"`` (default: one LASS amplitude, Eq. 9 with both terms, plus a flat NR
            amplitude — "eight amplitudes: seven resonances and one NR term", seed 000
            §6.5), ``"lass_split"`` (the LASS resonant and slowly varying terms as two
            amplitudes, Laura++ LASS_BW + LASS_NR, as the "NR term"; a and r are then nearly
            degenerate with the two coefficients) or ``"rbw"`` (the §7 alternative:
            K*0(1430) and K*0(700) RBWs + flat NR). PHYSICS.md §1.6 leaves the choice open
            ([A]); ``"lass"`` gives a and r uncertainties like the paper's (±1.0, ±2.4).
        ``lass``
            LASS start values ``m``, ``w`` (MeV), ``a``, ``r`` (GeV⁻¹), ``cutoff`` (GeV),
            and the Gaussian constraints ``m_constraint``/``w_constraint`` [mean, σ] (MeV)
            of the K*0(1430) mass and width (seed 000 §6.4).
        ``coefficients``
            ``"cartesian"`` (``re_*``/``im_*``) or ``"polar"`` (``mag_*``/``ph_*``).
        ``coefficient_values``
            ``{component: [re, im]}`` overrides of the illustrative start values.
        ``maps`` / ``map_dir`` / ``map_files``
            ``"files"`` reads ``.npz`` maps (relative names resolved in ``map_dir``,
            default ``studies/zc4100``); ``"synthetic"`` builds the same stand-ins in
            memory. ``map_files = {run: {"efficiency": f, <background name>: f, ...}}``
            defines the runs and their background components.
        ``yields`` / ``yield_values``
            ``"fixed"`` (seed 000 §6) or ``"constrained"`` (Gaussian, §7);
            ``yield_values = {run: {"sig"|<bkg>: [value, σ]}}``.
        ``smearing`` / ``smearing_bins`` / ``smearing_radius``
            ``"none"``, ``"background"`` (every bin of every background map varied within
            its error), ``"efficiency"`` (every efficiency bin), or
            ``"efficiency_correlated"`` (``smearing_bins`` bins varied, neighbours within
            ``smearing_radius`` by linear interpolation); needs ``rng``.
        ``draw_kstar`` / ``draw_kind``
            Draw the fixed K*0 masses and widths within their PDG uncertainties
            (``"uniform"`` in ±1σ, or ``"gaussian"``); needs ``rng`` (seed 000 §7, 100 draws).
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
    opts = _merge(DEFAULTS, options or {})
    hyp = opts["hypothesis"]
    if hyp not in ("baseline", "nominal"):
        msg = f"zc4100 model: hypothesis must be 'baseline' or 'nominal', got {hyp!r}"
        raise ModelError(msg)
    if opts["smearing"] not in _SMEARING:
        msg = f"zc4100 model: smearing must be one of {_SMEARING}, got {opts['smearing']!r}"
        raise ModelError(msg)
    if (opts["smearing"] != "none" or opts["draw_kstar"]) and rng is None:
        msg = "zc4100 model: smearing and draw_kstar need an rng (numpy.random.Generator)"
        raise ModelError(msg)
    for e in opts["extra"]:
        if e not in _EXTRA:
            msg = f"zc4100 model: extra resonance {e!r} unknown; known: {list(_EXTRA)}"
            raise ModelError(msg)
    if opts["swave"] not in ("lass_split", "lass", "rbw"):
        msg = f"zc4100 model: swave must be 'lass_split', 'lass' or 'rbw', got {opts['swave']!r}"
        raise ModelError(msg)
    if opts["coefficients"] not in ("cartesian", "polar"):
        msg = ("zc4100 model: coefficients must be 'cartesian' or 'polar', got "
               f"{opts['coefficients']!r}")
        raise ModelError(msg)
    if opts["yields"] not in ("fixed", "constrained"):
        msg = f"zc4100 model: yields must be 'fixed' or 'constrained', got {opts['yields']!r}"
        raise ModelError(msg)
    zc_spin = int(opts["zc_spin"])
    if zc_spin not in (0, 1, 2):
        msg = f"zc4100 model: zc_spin must be 0, 1 or 2, got {opts['zc_spin']!r}"
        raise ModelError(msg)
    for key in ("r_kpi", "r_etacpi"):
        r = float(opts[key])
        if not (math.isfinite(r) and 0 <= r <= 20):
            msg = f"zc4100 model: {key} = {r} GeV^-1 must be in [0, 20]"
            raise ModelError(msg)
    ms = opts["masses"]
    kin = DalitzKinematics(ms["B0"] / 1e3, ms["K+"] / 1e3, ms["pi-"] / 1e3, ms["eta_c"] / 1e3)
    vetoes = Vetoes(d0=(1.845, 1.885) if opts["d0_veto"] else None,
                    border=float(opts["border_width"]) / 1e3 if opts["border_veto"] else 0.0)

    params: list[Parameter] = []
    comps: list[Component] = []
    coef_over = dict(opts["coefficient_values"])
    polar = opts["coefficients"] == "polar"
    r_kpi, r_ecpi = float(opts["r_kpi"]), float(opts["r_etacpi"])

    def coef(name: str, ref: bool = False) -> None:
        re, im = coef_over.get(name, COEFFICIENTS.get(name, (0.1, 0.0)))
        re, im = float(re), float(im)
        step = STEPS.get(name, 0.06)  # ≈ the statistical error with ~2000 decays
        if polar:
            mag, ph = math.hypot(re, im), math.atan2(im, re)
            params.append(Parameter(f"mag_{name}", mag, (0.0, math.inf), fixed=ref, step=step))
            params.append(Parameter(f"ph_{name}", ph, (-2 * math.pi, 2 * math.pi), fixed=ref,
                                    step=step / max(mag, 0.05)))
        else:
            params.append(Parameter(f"re_{name}", re, fixed=ref, step=step))
            params.append(Parameter(f"im_{name}", im, fixed=ref, step=step))

    def kstar(name: str, ref: bool = False) -> None:
        t = KSTAR_TABLE[name]
        m, w = t["m"], t["w"]
        if opts["draw_kstar"]:
            assert rng is not None
            if opts["draw_kind"] == "uniform":
                m = m + t["dm"] * rng.uniform(-1.0, 1.0)
                w = w + t["dw"] * rng.uniform(-1.0, 1.0)
            elif opts["draw_kind"] == "gaussian":
                m = m + t["dm"] * rng.standard_normal()
                w = max(w + t["dw"] * rng.standard_normal(), 0.1 * t["w"])
            else:
                msg = ("zc4100 model: draw_kind must be 'uniform' or 'gaussian', got "
                       f"{opts['draw_kind']!r}")
                raise ModelError(msg)
        params.append(Parameter(f"m_{name}", m, fixed=True))
        params.append(Parameter(f"w_{name}", w, (0.0, math.inf), fixed=True))
        coef(name, ref)
        comps.append(Component(name, Lineshape("rbw", "kpi", int(t["spin"]), r_kpi),
                               (f"m_{name}", f"w_{name}")))

    kstar("kst892", ref=True)
    kstar("kst1410")
    lass = opts["lass"]
    sw = opts["swave"]
    if sw in ("lass_split", "lass"):
        mc, wc = lass["m_constraint"], lass["w_constraint"]
        params += [
            Parameter("m_lass", float(lass["m"]), (1200.0, 1700.0),
                      constraint=Constraint(float(mc[0]), float(mc[1])), step=15.0),
            Parameter("w_lass", float(lass["w"]), (80.0, 600.0),
                      constraint=Constraint(float(wc[0]), float(wc[1])), step=30.0),
            Parameter("a_lass", float(lass["a"]), (0.2, 12.0), step=2.0),
            Parameter("r_lass", float(lass["r"]), (-8.0, 25.0), step=4.0),
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
                      constraint=Constraint(t["m"], t["dm"]), step=10.0),
            Parameter("w_kst0_1430", t["w"], (80.0, 600.0),
                      constraint=Constraint(t["w"], t["dw"]), step=15.0),
        ]
        coef("kst0_1430")
        comps.append(Component("kst0_1430", Lineshape("rbw", "kpi", 0, r_kpi),
                               ("m_kst0_1430", "w_kst0_1430")))
        kstar("kst0_700")
    kstar("kst2_1430")
    kstar("kst1680")
    kstar("kst0_1950")
    for e in opts["extra"]:
        kstar(e)
    if sw in ("lass", "rbw"):
        coef("nr")
        comps.append(Component("nr", Lineshape("flat", "kpi", 0, r_kpi)))
    if hyp == "nominal":
        mlo, mhi = (float(v) for v in opts["zc_mass_limits"])
        wlo, whi = (float(v) for v in opts["zc_width_limits"])
        params += [
            Parameter("m_zc", float(opts["zc_mass"]), (mlo, mhi), step=20.0),
            Parameter("w_zc", float(opts["zc_width"]), (wlo, whi), step=50.0),
        ]
        coef("zc")
        comps.append(Component("zc", Lineshape("rbw", "etacpi", zc_spin, r_ecpi),
                               ("m_zc", "w_zc")))

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
        if run not in yv or "sig" not in yv[run]:
            msg = f"zc4100 model: yield_values lacks run {run!r} or its 'sig' entry"
            raise ModelError(msg)
        eff = varied(rmaps["efficiency"], "efficiency")
        bkgs = []
        for bname, bh in rmaps.items():
            if bname == "efficiency":
                continue
            if bname not in yv[run]:
                msg = f"zc4100 model: yield_values[{run!r}] lacks background {bname!r}"
                raise ModelError(msg)
            bkgs.append((bname, varied(bh, "background"), f"n_{bname}_{run}"))
        for key in ["sig", *(b[0] for b in bkgs)]:
            val, sig = (float(v) for v in yv[run][key])
            if not (val >= 0 and sig > 0):
                msg = (f"zc4100 model: yield_values[{run!r}][{key!r}] = {yv[run][key]} "
                       "needs value >= 0, sigma > 0")
                raise ModelError(msg)
            fixed = opts["yields"] == "fixed"
            params.append(Parameter(f"n_{key}_{run}", val, (0.0, math.inf), fixed=fixed,
                                    constraint=None if fixed else Constraint(val, sig), step=sig))
        runs.append(RunSpec(run, eff, f"n_sig_{run}", tuple(bkgs)))

    model = Zc4100Model(kin, comps, ParameterSet(tuple(params)), runs, vetoes, polar=polar,
                        grid_options=dict(opts["grid"]), name=f"zc4100[{hyp}]")
    model.options = opts  # type: ignore[attr-defined]
    return model
