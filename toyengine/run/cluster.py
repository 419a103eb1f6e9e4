"""Running toyengine on real clusters: TLS security and batch-farm launchers.

Importing this module loads the commented defaults file ``toyengine/run/toyengine.yaml`` into
``dask.config`` under ``toyengine.cluster`` (``import toyengine`` alone does not). Settings
are resolved once into a frozen :class:`SubmitSettings`, lowest to highest priority: that
file, the user's Dask configuration (files, ``DASK_TOYENGINE__...`` variables), a site
profile (``--profile``, see ``cluster/profiles/``), explicit keyword arguments / command-line
options.

Batch farms go through dask-jobqueue: the scheduler runs inside the submitting process
(``toyengine submit``), the workers are batch jobs running ``dask worker``, and the client
in the same process tracks the run; the workers write their chunks into the store when they
can reach it (shared file system, object store), else the client does. Worker loss is
normal on a farm (``--lifetime``, wall time, pre-emption): tasks are pure and seeded per
toy, so the scheduler re-runs lost chunks with identical numbers, and ``adapt`` replaces
jobs that end. See ``cluster/README.md`` for every way to run.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import ipaddress
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import dask
import yaml

from ..errors import ClusterError
from ..store.location import Location
from ..store.results import STATE_KEY
from .preflight import check_store_path, check_study_size

__all__ = [
    "DEFAULTS_FILE",
    "SYSTEMS",
    "ClusterError",
    "SubmitSettings",
    "batch_cluster",
    "farm_chunk_size",
    "job_script",
    "load_security",
    "make_certificates",
    "profile_config",
    "resolve_settings",
    "submit_security",
    "submit_study",
    "temporary_certificates",
    "with_lifetime",
    "write_security_config",
]

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
    extra = with_lifetime(jq.get("worker-extra-args") or [], given.get("lifetime"),
                          given.get("lifetime_stagger"), given.get("lifetime_restart"))
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


# --------------------------------------------------------------------------------------
# TLS
# --------------------------------------------------------------------------------------


def load_security(path: str | Path) -> Any:
    """A ``distributed.Security`` from a Dask security YAML file.

    The file has the layout of Dask's own configuration (``distributed.comm.tls.ca-file``
    and ``cert``/``key`` for the ``scheduler``, ``worker`` and ``client`` roles;
    ``distributed.comm.require-encryption``), as written by ``cluster/tls/make-certs.sh``.
    Relative paths are taken relative to the file. Roles that are absent are left
    unset, so a client-only file works for ``toyengine run --tls-config``.
    """
    from distributed import Security

    p = Path(path).expanduser()
    if not p.is_file():
        msg = (f"TLS config {p} not found; make certificates and the file with "
               "'toyengine cluster make-certs DIR' or cluster/tls/make-certs.sh DIR (both "
               "write DIR/dask-security.yaml)")
        raise ClusterError(msg)
    cfg = yaml.safe_load(p.read_text()) or {}
    comm = (cfg.get("distributed") or {}).get("comm") or {}
    tls = comm.get("tls") or {}

    def resolve(value: Any, key: str) -> str:
        f = Path(str(value)).expanduser()
        f = f if f.is_absolute() else (p.parent / f)
        if not f.is_file():
            msg = f"{p}: distributed.comm.tls.{key} = {value!r}: file {f} not found"
            raise ClusterError(msg)
        return str(f.resolve())

    if not tls.get("ca-file"):
        msg = f"{p}: distributed.comm.tls.ca-file is not set"
        raise ClusterError(msg)
    kwargs = {"tls_ca_file": resolve(tls["ca-file"], "ca-file")}
    for role in TLS_ROLES:
        entry = tls.get(role) or {}
        for part in ("cert", "key"):
            if entry.get(part):
                kwargs[f"tls_{role}_{part}"] = resolve(entry[part], f"{role}.{part}")
    return Security(require_encryption=bool(comm.get("require-encryption", True)), **kwargs)


def write_security_config(directory: str | Path) -> Path:
    """Write ``directory/dask-security.yaml`` pointing (absolute paths) at the ``ca.pem``
    and ``<role>.pem`` / ``<role>-key.pem`` files of ``directory``; returns its path."""
    d = Path(directory).resolve()
    lines = [
        "# Dask security configuration (TLS with mutual authentication), written by",
        "# toyengine. Use it with:  toyengine run|submit ... --tls-config THIS_FILE,",
        "# cluster/start-cluster.sh --tls-config THIS_FILE, or  DASK_CONFIG=THIS_FILE.",
        "# Only holders of a certificate signed by ca.pem can join or use the cluster.",
        "distributed:",
        "  comm:",
        "    require-encryption: true",
        "    default-scheme: tls",
        "    tls:",
        f"      ca-file: {d / 'ca.pem'}",
    ]
    for role in TLS_ROLES:
        lines += [f"      {role}:", f"        cert: {d / (role + '.pem')}",
                  f"        key: {d / (role + '-key.pem')}"]
    out = d / "dask-security.yaml"
    out.write_text("\n".join(lines) + "\n")
    return out


def make_certificates(directory: str | Path, *, hosts: Sequence[str] = ("localhost",
                      "127.0.0.1"), days: int = 365) -> Path:
    """Create a private CA and a certificate + key for each Dask role, with the
    ``cryptography`` package (the Python fallback of ``cluster/tls/make-certs.sh``).

    Writes ``ca.pem``, ``ca-key.pem``, ``{scheduler,worker,client}.pem`` and
    ``*-key.pem`` (mode 600) and ``dask-security.yaml`` into ``directory``; returns the
    YAML's path. Every certificate is valid for both TLS server and client use (workers
    and the scheduler are both) and names ``hosts`` as subject alternative names (Dask
    does not check host names, but other TLS tools do). Keep ``ca-key.pem`` private:
    whoever has it can mint certificates that the cluster accepts.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:
        msg = ("making certificates needs openssl (cluster/tls/make-certs.sh) or the "
               "Python package 'cryptography' (pip install cryptography)")
        raise ClusterError(msg) from exc

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def write_key(key: Any, name: str) -> None:
        f = d / name
        f.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
        f.chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                            f"toyengine Dask CA {uuid.uuid4().hex[:8]}")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write_key(ca_key, "ca-key.pem")
    (d / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    alt: list[x509.GeneralName] = []
    for h in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            alt.append(x509.DNSName(h))
    for role in TLS_ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"toyengine-{role}")])
        builder = (
            x509.CertificateBuilder().subject_name(name).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
        )
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        write_key(key, f"{role}-key.pem")
        (d / f"{role}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return write_security_config(d)


@contextlib.contextmanager
def temporary_certificates(parent: str | Path) -> Iterator[Any]:
    """TLS credentials for one submission: a ``distributed.Security`` for certificates
    made by :func:`make_certificates` in a fresh private directory under ``parent``,
    deleted on exit.

    This is what ``toyengine submit`` uses when no certificates are configured, so that
    a batch farm runs with TLS and mutual authentication without any set-up. Why not
    refuse instead and ask for ``toyengine cluster make-certs``: on a shared farm the
    safe choice must also be the easy one, and a CA that lives only as long as the
    submission cannot leak later. Why not distributed's ``Security.temporary()`` (one
    self-signed certificate for every role, whose key is also the CA key, written by
    dask-jobqueue into the shared directory and removed only when the cluster object is
    garbage-collected): here the CA key is deleted as soon as the certificates are
    signed, so nobody — not even a stolen worker key — can mint another certificate
    the scheduler accepts, and the directory (mode 700, keys 600) is removed when the
    submission ends, normally or not.

    Parameters
    ----------
    parent : path
        Where the directory is made; on a file system that the batch nodes see (the
        workers read their certificate and key from there):
        ``jobqueue.<system>.shared-temp-directory``, by default the current directory, as
        for dask-jobqueue's own temporary credentials.

    Yields
    ------
    distributed.Security
        Certificates and keys of the scheduler, worker and client roles, and the CA.

    Raises
    ------
    ClusterError
        ``parent`` is not writable, or the ``cryptography`` package is missing (one line
        naming the alternatives: ``--tls-config FILE`` or ``--no-tls``).
    """
    base = Path(parent).expanduser()
    try:
        d = Path(tempfile.mkdtemp(prefix=".toyengine-tls-", dir=base))
    except OSError as exc:
        msg = (f"cannot make the temporary TLS certificates in {base} "
               f"({exc.strerror or exc}); set jobqueue.<system>.shared-temp-directory to "
               "a private directory the batch nodes see")
        raise ClusterError(msg) from None
    try:
        try:
            config = make_certificates(d)
        except ClusterError as exc:
            msg = ("toyengine submit uses TLS and makes temporary certificates, which needs "
                   "the Python package 'cryptography' (pip install 'toyengine[cluster]'); or "
                   "give --tls-config FILE made by cluster/tls/make-certs.sh (openssl), or "
                   "--no-tls on a network only you use")
            raise ClusterError(msg) from exc
        (d / "ca-key.pem").unlink()  # signed: no further certificate can be made
        yield load_security(config)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def submit_security(settings: SubmitSettings, security: Any = None) -> Iterator[Any]:
    """The ``distributed.Security`` of a submission (``None``: plain TCP), valid inside the
    context.

    Parameters
    ----------
    settings : SubmitSettings
        ``tls`` false means no TLS; else ``tls_config`` is loaded, and without one (or
        with ``"temporary"``) :func:`temporary_certificates` are made in
        ``jobqueue.<system>.shared-temp-directory`` (default: the current directory).
    security : distributed.Security or path or "temporary", optional
        Takes priority over ``settings``.

    Yields
    ------
    distributed.Security or None
    """
    if security is None:
        if not settings.tls:
            yield None
            return
        security = settings.tls_config or "temporary"
    if str(security) == "temporary":
        shared = dask.config.get(f"jobqueue.{settings.system}.shared-temp-directory", None)
        with temporary_certificates(shared or Path.cwd()) as sec:
            yield sec
        return
    yield load_security(security) if isinstance(security, (str, Path)) else security


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


def _settings_as_dict(s: SubmitSettings) -> dict[str, Any]:
    """Plain (YAML-printable) form of the settings, for ``toyengine cluster config``."""
    out = {k: getattr(s, k) for k in ("system", "jobs", "adapt", "task_seconds", "max_chunks",
                                       "wait_timeout", "scheduler_host", "dashboard_address",
                                       "tls", "tls_config", "profile")}
    out["job_kwargs"] = dict(s.job_kwargs)
    out["workers"] = s.workers
    return out

