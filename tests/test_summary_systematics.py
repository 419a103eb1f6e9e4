"""Systematic-table arithmetic against hand-computed examples, and its renderings."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest

from toyengine.summary import SummaryError, systematic_table
from toyengine.summary.testing import make_results_dataset

# Toy offsets with mean exactly 0 and std (ddof=1) s = √(0.2/3): every ensemble mean below
# is exact and every statistical error is s/2 (4 toys).
OFFSETS = np.array([-0.3, -0.1, 0.1, 0.3])
STAT = math.sqrt(0.2 / 3) / 2

# name, group, separate, mean of m, mean of g       (reference m = 10, g = 5)
VARIANTS = [
    ("default", "nominal", False, 10.1, 5.0),
    ("res_A", "resolution", False, 10.5, 4.0),
    ("res_B", "resolution", False, 9.2, 5.3),
    ("scale_up", "momentum scale", False, 10.4, 5.0),
    ("scale_down", "momentum scale", False, 9.8, 5.0),
    ("poly0", "background", False, 10.3, 5.0),
    ("L=0", "J^P", True, 10.11, 4.62),
    ("L=2", "J^P", True, 9.86, 5.18),
]


def _dataset(variants=VARIANTS, kind="model_variation", failed=None):
    nv, nt = len(variants), OFFSETS.size
    val = np.empty((nv, nt, 1, 2))
    for i, (_, _, _, m, g) in enumerate(variants):
        val[i, :, 0, 0] = m + OFFSETS
        val[i, :, 0, 1] = g + OFFSETS
    status = np.ones((nv, nt, 1), np.int8)
    if failed is not None:
        for v, toy in failed:
            status[v, toy, 0] = 2
            val[v, toy, 0, :] = 1e6  # garbage: must not enter
    return make_results_dataset(
        params=["m", "g"],
        hypotheses=["nominal"],
        value=val,
        error=np.full_like(val, 0.5),
        status=status,
        truth=np.array([[10.0, 5.0]] * nv),
        reference=np.array([10.0, 5.0]),
        variant_names=[v[0] for v in variants],
        variant_groups=[v[1] for v in variants],
        variant_separate=[v[2] for v in variants],
        kind=kind,
        poi="m g",
    )


def test_symmetric_max_quadrature_and_half_difference():
    st = systematic_table(_dataset())
    assert st.params == ("m", "g") and st.hypothesis == "nominal"
    assert [r.source for r in st.rows] == ["resolution", "momentum scale", "background"]
    assert [r.source for r in st.separate] == ["J^P"]
    res, mom, bkg = st.rows
    # resolution: shifts m = +0.5, −0.8 → max 0.8 (res_B); g = −1.0, +0.3 → 1.0 (res_A)
    assert res.value["m"] == pytest.approx(0.8) and res.chosen["m"] == "res_B"
    assert res.signed["m"] == pytest.approx(-0.8)
    assert res.value["g"] == pytest.approx(1.0) and res.chosen["g"] == "res_A"
    assert res.stat["m"] == pytest.approx(STAT) and res.rule == "max"
    # momentum scale pair: half-difference (0.4 − (−0.2))/2 = 0.3; stat √2·s/2 /2... = s/√2
    assert mom.rule == "half-diff" and mom.value["m"] == pytest.approx(0.3)
    assert mom.stat["m"] == pytest.approx(STAT / math.sqrt(2))
    assert mom.value["g"] == pytest.approx(0.0, abs=1e-12)
    assert bkg.value["m"] == pytest.approx(0.3) and bkg.rule == "single"
    # totals (J^P excluded): √(0.8² + 0.3² + 0.3²), √(1.0² + 0 + 0)
    assert st.total["m"] == pytest.approx(math.sqrt(0.82))
    assert st.total["g"] == pytest.approx(1.0)
    # stat of the total: √Σ(vᵢ σᵢ)² / total
    exp = math.sqrt((0.8 * STAT) ** 2 + (0.3 * STAT / math.sqrt(2)) ** 2 + (0.3 * STAT) ** 2)
    assert st.total_stat["m"] == pytest.approx(exp / math.sqrt(0.82))
    # separate J^P: max(|+0.11|, |−0.14|) = 0.14 and (|−0.38|, |+0.18|) = 0.38
    jp = st.source("J^P")
    assert jp.value["m"] == pytest.approx(0.14) and jp.value["g"] == pytest.approx(0.38)
    assert jp.up["m"] == pytest.approx(0.11) and jp.down["m"] == pytest.approx(0.14)
    assert jp.up["g"] == pytest.approx(0.18) and jp.down["g"] == pytest.approx(0.38)
    # the default model ensemble is shown (fit bias 0.1) but never in the total
    assert st.nominal is not None and st.nominal.value["m"] == pytest.approx(0.1)


def test_asymmetric_positive_and_negative_separately():
    # Eur. Phys. J. C 78 (2018) 1019, Sect. 7: + side = √Σ(max positive)², − side = √Σ(max
    # |negative|)²
    st = systematic_table(_dataset(), asymmetric=True)
    res, mom, bkg = st.rows
    assert (res.up["m"], res.down["m"]) == (pytest.approx(0.5), pytest.approx(0.8))
    assert (mom.up["m"], mom.down["m"]) == (pytest.approx(0.3), pytest.approx(0.3))
    assert (bkg.up["m"], bkg.down["m"]) == (pytest.approx(0.3), 0.0)
    assert st.total_up["m"] == pytest.approx(math.sqrt(0.25 + 0.09 + 0.09))
    assert st.total_down["m"] == pytest.approx(math.sqrt(0.64 + 0.09))
    assert st.total_up["g"] == pytest.approx(0.3)
    assert st.total_down["g"] == pytest.approx(1.0)
    txt = st.to_text()
    assert "+0.66 / −0.85" in txt  # √0.43 = 0.656, √0.73 = 0.854
    assert "${}^{+0.66}_{-0.85}$" in st.to_latex()


def test_rms_rule_for_random_draws():
    # 4 draws with m shifts +0.2, −0.1, +0.3, −0.4 around the reference
    draws = [("default", "nominal", False, 10.0, 5.0)] + [
        (f"draw{i}", "K* masses", False, 10.0 + d, 5.0)
        for i, d in enumerate((0.2, -0.1, 0.3, -0.4))
    ]
    st = systematic_table(_dataset(draws, kind="parameter_variation"))
    r = st.source("K* masses")
    assert r.rule == "rms"
    assert r.value["m"] == pytest.approx(math.sqrt(0.30 / 4))
    assert r.up["m"] == pytest.approx(math.sqrt(0.13 / 4))
    assert r.down["m"] == pytest.approx(math.sqrt(0.17 / 4))
    assert r.up["m"] ** 2 + r.down["m"] ** 2 == pytest.approx(r.value["m"] ** 2)
    # the same store under the max rule
    mx = systematic_table(_dataset(draws, kind="parameter_variation"), combine="max")
    assert mx.source("K* masses").value["m"] == pytest.approx(0.4)
    per_group = systematic_table(
        _dataset(draws, kind="model_variation"), group_rules={"K* masses": "rms"}
    )
    assert per_group.source("K* masses").rule == "rms"


def test_relative_to_nominal_ensemble():
    st = systematic_table(_dataset(), relative_to="nominal")
    res = st.source("resolution")
    # shifts relative to the nominal ensemble mean 10.1: +0.4, −0.9
    assert res.value["m"] == pytest.approx(0.9) and res.chosen["m"] == "res_B"
    assert res.stat["m"] == pytest.approx(STAT * math.sqrt(2))  # two independent ensembles
    assert st.nominal.value["m"] == pytest.approx(0.1)  # still vs the reference


def test_failed_fits_excluded_and_reported():
    st = systematic_table(_dataset(failed=[(1, 0), (1, 3)]))
    res = st.source("resolution")
    # res_A keeps toys 1 and 2 (offsets −0.1, +0.1): mean unchanged, stat from 2 toys
    va = next(v for v in st.variants if v.name == "res_A")
    assert va.n_used == 2 and va.n_failed == 2 and va.n_done == 4
    assert va.shift["m"] == pytest.approx(0.5)
    assert va.stat["m"] == pytest.approx(np.std([-0.1, 0.1], ddof=1) / math.sqrt(2))
    assert res.n_failed == 2 and res.n_done == 8 and res.failed_fraction == 0.25
    assert "2/8" in st.to_markdown()


def test_pair_suffix_variants():
    vs = [
        ("default", "nominal", False, 10.0, 5.0),
        ("alpha+", "momentum scale", False, 10.25, 5.0),
        ("alpha-", "momentum scale", False, 9.95, 5.0),
        ("eloss_plus", "energy loss", False, 10.1, 5.1),
        ("eloss_minus", "energy loss", False, 10.1, 4.9),
        ("eloss_extra", "energy loss", False, 10.05, 5.0),
    ]
    st = systematic_table(_dataset(vs))
    a = st.source("momentum scale")
    assert a.rule == "half-diff" and a.value["m"] == pytest.approx(0.15)
    assert a.chosen["m"] == "alpha±"
    e = st.source("energy loss")
    # pair half-diff m = 0, g = 0.1; the single variant gives m = +0.05
    assert e.rule == "max (incl. half-diff)"
    assert e.value["m"] == pytest.approx(0.05) and e.chosen["m"] == "eloss_extra"
    assert e.value["g"] == pytest.approx(0.1) and e.up["g"] == e.down["g"]


def test_renderings_markdown_latex_csv():
    st = systematic_table(_dataset()).scaled({"m": 1e3, "g": 1e3}, "keV")
    md = st.to_markdown(detail=True, show_stat=True)
    assert "| Source | m [keV] | g [keV] | failed fits |" in md
    assert "Total (quadrature)" in md and "Reported separately" in md
    assert "| resolution | 800 ± " in md and "res_B" in md
    tex = st.to_latex()
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\multicolumn{4}{l}" in tex
    assert tex.count(r"\\") >= 6 and "J\\textasciicircum{}P" in tex
    txt = st.to_text()
    assert "906" in txt  # √0.82 keV = 905.5, 3 significant digits
    rows = list(csv.DictReader(io.StringIO(st.to_csv())))
    by = {(r["row_type"], r["source"], r["variant"]): r for r in rows}
    assert float(by[("total", "Total (quadrature)", "")]["m"]) == pytest.approx(
        1e3 * math.sqrt(0.82)
    )
    assert float(by[("source", "resolution", "")]["m_down"]) == pytest.approx(800.0)
    assert by[("source", "resolution", "")]["m_chosen"] == "res_B"
    assert float(by[("separate", "J^P", "")]["g"]) == pytest.approx(380.0)
    assert float(by[("variant", "resolution", "res_A")]["g_signed"]) == pytest.approx(-1000.0)
    assert by[("nominal", "nominal", "")]["row_type"] == "nominal"
    assert int(by[("source", "resolution", "")]["n_done"]) == 8
    # raw numbers stay unscaled
    assert st.total["m"] == pytest.approx(math.sqrt(0.82))


def test_parameter_selection_and_errors():
    ds = _dataset()
    assert systematic_table(ds, "m").params == ("m",)
    ds2 = ds.assign_attrs(poi="")
    assert systematic_table(ds2).params == ("m", "g")
    with pytest.raises(SummaryError, match="allowed"):
        systematic_table(ds, ["mass"])
    with pytest.raises(SummaryError, match="'max' or 'rms'"):
        systematic_table(ds, combine="median")
    with pytest.raises(SummaryError, match="nominal"):
        systematic_table(_dataset(VARIANTS[1:]), relative_to="nominal")
