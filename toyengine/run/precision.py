"""Precision-targeted runs: run, measure, extend the store, repeat.

Two targets, one loop (:func:`run_to_precision`):

* a **significance** study (``test.observed`` given) runs until the toy p-value of the
  observed t has a relative standard error ``precision`` (a number); an importance-sampled
  one also needs its weighted tail's Pareto ``k̂`` below the reliability threshold
  (:attr:`toyengine.summary.importance.ImportanceP.reliable`), else its error is no guide
  and the toys are doubled;
* a **systematic** study (model variation) runs until the statistical error of every
  paired shift it prints — each alternative's, those reported separately included, and the
  total's (the spread of its bootstrap replicas) — is at most its target, given
  per parameter in the parameter's unit (``{"delta_m": 0.001}``: 1 keV on δm in MeV).

Each round extends the store (``--toys``), so the result is the store one run with the final
toy count would give (toys are seeded individually); a killed run resumes where it stopped.
The rounds are recorded in the store (``_toyengine/precision.json``, read back by
:func:`read_rounds`) and the summary says how many rounds and toys it took.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ToyEngineError
from ..store.location import Location
from ..store.results import PRECISION_KEY
from ..study.kinds import kind_info
from ..study.spec import StudySpec
from .runner import RunReport, run_study

__all__ = ["PRECISION_KEY", "parse_precision", "read_rounds", "run_to_precision",
           "systematic_stat_errors", "toys_for_precision", "toys_for_stat_errors"]

#: toys are added with this margin over the 1/√n estimate (the errors themselves fluctuate)
MARGIN = 1.1


def parse_precision(text: str) -> float | dict[str, float]:
    """``"0.1"`` (relative error of a toy p-value) or ``"delta_m=0.001,gamma=0.005"``
    (absolute statistical errors of systematic shifts, in the parameters' units).

    Raises
    ------
    ToyEngineError
        Not a positive number, or a ``name=value`` list with a bad entry.
    """
    if "=" not in text:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            msg = (f"{text!r}: give a positive number (relative error of the toy p-value) "
                   "or NAME=ERROR[,NAME=ERROR] (stat errors of the shifts)")
            raise ToyEngineError(msg)
        return value
    out: dict[str, float] = {}
    for item in text.split(","):
        name, _, val = item.partition("=")
        try:
            err = float(val)
        except ValueError:
            err = math.nan
        if not name.strip() or not (math.isfinite(err) and err > 0):
            msg = f"{item!r} is not NAME=ERROR with a positive ERROR (e.g. delta_m=0.001)"
            raise ToyEngineError(msg)
        out[name.strip()] = err
    return out


def toys_for_precision(n_exceed: int, n_toys: int, precision: float, max_toys: int) -> int:
    """Toys needed for a toy p-value ``k/n`` with relative standard error ``precision``.

    The binomial relative error is ``sqrt((1 − p) / (n p))``, so ``n = (1 − p) / (p r²)``
    with ``p = k/n``; with no exceedance yet, ``p`` is taken as the 68.27 % Clopper–Pearson
    upper limit (an optimistic guess, revised after the next batch). Never less than twice
    the current count (so that a run progresses), never more than ``max_toys``.
    """
    from ..summary import clopper_pearson

    if not 0.0 < precision < 1.0:
        msg = f"--precision {precision!r} must lie in (0, 1) (a relative error)"
        raise ToyEngineError(msg)
    if n_toys == 0:
        return min(max_toys, 100)
    p = n_exceed / n_toys if n_exceed else clopper_pearson(0, n_toys)[1]
    if n_exceed and math.sqrt((1.0 - p) / (n_toys * p)) <= precision:
        return n_toys
    need = int(math.ceil((1.0 - p) / (p * precision**2)))
    return int(min(max_toys, max(need, 2 * n_toys)))


def toys_for_weighted_precision(rel_error: float, n_toys: int, precision: float,
                                max_toys: int) -> int:
    """Toys needed for an importance-sampled p-value (:mod:`toyengine.summary.importance`)
    with relative standard error ``precision``, from its relative error ``rel_error`` on
    ``n_toys``: the error of a mean of weighted indicators scales as ``1/√n``, so
    ``n × (rel_error / precision)²`` with a 10 % margin. With no toy beyond t_obs yet
    (``rel_error`` NaN) twice the current count; never more than ``max_toys``."""
    if not 0.0 < precision < 1.0:
        msg = f"--precision {precision!r} must lie in (0, 1) (a relative error)"
        raise ToyEngineError(msg)
    if not math.isfinite(rel_error):
        return int(min(max_toys, max(2 * n_toys, 100)))
    if rel_error <= precision:
        return n_toys
    need = int(math.ceil(n_toys * (rel_error / precision) ** 2 * MARGIN - 1e-9))
    return int(min(max_toys, max(need, n_toys + 1)))


def toys_for_stat_errors(errors: Mapping[str, float], targets: Mapping[str, float],
                         n_toys: int, max_toys: int) -> int:
    """Toys per variant for statistical errors ``errors`` (measured on ``n_toys``) to reach
    ``targets``: errors of means scale as ``1/√n``, so ``n × (error / target)²``, with a
    10 % margin; ``n_toys`` when every target is met, never more than ``max_toys``."""
    ratio = max(errors[p] / targets[p] for p in targets)
    if not math.isfinite(ratio):
        return int(min(max_toys, 2 * n_toys))  # no error yet (too few paired toys)
    if ratio <= 1.0:
        return n_toys
    need = int(math.ceil(n_toys * ratio**2 * MARGIN - 1e-9))  # no ceil of rounding noise
    return int(min(max_toys, max(need, n_toys + 1)))


def systematic_stat_errors(ds: Any, params: Mapping[str, float] | list[str]) -> dict[str, float]:
    """The largest statistical error per parameter over the paired shifts a systematic
    summary prints: every alternative's shift, those reported separately (e.g. the J^P
    rows) included, and the total's (the spread of its bootstrap replicas). The nominal
    variant's row is its fit bias, not a paired shift, and is not a target."""
    from ..summary.systematics import systematic_table

    table = systematic_table(ds)
    out = {}
    for p in params:
        if p not in table.params:
            msg = (f"--precision: {p!r} is not a parameter of the systematic table; it has "
                   f"{list(table.params)}")
            raise ToyEngineError(msg)
        nominal = {v.variant for v in table.variants if v.group.lower() == "nominal"}
        errs = [v.stat.get(p, math.nan) for v in table.variants
                if v.variant not in nominal]
        errs.append(table.total_error.get(p, math.nan))
        finite = [e for e in errs if math.isfinite(e)]
        out[p] = max(finite) if len(finite) == len(errs) else math.inf
    return out


def read_rounds(store: str | Path | Location,
                storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The recorded rounds of a precision run on ``store`` (``None`` if it had none):
    ``{"targets": ..., "rounds": [{"toys": n, "errors": ...}, ...], "reached": bool}``."""
    got = Location.of(store, storage_options).read_json(PRECISION_KEY)
    return got if isinstance(got, dict) else None


def run_to_precision(spec: StudySpec, store: str | Path, precision: float | dict[str, float],
                     max_toys: int, **kw: Any) -> RunReport:
    """Run ``spec`` into ``store`` in rounds until ``precision`` is reached (see the module
    documentation) or ``max_toys`` toys per variant are in the store.

    Raises
    ------
    ToyEngineError
        The study's kind has no such target (a p-value target needs a significance study
        with ``test.observed``; shift targets a systematic study).
    """
    from ..store.opening import open_results

    info = kind_info(spec.kind)
    loc = Location.of(store, kw.get("storage_options"))
    if isinstance(precision, dict):
        if not info.systematic or info.random_draws or info.one_data_set:
            msg = (f"--precision NAME=ERROR needs a model-variation study (paired shifts); "
                   f"{spec.name!r} is of kind {spec.kind!r}")
            raise ToyEngineError(msg)
        targets: dict[str, float] | float = dict(precision)
    else:
        t_obs = float(spec.test.get("observed", math.nan))
        if not info.nested_test or not math.isfinite(t_obs):
            msg = ("--precision needs a significance study with test.observed (the t whose "
                   "toy p-value it targets)")
            raise ToyEngineError(msg)
        targets = float(precision)
    # a resumed precision run (same targets) continues the record of its rounds
    prev = read_rounds(loc) if loc.exists(PRECISION_KEY) else None
    rounds: list[dict[str, Any]] = list(prev["rounds"]) if prev and \
        prev.get("targets") == targets else []
    toys = min(spec.toys, max_toys)
    while True:
        report = run_study(spec.with_overrides(toys=toys), loc, **kw)
        if not report.complete:
            return report
        ds = open_results(loc)
        n = int(ds.sizes["toy"])
        if rounds and rounds[-1]["toys"] == n:
            rounds.pop()  # the same round again (a resume): measured anew below
        if isinstance(targets, dict):
            errors = systematic_stat_errors(ds, list(targets))
            want = toys_for_stat_errors(errors, targets, n, max_toys)
            reached = all(errors[p] <= targets[p] for p in targets)
            rounds.append({"toys": n, "errors": {p: _finite(e) for p, e in errors.items()}})
        else:
            from ..summary.teststat import test_statistic

            t_all = np.asarray(test_statistic(ds).isel(variant=0).values)
            t = t_all[np.isfinite(t_all)]
            k = int(np.sum(t >= float(spec.test["observed"])))
            if spec.importance is not None:  # the weighted estimate's own error
                from ..summary.significance import importance_estimate

                imp = importance_estimate(ds, 0, float(spec.test["observed"]), t_all)
                rel = imp.error / imp.p if imp is not None and imp.p > 0 else math.nan
                # an estimate whose weighted tail is too heavy (Pareto k̂) has no error to
                # scale from: more toys, as when none has reached t_obs yet
                trusted = imp is not None and imp.reliable
                want = toys_for_weighted_precision(rel if trusted else math.nan, n, targets,
                                                   max_toys)
                reached = trusted and rel <= targets
                rounds.append({"toys": n, "n_exceed": k, "rel_error": _finite(rel),
                               "pareto_k": _finite(imp.pareto_k) if imp else None})
            else:
                want = toys_for_precision(k, int(t.size), targets, max_toys)
                # the binomial relative error sqrt((1 − p)/(n p)) = sqrt((1 − p)/k), not
                # ``want <= n``, which also holds when --max-toys stops the run short
                reached = k > 0 and math.sqrt((1.0 - k / t.size) / k) <= targets
                rounds.append({"toys": n, "n_exceed": k})
        loc.write_json(PRECISION_KEY, {"targets": targets, "max_toys": max_toys,
                                       "rounds": rounds, "reached": reached})
        if want <= n:
            return report
        toys = want


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
