"""Boundaries are results, not failures: a fit that ends with a signal yield on its limit, or
with parameters that the likelihood no longer depends on, is valid; a significance toy whose
alternative fit collapses onto the null has t = 0 and counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toyengine.core.fit import FitStatus, fit, flat_parameters
from toyengine.store import create_store, open_results, write_chunk
from toyengine.study.plan import Plan
from toyengine.study.recipe import run_chunk, toy_data
from toyengine.study.spec import build_model, load_spec
from toyengine.summary import significance_summary

DATA = Path(__file__).resolve().parent / "data"
#: H0 = the H1 model with ``n_sig`` fixed at 0 (docs/study-format.md), n_sig >= 0 in H1
STUDY = DATA / "cb_cheb_significance.yaml"


def _run_in_process(spec, path: Path, chunk_size: int = 50):
    """Every chunk of ``spec`` run and written here (no Dask); the store's Dataset."""
    plan = Plan.of(spec)
    for c in create_store(path, plan, chunk_size):
        write_chunk(path, run_chunk(plan, c), spec.toys, chunk_size)
    return open_results(path)


def test_flat_parameters_of_a_zero_yield_signal():
    spec = load_spec(STUDY)
    model = build_model(spec, spec.variants[0], "H0")
    nll = model.nll(toy_data(spec, 0))
    # n_sig fixed at 0: the Crystal Ball's mean and width do not enter -ln L at all
    assert flat_parameters(nll, model.parameters) == ("mu", "sigma")
    # with a signal they do
    on = model.parameters.updated({"n_sig": {"value": 30.0}})
    assert flat_parameters(nll, on) == ()
    res = fit(nll, model.parameters)
    assert res.valid and res.status == FitStatus.VALID
    assert res.fixed_flat == ("mu", "sigma")
    assert res.value("mu") == 5280.0 and res.value("sigma") == 10.0  # their nominal values
    assert np.isnan(res.error("mu"))


def test_show_names_the_parameters_fixed_at_nominal():
    from toyengine.study.show import describe_study

    text = describe_study(load_spec(STUDY))
    assert ("# H0: mu, sigma fixed at nominal in every fit (n_sig = 0 leaves them flat); "
            "H1: mu, sigma fixed at nominal in fits where n_sig = 0") in text


def _check_boundary_toys_count(n_toys: int, tmp_path: Path) -> None:
    spec = load_spec(STUDY).with_overrides(toys=n_toys)
    ds = _run_in_process(spec, tmp_path / "s.zarr")
    status = ds["status"].isel(variant=0).values
    assert np.all(status == int(FitStatus.VALID)), np.unique(status, return_counts=True)
    s = significance_summary(ds)
    assert s.n_used == s.n_toys == n_toys  # 0 toys dropped

    # by hand, from the raw records and not the valid flags: a toy whose H1 yield ended on
    # its limit 0 has t = 0 (H1 is then H0), every other toy t = 2 (nll_h0 - nll_h1)
    nll = ds["nll"].isel(variant=0)
    n_sig = ds["value"].isel(variant=0).sel(hypothesis="H1", param="n_sig").values
    on_limit = n_sig == 0.0
    t_hand = np.where(on_limit, 0.0, 2.0 * (nll.sel(hypothesis="H0") - nll.sel(hypothesis="H1")))
    assert on_limit.sum() > 0  # the study has boundary toys (about 6 %)
    n_exceed = int(np.count_nonzero(t_hand >= 9.0))
    assert s.p_toys_count == (n_exceed, n_toys)
    assert s.p_toys == n_exceed / n_toys
    # point mass: the censored-mixture MLE w of w δ(0) + (1 − w) χ²(k) is (n₀/n − F)/(1 − F)
    # with F = P(χ²(k) < 1e-6) ~ 1e-8 for the fitted k ≈ 2.8, i.e. the hand fraction n₀/n up
    # to MIGRAD's tolerance, which on w is about √(2 EDM) σ_w < 0.02 σ_w (EDM < 2e-4):
    # 0.1 σ_w is a bound it meets with margin and a single misplaced toy (1/n = 0.2 σ_w for
    # n = 400, more for fewer toys) breaks
    w_hand = float(np.count_nonzero(t_hand == 0.0)) / n_toys
    fit_w = s.chi2_fit
    assert fit_w is not None
    assert abs(fit_w.zero_fraction - w_hand) < 0.1 * fit_w.zero_fraction_err, (
        fit_w.zero_fraction, w_hand)
    # the summary says which parameters were fixed at nominal
    assert s.fixed_flat == "H0: mu, sigma in every fit; H1: mu, sigma in fits with n_sig = 0"
    assert "fixed at nominal (flat with the signal off)" in s.to_text()


def test_boundary_toys_count_small(tmp_path):
    _check_boundary_toys_count(100, tmp_path)


@pytest.mark.slow
def test_boundary_toys_count_400(tmp_path):
    """The study as written, 400 toys: 0 dropped (on the code before this test, 24 toys with
    the yield on its limit were marked failed with H0 written without the signal, and all
    400 H0 fits failed with H0 written as "n_sig fixed at 0")."""
    _check_boundary_toys_count(400, tmp_path)
