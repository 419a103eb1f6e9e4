"""The store's layout is the one recorded in ``tests/data/store_metadata.json``: every
``zarr.json`` and every small array's bytes of an empty store of several studies, as
xarray's ``Dataset.to_zarr`` wrote them before the store was created without xarray
(rerun ``tests/data/make_store_metadata.py`` when the format is meant to change)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(HERE))
import make_store_metadata as meta  # noqa: E402

RECORDED = json.loads((HERE / "store_metadata.json").read_text())


@pytest.mark.parametrize("study", meta.STUDIES)
def test_empty_store_has_the_recorded_objects(study, tmp_path):
    got = meta.empty_store(study, tmp_path)
    want = RECORDED[study]
    assert sorted(got) == sorted(want)
    differ = [k for k in want if got[k] != want[k]]
    assert not differ, f"{study}: {differ[0]}: {got[differ[0]]} != {want[differ[0]]}"


def test_the_comparison_sees_a_changed_attribute(tmp_path):
    """The check above can fail: one coordinate's attribute changed is a difference."""
    got = meta.empty_store("examples/hello", tmp_path)
    got["value/zarr.json"]["attributes"]["coordinates"] = "param_label"
    assert got["value/zarr.json"] != RECORDED["examples/hello"]["value/zarr.json"]


def test_xarray_opens_the_empty_store_as_its_dataset(tmp_path):
    import xarray as xr

    meta.empty_store("tcc/model_variation", tmp_path)
    ds = xr.open_zarr(tmp_path / "tcc__model_variation.zarr", consolidated=False)
    assert set(ds["value"].coords) >= {"param_label", "param_unit", "variant_name"}
    assert ds["value"].dims == ("variant", "toy", "hypothesis", "param")
    assert bool(np.isnan(ds["value"].values).all())
    assert int(ds["n_events"].values.min()) == -1
    assert ds["variant_name"].dtype.kind in "OUT"
    assert int(ds["chunk_stop"].values.max()) == ds.sizes["toy"]
