"""Record what an empty store of some studies holds (one command).

    PYTHONPATH=$PWD python tests/data/make_store_metadata.py

For each study in :data:`STUDIES` (shrunk as for the reference stores,
``make_reference_stores.small_spec``, in chunks of 2 toys),
:func:`toyengine.store.results.create_store` makes an empty store; every object outside the
control folder is saved to ``tests/data/store_metadata.json``: a ``zarr.json`` as its parsed
JSON (the root attributes that vary with the machine or the study file's text,
:data:`VARYING_ATTRS`, left out), any other object as the SHA-256 of its bytes.
``tests/test_store_metadata.py`` creates the same stores and requires the same objects: the
store format does not change without this file changing with it (in the same commit, on
purpose).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "store_metadata.json"
#: studies whose stores cover every kind of array: pulls, significance with a look-elsewhere
#: scan, importance sampling, sWeights, variants with groups, a Dalitz model
STUDIES = ("examples/hello", "examples/tcc_mass1d", "examples/sweighted_pulls",
           "examples/bkpipi_model_variation", "tcc/significance", "tcc/model_variation",
           "zc4100/significance")
#: root attributes that depend on where and with which release the store was made, or on
#: the study file's exact text (its comments and fit settings: not the layout)
VARYING_ATTRS = ("toyengine_version", "study_dir", "study_yaml", "spec_digest")


def empty_store(study: str, where: Path) -> dict[str, Any]:
    """Create the shrunk ``study``'s empty store in ``where``; its objects as recorded."""
    from make_reference_stores import small_spec

    from toyengine.store.results import create_store
    from toyengine.study.plan import Plan

    spec = small_spec(ROOT / "studies" / f"{study}.yaml")
    store = where / (study.replace("/", "__") + ".zarr")
    create_store(store, Plan.of(spec), 2)
    return store_objects(store)


def store_objects(store: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in sorted(store.rglob("*")):
        key = p.relative_to(store).as_posix()
        if p.is_dir() or key.startswith("_toyengine/"):
            continue
        data = p.read_bytes()
        if p.name == "zarr.json":
            meta = json.loads(data)
            if key == "zarr.json":
                for a in VARYING_ATTRS:
                    meta["attributes"].pop(a, None)
            out[key] = meta
        else:
            out[key] = hashlib.sha256(data).hexdigest()
    return out


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    with tempfile.TemporaryDirectory() as tmp:
        got = {s: empty_store(s, Path(tmp)) for s in STUDIES}
    OUT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({sum(len(v) for v in got.values())} objects)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
