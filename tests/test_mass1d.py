"""The declarative ``mass1d`` builder: shapes wired to the core, field paths in errors, and
the T_cc+ model declared with it giving the same fits as the hand-built ``tcc`` builder."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from toyengine.core.resolution import apollonios_density, novosibirsk_density
from toyengine.errors import OptionError, SpecError
from toyengine.models.mass1d import SHAPES, build_mass1d
from toyengine.models.tcc import build_tcc
from toyengine.study.plan import Chunk, Plan, param_axis
from toyengine.study.recipe import run_chunk
from toyengine.study.spec import StudySpec, load_spec

ROOT = Path(__file__).parent.parent
LO, HI = -10.0, 14.0


def _one(shape, params, options=None, values=None, rng=(LO, HI)):
    """A one-component model of ``shape`` whose shape parameters are the given values."""
    decl = {name: {"value": v} for name, v in params.items()}
    decl["n_c"] = 100.0
    comp = {"name": "c", "shape": shape, "yield": "n_c", "params": {k: k for k in params}}
    if options:
        comp["options"] = options
    if values is not None:
        comp["params"] = values
    return build_mass1d({"observable": {"name": "x", "range": list(rng)},
                         "parameters": decl, "components": [comp], "grid_step": 0.005})


def _normalised(f):
    """``f`` divided by its integral on [LO, HI]."""
    norm, _ = integrate.quad(f, LO, HI, limit=400, points=[0.5, 1.0, 2.0])
    return lambda x: f(x) / norm


# independent references (scipy.stats, numpy) wherever one exists
REFERENCES = {
    "gaussian": ({"mu": 1.0, "sigma": 1.5}, lambda x: stats.norm.pdf(x, 1.0, 1.5)),
    "double_gaussian": ({"mu": 1.0, "sigma1": 1.0, "sigma2": 3.0, "frac": 0.7},
                        lambda x: 0.7 * stats.norm.pdf(x, 1, 1) + 0.3 * stats.norm.pdf(x, 1, 3)),
    # scipy's crystalball exponent m is our N = n + 1
    "crystal_ball": ({"mu": 1.0, "sigma": 1.2, "alpha": 1.3, "n": 2.0},
                     lambda x: stats.crystalball.pdf(x, 1.3, 3.0, 1.0, 1.2)),
    "crystal_ball2": ({"mu": 1.0, "sigma": 1.2, "alpha": 1.3, "n": 2.0}, None),
    "johnson_su": ({"mu": 1.0, "lambda": 1.4, "delta": 1.6},
                   lambda x: stats.johnsonsu.pdf(x, 0.0, 1.6, 1.0, 1.4)),
    "student_t": ({"mu": 1.0, "sigma": 1.1, "n": 3.0}, lambda x: stats.t.pdf(x, 4.0, 1.0, 1.1)),
    "novosibirsk": ({"mu": 1.0, "sigma": 1.2, "tau": 0.3},
                    lambda x: novosibirsk_density(np.asarray(x) - 1.0, 1.2, 0.3)),
    "apollonios": ({"mu": 1.0, "sigma": 1.2, "beta": 0.8},
                   lambda x: apollonios_density(np.asarray(x) - 1.0, 1.2, 0.8)),
    "exponential": ({"slope": -0.2}, lambda x: np.exp(-0.2 * np.asarray(x))),
}


@pytest.mark.parametrize("shape", sorted(REFERENCES))
def test_peak_and_exponential_shapes_match_references(shape):
    params, ref = REFERENCES[shape]
    if ref is None:  # symmetric cb2: low tail of the one-sided one, mirrored
        one = REFERENCES["crystal_ball"][1]
        ref = lambda x: one(np.minimum(x, 2.0 - np.asarray(x)))  # noqa: E731
    model = _one(shape, params)
    ref_n = _normalised(ref)
    x = np.linspace(LO, HI, 97)
    got = model.component_pdf("c", x)
    want = ref_n(x)
    # piecewise-linear interpolation on an h = 5e-3 grid: error <= h^2/8 max|f''| ~ 1e-5 peak
    assert np.max(np.abs(got - want)) < 2e-5 * np.max(want), shape


def test_crystal_ball_high_tail_mirrors_low_tail():
    p = {"mu": 1.0, "sigma": 1.2, "alpha": 1.3, "n": 2.0}
    low = _one("crystal_ball", p, rng=(-13.0, 15.0))
    high = _one("crystal_ball", p, {"tail": "high"}, rng=(-13.0, 15.0))
    x = np.linspace(-5, 7, 41)
    np.testing.assert_allclose(high.component_pdf("c", x), low.component_pdf("c", 2.0 - x),
                               rtol=1e-10, atol=1e-14)


def test_polynomials_match_numpy():
    cheb = build_mass1d({"observable": {"name": "x", "range": [LO, HI]},
                         "parameters": {"n": 10, "c1": 0.3, "c2": 0.2},
                         "components": [{"name": "c", "shape": "chebyshev", "yield": "n",
                                         "params": {"c": ["c1", "c2"]},
                                         "options": {"order": 2}}]})
    x = np.linspace(LO, HI, 51)
    t = 2 * (x - LO) / (HI - LO) - 1
    ref = 1 + 0.3 * t + 0.2 * (2 * t * t - 1)
    ref_int = (HI - LO) / 2 * integrate.quad(lambda u: 1 + 0.3 * u + 0.2 * (2 * u * u - 1),
                                             -1, 1)[0]
    np.testing.assert_allclose(cheb.component_pdf("c", x), ref / ref_int, rtol=1e-5)
    # bernstein with undeclared angles: a flat polynomial on the range
    flat = build_mass1d({"observable": {"name": "x", "range": [LO, HI]},
                         "parameters": {"n": 10},
                         "components": [{"name": "b", "shape": "bernstein", "yield": "n",
                                         "options": {"order": 3}}]})
    assert flat.parameters.names == ("n", "b_phi1", "b_phi2", "b_phi3")
    np.testing.assert_allclose(flat.component_pdf("b", x), 1 / (HI - LO), rtol=1e-12)


def test_tcc_declared_with_mass1d_gives_the_tcc_builders_fits():
    """Same toys (same seeds), same fits: identical parameters, -ln L equal to 1e-9."""
    decl = load_spec(ROOT / "studies/examples/tcc_mass1d.yaml")
    hand = load_spec(ROOT / "studies/tcc/pulls.yaml")
    assert decl.seed == hand.seed
    m_decl = decl.models["nominal"]["builder"]
    assert m_decl == "mass1d"
    from toyengine.study.spec import build_model

    a = build_model(decl, decl.variants[0], "nominal")
    b = build_model(hand, hand.variants[0], "nominal")
    # the fit-relevant fields; unit and label are display only (tcc labels its parameters)
    assert ([replace(p, unit="", label="") for p in a.parameters]
            == [replace(p, unit="", label="") for p in b.parameters])
    assert param_axis(decl) == param_axis(hand)
    chunk = Chunk(0, 0, 0, 4)
    ra = run_chunk(Plan.of(decl), chunk).arrays
    rb = run_chunk(Plan.of(hand), chunk).arrays
    assert np.all(ra["status"] == 1) and np.all(ra["valid"])
    np.testing.assert_array_equal(ra["n_events"], rb["n_events"])
    assert np.max(np.abs(ra["nll"] - rb["nll"])) <= 1e-9
    np.testing.assert_array_equal(ra["value"], rb["value"])
    np.testing.assert_array_equal(ra["error"], rb["error"])


BASE = """
name: t
kind: pulls
seed: 1
toys: 2
models:
  m:
    builder: mass1d
    options:
      observable: {name: mass, unit: MeV, range: [5180, 5380]}
      parameters:
        n_sig: 100
        mu: {value: 5280, limits: [5250, 5310], unit: MeV}
        sigma: {value: 12, limits: [2, 40], unit: MeV}
        n_bkg: 500
        slope: {value: -0.005, limits: [-0.1, 0.1], unit: 1/MeV}
      components:
        - {name: signal, shape: gaussian, yield: n_sig}
        - {name: background, shape: exponential, yield: n_bkg}
generate: m
hypotheses: [m]
"""


@pytest.mark.parametrize(("old", "new", "path"), [
    ("shape: gaussian", "shape: gauss", "models.m.options.components[0].shape"),
    ("yield: n_bkg", "yield: n_bg", "models.m.options.components[1].yield"),
    ("{name: signal, shape: gaussian, yield: n_sig}",
     "{name: signal, shape: gaussian, yield: n_sig, params: {mu: m0}}",
     "models.m.options.components[0].params"),
    ("{name: signal, shape: gaussian, yield: n_sig}",
     "{name: signal, shape: gaussian, yield: n_sig, params: {mean: mu}}",
     "models.m.options.components[0].params.mean"),
    ("limits: [2, 40]", "limits: [40, 2]", "models.m.options.parameters.sigma.limits"),
    ("value: 12,", "value: 50,", "models.m.options.parameters.sigma.value"),
    ("unit: 1/MeV}", "unit: 1/MeV, constraint: {mean: 0}}",
     "models.m.options.parameters.slope.constraint.sigma"),
    ("range: [5180, 5380]", "range: [5380, 5180]", "models.m.options.observable.range"),
    ("n_sig: 100", "n_sig: 100\n        extra: 1", "models.m.options.parameters.extra"),
    ("{name: background, shape: exponential, yield: n_bkg}",
     "{name: background, shape: exponential, yield: n_bkg, convolve: true}",
     "models.m.options.components[1].convolve"),
    ("observable:", "resolution: {kind: gaussian}\n      observable:",
     "models.m.options.resolution.sigma"),
    ("{name: signal, shape: gaussian, yield: n_sig}",
     "{name: signal, shape: breit_wigner, yield: n_sig, params: {mass: mu, width: sigma},"
     " options: {m_a: D00, m_b: pi+}}",
     "models.m.options.components[0].options.m_a"),
])
def test_errors_name_the_field(old, new, path):
    assert old in BASE
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(BASE.replace(old, new, 1))
    assert err.value.path == path, str(err.value)
    assert "\n" not in str(err.value)


def test_base_study_builds_and_every_shape_is_documented():
    spec = StudySpec.from_text(BASE)
    assert param_axis(spec) == ("n_sig", "mu", "sigma", "n_bkg", "slope")
    text = (ROOT / "docs/models.md").read_text()
    for name, decl in SHAPES.items():
        assert f"`{name}`" in text, name
        for p in decl.params:
            assert f"`{p.name}`" in text, (name, p.name)


def test_option_error_is_a_model_error_with_a_path():
    with pytest.raises(OptionError) as err:
        build_mass1d({"observable": {"name": "x", "range": [0, 1]}, "parameters": {"n": 1},
                      "components": [{"name": "c", "shape": "bernstein", "yield": "n",
                                      "options": {"order": 11}}]})
    assert err.value.path == "components[0].options.order"


def test_option_declaration_matches_the_builder_and_the_docs():
    """``Mass1dOptions`` (validator, schema, generated option table) declares exactly the
    options ``build_mass1d`` reads, with the same required ones, and the docs list them."""
    from toyengine.models.mass1d import OPTIONS, Mass1dOptions

    fields = Mass1dOptions.model_fields
    assert list(fields) == list(OPTIONS)
    assert {n for n, f in fields.items() if f.is_required()} == {
        n for n, (required, _) in OPTIONS.items() if required}
    text = (ROOT / "docs/study-format.md").read_text()
    for name in OPTIONS:
        assert f"`{name}`" in text, name


def test_unitarised_profile_declared_with_mass1d_matches_tcc():
    """The unitarised signal of Nature Communications 13 (2022) 3351 through mass1d: the same
    -ln L as ``tcc`` with ``signal: unitarised`` on a toy of the latter."""
    hand = build_tcc({"signal": "unitarised"})
    decl = build_mass1d({
        "observable": {"name": "delta_m", "unit": "MeV", "range": [-4.0, 11.0]},
        "grid_step": 0.01,
        "resolution": {"kind": "double_gaussian", "sigma1": 0.27615, "sigma2": 0.66634995,
                       "frac": 0.778},
        "parameters": {"n_sig": {"value": 186, "limits": [-1000, 1e6]},
                       "delta_m_u": {"value": -0.359, "limits": [-3, 3], "step": 0.05},
                       "n_bkg": {"value": 700, "limits": [0, 1e7]}},
        "components": [
            {"name": "signal", "shape": "unitarised", "yield": "n_sig",
             "params": {"mass": "delta_m_u"}},
            {"name": "background", "shape": "phase_space", "yield": "n_bkg",
             "params": {"phi": ["bkg_phi1", "bkg_phi2"]},
             "options": {"order": 2, "masses": ["D*+", "D0"], "offset": ["D*+", "D0"]}}]})
    assert decl.parameters.names == hand.parameters.names
    data = hand.sample(None, np.random.default_rng(3))
    x = hand.parameters.values
    for shift in (0.0, 0.05):
        xs = x + shift
        assert abs(decl.nll(data)(xs) - hand.nll(data)(xs)) <= 1e-9


DROP = """
name: drop
kind: model_variation
seed: 3
toys: 2
models:
  m: &m
    builder: mass1d
    options:
      observable: {name: mass, unit: MeV, range: [5180, 5380]}
      parameters:
        n_sig: 100
        mu: {value: 5280, limits: [5250, 5310]}
        sigma: {value: 12, limits: [2, 40]}
        n_bkg: 500
        bkg_c1: {value: 0.1, limits: [-1, 1]}
        bkg_c2: {value: 0.05, limits: [-1, 1]}
      components:
        - {name: signal, shape: gaussian, yield: n_sig}
        - {name: background, shape: chebyshev, yield: n_bkg, options: {order: 2},
           params: {c: [bkg_c1, bkg_c2]}}
  truth: *m
generate: truth
hypotheses: [m]
variants:
  - name: nominal
    group: nominal
  - name: pol1
    group: background model
    models:
      truth:
        options:
          parameters: {bkg_c2: null}
          components:
            - {name: signal, shape: gaussian, yield: n_sig}
            - {name: background, shape: chebyshev, yield: n_bkg, options: {order: 1},
               params: {c: [bkg_c1]}}
"""


def test_a_variant_drops_a_declared_mass1d_parameter_with_null():
    """``parameters: {name: null}`` in a variant's options removes a declared parameter
    (docs/study-format.md, "Dropping a declared parameter in a variant")."""
    from toyengine.study.spec import build_model

    spec = StudySpec.from_text(DROP)
    nominal, pol1 = (build_model(spec, v, "truth") for v in spec.variants)
    assert "bkg_c2" in nominal.parameters.names
    assert "bkg_c2" not in pol1.parameters.names and "bkg_c1" in pol1.parameters.names
    # a component still reading the dropped parameter is refused with one line naming it
    bad = DROP.replace("options: {order: 1},\n               params: {c: [bkg_c1]}",
                       "options: {order: 2},\n               params: {c: [bkg_c1, bkg_c2]}")
    assert bad != DROP
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(bad)
    assert "bkg_c2" in str(err.value) and "\n" not in str(err.value)
