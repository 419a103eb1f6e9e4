"""The 1-D mixture model: normalisation, convolution accuracy, generator, fits (issue 2)."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from toyengine.core.fit import FitStatus, fit
from toyengine.core.kinematics import MASSES_PDG2020 as M
from toyengine.core.lineshapes import rbw_density
from toyengine.core.model1d import Component, Model1D, Observable
from toyengine.core.params import Parameter, ParameterSet
from toyengine.core.piecewise import sample_piecewise_linear
from toyengine.core.resolution import Resolution
from toyengine.core.shapes import RelativisticBW
from toyengine.errors import ModelError
from toyengine.models.mass1d import build_mass1d
from toyengine.models.tcc import TCC_OFFSET, build_tcc

ALL_RESOLUTIONS = ["double_gaussian", "apollonios", "cb2", "student_t", "johnson_su",
                   "novosibirsk"]


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize("resolution", ALL_RESOLUTIONS)
@pytest.mark.parametrize("three_body", [None, 1])
def test_every_component_normalised(resolution, three_body):
    model = build_tcc({"resolution": resolution, "three_body_order": three_body})
    lo, hi = model.observable.lo, model.observable.hi
    for c in model.components:
        f = lambda x, c=c: model.component_pdf(c.name, np.array([x]))[0]  # noqa: E731
        # the density is piecewise linear on the grid: integrate cell by cell
        total, _ = integrate.quad(f, lo, hi, points=model.grid[1:-1][::25], limit=500)
        assert abs(total - 1) < 1e-6, (c.name, total)
    total, _ = integrate.quad(lambda x: model.pdf(np.array([x]))[0], lo, hi,
                              points=model.grid[1:-1][::25], limit=500)
    assert abs(total - 1) < 1e-6


def _central_differences(nll, v):
    """The gradient (from the NLL) and the Hessian (from the analytic gradient) of ``nll``
    at ``v`` by central differences, step 1e-6 of each value (at least 1e-6)."""
    n = len(v)
    num = np.empty((n, n))
    num_g = np.empty(n)
    for j in range(n):
        s = 1e-6 * max(abs(v[j]), 1.0)
        up, dn = v.copy(), v.copy()
        up[j] += s
        dn[j] -= s
        num[:, j] = (nll.grad(up) - nll.grad(dn)) / (2 * s)
        num_g[j] = (nll(up) - nll(dn)) / (2 * s)
    return num_g, num

@pytest.mark.parametrize("grid_step", [0.01, 0.02])
def test_fft_convolution_matches_direct_integration(grid_step):
    """Signal BW ⊗ double Gaussian on the grid vs scipy.quad of the convolution integral, on
    the default 10 keV grid and on the 20 keV grid of the pulls study."""
    model = build_tcc({"grid_step": grid_step})
    shape = model.components[0].shape
    reso = model.resolution
    f_ext = shape.evaluate(model.ext_grid, (-0.273, 0.410))
    conv = model._convolve(f_ext)

    def bw(x):
        return rbw_density(np.atleast_1d(x + TCC_OFFSET), TCC_OFFSET - 0.273, 0.410,
                           2 * M["D0"], M["pi+"], 1, 3.5)[0]

    hw = reso.half_width
    for x in (-3.0, -1.0, -0.5, -0.273, 0.0, 0.3, 1.0, 4.0, 10.0):
        direct, _ = integrate.quad(lambda y, x=x: bw(x - y) * reso.density(np.array([y]))[0],
                                   -hw, hw, points=[0.0, x + 0.273], limit=400)
        k = int(round((x - model.observable.lo) / model.h))
        # relative to the peak value: the discretisation error is O(h^2), below 2e-4 for
        # h = 10 keV, so below 2e-4 (h / 10 keV)^2
        tol = 2e-4 * (model.h / 0.01) ** 2
        assert abs(conv[k] - direct) < tol * conv.max(), (x, conv[k], direct)


def test_generator_matches_pdf_chi2():
    """200k events from the full T_cc model vs its PDF in 60 bins (fixed seed).

    With a correct sampler the statistic is χ²(59)-distributed; p > 1e-3 fails by chance
    with probability 1e-3 for a random seed, and with this fixed seed the test is
    deterministic.
    """
    model = build_tcc({"three_body_order": 1})
    pars = model.parameters.updated({"n_sig": 20000.0, "n_bkg": 150000.0, "n_bkg3": 30000.0})
    model.parameters = pars
    rng = np.random.default_rng(7)
    x = model.sample(pars.values, rng)
    edges = np.linspace(model.observable.lo, model.observable.hi, 61)
    counts, _ = np.histogram(x, edges)
    fine = np.linspace(edges[0], edges[-1], 60 * 200 + 1)
    dens = model.pdf(fine)
    cum = np.concatenate([[0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(fine))])
    expected = np.diff(cum[::200]) * len(x)
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert stats.chi2.sf(chi2, 59) > 1e-3, chi2


def test_negative_yield_is_sampled_from_the_total_density():
    """A signal deficit (n_sig < 0, as the negative-signal model of an importance-sampled
    significance study has) is drawn from the total density: 200 000 events against the
    PDF the likelihood evaluates, χ²(59) in 60 bins as above; the count is Poisson of the
    summed yields. A yield that makes the density negative is refused."""
    model = build_mass1d({
        "observable": {"name": "x", "range": [0.0, 1.0]}, "grid_step": 0.002,
        "parameters": {"n_sig": {"value": 0.0, "limits": [-1e6, 1e6]}, "mu": 0.5,
                       "sigma": 0.04, "n_bkg": 202000.0, "slope": 0.0},
        "components": [{"name": "signal", "shape": "gaussian", "yield": "n_sig"},
                       {"name": "background", "shape": "exponential", "yield": "n_bkg"}]})
    values = model.parameters.values
    values[model.parameters.index("n_sig")] = -2000.0
    x = model.sample(values, np.random.default_rng(8))
    assert abs(len(x) - 200000) < 4 * math.sqrt(200000)  # 4σ of the Poisson count
    edges = np.linspace(model.observable.lo, model.observable.hi, 61)
    counts, _ = np.histogram(x, edges)
    fine = np.linspace(edges[0], edges[-1], 60 * 200 + 1)
    dens = model.pdf(fine, values)
    cum = np.concatenate([[0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(fine))])
    expected = np.diff(cum[::200]) * len(x)
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert stats.chi2.sf(chi2, 59) > 1e-3, chi2
    values[model.parameters.index("n_sig")] = -200000.0
    with pytest.raises(ModelError, match="total density is negative"):
        model.sample(values, np.random.default_rng(8))


def test_piecewise_linear_sampler_is_exact():
    grid = np.linspace(0, 1, 5)
    dens = np.array([0.0, 2.0, 1.0, 0.0, 3.0])
    x = sample_piecewise_linear(grid, dens, 100000, np.random.default_rng(3))
    norm = integrate.quad(lambda s: np.interp(s, grid, dens), 0, 1, points=grid[1:-1])[0]
    # independent CDF: quad of the interpolant at 101 points, then interpolated
    ts = np.linspace(0, 1, 401)
    cdf_t = np.array([integrate.quad(lambda s: np.interp(s, grid, dens), 0, t,
                                     points=grid[1:-1][grid[1:-1] < t])[0] for t in ts]) / norm
    res = stats.kstest(x, lambda v: np.interp(v, ts, cdf_t))
    # KS p-value for a correct sampler is uniform; 1e-3 is a 3.3σ-like threshold
    assert res.pvalue > 1e-3


def test_large_sample_fit_recovers_all_parameters():
    model = build_tcc({})
    truth = model.parameters.updated({"n_sig": 2340.0, "n_bkg": 14000.0})
    model.parameters = truth
    x = model.sample(truth.values, np.random.default_rng(11))
    start = truth.updated({"delta_m": -0.2, "gamma": 0.5, "n_sig": 2000.0})
    res = fit(model.nll(x), start)
    assert res.valid
    for name, t in truth.as_dict().items():
        assert abs(res.value(name) - t) < 3 * res.error(name), (name, res.value(name), t)


def _tcc_toy(model, t: int) -> np.ndarray:
    """Toy ``t`` of the T_cc model at its generation values (seed 99, spawn key t)."""
    rng = np.random.default_rng(np.random.SeedSequence(99, spawn_key=(t,)))
    return model.sample(model.parameters.values, rng)


@pytest.mark.slow
def test_tcc_pulls_hesse_and_minos():
    """300 T_cc toys at the paper's statistics (N_sig = 117, N_bkg = 700 in [−4, 11] MeV).

    Tolerances: pull mean within 3/√n = 0.17 of 0, width within 3 standard errors of 1.
    delta_m and n_sig use HESSE errors; gamma (0.41 ± 0.16 MeV, two sigma from its
    physical limit, so its likelihood is asymmetric) uses the MINOS error on the side of
    the truth, as a pull of an asymmetric interval must.

    ``slow`` (MINOS on 300 toys); the default suite runs MINOS on these toys in
    :func:`test_tcc_minos_intervals_bracket_the_estimate` and checks their HESSE errors in
    :func:`test_tcc_hesse_error_of_delta_m_is_the_expected_information_error`.
    """
    from toyengine.models.tcc import build_tcc as b

    model = b({})
    truth = model.parameters
    n = 300
    pulls = {"n_sig": [], "delta_m": [], "gamma": []}
    for t in range(n):
        res = fit(model.nll(_tcc_toy(model, t)), truth, minos=True)
        assert res.valid
        for p in ("n_sig", "delta_m"):
            pulls[p].append((res.value(p) - truth[p].value) / res.error(p))
        i = res.names.index("gamma")
        v = res.values[i]
        err = res.minos_upper[i] if v < truth["gamma"].value else -res.minos_lower[i]
        pulls["gamma"].append((v - truth["gamma"].value) / err)
    for p, vals in pulls.items():
        vals = np.asarray(vals)
        vals = vals[np.isfinite(vals)]
        assert len(vals) > 0.97 * n, p
        assert abs(vals.mean()) < 3 / math.sqrt(len(vals)), (p, vals.mean())
        # uncertainty of a standard deviation: s * sqrt((kurtosis - 1) / (4 n)), which is
        # 1/sqrt(2n) for a Gaussian; delta_m pulls have heavier tails (its error shrinks
        # with the fitted width), so the sample kurtosis is used, not the Gaussian value
        s_dev = vals.std(ddof=1)
        kurt = stats.kurtosis(vals, fisher=False)
        assert abs(s_dev - 1) < 3 * s_dev * math.sqrt((kurt - 1) / (4 * len(vals))), (p, s_dev)


def test_tcc_minos_intervals_bracket_the_estimate():
    """MINOS on the first 5 toys of :func:`test_tcc_pulls_hesse_and_minos`: valid fits,
    and every free parameter's interval is finite with the estimate strictly inside."""
    model = build_tcc({})
    truth = model.parameters
    for t in range(5):
        res = fit(model.nll(_tcc_toy(model, t)), truth, minos=True)
        assert res.valid, t
        for i, name in enumerate(res.names):
            if name not in truth.free_names:
                continue
            lo, hi = res.minos_lower[i], res.minos_upper[i]
            assert np.isfinite(lo) and np.isfinite(hi) and lo < 0 < hi, (t, name, lo, hi)


def test_tcc_hesse_error_of_delta_m_is_the_expected_information_error():
    """HESSE fits of the 300 toys of :func:`test_tcc_pulls_hesse_and_minos` (MINOS does not
    change the HESSE errors)."""
    model = build_tcc({})
    truth = model.parameters
    sig_dm = []
    for t in range(300):
        res = fit(model.nll(_tcc_toy(model, t)), truth)
        assert res.valid
        sig_dm.append(res.error("delta_m"))
    # the median HESSE error of δm over the toys (robust, unlike the RMS of heavy-tailed
    # values) against an independent computation: the expected-information error of the
    # extended likelihood at the generation values (_fisher_errors, ≈ 63 keV). The median
    # of 300 errors is known to ≈ 2 %; 10 % allows for the finite-sample (N_sig = 117)
    # departure from the asymptotic value. (Not the paper's 61 keV: the toy background
    # level was chosen to reproduce it, so that comparison would hold by construction.)
    expected = _fisher_errors(model)["delta_m"]
    assert abs(np.median(sig_dm) - expected) < 0.1 * expected, (np.median(sig_dm), expected)


def _fisher_errors(model) -> dict[str, float]:
    """Expected errors sqrt(diag(I⁻¹)) of the free parameters at the generation values:
    I_ij = ∫ ∂_i λ ∂_j λ / λ dx for the extended intensity λ = (Σ N_c) · density (Barlow,
    Nucl. Instrum. Meth. A 297 (1990) 496), by central differences and the trapezoid rule
    on the model's grid."""
    ps = model.parameters
    x0 = ps.values.copy()
    free = [ps.index(n) for n in ps.free_names]

    def lam(x):
        return x[model._yield_idx].sum() * model.density_grid(x)

    grads = []
    for i in free:
        h = 1e-4 * max(abs(x0[i]), 1.0)
        up, dn = x0.copy(), x0.copy()
        up[i] += h
        dn[i] -= h
        grads.append((lam(up) - lam(dn)) / (2 * h))
    lam0 = lam(x0)
    info = np.array([[np.trapezoid(gi * gj / lam0, model.grid) for gj in grads]
                     for gi in grads])
    return dict(zip(ps.free_names, np.sqrt(np.diag(np.linalg.inv(info))), strict=True))


def test_fisher_errors_match_hesse_on_the_asimov_sample():
    """A check of _fisher_errors itself: HESSE on the Asimov data set (the grid nodes
    weighted by λ·Δx, so that the weighted −ln L is the expected one) has the expected
    information as its curvature. They differ only by the quadrature and the
    finite-difference steps (< 0.3 % on the 10 keV grid), hence 1 %."""
    model = build_tcc({})
    x0 = model.parameters.values
    lam = x0[model._yield_idx].sum() * model.density_grid(x0)
    asimov = model.nll(model.grid, weights=lam * np.gradient(model.grid))
    res = fit(asimov, model.parameters)
    assert res.valid
    expected = _fisher_errors(model)
    for name in ("n_sig", "delta_m", "gamma", "n_bkg"):
        assert res.error(name) == pytest.approx(expected[name], rel=0.01), name


def test_failed_fits_return_invalid():
    model = build_tcc({})
    res = fit(model.nll(np.empty(0)), model.parameters)
    assert not res.valid
    # a likelihood that is NaN everywhere
    res = fit(lambda x: math.nan, model.parameters)
    assert not res.valid and res.status == FitStatus.INVALID
    # a likelihood that raises
    def boom(x):
        raise FloatingPointError("overflow")
    res = fit(boom, model.parameters)
    assert not res.valid and "overflow" in res.message


def test_weighted_fit_and_sandwich_covariance():
    """Unit weights: the sandwich covariance equals the inverse Hessian (within FD error);
    weights 0.5 with doubled events give the same point estimate."""
    model = build_tcc({})
    # 10x the paper's sample: the empirical score covariance fluctuates like 1/sqrt(n)
    model.parameters = model.parameters.updated({"n_sig": 1170.0, "n_bkg": 7000.0})
    x = model.sample(model.parameters.values, np.random.default_rng(5))
    nll = model.nll(x, weights=np.ones_like(x))
    res = fit(nll, model.parameters)
    assert res.valid
    cov = nll.weighted_covariance(res.values, res.free_names)
    assert np.allclose(np.sqrt(np.diag(cov)), np.sqrt(np.diag(res.covariance)), rtol=0.1)
    # weights 0.5 on a doubled sample: same estimate; the sandwich errors stay those of the
    # original sample, while the naive inverse Hessian would be sqrt(2) too small
    x2 = np.concatenate([x, x])
    nll2 = model.nll(x2, weights=np.full_like(x2, 0.5))
    res2 = fit(nll2, model.parameters.with_values(res.values))
    assert res2.valid
    assert np.allclose(res2.values, res.values, rtol=1e-3, atol=1e-4)


def test_bad_core_inputs_raise_model_error_naming_the_problem():
    with pytest.raises(ModelError, match="gamma.*outside"):
        Parameter("gamma", 7.0, (0.0, 5.0))
    with pytest.raises(ModelError, match="n_sig.*constraint width"):
        Parameter("n_sig", 1.0, fixed=True, constraint=__import__(
            "toyengine.core.params", fromlist=["Constraint"]).Constraint(1.0, 0.0))
    with pytest.raises(ModelError, match="delta_m.*empty"):
        Observable("delta_m", 3.0, 3.0)
    with pytest.raises(ModelError, match="sigma"):
        Resolution("gaussian", {"sigma": -0.1})
    with pytest.raises(ModelError, match="resolution_scale"):
        build_tcc({"resolution_scale": 0.0})
    with pytest.raises(ModelError, match="option colour: .*no such key"):
        build_tcc({"colour": "blue"})
    shape = RelativisticBW("m", "w", 0.0, 1.0, 1.0)
    with pytest.raises(ModelError, match="'zz'"):
        Model1D(Observable("x", 2.0, 3.0), [Component("s", "zz", shape, convolve=False)],
                ParameterSet((Parameter("m", 2.5), Parameter("w", 0.1))))


def test_multistart_keeps_the_global_minimum_over_a_false_valid_one():
    """Seed-fixed significance toy where a randomised start converges "valid" to a false
    minimum 122 units of −ln L above the nominal start's (invalid: parameters at limits)
    minimum: the fitter must keep the lower one."""
    from toyengine.core.fit import FitResult, _better

    params = build_tcc({}).parameters
    low = FitResult.failed(params, "")
    low = FitResult(**{**low.__dict__, "nll": -2359.7, "valid": False, "status": 2})
    high = FitResult(**{**low.__dict__, "nll": -2237.7, "valid": True, "status": 1})
    near = FitResult(**{**low.__dict__, "nll": -2359.68, "valid": True, "status": 1})
    assert _better(low, high) and not _better(high, low)
    assert _better(near, low) and not _better(low, near)


@pytest.mark.parametrize("options", [
    {},
    {"background_order": 3, "three_body_order": 2},
    {"decay_structure": "D_Dpi", "L": 0, "resolution": "student_t"},
])
def test_nll_hessian_matches_differences_of_the_analytic_gradient(options):
    """The analytic Hessian handed to iminuit (MIGRAD's seed, HESSE) against central
    differences of the analytic gradient (itself checked against the NLL below), at a
    point away from the truth so that no term vanishes. Differences have truncation error
    ~(1e-6)² and rounding ~1e-16 |grad| / 1e-6: the agreement is ~1e-7, checked at 1e-5."""
    model = build_tcc(options)
    params = model.parameters
    x = model.sample(params.values, np.random.default_rng(3))
    nll = model.nll(x)
    v = params.values * 1.02
    hess = nll.hessian(v)
    num_g, num = _central_differences(nll, v)
    scale = np.sqrt(np.outer(np.diag(num), np.diag(num)))
    assert np.all(np.abs(hess - num) <= 1e-5 * (np.abs(num) + scale)), hess - num
    np.testing.assert_allclose(hess, hess.T, rtol=1e-12)
    np.testing.assert_allclose(nll.grad(v), num_g, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("weighted", [False, True])
def test_nll_gradient_of_convolved_and_plain_shapes_matches_differences(weighted):
    """The adjoint gradient (one correlation per point for every convolved shape, the
    interpolation's transpose alone for a shape that is not convolved) against central
    differences of the NLL, with and without event weights: two exponentials, one convolved
    with a Gaussian and one not, and a convolved Breit–Wigner. Differences at relative step
    1e-6 agree to ~1e-8 relative; checked at 1e-5."""
    from toyengine.core.shapes import Exponential

    params = ParameterSet((
        Parameter("n_sig", 300.0, (0.0, 1e5), is_yield=True),
        Parameter("delta_m", 1.0, (-3.0, 3.0), step=0.05),
        Parameter("gamma", 0.5, (0.01, 5.0), step=0.1),
        Parameter("n_a", 500.0, (0.0, 1e5), is_yield=True),
        Parameter("slope_a", -0.2, (-2.0, 2.0), step=0.01),
        Parameter("n_b", 400.0, (0.0, 1e5), is_yield=True),
        Parameter("slope_b", 0.1, (-2.0, 2.0), step=0.01),
    ))
    comps = [
        Component("signal", "n_sig", RelativisticBW("delta_m", "gamma", TCC_OFFSET,
                                                    2 * M["D0"], M["pi+"])),
        Component("a", "n_a", Exponential("slope_a", 3.0)),
        Component("b", "n_b", Exponential("slope_b", 3.0), convolve=False),
    ]
    model = Model1D(Observable("delta_m", -4.0, 11.0), comps, params,
                    Resolution("gaussian", {"sigma": 0.3}), grid_step=0.02)
    rng = np.random.default_rng(11)
    x = model.sample(params.values, rng)
    nll = model.nll(x, rng.uniform(0.5, 1.5, len(x)) if weighted else None)
    v = params.values * 1.03
    num = np.empty(len(v))
    for j in range(len(v)):
        s = 1e-6 * max(abs(v[j]), 1.0)
        up, dn = v.copy(), v.copy()
        up[j] += s
        dn[j] -= s
        num[j] = (nll(up) - nll(dn)) / (2 * s)
    np.testing.assert_allclose(nll.grad(v), num, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("weighted", [False, True])
def test_nll_terms_of_several_parametric_and_linear_components_match_differences(weighted):
    """The compiled likelihood pass (:func:`toyengine.core.model1d_kernels.nll_terms`) with two
    parametric components (a Breit–Wigner convolved with the resolution and one that is
    not, their grid rows stacked), two linear ones (convolved Φ2 × polynomial and plain
    Φ3 × polynomial, their bases stacked), a Gaussian constraint and optional event
    weights: the densities against the sum of the components at the events, the gradient
    against central differences of the NLL and the Hessian against central differences of
    the gradient. Relative steps 1e-6: truncation ~1e-12 and rounding ~1e-16 / 1e-6 of the
    scale, so the agreement is ~1e-8 relative; checked at 1e-5 (as the tests above)."""
    from toyengine.core.params import Constraint
    from toyengine.core.shapes import PhaseSpacePolynomial

    params = ParameterSet((
        Parameter("n_sig", 300.0, (0.0, 1e5), is_yield=True),
        Parameter("delta_m", 1.0, (-3.0, 3.0), step=0.05),
        Parameter("gamma", 0.5, (0.01, 5.0), step=0.1),
        Parameter("n_bkg", 600.0, (0.0, 1e5), is_yield=True),
        Parameter("phi1", 0.9, (0.0, math.pi / 2), step=0.05),
        Parameter("phi2", 0.7, (0.0, math.pi / 2), step=0.05),
        Parameter("n_peak", 200.0, (0.0, 1e5), is_yield=True),
        Parameter("peak_m", 6.0, (4.0, 8.0), step=0.05,
                  constraint=Constraint(6.1, 0.2)),
        Parameter("peak_g", 1.0, (0.1, 5.0), step=0.1),
        Parameter("n_three", 150.0, (0.0, 1e5), is_yield=True),
        Parameter("psi1", 0.6, (0.0, math.pi / 2), step=0.05),
    ))
    lo, hi = -4.0, 11.0
    comps = [
        Component("signal", "n_sig", RelativisticBW("delta_m", "gamma", TCC_OFFSET,
                                                    2 * M["D0"], M["pi+"])),
        Component("background", "n_bkg", PhaseSpacePolynomial(
            ("phi1", "phi2"), TCC_OFFSET, (M["D*+"], M["D0"]), lo - 6.0, hi + 6.0)),
        Component("peak", "n_peak", RelativisticBW("peak_m", "peak_g", TCC_OFFSET,
                                                  2 * M["D0"], M["pi+"], L=0),
                  convolve=False),
        Component("three", "n_three", PhaseSpacePolynomial(
            ("psi1",), TCC_OFFSET, (M["D0"], M["D0"], M["pi+"]), lo, hi), convolve=False),
    ]
    model = Model1D(Observable("delta_m", lo, hi), comps, params,
                    Resolution("gaussian", {"sigma": 0.3}), grid_step=0.02)
    rng = np.random.default_rng(17)
    x = model.sample(params.values, rng)
    nll = model.nll(x, rng.uniform(0.5, 1.5, len(x)) if weighted else None)
    v = params.values * 1.02
    dens = sum(v[model._yield_idx[i]] * nll.component_at_events(i, v) for i in range(4))
    np.testing.assert_allclose(nll.event_densities(v), dens, rtol=1e-12)
    hess = nll.hessian(v)
    num_g, num = _central_differences(nll, v)
    scale = np.sqrt(np.outer(np.diag(num), np.diag(num)))
    assert np.all(np.abs(hess - num) <= 1e-5 * (np.abs(num) + scale)), hess - num
    np.testing.assert_array_equal(hess, hess.T)
    np.testing.assert_allclose(nll.grad(v), num_g, rtol=1e-5, atol=1e-4)


def test_reused_minuit_gives_the_same_fit_and_hesse_can_be_skipped():
    """fit() keeps one Minuit object per parameter set: a fit repeated after fits of other
    data sets is bit-identical to the first; without HESSE the minimum is the same within
    MIGRAD's tolerance and no errors are recorded."""
    model = build_tcc({})
    truth = model.parameters
    data = [model.sample(truth.values, np.random.default_rng(s)) for s in (5, 6)]
    first = fit(model.nll(data[0]), truth)
    fit(model.nll(data[1]), truth)
    fit(model.nll(data[1]), truth, hesse=False)
    again = fit(model.nll(data[0]), truth)
    assert first.valid and again.valid
    np.testing.assert_array_equal(first.values, again.values)
    np.testing.assert_array_equal(first.errors, again.errors)
    assert first.nll == again.nll
    quick = fit(model.nll(data[0]), truth, hesse=False)
    assert quick.valid and not quick.covar_ok
    assert np.all(np.isnan(quick.errors)) and np.all(np.isnan(quick.covariance))
    # both minima meet MIGRAD's EDM goal (1e-4 in -ln L for tol = 0.1)
    assert abs(quick.nll - first.nll) < 2e-4


def test_memoised_grid_terms_give_the_same_derivatives_and_stay_bounded():
    """The grid terms a model keeps for the Hessian (shared by the likelihoods of every
    toy, :meth:`Model1D._shape_rows`) give the same gradient and Hessian, bit
    for bit, as those of a fresh model; the memo keeps at most ``_HESSIAN_MEMO`` values."""
    from toyengine.core import model1d

    model = build_tcc({})
    params = model.parameters
    x = model.sample(params.values, np.random.default_rng(5))
    first = model.nll(x)
    hess_fresh = first.hessian(params.values)
    grad_fresh = first.grad(params.values)
    for k in range(2 * model1d._ROWS_MEMO):  # other points, as a fit would visit
        first.hessian(params.values * (1.0 + 1e-3 * (k + 1)))
    assert all(len(m) <= model1d._ROWS_MEMO for m in model._rows_memo)
    first.hessian(params.values)  # back in the memo, then read by another toy's likelihood
    again = model.nll(x)
    np.testing.assert_array_equal(again.hessian(params.values), hess_fresh)
    np.testing.assert_array_equal(again.grad(params.values), grad_fresh)
    fresh = build_tcc({}).nll(x)
    np.testing.assert_array_equal(fresh.hessian(params.values), hess_fresh)


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("n_angles", [0, 1, 3])
def test_positive_polynomial_rows_are_the_stacked_derivatives(order, n_angles):
    # the compiled rows of the T_cc+ background polynomial (LHCb, Nature Communications 13
    # (2022) 3351, Eq. 2) against the same rows stacked from its coefficients, Jacobian and
    # Hessian: the same numbers, bit for bit
    from toyengine.core.model1d import _coefficient_rows
    from toyengine.core.shapes import PhaseSpacePolynomial

    shape = PhaseSpacePolynomial(tuple(f"p{i}" for i in range(n_angles)), 0.0, (), 0.0, 1.0)

    class Stacked:  # the same shape without its own rows: _coefficient_rows stacks them
        def coefficients(self, v):
            return shape.coefficients(v)

        def coefficients_jacobian(self, v):
            return shape.coefficients_jacobian(v)

        def coefficients_with_hessian(self, v):
            return shape.coefficients_with_hessian(v)

    rng = np.random.default_rng(n_angles + 10 * order)
    for vals in [tuple(rng.uniform(0, np.pi / 2, n_angles)), (0.0,) * n_angles,
                 (np.pi / 2,) * n_angles]:
        got = _coefficient_rows(shape, vals, order if vals else 0)
        want = _coefficient_rows(Stacked(), vals, order if vals else 0)
        assert got.shape == want.shape
        assert np.array_equal(got, want)
