"""The example studies of a user's own declared model (issue 18): a Gaussian peak on an
exponential background, ``mass1d``, run from the CLI with no Python code; and the
notebook-style walkthrough ``examples/pulls_walkthrough.py`` runs (so it never goes
stale) and says what it should."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toyengine.run.runner import run_study
from toyengine.store import StoreInfo, open_results
from toyengine.study.spec import load_spec
from toyengine.summary import pull_summary

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "studies" / "examples"


@pytest.mark.parametrize("study", ["gauss_exp_pulls.yaml", "gauss_exp_model_variation.yaml"])
def test_example_runs_from_the_cli(study, tmp_path, cli):
    store = tmp_path / "s.zarr"
    r = cli("run", EXAMPLES / study, "--store", store, "--toys", "4", "--workers", "1",
             "--quiet", "--summary")
    assert r.returncode == 0, r.stderr
    assert StoreInfo(store).done().all()
    ds = open_results(store)
    assert np.all(ds["status"].values == 1)  # every fit converged
    if "model_variation" in study:
        assert [str(v) for v in ds["variant_name"].values] == [
            "nominal", "crystal_ball", "double_gaussian"]
        assert "signal model" in r.stdout
    else:
        assert "pull" in r.stdout


@pytest.mark.slow
def test_gauss_exp_pulls_are_standard_normal(tmp_path):
    """500 toys: each free parameter's pull mean within 3 standard errors (σ/√n) of 0 and
    its width within 3 standard errors (σ/√(2(n−1))) of 1; fixed seed 1801."""
    spec = load_spec(EXAMPLES / "gauss_exp_pulls.yaml")
    assert spec.toys == 500
    report = run_study(spec, tmp_path / "p.zarr", workers=2, progress=None)
    assert report.complete, report.errors
    rows = pull_summary(open_results(tmp_path / "p.zarr")).rows
    assert {r.param for r in rows} == {"n_sig", "mu", "sigma", "n_bkg", "slope"}
    for r in rows:
        assert r.failed_fraction < 0.01, r
        assert abs(r.pull_mean) < 3 * r.pull_mean_err, r
        assert abs(r.pull_width - 1) < 3 * r.pull_width_err, r


# slow: the walkthrough makes the calls of the README's Python snippet
# (test_readme.py::test_readme_python_snippet_runs_as_a_script) plus a model variation
@pytest.mark.slow
def test_pulls_walkthrough_runs(tmp_path: Path):
    env = {**os.environ, "TOYENGINE_EXAMPLE_OUT": str(tmp_path)}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "pulls_walkthrough.py")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "Pulls, bias and coverage" in out and "δm_BW [MeV]" in out
    assert "Systematic uncertainties" in out and "Total (quadrature)" in out
    # the regenerated toy has the stored number of candidates
    m = re.search(r"toy 3: (\d+) candidates, stored n_events = (\d+)", out)
    assert m and m.group(1) == m.group(2)
    assert (tmp_path / "pulls.png").stat().st_size > 5000
