"""The study plan: everything derived from a validated spec, computed once.

:class:`Plan` holds what the runner, the store and the workers need besides the spec itself:
the kind's rules (:class:`~toyengine.study.kinds.KindInfo`), the parameter axis, the display
labels and units, the look-elsewhere scan, the record schema of the store
(:mod:`toyengine.study.schema`), the truth and reference values per variant and the chunk
table. The runner builds it once, creates the store from it, ships it to every worker, and
each task runs :func:`toyengine.study.recipe.run_chunk` ``(plan, chunk)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from ..core.fit import scan_grid
from ..errors import ModelError
from .importance import signal_family
from .kinds import KindInfo, kind_info
from .reference import generator_model
from .schema import Field, empty_records, study_fields
from .spec import StudySpec, Variant, build_model

__all__ = ["Chunk", "Plan", "ScanPlan", "check_profile", "lee_local_dof", "param_axis",
           "param_labels", "plan_chunks", "scan_plan", "truth_and_reference"]


@dataclass(frozen=True)
class Chunk:
    """Toys ``[start, stop)`` of variant ``variant``; ``index`` is its slot in the store."""

    index: int
    variant: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def plan_chunks(n_variants: int, toys: int, chunk_size: int, start: int = 0,
                first_index: int = 0) -> list[Chunk]:
    """Chunks of at most ``chunk_size`` toys covering toys ``[start, toys)`` of every
    variant; chunks never span two variants."""
    out = []
    idx = first_index
    for v in range(n_variants):
        for a in range(start, toys, chunk_size):
            out.append(Chunk(idx, v, a, min(a + chunk_size, toys)))
            idx += 1
    return out


def param_axis(spec: StudySpec) -> tuple[str, ...]:
    """Union of the parameter names of the generator and every hypothesis, over the
    variants (random variants share the names of their first member), derived quantities
    after each model's parameters."""
    names: list[str] = []
    seen_random = False
    for v in spec.variants:
        if v.random:
            if seen_random:
                continue
            seen_random = True
        for m in (*spec.hypotheses, v.generate):
            model = build_model(spec, v, m)
            for n in (*model.parameters.names, *model.derived_names):
                if n not in names:
                    names.append(n)
    return tuple(names)


def _sweighted(spec: StudySpec) -> bool:
    """Does any fitted model of ``spec`` declare discriminating observables (its fits are
    then sWeighted, :mod:`toyengine.core.discriminants`)?"""
    return any(getattr(build_model(spec, v, h), "discriminants", None) is not None
               for v in spec.variants[:1] for h in spec.hypotheses)


def param_labels(spec: StudySpec, params: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``{name: (label, unit)}`` for ``params`` from the models' :class:`Parameter`
    declarations (first model that declares the name wins; derived quantities and
    parameters without a label get their name and no unit)."""
    out: dict[str, tuple[str, str]] = {}
    seen: set[str] = set()
    seen_random = False
    for v in spec.variants:
        if seen >= set(params):
            break
        if v.random:  # random variants share the names of their first member
            if seen_random:
                continue
            seen_random = True
        for m in (v.generate, *spec.hypotheses):
            model = build_model(spec, v, m)
            seen.update(model.derived_names)
            for p in model.parameters:
                seen.add(p.name)
                if p.name not in out and (p.label or p.unit):
                    out[p.name] = (p.label or p.name, p.unit)
    return {n: out.get(n, (n, "")) for n in params}


def lee_local_dof(model: Any, null_names: set[str]) -> tuple[int, bool]:
    """Degrees of freedom of t at fixed scan parameters (the free parameters of the
    alternative alone, scan parameters excluded) and whether the local statistic is
    one-sided (a single yield bounded at zero: ½ χ²_1, Chernoff, Ann. Math. Statist. 25
    (1954) 573)."""
    scan = set(model.scan_parameters)
    extra = [p for p in model.parameters
             if p.name not in null_names and p.name not in scan and not p.fixed]
    one_sided = len(extra) == 1 and 0.0 in extra[0].limits
    return len(extra), one_sided


@dataclass(frozen=True, eq=False)
class ScanPlan:
    """The look-elsewhere scan of a significance study (``fit.scan``).

    Attributes
    ----------
    names : tuple of str
        The alternative model's free scan parameters.
    points : ndarray, shape (n_points, n_scan)
        The grid points: ``grid[i]`` bin centres spanning parameter ``i``'s limits, or with
        ``fit.scan.spacing`` the lattice of :func:`scan_lattice` (limits included), the
        first parameter varying slowest (C order, so ``scan_t`` reshapes to ``grid``).
    grid : tuple of int
        Points per scan parameter.
    toys : int or None
        Only the first ``toys`` toys are scanned (None: all).
    lee_dof, lee_one_sided : int, bool
        :func:`lee_local_dof` of the alternative against the null model.
    """

    names: tuple[str, ...]
    points: np.ndarray
    grid: tuple[int, ...]
    toys: int | None
    lee_dof: int
    lee_one_sided: bool


def scan_plan(spec: StudySpec) -> ScanPlan | None:
    """The look-elsewhere scan of ``spec`` (``fit.scan``), or None.

    Raises
    ------
    ModelError
        ``fit.scan.grid`` does not match the alternative's free scan parameters, or one of
        them has an infinite limit.
    """
    scan = spec.fit.get("scan")
    if not scan:
        return None
    h1 = build_model(spec, spec.variants[0], spec.test["h1"])
    h0 = build_model(spec, spec.variants[0], spec.test["h0"])
    names = tuple(n for n in h1.scan_parameters if not h1.parameters[n].fixed)
    grid = tuple(int(k) for k in scan["grid"])
    if len(names) != len(grid):
        msg = (f"fit.scan.grid has {len(grid)} entries but the model {spec.test['h1']!r} has "
               f"the free scan parameters {names}")
        raise ModelError(msg)
    for n in names:
        lo, hi = h1.parameters[n].limits
        if not (math.isfinite(lo) and math.isfinite(hi)):
            msg = f"fit.scan: scan parameter {n!r} needs finite limits, has {(lo, hi)}"
            raise ModelError(msg)
    dof, one_sided = lee_local_dof(h1, set(h0.parameters.names))
    spacing = scan.get("spacing")
    points = (scan_grid(h1.parameters, names, grid) if spacing is None
              else scan_lattice(h1.parameters, names, grid, spacing))
    return ScanPlan(names, points, grid, scan["toys"], dof, one_sided)


def scan_lattice(params: Any, names: Sequence[str], grid: Sequence[int],
                 spacing: Sequence[str]) -> np.ndarray:
    """The points of ``fit.scan`` with ``spacing``: per parameter ``grid[i]`` points from its
    lower to its upper limit, both included, evenly (``linear``) or geometrically (``log``)
    spaced; one row a point, the first parameter varying slowest.

    A field whose correlation length shrinks towards one limit (a state's mass scan, whose
    features are about a quarter of its width wide, with the width at its lower limit) is
    resolved by a geometric axis with far fewer points than by an even one; and the
    limits, where the search's narrowest states lie, are on the lattice.

    Raises
    ------
    ModelError
        ``spacing`` does not give one entry per scan parameter, an axis has fewer than 2
        points, or a ``log`` axis does not lie above zero.
    """
    if len(spacing) != len(names):
        msg = (f"fit.scan.spacing has {len(spacing)} entries but the scan parameters are "
               f"{tuple(names)}")
        raise ModelError(msg)
    axes = []
    for n, k, how in zip(names, grid, spacing, strict=True):
        lo, hi = params[n].limits
        if k < 2:
            msg = f"fit.scan: {n!r} needs at least 2 points with spacing {how!r} (has {k})"
            raise ModelError(msg)
        if how == "log":
            if not lo > 0:
                msg = f"fit.scan.spacing: log needs {n!r} above zero, its limits are {(lo, hi)}"
                raise ModelError(msg)
            axes.append(lo * (hi / lo) ** (np.arange(k) / (k - 1)))
        else:
            axes.append(np.linspace(lo, hi, k))
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1)


def check_profile(spec: StudySpec) -> None:
    """Raise :class:`ModelError` when ``fit.profile.grid`` does not have one size per free
    scan parameter of every hypothesis that has scan parameters (variant 0's models), or
    ``fit.profile.free`` or ``fit.restarts.params`` names a parameter no hypothesis has."""
    prof = spec.fit.get("profile") or {}
    if not prof and not spec.restart_sets:
        return
    models = [build_model(spec, spec.variants[0], h) for h in spec.hypotheses]
    for h, model in zip(spec.hypotheses, models, strict=True):
        names = tuple(n for n in model.scan_parameters if not model.parameters[n].fixed)
        if prof and names and len(names) != len(prof["grid"]):
            msg = (f"fit.profile.grid has {len(prof['grid'])} entries but the model {h!r} "
                   f"has the free scan parameters {names}")
            raise ModelError(msg)
    known = {n for model in models for n in model.parameters.names}
    for option, names in (("fit.profile.free", prof.get("free")),
                          *((f"{path}.params", params)
                            for path, params, _ in spec.restart_sets)):
        unknown = [n for n in names or () if n not in known]
        if unknown:
            msg = (f"{option} names {unknown}, which no hypothesis has "
                   f"(parameters: {sorted(known)})")
            raise ModelError(msg)


def _data_space(model: Any) -> tuple[object, ...] | None:
    """What a model's data sets are: the observable's name and range (1-D models), the runs
    (Dalitz models), or None when the model does not say."""
    obs = getattr(model, "observable", None)
    if obs is not None:
        return ("observable", obs.name, float(obs.lo), float(obs.hi))
    runs = getattr(model, "run_names", None)
    return ("runs", *runs) if runs is not None else None


def check_importance(spec: StudySpec) -> None:
    """Raise :class:`ModelError` when an injected model of ``importance.inject`` describes
    other data than the generating model (another observable, range or runs): its
    likelihood ratio would then compare densities of different spaces."""
    imp = spec.importance
    if not imp:
        return
    v = spec.variants[0]
    gen = build_model(spec, v, v.generate)
    want = _data_space(gen)
    for name in imp["inject"]:
        model = build_model(spec, v, name)
        got = _data_space(model)
        if got != want:
            msg = (f"importance.inject: model {name!r} describes {got} but the generating "
                   f"model {v.generate!r} describes {want}; the weights need the same data "
                   "space")
            raise ModelError(msg)
        mismatch = getattr(gen, "data_space_mismatch", None)
        why = mismatch(model) if callable(mismatch) else None
        if why is not None:
            msg = (f"importance.inject: model {name!r} has {why} than the generating model "
                   f"{v.generate!r}; the weights need the same phase space and maps")
            raise ModelError(msg)
    if imp.get("family"):
        signal_family(spec, v)  # raises ModelError naming a parameter it cannot draw
    points = imp.get("points")
    if points:
        _check_points(build_model(spec, v, imp["inject"][0]).parameters, points,
                      imp["inject"][0])


def _check_points(params: Any, points: Mapping[str, Sequence[float]], name: str) -> None:
    """Each column of ``importance.points`` names a parameter of the injected model and stays
    within its limits (the model is sampled and its likelihood evaluated there)."""
    for pname, col in points.items():
        if pname not in params:
            msg = (f"importance.points: {pname!r} is not a parameter of model {name!r} "
                   f"({', '.join(params.names)})")
            raise ModelError(msg)
        lo, hi = params[pname].limits
        bad = [x for x in col if not lo <= x <= hi]
        if bad:
            msg = (f"importance.points: {pname} = {bad[0]:g} is outside its limits "
                   f"[{lo:g}, {hi:g}] in model {name!r} ({len(bad)} of {len(col)} points)")
            raise ModelError(msg)


def truth_and_reference(spec: StudySpec, params: Sequence[str]) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """``truth`` (variant, param): the generation values of each variant's generator (after
    its reference fit, :func:`~toyengine.study.reference.generator_model`) and its derived
    quantities at them; ``reference`` (param,): the unpatched first hypothesis' start
    values, else variant 0's truth. NaN where a model lacks the parameter."""
    truth = np.full((len(spec.variants), len(params)), np.nan)
    for v in spec.variants:
        gen = generator_model(spec, v)
        for n, val in zip(gen.parameters.names, gen.parameters.values, strict=True):
            truth[v.index, params.index(n)] = val
        # e.g. the generated fit fractions
        for n, val in zip(gen.derived_names, gen.derived(gen.parameters.values), strict=True):
            truth[v.index, params.index(n)] = val
    reference = truth[0].copy()
    base = spec.variants[0]
    if base.patches:  # the reference is the unpatched first hypothesis
        base = replace(base, patches={}, random=False, index=0)
    ref_model = build_model(spec, base, spec.hypotheses[0])
    for n, val in zip(ref_model.parameters.names, ref_model.parameters.values, strict=True):
        reference[params.index(n)] = val
    return truth, reference


@dataclass(frozen=True, eq=False)
class Plan:
    """A study as the engine runs it; build with :meth:`Plan.of`.

    Attributes
    ----------
    spec : StudySpec
        The validated study.
    kind : KindInfo
        The rules of its kind.
    params : tuple of str
        The store's parameter axis (:func:`param_axis`).
    labels : mapping
        ``{param: (display label, unit)}`` (:func:`param_labels`).
    scan : ScanPlan or None
        The look-elsewhere scan, if the study has one.
    fields : tuple of Field
        The per-toy fields of its store (:func:`~toyengine.study.schema.study_fields`).
    """

    spec: StudySpec
    kind: KindInfo
    params: tuple[str, ...]
    labels: Mapping[str, tuple[str, str]]
    scan: ScanPlan | None
    fields: tuple[Field, ...]

    @classmethod
    def of(cls, spec: StudySpec) -> Plan:
        """The plan of ``spec`` (its models are built, once per process)."""
        params = param_axis(spec)
        scan = scan_plan(spec)
        check_profile(spec)
        check_importance(spec)
        features = {"scan"} if scan is not None else set()
        if spec.importance is not None:
            features.add("importance")
        if _sweighted(spec):
            features.add("sweights")
        return cls(spec, kind_info(spec.kind), params, param_labels(spec, params), scan,
                   study_fields(features))

    @property
    def variants(self) -> tuple[Variant, ...]:
        return self.spec.variants

    @property
    def hypotheses(self) -> tuple[str, ...]:
        return self.spec.hypotheses

    @property
    def nested_pair(self) -> tuple[int, int] | None:
        """Indices of ``(h0, h1)`` among the hypotheses for a nested toy test
        (:attr:`KindInfo.nested_test`), else None."""
        h0, h1 = self.spec.test.get("h0"), self.spec.test.get("h1")
        if not self.kind.nested_test or h0 not in self.hypotheses or h1 not in self.hypotheses:
            return None
        return self.hypotheses.index(h0), self.hypotheses.index(h1)

    @cached_property
    def fit_order(self) -> tuple[int, ...]:
        """Hypothesis indices in fitting order: for a nested test the null hypothesis first,
        so that its minimum can start the alternative's fit."""
        order = list(range(len(self.hypotheses)))
        pair = self.nested_pair
        if pair is not None:
            order.remove(pair[0])
            order.insert(0, pair[0])
        return tuple(order)

    @property
    def sizes(self) -> dict[str, int]:
        """Length of every dimension of the per-toy fields after ``(variant, toy)``."""
        return {"hypothesis": len(self.hypotheses), "param": len(self.params),
                "scan_point": 0 if self.scan is None else len(self.scan.points),
                "injected": len(self.injected)}

    @property
    def injected(self) -> tuple[str, ...]:
        """The injected components of an importance-sampled study: the models of
        ``importance.inject``, or ``"name[k]"`` for its one model at point k of
        ``importance.points``."""
        imp = self.spec.importance
        if not imp:
            return ()
        if imp.get("points"):
            n = len(next(iter(imp["points"].values())))
            return tuple(f"{imp['inject'][0]}[{k}]" for k in range(n))
        return tuple(imp["inject"])

    def empty_records(self, n_toys: int) -> dict[str, np.ndarray]:
        """The arrays of one chunk of ``n_toys`` toys, every field at its fill value."""
        return empty_records(self.fields, self.sizes, (n_toys,))

    def chunks(self, chunk_size: int) -> list[Chunk]:
        """The chunk table of a store of ``spec.toys`` toys per variant."""
        return plan_chunks(len(self.variants), self.spec.toys, chunk_size)

    @cached_property
    def truth_and_reference(self) -> tuple[np.ndarray, np.ndarray]:
        """``(truth, reference)`` (:func:`truth_and_reference`), computed on first use
        (when the store is created; a resumed run does not need them)."""
        return truth_and_reference(self.spec, self.params)
