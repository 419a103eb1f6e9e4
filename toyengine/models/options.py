"""Typed declarations of builder options, and plain-English errors from them.

Every model builder declares its options once, as a subclass of :class:`BuilderOptions`
(a pydantic v2 model): name, type, allowed values (``Literal``), range (``ge``/``le``/
``gt``), default, and a one-line help (``description``). That one declaration is used

* by the builder itself (``opts = MyOptions.parse(options)``: defaults filled in, every
  value checked, :class:`OptionsError` — a :class:`~toyengine.errors.ModelError` — on bad
  input);
* by the study-file validator (:mod:`toyengine.study.spec`), which reports the error under the
  option's path in the file (``models.nominal.options.resolution``) with the bad value and
  what was expected;
* by ``toyengine schema`` (the JSON Schema of study files, for editors) and by the option
  tables of ``docs/study-format.md`` (:func:`options_table`).

Declaring the options of a new builder::

    from typing import Literal
    from pydantic import Field
    from toyengine.models.options import BuilderOptions, Pair

    class Mass1DOptions(BuilderOptions):
        \"\"\"Options of the ``mass1d`` builder.\"\"\"

        range: Pair = Field((0.0, 1.0), description="fit range [lo, hi] of x")
        shape: Literal["gauss", "bw"] = Field("gauss", description="signal line shape")
        order: int = Field(2, ge=0, le=6, description="background polynomial order")

    def build_mass1d(options, rng=None):
        opts = Mass1DOptions.parse(options)    # opts.range, opts.shape, opts.order
        ...

    register_builder("mass1d", build_mass1d, Mass1DOptions)   # toyengine.models

Rules the base class enforces (so a declaration need not): unknown keys are errors; no
type coercion (``"3"`` is not an int, ``true`` is not a number); NaN and ±inf are refused
for floats. Cross-field checks go in a pydantic ``model_validator(mode="after")`` that raises
``ValueError("what was expected")``. Why pydantic rather than hand-written JSON Schema plus
``jsonschema``: the declaration is a typed Python class the builder reads its values from,
so the checks, the defaults the builder uses, the docs and the schema cannot drift apart;
pydantic's errors carry the location, the input and the constraint, from which the messages
here are made, and it emits JSON Schema (draft 2020-12) itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Self, get_args, get_origin

from annotated_types import Len
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ModelError

__all__ = ["BuilderOptions", "Field", "FiniteFloat", "OptionsError", "Pair", "StrictModel",
           "describe_validation_error", "format_path", "model_validator", "options_table",
           "ordered_pair"]

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
#: two finite numbers ``[lo, hi]`` with ``lo < hi`` (ranges, limits)
Pair = Annotated[list[FiniteFloat], Len(2, 2)]


def ordered_pair(v: list[float]) -> list[float]:
    """Field validator for a :data:`Pair` that must be increasing:
    ``_ordered = field_validator("range")(ordered_pair)``."""
    if not v[0] < v[1]:
        msg = f"[lo, hi] with lo < hi (got [{v[0]}, {v[1]}])"
        raise ValueError(msg)
    return v


class OptionsError(ModelError):
    """Builder options failed their declaration. ``loc`` is the path inside the options
    (``("resolution",)``), ``value`` the bad value, ``expected`` what was expected."""

    def __init__(self, builder: str, loc: tuple[str | int, ...], value: Any, expected: str):
        self.builder, self.loc, self.value, self.expected = builder, loc, value, expected
        from ..errors import _REPR

        where = format_path(loc) or "(options)"
        super().__init__(f"{builder} model: option {where}: got {_REPR.repr(value)}; "
                         f"expected {expected}")


class StrictModel(BaseModel):
    """Closed (unknown keys are errors), strict (no coercion), finite floats."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class BuilderOptions(StrictModel):
    """Base of a builder's option declaration (see the module docstring for an example)."""

    #: the builder's name, used in messages; set by ``register_builder``
    builder_name: ClassVar[str] = "model"
    #: whether checking a study builds the model of every variant (True: cheap builders,
    #: whose cross-field checks then run for every variant before a toy) or only the
    #: nominal one, a variant that changes options alone being checked against this
    #: declaration and built when the plan needs it (False: Dalitz models, a
    #: normalisation grid each)
    build_every_variant: ClassVar[bool] = True

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> Self:
        """Check ``options`` against the declaration and fill in the defaults.

        Raises
        ------
        OptionsError
            The first problem: path inside the options, bad value, what was expected.
        """
        data = {} if options is None else options
        if not isinstance(data, Mapping):
            raise OptionsError(cls.builder_name, (), data, "a mapping of builder options")
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            loc, value, expected = describe_validation_error(exc, data, cls)
            raise OptionsError(cls.builder_name, loc, value, expected) from None

    def as_dict(self) -> dict[str, Any]:
        """Plain nested dicts/lists (by the names used in study files)."""
        return self.model_dump(by_alias=True)


# --- errors ---------------------------------------------------------------------------------
def format_path(loc: Sequence[str | int]) -> str:
    """``("models", "H0", "options", "r")`` → ``models.H0.options.r``; ints as ``[i]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _real_path(loc: tuple[Any, ...], data: Any, missing: bool) -> tuple[tuple[str | int, ...], Any]:
    """The part of pydantic's ``loc`` that indexes the input — dropping union-member tags
    such as ``'float'``, ``'ResolutionShape'`` or ``'function-after[...]'`` — and the value
    there. With ``missing`` the last part is a required key absent from the input."""
    path: list[str | int] = []
    cur = data
    for i, part in enumerate(loc):
        if isinstance(cur, Mapping) and part in cur:
            path.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            path.append(part)
            cur = cur[part]
        elif missing and i == len(loc) - 1:
            path.append(part)
            cur = None
        # else: a union tag; skip it
    return tuple(path), cur


def _expected(err: Mapping[str, Any]) -> str:
    t, ctx = err["type"], err.get("ctx") or {}
    simple = {
        "int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
        "finite_number": "a finite number", "string_type": "a string",
        "bool_type": "true or false", "dict_type": "a mapping", "model_type": "a mapping",
        "model_attributes_type": "a mapping", "list_type": "a list", "tuple_type": "a list",
        "missing": "a required key (missing)", "none_required": "null",
        "string_too_short": "a non-empty string", "extra_forbidden": "no such key",
    }
    if t in simple:
        return simple[t]
    if t in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
              "less_than": "<"}[t]
        bound = next(iter(ctx.values()))
        return f"a value {op} {bound}"
    if t == "literal_error":
        return f"one of {ctx.get('expected', '')}"
    if t in ("too_short", "too_long"):
        lo, hi = ctx.get("min_length"), ctx.get("max_length")
        if t == "too_long" and hi is not None:
            return f"at most {hi} items"
        return f"at least {lo} items" if lo is not None else "more items"
    if t == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    if t == "union_tag_invalid":
        return f"one of {ctx.get('expected_tags', '')}"
    return str(err["msg"])


def describe_validation_error(exc: ValidationError, data: Any,
                              model: type[BaseModel] | None = None,
                              ) -> tuple[tuple[str | int, ...], Any, str]:
    """Turn a pydantic error into ``(path, bad value, expected)`` for one message.

    The error at the deepest real location wins; alternatives of a union at that location
    are joined with "or". For an unknown key, the allowed keys of ``model`` at that place
    are listed.
    """
    described = []
    for e in exc.errors(include_url=False):
        path, value = _real_path(tuple(e["loc"]), data, e["type"] == "missing")
        described.append((path, value, e))
    best = max(len(d[0]) for d in described)
    same = [d for d in described if len(d[0]) == best]
    path, value = same[0][0], same[0][1]
    texts: list[str] = []
    for _, _, e in same:
        text = _expected(e)
        if e["type"] == "extra_forbidden" and model is not None:
            keys = _keys_at(model, tuple(e["loc"][:-1]))
            if keys:
                text = f"no such key; allowed keys: {keys}"
        if text not in texts:
            texts.append(text)
    return path, value, " or ".join(texts[:4])


def _keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Allowed keys of the mapping at pydantic location ``loc`` inside ``model``."""
    cur: Any = model
    for part in loc:
        models = _nested_models(cur) if not _is_model(cur) else [(cur, ())]
        if not models:
            return []
        m, extra = models[0]
        if extra:  # cur is a dict/list of models: ``part`` is the key or index
            cur = m
            continue
        fields = {f.alias or n: f for n, f in m.model_fields.items()}
        if part in fields:
            cur = fields[part].annotation
    models = [(cur, ())] if _is_model(cur) else _nested_models(cur)
    if not models or models[0][1]:
        return []
    return sorted(f.alias or n for n, f in models[0][0].model_fields.items())


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _nested_models(tp: Any) -> list[tuple[type[BaseModel], tuple[str, ...]]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [(tp, ())]
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Annotated:
        return _nested_models(args[0])
    if origin in (dict, Mapping):
        return [(m, ("*", *e)) for m, e in _nested_models(args[1])] if len(args) == 2 else []
    if origin in (list, Sequence):
        return [(m, ("*", *e)) for m, e in _nested_models(args[0])] if args else []
    out: list[tuple[type[BaseModel], tuple[str, ...]]] = []
    for a in args:  # unions
        out += _nested_models(a)
    return out


# --- docs -------------------------------------------------------------------------------------
def _type_text(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        if args[0] is float or get_origin(args[0]) is list:
            inner = _type_text(args[0])
            for meta in args[1:]:
                if isinstance(meta, Len) and meta.min_length == meta.max_length:
                    return f"[{meta.min_length} numbers]"
            return inner
        return _type_text(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" if isinstance(a, str) else str(a) for a in args)
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "mapping (below)"
    if origin in (dict, Mapping):
        return "mapping"
    if origin in (list, Sequence):
        return "list of " + _type_text(args[0]) if args else "list"
    if args:  # union
        return " or ".join(_type_text(a) for a in args)
    return {float: "number", int: "integer", str: "string", bool: "bool"}.get(tp, str(tp))


def _bounds_text(meta: Sequence[Any]) -> str:
    parts = []
    for m in meta:
        for attr, op in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            v = getattr(m, attr, None)
            if v is not None:
                parts.append(f"{op} {v}")
    return ", ".join(parts)


def options_table(model: type[BaseModel], heading: str = "") -> str:
    """A Markdown table of ``model``'s options (name, type, default, range, help), then
    one table per nested option group."""
    lines = [heading] if heading else []
    lines += ["| option | type | default | range | help |", "|---|---|---|---|---|"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        default = None if f.is_required() else f.get_default(call_default_factory=True)
        if f.is_required():
            dtext = "required"
        elif isinstance(default, BaseModel):
            dtext = "(below)"
        else:
            dtext = "—" if default is None else f"`{_compact(default)}`"
        lines.append(f"| `{key}` | {_type_text(f.annotation)} | {dtext} | "
                     f"{_bounds_text(f.metadata)} | {f.description or ''} |")
        for sub, _ in _nested_models(f.annotation):
            nested.append((key, sub))
    out = "\n".join(lines)
    for key, sub in nested:
        out += "\n\n" + options_table(sub, f"`{key}`: {(sub.__doc__ or '').strip()}\n")
    return out


def _compact(v: Any) -> str:
    import json

    return json.dumps(v, separators=(", ", ": "), ensure_ascii=False)

