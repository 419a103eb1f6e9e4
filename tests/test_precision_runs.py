"""Precision-targeted runs of a model-variation study: rounds until every paired shift's
statistical error (and the total's) reaches its target, recorded in the store and the
summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gauss_studies import gauss_significance

from toyengine import load_spec, open_results, run_study
from toyengine.cli.main import main
from toyengine.errors import ToyEngineError
from toyengine.run.precision import (
    parse_precision,
    read_rounds,
    run_to_precision,
    systematic_stat_errors,
    toys_for_stat_errors,
    toys_for_weighted_precision,
)
from toyengine.summary import render_summary

STUDY = Path(__file__).resolve().parent.parent / "studies" / "examples" / \
    "gauss_exp_model_variation.yaml"


def test_parse_precision():
    assert parse_precision("0.1") == 0.1
    assert parse_precision("delta_m=0.001, gamma=0.005") == {"delta_m": 0.001, "gamma": 0.005}
    for bad in ("0", "-1", "x", "delta_m=", "=0.1", "delta_m=-1", "delta_m=nan"):
        with pytest.raises(ToyEngineError, match="NAME=ERROR"):
            parse_precision(bad)


def test_toys_for_weighted_precision():
    # an importance-sampled p with 40 % relative error on 500 toys: 20 % needs 4 x 500,
    # with the 10 % margin 2200; no toy beyond t_obs yet: twice the toys
    assert toys_for_weighted_precision(0.4, 500, 0.2, 10**6) == 2200
    assert toys_for_weighted_precision(0.1, 500, 0.2, 10**6) == 500
    assert toys_for_weighted_precision(float("nan"), 500, 0.2, 10**6) == 1000
    assert toys_for_weighted_precision(0.4, 500, 0.2, 1500) == 1500         # capped
    with pytest.raises(ToyEngineError, match="precision"):
        toys_for_weighted_precision(0.4, 500, 1.5, 10**6)


def test_toys_for_stat_errors():
    # an error of 2 on 100 toys falls as 1/sqrt(n): 1 needs 400, with the 10 % margin 440
    assert toys_for_stat_errors({"a": 2.0}, {"a": 1.0}, 100, 10**6) == 440
    assert toys_for_stat_errors({"a": 2.0}, {"a": 1.0}, 100, 300) == 300       # capped
    assert toys_for_stat_errors({"a": 0.9, "b": 0.1}, {"a": 1.0, "b": 1.0}, 100, 10**6) == 100
    # the worst parameter decides
    assert toys_for_stat_errors({"a": 0.5, "b": 3.0}, {"a": 1.0, "b": 1.0}, 100, 10**6) == 990


def test_precision_run_reaches_the_shift_target_and_says_so(tmp_path, capsys, client):
    spec = load_spec(STUDY).with_overrides(toys=20)
    first = tmp_path / "first.zarr"
    assert run_study(spec, first, client=client, progress=None).complete
    start = systematic_stat_errors(open_results(first), ["mu"])["mu"]
    # a target at 0.6 x the error of 20 toys: 1/sqrt(n) scaling asks for about
    # 20 / 0.36 x 1.1 = 61 toys, so at least two rounds and well below the cap
    target = 0.6 * start
    store = tmp_path / "p.zarr"
    report = run_to_precision(spec, store, {"mu": target}, 400, client=client,
                              progress=None)
    assert report.complete
    ds = open_results(store)
    end = systematic_stat_errors(ds, ["mu"])["mu"]
    assert end <= target
    rec = read_rounds(store)
    assert rec is not None and rec["reached"] and rec["targets"] == {"mu": target}
    toys = [r["toys"] for r in rec["rounds"]]
    assert toys[0] == 20 and len(toys) >= 2 and toys == sorted(toys) and toys[-1] < 400
    assert int(ds.sizes["toy"]) == toys[-1]
    text = render_summary(ds, "text")
    assert f"toys per variant {' → '.join(map(str, toys))}; target reached" in text
    js = json.loads(render_summary(ds, "json"))
    assert js["precision"]["rounds"][-1]["toys"] == toys[-1]
    # the same targets again: nothing to do, the record keeps its rounds
    run_to_precision(spec, store, {"mu": target}, 400, client=client, progress=None)
    assert [r["toys"] for r in read_rounds(store)["rounds"]] == toys


def test_precision_targets_name_their_problem(tmp_path, capsys):
    store = str(tmp_path / "s.zarr")
    with pytest.raises(SystemExit) as exc:  # argparse: exit code 2, one line
        main(["run", str(STUDY), "--store", store, "--precision", "mu=abc"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'mu=abc' is not NAME=ERROR" in err and len(err.strip().splitlines()) == 1
    # a parameter that the systematic table does not have
    assert main(["run", str(STUDY), "--store", store, "--toys", "4", "--workers", "1",
                 "--quiet", "--precision", "nonsense=0.1"]) == 1
    err = capsys.readouterr().err
    assert "'nonsense' is not a parameter of the systematic table" in err


#: t = 100 x̄² of 100 unit Gaussians (H0: mean 0; H1: mean free), exactly χ²(1)
_SIG = gauss_significance(name="precision-gauss", seed=4, toys=20, observed="OBS",
                          injected_mu="MU")


def test_pvalue_precision_stopped_by_max_toys_is_not_reached(tmp_path, client):
    """p(t ≥ 1) = 0.32: 1 % needs ≈ 21 000 toys; --max-toys 40 stops the run short, and the
    record must say the target was not reached (it said reached: the toy count asked for
    was capped at the count already run)."""
    from toyengine.study.spec import StudySpec

    spec = StudySpec.from_text(_SIG.replace("OBS", "1.0").replace("MU", "0.5"))
    store = tmp_path / "p.zarr"
    assert run_to_precision(spec, store, 0.01, 40, client=client, progress=None).complete
    rec = read_rounds(store)
    assert [r["toys"] for r in rec["rounds"]] == [20, 40] and rec["rounds"][-1]["n_exceed"]
    assert rec["reached"] is False
    text = " ".join(render_summary(open_results(store), "text").split())  # unwrapped
    assert "toys per variant 20 → 40; target NOT reached (stopped at --max-toys 40)" in text


def test_weighted_precision_needs_a_reliable_tail(tmp_path, client):
    """Importance sampling at t_obs = 25 (5σ) with the mean injected at ±0.8 (t ≈ 64 on
    average), far beyond t_obs: the few toys near t_obs carry the estimate (Pareto k̂ far
    above 0.7), so its standard error is no measure of its precision and a loose 50 %
    target is not reached, whatever that error says; the round records k̂."""
    from toyengine.study.spec import StudySpec

    text = _SIG.replace("OBS", "25.0").replace("MU", "0.8") + \
        "importance: {inject: [up, down], fraction: 0.8}\n"
    spec = StudySpec.from_text(text.replace("toys: 20", "toys: 400"))
    store = tmp_path / "w.zarr"
    assert run_to_precision(spec, store, 0.5, 400, client=client, progress=None).complete
    last = read_rounds(store)["rounds"][-1]
    assert last["toys"] == 400 and last["pareto_k"] > 0.7
    assert read_rounds(store)["reached"] is False
    # the summary says so beside the estimate, and in the paper table
    ds = open_results(store)
    text = " ".join(render_summary(ds, "text").split())
    assert "The importance-sampled p_toys is NOT reliable: the Pareto shape" in text
    from toyengine.summary.paper import significance_paper_table

    assert "NOT reliable" in " ".join(significance_paper_table(ds).to_text().split())
