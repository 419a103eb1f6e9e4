"""Opening a result store for reading: :func:`open_results` (an ``xarray.Dataset``, dask
backed, every object checked against its checksum as it is read) and the failure causes
the done markers record."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from ..errors import StoreError
from .integrity import StoreCheck, require_complete
from .location import Location
from .results import (
    PRECISION_KEY,
    READ_BLOCK_TOYS,
    StoreInfo,
    _is_toy_object,
    chunk_key,
    chunk_where,
    object_digest,
)

if TYPE_CHECKING:  # xarray is imported where a store is created or opened: a worker that
    # writes chunks needs zarr only, and starts ~0.3 s sooner without xarray and pandas
    import xarray as xr

__all__ = ["describe_cause", "failure_causes", "open_checked", "open_checked_store", "open_results"]


def failure_causes(markers: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The failures recorded in the done markers (``causes``), by kind, most frequent
    first: ``{"kind", "count", "reason", "type", "message", "toy", "variant", "hypothesis",
    "worker"}``, the details of the first failure of that kind (lowest chunk)."""
    out: dict[str, dict[str, Any]] = {}
    for idx in sorted(markers):
        for kind, rec in (markers[idx].get("causes") or {}).items():
            if kind in out:
                out[kind]["count"] += int(rec.get("count", 1))
            else:
                out[kind] = {"kind": kind, **rec, "count": int(rec.get("count", 1))}
    for rec in out.values():
        rec["text"] = describe_cause(rec)
    return sorted(out.values(), key=lambda r: (-r["count"], r["kind"]))


def describe_cause(rec: dict[str, Any]) -> str:
    """One line for a :func:`failure_causes` record."""
    what = f"{rec['type']}: {rec['message']}" if rec.get("type") else (
        rec.get("reason", "") + (f" ({rec['message']})" if rec.get("message") else ""))
    where = (f"toy {rec.get('toy')}, variant {rec.get('variant')}, "
             f"hypothesis {rec.get('hypothesis')}")
    if rec.get("worker"):
        where += f", worker {rec['worker']}"
    return f"{what} [{rec['count']}×; first: {where}]"


def _checked_store(info: StoreInfo, chk: StoreCheck) -> Any:
    """The store's zarr store for reading, with every object read checked against its
    checksum (the chunks of done chunks against their markers, everything else against
    ``state.json``); a per-toy chunk that is not done (or damaged) reads as not written
    (the fill value: ``status = 0``, "not run")."""
    bad = {p.chunk.index for p in chk.problems}
    usable = {idx for idx in chk.markers if idx not in bad and chk.done[idx]}
    return _checked_store_of(info, chk.markers, usable)


def checked_group(info: StoreInfo, markers: dict[int, dict[str, Any]],
                  done: np.ndarray) -> zarr.Group:
    """The store's zarr group for reading with every object read checked against its
    checksum, as readers do (:func:`open_results`): the per-toy chunks of the chunks
    ``done`` against their ``markers``; a per-toy chunk not done reads as not written (the
    fill value), whatever bytes a damaged or interrupted write left; a damaged object of a
    done chunk raises :class:`~toyengine.errors.StoreError` (one line), never the codec's
    error."""
    usable = {idx for idx in markers if done[idx]}
    return zarr.open_group(_checked_store_of(info, markers, usable), mode="r")


def _checked_store_of(info: StoreInfo, markers: dict[int, dict[str, Any]],
                      usable: set[int]) -> Any:
    expected: dict[str, tuple[str | None, str]] = {}
    if info.objects is not None:
        expected.update({k: (d, "") for k, d in info.objects.items()})
    chunks = info.chunks()
    for idx, rec in markers.items():
        if idx not in usable:
            continue
        c = chunks[idx]
        digests = rec.get("digests") if isinstance(rec.get("digests"), dict) else {}
        for name in info.toy_vars:
            expected[chunk_key(name, c, info.chunk_size)] = (digests.get(name),
                                                             chunk_where(c))
    return _CheckedStore(info.loc.zarr_store(read_only=True), expected, info.loc.url)


def _make_checked_store_class() -> type:
    from zarr.storage import WrapperStore

    class CheckedStore(WrapperStore):  # type: ignore[type-arg]
        def __init__(self, store: Any, expected: dict[str, tuple[str | None, str]],
                     url: str) -> None:
            super().__init__(store)
            self._inner = store
            self._expected = expected
            self._url = url
            #: format 3: the checksums cover every object (others are not the store's)
            self._strict = any(not _is_toy_object(k) for k in expected)
            self._read: set[str] = set()

        def _with_store(self, store: Any) -> Any:
            return type(self)(store, self._expected, self._url)

        def __reduce__(self) -> Any:
            return (_CheckedStore, (self._inner, self._expected, self._url))

        def unread(self) -> list[str]:
            """The objects with a checksum not read (and so not verified) yet."""
            return sorted(k for k, (d, _) in self._expected.items()
                          if d is not None and k not in self._read)

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            want = self._expected.get(key)
            if want is None and (_is_toy_object(key) or (self._strict and "/c/" in key)):
                return None  # not done, or not an object of the store: not written
            buf = await self._inner.get(key, prototype, byte_range)
            if want is None or want[0] is None or byte_range is not None:
                return buf
            if buf is None:
                msg = (f"store {self._url} is damaged: {key} is missing; run `toyengine "
                       f"verify --repair {self._url}`")
                raise StoreError(msg)
            if object_digest(key, buf.to_bytes(), want[1]) != want[0]:
                what = f" ({want[1]})" if want[1] else ""
                msg = (f"store {self._url} is damaged: {key}{what} fails its checksum "
                       f"(damaged, or another chunk's object); run `toyengine verify "
                       f"--repair {self._url}`, then `toyengine run` to recompute it")
                raise StoreError(msg)
            self._read.add(key)
            return buf

    return CheckedStore


def _CheckedStore(store: Any, expected: dict[str, tuple[str | None, str]],  # noqa: N802
                  url: str) -> Any:
    global _CHECKED_STORE_CLASS
    if _CHECKED_STORE_CLASS is None:
        _CHECKED_STORE_CLASS = _make_checked_store_class()
    return _CHECKED_STORE_CLASS(store, expected, url)


_CHECKED_STORE_CLASS: type | None = None


def open_results(store: str | Path | Location,
                 storage_options: dict[str, Any] | None = None, *,
                 allow_incomplete: bool = False) -> xr.Dataset:
    """Open a result store as an ``xarray.Dataset`` (see docs/store-format.md).

    ``store`` is a local path or an fsspec URL; ``chunk_done`` is added from the done
    markers (``True`` where a chunk's results are in the store). The arrays are dask
    arrays whose blocks are whole store chunks; with a ``distributed.Client`` active,
    computing them runs on its workers (which must then reach the store).

    The store is checked first (:func:`check_store`: metadata and small arrays against
    their checksums, done markers, object sizes); every chunk's checksum, bound to its key
    and toy range, is verified as its data are read (no object is read twice).

    Parameters
    ----------
    store : str or Path
        Local path or fsspec URL.
    storage_options : dict, optional
        fsspec options of the URL.
    allow_incomplete : bool
        Read a store with chunks missing, damaged or not yet done (e.g. while its study
        runs): those toys read as not run (``status = 0``) and the attribute
        ``incomplete`` says which toy ranges they are. Default: refuse such a store.

    Raises
    ------
    IncompleteStoreError
        Chunks are missing, damaged or not done (and not ``allow_incomplete``); the message
        names their toy ranges and the commands that complete the store.
    StoreError
        No store, or its metadata are damaged (``toyengine verify --repair``).
    """
    return open_checked(store, storage_options, allow_incomplete=allow_incomplete)[0]


def open_checked(store: str | Path | Location,
                 storage_options: dict[str, Any] | None = None, *,
                 allow_incomplete: bool = False) -> tuple[xr.Dataset, Callable[[], None]]:
    """:func:`open_results`, and a function that verifies every object of the store not
    read so far (raising :class:`StoreError` for a damaged one). The commands call it after
    computing their output and before writing it, so that no output comes from a damaged
    store while every object is read once (objects read on Dask workers are read again)."""
    info = StoreInfo(store, storage_options=storage_options)
    return open_checked_store(info, require_complete(info, allow_incomplete))


def open_checked_store(info: StoreInfo, chk: StoreCheck
                       ) -> tuple[xr.Dataset, Callable[[], None]]:
    """:func:`open_checked` of a store already checked (``chk``: :func:`check_store`)."""
    import xarray as xr

    # dask-backed, out of core: each dask block is a whole number of store chunks along
    # ``toy`` (about READ_BLOCK_TOYS toys), so a reduction streams over the store
    per = max(1, READ_BLOCK_TOYS // info.chunk_size) * info.chunk_size
    checked = _checked_store(info, chk)
    ds = xr.open_zarr(checked, consolidated=False, chunks={"toy": per})
    ds = ds.isel(chunk=slice(0, info.n_chunks))
    rounds = info.loc.read_json(PRECISION_KEY)
    if rounds is not None:  # a precision-targeted run: how many rounds and toys it took
        ds.attrs["precision_rounds"] = json.dumps(rounds, sort_keys=True)
    causes = failure_causes(chk.markers)
    if causes:  # why fits failed: the summary names the most common cause
        ds.attrs["failure_causes"] = json.dumps(causes)
    if not chk.complete:
        ds.attrs["incomplete"] = chk.ranges()

    def verify_unread() -> None:
        keys = checked.unread()
        for i in range(0, len(keys), 256):
            got = info.loc.cat(keys[i:i + 256])
            for key, raw in got.items():
                digest, where = checked._expected[key]
                if raw is None or object_digest(key, raw, where) != digest:
                    what = f" ({where})" if where else ""
                    msg = (f"store {info.loc} is damaged: {key}{what} "
                           f"{'is missing' if raw is None else 'fails its checksum'}; run "
                           f"`toyengine verify --repair {info.loc}`, then `toyengine run` "
                           "to recompute it")
                    raise StoreError(msg)
                checked._read.add(key)

    # the small string coordinates (variant names and groups, hypotheses, parameter labels)
    # in memory: xarray's groupby and where(..., drop=True) need their values, not dask
    # arrays; the toy arrays stay lazy
    small = {name: ds[name].load() for name, c in ds.coords.items()
             if c.dtype.kind in "OUST" and "toy" not in c.dims}
    # the fit status and validity flags, which every summary section selects toys by, in
    # memory once (still dask arrays, one byte a toy and hypothesis): read from the store
    # once, not once per section (on S3 a GET per chunk object each time)
    flags = {name: ds[name].persist() for name in ("status", "valid") if name in ds}
    return (ds.assign_coords(small).assign(flags).assign(chunk_done=("chunk", chk.done)),
            verify_unread)


