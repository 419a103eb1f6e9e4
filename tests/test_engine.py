"""Study engine: seeds, run_chunk, store, Dask runner, resume, crashes (issue 3)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from toyengine import load_spec, open_results, run_study
from toyengine.errors import StoreError
from toyengine.store import FORMAT_VERSION, StoreInfo
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk

DATA = Path(__file__).parent / "data"
RESULT_VARS = ["value", "error", "nll", "valid", "edm", "nfcn", "status", "n_events"]


def assert_same_results(a, b):
    a, b = xr.open_zarr(a, consolidated=False), xr.open_zarr(b, consolidated=False)
    for v in RESULT_VARS:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)
    np.testing.assert_array_equal(a["truth"].values, b["truth"].values)


@pytest.fixture(scope="module")
def spec():
    return load_spec(DATA / "tcc_small.yaml")


@pytest.fixture(scope="module")
def reference_store(tmp_path_factory, spec, client):
    path = tmp_path_factory.mktemp("ref") / "ref.zarr"
    report = run_study(spec, path, client=client, chunk_size=24, progress=None)
    assert report.complete
    return path


def test_run_chunk_is_pure_and_chunking_free(spec):
    plan = Plan.of(spec)
    whole = run_chunk(plan, Chunk(0, 0, 0, 6))
    again = run_chunk(plan, Chunk(0, 0, 0, 6))
    part = run_chunk(plan, Chunk(5, 0, 4, 6))
    for k in whole.arrays:
        if k == "fit_time":
            continue
        np.testing.assert_array_equal(whole.arrays[k], again.arrays[k])
        np.testing.assert_array_equal(whole.arrays[k][4:6], part.arrays[k])


def test_store_opens_with_plain_xarray_and_has_no_object_data(reference_store):
    ds = xr.open_zarr(reference_store, consolidated=False)
    assert set(ds.dims) == {"variant", "toy", "hypothesis", "param", "chunk"}
    assert ds["value"].dims == ("variant", "toy", "hypothesis", "param")
    assert list(ds["param"].values[:4]) == ["n_sig", "delta_m", "gamma", "n_bkg"]
    assert ds.attrs["format_version"] == FORMAT_VERSION and ds.attrs["root_seed"] == 7
    assert "builder: tcc" in ds.attrs["study_yaml"]
    assert bool(open_results(reference_store)["chunk_done"].all())
    assert bool((ds["status"] == 1).all())
    g = zarr.open_group(str(reference_store), mode="r")
    for name, arr in g.arrays():
        dtype_name = type(arr.metadata.data_type).__name__
        assert arr.dtype != np.dtype(object) or "String" in dtype_name, name
        assert "pickle" not in str(arr.metadata.to_dict()).lower(), name


# (2, 5) repeats (2, 7) with other chunk boundaries; the reference-store matrix covers more
@pytest.mark.parametrize(("workers", "chunk_size"), [
    pytest.param(2, 5, marks=pytest.mark.slow), (2, 7), (1, 3)])
def test_same_results_for_any_worker_count_and_chunk_size(tmp_path, spec, reference_store,
                                                          workers, chunk_size):
    path = tmp_path / "s.zarr"
    assert run_study(spec, path, workers=workers, chunk_size=chunk_size, progress=None).complete
    assert_same_results(path, reference_store)


def test_worker_killed_mid_run(tmp_path, spec, reference_store):
    """SIGKILL one worker while chunks are in flight: the run completes, identical."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        path = tmp_path / "killed.zarr"
        out = {}

        def go():
            out["report"] = run_study(spec, path, client=client, chunk_size=1, progress=None)

        th = threading.Thread(target=go)
        th.start()
        # wait until some but not all chunks are done, then kill a worker
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                done = StoreInfo(path).done()
            except StoreError:  # not created yet
                done = np.zeros(1)
            if done.sum() >= 3:
                break
            time.sleep(0.05)
        assert not done.all(), "run finished before the kill; make the study longer"
        os.kill(pids[0], signal.SIGKILL)
        th.join(120)
    assert out["report"].complete
    assert_same_results(path, reference_store)


def test_client_killed_then_resumed(tmp_path, reference_store):
    """SIGKILL the whole `toyengine run` process group mid-run; rerun resumes."""
    path = tmp_path / "resumed.zarr"
    cmd = [sys.executable, "-m", "toyengine.cli", "run", str(DATA / "tcc_small.yaml"),
           "--store", str(path), "--workers", "1", "--chunk-size", "1", "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    done = np.zeros(1)
    while time.monotonic() < deadline:
        try:
            done = StoreInfo(path).done()
        except StoreError:  # store being created
            done = np.zeros(1)
        if done.sum() >= 4:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert 4 <= done.sum() < len(done)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    assert "already done" in res.stdout
    assert_same_results(path, reference_store)


def test_extend_with_more_toys_keeps_existing(tmp_path, spec, reference_store, client):
    path = tmp_path / "ext.zarr"
    assert run_study(spec.with_overrides(toys=10), path, client=client, chunk_size=4,
                     progress=None).complete
    first = open_results(path)["value"].values.copy()
    assert run_study(spec, path, client=client, progress=None).complete
    ds = open_results(path)
    assert ds.sizes["toy"] == 24
    np.testing.assert_array_equal(ds["value"].values[:, :10], first)
    assert_same_results(path, reference_store)


def test_store_from_other_spec_is_refused(tmp_path, spec, reference_store):
    with pytest.raises(StoreError, match="the seed differs"):
        run_study(spec.with_overrides(seed=8), reference_store, workers=1, progress=None)


def test_failed_fits_are_recorded_and_counted(tmp_path, client):
    from toyengine.summary import render_summary

    spec = load_spec(DATA / "tiny_failing.yaml")
    path = tmp_path / "fail.zarr"
    report = run_study(spec, path, client=client, progress=None)
    assert report.complete
    ds = open_results(path)
    status = ds["status"].values.ravel()
    assert (status == 0).sum() == 0, "every toy is in the store"
    n_failed = int((status != 1).sum())
    assert 0 < n_failed < len(status)
    assert report.failed_fits == n_failed
    # the summary's bookkeeping counts the same failed fits, per variant × hypothesis
    failed = json.loads(render_summary(ds, "json"))["failed"]
    assert sum(r["n_failed"] for r in failed) == n_failed
    assert sum(r["n_done"] for r in failed) == len(status)
