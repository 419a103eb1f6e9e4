"""Start-up of toyengine's workers and of the nannies that start them.

One module for both of distributed's preload hooks (``--preload`` and ``--preload-nanny`` of
``dask worker``; ``preload`` and ``preload_nanny`` of the embedded local cluster,
:func:`toyengine.run.client._make_client`; the job scripts of ``toyengine submit`` and
``cluster/start-cluster.sh`` pass both):

- **On a worker**, before it connects, load what every run's first chunk needs: the store
  writer (zarr) and the compiled kernels of the toys' random streams, the 1-D likelihood and
  the Newton fitter (numba's cache, loaded, not compiled, after the first run). A worker
  that joins is ready: the first chunk waits only for its model (built by the run's warm-up,
  :func:`toyengine.run.warm.warm_up`) and its toys. Loading in a background thread instead,
  after the worker joined, took the same time from launch to the first result but left
  ≈ 1 s of it after the cluster was up, competing with the client's store creation.
  Nothing here depends on the study.
- **On a nanny**, before it spawns its worker, drop distributed's default
  ``MALLOC_TRIM_THRESHOLD_=65536`` (``distributed.nanny.pre-spawn-environ``) from the
  worker's environment. Any explicit glibc malloc setting turns off glibc's adaptive
  thresholds (``mallopt(3)``), so every array of more than 128 kB is then mapped from the
  OS and faulted in again on each allocation: a Z_c(4100)⁻ significance pair paid
  1.2 million page faults and 2.6 s of system time on top of 4.0 s (7.5 s in all), a T_cc⁺
  pulls toy a few per cent. A value you set yourself (in the environment or in your Dask
  config) is kept.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["PRELOAD", "dask_setup"]

#: what to pass as ``preload`` and ``preload_nanny`` (``dask worker --preload X
#: --preload-nanny X``)
PRELOAD = __name__

#: the variable distributed's nanny sets in its workers by default, and that default
_TRIM, _DISTRIBUTED_DEFAULT = "MALLOC_TRIM_THRESHOLD_", 65536


def dask_setup(server: Any = None) -> None:
    """distributed's preload hook: on a nanny, keep glibc's adaptive malloc thresholds in
    the worker it spawns; on a worker, load the store writer and the kernels."""
    from distributed import Nanny

    if isinstance(server, Nanny):
        _keep_adaptive_malloc(server)
    else:
        _load()


def _keep_adaptive_malloc(nanny: Any) -> None:
    """Remove distributed's default ``MALLOC_TRIM_THRESHOLD_`` from what ``nanny`` puts in
    its worker's environment, unless the user chose a value (environment or Dask config)."""
    import dask

    configured = dask.config.get(f"distributed.nanny.pre-spawn-environ.{_TRIM}", None)
    if _TRIM in os.environ or str(configured) != str(_DISTRIBUTED_DEFAULT):
        return
    for env in (getattr(nanny, "pre_spawn_env", None), getattr(nanny, "env", None)):
        if isinstance(env, dict):
            env.pop(_TRIM, None)


def _load() -> None:
    try:
        from ..core import model1d_kernels, newton_kernels, streams_kernels
        from ..store import results  # noqa: F401 - what a chunk task writes with

        model1d_kernels.load()
        newton_kernels.load()
        streams_kernels.load()
    except Exception as exc:  # noqa: BLE001 - only a head start: the chunk tasks import the
        # same modules and report what fails with its toy; the worker's log says why here,
        # and the worker still starts
        logging.getLogger(__name__).warning("toyengine preload on this worker failed: %s: %s",
                                            type(exc).__name__, exc)
