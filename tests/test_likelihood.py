"""The likelihood contract (toyengine.core.likelihood): constraints, sums, wrapped callables."""

from __future__ import annotations

import numpy as np
import pytest

from toyengine.core.likelihood import Likelihood, LikelihoodSum, NormalConstraint, as_likelihood


class _Quadratic(Likelihood):
    """``Σ (x − c)²``: an exact gradient and Hessian to compose with."""

    has_grad = True
    has_hessian = True

    def __init__(self, c: np.ndarray) -> None:
        self.c = c

    def _call(self, x: np.ndarray) -> float:
        return float(np.sum((x - self.c) ** 2))

    def _grad(self, x: np.ndarray) -> np.ndarray:
        return 2.0 * (x - self.c)

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        return 2.0 * np.eye(x.size)


def _numerical_grad(f, x, h=1e-6):
    out = np.empty(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def test_normal_constraint_value_gradient_hessian():
    con = NormalConstraint([0, 2], [1.0, -2.0], [0.5, 2.0])
    x = np.array([1.5, 7.0, 0.0])
    assert con(x) == pytest.approx(0.5 * (1.0**2 + 1.0**2))
    # central differences of a quadratic are exact up to rounding (~1e-10 at h = 1e-6)
    np.testing.assert_allclose(con.grad(x), _numerical_grad(con, x), atol=1e-8)
    np.testing.assert_array_equal(con.hessian(x), np.diag([4.0, 0.0, 0.25]))
    assert con.value(x, dot=True) == pytest.approx(con.value(x), rel=1e-15)


def test_shift_equals_the_constraint_with_moved_means():
    """``NormalConstraint(μ) + shift(μ')`` is ``NormalConstraint(μ')`` (up to rounding)."""
    con = NormalConstraint([0, 1], [1.0, 2.0], [0.5, 3.0])
    moved = NormalConstraint([0, 1], [1.3, 1.0], [0.5, 3.0])
    total = con + con.shift(moved.mu)
    assert isinstance(total, LikelihoodSum)
    for x in (np.array([0.0, 0.0]), np.array([2.0, -4.0])):
        assert total(x) == pytest.approx(moved(x), rel=1e-14, abs=1e-14)
        np.testing.assert_allclose(total.grad(x), moved.grad(x), rtol=1e-14, atol=1e-14)
        np.testing.assert_array_equal(total.hessian(x), moved.hessian(x))


def test_sum_adds_terms_and_offers_derivatives_all_terms_have():
    q = _Quadratic(np.array([1.0, 2.0]))
    con = NormalConstraint([1], [0.0], [1.0])
    s = q + con
    x = np.array([0.5, 0.5])
    assert s(x) == q(x) + con(x)
    np.testing.assert_array_equal(s.grad(x), q.grad(x) + con.grad(x))
    np.testing.assert_array_equal(s.hessian(x), q.hessian(x) + con.hessian(x))
    assert s.has_grad and s.has_hessian and not s.has_expected_hessian
    assert (s + con).terms == (q, con, con)  # sums flatten
    plain = as_likelihood(lambda v: float(v @ v))
    assert not (plain + con).has_grad


def test_as_likelihood_wraps_a_plain_callable():
    class WithGrad:
        errordef = 0.5
        n_events = 7

        def __call__(self, x):
            return float(x @ x)

        def grad(self, x):
            return 2.0 * x

    f = as_likelihood(WithGrad())
    assert f.has_grad and not f.has_hessian and f.ndata == 7.0
    np.testing.assert_array_equal(f.grad(np.array([1.0, 2.0])), [2.0, 4.0])
    assert as_likelihood(f) is f
    assert f.restricted(np.array([True, False])) is None
    with pytest.raises(TypeError, match="callable"):
        as_likelihood(3.0)
