"""Importance-sampled significance studies run by the engine (``importance:``): toys from a
defensive mixture of the null and signal-injected models, weighted by the likelihood ratio
in the significance summary, validated where the answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gauss_studies import gauss_significance
from scipy import stats

from toyengine import open_results, run_study
from toyengine.errors import ModelError, SpecError
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk, toy_nll
from toyengine.study.spec import StudySpec
from toyengine.summary.significance import significance_summary

P25 = float(stats.chi2.sf(25.0, 1))  # 5.73e-7: P(χ²(1) ≥ 25), a two-sided 5σ

#: t = 2 (nll_H0 − nll_H1) for the mean of 100 unit-width Gaussian values, H0: mean 0,
#: H1: mean free, width fixed: t = 100 x̄², exactly χ²(1) (no asymptotics). The injected
#: models put the mean at ±0.5 = ±5/√100, i.e. t ≈ 25 on average.
GAUSS = gauss_significance(name="wilks-gauss", seed=3, toys="TOYS", observed=25.0,
                           injected_mu=0.5,
                           importance="{inject: [up, down], fraction: 0.5}")


def _mass1d(n_sig: str, hi: float = 1.0) -> str:
    return f"""
    builder: mass1d
    options:
      observable: {{name: x, range: [0.0, {hi}]}}
      grid_step: 0.002
      parameters:
        n_sig: {n_sig}
        mu: {{value: 0.5, fixed: true}}
        sigma: {{value: 0.04, fixed: true}}
        n_bkg: {{value: 2000, limits: [0, 100000]}}
        slope: {{value: 0.0, fixed: true}}
      components:
        - {{name: signal, shape: gaussian, yield: n_sig}}
        - {{name: background, shape: exponential, yield: n_bkg}}"""


#: the fixed-shape yield model: a Gaussian signal N(0.5, 0.04) of free yield (either sign) on
#: 2000 flat background events in [0, 1]; t ~ χ²(1) (Wilks; the yield enters linearly).
#: σ(n_sig) with the background yield profiled is [(∫f_s²/f_b − 1)/n_b]^(−1/2) = 18.2
#: (∫f_s² = 1/(2√π σ) = 7.05), so ±91 events inject ±5σ.
MASS1D = f"""
name: wilks-fixed-shape
kind: significance
seed: 12
toys: TOYS
models:
  H0:{_mass1d("{value: 0.0, fixed: true}")}
  H1:{_mass1d("{value: 0.0, limits: [-2000, 2000]}")}
  up:{_mass1d("{value: 91.0, fixed: true}")}
  down:{_mass1d("{value: -91.0, fixed: true}")}
generate: H0
hypotheses: [H0, H1]
test: {{h0: H0, h1: H1, ndof: 1, observed: 25.0}}
importance: {{inject: [up, down], fraction: 0.5}}
"""


def _study(text: str, toys: int) -> str:
    return text.replace("TOYS", str(toys))


def _check_p25(ds) -> dict:
    """The summary's importance-sampled p at t = 25 agrees with χ²(1) within 3 of its own
    standard errors: the estimate is a mean of n bounded terms w·1[t ≥ 25] (w ≤ 1/(1 − a)
    = 2), normal to a good approximation at n in the thousands, so a correct estimator
    fails this check with probability 0.27 %."""
    s = significance_summary(ds)
    imp = s.importance
    assert imp is not None
    assert abs(s.p_toys - P25) < 3.0 * imp["error"], (s.p_toys, imp["error"], P25)
    d = s.to_dict()
    assert d["importance"]["ess"] == imp["ess"] and d["p_toys"] == s.p_toys
    text = s.to_text()
    assert "effective sample size" in text and "importance-sampled" in text
    # thousands of bounded weights: no toy carries the estimate
    assert "largest toy's share of p_toys" in text and imp["top_share"] < 0.05
    return imp


def test_gaussian_mean_reaches_five_sigma_within_its_error(client, tmp_path):
    """4000 toys, half from the injected models: p(t ≥ 25) = 5.73e-7 (exact) within 3
    standard errors, the error below 10 % (5.7 % measured; a plain toy p-value would need
    3 × 10⁸ toys for it), and the effective sample size near n (weights ≤ 2)."""
    spec = StudySpec.from_text(_study(GAUSS, 4000))
    run_study(spec, tmp_path / "s.zarr", client=client, chunk_size=500, progress=None)
    ds = open_results(tmp_path / "s.zarr")
    imp = _check_p25(ds)
    assert imp["error"] < 0.1 * P25
    assert imp["ess"] > 0.4 * 4000
    assert imp["n_toys"] == 4000 and imp["inject"] == ["up", "down"]
    assert imp["inject_points"] is None
    assert imp["reliable"] and imp["pareto_k"] < imp["k_threshold"]  # a proposal that fits
    drawn = np.bincount(ds["sampled_from"].values.ravel(), minlength=3)
    # component shares 1/2, 1/4, 1/4 within 4 binomial standard deviations
    for k, share in enumerate((0.5, 0.25, 0.25)):
        assert abs(drawn[k] - 4000 * share) < 4 * math.sqrt(4000 * share * (1 - share))
    _check_no_toy_beyond(ds)


def _check_no_toy_beyond(ds) -> None:
    """At a t no toy reaches (t = 400 is 20σ; the injected toys peak near t = 25), p = 0 ± 0
    would claim infinite significance: the summary quotes instead the weight-bound upper
    limit CP(0 of n)/(1 − a), with CP's upper end for k = 0 in closed form 1 − (α/2)^(1/n),
    α = 1 − 0.6827, and the Z it gives as a lower limit."""
    far = ds.copy()
    far.attrs["observed_t"] = 400.0
    s = significance_summary(far)
    n = s.importance["n_toys"]
    bound = (1.0 - ((1.0 - 0.682689492137086) / 2.0) ** (1.0 / n)) / (1.0 - 0.5)
    assert s.p_toys == 0.0 and s.p_toys_count == (0, n)
    assert s.p_toys_interval[0] == 0.0
    assert s.p_toys_interval[1] == pytest.approx(bound, rel=1e-9)
    assert s.z_toys_is_lower_limit
    assert s.z_toys == pytest.approx(float(stats.norm.isf(bound / 2.0)), rel=1e-9)
    text = s.to_text()
    assert "weight bound" in text and "no toy exceeds" in text
    assert s.to_dict()["importance"]["upper_limit"] == pytest.approx(bound, rel=1e-9)


@pytest.mark.slow
def test_fixed_shape_yield_reaches_five_sigma_within_its_error(client, tmp_path):
    """The unbinned fixed-shape yield model (mass1d, the negative-signal model drawn from
    the total density): p(t ≥ 25) within 3 standard errors of χ²(1)."""
    spec = StudySpec.from_text(_study(MASS1D, 4000))
    run_study(spec, tmp_path / "s.zarr", client=client, chunk_size=500, progress=None)
    imp = _check_p25(open_results(tmp_path / "s.zarr"))
    assert imp["error"] < 0.3 * P25


def test_an_injected_model_of_another_range_is_refused_before_any_toy():
    """The weight compares two densities of the same data: an injected model over
    x ∈ [0, 2] against a generator over [0, 1] is refused when the plan is made, naming
    the model and both ranges."""
    text = _study(MASS1D, 10).replace(_mass1d("{value: 91.0, fixed: true}"),
                                      _mass1d("{value: 91.0, fixed: true}", hi=2.0))
    assert text != _study(MASS1D, 10)
    with pytest.raises(ModelError, match=r"importance.inject: model 'up' describes "
                       r"\('observable', 'x', 0.0, 2.0\)"):
        Plan.of(StudySpec.from_text(text))
    Plan.of(StudySpec.from_text(_study(MASS1D, 10)))  # the same ranges pass


def test_log_ratios_and_components_are_reproducible_and_exact():
    """Whatever the chunking, each toy gets the same component and data; the stored log
    ratio is ln p_k − ln p_0 of that data set (for the Gaussian mean: n μ_k x̄ − n μ_k²/2),
    and the stored −ln L refits to what toy_nll gives."""
    spec = StudySpec.from_text(_study(GAUSS, 12))
    plan = Plan.of(spec)
    whole = run_chunk(plan, Chunk(0, 0, 0, 12)).arrays
    parts = [run_chunk(plan, Chunk(i, 0, a, min(a + 5, 12))).arrays for i, a in
             enumerate(range(0, 12, 5))]
    for name in ("sampled_from", "log_ratio", "nll", "value"):
        np.testing.assert_array_equal(whole[name], np.concatenate([p[name] for p in parts]))
    from toyengine.study.recipe import toy_data

    for t in range(12):
        x = toy_data(spec, t)
        n, xbar = len(x), float(np.mean(x))
        want = [n * m * xbar - n * m * m / 2 for m in (0.5, -0.5)]
        np.testing.assert_allclose(whole["log_ratio"][t], want, rtol=1e-9, atol=1e-9)
        assert toy_nll(spec, t, "H1", whole["value"][t, 1]) == whole["nll"][t, 1]
    assert set(whole["sampled_from"]) <= {0, 1, 2}


def test_importance_is_checked_when_the_study_is_read():
    with pytest.raises(SpecError, match="importance.inject"):
        StudySpec.from_text(_study(GAUSS, 2).replace("inject: [up, down]",
                                                         "inject: [up, nowhere]"))
    with pytest.raises(SpecError, match="importance.inject"):
        StudySpec.from_text(_study(GAUSS, 2).replace("inject: [up, down]",
                                                         "inject: [H0]"))
    with pytest.raises(SpecError, match="fraction"):
        StudySpec.from_text(_study(GAUSS, 2).replace("fraction: 0.5", "fraction: 1.0"))
    pulls = _study(GAUSS, 2).replace("kind: significance", "kind: pulls").replace(
        "test: {h0: H0, h1: H1, ndof: 1, observed: 25.0}\n", "")
    with pytest.raises(SpecError, match="importance"):
        StudySpec.from_text(pulls)


def test_studies_without_importance_keep_their_digest_and_fields():
    plain = _study(GAUSS, 2).replace("importance: {inject: [up, down], fraction: 0.5}\n",
                                         "")
    spec = StudySpec.from_text(plain)
    assert spec.importance is None
    names = {f.name for f in Plan.of(spec).fields}
    assert "log_ratio" not in names and "sampled_from" not in names
    assert StudySpec.from_text(_study(GAUSS, 2)).digest != spec.digest


#: GAUSS with H1 injected at the two points mu = ±0.5 instead of the models up and down
GAUSS_POINTS = GAUSS.replace("importance: {inject: [up, down], fraction: 0.5}",
                             "importance: {inject: [H1], points: {mu: [0.5, -0.5]}, "
                             "fraction: 0.5}")


def test_one_model_at_points_is_the_same_mixture_as_one_model_per_point():
    """H1 (mu free, sigma fixed at 1) injected at mu = ±0.5 is the same density as the
    models up and down: every toy gets the same component, data, fits and log ratios,
    bit for bit, and the injected components are named by model and point."""
    models = Plan.of(StudySpec.from_text(_study(GAUSS, 12)))
    spec = StudySpec.from_text(_study(GAUSS_POINTS, 12))
    points = Plan.of(spec)
    assert points.injected == ("H1[0]", "H1[1]")
    assert spec.importance["points"] == {"mu": [0.5, -0.5]}
    a = run_chunk(models, Chunk(0, 0, 0, 12)).arrays
    b = run_chunk(points, Chunk(0, 0, 0, 12)).arrays
    assert set(a["sampled_from"]) == {0, 1, 2}
    for name in ("sampled_from", "log_ratio", "nll", "value", "status"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    from toyengine.study.recipe import toy_data

    # toy_data rebuilds an injected toy from the point, not the model's own values
    t = int(np.flatnonzero(b["sampled_from"] == 1)[0])
    np.testing.assert_array_equal(toy_data(spec, t), toy_data(StudySpec.from_text(
        _study(GAUSS, 12)), t))


def test_importance_points_are_checked_when_the_study_is_read():
    text = _study(GAUSS_POINTS, 2)
    with pytest.raises(SpecError, match="exactly one model"):
        StudySpec.from_text(text.replace("inject: [H1]", "inject: [H1, up]"))
    with pytest.raises(SpecError, match="one length K"):
        StudySpec.from_text(text.replace("{mu: [0.5, -0.5]}",
                                         "{mu: [0.5, -0.5], sigma: [1.0, 1.0, 1.0]}"))
    spec = StudySpec.from_text(text.replace("{mu: [0.5, -0.5]}",
                                            "{mu: [0.5, -0.5], sigma: 1.0}"))
    assert spec.importance["points"]["sigma"] == [1.0, 1.0]
    with pytest.raises(ModelError, match="'nu' is not a parameter of model 'H1'"):
        Plan.of(StudySpec.from_text(text.replace("{mu: [", "{nu: [")))
    with pytest.raises(ModelError, match=r"sigma = -1 is outside its limits"):
        Plan.of(StudySpec.from_text(text.replace("{mu: [0.5, -0.5]}",
                                                 "{mu: [0.5, -0.5], sigma: -1.0}")))
    # the digest of a study without points is the one it had before points existed
    assert "points" not in StudySpec.from_text(_study(GAUSS, 2)).importance


def test_summary_names_the_injected_model_and_its_point_count(client, tmp_path):
    spec = StudySpec.from_text(_study(GAUSS_POINTS, 40))
    run_study(spec, tmp_path / "p.zarr", client=client, chunk_size=20, progress=None)
    ds = open_results(tmp_path / "p.zarr")
    assert list(ds["injected"].values) == ["H1[0]", "H1[1]"]
    summary = significance_summary(ds)
    assert "generated from H1 at 2 parameter points (equal shares)" in summary.to_text()
    # the dictionary names the model and counts its points (not one name per point)
    imp = summary.to_dict()["importance"]
    assert (imp["inject"], imp["inject_points"]) == (["H1"], 2)


def test_show_prints_the_points_as_count_and_ranges():
    from toyengine.study.show import describe_study

    text = describe_study(StudySpec.from_text(_study(GAUSS_POINTS, 2)))
    assert "importance:\n  inject:\n  - H1\n  fraction: 0.5\n  points:\n    count: 2\n" \
           "    mu: -0.5 … 0.5\n" in text
    models = describe_study(StudySpec.from_text(_study(GAUSS, 2)))
    assert "importance:\n  inject:\n  - up\n  - down\n  fraction: 0.5\n" in models


def test_paper_table_row_of_an_importance_sampled_store(client, tmp_path):
    """The paper table's importance-sampled row: p ± error with the toy count beyond t_obs
    and the largest toy's share; with no toy beyond t_obs (t = 400 is 20σ) the weight-bound
    upper limit and a lower limit on Z, never p = 0 ± 0."""
    from toyengine.summary._common import fmt_num
    from toyengine.summary.paper import significance_paper_table

    rows = {}
    for obs in ("25.0", "400.0"):
        spec = StudySpec.from_text(_study(GAUSS_POINTS, 40).replace("observed: 25.0",
                                                                    f"observed: {obs}"))
        run_study(spec, tmp_path / f"{obs}.zarr", client=client, chunk_size=20,
                  progress=None)
        ds = open_results(tmp_path / f"{obs}.zarr")
        table = {r[0].text: (r[1].text, r[2].text) for r in significance_paper_table(ds).rows}
        rows[obs] = (table["p, Z from toys (importance-sampled)"],
                     significance_summary(ds).importance)
    (text, count), imp = rows["25.0"]
    assert imp["n_exceed"] > 0  # seed 3: about half the injected toys reach t = 25
    assert text.startswith(f"{fmt_num(imp['p'], 3)} ± ") and "largest toy" in text
    assert count == f"{imp['n_exceed']}/40"
    (text, count), imp = rows["400.0"]
    assert imp["n_exceed"] == 0
    assert text.startswith(f"< {fmt_num(imp['upper_limit'], 2)} (no toy beyond t_obs")
    assert text.endswith(f"> {fmt_num(significance_summary(ds).z_toys, 3)}σ")
    assert count == "0/40"
