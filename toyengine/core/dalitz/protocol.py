"""What the likelihood, its cached state and the data-space comparison read from a Dalitz
model: the interface :class:`~toyengine.core.dalitz.model.DalitzModel` provides.

``nll``, ``state`` and ``space`` annotate against :class:`DalitzModelView` rather than the
model class, so the imports of the package point one way (the model builds its likelihood;
the likelihood never imports the model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..params import ParameterSet
from .dalitz_plot import DalitzKinematics, Vetoes
from .data import Component, RunSpec
from .integration import PairSpline
from .normalisation import _NormGrid

__all__ = ["DalitzModelView"]


class DalitzModelView(Protocol):
    """The attributes of a Dalitz-plot model that its likelihood and normalisation use.

    The public ones describe the data space (Eur. Phys. J. C 78 (2018) 1019, Eqs. 1–5:
    masses, components, runs and vetoes); the private ones are the model's parameter
    indices and normalisation caches, shared with :class:`~toyengine.core.dalitz.nll.DalitzNLL`
    so that one toy fit builds them once.
    """

    name: str
    kin: DalitzKinematics
    vetoes: Vetoes
    parameters: ParameterSet
    components: tuple[Component, ...]
    runs: tuple[RunSpec, ...]
    _p_idx: list[np.ndarray]
    _sig_idx: np.ndarray
    _bkg_idx: list[np.ndarray]
    _cidx: np.ndarray
    _cmu: np.ndarray
    _csig: np.ndarray
    _splines: dict[str, PairSpline]

    @property
    def run_names(self) -> tuple[str, ...]: ...

    @property
    def _norm(self) -> _NormGrid: ...

    def _check_norm(self, j: int, integral: float) -> float: ...

    def _sdp_terms(self, r: int, m2_kpi: np.ndarray,
                   m2_etacpi: np.ndarray) -> tuple[np.ndarray, Sequence[np.ndarray]]: ...
