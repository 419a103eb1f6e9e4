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

Plug-ins are trusted explicitly, never because a study file names them: a study file or a
result store may come from someone else, and importing a module runs its code. An
``package.module:function`` builder is imported only if the user allowed its module
(:func:`allow_plugins`, ``toyengine run --plugin MODULE``, or the Dask config key
``toyengine.plugins.allow``), and its function must be marked as a builder with
:func:`model_builder`, so that no other callable (``subprocess:run``) can be named. Entry
points are registered by distributions the user installed and need no further permission.
Each plug-in's code is identified by :func:`plugin_source` (the sha256 of its module file,
or the distribution and version of an entry point): the study records it, and a worker
whose copy differs refuses to build the model.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..errors import ModelError
from .options import BuilderOptions
from .protocol import REQUIRED_MEMBERS, ToyModel, missing_members

__all__ = ["ALLOW_CONFIG_KEY", "BUILDERS", "ENTRY_POINT_GROUP", "Builder", "BuilderRegistry",
           "PluginNotAllowed", "allow_plugins", "allowed_plugins", "check_model",
           "get_builder", "model_builder", "plugin_module", "plugin_source",
           "register_builder"]

#: entry-point group of installed model plug-ins
ENTRY_POINT_GROUP = "toyengine.models"
#: Dask config key (list of module names) of the plug-in modules the user allows
ALLOW_CONFIG_KEY = "toyengine.plugins.allow"
#: attribute :func:`model_builder` sets on a plug-in's build function
_MARK = "__toyengine_builder__"

F = TypeVar("F", bound=Callable[..., Any])


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
    "dalitz": "dalitz:build_dalitz:DalitzOptions",
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


# --- plug-ins: allowed modules, the builder mark, source identity ------------------------
#: modules allowed in this process by :func:`allow_plugins` (``--plugin``)
_ALLOWED: set[str] = set()


class PluginNotAllowed(ModelError):
    """A study names a plug-in module the user has not allowed; nothing was imported."""


def model_builder(func: F) -> F:
    """Mark ``func`` as a toyengine model builder, so that a study file may name it as
    ``builder: package.module:function`` (once the module is allowed). Returns ``func``
    itself::

        from toyengine.models import model_builder

        @model_builder
        def build(options, rng=None):
            ...
    """
    setattr(func, _MARK, True)
    return func


def allow_plugins(modules: Iterable[str]) -> None:
    """Allow the plug-in modules ``modules`` (and their submodules) in this process, as
    ``--plugin MODULE`` does on the command line."""
    for m in [modules] if isinstance(modules, str) else modules:
        m = str(m).strip()
        if not _MODULE_NAME.fullmatch(m):
            msg = f"--plugin {m!r}: expected a module name such as mypkg.models"
            raise ModelError(msg)
        _ALLOWED.add(m)


def _config_allowed() -> list[str]:
    """``toyengine.plugins.allow`` of the Dask config (files, ``DASK_TOYENGINE__PLUGINS__
    ALLOW``): a list of module names or one string of names separated by commas."""
    import dask.config

    value = dask.config.get(ALLOW_CONFIG_KEY, None)
    if value is None:
        return []
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, (list, tuple)):
        return []
    return [str(v).strip() for v in value if str(v).strip()]


def allowed_plugins() -> frozenset[str]:
    """The plug-in modules allowed here: :func:`allow_plugins` and the Dask config."""
    return frozenset({*_ALLOWED, *_config_allowed()})


def _is_allowed(module: str, extra: Iterable[str] = ()) -> bool:
    allowed = {*allowed_plugins(), *extra}
    return any(module == a or module.startswith(a + ".") for a in allowed)


def _not_allowed(name: str, module: str) -> PluginNotAllowed:
    msg = (f"plug-in module {module!r} (builder {name!r}) is not allowed to run: a study "
           f"file cannot allow code by itself; if you trust it, allow it with --plugin "
           f"{module} or the Dask config {ALLOW_CONFIG_KEY}: [{module}] (docs/security.md)")
    return PluginNotAllowed(msg)


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _file_hash(path: str | Path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _module_file(module: str) -> str | None:
    """The source file of ``module`` (importing its parent packages, not the module)."""
    try:
        found = importlib.util.find_spec(module)
    except Exception:  # noqa: BLE001 - a parent package that fails to import
        return None
    origin = getattr(found, "origin", None)
    return origin if origin and Path(origin).is_file() else None


def plugin_source(name: str) -> tuple[str, str] | None:
    """``(module, source)`` identifying the code of plug-in builder ``name``: the sha256 of
    the module's file for ``package.module:function``, ``"<distribution> <version>"`` for
    an entry point; ``None`` for a registered builder. The module is not imported (its
    parent packages are), so call it only for an allowed plug-in."""
    if name in BUILDERS:
        return None
    if ":" in name:
        module = name.split(":", 1)[0]
        path = _module_file(module)
        return (module, _file_hash(path) if path else "unknown")
    ep = _entry_point(name)
    if ep is None:
        return None
    dist = getattr(ep, "dist", None)
    version = f"{dist.name} {dist.version}" if dist is not None else "unknown"
    return (str(ep.module), version)


#: source hash of each plug-in module as this process imported it
_LOADED: dict[str, str] = {}


def _load_plugin_module(module: str, expected: str | None) -> Any:
    """Import an allowed plug-in module; with ``expected`` (its source hash on the client)
    make sure the code in memory is that code: a module whose file changed since it was
    imported here is reloaded, a file that differs from ``expected`` is refused."""
    path = _module_file(module)
    if path is None and module not in sys.modules:
        _import(module)  # not found: the import error says why
        path = _module_file(module)
    now = _file_hash(path) if path else "unknown"
    if expected is not None and now != expected:
        msg = (f"plug-in module {module!r} here ({path}) is not the code the study was "
               f"validated with (source {now[:19]} here, {expected[:19]} there): install "
               "the same version everywhere (cluster/README.md, 'User code on workers')")
        raise ModelError(msg)
    loaded = sys.modules.get(module)
    if loaded is not None and _LOADED.setdefault(module, now) != now:
        if path:  # the file changed since this process imported it: load the current code
            # (a bytecode cache of the same second and size would hide the change)
            with contextlib.suppress(OSError):
                Path(importlib.util.cache_from_source(path)).unlink()
        try:
            mod = importlib.reload(loaded)
        except Exception as exc:  # noqa: BLE001 - user code
            msg = f"cannot import {module} ({type(exc).__name__}: {exc})"
            raise ModelError(msg) from None
    else:
        mod = _import(module)
    _LOADED[module] = now
    return mod


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


def get_builder(name: str, *, allowed: Iterable[str] = (),
                sources: Mapping[str, str] | None = None) -> Callable[..., Any]:
    """The build function of builder ``name``: registered, ``package.module:function`` or
    entry point.

    A ``package.module:function`` module is imported only if allowed (:func:`allowed_plugins`
    or ``allowed``, the modules a client validated the study with) and the function must
    be marked with :func:`model_builder`. ``sources`` (module → :func:`plugin_source`) is
    the code the study was validated with: other code here is refused.

    Raises
    ------
    PluginNotAllowed
        A plug-in module that is not allowed (not imported).
    ModelError
        Unknown name, module that cannot be imported, no such callable in it, a callable
        not marked as a builder, or plug-in code other than ``sources``.
    """
    if name in BUILDERS:
        return BUILDERS[name].build
    if ":" in name:
        module, _, func = name.partition(":")
        if not _MODULE_NAME.fullmatch(module) or not func.isidentifier():
            msg = f"builder {name!r}: expected 'package.module:function'"
            raise ModelError(msg)
        if not _is_allowed(module, allowed):
            raise _not_allowed(name, module)
        mod = _load_plugin_module(module, (sources or {}).get(module))
        obj = getattr(mod, func, None)
        if not callable(obj):
            msg = f"builder {name!r}: module {module} has no function {func!r}"
            raise ModelError(msg)
        if getattr(obj, _MARK, False) is not True:
            msg = (f"builder {name!r}: {module}.{func} is not marked as a model builder "
                   "(decorate it with @toyengine.models.model_builder, docs/models.md)")
            raise ModelError(msg)
        return obj
    ep = _entry_point(name)
    if ep is not None:
        expected = (sources or {}).get(str(ep.module))
        if expected is not None:
            here = plugin_source(name)
            if here is not None and here[1] != expected:
                msg = (f"plug-in {name!r}: {here[1]} is installed here, the study was "
                       f"validated with {expected}: install the same version everywhere")
                raise ModelError(msg)
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
