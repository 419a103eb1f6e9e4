"""Significance layer: p ↔ Z, χ² p-values, χ²-ndof fit, empirical p, test statistic, summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
from iminuit import Minuit
from scipy import special, stats

from toyengine.errors import ToyEngineError
from toyengine.summary import (
    SummaryError,
    chi2_pvalue,
    clopper_pearson,
    empirical_pvalue,
    fit_chi2_ndof,
    p_to_z,
    significance_summary,
    test_statistic,
    z_to_p,
)
from toyengine.summary.significance import gaussian_pvalue
from toyengine.summary.testing import make_results_dataset

# ----------------------------------------------------------------------------- exact numbers


def test_zc_significance_41p4_ndof8_is_4p8_sigma_two_sided():
    # LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5: Δ(−2lnL) = 41.4, ndof = 8 → "4.8σ" (two-sided
    # 4.780)
    p = chi2_pvalue(41.4, 8)
    assert p == pytest.approx(1.7546e-6, rel=1e-3)
    z2 = p_to_z(p, "two")
    assert round(z2, 1) == 4.8
    assert abs(z2 - 4.78) < 0.01
    z1 = p_to_z(p, "one")
    assert abs(z1 - 4.64) < 0.01
    assert round(z1, 1) == 4.6  # the one-sided convention would NOT reproduce the paper


def test_jp_rejection_18p6_one_dof_is_sqrt():
    # Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5: 41.4 − 22.8 = 18.6 with 1 dof → 4.3σ; two-sided Z =
    # √Δ exactly
    p = chi2_pvalue(41.4 - 22.8, 1)
    z2 = p_to_z(p, "two")
    assert abs(z2 - math.sqrt(18.6)) < 1e-9
    assert round(z2, 1) == 4.3
    assert abs(p_to_z(p, "one") - 4.157) < 1e-3


@pytest.mark.parametrize("t", [0.01, 0.5, 1.0, 4.0, 25.0, 100.0, 400.0])
def test_one_dof_two_sided_is_sqrt_t(t):
    assert p_to_z(chi2_pvalue(t, 1), "two") == pytest.approx(math.sqrt(t), rel=1e-9)


@pytest.mark.parametrize("sided", ["one", "two"])
def test_p_z_round_trip(sided):
    p = np.logspace(-300, 0, 601)
    if sided == "one":
        p = p[p <= 1.0]
    z = p_to_z(p, sided)
    np.testing.assert_allclose(z_to_p(z, sided), p, rtol=1e-9)
    zs = np.linspace(0.0, 30.0, 301)
    np.testing.assert_allclose(p_to_z(z_to_p(zs, sided), sided), zs, rtol=1e-9, atol=1e-9)
    if sided == "one":  # negative one-sided Z (p > 0.5) round-trips too
        zn = np.linspace(-5, 0, 11)
        np.testing.assert_allclose(p_to_z(z_to_p(zn, "one"), "one"), zn, atol=1e-9)


def test_conventions_against_erfc():
    # independent evaluation: p_two = erfc(Z/√2), p_one = erfc(Z/√2)/2
    for z in (1.0, 3.0, 5.0):
        assert z_to_p(z, "two") == pytest.approx(special.erfc(z / math.sqrt(2)), rel=1e-12)
        assert z_to_p(z, "one") == pytest.approx(0.5 * special.erfc(z / math.sqrt(2)), rel=1e-12)
    assert p_to_z(0.0) == math.inf
    assert math.isnan(p_to_z(math.nan))
    assert isinstance(p_to_z(0.05), float)


def test_bad_inputs_raise_toyengine_errors():
    with pytest.raises(SummaryError, match="sided"):
        p_to_z(0.1, "both")
    with pytest.raises(SummaryError):
        p_to_z(1.5)
    with pytest.raises(SummaryError, match="negative"):
        z_to_p(-1.0, "two")
    with pytest.raises(SummaryError, match="ndof"):
        chi2_pvalue(3.0, 0)
    with pytest.raises(ToyEngineError):
        empirical_pvalue([1.0, 2.0], math.nan)


# ----------------------------------------------------------------------------- empirical p


def test_clopper_pearson_against_closed_forms():
    # k = 0: hi = 1 − (α/2)^(1/n); k = n: lo = (α/2)^(1/n)  (exact CP limits)
    a = 1 - 0.6827
    lo, hi = clopper_pearson(0, 50, 0.6827)
    assert lo == 0.0 and hi == pytest.approx(1 - (a / 2) ** (1 / 50), rel=1e-10)
    lo, hi = clopper_pearson(50, 50, 0.6827)
    assert hi == 1.0 and lo == pytest.approx((a / 2) ** (1 / 50), rel=1e-10)
    # interior: the CP limits satisfy the binomial tail equations
    k, n = 7, 40
    lo, hi = clopper_pearson(k, n, 0.9)
    assert stats.binom.sf(k - 1, n, lo) == pytest.approx(0.05, rel=1e-8)
    assert stats.binom.cdf(k, n, hi) == pytest.approx(0.05, rel=1e-8)


def test_empirical_pvalue_counts_and_nan():
    t = np.array([0.1, 5.0, 3.0, np.nan, 7.0, 3.0, np.nan])
    e = empirical_pvalue(t, 3.0)
    assert (e.n_exceed, e.n_toys, e.n_nan) == (4, 5, 2)  # ≥ counts ties
    assert e.p == pytest.approx(0.8)
    assert e.lo < e.p < e.hi
    assert (e.lo, e.hi) == clopper_pearson(4, 5, e.cl)
    e0 = empirical_pvalue(t, 100.0)
    assert e0.p == 0 and e0.lo == 0 and e0.z() == math.inf and e0.z_interval()[0] > 0


def test_empirical_pvalue_matches_chi2_tail():
    # 20000 χ²(3) draws: toy tail at t=7.81 (p=0.05) within 4 CP-σ of 0.05
    rng = np.random.default_rng(11)
    t = rng.chisquare(3, 20000)
    e = empirical_pvalue(t, stats.chi2.isf(0.05, 3))
    sigma = math.sqrt(0.05 * 0.95 / 20000)
    assert abs(e.p - 0.05) < 4 * sigma
    # the 68 % Clopper–Pearson interval around k/n ≈ 1000/20000: in the normal limit it is
    # p ± σ̂ widened by the continuity correction 1/(2n) on each side (σ̂ the binomial error
    # at p̂); what remains is of relative order 1/k ≈ 1e-3, hence rel=5e-3
    sigma_hat = math.sqrt(e.p * (1 - e.p) / e.n_toys)
    assert (e.hi - e.lo) / 2 == pytest.approx(sigma_hat + 0.5 / e.n_toys, rel=5e-3)
    assert e.lo < e.p < e.hi


# ----------------------------------------------------------------------------- χ²-ndof fit


def _expected_ndof_err(k: float, n: int) -> float:
    # Fisher information of χ²(k) in k: I = ψ'(k/2)/4 per event → σ_k = 2/√(n ψ'(k/2))
    return 2.0 / math.sqrt(n * special.polygamma(1, k / 2))


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_chi2_fit_recovers_ndof(k):
    rng = np.random.default_rng(100 + k)
    n = 2000
    f = fit_chi2_ndof(rng.chisquare(k, n))
    assert f.valid and f.n == n and f.scale == 1.0
    # reported uncertainty equals the Fisher expectation (within 5%: evaluated at k̂, not k)
    assert f.ndof_err == pytest.approx(_expected_ndof_err(k, n), rel=0.05)
    assert abs(f.ndof - k) < 3 * f.ndof_err
    assert f.gof_pvalue > 1e-3 and f.gof_ndof == 50 - 1 - 1


def test_chi2_fit_uncertainty_matches_spread():
    # 40 independent samples of χ²(4), n=2000: the std of k̂ must match the reported error.
    # The std of 40 values has a relative error 1/√78 ≈ 11%: allow 3σ = 35%.
    rng = np.random.default_rng(7)
    fits = [fit_chi2_ndof(rng.chisquare(4, 2000)) for _ in range(40)]
    ks = np.array([f.ndof for f in fits])
    errs = np.array([f.ndof_err for f in fits])
    assert np.std(ks, ddof=1) == pytest.approx(errs.mean(), rel=0.35)
    assert abs(ks.mean() - 4) < 3 * errs.mean() / math.sqrt(40)


def test_chi2_fit_with_scale():
    rng = np.random.default_rng(5)
    f = fit_chi2_ndof(1.3 * rng.chisquare(3, 3000), scale=True)
    assert f.fit_scale and f.valid
    assert abs(f.ndof - 3) < 3 * f.ndof_err
    assert abs(f.scale - 1.3) < 3 * f.scale_err
    assert f.correlation < -0.5  # mean = k·s fixes the product: strong anticorrelation


def test_chi2_fit_tiny_negatives_are_clipped_and_censored():
    # χ²(1) has density ∝ t^(-1/2) at 0, so values at ~0 are expected: clipping minimiser
    # noise (t = −1e-7) to 0 and censoring must leave k̂ consistent with 1.
    rng = np.random.default_rng(3)
    t = rng.chisquare(1, 2000)
    small = t < 1e-4
    t[small] = -1e-7
    t[:2] = -0.5  # a failed h1 minimisation
    f = fit_chi2_ndof(np.append(t, np.nan))
    assert f.n == 2000 and f.valid
    assert f.n_negative == int(small.sum()) + 2 - int(small[:2].sum())
    assert f.n_negative_large == 2
    assert f.n_censored == f.n_negative
    assert abs(f.ndof - 1) < 3 * f.ndof_err


def test_chi2_fit_point_mass_at_zero():
    # χ²(8) plus 5% exact zeros (h1 fit collapsed onto h0). The pure censored χ² cannot
    # describe zeros at k = 8 (P(t < 1e-6) ~ 1e-27) and k̂ is pulled far down, which the
    # GOF flags; the mixture w δ(0) + (1−w) χ²(k) recovers k and w within 3σ.
    rng = np.random.default_rng(13)
    t = rng.chisquare(8, 2000)
    t[:100] = 0.0
    f = fit_chi2_ndof(t)
    assert f.n_censored == 100 and f.ndof < 8 - 5 * f.ndof_err
    assert f.gof_pvalue < 1e-3
    g = fit_chi2_ndof(t, zero_mass=True)
    assert abs(g.ndof - 8) < 3 * g.ndof_err
    assert abs(g.zero_fraction - 0.05) < 3 * g.zero_fraction_err
    # binomial error of w = 100/2000
    assert g.zero_fraction_err == pytest.approx(math.sqrt(0.05 * 0.95 / 2000), rel=0.05)
    assert g.gof_pvalue > 1e-3
    expected = (1 - g.zero_fraction) * stats.chi2.sf(20.0, g.ndof)
    assert g.pvalue(20.0) == pytest.approx(expected, rel=1e-9)


def test_chi2_fit_censored_likelihood_is_exact():
    # Independent check of the censored NLL: maximise it with scipy on the same data.
    rng = np.random.default_rng(8)
    t = rng.chisquare(2.5, 800)
    t[t < 0.05] = 0.0
    f = fit_chi2_ndof(t, zero_tol=0.05)
    cens = t < 0.05

    def nll(k):
        return -(stats.chi2.logpdf(t[~cens], k).sum() + cens.sum() * stats.chi2.logcdf(0.05, k))

    from scipy.optimize import minimize_scalar

    ref = minimize_scalar(nll, bounds=(0.5, 10), method="bounded", options={"xatol": 1e-8})
    assert f.ndof == pytest.approx(ref.x, abs=1e-3)


def test_chi2_fit_gof_rejects_wrong_shape():
    rng = np.random.default_rng(9)
    t = rng.uniform(0, 10, 2000)  # not a χ² at all
    f = fit_chi2_ndof(t)
    assert f.gof_pvalue < 1e-6
    with pytest.raises(SummaryError, match="at least 5"):
        fit_chi2_ndof([1.0, 2.0, np.nan])


# ----------------------------------------------------------------------------- Dataset level


def _sig_dataset(t, *, kind="significance", invalid_h1=(), not_done=(), ndof=8, obs=41.4):
    t = np.asarray(t, float)
    n = t.size
    nll = np.zeros((1, n, 2))
    nll[0, :, 0] = 100.0 + t / 2
    nll[0, :, 1] = 100.0
    status = np.ones((1, n, 2), np.int8)
    status[0, list(invalid_h1), 1] = 2
    status[0, list(not_done), :] = 0
    nll[status == 0] = np.nan
    val = np.zeros((1, n, 2, 1))
    return make_results_dataset(
        params=["n_sig"],
        hypotheses=["H0", "H1"],
        value=val,
        nll=nll,
        status=status,
        kind=kind,
        h0="H0",
        h1="H1",
        ndof_wilks=ndof,
        observed_t=obs,
    )


def test_test_statistic_masks_failed_and_missing_fits():
    t = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    ds = _sig_dataset(t, invalid_h1=[1], not_done=[4])
    ts = test_statistic(ds)
    assert ts.dims == ("variant", "toy") and ts.name == "t"
    np.testing.assert_allclose(ts.values[0], [1.0, np.nan, 3.0, 4.0, np.nan])
    ti = test_statistic(ds, include_failed=True)
    np.testing.assert_allclose(ti.values[0], [1.0, 2.0, 3.0, 4.0, np.nan])
    # explicit hypotheses override the attrs (and swapping them flips the sign)
    np.testing.assert_allclose(test_statistic(ds, "H1", "H0").values[0, 0], -1.0)
    with pytest.raises(SummaryError, match="allowed values"):
        test_statistic(ds, "H0", "H7")


def test_significance_summary_chi2_8():
    rng = np.random.default_rng(21)
    t = rng.chisquare(8, 1000)
    ds = _sig_dataset(t, invalid_h1=range(10), not_done=range(990, 1000))
    s = significance_summary(ds)
    assert (s.n_toys, s.n_done, s.n_failed_h1, s.n_failed_h0) == (1000, 990, 10, 0)
    assert s.n_used == 980 and s.failed_fraction == pytest.approx(10 / 990)
    assert abs(s.chi2_fit.ndof - 8) < 3 * s.chi2_fit.ndof_err
    w = s.pvalue("wilks")
    assert w.z_two == pytest.approx(4.7798, abs=1e-3) and w.z_one == pytest.approx(4.6385, abs=1e-3)
    fitted = s.pvalue("fitted")
    assert fitted.p_lo <= fitted.p <= fitted.p_hi
    toys = s.pvalue("toys")
    assert toys.n_toys == 980 and toys.n_exceed == 0 and toys.z_two == math.inf
    # tail checks agree with the χ²(8) expectation within 4 binomial σ
    for tc in s.tail:
        sig = math.sqrt(tc.p_expected * (1 - tc.p_expected) / tc.n_toys)
        assert abs(tc.p_toys - tc.p_expected) < 4 * sig + 1e-12
    assert "failed-fit fraction" in s.to_text()


def test_jp_rejection_summary():
    # non-nested: t under the disfavoured hypothesis is mostly negative; χ²(1) gives √18.6
    rng = np.random.default_rng(4)
    t = rng.normal(-8.0, 5.0, 500)
    t[:3] = [19.0, 25.0, 18.7]  # 18.6 itself would hinge on float rounding of nll
    ds = _sig_dataset(t, kind="jp_rejection", ndof=-1, obs=18.6)
    s = significance_summary(ds)
    assert s.is_rejection and s.chi2_fit is None and s.ndof_wilks == 1.0
    assert s.pvalue("wilks").z_two == pytest.approx(math.sqrt(18.6), abs=1e-9)
    toys = s.pvalue("toys")
    assert toys.n_exceed == int(np.count_nonzero(t >= 18.6)) == 3
    assert toys.p == pytest.approx(3 / 500)
    assert s.n_negative == int(np.count_nonzero(t < 0))
    # the Gaussian extrapolation: the normal tail at the toys' mean and width
    g = s.pvalue("gaussian")
    d = (18.6 - t.mean()) / t.std(ddof=1)
    assert g.p == pytest.approx(stats.norm.sf(d), rel=1e-12)
    assert g.n_toys == 500 and g.p_lo < g.p < g.p_hi


def test_jp_gaussian_extrapolation_reaches_beyond_the_toys_within_its_error():
    """Toys of a Gaussian t (mean −20, width 8, as the Z_c(4100)⁻ 0⁺ toys): at t_obs = 18.6,
    4.8 widths out (p ≈ 8e-7), no toy of 200 exceeds, and the extrapolation finds the true
    tail. Over 200 seeds the true d = 4.825 lies within the quoted ±δd in about 68 % of
    them: δd is the propagated 1σ error of (t_obs − m)/s, so the count is binomial(200,
    0.68), σ ≈ 6.6; the bound 0.68 ± 4σ/200 = [0.55, 0.81] fails 1 in ~15 000 honest runs."""
    true_d = (18.6 + 20.0) / 8.0
    inside = 0
    for seed in range(200):
        t = np.random.default_rng(seed).normal(-20.0, 8.0, 200)
        g = gaussian_pvalue(t, 18.6)
        inside += g.p_lo <= stats.norm.sf(true_d) <= g.p_hi
    assert 0.55 <= inside / 200 <= 0.81, inside
    t = np.random.default_rng(1).normal(-20.0, 8.0, 200)
    ds = _sig_dataset(t, kind="jp_rejection", ndof=-1, obs=18.6)
    s = significance_summary(ds)
    assert s.pvalue("toys").n_exceed == 0
    assert s.pvalue("gaussian").z_one == pytest.approx(true_d, abs=4 * 0.25)  # δd ≈ 0.25 here
    assert "gaussian extrapolation of the toys" in s.to_text()
    assert "(200 toys)" in s.to_text() and "(-1/" not in s.to_text()


def _binned_nll(counts, shape_sig, nbins):
    flat = np.full(nbins, 1.0 / nbins)

    def nll(ns, nb):
        mu = ns * shape_sig + nb * flat
        if np.any(mu <= 0):
            return 1e30
        return float(np.sum(mu - counts * np.log(mu)))

    return nll


def _wilks_toys(n_toys, seed):
    """Background-only toys of a flat background + Gaussian signal of fixed shape.

    Binned extended Poisson likelihood, 40 bins on [0, 1], b = 2000 events, signal
    N(0.5, 0.04) with a free (possibly negative) yield. H0: n_sig = 0, H1: n_sig free. The
    yield enters linearly and is unbounded, so Wilks' theorem holds with 1 dof.
    """
    nbins = 40
    edges = np.linspace(0, 1, nbins + 1)
    cdf = stats.norm.cdf(edges, 0.5, 0.04)
    shape_sig = np.diff(cdf) / (cdf[-1] - cdf[0])
    rng = np.random.default_rng(seed)
    nll_out = np.zeros((1, n_toys, 2))
    val = np.full((1, n_toys, 2, 2), np.nan)
    err = np.full((1, n_toys, 2, 2), np.nan)
    valid = np.zeros((1, n_toys, 2), bool)
    for i in range(n_toys):
        counts = rng.poisson(2000.0 / nbins, nbins)
        f = _binned_nll(counts, shape_sig, nbins)
        for h, free_sig in ((0, False), (1, True)):
            m = Minuit(f, ns=0.0, nb=float(counts.sum()))
            m.errordef = Minuit.LIKELIHOOD
            m.fixed["ns"] = not free_sig
            m.migrad()
            m.hesse()
            nll_out[0, i, h] = m.fval
            valid[0, i, h] = m.valid
            val[0, i, h] = [m.values["ns"], m.values["nb"]]
            err[0, i, h] = [m.errors["ns"] if free_sig else np.nan, m.errors["nb"]]
    truth = np.array([[0.0, 2000.0]])
    return make_results_dataset(
        params=["n_sig", "n_bkg"],
        hypotheses=["H0", "H1"],
        value=val,
        error=err,
        nll=nll_out,
        valid=valid,
        truth=truth,
        kind="significance",
        h0="H0",
        h1="H1",
        ndof_wilks=1,
        observed_t=18.6,
    )


def test_wilks_model_fitted_ndof_is_one():
    ds = _wilks_toys(1000, seed=2024)
    s = significance_summary(ds)
    assert s.n_used >= 995  # fits of this model essentially never fail
    f = s.chi2_fit
    # σ(k̂) ≈ 2/√(1000 ψ'(1/2)) ≈ 0.028: require |k̂ − 1| < 3σ
    assert f.ndof_err == pytest.approx(_expected_ndof_err(1, s.n_used), rel=0.1)
    assert abs(f.ndof - 1.0) < 3 * f.ndof_err
    assert f.gof_pvalue > 1e-3
    # nested fits: t ≥ 0 up to minimiser noise
    assert f.n_negative_large == 0


@pytest.mark.slow
def test_wilks_model_fitted_ndof_is_one_large():
    ds = _wilks_toys(20000, seed=77)
    s = significance_summary(ds, fit_scale=False)
    f = s.chi2_fit
    print(
        f"Wilks check (20000 toys): ndof = {f.ndof:.4f} ± {f.ndof_err:.4f}, "
        f"GOF p = {f.gof_pvalue:.3f}, KS p = {f.ks_pvalue:.3f}, neg = {f.n_negative}"
    )
    for tc in s.tail:
        print(
            f"  Z={tc.z}: p_χ² = {tc.p_expected:.4g}, p_toys = {tc.p_toys:.4g} "
            f"[{tc.lo:.4g}, {tc.hi:.4g}]"
        )
    assert abs(f.ndof - 1.0) < 3 * f.ndof_err
    fs = fit_chi2_ndof(test_statistic(ds).values, scale=True)
    assert abs(fs.scale - 1.0) < 3 * fs.scale_err
    for tc in s.tail[:2]:
        sig = math.sqrt(tc.p_expected * (1 - tc.p_expected) / tc.n_toys)
        assert abs(tc.p_toys - tc.p_expected) < 4 * sig
