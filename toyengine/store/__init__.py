"""The result store (zarr v3 in xarray's encoding; layout in ``docs/store-format.md``):
:mod:`.results` (create/extend, done markers), :mod:`.writing` (chunk writes under the
lease), :mod:`.integrity` (which chunks are done and sound, verify), :mod:`.opening`
(open_results), :mod:`.repair` (verify --repair), :mod:`.location` (paths and fsspec URLs),
:mod:`.lease` (one run per store at a time)."""

from __future__ import annotations

from .integrity import check_chunks, unmark, verify_store
from .opening import open_results
from .results import (
    FORMAT_VERSION,
    ChunkProblem,
    StoreInfo,
    create_store,
    extend_store,
)
from .status import read_status, write_status
from .writing import write_chunk

__all__ = ["FORMAT_VERSION", "ChunkProblem", "StoreInfo", "check_chunks", "create_store",
           "extend_store", "open_results", "read_status", "unmark",
           "verify_store", "write_chunk", "write_status"]
