"""The Dask runner: submit the chunks not yet done, track their completion.

Tasks are pure (``run_chunk``) and seeded from ``(root_seed, variant, toy)``, so a task
that is retried after a worker dies, or re-run after the client dies, produces identical
numbers. The study's :class:`~toyengine.study.plan.Plan` is built once, creates the store,
and is shipped to the workers once (a worker plugin, which also reaches workers that join
later); each task then writes its chunk's region of the store and the
chunk's done marker itself, and the client only counts completions. For a store that only
the client can reach (a local path with workers on other machines) the client writes
instead (``write="client"``; chosen automatically, said in the run report). The whole run
holds the store's lease, so a second run on the same store waits and then finds the chunks
done; chunks whose objects are missing or damaged are recomputed.
"""

from __future__ import annotations

import math
import pickle
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from ..errors import Interrupted, LeaseLost, StoreError, ToyEngineError
from ..store.integrity import check_chunks, unmark
from ..store.lease import Fence, Lease
from ..store.location import Location, store_access_error, store_writes
from ..store.opening import checked_group
from ..store.results import (
    STATE_KEY,
    StoreInfo,
    create_store,
    extend_store,
    finish_extension,
    plugin_mismatch,
)
from ..store.writing import write_chunk
from ..study.plan import Chunk, Plan
from ..study.recipe import ChunkResult, run_chunk
from ..study.reference import check_degenerate
from ..study.show import CostEstimate, estimate_cost
from ..study.spec import StudySpec, build_model
from .client import _close_quietly, _make_client, _running_capacity, check_workers_import
from .live import LivePhysics, Progress, fold_store, live_part
from .preflight import (
    CONNECT_TIMEOUT,
    UsageError,
    check_resources,
    check_store_path,
    check_study_size,
    parse_scheduler_address,
)
from .warm import warm_up

__all__ = ["RunReport", "auto_chunk_size", "run_study"]

#: seconds a finished task's result is awaited before the worker watcher is asked again
RESULT_WAIT = 2.0
#: waits of RESULT_WAIT after which an unanswered batch fetch is retried one task at a time
BATCH_WAITS = 5
#: finished tasks are collected at most this often (seconds), so that one gather fetches
#: the results of many: the client's cost per chunk falls with the batch size
BATCH_SECONDS = 0.1
#: longest sleep of the client between checks of the workers and the lease while no task
#: finishes (seconds)
IDLE_WAIT = 0.5
#: floor of the automatic task length (seconds of work per chunk)
TARGET_TASK_SECONDS = 5.0
#: the automatic chunk size keeps the cluster below this many finished tasks per second
#: (scheduler, client and store requests): 1000 workers ⇒ 20 s tasks
MAX_TASK_RATE = 50.0
#: and the store below this many chunks (each chunk is one object per array)
MAX_CHUNKS = 20000
#: seconds of toys the client times to size the chunks and print the cost: enough to know
#: the time per toy to ~10 % (chunk sizing needs a factor ~2), little enough not to delay
#: the first chunk
ESTIMATE_SECONDS = 0.25


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
    #: who wrote the results: "workers" (each task its own region) or "client"
    write: str = ""
    #: chunks marked done whose objects were missing or damaged (recomputed)
    repaired: list[str] = field(default_factory=list)
    #: why the run stopped early (e.g. no worker left), empty if it did not
    stopped: str = ""
    #: what the run did differently from what was asked (e.g. --toys below the store's)
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing_chunks


def auto_chunk_size(seconds_per_toy: float, toys: int, n_variants: int, n_workers: int,
                    task_seconds: float | None = None, max_chunks: int = MAX_CHUNKS) -> int:
    """Toys per task.

    About ``task_seconds`` of work per task — by default ``max(TARGET_TASK_SECONDS,
    n_workers / MAX_TASK_RATE)``, i.e. tens of seconds on clusters of a thousand workers —
    but (i) at least four tasks per worker when the study is small enough for that to
    matter, and (ii) never more than ``max_chunks`` chunks in the store. Chunks never
    span variants, so the counts are per variant × ``n_variants``.
    """
    if task_seconds is None:
        task_seconds = max(TARGET_TASK_SECONDS, n_workers / MAX_TASK_RATE)
    by_time = max(1, int(round(task_seconds / max(seconds_per_toy, 1e-6))))
    by_balance = max(1, math.ceil(toys * n_variants / (4 * max(n_workers, 1))))
    size = min(by_time, by_balance, max(toys, 1))
    by_count = math.ceil(toys * n_variants / max(max_chunks, 1))
    return int(max(1, size, min(by_count, max(toys, 1))))


def _live_physics(plan: Plan, info: StoreInfo) -> LivePhysics:
    """The running-physics accumulator of a run, from the store's truth and labels."""
    spec = plan.spec
    names = list(plan.params)
    labels = list(names)
    group = info.group
    if "param_label" in group and "param_unit" in group:
        lab, unit = group["param_label"][:], group["param_unit"][:]
        labels = [f"{lb} [{u}]" if u else str(lb) for lb, u in zip(lab, unit, strict=True)]
    test = spec.test
    return LivePhysics(
        kind=spec.kind, params=names, labels=labels, poi=spec.poi,
        hypotheses=list(spec.hypotheses), generate=spec.generate,
        truth=np.asarray(group["truth"][:]), reference=np.asarray(group["reference"][:]),
        variant_names=[v.name for v in spec.variants],
        variant_groups=[v.group for v in spec.variants],
        h0=str(test.get("h0", "")), h1=str(test.get("h1", "")),
        observed_t=float(test.get("observed", math.nan)),
        paired_toys=info.toys if spec.paired else 0,
        importance_fraction=float(spec.importance["fraction"]) if spec.importance
        else math.nan)


class _StorePreparation:
    """What the client needs before it creates a new store — the timed toys of the cost
    estimate (:func:`~toyengine.study.show.estimate_cost`) — done in a daemon thread while a
    new local cluster starts (the client process only waits for its workers then), instead
    of after, where they compete for the cores with the workers' warm-up.
    (:func:`~toyengine.store.results.create_store` itself needs nothing more than zarr.)"""

    def __init__(self, plan: Plan, estimate: bool):
        import threading

        self.plan, self.estimate = plan, estimate
        self.cost: CostEstimate | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="toyengine-prepare")
        self.thread.start()

    def _run(self) -> None:
        try:
            if self.estimate:
                self.cost = estimate_cost(self.plan, toys=50, budget=ESTIMATE_SECONDS)
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self.error = exc

    def result(self, workers: int) -> CostEstimate | None:
        """The cost estimate for ``workers`` workers (``None`` if none was asked for);
        what the thread raised is raised here."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return None if self.cost is None else replace(self.cost, workers=workers)


def _store_mismatch(store: Location, info: StoreInfo, spec: StudySpec) -> str:
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


#: study plans shipped to this process by :class:`StudyPlugin` (name → plan)
_SHIPPED: dict[str, Plan] = {}


class StudyPlugin(WorkerPlugin):
    """Worker plugin carrying the study's plan to every worker once (including workers
    that join later), instead of with every task."""

    def __init__(self, name: str, plan: Plan):
        self.name, self.plan = name, plan

    def setup(self, worker: Any = None) -> None:
        _SHIPPED[self.name] = self.plan

    def teardown(self, worker: Any = None) -> None:
        _SHIPPED.pop(self.name, None)


def _shipped(name: str) -> Plan:
    try:
        return _SHIPPED[name]
    except KeyError:
        msg = f"study {name} was not shipped to this worker"
        raise ToyEngineError(msg) from None


def _by_worker(res: ChunkResult) -> ChunkResult:
    """``res`` with the name of the worker that ran it on each recorded failure."""
    if res.causes:
        try:
            from distributed import get_worker

            who = str(get_worker().name)
        except Exception:  # noqa: BLE001 - not on a worker (a test, the client)
            who = ""
        for rec in res.causes.values():
            rec["worker"] = who
    return res


def chunk_task(name: str, chunk: Chunk) -> ChunkResult:
    """Task (client writes): run the chunk, return its arrays."""
    return _by_worker(run_chunk(_shipped(name), chunk))


@dataclass(frozen=True)
class _Fenced:
    """What a task returns instead of writing when its run lost the store's lease (a
    result, not an exception: Dask would retry the task)."""

    message: str


def chunk_write_task(name: str, chunk: Chunk, loc: Location, toys: int,
                     chunk_size: int, fence: Fence | None = None) -> ChunkResult | _Fenced:
    """Task (workers write): run the chunk, write its region and done marker while the
    run holds the store's lease (``fence``); returns only what the client's progress needs
    (:func:`~toyengine.run.live.live_part`)."""
    res = _by_worker(run_chunk(_shipped(name), chunk))
    try:
        write_chunk(loc, res, toys, chunk_size, fence)
    except LeaseLost as exc:
        return _Fenced(str(exc))
    return live_part(res)


def _store_visible(loc: str) -> bool:
    return Path(loc).exists()


def _choose_write(client: Any, loc: Location, own_cluster: bool, write: str) -> str:
    """"workers" when every worker can reach the store, else "client"."""
    if write in ("workers", "client"):
        return write
    if not loc.shared_by_processes:
        return "client"
    if own_cluster or not loc.is_local:
        return "workers"
    seen = client.run(_store_visible, loc.path(STATE_KEY))
    return "workers" if seen and all(seen.values()) else "client"


def _check_existing(info: StoreInfo, spec: StudySpec, params: tuple[str, ...]) -> None:
    if info.attrs.get("spec_digest") != spec.digest:
        raise StoreError(_store_mismatch(info.loc, info, spec))
    changed = plugin_mismatch(info.attrs, spec, info.loc)
    if changed:
        raise StoreError(changed)
    if info.params != params:
        msg = f"store {info.loc} has parameters {info.params}, the study has {params}"
        raise StoreError(msg)


def run_study(spec: StudySpec, store: str | Path | Location, *, workers: int | None = None,
              scheduler: str | None = None, client: Any = None, chunk_size: int | None = None,
              security: Any = None, progress: TextIO | None = sys.stderr,
              storage_options: dict[str, Any] | None = None, write: str = "auto",
              worker_timeout: float = 300.0, lease_ttl: float = 60.0, yes: bool = False,
              connect_timeout: float = CONNECT_TIMEOUT) -> RunReport:
    """Run (or resume, or extend, or repair) ``spec`` into the result store ``store``.

    Parameters
    ----------
    spec : StudySpec
        A validated study (:func:`toyengine.load_spec`).
    store : path or URL
        The zarr result store: a local path or an fsspec URL (``s3://bucket/x.zarr``,
        ``file://...``, ``memory://...``). Created if missing; if it exists it must come
        from the same study (same digest), and only chunks not yet done are run. A larger
        ``spec.toys`` extends it. Chunks marked done whose objects are missing or have
        another size than written are recomputed (bit-identical).
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
    storage_options : dict, optional
        fsspec options of the store (e.g. ``endpoint_url``); S3 credentials and endpoint
        are otherwise read from the standard ``AWS_*`` environment.
    write : {"auto", "workers", "client"}
        Who writes results: each worker its own chunks (needs the store reachable from
        every worker), or the client. ``auto`` picks workers when they can reach it.
    worker_timeout : float
        Stop with a message when no worker has been alive for this many seconds.
    lease_ttl : float
        Seconds after which the lease of a run that stopped renewing it expires.
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
        The store cannot be created there, comes from another study, or is damaged.
    StoreWriteError
        Writing the store failed (full disk, quota, read-only file system, permission),
        here or on a worker; one line naming the store. What was written is kept.
    ClusterError
        The scheduler cannot be reached.
    Interrupted
        Ctrl-C or SIGTERM; the chunks written are kept (run again to resume).
    LeaseLost
        Another run took the store's lease over (this one paused or could not renew it
        for ``lease_ttl`` seconds); this run's writers stopped writing.
    """
    t_start = time.monotonic()
    _check_counts(workers, chunk_size)
    if scheduler is not None and client is None:
        scheduler = parse_scheduler_address(scheduler, "" if security is not None else None)
    loc = Location.of(store, storage_options)
    if loc.is_local:  # the path as given, for the message; file:// URLs by their path
        check_store_path(loc.url if "://" not in loc.url else loc.root)
    plan = Plan.of(spec)
    params = plan.params
    check_resources(_generators(spec), workers, client is None and scheduler is None, yes)
    degenerate = check_degenerate(spec)  # warns, naming both variants, before any task
    own_client = client is None
    cluster = None
    interrupted = False
    in_flight = 0
    toys_note = ""
    with store_writes(loc), Lease(loc, ttl=lease_ttl, progress=progress) as lease:
        existing = loc.exists(STATE_KEY)
        if existing:
            info, toys_note = _open_existing(loc, spec, params, lease, progress)
        else:
            check_study_size(len(spec.variants), spec.toys, len(spec.hypotheses), len(params),
                             yes)
        if chunk_size is None:
            chunk_size = spec.chunk_size
        # timed toys size the chunks and tell the user what the run costs
        estimate = not existing and (chunk_size is None or progress is not None)
        preparation = _StorePreparation(plan, estimate) if own_client and not existing else None
        if own_client:
            client, cluster = _make_client(workers, scheduler, security, connect_timeout)
        try:
            check_workers_import(client, spec)
            client.run(warm_up, pickle.dumps(spec), wait=False)
            dashboard = getattr(client, "dashboard_link", "") or ""
            if progress is not None:
                progress.write(f"Dask dashboard: {dashboard}\n")
            if not existing:
                info = _create(loc, plan, client, preparation, estimate, chunk_size,
                               degenerate, lease, progress, yes)
            report_repaired = _unmark_damaged(info, lease, progress)
            chunks = info.chunks()
            done = info.done()
            pending = [c for c in chunks if not done[c.index]]
            total_toys = sum(c.size for c in chunks)
            mode = _choose_write(client, loc, own_client, write)
            report = RunReport(str(loc), total_toys, len(chunks),
                               chunks_skipped=len(chunks) - len(pending),
                               chunk_size=info.chunk_size, dashboard=dashboard, write=mode,
                               repaired=report_repaired, notes=[toys_note] if toys_note else [])
            if progress is not None and report.chunks_skipped:
                progress.write(f"resuming: {report.chunks_skipped}/{len(chunks)} chunks "
                               "already done\n")
            physics = _live_physics(plan, info)
            if report.chunks_skipped:  # the live numbers cover the whole store
                # read as readers do: each done chunk checked against its marker; a chunk
                # not done (damaged, unmarked above) reads as not written, never decoded
                fold_store(physics, checked_group(info, info.markers(), done), chunks,
                           done)
            bar = Progress(spec.name, spec.kind, total_toys,
                           sum(c.size for c in chunks if done[c.index]), progress,
                           physics=physics, status=loc)
            try:
                _submit_and_collect(client, plan, pending, loc, info, mode, bar, report,
                                    worker_timeout, lease)
                lease.check()  # every chunk of this run was written under its lease
            except KeyboardInterrupt:
                interrupted = True
                if not own_client and mode == "workers":
                    # the cluster outlives this run: its running tasks still write chunks
                    in_flight = _running_capacity(client) * info.chunk_size
            else:
                bar.update(None, final=True)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if own_client:
                _close_quietly(client, cluster, interrupted)
        if interrupted:
            raise _interrupted(loc, spec, in_flight)
        final = StoreInfo(loc)
        final_done = final.done()
        report.missing_chunks = [c.index for c in final.chunks() if not final_done[c.index]]
    report.seconds = time.monotonic() - t_start
    return report


def _check_counts(workers: int | None, chunk_size: int | None) -> None:
    """``workers`` and ``chunk_size``, where given, are integers >= 1."""
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        msg = f"--workers {workers}: expected an integer >= 1"
        raise UsageError(msg)
    if chunk_size is not None and (isinstance(chunk_size, bool) or chunk_size < 1):
        msg = f"--chunk-size {chunk_size}: expected an integer >= 1"
        raise UsageError(msg)


def _create(loc: Location, plan: Plan, client: Any, preparation: _StorePreparation | None,
            estimate: bool, chunk_size: int | None, degenerate: Any, lease: Lease,
            progress: TextIO | None, yes: bool) -> StoreInfo:
    """Create the store of a new run under ``lease``: with ``estimate``, the timed toys'
    cost checked against the study's size and shown, and the chunk size chosen from it
    when none was given."""
    spec = plan.spec
    if estimate:
        n_workers = max(1, len(client.scheduler_info().get("workers", {})))
        cost = (preparation.result(n_workers) if preparation is not None else
                estimate_cost(plan, toys=50, budget=ESTIMATE_SECONDS,
                              workers=n_workers))
        assert cost is not None
        check_study_size(len(spec.variants), spec.toys, len(spec.hypotheses),
                         len(plan.params), yes, cost.seconds_per_toy)
        if progress is not None:
            progress.write(f"estimate: {cost.text()}\n")
        if chunk_size is None:
            chunk_size = auto_chunk_size(cost.seconds_per_toy, spec.toys,
                                         len(spec.variants), n_workers)
    lease.check()
    create_store(loc, plan, chunk_size, degenerate, lease.fence)
    return StoreInfo(loc)


def _unmark_damaged(info: StoreInfo, lease: Lease, progress: TextIO | None) -> list[str]:
    """Chunks marked done whose data are missing or damaged, unmarked (to be recomputed)
    under ``lease``; their descriptions."""
    problems = check_chunks(info)
    report_repaired = [p.describe(info.variant_names) for p in problems]
    if problems:
        lease.check()
        unmark(info, problems)
        if progress is not None:
            progress.write(f"recomputing {len(problems)} chunk(s) marked done whose "
                           "data are missing or damaged:\n"
                           + "".join(f"  {r}\n" for r in report_repaired[:20]))
    return report_repaired


def _open_existing(loc: Location, spec: StudySpec, params: tuple[str, ...], lease: Lease,
                   progress: TextIO | None) -> tuple[StoreInfo, str]:
    """An existing store made ready for ``spec`` under ``lease``: checked to come from the
    same study, an interrupted extension finished, extended to ``spec.toys``; and the note
    shown when it holds more toys than asked for."""
    toys_note = ""
    info = StoreInfo(loc, allow_extending=True)
    _check_existing(info, spec, params)
    if info.extending is not None:
        if progress is not None:
            progress.write("finishing an interrupted extension of the store\n")
        lease.check()
        finish_extension(loc, lease.fence)
        info = StoreInfo(loc)
    if spec.toys > info.toys:
        lease.check()
        extend_store(loc, spec.toys, lease.fence)
        info = StoreInfo(loc)
    elif spec.toys < info.toys:
        toys_note = (f"note: the store holds {info.toys} toys per variant, more than "
                     f"--toys {spec.toys}: a store never shrinks; its toys not yet "
                     f"done are run (all {info.toys}), and a summary covers all "
                     "of them (a new store has exactly --toys)")
        if progress is not None:
            progress.write(toys_note + "\n")
    return info, toys_note


def _interrupted(loc: Location, spec: StudySpec, in_flight: int) -> Interrupted:
    """The :class:`~toyengine.errors.Interrupted` of a run stopped by the user: the toys
    the store holds now (not what this run collected) and those still in flight."""
    if not loc.exists(STATE_KEY):
        return Interrupted(0, spec.toys * len(spec.variants))
    info = StoreInfo(loc)
    done_mask = info.done()
    chunks = info.chunks()
    left = sum(c.size for c in chunks if not done_mask[c.index])
    return Interrupted(sum(c.size for c in chunks if done_mask[c.index]),
                       sum(c.size for c in chunks), min(in_flight, left))


def _generators(spec: StudySpec) -> dict[str, Any]:
    """The models that generate toys, for the memory check: the generator of each listed
    variant (the first of random ones) and the injected models of importance sampling,
    as built (before any reference fit)."""
    out: dict[str, Any] = {}
    seen = False
    for v in spec.variants:
        if v.random:
            if seen:
                continue
            seen = True
        out[f"variant {v.name!r} (model {v.generate!r})"] = build_model(spec, v, v.generate)
        if len(out) >= 100:
            break
    for m in (spec.importance or {}).get("inject", ()):
        out[f"model {m!r}"] = build_model(spec, spec.variants[0], m)
    return out


def _submit_and_collect(client: Any, plan: Plan, pending: list[Chunk], loc: Location,
                        info: StoreInfo, mode: str, bar: Progress, report: RunReport,
                        worker_timeout: float, lease: Lease | None = None) -> None:
    from distributed import as_completed

    if not pending:
        return
    # task keys unique to this run: a rerun on the same cluster (resume, another chunk size)
    # must never submit a key the scheduler may still be releasing from the last run
    tag = f"{plan.spec.digest[:12]}-{info.toys}-{uuid.uuid4().hex[:8]}"
    name = f"toyengine-study-{tag}"
    client.register_plugin(StudyPlugin(name, plan), name=name)
    keys = [f"toyengine-{tag}-chunk-{c.index}" for c in pending]
    fence = lease.fence if lease is not None else None
    if mode == "workers":
        n = len(pending)
        futures = client.map(chunk_write_task, [name] * n, pending, [loc] * n,
                             [info.toys] * n, [info.chunk_size] * n, [fence] * n, key=keys,
                             retries=3, pure=False)
    else:
        futures = client.map(chunk_task, [name] * len(pending), pending, key=keys, retries=3,
                             pure=False)
    watch = _WorkerWatch(client, worker_timeout)
    # as_completed only watches the tasks' states; the finished results are then fetched in
    # batches by a helper thread (one gather per batch, not one round trip per chunk), so
    # that the loop can wait with a timeout: neither a result whose worker died just after
    # finishing (it waits for a recomputation that no worker may be left to do) nor a lost
    # fetch blocks the run, since between waits the worker watcher may stop it. A batch
    # that fails or stays unanswered falls back to one ``Future.result(timeout)`` per task.
    ac = as_completed(futures, loop=client.loop)  # not default_client(): any client works
    del futures[:]  # as_completed holds them; each is released once its result is in
    one_by_one: list[Any] = []
    fetch: _BatchFetch | None = None
    last_batch = 0.0

    def stop() -> bool:
        if lease is not None and lease.lost:  # seen by the renewal thread
            lease.check()
        stopped = watch.check()
        if stopped:
            report.stopped = stopped
            report.errors.append(stopped)
        return bool(stopped)

    def fold(res: ChunkResult | _Fenced) -> None:
        if isinstance(res, _Fenced):  # a worker found the lease lost: so is the run
            raise LeaseLost(res.message)
        if mode == "client":
            write_chunk(loc, res, info.toys, info.chunk_size, fence)
        report.chunks_run += 1
        bar.update(res)  # counts the failed fits

    try:
        while not (ac.is_empty() and fetch is None and not one_by_one):
            if fetch is not None:
                if not fetch.done.wait(RESULT_WAIT):
                    if stop():
                        break
                    fetch.waits += 1
                    if fetch.waits >= BATCH_WAITS:  # unanswered: fetch these one by one
                        one_by_one += fetch.futures
                        fetch = None
                    continue
                if fetch.error is not None:  # a result was lost on the way: one by one
                    one_by_one += fetch.futures
                else:
                    for res in fetch.results:
                        fold(res)
                fetch = None
                continue
            if one_by_one:
                fut = one_by_one[0]
                try:
                    res = fut.result(timeout=RESULT_WAIT)
                except TimeoutError:
                    if stop():
                        break
                    continue  # the same future again
                except Exception as exc:  # noqa: BLE001 - the task failed (retries used up)
                    one_by_one.pop(0)
                    if isinstance(exc, LeaseLost) or store_access_error(loc, exc) is not None:
                        raise  # a worker cannot write or reach the store: nor can the rest
                    report.errors.append(f"{fut.key}: {type(exc).__name__}: {exc}")
                    continue
                one_by_one.pop(0)
                fold(res)
                del fut, res
                continue
            wait = last_batch + BATCH_SECONDS - time.monotonic()
            if wait > 0:
                if stop():
                    break
                time.sleep(wait)
                continue
            if not ac.has_ready():
                if stop():
                    break
                # asleep until a task finishes (as_completed notifies its condition), not
                # polling: the client shares its cores with the workers
                with ac.thread_condition:
                    if not ac.has_ready():
                        ac.thread_condition.wait(IDLE_WAIT)
                continue
            last_batch = time.monotonic()
            batch = list(ac.next_batch(block=False))
            finished = [f for f in batch if f.status == "finished"]
            one_by_one += [f for f in batch if f.status != "finished"]  # errors reported there
            if finished:
                fetch = _BatchFetch(client, finished)
            del batch
    finally:
        report.failed_fits = bar.failed
        left = [*ac.futures, *one_by_one, *(fetch.futures if fetch is not None else [])]
        if left:
            client.cancel(left)
        try:
            client.unregister_worker_plugin(name)
        except Exception:  # noqa: BLE001 - the cluster may be gone
            pass


class _BatchFetch:
    """Gathers the results of a batch of finished tasks in a daemon thread.

    ``done`` is set when the gather returns (``results``, in the order of ``futures``) or
    raises (``error``). The thread is a daemon: a gather that never returns (a
    distributed fetch lost in its event loop) is abandoned, not joined at exit.
    """

    def __init__(self, client: Any, futures: list[Any]):
        import threading

        self.futures = futures
        self.results: list[Any] = []
        self.error: BaseException | None = None
        self.waits = 0
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(client,), daemon=True,
                         name="toyengine-fetch").start()

    def _run(self, client: Any) -> None:
        try:
            self.results = client.gather(self.futures)
        except BaseException as exc:  # noqa: BLE001 - handed to the collection loop
            self.error = exc
        finally:
            self.done.set()


class _WorkerWatch:
    """Notices a cluster with no worker alive for ``timeout`` seconds."""

    def __init__(self, client: Any, timeout: float, every: float = 1.0):
        self.client, self.timeout, self.every = client, timeout, every
        self.seen: set[str] = set()
        self.last_alive = time.monotonic()
        self.next_check = 0.0

    def check(self) -> str:
        now = time.monotonic()
        if now < self.next_check:
            return ""
        self.next_check = now + self.every
        try:
            alive = set(self.client.scheduler_info(n_workers=-1).get("workers", {}))
        except Exception:  # noqa: BLE001 - scheduler unreachable counts as no worker
            alive = set()
        self.seen |= alive
        if alive:
            self.last_alive = now
            return ""
        if now - self.last_alive < self.timeout:
            return ""
        return (f"no Dask worker alive for {now - self.last_alive:.0f} s "
                f"({len(self.seen)} worker(s) seen during this run, all gone); stopped. "
                "Results done so far are kept: fix the cluster and run the same command "
                "again to resume")


def require_complete(report: RunReport) -> None:
    if not report.complete:
        msg = (f"{len(report.missing_chunks)} chunk(s) not done in {report.store}: "
               f"{report.missing_chunks[:20]}; errors: {report.errors[:5]}")
        raise ToyEngineError(msg)
