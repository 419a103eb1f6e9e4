"""The result store: a zarr (v3) group in xarray's encoding, one region per chunk.

Layout, attributes and the writing protocol are documented in ``docs/store-format.md``.
In short: the store is created from metadata only (no toy is materialised: a toy region
that was never written reads as the fill value, "not done"); each finished chunk's arrays
are written into its own ``(variant, toy)`` region — exactly one zarr chunk per array, so no
two writers share an object — every object checksummed (``crc32c`` codec), then the chunk's
own done marker ``_toyengine/done/<index>.json`` (holding the sizes of the objects it vouches
for) is written. Changes of shape (create, extend) are single atomic steps as seen by
readers: ``_toyengine/state.json`` is the commit record, written last; an interrupted
extension leaves ``_toyengine/extend.json`` which the next ``run`` finishes. Plain
``xarray.open_zarr(url)`` reads the arrays; no pickled or object data.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from .._version import __version__
from ..errors import StoreError
from ..study.plan import Chunk, Plan, plan_chunks
from ..study.schema import RECORD_FIELDS, field
from ..study.spec import StudySpec
from .layout import DatasetLayout
from .lease import LEASE_PREFIX, Fence
from .location import Location

__all__ = ["FORMAT_VERSION", "ChunkProblem", "IncompleteStoreError", "StoreInfo", "create_store",
           "extend_store", "object_digest", "plugin_mismatch", "spec_of_store"]

#: format 3: every object checksummed and bound to its key (done markers hold a digest of
#: each chunk object, ``state.json`` one of every other object), ``_toyengine/study.json``
FORMAT_VERSION = 4
#: formats this toyengine reads (format 2: done markers with object sizes only)
READABLE_FORMATS = (2, 3, 4)
CHUNK_VARS = ("chunk_variant", "chunk_start", "chunk_stop")
#: control objects (not zarr nodes): commit record, interrupted-creation and
#: interrupted-extension records, one done marker per chunk, the lease
CONTROL_GROUP_KEY = "_toyengine/zarr.json"
STATE_KEY = "_toyengine/state.json"
CREATING_KEY = "_toyengine/creating.json"
EXTEND_KEY = "_toyengine/extend.json"
#: the rounds of a precision-targeted run (``toyengine run --precision``)
PRECISION_KEY = "_toyengine/precision.json"
DONE_PREFIX = "_toyengine/done"
#: the study (the root attributes) and the toy counts of its creation and extensions: what
#: ``verify --repair`` rebuilds the metadata from when ``zarr.json`` is damaged
STUDY_KEY = "_toyengine/study.json"
_TABLE_CHUNK = 4096
#: toys per dask block of :func:`open_results` (rounded to whole store chunks)
READ_BLOCK_TOYS = 100_000
_COORD_CHUNK = 1 << 20


def _step(name: str) -> None:
    """A point where a kill leaves the store in an intermediate state (tests patch this
    to simulate a Ctrl-C or a node crash at every step of create and extend)."""


def _checked(name: str, fence: Fence | None) -> None:
    """:func:`_step`, then ``fence``: a run that lost the store's lease takes no further
    step of a creation or an extension (it would undo the newer run's)."""
    _step(name)
    if fence is not None:
        fence.check()


def _codecs() -> tuple[Any, ...]:
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return (ZstdCodec(), Crc32cCodec())


def _extension_chunks(n_variants: int, old: int, new: int, chunk_size: int,
                      first_index: int) -> list[Chunk]:
    """The chunks appended when a store grows from ``old`` to ``new`` toys per variant.
    They start on the zarr chunk grid; a partial last chunk of the old store is
    *reopened* instead (see :func:`_reopened`), so one task chunk is always one zarr chunk."""
    aligned = math.ceil(old / chunk_size) * chunk_size
    return plan_chunks(n_variants, new, chunk_size, start=aligned, first_index=first_index)


def chunk_key(name: str, chunk: Chunk, chunk_size: int) -> str:
    """The object that holds chunk ``chunk`` of toy variable ``name``."""
    return (f"{name}/c/{chunk.variant}/{chunk.start // chunk_size}"
            + "/0" * len(field(name).dims))


def toy_var_names(group: zarr.Group) -> tuple[str, ...]:
    """The per-toy variables present in a store's group: the fields of
    :data:`~toyengine.study.schema.RECORD_FIELDS` its study has, in schema order."""
    present = set(group.array_keys())
    return tuple(f.name for f in RECORD_FIELDS if f.name in present)


def object_digest(key: str, data: bytes, where: str = "") -> str:
    """Checksum of one stored object bound to its place: BLAKE2b (128 bit) of the object's
    key (array name and chunk index), ``where`` (a chunk's variant and toy range) and its
    bytes. An object moved to another key, or a chunk's bytes under another chunk's key,
    fails it."""
    h = hashlib.blake2b(digest_size=16)
    h.update(key.encode())
    h.update(b"\0")
    h.update(where.encode())
    h.update(b"\0")
    h.update(data)
    return h.hexdigest()


def chunk_where(chunk: Chunk) -> str:
    """The place a toy-array chunk object is bound to (see :func:`object_digest`)."""
    return f"variant {chunk.variant} toys {chunk.start}-{chunk.stop}"


def _is_toy_object(key: str) -> bool:
    """A chunk object of a per-toy array (``value/c/0/3/0/0``), vouched for by a marker."""
    parts = key.split("/")
    return len(parts) > 2 and parts[1] == "c" and parts[0] in _RECORD_NAMES


_RECORD_NAMES = frozenset(f.name for f in RECORD_FIELDS)


def _static_objects(loc: Location) -> dict[str, bytes]:
    """Every object of the store except the per-toy chunks and the control objects: the
    ``zarr.json`` metadata and the chunks of the coordinates, ``truth``, ``reference``,
    the chunk table and ``scan_points`` (all small), key → bytes."""
    keys = sorted(k for k in loc.sizes("")
                  if not k.startswith("_toyengine/") and not _is_toy_object(k)
                  and not k.rsplit("/", 1)[-1].startswith("."))
    got = loc.cat(keys)
    return {k: v for k, v in got.items() if v is not None}


def _write_state(loc: Location, toys: int, n_chunks: int, history: Sequence[int],
                 attrs: dict[str, Any] | None = None, fmt: int = FORMAT_VERSION) -> None:
    """Write the commit record: the shape, the toy counts of creation and extensions, and
    the checksum of every object that is not a per-toy chunk (those are in the markers).
    With ``attrs``, also the study record ``_toyengine/study.json`` first."""
    history = [int(t) for t in history]
    if attrs is not None:
        loc.write_json(STUDY_KEY, {"attrs": attrs, "history": history})
    objects = {k: object_digest(k, v) for k, v in _static_objects(loc).items()}
    loc.write_json(STATE_KEY, {"format_version": int(fmt), "toys": int(toys),
                               "chunks": int(n_chunks), "history": history,
                               "objects": objects})


def create_store(store: str | Path | Location, plan: Plan, chunk_size: int,
                 degenerate: Sequence[tuple[str, str]] = (),
                 fence: Fence | None = None) -> list[Chunk]:
    """Create an empty store for ``plan`` from metadata (no toy is materialised); returns
    its chunks. The caller holds the store's lease. A store left half-created by a killed
    creation is removed first; anything else at the location is refused.

    The per-toy variables are the plan's record fields; ``truth`` and ``reference`` its
    values; the ``param_label`` and ``param_unit`` coordinates its labels. ``degenerate``:
    (variant, same-density variant) pairs, recorded as an attribute. ``fence``: the
    caller's lease, checked after every step.
    """
    spec, params, labels = plan.spec, plan.params, plan.labels
    # no chunk longer than the store: its zarr chunks and the task chunks must coincide,
    # also after an extension (a chunk of 3 over 2 toys was refused by every write)
    chunk_size = max(1, min(int(chunk_size), spec.toys))
    truth, reference = plan.truth_and_reference
    loc = Location.of(store)
    if loc.exists(STATE_KEY):
        msg = f"store {loc} already exists"
        raise StoreError(msg)
    _clear_interrupted_creation(loc)
    loc.write_json(CREATING_KEY, {"study": spec.name, "spec_digest": spec.digest})
    # the control folder is an (empty) zarr group, so that zarr and xarray skip it quietly
    loc.write_json(CONTROL_GROUP_KEY, {"zarr_format": 3, "node_type": "group",
                                       "attributes": {}})
    _checked("create:begin", fence)
    nv = len(spec.variants)
    chunks = plan.chunks(chunk_size)
    sizes = {"variant": nv, "toy": spec.toys, **plan.sizes}
    coords: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
        "variant": (("variant",), np.arange(nv)),
        "variant_name": (("variant",), np.array([v.name for v in spec.variants], dtype=str)),
        "variant_group": (("variant",), np.array([v.group for v in spec.variants], dtype=str)),
        "variant_separate": (("variant",), np.array([v.separate for v in spec.variants])),
        "toy": (("toy",), np.arange(spec.toys)),
        "hypothesis": (("hypothesis",), np.array(spec.hypotheses, dtype=str)),
        "param": (("param",), np.array(params, dtype=str)),
        "param_label": (("param",), np.array([labels[p][0] for p in params], dtype=str)),
        "param_unit": (("param",), np.array([labels[p][1] for p in params], dtype=str)),
    }
    test = spec.test
    attrs = {
        "format_version": FORMAT_VERSION,
        "toyengine_version": __version__,
        "study_name": spec.name,
        "kind": spec.kind,
        "study_yaml": spec.text,
        "spec_digest": spec.digest,
        "root_seed": int(spec.seed),
        "paired": int(spec.paired),
        "reference_fit": (f"Asimov data set of variant {spec.variants[0].name!r}'s generator"
                          if spec.reference_fit else ""),
        "degenerate_variants": json.dumps([list(p) for p in degenerate]),
        "fit_variants": json.dumps([v.name for v in spec.variants if v.fits_alternative]),
        "chunk_size": int(chunk_size),
        "h0": str(test.get("h0", "")),
        "h1": str(test.get("h1", "")),
        "ndof_wilks": int(test.get("ndof", -1)),
        "observed_t": float(test.get("observed", math.nan)),
        "poi": " ".join(spec.poi),
        "fit_starts": int(spec.fit["starts"]),
        "fit_minos": int(spec.fit["minos"]),
        "fit_hesse": int(spec.fit["hesse"]),
        "study_dir": str(spec.base_dir),
    }
    if spec.plugin_sources:  # the plug-ins' code (module file hash, distribution version)
        attrs["plugin_sources"] = json.dumps(dict(spec.plugin_sources), sort_keys=True)
    small: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
        "truth": (("variant", "param"), np.asarray(truth, dtype=float)),
        "reference": (("param",), np.asarray(reference, dtype=float))}
    scan = plan.scan
    if scan is not None:
        attrs.update({"scan_parameters": " ".join(scan.names),
                      "scan_grid": list(scan.grid),
                      "lee_dof": scan.lee_dof, "lee_one_sided": int(scan.lee_one_sided)})
        small["scan_points"] = (("scan_point", "scan_parameter"),
                                np.asarray(scan.points, dtype=float))
    if spec.importance is not None:
        attrs.update({"importance_inject": " ".join(plan.injected),
                      "importance_fraction": float(spec.importance["fraction"])})
        family = spec.importance.get("family")
        if family:
            attrs["importance_family"] = "; ".join(
                [*(f"{n} uniform" for n in family["masses"]),
                 *(f"{n} ∝ 1/{n}²" for n in family["widths"]),
                 f"({', '.join(family['coupling'])}) at −Δln L ≈ {family['strength']:g} "
                 f"(ln-magnitude σ {family['spread']:g})"])
        coords["injected"] = (("injected",), np.array(plan.injected, dtype=str))
    from ..study.recipe import flat_when_off

    flat = flat_when_off(spec)
    if flat:  # parameters fixed at nominal where a signal is off (the summary says so)
        attrs["fixed_flat"] = json.dumps(flat)
    # metadata and the small arrays only; the toy arrays stay unwritten
    group = zarr.open_group(store=loc.zarr_store(), mode="a", zarr_format=3)
    group.attrs.update(attrs)
    layout = DatasetLayout(group, coords)
    for name, (dims, values) in coords.items():
        layout.coordinate(name, dims, values,
                          chunks=(_COORD_CHUNK,) if name == "toy" else None)
    for f in plan.fields:
        dims = ("variant", "toy", *f.dims)
        shape = tuple(sizes[d] for d in dims)
        layout.variable(f.name, dims, shape, f.dtype, (1, chunk_size, *shape[2:]),
                        fill=f.fill if f.dtype.kind in "biu" else None,
                        compressors=_codecs())
    for name, (dims, values) in small.items():
        layout.variable(name, dims, values.shape, values.dtype, None, values=values)
    table = {"chunk_variant": [c.variant for c in chunks],
             "chunk_start": [c.start for c in chunks], "chunk_stop": [c.stop for c in chunks]}
    for name, vals in table.items():
        values = np.asarray(vals, dtype=np.int64)
        layout.variable(name, ("chunk",), values.shape, values.dtype, (_TABLE_CHUNK,),
                        values=values, compressors=_codecs())
    _checked("create:arrays", fence)
    _write_state(loc, spec.toys, len(chunks), [spec.toys], attrs=attrs)
    _checked("create:state", fence)
    loc.delete(CREATING_KEY)
    return chunks


def _clear_interrupted_creation(loc: Location) -> None:
    """Remove what a killed creation left (only if it says so: never a foreign directory)."""
    fs = loc.fs
    if not fs.exists(loc.root):
        return
    keys = set(loc.sizes(""))
    # the control folder holds the lease, the live status and other processes' temporary
    # files (".name.pid.uuid.tmp", mid-way to an atomic rename or link): never data
    data = {k for k in keys if not k.startswith("_toyengine/")}
    if CREATING_KEY not in keys and not data:
        return
    computed = sum(1 for k in keys if _is_toy_object(k) or
                   (k.startswith(DONE_PREFIX + "/") and k.endswith(".json")))
    if CREATING_KEY in keys and computed:
        # a creation finished (its toys were computed) and then lost its commit record,
        # e.g. a kill between writing state.json and removing creating.json: never wiped
        msg = (f"{loc}: _toyengine/state.json is missing but the store holds computed "
               f"chunks; run `toyengine verify --repair {loc}` to rebuild it, then run "
               "again")
        raise StoreError(msg)
    if CREATING_KEY not in keys:
        root = loc.read_json("zarr.json")
        old = (root.get("attributes") or {}).get("format_version") \
            if isinstance(root, dict) else None
        if old is not None and old not in READABLE_FORMATS:
            msg = (f"{loc} is a toyengine store of format_version {old}, this toyengine "
                   f"writes {FORMAT_VERSION}; use a new --store path")
        elif old is not None or STUDY_KEY in keys or computed:
            msg = (f"{loc}: _toyengine/state.json is missing or damaged; run `toyengine "
                   f"verify --repair {loc}` to rebuild it, then run again")
        else:
            msg = f"{loc} exists and is not a toyengine result store; use a new --store path"
        raise StoreError(msg)
    for entry in fs.ls(loc.root, detail=False):
        if entry.rstrip("/").endswith("/_toyengine"):
            continue
        fs.rm(entry, recursive=True)
    for key in keys:
        if key.startswith("_toyengine/") and key != CREATING_KEY \
                and not key.startswith(f"{LEASE_PREFIX}/") \
                and not key.rsplit("/", 1)[-1].startswith("."):
            loc.delete(key)


@dataclass(frozen=True)
class ChunkProblem:
    """A chunk marked done whose data are missing or damaged."""

    chunk: Chunk
    what: str

    def describe(self, variant_names: Sequence[str] | None = None) -> str:
        c = self.chunk
        vname = variant_names[c.variant] if variant_names is not None else str(c.variant)
        return (f"chunk {c.index} (variant {vname}, toys {c.start}-{c.stop - 1}): "
                f"{self.what}")


class IncompleteStoreError(StoreError):
    """A store read as a whole has chunks that are missing, damaged or not done; the
    message names their toy ranges and the command that completes the store."""


class StoreInfo:
    """What the runner and the commands need to know about an existing store.

    Raises :class:`StoreError` (one line) for a location that holds no store, a store
    whose creation was interrupted, a store whose metadata is damaged (the checksums of
    ``state.json``; ``toyengine verify --repair`` rebuilds it), or (unless
    ``allow_extending``) a store with an interrupted extension.
    """

    def __init__(self, store: str | Path | Location, *, allow_extending: bool = False,
                 storage_options: dict[str, Any] | None = None):
        self.loc = Location.of(store, storage_options)
        self.path = self.loc.url
        state = self.loc.read_json(STATE_KEY)
        if not isinstance(state, dict) or not isinstance(state.get("toys"), int) \
                or not isinstance(state.get("chunks"), int):
            raise StoreError(_no_state_message(self.loc))
        fmt = state.get("format_version")
        if fmt not in READABLE_FORMATS:
            msg = (f"{self.loc}: format_version {fmt!r} is not one of "
                   f"{', '.join(map(str, READABLE_FORMATS))}; is it a toyengine store?")
            raise StoreError(msg)
        self.extending = self.loc.read_json(EXTEND_KEY)
        if self.extending is not None and not allow_extending:
            msg = (f"{self.loc}: an extension to {self.extending.get('to')} toys was "
                   "interrupted; run `toyengine run` again to finish it")
            raise StoreError(msg)
        self.state = state
        objects = state.get("objects")
        #: checksum of every object that is not a per-toy chunk (format 3), else None
        self.objects: dict[str, str] | None = objects if isinstance(objects, dict) else None
        if self.objects is not None and self.extending is None:
            # every zarr.json and the small arrays (coordinates, truth, reference, chunk
            # table): small, and everything below relies on them
            bad = _digest_problems(self.loc, sorted(self.objects), self.objects)
            if bad:
                raise StoreError(_metadata_message(self.loc, bad))
        try:
            self.group = zarr.open_group(store=self.loc.zarr_store(read_only=True), mode="r")
            self.attrs = dict(self.group.attrs)
            self.toys = int(state["toys"])
            self.n_chunks = int(state["chunks"])
            self.n_variants = int(self.group["variant"].shape[0])
            self.chunk_size = int(self.attrs["chunk_size"])
            self.params = tuple(str(p) for p in self.group["param"][:])
            self.variant_names = tuple(str(p) for p in self.group["variant_name"][:])
            self.toy_vars = toy_var_names(self.group)
        except (OSError, StoreError):
            raise
        except Exception as exc:  # noqa: BLE001 - damaged metadata (a format 2 store)
            text = " ".join(str(exc).split())[:120]
            raise StoreError(_metadata_message(
                self.loc, [f"metadata unreadable ({type(exc).__name__}: {text})"])) from exc
        #: the store's own format (a format 2 store extended by this version keeps it)
        self.format_version = int(self.attrs.get("format_version", fmt))
        self._chunks: list[Chunk] | None = None

    def chunks(self) -> list[Chunk]:
        if self._chunks is None:
            n = self.n_chunks
            g = self.group
            var, start, stop = (g[k][:n] for k in CHUNK_VARS)
            self._chunks = [Chunk(i, int(v), int(a), int(b))
                            for i, (v, a, b) in enumerate(zip(var, start, stop, strict=True))]
        return self._chunks

    def read_markers(self) -> tuple[dict[int, dict[str, Any]], list[ChunkProblem]]:
        """The valid done markers (chunk index → record), and a problem for each marker
        that is present but unreadable, fails its checksum or describes another chunk (such
        a chunk is not done)."""
        keys = [k for k in self.loc.sizes(DONE_PREFIX) if k.endswith(".json")
                and k.rsplit("/", 1)[-1][:-5].isdigit()]
        chunks = self.chunks() if keys else []
        out: dict[int, dict[str, Any]] = {}
        problems = []
        for key, raw in self.loc.cat(keys).items():
            idx = int(key.rsplit("/", 1)[-1][:-5])
            if idx >= self.n_chunks:
                continue
            rec, why = _check_marker(raw, idx, chunks[idx], self.toy_vars,
                                     self.format_version >= 3)
            if rec is None:
                problems.append(ChunkProblem(chunks[idx], f"done marker {why}"))
            else:
                out[idx] = rec
        return out, sorted(problems, key=lambda p: p.chunk.index)

    def markers(self) -> dict[int, dict[str, Any]]:
        """The valid done markers present (chunk index → marker record)."""
        return self.read_markers()[0]

    def done(self, problems: Sequence[ChunkProblem] = ()) -> np.ndarray:
        """Chunks with a valid done marker (every marker is read and checked; one that
        cannot be read is not done), less those in ``problems``."""
        out = np.zeros(self.n_chunks, dtype=bool)
        for i in self.markers():
            out[i] = True
        for p in problems:
            out[p.chunk.index] = False
        return out


def _no_state_message(loc: Location) -> str:
    """Why a location without a readable ``state.json`` cannot be opened, and what to do."""
    keys = set(loc.sizes(""))
    computed = any(_is_toy_object(k) or k.startswith(DONE_PREFIX + "/") for k in keys)
    repair = (f"{loc}: _toyengine/state.json is missing or damaged; run `toyengine verify "
              f"--repair {loc}` to rebuild it from the chunks")
    if CREATING_KEY in keys:
        if computed:
            return repair
        return (f"{loc}: the creation of this store was interrupted; run the same "
                "`toyengine run` command again to create it")
    if "zarr.json" in keys or STUDY_KEY in keys or computed:
        root = loc.read_json("zarr.json")
        fmt = (root.get("attributes") or {}).get("format_version") \
            if isinstance(root, dict) else None
        if fmt is not None and fmt not in READABLE_FORMATS:
            return (f"{loc}: format_version {fmt!r} is not one of "
                    f"{', '.join(map(str, READABLE_FORMATS))}; is it a toyengine store of "
                    "this version?")
        if fmt is None and STUDY_KEY not in keys and not computed:
            return (f"{loc}: no _toyengine/state.json; is it a toyengine store of this "
                    "version?")
        return repair
    return f"no result store at {loc}"


def _metadata_message(loc: Location, bad: Sequence[str]) -> str:
    more = f", and {len(bad) - 4} more" if len(bad) > 4 else ""
    return (f"store {loc} is damaged: {', '.join(bad[:4])}{more}; run `toyengine verify "
            f"--repair {loc}` to rebuild it")


def _digest_problems(loc: Location, keys: Sequence[str], objects: dict[str, str]
                     ) -> list[str]:
    """The objects of ``keys`` that are missing or fail their checksum in ``objects``."""
    bad = []
    for key, raw in loc.cat(list(keys)).items():
        if raw is None:
            bad.append(f"{key} missing")
        elif object_digest(key, raw) != objects[key]:
            bad.append(f"{key} fails its checksum")
    return sorted(bad)


def _marker_digest(index: int, rec: dict[str, Any]) -> str:
    body = {k: v for k, v in rec.items() if k != "digest"}
    return object_digest(marker_key(index), json.dumps(body, sort_keys=True).encode())


def _check_marker(raw: bytes | None, index: int, chunk: Chunk, toy_vars: Sequence[str],
                  need_digests: bool) -> tuple[dict[str, Any] | None, str]:
    """``(record, "")`` for a valid done marker of ``chunk``, else ``(None, why)``."""
    key = marker_key(index)
    rec = _parse_marker(raw)
    if rec is None:
        return None, f"{key} unreadable"
    if "digest" in rec:
        if rec["digest"] != _marker_digest(index, rec):
            return None, f"{key} fails its checksum"
    elif need_digests:
        return None, f"{key} has no checksum"
    if rec.get("chunk") == chunk.index:
        stale = _stale_marker(rec, chunk)
        if stale:  # this chunk's marker, for another extent of it: not done
            return None, stale
    else:  # another chunk's marker (moved or swapped)
        return None, (f"{key} describes chunk {rec.get('chunk')} (variant "
                      f"{rec.get('variant')}, toys {rec.get('start')}-{rec.get('stop')})")
    digests = rec.get("digests")
    if need_digests and (not isinstance(digests, dict)
                         or any(n not in digests for n in toy_vars)):
        return None, f"{key} lacks the checksums of its objects"
    return rec, ""


def _stale_marker(rec: dict[str, Any], c: Chunk) -> str:
    """Why done marker ``rec`` does not vouch for chunk ``c`` as the chunk table has it
    (empty if it does; else ``"is stale: …"``, after "done marker"): a marker written for
    other toys — by a run that planned the chunk before an extension grew it, and lost its
    lease — is stale. :meth:`StoreInfo.read_markers` finds it (the chunk is not done)."""
    got = (rec.get("variant"), rec.get("start"), rec.get("stop"))
    if got == (c.variant, c.start, c.stop):
        return ""
    epoch = f", lease epoch {rec['epoch']}" if rec.get("epoch") is not None else ""
    return (f"is stale: written for variant {got[0]} toys {got[1]}-"
            f"{(got[2] or 0) - 1} (a run of {rec.get('toys', '?')} toys{epoch}), the chunk "
            f"now holds toys {c.start}-{c.stop - 1}")


def spec_of_store(path: str | Path | Location) -> StudySpec:
    """The study that made the store at ``path`` (its YAML text, root seed and, for
    relative input files, the study file's directory recorded at creation)."""
    info = StoreInfo(path)
    text = str(info.attrs.get("study_yaml", ""))
    base = str(info.attrs.get("study_dir", "."))
    spec = StudySpec.from_text(text, f"{path} (study_yaml)", base)
    spec = spec.with_overrides(toys=info.toys, seed=int(info.attrs["root_seed"]))
    if spec.digest != info.attrs.get("spec_digest"):
        msg = f"{path}: the stored study text does not reproduce the store's digest"
        raise StoreError(msg)
    changed = plugin_mismatch(info.attrs, spec, path)
    if changed:
        raise StoreError(changed)
    return spec


def plugin_mismatch(attrs: Mapping[str, Any], spec: StudySpec, store: object) -> str | None:
    """One line naming the first plug-in module whose code differs between the store's
    record (``plugin_sources``) and ``spec``; ``None`` when they agree (or the store
    predates the record)."""
    raw = attrs.get("plugin_sources")
    if raw is None:
        return None
    try:
        stored = dict(json.loads(str(raw)))
    except (ValueError, TypeError):
        return f"store {store}: unreadable plugin_sources attribute {str(raw)[:60]!r}"
    now = dict(spec.plugin_sources)
    for module in sorted(stored.keys() | now.keys()):
        if stored.get(module) != now.get(module):
            return (f"store {store} was made with other code of plug-in module {module!r} "
                    f"(store: {str(stored.get(module, 'none'))[:19]}, now: "
                    f"{str(now.get(module, 'none'))[:19]}); its toys would mix two models: "
                    "use another --store path, or the plug-in code that made it")
    return None


def _parse_marker(raw: bytes | None) -> dict[str, Any] | None:

    if raw is None:
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("sizes"), dict) else None


def marker_key(index: int) -> str:
    return f"{DONE_PREFIX}/{index}.json"


def store_info(store: str | Path | Location) -> StoreInfo:
    return StoreInfo(store)


def extend_store(store: str | Path | Location, new_toys: int,
                 fence: Fence | None = None) -> list[Chunk]:
    """Grow every variant to ``new_toys`` toys; returns the chunks to run for them. The
    caller holds the store's lease. Crash-safe: the extension is recorded first
    (``_toyengine/extend.json``), every later step is idempotent, and the commit record is
    written last; :func:`finish_extension` completes an interrupted one. ``fence``: the
    caller's lease, checked after every step."""
    loc = Location.of(store)
    info = StoreInfo(loc, allow_extending=True)
    if info.extending is not None:
        finish_extension(loc, fence)
        info = StoreInfo(loc)
    if new_toys <= info.toys:
        return []
    loc.write_json(EXTEND_KEY, {"from": info.toys, "to": int(new_toys),
                                "chunks_before": info.n_chunks})
    _checked("extend:intent", fence)
    return finish_extension(loc, fence)


def _reopened(chunks: Sequence[Chunk], old: int, chunk_size: int) -> list[Chunk]:
    """Old chunks that end mid-zarr-chunk (the last of each variant when ``old`` is not a
    multiple of the chunk size): an extension grows and recomputes them."""
    if old % chunk_size == 0:
        return []
    return [c for c in chunks if c.stop == old]


def finish_extension(store: str | Path | Location,
                     fence: Fence | None = None) -> list[Chunk]:
    """Complete the extension recorded in ``_toyengine/extend.json`` (idempotent)."""
    loc = Location.of(store)
    intent = loc.read_json(EXTEND_KEY)
    if intent is None:
        return []
    old, new, n_before = int(intent["from"]), int(intent["to"]), int(intent["chunks_before"])
    g = zarr.open_group(store=loc.zarr_store(), mode="r+")
    cs = int(g.attrs["chunk_size"])
    nv = int(g["variant"].shape[0])
    for name in (*toy_var_names(g), "toy"):
        arr = g[name]
        if arr.shape[0 if name == "toy" else 1] != new:
            arr.resize((new,) if name == "toy" else (nv, new, *arr.shape[2:]))
        _checked(f"extend:resize:{name}", fence)
    toy = g["toy"]
    for a in range(old, new, _COORD_CHUNK):
        b = min(new, a + _COORD_CHUNK)
        toy[a:b] = np.arange(a, b)
    _checked("extend:toy", fence)
    var, start, stop = (np.asarray(g[k][:n_before]) for k in CHUNK_VARS)
    before = [Chunk(i, int(v), int(a), int(b))
              for i, (v, a, b) in enumerate(zip(var, start, stop, strict=True))]
    reopened = _reopened(before, old, cs)
    new_chunks = _extension_chunks(nv, old, new, cs, n_before)
    n_after = n_before + len(new_chunks)
    for c in reopened:
        loc.delete(marker_key(c.index))
    _checked("extend:unmark", fence)
    for name, vals in (("chunk_variant", [c.variant for c in new_chunks]),
                       ("chunk_start", [c.start for c in new_chunks]),
                       ("chunk_stop", [c.stop for c in new_chunks])):
        arr = g[name]
        if arr.shape[0] != n_after:
            arr.resize((n_after,))
        arr[n_before:n_after] = np.asarray(vals, dtype=np.int64)
        for c in reopened:
            arr_stop = min(c.start + cs, new)
            if name == "chunk_stop":
                arr[c.index] = arr_stop
        _checked(f"extend:table:{name}", fence)
    study = loc.read_json(STUDY_KEY)
    state = loc.read_json(STATE_KEY) or {}
    history = list(state.get("history") or (study or {}).get("history") or [old])
    if history[-1] != new:
        history.append(new)
    if isinstance(study, dict) and isinstance(study.get("attrs"), dict):
        loc.write_json(STUDY_KEY, {"attrs": study["attrs"], "history": history})
    _write_state(loc, new, n_after, history,
                 fmt=int(state.get("format_version", FORMAT_VERSION)))
    _checked("extend:state", fence)
    loc.delete(EXTEND_KEY)
    return [Chunk(c.index, c.variant, c.start, min(c.start + cs, new)) for c in reopened] \
        + new_chunks
