"""Importance sampling with a continuous family of injected signals
(``importance.family``) on a small Dalitz model: the signal density π is normalised and its
draws follow it, the extended-space weights have mean one and are reproducible, the
weighted tail agrees with plain toys where plain toys can check it, and a family the model
cannot draw is refused with one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats
from test_dalitz_importance import _study as dalitz_study

from toyengine import open_results, run_study
from toyengine.errors import ModelError, SpecError
from toyengine.study.importance import signal_family
from toyengine.study.plan import Chunk, Plan, check_importance
from toyengine.study.recipe import importance_component, run_chunk, toy_data
from toyengine.study.spec import StudySpec
from toyengine.summary.importance import mixture_weights, weighted_pvalue
from toyengine.summary.significance import significance_summary

#: the small B0 → ηc K+ π− model of tests/test_dalitz_importance.py (~340 events); H1 adds
#: the Zc(4100)− (Eur. Phys. J. C 78 (2018) 1019) with its mass, width and coupling free
FAMILY = ("{masses: [m_zc], widths: [w_zc], coupling: [re_zc, im_zc], strength: 4, "
          "spread: 0.25}")


def _study(seed: int, importance: str = "", toys: int = 10) -> StudySpec:
    return dalitz_study(seed, importance, toys=toys, observed=14.0)


def _family_study(seed: int, toys: int = 10, family: str = FAMILY) -> StudySpec:
    return _study(seed, f"importance: {{inject: [H1], fraction: 0.8, family: {family}}}",
                  toys)


def _t_and_log_ratio(spec: StudySpec, n: int) -> tuple[np.ndarray, np.ndarray]:
    a = run_chunk(Plan.of(spec), Chunk(0, 0, 0, n)).arrays
    t = 2.0 * (a["nll"][:, 0] - a["nll"][:, 1])
    return t, (a["log_ratio"] if "log_ratio" in a else np.empty((n, 0)))


def test_signal_density_is_normalised() -> None:
    # At fixed (m, Γ) the coupling's density integrates to the (m, Γ) marginal, written
    # here independently: uniform in m, ∝ 1/Γ² in Γ; that marginal integrates to 1. The
    # polar integral over (ln ρ, φ) with dRe dIm = ρ² d ln ρ dφ; Simpson's rule on 401 × 257
    # points is exact to < 1e-9 for these smooth periodic / Gaussian integrands.
    spec = _family_study(1)
    fam = signal_family(spec, spec.variants[0])
    (mlo, mhi), (wlo, whi) = fam._limits["m_zc"], fam._limits["w_zc"]

    def marginal(m: float, w: float) -> float:
        return 1.0 / (mhi - mlo) / (w * w * (1.0 / wlo - 1.0 / whi))

    assert integrate.dblquad(lambda w, m: marginal(m, w), mlo, mhi, wlo, whi)[0] == (
        pytest.approx(1.0, abs=1e-8))
    phis = np.linspace(0.0, 2.0 * math.pi, 257)
    for m, w in ((3500.0, 41.0), (4100.0, 150.0), (4550.0, 390.0)):
        rows = []
        for phi in phis:
            r0 = fam._magnitude(np.array([m, w]), phi)
            lnr = np.linspace(math.log(r0) - 10 * 0.25, math.log(r0) + 10 * 0.25, 401)
            dens = [math.exp(fam.ln_density(np.array([m, w, math.exp(x) * math.cos(phi),
                                                       math.exp(x) * math.sin(phi)])))
                    * math.exp(2 * x) for x in lnr]
            rows.append(integrate.simpson(dens, x=lnr))
        total = integrate.simpson(rows, x=phis)
        assert total == pytest.approx(marginal(m, w), rel=1e-6)
    assert fam.ln_density(np.array([3399.0, 100.0, 0.1, 0.1])) == -math.inf
    assert fam.ln_density(np.array([4000.0, 39.0, 0.1, 0.1])) == -math.inf


def test_signal_draws_follow_the_density() -> None:
    # 400 draws from π: the mass uniform over its limits, 1/Γ uniform between 1/Γ_max and
    # 1/Γ_min (density ∝ 1/Γ²), the phase uniform and z = ln(ρ/ρ0(m, Γ, φ))/0.25 standard
    # normal; each Kolmogorov–Smirnov p-value > 0.001 (a fixed seed; a true density fails
    # one of the four with probability < 0.4 %)
    spec = _family_study(1)
    fam = signal_family(spec, spec.variants[0])
    rng = np.random.default_rng(7)
    s = np.array([fam.draw(rng) for _ in range(400)])
    phase = np.arctan2(s[:, 3], s[:, 2]) % (2 * math.pi)
    z = [(math.log(math.hypot(re, im)) - math.log(fam._magnitude(np.array([m, w]), ph))) / 0.25
         for (m, w, re, im), ph in zip(s, phase, strict=True)]
    assert stats.kstest(s[:, 0], stats.uniform(3400, 1200).cdf).pvalue > 1e-3
    assert stats.kstest(1 / s[:, 1], stats.uniform(1 / 400, 1 / 40 - 1 / 400).cdf).pvalue > 1e-3
    assert stats.kstest(phase, stats.uniform(0, 2 * math.pi).cdf).pvalue > 1e-3
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # the magnitude gives the asked expected −Δ ln L: ½ cᵀ F c = strength at z = 0
    u = np.array([math.cos(1.0), math.sin(1.0)]) * fam._magnitude(np.array([4000.0, 80.0]), 1.0)
    assert 0.5 * u @ fam._coupling_fisher(np.array([4000.0, 80.0])) @ u == pytest.approx(4.0)


def test_folded_signal_density_around_a_fit_is_normalised() -> None:
    # r(s | x), the Gaussian around H1's fit folded into the mass and width limits, at a
    # fit on the width's lower limit near the mass's: with the coupling block apart from
    # the (m, Γ) block (correlation 0.5, σ = 200 and 30 MeV) the density at the coupling's
    # centre times 2π √det Σ_cc is the folded (m, Γ) density, which must integrate to 1 over
    # the limits (Simpson's rule on 241 × 145 points, 5 and 2.5 MeV apart, against σ of 200
    # and 30 MeV: the folded density has kinks only at the limits, the grid's ends; the
    # rule's error is < 1e-5 here). Its draws (fold of ŝ + L·z) stay inside the limits.
    spec = _family_study(1)
    fam = signal_family(spec, spec.variants[0])
    centre = np.array([3450.0, 40.0, 0.1, -0.2])
    cov = np.zeros((4, 4))
    cov[:2, :2] = [[200.0**2, 0.5 * 200 * 30], [0.5 * 200 * 30, 30.0**2]]
    cov[2:, 2:] = [[0.01, 0.002], [0.002, 0.02]]
    chol = np.linalg.cholesky(cov)
    ms = np.linspace(3400.0, 4600.0, 241)
    ws = np.linspace(40.0, 400.0, 145)
    dens = np.array([[math.exp(fam._ln_r(np.array([m, w, 0.1, -0.2]), centre, chol))
                      for w in ws] for m in ms])
    norm_c = 2.0 * math.pi * math.sqrt(np.linalg.det(cov[2:, 2:]))
    total = integrate.simpson(integrate.simpson(dens, x=ws, axis=1), x=ms) * norm_c
    assert total == pytest.approx(1.0, abs=1e-4)
    # without the fold the same Gaussian keeps only about a third of its mass inside
    grid = np.stack(np.meshgrid(ms, ws, indexing="ij"), axis=-1)
    inside = stats.multivariate_normal(centre[:2], cov[:2, :2]).pdf(grid)
    assert integrate.simpson(integrate.simpson(inside, x=ws, axis=1), x=ms) < 0.5
    rng = np.random.default_rng(3)
    draws = np.array([fam._fold(centre + chol @ rng.standard_normal(4)) for _ in range(2000)])
    assert np.all((draws[:, 0] >= 3400) & (draws[:, 0] <= 4600))
    assert np.all((draws[:, 1] >= 40) & (draws[:, 1] <= 400))


def test_injected_state_is_absorbed_least_by_the_null() -> None:
    # the shift puts the other parameters where the null's fit to the state's Asimov set
    # returns the null's values: that fit's gain in −2 ln L over the null's values enters
    # the log weight of the state's toys (a spread in it is lost effective sample size).
    # At four states it is 1.4, 6.4, 16.0, 6.1 unshifted and 0.009, 5.8, 0.30, 0.39 shifted
    # (the second state's null fit has another minimum that no shift in the null's
    # parameters removes): never larger, in total more than 3 times smaller.
    from toyengine.core.fit import fit

    spec = _family_study(1)
    fam = signal_family(spec, spec.variants[0])
    before: list[float] = []
    after: list[float] = []
    for s in ([4100.0, 60.0, 0.25, -0.1], [3700.0, 45.0, -0.2, 0.2],
              [4400.0, 200.0, 0.3, 0.3], [3900.0, 100.0, 0.0, -0.35]):
        gains = []
        for x in (fam.nu0.copy(), fam.values(np.array(s))):
            x[fam.index] = s
            nll = fam.null.nll(*fam.model.asimov(x))
            res = fit(nll, fam.null.parameters, hesse=False)
            gains.append(2.0 * (float(nll(fam.null_values)) - res.nll))
        before.append(gains[0])
        after.append(gains[1])
    assert all(b <= a + 1e-6 for a, b in zip(before, after, strict=True)), (before, after)
    assert sum(after) < sum(before) / 3.0, (before, after)


def test_family_weights_have_mean_one() -> None:
    # E_q[p_0 r / q] = 1 exactly when every density in the weight is the one the toys were
    # drawn from (π, the injected state's extended likelihood, r(s | x)). 48 toys; the weights
    # lie in [0, 1/(1 − a)] = [0, 5]; the mean must lie within 3 standard errors of 1.
    # Most weights sit near 0 (injected toys) or 1/(1 − a) (null toys), so a constant
    # offset in the log ratio scarcely moves the mean (the normalisation of π is checked in
    # test_signal_density_is_normalised, the tail against plain toys in the slow test); a
    # ratio with the wrong sign gives a mean of about 4, outside the band.
    t, lr = _t_and_log_ratio(_family_study(11, 48), 48)
    assert np.all(np.isfinite(t))
    w = mixture_weights(lr, 0.8)
    se = float(np.std(w)) / math.sqrt(w.size)
    assert abs(float(np.mean(w)) - 1.0) < 3.0 * se, (np.mean(w), se)
    assert float(np.mean(mixture_weights(-lr, 0.8))) > 3.0


def test_family_toys_are_reproducible_across_chunks() -> None:
    # a toy's data set, its injected signal and its weight depend only on (seed, toy)
    spec = _family_study(5, 6)
    plan = Plan.of(spec)
    whole = run_chunk(plan, Chunk(0, 0, 0, 6)).arrays
    parts = [run_chunk(plan, Chunk(0, 0, 0, 3)).arrays, run_chunk(plan, Chunk(0, 0, 3, 6)).arrays]
    for name in ("log_ratio", "nll", "sampled_from", "value"):
        np.testing.assert_array_equal(whole[name], np.concatenate([p[name] for p in parts]))
    comps = [importance_component(spec, t, spec.variants[0]) for t in range(6)]
    assert set(comps) == {0, 1}
    injected = comps.index(1)
    a = toy_data(spec, injected)
    b = toy_data(spec, injected)
    for run, sample in a.runs.items():
        np.testing.assert_array_equal(sample.m2_kpi, b.runs[run].m2_kpi)


@pytest.mark.parametrize(("family", "error", "match"), [
    ("{masses: [m_zc], coupling: [re_zc, nope]}", ModelError, "'nope' is not a parameter"),
    ("{masses: [m_zc], coupling: [re_zc]}", SpecError, "coupling"),
    ("{widths: [m_zc, w_zc], coupling: [re_zc, im_zc], strength: 0}", SpecError, "strength"),
    ("{coupling: [re_zc, im_zc]}", ModelError, r"free parameters \['m_zc', 'w_zc'\]"),
])
def test_a_family_the_model_cannot_draw_is_refused(family: str, error: type,
                                                   match: str) -> None:
    with pytest.raises(error, match=match):
        check_importance(_family_study(1, family=family))


def test_family_needs_one_injected_model_and_no_points() -> None:
    with pytest.raises(SpecError, match="exactly one model"):
        _study(1, "importance: {inject: [H1], fraction: 0.8, points: {m_zc: [4000, 4200]}, "
               f"family: {FAMILY}}}")


def test_summary_of_a_family_store_quotes_the_weighted_p(client, tmp_path) -> None:
    # the engine end to end: a store of 12 toys, its summary quotes the weighted p with
    # its error (the weights of the stored log ratios) and the plain p of the null toys only
    spec = _family_study(3, 12)
    run_study(spec, tmp_path / "s.zarr", client=client)
    ds = open_results(tmp_path / "s.zarr")
    s = significance_summary(ds)
    t = 2.0 * (ds["nll"].sel(hypothesis="H0") - ds["nll"].sel(hypothesis="H1")).values[0]
    lr = ds["log_ratio"].values[0]
    want = weighted_pvalue(t, mixture_weights(lr, 0.8), 14.0, 0.8)
    assert s.importance["p"] == pytest.approx(want.p, rel=1e-12)
    assert s.importance["error"] == pytest.approx(want.error, rel=1e-12)
    comps = ds["sampled_from"].values[0]
    assert s.n_used == int(np.sum(comps == 0))


@pytest.mark.slow  # ~6 min on one core: 1200 plain and 400 importance-sampled toys
def test_family_tail_matches_plain_toys() -> None:
    # Threshold t ≥ 14, where P_0 ≈ 0.03 on this model (38 of 1200 plain toys): their
    # binomial standard error sqrt(p(1 − p)/N0) ≈ 0.005. N1 = 400 family toys give the
    # weighted estimate with its own standard error (std of w·1[t ≥ 14] over √N1: 0.022
    # here: 0.047 against 0.032, 0.7σ apart). Independent root seeds, so the difference has
    # σ = sqrt(σ0² + σ1²); we require it within 3σ. Unit weights (the injected toys counted
    # as null toys) would give 74/400 = 0.185, far outside. On this small model the injected
    # toys cover only part of the null's tail at 14 (null toys there weigh up to
    # 1/(1 − a) = 5 and carry much of the estimate, hence its error; docs/study-format.md),
    # so the check is of exactness, not efficiency.
    c = 14.0
    t0, _ = _t_and_log_ratio(_study(71, toys=1200), 1200)
    t0 = t0[np.isfinite(t0)]
    p0 = float(np.mean(t0 >= c))
    err0 = math.sqrt(p0 * (1.0 - p0) / t0.size)
    assert 0.01 < p0 < 0.1  # where plain toys can check it
    t1, lr = _t_and_log_ratio(_family_study(72, 400), 400)
    imp = weighted_pvalue(t1, mixture_weights(lr, 0.8), c, 0.8)
    assert abs(imp.p - p0) < 3.0 * math.hypot(err0, imp.error), (imp.p, imp.error, p0, err0)
    # the proposal moves toys into the tail: several times the null's share reaches it
    assert float(np.mean(t1 >= c)) > 3.0 * p0
