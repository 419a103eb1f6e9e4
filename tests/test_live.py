"""Live physics in the progress output and the status file of a running study."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from toyengine import load_spec, open_results, run_study
from toyengine.run.live import LivePhysics
from toyengine.store import read_status
from toyengine.store.status import STATUS_KEY
from toyengine.study.plan import Chunk
from toyengine.study.recipe import ChunkResult

DATA = Path(__file__).parent / "data"


def _chunk(value, error, nll, valid, variant=0):
    value = np.asarray(value, dtype=float)
    n = value.shape[0]
    return ChunkResult(Chunk(0, variant, 0, n), {
        "value": value, "error": np.asarray(error, dtype=float),
        "nll": np.asarray(nll, dtype=float), "valid": np.asarray(valid, dtype=bool),
        "status": np.where(np.asarray(valid), 1, 2).astype(np.int8)})


def test_running_numbers_by_hand():
    # pulls: (x − 1)/0.5 for x = 1.5, 0.5, 2.0 → 1, −1, 2 (mean 2/3, sample std √(7/3))
    lp = LivePhysics(kind="pulls", params=["a"], labels=["a [MeV]"], poi=["a"],
                     hypotheses=["nominal"], generate="nominal", truth=np.array([[1.0]]),
                     reference=np.array([1.0]), variant_names=["nominal"],
                     variant_groups=["nominal"])
    lp.add(_chunk([[[1.5]], [[0.5]], [[2.0]], [[9.0]]], np.full((4, 1, 1), 0.5),
                  np.zeros((4, 1)), [[True], [True], [True], [False]]))
    p = lp.pulls()["a"]
    assert p["n"] == 3 and p["mean"] == pytest.approx(2 / 3)
    assert p["width"] == pytest.approx(math.sqrt(7 / 3))
    assert p["mean_err"] == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3))
    assert "pull a [MeV] 0.67" in lp.text()
    # toy p-value: t = 2(nll0 − nll1) = 4, 1, 6; two of three at or above t_obs = 3
    sig = LivePhysics(kind="significance", params=["a"], labels=["a"], poi=["a"],
                      hypotheses=["H0", "H1"], generate="H0", truth=np.array([[np.nan]]),
                      reference=np.array([np.nan]), variant_names=["nominal"],
                      variant_groups=["nominal"], h0="H0", h1="H1", observed_t=3.0)
    sig.add(_chunk(np.zeros((3, 2, 1)), np.ones((3, 2, 1)),
                   [[2.0, 0.0], [0.5, 0.0], [3.0, 0.0]], np.ones((3, 2), bool)))
    pv = sig.pvalue()
    assert (pv["k"], pv["n"]) == (2, 3) and pv["p"] == pytest.approx(2 / 3)
    assert pv["lo"] < 2 / 3 < pv["hi"]
    # model variation: variant 1's mean is 0.3 above the nominal variant's
    mv = LivePhysics(kind="model_variation", params=["a"], labels=["a"], poi=["a"],
                     hypotheses=["default"], generate="truth", truth=np.zeros((2, 1)),
                     reference=np.zeros(1), variant_names=["nominal", "alt"],
                     variant_groups=["nominal", "alt"])
    mv.add(_chunk([[[1.0]], [[2.0]]], np.ones((2, 1, 1)), np.zeros((2, 1)),
                  np.ones((2, 1), bool), variant=0))
    mv.add(_chunk([[[1.3]], [[2.3]]], np.ones((2, 1, 1)), np.zeros((2, 1)),
                  np.ones((2, 1), bool), variant=1))
    sh = mv.shifts()["a"]["alt"]
    assert sh["shift"] == pytest.approx(0.3) and sh["error"] == pytest.approx(math.sqrt(0.5))
    assert "shift a: alt 0.3" in mv.text()


def test_progress_shows_running_pull_mean(tmp_path, client):
    spec = load_spec(DATA / "tcc_small.yaml").with_overrides(toys=6)
    out = io.StringIO()  # not a terminal: plain lines
    store = tmp_path / "p.zarr"
    report = run_study(spec, store, client=client, progress=out)
    assert report.complete
    text = out.getvalue()
    last = [ln for ln in text.splitlines() if ln.startswith("[tcc-small]")][-1]
    assert "6/6 toys" in last and "failed fits 0 (0.0%)" in last
    # the running pull mean of the first POI equals the stored toys' pull mean
    ds = open_results(store)
    v = ds["value"].sel(param="n_sig").isel(variant=0, hypothesis=0).values
    e = ds["error"].sel(param="n_sig").isel(variant=0, hypothesis=0).values
    tr = float(ds["truth"].sel(param="n_sig").isel(variant=0))
    ok = ds["valid"].isel(variant=0, hypothesis=0).values
    mean = float(np.mean(((v - tr) / e)[ok]))
    # shown to 2 significant digits (small values in e-notation): equal to half a unit of
    # the second digit
    shown = re.search(r"pull N_sig (\S+)±", last)
    assert shown is not None, last
    assert abs(float(shown.group(1)) - mean) <= 0.5 * 10.0 ** (math.floor(
        math.log10(abs(mean))) - 1), (shown.group(1), mean)
    st = read_status(store)
    assert st is not None and st["state"] == "finished" and st["toys_done"] == 6
    assert st["physics"]["pulls"]["n_sig"]["mean"] == pytest.approx(mean)
    assert (store / STATUS_KEY).is_file()  # inside the store, for every storage URL


def test_progress_shows_running_pvalue(tmp_path, client):
    spec = load_spec(DATA / "tcc_small_sig.yaml").with_overrides(toys=6)
    out = io.StringIO()
    store = tmp_path / "s.zarr"
    assert run_study(spec, store, client=client, progress=out).complete
    last = [ln for ln in out.getvalue().splitlines() if ln.startswith("[tcc-small-sig]")][-1]
    ds = open_results(store)
    t = ds.toys.t().isel(variant=0).values
    t = t[np.isfinite(t)]
    k = int(np.sum(t >= 2.0))
    assert "toy p(t ≥ 2) " in last and f"({k}/{t.size})" in last
    st = json.loads((store / STATUS_KEY).read_text())
    assert st["physics"]["pvalue"]["k"] == k and st["physics"]["pvalue"]["n"] == t.size
