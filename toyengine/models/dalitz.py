"""``dalitz``: a three-body Dalitz-plot isobar model declared in the study file.

The builder composes :class:`toyengine.core.dalitz.DalitzModel` from the core's pieces
(kinematics, lineshapes, SDP maps); it re-implements none of them. The formalism is that of
LHCb, Eur. Phys. J. C 78 (2018) 1019, Sects. 5–6: ``A = Σ_j c_j F_j`` (Eq. 4) with
unit-normalised components (Eq. 5), efficiency and background maps on the square Dalitz plot
(Eqs. 15–16), one subsample per run and the extended likelihood of Eq. 14. Resonances,
lineshapes and maps are declared per analysis as in Laura++ (J. Back et al., Comput. Phys.
Commun. 231 (2018) 198).

Example (B+ → K+ π− π+ with K*(892)0 and ρ(770)0, flat efficiency)::

    builder: dalitz
    options:
      parent: {name: B+, mass: 5279.34}
      daughters: [{name: K+, mass: 493.677}, {name: pi-, mass: 139.57},
                  {name: pi+, mass: 139.57}]
      isobars:
        - {name: kst892, pair: [K+, pi-], lineshape: rbw, spin: 1,
           mass: {value: 895.55}, width: {value: 47.3}, coefficient: [1, 0],
           reference: true}
        - {name: rho770, pair: [pi-, pi+], lineshape: rbw, spin: 1,
           mass: {value: 775.26}, width: {value: 149.1}, coefficient: [0.8, 0.3]}
      runs:
        all: {efficiency: flat, yields: {sig: [2000, 45]}}

Daughter order matters: the square Dalitz plot (and its maps) is built on the pair of the
first two daughters, and the data variables ``m2_kpi`` and ``m2_etacpi`` of the core are
``m²(d1 d2)`` and ``m²(d2 d3)``. The helicity angle of a pair (i, j) with bachelor k is the
angle between the first-named daughter of the core's pair convention and the bachelor in the
pair rest frame (``toyengine.core.dalitz.dalitz_plot``): for (d1 d2) between d1 and d3, for
(d2 d3) between d2 and d1, for (d3 d1) between d3 and d2. The sign of odd-L amplitudes is
absorbed by the free coefficients.

Every check that needs more than one field (an unknown daughter in a pair, a spin the
lineshape cannot take, a phase space closed by the daughter masses, a pole outside the
pair's mass range) is made by :func:`build_dalitz` before any toy runs, with one line naming
the field (``isobars[2].pair``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from annotated_types import Len
from pydantic import Field, model_validator

from ..core.dalitz.dalitz_plot import DalitzKinematics, Vetoes
from ..core.dalitz.gof import adaptive_chi2
from ..core.dalitz.maps import SDPHistogram
from ..core.dalitz.model import Component, DalitzData, DalitzModel, RunSpec
from ..core.dalitz.resonances import KINDS, Lineshape
from ..core.params import Constraint, Parameter, ParameterSet
from ..errors import ModelError, OptionError
from .options import BuilderOptions, FiniteFloat, Pair, StrictModel, format_path
from .protocol import ToyModelBase

__all__ = ["LINESHAPES", "DalitzOptions", "DeclaredDalitzModel", "build_dalitz"]

_NAME = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$")]
_VALUE_SIGMA = Annotated[list[FiniteFloat], Len(2, 2)]

#: lineshapes of the declaration -> (parameter roles in order, highest spin, meaning)
LINESHAPES: dict[str, tuple[tuple[str, ...], int, str]] = {
    "rbw": (KINDS["rbw"], 4, "relativistic Breit–Wigner with Blatt–Weisskopf barriers"),
    "lass": (KINDS["lass"], 0, "LASS K π S-wave, resonant and slowly varying terms"),
    "lass_bw": (KINDS["lass_bw"], 0, "the resonant term of LASS alone"),
    "lass_nr": (KINDS["lass_nr"], 0, "the slowly varying term of LASS alone"),
    "flat": (KINDS["flat"], 0, "constant (non-resonant) amplitude"),
}
#: role -> (parameter-name prefix, unit, label prefix)
_ROLES = {"mass": ("m", "MeV", "m"), "width": ("w", "MeV", "Γ"),
          "a": ("a", "GeV⁻¹", "a"), "r": ("r", "GeV⁻¹", "r")}
#: the core's pair names by the positions (in the declaration) of their two daughters
_PAIR_SLOTS = {frozenset((0, 1)): "kpi", frozenset((1, 2)): "etacpi",
               frozenset((0, 2)): "etack"}


class ParticleDecl(StrictModel):
    """A particle: its name (as the isobars' pairs refer to it) and mass in MeV. Without a
    mass, the ``particle`` package (optional; PDG data, no network) is asked by name."""

    name: Annotated[str, Field(min_length=1, max_length=32)]
    mass: FiniteFloat | None = Field(None, gt=0, le=20_000, description="mass (MeV)")


class ParamDecl(StrictModel):
    """A lineshape parameter (mass, width in MeV; LASS a, r in GeV⁻¹)."""

    value: FiniteFloat = Field(description="start and generation value")
    fixed: bool = Field(True, description="fixed (default) or floating")
    limits: Pair | None = Field(None, description="fit range [lo, hi]")
    constraint: _VALUE_SIGMA | None = Field(None, description="Gaussian [mean, sigma]")
    step: FiniteFloat | None = Field(None, gt=0, description="initial step of the fit")
    draw: FiniteFloat | None = Field(None, gt=0, description="sigma of a parameter draw "
                                     "(option draw)")
    name: _NAME | None = Field(None, description="parameter name (default <m|w|a|r>_<isobar>)")
    label: str | None = Field(None, max_length=64, description="display label")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.limits is not None and not self.limits[0] < self.limits[1]:
            msg = f"limits [lo, hi] with lo < hi (got {self.limits})"
            raise ValueError(msg)
        if self.constraint is not None and not self.constraint[1] > 0:
            msg = "constraint = [mean, sigma] with sigma > 0"
            raise ValueError(msg)
        return self


class IsobarDecl(StrictModel):
    """One isobar component."""

    name: _NAME = Field(description="component name (coefficients re_/im_ or mag_/ph_<name>)")
    pair: Annotated[list[str], Len(2, 2)] = Field(description="the two daughters")
    lineshape: Literal[tuple(LINESHAPES)] = Field(  # type: ignore[valid-type]
        description="rbw, lass, lass_bw, lass_nr or flat")
    spin: int = Field(0, ge=0, le=4, description="spin L of the resonance")
    radius: FiniteFloat = Field(4.0, ge=0, le=20, description="Blatt–Weisskopf radius (GeV⁻¹)")
    cutoff: FiniteFloat = Field(1.7, gt=0, le=10, description="LASS cut-off of the slowly "
                                "varying term (GeV)")
    mass: ParamDecl | _NAME | None = Field(None, description="pole mass (MeV), or the name "
                                           "of a parameter declared by an earlier isobar")
    width: ParamDecl | _NAME | None = Field(None, description="width (MeV), or a name")
    a: ParamDecl | _NAME | None = Field(None, description="LASS scattering length (GeV⁻¹)")
    r: ParamDecl | _NAME | None = Field(None, description="LASS effective range (GeV⁻¹)")
    coefficient: _VALUE_SIGMA = Field([0.1, 0.0], description="[re, im] start values "
                                      "(converted to magnitude and phase if polar)")
    step: FiniteFloat = Field(0.06, gt=0, description="initial step of the coefficient")
    reference: bool = Field(False, description="the reference amplitude (coefficient fixed)")


class RunDecl(StrictModel):
    """One subsample: its maps (``.npz``, ``file.root:histogram`` or ``flat``) and yields."""

    efficiency: Annotated[str, Field(min_length=1)] = Field(
        description="efficiency map: .npz file, file.root:histogram, or flat")
    backgrounds: dict[_NAME, Annotated[str, Field(min_length=1)]] = Field(
        default_factory=dict, max_length=8, description="{name: map} background maps")
    yields: dict[_NAME, _VALUE_SIGMA] = Field(description="{sig|<background>: [value, σ]}")

    @model_validator(mode="after")
    def _yields(self) -> Self:
        want = ["sig", *self.backgrounds]
        for key in want:
            if key not in self.yields:
                msg = f"yields with an entry {key!r} (one per signal and background)"
                raise ValueError(msg)
        for key, (val, sig) in self.yields.items():
            if key not in want:
                msg = f"yields only for sig and the backgrounds {want} (got {key!r})"
                raise ValueError(msg)
            if not (val >= 0 and sig > 0):
                msg = f"yields[{key}] = [value >= 0, sigma > 0]"
                raise ValueError(msg)
        return self


class VetoDecl(StrictModel):
    """Vetoes: a border band (MeV) inside each pair-mass limit, and mass intervals of the
    pair of the first two daughters (the core's ``Vetoes``)."""

    border: FiniteFloat = Field(0.0, ge=0, lt=500, description="border veto width (MeV)")
    interval: Pair | None = Field(None, description="vetoed m(d1 d2) interval (MeV)")


class GridDecl(StrictModel):
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


class DalitzOptions(BuilderOptions):
    """Options of the ``dalitz`` builder: a three-body isobar model declared in the study
    file (parent, daughters, isobars, runs with maps and yields; ``docs/models.md``)."""

    builder_name: ClassVar[str] = "dalitz"
    build_every_variant: ClassVar[bool] = False  # a normalisation grid per model

    parent: ParticleDecl = Field(description="decaying particle {name, mass (MeV)}")
    daughters: Annotated[list[ParticleDecl], Len(3, 3)] = Field(
        description="the three daughters; the square Dalitz plot is built on the first two")
    isobars: Annotated[list[IsobarDecl], Len(1, 64)] = Field(
        description="components; exactly one is the reference amplitude")
    runs: Annotated[dict[_NAME, RunDecl], Len(1, 8)] = Field(
        description="{run: {efficiency, backgrounds, yields}}")
    coefficients: Literal["cartesian", "polar"] = Field(
        "cartesian", description="coefficient form: re/im or mag/phase")
    yields: Literal["fixed", "constrained", "floating"] = Field(
        "fixed", description="yields fixed, Gaussian-constrained, or free")
    map_dir: str | None = Field(None, min_length=1,
                                description="directory of relative map files")
    vetoes: VetoDecl = Field(default_factory=VetoDecl, description="vetoed regions")
    smearing: Literal["none", "background", "efficiency", "efficiency_correlated"] = Field(
        "none", description="map smearing of random variants")
    smearing_bins: int = Field(10, ge=1, le=1000, description="bins varied (correlated)")
    smearing_radius: int = Field(2, ge=0, le=100, description="interpolation radius (bins)")
    draw: Literal["none", "uniform", "gaussian"] = Field(
        "none", description="draw every parameter with a 'draw' sigma (uniform in ±1σ or "
        "Gaussian)")
    scan: list[_NAME] = Field(default_factory=list, max_length=8,
                              description="parameters the fit's multi-start spreads over")
    grid: GridDecl = Field(default_factory=GridDecl, description="normalisation grid")

    @model_validator(mode="after")
    def _reference(self) -> Self:
        refs = [i.name for i in self.isobars if i.reference]
        if len(refs) != 1:
            msg = f"exactly one isobar with reference: true (got {len(refs) or 'none'})"
            raise ValueError(msg)
        return self


class DeclaredDalitzModel(DalitzModel, ToyModelBase):
    """A Dalitz model built from a declaration: the fit fractions and data loading of
    :class:`DalitzModel`, and its goodness-of-fit statistic."""

    def gof_statistic(self, data: DalitzData, values: np.ndarray) -> float:
        """Adaptive binned χ² with 12 × 12 equally populated SDP bins (Eur. Phys. J. C 78
        (2018) 1019, Sect. 6.4), recorded per toy so a goodness-of-fit study gives its
        toy-based p-value."""
        return float(adaptive_chi2(self, values, data)["chi2"])


def _fail(loc: tuple[str | int, ...], value: Any, expected: str) -> OptionError:
    """A check of the declaration failed: the field's path inside the options (the study
    validator prefixes the model's path), the bad value and what was expected."""
    return OptionError(format_path(loc), value, expected)


def _mass(p: Mapping[str, Any], loc: tuple[str | int, ...]) -> float:
    """Mass in MeV: given, or from the ``particle`` package (PDG data shipped with it)."""
    if p["mass"] is not None:
        return float(p["mass"])
    try:
        from particle import Particle  # optional; reads its bundled tables, no network
    except ImportError:
        raise _fail((*loc, "mass"), None, f"a mass in MeV for {p['name']!r} (the optional "
                    "'particle' package that would look it up is not installed)") from None
    try:
        found = Particle.from_name(p["name"])
    except Exception:  # noqa: BLE001 - particle raises its own not-found types
        raise _fail((*loc, "name"), p["name"], "a particle name known to the 'particle' "
                    "package, or a mass in MeV") from None
    if found.mass is None:
        raise _fail((*loc, "mass"), None, f"a mass for {p['name']!r} (none in the PDG tables)")
    return float(found.mass)


def _map(spec: str, kind: str, base: Path, cache: dict[tuple[str, str], SDPHistogram]
         ) -> SDPHistogram:
    """An SDP map: ``flat``, ``file.npz`` or ``file.root:histogram`` (relative to ``base``);
    a file named twice is loaded (and later smeared) once."""
    if (spec, kind) in cache:
        return cache[(spec, kind)]
    if spec == "flat":
        key = ("flat", kind)
        if key not in cache:
            cache[key] = SDPHistogram.from_function(
                lambda mp, th: np.ones(np.broadcast_shapes(mp.shape, th.shape)), 4, 4, kind,
                source="flat")
        return cache[key]
    name, _, hist_key = spec.partition(".root:")
    is_root = bool(hist_key) or name.endswith(".root")
    path = Path(name + ".root" if hist_key else name)
    if not path.is_absolute():
        path = base / path
    key = (f"{path}:{hist_key}", kind)
    if key not in cache:
        cache[key] = (SDPHistogram.from_root(path, hist_key, kind) if is_root
                      else SDPHistogram.from_npz(path, kind))
    return cache[key]


def _kinematics(opts: dict[str, Any]) -> tuple[list[str], DalitzKinematics, Vetoes]:
    """The daughters' names, the kinematics and the vetoes of a declaration."""
    names = [d["name"] for d in opts["daughters"]]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise _fail(("daughters", i, "name"), n, "distinct daughter names (give "
                        "identical particles different names, e.g. pi+_1, pi+_2)")
    m_parent = _mass(opts["parent"], ("parent",))
    ms = [_mass(d, ("daughters", i)) for i, d in enumerate(opts["daughters"])]
    if not m_parent > sum(ms):
        raise _fail(("parent", "mass"), m_parent, f"a parent heavier than the daughters' "
                    f"masses {' + '.join(f'{m:g}' for m in ms)} = {sum(ms):g} MeV (the phase "
                    "space is closed)")
    kin = DalitzKinematics(m_parent / 1e3, ms[0] / 1e3, ms[1] / 1e3, ms[2] / 1e3)
    vd = opts["vetoes"]
    interval = None
    if vd["interval"] is not None:
        lo, hi = (float(v) for v in vd["interval"])
        if not lo < hi:
            raise _fail(("vetoes", "interval"), vd["interval"], "[lo, hi] with lo < hi (MeV)")
        interval = (lo / 1e3, hi / 1e3)
    border = float(vd["border"]) / 1e3
    lo12, hi12 = kin.mass_range("kpi")
    if border * 2 >= hi12 - lo12:
        raise _fail(("vetoes", "border"), vd["border"], "a border veto narrower than half "
                    f"the m(d1 d2) range {(hi12 - lo12) * 1e3:.1f} MeV")
    vetoes = Vetoes(d0=interval, border=border)
    return names, kin, vetoes


def _isobars(opts: dict[str, Any], names: list[str]
             ) -> tuple[list[Parameter], dict[str, int], list[Component],
                        list[tuple[int, float, str]]]:
    """The isobars' parameters (lineshape parameters, then the coefficient, per isobar),
    their positions by name, the components and the parameters that a draw varies."""
    polar = opts["coefficients"] == "polar"
    params: list[Parameter] = []
    declared: dict[str, int] = {}  # parameter name -> position in params
    comps: list[Component] = []
    draws: list[tuple[int, float, str]] = []  # (position, sigma, role)
    for k, iso in enumerate(opts["isobars"]):
        loc: tuple[str | int, ...] = ("isobars", k)
        iname = iso["name"]
        if any(c.name == iname for c in comps):
            raise _fail((*loc, "name"), iname, "a name not used by an earlier isobar")
        try:
            pos = sorted(names.index(d) for d in iso["pair"])
        except ValueError:
            raise _fail((*loc, "pair"), iso["pair"], f"two of the daughters {names}") from None
        if pos[0] == pos[1]:
            raise _fail((*loc, "pair"), iso["pair"], f"two different daughters of {names}")
        pair = _PAIR_SLOTS[frozenset(pos)]
        kind = iso["lineshape"]
        roles, max_spin, _ = LINESHAPES[kind]
        if iso["spin"] > max_spin:
            raise _fail((*loc, "spin"), iso["spin"], f"spin <= {max_spin} for lineshape "
                        f"{kind!r} (an S-wave shape)" if max_spin == 0 else
                        f"spin <= {max_spin} for lineshape {kind!r}")
        for role in _ROLES:
            if role not in roles and iso[role] is not None:
                raise _fail((*loc, role), iso[role], f"no {role!r} for lineshape {kind!r} "
                            f"(its parameters: {list(roles) or 'none'})")
        pnames = []
        for role in roles:
            decl = iso[role]
            if decl is None:
                raise _fail((*loc, role), None, f"a {role} declaration {{value, ...}} (lineshape "
                            f"{kind!r} needs {list(roles)})")
            if isinstance(decl, str):
                if decl not in declared:
                    raise _fail((*loc, role), decl, "the name of a parameter declared by an "
                                f"earlier isobar (known: {sorted(declared) or 'none'})")
                pnames.append(decl)
                continue
            prefix, unit, lab = _ROLES[role]
            pname = decl["name"] or f"{prefix}_{iname}"
            if pname in declared:
                raise _fail((*loc, role, "name"), pname, "a new parameter name (refer to an "
                            "existing one by writing its name instead of a declaration)")
            limits = tuple(float(v) for v in decl["limits"]) if decl["limits"] else (
                (0.0, math.inf) if role == "width" else (-math.inf, math.inf))
            cons = decl["constraint"]
            declared[pname] = len(params)
            params.append(Parameter(
                pname, float(decl["value"]), limits, fixed=bool(decl["fixed"]),
                constraint=None if cons is None else Constraint(float(cons[0]), float(cons[1])),
                step=None if decl["step"] is None else float(decl["step"]), unit=unit,
                label=decl["label"] or f"{lab}({iname})"))
            if decl["draw"] is not None:
                draws.append((len(params) - 1, float(decl["draw"]), role))
            pnames.append(pname)
        try:
            ls = Lineshape(kind, pair, int(iso["spin"]), float(iso["radius"]),
                           float(iso["cutoff"]))
        except ModelError as exc:
            raise _fail(loc, iname, str(exc)) from None
        # coefficient
        re, im = (float(v) for v in iso["coefficient"])
        ref = bool(iso["reference"])
        step = float(iso["step"])
        for cname in ((f"mag_{iname}", f"ph_{iname}") if polar else
                      (f"re_{iname}", f"im_{iname}")):
            if cname in declared:
                raise _fail((*loc, "name"), iname, f"a name whose coefficient {cname} is not "
                            "already a parameter")
        if polar:
            mag, ph = math.hypot(re, im), math.atan2(im, re)
            params.append(Parameter(f"mag_{iname}", mag, (0.0, math.inf), fixed=ref, step=step,
                                    label=f"|c({iname})|"))
            params.append(Parameter(f"ph_{iname}", ph, (-2 * math.pi, 2 * math.pi), fixed=ref,
                                    step=step / max(mag, 0.05), unit="rad",
                                    label=f"arg c({iname})"))
        else:
            params.append(Parameter(f"re_{iname}", re, fixed=ref, step=step,
                                    label=f"Re c({iname})"))
            params.append(Parameter(f"im_{iname}", im, fixed=ref, step=step,
                                    label=f"Im c({iname})"))
        declared[params[-2].name] = len(params) - 2
        declared[params[-1].name] = len(params) - 1
        comps.append(Component(iname, ls, tuple(pnames)))
    if not comps[0].name == next(i["name"] for i in opts["isobars"] if i["reference"]):
        ref_k = next(k for k, i in enumerate(opts["isobars"]) if i["reference"])
        raise _fail(("isobars", ref_k, "reference"), True, "the reference amplitude as the "
                    "first isobar")
    return params, declared, comps, draws


def _draw(params: list[Parameter], draws: list[tuple[int, float, str]], kind: str,
          rng: np.random.Generator) -> None:
    """Parameter draws of a random variant, in ``params`` (in place): in declaration order,
    mass before width."""
    if kind != "none":
        for i_p, sig, role in draws:
            p = params[i_p]
            if kind == "uniform":
                v = p.value + sig * rng.uniform(-1.0, 1.0)
            else:
                v = p.value + sig * rng.standard_normal()
                if role == "width":
                    v = max(v, 0.1 * p.value)
            params[i_p] = Parameter(p.name, v, p.limits, fixed=p.fixed, constraint=p.constraint,
                                    step=p.step, unit=p.unit, label=p.label)


def _runs(opts: dict[str, Any], params: list[Parameter], declared: dict[str, int],
          rng: np.random.Generator | None, base_dir: Path | None,
          preloaded: Mapping[str, SDPHistogram] | None) -> list[RunSpec]:
    """The runs (subsamples): their maps, smeared where the declaration says, and their
    yields, appended to ``params``."""
    if opts["map_dir"] is not None:
        base = Path(opts["map_dir"])
    else:
        base = base_dir if base_dir is not None else Path.cwd()
    cache: dict[tuple[str, str], SDPHistogram] = {
        (k, h.kind): h for k, h in (preloaded or {}).items()}
    smear = opts["smearing"]
    smeared: dict[int, SDPHistogram] = {}

    def varied(h: SDPHistogram, kind: str) -> SDPHistogram:
        """Smear each distinct map once (shared background shapes stay shared)."""
        want = (smear == "background" and kind == "background") or (
            smear.startswith("efficiency") and kind == "efficiency")
        if not want:
            return h
        if id(h) not in smeared:
            assert rng is not None
            mode = "correlated" if smear == "efficiency_correlated" else "independent"
            smeared[id(h)] = h.smeared(rng, mode, n_bins=int(opts["smearing_bins"]),
                                       radius=int(opts["smearing_radius"]))
        return smeared[id(h)]

    runs: list[RunSpec] = []
    loaded: dict[str, tuple[SDPHistogram, list[tuple[str, SDPHistogram]]]] = {}
    for run, rd in opts["runs"].items():  # load every map first (as the zc4100 builder)
        eff = _map(rd["efficiency"], "efficiency", base, cache)
        loaded[run] = (eff, [(b, _map(f, "background", base, cache))
                             for b, f in rd["backgrounds"].items()])
    for run, rd in opts["runs"].items():
        eff_h, bh = loaded[run]
        eff = varied(eff_h, "efficiency")
        bkgs = tuple((b, varied(h, "background"), f"n_{b}_{run}") for b, h in bh)
        for key in ["sig", *(b[0] for b in bkgs)]:
            val, sig = (float(v) for v in rd["yields"][key])
            fixed = opts["yields"] == "fixed"
            cons = Constraint(val, sig) if opts["yields"] == "constrained" else None
            pname = f"n_{key}_{run}"
            if pname in declared:
                raise _fail(("runs", run, "yields", key), pname, "a yield name not already a "
                            "parameter")
            declared[pname] = len(params)
            params.append(Parameter(pname, val, (0.0, math.inf), fixed=fixed, constraint=cons,
                                    step=sig, label=f"N_{key}({run})"))
        runs.append(RunSpec(run, eff, f"n_sig_{run}", bkgs))
    for i, s in enumerate(opts["scan"]):
        if s not in declared:
            raise _fail(("scan", i), s, f"a parameter of the model (known: {sorted(declared)})")
    return runs


def build_dalitz(options: Mapping[str, Any] | None = None,
                 rng: np.random.Generator | None = None, *, name: str = "dalitz",
                 base_dir: Path | None = None,
                 preloaded: Mapping[str, SDPHistogram] | None = None,
                 cls: type[DeclaredDalitzModel] | None = None) -> DeclaredDalitzModel:
    """Build a declared three-body Dalitz-plot model (LHCb, Eur. Phys. J. C 78 (2018) 1019,
    Sects. 5–6; Laura++, Comput. Phys. Commun. 231 (2018) 198).

    Parameters
    ----------
    options : mapping
        Declared (types, ranges, defaults) by :class:`DalitzOptions`: ``parent`` and
        ``daughters`` ({name, mass in MeV}), ``isobars`` (each with ``pair``, ``lineshape``,
        ``spin``, ``radius``, its lineshape parameters ``mass``/``width``/``a``/``r``,
        ``coefficient`` and ``reference``), ``runs`` ({run: {efficiency, backgrounds,
        yields}}), ``coefficients``, ``yields``, ``map_dir``, ``vetoes``, ``smearing``
        (``smearing_bins``, ``smearing_radius``), ``draw``, ``scan`` and ``grid``.
    rng : numpy.random.Generator, optional
        Needed only for smearing and parameter draws.
    name : str
        The model's name in messages.
    base_dir : Path, optional
        Directory of relative map files when ``map_dir`` is unset (default: the working
        directory).
    preloaded : mapping, optional
        Maps held in memory, by the name the declaration gives them (stand-ins built by
        another builder).
    cls : type, optional
        A subclass of :class:`DeclaredDalitzModel` to build.

    Returns
    -------
    DeclaredDalitzModel
        Parameters, in order: per isobar its new lineshape parameters (``m_``, ``w_``,
        ``a_``, ``r_<isobar>`` unless named) then its coefficient (``re_``/``im_`` or
        ``mag_``/``ph_<isobar>``); then per run ``n_sig_<run>`` and ``n_<background>_<run>``.

    Raises
    ------
    OptionError
        One line naming the field: a typo, an unknown daughter in a pair, a spin the
        lineshape cannot take, daughter masses that close the phase space, a pole outside
        the pair's mass range, a parameter named twice or never declared.
    """
    opts = DalitzOptions.parse(options).as_dict()
    if (opts["smearing"] != "none" or opts["draw"] != "none") and rng is None:
        msg = f"{name} model: smearing and parameter draws need an rng (numpy.random.Generator)"
        raise ModelError(msg)
    names, kin, vetoes = _kinematics(opts)
    polar = opts["coefficients"] == "polar"
    params, declared, comps, draws = _isobars(opts, names)
    if opts["draw"] != "none":
        assert rng is not None
        _draw(params, draws, opts["draw"], rng)
    runs = _runs(opts, params, declared, rng, base_dir, preloaded)
    # pole masses outside the pair's range, zero widths: one line naming the isobar
    x0 = np.array([p.value for p in params])
    for k, c in enumerate(comps):
        try:
            c.lineshape.check_values(kin, tuple(x0[declared[p]] for p in c.params), c.name)
        except ModelError as exc:
            raise _fail(("isobars", k), c.name, str(exc)) from None
    model = (cls or DeclaredDalitzModel)(
        kin, comps, ParameterSet(tuple(params)), runs, vetoes, polar=polar,
        grid_options={k: v for k, v in opts["grid"].items() if v is not None}, name=name)
    model.options = opts  # type: ignore[attr-defined]
    model.scan_parameters = tuple(opts["scan"])
    return model


def check_dalitz_model(model: DalitzModel, values: np.ndarray | None = None, *,
                       run: str | None = None, n_events: int = 40_000, seed: int = 1,
                       bins: int = 12) -> dict[str, Any]:
    """The three checks of a Dalitz model before its toys (``docs/models.md``): fit
    fractions, normalisation with an independent rule, generated-vs-PDF χ².

    Parameters
    ----------
    model : DalitzModel
        Any Dalitz model (declared or ``zc4100``).
    values : ndarray, optional
        Parameter values (default the generation values).
    run : str, optional
        The subsample (default the first).
    n_events : int
        Signal events generated for the χ² (backgrounds set to zero).
    seed : int
        Seed of the generated sample.
    bins : int
        ``bins × bins`` square-Dalitz-plot bins (m', θ') of the χ².

    Returns
    -------
    dict
        ``fit_fractions`` ({component: FF}, Eur. Phys. J. C 78 (2018) 1019, Eq. 12),
        ``ff_sum`` (Σ FF_i; 1 without interference), ``integral`` ({signal|background:
        ∫ P over the allowed SDP with a rule ~10× finer than the model's}), ``chi2``,
        ``bins_used`` (bins with > 5 expected events) and ``n_generated``. Under the null the
        χ² follows χ²(k − 1) with k = ``bins_used``.
    """
    from ..core.dalitz.integration import RowGrid

    x = model.parameters.values.copy() if values is None else np.asarray(values, float).copy()
    r = model.run_names.index(run) if run is not None else 0
    run_name = model.run_names[r]
    ff = model.fit_fractions(x)["ff"]
    g = RowGrid.build(model.kin, model.vetoes,
                      breaks=model._breaks(x).get("kpi", ()), n_m=8, du=0.004, n_t=16,
                      t_panels=40)
    dens = model.densities(x, run_name, g.x, g.y)
    integral = {k: float(np.sum(d * g.w_sdp)) for k, d in dens.items()}
    xs = x.copy()
    for i, rs in enumerate(model.runs):
        xs[model.parameters.index(rs.signal_yield)] = n_events if i == r else 0.0
        for _, _, yname in rs.backgrounds:
            xs[model.parameters.index(yname)] = 0.0
    sample = model.sample(xs, np.random.default_rng(seed))[run_name]
    edges = np.linspace(0.0, 1.0, bins + 1)
    exp = sdp_bin_integrals(model, x, run_name, edges)
    mp, thp = model.kin.sdp_from_dp(sample.m2_kpi, sample.m2_etacpi)
    obs, _, _ = np.histogram2d(mp, thp, [edges, edges])
    exp = exp * len(sample)
    ok = exp > 5
    return {"fit_fractions": ff, "ff_sum": float(sum(ff.values())), "integral": integral,
            "chi2": float(np.sum((obs[ok] - exp[ok]) ** 2 / exp[ok])),
            "bins_used": int(ok.sum()), "n_generated": len(sample)}


def sdp_bin_integrals(model: DalitzModel, values: np.ndarray, run: str, edges: np.ndarray,
                      n_gauss: int = 20) -> np.ndarray:
    """The signal PDF integrated over each square-Dalitz-plot bin ``edges × edges`` (m',
    θ'), with an ``n_gauss``-point Gauss–Legendre rule per bin and axis (vetoed points count
    zero)."""
    u, w = np.polynomial.legendre.leggauss(n_gauss)
    lo, hi = edges[:-1], edges[1:]
    pts = (0.5 * (lo + hi))[:, None] + (0.5 * (hi - lo))[:, None] * u[None, :]  # (bins, n)
    wts = (0.5 * (hi - lo))[:, None] * w[None, :]
    mp = np.broadcast_to(pts[:, :, None, None], (*pts.shape, *pts.shape))
    th = np.broadcast_to(pts[None, None], mp.shape)
    ww = wts[:, :, None, None] * wts[None, None]
    xx, yy = model.kin.dp_from_sdp(mp.ravel(), th.ravel())
    dens = model.densities(values, run, xx, yy)["signal"].reshape(mp.shape)
    return np.sum(dens * ww, axis=(1, 3))
