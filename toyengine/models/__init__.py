"""The model catalogue: builders by name, as study files reference them.

A builder is ``build(options: Mapping, rng: numpy.random.Generator | None) -> ToyModel``;
the ``rng`` is given only to random variants (template smearing, parameter draws). The model
satisfies :class:`~toyengine.models.protocol.ToyModel` (``parameters``, ``sample``, ``nll``
and the optional members whose defaults :class:`~toyengine.models.protocol.ToyModelBase`
holds). Each
shipped builder declares its options once, as a :class:`toyengine.models.options.BuilderOptions`
subclass, and registers both with :func:`register_builder`; the study validator,
``toyengine schema`` and the option tables of ``docs/study-format.md`` all read that declaration.

The shipped builders are imported when a study first names one (:class:`BuilderRegistry`):
a T_cc⁺ study never imports the Z_c(4100)⁻ Dalitz model and its interpolation code.

A study names a builder in one of three ways: a registered name (:data:`BUILDERS`), an import
path ``package.module:function`` (a plug-in), or the name of an entry point in the
``toyengine.models`` group (an installed plug-in package). Plug-ins get their options as
written; their own code checks them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import numpy as np

from ..errors import ModelError
from .options import BuilderOptions
from .protocol import REQUIRED_MEMBERS, ToyModel, missing_members

__all__ = ["BUILDERS", "ENTRY_POINT_GROUP", "Builder", "BuilderRegistry", "check_model",
           "get_builder", "plugin_module", "register_builder"]

#: entry-point group of installed model plug-ins
ENTRY_POINT_GROUP = "toyengine.models"


@dataclass(frozen=True)
class Builder:
    """A registered model builder: its name, build function and option declaration."""

    name: str
    build: Callable[[Mapping[str, Any], np.random.Generator | None], Any]
    options: type[BuilderOptions]


class BuilderRegistry(MutableMapping[str, Builder]):
    """Registered builders by name. ``lazy`` maps the name of a shipped builder to
    ``"module:build_function:OptionsClass"`` (a module of this package): the module is
    imported and the builder registered when the name is first looked up, while ``in``,
    ``len`` and iteration see every name without importing anything."""

    def __init__(self, lazy: Mapping[str, str]):
        self._builders: dict[str, Builder] = {}
        self._lazy = dict(lazy)

    def __getitem__(self, name: str) -> Builder:
        if name not in self._builders and name in self._lazy:
            module, build, options = self._lazy[name].split(":")
            mod = importlib.import_module(f"{__name__}.{module}")
            self._builders[name] = _builder(name, getattr(mod, build), getattr(mod, options))
        return self._builders[name]

    def __setitem__(self, name: str, builder: Builder) -> None:
        self._lazy.pop(name, None)  # a builder registered by hand replaces a shipped one
        self._builders[name] = builder

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._lazy.pop(name, None)
        self._builders.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._builders or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._lazy, *self._builders]))

    def __len__(self) -> int:
        return len(self._lazy.keys() | self._builders.keys())


#: registered builders by name (the shipped ones: imported on first use)
BUILDERS: BuilderRegistry = BuilderRegistry({
    "mass1d": "mass1d:build_mass1d:Mass1dOptions",
    "tcc": "tcc:build_tcc:TccOptions",
    "zc4100": "zc4100:build_zc4100:Zc4100Options",
    "gauss": "gauss:build_gauss:GaussOptions",
})


def _builder(name: str, build: Callable[..., Any], options: type[BuilderOptions]) -> Builder:
    if not (isinstance(options, type) and issubclass(options, BuilderOptions)):
        msg = f"builder {name!r}: options must be a BuilderOptions subclass, got {options!r}"
        raise TypeError(msg)
    options.builder_name = name
    return Builder(name, build, options)


def register_builder(name: str, build: Callable[..., Any],
                     options: type[BuilderOptions]) -> Builder:
    """Make ``build`` available to study files as ``builder: name``; ``options`` declares
    what ``models.<m>.options`` may hold (see :mod:`toyengine.models.options`)."""
    b = _builder(name, build, options)
    BUILDERS[name] = b
    return b


def _entry_point(name: str) -> Any:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep
    return None


def known_names() -> list[str]:
    """Registered builder names and the names of installed entry points."""
    return sorted({*BUILDERS, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})


def plugin_module(name: str) -> str | None:
    """The module a worker must import for builder ``name`` (``None`` for registered ones)."""
    if name in BUILDERS:
        return None
    if ":" in name:
        return name.split(":", 1)[0]
    ep = _entry_point(name)
    return None if ep is None else str(ep.module)


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure while importing user code
        msg = f"cannot import {module} ({type(exc).__name__}: {exc})"
        raise ModelError(msg) from None


def get_builder(name: str) -> Callable[..., Any]:
    """The build function of builder ``name``: registered, ``package.module:function`` or
    entry point.

    Raises
    ------
    ModelError
        Unknown name, module that cannot be imported, or no such callable in it.
    """
    if name in BUILDERS:
        return BUILDERS[name].build
    if ":" in name:
        module, _, func = name.partition(":")
        if not module or not func.isidentifier():
            msg = f"builder {name!r}: expected 'package.module:function'"
            raise ModelError(msg)
        obj = getattr(_import(module), func, None)
        if not callable(obj):
            msg = f"builder {name!r}: module {module} has no function {func!r}"
            raise ModelError(msg)
        return obj
    ep = _entry_point(name)
    if ep is not None:
        _import(str(ep.module))
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - user code
            msg = f"builder {name!r}: entry point {ep.value} failed to load ({exc})"
            raise ModelError(msg) from None
        if not callable(obj):
            msg = f"builder {name!r}: entry point {ep.value} is not callable"
            raise ModelError(msg)
        return obj
    hint = (f"; for a plug-in write 'module:function' (e.g. "
            f"{name.rsplit('.', 1)[0]}:{name.rsplit('.', 1)[1]})" if "." in name else "")
    msg = (f"builder {name!r} is none of the registered model builders {known_names()} "
           f"(built-in or entry points of group {ENTRY_POINT_GROUP!r}) and not "
           f"'package.module:function'{hint}")
    raise ModelError(msg)


def check_model(model: Any, name: str) -> ToyModel:
    """``model`` if it is a :class:`~toyengine.models.protocol.ToyModel`, else
    :class:`ModelError` naming the members it lacks."""
    missing = missing_members(model)
    if missing:
        required = [m for m in missing if m in REQUIRED_MEMBERS]
        hooks = [m for m in missing if m not in REQUIRED_MEMBERS]
        what = "; ".join(
            part for part in (
                f"without {', '.join(required)}" if required else "",
                f"without the optional members {', '.join(hooks)} (derive the model class "
                "from toyengine.models.protocol.ToyModelBase for their defaults)"
                if hooks else "")
            if part)
        msg = (f"builder {name!r} returned a {type(model).__name__} {what}: not a "
               "toyengine.models.protocol.ToyModel (docs/models.md)")
        raise ModelError(msg)
    return model
