"""What a new user does first with ``open_results``: group and select by variant labels."""

from __future__ import annotations

import numpy as np
import pytest

from toyengine import load_spec, open_results, run_study


# the study's variant 'same' repeats the nominal one on purpose (a group of its own)
@pytest.mark.filterwarnings("ignore::toyengine.errors.DegenerateVariantWarning")
def test_groupby_and_where_on_string_coordinates(client, data_dir, tmp_path):
    spec = load_spec(data_dir / "tcc_variation_small.yaml").with_overrides(toys=2)
    path = tmp_path / "v.zarr"
    assert run_study(spec, path, client=client, chunk_size=2, progress=None).complete
    ds = open_results(path)
    # the string coordinates are in memory (numpy), the toy arrays stay lazy (dask)
    for name in ("variant_name", "variant_group", "hypothesis", "param", "param_label"):
        assert ds[name].chunks is None, name
    assert ds.value.chunks is not None
    # groupby over a string coordinate: one group per distinct group name
    means = ds.value.groupby("variant_group").mean(...).compute()
    assert sorted(means.variant_group.values) == sorted(
        {"nominal", "identical", "resolution scale", "resolution model"})
    # where(..., drop=True) keeps only the selected variant
    sel = ds.value.where(ds.variant_name == "student_t", drop=True)
    assert list(sel.variant_name.values) == ["student_t"]
    np.testing.assert_array_equal(sel.isel(variant=0).values,
                                  ds.value.isel(variant=3).values)
