"""The T_cc reference studies hold together: background alternatives that differ from the
nominal model, and a fit range and background level consistent with both LHCb papers
(docs/tcc-references.md)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from toyengine import load_spec
from toyengine.core.fit import fit
from toyengine.study.reference import DEGENERATE_RTOL, asimov_reference, generator_model
from toyengine.study.spec import build_model

STUDIES = Path(__file__).resolve().parents[1] / "studies" / "tcc"


def _expected(model) -> np.ndarray:
    x = model.parameters.values
    return model.density_grid(x) * float(np.sum(x[model._yield_idx]))


def test_null_drops_a_parameter_override():
    spec = load_spec(STUDIES / "model_variation.yaml")
    b0 = next(v for v in spec.variants if v.name == "B0")
    assert "bkg_phi1" in spec.model_config(spec.variants[0], "truth")["parameters"]
    params = spec.model_config(b0, "truth")["parameters"]
    assert "bkg_phi1" not in params and "bkg_phi2" not in params
    assert params["n_bkg"] == 169


@pytest.mark.parametrize("study", ["model_variation.yaml", "unitarised_model_variation.yaml"])
def test_background_order_variants_differ_from_nominal(study):
    """B0, B1 and B3 (LHCb, Nature Communications 13 (2022) 3351, "Systematic
    uncertainties") fitted to the reference give densities that differ from the nominal
    one by more than the degenerate-variant tolerance. B0 and B1 cannot follow the curved
    nominal P2 (measured maximal differences 1.3e-2 and 3.1e-3 of the peak density for the
    BW study), so they must differ by at least 1e-3; B3 contains B2 and reproduces the
    Asimov reference up to the fit's convergence (2e-4 measured), which is still far above
    the 1e-9 at which the engine calls two variants the same."""
    spec = load_spec(STUDIES / study)
    nominal = _expected(generator_model(spec, spec.variants[0]))
    scale = float(np.max(np.abs(nominal)))
    for name, floor in (("B0", 1e-3), ("B1", 1e-3), ("B3", 1e3 * DEGENERATE_RTOL)):
        variant = next(v for v in spec.variants if v.name == name)
        diff = float(np.max(np.abs(_expected(generator_model(spec, variant)) - nominal)))
        assert diff > floor * scale, (name, diff / scale)


def _asimov_fit(spec, generate: str, fit_with: str):
    v = spec.variants[0]
    gen = build_model(spec, v, generate)
    model = build_model(spec, v, fit_with)
    nodes, weights = asimov_reference(gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fit(model.nll(nodes, weights), model.parameters)
    assert res.valid
    return res


def test_chosen_range_matches_both_papers():
    """One range and background level (studies/tcc/bw_vs_unitarised.yaml) for both papers.

    The fit to the Asimov data set is the ensemble mean up to O(1/N) terms (100-toy check:
    −312 / 102 keV from toys against −318 / 105 keV from the Asimov fit at the old
    settings), and its HESSE error is the expected toy RMS; so no toys are needed.

    - U → BW (LHCb, Nature Communications 13 (2022) 3351, Table 2 and text): δm_BW "agrees
      well" with −273 keV (the BW fit) and −279 keV (the BW profile's mode): within 15 keV,
      a quarter of the 61 keV statistical error; Γ_BW within one standard deviation of the
      measured 410 ± 165 keV (LHCb, Nature Physics 18 (2022) 751).
    - BW → BW: σ(δm_BW) is 61 keV in Nature Physics 18 (2022) 751. Our toys carry no sPlot
      weights (whose subtracted non-D0 background inflates the data's error), and more
      background would drag Γ_BW of the U → BW ensemble below 245 keV; 55 keV is reached.
      The paper's 61 keV is one draw of the per-toy HESSE error, whose 68 % range is
      ±13 % of its median at these settings (47.7–61.9 keV, 500 toys): 61 keV must lie
      inside that range around the expected error.
    """
    spec = load_spec(STUDIES / "bw_vs_unitarised.yaml")
    u_to_bw = _asimov_fit(spec, "U", "BW")
    dm = 1e3 * u_to_bw.value("delta_m")
    gamma = 1e3 * u_to_bw.value("gamma")
    assert abs(dm - (-276.0)) < 15.0, dm
    assert abs(gamma - 410.0) < 165.0, gamma
    bw_to_bw = _asimov_fit(spec, "BW", "BW")
    sigma = 1e3 * bw_to_bw.error("delta_m")
    assert 0.87 * sigma < 61.0 < 1.13 * sigma, sigma
