"""Cluster settings of ``toyengine submit``: the commented defaults file
``toyengine/run/toyengine.yaml`` (loaded into ``dask.config`` under ``toyengine.cluster``
when this module is imported), site profiles, and their resolution into a frozen
:class:`SubmitSettings` (lowest to highest priority: that file, the user's Dask
configuration, a site profile, explicit keyword arguments / command-line options). Like
dask-jobqueue's ``config.py``: no cluster is started here.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import yaml

from ..errors import ClusterError

#: the commented defaults file, namespaced ``toyengine.cluster``
DEFAULTS_FILE = Path(__file__).with_name("toyengine.yaml")
#: batch systems ``toyengine submit`` knows, with their dask-jobqueue cluster class
SYSTEMS = {"slurm": "SLURMCluster", "htcondor": "HTCondorCluster"}
#: job options accepted as keyword arguments / command-line options, per batch system
JOB_OPTIONS = {
    "slurm": ("cores", "processes", "memory", "walltime", "queue", "account"),
    "htcondor": ("cores", "processes", "memory", "disk"),
}
LIFETIME_OPTIONS = ("lifetime", "lifetime_stagger", "lifetime_restart")
TLS_ROLES = ("scheduler", "worker", "client")


def _load_defaults() -> dict[str, Any]:
    with DEFAULTS_FILE.open() as f:
        defaults = yaml.safe_load(f)
    dask.config.update_defaults(defaults)
    return defaults


_DEFAULTS = _load_defaults()
#: the keys of ``toyengine.cluster`` (closed: anything else is an error)
SETTING_KEYS = tuple(_DEFAULTS["toyengine"]["cluster"])


# --------------------------------------------------------------------------------------
# settings
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitSettings:
    """Everything ``toyengine submit`` needs, resolved once (see module docstring).

    ``job_kwargs`` are the keyword arguments given to the dask-jobqueue cluster class
    (cores, memory, processes, worker_extra_args with the lifetime options, and any
    queue/account/walltime/disk); every other dask-jobqueue setting (job-script
    prologue, python, log directory, ...) is read by dask-jobqueue from
    ``jobqueue.<system>.*`` in the same configuration.
    """

    system: str
    jobs: int
    adapt: bool
    task_seconds: float
    max_chunks: int
    wait_timeout: float | None
    scheduler_host: str | None
    dashboard_address: str | None
    tls: bool
    tls_config: str | None
    profile: str | None
    job_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def workers(self) -> int:
        """Dask workers when all jobs run (``jobs × processes``)."""
        return self.jobs * int(self.job_kwargs["processes"])


def _canon(key: str) -> str:
    return str(key).replace("_", "-")


def _check_toyengine_keys(cfg: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(map(_canon, cfg)) - set(SETTING_KEYS))
    if unknown:
        msg = (f"{where}: unknown toyengine.cluster setting(s) {unknown}; valid keys are "
               f"{list(SETTING_KEYS)} (see {DEFAULTS_FILE})")
        raise ClusterError(msg)


def _read_profile(path: str | Path) -> dict[str, Any]:
    p = Path(path).expanduser()
    if not p.is_file():
        msg = (f"profile {p} not found; use one of cluster/profiles/*.yaml (or a copy "
               "adapted to your site)")
        raise ClusterError(msg)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        msg = f"profile {p} is not valid YAML: {exc}"
        raise ClusterError(msg) from exc
    if not isinstance(data, dict):
        msg = f"profile {p}: expected a mapping of Dask settings, got {type(data).__name__}"
        raise ClusterError(msg)
    _check_toyengine_keys((data.get("toyengine") or {}).get("cluster") or {}, str(p))
    import dask_jobqueue  # noqa: F401 - loads the jobqueue.* defaults we check against

    for system, section in (data.get("jobqueue") or {}).items():
        known = dask.config.get(f"jobqueue.{system}", None)
        if known is None:
            msg = f"profile {p}: unknown batch system jobqueue.{system}"
            raise ClusterError(msg)
        bad = sorted(set(map(_canon, section or {})) - set(map(_canon, known)))
        if bad:
            msg = (f"profile {p}: unknown jobqueue.{system} setting(s) {bad}; valid keys "
                   f"are {sorted(known)}")
            raise ClusterError(msg)
    return data


@contextlib.contextmanager
def profile_config(profile: str | Path | None = None) -> Iterator[dict[str, Any]]:
    """Context in which a site profile (a Dask config YAML) is merged on top of the
    current configuration; restored on exit.

    ``profile=None`` uses ``toyengine.cluster.profile`` (itself possibly ``None``).
    Yields the profile's contents (``{}`` without one).
    """
    if profile is None:
        profile = dask.config.get("toyengine.cluster.profile", None)
    if profile is None:
        yield {}
        return
    data = _read_profile(profile)
    saved = copy.deepcopy(dask.config.config)
    dask.config.update(dask.config.config, copy.deepcopy(data), priority="new")
    try:
        yield data
    finally:
        dask.config.config.clear()
        dask.config.config.update(saved)


def with_preload(args: Sequence[str]) -> list[str]:
    """``dask worker`` arguments with toyengine's start-up on the worker and on its nanny
    (``--preload`` and ``--preload-nanny`` :mod:`toyengine.run.preload`: the kernels loaded
    before the worker joins, glibc's adaptive malloc thresholds kept) added where missing;
    other preloads stay."""
    from .preload import PRELOAD

    out = list(map(str, args))
    for flag in ("--preload", "--preload-nanny"):
        given = {b for a, b in itertools.pairwise(out) if a == flag}
        given |= {a.partition("=")[2] for a in out if a.startswith(flag + "=")}
        if PRELOAD not in given:
            out += [flag, PRELOAD]
    return out


def _set_flag(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag X`` / ``flag=X`` set to ``flag value``: in place of the first
    occurrence (later ones dropped), else appended."""
    out: list[str] = []
    placed = skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag or a.startswith(flag + "="):
            skip = a == flag
            if not placed:
                out += [flag, value]
                placed = True
            continue
        out.append(a)
    if not placed:
        out += [flag, value]
    return out


def with_lifetime(args: Sequence[str], lifetime: str | None = None,
                  stagger: str | None = None, restart: bool | None = None) -> list[str]:
    """``dask worker`` arguments with the lifetime options replaced where given.

    ``--lifetime D`` makes a worker retire gracefully (its tasks move elsewhere) after
    ``D``; ``--lifetime-stagger S`` spreads the retirements by ±S so the workers of a
    farm do not all leave at once; ``--lifetime-restart`` makes the nanny start a fresh
    worker instead of ending the job — right for long-lived processes (Kubernetes pods,
    hand-started workers), wrong for batch jobs with a wall time (the job should end so
    that ``adapt`` submits a fresh one). ``None`` keeps what ``args`` has.
    """
    from dask.utils import parse_timedelta

    out = list(map(str, args))
    for flag, value in (("--lifetime", lifetime), ("--lifetime-stagger", stagger)):
        if value is not None:
            try:
                parse_timedelta(str(value))
            except (ValueError, TypeError, KeyError) as exc:
                msg = (f"{flag} {value!r} is not a Dask time interval; use one unit, "
                       "e.g. '225m', '4h', '10m' (compound forms like '3h45m' are not "
                       "understood by dask worker)")
                raise ClusterError(msg) from exc
            out = _set_flag(out, flag, str(value))
    if restart is not None:
        out = [a for a in out if a not in ("--lifetime-restart", "--no-lifetime-restart")]
        if restart:
            out.append("--lifetime-restart")
    return out


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def _slurm_seconds(walltime: str) -> float:
    """SLURM ``--time`` formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    s = str(walltime).strip()
    days = 0
    if "-" in s:
        d, s = s.split("-", 1)
        days = int(d)
        parts = [int(x) for x in s.split(":")]
        parts += [0] * (3 - len(parts))
        h, m, sec = parts
    else:
        parts = [int(x) for x in s.split(":")]
        if len(parts) == 1:
            h, m, sec = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, sec = 0, parts[0], parts[1]
        else:
            h, m, sec = parts[-3:]
    return float(days * 86400 + h * 3600 + m * 60 + sec)


def _check_lifetime(system: str, args: Sequence[str], walltime: Any) -> None:
    from dask.utils import parse_timedelta

    life = _flag_value(args, "--lifetime")
    if life is None or walltime is None or system != "slurm":
        return
    stagger = _flag_value(args, "--lifetime-stagger") or "0s"
    latest = parse_timedelta(life) + parse_timedelta(stagger)
    try:
        wall = _slurm_seconds(walltime)
    except ValueError:
        return
    if latest >= wall:
        msg = (f"worker --lifetime {life} + --lifetime-stagger {stagger} reaches the job "
               f"wall time {walltime}: workers would be killed mid-task instead of "
               "retiring; make the lifetime shorter (wall time minus stagger minus a few "
               "minutes)")
        raise ClusterError(msg)


def resolve_settings(system: str, **overrides: Any) -> SubmitSettings:
    """Resolve the submit settings for ``system`` from the current Dask configuration
    (use inside :func:`profile_config` to include a profile) and ``overrides``.

    ``overrides`` take priority; ``None`` values are ignored. Accepted: the
    ``toyengine.cluster`` keys with underscores (``jobs``, ``adapt``, ``task_seconds``,
    ``max_chunks``, ``wait_timeout``, ``scheduler_host``, ``dashboard_address``,
    ``tls``, ``tls_config``), the job options of :data:`JOB_OPTIONS` and ``lifetime``,
    ``lifetime_stagger``, ``lifetime_restart``.
    """
    if system not in SYSTEMS:
        msg = f"unknown batch system {system!r}; choose one of {sorted(SYSTEMS)}"
        raise ClusterError(msg)
    import dask_jobqueue  # noqa: F401 - jobqueue.* defaults

    cfg = dask.config.get("toyengine.cluster")
    _check_toyengine_keys(cfg, "dask config toyengine.cluster")
    cfg = {_canon(k): v for k, v in cfg.items()}
    given = {k: v for k, v in overrides.items() if v is not None}
    allowed = ({k.replace("-", "_") for k in SETTING_KEYS} | set(JOB_OPTIONS[system])
               | set(LIFETIME_OPTIONS))
    unknown = sorted(set(given) - allowed)
    if unknown:
        msg = f"unknown option(s) {unknown} for {system}; valid: {sorted(allowed)}"
        raise ClusterError(msg)

    def pick(key: str) -> Any:
        return given.get(key.replace("-", "_"), cfg.get(key))

    jq = {_canon(k): v for k, v in dask.config.get(f"jobqueue.{system}").items()}
    cores = given.get("cores", jq.get("cores"))
    memory = given.get("memory", jq.get("memory"))
    if cores is None or memory is None:
        msg = (f"cores and memory per {system} job are not set: give --cores/--memory, or "
               f"use a profile (--profile cluster/profiles/{system}.yaml) or set "
               f"jobqueue.{system}.cores/memory in ~/.config/dask/jobqueue.yaml")
        raise ClusterError(msg)
    # one thread per worker process unless told otherwise: fits hold the GIL
    processes = given.get("processes", jq.get("processes")) or cores
    if int(cores) % int(processes):
        msg = f"cores={cores} is not a multiple of processes={processes}"
        raise ClusterError(msg)
    extra = with_preload(with_lifetime(jq.get("worker-extra-args") or [], given.get("lifetime"),
                                       given.get("lifetime_stagger"),
                                       given.get("lifetime_restart")))
    kwargs: dict[str, Any] = {"cores": int(cores), "memory": memory,
                              "processes": int(processes), "worker_extra_args": extra}
    for key in JOB_OPTIONS[system]:
        if key not in kwargs and key in given:
            kwargs[key] = given[key]
    _check_lifetime(system, extra, kwargs.get("walltime", jq.get("walltime")))

    jobs = int(pick("jobs"))
    if jobs < 1:
        msg = f"jobs must be >= 1, got {jobs}"
        raise ClusterError(msg)
    wait = pick("wait-timeout")
    if given.get("tls") is False and given.get("tls_config") is not None:
        msg = "--no-tls and --tls-config contradict each other; give one of them"
        raise ClusterError(msg)
    use_tls = bool(pick("tls"))
    tls = pick("tls-config") if use_tls else None
    profile = pick("profile")
    return SubmitSettings(
        system=system, jobs=jobs, adapt=bool(pick("adapt")),
        task_seconds=float(pick("task-seconds")), max_chunks=int(pick("max-chunks")),
        wait_timeout=None if wait is None else float(wait),
        scheduler_host=pick("scheduler-host"), dashboard_address=pick("dashboard-address"),
        tls=use_tls, tls_config=None if tls is None else str(tls),
        profile=None if profile is None else str(profile), job_kwargs=kwargs)


def _settings_as_dict(s: SubmitSettings) -> dict[str, Any]:
    """Plain (YAML-printable) form of the settings, for ``toyengine cluster config``."""
    out = {k: getattr(s, k) for k in ("system", "jobs", "adapt", "task_seconds", "max_chunks",
                                       "wait_timeout", "scheduler_host", "dashboard_address",
                                       "tls", "tls_config", "profile")}
    out["job_kwargs"] = dict(s.job_kwargs)
    out["workers"] = s.workers
    return out

