"""Summary blocks added with the reference studies: per-variation significance (LHCb,
Eur. Phys. J. C 78 (2018) 1019, Tables 5/6), ensemble mean/RMS (Nature Communications 13 (2022)
3351, Table 2), goodness-of-fit toy p-value."""

import numpy as np
from scipy import stats

from toyengine.summary.report import (
    ensemble_table,
    gof_table,
    render_summary,
    variation_significance_table,
)
from toyengine.summary.testing import make_results_dataset


def _variation_ds():
    # 1 nominal + 3 random draws + 1 alternative; one toy (the fixed data set) each
    nll = np.array([[[10.0, -10.7]], [[10.0, -10.0]], [[10.0, -11.0]], [[10.0, -9.0]],
                    [[10.0, 0.0]]])  # t = 2 (nll0 - nll1) = 41.4, 40, 42, 38, 20
    value = np.zeros((5, 1, 2, 1))
    return make_results_dataset(
        params=["m_zc"], hypotheses=["H0", "H1"], value=value, nll=nll,
        variant_names=["nominal", "d0", "d1", "d2", "swave"],
        variant_groups=["nominal", "draws", "draws", "draws", "S-wave"],
        kind="parameter_variation", h0="H0", h1="H1", ndof_wilks=8)


def test_variation_significance_by_hand():
    table = variation_significance_table(_variation_ds())
    rows = {r[0]: r for r in table.csv_rows}
    # nominal: t = 41.4 with 8 dof is the paper's 4.8 sigma (two-sided)
    assert abs(rows["nominal"][3] - 4.78) < 0.01
    # random group: mean t = 40, lowest t = 38
    z = lambda t: stats.norm.isf(stats.chi2.sf(t, 8) / 2)  # noqa: E731
    assert rows["draws"][1] == 3 and abs(rows["draws"][2] - 40.0) < 1e-12
    assert abs(rows["draws"][3] - z(40.0)) < 1e-9 and abs(rows["draws"][4] - z(38.0)) < 1e-9
    assert abs(rows["S-wave"][3] - z(20.0)) < 1e-9
    for fmt in ("markdown", "json", "text"):
        assert "S-wave" in render_summary(_variation_ds(), fmt)
    assert "S-wave" in render_summary(_variation_ds(), "csv", sections=["variations"])


def test_ensemble_table_mean_and_rms():
    rng = np.random.default_rng(1)
    vals = rng.normal(-0.3, 0.05, size=(1, 200, 1, 1))
    ds = make_results_dataset(params=["delta_m"], hypotheses=["BW"], value=vals,
                              kind="cross_check", poi="delta_m")
    (row,) = ensemble_table(ds).csv_rows
    assert row[3] == 200
    assert abs(row[4] - vals.mean()) < 1e-12 and abs(row[6] - vals.std(ddof=1)) < 1e-12


def test_gof_toy_pvalue():
    rng = np.random.default_rng(2)
    ds = make_results_dataset(params=["a"], hypotheses=["nominal"],
                              value=np.zeros((1, 100, 1, 1)), kind="goodness_of_fit",
                              observed_t=5.0)
    g = np.arange(100, dtype=float)[None, :, None]  # 0..99: 95 toys are >= 5
    ds["gof"] = (("variant", "toy", "hypothesis"), g + 0 * rng.random(g.shape))
    (row,) = gof_table(ds).csv_rows
    assert row[1] == 100 and abs(row[5] - 0.95) < 1e-12 and row[6] < 0.95 < row[7]
