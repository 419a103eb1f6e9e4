"""The model catalogue: builders by name, as study files reference them.

A builder is ``builder(options: Mapping, rng: numpy.random.Generator | None) -> ToyModel``;
the ``rng`` is given only to random variants (template smearing, parameter draws).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["BUILDERS", "get_builder"]


def _tcc(options: Mapping[str, Any], rng: np.random.Generator | None = None) -> Any:
    from .tcc import build_tcc

    return build_tcc(options, rng)


def _zc4100(options: Mapping[str, Any], rng: np.random.Generator | None = None) -> Any:
    from .zc4100 import build_zc4100

    return build_zc4100(options, rng)


BUILDERS: dict[str, Callable[..., Any]] = {"tcc": _tcc, "zc4100": _zc4100}


def get_builder(name: str) -> Callable[..., Any]:
    return BUILDERS[name]
