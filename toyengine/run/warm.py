"""Worker warm-up: what a worker does while the client prepares a run.

Kept apart from :mod:`toyengine.run.runner` (which imports this module, never the other
way round) on purpose: ``client.run`` unpickles its function on the worker before
returning, and this module imports nothing heavy, so the call returns at once; the imports
and model building then happen in a worker thread.
"""

from __future__ import annotations

__all__ = ["warm_up"]


async def warm_up(spec_pickle: bytes) -> None:
    """Run on every worker with ``client.run(warm_up, pickle.dumps(spec), wait=False)``
    (not waited for, so a coroutine) while the client times its estimate and creates the
    store: import the store writer, build the study's models (kept per process), load the
    random streams' compiled kernels and, for 1-D models, their likelihood's, in a thread
    off the worker's event loop, so that the first chunk does not pay for them."""
    import asyncio

    await asyncio.get_running_loop().run_in_executor(None, _prepare, spec_pickle)


def _prepare(spec_pickle: bytes) -> None:
    import pickle
    import sys

    from ..store import results  # noqa: F401 - what a chunk task writes with
    from ..study.plan import Plan

    try:
        Plan.of(pickle.loads(spec_pickle))  # noqa: S301 - our own client's pickle
    except Exception:  # noqa: BLE001, S110 - only a head start: the chunk task itself
        pass  # meets the same problem and reports it, with the toy it belongs to
    from ..core import streams_kernels  # every toy's random streams (numba, from the cache)

    streams_kernels.load()
    if "toyengine.core.model1d" in sys.modules:  # a 1-D model was built: its likelihood's
        from ..core import model1d_kernels, newton_kernels  # compiled (numba), from the cache

        model1d_kernels.load()
        newton_kernels.load()
