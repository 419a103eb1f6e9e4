"""Worker start-up of the clusters toyengine starts itself: load what every run's first
chunk needs before the worker joins.

Passed as ``preload`` to the workers of the embedded local cluster
(:func:`toyengine.run.client._make_client`). Distributed imports this module in each new
worker process and calls :func:`dask_setup` before the worker connects, so a worker that
joins is ready: the first chunk waits only for its model (built by the run's warm-up,
:func:`toyengine.run.warm.warm_up`) and its toys. Loading in a background thread instead,
after the worker joined, took the same time from launch to the first result but left
≈ 1 s of it after the cluster was up, competing with the client's store creation. Nothing
here depends on the study: the store writer (zarr) and the compiled kernels of the 1-D
likelihood and of the Newton fitter (numba's cache, loaded, not compiled, after the first run).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["dask_setup"]


def dask_setup(worker: Any = None) -> None:
    """Load the store writer and the kernels (distributed's preload hook; ``worker``
    unused)."""
    _load()


def _load() -> None:
    try:
        from ..core import model1d_kernels, newton_kernels
        from ..store import results  # noqa: F401 - what a chunk task writes with

        model1d_kernels.load()
        newton_kernels.load()
    except Exception as exc:  # noqa: BLE001 - only a head start: the chunk tasks import the
        # same modules and report what fails with its toy; the worker's log says why here,
        # and the worker still starts
        logging.getLogger(__name__).warning("toyengine preload on this worker failed: %s: %s",
                                            type(exc).__name__, exc)
