"""Tests of the profile-likelihood scans and limits (toyengine.core.profile)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from toyengine.core.fit import fit
from toyengine.core.params import Parameter, ParameterSet
from toyengine.core.profile import (
    ProfileScan,
    delta_nll_threshold,
    interval,
    most_conservative,
    one_sided_limit,
    profile_scan,
)
from toyengine.errors import ModelError

MU = np.array([1.0, -2.0])
SIG = np.array([0.5, 2.0])
RHO = 0.7


def gaussian_nll(mu=MU, sig=SIG, rho=RHO):
    """−ln L of a correlated bivariate Gaussian in (a, b); a third parameter c is unused
    (and fixed) to check that fixed parameters stay where they are."""
    cov = np.array([[sig[0] ** 2, rho * sig[0] * sig[1]], [rho * sig[0] * sig[1], sig[1] ** 2]])
    inv = np.linalg.inv(cov)

    def nll(x):
        d = np.asarray(x[:2]) - mu
        return 0.5 * float(d @ inv @ d) + 3.0  # the constant must cancel in −Δ ln L

    return nll


def params(a0=0.3, b0=0.0):
    return ParameterSet((Parameter("a", a0, (-10.0, 10.0), step=0.1),
                         Parameter("b", b0, (-20.0, 20.0), step=0.5),
                         Parameter("c", 7.0, (0.0, 10.0), fixed=True)))


def test_thresholds_are_chi2_quantiles():
    """LHCb, Nature Communications 13 (2022) 3351, quotes −Δ log L = 1.35 (90 %) and 1.92 (95 %):
    χ²₁ quantiles / 2."""
    assert delta_nll_threshold(0.90) == pytest.approx(stats.chi2.ppf(0.90, 1) / 2, rel=1e-14)
    assert round(delta_nll_threshold(0.90), 2) == 1.35
    assert round(delta_nll_threshold(0.95), 2) == 1.92
    assert delta_nll_threshold(0.6826894921370859) == pytest.approx(0.5, rel=1e-12)
    with pytest.raises(ModelError):
        delta_nll_threshold(1.0)


def test_gaussian_profile_gives_textbook_interval():
    """Profiling a bivariate Gaussian over a: −Δ ln L(a) = (a − μ_a)²/(2σ_a²) (the marginal
    width, not the conditional one σ_a sqrt(1 − ρ²)); the refitted b follows the regression
    line μ_b + ρ σ_b/σ_a (a − μ_a). The fits use tol = 1e-6, so the minima are exact to
    ~1e-8 in −ln L; the limits are then exact (sign × sqrt(2Δ) is linear on any grid)."""
    ps = params()
    scan = profile_scan(gaussian_nll(), ps, "a", np.linspace(-1.0, 3.0, 21),
                        fit_kwargs={"tol": 1e-6})
    assert isinstance(scan, ProfileScan) and scan.valid.all()
    assert scan.best == pytest.approx(MU[0], abs=1e-5)
    expected = (scan.grid - MU[0]) ** 2 / (2 * SIG[0] ** 2)
    np.testing.assert_allclose(scan.delta_nll, expected, atol=1e-6)
    np.testing.assert_allclose(scan.values_of("b"),
                               MU[1] + RHO * SIG[1] / SIG[0] * (scan.grid - MU[0]), atol=1e-3)
    assert np.all(scan.values_of("c") == 7.0)  # fixed parameters stay fixed
    lo, hi = interval(scan)  # 68.27 %: −Δ ln L = 1/2
    assert lo == pytest.approx(MU[0] - SIG[0], abs=1e-4)
    assert hi == pytest.approx(MU[0] + SIG[0], abs=1e-4)
    # 1.6449: the 90 % convention of Nat. Commun. 13 (2022) 3351
    z90 = math.sqrt(stats.chi2.ppf(0.90, 1))
    z95 = math.sqrt(stats.chi2.ppf(0.95, 1))  # 1.9600
    assert one_sided_limit(scan, 0.90) == pytest.approx(MU[0] - z90 * SIG[0], abs=1e-4)
    assert one_sided_limit(scan, 0.95) == pytest.approx(MU[0] - z95 * SIG[0], abs=1e-4)
    assert one_sided_limit(scan, 0.95, "upper") == pytest.approx(MU[0] + z95 * SIG[0], abs=1e-4)
    # a range that does not reach the threshold gives NaN, not a wrong number
    short = profile_scan(gaussian_nll(), ps, "a", np.linspace(0.5, 1.5, 5),
                         fit_kwargs={"tol": 1e-6})
    assert math.isnan(one_sided_limit(short, 0.95))


def test_unbinned_gaussian_mean_profile():
    """Gaussian likelihood of n events with known σ and free mean μ plus a nuisance
    parameter it does not depend on: the 68 % profile interval is x̄ ± σ/√n exactly."""
    rng = np.random.default_rng(5)
    sigma, n = 2.0, 400
    data = rng.normal(3.0, sigma, n)

    def nll(x):
        return float(0.5 * np.sum((data - x[0]) ** 2) / sigma**2 + 0.5 * (x[1] - 1.0) ** 2)

    ps = ParameterSet((Parameter("mu", 0.0, (-10.0, 10.0), step=0.1),
                       Parameter("nu", 0.0, (-5.0, 5.0), step=0.1)))
    grid = data.mean() + sigma / math.sqrt(n) * np.linspace(-3, 3, 13)
    scan = profile_scan(nll, ps, "mu", grid, fit_kwargs={"tol": 1e-6})
    lo, hi = interval(scan)
    assert lo == pytest.approx(data.mean() - sigma / math.sqrt(n), abs=1e-5)
    assert hi == pytest.approx(data.mean() + sigma / math.sqrt(n), abs=1e-5)


def test_most_conservative_over_alternative_models():
    ps = params()
    grid = np.linspace(-2.0, 4.0, 25)
    kw = {"fit_kwargs": {"tol": 1e-6}}
    narrow = profile_scan(gaussian_nll(), ps, "a", grid, **kw)
    wide = profile_scan(gaussian_nll(sig=np.array([0.8, 2.0])), ps, "a", grid, **kw)
    shifted = profile_scan(gaussian_nll(mu=np.array([1.5, -2.0])), ps, "a", grid, **kw)
    res = most_conservative({"nominal": narrow, "wide": wide, "shifted": shifted}, 0.90)
    z90 = math.sqrt(stats.chi2.ppf(0.90, 1))
    assert res.label == "wide"
    assert res.value == pytest.approx(1.0 - z90 * 0.8, abs=1e-4)
    assert set(res.limits) == {"nominal", "wide", "shifted"}
    up = most_conservative([narrow, wide, shifted], 0.90, "upper")
    assert up.label == "2"  # 1.5 + 1.645 × 0.5 = 2.322 > 1 + 1.645 × 0.8 = 2.316
    assert up.value == pytest.approx(max(1.0 + z90 * 0.8, 1.5 + z90 * 0.5), abs=1e-4)
    short = profile_scan(gaussian_nll(), ps, "a", np.linspace(0.6, 1.4, 5), **kw)
    nan_res = most_conservative({"ok": narrow, "short": short}, 0.95)
    assert math.isnan(nan_res.value) and nan_res.label == "short"
    with pytest.raises(ModelError):
        most_conservative({}, 0.9)


def test_invalid_points_are_skipped_and_global_minimum_improved():
    """A failed fit at one grid point is ignored by the limit search; a scan point below a
    poor global fit becomes the reference minimum."""
    ps = params()
    grid = np.linspace(-1.0, 3.0, 21)
    bad_value = grid[5]

    def flaky(nll, p, **kw):
        res = fit(nll, p, **kw)
        if p["a"].fixed and p["a"].value == bad_value:
            return type(res)(**{**res.__dict__, "valid": False})
        return res

    scan = profile_scan(gaussian_nll(), ps, "a", grid, fit_kwargs={"tol": 1e-6}, fitter=flaky)
    assert not scan.valid[5] and scan.valid.sum() == 20
    assert one_sided_limit(scan, 0.90) == pytest.approx(
        1.0 - math.sqrt(stats.chi2.ppf(0.90, 1)) * 0.5, abs=1e-4)
    poor = fit(gaussian_nll(), ps.updated({"b": {"fixed": True}}))  # b stuck at 0: not a minimum
    scan2 = profile_scan(gaussian_nll(), ps, "a", grid, fit_kwargs={"tol": 1e-6},
                         global_fit=poor)
    assert scan2.global_improved and scan2.delta_nll.min() == 0.0


def test_scan_argument_errors():
    ps = params()
    with pytest.raises(ModelError):
        profile_scan(gaussian_nll(), ps, "zz", [0.0])
    with pytest.raises(ModelError):
        profile_scan(gaussian_nll(), ps, "a", [0.0, 11.0])  # outside the limits
    with pytest.raises(ModelError):
        profile_scan(gaussian_nll(), ps, "a", [])
    scan = profile_scan(gaussian_nll(), ps, "a", [0.0, 1.0, 2.0])
    with pytest.raises(ModelError):
        one_sided_limit(scan, 0.9, "sideways")
