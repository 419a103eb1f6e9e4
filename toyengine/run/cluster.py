"""Running toyengine on real clusters: settings, TLS security and batch-farm launchers.

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

The code is in :mod:`.cluster_settings` (settings and profiles), :mod:`.cluster_tls` (TLS)
and :mod:`.farm` (dask-jobqueue submission); this module gathers their public names.
"""

from __future__ import annotations

from ..errors import ClusterError
from .cluster_settings import (
    DEFAULTS_FILE,
    SYSTEMS,
    SubmitSettings,
    profile_config,
    resolve_settings,
    with_lifetime,
)
from .cluster_settings import JOB_OPTIONS as JOB_OPTIONS
from .cluster_settings import LIFETIME_OPTIONS as LIFETIME_OPTIONS
from .cluster_settings import SETTING_KEYS as SETTING_KEYS
from .cluster_settings import TLS_ROLES as TLS_ROLES
from .cluster_tls import (
    load_security,
    make_certificates,
    submit_security,
    temporary_certificates,
    write_security_config,
)
from .farm import batch_cluster, farm_chunk_size, job_script, submit_study

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

