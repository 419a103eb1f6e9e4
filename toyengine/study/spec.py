"""Study files: parse, validate once, and freeze into a :class:`StudySpec`.

A study file is YAML (read by :func:`toyengine.study.safeyaml.load_yaml`: bounded alias expansion,
no duplicate keys) with a closed schema declared in :mod:`toyengine.study.studyfile`; builder
options are declared by each builder (:mod:`toyengine.models.options`). Validation happens before
any task starts and raises one :class:`~toyengine.errors.SpecError` that names the field
(its path in the file), the bad value and what was expected. The format is documented in
``docs/study-format.md``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ModelError, OptionError, SpecError
from ..models import (
    BUILDERS,
    PluginNotAllowed,
    check_model,
    get_builder,
    plugin_source,
)
from ..models.options import OptionsError, describe_validation_error, format_path
from ..models.protocol import ToyModel
from .kinds import KIND_INFO, kind_info
from .safeyaml import load_yaml
from .seeds import model_rng
from .studyfile import KINDS, MAX_SEED, MAX_TOYS, MAX_VARIANTS, StudyFile

__all__ = ["KINDS", "StudySpec", "Variant", "build_model", "load_fixed_data", "load_spec"]

#: per-process cache of built models: a worker builds each (study, plug-in code, variant,
#: model) once and every toy of every chunk it runs shares that likelihood core.
_MODEL_CACHE: dict[tuple[str, tuple[tuple[str, str], ...], int, str], Any] = {}
_MODEL_CACHE_MAX = 8  # a Dalitz model holds ~15 MB of cached amplitudes

@dataclass(frozen=True)
class Variant:
    """One variant of the base models: patches applied to some models.

    ``random`` variants give the model builders a random generator derived from the root
    seed and the variant index (template smearing, parameter draws).

    ``mode`` says where the patched model enters: ``"generate"`` (default) — the variant's
    generator makes the toys and the study's hypotheses fit them (LHCb, Nature Physics 18
    (2022) 751, Methods: ensembles generated with each alternative, fitted with the default
    model); ``"fit"`` — the nominal generator's toys (the nominal variant's very data sets,
    common random numbers) are fitted with the variant's patched hypotheses ("fit with the
    alternative": the J^P and finite-|g| rows of LHCb, Nature Physics 18 (2022) 751 and
    Nature Communications 13 (2022) 3351, "Systematic uncertainties").
    """

    index: int
    name: str
    group: str
    separate: bool
    patches: Mapping[str, Any]
    generate: str
    random: bool
    mode: str = "generate"

    @property
    def fits_alternative(self) -> bool:
        """The variant fits the nominal toys with its patched hypotheses (``mode: fit``)."""
        return self.mode == "fit"


@dataclass(frozen=True)
class StudySpec:
    """A validated study. Build with :func:`load_spec` (or :meth:`from_text`)."""

    name: str
    kind: str
    seed: int
    toys: int
    models: Mapping[str, Any]
    generate: str
    hypotheses: tuple[str, ...]
    variants: tuple[Variant, ...]
    fit: Mapping[str, Any]
    test: Mapping[str, Any]
    poi: tuple[str, ...]
    data: str | None
    chunk_size: int | None
    text: str
    base_dir: str
    description: str = ""
    #: common random numbers across variants (default); False: independent ensembles
    paired: bool = True
    #: fit each alternative generator to the nominal model's Asimov data set first
    reference_fit: bool = False
    #: importance sampling (``{"inject": [model names], "fraction": a}``, and with
    #: ``"points": {parameter: [K values]}`` one injected model at K points), None without
    importance: Mapping[str, Any] | None = None
    #: ``(module, source)`` of each plug-in builder's code at validation
    #: (:func:`toyengine.models.plugin_source`), sorted; empty without plug-ins. Not in the
    #: digest: a store records it apart, so that a changed plug-in is named as such
    plugin_sources: tuple[tuple[str, str], ...] = ()

    @cached_property
    def digest(self) -> str:
        """sha256 of everything that determines the toys except their count (so that
        ``--toys`` can extend a store) and the chunk size (which never changes results).
        Computed once per spec: :func:`build_model` keys its cache with it."""
        payload = {
            "kind": self.kind, "seed": self.seed, "models": self.models,
            "generate": self.generate, "hypotheses": self.hypotheses,
            "variants": [_variant_payload(v) for v in self.variants],
            # settings added later enter only when used: older digests stay valid
            "fit": {k: v for k, v in self.fit.items() if not (k == "profile" and v is None)},
            "test": self.test, "data": self.data, "paired": self.paired,
            "reference_fit": self.reference_fit,
        }
        if self.importance is not None:
            payload["importance"] = self.importance
        blob = json.dumps(payload, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def restart_sets(self) -> list[tuple[str, list[str], int]]:
        """``fit.restarts`` as ``(path in the study file, params, points)`` per set, in order:
        one set (``fit.restarts``) or a list (``fit.restarts[i]``); empty without."""
        r = self.fit.get("restarts")
        if r is None:
            return []
        if isinstance(r, Mapping):
            return [("fit.restarts", list(r["params"]), int(r["points"]))]
        return [(f"fit.restarts[{i}]", list(one["params"]), int(one["points"]))
                for i, one in enumerate(r)]

    def with_overrides(self, toys: int | None = None, seed: int | None = None) -> StudySpec:
        """A copy with ``--toys``/``--seed`` from the command line applied (validated)."""
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        if toys is not None:
            kw["toys"] = _check_int(toys, "toys (--toys)", 1, MAX_TOYS)
        if seed is not None:
            kw["seed"] = _check_int(seed, "seed (--seed)", 0, MAX_SEED)
        return StudySpec(**kw)

    def model_config(self, variant: Variant, model: str) -> dict[str, Any]:
        """The model description of ``model`` with the variant's patch deep-merged in; a
        parameter the patch sets to ``None`` loses the base model's override."""
        base = copy.deepcopy(dict(self.models[model]))
        patch = variant.patches.get(model)
        if not patch:
            return base
        out = _deep_merge(base, patch)
        params = out.get("parameters")
        if params:
            kept = {k: v for k, v in params.items() if v is not None}
            if kept:
                out["parameters"] = kept
            else:
                out.pop("parameters")
        return out

    def data_path(self) -> Path | None:
        if self.data is None:
            return None
        p = Path(self.data)
        return p if p.is_absolute() else Path(self.base_dir) / p

    @classmethod
    def from_text(cls, text: str, source: str = "<string>", base_dir: str = ".") -> StudySpec:
        """Parse and validate the text of a study file (``base_dir``: where relative
        ``data`` paths are resolved)."""
        return _validate(load_yaml(text, source), text, source, base_dir)


def build_model(spec: StudySpec, variant: Variant, name: str) -> ToyModel:
    """Build model ``name`` for ``variant`` (cached per process).

    Raises
    ------
    ModelError
        The builder failed, or returned something that is not a
        :class:`~toyengine.models.protocol.ToyModel` (the missing members named).
    """
    key_variant = variant.index if (variant.random or variant.patches.get(name)) else -1
    key = (spec.digest, spec.plugin_sources, key_variant, name)
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    cfg = spec.model_config(variant, name)
    rng = model_rng(spec.seed, variant.index) if variant.random else None
    model = check_model(_builder_of(spec, cfg["builder"])(cfg.get("options") or {}, rng),
                        cfg["builder"])
    overrides = cfg.get("parameters")
    if overrides:
        model.parameters = model.parameters.updated(overrides)
    # room for every model of the study (an importance-sampled study evaluates all its
    # injected models on every toy; rebuilding a Dalitz model costs ~1 s)
    while len(_MODEL_CACHE) >= max(_MODEL_CACHE_MAX, len(spec.models) + 1):
        _MODEL_CACHE.pop(next(iter(_MODEL_CACHE)))
    _MODEL_CACHE[key] = model
    return model


def _builder_of(spec: StudySpec, name: str) -> Any:
    """The build function of builder ``name`` of ``spec``: the plug-in modules the study
    was validated with are allowed (a worker receives the validated spec from its client)
    and must hold the same code."""
    sources = dict(spec.plugin_sources)
    return get_builder(name, allowed=sources, sources=sources)


def load_fixed_data(spec: StudySpec, model: ToyModel) -> Any:
    """The study's fixed data set (kinds that refit one data set), read by the model's
    ``load_data``; None for a study that generates its toys."""
    path = spec.data_path()
    return None if path is None else model.load_data(path)


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study file."""
    p = Path(path)
    if not p.is_file():
        raise SpecError("(file)", str(p), "an existing study file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("(file)", str(p), f"a readable UTF-8 text file ({exc})") from None
    return StudySpec.from_text(text, str(p), str(p.parent.resolve()))


# --- validation ---------------------------------------------------------------------------
def _deep_merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(dict(out[k]), v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _check_int(v: Any, path: str, minimum: int, maximum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(path, v, "an integer")
    if not minimum <= v <= maximum:
        raise SpecError(path, v, f"an integer in [{minimum}, {maximum}]")
    return v


def _dump(model: Any) -> Any:
    """Plain data of a validated (sub)model, unset keys left out."""
    return model.model_dump(exclude_none=True, by_alias=True)


def _validate(raw: Any, text: str, source: str, base_dir: str) -> StudySpec:
    if not isinstance(raw, Mapping):
        raise SpecError("(top level)", raw, "a mapping (a study file)", source)
    try:
        f = StudyFile.model_validate(raw)
    except ValidationError as exc:
        loc, value, expected = describe_validation_error(exc, raw, StudyFile)
        raise SpecError(format_path(loc) or "(top level)", value, expected, source) from None

    models = {name: _dump(m) for name, m in f.models.items()}
    names = sorted(models)
    sources: dict[str, str] = {}
    for name, m in f.models.items():
        try:
            get_builder(m.builder)
            found = plugin_source(m.builder)
        except PluginNotAllowed as exc:
            raise SpecError(f"models.{name}.builder", m.builder, f"an allowed plug-in ({exc})",
                            source) from None
        except ModelError as exc:
            raise SpecError(f"models.{name}.builder", m.builder, f"a model builder ({exc})",
                            source) from None
        if found is not None:
            sources[found[0]] = found[1]
        _check_options(m.builder, m.options, f"models.{name}.options", source)
    if f.generate not in models:
        raise SpecError("generate", f.generate, f"one of the model names {names}", source)
    hyps = [f.hypotheses] if isinstance(f.hypotheses, str) else list(f.hypotheses)
    for i, h in enumerate(hyps):
        if h not in models:
            raise SpecError(f"hypotheses[{i}]", h, f"one of the model names {names}", source)
    if len(set(hyps)) != len(hyps):
        raise SpecError("hypotheses", hyps, "distinct model names", source)

    fit = f.fit.model_dump() if f.fit is not None else {"starts": 1, "minos": False,
                                                         "strategy": None, "hesse": None,
                                                         "profile": None, "scan": None,
                                                         "global_observables": "sample"}
    # options added later: a study without them keeps its digest
    if fit.get("restarts") is None:
        fit.pop("restarts", None)
    for later in ("line", "edges", "screen", "free"):
        if fit.get("profile") is not None and not fit["profile"].get(later):
            del fit["profile"][later]
    if fit.get("scan") is not None and fit["scan"].get("spacing") is None:
        del fit["scan"]["spacing"]
    kind = kind_info(f.kind)
    if fit["hesse"] is None:  # HESSE is ~half the cost of a Z_c(4100)- fit
        fit["hesse"] = kind.hesse
    if fit.get("scan") is not None and not kind.nested_test:
        scan_kinds = [k.name for k in KIND_INFO.values() if k.nested_test]
        raise SpecError("fit.scan", fit["scan"], f"no fit.scan (only kinds {scan_kinds} have one)",
                        source)
    test = _dump(f.test) if f.test is not None else {}
    for key in ("h0", "h1"):
        if key in test and test[key] not in hyps:
            raise SpecError(f"test.{key}", test[key], f"one of the hypotheses {hyps}", source)
    if kind.test_required and not ("h0" in test and "h1" in test):
        raise SpecError("test", test, f"h0 and h1 (hypothesis names) for kind {f.kind!r}",
                        source)

    importance = _validate_importance(f, kind.nested_test, fit, names, source)
    variants = _validate_variants(f, models, source)
    poi = f.poi.split() if isinstance(f.poi, str) else list(f.poi or [])
    data = f.data
    if data is not None:
        dp = Path(data) if Path(data).is_absolute() else Path(base_dir) / data
        if not dp.is_file():
            raise SpecError("data", data, f"an existing data file (looked for {dp})", source)
    chunk_size = f.chunk_size if isinstance(f.chunk_size, int) else None

    spec = StudySpec(name=f.name, kind=f.kind, seed=f.seed, toys=f.toys, models=models,
                     generate=f.generate, hypotheses=tuple(hyps), variants=variants, fit=fit,
                     test=test, poi=tuple(poi), data=data, chunk_size=chunk_size,
                     text=text, base_dir=base_dir, description=f.description,
                     paired=f.paired,
                     reference_fit=(kind.reference_fit if f.reference_fit is None
                                    else f.reference_fit),
                     importance=importance, plugin_sources=tuple(sorted(sources.items())))
    _check_fit_mode(spec, source)
    _validate_by_building(spec, source)
    return spec


def _check_options(builder: str, options: Mapping[str, Any] | None, path: str,
                   source: str) -> None:
    """Check ``options`` against the builder's declaration; errors under ``path``. Plug-in
    builders (not registered) check their options themselves, when built."""
    if builder not in BUILDERS:
        return
    try:
        BUILDERS[builder].options.parse(options)
    except OptionsError as exc:
        where = f"{path}.{format_path(exc.loc)}" if exc.loc else path
        where = where.replace(".[", "[")
        value = exc.value if exc.loc else options
        raise SpecError(where, value, exc.expected, source) from None


def _validate_importance(f: StudyFile, nested_test: bool, fit: Mapping[str, Any],
                         names: list[str], source: str) -> dict[str, Any] | None:
    """``importance:`` as plain data: only for nested toy tests (significance) without a
    look-elsewhere scan (the scans of injected toys are not null scans); ``inject`` names
    distinct models other than the generator."""
    imp = f.importance
    if imp is None:
        return None
    if not nested_test:
        kinds = [k.name for k in KIND_INFO.values() if k.nested_test]
        raise SpecError("importance", _dump(imp), f"no importance (only kinds {kinds} have "
                        "one)", source)
    if fit.get("scan") is not None:
        raise SpecError("importance", _dump(imp), "no importance together with fit.scan (the "
                        "look-elsewhere calibration needs toys of the null model)", source)
    for i, m in enumerate(imp.inject):
        if m not in names or m == f.generate:
            raise SpecError(f"importance.inject[{i}]", m, f"one of the model names {names} "
                            f"other than generate ({f.generate!r})", source)
    if len(set(imp.inject)) != len(imp.inject):
        raise SpecError("importance.inject", imp.inject, "distinct model names", source)
    out: dict[str, Any] = {"inject": list(imp.inject), "fraction": float(imp.fraction)}
    if imp.points is not None:
        out["points"] = _importance_points(imp.points, imp.inject, source)
    if imp.family is not None:
        if len(imp.inject) != 1 or imp.points is not None:
            raise SpecError("importance.family", _dump(imp.family), "exactly one model in "
                            "importance.inject and no importance.points (the family is that "
                            "model at a signal drawn for each toy)", source)
        out["family"] = {"masses": list(imp.family.masses), "widths": list(imp.family.widths),
                         "coupling": list(imp.family.coupling),
                         "strength": float(imp.family.strength),
                         "spread": float(imp.family.spread)}
    return out


def _importance_points(points: Mapping[str, Any], inject: list[str],
                       source: str) -> dict[str, list[float]]:
    """``importance.points`` as columns of one length K (a number is a column of K equal
    values); ``inject`` must name exactly one model, the one evaluated at the points."""
    if len(inject) != 1:
        raise SpecError("importance.inject", inject, "exactly one model name when "
                        "importance.points is given (that model is injected at each point)",
                        source)
    if not points:
        raise SpecError("importance.points", {}, "at least one parameter column", source)
    lengths = {len(v) for v in points.values() if isinstance(v, list)}
    if len(lengths) > 1:
        raise SpecError("importance.points", {k: len(v) for k, v in points.items()
                                              if isinstance(v, list)},
                        "columns of one length K (a number stands for K equal values)", source)
    k = lengths.pop() if lengths else 1
    return {name: [float(x) for x in v] if isinstance(v, list) else [float(v)] * k
            for name, v in points.items()}


def _validate_variants(f: StudyFile, models: Mapping[str, Any],
                       source: str) -> tuple[Variant, ...]:
    if not f.variants:
        return (Variant(0, "nominal", "nominal", False, {}, f.generate, False),)
    names = sorted(models)
    total = sum(v.count or 1 for v in f.variants)
    if total > MAX_VARIANTS:
        raise SpecError("variants", f"{total} variants", f"at most {MAX_VARIANTS} variants "
                        "(counts added up)", source)
    out: list[Variant] = []
    seen: set[str] = set()
    for i, v in enumerate(f.variants):
        path = f"variants[{i}]"
        gen = v.generate or f.generate
        if gen not in models:
            raise SpecError(f"{path}.generate", gen, f"one of the model names {names}", source)
        patches = {m: _dump(p) for m, p in (v.models or {}).items()}
        for mname, patch in patches.items():
            if mname not in models:
                raise SpecError(f"{path}.models.{mname}", mname,
                                f"one of the model names {names}", source)
            if "options" in patch:
                merged = _deep_merge(dict(models[mname].get("options") or {}),
                                     patch["options"])
                _check_options(models[mname]["builder"], merged,
                               f"{path}.models.{mname}.options", source)
        if v.count is None:
            expanded = [(v.name, False)]
        else:
            expanded = [(f"{v.name}_{k:04d}", True) for k in range(v.count)]
        for n, random in expanded:
            if n in seen:
                raise SpecError(f"{path}.name", n, "a unique variant name", source)
            seen.add(n)
            out.append(Variant(len(out), n, v.group or v.name, v.separate, patches, gen,
                               random, v.mode))
    return tuple(out)


def _variant_payload(v: Variant) -> dict[str, Any]:
    """A variant's part of the study digest; ``mode`` enters only when it is not the
    default, so that the digests of studies written before it existed stay valid."""
    out = dict(v.__dict__)
    if out.get("mode") == "generate":
        out.pop("mode")
    return out


def _check_fit_mode(spec: StudySpec, source: str) -> None:
    """A ``mode: fit`` variant must fit the nominal toys with patched hypotheses: a kind
    that generates toys, a paired study, the nominal generator unchanged and at least one
    hypothesis patched."""
    fit_variants = [v for v in spec.variants if v.fits_alternative]
    if not fit_variants:
        return
    kind = kind_info(spec.kind)
    base = spec.variants[0]
    for v in fit_variants:
        path = f"variants[{v.name}].mode"
        if kind.one_data_set or kind.toy_test:
            allowed = [k.name for k in KIND_INFO.values()
                       if not (k.one_data_set or k.toy_test)]
            raise SpecError(path, v.mode, f"'generate' (mode 'fit' only for kinds {allowed})",
                            source)
        if not spec.paired:
            raise SpecError(path, v.mode, "'generate' (mode 'fit' fits the nominal variant's "
                            "data sets: it needs paired: true)", source)
        if v.index == 0:
            raise SpecError(path, v.mode, "'generate' (the first variant is the nominal one "
                            "the others are compared with)", source)
        if spec.model_config(v, v.generate) != spec.model_config(base, base.generate):
            raise SpecError(path, v.mode, f"'generate', or a variant that leaves the generator "
                            f"{v.generate!r} as the nominal variant's (mode 'fit' fits the "
                            "nominal toys; a patched hypothesis that also generates changes "
                            "the data)", source)
        if all(spec.model_config(v, h) == spec.model_config(base, h)
               for h in spec.hypotheses):
            raise SpecError(path, v.mode, f"'generate', or patches that change a hypothesis "
                            f"{list(spec.hypotheses)} (mode 'fit' fits with the patched "
                            "hypotheses)", source)


#: what validation needs of a built model — its parameters and derived names — by
#: (builder, options, random-variant key); re-validating a study (or a variant with the
#: same options) then costs no model build. Models themselves are not kept.
_BUILT: dict[str, tuple[Any, tuple[str, ...]]] = {}
_BUILT_MAX = 512
#: data files already read by a model: (path, size, mtime, builder, options) keys
_DATA_OK: set[str] = set()


def _built(spec: StudySpec, v: Variant, mname: str) -> tuple[Any, tuple[str, ...], Any]:
    """(parameters, derived names, model or None if cached) of model ``mname`` for variant
    ``v``, parameter overrides not applied."""
    cfg = spec.model_config(v, mname)
    rng_key = [spec.seed, v.index] if v.random else None
    key = json.dumps([cfg["builder"], cfg.get("options"), rng_key, spec.plugin_sources],
                     sort_keys=True)
    if key in _BUILT:
        return (*_BUILT[key], None)
    rng = model_rng(spec.seed, v.index) if v.random else None
    model = check_model(_builder_of(spec, cfg["builder"])(cfg.get("options") or {}, rng),
                        cfg["builder"])
    entry = (model.parameters, tuple(model.derived_names))
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = entry
    return (*entry, model)


def _validate_by_building(spec: StudySpec, source: str) -> None:
    """Build the nominal variant's models (and those of a variant that overrides their
    parameters), so that parameter names fail now, not on a worker; check ``poi`` names
    and the data file.

    The options of every variant were already checked against the builder's declaration
    (:func:`_check_options`); for a builder whose models are expensive to build
    (``build_every_variant = False`` in its declaration: the Dalitz builders), a variant
    that only changes options is not built here (a study of 100 Dalitz-model variants
    would build 100 normalisation grids before its first toy), but when the plan needs
    it; the models of the other builders are built for every variant, so that their
    cross-field checks (a component reading a dropped parameter) fail now. Only a ``poi``
    not found among the parameters of the models built so far makes the remaining
    variants' models be built, before it is refused. Plug-in builders, whose options have
    no declaration, are built for every variant as before (one of each random variant
    group)."""
    seen_random = False
    params: set[str] = set()
    deferred: list[tuple[Variant, str]] = []
    for v in spec.variants:
        injected = spec.importance["inject"] if spec.importance else ()
        for mname in dict.fromkeys((*spec.hypotheses, v.generate, *injected)):
            cfg = spec.model_config(v, mname)
            declared = cfg["builder"] in BUILDERS
            if (v.index > 0 and declared and not cfg.get("parameters")
                    and not BUILDERS[cfg["builder"]].options.build_every_variant):
                deferred.append((v, mname))
                continue
            if v.random and v.index > 0 and not declared:
                if seen_random:
                    continue
                seen_random = True
            _add_model_parameters(spec, v, mname, params, source)
    missing = [p for p in spec.poi if p not in params]
    if missing:
        for v, mname in deferred:
            _add_model_parameters(spec, v, mname, params, source)
    for i, p in enumerate(spec.poi):
        if p not in params:
            raise SpecError(f"poi[{i}]", p, f"a parameter of the models {sorted(params)}",
                            source)
    if spec.data is not None:
        _check_data(spec, source)


def _add_model_parameters(spec: StudySpec, v: Variant, mname: str, params: set[str],
                          source: str) -> None:
    """Build model ``mname`` of variant ``v`` (or take what validation needs of it from
    :data:`_BUILT`), apply its parameter overrides and add its parameter and derived names
    to ``params``; a failure is a :class:`SpecError` naming the model's path."""
    patched = bool(v.patches.get(mname))
    path = f"variants[{v.name}].models.{mname}" if patched else f"models.{mname}"
    cfg = spec.model_config(v, mname)
    try:
        parameters, derived, model = _built(spec, v, mname)
    except SpecError:
        raise
    except OptionError as exc:
        where = f"{path}.options.{exc.path}" if exc.path else f"{path}.options"
        raise SpecError(where, exc.value, exc.expected, source) from None
    except ModelError as exc:
        raise SpecError(f"{path}.options", cfg.get("options"),
                        f"a buildable model ({exc})", source) from None
    overrides = cfg.get("parameters")
    if overrides:
        try:
            parameters = parameters.updated(overrides)
        except (ModelError, TypeError, ValueError) as exc:
            raise SpecError(f"{path}.parameters", overrides, f"parameters of the "
                            f"model ({exc})", source) from None
    elif model is not None:  # built just now, as build_model builds it: kept for the
        _keep_built(spec, v, mname, model)  # data check, `show` and the plan
    params.update(parameters.names)
    params.update(derived)


def _keep_built(spec: StudySpec, variant: Variant, name: str, model: ToyModel) -> None:
    """Put a model validation built (no parameter overrides) into :func:`build_model`'s
    cache, so that the same process does not build it again."""
    key_variant = variant.index if (variant.random or variant.patches.get(name)) else -1
    key = (spec.digest, spec.plugin_sources, key_variant, name)
    if key not in _MODEL_CACHE:
        if len(_MODEL_CACHE) >= _MODEL_CACHE_MAX:
            _MODEL_CACHE.pop(next(iter(_MODEL_CACHE)))
        _MODEL_CACHE[key] = model


def _check_data(spec: StudySpec, source: str) -> None:
    path = spec.data_path()
    assert path is not None
    v = spec.variants[0]
    cfg = spec.model_config(v, v.generate)
    st = path.stat()
    key = json.dumps([str(path), st.st_size, st.st_mtime_ns, cfg["builder"],
                      cfg.get("options"), spec.plugin_sources], sort_keys=True)
    if key in _DATA_OK:
        return
    try:
        check_data_file(path)
        load_fixed_data(spec, build_model(spec, v, v.generate))
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader error is a bad data file
        raise SpecError("data", spec.data, f"a data file the model can read ({exc})",
                        source) from None
    _DATA_OK.add(key)


def check_data_file(path: Path | None) -> None:
    """Open an ``.npz`` data file without unpickling and check every array: numbers (or
    text, for metadata), floats finite.

    Raises
    ------
    ValueError
        Not an ``.npz`` archive, an object (pickled) array, a non-numeric or non-finite
        array; the message names the array.
    """
    import zipfile

    import numpy as np

    if path is None:
        return
    if not zipfile.is_zipfile(path):
        msg = "not an .npz archive"
        raise ValueError(msg)
    with np.load(path, allow_pickle=False) as f:
        for key in f.files:
            try:
                a = f[key]
            except ValueError as exc:
                msg = f"array {key!r}: {exc}"
                raise ValueError(msg) from None
            if a.dtype.kind not in "biufUS":
                msg = f"array {key!r} has dtype {a.dtype}; expected numbers or text"
                raise ValueError(msg)
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                msg = f"array {key!r} has NaN or infinite entries"
                raise ValueError(msg)
