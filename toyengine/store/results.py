"""The result store: a zarr (v3) group in xarray's encoding, one region per chunk.

Layout and attributes are documented in ``docs/store-format.md``. The store is created
with every toy present and marked "not done" (NaN values, ``status = 0``); each finished
chunk is written into its own ``(variant, toy)`` region and then flagged in ``chunk_done``.
A crash between the two leaves the chunk "not done", and its re-run writes the identical
values again. Plain ``xarray.open_zarr(path)`` reads it; no pickled or object data.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr
import zarr

from .._version import __version__
from ..errors import StoreError
from ..study.recipe import Chunk, ChunkResult, scan_plan
from ..study.spec import StudySpec

__all__ = ["FORMAT_VERSION", "StoreInfo", "create_store", "extend_store", "mark_done",
           "open_results", "plan_chunks", "read_chunks", "spec_of_store", "store_info",
           "write_chunk"]

FORMAT_VERSION = 1
#: variables with dims (variant, toy, ...) written per chunk
TOY_VARS = {
    "value": ("hypothesis", "param"), "error": ("hypothesis", "param"),
    "minos_lower": ("hypothesis", "param"), "minos_upper": ("hypothesis", "param"),
    "nll": ("hypothesis",), "valid": ("hypothesis",), "edm": ("hypothesis",),
    "nfcn": ("hypothesis",), "fit_time": ("hypothesis",), "status": ("hypothesis",),
    "gof": ("hypothesis",), "n_best": ("hypothesis",), "global_obs": ("param",), "n_events": (),
}
_FILL = {"valid": False, "nfcn": 0, "status": 0, "n_best": 0, "n_events": -1}
_DTYPE = {"valid": bool, "nfcn": np.int64, "status": np.int8, "n_best": np.int64,
          "n_events": np.int64}


def plan_chunks(n_variants: int, toys: int, chunk_size: int, start: int = 0,
                first_index: int = 0) -> list[Chunk]:
    """Chunks of at most ``chunk_size`` toys covering toys ``[start, toys)`` of every
    variant; chunks never span two variants."""
    out = []
    idx = first_index
    for v in range(n_variants):
        for a in range(start, toys, chunk_size):
            out.append(Chunk(idx, v, a, min(a + chunk_size, toys)))
            idx += 1
    return out


def _toy_vars(spec: StudySpec) -> tuple[dict[str, tuple[str, ...]], int]:
    """The per-toy variables of ``spec``'s store and its number of scan points: ``scan_t``
    (dims ``variant, toy, scan_point``) only for a study with a look-elsewhere scan."""
    plan = scan_plan(spec)
    if plan is None:
        return TOY_VARS, 0
    return {**TOY_VARS, "scan_t": ("scan_point",)}, len(plan[1])


def _toy_block(spec: StudySpec, params: Sequence[str], toys: range,
               chunk_size: int) -> dict[str, xr.Variable]:
    nv, nh, npar = len(spec.variants), len(spec.hypotheses), len(params)
    toy_vars, n_scan = _toy_vars(spec)
    sizes = {"variant": nv, "toy": len(toys), "hypothesis": nh, "param": npar,
             "scan_point": n_scan}
    out = {}
    for name, extra in toy_vars.items():
        dims = ("variant", "toy", *extra)
        shape = tuple(sizes[d] for d in dims)
        arr = np.full(shape, _FILL.get(name, np.nan), dtype=_DTYPE.get(name, float))
        out[name] = xr.Variable(dims, arr)
    return out


def _encoding(ds: xr.Dataset, chunk_size: int) -> dict[str, dict]:
    enc = {}
    for name in ds.data_vars:
        if "toy" not in ds[name].dims:
            continue
        shape = ds[name].shape
        enc[name] = {"chunks": (1, min(chunk_size, shape[1]), *shape[2:])}
    return enc


def create_store(path: str | Path, spec: StudySpec, params: Sequence[str], truth: np.ndarray,
                 reference: np.ndarray, chunk_size: int,
                 degenerate: Sequence[tuple[str, str]] = ()) -> list[Chunk]:
    """Create an empty store for ``spec``; returns its chunks. Refuses to overwrite.
    ``degenerate``: (variant, same-density variant) pairs, recorded as an attribute."""
    path = Path(path)
    if path.exists():
        msg = f"store {path} already exists"
        raise StoreError(msg)
    chunks = plan_chunks(len(spec.variants), spec.toys, chunk_size)
    data = _toy_block(spec, params, range(spec.toys), chunk_size)
    data["truth"] = xr.Variable(("variant", "param"), np.asarray(truth, dtype=float))
    data["reference"] = xr.Variable(("param",), np.asarray(reference, dtype=float))
    data["chunk_variant"] = xr.Variable(("chunk",), np.array([c.variant for c in chunks]))
    data["chunk_start"] = xr.Variable(("chunk",), np.array([c.start for c in chunks]))
    data["chunk_stop"] = xr.Variable(("chunk",), np.array([c.stop for c in chunks]))
    data["chunk_done"] = xr.Variable(("chunk",), np.zeros(len(chunks), dtype=bool))
    coords = {
        "variant": np.arange(len(spec.variants)),
        "variant_name": ("variant", np.array([v.name for v in spec.variants], dtype=object)),
        "variant_group": ("variant", np.array([v.group for v in spec.variants], dtype=object)),
        "variant_separate": ("variant", np.array([v.separate for v in spec.variants])),
        "toy": np.arange(spec.toys),
        "hypothesis": np.array(spec.hypotheses, dtype=object),
        "param": np.array(params, dtype=object),
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
    plan = scan_plan(spec)
    if plan is not None:
        from ..study.recipe import lee_local_dof
        from ..study.spec import build_model

        h1 = build_model(spec, spec.variants[0], spec.test["h1"])
        h0 = build_model(spec, spec.variants[0], spec.test["h0"])
        dof, one_sided = lee_local_dof(h1, set(h0.parameters.names))
        attrs.update({"scan_parameters": " ".join(plan[0]),
                      "scan_grid": [int(k) for k in spec.fit["scan"]["grid"]],
                      "lee_dof": dof, "lee_one_sided": int(one_sided)})
        data["scan_points"] = xr.Variable(("scan_point", "scan_parameter"), plan[1])
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    tmp = path.with_name(path.name + ".creating")
    if tmp.exists():
        shutil.rmtree(tmp)
    ds.to_zarr(tmp, mode="w-", encoding=_encoding(ds, chunk_size), zarr_format=3,
               consolidated=False)
    tmp.rename(path)  # a store either exists complete or not at all
    return chunks


class StoreInfo:
    """What the runner needs to know about an existing store."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.group = zarr.open_group(str(self.path), mode="r")
        except Exception as exc:
            msg = f"{self.path} is not a toyengine result store ({exc})"
            raise StoreError(msg) from None
        self.attrs = dict(self.group.attrs)
        if self.attrs.get("format_version") != FORMAT_VERSION:
            msg = (f"{self.path}: format_version {self.attrs.get('format_version')!r} is not "
                   f"{FORMAT_VERSION}; is it a toyengine store?")
            raise StoreError(msg)
        self.toys = int(self.group["toy"].shape[0])
        self.n_variants = int(self.group["variant"].shape[0])
        self.chunk_size = int(self.attrs["chunk_size"])
        self.params = tuple(str(p) for p in self.group["param"][:])

    def chunks(self) -> list[Chunk]:
        g = self.group
        var, start, stop = g["chunk_variant"][:], g["chunk_start"][:], g["chunk_stop"][:]
        return [Chunk(i, int(v), int(a), int(b))
                for i, (v, a, b) in enumerate(zip(var, start, stop, strict=True))]

    def done(self) -> np.ndarray:
        return np.asarray(self.group["chunk_done"][:], dtype=bool)


def spec_of_store(path: str | Path) -> StudySpec:
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


def store_info(path: str | Path) -> StoreInfo:
    return StoreInfo(path)


def extend_store(path: str | Path, spec: StudySpec, new_toys: int) -> list[Chunk]:
    """Append toys ``[old, new_toys)`` (not done) to every variant; returns the new chunks.
    The toys already in the store are untouched."""
    info = StoreInfo(path)
    old = info.toys
    if new_toys <= old:
        return []
    n_chunks = len(info.chunks())
    new_chunks = plan_chunks(info.n_variants, new_toys, info.chunk_size, start=old,
                             first_index=n_chunks)
    block = _toy_block(spec, info.params, range(old, new_toys), info.chunk_size)
    ds_toys = xr.Dataset(block, coords={"toy": np.arange(old, new_toys)})
    ds_toys.to_zarr(path, mode="a", append_dim="toy", zarr_format=3, consolidated=False)
    ds_chunks = xr.Dataset({
        "chunk_variant": ("chunk", np.array([c.variant for c in new_chunks])),
        "chunk_start": ("chunk", np.array([c.start for c in new_chunks])),
        "chunk_stop": ("chunk", np.array([c.stop for c in new_chunks])),
        "chunk_done": ("chunk", np.zeros(len(new_chunks), dtype=bool)),
    })
    ds_chunks.to_zarr(path, mode="a", append_dim="chunk", zarr_format=3, consolidated=False)
    # xarray's append rewrites the group attributes from the appended Dataset: restore ours
    zarr.open_group(str(path), mode="r+").attrs.update(info.attrs)
    return new_chunks


def write_chunk(group: zarr.Group, result: ChunkResult) -> None:
    """Write one chunk's arrays into its region, then flag it done."""
    c = result.chunk
    for name, arr in result.arrays.items():
        group[name][c.variant, c.start:c.stop] = arr
    mark_done(group, c.index)


def mark_done(group: zarr.Group, index: int) -> None:
    group["chunk_done"][index] = True


def read_chunks(path: str | Path) -> tuple[list[Chunk], np.ndarray]:
    info = StoreInfo(path)
    return info.chunks(), info.done()


def open_results(path: str | Path) -> xr.Dataset:
    """Open a result store as an ``xarray.Dataset`` (see docs/store-format.md)."""
    path = Path(path)
    if not path.exists():
        msg = f"no result store at {path}"
        raise StoreError(msg)
    StoreInfo(path)  # validates the format
    # chunks=None: lazily indexed numpy arrays, not dask — reads stay in this process even
    # when a distributed Client is active (workers may not see the store)
    return xr.open_zarr(path, consolidated=False, chunks=None)


def find_unreadable_chunk(path: str | Path) -> tuple[str, str, str] | None:
    """The first chunk of the store at ``path`` that cannot be read, as ``(array name,
    chunk key, error)`` (e.g. ``("value", "c/0/2/0/0", "...")``), or ``None``. Reads every
    chunk: call it after a read failed, to say where the store is damaged."""
    group = zarr.open_group(str(path), mode="r")
    for name, arr in group.arrays():
        for idx in np.ndindex(*arr.cdata_shape):
            try:
                arr.get_block_selection(idx)
            except Exception as exc:  # noqa: BLE001 - any decoder error marks the chunk
                return name, "c/" + "/".join(str(i) for i in idx), str(exc)
    return None
