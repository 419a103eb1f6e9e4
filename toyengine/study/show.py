"""``toyengine show STUDY``: the validated study, its models' parameters, the number of fits
and a cost estimate from a few timed toys."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .plan import Chunk, Plan
from .recipe import run_chunk
from .spec import StudySpec, build_model

__all__ = ["CostEstimate", "describe_study", "estimate_cost", "format_seconds"]


def format_seconds(s: float) -> str:
    """``45s``, ``12m05s``, ``1h36m``."""
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


@dataclass(frozen=True)
class CostEstimate:
    """Expected cost of a study from ``toys_timed`` toys run in this process.

    Attributes
    ----------
    seconds_per_toy : float
        Wall time of one toy (generation and every hypothesis' fit), models already built.
    toys_total, fits_total : int
        Toys over all variants, and fits (toys × hypotheses).
    workers : int
        Worker processes assumed (one toy at a time each).
    setup_seconds : float
        Wall time of the first toy in this process beyond ``seconds_per_toy``: building the
        models and compiling the kernels, which every worker pays once (a worker loads
        compiled kernels from numba's cache when this process wrote them; process start-up
        and imports, about a second per worker, come on top).
    """

    seconds_per_toy: float
    toys_timed: int
    toys_total: int
    fits_total: int
    workers: int
    setup_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        """Expected wall time on ``workers`` workers (perfect balance), each paying the
        set-up once."""
        return (self.seconds_per_toy * self.toys_total / max(self.workers, 1)
                + self.setup_seconds)

    def text(self) -> str:
        setup = (f", plus {format_seconds(self.setup_seconds)} set-up per worker (models, "
                 "compilation)" if self.setup_seconds >= 0.5 else "")
        return (f"{self.toys_total} toys, {self.fits_total} fits; "
                f"{self.seconds_per_toy:.2g} s per toy (timed on {self.toys_timed}){setup} → "
                f"≈ {format_seconds(self.seconds)} on {self.workers} worker(s) "
                f"(≈ {format_seconds(self.seconds_per_toy * self.toys_total)} CPU), "
                "not counting the workers' start-up")


def estimate_cost(plan: Plan, *, toys: int = 2, workers: int | None = None,
                  budget: float | None = None) -> CostEstimate:
    """Time up to ``toys`` toys of the first variant in this process and scale to the whole
    study. One toy is run first and not counted (it builds the models, a cost a worker pays
    once); with ``budget``, timing stops after the toy that passes ``budget`` seconds."""
    spec = plan.spec
    t_first = time.perf_counter()
    run_chunk(plan, Chunk(0, 0, 0, 1))
    first = time.perf_counter() - t_first
    n, t0 = 0, time.perf_counter()
    while n < min(toys, max(spec.toys - 1, 1)):
        run_chunk(plan, Chunk(0, 0, 1 + n, 2 + n))
        n += 1
        if budget is not None and time.perf_counter() - t0 > budget:
            break
    per_toy = (time.perf_counter() - t0) / max(n, 1)
    total = spec.toys * len(spec.variants)
    return CostEstimate(per_toy, max(n, 1), total, total * len(spec.hypotheses),
                        workers or os.cpu_count() or 1, max(first - per_toy, 0.0))


def _param_rows(spec: StudySpec, model: str) -> list[str]:
    m = build_model(spec, spec.variants[0], model)
    rows = []
    for p in m.parameters:
        lo, hi = p.limits
        lim = "" if (math.isinf(lo) and math.isinf(hi)) else f" in [{lo:g}, {hi:g}]"
        extra = " fixed" if p.fixed else ""
        if p.constraint is not None:
            extra += f" constrained {p.constraint.mean:g} ± {p.constraint.sigma:g}"
        rows.append(f"    {p.name:<16} {p.display:<26} = {p.value:<12g}{lim}{extra}")
    return rows


def _importance_text(imp: Mapping[str, Any]) -> dict[str, Any]:
    """``importance:`` for :func:`describe_study`: the points of ``importance.points`` as
    their count and each parameter's range (thousands of values are not for reading)."""
    out: dict[str, Any] = {"inject": list(imp["inject"]), "fraction": imp["fraction"]}
    points = imp.get("points")
    if points:
        out["points"] = {"count": len(next(iter(points.values())))} | {
            name: f"{min(col):g} … {max(col):g}" if min(col) != max(col) else col[0]
            for name, col in points.items()}
    return out


def describe_study(spec: StudySpec, cost: CostEstimate | None = None) -> str:
    """The validated study (defaults filled in) as YAML, then each model's parameters as
    built, the number of fits and, if given, the cost estimate."""
    resolved = {
        "name": spec.name, "kind": spec.kind, "description": spec.description or None,
        "seed": spec.seed, "toys": spec.toys, "generate": spec.generate,
        "hypotheses": list(spec.hypotheses), "poi": list(spec.poi), "test": dict(spec.test),
        "fit": dict(spec.fit), "data": spec.data, "chunk_size": spec.chunk_size or "automatic",
        "variants": [{"name": v.name, "group": v.group, "generate": v.generate,
                      "separate": v.separate, "random": v.random, "mode": v.mode}
                     for v in spec.variants],
        "models": {k: dict(m) for k, m in spec.models.items()},
        "digest": spec.digest,
    }
    if spec.importance is not None:
        resolved["importance"] = _importance_text(spec.importance)
    if spec.plugin_sources:  # the plug-ins' code: module file sha256 or distribution version
        resolved["plugin_sources"] = dict(spec.plugin_sources)
    out = ["# study (validated; defaults filled in)",
           yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True).rstrip(), ""]
    used = dict.fromkeys([spec.generate, *spec.hypotheses])
    for model in used:
        role = ", ".join(r for r, ok in (("generates", model == spec.generate),
                                         ("fitted", model in spec.hypotheses)) if ok)
        out.append(f"# model {model!r} ({role}), nominal variant: parameters")
        out.extend(_param_rows(spec, model))
    from .recipe import flat_note, flat_when_off

    note = flat_note(flat_when_off(spec))
    if note:
        out.append(f"# {note}")
    n_toys = spec.toys * len(spec.variants)
    out.append("")
    out.append(f"# {len(spec.variants)} variant(s) × {spec.toys} toys × "
               f"{len(spec.hypotheses)} hypothesis(es) = {n_toys * len(spec.hypotheses)} fits "
               f"(× {spec.fit.get('starts', 1)} start(s) each)")
    if cost is not None:
        out.append(f"# cost estimate: {cost.text()}")
    return "\n".join(out) + "\n"
