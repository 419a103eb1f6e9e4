"""The study plan and the kind table: built once from a spec, shipped whole to workers."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from toyengine.core.fit import fit
from toyengine.errors import ModelError
from toyengine.study.kinds import KIND_INFO, SECTIONS, UNKNOWN_KIND, kind_info
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import _scan_toy, run_chunk, toy_nll_function
from toyengine.study.spec import StudySpec, build_model
from toyengine.study.studyfile import KINDS

TEST = """
name: plan-test
kind: {kind}
seed: 3
toys: 5
models:
  B:
    builder: tcc
    options: {{signal: none, background_order: 1}}
    parameters: {{n_bkg: 150}}
  S:
    builder: tcc
    options: {{signal: bw, background_order: 1}}
    parameters: {{n_sig: {{value: 5.0, limits: [0.0, 500.0]}}, n_bkg: 150}}
generate: B
hypotheses: [S, B]
test: {{h0: B, h1: S}}
{extra}
"""


def _plan(kind: str, extra: str = "") -> Plan:
    return Plan.of(StudySpec.from_text(TEST.format(kind=kind, extra=extra)))


def test_every_kind_of_the_study_format_is_in_the_table():
    assert list(KINDS) == list(KIND_INFO)
    assert kind_info("no such kind") is UNKNOWN_KIND
    assert kind_info("") is UNKNOWN_KIND


def test_the_kind_rules():
    sig, jp = KIND_INFO["significance"], KIND_INFO["jp_rejection"]
    assert sig.nested_test and sig.toy_test and not sig.hesse
    assert jp.toy_test and not jp.nested and not jp.nested_test
    assert KIND_INFO["model_variation"].reference_fit
    assert not KIND_INFO["model_variation"].random_draws
    for k in ("template_smearing", "parameter_variation"):
        assert KIND_INFO[k].one_data_set and KIND_INFO[k].random_draws
    # the summary sections: a systematic study leads with its table, bookkeeping is last,
    # and sections that cannot apply are absent
    assert KIND_INFO["model_variation"].sections[0] == "systematics"
    assert KIND_INFO["goodness_of_fit"].sections == (
        "significance", "gof", "pulls", "ensembles", "bookkeeping")
    assert KIND_INFO["pulls"].sections == UNKNOWN_KIND.sections
    assert all(set(k.sections) <= set(SECTIONS) and k.sections[-1] == "bookkeeping"
               for k in KIND_INFO.values())


def test_nested_test_fits_the_null_first():
    plan = _plan("significance")
    assert plan.hypotheses == ("S", "B")
    assert plan.nested_pair == (1, 0) and plan.fit_order == (1, 0)
    jp = _plan("jp_rejection")
    assert jp.nested_pair is None and jp.fit_order == (0, 1)


def test_parameter_axis_labels_and_chunks():
    plan = _plan("pulls")
    assert plan.params[:2] == ("n_sig", "delta_m") and "n_bkg" in plan.params
    assert set(plan.labels) == set(plan.params)
    assert plan.labels["delta_m"][1] == "MeV"
    assert plan.scan is None and "scan_t" not in {f.name for f in plan.fields}
    assert plan.chunks(2) == [Chunk(0, 0, 0, 2), Chunk(1, 0, 2, 4), Chunk(2, 0, 4, 5)]
    assert plan.sizes == {"hypothesis": 2, "param": len(plan.params), "scan_point": 0,
                          "injected": 0}


def test_scan_plan_carries_the_grid_and_the_local_dof():
    plan = _plan("significance", "fit: {scan: {grid: [3, 2]}}")
    assert plan.scan.names == ("delta_m", "gamma") and plan.scan.points.shape == (6, 2)
    assert plan.scan.grid == (3, 2) and plan.scan.toys is None
    # n_sig alone is extra at fixed (delta_m, gamma), bounded at zero: one-sided, 1 dof
    assert (plan.scan.lee_dof, plan.scan.lee_one_sided) == (1, True)
    assert plan.sizes["scan_point"] == 6


def _narrow_plan(scan: str) -> Plan:
    """A significance plan whose signal width lies above zero (a log axis needs that)."""
    text = TEST.format(kind="significance", extra=f"fit: {{scan: {scan}}}").replace(
        "limits: [0.0, 500.0]}, n_bkg: 150",
        "limits: [0.0, 500.0]}, gamma: {value: 0.41, limits: [0.02, 2.0]}, n_bkg: 150")
    return Plan.of(StudySpec.from_text(text))


def test_scan_spacing_puts_both_limits_on_the_lattice():
    plan = _narrow_plan("{grid: [3, 4], spacing: [linear, log]}")
    h1 = build_model(plan.spec, plan.spec.variants[0], "S")
    (m_lo, m_hi), (g_lo, g_hi) = (h1.parameters[n].limits for n in ("delta_m", "gamma"))
    pts = plan.scan.points.reshape(3, 4, 2)  # C order: the first parameter slowest
    np.testing.assert_allclose(pts[:, 0, 0], [m_lo, 0.5 * (m_lo + m_hi), m_hi], rtol=1e-12)
    np.testing.assert_allclose(pts[1, :, 1], [g_lo, g_lo * (g_hi / g_lo) ** (1 / 3),
                                              g_lo * (g_hi / g_lo) ** (2 / 3), g_hi],
                               rtol=1e-12)
    # without spacing: the cell centres of an even grid, no limit among them
    centres = _narrow_plan("{grid: [3, 4]}").scan.points
    assert centres[:, 0].min() > m_lo and centres[:, 1].min() > g_lo


@pytest.mark.parametrize(("scan", "error"), [
    ("{grid: [3, 4], spacing: [log, log]}", "log needs 'delta_m' above zero"),
    ("{grid: [3, 4], spacing: [linear]}", "spacing has 1 entries"),
    ("{grid: [1, 4], spacing: [linear, log]}", "'delta_m' needs at least 2 points"),
])
def test_scan_spacing_that_cannot_be_built_is_refused(scan, error):
    with pytest.raises(ModelError, match=error):
        _narrow_plan(scan)


def test_the_scan_at_the_alternatives_own_minimum_gives_the_toys_t():
    # the scan fits start from the null minimum and from the alternative's own minimum (whose
    # nuisance parameters may lie in a mode the null's never reaches): at the alternative's
    # fitted (delta_m, gamma) the scan's t is the toy's t, up to the fits' convergence
    # (EDM < 1e-4 in -ln L each, so |Δt| < 4e-4)
    spec = _plan("significance", "fit: {scan: {grid: [3, 2]}}").spec
    h1, h0 = (build_model(spec, spec.variants[0], h) for h in ("S", "B"))
    for toy in range(3):
        nll1 = toy_nll_function(spec, toy, "S")
        r0 = fit(toy_nll_function(spec, toy, "B"), h0.parameters, hesse=False)
        r1 = fit(nll1, h1.parameters, starts=4, rng=np.random.default_rng(toy),
                 scan=h1.scan_parameters, hesse=False)
        point = np.array([[r1.values[list(r1.names).index(n)] for n in ("delta_m", "gamma")]])
        t = _scan_toy(h1, nll1, ("delta_m", "gamma"), point, r0, r0.nll, spec, h0.parameters,
                      r1)
        assert t[0] == pytest.approx(2.0 * (r0.nll - r1.nll), abs=4e-4)


def test_truth_is_computed_when_asked_and_the_plan_ships_whole():
    plan = _plan("pulls")
    assert "truth_and_reference" not in vars(plan)  # a resumed run never computes it
    truth, reference = plan.truth_and_reference
    assert truth.shape == (1, len(plan.params))
    assert truth[0, plan.params.index("n_bkg")] == 150.0
    assert np.isnan(truth[0, plan.params.index("n_sig")])  # the generator B has no signal
    # the first hypothesis (S) gives the reference values
    assert reference[plan.params.index("n_sig")] == 5.0
    shipped = pickle.loads(pickle.dumps(plan))
    a = run_chunk(plan, Chunk(0, 0, 0, 2)).arrays
    b = run_chunk(shipped, Chunk(0, 0, 0, 2)).arrays
    for name in a:
        if name != "fit_time":
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)



def test_summary_reads_only_the_kind_table_and_the_schema_of_the_study_layer():
    """The summaries interpret a store by its attributes: of the study layer they may read
    the kind table and the record schema, never the spec, the plan or the recipe."""
    import ast
    from pathlib import Path

    import toyengine.summary

    allowed = {"kinds", "schema"}
    bad = []
    for f in Path(toyengine.summary.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 2 and node.module):
                continue
            parts = node.module.split(".")
            if parts[0] == "study" and (len(parts) < 2 or parts[1] not in allowed):
                bad.append(f"{f.name} imports {node.module}")
    assert bad == []
