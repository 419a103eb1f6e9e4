"""The result store (zarr v3 in xarray's encoding; layout in ``docs/store-format.md``)."""

from __future__ import annotations

from .results import (
    FORMAT_VERSION,
    StoreInfo,
    create_store,
    extend_store,
    mark_done,
    open_results,
    plan_chunks,
    write_chunk,
)

__all__ = ["FORMAT_VERSION", "StoreInfo", "create_store", "extend_store", "mark_done",
           "open_results", "plan_chunks", "write_chunk"]
