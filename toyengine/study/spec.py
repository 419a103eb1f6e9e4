"""Study files: parse, validate once, and freeze into a :class:`StudySpec`.

A study file is YAML with a closed schema (unknown keys are errors). Validation happens
before any task starts and raises one :class:`~toyengine.errors.SpecError` that names the
field (its path in the file), the bad value and what was expected. The format is
documented in ``docs/study-format.md``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ModelError, SpecError
from ..models import BUILDERS, get_builder
from .seeds import variant_rng

__all__ = ["KINDS", "StudySpec", "Variant", "build_model", "load_spec"]

#: per-process cache of built models: a worker builds each (study, variant, model) once
#: and every toy of every chunk it runs shares that likelihood core.
_MODEL_CACHE: dict[tuple[str, int, str], Any] = {}
_MODEL_CACHE_MAX = 8  # a Dalitz model holds ~15 MB of cached amplitudes

#: study kinds and the settings they preset (see ARCHITECTURE.md, "One shape for every toy")
KINDS = {
    "pulls": "generate from the nominal model, fit it: pull mean/width, bias, coverage",
    "fit_bias": "same as pulls (pseudoexperiments from the nominal fit)",
    "significance": "generate under H0, fit H0 and H1: t = Δ(−2 ln L) vs χ²(ndof)",
    "jp_rejection": "generate under the disfavoured J^P, fit both: rejection level",
    "model_variation": "generate from alternative models, fit the default: shifts per source",
    "template_smearing": "fixed data set, smeared templates per variant, fit H0 and H1",
    "parameter_variation": "fixed data set, random draws of fixed parameters per variant",
    "goodness_of_fit": "generate from nominal, fit nominal: toy-based p-value of a GOF statistic",
    "cross_check": "generate with one model, fit with another (e.g. U vs BW ensembles)",
}
TOP_KEYS = {"name", "kind", "description", "seed", "toys", "models", "generate", "data",
            "hypotheses", "test", "variants", "fit", "poi", "chunk_size", "format_version"}
MODEL_KEYS = {"builder", "options", "parameters"}
PARAM_KEYS = {"value", "limits", "fixed", "constraint", "step"}
FIT_KEYS = {"starts", "minos", "strategy", "hesse"}
#: kinds whose summaries read only −ln L and fitted values: their fits skip HESSE unless
#: ``fit.hesse: true`` (HESSE is ~half the cost of a Z_c(4100)- fit)
NO_HESSE_KINDS = frozenset({"significance", "jp_rejection"})
TEST_KEYS = {"h0", "h1", "ndof", "observed"}
VARIANT_KEYS = {"name", "group", "separate", "models", "generate", "count"}


@dataclass(frozen=True)
class Variant:
    """One variant of the base models: patches applied to some models.

    ``random`` variants give the model builders a random generator derived from the root
    seed and the variant index (template smearing, parameter draws).
    """

    index: int
    name: str
    group: str
    separate: bool
    patches: Mapping[str, Any]
    generate: str
    random: bool


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

    @property
    def digest(self) -> str:
        """sha256 of everything that determines the toys except their count (so that
        ``--toys`` can extend a store) and the chunk size (which never changes results)."""
        payload = {
            "kind": self.kind, "seed": self.seed, "models": self.models,
            "generate": self.generate, "hypotheses": self.hypotheses,
            "variants": [v.__dict__ for v in self.variants], "fit": self.fit,
            "test": self.test, "data": self.data,
        }
        blob = json.dumps(payload, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def with_overrides(self, toys: int | None = None, seed: int | None = None) -> StudySpec:
        """A copy with ``--toys``/``--seed`` from the command line applied (validated)."""
        kw = dict(self.__dict__)
        if toys is not None:
            kw["toys"] = _check_int(toys, "toys (--toys)", minimum=1)
        if seed is not None:
            kw["seed"] = _check_int(seed, "seed (--seed)", minimum=0)
        return StudySpec(**kw)

    def model_config(self, variant: Variant, model: str) -> dict[str, Any]:
        """The model description of ``model`` with the variant's patch deep-merged in."""
        base = copy.deepcopy(dict(self.models[model]))
        patch = variant.patches.get(model)
        return _deep_merge(base, patch) if patch else base

    def data_path(self) -> Path | None:
        if self.data is None:
            return None
        p = Path(self.data)
        return p if p.is_absolute() else Path(self.base_dir) / p

    @classmethod
    def from_text(cls, text: str, source: str = "<string>", base_dir: str = ".") -> StudySpec:
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError("(file)", source, f"valid YAML ({exc})", source) from None
        return _validate(raw, text, source, base_dir)


def build_model(spec: StudySpec, variant: Variant, name: str) -> Any:
    """Build model ``name`` for ``variant`` (cached per process)."""
    key_variant = variant.index if (variant.random or variant.patches.get(name)) else -1
    key = (spec.digest, key_variant, name)
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    cfg = spec.model_config(variant, name)
    rng = variant_rng(spec.seed, variant.index) if variant.random else None
    model = get_builder(cfg["builder"])(cfg.get("options") or {}, rng)
    overrides = cfg.get("parameters")
    if overrides:
        model.parameters = model.parameters.updated(overrides)
    if len(_MODEL_CACHE) >= _MODEL_CACHE_MAX:
        _MODEL_CACHE.pop(next(iter(_MODEL_CACHE)))
    _MODEL_CACHE[key] = model
    return model


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study file."""
    p = Path(path)
    if not p.is_file():
        raise SpecError("(file)", str(p), "an existing study file")
    return StudySpec.from_text(p.read_text(), str(p), str(p.parent.resolve()))


# --- validation ---------------------------------------------------------------------------
def _deep_merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(dict(out[k]), v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _check_keys(obj: Any, allowed: set[str], path: str, source: str,
                required: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    if not isinstance(obj, Mapping):
        raise SpecError(path or "(top level)", obj, "a mapping", source)
    for k in obj:
        if k not in allowed:
            where = f"{path}.{k}" if path else str(k)
            raise SpecError(where, obj[k], f"no such key; allowed keys: {sorted(allowed)}", source)
    for k in sorted(required):
        if k not in obj:
            where = f"{path}.{k}" if path else k
            raise SpecError(where, None, "a required key (missing)", source)


def _check_int(v: Any, path: str, minimum: int | None = None, source: str | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(path, v, "an integer", source)
    if minimum is not None and v < minimum:
        raise SpecError(path, v, f"an integer >= {minimum}", source)
    return v


def _check_str(v: Any, path: str, source: str) -> str:
    if not isinstance(v, str) or not v:
        raise SpecError(path, v, "a non-empty string", source)
    return v


def _check_bool(v: Any, path: str, source: str) -> bool:
    if not isinstance(v, bool):
        raise SpecError(path, v, "true or false", source)
    return v


def _validate_param_overrides(obj: Any, path: str, source: str) -> None:
    if obj is None:
        return
    if not isinstance(obj, Mapping):
        raise SpecError(path, obj, "a mapping of parameter name -> value or settings", source)
    for name, val in obj.items():
        p = f"{path}.{name}"
        if isinstance(val, bool) or not isinstance(val, (int, float, Mapping)):
            raise SpecError(p, val, "a number or a mapping with keys "
                            f"{sorted(PARAM_KEYS)}", source)
        if isinstance(val, Mapping):
            _check_keys(val, PARAM_KEYS, p, source)
            if "value" in val and (isinstance(val["value"], bool)
                                   or not isinstance(val["value"], (int, float))):
                raise SpecError(f"{p}.value", val["value"], "a number", source)
            if "fixed" in val:
                _check_bool(val["fixed"], f"{p}.fixed", source)
            if "limits" in val:
                lim = val["limits"]
                if (not isinstance(lim, list) or len(lim) != 2
                        or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                   for x in lim)):
                    raise SpecError(f"{p}.limits", lim, "a list [lo, hi] of two numbers", source)
            if "constraint" in val:
                c = val["constraint"]
                _check_keys(c, {"mean", "sigma"}, f"{p}.constraint", source, {"mean", "sigma"})
                s = c["sigma"]
                if isinstance(s, bool) or not isinstance(s, (int, float)) or not s > 0:
                    raise SpecError(f"{p}.constraint.sigma", s, "a number > 0", source)


def _validate_model(obj: Any, path: str, source: str) -> None:
    _check_keys(obj, MODEL_KEYS, path, source, {"builder"})
    if obj["builder"] not in BUILDERS:
        raise SpecError(f"{path}.builder", obj["builder"],
                        f"one of the registered model builders {sorted(BUILDERS)}", source)
    if obj.get("options") is not None and not isinstance(obj["options"], Mapping):
        raise SpecError(f"{path}.options", obj["options"], "a mapping of builder options",
                        source)
    _validate_param_overrides(obj.get("parameters"), f"{path}.parameters", source)


def _validate(raw: Any, text: str, source: str, base_dir: str) -> StudySpec:
    _check_keys(raw, TOP_KEYS, "", source,
                {"name", "kind", "seed", "toys", "models", "generate", "hypotheses"})
    if raw.get("format_version", 1) != 1:
        raise SpecError("format_version", raw["format_version"], "1", source)
    name = _check_str(raw["name"], "name", source)
    kind = raw["kind"]
    if kind not in KINDS:
        raise SpecError("kind", kind, f"one of {sorted(KINDS)}", source)
    seed = _check_int(raw["seed"], "seed", 0, source)
    toys = _check_int(raw["toys"], "toys", 1, source)
    models = raw["models"]
    if not isinstance(models, Mapping) or not models:
        raise SpecError("models", models, "a non-empty mapping of model name -> model", source)
    for mname, m in models.items():
        _validate_model(m, f"models.{mname}", source)
    generate = raw["generate"]
    if generate not in models:
        raise SpecError("generate", generate, f"one of the model names {sorted(models)}", source)
    hyps = raw["hypotheses"]
    if isinstance(hyps, str):
        hyps = [hyps]
    if not isinstance(hyps, list) or not hyps:
        raise SpecError("hypotheses", hyps, "a non-empty list of model names", source)
    for i, h in enumerate(hyps):
        if h not in models:
            raise SpecError(f"hypotheses[{i}]", h, f"one of the model names {sorted(models)}",
                            source)
    if len(set(hyps)) != len(hyps):
        raise SpecError("hypotheses", hyps, "distinct model names", source)

    fit = raw.get("fit") or {}
    _check_keys(fit, FIT_KEYS, "fit", source)
    fit = {"starts": _check_int(fit.get("starts", 1), "fit.starts", 1, source),
           "minos": _check_bool(fit.get("minos", False), "fit.minos", source),
           "strategy": fit.get("strategy"),
           "hesse": _check_bool(fit.get("hesse", kind not in NO_HESSE_KINDS), "fit.hesse",
                                source)}
    if fit["strategy"] is not None and _check_int(fit["strategy"], "fit.strategy", 0,
                                                  source) > 2:
        raise SpecError("fit.strategy", fit["strategy"], "0, 1 or 2", source)

    test = raw.get("test") or {}
    _check_keys(test, TEST_KEYS, "test", source)
    for key in ("h0", "h1"):
        if key in test and test[key] not in hyps:
            raise SpecError(f"test.{key}", test[key], f"one of the hypotheses {hyps}", source)
    if kind in ("significance", "jp_rejection", "template_smearing") and not (
            "h0" in test and "h1" in test):
        raise SpecError("test", test, f"h0 and h1 (hypothesis names) for kind {kind!r}", source)
    if "ndof" in test:
        _check_int(test["ndof"], "test.ndof", 1, source)
    if "observed" in test and (isinstance(test["observed"], bool)
                               or not isinstance(test["observed"], (int, float))):
        raise SpecError("test.observed", test["observed"], "a number", source)

    variants = _validate_variants(raw.get("variants"), models, source, generate)
    poi = raw.get("poi") or []
    if isinstance(poi, str):
        poi = poi.split()
    if not isinstance(poi, list) or not all(isinstance(p, str) for p in poi):
        raise SpecError("poi", poi, "a list of parameter names", source)
    data = raw.get("data")
    if data is not None:
        data = _check_str(data, "data", source)
        dp = Path(data) if Path(data).is_absolute() else Path(base_dir) / data
        if not dp.is_file():
            raise SpecError("data", data, f"an existing data file (looked for {dp})", source)
    chunk_size = raw.get("chunk_size")
    if chunk_size is not None and chunk_size != "auto":
        chunk_size = _check_int(chunk_size, "chunk_size", 1, source)
    else:
        chunk_size = None

    spec = StudySpec(name=name, kind=kind, seed=seed, toys=toys, models=dict(models),
                     generate=generate, hypotheses=tuple(hyps), variants=variants, fit=fit,
                     test=dict(test), poi=tuple(poi), data=data, chunk_size=chunk_size,
                     text=text, base_dir=base_dir,
                     description=str(raw.get("description", "")))
    _validate_by_building(spec, source)
    return spec


def _validate_variants(raw: Any, models: Mapping[str, Any], source: str,
                       generate: str) -> tuple[Variant, ...]:
    if raw is None or raw == []:
        return (Variant(0, "nominal", "nominal", False, {}, generate, False),)
    if not isinstance(raw, list):
        raise SpecError("variants", raw, "a list of variants", source)
    out: list[Variant] = []
    names: set[str] = set()
    for i, v in enumerate(raw):
        path = f"variants[{i}]"
        _check_keys(v, VARIANT_KEYS, path, source, {"name"})
        vname = _check_str(v["name"], f"{path}.name", source)
        group = _check_str(v.get("group", vname), f"{path}.group", source)
        separate = _check_bool(v.get("separate", False), f"{path}.separate", source)
        gen = v.get("generate", generate)
        if gen not in models:
            raise SpecError(f"{path}.generate", gen, f"one of the model names {sorted(models)}",
                            source)
        patches = v.get("models") or {}
        if not isinstance(patches, Mapping):
            raise SpecError(f"{path}.models", patches, "a mapping model name -> patch", source)
        for mname, patch in patches.items():
            if mname not in models:
                raise SpecError(f"{path}.models.{mname}", mname,
                                f"one of the model names {sorted(models)}", source)
            _check_keys(patch, MODEL_KEYS - {"builder"}, f"{path}.models.{mname}", source)
            _validate_param_overrides(patch.get("parameters"),
                                      f"{path}.models.{mname}.parameters", source)
        count = v.get("count")
        if count is None:
            expanded = [(vname, False)]
        else:
            count = _check_int(count, f"{path}.count", 1, source)
            expanded = [(f"{vname}_{k:04d}", True) for k in range(count)]
        for n, random in expanded:
            if n in names:
                raise SpecError(f"{path}.name", n, "a unique variant name", source)
            names.add(n)
            out.append(Variant(len(out), n, group, separate, patches, gen, random))
    return tuple(out)


def _validate_by_building(spec: StudySpec, source: str) -> None:
    """Build every model of every non-random variant (and the first random one) so that
    unknown options and parameter names fail now, not on a worker."""
    seen_random = False
    for v in spec.variants:
        if v.random:
            if seen_random:
                continue
            seen_random = True
        for mname in {*spec.hypotheses, v.generate}:
            path = f"models.{mname}" if not v.patches.get(mname) else \
                f"variants[{v.name}].models.{mname}"
            try:
                build_model(spec, v, mname)
            except SpecError:
                raise
            except ModelError as exc:
                raise SpecError(path, spec.model_config(v, mname).get("options"),
                                f"a buildable model ({exc})", source) from None
