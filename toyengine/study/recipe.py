"""The one toy recipe behind every study kind, and ``run_chunk`` — pure and Dask-free.

Models satisfy :class:`~toyengine.models.protocol.ToyModel`: besides ``sample`` and ``nll``,
their derived quantities (``derived_names``/``derived(values)``, e.g. Dalitz fit fractions)
are stored as extra ``param`` entries with NaN error, and their ``gof_statistic(data,
values)`` is recorded in ``gof`` for the kinds that record one. What a chunk writes is the
record schema of :mod:`toyengine.study.schema`; what the kind means comes from the
:class:`~toyengine.study.plan.Plan`.

::

    for variant v:                       models_v = apply_variation(base, v, seed(v))
        for toy t in chunk:              data = generate(models_v.generator, seed(v, t))
            for hypothesis h:            fit(models_v[h], data)

Seeds (:mod:`toyengine.study.seeds` documents the key scheme): the data of toy ``t`` come from
streams keyed by ``(root_seed, t, component)`` — the same for every variant, so variants are
paired (common random numbers) — or, with ``paired: false``, by ``(root_seed, v, t,
component)``; the multi-start points of hypothesis ``h`` from ``(root_seed, t, h)`` (plus
``v`` unpaired); a random variant ``v`` builds its models from ``(root_seed, v)``; an
importance-sampled study (``importance:``) picks the model that generates toy ``t`` from
``(root_seed, t)`` of its own domain (:func:`importance_component`). Nothing depends on
chunking, worker count, order, retries or resumes.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..core.fit import (
    SAME_MINIMUM,
    FailReason,
    FitResult,
    FitStatus,
    ProfileStarts,
    Restarts,
    fit,
    flat_parameters,
    lower_of,
)
from ..core.likelihood import NormalConstraint, as_likelihood
from ..errors import FitFailureWarning, ModelError
from ..models.protocol import ToyModel
from .importance import (
    family_log_ratio,
    importance_component,
    importance_log_ratios,
    signal_family,
    toy_generator,
)
from .importance_family import SignalFamily
from .plan import Chunk, Plan, param_axis
from .reference import generator_model
from .seeds import data_streams, fit_rng, global_observables_rng
from .spec import StudySpec, Variant, build_model, load_fixed_data

__all__ = ["ChunkResult", "asimov_data", "failure_kind", "flat_when_off", "global_observables",
           "importance_component",
           "importance_log_ratios", "run_chunk", "toy_data", "toy_nll", "toy_nll_function"]


@dataclass
class ChunkResult:
    """Plain arrays for one chunk: the fields of its plan
    (:data:`toyengine.study.schema.RECORD_FIELDS`), leading dimension the chunk's toys."""

    chunk: Chunk
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    elapsed: float = 0.0
    #: the failures of the chunk by kind (:func:`failure_kind`): their count and the first
    #: one's reason, exception type and message, toy, variant and hypothesis (and the
    #: worker, set by the task that ran it)
    causes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        return int(np.count_nonzero(self.arrays["status"] != int(FitStatus.VALID)))


#: characters of an exception message kept in the store
MESSAGE_CHARS = 300


def failure_kind(reason: FailReason, message: str) -> tuple[str, str, str]:
    """``(kind, exception type, message)`` of a failure: the kind is the reason's name, with
    the exception's type for one that raised (``EXCEPTION:AttributeError``); the type and
    message come from ``"Type: message"`` (what the fitter records; a Newton attempt's
    prefix is dropped)."""
    text = " ".join(str(message).split())
    etype = ""
    if reason in (FailReason.EXCEPTION, FailReason.GENERATION) and text:
        last = text.split("; ")[-1].removeprefix("Newton: ")
        head, sep, rest = last.partition(": ")
        if sep and head.isidentifier():
            etype, text = head, rest
    kind = reason.name + (f":{etype}" if etype else "")
    return kind, etype, text[:MESSAGE_CHARS]


def _note_failure(causes: dict[str, dict[str, Any]], reason: FailReason, message: str,
                  toy: int, variant: str, hypothesis: str) -> None:
    kind, etype, text = failure_kind(reason, message)
    rec = causes.get(kind)
    if rec is None:
        causes[kind] = {"count": 1, "reason": reason.text, "type": etype, "message": text,
                        "toy": int(toy), "variant": variant, "hypothesis": hypothesis}
    else:
        rec["count"] += 1


def _failure_message(model: ToyModel, data: Any, res: FitResult) -> str:
    """The fitter's message of an invalid fit, with the reason a weighted fit can have no
    minimum where it applies (:meth:`~toyengine.core.model1d.Model1D.negative_weight_note`)."""
    note = getattr(model, "negative_weight_note", None)
    extra = note(data, res.values) if note is not None and res.values.size else ""
    return f"{res.message}; {extra}" if extra else res.message


def _n_events(data: Any) -> int:
    n = getattr(data, "n_events", None)
    if n is not None:
        return int(n)
    try:
        return len(data)
    except TypeError:
        return -1


def _nested_starts(pair: tuple[int, int] | None, hyps: list[ToyModel],
                   fitted: dict[int, FitResult], h: int) -> list[np.ndarray]:
    """The null minimum embedded in the alternative model, as an extra start of its fit.

    For a nested test (``pair``: the indices of ``h0`` and ``h1``,
    :attr:`~toyengine.study.plan.Plan.nested_pair`) the alternative ``h1`` contains the null
    ``h0``: shared parameters take their fitted ``h0`` values, the parameters of ``h1``
    alone are set to 0 where their limits allow (the signal yield or amplitude; the model
    then equals ``h0``) and keep their nominal value otherwise (the scan parameters, which
    do not exist under ``h0``). MIGRAD only descends from there, so the ``h1`` minimum
    cannot end above the ``h0`` one and t = 2 (nll_h0 − nll_h1) ≥ 0 up to the tolerance.
    """
    r0 = _null_fit(pair, fitted, h)
    return [] if r0 is None else [_embedded(pair, hyps, h, r0.names, r0.values)]


def _null_modes(pair: tuple[int, int] | None, hyps: list[ToyModel],
                fitted: dict[int, FitResult], h: int) -> list[np.ndarray]:
    """The null fit's other modes embedded in the alternative model as
    :func:`_nested_starts` embeds its minimum: the minima its restarts found a lower one than
    (:attr:`~toyengine.core.fitresult.FitResult.replaced_minima`, e.g. another solution of
    a K π S-wave). The alternative's lowest minimum may lie in such a mode (a signal that
    takes over part of what the other S-wave solution described), so its search runs once
    more from each, its profile's fixed parameters there."""
    r0 = _null_fit(pair, fitted, h)
    if r0 is None:
        return []
    return [_embedded(pair, hyps, h, r0.names, x) for x in r0.replaced_minima]


def _search(spec: StudySpec, model: ToyModel, nll: Any, pair: tuple[int, int] | None,
            hyps: list[ToyModel], fitted: dict[int, FitResult], h: int,
            extra: list[np.ndarray], toy: int, vkey: int | None) -> FitResult:
    """One search of hypothesis ``h`` of toy ``toy`` with the study's fit settings: its
    starts, ``extra`` (the nested start or a null mode embedded, which also fixes the
    profile's other parameters) and restarts."""
    many = spec.fit["starts"] > 1  # the starts' generator is drawn from only then
    return fit(nll, model.parameters, starts=spec.fit["starts"],
               rng=fit_rng(spec.seed, toy, h, vkey) if many else None,
               minos=spec.fit["minos"], strategy=spec.fit["strategy"],
               hesse=spec.fit["hesse"], scan=model.scan_parameters, extra_starts=extra,
               profile=_profile(spec, model, pair, fitted, h, extra),
               restarts=_restarts(spec))


def _cross_starts(pair: tuple[int, int], hyps: list[ToyModel], fitted: dict[int, FitResult],
                  nlls: dict[int, Any], nll1: Any, r1: FitResult,
                  spec: StudySpec) -> tuple[FitResult, np.ndarray | None]:
    """Each hypothesis of a nested test fitted once more from the other's nuisance mode (with
    ``fit.restarts``): the null from the alternative's minimum (its shared parameters), then
    the alternative from the null's shared parameters with its own signal parameters.

    Nuisance parameters with several minima (the two solutions of a LASS K π S-wave: Aston
    et al., Nucl. Phys. B 296 (1988) 493) let each search end in another solution, and t
    is then wrong by up to a few units either way. A cross fit replaces a hypothesis' minimum
    only when lower by more than ``SAME_MINIMUM`` (its calls are counted either way); the
    null's (``fitted[pair[0]]``) is updated in place. Returns the alternative's result and,
    when the null's fit from the alternative's minimum ended in another minimum than the
    null's search (lower or higher by more than ``SAME_MINIMUM``), that null mode embedded
    in the alternative (:func:`_nested_starts`): the alternative's search is to run once
    more from it, as from a mode the null's restarts left (:func:`_null_modes`)."""
    h0, h1 = pair
    r0 = _null_fit(pair, fitted, h1)
    if r0 is None or not math.isfinite(r1.nll) or h0 not in nlls:
        return r1, None
    kw = {"strategy": spec.fit["strategy"], "hesse": spec.fit["hesse"]}
    alt = {n: x for n, x in zip(r1.names, r1.values, strict=True) if math.isfinite(x)}
    c0 = fit(nlls[h0], hyps[h0].parameters.with_values(alt), **kw)
    mode = (_embedded(pair, hyps, h1, c0.names, c0.values)
            if math.isfinite(c0.nll) and abs(c0.nll - r0.nll) > SAME_MINIMUM else None)
    r0 = fitted[h0] = _lower(r0, c0)
    null = {n: x for n, x in zip(r0.names, r0.values, strict=True) if math.isfinite(x)}
    return _lower(r1, fit(nll1, hyps[h1].parameters.with_values({**alt, **null}), **kw)), mode


def _lower(res: FitResult, other: FitResult) -> FitResult:
    """``other`` in place of ``res`` when lower by more than ``SAME_MINIMUM`` (another
    minimum, not the same one refitted), with the calls, time and starts of both."""
    if math.isfinite(other.nll) and other.nll < res.nll - SAME_MINIMUM:
        return lower_of(res, other)
    return replace(res, nfcn=res.nfcn + other.nfcn, time=res.time + other.time,
                   n_starts=res.n_starts + other.n_starts)


def _null_fit(pair: tuple[int, int] | None, fitted: dict[int, FitResult],
              h: int) -> FitResult | None:
    """The null's fit of this toy when ``h`` is the alternative of a nested test and the
    null's −ln L is finite; else None."""
    if pair is None or h != pair[1]:
        return None
    r0 = fitted.get(pair[0])
    return r0 if r0 is not None and math.isfinite(r0.nll) else None


def _embedded(pair: tuple[int, int], hyps: list[ToyModel], h: int, names: Sequence[str],
              values: np.ndarray) -> np.ndarray:
    """A vector of the null's parameters (``names``, ``values``) as a point of the
    alternative model ``hyps[h]`` (:func:`_nested_starts`)."""
    null = dict(zip(names, values, strict=True))
    zero = _null_embedding(hyps[h], hyps[pair[0]].parameters)
    x = []
    for p in hyps[h].parameters:
        lo, hi = p.limits
        if p.name in null and math.isfinite(null[p.name]):
            x.append(min(max(null[p.name], lo), hi))
        else:
            x.append(zero.get(p.name, p.value))
    return np.array(x, dtype=float)


def _profile(spec: StudySpec, model: ToyModel, pair: tuple[int, int] | None,
             fitted: dict[int, FitResult], h: int,
             nested: list[np.ndarray]) -> ProfileStarts | None:
    """The study's ``fit.profile`` for ``model``'s fit (None without one or without scan
    parameters). In the alternative fit of a nested test the profile floats only the
    parameters of the alternative alone (the signal couplings), the others at the null
    minimum (``nested``, :func:`_nested_starts`): a few parameters per grid point."""
    prof = spec.fit.get("profile")
    if prof is None or not model.scan_parameters:
        return None
    free = base = None
    if nested:
        r0 = fitted[pair[0]]  # type: ignore[index]
        scan = set(model.scan_parameters)
        free = tuple(n for n in model.parameters.free_names
                     if n not in r0.names and n not in scan)
        base = nested[0]
    elif prof.get("free"):
        free = tuple(n for n in prof["free"] if n in model.parameters.free_names)
        base = _fitted_base(model, fitted)
    return ProfileStarts(tuple(prof["grid"]), prof["best"], free, base, prof["refine"],
                         prof.get("line", 0), prof.get("edges", 0), prof.get("screen", 0))


def _restarts(spec: StudySpec) -> tuple[Restarts, ...] | None:
    """The study's ``fit.restarts``, one set or a list of sets (None without one);
    parameters a hypothesis does not have are ignored in its fit."""
    sets = tuple(Restarts(tuple(params), points) for _, params, points in spec.restart_sets)
    return sets or None


def _fitted_base(model: ToyModel, fitted: dict[int, FitResult]) -> np.ndarray | None:
    """The profile's fixed parameters for a test of separate hypotheses (J^P: the same
    amplitude model with another spin of one state): the parameters ``model`` shares with
    a hypothesis already fitted to this toy at that fit's minimum, the others at their
    start values; None before any fit. With the shared amplitudes at this toy's values the
    coupling-only profile ranks the full fit's minima as the full fit would: at the start
    values the profile ranks minima by amplitudes that do not fit this toy (the 1⁻ fit
    of the Z_c(4100)⁻ J^P toys, ``studies/zc4100/jp_rejection.yaml``, says by how much)."""
    done = [r for r in fitted.values() if math.isfinite(r.nll)]
    if not done:
        return None
    got = dict(zip(done[0].names, done[0].values, strict=True))
    x = model.parameters.values.copy()
    for i, p in enumerate(model.parameters):
        if p.name in got and not p.fixed and math.isfinite(got[p.name]):
            x[i] = min(max(got[p.name], p.limits[0]), p.limits[1])
    return x


def _null_embedding(model: ToyModel, null: Any) -> dict[str, float]:
    """Parameters of an alternative model that the null lacks — absent from the null's
    parameters ``null``, or fixed there at 0 ("``n_sig`` fixed at 0") — and are set to 0
    to recover it (free, not scan parameters, 0 within their limits): the signal yield or
    amplitude."""
    scan = set(model.scan_parameters)

    def switched_off(name: str) -> bool:
        if name not in null:
            return True
        p0 = null[name] if hasattr(null, "free_names") else None  # a set: names only
        return p0 is not None and p0.fixed and p0.value == 0.0

    return {p.name: 0.0 for p in model.parameters
            if switched_off(p.name) and p.name not in scan and not p.fixed
            and p.limits[0] <= 0.0 <= p.limits[1]}


def _signal_strengths(model: ToyModel, null: Any) -> list[str]:
    """The parameters of :func:`_null_embedding` bounded at zero (a yield, a magnitude; a
    free phase is not one): all at zero, the alternative model is the null."""
    return [n for n in _null_embedding(model, null)
            if 0.0 in model.parameters[n].limits]


def _collapse_to_null(pair: tuple[int, int] | None, hyps: list[ToyModel],
                      fitted: dict[int, FitResult], h: int, res: FitResult) -> FitResult:
    """An alternative fit that ended with its signal fixed at zero *is* the null model: its
    minimum over the remaining parameters is the null fit's, so it takes the null's −ln L
    and its convergence (t = 0 exactly, rather than minimiser noise of either sign; a
    boundary result, not a failure: the point mass at t = 0 of Chernoff, Ann. Math. Stat.
    25 (1954) 573)."""
    if pair is None or h != pair[1]:
        return res
    r0 = fitted.get(pair[0])
    if r0 is None or not math.isfinite(r0.nll):
        return res
    zero = _signal_strengths(hyps[h], hyps[pair[0]].parameters)
    if zero and set(zero) <= set(res.fixed_at_limit) and all(
            res.value(n) == 0.0 for n in zero):
        return replace(res, nll=r0.nll, valid=r0.valid, status=r0.status, reason=r0.reason,
                       message=r0.message)
    return res


def flat_when_off(spec: StudySpec, variant: int = 0) -> dict[str, dict[str, Any]]:
    """The parameters each fit fixes at their nominal values because the likelihood does not
    depend on them once a signal is switched off (:func:`toyengine.core.fit.flat_parameters`),
    probed on toy 0's data set of ``variant``.

    ``{hypothesis: {"off": [names at 0], "flat": [names], "always": bool}}``: ``always``
    for a model that fixes a yield at 0 itself (the null written as "``n_sig`` fixed at 0":
    every fit), else for the alternative of a nested test in the fits whose signal ends on
    its limit 0. Empty for a study where neither happens (nothing is computed then).
    """
    pair = (None if spec.kind not in ("significance", "jp_rejection", "template_smearing",
                                      "parameter_variation")
            else (spec.test.get("h0"), spec.test.get("h1")))
    v = _variant(spec, variant)
    models = {h: build_model(spec, v, h) for h in spec.hypotheses}
    todo: dict[str, tuple[list[str], bool]] = {}
    for h, m in models.items():
        zeros = [p.name for p in m.parameters if p.fixed and p.value == 0.0]
        if zeros and m.parameters.free_names:
            todo[h] = (zeros, True)
        elif pair is not None and h == pair[1] and pair[0] in models:
            off = _signal_strengths(m, models[pair[0]].parameters)
            if off:
                todo[h] = (off, False)
    if not todo:
        return {}
    data = toy_data(spec, 0, variant)
    out: dict[str, dict[str, Any]] = {}
    for h, (off, always) in todo.items():
        params = models[h].parameters
        if not always:
            params = params.updated({n: {"value": 0.0, "fixed": True} for n in off})
        flat = flat_parameters(models[h].nll(data), params)
        if flat:
            out[h] = {"off": off, "flat": list(flat), "always": always}
    return out


def flat_note(flat: dict[str, dict[str, Any]]) -> str:
    """One line on :func:`flat_when_off`'s parameters ("" when there are none)."""
    parts = []
    for h, d in flat.items():
        when = "every fit" if d["always"] else "fits where " + " = ".join(d["off"]) + " = 0"
        parts.append(f"{h}: {', '.join(d['flat'])} fixed at nominal in {when} "
                     f"({', '.join(d['off'])} = 0 leaves them flat)")
    return "; ".join(parts)


def _scan_toy(model: ToyModel, nll: Any, names: tuple[str, ...], points: np.ndarray,
              r0: FitResult | None, nll0: float, spec: StudySpec,
              null: Any = None, r1: FitResult | None = None) -> np.ndarray:
    """``t(θ) = 2 (nll_h0 − nll_h1(θ))`` at each scan point θ, the other parameters fitted
    from the null minimum with the signal at its nominal start and, given ``r1``, also from
    the alternative's own minimum (the lower of the two fits; the alternative's search may
    have found the nuisance parameters in another mode, e.g. the other solution of an
    S-wave, which a fit from the null minimum never reaches); a signal ending at zero is
    refitted fixed there, giving t = 0. ``null``: the null model's parameters (default:
    the names of ``r0``)."""
    null_params = null
    out = np.full(len(points), np.nan)
    if r0 is None or not math.isfinite(nll0):
        return out
    null = dict(zip(r0.names, r0.values, strict=True))
    bases = [model.parameters.with_values(
        {n: v for n, v in null.items() if n in model.parameters and math.isfinite(v)})]
    if r1 is not None and math.isfinite(r1.nll):
        bases.append(model.parameters.with_values(
            {n: v for n, v in zip(r1.names, r1.values, strict=True) if math.isfinite(v)}))
    zero = _signal_strengths(model, null_params if null_params is not None else set(null))
    for j, row in enumerate(points):
        at = {n: {"value": float(v), "fixed": True} for n, v in zip(names, row, strict=True)}
        res = None
        for base in bases:
            # −ln L only: no HESSE (it cost ~10 times the fit itself on a Dalitz model)
            found = fit(nll, base.updated(at), strategy=spec.fit["strategy"], hesse=False)
            if res is None or found.nll < res.nll or not math.isfinite(res.nll):
                res = found
        assert res is not None
        if zero and set(zero) <= set(res.fixed_at_limit):
            out[j] = 0.0  # the signal vanished: h1 at this θ is h0
        elif math.isfinite(res.nll):
            out[j] = 2.0 * (nll0 - res.nll)
    return out


def _constrained(spec: StudySpec, variant: Variant, params: tuple[str, ...]) -> list[
        tuple[int, float, float]]:
    """``(param-axis index, generation value, sigma)`` of every Gaussian-constrained
    parameter of the hypotheses, in parameter-axis order. The generation value is the
    generator's value of that parameter, else the constraint mean."""
    gen = build_model(spec, variant, variant.generate)
    seen: dict[str, tuple[float, float]] = {}
    for h in spec.hypotheses:
        for p in build_model(spec, variant, h).parameters:
            if p.constraint is not None and not p.fixed and p.name not in seen:
                val = gen.parameters[p.name].value if p.name in gen.parameters \
                    else p.constraint.mean
                seen[p.name] = (val, p.constraint.sigma)
    return [(params.index(n), *seen[n]) for n in params if n in seen]


def _nominal_global_observables(spec: StudySpec, variant: Variant,
                                params: tuple[str, ...]) -> np.ndarray:
    out = np.full(len(params), np.nan)
    for h in spec.hypotheses:
        for p in build_model(spec, variant, h).parameters:
            if p.constraint is not None and not p.fixed and np.isnan(out[params.index(p.name)]):
                out[params.index(p.name)] = p.constraint.mean
    return out


def global_observables(spec: StudySpec, variant: Variant, toy: int,
                       params: tuple[str, ...]) -> np.ndarray:
    """The auxiliary measurements of toy ``toy``: the mean of every Gaussian constraint.

    With ``fit.global_observables: sample`` (default) each constraint mean is drawn from
    ``N(generation value, sigma)``, as an unconditional frequentist ensemble must (Cowan,
    Cranmer, Gross, Vitells, Eur. Phys. J. C 71 (2011) 1554, Sect. 2; the RooStats and pyhf
    convention), from a stream of its own (:func:`toyengine.study.seeds.global_observables_rng`)
    — independent of the data streams, the same for every variant. With ``fixed`` the
    means stay at their configured values (conditional toys). NaN for unconstrained
    parameters.
    """
    return _GlobalObservables(spec, variant, params).of(toy)


class _GlobalObservables:
    """:func:`global_observables` of one variant's toys, with what is the same for all of
    them (the nominal means, the constrained parameters) found once."""

    def __init__(self, spec: StudySpec, variant: Variant, params: tuple[str, ...]):
        self.seed = spec.seed
        self.nominal = _nominal_global_observables(spec, variant, params)
        self.nominal.setflags(write=False)
        sampled = spec.fit.get("global_observables", "sample") != "fixed"
        self.terms = _constrained(spec, variant, params) if sampled else []

    def of(self, toy: int) -> np.ndarray:
        """The global observables of toy ``toy`` (a new array)."""
        out = self.nominal.copy()
        if self.terms:
            z = global_observables_rng(self.seed, toy).standard_normal(len(self.terms))
            for (i, val, sig), zi in zip(self.terms, z, strict=True):
                out[i] = val + sig * zi
        return out


def _with_global_observables(nll: Any, parameters: Any, gobs: np.ndarray,
                             pindex: dict[str, int]) -> Any:
    """``nll`` with its Gaussian constraint means moved to the toy's global observables
    ``gobs`` (:meth:`~toyengine.core.likelihood.NormalConstraint.shift`, added to ``nll``)."""
    con = NormalConstraint.from_parameters(parameters)
    if con.size == 0:
        return nll
    names = [parameters.names[i] for i in con.idx]
    mu_new = np.array([gobs[pindex[n]] for n in names])
    keep = np.isfinite(mu_new) & (mu_new != con.mu)
    if not keep.any():
        return nll
    return as_likelihood(nll) + con.subset(keep).shift(mu_new[keep])


def _variant(spec: StudySpec, variant: int) -> Variant:
    """Variant ``variant`` of ``spec``, or a :class:`ModelError` naming the valid range."""
    if not 0 <= variant < len(spec.variants):
        msg = f"variant {variant} is out of range: the study has {len(spec.variants)}"
        raise ModelError(msg)
    return spec.variants[variant]


def toy_data(spec: StudySpec, toy: int, variant: int = 0) -> Any:
    """The exact data set the engine fitted in toy ``toy`` of variant ``variant``.

    Rebuilt from the seeds (nothing extra is stored): the generator model sampled with the
    toy's data stream, or the study's fixed data set for kinds that refit one. Its −ln L
    under a hypothesis at the stored fitted values reproduces the stored ``nll`` (with the
    toy's global observables, :func:`global_observables`, in the constraint terms).
    """
    v = _variant(spec, variant)
    if not 0 <= toy:
        msg = f"toy {toy} must be >= 0"
        raise ModelError(msg)
    fixed = load_fixed_data(spec, generator_model(spec, v))
    if fixed is not None:
        return fixed
    _, gen, values = toy_generator(spec, v, toy)
    return gen.sample(values, data_streams(spec.seed, toy, None if spec.paired else v.index))


def asimov_data(spec: StudySpec, hypothesis: str | None = None,
                variant: int = 0) -> tuple[Any, Any]:
    """The Asimov data set of a study's model: ``(data, weights)`` for
    ``model.nll(data, weights)``, the expected data at the model's generation values
    (Cowan, Cranmer, Gross, Vitells, Eur. Phys. J. C 71 (2011) 1554).

    ``hypothesis`` names a model of the study; default: the model that generates variant
    ``variant``'s toys (after the reference fit of a model-variation study). Raises
    :class:`~toyengine.errors.ModelError` for a model without ``asimov``.
    """
    v = _variant(spec, variant)
    if hypothesis is None:
        model = generator_model(spec, v)
    elif hypothesis in spec.models:
        model = build_model(spec, v, hypothesis)
    else:
        msg = f"hypothesis {hypothesis!r} is not a model of the study ({sorted(spec.models)})"
        raise ModelError(msg)
    if not callable(getattr(model, "asimov", None)):
        msg = f"{type(model).__name__} has no asimov() (see toyengine.models.protocol)"
        raise ModelError(msg)
    return model.asimov(model.parameters.values)


def toy_nll_function(spec: StudySpec, toy: int, hypothesis: str,
                     variant: int = 0) -> Callable[[np.ndarray], float]:
    """The −ln L that the engine minimised for toy ``toy`` under ``hypothesis``: a function
    of that model's parameter vector, the toy's global observables in the constraint
    terms (refit it with :func:`toyengine.core.fit.fit` to check a stored minimum)."""
    v = spec.variants[variant]
    params = param_axis(spec)
    model = build_model(spec, v, hypothesis)
    gen = build_model(spec, v, v.generate)
    gobs = (global_observables(spec, v, toy, params) if load_fixed_data(spec, gen) is None
            else _nominal_global_observables(spec, v, params))
    return _with_global_observables(model.nll(toy_data(spec, toy, variant)), model.parameters,
                                    gobs, {n: i for i, n in enumerate(params)})


def toy_nll(spec: StudySpec, toy: int, hypothesis: str, values: np.ndarray,
            variant: int = 0) -> float:
    """−ln L of toy ``toy`` under ``hypothesis`` at ``values`` (that model's parameter
    order), global observables included: what the engine minimised."""
    nll = toy_nll_function(spec, toy, hypothesis, variant)
    return float(nll(np.asarray(values, dtype=float)))


def _sweighted_errors(a: dict[str, np.ndarray], at: tuple[int, int], model: ToyModel,
                      data: Any, res: FitResult, pindex: dict[str, int]) -> None:
    """The errors of a fit to sWeighted data (a model with discriminating observables,
    :mod:`toyengine.core.discriminants`): ``error`` becomes the asymptotically correct one
    (Langenbruch, Eur. Phys. J. C 82 (2022) 393), ``error_naive`` and ``error_sumw2`` hold
    the inverse weighted Hessian's and the sum-of-weights-squared one, over the parameters
    the fit left free (not those it fixed at a limit). Where the covariance cannot be
    computed (no minimum, a singular Hessian) the three stay NaN, and ``error`` is NaN for a
    parameter on its limit: the toy has no valid error there, and the pulls summary leaves
    it out of that parameter's row.

    MINOS bounds (if the fit ran MINOS) are those of the weighted −ln L, whose curvature is
    the naive error's: they are scaled by ``error / error_naive``, so that the interval keeps
    the weighted likelihood's asymmetry and takes the corrected covariance's size (NaN where
    ``error`` is)."""
    free = [n for n in res.free_names if n not in res.fixed_at_limit]
    cols = [pindex[n] for n in free]
    a["error"][(*at, cols)] = np.nan
    cov = None
    if free and math.isfinite(res.nll):
        try:
            cov = model.sweighted_covariance(data, res.values, free)  # type: ignore[attr-defined]
        except (ModelError, np.linalg.LinAlgError, FloatingPointError, ValueError):
            # no covariance at this minimum (a singular Hessian, events outside the range):
            # the errors stay NaN; any other exception is a bug and fails the toy with its cause
            cov = None
    if cov is not None:
        _store_sweighted(a, at, model, res, free, cols, cov)
    if res.minos_lower.size:
        with np.errstate(invalid="ignore"):
            scale = a["error"][(*at, cols)] / a["error_naive"][(*at, cols)]
        for k in ("minos_lower", "minos_upper"):
            a[k][(*at, cols)] *= scale


def _store_sweighted(a: dict[str, np.ndarray], at: tuple[int, int], model: ToyModel,
                     res: FitResult, free: list[str], cols: list[int], cov: Any) -> None:
    """Write the three errors of :func:`_sweighted_errors` from ``cov``."""
    with np.errstate(invalid="ignore"):
        for name, c in (("error", cov.corrected), ("error_naive", cov.naive),
                        ("error_sumw2", cov.sumw2)):
            a[name][(*at, cols)] = np.sqrt(np.diag(c))
    # a parameter on its limit (within half its naive error, iminuit's criterion) has no
    # asymptotically normal estimate, and where its density's slope vanishes there (the
    # angles of a positive polynomial at 0 or π/2) the sandwich error is ~0: no error
    lo, hi = (np.array([model.parameters[n].limits[k] for n in free]) for k in (0, 1))
    x = np.array([res.value(n) for n in free])
    near = np.minimum(x - lo, hi - x) < 0.5 * a["error_naive"][(*at, cols)]
    a["error"][(*at, [c for c, f in zip(cols, near, strict=True) if f])] = np.nan


def _family_weight(a: dict[str, np.ndarray], i: int, spec: StudySpec, v: Variant, t: int,
                   family: SignalFamily, data: Any, fitted: dict[int, FitResult], h: int,
                   causes: dict[str, dict[str, Any]]) -> None:
    """Store toy ``t``'s ``log_ratio`` of ``importance.family`` (it needs the alternative's
    fit); a toy whose weight cannot be computed is a failed fit of the alternative, with
    the cause, since its t cannot enter the weighted tail."""
    try:
        a["log_ratio"][i] = family_log_ratio(spec, v, t, family, data, fitted[h].values)
    except Exception as exc:
        warnings.warn(f"toy {t} of variant {v.name}: importance weight failed: {exc}",
                      FitFailureWarning, stacklevel=1)
        del fitted[h]
        a["status"][i, h] = FitStatus.EXCEPTION
        a["fail_reason"][i, h] = FailReason.EXCEPTION
        _note_failure(causes, FailReason.EXCEPTION,
                      f"importance weight: {type(exc).__name__}: {exc}", t, v.name,
                      spec.hypotheses[h])


def run_chunk(plan: Plan, chunk: Chunk) -> ChunkResult:
    """Run the toys of one chunk and return their records (pure: same input, same output).

    Parameters
    ----------
    plan : Plan
        The study's plan (:meth:`Plan.of <toyengine.study.plan.Plan.of>`): its spec, kind
        rules, parameter axis, look-elsewhere scan and record fields.
    chunk : Chunk
        The toys ``[chunk.start, chunk.stop)`` of variant ``chunk.variant``.
    """
    t0 = time.perf_counter()
    spec, params = plan.spec, plan.params
    pindex = {n: i for i, n in enumerate(params)}
    v = spec.variants[chunk.variant]
    hyps = [build_model(spec, v, h) for h in spec.hypotheses]
    gen = generator_model(spec, v)
    fixed = load_fixed_data(spec, gen)
    gobs_of = _GlobalObservables(spec, v, params)
    a = plan.empty_records(chunk.size)
    pair = plan.nested_pair
    scan = plan.scan
    family = signal_family(spec, v)
    causes: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(range(chunk.start, chunk.stop)):
        vkey = None if spec.paired else v.index
        try:
            if fixed is not None:
                data = fixed
            elif spec.importance is None:
                data = gen.sample(gen.parameters.values, data_streams(spec.seed, t, vkey))
            else:
                comp, model, values = toy_generator(spec, v, t, family)
                a["sampled_from"][i] = comp
                data = model.sample(values, data_streams(spec.seed, t, vkey))
                if family is None:
                    a["log_ratio"][i] = importance_log_ratios(spec, v, data)
        except Exception as exc:
            warnings.warn(f"toy {t} of variant {v.name}: generation failed: {exc}",
                          FitFailureWarning, stacklevel=1)
            a["status"][i] = FitStatus.EXCEPTION
            a["fail_reason"][i] = FailReason.GENERATION
            for h in plan.fit_order:
                _note_failure(causes, FailReason.GENERATION, f"{type(exc).__name__}: {exc}",
                              t, v.name, spec.hypotheses[h])
            continue
        a["n_events"][i] = _n_events(data)
        gobs = gobs_of.of(t) if fixed is None else gobs_of.nominal.copy()
        a["global_obs"][i] = gobs
        fitted: dict[int, FitResult] = {}
        nlls: dict[int, Any] = {}
        for h in plan.fit_order:
            model = hyps[h]
            try:
                nll = _with_global_observables(model.nll(data), model.parameters, gobs,
                                               pindex)
                res = None
                for extra in (_nested_starts(pair, hyps, fitted, h),
                              *([x] for x in _null_modes(pair, hyps, fitted, h))):
                    found = _search(spec, model, nll, pair, hyps, fitted, h, extra, t, vkey)
                    res = found if res is None else lower_of(res, found)
                assert res is not None
                if pair is not None and h == pair[1] and _restarts(spec) is not None:
                    res, mode = _cross_starts(pair, hyps, fitted, nlls, nll, res, spec)
                    if mode is not None:
                        res = lower_of(res, _search(spec, model, nll, pair, hyps, fitted, h,
                                                    [mode], t, vkey))
                res = _collapse_to_null(pair, hyps, fitted, h, res)
                fitted[h] = res
                nlls[h] = nll
            except Exception as exc:
                warnings.warn(f"toy {t} of variant {v.name}, hypothesis "
                              f"{spec.hypotheses[h]}: {exc}", FitFailureWarning, stacklevel=1)
                a["status"][i, h] = FitStatus.EXCEPTION
                a["fail_reason"][i, h] = FailReason.EXCEPTION
                _note_failure(causes, FailReason.EXCEPTION, f"{type(exc).__name__}: {exc}",
                              t, v.name, spec.hypotheses[h])
                continue
        if family is not None and pair is not None and pair[1] in fitted:
            _family_weight(a, i, spec, v, t, family, data, fitted, pair[1], causes)
        # records after every fit: the alternative's cross starts may lower the null's
        for h in plan.fit_order:
            if h not in fitted:
                continue
            res, model, nll = fitted[h], hyps[h], nlls[h]
            cols = [pindex[nm] for nm in res.names]
            a["value"][i, h, cols] = res.values
            a["error"][i, h, cols] = res.errors
            if res.minos_lower.size:
                a["minos_lower"][i, h, cols] = res.minos_lower
                a["minos_upper"][i, h, cols] = res.minos_upper
            if "error_naive" in a:
                _sweighted_errors(a, (i, h), model, data, res, pindex)
            a["nll"][i, h] = res.nll
            a["valid"][i, h] = res.valid
            a["edm"][i, h] = res.edm
            a["nfcn"][i, h] = res.nfcn
            a["fit_time"][i, h] = res.time
            a["status"][i, h] = res.status
            if not res.valid:
                reason = FailReason(res.reason) if res.reason else FailReason.OTHER
                a["fail_reason"][i, h] = reason
                _note_failure(causes, reason, _failure_message(model, data, res), t, v.name,
                              spec.hypotheses[h])
            a["n_best"][i, h] = res.n_best
            a["n_starts"][i, h] = res.n_starts
            a["covar_ok"][i, h] = res.covar_ok
            a["at_limit"][i, h, cols] = res.at_limit_mask(model.parameters)
            if model.derived_names and res.valid:
                # derived quantities (e.g. fit fractions): value only, error NaN
                try:
                    dcols = [pindex[nm] for nm in model.derived_names]
                    a["value"][i, h, dcols] = model.derived(res.values)
                except Exception:  # noqa: BLE001 - leaves NaN
                    pass
            if (scan is not None and pair is not None and h == pair[1]
                    and (scan.toys is None or t < scan.toys)):
                r0 = fitted.get(pair[0])
                a["scan_t"][i] = _scan_toy(model, nll, scan.names, scan.points, r0,
                                           r0.nll if r0 is not None else math.nan, spec,
                                           hyps[pair[0]].parameters, res)
            if plan.kind.records_gof and res.valid:
                try:
                    a["gof"][i, h] = float(model.gof_statistic(data, res.values))
                except Exception:  # noqa: BLE001 - a statistic that fails is NaN
                    a["gof"][i, h] = math.nan
    return ChunkResult(chunk, a, time.perf_counter() - t0, causes)
