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

import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from .._version import __version__
from ..errors import StoreError
from ..study.plan import Chunk, Plan, plan_chunks
from ..study.recipe import ChunkResult
from ..study.schema import RECORD_FIELDS, field
from ..study.spec import StudySpec
from .lease import LEASE_KEY
from .location import Location

if TYPE_CHECKING:  # xarray is imported where a store is created or opened: a worker that
    # writes chunks needs zarr only, and starts ~0.3 s sooner without xarray and pandas
    import xarray as xr

__all__ = ["FORMAT_VERSION", "ChunkProblem", "StoreInfo", "check_chunks", "create_store",
           "extend_store", "open_results", "spec_of_store", "unmark", "verify_store",
           "write_chunk"]

FORMAT_VERSION = 2
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
_TABLE_CHUNK = 4096
#: toys per dask block of :func:`open_results` (rounded to whole store chunks)
READ_BLOCK_TOYS = 100_000
_COORD_CHUNK = 1 << 20


def _step(name: str) -> None:
    """A point where a kill leaves the store in an intermediate state (tests patch this
    to simulate a Ctrl-C or a node crash at every step of create and extend)."""


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


def create_store(store: str | Path | Location, plan: Plan, chunk_size: int,
                 degenerate: Sequence[tuple[str, str]] = ()) -> list[Chunk]:
    """Create an empty store for ``plan`` from metadata (no toy is materialised); returns
    its chunks. The caller holds the store's lease. A store left half-created by a killed
    creation is removed first; anything else at the location is refused.

    The per-toy variables are the plan's record fields; ``truth`` and ``reference`` its
    values; the ``param_label`` and ``param_unit`` coordinates its labels. ``degenerate``:
    (variant, same-density variant) pairs, recorded as an attribute.
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
    _step("create:begin")
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
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    # compute=False: metadata and the small arrays only; the toy arrays stay unwritten
    ds.to_zarr(loc.zarr_store(), mode="a", encoding=encoding, zarr_format=3,
               consolidated=False, compute=False)
    _step("create:arrays")
    loc.write_json(STATE_KEY, {"format_version": FORMAT_VERSION, "toys": int(spec.toys),
                               "chunks": len(chunks)})
    _step("create:state")
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
    if CREATING_KEY not in keys:
        if "zarr.json" in keys and loc.read_json("zarr.json") is not None and \
                "format_version" in (loc.read_json("zarr.json") or {}).get("attributes", {}):
            old = loc.read_json("zarr.json")["attributes"]["format_version"]
            msg = (f"{loc} is a toyengine store of format_version {old}, this toyengine "
                   f"writes {FORMAT_VERSION}; use a new --store path")
        else:
            msg = f"{loc} exists and is not a toyengine result store; use a new --store path"
        raise StoreError(msg)
    for entry in fs.ls(loc.root, detail=False):
        if entry.rstrip("/").endswith("/_toyengine"):
            continue
        fs.rm(entry, recursive=True)
    for key in keys:
        if key.startswith("_toyengine/") and key not in (LEASE_KEY, CREATING_KEY) \
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


class StoreInfo:
    """What the runner and the commands need to know about an existing store.

    Raises :class:`StoreError` (one line) for a location that holds no store, a store
    whose creation was interrupted, or (unless ``allow_extending``) a store with an
    interrupted extension.
    """

    def __init__(self, store: str | Path | Location, *, allow_extending: bool = False,
                 storage_options: dict[str, Any] | None = None):
        self.loc = Location.of(store, storage_options)
        self.path = self.loc.url
        state = self.loc.read_json(STATE_KEY)
        if state is None:
            if self.loc.exists(CREATING_KEY):
                msg = (f"{self.loc}: the creation of this store was interrupted; run the "
                       "same `toyengine run` command again to create it")
            elif self.loc.exists("zarr.json"):
                msg = (f"{self.loc}: format_version is not {FORMAT_VERSION} (no "
                       "_toyengine/state.json); is it a toyengine store of this version?")
            else:
                msg = f"no result store at {self.loc}"
            raise StoreError(msg)
        if state.get("format_version") != FORMAT_VERSION:
            msg = (f"{self.loc}: format_version {state.get('format_version')!r} is not "
                   f"{FORMAT_VERSION}; is it a toyengine store?")
            raise StoreError(msg)
        self.extending = self.loc.read_json(EXTEND_KEY)
        if self.extending is not None and not allow_extending:
            msg = (f"{self.loc}: an extension to {self.extending.get('to')} toys was "
                   "interrupted; run `toyengine run` again to finish it")
            raise StoreError(msg)
        self.state = state
        self.group = zarr.open_group(store=self.loc.zarr_store(read_only=True), mode="r")
        self.attrs = dict(self.group.attrs)
        self.toys = int(state["toys"])
        self.n_chunks = int(state["chunks"])
        self.n_variants = int(self.group["variant"].shape[0])
        self.chunk_size = int(self.attrs["chunk_size"])
        self.params = tuple(str(p) for p in self.group["param"][:])
        self.variant_names = tuple(str(p) for p in self.group["variant_name"][:])
        self.toy_vars = toy_var_names(self.group)
        self._chunks: list[Chunk] | None = None

    def chunks(self) -> list[Chunk]:
        if self._chunks is None:
            n = self.n_chunks
            g = self.group
            var, start, stop = (g[k][:n] for k in CHUNK_VARS)
            self._chunks = [Chunk(i, int(v), int(a), int(b))
                            for i, (v, a, b) in enumerate(zip(var, start, stop, strict=True))]
        return self._chunks

    def markers(self) -> dict[int, dict[str, Any]]:
        """The done markers present (chunk index → marker record)."""
        keys = [k for k in self.loc.sizes(DONE_PREFIX) if k.endswith(".json")]
        out = {}
        for key, raw in self.loc.cat(keys).items():
            try:
                idx = int(key.rsplit("/", 1)[1][:-5])
            except ValueError:
                continue
            rec = _parse_marker(raw)
            if rec is not None and idx < self.n_chunks:
                out[idx] = rec
        return out

    def done(self, problems: Sequence[ChunkProblem] = ()) -> np.ndarray:
        """Chunks with a done marker (one listing, no marker is read), less those in
        ``problems``."""
        out = np.zeros(self.n_chunks, dtype=bool)
        for key, size in self.loc.sizes(DONE_PREFIX).items():
            name = key.rsplit("/", 1)[-1]
            if size and name.endswith(".json") and name[:-5].isdigit():
                i = int(name[:-5])
                if i < self.n_chunks:
                    out[i] = True
        for p in problems:
            out[p.chunk.index] = False
        return out


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
    return spec


def _parse_marker(raw: bytes | None) -> dict[str, Any] | None:

    if raw is None:
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and "sizes" in rec else None


def marker_key(index: int) -> str:
    return f"{DONE_PREFIX}/{index}.json"


def store_info(store: str | Path | Location) -> StoreInfo:
    return StoreInfo(store)


def check_chunks(info: StoreInfo) -> list[ChunkProblem]:
    """Cheap integrity check of every chunk marked done: each of its objects exists and
    has the size its done marker recorded (one listing per array; no data are read)."""
    markers = info.markers()
    if not markers:
        return []
    listed = {name: info.loc.sizes(f"{name}/c") for name in info.toy_vars}
    chunks = info.chunks()
    problems = []
    for idx in sorted(markers):
        c = chunks[idx]
        sizes = markers[idx]["sizes"]
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
    return problems


def verify_store(info: StoreInfo) -> list[ChunkProblem]:
    """Full integrity check: :func:`check_chunks`, then read and decode every object of
    every chunk marked done (the ``crc32c`` checksum of each object is verified)."""
    problems = check_chunks(info)
    bad = {p.chunk.index for p in problems}
    chunks = info.chunks()
    arrays = {name: info.group[name] for name in info.toy_vars}
    for idx in sorted(info.markers()):
        if idx in bad:
            continue
        c = chunks[idx]
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


def extend_store(store: str | Path | Location, new_toys: int) -> list[Chunk]:
    """Grow every variant to ``new_toys`` toys; returns the chunks to run for them. The
    caller holds the store's lease. Crash-safe: the extension is recorded first
    (``_toyengine/extend.json``), every later step is idempotent, and the commit record is
    written last; :func:`finish_extension` completes an interrupted one."""
    loc = Location.of(store)
    info = StoreInfo(loc, allow_extending=True)
    if info.extending is not None:
        finish_extension(loc)
        info = StoreInfo(loc)
    if new_toys <= info.toys:
        return []
    loc.write_json(EXTEND_KEY, {"from": info.toys, "to": int(new_toys),
                                "chunks_before": info.n_chunks})
    _step("extend:intent")
    return finish_extension(loc)


def _reopened(chunks: Sequence[Chunk], old: int, chunk_size: int) -> list[Chunk]:
    """Old chunks that end mid-zarr-chunk (the last of each variant when ``old`` is not a
    multiple of the chunk size): an extension grows and recomputes them."""
    if old % chunk_size == 0:
        return []
    return [c for c in chunks if c.stop == old]


def finish_extension(store: str | Path | Location) -> list[Chunk]:
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
        _step(f"extend:resize:{name}")
    toy = g["toy"]
    for a in range(old, new, _COORD_CHUNK):
        b = min(new, a + _COORD_CHUNK)
        toy[a:b] = np.arange(a, b)
    _step("extend:toy")
    var, start, stop = (np.asarray(g[k][:n_before]) for k in CHUNK_VARS)
    before = [Chunk(i, int(v), int(a), int(b))
              for i, (v, a, b) in enumerate(zip(var, start, stop, strict=True))]
    reopened = _reopened(before, old, cs)
    new_chunks = _extension_chunks(nv, old, new, cs, n_before)
    n_after = n_before + len(new_chunks)
    for c in reopened:
        loc.delete(marker_key(c.index))
    _step("extend:unmark")
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
        _step(f"extend:table:{name}")
    loc.write_json(STATE_KEY, {"format_version": FORMAT_VERSION, "toys": new,
                               "chunks": n_after})
    _step("extend:state")
    loc.delete(EXTEND_KEY)
    return [Chunk(c.index, c.variant, c.start, min(c.start + cs, new)) for c in reopened] \
        + new_chunks


_GROUPS: dict[tuple[str, int], Any] = {}


def _writable_arrays(loc: Location, toys: int, chunk_size: int) -> dict[str, Any]:
    """The toy arrays opened for writing (cached per process and store shape), with
    ``write_empty_chunks`` so that an all-fill chunk (e.g. MINOS not run) still exists."""
    key = (loc.url, toys, chunk_size)
    if key not in _GROUPS:
        with zarr.config.set({"array.write_empty_chunks": True}):
            g = zarr.open_group(store=loc.zarr_store(), mode="r+")
            arrays = {name: g[name] for name in toy_var_names(g)}
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
                chunk_size: int) -> None:
    """Write one chunk's arrays into its region, then its done marker (with the sizes of
    the objects written, which ``status`` and ``run`` check)."""
    loc = Location.of(store)
    c = result.chunk
    arrays = _writable_arrays(loc, toys, chunk_size)
    for name, arr in arrays.items():
        arr[c.variant, c.start:c.stop] = result.arrays[name]
    keys = [chunk_key(name, c, chunk_size) for name in arrays]
    fs = loc.fs
    sizes = {name: int(fs.size(loc.path(k))) for name, k in zip(arrays, keys, strict=True)}
    loc.write_json(marker_key(c.index), {"chunk": c.index, "variant": c.variant,
                                         "start": c.start, "stop": c.stop, "sizes": sizes,
                                         "failed": result.n_failed})


def open_results(store: str | Path | Location,
                 storage_options: dict[str, Any] | None = None) -> xr.Dataset:
    """Open a result store as an ``xarray.Dataset`` (see docs/store-format.md).

    ``store`` is a local path or an fsspec URL; ``chunk_done`` is added from the done
    markers (``True`` where a chunk's results are in the store). The arrays are dask
    arrays whose blocks are whole store chunks; with a ``distributed.Client`` active,
    computing them runs on its workers (which must then reach the store).
    """
    import xarray as xr

    info = StoreInfo(store, storage_options=storage_options)
    # dask-backed, out of core: each dask block is a whole number of store chunks along
    # ``toy`` (about READ_BLOCK_TOYS toys), so a reduction streams over the store
    per = max(1, READ_BLOCK_TOYS // info.chunk_size) * info.chunk_size
    ds = xr.open_zarr(info.loc.zarr_store(read_only=True), consolidated=False,
                      chunks={"toy": per})
    ds = ds.isel(chunk=slice(0, info.n_chunks))
    rounds = info.loc.read_json(PRECISION_KEY)
    if rounds is not None:  # a precision-targeted run: how many rounds and toys it took
        ds.attrs["precision_rounds"] = json.dumps(rounds, sort_keys=True)
    # the small string coordinates (variant names and groups, hypotheses, parameter labels)
    # in memory: xarray's groupby and where(..., drop=True) need their values, not dask
    # arrays; the toy arrays stay lazy
    small = {name: ds[name].load() for name, c in ds.coords.items()
             if c.dtype.kind in "OUST" and "toy" not in c.dims}
    return ds.assign_coords(small).assign(chunk_done=("chunk", info.done()))


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
