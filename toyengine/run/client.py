"""The Dask client of a run: our own ``LocalCluster`` or a connection to a scheduler, the
check that every worker imports the study's plug-in modules, and a quiet shutdown."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

import dask.config
from distributed.diagnostics.plugin import WorkerPlugin

from ..errors import ClusterError
from ..store.location import quiet_store_errors
from ..study.spec import StudySpec
from .preflight import (
    probe_scheduler,
)
from .preload import PRELOAD

#: Dask settings of our own local cluster (its workers, nannies and scheduler), which shares
#: the machine's cores with the client, as (distributed's default, ours): no statistical
#: profiler (it samples each worker's stack every 10 ms for the Profile page of the
#: dashboard), memory checked every second rather than ten times a second, the event loop's
#: responsiveness checked every second rather than every 20 ms (a loop blocked for
#: ``distributed.admin.tick.limit``, 3 s, is still reported) and the dashboard's System page
#: (CPU, memory, network, disk) sampled every 2 s rather than every 0.5 s. The first two
#: were ~5 % of the T_cc+ pulls study's time per toy on one core, the last two 6 % more
#: (``toyengine run studies/tcc/pulls.yaml --workers 1 --toys 20200`` pinned to one core,
#: whole-process timings, 4 alternations; benchmarks/bench_tcc_roofit.py). A setting the
#: user changed from distributed's default is kept (:func:`local_worker_config`); for the
#: dashboard's Profile page run a cluster of your own (``--scheduler``, cluster/README.md).
LOCAL_WORKER_CONFIG: dict[str, tuple[Any, Any]] = {
    "distributed.worker.profile.enabled": (True, False),
    "distributed.worker.memory.monitor-interval": ("100ms", "1s"),
    "distributed.admin.tick.interval": ("20ms", "1s"),
    "distributed.admin.system-monitor.interval": ("500ms", "2s"),
}


def local_worker_config() -> dict[str, Any]:
    """Our values of :data:`LOCAL_WORKER_CONFIG` for the settings still at distributed's
    default (the others are the user's)."""
    return {key: ours for key, (default, ours) in LOCAL_WORKER_CONFIG.items()
            if dask.config.get(key, default=None) == default}


def plugin_modules(spec: StudySpec) -> tuple[str, ...]:
    """The plug-in modules the study's builders need on every worker."""
    from ..models import plugin_module

    mods = {plugin_module(m["builder"]) for m in spec.models.values()}
    return tuple(sorted(m for m in mods if m is not None))


def _try_builders(builders: Sequence[str], sources: dict[str, str]) -> str | None:
    """Run on a worker: ``None`` if every plug-in builder resolves here under the rule
    the client applied (allowed modules, marked builder, the same code), else the first
    failure."""
    from ..models import get_builder

    for name in builders:
        try:
            get_builder(name, allowed=sources, sources=sources)
        except Exception as exc:  # noqa: BLE001 - any failure importing user code
            return str(exc)
    return None


def check_workers_import(client: Any, spec: StudySpec) -> None:
    """Fail before any toy if a connected worker cannot import a plug-in module of ``spec``
    or holds other code than the client validated the study with (checked once per worker
    with ``client.run``).

    Raises
    ------
    ClusterError
        ``worker ADDRESS: cannot import MODULE (...)``, one line.
    """
    if not plugin_modules(spec):
        return
    from ..models import BUILDERS

    builders = sorted({m["builder"] for m in spec.models.values()} - set(BUILDERS))
    sources = dict(spec.plugin_sources)
    failures = {w: err for w, err in client.run(_try_builders, builders, sources).items()
                if err}
    if failures:
        worker, err = sorted(failures.items())[0]
        more = f"; {len(failures) - 1} more worker(s) too" if len(failures) > 1 else ""
        fix = ("; install the module on the workers (cluster/README.md, 'User code on "
               "workers')" if err.startswith("cannot import") else "")
        msg = f"worker {worker}: {err}{more}{fix}"
        raise ClusterError(msg)


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
        # the preload on both sides: kernels loaded in the worker, glibc's adaptive malloc
        # thresholds kept by the nanny (toyengine.run.preload)
        with dask.config.set(local_worker_config()):  # the nannies hand it to the workers
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                   silence_logs=40, preload=[PRELOAD],
                                   preload_nanny=[PRELOAD])
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
    client = Client(cluster)
    # the client reports a store that cannot be written or reached in one line: the
    # workers it started do not log each failed task's traceback too
    client.register_plugin(QuietStoreErrors(), name="toyengine-quiet-store-errors")
    return client, cluster


class _ShutdownHeartbeatFilter:
    """Logging filter for the workers of our own cluster: drops the traceback of a heartbeat
    that found the scheduler gone. Their scheduler lives in the client process, which stops
    them after it (e.g. on Ctrl-C); a worker whose heartbeat was in flight then logged the
    closed connection with a traceback under the client's one-line message."""

    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith("Failed to communicate with scheduler")


_SHUTDOWN_QUIET = _ShutdownHeartbeatFilter()


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class QuietStoreErrors(WorkerPlugin):
    """Worker plugin (our own local cluster): no log records with tracebacks for tasks
    that failed because the store cannot be written or reached, nor for the store's
    connections dropped with it (:func:`~toyengine.store.location.quiet_store_errors`), nor
    for a heartbeat that found the client's scheduler gone at shutdown
    (:class:`_ShutdownHeartbeatFilter`)."""

    def setup(self, worker: Any = None) -> None:
        import logging

        quiet_store_errors()
        logger = logging.getLogger("distributed.worker")
        if _SHUTDOWN_QUIET not in logger.filters:
            logger.addFilter(_SHUTDOWN_QUIET)


def _running_capacity(client: Any) -> int:
    """Worker threads of the cluster (tasks that may be running); 0 if unknown."""
    try:
        workers = client.scheduler_info().get("workers", {})
        return int(sum(int(w.get("nthreads", 1)) for w in workers.values()))
    except Exception:  # noqa: BLE001 - the scheduler may be gone
        return 0


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
