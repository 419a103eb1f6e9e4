"""Asimov data sets for every model (``model.asimov``, ``toyengine.study.recipe.asimov_data``,
``toyengine data --asimov``): the expected data at the generation values as weighted
points, whose fit returns those values (Cowan, Cranmer, Gross, Vitells, Eur. Phys. J. C 71
(2011) 1554)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toyengine.core.fit import fit
from toyengine.errors import ModelError
from toyengine.models.protocol import ToyModelBase
from toyengine.study.recipe import asimov_data
from toyengine.study.spec import build_model, load_spec

ROOT = Path(__file__).resolve().parents[1]


def _displaced(params, shift: float = 1.0):
    """The parameter set with every free parameter's start moved by ``shift`` step sizes
    (inside its limits), so that a fit has to move to reach the minimum."""
    changes = {}
    for p in params:
        if p.fixed:
            continue
        v = p.value + shift * p.error_guess
        lo, hi = p.limits
        changes[p.name] = min(max(v, lo + 1e-9 * abs(lo)), hi - 1e-9 * abs(hi)) \
            if np.isfinite(lo) and np.isfinite(hi) else v
    return params.updated(changes)


@pytest.mark.parametrize(("study", "hypothesis", "total"), [
    ("studies/examples/hello.yaml", None, 100.0),
    ("studies/tcc/pulls.yaml", None, 286.0),
    ("studies/tcc/significance.yaml", "H1", 296.0),
])
def test_asimov_fit_of_a_1d_model_returns_the_generation_values(study, hypothesis, total):
    """1-D models weight the nodes of the trapezoid rule the likelihood normalises with (the
    hello model: Gauss–Hermite nodes, exact for the sums of 1, x, x² it uses): the minimum is
    at the generation values up to MIGRAD's convergence (EDM < 10⁻⁴, i.e. a distance
    √(2 EDM) ≈ 0.014σ), from a start one step away in every parameter. The weights sum to
    the expected yield."""
    spec = load_spec(ROOT / study)
    v = spec.variants[0]
    model = build_model(spec, v, hypothesis or v.generate)
    data, weights = asimov_data(spec, hypothesis)
    assert float(np.sum(weights)) == pytest.approx(total, rel=1e-9)
    x0 = model.parameters.values
    res = fit(model.nll(data, weights), _displaced(model.parameters))
    assert res.valid
    free = model.parameters.free_mask
    assert np.any(res.values[free] != _displaced(model.parameters).values[free])
    pulls = (res.values - x0)[free] / res.errors[free]
    assert np.max(np.abs(pulls)) < 0.02, dict(zip(np.array(res.names)[free], pulls, strict=True))


def test_asimov_fit_of_the_dalitz_model_returns_the_generation_values():
    """The Z_c(4100) model (LHCb, Eur. Phys. J. C 78 (2018) 1019, nominal 1⁻): the nodes of
    its normalisation rule weighted by the expected events. Per run the weights sum to the
    expected yield within 2 × 10⁻⁵ (the rule integrates the signal density to 1 + 6 × 10⁻⁶).
    The fit returns the generation values within 0.1σ for every free parameter: the
    normalisation integrals of the likelihood use a coarser rule for the floating LASS
    kernels than the Asimov nodes, which moves w_lass by 0.083σ at these yields (measured;
    a finer Asimov rule, 0.01 × 24 nodes, gives the same 0.083σ)."""
    from toyengine.models.zc4100 import build_zc4100

    model = build_zc4100({"hypothesis": "nominal", "zc_spin": 1})
    x0 = model.parameters.values
    data, weights = model.asimov()
    assert set(weights) == set(model.run_names)
    for r, run in enumerate(model.runs):
        expected = x0[model._sig_idx[r]] + sum(x0[int(k)] for k in model._bkg_idx[r])
        assert float(np.sum(weights[run.name])) == pytest.approx(expected, rel=2e-5)
    nll = model.nll(data, weights)
    res = fit(nll, model.parameters)
    assert res.valid
    free = model.parameters.free_mask
    pulls = (res.values - x0)[free] / res.errors[free]
    assert np.max(np.abs(pulls)) < 0.1, dict(zip(np.array(res.names)[free], pulls, strict=True))


def test_weighted_dalitz_gradient_matches_differences_of_the_nll():
    """The weighted likelihood's analytic gradient against central differences (step 10⁻⁵
    of a coupling: truncation O(h²) ≈ 10⁻¹⁰, rounding ≈ 10⁻¹⁶ × 2×10⁴ / 10⁻⁵ ≈ 10⁻⁷), at a
    point off the minimum; and unit weights give the unweighted likelihood exactly."""
    from toyengine.models.zc4100 import build_zc4100

    model = build_zc4100({"hypothesis": "nominal", "zc_spin": 1})
    data, weights = model.asimov()
    nll = model.nll(data, weights)
    x = model.parameters.values.copy()
    for name in ("re_zc", "im_zc", "re_nr"):
        x[model.parameters.index(name)] *= 1.1
    g = nll.grad(x)
    for name in ("re_zc", "im_zc", "re_nr", "re_kst1410"):
        i = model.parameters.index(name)
        h = 1e-5
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        assert g[i] == pytest.approx((nll(xp) - nll(xm)) / (2 * h), rel=1e-5, abs=1e-4)
    ones = {r: np.ones(len(data[r])) for r in data.runs}
    assert model.nll(data, ones)(x) == model.nll(data)(x)


def test_asimov_cli_writes_what_asimov_data_gives(cli, tmp_path):
    """``toyengine data STUDY --asimov`` writes the points and weights of
    :func:`~toyengine.study.recipe.asimov_data`; a study refuses that weighted file as its
    ``data:``."""
    study = ROOT / "studies/tcc/pulls.yaml"
    out = tmp_path / "asimov.npz"
    r = cli("data", study, "--asimov", "--out", out)
    assert r.returncode == 0, r.stderr
    nodes, weights = asimov_data(load_spec(study))
    with np.load(out) as f:
        np.testing.assert_array_equal(f["x"], nodes)
        np.testing.assert_array_equal(f["weight"], weights)
    model = build_model(load_spec(study), load_spec(study).variants[0], "nominal")
    with pytest.raises(ModelError, match="weighted events"):
        model.load_data(out)
    r = cli("data", study, "--hypothesis", "nominal", "--toy", 0, "--out", out)
    assert r.returncode != 0 and "--hypothesis applies to --asimov only" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_model_without_asimov_says_so():
    class Bare(ToyModelBase):
        pass

    with pytest.raises(ModelError, match="Bare has no Asimov data set"):
        Bare().asimov()
