"""The model catalogue: builders by name, as study files reference them.

A builder is ``build(options: Mapping, rng: numpy.random.Generator | None) -> ToyModel``;
the ``rng`` is given only to random variants (template smearing, parameter draws). Each
builder declares its options once, as a :class:`toyengine.models.options.BuilderOptions` subclass,
and registers both with :func:`register_builder`; the study validator, ``toyengine schema``
and the option tables of ``docs/study-format.md`` all read that declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .options import BuilderOptions

__all__ = ["BUILDERS", "Builder", "get_builder", "register_builder"]


@dataclass(frozen=True)
class Builder:
    """A registered model builder: its name, build function and option declaration."""

    name: str
    build: Callable[[Mapping[str, Any], np.random.Generator | None], Any]
    options: type[BuilderOptions]


#: registered builders by name
BUILDERS: dict[str, Builder] = {}


def register_builder(name: str, build: Callable[..., Any],
                     options: type[BuilderOptions]) -> Builder:
    """Make ``build`` available to study files as ``builder: name``; ``options`` declares
    what ``models.<m>.options`` may hold (see :mod:`toyengine.models.options`)."""
    if not (isinstance(options, type) and issubclass(options, BuilderOptions)):
        msg = f"builder {name!r}: options must be a BuilderOptions subclass, got {options!r}"
        raise TypeError(msg)
    options.builder_name = name
    b = Builder(name, build, options)
    BUILDERS[name] = b
    return b


def get_builder(name: str) -> Callable[..., Any]:
    """The build function of builder ``name``."""
    return BUILDERS[name].build


def _register_shipped() -> None:
    from .mass1d import Mass1dOptions, build_mass1d
    from .tcc import TccOptions, build_tcc
    from .zc4100 import Zc4100Options, build_zc4100

    register_builder("mass1d", build_mass1d, Mass1dOptions)
    register_builder("tcc", build_tcc, TccOptions)
    register_builder("zc4100", build_zc4100, Zc4100Options)


_register_shipped()
