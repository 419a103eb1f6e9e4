"""The significance table as a paper prints it (:mod:`toyengine.summary.paper`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from toyengine.summary.paper import significance_paper_table
from toyengine.summary.pvalues import chi2_pvalue, p_to_z
from toyengine.summary.testing import make_results_dataset


def _store(t: np.ndarray, kind: str = "significance", ndof: int = 8,
           observed: float = 41.4):
    n = t.size
    nll = np.zeros((1, n, 2))
    nll[0, :, 1] = -t / 2.0  # t = 2 (nll_h0 − nll_h1)
    return make_results_dataset(params=["m_zc"], hypotheses=["H0", "H1"],
                                value=np.zeros((1, n, 2, 1)), nll=nll, kind=kind, h0="H0",
                                h1="H1", ndof_wilks=ndof, observed_t=observed,
                                study_name="zc-sig")


def test_paper_table_rows_and_counts():
    # 2000 toys of χ²(8): the fitted ndof is 8 within its error (≈ 0.25 for 2000 toys:
    # the Fisher information of k in χ²(k) is ψ'(k/2)/4 per toy, 1/sqrt(2000 · 0.0347) ≈ 0.12;
    # 4 errors allowed)
    t = stats.chi2.rvs(8, size=2000, random_state=np.random.default_rng(3))
    ds = _store(t)
    tab = significance_paper_table(ds, t_reference=20.0)
    csv = {r[0]: r for r in tab.csv_rows}
    assert csv["Δ(−2 ln L) observed (reference data set)"][1] == 20.0
    assert csv["p, Z from χ²(ndof = 8)"][1] == pytest.approx(chi2_pvalue(20.0, 8))
    k = int(np.count_nonzero(t >= 20.0))
    assert csv["p, Z from toys (plain)"][2] == f"{k}/2000"
    assert csv["p, Z from toys (plain)"][1] == pytest.approx(k / 2000)
    assert math.isnan(csv["p, Z from toys (importance-sampled)"][1])  # the slot, not run
    ndof = csv["fitted ndof (χ² with a point mass at t = 0)"]
    assert ndof[1] == pytest.approx(8.0, abs=0.5) and ndof[2] == "2000"
    assert math.isnan(csv["Z local / global (look-elsewhere)"][1])  # no fit.scan
    text = tab.to_text()
    assert "paper 41.4" in text and "not run" in text
    # without a reference t the table is at the study's test.observed, and no toy of 2000
    # exceeds 41.4: Z is a lower limit
    paper = {r[0]: r for r in significance_paper_table(ds).csv_rows}
    assert paper["p, Z from toys (plain)"][2] == "0/2000"
    assert "> " in significance_paper_table(ds).to_text()
    assert p_to_z(chi2_pvalue(41.4, 8)) == pytest.approx(4.78, abs=0.01)


def test_paper_table_of_a_jp_rejection_has_no_look_elsewhere_row():
    t = stats.chi2.rvs(1, size=400, random_state=np.random.default_rng(4)) - 0.5
    tab = significance_paper_table(_store(t, "jp_rejection", 1, 18.6))
    names = [r[0] for r in tab.csv_rows]
    assert "p, Z from χ²(ndof = 1)" in names
    assert not any("look-elsewhere" in n for n in names)
    assert tab.title.startswith("Rejection of h0")
    # beside the toy count, the toys' Gaussian extrapolated to the observed t
    g = {r[0]: r for r in tab.csv_rows}["p, Z from the toys' Gaussian (extrapolated)"]
    assert g[1] == pytest.approx(stats.norm.sf((18.6 - t.mean()) / t.std(ddof=1)))
    assert g[2] == "400"
    sig = {r[0] for r in significance_paper_table(_store(t + 0.5)).csv_rows}
    assert not any("Gaussian" in n for n in sig)  # nested: the χ² fit describes t


def _search_like_t(n: int, seed: int) -> np.ndarray:
    """t shaped as the Z_c(4100)⁻ significance toys (maximum over a mass–width search:
    mean 8.8, standard deviation 3.1, none near 0), which no χ² describes (a χ²(k) with
    that mean has twice that variance)."""
    return np.clip(np.random.default_rng(seed).normal(8.8, 3.1, n), 0.5, None)


def test_a_fitted_chi2_the_toys_reject_is_flagged_wherever_it_is_shown():
    # 400 such toys: the Pearson test of the fitted χ² rejects it far below 0.01 (the real
    # 200 Z_c toys gave p < 0.001); the χ²(8) toys of the control pass it (p ≥ 0.01, which a
    # correct description fails in 1 % of seeds; this seed is fixed)
    from toyengine.summary.ndof import GOF_REJECT
    from toyengine.summary.significance import significance_summary

    flagged = _store(_search_like_t(400, 5))
    s = significance_summary(flagged)
    assert s.chi2_fit.gof_pvalue < GOF_REJECT and s.chi2_fit.rejected
    text = s.to_text()
    assert "fitted χ²(ndof=" in text and "! = the toys reject the fitted χ²" in text
    method_rows = [ln for ln in text.splitlines() if ln.startswith("fitted χ²(ndof=")]
    assert method_rows and all(" !" in ln for ln in method_rows)
    paper = {row[0].text: row[1].text for row in significance_paper_table(flagged).rows}
    assert "the toys reject this χ²" in paper["Z from the fitted χ²"]

    control = _store(stats.chi2.rvs(8, size=400, random_state=np.random.default_rng(3)))
    c = significance_summary(control)
    assert c.chi2_fit.gof_pvalue >= GOF_REJECT and not c.chi2_fit.rejected
    assert "! = the toys reject" not in c.to_text()
    cpaper = {row[0].text: row[1].text for row in significance_paper_table(control).rows}
    assert "reject" not in cpaper["Z from the fitted χ²"]
