"""The hello-world (Gaussian) likelihood's exact Hessian and closed-form estimates, and the
fit they make (one Newton evaluation at the closed-form minimum) against MIGRAD + HESSE."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toyengine.core.fit import fit
from toyengine.core.minimize import _DEFAULT_TOL
from toyengine.core.newton import edm_threshold
from toyengine.models.gauss import build_gauss


class _MigradOnly:
    """The same likelihood without ``hessian`` or ``closed_form_minimum``: ``fit`` then
    runs MIGRAD + HESSE."""

    def __init__(self, nll):
        self._nll = nll

    def __call__(self, p):
        return self._nll(p)

    def grad(self, p):
        return self._nll.grad(p)


def _data(seed: int, n: int = 100, mu: float = 0.0, sigma: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(mu, sigma, n)


@pytest.mark.parametrize("weighted", [False, True])
def test_hessian_is_the_derivative_of_the_gradient(weighted):
    x = _data(1)
    w = np.random.default_rng(2).uniform(0.5, 1.5, x.size) if weighted else None
    nll = build_gauss().nll(x, w)
    p = np.array([0.3, 1.2])
    h = 1e-6  # central differences: error O(h^2 f''') ~ 1e-10 against entries O(100)
    num = np.column_stack([(nll.grad(p + h * e) - nll.grad(p - h * e)) / (2 * h)
                           for e in np.eye(2)])
    np.testing.assert_allclose(nll.hessian(p), num, rtol=1e-6, atol=1e-6)


def test_closed_form_minimum_is_the_sample_mean_and_biased_width():
    x = _data(3, mu=1e6, sigma=2.0)  # a large offset: no cancellation in the width
    nll = build_gauss().nll(x)
    both = nll.closed_form_minimum(np.array([0.0, 1.0]), np.array([True, True]))
    np.testing.assert_allclose(both, [x.mean(), x.std()], rtol=1e-12)
    np.testing.assert_allclose(nll.grad(both) / x.size, 0.0, atol=1e-9)
    fixed_mu = nll.closed_form_minimum(np.array([1e6, 1.0]), np.array([False, True]))
    assert fixed_mu[0] == 1e6
    assert fixed_mu[1] == pytest.approx(math.sqrt(np.mean((x - 1e6) ** 2)), rel=1e-12)
    fixed_sigma = nll.closed_form_minimum(np.array([0.0, 7.0]), np.array([True, False]))
    np.testing.assert_allclose(fixed_sigma, [x.mean(), 7.0], rtol=1e-12)
    assert build_gauss().nll(np.full(5, 2.0)).closed_form_minimum(
        np.array([0.0, 1.0]), np.array([True, True])) is None  # zero width: no minimum


def test_analytic_fit_agrees_with_migrad_hesse():
    """50 seeded toys of 100 values. MIGRAD stops once its estimated distance to the
    minimum is below ``edm_max = 0.002 tol errordef`` (1e-4 at the defaults), i.e. within
    ``sqrt(2 edm_max)`` ≈ 0.014 errors of the minimum in each parameter, and −ln L within
    ``edm_max`` above it; the errors are curvatures at those slightly different points
    (relative change ≈ displacement × third/second derivative ≈ 0.014 × 3/sqrt(n)), so 1 %
    (about twice that) on the errors."""
    model = build_gauss()
    edm_max = edm_threshold(_DEFAULT_TOL, 0.5)
    for seed in range(50):
        x = _data(100 + seed)
        exact = fit(model.nll(x), model.parameters)
        ref = fit(_MigradOnly(model.nll(x)), model.parameters)
        assert exact.valid and ref.valid and exact.covar_ok
        assert exact.nfcn == 3  # one value, gradient and Hessian: no iteration
        np.testing.assert_allclose(exact.values, [x.mean(), x.std()], rtol=1e-12)
        assert exact.nll <= ref.nll + 1e-9
        assert ref.nll - exact.nll <= edm_max
        np.testing.assert_array_less(np.abs(exact.values - ref.values),
                                     math.sqrt(2 * edm_max) * 1.5 * exact.errors)
        np.testing.assert_allclose(exact.errors, ref.errors, rtol=0.01)
        # the exact errors: sigma/sqrt(n) and sigma/sqrt(2n) at the estimates
        np.testing.assert_allclose(exact.errors, [x.std() / 10.0, x.std() / math.sqrt(200)],
                                   rtol=1e-10)
