"""Pulls, bias, coverage and failed-fit bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from toyengine.summary import SummaryError, clopper_pearson, pull_summary
from toyengine.summary.testing import make_results_dataset


def _gauss_ensemble(
    rng,
    n,
    *,
    truth=(1.0, 5.0),
    sigma=(0.1, 0.5),
    width=(1.0, 1.0),
    bias=(0.0, 0.0),
    minos=None,
    n_failed=0,
    n_not_done=0,
):
    """Toys whose fitted values are truth + bias + width·σ·N(0,1), with HESSE error σ."""
    truth = np.asarray(truth)
    sigma = np.asarray(sigma)
    z = rng.standard_normal((n, truth.size))
    val = truth + np.asarray(bias) + np.asarray(width) * sigma * z
    err = np.broadcast_to(sigma, val.shape).copy()
    status = np.ones((1, n, 1), np.int8)
    status[0, :n_failed, 0] = 2
    val[:n_failed] = 1e3  # garbage from failed fits: must not enter unless include_failed
    if n_not_done:
        status[0, n - n_not_done :, 0] = 0
        val[n - n_not_done :] = np.nan
        err[n - n_not_done :] = np.nan
    kw = {}
    if minos is not None:
        lo, hi = minos
        kw["minos_lower"] = (np.broadcast_to(lo, val.shape) * sigma)[None, :, None, :]
        kw["minos_upper"] = (np.broadcast_to(hi, val.shape) * sigma)[None, :, None, :]
    return (
        make_results_dataset(
            params=["mass", "width"],
            hypotheses=["nominal"],
            value=val[None, :, None, :],
            error=err[None, :, None, :],
            status=status,
            truth=truth[None, :],
            **kw,
        ),
        val,
        err,
    )


def test_pull_numbers_match_independent_numpy():
    rng = np.random.default_rng(1)
    ds, val, _ = _gauss_ensemble(rng, 500, bias=(0.02, 0.0), width=(1.0, 1.2))
    tab = pull_summary(ds)
    assert len(tab.rows) == 2
    r = tab.row("mass")
    x = val[:, 0]
    pulls = (x - 1.0) / 0.1
    assert r.n_used == 500 and r.n_failed == 0 and r.failed_fraction == 0.0
    assert r.mean == pytest.approx(x.mean(), rel=1e-12)
    assert r.rms == pytest.approx(x.std(ddof=1), rel=1e-12)
    assert r.mean_error == pytest.approx(0.1)
    assert r.bias == pytest.approx(x.mean() - 1.0, abs=1e-12)
    assert r.bias_over_error == pytest.approx((x.mean() - 1.0) / 0.1, rel=1e-9)
    assert r.pull_mean == pytest.approx(pulls.mean(), rel=1e-9)
    assert r.pull_width == pytest.approx(pulls.std(ddof=1), rel=1e-9)
    assert r.pull_mean_err == pytest.approx(pulls.std(ddof=1) / math.sqrt(500), rel=1e-9)
    assert r.pull_width_err == pytest.approx(pulls.std(ddof=1) / math.sqrt(998), rel=1e-9)
    k = int(np.count_nonzero(np.abs(pulls) <= 1))
    assert r.coverage_hesse == pytest.approx(k / 500)
    assert (r.coverage_hesse_lo, r.coverage_hesse_hi) == clopper_pearson(k, 500)
    assert r.n_minos == 0 and math.isnan(r.coverage_minos)


def test_pulls_statistically_consistent():
    # 4000 toys: the pull mean/width must agree with the injected ones within 3 of their
    # reported errors; coverage with the Gaussian content 2Φ(1/w) − 1 within 3 binomial σ.
    rng = np.random.default_rng(2)
    n = 4000
    ds, _, _ = _gauss_ensemble(rng, n, bias=(0.0, 0.25), width=(1.0, 1.3))
    tab = pull_summary(ds)
    m, w = tab.row("mass"), tab.row("width")
    assert abs(m.pull_mean) < 3 * m.pull_mean_err
    assert abs(m.pull_width - 1.0) < 3 * m.pull_width_err
    assert abs(w.pull_mean - 0.5) < 3 * w.pull_mean_err  # bias 0.25 / σ 0.5
    assert abs(w.pull_width - 1.3) < 3 * w.pull_width_err
    for r, wid, b in ((m, 1.0, 0.0), (w, 1.3, 0.5)):
        p_in = stats.norm.cdf((1 - b) / wid) - stats.norm.cdf((-1 - b) / wid)
        assert abs(r.coverage_hesse - p_in) < 3 * math.sqrt(p_in * (1 - p_in) / n)
    assert abs(w.bias_over_error - 0.5) < 3 * 1.3 / math.sqrt(n)


def test_minos_coverage():
    rng = np.random.default_rng(3)
    n = 3000
    # asymmetric interval [x − 2σ, x + 0.5σ]: contains the truth iff −0.5 ≤ z ≤ 2
    ds, val, _ = _gauss_ensemble(rng, n, minos=(-2.0, 0.5))
    r = pull_summary(ds).row("mass")
    z = (val[:, 0] - 1.0) / 0.1
    k = int(np.count_nonzero((z >= -0.5) & (z <= 2.0)))
    assert r.n_minos == n
    assert r.coverage_minos == pytest.approx(k / n)
    p_in = stats.norm.cdf(0.5) - stats.norm.cdf(-2.0)
    assert abs(r.coverage_minos - p_in) < 3 * math.sqrt(p_in * (1 - p_in) / n)
    assert r.coverage_minos_lo < r.coverage_minos < r.coverage_minos_hi


def test_failed_fits_are_counted_and_excluded():
    rng = np.random.default_rng(4)
    ds, val, _ = _gauss_ensemble(rng, 1000, n_failed=50, n_not_done=100)
    r = pull_summary(ds).row("mass")
    assert (r.n_toys, r.n_done, r.n_failed, r.n_used) == (1000, 900, 50, 850)
    assert r.failed_fraction == pytest.approx(50 / 900)
    assert r.mean == pytest.approx(val[50:900, 0].mean(), rel=1e-12)
    assert abs(r.pull_mean) < 3 * r.pull_mean_err  # the garbage values did not enter
    ri = pull_summary(ds, include_failed=True).row("mass")
    assert ri.n_used == 900 and ri.n_failed == 50
    assert ri.pull_mean > 100  # 50 garbage values at 1e3 dominate: include_failed works
    assert "50/900" in pull_summary(ds).to_text()


def test_rows_only_where_truth_and_errors_exist():
    rng = np.random.default_rng(5)
    n = 50
    val = rng.normal(0, 1, (1, n, 2, 3))
    err = np.ones_like(val)
    val[:, :, 0, 2] = np.nan  # param c absent from hypothesis H0
    err[:, :, 0, 2] = np.nan
    err[:, :, 1, 1] = np.nan  # param b fixed in H1
    truth = np.array([[0.0, 0.0, np.nan]])  # c has no generation value
    ds = make_results_dataset(
        params=["a", "b", "c"], hypotheses=["H0", "H1"], value=val, error=err, truth=truth
    )
    tab = pull_summary(ds)
    keys = {(r.hypothesis, r.param) for r in tab.rows}
    assert keys == {("H0", "a"), ("H0", "b"), ("H1", "a")}
    assert {r.hypothesis for r in pull_summary(ds, hypothesis="H1").rows} == {"H1"}
    with pytest.raises(SummaryError, match="allowed values"):
        pull_summary(ds, hypothesis="H2")
    with pytest.raises(SummaryError, match="no pull row"):
        tab.row("c")


def test_accessor_coverage_levels():
    rng = np.random.default_rng(6)
    n = 4000
    ds, _, _ = _gauss_ensemble(rng, n)
    for level in (0.6827, 0.9, 0.95):
        cov = ds.toys.coverage(level).sel(hypothesis="nominal", param="mass").item()
        assert abs(cov - level) < 3 * math.sqrt(level * (1 - level) / n)
    one = ds.toys.coverage().sel(hypothesis="nominal", param="mass").item()
    assert one == pytest.approx(pull_summary(ds).row("mass").coverage_hesse, rel=1e-12)


def test_truth_and_mean_are_printed_to_the_precision_of_the_spread():
    """A mass of 5280 MeV fitted with a 0.07 MeV bias and a 0.5 MeV spread: the table shows
    truth and mean to the spread's precision (both used to print ``5280``, hiding the bias)."""
    ds, val, _ = _gauss_ensemble(np.random.default_rng(3), 400, truth=(5280.0, 5.0),
                                 sigma=(0.5, 0.5), bias=(-0.07, 0.0))
    row = pull_summary(ds).table().rows[0]
    mean = float(np.mean(val[:, 0]))
    assert row[3].text == "5280.000"  # truth, to the 3rd significant digit of ~0.5
    assert row[6].text == f"{mean:.3f}"
    assert row[6].text != row[3].text


def test_fits_at_a_limit_are_counted_and_named():
    """A parameter whose fits end on its limit in some toys: the table says how many, so a
    flagged pull width has its likely cause next to it (the store's ``at_limit``)."""
    ds, _, _ = _gauss_ensemble(np.random.default_rng(4), 200)
    at = np.zeros((1, 200, 1, 2), bool)
    at[0, :30, 0, 1] = True  # 30 toys of "width" at a limit
    ds["at_limit"] = (("variant", "toy", "hypothesis", "param"), at)
    table = pull_summary(ds)
    assert [r.n_at_limit for r in table.rows] == [0, 30]
    note = [n for n in table.table().notes if "ended at a limit" in n]
    assert len(note) == 1 and "width 30/200" in note[0] and "mass" not in note[0]


def test_stores_without_at_limit_report_none():
    """A store of format 3 (before ``at_limit``) and one with no fit at a limit."""
    ds, _, _ = _gauss_ensemble(np.random.default_rng(4), 50)
    assert not ds["at_limit"].any()
    assert not [n for n in pull_summary(ds).table().notes if "ended at a limit" in n]
    ds = ds.drop_vars("at_limit")
    table = pull_summary(ds)
    assert all(r.n_at_limit == 0 for r in table.rows)
    assert not [n for n in table.table().notes if "ended at a limit" in n]


def test_minos_pull_uses_the_error_towards_the_truth():
    # Unbiased Gaussian estimates x̂ = σ z whose HESSE error grows with the value,
    # σ(1 + 0.3 z) (a width fitted on few events): the HESSE pull z/(1 + 0.3 z) has a
    # negative mean (≈ −0.3 for small z), the MINOS pull with σ⁺ = σ⁻ = σ towards the truth is
    # z itself: mean 0 and width 1 within 3 of their errors (4000 toys: 0.016, 0.011), and
    # both equal an independent numpy evaluation. The error away from the truth (here 5σ)
    # must not enter.
    rng = np.random.default_rng(4)
    n = 4000
    z = np.clip(rng.standard_normal(n), -3.0, 3.0)
    sigma = 0.2
    val = sigma * z
    shape = (1, n, 1, 1)
    up = np.where(z < 0, sigma, 5 * sigma)
    lo = np.where(z < 0, -5 * sigma, -sigma)
    ds = make_results_dataset(
        params=["gamma"], hypotheses=["nominal"], value=val.reshape(shape),
        error=(sigma * (1 + 0.3 * z)).reshape(shape), status=np.ones((1, n, 1), np.int8),
        truth=np.zeros((1, 1)), minos_lower=lo.reshape(shape), minos_upper=up.reshape(shape))
    r = pull_summary(ds).row("gamma")
    assert r.pull_mean < -5 * r.pull_mean_err  # the HESSE pull's artefact
    assert abs(r.pull_mean_minos) < 3 * r.pull_mean_minos_err
    assert abs(r.pull_width_minos - 1) < 3 * r.pull_width_minos_err
    assert r.pull_mean_minos == pytest.approx(z.mean(), rel=1e-9)
    assert r.pull_width_minos == pytest.approx(z.std(ddof=1), rel=1e-9)
    assert "MINOS pull mean / width" in pull_summary(ds).to_text()


def test_minos_pull_leaves_out_a_zero_error_towards_the_truth():
    # MINOS on a limit returns 0 towards it: that toy has no pull (it would be ±inf)
    val = np.array([-1.0, 1.0, -0.5, 0.5]).reshape(1, 4, 1, 1)
    up = np.array([1.0, 1.0, 0.0, 1.0]).reshape(1, 4, 1, 1)
    lo = -np.ones((1, 4, 1, 1))
    ds = make_results_dataset(
        params=["gamma"], hypotheses=["nominal"], value=val, error=np.ones((1, 4, 1, 1)),
        status=np.ones((1, 4, 1), np.int8), truth=np.zeros((1, 1)), minos_lower=lo,
        minos_upper=up)
    r = pull_summary(ds).row("gamma")
    assert r.pull_mean_minos == pytest.approx(np.mean([-1.0, 1.0, 0.5]))
    assert math.isfinite(r.pull_width_minos)


def test_pulls_read_block_by_block_equal_the_whole_store():
    """A store is read one dask block of toys at a time (memory does not grow with the
    store): the moments combined over blocks of 7 toys equal those of all toys at once to
    rounding, the counts exactly, with failed and not-run fits, MINOS and at-limit flags."""
    rng = np.random.default_rng(12)
    ds, _, _ = _gauss_ensemble(rng, 250, bias=(0.02, 0.0), width=(1.0, 1.2), n_failed=9,
                               n_not_done=11, minos=(-1.1, 0.9))
    at = np.zeros((1, 250, 1, 2), bool)
    at[0, rng.integers(0, 250, 30), 0, 1] = True
    ds = ds.assign(at_limit=(("variant", "toy", "hypothesis", "param"), at))
    whole = pull_summary(ds)
    blocked = pull_summary(ds.chunk({"toy": 7}))
    assert len(ds.chunk({"toy": 7}).value.chunksizes["toy"]) == 36
    assert whole.failed == blocked.failed
    for a, b in zip(whole.rows, blocked.rows, strict=True):
        for name, x in a.__dict__.items():
            y = getattr(b, name)
            if isinstance(x, float) and math.isfinite(x):
                assert y == pytest.approx(x, rel=1e-12, abs=1e-15), name
            else:
                assert x == y or (x != x and y != y), name
    assert whole.row("width").n_at_limit > 0 and whole.row("width").n_minos > 0
