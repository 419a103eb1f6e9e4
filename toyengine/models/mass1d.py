"""``mass1d``: a 1-D extended mixture model declared in the study file.

The builder composes :class:`toyengine.core.model1d.Model1D` from the core's shapes
(:mod:`toyengine.core.shapes`, the offset densities of :mod:`toyengine.core.resolution`, the
unitarised profile of :mod:`toyengine.core.unitarised`); it re-implements none of them.
Everything a user may write is declared once, in :data:`OPTIONS` (the top-level options)
and :data:`SHAPES` (every shape, its parameters with units and its options); the
validation, the documentation (``docs/models.md``) and its test read those tables.

Example (a Gaussian peak on an exponential background)::

    builder: mass1d
    options:
      observable: {name: mass, unit: MeV, range: [5180, 5380]}
      parameters:
        n_sig: {value: 400, limits: [-200, 5000]}
        mu: {value: 5280, limits: [5250, 5310], unit: MeV}
        sigma: {value: 12, limits: [2, 40], unit: MeV}
        n_bkg: {value: 1500, limits: [0, 20000]}
        slope: {value: -0.005, limits: [-0.1, 0.1], unit: 1/MeV}
      components:
        - {name: signal, shape: gaussian, yield: n_sig}
        - {name: background, shape: exponential, yield: n_bkg}

A component's shape parameters map to model parameters through ``params`` (default: the
model parameter of the same name; a polynomial's angles default to ``<component>_phi1..``
and, if not declared, to a flat polynomial). With a ``resolution`` every component is
convolved with it unless it says ``convolve: false``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..core.discriminants import Density1D, Discriminants, DiscriminatedSample, Species
from ..core.kinematics import MASSES_PDG2020
from ..core.model1d import Component, Model1D, Observable
from ..core.params import Constraint, Parameter, ParameterSet
from ..core.resolution import (
    KINDS as RESOLUTION_KINDS,
)
from ..core.resolution import (
    Resolution,
    apollonios_density,
    cb2_density,
    crystal_ball_density,
    double_gaussian_density,
    gaussian_density,
    johnson_su_density,
    novosibirsk_density,
    student_t_density,
)
from ..core.shapes import Chebyshev, Exponential, PeakShape, PhaseSpacePolynomial, RelativisticBW
from ..errors import ModelError, OptionError
from .options import BuilderOptions, Field, FiniteFloat
from .protocol import ToyModelBase

__all__ = ["OPTIONS", "PARAMETER_KEYS", "SHAPES", "Mass1dOptions", "MassModel", "ShapeDecl",
           "ShapeParam", "build_discriminants", "build_mass1d"]

#: top-level options of ``mass1d`` -> (required, meaning)
OPTIONS: dict[str, tuple[bool, str]] = {
    "observable": (True, "{name, range: [lo, hi], unit}: the fitted variable and its range"),
    "parameters": (True, "name -> number or {value, limits, fixed, constraint: {mean, sigma},"
                   " step, unit}: every parameter, in fit order"),
    "components": (True, "list of {name, shape, yield, params, options, convolve}"),
    "resolution": (False, "{kind, <its parameters>, scale}: convolved into every component "
                   "(default none); kinds: " + ", ".join(sorted(RESOLUTION_KINDS))),
    "grid_step": (False, "grid step in observable units (default (hi - lo) / 1500)"),
    "scan": (False, "parameters that exist only with the signal (e.g. its mass and width): "
             "the fit's multi-start spreads starts over their whole range (default none)"),
    "discriminants": (False, "{observables, shapes, model, subtract, weights}: discriminating "
                      "observables and the species that sWeights subtract (default none; "
                      "docs/models.md, 'Discriminating observables')"),
}


class Mass1dOptions(BuilderOptions):
    """Options of the ``mass1d`` builder: a 1-D extended mixture declared in the study file
    (shapes, parameters and units: ``docs/models.md``). The nested declarations are checked by
    :func:`build_mass1d`, whose errors name the field (``components[0].params.mean``)."""

    builder_name: ClassVar[str] = "mass1d"
    observable: dict[str, Any] = Field(description=OPTIONS["observable"][1])
    parameters: dict[str, Any] = Field(description=OPTIONS["parameters"][1])
    components: list[dict[str, Any]] = Field(description=OPTIONS["components"][1])
    resolution: dict[str, Any] | None = Field(None, description=OPTIONS["resolution"][1])
    grid_step: FiniteFloat | None = Field(None, gt=0, description=OPTIONS["grid_step"][1])
    scan: list[str] | None = Field(None, description=OPTIONS["scan"][1])
    discriminants: dict[str, Any] | None = Field(None, description=OPTIONS["discriminants"][1])


#: keys of a parameter declaration
PARAMETER_KEYS = ("value", "limits", "fixed", "constraint", "step", "unit")
COMPONENT_KEYS = ("name", "shape", "yield", "params", "options", "convolve")
DEFAULT_GRID_POINTS = 1500


@dataclass(frozen=True)
class ShapeParam:
    """One shape parameter: its name, unit (``x`` = the observable's unit) and meaning."""

    name: str
    unit: str
    doc: str
    is_list: bool = False  # polynomial angles: a list of ``order`` parameter names


@dataclass(frozen=True)
class ShapeDecl:
    """A shape of the declarative builder: parameters, options (name -> (default, meaning);
    default ``...`` means required) and the factory that builds the core shape."""

    name: str
    doc: str
    params: tuple[ShapeParam, ...]
    options: Mapping[str, tuple[Any, str]]
    make: Callable[[Sequence[Any], Mapping[str, Any], _Context], Any]
    linear: bool = False


@dataclass
class _Context:
    lo: float
    hi: float
    component: str
    path: str
    extra_params: list[Parameter] = field(default_factory=list)


# --- shape factories ------------------------------------------------------------------------
_LOC = ShapeParam("mu", "x", "location (peak position)")


def _peak(density: Callable[..., np.ndarray], args: tuple[str, ...]
          ) -> Callable[[Sequence[Any], Mapping[str, Any], _Context], Any]:
    def make(names: Sequence[Any], opts: Mapping[str, Any], ctx: _Context) -> Any:
        flip = opts.get("tail", "low") == "high"
        return PeakShape(density, tuple(names), args, flip)

    return make


def _mass(value: Any, path: str) -> float:
    """A mass in MeV: a number, a particle name of MASSES_PDG2020, or a list of those (their
    sum, added left to right)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise OptionError(path, value, "a number (MeV), a particle name or a list of those")
    total = 0.0
    for i, item in enumerate(items):
        if isinstance(item, str):
            if item not in MASSES_PDG2020:
                raise OptionError(path if len(items) == 1 else f"{path}[{i}]", item,
                                  f"a number (MeV) or a particle of {sorted(MASSES_PDG2020)}")
            m = MASSES_PDG2020[item]
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            m = float(item)
        else:
            raise OptionError(path, value, "a number (MeV), a particle name or a list of those")
        total = m if i == 0 else total + m
    return total


def _make_bw(names: Sequence[Any], opts: Mapping[str, Any], ctx: _Context) -> Any:
    p = f"{ctx.path}.options"
    L = opts["L"]
    if isinstance(L, bool) or not isinstance(L, int) or not 0 <= L <= 4:
        raise OptionError(f"{p}.L", L, "an integer 0..4")
    radius = opts["radius"]
    if isinstance(radius, bool) or not isinstance(radius, (int, float)) or radius < 0:
        raise OptionError(f"{p}.radius", radius, "a number >= 0 (GeV^-1)")
    return RelativisticBW(names[0], names[1], _mass(opts["offset"], f"{p}.offset"),
                          _mass(opts["m_a"], f"{p}.m_a"), _mass(opts["m_b"], f"{p}.m_b"),
                          L, float(radius))


def _make_polynomial(names: Sequence[Any], opts: Mapping[str, Any], ctx: _Context,
                     n_masses: tuple[int, ...]) -> Any:
    p = f"{ctx.path}.options"
    masses = opts.get("masses", [])
    if not isinstance(masses, list) or len(masses) not in n_masses:
        raise OptionError(f"{p}.masses", masses,
                          f"a list of {' or '.join(map(str, n_masses))} daughter masses")
    ms = tuple(_mass(m, f"{p}.masses[{i}]") for i, m in enumerate(masses))
    offset = _mass(opts.get("offset", 0.0), f"{p}.offset")
    return PhaseSpacePolynomial(tuple(names[0]), offset, ms, ctx.lo, ctx.hi)


def _make_unitarised(names: Sequence[Any], opts: Mapping[str, Any], ctx: _Context) -> Any:
    from ..core.unitarised import UnitarisedShape

    kw = {k: v for k, v in opts.items() if v is not None}
    return UnitarisedShape.from_options({**kw, "mass_param": names[0], "g_param": names[1]})


_ORDER = {"order": (0, "polynomial order (= number of parameters in the list)")}
_POLY_ANGLES = ShapeParam("phi", "rad", "sphere angles in [0, pi/2] of the positive Bernstein "
                          "coefficients (Ostap PositivePolynomial)", is_list=True)
_TAIL = {"tail": ("low", "side of the power-law tail: low or high")}

#: every shape of the declarative builder
SHAPES: dict[str, ShapeDecl] = {d.name: d for d in (
    ShapeDecl("gaussian", "Gaussian", (_LOC, ShapeParam("sigma", "x", "width")), {},
              _peak(gaussian_density, ("sigma",))),
    ShapeDecl("double_gaussian", "frac G(sigma1) + (1 - frac) G(sigma2), common mean",
              (_LOC, ShapeParam("sigma1", "x", "first width"),
               ShapeParam("sigma2", "x", "second width"),
               ShapeParam("frac", "1", "fraction of the first Gaussian")), {},
              _peak(double_gaussian_density, ("sigma1", "sigma2", "frac"))),
    ShapeDecl("crystal_ball", "one-sided Crystal Ball, exponent N = n + 1 (Ostap convention)",
              (_LOC, ShapeParam("sigma", "x", "core width"),
               ShapeParam("alpha", "1", "tail start in core widths (> 0)"),
               ShapeParam("n", "1", "tail exponent minus one (> 0)")), _TAIL,
              _peak(crystal_ball_density, ("sigma", "alpha", "n"))),
    ShapeDecl("crystal_ball2", "symmetric double-sided Crystal Ball, N = n + 1",
              (_LOC, ShapeParam("sigma", "x", "core width"),
               ShapeParam("alpha", "1", "tail start in core widths (> 0)"),
               ShapeParam("n", "1", "tail exponent minus one (> 0)")), {},
              _peak(cb2_density, ("sigma", "alpha", "n"))),
    ShapeDecl("johnson_su", "symmetric Johnson SU (gamma = 0)",
              (_LOC, ShapeParam("lambda", "x", "width"),
               ShapeParam("delta", "1", "tail parameter (> 0; large = Gaussian)")), {},
              _peak(johnson_su_density, ("lambda_", "delta"))),
    ShapeDecl("student_t", "Student's t with nu = 1 + |n| degrees of freedom",
              (_LOC, ShapeParam("sigma", "x", "scale"),
               ShapeParam("n", "1", "degrees of freedom minus one")), {},
              _peak(student_t_density, ("sigma", "n"))),
    ShapeDecl("novosibirsk", "Novosibirsk function (mode at mu)",
              (_LOC, ShapeParam("sigma", "x", "width"),
               ShapeParam("tau", "1", "asymmetry (0 = Gaussian)")), {},
              _peak(novosibirsk_density, ("sigma", "tau"))),
    ShapeDecl("apollonios", "symmetric Apollonios (hyperbolic) peak",
              (_LOC, ShapeParam("sigma", "x", "width"),
               ShapeParam("beta", "1", "shape (> 0; large = Gaussian, small = Laplace)")), {},
              _peak(apollonios_density, ("sigma", "beta"))),
    ShapeDecl("breit_wigner", "relativistic Breit-Wigner with mass-dependent width and "
              "Blatt-Weisskopf factor, R -> A B in wave L; observable in MeV, m = x + offset",
              (ShapeParam("mass", "MeV", "pole position m0 - offset"),
               ShapeParam("width", "MeV", "nominal width Gamma0")),
              {"m_a": (..., "mass of A (MeV, particle name or list summed)"),
               "m_b": (..., "mass of B (MeV, particle name or list summed)"),
               "offset": (0.0, "observable offset: m = x + offset (MeV, names allowed)"),
               "L": (1, "orbital angular momentum 0..4 (1 = P wave)"),
               "radius": (3.5, "Blatt-Weisskopf radius (GeV^-1)")},
              _make_bw),
    ShapeDecl("exponential", "exp(slope (x - range centre))",
              (ShapeParam("slope", "1/x", "slope"),), {},
              lambda names, opts, ctx: Exponential(names[0], 0.5 * (ctx.lo + ctx.hi))),
    ShapeDecl("chebyshev", "1 + sum_k c_k T_k(t) on the range, clipped at zero",
              (ShapeParam("c", "1", "Chebyshev coefficients c_1..c_order", is_list=True),),
              dict(_ORDER), lambda names, opts, ctx: Chebyshev(tuple(names[0]), ctx.lo, ctx.hi)),
    ShapeDecl("bernstein", "positive Bernstein polynomial of the given order on the range",
              (_POLY_ANGLES,), dict(_ORDER),
              lambda names, opts, ctx: _make_polynomial(names, opts, ctx, (0,)), linear=True),
    ShapeDecl("phase_space", "two- or three-body phase space x positive Bernstein polynomial",
              (_POLY_ANGLES,),
              {**_ORDER, "masses": (..., "2 or 3 daughter masses (MeV or particle names)"),
               "offset": (0.0, "observable offset: m = x + offset (MeV, names allowed)")},
              lambda names, opts, ctx: _make_polynomial(names, opts, ctx, (2, 3)), linear=True),
    ShapeDecl("unitarised", "unitarised T_cc+ -> D0 D0 pi+ profile of Nature Communications 13 "
              "(2022) 3351 (x in MeV relative to offset)",
              (ShapeParam("mass", "MeV", "delta m_U"),
               ShapeParam("g", "GeV", "|g| (read only when the option g is a number)")),
              {"g": (None, "'inf' / null: |g| -> infinity; a number: finite |g| (GeV)"),
               "matching": (None, "matching point: paper, code or a number"),
               "f2": (None, "coupling constant"), "h2": (None, "coupling constant"),
               "mu0": (None, "coupling constant"), "mu_plus": (None, "coupling constant"),
               "constants": (None, "other TccConstants fields (GeV)"),
               "channel": (None, "final state, default D0D0pi+"),
               "offset": (None, "observable offset in MeV (default m_D*+ + m_D0)")},
              _make_unitarised),
)}


# --- validation helpers ---------------------------------------------------------------------
def _number(v: Any, path: str, what: str = "a number") -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise OptionError(path, v, what)
    return float(v)


def _mapping(v: Any, path: str, keys: Sequence[str], required: Sequence[str] = ()) -> dict:
    """``v`` as a dict with only ``keys`` and all of ``required`` (``path`` "" = the options)."""
    if not isinstance(v, Mapping):
        raise OptionError(path, v, f"a mapping with keys {list(keys)}")
    prefix = f"{path}." if path else ""
    for k in v:
        if k not in keys:
            raise OptionError(f"{prefix}{k}", v[k], f"no such key; allowed keys: {list(keys)}")
    for k in required:
        if k not in v:
            raise OptionError(f"{prefix}{k}", None, "a required key (missing)")
    return dict(v)


def _name(v: Any, path: str) -> str:
    if not isinstance(v, str) or not v:
        raise OptionError(path, v, "a non-empty name")
    return v


def _parameter(name: str, decl: Any, path: str) -> Parameter:
    if not isinstance(decl, Mapping):
        decl = {"value": decl}
    d = _mapping(decl, path, PARAMETER_KEYS, ("value",))
    value = _number(d["value"], f"{path}.value")
    limits = d.get("limits", [-math.inf, math.inf])
    if (not isinstance(limits, list) or len(limits) != 2
            or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in limits)
            or not limits[0] < limits[1]):
        raise OptionError(f"{path}.limits", limits, "a list [lo, hi] of two numbers, lo < hi")
    if not limits[0] <= value <= limits[1]:
        raise OptionError(f"{path}.value", value, f"a number inside limits {limits}")
    fixed = d.get("fixed", False)
    if not isinstance(fixed, bool):
        raise OptionError(f"{path}.fixed", fixed, "true or false")
    constraint = None
    if d.get("constraint") is not None:
        c = _mapping(d["constraint"], f"{path}.constraint", ("mean", "sigma"), ("mean", "sigma"))
        sigma = _number(c["sigma"], f"{path}.constraint.sigma", "a number > 0")
        if not sigma > 0:
            raise OptionError(f"{path}.constraint.sigma", sigma, "a number > 0")
        constraint = Constraint(_number(c["mean"], f"{path}.constraint.mean"), sigma)
    step = d.get("step")
    if step is not None:
        step = _number(step, f"{path}.step", "a number > 0")
        if not step > 0:
            raise OptionError(f"{path}.step", step, "a number > 0")
    unit = d.get("unit", "")
    if not isinstance(unit, str):
        raise OptionError(f"{path}.unit", unit, "a string")
    return Parameter(name, value, (float(limits[0]), float(limits[1])), fixed, constraint,
                     step, unit)


def _flat_angles(order: int) -> list[float]:
    """Sphere angles whose Bernstein coefficients are all equal (a flat polynomial)."""
    return [math.acos(math.sqrt(1.0 / (order + 1 - k))) for k in range(order)]


def _resolution(decl: Any) -> Resolution:
    if not isinstance(decl, Mapping) or "kind" not in decl:
        raise OptionError("resolution", decl, "a mapping {kind, <its parameters>, scale}")
    kind = decl["kind"]
    if kind not in RESOLUTION_KINDS:
        raise OptionError("resolution.kind", kind, f"one of {sorted(RESOLUTION_KINDS)}")
    keys = ("kind", *RESOLUTION_KINDS[kind], "scale")
    d = _mapping(decl, "resolution", keys, ("kind", *RESOLUTION_KINDS[kind]))
    params = {k: _number(d[k], f"resolution.{k}") for k in RESOLUTION_KINDS[kind]}
    try:
        res = Resolution(kind, params)
        if "scale" in d:
            res = res.scaled(_number(d["scale"], "resolution.scale", "a number > 0"))
    except ModelError as exc:
        raise OptionError("resolution", dict(decl), f"a valid resolution ({exc})") from None
    return res


def _shape_names(decl: ShapeDecl, raw: Any, opts: Mapping[str, Any], ctx: _Context,
                 declared: Mapping[str, Parameter]) -> list[Any]:
    """Model parameter names for each shape parameter (lists for polynomial angles)."""
    path = f"{ctx.path}.params"
    mapping = _mapping(raw if raw is not None else {}, path, [p.name for p in decl.params])
    out: list[Any] = []
    for sp in decl.params:
        if sp.is_list:
            order = opts["order"]
            names = mapping.get(sp.name, [f"{ctx.component}_{sp.name}{k + 1}"
                                          for k in range(order)])
            if (not isinstance(names, list) or len(names) != order
                    or not all(isinstance(n, str) and n for n in names)):
                raise OptionError(f"{path}.{sp.name}", names,
                                  f"a list of {order} parameter names (options.order)")
            if decl.name != "chebyshev":  # angles not declared: a flat polynomial
                for n, angle in zip(names, _flat_angles(order), strict=True):
                    if n not in declared and all(p.name != n for p in ctx.extra_params):
                        ctx.extra_params.append(Parameter(n, angle, (0.0, math.pi / 2),
                                                          step=0.1, unit="rad"))
            out.append(names)
        else:
            out.append(_name(mapping.get(sp.name, sp.name), f"{path}.{sp.name}"))
    return out


def _shape_options(decl: ShapeDecl, raw: Any, path: str) -> dict[str, Any]:
    given = _mapping(raw if raw is not None else {}, path, list(decl.options))
    opts: dict[str, Any] = {}
    for k, (default, _doc) in decl.options.items():
        if k in given:
            opts[k] = given[k]
        elif default is ...:
            raise OptionError(f"{path}.{k}", None, "a required option (missing)")
        else:
            opts[k] = default
    if "order" in opts:
        o = opts["order"]
        if isinstance(o, bool) or not isinstance(o, int) or not 0 <= o <= 10:
            raise OptionError(f"{path}.order", o, "an integer 0..10")
    if "tail" in opts and opts["tail"] not in ("low", "high"):
        raise OptionError(f"{path}.tail", opts["tail"], "low or high")
    return opts


# --- the builder ----------------------------------------------------------------------------
class MassModel(Model1D, ToyModelBase):
    """A :class:`~toyengine.core.model1d.Model1D` as a study model (``mass1d``, ``tcc``):
    the :class:`~toyengine.models.protocol.ToyModel` defaults for what a 1-D mixture does not
    define (no derived quantities, no GOF statistic, data from an ``.npz`` file)."""

    def load_data(self, path: str | Path) -> Any:
        """The ``x`` array of the ``.npz`` file at ``path``; for a model with discriminants
        also its ``m`` array (``(n_events, n_discriminants)``): a
        :class:`~toyengine.core.discriminants.DiscriminatedSample` to fit sWeighted."""
        x = ToyModelBase.load_data(self, path)
        if self.discriminants is None:
            return x
        with np.load(path, allow_pickle=False) as f:
            if "m" not in f.files:
                msg = (f"{path}: the model has discriminants {list(self.discriminants.names)}"
                       " but the file has no 'm' array")
                raise ModelError(msg)
            m = np.asarray(f["m"], dtype=float)
        if m.shape != (x.size, len(self.discriminants.names)):
            msg = (f"{path}: 'm' has shape {m.shape}, expected ({x.size}, "
                   f"{len(self.discriminants.names)})")
            raise ModelError(msg)
        return DiscriminatedSample(x, m, np.full(x.size, -1, dtype=np.int8))


def build_mass1d(options: Mapping[str, Any], rng: np.random.Generator | None = None
                 ) -> MassModel:
    """Build a :class:`~toyengine.core.model1d.Model1D` from a declaration (see the module
    docstring, :data:`OPTIONS`, :data:`SHAPES` and ``docs/models.md``).

    Parameters
    ----------
    options : Mapping
        The builder options of the study file.
    rng : numpy.random.Generator, optional
        Unused (the declaration has no random parts).

    Raises
    ------
    OptionError
        An option is invalid; ``path`` names it inside ``options``.
    """
    del rng
    opts = _mapping(options, "", list(OPTIONS),
                    [k for k, (req, _) in OPTIONS.items() if req])
    ob = _mapping(opts["observable"], "observable", ("name", "range", "unit"), ("name", "range"))
    rng_ = ob["range"]
    if (not isinstance(rng_, list) or len(rng_) != 2
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rng_)
            or not (math.isfinite(rng_[0]) and math.isfinite(rng_[1]) and rng_[0] < rng_[1])):
        raise OptionError("observable.range", rng_, "a list [lo, hi] of finite numbers, lo < hi")
    unit = ob.get("unit", "")
    if not isinstance(unit, str):
        raise OptionError("observable.unit", unit, "a string")
    observable = Observable(_name(ob["name"], "observable.name"), float(rng_[0]),
                            float(rng_[1]), unit)
    lo, hi = observable.lo, observable.hi

    pdecl = opts["parameters"]
    if isinstance(pdecl, Mapping):
        # ``name: null`` (a variant's patch) drops a declared parameter, as for ``tcc``
        pdecl = {n: d for n, d in pdecl.items() if d is not None}
    if not isinstance(pdecl, Mapping) or not pdecl:
        raise OptionError("parameters", pdecl, "a non-empty mapping name -> declaration")
    declared = {str(n): _parameter(str(n), d, f"parameters.{n}") for n, d in pdecl.items()}

    resolution = _resolution(opts["resolution"]) if opts.get("resolution") is not None else None
    grid_step = opts.get("grid_step")
    if grid_step is None:
        grid_step = (hi - lo) / DEFAULT_GRID_POINTS
    elif _number(grid_step, "grid_step", "a number > 0") <= 0:
        raise OptionError("grid_step", grid_step, "a number > 0")

    comps_raw = opts["components"]
    if not isinstance(comps_raw, list) or not comps_raw:
        raise OptionError("components", comps_raw, "a non-empty list of components")
    components: list[Component] = []
    extra: list[Parameter] = []
    used: set[str] = set()
    for i, craw in enumerate(comps_raw):
        path = f"components[{i}]"
        c = _mapping(craw, path, COMPONENT_KEYS, ("name", "shape", "yield"))
        cname = _name(c["name"], f"{path}.name")
        if any(x.name == cname for x in components):
            raise OptionError(f"{path}.name", cname, "a component name not used before")
        if c["shape"] not in SHAPES:
            raise OptionError(f"{path}.shape", c["shape"], f"one of {sorted(SHAPES)}")
        decl = SHAPES[c["shape"]]
        sopts = _shape_options(decl, c.get("options"), f"{path}.options")
        ctx = _Context(lo, hi, cname, path, extra)
        names = _shape_names(decl, c.get("params"), sopts, ctx, declared)
        convolve = c.get("convolve", resolution is not None)
        if not isinstance(convolve, bool):
            raise OptionError(f"{path}.convolve", convolve, "true or false")
        if convolve and resolution is None:
            raise OptionError(f"{path}.convolve", convolve,
                              "false (the model declares no resolution)")
        try:
            shape = decl.make(names, sopts, ctx)
        except OptionError:
            raise
        except ModelError as exc:
            raise OptionError(f"{path}.options", c.get("options"), f"valid options ({exc})"
                              ) from None
        yname = _name(c["yield"], f"{path}.yield")
        for pname, where in ((yname, f"{path}.yield"),
                             *((n, f"{path}.params") for n in shape.param_names)):
            if pname not in declared and all(p.name != pname for p in extra):
                raise OptionError(where, pname, f"a declared parameter (options.parameters "
                                  f"has {list(declared)})")
            used.add(pname)
        components.append(Component(cname, yname, shape, convolve))
    for n in declared:
        if n not in used:
            raise OptionError(f"parameters.{n}", pdecl[n], "a parameter read by a component "
                              "(this one is unused)")
    yields = {c.yield_param for c in components}
    params = ParameterSet(tuple(replace(p, is_yield=True) if p.name in yields else p
                                for p in (*declared.values(), *extra)))
    scan = opts.get("scan") or []
    if not isinstance(scan, list):
        raise OptionError("scan", scan, "a list of parameter names")
    for k, n in enumerate(scan):
        if n not in params.names:
            raise OptionError(f"scan[{k}]", n, f"a declared parameter ({list(params.names)})")
    disc = None
    if opts.get("discriminants") is not None:
        disc = build_discriminants(opts["discriminants"], observable, float(grid_step),
                                   resolution, [c.name for c in components])
    return MassModel(observable, components, params, resolution, float(grid_step),
                     scan_parameters=tuple(scan), discriminants=disc)


# --- discriminating observables -------------------------------------------------------------
DISCRIMINANT_KEYS = ("observables", "shapes", "model", "subtract")
_FIXED_SHAPE_KEYS = ("shape", "params", "options", "convolve", "fraction", "times")
#: grid nodes of a discriminant density
DISCRIMINANT_GRID = 4001


def _fixed_density(raw: Any, path: str, observable: Observable, grid_step: float,
                   resolution: Resolution | None, convolve_default: bool) -> np.ndarray:
    """The normalised density on the grid of ``observable`` (step ``grid_step``) of a shape
    of :data:`SHAPES` with fixed parameter values: ``{shape, params: {name: number or list},
    options, convolve, times}``; ``times`` (another such shape, not convolved) multiplies
    it before it is normalised (an exponential × positive polynomial)."""
    d = _mapping(raw, path, _FIXED_SHAPE_KEYS, ("shape",))
    if d["shape"] not in SHAPES:
        raise OptionError(f"{path}.shape", d["shape"], f"one of {sorted(SHAPES)}")
    decl = SHAPES[d["shape"]]
    sopts = _shape_options(decl, d.get("options"), f"{path}.options")
    given = _mapping(d.get("params") or {}, f"{path}.params", [p.name for p in decl.params])
    names: list[Any] = []
    plist: list[Parameter] = []
    for sp in decl.params:
        ppath = f"{path}.params.{sp.name}"
        if sp.is_list:
            order = sopts["order"]
            default = [0.0] * order if decl.name == "chebyshev" else _flat_angles(order)
            vals = given.get(sp.name, default)
            if not isinstance(vals, list) or len(vals) != order:
                raise OptionError(ppath, vals, f"a list of {order} numbers (options.order)")
            nm = [f"{sp.name}{k + 1}" for k in range(order)]
            plist += [Parameter(n, _number(v, f"{ppath}[{k}]"), fixed=True)
                      for k, (n, v) in enumerate(zip(nm, vals, strict=True))]
            names.append(nm)
        else:
            if sp.name not in given:
                raise OptionError(ppath, None, "a required number (missing)")
            plist.append(Parameter(sp.name, _number(given[sp.name], ppath), fixed=True))
            names.append(sp.name)
    convolve = d.get("convolve", convolve_default)
    if not isinstance(convolve, bool) or (convolve and resolution is None):
        raise OptionError(f"{path}.convolve", convolve,
                          "true or false (true only with a resolution)")
    try:
        shape = decl.make(names, sopts, _Context(observable.lo, observable.hi, "d", path))
        params = ParameterSet((Parameter("(yield)", 1.0, is_yield=True), *plist))
        model = Model1D(observable, [Component("d", "(yield)", shape, convolve)], params,
                        resolution if convolve else None, grid_step)
        dens = np.array(model.component_grid(0, params.values), dtype=float)
    except OptionError:
        raise
    except ModelError as exc:
        raise OptionError(path, dict(d), f"a valid fixed shape ({exc})") from None
    if d.get("times") is not None:
        if convolve:
            raise OptionError(f"{path}.times", d["times"], "absent (a convolved shape is not "
                              "multiplied)")
        dens = dens * _fixed_density(d["times"], f"{path}.times", observable, grid_step,
                                     None, False)
        h = float(np.diff(model.grid).mean())
        dens = dens / (h * (dens.sum() - 0.5 * (dens[0] + dens[-1])))
    if not np.all(np.isfinite(dens)):
        raise OptionError(path, dict(d), "a shape with a finite, non-zero integral")
    return dens


def build_discriminants(raw: Any, observable: Observable, grid_step: float,
                        resolution: Resolution | None, components: Sequence[str]
                        ) -> Discriminants:
    """The :class:`~toyengine.core.discriminants.Discriminants` of a declaration (the
    ``discriminants`` option; ``docs/models.md``)::

        discriminants:
          observables: [{name: m1, range: [0, 1], unit: GeV}]
          shapes:                       # fixed densities of one discriminant, by name
            peak: {shape: gaussian, params: {mu: 0.5, sigma: 0.08}}
            flat: {shape: exponential, params: {slope: 0.0}}
          model: [peak]                 # the model's own components: a shape per observable
          subtract:                     # the species the sWeights subtract
            - name: fake
              expected: 1500            # its expected count
              shapes: [flat]
              observable:               # its density in the fitted observable: parts
                - {shape: exponential, params: {slope: -0.01}, fraction: 1}
          weights: splot                # or cows: custom orthogonal weight functions

    Raises
    ------
    OptionError
        A field is invalid; its path starts with ``discriminants``.
    """
    root = "discriminants"
    d = _mapping(raw, root, (*DISCRIMINANT_KEYS, "weights"), DISCRIMINANT_KEYS)
    method = d.get("weights", "splot")
    if method not in ("splot", "cows"):
        raise OptionError(f"{root}.weights", method, "'splot' (classic sWeights, default) or "
                          "'cows' (custom orthogonal weight functions, I(m) = 1)")
    obs_raw = d["observables"]
    if not isinstance(obs_raw, list) or not obs_raw:
        raise OptionError(f"{root}.observables", obs_raw, "a non-empty list of {name, range}")
    names, ranges, units = [], [], []
    for i, o in enumerate(obs_raw):
        p = f"{root}.observables[{i}]"
        od = _mapping(o, p, ("name", "range", "unit"), ("name", "range"))
        r = od["range"]
        if (not isinstance(r, list) or len(r) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                           and math.isfinite(v) for v in r) or not r[0] < r[1]):
            raise OptionError(f"{p}.range", r, "a list [lo, hi] of finite numbers, lo < hi")
        names.append(_name(od["name"], f"{p}.name"))
        ranges.append((float(r[0]), float(r[1])))
        unit = od.get("unit", "")
        if not isinstance(unit, str):
            raise OptionError(f"{p}.unit", unit, "a string")
        units.append(unit)
    shapes_raw = d["shapes"]
    if not isinstance(shapes_raw, Mapping) or not shapes_raw:
        raise OptionError(f"{root}.shapes", shapes_raw, "a mapping name -> {shape, params}")

    def per_observable(lst: Any, path: str) -> tuple[Density1D, ...]:
        if not isinstance(lst, list) or len(lst) != len(names):
            raise OptionError(path, lst, f"a list of {len(names)} shape names (one per "
                              "discriminant)")
        out = []
        for j, key in enumerate(lst):
            if key not in shapes_raw:
                raise OptionError(f"{path}[{j}]", key, f"one of {sorted(shapes_raw)}")
            lo, hi = ranges[j]
            ob = Observable(names[j], lo, hi, units[j])
            dens = _fixed_density(shapes_raw[key], f"{root}.shapes.{key}", ob,
                                  (hi - lo) / (DISCRIMINANT_GRID - 1), None, False)
            out.append(Density1D(np.linspace(lo, hi, len(dens)), dens))
        return tuple(out)

    species = [Species("(model)", per_observable(d["model"], f"{root}.model"))]
    sub = d["subtract"]
    if not isinstance(sub, list) or not sub:
        raise OptionError(f"{root}.subtract", sub, "a non-empty list of species")
    for i, s in enumerate(sub):
        p = f"{root}.subtract[{i}]"
        sd = _mapping(s, p, ("name", "expected", "shapes", "observable"),
                      ("name", "expected", "shapes", "observable"))
        sname = _name(sd["name"], f"{p}.name")
        if sname in components or any(x.name == sname for x in species):
            raise OptionError(f"{p}.name", sname, "a name no component or species has")
        expected = _number(sd["expected"], f"{p}.expected", "a number >= 0")
        if expected < 0:
            raise OptionError(f"{p}.expected", expected, "a number >= 0")
        parts = sd["observable"]
        single = isinstance(parts, Mapping)
        parts = [parts] if single else parts
        if not isinstance(parts, list) or not parts:
            raise OptionError(f"{p}.observable", parts, "a shape or a list of shapes with "
                              "fractions")
        dens = 0.0
        total = 0.0
        for k, part in enumerate(parts):
            pp = f"{p}.observable" if single else f"{p}.observable[{k}]"
            frac = _number(part.get("fraction", 1.0) if isinstance(part, Mapping) else None,
                           f"{pp}.fraction", "a number > 0")
            if not frac > 0:
                raise OptionError(f"{pp}.fraction", frac, "a number > 0")
            dens = dens + frac * _fixed_density(part, pp, observable, grid_step, resolution,
                                                resolution is not None)
            total += frac
        species.append(Species(sname, per_observable(sd["shapes"], f"{p}.shapes"),
                               expected, np.asarray(dens, dtype=float) / total))
    return Discriminants(tuple(names), tuple(ranges), tuple(units), tuple(species), method)
