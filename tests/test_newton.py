"""The trust-region Newton minimiser and its use by the fitter."""

import math

import numpy as np
import pytest

from toyengine.core import fit as fitmod
from toyengine.core import newton, newton_kernels
from toyengine.core.params import Parameter, ParameterSet
from toyengine.models.tcc import build_tcc

#: MIGRAD's EDM threshold at iminuit's default tol 0.1 and errordef 0.5
EDM_MAX = newton.edm_threshold(0.1, 0.5)


class Quadratic:
    """``(x - m)^T A (x - m) / 2``: minimum ``m``, covariance ``A^-1`` (errordef 0.5)."""

    errordef = 0.5

    def __init__(self, m: np.ndarray, a: np.ndarray) -> None:
        self.m, self.a = m, a
        self.calls = 0

    def __call__(self, x: np.ndarray) -> float:
        self.calls += 1
        d = x - self.m
        return 0.5 * float(d @ self.a @ d)

    def grad(self, x: np.ndarray) -> np.ndarray:
        return self.a @ (x - self.m)

    def hessian(self, x: np.ndarray) -> np.ndarray:
        return self.a.copy()


class DoubleWell:
    """``(x^2 - 1)^2 + 2 y^2 + x y / 4``: Hessian indefinite near ``x = 0``."""

    errordef = 0.5

    def __call__(self, v: np.ndarray) -> float:
        x, y = v
        return (x * x - 1.0) ** 2 + 2.0 * y * y + 0.25 * x * y

    def grad(self, v: np.ndarray) -> np.ndarray:
        x, y = v
        return np.array([4.0 * x * (x * x - 1.0) + 0.25 * y, 4.0 * y + 0.25 * x])

    def hessian(self, v: np.ndarray) -> np.ndarray:
        x, _ = v
        return np.array([[12.0 * x * x - 4.0, 0.25], [0.25, 4.0]])


A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, -0.2], [0.5, -0.2, 2.0]])
M = np.array([1.0, -2.0, 0.5])


def _box(n: int, lo: float = -math.inf, hi: float = math.inf):
    return np.full(n, lo), np.full(n, hi)


def test_quadratic_one_newton_step():
    f = Quadratic(M, A)
    lo, hi = _box(3)
    r = newton.minimize(f, f.grad, f.hessian, np.zeros(3), np.ones(3, bool), lo, hi,
                        np.ones(3), EDM_MAX)
    assert r.converged and r.iterations == 1  # the exact Newton step, then the check
    np.testing.assert_allclose(r.x, M, rtol=0, atol=1e-12)
    assert r.edm < 1e-20
    np.testing.assert_allclose(np.linalg.inv(r.hessian), np.linalg.inv(A), rtol=1e-14)
    assert (r.n_nll, r.n_grad, r.n_hess) == (2, 2, 2)


def test_fixed_parameter_stays_and_covariance_is_the_free_block():
    f = Quadratic(M, A)
    params = ParameterSet((Parameter("a", 0.0, step=0.5), Parameter("b", 3.0, fixed=True),
                           Parameter("c", 0.0, step=0.5)))
    res = fitmod.fit(f, params)
    assert res.valid and res.message == ""
    assert res.value("b") == 3.0 and math.isnan(res.error("b"))
    # the conditional minimum of (a, c) at b = 3 and the inverse of the free block of A
    free = [0, 2]
    b = A[np.ix_(free, free)]
    expect = M[free] - np.linalg.solve(b, A[free, 1] * (3.0 - M[1]))
    np.testing.assert_allclose(res.values[free], expect, atol=1e-10)
    np.testing.assert_allclose(res.covariance, np.linalg.inv(b), rtol=1e-12)
    np.testing.assert_allclose(res.errors[free], np.sqrt(np.diag(np.linalg.inv(b))),
                               rtol=1e-12)
    assert res.nfcn == 6  # nll, grad, hessian at the start and after one step
    assert res.edm < EDM_MAX and res.covar_ok and not res.at_limit


@pytest.mark.parametrize("fixed", ["a", "b"])
def test_migrad_hesse_with_a_fixed_parameter_is_the_free_block(fixed: str):
    """The MIGRAD + HESSE path (MINOS asked for) with the analytic Hessian and a fixed
    parameter: the covariance is the inverse of the free block of A, as in the Newton path.
    Minuit2 as bundled with iminuit 2.33 maps an external Hessian onto the floating
    parameters by position, not by name (root-project/root#20954): handed the full
    matrix, HESSE inverts its leading block instead, a covariance wrong by O(1) here."""
    f = Quadratic(M, A)
    params = ParameterSet(tuple(
        Parameter(n, 0.0, step=0.5, fixed=(n == fixed)) for n in "abc"))
    res = fitmod.fit(f, params, minos=True)
    assert res.valid
    free = [i for i, n in enumerate("abc") if n != fixed]
    b = A[np.ix_(free, free)]
    np.testing.assert_allclose(res.covariance, np.linalg.inv(b), rtol=1e-6)
    np.testing.assert_allclose(res.errors[free], np.sqrt(np.diag(np.linalg.inv(b))),
                               rtol=1e-6)
    # MINOS on a quadratic: the intervals are the HESSE errors
    np.testing.assert_allclose(res.minos_upper[free], res.errors[free], rtol=1e-3)


def test_minimum_beyond_a_limit_is_not_converged():
    f = Quadratic(M, A)  # the free minimum has a = 1 > 0.5
    lo, hi = np.array([-5.0, -5.0, -5.0]), np.array([0.5, 5.0, 5.0])
    r = newton.minimize(f, f.grad, f.hessian, np.zeros(3), np.ones(3, bool), lo, hi,
                        np.ones(3), EDM_MAX)
    assert not r.converged and "limit" in r.message
    assert np.all(r.x >= lo) and np.all(r.x <= hi) and r.x[0] < 0.5


def test_fit_falls_back_to_migrad_at_a_limit():
    f = Quadratic(M, A)
    params = ParameterSet((Parameter("a", 0.0, (-5.0, 0.5), step=0.5),
                           Parameter("b", 0.0, (-5.0, 5.0), step=0.5),
                           Parameter("c", 0.0, (-5.0, 5.0), step=0.5)))
    res = fitmod.fit(f, params)
    # MIGRAD ends on the limit, the refit fixes a there: the conditional minimum in (b, c)
    assert res.fixed_at_limit == ("a",) and res.at_limit and res.valid
    assert res.value("a") == 0.5
    # what the store records per parameter (``at_limit``): a only
    np.testing.assert_array_equal(res.at_limit_mask(params), [True, False, False])
    assert res.covar_ok and res.n_starts == 1
    b = A[1:, 1:]
    expect = M[1:] - np.linalg.solve(b, A[1:, 0] * (0.5 - M[0]))
    np.testing.assert_allclose(res.values[1:], expect, atol=2e-3)
    single = fitmod._single_fit(f, params, params.values, False, None, None)
    newton_only = fitmod._newton_fit(f, params, params.values, None, True)
    assert not newton_only.valid
    migrad = fitmod._migrad_fit(f, params, newton_only.values, False, None, None)
    # MIGRAD goes on from Newton's last point, and the fallback is recorded: Newton's
    # reason, and its calls on top of MIGRAD's
    assert "limit" in single.message and single.nfcn == newton_only.nfcn + migrad.nfcn
    np.testing.assert_array_equal(single.values, migrad.values)
    # from there MIGRAD needs far fewer calls than from the start (212 against 23 here)
    from_start = fitmod._migrad_fit(f, params, params.values, False, None, None)
    assert single.nfcn < 0.5 * from_start.nfcn
    assert single.nll <= from_start.nll + 1e-6


def test_indefinite_start_converges():
    f = DoubleWell()
    lo, hi = _box(2)
    x0 = np.array([0.1, 0.3])
    assert np.linalg.eigvalsh(f.hessian(x0))[0] < 0
    r = newton.minimize(f, f.grad, f.hessian, x0, np.ones(2, bool), lo, hi, np.ones(2),
                        EDM_MAX)
    assert r.converged and r.edm < EDM_MAX
    assert np.all(np.linalg.eigvalsh(r.hessian) > 0)
    g = f.grad(r.x)
    assert 0.5 * g @ np.linalg.solve(f.hessian(r.x), g) < EDM_MAX
    assert f(r.x) < f(x0)


def test_subproblem_is_on_the_boundary_and_optimal():
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    w = np.array([-1.0, 0.5, 2.0, 3.0])
    g = rng.normal(size=4)
    h = q @ np.diag(w) @ q.T
    p = newton_kernels.subproblem(g, w, q, 0.7)
    assert abs(np.linalg.norm(p) - 0.7) < 1e-6
    model = g @ p + 0.5 * p @ h @ p
    # no point of the ball does better (Nocedal & Wright, Theorem 4.1): random directions
    for _ in range(2000):
        d = rng.normal(size=4)
        d *= 0.7 * rng.random() ** 0.25 / np.linalg.norm(d)
        assert model <= g @ d + 0.5 * d @ h @ d + 1e-9


@pytest.mark.parametrize("toy", [1, 4])
def test_tcc_toy_agrees_with_migrad_hesse(toy):
    model = build_tcc({"grid_step": 0.02})
    truth = model.parameters
    rng = np.random.default_rng(np.random.SeedSequence(1, spawn_key=(toy,)))
    nll = model.nll(model.sample(truth.values, rng))
    tol = 1e-3  # both minimisers 100x tighter than the default: EDM < 1e-6
    a = fitmod._newton_fit(nll, truth, truth.values, tol, True)
    b = fitmod._migrad_fit(nll, truth, truth.values, False, None, tol, True)
    assert a.valid and b.valid and not a.at_limit and not b.at_limit
    # for a quadratic -ln L a point with EDM e is within sqrt(2 e) errors of the minimum
    # in every parameter, so the two are within the sum; x2 for the cubic terms
    bound = 2.0 * (math.sqrt(2 * a.edm) + math.sqrt(2 * b.edm))
    assert bound < 5e-3
    assert np.all(np.abs(a.values - b.values) / b.errors <= bound)
    # f - f_min = EDM to second order; the cubic terms change it by a relative amount of
    # the order of the distance in errors (< bound), and -ln L ~ 2500 summed over ~300
    # events carries a round-off of a few 1e-13
    assert abs(a.nll - b.nll) <= (a.edm + b.edm) * (1.0 + bound) + 1e-11
    # the same analytic Hessian at points < 5e-3 errors apart. (iminuit's ``errors`` of a
    # bounded parameter map the internal error through the limit transformation, not the
    # linearised covariance: up to 4 % off sqrt(diag) for bkg_phi1 near its limit.)
    np.testing.assert_allclose(a.errors, np.sqrt(np.diag(b.covariance)), rtol=2e-3)
    scale = np.outer(b.errors, b.errors)
    assert np.all(np.abs(a.covariance - b.covariance) / scale <= 2e-3)


def _amplitudes(x: np.ndarray, integrals: np.ndarray) -> np.ndarray:
    """``(x_0, N c(phi) / (c(phi) . I))`` for ``x = (x_0, N, phi_1..phi_K)``."""
    from toyengine.core.lineshapes import sphere_coefficients

    c = sphere_coefficients(x[2:])
    return np.concatenate([x[:1], x[1] * c / (c @ integrals)])


def _central_derivatives(f, x: np.ndarray, h: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """Gradient and Hessian of ``f`` by central differences (error O(h^2))."""
    from toyengine.core.likelihood import finite_difference_hessian

    n = len(x)
    g = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(n)])
    return g, finite_difference_hessian(f, x, list(range(n)), [h] * n)


def test_amplitude_step_is_newtons_step_in_the_amplitudes():
    # a function exactly quadratic in the amplitudes u = N c(phi) / (c . I) of a positive
    # polynomial (and in one other parameter): one step in amplitude coordinates lands on its
    # minimum, the step in x does not; the derivatives over x come from central differences,
    # not from the kernel's chain rule, so a wrong Jacobian or second-derivative term fails
    integrals = np.array([0.3, 0.5, 0.7, 0.4])
    best = np.array([0.2, 150.0, 0.9, 0.7, 1.1])
    rng = np.random.default_rng(3)
    q = rng.normal(size=(5, 5))
    a = q @ q.T + 5 * np.eye(5)
    u_best = _amplitudes(best, integrals)

    def f(x: np.ndarray) -> float:
        d = _amplitudes(x, integrals) - u_best
        return 0.5 * float(d @ a @ d)

    x0 = best + np.array([0.1, 12.0, -0.15, 0.1, -0.12])
    blocks, ints = np.array([[1, 2, 3, 4]]), integrals[None, :]
    lo, hi = np.array([-5, 0, 0, 0, 0.0]), np.array([5, 1e4, 1.6, 1.6, 1.6])
    miss = []
    for step in (3e-3, 1e-3):
        g, h = _central_derivatives(f, x0, step)
        ok, trial, pred, pnorm = newton_kernels.amplitude_step(g, h, x0, blocks, ints, lo, hi,
                                                               np.ones(5), math.nan)
        assert ok
        miss.append(np.max(np.abs(trial - best)))
    # the landing point misses by the finite differences' O(h^2) error only: 2.2e-2 and
    # 2.5e-3 here (a wrong chain rule leaves a miss that does not shrink with h)
    assert miss[1] < 5e-3
    assert 6.0 < miss[0] / miss[1] < 13.0  # (3e-3 / 1e-3)^2 = 9
    assert pred == pytest.approx(f(x0), rel=1e-4)  # the model is exact: f(x0) - f(best)
    assert pnorm == pytest.approx(np.linalg.norm(trial - x0))
    assert np.max(np.abs(x0 - np.linalg.solve(h, g) - best)) > 1e-2  # Newton's step in x
    # a trust radius shorter than the step, or limits it crosses: not taken
    assert not newton_kernels.amplitude_step(g, h, x0, blocks, ints, lo, hi, np.ones(5),
                                             0.5 * pnorm)[0]
    lo_tight = lo.copy()
    lo_tight[1] = 0.5 * (x0[1] + best[1])  # the step takes N from 162 to 150
    assert not newton_kernels.amplitude_step(g, h, x0, blocks, ints, lo_tight, hi, np.ones(5),
                                             math.nan)[0]


def test_amplitude_step_refuses_a_negative_amplitude():
    # the minimum of this quadratic has u_0 < 0 (outside the sphere's image, where phi_1
    # would pass its limit pi/2): the step is not taken and the minimiser steps in x
    integrals = np.array([0.5, 0.5, 0.5])
    x0 = np.array([0.0, 100.0, 1.3, 0.8])
    u_best = _amplitudes(x0, integrals) - np.array([0.0, 40.0, 0.0, 0.0])

    def f(x: np.ndarray) -> float:
        d = _amplitudes(x, integrals) - u_best
        return 0.5 * float(d @ d)

    g, h = _central_derivatives(f, x0)
    ok = newton_kernels.amplitude_step(g, h, x0, np.array([[1, 2, 3]]), integrals[None, :],
                                       np.full(4, -1e3), np.full(4, 1e3), np.ones(4),
                                       math.nan)[0]
    assert not ok


def test_amplitude_blocks_only_with_every_entry_free():
    blocks, ints = np.array([[3, 4, 5], [0, 1, -1]]), np.ones((2, 3))
    free = np.array([True, True, True, True, False, True])
    pos, kept = newton._free_blocks((blocks, ints), free)
    assert pos.tolist() == [[0, 1, -1]] and kept.shape == (1, 3)
    free[4] = True
    free[0] = False
    pos, _ = newton._free_blocks((blocks, ints), free)
    assert pos.tolist() == [[2, 3, 4]]  # positions among the free parameters
    assert newton._free_blocks((blocks, ints), np.array([False] * 6)) == (None, None)


def test_tcc_fits_in_amplitude_coordinates_reach_the_same_minimum_in_fewer_steps():
    # the T_cc+ pulls model's background polynomial (LHCb, Nature Communications 13 (2022)
    # 3351, Eq. 2): from the generation values, Newton's steps in (n_bkg, phi) approach the
    # minimum only linearly (about 5 Hessians a fit); in the amplitudes, about 4
    model = build_tcc({"grid_step": 0.02})
    truth = model.parameters
    lower, upper, scale = truth.limit_arrays
    free = truth.free_mask
    counts = {True: 0, False: 0}
    for toy in range(20):
        rng = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(toy,)))
        nll = model.nll(model.sample(truth.values, rng))
        assert nll.amplitude_blocks is not None
        runs = {}
        for amp in (True, False):
            runs[amp] = newton.minimize(nll, nll.grad, nll.hessian, truth.values, free,
                                        lower, upper, scale, EDM_MAX,
                                        amplitudes=nll.amplitude_blocks if amp else None)
            counts[amp] += runs[amp].n_hess
        a, b = runs[True], runs[False]
        assert a.converged == b.converged
        if a.converged:
            err = np.sqrt(np.diag(np.linalg.inv(b.hessian)))
            # each within sqrt(2 EDM) errors of the minimum (quadratic -ln L), x2 for the
            # cubic terms
            bound = 2.0 * (math.sqrt(2 * a.edm) + math.sqrt(2 * b.edm))
            assert np.all(np.abs(a.x - b.x) / err <= bound)
    assert counts[True] < 0.9 * counts[False]


def test_amplitude_step_refuses_an_angle_on_its_limit():
    # at phi_1 = 0 the amplitudes u_1, u_2 are exactly zero and the map to the amplitudes is
    # singular: the step is refused (no exception from inverting J), and a fit starting
    # there takes its steps in x. (In floating point cos(pi/2)^2 = 3.7e-33 > 0: there the
    # map is invertible and the step is tried.)
    phi = 0.0
    integrals = np.array([0.5, 0.5, 0.5])
    x0 = np.array([0.0, 100.0, phi, 0.8])
    ok = newton_kernels.amplitude_step(np.ones(4), np.eye(4), x0, np.array([[1, 2, 3]]),
                                       integrals[None, :], np.full(4, -1e3), np.full(4, 1e3),
                                       np.ones(4), math.nan)[0]
    assert not ok
    model = build_tcc({"grid_step": 0.02})
    start = model.parameters.values.copy()
    start[model.parameters.index("bkg_phi1")] = phi
    rng = np.random.default_rng(np.random.SeedSequence(3, spawn_key=(0,)))
    nll = model.nll(model.sample(model.parameters.values, rng))
    lower, upper, scale = model.parameters.limit_arrays
    free = model.parameters.free_mask
    runs = [newton.minimize(nll, nll.grad, nll.hessian, start, free, lower, upper, scale,
                            EDM_MAX, amplitudes=amp) for amp in (nll.amplitude_blocks, None)]
    assert runs[0].message == runs[1].message
    np.testing.assert_array_equal(runs[0].x, runs[1].x)  # the same steps, all in x
