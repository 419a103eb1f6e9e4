"""The zarr layout of a result store: arrays written as xarray's ``Dataset.to_zarr`` writes
a Dataset in zarr format 3, with zarr alone."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

__all__ = ["DatasetLayout"]


class DatasetLayout:
    """Arrays written as :meth:`xarray.Dataset.to_zarr` lays out a Dataset in zarr format 3
    (so that :func:`xarray.open_zarr` reads the store as one), without importing xarray or
    dask in the process that creates a store (a second of CPU before a run's first toy):
    each array names its ``dimension_names``; a data variable lists, in its ``coordinates``
    attribute, the non-dimension coordinates whose dimensions it has (sorted); a floating
    variable's fill value NaN is also its ``_FillValue`` attribute (CF convention, base64
    of its bytes); integers keep their fill value in the metadata only; strings are
    variable-length UTF-8. ``tests/test_store_metadata.py`` holds the layout to the
    stores xarray wrote."""

    def __init__(self, group: zarr.Group,
                 coords: Mapping[str, tuple[tuple[str, ...], np.ndarray]]):
        self.group = group
        self.extra = {name: set(dims) for name, (dims, _) in coords.items()
                      if dims != (name,)}

    def coordinate(self, name: str, dims: tuple[str, ...], values: np.ndarray,
                   chunks: tuple[int, ...] | None) -> None:
        """Write coordinate ``name`` (dimensions ``dims``) with its ``values``; ``chunks``
        None: zarr's automatic chunks (one chunk for the small ones)."""
        self._create(name, dims, values.shape, values.dtype, chunks, None, values, {},
                     "auto")

    def variable(self, name: str, dims: tuple[str, ...], shape: tuple[int, ...],
                 dtype: np.dtype, chunks: tuple[int, ...] | None, *, fill: Any = None,
                 values: np.ndarray | None = None, compressors: Any = "auto") -> None:
        """Create data variable ``name``: written from ``values`` if given, else left
        unwritten (every chunk reads as the fill value: ``fill`` for integers and booleans,
        NaN for floats)."""
        attrs: dict[str, Any] = {}
        on = sorted(c for c, cd in self.extra.items() if cd <= set(dims))
        if on:
            attrs["coordinates"] = " ".join(on)
        self._create(name, dims, shape, dtype, chunks, fill, values, attrs, compressors)

    def _create(self, name: str, dims: tuple[str, ...], shape: tuple[int, ...],
                dtype: np.dtype, chunks: tuple[int, ...] | None, fill: Any,
                values: np.ndarray | None, attrs: dict[str, Any], compressors: Any) -> None:
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            fill = math.nan
            attrs["_FillValue"] = base64.standard_b64encode(
                np.array(fill, dtype=dtype.newbyteorder("<")).tobytes()).decode()
        elif dtype.kind == "U":
            dtype, fill = np.dtype(str), ""
        elif fill is None:
            fill = dtype.type(0)
        arr = self.group.create_array(
            name, shape=shape, dtype=str if dtype.kind == "U" else dtype,
            chunks="auto" if chunks is None else chunks, fill_value=fill,
            compressors=compressors, attributes=attrs, dimension_names=dims)
        if values is not None and values.size:
            arr[...] = values
