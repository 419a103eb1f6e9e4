"""Writing one chunk's results into the store under the run's lease: its arrays, then its
done marker (:func:`write_chunk`), and what a writer that finds the lease lost puts back
(see "Writing protocol" in ``docs/store-format.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import zarr

from ..errors import LeaseLost, StoreError
from ..study.plan import Chunk
from ..study.recipe import ChunkResult
from .lease import Fence
from .location import Location
from .results import (
    _marker_digest,
    _parse_marker,
    chunk_key,
    chunk_where,
    marker_key,
    object_digest,
    toy_var_names,
)

__all__ = ["write_chunk"]

_GROUPS: dict[tuple[str, int, int], Any] = {}


def _step(name: str) -> None:
    """A point between a lease check and the write it guards, where a paused writer can
    lose the lease (tests patch this to hold a writer there)."""


def _writable_arrays(loc: Location, toys: int, chunk_size: int) -> dict[str, Any]:
    """The toy arrays opened for writing (cached per process and store shape), with
    ``write_empty_chunks`` so that an all-fill chunk (e.g. MINOS not run) still exists.

    The setting is the arrays' own (``with_config``), never zarr's global configuration:
    setting that from several threads at once (a worker's threads opening a store each)
    could leave it set for the whole process, and then the all-fill arrays of every store
    created or extended after (``variant``, the chunk table) got chunk objects that a
    store made otherwise lacks."""
    key = (loc.url, toys, chunk_size)
    if key not in _GROUPS:
        g = zarr.open_group(store=loc.zarr_store(), mode="r+")
        arrays = {name: g[name].with_config({"write_empty_chunks": True})
                  for name in toy_var_names(g)}
        shape, chunks = arrays["status"].shape, arrays["status"].chunks
        if shape[1] != toys or chunks[1] != chunk_size:
            msg = (f"{loc}: store holds {shape[1]} toys in chunks of {chunks[1]}, expected "
                   f"{toys} in chunks of {chunk_size}")
            raise StoreError(msg)
        if len(_GROUPS) > 8:
            _GROUPS.clear()
        _GROUPS[key] = arrays
    return _GROUPS[key]


def write_chunk(store: str | Path | Location, result: ChunkResult, toys: int,
                chunk_size: int, fence: Fence | None = None) -> None:
    """Write one chunk's arrays into its region, then its done marker: the size of each
    object written (which ``status`` and ``run`` check) and its checksum bound to its key
    and toy range (which readers and ``verify`` check), the store's toy count the chunk was
    planned for, the lease epoch of the run, and the marker's own checksum.

    With ``fence`` (the lease of the run, :class:`~toyengine.store.lease.Fence`), nothing
    is written unless the run still holds the store's lease, checked before the arrays,
    before the marker and after it; a run that lost it gets
    :class:`~toyengine.errors.LeaseLost`. A check and the write after it are two steps (no
    file system or object store compares a token on a write), so a writer that paused
    between them for longer than the lease lasts can still write once, over what the run
    that took the store over wrote. It reads what each object held just before it writes
    it, and on finding the lease lost puts that back where the chunk's done marker vouches
    for it (:func:`_put_back`): the other run's chunk stands; where it cannot (the other
    run wrote between that read and the write), the chunk is marked not done, never left
    done with objects its marker does not vouch for.
    """
    loc = Location.of(store)
    c = result.chunk
    if fence is not None:
        fence.check()
    _step(f"write:arrays:{c.index}")
    arrays = _writable_arrays(loc, toys, chunk_size)
    keys = {name: chunk_key(name, c, chunk_size) for name in arrays}
    before: dict[str, bytes | None] = {}
    for name, arr in arrays.items():
        if fence is not None:  # what this write replaces, read just before it
            before[keys[name]] = loc.read_bytes(keys[name])
        arr[c.variant, c.start:c.stop] = result.arrays[name]
    got = loc.cat(list(keys.values()))  # what landed in the store, read back once
    missing = [k for k, v in got.items() if v is None]
    if missing:
        msg = f"store {loc}: chunk object {missing[0]} was not written"
        raise StoreError(msg)
    where = chunk_where(c)
    rec: dict[str, Any] = {
        "chunk": c.index, "variant": c.variant, "start": c.start, "stop": c.stop,
        "sizes": {name: len(got[k]) for name, k in keys.items()},  # type: ignore[arg-type]
        "digests": {name: object_digest(k, got[k], where)  # type: ignore[arg-type]
                    for name, k in keys.items()},
        "failed": result.n_failed, "toys": int(toys),
        "epoch": None if fence is None else fence.epoch}
    causes = getattr(result, "causes", None)
    if causes:  # the failures by kind, the first of each with its exception
        rec["causes"] = causes
    rec["digest"] = _marker_digest(c.index, rec)
    mkey = marker_key(c.index)
    if fence is None:
        loc.write_json(mkey, rec)
        return
    try:
        fence.check()
    except LeaseLost:
        _put_back(loc, c, keys, before)
        raise
    _step(f"write:marker:{c.index}")
    previous = loc.read_bytes(mkey)
    loc.write_json(mkey, rec)
    try:
        fence.check()
    except LeaseLost:
        _put_back(loc, c, keys, before, rec, previous)
        raise


def _put_back(loc: Location, chunk: Chunk, keys: dict[str, str],
              before: dict[str, bytes | None], ours: dict[str, Any] | None = None,
              previous: bytes | None = None) -> None:
    """Undo what a writer that lost the lease may have written over the chunk of the run
    that took the store over. ``keys``: the chunk's objects by array; ``before``: what each
    held just before this writer wrote it; ``ours``, ``previous``: the done marker this
    writer wrote, and the raw marker it replaced (None: there was none).

    Our marker is replaced by the previous one, or removed. Then, if the chunk has a valid
    done marker, every object that fails the checksum that marker holds is given back the
    bytes it held before this writer's write, where those pass it; if any object still
    fails, the marker is removed (the chunk is not done: the next run recomputes it)."""
    mkey = marker_key(chunk.index)
    raw = loc.read_bytes(mkey)
    if ours is not None and _parse_marker(raw) == ours:
        if previous is None:
            loc.delete(mkey)
            return
        loc.write_bytes(mkey, previous)
        raw = previous
    marker = _parse_marker(raw)
    if (marker is None or marker.get("digest") != _marker_digest(chunk.index, marker)
            or not isinstance(marker.get("digests"), dict)):
        return  # not done (or already seen as damaged): whoever runs the chunk writes it
    where = chunk_where(Chunk(chunk.index, marker.get("variant"), marker.get("start"),
                              marker.get("stop")))
    now = loc.cat(list(keys.values()))
    for name, key in keys.items():
        want = marker["digests"].get(name)
        if now[key] is not None and object_digest(key, now[key], where) == want:
            continue
        old = before.get(key)
        if old is not None and object_digest(key, old, where) == want:
            loc.write_bytes(key, old)
        else:
            loc.delete(mkey)
            return
