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
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from .._version import __version__
from ..errors import LeaseLost, StoreError
from ..study.plan import Chunk, Plan, plan_chunks
from ..study.recipe import ChunkResult
from ..study.schema import RECORD_FIELDS, field
from ..study.spec import StudySpec
from .lease import LEASE_PREFIX, Fence
from .location import Location

if TYPE_CHECKING:  # xarray is imported where a store is created or opened: a worker that
    # writes chunks needs zarr only, and starts ~0.3 s sooner without xarray and pandas
    import xarray as xr

__all__ = ["FORMAT_VERSION", "ChunkProblem", "IncompleteStoreError", "StoreCheck", "StoreInfo",
           "check_chunks", "check_metadata", "check_store", "create_store", "describe_cause",
           "extend_store", "failure_causes", "object_digest", "open_checked",
           "open_checked_store", "open_results", "plugin_mismatch", "repair_store",
           "require_complete", "spec_of_store", "unmark", "verify_store", "write_chunk"]

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
    import dask.array as da
    import xarray as xr

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
    tag = uuid.uuid4().hex
    sizes = {"variant": nv, "toy": spec.toys, **plan.sizes}
    data: dict[str, Any] = {}
    encoding: dict[str, dict[str, Any]] = {}
    for f in plan.fields:
        dims = ("variant", "toy", *f.dims)
        shape = tuple(sizes[d] for d in dims)
        chunking = (1, chunk_size, *shape[2:])
        # one (never computed) dask block per variable: writes the metadata only, and
        # the dask graph stays a dozen tasks however many chunks the store has; named here,
        # not by dask's hash of the arguments (a tenth of a second per store)
        data[f.name] = xr.Variable(dims, da.full(shape, f.fill, dtype=f.dtype, chunks=shape,
                                                 name=f"toyengine-unwritten-{f.name}-{tag}"))
        encoding[f.name] = {"chunks": chunking, "compressors": _codecs()}
        if f.dtype.kind in "biu":  # zarr's fill value (floats: NaN, xarray's default)
            encoding[f.name]["fill_value"] = f.fill
    data["truth"] = xr.Variable(("variant", "param"), np.asarray(truth, dtype=float))
    data["reference"] = xr.Variable(("param",), np.asarray(reference, dtype=float))
    table = {"chunk_variant": [c.variant for c in chunks],
             "chunk_start": [c.start for c in chunks], "chunk_stop": [c.stop for c in chunks]}
    for name, vals in table.items():
        data[name] = xr.Variable(("chunk",), np.asarray(vals, dtype=np.int64))
        encoding[name] = {"chunks": (_TABLE_CHUNK,), "compressors": _codecs()}
    coords = {
        "variant": np.arange(nv),
        "variant_name": ("variant", np.array([v.name for v in spec.variants], dtype=object)),
        "variant_group": ("variant", np.array([v.group for v in spec.variants], dtype=object)),
        "variant_separate": ("variant", np.array([v.separate for v in spec.variants])),
        "toy": np.arange(spec.toys),
        "hypothesis": np.array(spec.hypotheses, dtype=object),
        "param": np.array(params, dtype=object),
        "param_label": ("param", np.array([labels[p][0] for p in params], dtype=object)),
        "param_unit": ("param", np.array([labels[p][1] for p in params], dtype=object)),
    }
    encoding["toy"] = {"chunks": (_COORD_CHUNK,)}
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
    scan = plan.scan
    if scan is not None:
        attrs.update({"scan_parameters": " ".join(scan.names),
                      "scan_grid": list(scan.grid),
                      "lee_dof": scan.lee_dof, "lee_one_sided": int(scan.lee_one_sided)})
        data["scan_points"] = xr.Variable(("scan_point", "scan_parameter"), scan.points)
    if spec.importance is not None:
        attrs.update({"importance_inject": " ".join(plan.injected),
                      "importance_fraction": float(spec.importance["fraction"])})
        coords["injected"] = np.array(plan.injected, dtype=object)
    from ..study.recipe import flat_when_off

    flat = flat_when_off(spec)
    if flat:  # parameters fixed at nominal where a signal is off (the summary says so)
        attrs["fixed_flat"] = json.dumps(flat)
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    # compute=False: metadata and the small arrays only; the toy arrays stay unwritten
    ds.to_zarr(loc.zarr_store(), mode="a", encoding=encoding, zarr_format=3,
               consolidated=False, compute=False)
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


_GROUPS: dict[tuple[str, int], Any] = {}


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
    :class:`~toyengine.errors.LeaseLost`, and a marker it wrote meanwhile is withdrawn.
    A partial last chunk (the only kind an extension reopens and grows) whose arrays were
    written just before the loss is marked not done: the new holder may have grown it.
    """
    loc = Location.of(store)
    c = result.chunk
    if fence is not None:
        fence.check()
    arrays = _writable_arrays(loc, toys, chunk_size)
    for name, arr in arrays.items():
        arr[c.variant, c.start:c.stop] = result.arrays[name]
    keys = {name: chunk_key(name, c, chunk_size) for name in arrays}
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
    if fence is None:
        loc.write_json(marker_key(c.index), rec)
        return
    try:
        fence.check()
    except LeaseLost:
        if c.stop % chunk_size:
            loc.delete(marker_key(c.index))
        raise
    loc.write_json(marker_key(c.index), rec)
    try:
        fence.check()
    except LeaseLost:
        if loc.read_json(marker_key(c.index)) == rec:
            loc.delete(marker_key(c.index))
        raise


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
    return ds.assign_coords(small).assign(chunk_done=("chunk", chk.done)), verify_unread


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
    _GROUPS.clear()
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
