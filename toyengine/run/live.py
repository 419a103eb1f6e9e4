"""Live physics while a study runs: running pulls, toy p-value and systematic shifts.

The runner feeds every finished chunk to :class:`LivePhysics`, which keeps running sums
(no toy-level arrays) and reports, per study kind, the numbers a physicist watches:

* ``pulls`` (and every kind whose toys are fitted with the generating model): mean and width
  of the pull ``(x̂ − truth)/σ̂`` of each parameter of interest, with their statistical
  errors ``w/√n`` and ``w/√(2(n−1))``;
* ``significance`` / ``jp_rejection`` with an observed t: the toy p-value of the observed t,
  ``k/n`` with ``k`` toys at or above it, and its Clopper–Pearson 68.27% interval
  (Clopper and Pearson, Biometrika 26 (1934) 404);
* ``model_variation``: the shift of each variant's fitted POI from the nominal variant's:
  for a paired study (common random numbers) the mean of the per-toy differences to the
  nominal twin with error ``RMS/√n``, pairs with a failed fit on either side dropped — the
  summary's numbers (:func:`toyengine.summary.systematic_table`); unpaired, the difference
  of the two means with the error of a difference of two means; the variation kinds with one data
  set per variant (``template_smearing``, ``parameter_variation``): the RMS of the POI's
  shift from its reference value per variant group.

:class:`Progress` prints them on one line (a ``tqdm`` bar on a terminal, plain lines
otherwise) and writes the same numbers as a small JSON status into the store
(:data:`toyengine.store.status.STATUS_KEY`), which ``toyengine status --watch`` follows
from any machine that can read the store.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

import numpy as np

from ..store.location import Location
from ..store.status import write_status
from ..study.kinds import kind_info
from ..study.recipe import ChunkResult
from ..study.show import format_seconds

__all__ = ["LivePhysics", "Progress", "fold_store", "physics_text"]

_CL = 0.682689492137086


@dataclass
class _Moments:
    """Running count, sum and sum of squares."""

    n: int = 0
    s: float = 0.0
    ss: float = 0.0

    def add(self, x: np.ndarray) -> None:
        x = x[np.isfinite(x)]
        self.n += int(x.size)
        self.s += float(x.sum())
        self.ss += float((x * x).sum())

    @property
    def mean(self) -> float:
        return self.s / self.n if self.n else math.nan

    @property
    def var(self) -> float:
        if self.n < 2:
            return math.nan
        return max(self.ss - self.s * self.s / self.n, 0.0) / (self.n - 1)

    @property
    def std(self) -> float:
        return math.sqrt(self.var) if self.n > 1 else math.nan


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.{digits}g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


@dataclass
class LivePhysics:
    """Running physics numbers of a study (see the module docstring).

    Parameters
    ----------
    kind : str
        Study kind.
    params : sequence of str
        The store's parameter axis.
    labels : sequence of str
        Display labels (``label [unit]``) along ``params``.
    poi : sequence of str
        Parameters of interest (default: the parameters with a finite truth, at most 3).
    hypotheses : sequence of str
        Fitted hypotheses.
    generate : str
        The generating model of the nominal variant.
    truth : ndarray (variant, param)
        Generation values.
    reference : ndarray (param,)
        Reference values of the systematic shifts.
    variant_names, variant_groups : sequence of str
        Per variant.
    h0, h1 : str
        Hypotheses of the test statistic ``t = 2(nll_h0 − nll_h1)`` (``""`` if none).
    observed_t : float
        Observed value of t (NaN if none).
    """

    kind: str
    params: Sequence[str]
    labels: Sequence[str]
    poi: Sequence[str]
    hypotheses: Sequence[str]
    generate: str
    truth: np.ndarray
    reference: np.ndarray
    variant_names: Sequence[str]
    variant_groups: Sequence[str]
    h0: str = ""
    h1: str = ""
    observed_t: float = math.nan
    #: toys per variant of a paired store (common random numbers): the shifts are then
    #: per-toy differences to the nominal twin, which needs the values per toy; 0: unpaired
    paired_toys: int = 0
    #: mixture fraction a of an importance-sampled study (``importance.fraction``; NaN
    #: without): the running p is then the weighted estimate, from the chunks' ``log_ratio``
    importance_fraction: float = math.nan
    _pulls: dict[str, _Moments] = field(default_factory=dict)
    _per_toy: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    _values: dict[tuple[int, str], _Moments] = field(default_factory=dict)
    _shifts: dict[tuple[str, str], _Moments] = field(default_factory=dict)
    _t: _Moments = field(default_factory=_Moments)
    _exceed: int = 0
    _weighted: _Moments = field(default_factory=_Moments)  # w · 1[t ≥ t_obs] per toy
    #: the largest positive w · 1[t ≥ t_obs] (at most _TOPS): the tail of the Pareto k̂
    _tops: np.ndarray = field(default_factory=lambda: np.empty(0))

    def __post_init__(self) -> None:
        self.truth = np.asarray(self.truth, dtype=float)
        self.reference = np.asarray(self.reference, dtype=float)
        poi = [p for p in self.poi if p in self.params]
        if not poi:
            finite = np.isfinite(self.truth[0]) if self.truth.size else []
            poi = [p for p, ok in zip(self.params, finite, strict=False) if ok][:3]
        self.poi = poi
        self._label = dict(zip(self.params, self.labels, strict=True))
        if self.paired_toys * len(self.variant_names) * len(poi) > PAIRED_MAX_VALUES:
            self.paired_toys = 0  # too many to keep per toy: the unpaired estimate
        nominal = [v for v, g in enumerate(self.variant_groups) if g.lower() == "nominal"]
        self._nominal = nominal[0] if nominal else 0

    @property
    def _gen_h(self) -> int | None:
        if kind_info(self.kind).systematic:
            return None  # shifts, not pulls
        return self.hypotheses.index(self.generate) if self.generate in self.hypotheses \
            else None

    def add(self, res: ChunkResult) -> None:
        """Fold one finished chunk into the running numbers."""
        a, v = res.arrays, res.chunk.variant
        valid = np.asarray(a["valid"], dtype=bool)
        pidx = {p: self.params.index(p) for p in self.poi}
        gh = self._gen_h
        if gh is not None:
            ok = valid[:, gh]
            for p, ip in pidx.items():
                err = a["error"][ok, gh, ip]
                if not np.isfinite(err).any():
                    continue  # a fixed parameter, or fits without errors (no HESSE)
                pull = (a["value"][ok, gh, ip] - self.truth[v, ip]) / np.where(err > 0, err,
                                                                               np.nan)
                self._pulls.setdefault(p, _Moments()).add(pull)
        kind = kind_info(self.kind)
        if self.h0 and self.h1 and kind.toy_test:
            i0, i1 = self.hypotheses.index(self.h0), self.hypotheses.index(self.h1)
            both = valid[:, i0] & valid[:, i1]
            t = 2.0 * (a["nll"][both, i0] - a["nll"][both, i1])
            keep = np.isfinite(t)
            t = t[keep]
            self._t.add(t)
            if math.isfinite(self.observed_t):
                self._exceed += int(np.count_nonzero(t >= self.observed_t))
                if math.isfinite(self.importance_fraction):
                    from ..summary.importance import mixture_weights

                    w = mixture_weights(a["log_ratio"][both][keep], self.importance_fraction)
                    y = np.where(t >= self.observed_t, w, 0.0)
                    self._weighted.add(y)
                    tops = np.concatenate([self._tops, y[np.isfinite(y) & (y > 0)]])
                    if tops.size > _TOPS:
                        tops = np.partition(tops, tops.size - _TOPS)[-_TOPS:]
                    self._tops = tops
        if kind.systematic and not kind.one_data_set:  # generated toys per variant
            ok = valid[:, 0]
            for p, ip in pidx.items():
                if self.paired_toys:
                    arr = self._per_toy.setdefault((v, p), np.full(self.paired_toys, np.nan))
                    arr[res.chunk.start:res.chunk.stop] = np.where(ok, a["value"][:, 0, ip],
                                                                   np.nan)
                else:
                    self._values.setdefault((v, p), _Moments()).add(a["value"][ok, 0, ip])
        if kind.one_data_set:
            ok = valid[:, -1]
            group = self.variant_groups[v]
            for p, ip in pidx.items():
                self._shifts.setdefault((group, p), _Moments()).add(
                    a["value"][ok, -1, ip] - self.reference[ip])

    # --- reports -------------------------------------------------------------------------
    def pulls(self) -> dict[str, dict[str, float]]:
        """``{poi: {n, mean, mean_err, width, width_err}}`` of the running pulls."""
        out = {}
        for p, m in self._pulls.items():
            w = m.std
            out[p] = {"n": m.n, "mean": m.mean, "mean_err": w / math.sqrt(m.n) if m.n > 1
                      else math.nan, "width": w,
                      "width_err": w / math.sqrt(2 * (m.n - 1)) if m.n > 1 else math.nan}
        return out

    def pvalue(self) -> dict[str, float] | None:
        """Running toy p-value of the observed t: ``{n, k, p, lo, hi, t_obs}``."""
        if not (self.h0 and self.h1 and math.isfinite(self.observed_t)) \
                or not kind_info(self.kind).toy_test:
            return None
        from scipy import stats

        n, k = self._t.n, self._exceed
        a = 1.0 - _CL
        lo = float(stats.beta.ppf(a / 2, k, n - k + 1)) if k > 0 else 0.0
        hi = float(stats.beta.ppf(1 - a / 2, k + 1, n - k)) if k < n else 1.0
        if math.isfinite(self.importance_fraction):
            # the importance-sampled estimate ± its standard error; with no toy beyond
            # t_obs the weight-bound upper limit (ImportanceP.upper_limit)
            m = self._weighted
            p = m.mean
            err = m.std / math.sqrt(m.n) if m.n > 1 else math.nan
            upper = min(hi / (1.0 - self.importance_fraction), 1.0)
            # the tail diagnostic of ImportanceP.reliable, from the largest terms kept
            from ..summary.importance import pareto_k, pareto_k_threshold, pareto_tail_size

            kk = pareto_k(self._tops, m.n) if k and pareto_tail_size(m.n) < _TOPS \
                else math.nan
            return {"n": n, "k": k, "p": p, "lo": max(p - err, 0.0) if k else 0.0,
                    "hi": p + err if k else upper, "t_obs": self.observed_t,
                    "weighted": True, "pareto_k": kk if math.isfinite(kk) else None,
                    "reliable": bool(kk < pareto_k_threshold(m.n))}
        return {"n": n, "k": k, "p": k / n if n else math.nan, "lo": lo, "hi": hi,
                "t_obs": self.observed_t}

    def shifts(self) -> dict[str, dict[str, dict[str, float]]]:
        """Running systematic shifts: ``{poi: {variant or group: {shift, error, n}}}``."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        kind = kind_info(self.kind)
        if kind.systematic and not kind.one_data_set and self.paired_toys:
            nv = self._nominal
            for (v, p), arr in sorted(self._per_toy.items()):
                twin = self._per_toy.get((nv, p))
                if v == nv or twin is None:
                    continue
                d = arr - twin
                d = d[np.isfinite(d)]  # a failed fit on either side drops the pair
                if d.size == 0:
                    continue
                err = float(np.std(d, ddof=1)) / math.sqrt(d.size) if d.size > 1 else math.nan
                out.setdefault(p, {})[self.variant_names[v]] = {
                    "shift": float(np.mean(d)), "error": err, "n": int(d.size)}
        elif kind.systematic and not kind.one_data_set:
            for p in self.poi:
                nom = self._values.get((0, p))
                if nom is None or nom.n == 0:
                    continue
                for (v, pp), m in self._values.items():
                    if pp != p or v == 0 or m.n == 0:
                        continue
                    err = math.sqrt((m.var / m.n if m.n > 1 else math.nan)
                                    + (nom.var / nom.n if nom.n > 1 else math.nan))
                    out.setdefault(p, {})[self.variant_names[v]] = {
                        "shift": m.mean - nom.mean, "error": err, "n": m.n}
        for (group, p), m in self._shifts.items():
            rms = math.sqrt(m.ss / m.n) if m.n else math.nan
            out.setdefault(p, {})[group] = {"shift": rms, "error": math.nan, "n": m.n}
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible running numbers (labels included)."""
        out: dict[str, Any] = {"labels": {p: self._label[p] for p in self.poi}}
        if self._pulls:
            out["pulls"] = self.pulls()
        pv = self.pvalue()
        if pv is not None:
            out["pvalue"] = pv
        if self._t.n and kind_info(self.kind).toy_test:
            out["t"] = {"n": self._t.n, "mean": self._t.mean, "std": self._t.std}
        sh = self.shifts()
        if sh:
            out["shifts"] = sh
        return out

    def text(self) -> str:
        """The running numbers on one short line (empty before the first result)."""
        return physics_text(self.to_dict(), self.kind)


def physics_text(d: dict[str, Any], kind: str = "") -> str:
    """One line of running physics from :meth:`LivePhysics.to_dict` (or a status file)."""
    labels = d.get("labels", {})
    parts = []
    for p, r in d.get("pulls", {}).items():
        parts.append(f"pull {labels.get(p, p)} {_num(r['mean'], 2)}±{_num(r['mean_err'], 1)}"
                     f" w {_num(r['width'], 3)}±{_num(r['width_err'], 1)}")
    pv = d.get("pvalue")
    if pv is not None and pv["n"]:
        p_txt = (f"< {_num(pv['hi'], 2)}" if pv["k"] == 0
                 else f"{_num(pv['p'], 3)} [{_num(pv['lo'], 2)}, {_num(pv['hi'], 2)}]")
        what = "importance-sampled " if pv.get("weighted") else ""
        parts.append(f"toy p(t ≥ {_num(pv['t_obs'], 4)}) {what}{p_txt} "
                     f"({pv['k']}/{pv['n']})")
        if pv.get("weighted") and pv["k"] and pv.get("pareto_k") is not None \
                and not pv.get("reliable"):
            parts.append(f"NOT reliable (Pareto k̂ {_num(pv['pareto_k'], 2)})")
    elif "t" in d:
        parts.append(f"t mean {_num(d['t']['mean'])}")
    for p, rows in d.get("shifts", {}).items():
        top = sorted(rows.items(), key=lambda kv: -abs(kv[1]["shift"])
                     if kv[1]["shift"] is not None and math.isfinite(kv[1]["shift"])
                     else 0.0)[:3]
        what = "RMS shift" if kind_info(kind).random_draws else "shift"
        parts.append(f"{what} {labels.get(p, p)}: " + ", ".join(
            f"{k} {_num(r['shift'], 2)}" + (f"±{_num(r['error'], 1)}"
                                            if r["error"] is not None
                                            and math.isfinite(r["error"]) else "")
            for k, r in top))
    return " | ".join(parts)


#: the per-toy arrays :meth:`LivePhysics.add` and :class:`Progress` read
LIVE_FIELDS = ("status", "valid", "nll", "value", "error")

#: at most this many per-toy values (toys × variants × POIs) are kept for the paired live
#: shifts (8 bytes each); beyond, the live shifts are differences of means
PAIRED_MAX_VALUES = 50_000_000
#: the largest weighted terms a running importance-sampled p keeps for its Pareto k̂: the
#: tail of 3√n of them covers up to 10⁷ toys
_TOPS = 10_000


def fold_store(physics: LivePhysics, group: Any, chunks: Sequence[Any],
               done: np.ndarray) -> int:
    """Fold the chunks already in a store (``done``) into ``physics``, so that a resumed
    run's live numbers cover the whole store, as the summary does; returns the failed fits
    among them."""
    from ..study.recipe import ChunkResult

    failed = 0
    by_variant: dict[int, list[Any]] = {}
    for c in chunks:
        if done[c.index]:
            by_variant.setdefault(c.variant, []).append(c)
    for v, cs in by_variant.items():
        arrays = {k: np.asarray(group[k][v]) for k in _live_fields(group)}
        for c in cs:
            res = ChunkResult(c, {k: a[c.start:c.stop] for k, a in arrays.items()})
            failed += res.n_failed
            physics.add(res)
    return failed


def live_part(res: ChunkResult) -> ChunkResult:
    """The part of a chunk's result the client's progress reads (:data:`LIVE_FIELDS`):
    what a worker that writes its own chunk sends back."""
    return ChunkResult(res.chunk, {k: res.arrays[k] for k in _live_fields(res.arrays)},
                       res.elapsed)


def _live_fields(arrays: Any) -> tuple[str, ...]:
    """:data:`LIVE_FIELDS`, and ``log_ratio`` where there is one (importance sampling:
    the running p is weighted)."""
    return (*LIVE_FIELDS, "log_ratio") if "log_ratio" in arrays else LIVE_FIELDS


#: seconds between redraws of the terminal bar's running numbers
BAR_SECONDS = 0.5


class Progress:
    """Toys done/total, toys/s, ETA, failed-fit fraction and the running physics.

    A ``tqdm`` bar when ``out`` is a terminal (and tqdm is installed), else one plain line
    at most every ``interval`` seconds and at the end. ``status`` (optional, a store)
    receives the same numbers as JSON (:data:`toyengine.store.status.STATUS_KEY`) after
    every chunk (at most once a second) and at the end.
    """

    def __init__(self, name: str, kind: str, total: int, done: int, out: TextIO | None,
                 physics: LivePhysics | None = None, status: Location | None = None,
                 interval: float = 10.0):
        self.name, self.kind, self.total, self.done, self.out = name, kind, total, done, out
        self.start_done = done
        self.failed = 0
        self.fits = 0
        self.physics = physics
        self.status = status
        self.interval = interval
        self.t0 = time.monotonic()
        self.last = 0.0
        self.last_status = 0.0
        self.bar = None
        tty = bool(out is not None and getattr(out, "isatty", lambda: False)())
        if tty:
            try:
                from tqdm import tqdm
            except ImportError:  # plain lines
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, initial=done, file=out, desc=name, unit="toy",
                                dynamic_ncols=True, smoothing=0.1)

    def _numbers(self) -> dict[str, Any]:
        el = time.monotonic() - self.t0
        rate = (self.done - self.start_done) / el if el > 0 else 0.0
        left = self.total - self.done
        return {"rate": rate, "eta_s": left / rate if rate > 0 else None, "elapsed_s": el,
                "failed_fraction": self.failed / self.fits if self.fits else 0.0}

    def update(self, res: ChunkResult | None, final: bool = False) -> None:
        """Count one finished chunk (``None``: nothing new) and report. The running numbers
        are formatted only when something is shown or written (the terminal bar at most
        every ``BAR_SECONDS``, plain lines every ``interval``, the status once a second):
        on a large cluster the client folds hundreds of chunks a second."""
        if res is not None:
            self.done += res.chunk.size
            self.failed += res.n_failed
            self.fits += int(res.arrays["status"].size)
            if self.physics is not None:
                self.physics.add(res)
        now = time.monotonic()
        if self.status is not None and (final or now - self.last_status >= 1.0):
            self.last_status = now
            self._write_status(self._numbers(), final)
        if self.out is None:
            return
        if self.bar is not None:
            if res is not None:
                self.bar.update(res.chunk.size)
            if final or now - self.last >= BAR_SECONDS:
                self.last = now
                nums = self._numbers()
                physics = self.physics.text() if self.physics is not None else ""
                self.bar.set_postfix_str(f"failed {100 * nums['failed_fraction']:.1f}%"
                                         + (f" | {physics}" if physics else ""), refresh=True)
            if final:
                self.bar.close()
            return
        if not final and now - self.last < self.interval:
            return
        self.last = now
        nums = self._numbers()
        physics = self.physics.text() if self.physics is not None else ""
        eta = format_seconds(nums["eta_s"]) if nums["eta_s"] is not None else "?"
        pct = 100.0 * self.done / max(self.total, 1)
        line = (f"[{self.name}] {self.done}/{self.total} toys ({pct:.0f}%) | "
                f"{nums['rate']:.1f} toys/s | ETA {eta} | failed fits {self.failed} "
                f"({100 * nums['failed_fraction']:.1f}%)")
        self.out.write(line + (f" | {physics}" if physics else "") + "\n")
        self.out.flush()

    def _write_status(self, nums: dict[str, Any], final: bool) -> None:
        assert self.status is not None
        st = {
            "study": self.name, "kind": self.kind, "toys_done": self.done,
            "toys_total": self.total, "failed_fits": self.failed, "fits": self.fits,
            **nums, "state": "finished" if final else "running",
            "updated": datetime.now(UTC).isoformat(timespec="seconds"), "pid": os.getpid(),
            "physics": self.physics.to_dict() if self.physics is not None else {},
        }
        write_status(self.status, st)
