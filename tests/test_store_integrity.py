"""Store integrity: checksummed chunks, status/verify over missing or damaged chunks,
``run`` recomputing exactly those (issue 15)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from toyengine import load_spec, run_study
from toyengine.cli import main
from toyengine.store import StoreInfo

ROOT = Path(__file__).parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
#: every variable except the one that measures the machine (fit wall time)
COMPARED = ["value", "error", "minos_lower", "minos_upper", "nll", "valid", "edm", "nfcn",
            "status", "gof", "n_events", "truth", "reference", "chunk_variant", "chunk_start",
            "chunk_stop"]


def assert_same_store(a, b):
    da, db = xr.open_zarr(a, consolidated=False), xr.open_zarr(b, consolidated=False)
    assert dict(da.sizes) == dict(db.sizes)
    for v in COMPARED:
        np.testing.assert_array_equal(da[v].values, db[v].values, err_msg=v)
    assert StoreInfo(a).done().all() and StoreInfo(b).done().all()


@pytest.fixture(scope="module")
def spec():
    return load_spec(HELLO).with_overrides(toys=40)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spec, client):
    path = tmp_path_factory.mktemp("ref") / "ref.zarr"
    report = run_study(spec, path, client=client, chunk_size=10, progress=None)
    assert report.complete and report.chunks_run == 4
    return path


def test_chunks_are_checksummed(reference):
    meta = json.loads((reference / "value" / "zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]][-1] == "crc32c"


def damage(store: Path) -> None:
    """Delete chunk 1's `value` object and truncate chunk 2's `nll` object."""
    (store / "value" / "c" / "0" / "1" / "0" / "0").unlink()
    nll = store / "nll" / "c" / "0" / "2" / "0"
    nll.write_bytes(nll.read_bytes()[: nll.stat().st_size // 2])


def test_status_verify_and_run_repair(tmp_path, spec, client, reference, capsys):
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    damage(store)

    assert main(["status", str(store), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] is False
    assert out["chunks_done"] == 2
    assert len(out["damaged_chunks"]) == 2
    assert "toys 10-19" in out["damaged_chunks"][0] and "missing" in out["damaged_chunks"][0]
    assert "toys 20-29" in out["damaged_chunks"][1]

    assert main(["verify", str(store)]) == 1
    text = capsys.readouterr().out
    assert "toys 10-19" in text and "toys 20-29" in text
    assert "2 missing or corrupt" in text
    assert StoreInfo(store).done().tolist() == [True, False, False, True]

    report = run_study(spec, store, client=client, progress=None)
    assert report.complete
    assert report.chunks_run == 2 and report.chunks_skipped == 2
    assert_same_store(store, reference)
    assert main(["verify", str(store)]) == 0


def test_run_repairs_without_verify(tmp_path, spec, client, reference):
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    damage(store)
    report = run_study(spec, store, client=client, progress=None)
    assert report.complete and report.chunks_run == 2
    assert len(report.repaired) == 2 and "toys 10-19" in report.repaired[0]
    assert_same_store(store, reference)


def test_bit_flip_found_by_verify_checksum(tmp_path, spec, client, reference, capsys):
    """Same size, one byte changed: only the checksum can tell; verify reads it."""
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    obj = store / "value" / "c" / "0" / "3" / "0" / "0"
    raw = bytearray(obj.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    obj.write_bytes(bytes(raw))
    assert main(["verify", str(store)]) == 1
    assert "toys 30-39" in capsys.readouterr().out
    report = run_study(spec, store, client=client, progress=None)
    assert report.chunks_run == 1
    assert_same_store(store, reference)


def test_status_of_complete_store(reference, capsys):
    assert main(["status", str(reference), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] is True and out["damaged_chunks"] == []
    assert out["toys_done"] == 40
