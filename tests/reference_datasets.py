"""The committed reference stores (``tests/data/reference_stores/*.npz``) as results Datasets.

Each ``.npz`` holds a small store's arrays and attributes (written by
``tests/data/make_reference_stores.py``); the dims are those the store gives them
(``toyengine.store.results``): per-toy fields ``("variant", "toy", *field.dims)``, the
coordinates along their own dim. The summaries of these Datasets are the real summaries of
every reference study, at a few toys each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from toyengine.study.schema import field

sys.path.insert(0, str(Path(__file__).parent / "data"))
import make_reference_stores as ref  # noqa: E402

#: dims of the store's arrays that are not per-toy fields
_DIMS = {
    "variant": ("variant",), "variant_name": ("variant",), "variant_group": ("variant",),
    "variant_separate": ("variant",), "toy": ("toy",), "hypothesis": ("hypothesis",),
    "param": ("param",), "param_label": ("param",), "param_unit": ("param",),
    "injected": ("injected",), "truth": ("variant", "param"), "reference": ("param",),
    "scan_points": ("scan_point", "scan_parameter"), "chunk_variant": ("chunk",),
    "chunk_start": ("chunk",), "chunk_stop": ("chunk",), "chunk_done": ("chunk",),
}
_COORDS = ("variant", "variant_name", "variant_group", "variant_separate", "toy", "hypothesis",
           "param", "param_label", "param_unit", "injected")


def reference_keys() -> list[str]:
    """``<dir>__<study>`` of every committed reference store."""
    return sorted(p.stem for p in ref.OUT.glob("*.npz"))


def reference_dataset(key: str) -> xr.Dataset:
    """The reference store ``key`` as the Dataset :func:`toyengine.open_results` gives."""
    with np.load(ref.OUT / f"{key}.npz") as f:
        arrays = {k: f[k] for k in f.files}
    attrs = json.loads(str(arrays.pop("__attrs__")))
    attrs.pop("__dtypes__", None)
    data, coords = {}, {}
    for name, a in arrays.items():
        dims = _DIMS.get(name) or ("variant", "toy", *field(name).dims)
        if a.dtype.kind == "U":
            a = a.astype(object)
        (coords if name in _COORDS else data)[name] = (dims, a)
    return xr.Dataset(data, coords=coords, attrs=attrs)
