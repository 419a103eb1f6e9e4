"""Regenerate the reference stores of every study in ``studies/`` (one command).

    PYTHONPATH=$PWD python tests/data/make_reference_stores.py            # all studies
    PYTHONPATH=$PWD python tests/data/make_reference_stores.py tcc/pulls  # some of them

Each study is shrunk to a few toys and a few variants (:func:`small_spec`), run with one
worker into a temporary store, and the store's arrays (every data variable and coordinate
except the fields that measure the machine, :data:`MACHINE_FIELDS`) and attributes are
saved to ``tests/data/reference_stores/<dir>__<study>.npz``. ``tests/test_reference_stores.py``
rebuilds the same small studies with other worker counts and chunk sizes and compares the
stores bit for bit. Run this script again whenever a change to generation or fitting is
*meant* to change the numbers, and commit the new ``.npz`` files with that change.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from toyengine.study.schema import machine_fields

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "studies"
OUT = Path(__file__).resolve().parent / "reference_stores"

#: store variables that measure the machine, not the toy (the record schema's ``machine``
#: fields): never compared
MACHINE_FIELDS = machine_fields()
#: attributes that legitimately differ between runs of the same study (``format_version``
#: is the layout of the store, not its numbers: format 2 moved the done flags into markers;
#: ``study_dir`` is where the study file lies on this machine, provenance for ``toyengine data``)
VOLATILE_ATTRS = ("toyengine_version", "chunk_size", "format_version", "study_dir")
#: toys per variant of the small studies, by study folder (kinds that refit one data set
#: keep their 1); Dalitz fits cost seconds each
TOYS = {"tcc": 4, "zc4100": 2, "examples": 4}
#: multi-start fits keep at most this many starts (still more than one: the start streams
#: are part of what must reproduce)
MAX_STARTS = 2
#: profile starts (``fit.profile``) keep at most this many full fits from the profile grid;
#: the grid itself stays (its fits float a few parameters and cost milliseconds, a full
#: Dalitz fit from each extra start costs as much as the null fit)
MAX_PROFILE_BEST = 1
#: chunk size of the reference run (the test also runs other sizes)
CHUNK_SIZE = 2
#: at most this many listed variants (first ones, plus the last: often a special case)
MAX_VARIANTS = {"tcc": 4, "zc4100": 3, "examples": 4}
#: random variants (``count``) are cut to two draws, or to one when the study lists several
MAX_COUNT = 2


def studies() -> list[Path]:
    """Every study file under ``studies/``."""
    return sorted(STUDIES.glob("*/*.yaml"))


def key(path: Path) -> str:
    """``studies/tcc/pulls.yaml`` -> ``tcc__pulls``."""
    return f"{path.parent.name}__{path.stem}"


def small_spec(path: Path) -> Any:
    """The study at ``path`` shrunk for a reference store: few toys, few variants."""
    from toyengine.study.spec import StudySpec

    raw = yaml.safe_load(path.read_text())
    folder = path.parent.name
    if raw.get("data") is None:
        raw["toys"] = TOYS[folder]
    raw.pop("chunk_size", None)
    if raw.get("fit", {}).get("starts", 1) > MAX_STARTS:
        raw["fit"]["starts"] = MAX_STARTS
    prof = raw.get("fit", {}).get("profile")
    if prof and prof.get("best", 2) > MAX_PROFILE_BEST:
        prof["best"] = MAX_PROFILE_BEST
    variants = raw.get("variants")
    if variants:
        nmax = MAX_VARIANTS[folder]
        if len(variants) > nmax:
            variants = [*variants[: nmax - 1], variants[-1]]
        for v in variants:
            if "count" in v:
                v["count"] = min(v["count"], MAX_COUNT if len(variants) == 1 else 1)
        raw["variants"] = variants
    text = yaml.safe_dump(raw, sort_keys=False)
    return StudySpec.from_text(text, str(path), str(path.parent))


def store_arrays(store: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays (strings as fixed-width unicode) and the comparable attributes of a
    store; ``attrs["__dtypes__"]`` holds each array's dtype as stored."""
    import xarray as xr

    from toyengine.store import StoreInfo

    ds = xr.open_zarr(store, consolidated=False, chunks=None)
    if "chunk_done" not in ds:  # format 2: one done marker per chunk, not an array
        ds = ds.assign(chunk_done=("chunk", StoreInfo(store).done()))
    arrays, dtypes = {}, {}
    for name in [*ds.data_vars, *ds.coords]:
        if name in MACHINE_FIELDS:
            continue
        a = np.asarray(ds[name].values)
        dtypes[str(name)] = str(a.dtype)
        if a.dtype.kind in "OT":  # object or StringDType
            a = np.array(a.tolist(), dtype=str)
        arrays[str(name)] = a
    attrs = {k: v for k, v in ds.attrs.items() if k not in VOLATILE_ATTRS}
    attrs["__dtypes__"] = dtypes
    return arrays, attrs


def build_store(path: Path, store: Path, *, client: Any = None, workers: int = 1,
                chunk_size: int = CHUNK_SIZE) -> Path:
    """Run the small version of study ``path`` into ``store``."""
    from toyengine.run.runner import run_study

    report = run_study(small_spec(path), store, workers=workers, client=client,
                       chunk_size=chunk_size, progress=None)
    if not report.complete:
        msg = f"{path}: run incomplete: {report.errors}"
        raise RuntimeError(msg)
    return store


def save(path: Path, store: Path) -> Path:
    arrays, attrs = store_arrays(store)
    out = OUT / f"{key(path)}.npz"
    np.savez_compressed(out, __attrs__=np.array(json.dumps(attrs, sort_keys=True)), **arrays)
    return out


def main(argv: list[str]) -> int:
    import time

    from distributed import Client, LocalCluster

    OUT.mkdir(exist_ok=True)
    chosen = [p for p in studies() if not argv or any(a in str(p) for a in argv)]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client, \
            tempfile.TemporaryDirectory() as tmp:
        for p in chosen:
            t0 = time.perf_counter()
            store = build_store(p, Path(tmp) / f"{key(p)}.zarr", client=client)
            out = save(p, store)
            print(f"{out.relative_to(ROOT)}: {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
