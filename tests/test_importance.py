"""Importance-sampled tail p-values on the fixed-shape yield model, where Wilks holds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from toyengine.summary._common import SummaryError
from toyengine.summary.importance import importance_pvalue

NBINS, NB = 40, 2000.0
_EDGES = np.linspace(0.0, 1.0, NBINS + 1)
_CDF = stats.norm.cdf(_EDGES, 0.5, 0.04)
SHAPE = np.diff(_CDF) / (_CDF[-1] - _CDF[0])   # Gaussian signal N(0.5, 0.04), fixed shape
FLAT = np.full(NBINS, 1.0 / NBINS)


def t_fixed_shape(counts: np.ndarray) -> float:
    """t = 2 (nll_H0 − nll_H1) of the binned extended Poisson fit with a free background
    yield and a free signal yield of either sign (H0: no signal). At the maximum the total
    yield equals the event count, so only the signal fraction f is fitted (Newton)."""
    n = counts.astype(float)
    g = NBINS * SHAPE - 1.0                   # d/df of nbins (f s + (1 − f)/nbins)
    f = 0.0
    for _ in range(50):
        r = 1.0 + f * g
        d1 = float(np.sum(n * g / r))
        d2 = -float(np.sum(n * g * g / r**2))
        step = d1 / d2
        f -= step
        while np.any(1.0 + f * g <= 0):      # stay where every bin expectation is > 0
            step /= 2
            f += step
        if abs(step) < 1e-12:
            break
    return 2.0 * float(np.sum(n * np.log(1.0 + f * g)))


def test_importance_sampling_reaches_five_sigma_within_its_error():
    """P(t ≥ 25) under background only is 5.73e-7 by Wilks (χ²(1)); the unbounded yield
    enters linearly, and with 2000 background events the asymptotic formula holds. 4000
    mixture toys with ±5σ of signal injected (both signs: t is two-sided): the estimate must
    agree within 3 of its standard errors, and that error must be below 25 % (a plain toy
    p-value would need ~5 × 10⁷ toys for the same precision)."""
    # σ(n_s) with the background yield profiled: 1 / (I_ss − I_sb²/I_bb), Fisher information
    mu0 = NB * FLAT
    i_ss, i_sb, i_bb = (float(np.sum(a * b / mu0)) for a, b in
                        ((SHAPE, SHAPE), (SHAPE, FLAT), (FLAT, FLAT)))
    ns = 5.0 / math.sqrt(i_ss - i_sb**2 / i_bb)

    def alternative(sign: float):
        mu = mu0 + sign * ns * SHAPE
        return (lambda r: r.poisson(mu),
                lambda c: float(np.sum(c * np.log(mu / mu0)) - float(np.sum(mu - mu0))))

    res = importance_pvalue(
        25.0, 4000, np.random.default_rng(25), sample_null=lambda r: r.poisson(mu0),
        alternatives=[alternative(+1.0), alternative(-1.0)], statistic=t_fixed_shape)
    exact = float(stats.chi2.sf(25.0, 1))
    assert res.error < 0.25 * exact
    assert abs(res.p - exact) < 3 * res.error
    assert res.n_exceed > 500 and res.ess > 1000
    assert res.z() == pytest.approx(5.0, abs=0.1)


def test_importance_bad_fraction_is_one_clear_error():
    with pytest.raises(SummaryError, match="alt_fraction"):
        importance_pvalue(1.0, 10, np.random.default_rng(0), sample_null=lambda r: 0,
                          alternatives=[(lambda r: 0, lambda d: 0.0)],
                          statistic=lambda d: 0.0, alt_fraction=1.0)


def test_top_share_says_when_one_toy_carries_the_estimate():
    from toyengine.summary.importance import weighted_pvalue

    t = np.array([1.0, 5.0, 6.0, 7.0, 2.0])
    w = np.array([1.0, 0.1, 0.3, 0.6, 1.0])
    r = weighted_pvalue(t, w, 4.0, 0.5)
    assert r.n_exceed == 3 and r.top_share == pytest.approx(0.6)  # 0.6 of 0.1 + 0.3 + 0.6
    assert math.isnan(weighted_pvalue(t, w, 9.0, 0.5).top_share)  # no toy beyond


def test_pareto_k_recovers_known_tail_shapes():
    """k̂ of 10⁵ draws of a generalised Pareto law of shape 0.5 and 0.9 and of an
    exponential (shape 0). Its spread at this size is ≈ 0.06 (five seeds of the shape-0.5
    law gave 0.46–0.60), so 0.18 is three of it."""
    from toyengine.summary.importance import pareto_k

    for xi in (0.5, 0.9):
        assert pareto_k(stats.genpareto.rvs(xi, size=100_000, random_state=7)) == \
            pytest.approx(xi, abs=0.18)
    assert pareto_k(stats.expon.rvs(size=100_000, random_state=7)) == pytest.approx(0.0,
                                                                                  abs=0.18)
    assert math.isnan(pareto_k(np.array([0.0, 0.0, 1.0, 2.0])))  # too few to fit a tail


def test_pareto_k_flags_a_proposal_that_misses_the_tail():
    """P(x ≥ 5) for x ~ N(0, 1) is 2.87e-7. Injected at N(5, 1) the weighted terms fall off
    beyond x = 5 (k̂ ≈ −0.7 in four seeds): reliable. Injected at N(8, 1) the rare toys
    near x = 5 carry weights e^{24} times the typical one's, so a few toys make the estimate
    (k̂ ≈ 2.6–2.8 in four seeds; the estimates ranged 2.5–5.1e-7): flagged, far above the
    0.7 threshold in both directions."""
    def run(mu: float):
        return importance_pvalue(
            5.0, 4000, np.random.default_rng(0), sample_null=lambda g: g.normal(),
            alternatives=[(lambda g: g.normal(mu), lambda x: mu * x - mu * mu / 2)],
            statistic=lambda x: x, alt_fraction=0.8)

    good, bad = run(5.0), run(8.0)
    assert good.reliable and good.pareto_k < 0.0
    assert abs(good.p - stats.norm.sf(5.0)) < 3 * good.error
    assert not bad.reliable and bad.pareto_k > 1.5


def test_pareto_k_from_the_largest_values_only():
    """A running estimate keeps only the largest terms: k̂ from those and the count equals
    k̂ from all draws (the rest are the zeros of toys below t_obs)."""
    from toyengine.summary.importance import pareto_k

    y = np.zeros(3000)
    y[:700] = stats.genpareto.rvs(0.8, size=700, random_state=3)
    top = np.sort(y)[-400:]
    assert pareto_k(top, n=3000) == pareto_k(y)
    assert pareto_k(top[-20:], n=3000) == pareto_k(np.concatenate([np.zeros(2980),
                                                                   top[-20:]]))
