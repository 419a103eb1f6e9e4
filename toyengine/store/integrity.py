"""Integrity of a result store: which chunks are done and sound (done markers, sizes,
checksums of every object bound to its place), the metadata checks, ``verify`` and the
summary of a store's completeness (:class:`StoreCheck`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import StoreError
from ..study.plan import Chunk
from .location import Location
from .results import (
    ChunkProblem,
    IncompleteStoreError,
    StoreInfo,
    _digest_problems,
    _is_toy_object,
    _metadata_message,
    _stale_marker,
    chunk_key,
    chunk_where,
    marker_key,
    object_digest,
)

__all__ = ["StoreCheck", "check_chunks", "check_metadata", "check_store", "require_complete",
           "unmark", "verify_store"]


def check_chunks(info: StoreInfo,
                 markers: tuple[dict[int, dict[str, Any]], list[ChunkProblem]] | None = None,
                 ) -> list[ChunkProblem]:
    """Cheap integrity check of the done markers and of every chunk they mark done: each
    marker is readable, passes its checksum and describes its chunk; each of the chunk's
    objects exists and has the size its marker recorded (one listing per array; no chunk
    data are read). ``markers``: :meth:`StoreInfo.read_markers`, if already read."""
    markers, problems = markers if markers is not None else info.read_markers()
    problems = list(problems)
    if not markers:
        return problems
    listed = {name: info.loc.sizes(f"{name}/c") for name in info.toy_vars}
    chunks = info.chunks()
    for idx in sorted(markers):
        c = chunks[idx]
        sizes = markers[idx]["sizes"]
        stale = _stale_marker(markers[idx], c)
        if stale:
            problems.append(ChunkProblem(c, f"done marker {stale}"))
            continue
        bad = []
        for name in info.toy_vars:
            key = chunk_key(name, c, info.chunk_size)
            got = listed[name].get(key)
            if got is None:
                bad.append(f"{key} missing")
            elif got != sizes.get(name):
                bad.append(f"{key} has {got} bytes, written with {sizes.get(name)}")
        if bad:
            problems.append(ChunkProblem(c, "; ".join(bad)))
    return sorted(problems, key=lambda p: p.chunk.index)


def check_metadata(info: StoreInfo) -> list[str]:
    """Full check of everything that is not a per-toy chunk: every ``zarr.json`` and every
    chunk of the coordinates, ``truth``, ``reference``, the chunk table and ``scan_points``
    against its checksum in ``state.json`` (format 3; a format 2 store has none: these
    arrays are decoded instead, which checks their ``crc32c``). Returns one line per
    damaged object."""
    if info.objects is not None:
        extra = [f"{k} is not one of the store's objects" for k in info.loc.sizes("")
                 if k not in info.objects and not k.startswith("_toyengine/")
                 and not _is_toy_object(k) and not k.rsplit("/", 1)[-1].startswith(".")]
        return sorted(extra + _digest_problems(info.loc, sorted(info.objects), info.objects))
    bad = []
    for name, arr in info.group.arrays():
        if name in info.toy_vars:
            continue
        try:
            arr[...]
        except Exception as exc:  # noqa: BLE001 - a damaged object, reported
            bad.append(f"{name} unreadable ({type(exc).__name__})")
    return bad


def verify_store(info: StoreInfo) -> list[ChunkProblem]:
    """Full integrity check of the chunks: :func:`check_chunks`, then read every object of
    every chunk marked done and compare it with the checksum its marker holds, bound to its
    key and toy range (a format 2 marker has none: the object is decoded, which checks its
    ``crc32c``). Each object is read once. :func:`check_metadata` checks the rest."""
    problems = check_chunks(info)
    bad = {p.chunk.index for p in problems}
    chunks = info.chunks()
    arrays = {name: info.group[name] for name in info.toy_vars}
    for idx, rec in sorted(info.markers().items()):
        if idx in bad:
            continue
        c = chunks[idx]
        digests = rec.get("digests")
        if isinstance(digests, dict):
            keys = {name: chunk_key(name, c, info.chunk_size) for name in info.toy_vars}
            got = info.loc.cat(list(keys.values()))
            wrong = [k for name, k in keys.items() if got[k] is None or
                     object_digest(k, got[k], chunk_where(c)) != digests.get(name)]
            if wrong:
                problems.append(ChunkProblem(c, f"{wrong[0]} fails its checksum (damaged, "
                                                "or another chunk's object)"
                                             + (f" and {len(wrong) - 1} more" if
                                                len(wrong) > 1 else "")))
            continue
        for name, arr in arrays.items():
            try:
                arr[c.variant, c.start:c.stop]
            except Exception as exc:  # noqa: BLE001 - a damaged object, reported
                problems.append(ChunkProblem(c, f"{chunk_key(name, c, info.chunk_size)} "
                                                f"unreadable ({type(exc).__name__}: {exc})"))
                break
    return sorted(problems, key=lambda p: p.chunk.index)


def unmark(info: StoreInfo, problems: Sequence[ChunkProblem]) -> None:
    """Mark the chunks of ``problems`` not done (the next ``run`` recomputes them)."""
    for p in problems:
        info.loc.delete(marker_key(p.chunk.index))


@dataclass(frozen=True)
class StoreCheck:
    """What a reader found before reading a store (:func:`check_store`)."""

    loc: Location
    done: np.ndarray
    problems: tuple[ChunkProblem, ...]
    not_done: tuple[Chunk, ...]
    variant_names: tuple[str, ...]
    #: the valid done markers (chunk index → record)
    markers: dict[int, dict[str, Any]]

    @property
    def complete(self) -> bool:
        return not self.problems and not self.not_done

    def ranges(self) -> str:
        """The toy ranges that are not in the store, e.g. ``2 damaged (variant nominal
        toys 10-29), 1 not done (variant nominal toys 30-39)``."""
        parts = []
        if self.problems:
            parts.append(f"{len(self.problems)} chunk(s) damaged ("
                         f"{_toy_ranges([p.chunk for p in self.problems], self.variant_names)}"
                         f": {self.problems[0].what})")
        if self.not_done:
            parts.append(f"{len(self.not_done)} chunk(s) not done ("
                         f"{_toy_ranges(self.not_done, self.variant_names)})")
        return ", ".join(parts)

    def message(self) -> str:
        """The one line a reader refuses an incomplete store with."""
        store = self.loc.url
        todo = (f"run `toyengine verify --repair {store}`, then the `toyengine run` command "
                f"that made it (`toyengine run STUDY --store {store}`)" if self.problems else
                f"run the `toyengine run` command that made it (`toyengine run STUDY "
                f"--store {store}`) to complete it, or watch a running one with `toyengine "
                f"status {store} --watch`")
        return (f"store {store} is incomplete: {self.ranges()}; {todo}; or read it as it "
                "is with --allow-incomplete (allow_incomplete=True)")


def _toy_ranges(chunks: Sequence[Chunk], variant_names: Sequence[str], most: int = 4) -> str:
    """``variant nominal toys 10-29, variant x toys 0-9`` (adjacent chunks merged)."""
    spans: list[list[int]] = []
    for c in sorted(chunks, key=lambda c: (c.variant, c.start)):
        if spans and spans[-1][0] == c.variant and spans[-1][2] == c.start:
            spans[-1][2] = c.stop
        else:
            spans.append([c.variant, c.start, c.stop])
    text = [f"variant {variant_names[v] if v < len(variant_names) else v} toys {a}-{b - 1}"
            for v, a, b in spans[:most]]
    if len(spans) > most:
        text.append(f"and {len(spans) - most} more range(s)")
    return ", ".join(text)


def check_store(info: StoreInfo) -> StoreCheck:
    """The check every reader makes before reading a store: the metadata and small arrays
    against their checksums (:func:`check_metadata`: they are small), then the cheap check
    of the chunks (:func:`check_chunks`: markers and object sizes, no chunk data read; each
    chunk's checksum is verified when its data are read, see :func:`open_results`).

    Raises
    ------
    StoreError
        The metadata or the small arrays are damaged (``toyengine verify --repair``).
    """
    bad = check_metadata(info)
    if bad:
        raise StoreError(_metadata_message(info.loc, bad))
    markers = info.read_markers()  # read once
    problems = tuple(check_chunks(info, markers))
    bad = {p.chunk.index for p in problems}
    done = np.zeros(info.n_chunks, dtype=bool)
    for i in markers[0]:
        done[i] = i not in bad
    not_done = tuple(c for c in info.chunks() if not done[c.index] and c.index not in bad)
    return StoreCheck(info.loc, done, problems, not_done, info.variant_names, markers[0])


def require_complete(info: StoreInfo, allow_incomplete: bool = False) -> StoreCheck:
    """:func:`check_store`; raise :class:`IncompleteStoreError` (one line naming the toy
    ranges and the commands that complete the store) unless complete or
    ``allow_incomplete``."""
    chk = check_store(info)
    if not chk.complete and not allow_incomplete:
        raise IncompleteStoreError(chk.message())
    return chk


