"""Dalitz-plot likelihood core for B0 → ηc K+ π− (LHCb, Eur. Phys. J. C 78 (2018) 1019); the
Zc(4100)− model builder is :mod:`toyengine.models.zc4100`.

Public API::

    from toyengine.models.zc4100 import build_zc4100
    model = build_zc4100({"hypothesis": "nominal"})       # a ToyModel
    data = model.sample(model.parameters.values, np.random.default_rng(1))
    nll = model.nll(data)                                 # nll(x_full) -> float, nll.grad
    model.fit_fractions(x)                                # Eqs. (12)-(13) of the paper

See ``studies/zc4100/README.md`` for the shipped stand-in maps and reference data.
"""

from __future__ import annotations

from .dalitz_plot import DalitzKinematics, Vetoes
from .data import Component, DalitzData, RunSample, RunSpec
from .gof import AdaptiveBinning, adaptive_chi2
from .maps import SDPHistogram
from .model import DalitzModel
from .nll import DalitzNLL
from .resonances import Lineshape

__all__ = [
    "AdaptiveBinning",
    "Component",
    "DalitzData",
    "DalitzKinematics",
    "DalitzModel",
    "DalitzNLL",
    "Lineshape",
    "RunSample",
    "RunSpec",
    "SDPHistogram",
    "Vetoes",
    "adaptive_chi2",
]
