"""The live line equals the summary: the running paired shifts of a model-variation study
and the running toy p-value of a significance study are the summary's numbers, also after a
resume (the chunks already in the store are folded in)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from gauss_studies import gauss_significance

from toyengine.run.live import _num, fold_store, physics_text
from toyengine.run.runner import _live_physics
from toyengine.store import StoreInfo, create_store, open_results, write_chunk
from toyengine.study.plan import Plan
from toyengine.study.recipe import run_chunk
from toyengine.study.spec import load_spec
from toyengine.summary import significance_summary
from toyengine.summary.systematics import systematic_table

ROOT = Path(__file__).resolve().parents[1]


def _store_and_live(spec, path: Path, chunk_size: int, resume_after: int):
    """Write every chunk of ``spec`` here; the live physics folds the first
    ``resume_after`` chunks from the store (as a resumed run does) and the rest as they
    finish."""
    plan = Plan.of(spec)
    chunks = create_store(path, plan, chunk_size)
    results = [run_chunk(plan, c) for c in chunks]
    for r in results[:resume_after]:
        write_chunk(path, r, spec.toys, chunk_size)
    info = StoreInfo(path)
    live = _live_physics(plan, info)
    fold_store(live, info.group, info.chunks(), info.done())
    for r in results[resume_after:]:
        write_chunk(path, r, spec.toys, chunk_size)
        live.add(r)
    return live, open_results(path)


@pytest.mark.filterwarnings("ignore::toyengine.errors.DegenerateVariantWarning")
def test_live_paired_shifts_equal_the_summary(tmp_path):
    spec = load_spec(ROOT / "studies" / "examples" / "gauss_exp_model_variation.yaml")
    spec = spec.with_overrides(toys=12)
    live, ds = _store_and_live(spec, tmp_path / "s.zarr", chunk_size=4, resume_after=4)
    shifts = live.shifts()
    table = systematic_table(ds)
    assert table.relative_to == "paired"
    seen = 0
    for vs in table.variants:
        if vs.group.lower() == "nominal":
            continue
        for p in spec.poi:
            row = shifts[p][vs.name]
            assert row["n"] == vs.n_used
            # the same numbers (summed in another order: rounding only) ...
            np.testing.assert_allclose(row["shift"], vs.shift[p], rtol=1e-9)
            np.testing.assert_allclose(row["error"], vs.stat[p], rtol=1e-9)
            # ... and the same digits on the line
            assert _num(row["error"], 1) == _num(vs.stat[p], 1)
            seen += 1
    assert seen == 2 * len(spec.poi)
    assert "shift n_sig" in physics_text(live.to_dict(), spec.kind)


def test_live_pvalue_equals_the_summary(tmp_path):
    spec = load_spec(ROOT / "tests" / "data" / "cb_cheb_significance.yaml")
    spec = spec.with_overrides(toys=30)
    live, ds = _store_and_live(spec, tmp_path / "s.zarr", chunk_size=10, resume_after=1)
    pv = live.pvalue()
    s = significance_summary(ds)
    assert (pv["k"], pv["n"]) == s.p_toys_count == (s.p_toys_count[0], 30)
    assert pv["p"] == s.p_toys
    lo, hi = s.p_toys_interval
    assert (pv["lo"], pv["hi"]) == pytest.approx((lo, hi), rel=1e-12)
    text = physics_text(live.to_dict(), spec.kind)
    assert f"({pv['k']}/30)" in text
    assert "pull" not in text  # the significance fits have no errors: no empty pulls


def test_interrupt_message_bounds_what_may_still_land():
    from toyengine.errors import Interrupted

    assert str(Interrupted(408, 1000)) == (
        "interrupted: 408/1000 toys saved; run the same command to resume")
    msg = str(Interrupted(408, 1000, 100))
    assert msg.startswith("interrupted: 408/1000 toys saved (up to 100 more may still land")


#: t = 100 x̄² (exactly χ²(1)) with a quarter of the toys each from the mean at ±0.3
IMPORTANCE = gauss_significance(
    name="live-importance", seed=5, toys=60, observed=9.0,
    importance="{inject: [H1], points: {mu: [0.3, -0.3]}, fraction: 0.5}")


def test_live_pvalue_of_an_importance_sampled_study_is_the_weighted_one(tmp_path):
    """The running p of an importance-sampled study is the summary's weighted estimate ±
    its error, not the fraction of mixture toys beyond t_obs (here 10/60, 60 times
    P_0(t ≥ 9) = 0.0027)."""
    from toyengine.study.spec import StudySpec

    spec = StudySpec.from_text(IMPORTANCE)
    live, ds = _store_and_live(spec, tmp_path / "s.zarr", chunk_size=20, resume_after=1)
    pv = live.pvalue()
    s = significance_summary(ds)
    imp = s.importance
    assert pv["weighted"] and pv["n"] == imp["n_toys"] == 60
    assert pv["k"] == imp["n_exceed"] >= 5
    np.testing.assert_allclose(pv["p"], imp["p"], rtol=1e-12)
    np.testing.assert_allclose(pv["hi"] - pv["p"], imp["error"], rtol=1e-9)
    assert pv["p"] < 0.2 * pv["k"] / pv["n"]  # far below the unweighted fraction
    assert "importance-sampled" in physics_text(live.to_dict(), spec.kind)
    # the tail diagnostic too, from the largest terms the live numbers keep
    assert math.isfinite(imp["pareto_k"])
    np.testing.assert_allclose(pv["pareto_k"], imp["pareto_k"], rtol=1e-9)
    assert pv["reliable"] == imp["reliable"]
    line = physics_text({"pvalue": {**pv, "pareto_k": 1.43, "reliable": False}}, spec.kind)
    assert line.endswith(f"({pv['k']}/60) | NOT reliable (Pareto k̂ 1.4)")

