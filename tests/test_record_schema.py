"""The one record schema: the recipe, the store, the synthetic Datasets and the docs agree."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from toyengine.store import create_store, open_results
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk
from toyengine.study.schema import RECORD_FIELDS, Field, machine_fields, study_fields
from toyengine.study.spec import load_spec
from toyengine.summary.testing import make_results_dataset

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "store-format.md"
STUDY = ROOT / "tests" / "data" / "tcc_small.yaml"
UNITS = {"param": "the parameter's", "s": "s", "": ""}


def _doc_rows() -> dict[str, list[str]]:
    """The per-toy table of docs/store-format.md: variable -> its other five cells."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def _fill_text(f: Field) -> str:
    return "NaN" if isinstance(f.fill, float) and math.isnan(f.fill) else str(f.fill)


def _is_fill(values: np.ndarray, f: Field) -> bool:
    if isinstance(f.fill, float) and math.isnan(f.fill):
        return bool(np.all(np.isnan(values)))
    return bool(np.all(values == f.fill))


def test_docs_table_is_the_schema():
    rows = _doc_rows()
    assert list(rows) == [f.name for f in RECORD_FIELDS]
    for f in RECORD_FIELDS:
        dims, dtype, fill, unit, meaning = rows[f.name]
        assert dims == ", ".join(("variant", "toy", *f.dims)), f.name
        assert dtype == f.dtype.name, f.name
        assert fill == _fill_text(f), f.name
        assert unit == UNITS[f.unit], f.name
        assert meaning.endswith("**(machine)**") == f.machine, f.name
        assert meaning.startswith("studies with `fit.scan` only: ") == (f.requires == "scan")
        assert meaning.startswith("studies with `importance` only: ") == (
            f.requires == "importance")
        assert meaning.startswith("studies with discriminants only: ") == (
            f.requires == "sweights")
        assert f.doc in meaning, f.name


def test_only_fit_time_measures_the_machine():
    assert machine_fields() == ("fit_time",)
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    import make_reference_stores as ref

    assert ref.MACHINE_FIELDS == ("fit_time",)


def test_optional_fields_follow_the_study_features():
    assert "scan_t" not in {f.name for f in study_fields()}
    assert "sampled_from" not in {f.name for f in study_fields({"scan"})}
    assert [f.name for f in study_fields({"scan", "importance", "sweights"})] == [
        f.name for f in RECORD_FIELDS]
    assert "error_naive" not in {f.name for f in study_fields({"scan", "importance"})}
    assert [f.name for f in study_fields({"importance"})][-2:] == ["sampled_from",
                                                                    "log_ratio"]


def test_chunk_records_follow_the_schema():
    plan = Plan.of(load_spec(STUDY).with_overrides(toys=2))
    assert plan.fields == study_fields()
    res = run_chunk(plan, Chunk(0, 0, 0, 2))
    sizes = {"hypothesis": 1, "param": len(plan.params)}
    assert list(res.arrays) == [f.name for f in plan.fields]
    for f in plan.fields:
        arr = res.arrays[f.name]
        assert arr.dtype == f.dtype, f.name
        assert arr.shape == (2, *(sizes[d] for d in f.dims)), f.name


def test_store_and_synthetic_datasets_carry_every_field(tmp_path):
    plan = Plan.of(load_spec(STUDY).with_overrides(toys=3))
    create_store(tmp_path / "s.zarr", plan, 2)
    ds = open_results(tmp_path / "s.zarr", allow_incomplete=True)  # no chunk done yet
    synthetic = make_results_dataset(params=("a", "b"), hypotheses=("h",),
                                     value=np.zeros((1, 3, 1, 2)))
    for f in study_fields():
        dims = ("variant", "toy", *f.dims)
        assert ds[f.name].dims == dims and synthetic[f.name].dims == dims, f.name
        assert ds[f.name].dtype == f.dtype == synthetic[f.name].dtype, f.name
        # nothing written yet: every toy reads as the fill value
        assert _is_fill(ds[f.name].values, f), f.name
    assert "scan_t" not in ds and "scan_t" not in synthetic


def test_new_fields_record_what_the_fitter_knew():
    """``at_limit``, ``covar_ok`` and ``n_starts`` of a chunk are those of its fits."""
    plan = Plan.of(load_spec(STUDY).with_overrides(toys=2))
    res = run_chunk(plan, Chunk(0, 0, 0, 2))
    a = res.arrays
    fitted = a["status"] != 0
    assert fitted.all()
    assert (a["n_starts"][fitted] >= 1).all() and (a["n_starts"][~fitted] == 0).all()
    # a valid fit with HESSE run has its covariance
    np.testing.assert_array_equal(a["covar_ok"], a["valid"] & (a["status"] == 1))
    assert a["at_limit"].dtype == bool


OLD_STORE = ROOT / "tests" / "data" / "old_stores" / "format3_hello.zip"


def test_format_3_store_without_the_new_fields_still_reads(tmp_path, capsys):
    """A store written by the version before ``at_limit``/``covar_ok``/``n_starts`` (format 3;
    ``tests/data/old_stores/format3_hello.zip``: ``studies/examples/hello.yaml`` with 4 toys,
    made by that version with ``create_store``, ``run_chunk`` and ``write_chunk``) opens,
    verifies, summarises and resumes without them."""
    import shutil

    from toyengine.cli.main import main
    from toyengine.store import StoreInfo
    from toyengine.store.integrity import check_metadata, verify_store

    shutil.unpack_archive(OLD_STORE, tmp_path)
    path = tmp_path / "format3_hello.zarr"
    info = StoreInfo(path)
    assert info.format_version == 3 and info.done().all()
    assert not {"at_limit", "covar_ok", "n_starts"} & set(info.toy_vars)
    assert verify_store(info) == [] and check_metadata(info) == []
    ds = open_results(path)
    assert "at_limit" not in ds and int((ds["status"] == 1).sum()) == 4
    assert main(["summary", str(path)]) == 0
    assert capsys.readouterr().out.startswith("toyengine summary")
    # a resume (here: an extension by 2 toys) writes the old store's variables only
    assert main(["run", str(ROOT / "studies" / "examples" / "hello.yaml"), "--store",
                 str(path), "--toys", "6", "--workers", "1"]) == 0
    ds = open_results(path)
    assert ds.sizes["toy"] == 6 and int((ds["status"] == 1).sum()) == 6
    assert "at_limit" not in ds and StoreInfo(path).format_version == 3
