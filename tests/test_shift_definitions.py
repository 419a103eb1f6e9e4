"""The paper's shift definition, |ensemble mean − fit to the reference|, next to the paired
shift: arithmetic on a known answer, the reference being the fit to the reference, and the
summary section."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from toyengine.core.fit import fit
from toyengine.study.reference import asimov_reference, generator_model
from toyengine.study.spec import StudySpec, build_model
from toyengine.summary import SummaryError, render_summary, shift_definitions, summary_tables
from toyengine.summary.testing import make_results_dataset

DATA = Path(__file__).parent / "data"


def _synthetic(bias: float, shifts: list[float], n: int, seed: int, paired: bool = True):
    """Nominal fits = bias + noise (σ 1) per toy; variant k = nominal twin + shift_k + small
    independent noise (σ 0.05); reference 0."""
    rng = np.random.default_rng(seed)
    base = bias + rng.standard_normal(n)
    nv = 1 + len(shifts)
    vals = np.empty((nv, n, 1, 1))
    vals[0, :, 0, 0] = base
    for k, s in enumerate(shifts):
        vals[1 + k, :, 0, 0] = base + s + 0.05 * rng.standard_normal(n)
    return make_results_dataset(
        params=["x"], hypotheses=["default"], value=vals, truth=np.zeros((nv, 1)),
        reference=np.zeros(1), variant_names=["nominal", "up", "down"][:nv],
        variant_groups=["nominal", *(["A"] * len(shifts))], kind="model_variation", poi="x",
        paired=paired)


def test_both_definitions_on_a_known_answer() -> None:
    ds = _synthetic(bias=0.3, shifts=[0.5, -0.2], n=400, seed=4)
    vals = ds["value"].values[:, :, 0, 0]
    sd = shift_definitions(ds)
    up, down, nom = sd.row("up"), sd.row("down"), sd.row("nominal")
    for r, v in ((up, 1), (down, 2)):
        d = vals[v] - vals[0]
        assert r.paired["x"] == pytest.approx(d.mean(), rel=1e-12)
        assert r.paired_stat["x"] == pytest.approx(d.std(ddof=1) / math.sqrt(d.size), rel=1e-12)
        assert r.paper_signed["x"] == pytest.approx(vals[v].mean(), rel=1e-12)
        assert r.paper["x"] == abs(r.paper_signed["x"])
        assert r.paper_stat["x"] == pytest.approx(vals[v].std(ddof=1) / math.sqrt(vals[v].size),
                                                  rel=1e-12)
        # the paper's signed shift = paired shift + the default model's fit bias, exactly
        # (every toy valid)
        assert r.paper_signed["x"] - r.paired["x"] == pytest.approx(nom.paper_signed["x"],
                                                                   abs=1e-12)
    assert nom.paired == {"x": 0.0}
    # the known answer: paired shifts 0.5 ± 0.05/√400 and −0.2; the paper's carry the bias
    # 0.3 ± 1/√400 = 0.3 ± 0.05, so +0.8 and +0.1 (6σ margins below)
    assert up.paired["x"] == pytest.approx(0.5, abs=6 * 0.05 / 20)
    assert down.paired["x"] == pytest.approx(-0.2, abs=6 * 0.05 / 20)
    assert up.paper["x"] == pytest.approx(0.8, abs=6 * 0.05)
    assert down.paper["x"] == pytest.approx(0.1, abs=6 * 0.05)
    # the source: the largest |shift| of its alternatives under each definition
    src = sd.row("A")
    assert src.row_type == "source"
    assert src.paired["x"] == up.paired["x"]
    assert src.paper["x"] == max(up.paper["x"], down.paper["x"])
    txt = sd.to_text()
    assert "|mean − ref|" in txt and "Nature Physics 18 (2022) 751" in txt
    csv = sd.table().to_csv().splitlines()
    assert csv[0].startswith("row_type,group,name,mode,x_paired,x_paired_stat,x_paper")
    assert len(csv) == 1 + len(sd.rows)


def test_unpaired_store_is_refused_in_one_line() -> None:
    ds = _synthetic(bias=0.0, shifts=[0.5], n=20, seed=1, paired=False)
    with pytest.raises(SummaryError, match="not paired"):
        shift_definitions(ds)


def test_the_reference_is_the_default_models_fit_to_the_reference_data() -> None:
    # The store's reference (the default model's values) is what the paper calls "the value
    # obtained from the fit to the data sample": the default model fitted to the reference
    # (the Asimov data set of the nominal generator), started away from it, returns it.
    # Tolerance: 1 % of the fit's own error (MIGRAD's EDM tolerance on an Asimov set gives
    # far less; a reference that were not the fit's minimum would be off by O(σ)).
    spec = StudySpec.from_text((DATA / "tcc_variation_small.yaml").read_text(),
                               "tcc_variation_small.yaml", str(DATA))
    v = spec.variants[0]
    x, w = asimov_reference(generator_model(spec, v))
    model = build_model(spec, v, "default")
    ref = model.parameters.values
    start = model.parameters.with_values({"delta_m": -0.20, "gamma": 0.55})
    res = fit(model.nll(x, w), start)
    assert res.valid
    for n in ("delta_m", "gamma"):
        i = res.names.index(n)
        assert abs(res.values[i] - ref[list(model.parameters.names).index(n)]) \
            < 0.01 * res.errors[i], n


def test_summary_has_a_shift_definitions_section() -> None:
    ds = _synthetic(bias=0.3, shifts=[0.5, -0.2], n=50, seed=2)
    names = [t.name for t in summary_tables(ds)]
    assert names[:2] == ["systematics", "shift_definitions"]
    csv = render_summary(ds, "csv", sections=["shift_definitions"])
    assert csv.startswith("row_type,group,name,mode,x_paired")
    # the systematic table alone still makes one CSV
    assert render_summary(ds, "csv", sections=["systematics"]).startswith("row_type,source")
    data = json.loads(render_summary(ds, "json"))
    assert {r["name"] for r in data["shift_definitions"]} == {"A", "up", "down", "nominal"}
    # an unpaired store has no such section
    ds_u = _synthetic(bias=0.3, shifts=[0.5], n=50, seed=2, paired=False)
    assert "shift_definitions" not in [t.name for t in summary_tables(ds_u)]
