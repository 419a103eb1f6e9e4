"""The Dask runner: submit the chunks not yet done, stream results into the store.

Tasks are pure (``run_chunk``) and seeded from ``(root_seed, variant, toy)``, so a task
that is retried after a worker dies, or re-run after the client dies, produces identical
numbers. The client writes each finished chunk into its region as soon as it arrives
(``distributed.as_completed``) and flags it done, so a crash loses at most the chunks in
flight.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import zarr

from ..errors import ClusterError, Interrupted, StoreError, ToyEngineError
from ..store import StoreInfo, create_store, extend_store, write_chunk
from ..study.recipe import Chunk, param_axis, run_chunk
from ..study.reference import check_degenerate, generator_model
from ..study.spec import StudySpec, build_model
from .preflight import (
    CONNECT_TIMEOUT,
    UsageError,
    check_store_path,
    check_study_size,
    parse_scheduler_address,
    probe_scheduler,
)

__all__ = ["RunReport", "auto_chunk_size", "run_study", "run_to_precision", "toys_for_precision"]

TARGET_TASK_SECONDS = 5.0


@dataclass
class RunReport:
    """What a run did. ``complete`` is True when every toy of the study is in the store."""

    store: str
    toys_total: int
    chunks_total: int
    chunks_run: int = 0
    chunks_skipped: int = 0
    failed_fits: int = 0
    errors: list[str] = field(default_factory=list)
    missing_chunks: list[int] = field(default_factory=list)
    seconds: float = 0.0
    chunk_size: int = 0
    dashboard: str = ""

    @property
    def complete(self) -> bool:
        return not self.missing_chunks


def auto_chunk_size(seconds_per_toy: float, toys: int, n_workers: int) -> int:
    """Toys per task: about ``TARGET_TASK_SECONDS`` of work, but at least four tasks per
    worker when the study is small enough for that to matter."""
    by_time = max(1, int(round(TARGET_TASK_SECONDS / max(seconds_per_toy, 1e-4))))
    by_balance = max(1, math.ceil(toys / (4 * max(n_workers, 1))))
    return max(1, min(by_time, by_balance))


class _Progress:
    """One status line: toys done/total, toys/s, ETA, failed fits."""

    def __init__(self, name: str, total: int, done: int, out: TextIO | None):
        self.name, self.total, self.done, self.out = name, total, done, out
        self.start_done = done
        self.failed = 0
        self.t0 = time.monotonic()
        self.last = 0.0
        self.tty = bool(out is not None and getattr(out, "isatty", lambda: False)())

    def update(self, n: int, failed: int, final: bool = False) -> None:
        self.done += n
        self.failed += failed
        if self.out is None:
            return
        now = time.monotonic()
        if not final and now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        el = now - self.t0
        rate = (self.done - self.start_done) / el if el > 0 else 0.0
        left = self.total - self.done
        eta = _fmt_seconds(left / rate) if rate > 0 else "?"
        pct = 100.0 * self.done / max(self.total, 1)
        line = (f"[{self.name}] {self.done}/{self.total} toys ({pct:.0f}%) | "
                f"{rate:.1f} toys/s | ETA {eta} | failed fits {self.failed}")
        if self.tty:
            self.out.write("\r" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()


def _fmt_seconds(s: float) -> str:
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _truth_and_reference(spec: StudySpec, params: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    truth = np.full((len(spec.variants), len(params)), np.nan)
    for v in spec.variants:
        gen = generator_model(spec, v)
        for n, val in zip(gen.parameters.names, gen.parameters.values, strict=True):
            truth[v.index, params.index(n)] = val
        if hasattr(gen, "derived"):  # e.g. the generated fit fractions
            for n, val in zip(gen.derived_names, gen.derived(gen.parameters.values),
                              strict=True):
                truth[v.index, params.index(n)] = val
    reference = truth[0].copy()
    ref_model = build_model(spec, spec.variants[0], spec.hypotheses[0])
    base = spec.variants[0]
    if base.patches:  # the reference is the unpatched first hypothesis
        from dataclasses import replace

        ref_model = build_model(spec, replace(base, patches={}, random=False, index=0),
                                spec.hypotheses[0])
    for n, val in zip(ref_model.parameters.names, ref_model.parameters.values, strict=True):
        reference[params.index(n)] = val
    return truth, reference


def plugin_modules(spec: StudySpec) -> tuple[str, ...]:
    """The plug-in modules the study's builders need on every worker."""
    from ..models import plugin_module

    mods = {plugin_module(m["builder"]) for m in spec.models.values()}
    return tuple(sorted(m for m in mods if m is not None))


def _try_import(modules: Sequence[str]) -> str | None:
    """Run on a worker: ``None`` if every module imports, else the first failure."""
    import importlib

    for mod in modules:
        try:
            importlib.import_module(mod)
        except Exception as exc:  # noqa: BLE001 - any failure importing user code
            return f"{mod} ({type(exc).__name__}: {exc})"
    return None


def check_workers_import(client: Any, spec: StudySpec) -> None:
    """Fail before any toy if a connected worker cannot import a plug-in module of ``spec``
    (checked once per worker with ``client.run``).

    Raises
    ------
    ClusterError
        ``worker ADDRESS cannot import MODULE (...)``, one line.
    """
    modules = plugin_modules(spec)
    if not modules:
        return
    failures = {w: err for w, err in client.run(_try_import, modules).items() if err}
    if failures:
        worker, err = sorted(failures.items())[0]
        more = f"; {len(failures) - 1} more worker(s) too" if len(failures) > 1 else ""
        msg = (f"worker {worker} cannot import {err}{more}; install the module on the "
               "workers (cluster/README.md, 'User code on workers')")
        raise ClusterError(msg)


def _time_one_toy(spec: StudySpec, params: tuple[str, ...]) -> float:
    t0 = time.perf_counter()
    run_chunk(spec, Chunk(0, 0, 0, 1), params)
    return time.perf_counter() - t0


def _make_client(workers: int | None, scheduler: str | None, security: Any,
                 connect_timeout: float) -> tuple[Any, Any]:
    from distributed import Client, LocalCluster

    if scheduler:
        probe_scheduler(scheduler, security, connect_timeout)
        client = Client(scheduler, security=security, timeout=f"{connect_timeout}s")
        return client, None
    n = workers or os.cpu_count() or 1
    # worker processes ignore SIGINT (Ctrl-C reaches the whole process group): the client
    # process alone handles it and shuts them down in order, without their tracebacks
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address="127.0.0.1:0",
                               silence_logs=40)
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
    client = Client(cluster)
    return client, cluster


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _store_mismatch(store: Path, info: StoreInfo, spec: StudySpec) -> str:
    stored_seed = info.attrs.get("root_seed")
    if isinstance(stored_seed, int) and stored_seed != spec.seed and \
            spec.with_overrides(seed=stored_seed).digest == info.attrs.get("spec_digest"):
        return (f"store {store} was made from the same study with another seed: the seed "
                f"differs (store: {stored_seed}, now: {spec.seed}); use --seed {stored_seed} "
                "to resume it, or another --store path")
    other = str(info.attrs.get("spec_digest", ""))[:12]
    return (f"store {store} was made from a different study (name "
            f"{info.attrs.get('study_name')!r}, digest {other}) than {spec.name!r} "
            f"(digest {spec.digest[:12]}); use another --store path or the study file "
            "that made it")


def run_study(spec: StudySpec, store: str | Path, *, workers: int | None = None,
              scheduler: str | None = None, client: Any = None, chunk_size: int | None = None,
              security: Any = None, progress: TextIO | None = sys.stderr, yes: bool = False,
              connect_timeout: float = CONNECT_TIMEOUT) -> RunReport:
    """Run (or resume, or extend) ``spec`` into the result store at ``store``.

    Parameters
    ----------
    spec : StudySpec
        A validated study (:func:`toyengine.load_spec`).
    store : path
        The zarr result store. Created if missing; if it exists it must come from the same
        study (same digest), and only chunks not yet done are run. A larger ``spec.toys``
        extends it.
    workers : int, optional
        Worker processes of the default ``LocalCluster`` (one thread each; default: one
        per core).
    scheduler : str, optional
        Address of an existing Dask scheduler to use instead (``tcp://host:port``).
    client : distributed.Client, optional
        An existing client (takes precedence over ``scheduler``/``workers``).
    chunk_size : int, optional
        Toys per task; default automatic (a few seconds of work per task).
    security : distributed.Security, optional
        TLS settings for ``scheduler`` (see ``cluster/README.md``).
    progress : file, optional
        Where the progress line goes (``None`` for silence).
    yes : bool
        Run a study even if its size estimate asks for confirmation
        (:func:`toyengine.run.preflight.check_study_size`).
    connect_timeout : float
        Seconds allowed to reach ``scheduler``.

    Raises
    ------
    UsageError
        Bad ``workers``/``chunk_size``/``scheduler``, or a huge study without ``yes``.
    StoreError
        The store cannot be created there, or comes from another study.
    ClusterError
        The scheduler cannot be reached.
    Interrupted
        Ctrl-C or SIGTERM; the chunks written are kept (run again to resume).
    """
    t_start = time.monotonic()
    store = Path(store)
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        msg = f"--workers {workers}: expected an integer >= 1"
        raise UsageError(msg)
    if chunk_size is not None and (isinstance(chunk_size, bool) or chunk_size < 1):
        msg = f"--chunk-size {chunk_size}: expected an integer >= 1"
        raise UsageError(msg)
    if scheduler is not None and client is None:
        scheduler = parse_scheduler_address(scheduler, "" if security is not None else None)
    check_store_path(store)
    params = param_axis(spec)
    degenerate = check_degenerate(spec)  # warns, naming both variants, before any task
    existing = store.exists()
    if existing:
        info = StoreInfo(store)
        if info.attrs.get("spec_digest") != spec.digest:
            raise StoreError(_store_mismatch(store, info, spec))
        if info.params != params:
            msg = f"store {store} has parameters {info.params}, the study has {params}"
            raise StoreError(msg)
        if spec.toys > info.toys:
            extend_store(store, spec, spec.toys)
            info = StoreInfo(store)
        elif spec.toys < info.toys and progress is not None:
            progress.write(f"note: store holds {info.toys} toys per variant (> --toys "
                           f"{spec.toys}); running any of them not yet done\n")

    else:
        check_study_size(len(spec.variants), spec.toys, len(spec.hypotheses), len(params), yes)
    own_client = client is None
    cluster = None
    if own_client:
        client, cluster = _make_client(workers, scheduler, security, connect_timeout)
    interrupted = False
    try:
        check_workers_import(client, spec)
        dashboard = getattr(client, "dashboard_link", "") or ""
        if progress is not None:
            progress.write(f"Dask dashboard: {dashboard}\n")
        if not existing:
            if chunk_size is None:
                chunk_size = spec.chunk_size
            if chunk_size is None:
                n_workers = max(1, len(client.scheduler_info().get("workers", {})))
                t_toy = _time_one_toy(spec, params)
                check_study_size(len(spec.variants), spec.toys, len(spec.hypotheses),
                                 len(params), yes, t_toy)
                chunk_size = min(spec.toys, auto_chunk_size(
                    t_toy, spec.toys * len(spec.variants), n_workers))
            truth, reference = _truth_and_reference(spec, params)
            create_store(store, spec, params, truth, reference, chunk_size, degenerate)
            info = StoreInfo(store)
        chunks = info.chunks()
        done = info.done()
        pending = [c for c in chunks if not done[c.index]]
        total_toys = sum(c.size for c in chunks)
        report = RunReport(str(store), total_toys, len(chunks),
                           chunks_skipped=len(chunks) - len(pending),
                           chunk_size=info.chunk_size, dashboard=dashboard)
        if progress is not None and report.chunks_skipped:
            progress.write(f"resuming: {report.chunks_skipped}/{len(chunks)} chunks already "
                           "done\n")
        group = zarr.open_group(str(store), mode="r+")
        bar = _Progress(spec.name, total_toys,
                        sum(c.size for c in chunks if done[c.index]), progress)
        try:
            _submit_and_collect(client, spec, params, pending, group, bar, report)
        except KeyboardInterrupt:
            interrupted = True
        else:
            bar.update(0, 0, final=True)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if own_client:
            _close_quietly(client, cluster, interrupted)
    if interrupted:
        if not store.exists():
            raise Interrupted(0, spec.toys * len(spec.variants))
        info = StoreInfo(store)
        done_mask = info.done()
        chunks = info.chunks()
        raise Interrupted(sum(c.size for c in chunks if done_mask[c.index]),
                          sum(c.size for c in chunks))
    final = StoreInfo(store)
    final_done = final.done()
    report.missing_chunks = [c.index for c in final.chunks() if not final_done[c.index]]
    report.seconds = time.monotonic() - t_start
    return report


def _close_quietly(client: Any, cluster: Any, interrupted: bool) -> None:
    """Close the client and our cluster; after an interrupt, without the log noise of
    workers being stopped mid-task (a second Ctrl-C during shutdown is ignored)."""
    import logging

    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    levels = {}
    if interrupted:
        for name in ("distributed", "tornado", "asyncio"):
            levels[name] = logging.getLogger(name).level
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        client.close()
        if cluster is not None:
            cluster.close()
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        if old is not None:
            signal.signal(signal.SIGINT, old)


def _submit_and_collect(client: Any, spec: StudySpec, params: tuple[str, ...],
                        pending: list[Chunk], group: zarr.Group, bar: _Progress,
                        report: RunReport) -> None:
    from distributed import as_completed

    if not pending:
        return
    tag = spec.digest[:12]
    futures = client.map(run_chunk, [spec] * len(pending), pending, [params] * len(pending),
                         key=[f"toyengine-{tag}-chunk-{c.index}" for c in pending],
                         retries=3, pure=False)
    for fut in as_completed(futures):
        try:
            res = fut.result()
        except Exception as exc:
            report.errors.append(f"{fut.key}: {type(exc).__name__}: {exc}")
            continue
        write_chunk(group, res)
        report.chunks_run += 1
        report.failed_fits += res.n_failed
        bar.update(res.chunk.size, res.n_failed)
        fut.release()


def require_complete(report: RunReport) -> None:
    if not report.complete:
        msg = (f"{len(report.missing_chunks)} chunk(s) not done in {report.store}: "
               f"{report.missing_chunks[:20]}; errors: {report.errors[:5]}")
        raise ToyEngineError(msg)


def toys_for_precision(n_exceed: int, n_toys: int, precision: float, max_toys: int) -> int:
    """Toys needed for a toy p-value ``k/n`` with relative standard error ``precision``.

    The binomial relative error is ``sqrt((1 − p) / (n p))``, so ``n = (1 − p) / (p r²)``
    with ``p = k/n``; with no exceedance yet, ``p`` is taken as the 68.27 % Clopper–Pearson
    upper limit (an optimistic guess, revised after the next batch). Never less than twice
    the current count (so that a run progresses), never more than ``max_toys``.
    """
    from ..summary._common import clopper_pearson

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


def run_to_precision(spec: StudySpec, store: str | Path, precision: float, max_toys: int,
                     **kw: Any) -> RunReport:
    """Run a significance study until the toy p-value of its observed t reaches relative
    standard error ``precision`` (or ``max_toys`` toys): run, count, extend, repeat.

    Needs ``test.observed`` in the study. The toys already in ``store`` count; results are
    identical to one run with the final toy count (toys are seeded individually).
    """
    from ..store.results import open_results
    from ..summary.significance import test_statistic

    t_obs = float(spec.test.get("observed", math.nan))
    if spec.kind != "significance" or not math.isfinite(t_obs):
        msg = ("--precision needs a significance study with test.observed (the t whose toy "
               "p-value it targets)")
        raise ToyEngineError(msg)
    toys = min(spec.toys, max_toys)
    while True:
        report = run_study(spec.with_overrides(toys=toys), store, **kw)
        if not report.complete:
            return report
        t = np.asarray(test_statistic(open_results(store)).isel(variant=0).values)
        t = t[np.isfinite(t)]
        want = toys_for_precision(int(np.sum(t >= t_obs)), int(t.size), precision, max_toys)
        if want <= toys:
            return report
        toys = want
