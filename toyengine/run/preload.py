"""Worker start-up of the clusters toyengine starts itself: load, in the background, what
every run's first chunk needs.

Passed as ``preload`` to the workers of the embedded local cluster
(:func:`toyengine.run.client._make_client`). Distributed imports this module in each new
worker process and calls :func:`dask_setup` before the worker connects; the imports run in a
daemon thread, so the worker connects at once and the imports overlap the client's own
preparation (the estimate, the store's creation). The run's warm-up
(:func:`toyengine.run.warm.warm_up`) then finds them done, or waits on Python's import lock
for the rest. Nothing here depends on the study: the store writer (zarr) and the compiled
kernels of the 1-D likelihood (numba's cache, loaded, not compiled, after the first run).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["dask_setup"]


def dask_setup(worker: Any = None) -> None:
    """Start the background imports (distributed's preload hook; ``worker`` unused)."""
    threading.Thread(target=_load, daemon=True, name="toyengine-preload").start()


def _load() -> None:
    try:
        from ..core.model1d_kernels import load
        from ..store import results  # noqa: F401 - what a chunk task writes with

        load()
    except Exception as exc:  # noqa: BLE001 - only a head start: the chunk tasks import the
        # same modules and report what fails with its toy; the worker's log says why here
        logging.getLogger(__name__).warning("toyengine preload on this worker failed: %s: %s",
                                            type(exc).__name__, exc)
