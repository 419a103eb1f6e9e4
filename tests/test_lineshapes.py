"""Tests of toyengine.core.lineshapes: Blatt–Weisskopf, Breit–Wigner, Bernstein, sphere map."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, interpolate, special

from toyengine.core.kinematics import MASSES_PDG2020, breakup_momentum, tcc_thresholds
from toyengine.core.lineshapes import (
    BreitWignerGrid,
    barrier_factor,
    bernstein_basis,
    blatt_weisskopf_sq,
    mass_dependent_width,
    rbw_amplitude,
    rbw_density,
    sphere_angles,
    sphere_coefficients,
    sphere_coefficients_hessian,
    sphere_coefficients_jacobian,
    sphere_coefficients_with_derivatives,
)
from toyengine.errors import ModelError

M20 = MASSES_PDG2020
TCC_M0 = tcc_thresholds()["D*+D0"] - 0.273  # δm_BW = −273 keV (LHCb, Nature Physics 18 (2022) 751)
TCC = {"m1": 2 * M20["D0"], "m2": M20["pi+"], "L": 1, "r": 3.5}
THR = TCC["m1"] + TCC["m2"]


def width_by_hand(
    m: float, m0: float, gamma0: float, m1: float, m2: float, L: int, r: float
) -> float:
    """Independent Γ(m): momenta from energies, D_L from the printed table (von Hippel & Quigg)."""
    table = {
        0: lambda z: 1.0,
        1: lambda z: 1 + z**2,
        2: lambda z: z**4 + 3 * z**2 + 9,
        3: lambda z: z**6 + 6 * z**4 + 45 * z**2 + 225,
        4: lambda z: z**8 + 10 * z**6 + 135 * z**4 + 1575 * z**2 + 11025,
    }

    def q_of(x: float) -> float:
        e1 = (x * x + m1 * m1 - m2 * m2) / (2 * x)
        return math.sqrt(max(e1 * e1 - m1 * m1, 0.0))

    q, q0 = q_of(m), q_of(m0)
    bw2 = table[L](q0 * r / 1000) / table[L](q * r / 1000)
    return gamma0 * (q / q0) ** (2 * L + 1) * (m0 / m) * bw2


# --- Blatt–Weisskopf --------------------------------------------------------------------


def test_blatt_weisskopf_at_z1() -> None:
    expected = [1.0, 2.0, 13.0, 277.0, 12746.0]
    got = [float(blatt_weisskopf_sq(1.0, L)) for L in range(5)]
    assert got == expected


@pytest.mark.parametrize("L", range(5))
def test_blatt_weisskopf_vs_spherical_hankel(L: int) -> None:
    # Independent closed form: D_L(z) = z^{2L+2} (j_L(z)² + y_L(z)²)
    z = np.array([0.05, 0.137, 0.5, 1.0, 2.5, 7.0])
    hankel = z ** (2 * L + 2) * (special.spherical_jn(L, z) ** 2 + special.spherical_yn(L, z) ** 2)
    np.testing.assert_allclose(blatt_weisskopf_sq(z, L), hankel, rtol=1e-10)


def test_barrier_factor_normalised_at_pole() -> None:
    q = np.array([1.0, 39.114, 200.0])
    for L in range(5):
        x = barrier_factor(q, 39.114, 3.5, L)
        assert x[1] == pytest.approx(1.0, rel=1e-14)
        z, z0 = q * 3.5e-3, 39.114 * 3.5e-3
        np.testing.assert_allclose(x**2, blatt_weisskopf_sq(z0, L) / blatt_weisskopf_sq(z, L))
    np.testing.assert_array_equal(barrier_factor(q, 39.114, 3.5, 0), 1.0)
    # large-z behaviour X_L ~ (z0/z)^L * sqrt(D_L(z0)) for L=1
    assert barrier_factor(1e7, 100.0, 4.0, 1) == pytest.approx(
        math.sqrt(1 + 0.16) / (1e7 * 4e-3), rel=1e-6
    )


@pytest.mark.parametrize("bad_L", [-1, 5, 1.5, True])
def test_bad_L_raises(bad_L: object) -> None:
    with pytest.raises(ModelError, match="L="):
        blatt_weisskopf_sq(1.0, bad_L)  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="L="):
        barrier_factor(1.0, 1.0, 3.0, bad_L)  # type: ignore[arg-type]


def test_negative_radius_raises() -> None:
    with pytest.raises(ModelError, match="radius"):
        barrier_factor(1.0, 1.0, -3.0, 1)


# --- mass-dependent width and Breit–Wigner ----------------------------------------------


@pytest.mark.parametrize("L", range(5))
def test_width_at_pole_equals_gamma0(L: int) -> None:
    assert mass_dependent_width(1430.0, 1430.0, 270.0, 493.677, 139.57, L, 4.0) == pytest.approx(
        270.0, rel=1e-13
    )


@pytest.mark.parametrize(
    ("args", "points"),
    [
        ((TCC_M0, 0.41, TCC["m1"], TCC["m2"], 1, 3.5), [3869.5, 3874.0, 3874.813, 3880.0, 3899.0]),
        ((895.55, 47.3, 493.677, 139.57061, 1, 4.0), [700.0, 850.0, 895.55, 1200.0]),
        ((1432.4, 109.0, 493.677, 139.57061, 2, 4.0), [800.0, 1432.4, 2000.0]),
        ((2045.0, 198.0, 493.677, 139.57061, 4, 4.0), [1000.0, 2045.0, 2200.0]),
        ((4096.0, 152.0, 2983.9, 139.57061, 0, 4.0), [3200.0, 4096.0, 4700.0]),
    ],
)
def test_width_and_density_vs_hand_formula(args: tuple, points: list[float]) -> None:
    m0 = args[0]
    m = np.array(points)
    width = mass_dependent_width(m, *args)
    hand = np.array([width_by_hand(x, *args) for x in points])
    np.testing.assert_allclose(width, hand, rtol=1e-10)
    dens = rbw_density(m, *args)
    hand_f = (2 / math.pi) * m * m0 * hand / ((m0**2 - m**2) ** 2 + m0**2 * hand**2)
    np.testing.assert_allclose(dens, hand_f, rtol=1e-10)
    amp = rbw_amplitude(m, *args)
    np.testing.assert_allclose(amp, 1.0 / (m0**2 - m**2 - 1j * m0 * hand), rtol=1e-10)
    # F = (2/π) m m0 Γ |T|²
    np.testing.assert_allclose(dens, (2 / math.pi) * m * m0 * width * np.abs(amp) ** 2, rtol=1e-12)


def test_amplitude_at_pole() -> None:
    t = rbw_amplitude(895.55, 895.55, 47.3, 493.677, 139.57, 1, 4.0)
    assert t == pytest.approx(1j / (895.55 * 47.3), rel=1e-12)


@pytest.mark.parametrize("L", range(5))
def test_width_threshold_behaviour(L: int) -> None:
    # Γ(m) ∝ q^{2L+1} near threshold: Γ/q^{2L+1} tends to a constant (D_L(z)→D_L(0))
    m1, m2 = TCC["m1"], TCC["m2"]
    q_target = np.array([1e-3, 2e-3, 4e-3])
    # invert q(m) in the non-relativistic limit, then use the exact q
    mu = m1 * m2 / (m1 + m2)
    m = m1 + m2 + q_target**2 / (2 * mu)
    q = breakup_momentum(m, m1, m2)
    width = mass_dependent_width(m, TCC_M0, 0.41, m1, m2, L, 3.5)
    c = width / q ** (2 * L + 1)
    np.testing.assert_allclose(c, c[0], rtol=1e-5)
    below = mass_dependent_width(np.array([m1 + m2 - 1.0, m1 + m2]), TCC_M0, 0.41, m1, m2, L, 3.5)
    np.testing.assert_array_equal(below, 0.0)


def test_density_zero_below_threshold_no_warnings() -> None:
    m = np.linspace(THR - 2.0, THR + 30.0, 2000)
    with np.errstate(all="raise"):
        f = rbw_density(m, TCC_M0, 0.41, **TCC)
    assert np.all(f[m <= THR] == 0.0)
    assert np.all(f[m > THR] > 0.0)


def test_density_integral_closed_form_massless_s_wave() -> None:
    # L = 0 and massless daughters: q = m/2, so Γ(m) = Γ0 exactly and
    # ∫₀^∞ F dm = 1/2 + arctan(m0/Γ0)/π  (s = m² substitution)
    m0, g0 = 1000.0, 150.0
    val, _ = integrate.quad(
        lambda x: float(rbw_density(x, m0, g0, 0.0, 0.0, 0, 3.0)),
        0.0,
        np.inf,
        points=None,
        epsabs=0.0,
        epsrel=1e-12,
        limit=500,
    )
    assert val == pytest.approx(0.5 + math.atan(m0 / g0) / math.pi, rel=1e-9)
    np.testing.assert_allclose(
        mass_dependent_width(np.array([10.0, 1000.0, 5000.0]), m0, g0, 0.0, 0.0, 0, 3.0), g0
    )


def test_bw_errors_name_the_problem() -> None:
    with pytest.raises(ModelError, match=r"m0=.*threshold.*q0 = 0"):
        rbw_density(3870.0, THR - 0.1, 0.41, **TCC)
    with pytest.raises(ModelError, match=r"m0=.*threshold"):
        mass_dependent_width(3870.0, THR, 0.41, **TCC)
    with pytest.raises(ModelError, match="gamma0"):
        rbw_density(3870.0, TCC_M0, 0.0, **TCC)
    with pytest.raises(ModelError, match="gamma0"):
        rbw_amplitude(3870.0, TCC_M0, -1.0, **TCC)
    with pytest.raises(ModelError, match="m0"):
        rbw_density(3870.0, float("nan"), 0.41, **TCC)


def test_tcc_pole_numbers() -> None:
    # m0 = threshold − 273 keV = 3874.8128 MeV, q0 = 39.114 MeV, z0 = 0.1369 (PDG 2020 masses,
    # computed by hand)
    assert TCC_M0 == pytest.approx(3874.8128, abs=1e-4)
    q0 = float(breakup_momentum(TCC_M0, TCC["m1"], TCC["m2"]))
    assert q0 * 3.5e-3 == pytest.approx(0.1369, abs=1e-4)
    assert THR == pytest.approx(3869.2304, abs=1e-4)


# --- precomputed grid -------------------------------------------------------------------


def test_grid_matches_function_and_gradient() -> None:
    m = np.linspace(THR - 1.0, 3900.0, 2001)
    grid = BreitWignerGrid(m, **TCC)
    for m0, g0 in [(TCC_M0, 0.41), (3875.5, 0.05), (3880.0, 2.0)]:
        np.testing.assert_allclose(grid(m0, g0), rbw_density(m, m0, g0, **TCC), rtol=1e-12)
        np.testing.assert_allclose(
            grid.width(m0, g0), mass_dependent_width(m, m0, g0, **TCC), rtol=1e-12
        )
        f, dm0, dg0 = grid.density_and_gradient(m0, g0)
        np.testing.assert_allclose(f, grid(m0, g0), rtol=1e-14)
        # central differences, truncation error O(h²) ~ 1e-10 relative to max|dF|
        h_m, h_g = 1e-5, 1e-7
        num_m = (grid(m0 + h_m, g0) - grid(m0 - h_m, g0)) / (2 * h_m)
        num_g = (grid(m0, g0 + h_g) - grid(m0, g0 - h_g)) / (2 * h_g)
        np.testing.assert_allclose(dm0, num_m, atol=1e-6 * np.max(np.abs(num_m)))
        np.testing.assert_allclose(dg0, num_g, atol=1e-6 * np.max(np.abs(num_g)))


@pytest.mark.parametrize("L", [0, 2, 3, 4])
def test_grid_gradient_other_L(L: int) -> None:
    m = np.linspace(700.0, 1400.0, 301)
    grid = BreitWignerGrid(m, 493.677, 139.57, L, 4.0)
    m0, g0 = 1000.0, 80.0
    _, dm0, dg0 = grid.density_and_gradient(m0, g0)
    h = 1e-4
    num_m = (grid(m0 + h, g0) - grid(m0 - h, g0)) / (2 * h)
    num_g = (grid(m0, g0 + h) - grid(m0, g0 - h)) / (2 * h)
    np.testing.assert_allclose(dm0, num_m, atol=1e-6 * np.max(np.abs(num_m)))
    np.testing.assert_allclose(dg0, num_g, atol=1e-6 * np.max(np.abs(num_g)))


@pytest.mark.parametrize("L", [0, 1, 2, 4])
@pytest.mark.parametrize("m0, g0", [(TCC_M0, 0.41), (3875.5, 0.05), (3880.0, 2.0)])
def test_grid_hessian_vs_finite_differences_of_the_gradient(L: int, m0: float,
                                                            g0: float) -> None:
    m = np.linspace(THR - 1.0, 3900.0, 2001)
    grid = BreitWignerGrid(m, TCC["m1"], TCC["m2"], L, TCC["r"])
    f, df, d2f = grid.density_derivatives(m0, g0)
    f_ref, dm_ref, dg_ref = grid.density_and_gradient(m0, g0)
    np.testing.assert_allclose(f, f_ref, rtol=1e-14)
    np.testing.assert_allclose(df[0], dm_ref, rtol=1e-12, atol=1e-14 * np.max(np.abs(dm_ref)))
    np.testing.assert_allclose(df[1], dg_ref, rtol=1e-12, atol=1e-14 * np.max(np.abs(dg_ref)))
    np.testing.assert_array_equal(d2f[0, 1], d2f[1, 0])
    # central differences of the analytic gradient with h = 1e-4 Γ0: truncation
    # ~(h/Γ0)² = 1e-8 and rounding ~1e-16 max|dF| / h, below 1e-6 of max|d²F|
    h = 1e-4 * g0
    for j in range(2):
        up = grid.density_and_gradient(m0 + h * (j == 0), g0 + h * (j == 1))
        dn = grid.density_and_gradient(m0 - h * (j == 0), g0 - h * (j == 1))
        for i in range(2):
            num = (up[1 + i] - dn[1 + i]) / (2 * h)
            np.testing.assert_allclose(d2f[i, j], num, atol=1e-6 * np.max(np.abs(num)))


def test_grid_errors() -> None:
    grid = BreitWignerGrid(np.linspace(3870, 3900, 11), **TCC)
    with pytest.raises(ModelError, match="threshold"):
        grid(THR - 1.0, 0.4)
    with pytest.raises(ModelError, match="L="):
        BreitWignerGrid(np.linspace(3870, 3900, 11), TCC["m1"], TCC["m2"], 7, 3.5)


# --- Bernstein and the sphere parametrisation -------------------------------------------


@pytest.mark.parametrize("order", [0, 1, 2, 3, 6])
def test_bernstein_basis_vs_scipy_bpoly(order: int) -> None:
    lo, hi = 3869.23, 3900.0
    x = np.linspace(lo, hi, 97)
    basis = bernstein_basis(x, lo, hi, order)
    assert basis.shape == (order + 1, x.size)
    for k in range(order + 1):
        c = np.zeros((order + 1, 1))
        c[k, 0] = 1.0
        np.testing.assert_allclose(basis[k], interpolate.BPoly(c, [lo, hi])(x), atol=1e-13)
    np.testing.assert_allclose(basis.sum(axis=0), 1.0, rtol=1e-13)  # partition of unity
    # each basis function integrates to (hi − lo)/(n + 1)
    for k in range(order + 1):
        val, _ = integrate.quad(
            lambda t, k=k: float(bernstein_basis(t, lo, hi, order)[k, 0]), lo, hi
        )
        assert val == pytest.approx((hi - lo) / (order + 1), rel=1e-10)


def test_bernstein_bad_inputs() -> None:
    with pytest.raises(ModelError, match="order"):
        bernstein_basis([0.5], 0.0, 1.0, -1)
    with pytest.raises(ModelError, match="domain"):
        bernstein_basis([0.5], 1.0, 1.0, 2)


def test_positive_polynomial_is_positive_for_random_angles() -> None:
    rng = np.random.default_rng(20240611)
    x = np.linspace(0.0, 1.0, 1001)
    for order in range(1, 7):
        basis = bernstein_basis(x, 0.0, 1.0, order)
        for _ in range(100):
            phis = rng.uniform(-2 * math.pi, 2 * math.pi, order)
            coeffs = sphere_coefficients(phis)
            assert coeffs.shape == (order + 1,)
            assert np.all(coeffs >= 0.0)
            assert coeffs.sum() == pytest.approx(1.0, abs=1e-14)
            poly = coeffs @ basis
            assert np.all(poly >= 0.0)
            # normalised: ∫₀¹ Σ b_k B_k = Σ b_k/(n+1) = 1/(n+1)
            assert np.trapezoid(poly, x) == pytest.approx(1.0 / (order + 1), rel=1e-5)


def test_sphere_coefficients_explicit() -> None:
    p1, p2 = 0.3, 1.1
    expected = [
        math.cos(p1) ** 2,
        math.sin(p1) ** 2 * math.cos(p2) ** 2,
        math.sin(p1) ** 2 * math.sin(p2) ** 2,
    ]
    np.testing.assert_allclose(sphere_coefficients([p1, p2]), expected, rtol=1e-14)
    np.testing.assert_array_equal(sphere_coefficients([]), [1.0])


def test_sphere_coefficients_equal_the_compiled_kernels_bit_for_bit() -> None:
    """Model building takes the coefficients from plain Python, fits from the compiled
    kernel with derivatives: the two must agree exactly (same products, same order), or a
    toy's fit would start from another density than its model's."""
    rng = np.random.default_rng(7)
    for n in range(6):
        for k in range(500):
            phis = rng.uniform(-10.0, 10.0, n)
            if k == 0:
                phis = np.array([0.0, math.pi / 2, math.pi, 1e-300, -math.pi / 2, 1e10])[:n]
            np.testing.assert_array_equal(sphere_coefficients(phis),
                                          sphere_coefficients_with_derivatives(phis)[0])


@pytest.mark.parametrize(
    "phis", [[0.3], [0.3, 1.1], [0.2, 0.9, 1.4, 2.5], [0.0, math.pi / 2, 0.7], [1e-9, 1.0, 3.0]]
)
def test_sphere_jacobian_vs_finite_differences(phis: list[float]) -> None:
    phis_arr = np.array(phis)
    jac = sphere_coefficients_jacobian(phis_arr)
    assert jac.shape == (len(phis) + 1, len(phis))
    h = 1e-6
    num = np.empty_like(jac)
    for j in range(len(phis)):
        step = np.zeros(len(phis))
        step[j] = h
        num[:, j] = (
            sphere_coefficients(phis_arr + step) - sphere_coefficients(phis_arr - step)
        ) / (2 * h)
    np.testing.assert_allclose(jac, num, atol=1e-9)
    np.testing.assert_allclose(jac.sum(axis=0), 0.0, atol=1e-14)  # Σ b_k = 1 for all angles


@pytest.mark.parametrize(
    "phis", [[0.3], [0.3, 1.1], [0.2, 0.9, 1.4, 2.5], [0.0, math.pi / 2, 0.7], [1e-9, 1.0, 3.0]]
)
def test_sphere_hessian_vs_finite_differences(phis: list[float]) -> None:
    phis_arr = np.array(phis)
    hess = sphere_coefficients_hessian(phis_arr)
    n = len(phis)
    assert hess.shape == (n + 1, n, n)
    h = 1e-6  # central differences of the analytic Jacobian: error ~h² + 1e-16/h
    for j in range(n):
        step = np.zeros(n)
        step[j] = h
        num = (sphere_coefficients_jacobian(phis_arr + step)
               - sphere_coefficients_jacobian(phis_arr - step)) / (2 * h)
        np.testing.assert_allclose(hess[:, :, j], num, atol=1e-9)
    np.testing.assert_array_equal(hess, hess.transpose(0, 2, 1))
    np.testing.assert_allclose(hess.sum(axis=0), 0.0, atol=1e-14)  # Σ b_k = 1


@pytest.mark.parametrize("phis", [[], [0.3], [0.3, 1.1], [0.0, math.pi / 2, 0.7]])
def test_sphere_coefficients_with_derivatives_are_the_separate_ones(phis: list[float]) -> None:
    # the same products in the same order: equal bit for bit (a fit gives the same numbers)
    b, jac, hess = sphere_coefficients_with_derivatives(np.array(phis))
    np.testing.assert_array_equal(b, sphere_coefficients(np.array(phis)))
    np.testing.assert_array_equal(jac, sphere_coefficients_jacobian(np.array(phis)))
    np.testing.assert_array_equal(hess, sphere_coefficients_hessian(np.array(phis)))
    assert jac.shape == (len(phis) + 1, len(phis))
    assert hess.shape == (len(phis) + 1, len(phis), len(phis))


def test_sphere_angles_round_trip() -> None:
    rng = np.random.default_rng(7)
    for n in range(1, 6):
        coeffs = rng.dirichlet(np.ones(n + 1))
        angles = sphere_angles(coeffs)
        assert angles.shape == (n,)
        assert np.all((angles >= 0.0) & (angles <= math.pi / 2))
        np.testing.assert_allclose(sphere_coefficients(angles), coeffs, atol=1e-14)
    # un-normalised input and zero tail
    np.testing.assert_allclose(sphere_coefficients(sphere_angles([2.0, 2.0, 0.0])), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(sphere_coefficients(sphere_angles([1.0, 0.0, 0.0])), [1, 0, 0])


@pytest.mark.parametrize("bad", [[-0.1, 1.0], [0.0, 0.0], [np.nan, 1.0], []])
def test_sphere_angles_bad_input(bad: list[float]) -> None:
    with pytest.raises(ModelError, match="coeffs"):
        sphere_angles(bad)
