"""Paired pseudoexperiments: common random numbers in a model-variation store, shifts from
paired differences, degenerate variants, resume/extension, and the bootstrap total."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from toyengine import load_spec, open_results, run_study
from toyengine.errors import DegenerateVariantWarning
from toyengine.study.reference import check_degenerate
from toyengine.study.spec import StudySpec
from toyengine.summary import systematic_table
from toyengine.summary.testing import make_results_dataset

DATA = Path(__file__).parent / "data"
STUDY = DATA / "tcc_variation_small.yaml"
RESULT_VARS = ["value", "error", "nll", "valid", "status", "n_events"]
# the study's variant "same" is degenerate on purpose (tested below)
pytestmark = pytest.mark.filterwarnings(
    "ignore::toyengine.errors.DegenerateVariantWarning")


def _spec(paired: bool = True, toys: int | None = None) -> StudySpec:
    text = STUDY.read_text()
    if not paired:
        text += "paired: false\n"
    spec = StudySpec.from_text(text, str(STUDY), str(DATA))
    return spec.with_overrides(toys=toys)


@pytest.fixture(scope="module")
def paired_store(tmp_path_factory, client):
    path = tmp_path_factory.mktemp("paired") / "p.zarr"
    assert run_study(_spec(), path, client=client, chunk_size=24, progress=None).complete
    return path


@pytest.fixture(scope="module")
def unpaired_store(tmp_path_factory, client):
    path = tmp_path_factory.mktemp("unpaired") / "u.zarr"
    assert run_study(_spec(paired=False), path, client=client, chunk_size=24,
                     progress=None).complete
    return path


def test_identical_variant_gives_exactly_zero_and_is_flagged(paired_store) -> None:
    ds = open_results(paired_store)
    assert ds.attrs["paired"] == 1
    st = systematic_table(ds)
    assert st.relative_to == "paired"
    same = next(v for v in st.variants if v.name == "same")
    for p in ("delta_m", "gamma"):
        assert same.shift[p] == 0.0 and same.stat[p] == 0.0
    assert same.same_as == "nominal"
    assert ("same", "nominal") in st.degenerate
    assert st.source("identical").degenerate == ("same ≡ nominal",)
    assert "≡ nominal" in st.to_text(detail=True)
    # its data sets are the nominal ones, toy by toy
    np.testing.assert_array_equal(ds["n_events"].sel(variant=0), ds["n_events"].sel(variant=1))


def test_validation_reports_the_degenerate_variant_with_both_names() -> None:
    with pytest.warns(DegenerateVariantWarning,
                      match="variant 'same' generates the same density as 'nominal'"):
        pairs = check_degenerate(load_spec(STUDY))
    assert pairs == (("same", "nominal"),)


def test_paired_variance_is_far_below_unpaired(paired_store, unpaired_store) -> None:
    # Var(paired diff) = σ_v² + σ_n² − 2ρ σ_v σ_n versus σ_v² + σ_n² for independent
    # ensembles; with σ_v ≈ σ_n the ratio is 1/(1 − ρ). A per-toy correlation ρ ≥ 0.9 (what
    # quantile coupling of two resolution models gives) means a ratio ≥ 10. The estimate
    # from 24 toys has a relative error ≈ √(2/23) ≈ 0.3 on each variance, so requiring
    # ratio > 5 on both parameters and both variants leaves a > 3σ margin at ρ = 0.9; a
    # broken pairing (ρ ≈ 0) gives ratio ≈ 1 and fails.
    sp = systematic_table(open_results(paired_store))
    su = systematic_table(open_results(unpaired_store), relative_to="nominal")
    assert su.relative_to == "nominal"
    for name in ("scale_1.1", "student_t"):
        vp = next(v for v in sp.variants if v.name == name)
        vu = next(v for v in su.variants if v.name == name)
        for p in ("delta_m", "gamma"):
            ratio = (vu.stat[p] / vp.stat[p]) ** 2
            assert ratio > 5, (name, p, ratio)


def test_unpaired_store_draws_independent_data(unpaired_store) -> None:
    ds = open_results(unpaired_store)
    assert ds.attrs["paired"] == 0
    n = ds["n_events"].values
    assert not np.array_equal(n[0], n[1])  # the identical model, but other random numbers


def test_resume_and_extension_of_a_paired_store_are_bit_identical(tmp_path, paired_store,
                                                                   client) -> None:
    path = tmp_path / "ext.zarr"
    assert run_study(_spec(toys=10), path, client=client, chunk_size=3, progress=None).complete
    assert run_study(_spec(), path, client=client, chunk_size=7, progress=None).complete
    a = xr.open_zarr(path, consolidated=False)
    b = xr.open_zarr(paired_store, consolidated=False)
    for v in RESULT_VARS:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


def _synthetic(true_shifts, n_toys, rng, fail=None, noise=1.0, pair_noise=0.1):
    """Paired toy results: nominal fit = 0 + noise per toy; variant v = nominal twin +
    true shift + small independent noise (the part that pairing does not cancel)."""
    nv = 1 + len(true_shifts)
    base = noise * rng.standard_normal(n_toys)
    vals = np.empty((nv, n_toys, 1, 1))
    vals[0, :, 0, 0] = base
    for i, s in enumerate(true_shifts):
        vals[1 + i, :, 0, 0] = base + s + pair_noise * rng.standard_normal(n_toys)
    valid = np.ones((nv, n_toys, 1), bool)
    if fail is not None:
        for v, t in fail:
            valid[v, t, 0] = False
    return make_results_dataset(
        params=["x"], hypotheses=["default"], value=vals, valid=valid,
        truth=np.zeros((nv, 1)), reference=np.zeros(1),
        variant_names=["nominal", *(f"a{i}" for i in range(len(true_shifts) - 1)), "b"],
        variant_groups=["nominal", *(["A"] * (len(true_shifts) - 1)), "B"],
        kind="model_variation", poi="x", paired=True)


def test_failed_fit_drops_the_pair_and_is_counted() -> None:
    rng = np.random.default_rng(3)
    ds = _synthetic([0.5, 0.2], 20, rng, fail=[(0, 4), (2, 7)])
    st = systematic_table(ds, n_bootstrap=0)
    vals = ds["value"].values[:, :, 0, 0]
    a0, b = st.variants[1], st.variants[2]
    keep_a = np.ones(20, bool)
    keep_a[4] = False
    keep_b = keep_a.copy()
    keep_b[7] = False
    for vs, keep, v in ((a0, keep_a, 1), (b, keep_b, 2)):
        diff = vals[v, keep] - vals[0, keep]
        assert vs.shift["x"] == pytest.approx(diff.mean(), rel=1e-12)
        assert vs.stat["x"] == pytest.approx(diff.std(ddof=1) / math.sqrt(diff.size), rel=1e-12)
    assert (a0.n_pairs_dropped, b.n_pairs_dropped) == (1, 2)
    assert "2 pairs dropped" in st.to_text(detail=True)


def test_shift_flagged_below_two_sigma() -> None:
    rng = np.random.default_rng(5)
    ds = _synthetic([1e-4, 0.5], 50, rng)  # A: 1e-4 ≪ 2 × 0.1/√50; B: 0.5 ≫
    st = systematic_table(ds, n_bootstrap=0)
    assert st.source("A").significant == {"x": False}
    assert st.source("B").significant == {"x": True}
    txt = st.to_text(detail=True, show_stat=True)
    assert "†" in txt


def test_bootstrap_total_matches_point_total_and_keeps_json_keys() -> None:
    rng = np.random.default_rng(9)
    ds = _synthetic([0.05, 0.02, 0.03], 100, rng)
    st = systematic_table(ds, n_bootstrap=300)
    d = st.to_dict()
    assert {"total", "total_stat", "total_interval", "total_bias"} <= set(d)
    assert {"shift", "stat", "n_pairs_dropped", "same_as"} <= set(d["variants"][0])
    lo, hi = st.total_interval["x"]
    assert lo < st.total["x"] < hi
    assert st.total["x"] == pytest.approx(math.hypot(st.source("A").value["x"],
                                                     st.source("B").value["x"]))


def test_bootstrap_interval_coverage_on_a_known_answer() -> None:
    # Known answer: group A (alternatives with true shifts 0.05, 0.02) and B (0.03), paired
    # noise 0.1 per toy, 100 toys ⇒ stat 0.01 per shift: every source's maximum is resolved
    # (≥ 3σ), the regime in which the basic bootstrap interval is stated to cover.
    # True total √(0.05² + 0.03²). Over 150 repetitions the coverage of a 68.3 % interval
    # has a binomial spread √(0.683·0.317/150) = 0.038; we accept 0.683 ± 3 × 0.038.
    truth = math.hypot(0.05, 0.03)
    rng = np.random.default_rng(2022)
    reps = 150
    hits = 0
    for r in range(reps):
        st = systematic_table(_synthetic([0.05, 0.02, 0.03], 100, rng), n_bootstrap=200,
                              bootstrap_seed=r)
        lo, hi = st.total_interval["x"]
        hits += lo <= truth <= hi
    cov = hits / reps
    assert abs(cov - 0.683) < 3 * math.sqrt(0.683 * 0.317 / reps), cov


def test_alternatives_are_fitted_to_the_nominal_asimov_before_generating() -> None:
    from toyengine.study.reference import asimov_reference, generator_model
    from toyengine.study.spec import build_model

    spec = _spec()
    assert spec.reference_fit  # the default for model_variation
    nominal, alt = spec.variants[0], spec.variants[2]  # scale_1.1
    nom_model = build_model(spec, nominal, nominal.generate)
    x, w = asimov_reference(nom_model)
    yields = nom_model.parameters.values[nom_model._yield_idx]
    assert w.sum() == pytest.approx(yields.sum(), rel=1e-9)  # trapezoid-normalised density
    assert generator_model(spec, nominal) is nom_model  # the nominal generates as given
    raw = build_model(spec, alt, alt.generate)
    fitted = generator_model(spec, alt)
    # a wider resolution is compensated by a narrower BW: the fit moves gamma down, and the
    # fitted model describes the reference better than the unfitted one (lower Asimov NLL)
    g = raw.parameters.names.index("gamma")
    assert fitted.parameters.values[g] < raw.parameters.values[g] - 0.005
    assert (fitted.nll(x, w)(fitted.parameters.values)
            < raw.nll(x, w)(raw.parameters.values) - 1e-3)
    off = StudySpec.from_text(STUDY.read_text() + "reference_fit: false\n", str(STUDY),
                              str(DATA))
    assert not off.reference_fit
    np.testing.assert_array_equal(generator_model(off, off.variants[2]).parameters.values,
                                  raw.parameters.values)


def test_store_truth_holds_the_fitted_generator_values(paired_store) -> None:
    from toyengine.study.reference import generator_model

    ds = open_results(paired_store)
    spec = _spec()
    assert "Asimov" in ds.attrs["reference_fit"]
    for v in spec.variants:
        gen = generator_model(spec, v)
        got = ds["truth"].sel(variant=v.index, param=list(gen.parameters.names)).values
        np.testing.assert_array_equal(got, gen.parameters.values)


def test_total_error_is_the_bootstrap_spread() -> None:
    """The ± of the total is the spread of its bootstrap replicas; ``total_stat`` (errors
    propagated as if no maximum were taken) stays in JSON under its own name."""
    import json

    rng = np.random.default_rng(11)
    ds = _synthetic([0.05, 0.04], 60, rng, pair_noise=0.3)  # shifts ~ 1 σ_stat: noisy max
    st = systematic_table(ds, n_bootstrap=400, bootstrap_seed=3)
    assert st.total_error["x"] != st.total_stat["x"]
    assert math.isfinite(st.total_error["x"]) and st.total_error["x"] > 0
    data = json.loads(json.dumps(st.to_dict()))
    assert set(data["total_error"]) == {"x"} and set(data["total_stat"]) == {"x"}
    total_line = next(ln for ln in st.to_text(show_stat=True).splitlines()
                      if ln.startswith("Total"))
    k = st.scale.get("x", 1.0)
    from toyengine.summary._common import fmt_num

    assert f"± {fmt_num(st.total_error['x'] * k, 1)}" in total_line
    # the spread of the replicas, not the propagated candidate errors
    assert f"± {fmt_num(st.total_stat['x'] * k, 1)}" not in total_line


def test_precision_covers_the_separate_rows() -> None:
    """--precision targets every paired row the table prints: a separately reported
    variant's error counts (it was ignored)."""
    from toyengine.run.precision import systematic_stat_errors

    rng = np.random.default_rng(4)
    ds = _synthetic([0.5, 0.2], 40, rng)
    sep = np.array([False, False, True])  # "b" reported separately, with a noisier pairing
    ds["value"][2, :, 0, 0] = ds["value"][0, :, 0, 0] + 0.2 + 2.0 * rng.standard_normal(40)
    ds = ds.assign(variant_separate=("variant", sep))
    st = systematic_table(ds, n_bootstrap=0)
    b = next(v for v in st.variants if v.name == "b")
    assert b.separate
    got = systematic_stat_errors(ds, ["x"])["x"]
    assert got == pytest.approx(max(b.stat["x"], st.total_error["x"]), rel=1e-12)
    assert got >= b.stat["x"] > 0.2  # the separate row is the largest and is covered
