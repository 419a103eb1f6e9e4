"""``toyengine verify --repair``: rebuilding a store's metadata and control objects from
the study record, and finding a chunk whose objects cannot be read."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from ..errors import StoreError
from ..study.plan import Plan
from ..study.spec import StudySpec
from . import writing as _writing
from .integrity import check_metadata, unmark, verify_store
from .location import Location
from .results import (
    CREATING_KEY,
    DONE_PREFIX,
    EXTEND_KEY,
    FORMAT_VERSION,
    STATE_KEY,
    STUDY_KEY,
    ChunkProblem,
    StoreInfo,
    _is_toy_object,
    _parse_marker,
    _static_objects,
    _write_state,
    create_store,
    extend_store,
    object_digest,
)

__all__ = ["find_unreadable_chunk", "repair_store"]


def repair_store(store: str | Path | Location,
                 storage_options: dict[str, Any] | None = None,
                 ) -> tuple[list[str], list[str], list[ChunkProblem]]:
    """Rebuild a store's metadata from what its chunks and markers say and from its
    study record, then check every chunk (``toyengine verify --repair``). The caller holds
    the store's lease.

    The study (root attributes: study text, seed, chunk size) comes from ``zarr.json`` if
    it passes its checksum, else from ``_toyengine/study.json``; the toy counts of the
    creation and of every extension from ``state.json`` or ``study.json`` (else from the
    arrays' shape). A template of the store is then created in memory from the study —
    its metadata, coordinates, ``truth``, ``reference`` and chunk table are determined by
    the study — and every such object of the store that is missing or fails its checksum
    is replaced by the template's. ``state.json`` (with fresh checksums) and
    ``study.json`` are rewritten, a leftover ``creating.json`` is removed, and every done
    chunk is verified: damaged ones are marked not done (the next ``run`` recomputes them,
    bit-identically).

    Returns
    -------
    (actions, metadata, problems)
        What was rebuilt (one line each), the metadata problems left (empty when the
        repair succeeded) and the chunks marked not done.

    Raises
    ------
    StoreError
        Not a toyengine store, or its study record is lost (``zarr.json`` and
        ``study.json`` both unreadable), or an extension is in progress.
    """
    loc = Location.of(store, storage_options)
    if loc.exists(EXTEND_KEY):
        msg = (f"{loc}: an extension of the store is in progress; run `toyengine run` "
               "again to finish it first")
        raise StoreError(msg)
    actions: list[str] = []
    state = loc.read_json(STATE_KEY)
    if not (isinstance(state, dict) and isinstance(state.get("toys"), int)
            and isinstance(state.get("chunks"), int)):
        state = None
    objects = state.get("objects") if state is not None else None
    if not isinstance(objects, dict):
        objects = None
    study = loc.read_json(STUDY_KEY)
    if not (isinstance(study, dict) and isinstance(study.get("attrs"), dict)):
        study = None
    attrs = _root_attrs(loc, objects)
    root_ok = attrs is not None
    if attrs is None and study is not None:
        attrs = study["attrs"]
    if attrs is None:
        if not loc.exists(STATE_KEY) and not loc.exists(STUDY_KEY) \
                and not loc.exists("zarr.json"):
            msg = f"no result store at {loc}"
        else:
            msg = (f"{loc}: cannot repair: the study record is lost (zarr.json and "
                   f"{STUDY_KEY} both unreadable); run the study into a new store")
        raise StoreError(msg)
    history = (state or {}).get("history") or (study or {}).get("history") \
        or [_toys_of(loc)]
    history = [int(t) for t in history]
    spec = _spec_of_attrs(attrs, history[0], str(loc))
    template, n_chunks = _template(spec, attrs, history)
    root = json.loads(template["zarr.json"])
    root["attributes"] = attrs
    template["zarr.json"] = json.dumps(root, indent=2).encode()
    current = loc.cat(sorted(template))
    for key, want in template.items():
        have = current.get(key)
        if key == "zarr.json":
            ok = root_ok
        else:
            ok = have is not None and (have == want or (
                objects is not None and objects.get(key) == object_digest(key, have)))
        if not ok:
            loc.write_bytes(key, want)
            actions.append(f"rebuilt {key}" + (" (was missing)" if have is None else ""))
    arrays = {k.split("/", 1)[0] for k in template}
    for key in loc.sizes(""):
        if key not in template and "/c/" in key and key.split("/", 1)[0] in arrays \
                and not _is_toy_object(key):
            loc.delete(key)
            actions.append(f"removed {key} (not an object of the store)")
    fmt = int(attrs.get("format_version", FORMAT_VERSION))
    if study is None or study.get("attrs") != attrs or study.get("history") != history:
        actions.append(f"rebuilt {STUDY_KEY}")
    if state is None:
        actions.append(f"rebuilt {STATE_KEY}")
    _write_state(loc, history[-1], n_chunks, history, attrs=attrs, fmt=fmt)
    if loc.exists(CREATING_KEY):
        loc.delete(CREATING_KEY)
        actions.append(f"removed the leftover {CREATING_KEY}")
    _writing._GROUPS.clear()
    info = StoreInfo(loc)
    metadata = check_metadata(info)
    problems = verify_store(info)
    unmark(info, problems)
    return actions, metadata, problems


def _spec_of_attrs(attrs: dict[str, Any], toys: int, where: str) -> StudySpec:
    """The study of a store's root attributes (as :func:`spec_of_store`, for a store
    whose metadata are being repaired)."""
    text = str(attrs.get("study_yaml", ""))
    base = str(attrs.get("study_dir", "."))
    spec = StudySpec.from_text(text, f"{where} (study_yaml)", base)
    spec = spec.with_overrides(toys=toys, seed=int(attrs["root_seed"]))
    if spec.digest != attrs.get("spec_digest"):
        msg = f"{where}: the stored study text does not reproduce the store's digest"
        raise StoreError(msg)
    return spec


def _root_attrs(loc: Location, objects: dict[str, str] | None) -> dict[str, Any] | None:
    """The root attributes if ``zarr.json`` is intact (its checksum, where known) and
    holds a study."""
    raw = loc.cat(["zarr.json"])["zarr.json"]
    if raw is None or (objects is not None and
                       object_digest("zarr.json", raw) != objects.get("zarr.json")):
        return None
    try:
        attrs = json.loads(raw).get("attributes")
    except (ValueError, AttributeError):
        return None
    need = ("study_yaml", "root_seed", "chunk_size", "spec_digest")
    return attrs if isinstance(attrs, dict) and all(k in attrs for k in need) else None


def _toys_of(loc: Location) -> int:
    """Toys per variant from the arrays' metadata, else from the done markers."""
    for key, axis in (("toy/zarr.json", 0), ("status/zarr.json", 1)):
        meta = loc.read_json(key)
        try:
            return int(meta["shape"][axis])  # type: ignore[index]
        except (TypeError, KeyError, IndexError, ValueError):
            continue
    keys = [k for k in loc.sizes(DONE_PREFIX) if k.endswith(".json")]
    stops = [rec["stop"] for rec in map(_parse_marker, loc.cat(keys).values())
             if rec is not None and isinstance(rec.get("stop"), int)]
    if not stops:
        msg = f"{loc}: cannot repair: the number of toys is lost"
        raise StoreError(msg)
    return max(stops)


def _template(spec: StudySpec, attrs: dict[str, Any], history: Sequence[int]
              ) -> tuple[dict[str, bytes], int]:
    """The objects (other than per-toy chunks) of a store of ``spec`` created with
    ``history[0]`` toys and extended to each later count, and its number of chunks."""
    tmp = Location(f"memory://toyengine-repair-{uuid.uuid4().hex}")
    try:
        degenerate = [(str(a), str(b))
                      for a, b in json.loads(str(attrs.get("degenerate_variants") or "[]"))]
        create_store(tmp, Plan.of(spec), int(attrs["chunk_size"]), degenerate)
        for toys in history[1:]:
            extend_store(tmp, toys)
        n_chunks = int(tmp.read_json(STATE_KEY)["chunks"])
        return _static_objects(tmp), n_chunks
    finally:
        tmp.wipe()


def find_unreadable_chunk(store: str | Path | Location,
                          storage_options: dict[str, Any] | None = None,
                          ) -> tuple[str, str, str] | None:
    """The first chunk of the store that cannot be read, as ``(array name, chunk key,
    error)`` (e.g. ``("value", "c/0/2/0/0", "...")``), or ``None``. Reads every chunk of
    every array (coordinates included; a damaged object fails its ``crc32c`` check): call
    it after a read failed, to say where the store is damaged. :func:`verify_store` is the
    check of the done chunks' results that ``toyengine verify`` runs."""
    loc = Location.of(store, storage_options)
    group = zarr.open_group(store=loc.zarr_store(read_only=True), mode="r")
    for name, arr in group.arrays():
        for idx in np.ndindex(*arr.cdata_shape):
            try:
                arr.get_block_selection(idx)
            except Exception as exc:  # noqa: BLE001 - any decoder error marks the chunk
                return name, "c/" + "/".join(str(i) for i in idx), str(exc)
    return None
