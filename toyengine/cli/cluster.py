"""Cluster sub-commands of the CLI: ``toyengine submit`` and ``toyengine cluster``.

``toyengine submit STUDY --store PATH --cluster slurm|htcondor [--dry-run]`` runs a study on
a batch farm through dask-jobqueue (``--dry-run`` prints the job script and submits
nothing), with TLS unless ``--no-tls`` (certificates made for the submission when none
are configured: see :func:`toyengine.run.cluster.temporary_certificates`);
``toyengine cluster make-certs DIR`` makes TLS certificates and a Dask security file;
``toyengine cluster config`` prints the resolved settings. Heavy imports (dask,
dask-jobqueue) happen inside the commands, so ``toyengine run`` does not pay for them.
Every option defaults to ``None`` so that ``dask.config`` (``toyengine.cluster.*``,
``jobqueue.<system>.*``) decides unless the option is given.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

__all__ = ["add_commands"]


def _job_overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("jobs", "adapt", "task_seconds", "wait_timeout", "scheduler_host",
            "dashboard_address", "tls", "tls_config", "cores", "processes", "memory",
            "walltime", "queue", "account", "disk", "lifetime", "lifetime_stagger",
            "lifetime_restart")
    out = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    system = args.cluster
    if system == "htcondor":
        for k in ("walltime", "queue", "account"):
            if k in out:
                print(f"toyengine: --{k} is a SLURM option; for HTCondor set "
                      "jobqueue.htcondor.job-extra-directives in the profile "
                      "(e.g. +JobFlavour or +MaxRuntime)", file=sys.stderr)
                del out[k]
    elif "disk" in out:
        print("toyengine: --disk is an HTCondor option; ignored for SLURM", file=sys.stderr)
        del out["disk"]
    return out


def _hang_up(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _cmd_submit(args: argparse.Namespace) -> int:
    from ..run.cluster import (
        job_script,
        profile_config,
        resolve_settings,
        submit_security,
        submit_study,
    )
    from ..study.spec import load_spec

    spec = load_spec(args.study).with_overrides(toys=args.toys, seed=args.seed)
    overrides = _job_overrides(args)
    if args.dry_run:
        with profile_config(args.profile):
            s = resolve_settings(args.cluster, **overrides)
            with submit_security(s) as security:
                script = job_script(s, security=security)
        if not s.tls:
            tls = "no TLS (--no-tls)"
        elif s.tls_config in (None, "temporary"):
            tls = "TLS with certificates made for the submission (removed when it ends)"
        else:
            tls = f"TLS with {s.tls_config}"
        print(f"# dry run: {s.jobs} job(s) like this one would be submitted to {s.system} "
              f"({s.workers} Dask worker(s)) for study {spec.name!r} -> {args.store}, "
              f"{tls}; nothing was submitted", file=sys.stderr)
        print(script)
        return 0
    # a closed terminal or ssh session (SIGHUP) stops the submission like Ctrl-C/SIGTERM:
    # the batch jobs are cancelled instead of being left waiting for a dead scheduler
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGHUP, _hang_up) if main else None
    try:
        report = submit_study(spec, args.store, system=args.cluster, profile=args.profile,
                              chunk_size=args.chunk_size, yes=args.yes,
                              progress=None if args.quiet else sys.stderr, **overrides)
    finally:
        if main:
            signal.signal(signal.SIGHUP, old)
    from .finish import finish_run

    return finish_run(report, args.store, args.summary)


def _cmd_make_certs(args: argparse.Namespace) -> int:
    from ..run.cluster import make_certificates

    path = make_certificates(args.directory, hosts=args.host or ("localhost", "127.0.0.1"),
                             days=args.days)
    print(path)
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from ..run.cluster import DEFAULTS_FILE, profile_config, resolve_settings
    from ..run.cluster_settings import _settings_as_dict

    with profile_config(args.profile):
        s = resolve_settings(args.cluster)
    print(f"# defaults: {DEFAULTS_FILE}; profile: {args.profile or s.profile}")
    print(yaml.safe_dump(_settings_as_dict(s), sort_keys=False), end="")
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``submit`` and ``cluster`` on the ``toyengine`` parser."""
    s = subparsers.add_parser(
        "submit", help="run a study on a SLURM or HTCondor farm (dask-jobqueue)",
        description="Run (or resume) a study on a batch farm: the scheduler and the client "
        "run here, the workers are batch jobs. Options override the profile and the Dask "
        "config (toyengine.cluster.*, jobqueue.<system>.*). See cluster/README.md.")
    s.add_argument("study", help="study file (YAML)")
    s.add_argument("--store", required=True, help="result store: a path or an fsspec URL")
    s.add_argument("--cluster", required=True, choices=["slurm", "htcondor"],
                   help="batch system")
    s.add_argument("--profile", help="site profile: Dask config YAML (cluster/profiles/*.yaml)")
    s.add_argument("--dry-run", action="store_true",
                   help="print the job script that would be submitted; submit nothing")
    s.add_argument("--toys", type=int, help="toys per variant (overrides the study file)")
    s.add_argument("--seed", type=int, help="root seed (overrides the study file)")
    s.add_argument("--chunk-size", type=int, help="toys per task (default: from --task-seconds)")
    s.add_argument("--task-seconds", type=float, help="target seconds of work per task")
    s.add_argument("--jobs", type=int, help="batch jobs to keep running")
    s.add_argument("--adapt", action=argparse.BooleanOptionalAction, default=None,
                   help="replace jobs that end (default: yes)")
    s.add_argument("--cores", type=int, help="cores per job")
    s.add_argument("--processes", type=int,
                   help="worker processes per job (default: one per core, 1 thread each)")
    s.add_argument("--memory", help="memory per job, e.g. 8GB")
    s.add_argument("--walltime", help="SLURM wall time per job, e.g. 04:00:00")
    s.add_argument("--queue", help="SLURM partition")
    s.add_argument("--account", help="SLURM account")
    s.add_argument("--disk", help="HTCondor disk per job, e.g. 1GB")
    s.add_argument("--lifetime", help="retire each worker after this long, e.g. 225m")
    s.add_argument("--lifetime-stagger", help="spread retirements by +- this, e.g. 10m")
    s.add_argument("--lifetime-restart", action=argparse.BooleanOptionalAction, default=None,
                   help="restart a retired worker inside the same job (only for jobs "
                   "without a wall time)")
    s.add_argument("--tls-config", help="Dask security YAML ('toyengine cluster make-certs "
                   "DIR' writes DIR/dask-security.yaml); default: certificates made for this "
                   "submission only, removed when it ends")
    s.add_argument("--no-tls", dest="tls", action="store_false", default=None,
                   help="plain TCP: anyone who reaches the scheduler port can run code as "
                   "you; only on a network you alone use")
    s.add_argument("--yes", action="store_true",
                   help="run even if the study's size estimate asks for confirmation")
    s.add_argument("--scheduler-host", help="address the scheduler listens on")
    s.add_argument("--dashboard-address", help="scheduler dashboard address, e.g. "
                   "127.0.0.1:8787")
    s.add_argument("--wait-timeout", type=float,
                   help="seconds to wait for the first worker (default: no limit)")
    s.add_argument("--summary", action="store_true", help="print the summary at the end")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    from .options import add_plugin_option

    add_plugin_option(s)
    s.set_defaults(func=_cmd_submit)

    c = subparsers.add_parser("cluster", help="cluster helpers: TLS certificates, settings")
    csub = c.add_subparsers(dest="cluster_command", required=True)
    mk = csub.add_parser("make-certs", help="make a CA, certificates for scheduler/worker/"
                         "client and DIR/dask-security.yaml (Python 'cryptography'; "
                         "cluster/tls/make-certs.sh does the same with openssl)",
                         description="Make a certificate authority, certificates for the "
                         "scheduler, the workers and the client, and DIR/dask-security.yaml "
                         "that points Dask at them; `toyengine submit` and "
                         "cluster/start-cluster.sh --tls use them (docs/security.md).")
    mk.add_argument("directory", help="directory for the certificates (created)")
    mk.add_argument("--host", action="append",
                    help="host name or IP to name in the certificates (repeatable)")
    mk.add_argument("--days", type=int, default=365, help="validity (default 365)")
    mk.set_defaults(func=_cmd_make_certs)
    cfg = csub.add_parser("config", help="print the resolved submit settings",
                          description="Print the settings `toyengine submit` would use for "
                          "the batch system, as YAML: the package's defaults overridden by "
                          "the site profile and Dask's configuration (~/.config/dask/, DASK_* "
                          "variables).")
    cfg.add_argument("--cluster", default="slurm", choices=["slurm", "htcondor"],
                     help="batch system (default: slurm)")
    cfg.add_argument("--profile", help="site profile to include")
    cfg.set_defaults(func=_cmd_config)
