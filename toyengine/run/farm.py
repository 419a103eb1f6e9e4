"""Batch farms through dask-jobqueue (SLURM, HTCondor): the scheduler runs inside the
submitting process, the workers are batch jobs running ``dask worker``; job scripts, the
first submission's checks, the job keeper and :func:`submit_study`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

import dask

from ..errors import ClusterError
from ..store.location import Location
from ..store.results import STATE_KEY
from .cluster_settings import SYSTEMS, SubmitSettings, profile_config, resolve_settings
from .cluster_tls import submit_security
from .preflight import check_store_path, check_study_size

# --------------------------------------------------------------------------------------
# batch farms (dask-jobqueue)
# --------------------------------------------------------------------------------------


def batch_cluster(settings: SubmitSettings, *, security: Any = None) -> Any:
    """Start the dask-jobqueue cluster object for ``settings`` (its scheduler runs in
    this process; no job is submitted until it is scaled).

    The scheduler listens on ``scheduler_host`` (default: dask-jobqueue's choice, the
    ``interface`` of ``jobqueue.<system>`` or every interface, as the batch nodes must
    reach it; TLS by default). Its dashboard, which has no authentication, listens on
    ``dashboard_address`` if given (here or in ``jobqueue.<system>.scheduler-options``),
    else on port 8787 of ``scheduler_host`` or, without one, of 127.0.0.1 (an SSH tunnel
    reaches it): never on every interface unless asked.
    """
    import dask_jobqueue

    cls = getattr(dask_jobqueue, SYSTEMS[settings.system])
    sched = dict(dask.config.get(f"jobqueue.{settings.system}.scheduler-options") or {})
    if settings.scheduler_host:
        sched["host"] = settings.scheduler_host
        sched.pop("interface", None)
    if settings.dashboard_address:
        sched["dashboard_address"] = settings.dashboard_address
    elif "dashboard_address" not in sched:
        host = settings.scheduler_host or "127.0.0.1"
        sched["dashboard_address"] = f"[{host}]:8787" if ":" in host else f"{host}:8787"
    try:
        return cls(scheduler_options=sched, security=security, **settings.job_kwargs)
    except (ValueError, TypeError) as exc:
        msg = f"dask-jobqueue rejected the {settings.system} settings: {exc}"
        raise ClusterError(msg) from exc


def job_script(settings: SubmitSettings, *, security: Any = None) -> str:
    """The job script one batch job would run (dask-jobqueue's job script), rendered
    without starting a scheduler or opening any socket; nothing is submitted. The
    scheduler address, chosen when the real cluster starts, is shown as
    ``<scheduler-address>``."""
    import dask_jobqueue

    job_cls = getattr(dask_jobqueue, SYSTEMS[settings.system]).job_cls
    config_name = job_cls.default_config_name()
    kwargs = dict(settings.job_kwargs)
    kwargs.setdefault("interface", dask.config.get(f"jobqueue.{config_name}.interface", None))
    kwargs.update(config_name=config_name, security=security,
                  protocol="tls://" if security is not None else None)
    scheme = "tls" if security is not None else "tcp"
    try:  # what JobQueueCluster does for each job, with a placeholder address
        job = job_cls(f"{scheme}://<scheduler-address>", name="dummy-name", **kwargs)
    except (ValueError, TypeError) as exc:
        msg = f"dask-jobqueue rejected the {settings.system} settings: {exc}"
        raise ClusterError(msg) from exc
    return job.job_script()


def farm_chunk_size(seconds_per_toy: float, toys: int, n_variants: int, n_workers: int,
                    task_seconds: float = 60.0, max_chunks: int = 20000) -> int:
    """Toys per task on a farm: :func:`toyengine.run.runner.auto_chunk_size` with the farm's
    configured task length (``task_seconds``) and chunk limit (``max_chunks``)."""
    from .runner import auto_chunk_size

    return auto_chunk_size(seconds_per_toy, toys, n_variants, n_workers, task_seconds,
                           max_chunks)


def _first_submission(cluster: Any, jobs: int) -> None:
    """Submit the first ``jobs`` jobs and wait for the submit commands, so that a
    failing ``sbatch``/``condor_submit`` is an error here, not a log line (with
    ``adapt`` the cluster would otherwise wait for workers forever).

    This is ``cluster.scale(jobs=jobs)`` done synchronously: the same ``worker_spec``
    update through the public ``new_worker_spec()``, then the cluster awaited (awaiting
    a ``SpecCluster`` brings its jobs in line with ``worker_spec`` and raises what a
    job's submission raised; ``scale()`` would only log it).
    """

    async def scale_and_wait() -> None:
        while len(cluster.worker_spec) < jobs:
            cluster.worker_spec.update(cluster.new_worker_spec())
        await cluster

    try:
        cluster.sync(scale_and_wait)
    except RuntimeError as exc:
        from distributed.core import Status

        # forget the jobs that were never submitted (marked failed, as distributed
        # expects of a job whose start raised), so that close() cancels only the rest
        for name, job in list(cluster.workers.items()):
            if getattr(job, "job_id", None) is None:
                job.status = Status.failed
                del cluster.workers[name]
                cluster.worker_spec.pop(name, None)
        msg = f"submitting the {jobs} worker job(s) failed: {_command_error(exc)}"
        raise ClusterError(msg) from exc


def _command_error(exc: BaseException) -> str:
    """One line from dask-jobqueue's error of a failed submit command: what the command
    wrote on stderr (e.g. ``sbatch: error: invalid partition specified: nope``), else the
    whole message, joined with ``; ``."""
    text = str(exc)
    if "stderr:" in text:
        lines = [x.strip() for x in text.split("stderr:", 1)[1].splitlines() if x.strip()]
        if lines:
            return "; ".join(lines)
    return " ".join(text.split())


class _JobKeeper:
    """Replaces the batch jobs that end while the study runs (wall time, pre-emption,
    ``scancel``/``condor_rm``, worker ``--lifetime``).

    dask-jobqueue keeps an ended job in the cluster's ``worker_spec``, so ``adapt`` counts
    it as running and never submits a replacement. Every second this drops from
    ``worker_spec`` each job all of whose workers have been seen and have now been gone
    from the scheduler for ``grace`` seconds (``distributed.deploy.lost-worker-timeout``,
    time for a nanny to restart a worker in the same job); ``adapt``, which keeps
    ``jobs`` jobs, then submits a fresh one. The ended job is also cancelled, in case its
    processes are still alive but cut off. Jobs whose workers never arrived (still
    queued) are left alone. Runs on the cluster's event loop.
    """

    def __init__(self, cluster: Any, grace: float, progress: TextIO | None) -> None:
        self.cluster = cluster
        self.grace = grace
        self.progress = progress
        self.last_seen: dict[str, float] = {}
        self.seen_job: dict[str, Any] = {}
        self.ended: list[str] = []
        self.callback: Any = None
        self.closing: set[Any] = set()

    def _worker_names(self, name: str) -> set[str]:
        spec = self.cluster.worker_spec.get(name) or {}
        if "group" in spec:
            return {f"{name}{suffix}" for suffix in spec["group"]}
        return {str(name)}

    def check(self) -> None:
        import asyncio
        import time

        now = time.monotonic()
        workers = (self.cluster.scheduler_info or {}).get("workers", {})
        present = {str(w.get("name")) for w in workers.values()}
        for name in list(self.cluster.worker_spec):
            current = self.cluster.workers.get(name)
            if self._worker_names(name) & present:
                self.last_seen[name] = now
                self.seen_job[name] = current
            elif name in self.last_seen and now - self.last_seen[name] > self.grace:
                del self.last_seen[name]
                job = self.seen_job.pop(name, None)
                if current is not None and current is not job:
                    continue  # already resubmitted under the same name by distributed
                self.cluster.worker_spec.pop(name, None)
                self.cluster.workers.pop(name, None)
                job_id = getattr(job, "job_id", None)
                self.ended.append(str(job_id or name))
                if job is not None:
                    from distributed.core import Status

                    job.status = Status.closed  # as distributed expects of a closed job
                    task = asyncio.ensure_future(job.close())
                    self.closing.add(task)
                    task.add_done_callback(self.closing.discard)
                if self.progress is not None:
                    self.progress.write(f"batch job {job_id or name} ended (its workers "
                                        "left); submitting a replacement\n")
                    self.progress.flush()

    async def start(self) -> None:
        from tornado.ioloop import PeriodicCallback

        self.callback = PeriodicCallback(self.check, 1000)
        self.callback.start()

    async def stop(self) -> None:
        if self.callback is not None:
            self.callback.stop()
        # drop our references: distributed checks, on close, that every job object still
        # alive was closed, and dask-jobqueue's jobs do not record that they were
        self.seen_job.clear()


def submit_study(spec: Any, store: str | Path, *, system: str,
                 profile: str | Path | None = None, security: Any = None,
                 chunk_size: int | None = None, progress: TextIO | None = sys.stderr,
                 yes: bool = False, **options: Any) -> Any:
    """Run ``spec`` into ``store`` on a batch farm (SLURM or HTCondor) through
    dask-jobqueue and return the runner's ``RunReport``.

    The scheduler and the client run in this process (keep it alive: ``tmux``,
    ``screen`` or a long batch job); ``jobs`` batch jobs each start ``processes``
    ``dask worker`` processes that connect back. With ``adapt`` (default) jobs that end
    (worker ``--lifetime``, wall time, pre-emption) are replaced until the study is
    done; their in-flight chunks are re-run elsewhere with identical results. All jobs
    are cancelled at the end. Re-running the same command resumes an incomplete store.

    Scheduler, workers and client talk TLS with mutual authentication unless ``tls``
    is false (``--no-tls``): with no certificates configured, a private CA made for this
    submission only (:func:`temporary_certificates`). A local store path and the study's
    size (:func:`toyengine.run.preflight.check_study_size`) are checked before any job is
    submitted.

    Parameters
    ----------
    spec : StudySpec
        The study.
    store : path
        Result store: a path or an fsspec URL (see ``docs/running-1e7-toys.md``).
    system : {"slurm", "htcondor"}
        Batch system.
    profile : path, optional
        Site profile (Dask config YAML), e.g. ``cluster/profiles/slurm.yaml``.
    security : distributed.Security or path or "temporary", optional
        TLS credentials; default from the settings (see :func:`submit_security`).
    chunk_size : int, optional
        Toys per task; default: :func:`farm_chunk_size` for a new store.
    progress : file, optional
        Progress and status lines (``None``: silent).
    yes : bool
        Run a study even if its size estimate asks for confirmation.
    **options
        Overrides, see :func:`resolve_settings` (e.g. ``tls=False``, ``jobs=10``).

    Raises
    ------
    ClusterError
        Bad settings, no batch system here, failing submission, no worker in time.
    UsageError
        A huge study without ``yes`` (``ConfirmationNeeded``).
    StoreError
        The store cannot be created there or comes from another study.
    """
    with profile_config(profile):
        s = resolve_settings(system, **options)
        loc = Location.of(store)
        if loc.is_local:
            check_store_path(loc.url if "://" not in loc.url else loc.root)
        if not loc.exists(STATE_KEY):
            from ..study.recipe import param_axis

            check_study_size(len(spec.variants), spec.toys, len(spec.hypotheses),
                             len(param_axis(spec)), yes)
        import dask_jobqueue

        submit = getattr(dask_jobqueue, SYSTEMS[system]).job_cls.submit_command
        if shutil.which(submit.split()[0]) is None:
            msg = (f"{submit.split()[0]!r} not found on PATH: run toyengine submit on a "
                   f"{system} submit host (toyengine submit ... --dry-run prints the job "
                   "script without submitting)")
            raise ClusterError(msg)
        with submit_security(s, security) as sec:
            return _run_on_farm(spec, store, s, sec, chunk_size, progress, yes)


def _run_on_farm(spec: Any, store: str | Path, s: SubmitSettings, security: Any,
                 chunk_size: int | None, progress: TextIO | None, yes: bool) -> Any:
    """Start the batch cluster, submit the jobs, run the study, cancel the jobs."""
    from dask.utils import parse_timedelta
    from distributed import Client

    from .runner import run_study

    system = s.system
    cluster = batch_cluster(s, security=security)
    keeper = None
    try:
        _first_submission(cluster, s.jobs)
        if s.adapt:
            cluster.adapt(minimum_jobs=s.jobs, maximum_jobs=s.jobs)
            grace = parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout"))
            keeper = _JobKeeper(cluster, float(grace), progress)
            cluster.sync(keeper.start)
        client = Client(cluster)
        try:
            if progress is not None:
                progress.write(f"{system}: {s.jobs} job(s) x {s.job_kwargs['processes']}"
                               f" worker(s) submitted; scheduler "
                               f"{cluster.scheduler_address}; waiting for workers\n")
                progress.flush()
            try:
                client.wait_for_workers(1, timeout=s.wait_timeout)
            except TimeoutError as exc:
                msg = (f"no worker joined within {s.wait_timeout} s: check the queue "
                       f"and the job logs (jobqueue.{system}.log-directory); can the "
                       f"batch nodes reach {cluster.scheduler_address}?")
                raise ClusterError(msg) from exc
            if chunk_size is None and spec.chunk_size is None \
                    and not Location.of(store).exists(STATE_KEY):
                from ..study.plan import Plan
                from ..study.show import estimate_cost

                t = estimate_cost(Plan.of(spec), toys=50,
                                  budget=min(s.task_seconds, 2.0)).seconds_per_toy
                chunk_size = farm_chunk_size(t, spec.toys, len(spec.variants), s.workers,
                                             s.task_seconds, s.max_chunks)
            return run_study(spec, store, client=client, chunk_size=chunk_size,
                             progress=progress, yes=yes)
        finally:
            client.close()
    finally:
        if keeper is not None:  # no replacement jobs while the cluster closes
            cluster.sync(keeper.stop)
        cluster.close()
