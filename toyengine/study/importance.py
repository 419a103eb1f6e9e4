"""Importance sampling of a significance study's toys (``importance:``): which mixture
component generates a toy, the model and values it is sampled from, and its log ratios
``ln p_k − ln p_0`` under every injected component (one model each of
``importance.inject``, or its one model at each point of ``importance.points``), or, with
``importance.family``, the extended-space log ratio of :mod:`.importance_family`. The
weights and the tail estimate are :mod:`toyengine.summary.importance`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.likelihood import NormalConstraint
from ..errors import ModelError
from ..models.protocol import ToyModel
from .importance_family import SignalFamily
from .reference import generator_model
from .seeds import importance_rng
from .spec import StudySpec, Variant, build_model

__all__ = ["family_log_ratio", "importance_component", "importance_log_ratios",
           "signal_family", "toy_generator"]


def _generation_log_likelihood(model: ToyModel, data: Any) -> float:
    """``ln L`` of ``data`` under ``model`` at its generation values, the Gaussian constraint
    terms left out: the log density of the generated data set (up to constants that every
    model with the same likelihood convention shares)."""
    x = model.parameters.values
    val = -float(model.nll(data)(x))
    return NormalConstraint.from_parameters(model.parameters).add_value(val, x)


def _n_injected(imp: Mapping[str, Any]) -> int:
    """Number K of injected components: the models of ``inject``, or its one model's
    ``points``."""
    points = imp.get("points")
    return len(next(iter(points.values()))) if points else len(imp["inject"])


def importance_component(spec: StudySpec, toy: int, variant: Variant) -> int:
    """The mixture component toy ``toy`` of an importance-sampled study is generated from:
    0 (the ``generate`` model) with probability ``1 − a``, else injected component ``k``
    (1-based, equal shares of ``a``), from the toy's own stream
    (:func:`toyengine.study.seeds.importance_rng`); 0 for a study without ``importance``."""
    imp = spec.importance
    if imp is None:
        return 0
    u = float(importance_rng(spec.seed, toy, None if spec.paired else variant.index).random())
    a, k = float(imp["fraction"]), _n_injected(imp)
    return 0 if u >= a else 1 + min(int(u / a * k), k - 1)


def _point_values(model: ToyModel, points: Mapping[str, Sequence[float]]) -> np.ndarray:
    """``(K, n_params)``: the model's generation values with ``importance.points`` put in,
    one row per point."""
    pset = model.parameters
    rows = np.tile(np.asarray(pset.values, dtype=float), (_n_injected({"points": points}), 1))
    for name, col in points.items():
        rows[:, pset.index(name)] = col
    return rows


def signal_family(spec: StudySpec, variant: Variant) -> SignalFamily | None:
    """The injected signals of ``importance.family`` for variant ``variant`` (None for a
    study without one)."""
    imp = spec.importance
    if imp is None or not imp.get("family"):
        return None
    return SignalFamily(build_model(spec, variant, imp["inject"][0]),
                        generator_model(spec, variant), imp["family"])


def _family_draws(spec: StudySpec, toy: int, variant: Variant,
                  family: SignalFamily) -> tuple[int, np.ndarray | None, np.ndarray]:
    """``(component, s, normal)`` of toy ``toy`` from its importance stream, after the
    draw that picks the component: the injected signal ``s`` (component 1; None for a null
    toy) and the standard normal draws of a null toy's ``s ~ r(s | x)``."""
    rng = importance_rng(spec.seed, toy, None if spec.paired else variant.index)
    c = 0 if float(rng.random()) >= float(spec.importance["fraction"]) else 1
    if c:
        return 1, family.draw(rng), np.zeros(family.index.size)
    return 0, None, rng.standard_normal(family.index.size)


def family_log_ratio(spec: StudySpec, variant: Variant, toy: int, family: SignalFamily,
                     data: Any, fitted: np.ndarray) -> float:
    """Toy ``toy``'s ``log_ratio`` in a study with ``importance.family``
    (:meth:`SignalFamily.log_ratio <toyengine.study.importance_family.SignalFamily.log_ratio>`),
    from its data set and the alternative's fitted values."""
    _, s, normal = _family_draws(spec, toy, variant, family)
    l0 = _generation_log_likelihood(family.null, data)
    return family.log_ratio(data, fitted, s, normal, l0)[0]


def toy_generator(spec: StudySpec, variant: Variant, toy: int,
                  family: SignalFamily | None = None) -> tuple[int, ToyModel, np.ndarray]:
    """``(component, model, values)`` that generate toy ``toy``
    (:func:`importance_component`; with ``importance.family`` the injected model at the
    toy's own signal, ``family`` the study's :func:`signal_family` if already built)."""
    c = importance_component(spec, toy, variant)
    if c == 0:
        gen = generator_model(spec, variant)
        return 0, gen, gen.parameters.values
    if spec.importance.get("family"):
        family = family if family is not None else signal_family(spec, variant)
        assert family is not None
        _, s, _ = _family_draws(spec, toy, variant, family)
        assert s is not None
        return 1, family.model, family.values(s)
    points = spec.importance.get("points")
    if points:
        model = build_model(spec, variant, spec.importance["inject"][0])
        return c, model, _point_values(model, points)[c - 1]
    model = build_model(spec, variant, spec.importance["inject"][c - 1])
    return c, model, model.parameters.values


def importance_log_ratios(spec: StudySpec, variant: Variant, data: Any) -> np.ndarray:
    """``ln p_k(data) − ln p_0(data)`` for each injected component k against the generator,
    at their generation values (the record field ``log_ratio``): each model of
    ``importance.inject``, or its one model at each point of ``importance.points`` (one
    likelihood of the data set, evaluated K times). The defensive-mixture weight of the toy
    is ``1 / ((1 − a) + (a/K) Σ_k exp(log_ratio_k))``
    (:func:`toyengine.summary.importance.mixture_weights`)."""
    imp = spec.importance
    if imp.get("family"):
        msg = ("importance.family: a toy's log ratio needs the alternative's fit to it "
               "(family_log_ratio), not the data set alone")
        raise ModelError(msg)
    l0 = _generation_log_likelihood(generator_model(spec, variant), data)
    if imp.get("points"):
        model = build_model(spec, variant, imp["inject"][0])
        nll = model.nll(data)
        constraint = NormalConstraint.from_parameters(model.parameters)
        return np.array([constraint.add_value(-float(nll(x)), x) - l0
                         for x in _point_values(model, imp["points"])])
    return np.array([_generation_log_likelihood(build_model(spec, variant, m), data) - l0
                     for m in imp["inject"]])
