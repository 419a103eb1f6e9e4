"""Tests of toyengine.core.resolution: normalisation, moments, CDFs, samplers, Tcc shapes."""

from __future__ import annotations

import itertools
import math
import pickle

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from toyengine.core.resolution import (
    KINDS,
    TAIL_MASS,
    TCC_ALTERNATIVE_SHAPES,
    Resolution,
    _match_tcc_shape,
    default_tcc_resolution,
    tcc_alternative_resolutions,
)
from toyengine.errors import ModelError

CASES = {
    "gaussian": Resolution("gaussian", {"sigma": 0.3}),
    "double_gaussian": Resolution(
        "double_gaussian", {"sigma1": 0.27, "sigma2": 0.66, "frac": 0.78}
    ),
    "apollonios": Resolution("apollonios", {"sigma": 0.2, "beta": 0.75}),
    "apollonios_gauss": Resolution("apollonios", {"sigma": 0.2, "beta": 30.0}),
    "cb2": Resolution("cb2", {"sigma": 0.3, "alpha": 1.4, "n": 8.4}),
    "cb2_heavy": Resolution("cb2", {"sigma": 0.3, "alpha": 0.8, "n": 2.5}),
    "student_t": Resolution("student_t", {"sigma": 0.3, "n": 3.5}),
    "johnson_su": Resolution("johnson_su", {"lambda_": 0.45, "delta": 1.46}),
    "novosibirsk": Resolution("novosibirsk", {"sigma": 0.3, "tau": 0.4}),
    "novosibirsk_neg": Resolution("novosibirsk", {"sigma": 0.3, "tau": -0.8}),
    "novosibirsk_zero": Resolution("novosibirsk", {"sigma": 0.3, "tau": 0.0}),
}


def breakpoints(res: Resolution) -> list[float]:
    """Points where the integrand changes character (kinks, support edges)."""
    w = res.width_scale
    pts = [0.0]
    if res.kind == "cb2":
        pts += [-res.params["alpha"] * w, res.params["alpha"] * w]
    if res.kind == "novosibirsk" and res.params["tau"] != 0.0:
        tau = res.params["tau"]
        lam = math.sinh(tau * math.sqrt(math.log(4))) / (tau * math.sqrt(math.log(4)))
        pts.append(-w / (lam * tau))
    return sorted(pts)


def quad_moment(res: Resolution, k: int, centre: float = 0.0) -> float:
    """∫ (x − centre)^k f(x) dx over the real line by adaptive quad, split at breakpoints."""
    pts = breakpoints(res)
    edges = [-np.inf, *pts, np.inf]
    total = 0.0
    for a, b in itertools.pairwise(edges):
        val, _ = integrate.quad(
            lambda x: (x - centre) ** k * float(res.density(x)),
            a,
            b,
            epsabs=1e-13,
            epsrel=1e-11,
            limit=400,
        )
        total += val
    return total


@pytest.mark.parametrize("name", sorted(CASES))
def test_density_normalised(name: str) -> None:
    res = CASES[name]
    assert quad_moment(res, 0) == pytest.approx(1.0, abs=1e-8)


@pytest.mark.parametrize("name", sorted(CASES))
def test_mean_and_rms_vs_quad(name: str) -> None:
    res = CASES[name]
    mean = quad_moment(res, 1)
    assert mean == pytest.approx(res.mean, abs=1e-8 * res.width_scale)
    var = quad_moment(res, 2, centre=mean)
    assert math.sqrt(var) == pytest.approx(res.rms, rel=1e-7)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cdf_vs_quad(name: str) -> None:
    res = CASES[name]
    w = res.width_scale
    for x in [-3.0 * w, -0.5 * w, 0.1 * w, 2.0 * w]:
        edges = [p for p in breakpoints(res) if p < x]
        val, _ = (
            integrate.quad(
                lambda t: float(res.density(t)), -np.inf, x, points=None, epsabs=1e-13, limit=400
            )
            if not edges
            else (
                sum(
                    integrate.quad(lambda t: float(res.density(t)), a, b, epsabs=1e-13, limit=400)[
                        0
                    ]
                    for a, b in zip([-np.inf, *edges], [*edges, x], strict=True)
                ),
                0.0,
            )
        )
        assert float(res.cdf(x)) == pytest.approx(val, abs=1e-9)


# --- independent density evaluations ----------------------------------------------------


def test_densities_vs_scipy_and_literature_forms() -> None:
    x = np.linspace(-3.0, 3.0, 61)
    np.testing.assert_allclose(
        CASES["gaussian"].density(x), stats.norm.pdf(x, scale=0.3), rtol=1e-12
    )
    np.testing.assert_allclose(
        CASES["student_t"].density(x), stats.t.pdf(x, 4.5, scale=0.3), rtol=1e-12
    )
    np.testing.assert_allclose(
        CASES["johnson_su"].density(x),
        stats.johnsonsu.pdf(x, 0.0, 1.46, loc=0.0, scale=0.45),
        rtol=1e-12,
    )
    dg = CASES["double_gaussian"]
    np.testing.assert_allclose(
        dg.density(x),
        0.78 * stats.norm.pdf(x, scale=0.27) + 0.22 * stats.norm.pdf(x, scale=0.66),
        rtol=1e-12,
    )
    # cb2: standard Crystal-Ball tail A (B + |δ|)^{−N}, A = (N/α)^N e^{−α²/2}, B = N/α − α
    cb = CASES["cb2"]
    s, a, big_n = 0.3, 1.4, 9.4
    d = np.abs(x / s)
    shape = np.where(
        d <= a,
        np.exp(-0.5 * d**2),
        (big_n / a) ** big_n * np.exp(-0.5 * a * a) * (big_n / a - a + d) ** (-big_n),
    )
    ratio = cb.density(x) / shape
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    # Apollonios = Santos–Dupertuis core exp(−b √(1 + x²/σ'²)), b = β², σ' = βσ
    apo = CASES["apollonios"]
    beta, sigma = 0.75, 0.2
    sd = np.exp(-(beta**2) * np.sqrt(1.0 + x**2 / (beta * sigma) ** 2))
    ratio = apo.density(x) / sd
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    # Novosibirsk: direct formula, zero outside support
    nov = CASES["novosibirsk"]
    tau, sigma = 0.4, 0.3
    lam = math.sinh(tau * math.sqrt(math.log(4))) / (tau * math.sqrt(math.log(4)))
    arg = 1.0 + lam * tau * x / sigma
    direct = np.where(
        arg > 0,
        np.exp(-0.5 * (np.log(np.where(arg > 0, arg, 1.0)) ** 2 / tau**2 + tau**2)),
        0.0,
    )
    ratio = nov.density(x)[arg > 0] / direct[arg > 0]
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    assert np.all(nov.density(x)[arg <= 0] == 0.0)
    # limits: Apollonios β → ∞ and Novosibirsk τ → 0 are Gaussian (Novosibirsk: relative
    # deviation ≈ τ|δ|³/2 = 5e-7 at |δ| = 10 for τ = 1e-9)
    # (relative deviation ≈ δ⁴/(8β²) = 2.2e-3 at |δ| = 2 for β = 30)
    core = np.abs(x) <= 0.4
    np.testing.assert_allclose(
        CASES["apollonios_gauss"].density(x[core]), stats.norm.pdf(x[core], scale=0.2), rtol=3e-3
    )
    np.testing.assert_allclose(
        Resolution("novosibirsk", {"sigma": 0.3, "tau": 1e-9}).density(x),
        stats.norm.pdf(x, scale=0.3),
        rtol=1e-5,
    )


# --- sampling ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_sample_matches_cdf(name: str) -> None:
    res = CASES[name]
    rng = np.random.default_rng(12345)
    n = 40_000
    x = res.sample(n, rng)
    assert x.shape == (n,)
    # binned χ² in 20 equiprobable-ish bins from the CDF; with a fixed seed the test is
    # deterministic, and the cut is the χ²(19) 99.9% quantile (43.8)
    w = res.width_scale
    edges = np.linspace(-4.0 * w, 4.0 * w, 20) + res.mean
    cdf = np.concatenate(([0.0], res.cdf(edges), [1.0]))
    expected = n * np.diff(cdf)
    counts = np.bincount(np.searchsorted(edges, x), minlength=edges.size + 1)
    keep = expected > 5
    chi2 = np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep])
    assert chi2 < stats.chi2.ppf(0.999, keep.sum() - 1)


# --- half width, scaling, misc ----------------------------------------------------------


def test_half_width_gaussian_analytic() -> None:
    res = CASES["gaussian"]
    expected = 0.3 * stats.norm.isf(TAIL_MASS)
    assert res.half_width == pytest.approx(expected, rel=1e-5)
    assert res.half_width >= expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_half_width_definition(name: str) -> None:
    res = CASES[name]
    h = res.half_width
    cap = 30.0 * res.width_scale
    assert 0.0 < h <= cap
    if h < cap:
        assert res.tail_mass(h) <= TAIL_MASS
        assert res.tail_mass(0.999 * h) > TAIL_MASS
    else:
        assert res.tail_mass(h) > TAIL_MASS  # capped: heavy tail


def test_scaled() -> None:
    for res in CASES.values():
        s = res.scaled(1.1)
        assert s.kind == res.kind
        assert s.rms == pytest.approx(1.1 * res.rms, rel=1e-12)
        assert s.mean == pytest.approx(1.1 * res.mean, rel=1e-12, abs=1e-15)
        assert s.half_width == pytest.approx(1.1 * res.half_width, rel=1e-5)
        for k, v in res.params.items():
            factor = 1.1 if k in ("sigma", "sigma1", "sigma2", "lambda_") else 1.0
            assert s.params[k] == pytest.approx(factor * v, rel=1e-15)
    with pytest.raises(ModelError, match="scale factor"):
        CASES["gaussian"].scaled(0.0)


def test_infinite_rms_for_heavy_tails() -> None:
    assert Resolution("student_t", {"sigma": 1.0, "n": 1.0}).rms == math.inf
    assert Resolution("cb2", {"sigma": 1.0, "alpha": 1.0, "n": 2.0}).rms == math.inf
    assert math.isfinite(Resolution("cb2", {"sigma": 1.0, "alpha": 1.0, "n": 2.01}).rms)


def test_hash_eq_pickle() -> None:
    a = Resolution("gaussian", {"sigma": 0.3})
    b = Resolution("gaussian", {"sigma": 0.3})
    assert a == b and hash(a) == hash(b)
    assert a != Resolution("gaussian", {"sigma": 0.31})
    _ = a.rms, a.half_width  # populate caches before pickling
    c = pickle.loads(pickle.dumps(a))
    assert c == a and c.half_width == a.half_width
    assert a.to_dict() == {"kind": "gaussian", "params": {"sigma": 0.3}}


@pytest.mark.parametrize(
    ("kind", "params", "match"),
    [
        ("lorentzian", {"sigma": 1.0}, "unknown resolution kind"),
        ("gaussian", {}, "missing parameter.*sigma"),
        ("gaussian", {"sigma": 1.0, "mu": 0.0}, "unknown parameter.*mu"),
        ("gaussian", {"sigma": 0.0}, "'sigma'"),
        ("gaussian", {"sigma": -1.0}, "'sigma'"),
        ("gaussian", {"sigma": math.nan}, "'sigma'.*not finite"),
        ("gaussian", {"sigma": "wide"}, "'sigma'.*not a number"),
        ("double_gaussian", {"sigma1": 0.0, "sigma2": 1.0, "frac": 0.5}, "'sigma1'"),
        ("double_gaussian", {"sigma1": 1.0, "sigma2": -1.0, "frac": 0.5}, "'sigma2'"),
        ("double_gaussian", {"sigma1": 1.0, "sigma2": 1.0, "frac": 1.5}, "'frac'"),
        ("double_gaussian", {"sigma1": 1.0, "sigma2": 1.0, "frac": -0.1}, "'frac'"),
        ("apollonios", {"sigma": 1.0, "beta": 0.0}, "'beta'"),
        ("cb2", {"sigma": 1.0, "alpha": -1.0, "n": 2.0}, "'alpha'"),
        ("cb2", {"sigma": 1.0, "alpha": 1.0, "n": 0.0}, "'n'"),
        ("student_t", {"sigma": 1.0, "n": -2.0}, "'n'"),
        ("johnson_su", {"lambda_": 0.0, "delta": 1.0}, "'lambda_'"),
        ("johnson_su", {"lambda_": 1.0, "delta": 0.0}, "'delta'"),
        ("novosibirsk", {"sigma": -0.1, "tau": 0.2}, "'sigma'"),
        ("novosibirsk", {"sigma": 0.1, "tau": math.inf}, "'tau'"),
    ],
)
def test_validation_names_the_parameter(kind: str, params: dict, match: str) -> None:
    with pytest.raises(ModelError, match=match):
        Resolution(kind, params)


def test_all_kinds_covered() -> None:
    assert {c.kind for c in CASES.values()} == set(KINDS)


# --- Tcc resolutions --------------------------------------------------------------------


def test_default_tcc_resolution_numbers() -> None:
    # Nature Communications 13 (2022) 3351, Methods: σ1 = 1.05 × 263 keV, σ2 = 2.413 σ1, α = 0.778
    res = default_tcc_resolution()
    assert res.kind == "double_gaussian"
    assert res.params["sigma1"] == pytest.approx(0.27615, abs=1e-12)
    assert res.params["sigma2"] == pytest.approx(0.66635, abs=1e-5)
    assert res.params["frac"] == 0.778
    assert res.rms == pytest.approx(0.3974, abs=5e-5)
    assert default_tcc_resolution(1.0).rms == pytest.approx(0.3784, abs=5e-5)
    assert default_tcc_resolution(1.1).rms == pytest.approx(0.4163, abs=5e-5)
    scaled = default_tcc_resolution(1.0).scaled(1.1).params
    for k, v in default_tcc_resolution(1.1).params.items():
        assert scaled[k] == pytest.approx(v, rel=1e-14)
    with pytest.raises(ModelError, match="scale"):
        default_tcc_resolution(-1.0)


@pytest.mark.parametrize("scale", [1.0, 1.05, 1.1])
def test_tcc_alternatives_match_default(scale: float) -> None:
    default = default_tcc_resolution(scale)
    s1 = default.params["sigma1"]

    def central(res: Resolution, k: float) -> float:
        return float(res.cdf(k * s1) - res.cdf(-k * s1))

    alts = tcc_alternative_resolutions(scale)
    assert sorted(alts) == ["apollonios", "cb2", "johnson_su", "novosibirsk", "student_t"]
    for kind, res in alts.items():
        assert res.kind == kind
        assert res.rms == pytest.approx(default.rms, rel=1e-12)
        assert abs(res.mean) < 1e-12
        # independent RMS check by quad
        assert math.sqrt(quad_moment(res, 2)) == pytest.approx(default.rms, rel=1e-7)
        if kind != "novosibirsk":
            assert central(res, 1.0) == pytest.approx(central(default, 1.0), abs=1e-8)
    assert central(alts["cb2"], 2.0) == pytest.approx(central(default, 2.0), abs=1e-8)


def test_tcc_alternative_shape_constants_rederived() -> None:
    for kind, shape in TCC_ALTERNATIVE_SHAPES.items():
        derived = _match_tcc_shape(kind)
        assert derived.keys() == shape.keys()
        for k, v in shape.items():
            assert derived[k] == pytest.approx(v, rel=1e-8)


def test_novosibirsk_ml_fit_to_default_is_symmetric() -> None:
    # Justifies the τ = 0 default: minimising the cross-entropy −∫ f_DG ln f_Nov (the
    # infinite-statistics ML fit) over (σ, τ) returns τ ≈ 0 and σ ≈ RMS.
    default = default_tcc_resolution()
    x = np.linspace(-8.0, 8.0, 16001)
    target = default.density(x)

    def cross_entropy(p: np.ndarray) -> float:
        if p[0] <= 0.0:
            return 1e9
        g = Resolution("novosibirsk", {"sigma": p[0], "tau": p[1]}).density(x)
        return float(-np.trapezoid(target * np.log(np.maximum(g, 1e-300)), x))

    for tau0 in (0.3, -0.5):
        fit = optimize.minimize(
            cross_entropy,
            [0.35, tau0],
            method="Nelder-Mead",
            options={"xatol": 1e-6, "fatol": 1e-12},
        )
        assert abs(fit.x[1]) < 1e-2
        assert fit.x[0] == pytest.approx(default.rms, rel=1e-3)


def test_tcc_novosibirsk_variant() -> None:
    default = default_tcc_resolution()
    nov = tcc_alternative_resolutions(novosibirsk_tau=0.2)["novosibirsk"]
    assert nov.params["tau"] == 0.2
    assert nov.rms == pytest.approx(default.rms, rel=1e-12)
    assert nov.mean > 0.05  # documented: asymmetric variant shifts the mean
    with pytest.raises(ModelError, match="novosibirsk_tau"):
        tcc_alternative_resolutions(novosibirsk_tau=math.nan)
