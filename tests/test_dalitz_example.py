"""The second declared Dalitz-plot decay, B+ → K+ π− π+ (``studies/examples/bkpipi_*.yaml``):
its PDF is normalised, its generator follows its PDF, its studies run from the CLI, and
(slow) its pulls are standard normal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toyengine.core.dalitz.integration import RowGrid
from toyengine.models.dalitz import check_dalitz_model, sdp_bin_integrals
from toyengine.run.runner import run_study
from toyengine.store import StoreInfo, open_results
from toyengine.study.spec import build_model, load_spec
from toyengine.summary import pull_summary

EXAMPLES = Path(__file__).resolve().parents[1] / "studies" / "examples"


def _model(yield_sig: float | None = None):
    spec = load_spec(EXAMPLES / "bkpipi_pulls.yaml")
    m = build_model(spec, spec.variants[0], "nominal")
    x = m.parameters.values.copy()
    if yield_sig is not None:
        x[m.parameters.index("n_sig_all")] = yield_sig
    return m, x


def _fine_grid(m) -> RowGrid:
    """An independent rule, much finer than the model's (rows every 0.004 in m', 40 × 16
    nodes in θ'), with panel edges around the K*(892) as the model's own rule has."""
    return RowGrid.build(m.kin, m.vetoes, breaks=m._breaks(m.parameters.values).get("kpi", ()),
                         n_m=8, du=0.004, n_t=16, t_panels=40)


def test_pdf_normalised() -> None:
    """The signal SDP density integrates to one with the independent rule: |∫P − 1| < 1e-6,
    at the generation point and at a point with a broader ρ and other couplings."""
    m, x = _model()
    g = _fine_grid(m)
    x2 = x.copy()
    for name, v in (("w_rho770", 200.0), ("re_f2_1270", -0.5), ("im_nr", 0.1)):
        x2[m.parameters.index(name)] = v
    for xx in (x, x2):
        dens = m.densities(xx, "all", g.x, g.y)["signal"]
        assert abs(np.sum(dens * g.w_sdp) - 1.0) < 1e-6


def test_generator_against_pdf() -> None:
    """40 000 generated events against the PDF in 12 × 12 square-Dalitz-plot bins (m', θ').
    Under the null the χ² of the k bins with > 5 expected events follows χ²(k − 1) (the
    total is fixed): mean k − 1, sd sqrt(2(k − 1)); the fixed-seed χ² must lie below
    k + 5 sqrt(2k) (p ≈ 1e-5 for a correct generator). The expected counts are exact bin
    integrals (20 × 20 Gauss–Legendre points per bin), not a histogram of grid nodes, whose
    ~1 % assignment errors at the bin edges add ~15 to χ² at this sample size."""
    m, x = _model(40_000.0)
    sample = m.sample(x, np.random.default_rng(42))["all"]
    n = len(sample)
    assert abs(n - 40_000) < 5 * np.sqrt(40_000)
    edges = np.linspace(0.0, 1.0, 13)
    exp = sdp_bin_integrals(m, x, "all", edges)
    mp, thp = m.kin.sdp_from_dp(sample.m2_kpi, sample.m2_etacpi)
    obs, _, _ = np.histogram2d(mp, thp, [edges, edges])
    exp = exp * n
    ok = exp > 5
    k = int(ok.sum())
    chi2 = float(np.sum((obs[ok] - exp[ok]) ** 2 / exp[ok]))
    assert k >= 130
    assert chi2 < k + 5 * np.sqrt(2 * k), (chi2, k)
    # the check can fail: the same events against the PDF without the f2(1270) fail it
    x0 = x.copy()
    x0[m.parameters.index("re_f2_1270")] = 0.0
    x0[m.parameters.index("im_f2_1270")] = 0.0
    e0 = sdp_bin_integrals(m, x0, "all", edges)
    e0 = e0 * n
    assert float(np.sum((obs[ok] - e0[ok]) ** 2 / e0[ok])) > k + 5 * np.sqrt(2 * k)


def test_check_dalitz_model_reports() -> None:
    """The printed checks: fit fractions of every component, Σ FF ≠ 1 (interference), the
    normalisation, and a χ² below the same bound as above."""
    m, _ = _model()
    rep = check_dalitz_model(m, n_events=20_000, seed=3, bins=10)
    assert set(rep["fit_fractions"]) == {"kst892", "rho770", "f2_1270", "nr"}
    assert abs(rep["ff_sum"] - 1.0) > 0.01
    assert abs(rep["integral"]["signal"] - 1.0) < 1e-6
    k = rep["bins_used"]
    assert k >= 90 and rep["chi2"] < k + 5 * np.sqrt(2 * k)


@pytest.mark.parametrize("study", [
    "bkpipi_significance.yaml",
    # the same engine path with variants: slow (the default suite stays under 15 minutes)
    pytest.param("bkpipi_model_variation.yaml", marks=pytest.mark.slow),
])
def test_example_runs_from_the_cli(study: str, tmp_path: Path, cli) -> None:
    store = tmp_path / "s.zarr"
    r = cli("run", EXAMPLES / study, "--store", store, "--toys", "2", "--workers", "1",
            "--quiet", "--summary")
    assert r.returncode == 0, r.stderr
    assert StoreInfo(store).done().all()
    ds = open_results(store)
    assert np.all(ds["status"].values == 1)  # every fit converged
    if "model_variation" in study:
        assert [str(v) for v in ds["variant_name"].values] == ["nominal", "radius_3",
                                                                "rho1450"]


@pytest.mark.slow
def test_bkpipi_pulls_are_standard_normal(tmp_path: Path) -> None:
    """300 toys (fixed seed 2024): every floating parameter's pull mean within 4 standard
    errors (1/√n) of 0 and its width within 4 standard errors (1/√(2(n−1))) of 1, at most
    1 % failed fits."""
    spec = load_spec(EXAMPLES / "bkpipi_pulls.yaml")
    assert spec.toys == 300
    report = run_study(spec, tmp_path / "p.zarr", workers=2, progress=None)
    assert report.complete, report.errors
    rows = pull_summary(open_results(tmp_path / "p.zarr")).rows
    assert {r.param for r in rows} == {"w_rho770", "re_rho770", "im_rho770", "re_f2_1270",
                                       "im_f2_1270", "re_nr", "im_nr", "n_sig_all"}
    for r in rows:
        assert r.failed_fraction < 0.01, r
        assert abs(r.pull_mean) < 4 * r.pull_mean_err, r
        assert abs(r.pull_width - 1) < 4 * r.pull_width_err, r


def test_dalitz_check_cli_errors(capsys) -> None:
    """``python -m toyengine.cli.dalitz_check``: an unknown model or a model that is not a
    Dalitz model is one line on stderr and exit code 1."""
    from toyengine.cli.dalitz_check import main

    assert main([str(EXAMPLES / "bkpipi_pulls.yaml"), "nope"]) == 1
    assert main([str(EXAMPLES / "gauss_exp_pulls.yaml"), "nominal"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert "no model 'nope'" in err[0] and "not a Dalitz-plot model" in err[1]
