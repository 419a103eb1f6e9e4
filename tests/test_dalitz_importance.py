"""Importance sampling of Dalitz-plot toys (``importance:`` with Dalitz models): the weights
``p_0 / q`` of the generated data sets are exact (full extended density of both models,
Poisson yields included), their tail estimate agrees with plain toys where plain toys can
check it, and injected models with another phase space or other maps are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toyengine.errors import ModelError
from toyengine.study.plan import check_importance
from toyengine.study.recipe import importance_component, importance_log_ratios, toy_data
from toyengine.study.spec import StudySpec
from toyengine.summary.importance import mixture_weights, weighted_pvalue

#: a small B0 → ηc K+ π− model: ~190 decays and 20 + 20 background events per run, coarse
#: normalisation grid; H1 adds the Zc(4100)− at the builder's start values (Eur. Phys. J. C
#: 78 (2018) 1019), so that ln p_H1/p_H0 of an H0 toy is ≈ −6 ± 3.
_SMALL = ("yield_values: {run1: {sig: [150, 10], nr: [20, 5], comb: [20, 5]}, "
          "run2: {sig: [150, 10], nr: [20, 5], comb: [20, 5]}}, grid: {du: 0.1, n_t: 6}")


def _study(seed: int, importance: str = "", inject_options: str = "", *, toys: int = 10,
           observed: float = 5.0) -> StudySpec:
    return StudySpec.from_text(f"""
name: dalitz-importance
kind: significance
seed: {seed}
toys: {toys}
models:
  H0:
    builder: zc4100
    options: {{hypothesis: baseline, {_SMALL}}}
  H1:
    builder: zc4100
    options: {{hypothesis: nominal, {_SMALL}}}
  inj:
    builder: zc4100
    options: {{hypothesis: nominal, {inject_options}{_SMALL}}}
generate: H0
hypotheses: [H0, H1]
test: {{h0: H0, h1: H1, ndof: 4, observed: {observed}}}
{importance}
""")


def _toys(spec: StudySpec, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(s, log_ratio)`` of toys 0..n−1: s = ln p_H1/p_H0 at the generation values (the
    Neyman–Pearson statistic, no fit) and the stored log-ratio of each injected model."""
    v = spec.variants[0]
    s, lr = np.empty(n), []
    probe = _study(spec.seed, "importance: {inject: [H1], fraction: 0.5}")
    for t in range(n):
        data = toy_data(spec, t)
        s[t] = importance_log_ratios(probe, v, data)[0]
        if spec.importance is not None:
            lr.append(importance_log_ratios(spec, v, data))
    return s, np.array(lr)


@pytest.mark.slow  # ~60 s: 420 Dalitz toys
def test_dalitz_importance_matches_plain_toys() -> None:
    # Threshold s ≥ −2, where P_0 ≈ 0.1: N0 = 300 plain toys give a binomial standard error
    # sqrt(p(1 − p)/N0) ≈ 0.017; N1 = 120 toys from the mixture (80 % H1-injected) give the
    # importance estimate with its own standard error (std of w·1[s ≥ c] over √N1, ≈ 0.025
    # here: at p ≈ 0.1 the 80 % injection overshoots, and importance sampling pays off only
    # further in the tail). The two estimates are independent (different root seeds), so
    # their difference
    # has σ = sqrt(σ0² + σ1²); we require it within 3σ. Unit weights instead of p_0/q (the
    # injected toys counted as null toys) would give ≈ 0.75, 40σ away.
    c = -2.0
    plain = _study(71)
    s0, _ = _toys(plain, 300)
    p0 = float(np.mean(s0 >= c))
    err0 = math.sqrt(p0 * (1.0 - p0) / s0.size)
    spec = _study(72, "importance: {inject: [inj], fraction: 0.8}")
    s1, lr = _toys(spec, 120)
    w = mixture_weights(lr, 0.8)
    imp = weighted_pvalue(s1, w, c, 0.8)
    assert 0.04 < p0 < 0.2  # the threshold is where plain toys can check it
    assert abs(imp.p - p0) < 3.0 * math.hypot(err0, imp.error), (imp.p, imp.error, p0, err0)
    # E_q[p_0/q] = 1 exactly: the weights are the full density ratio (extended terms, Poisson
    # yields, normalisations); the sample mean is within 3 standard errors of 1.
    assert abs(float(np.mean(w)) - 1.0) < 3.0 * float(np.std(w)) / math.sqrt(w.size)
    comps = [importance_component(spec, t, spec.variants[0]) for t in range(120)]
    assert 0 < comps.count(0) < 60  # both mixture components were sampled


def test_dalitz_importance_weights_have_mean_one() -> None:
    # The short default version of the check above: E_q[p_0/q] = 1 holds only for the exact
    # density ratio. 40 toys; the weights lie in [0, 1/(1 − a)] = [0, 5], so the sample mean
    # has a standard error ≤ std(w)/√40 and must lie within 3 of them of 1. Leaving the
    # Poisson terms out of the ratio (yields 300 vs 300 here, so they cancel) would not
    # show; a ratio with the wrong sign gives a mean ≈ 4.
    spec = _study(73, "importance: {inject: [inj], fraction: 0.8}")
    v = spec.variants[0]
    lr = np.array([importance_log_ratios(spec, v, toy_data(spec, t)) for t in range(40)])
    w = mixture_weights(lr, 0.8)
    assert abs(float(np.mean(w)) - 1.0) < 3.0 * float(np.std(w)) / math.sqrt(w.size)
    assert abs(float(np.mean(mixture_weights(-lr, 0.8))) - 1.0) > 1.0


def test_dalitz_importance_weights_are_reproducible() -> None:
    # paired seeding: toy t's data set and its log-ratios depend only on (seed, t)
    spec = _study(5, "importance: {inject: [inj], fraction: 0.8}")
    a = importance_log_ratios(spec, spec.variants[0], toy_data(spec, 3))
    b = importance_log_ratios(spec, spec.variants[0], toy_data(spec, 3))
    assert np.array_equal(a, b) and np.all(np.isfinite(a))


@pytest.mark.parametrize(("option", "what"), [
    ("border_width: 60, ", "other vetoes"),
    ("d0_veto: false, ", "other vetoes"),
    ("masses: {B0: 5279.0}, ", "other particle masses"),
    ("map_files: {run1: {efficiency: eff_run2.npz}}, ",
     "another efficiency map in run 'run1'"),
])
def test_injected_model_with_another_space_is_refused(option: str, what: str) -> None:
    spec = _study(5, "importance: {inject: [inj], fraction: 0.8}", option)
    with pytest.raises(ModelError, match=f"model 'inj' has {what}"):
        check_importance(spec)


def test_dalitz_model_at_a_point_is_the_model_built_there() -> None:
    """H1 injected at a point of ``importance.points`` gives every toy the events and the
    log ratio of a model built with those values, bit for bit: the same likelihood, with
    its Gaussian constraint terms left out in both (they do not vanish here, 0.017 at the
    generation values, and a point that kept them would shift every ratio by that
    constant)."""
    built = _study(5, "importance: {inject: [inj], fraction: 0.8}",
                   "zc_mass: 4200, zc_width: 80, coefficient_values: {zc: [0.3, -0.1]}, ")
    point = _study(5, "importance: {inject: [H1], points: {m_zc: 4200, w_zc: 80, "
                   "re_zc: 0.3, im_zc: -0.1}, fraction: 0.8}")
    v = built.variants[0]
    drawn = set()
    for t in range(4):
        drawn.add(importance_component(point, t, v))
        assert importance_component(built, t, v) == importance_component(point, t, v)
        data = toy_data(built, t)
        other = toy_data(point, t)  # sampled from H1 at the point: the same events
        for run, sample in data.runs.items():
            np.testing.assert_array_equal(sample.m2_kpi, other.runs[run].m2_kpi)
            np.testing.assert_array_equal(sample.m2_etacpi, other.runs[run].m2_etacpi)
        np.testing.assert_array_equal(importance_log_ratios(built, v, data),
                                      importance_log_ratios(point, v, data))
    assert drawn == {0, 1}
