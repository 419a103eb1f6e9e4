"""Parameters and their mapping to and from iminuit."""

import math

import numpy as np
import pytest
from iminuit import Minuit

from toyengine.core.params import Constraint, Parameter, ParameterSet
from toyengine.errors import ModelError


def _ps():
    return ParameterSet((Parameter("a", 1.0, (0.0, 5.0)), Parameter("b", -2.0, fixed=True),
                         Parameter("c", 0.5, constraint=Constraint(0.4, 0.1))))


def test_round_trip_through_minuit():
    ps = _ps()
    m = Minuit(lambda x: float(np.sum((x - [2.0, -2.0, 0.45]) ** 2)), ps.values, name=ps.names)
    ps.to_minuit(m)
    assert m.limits["a"] == (0.0, 5.0) and m.fixed["b"] and not m.fixed["a"]
    # f = Σ (x − x0)² with errordef 1: near the minimum f − f_min = Σ Δ², which MIGRAD's EDM
    # estimates, so |Δa| ≤ sqrt(EDM). The default tolerance (EDM < 2e-4) allows |Δa| up to
    # 1.4e-2; tol 5e-8 asks for EDM < 0.002 · tol = 1e-10, i.e. |Δa| ≤ 1e-5
    m.tol = 5e-8
    m.migrad()
    assert m.valid and m.fmin.edm < 1e-10
    back = ps.from_minuit(m)
    assert back.names == ps.names
    assert back["a"].value == m.values["a"]  # read back exactly
    assert math.isclose(back["a"].value, 2.0, abs_tol=1e-5)
    assert back["b"].value == -2.0 and back["b"].fixed
    # a Minuit over the free parameters alone (as the fitter builds it): the ones it has
    free = Minuit(lambda x: float(np.sum(x**2)), [1.0, 0.5], name=("a", "c"))
    ps.to_minuit(free)
    assert free.limits["a"] == (0.0, 5.0) and free.errors["c"] == ps["c"].error_guess


def test_updated_and_constraints():
    ps = _ps().updated({"a": 3.0, "b": {"fixed": False, "limits": [-5, 5]},
                        "c": {"constraint": {"mean": 0.0, "sigma": 2.0}}})
    assert ps["a"].value == 3.0 and not ps["b"].fixed and ps["b"].limits == (-5.0, 5.0)
    idx, mu, sig = ps.constraint_terms()
    assert list(idx) == [2] and mu[0] == 0.0 and sig[0] == 2.0
    assert ps.free_names == ("a", "b", "c")
    with pytest.raises(ModelError, match="'zz'"):
        ps.updated({"zz": 1.0})
    with pytest.raises(ModelError, match="duplicate"):
        ParameterSet((Parameter("a", 1.0), Parameter("a", 2.0)))


def test_with_values_clips_into_limits():
    ps = _ps().with_values([9.0, 0.0, 0.0])
    assert ps["a"].value == 5.0


def test_limit_arrays_are_the_limits_and_steps_read_only():
    ps = _ps()
    lower, upper, step = ps.limit_arrays
    np.testing.assert_array_equal(lower, [p.limits[0] for p in ps])
    np.testing.assert_array_equal(upper, [p.limits[1] for p in ps])
    np.testing.assert_array_equal(step, [p.error_guess for p in ps])
    assert ps.limit_arrays[0] is lower  # computed once per set
    with pytest.raises(ValueError, match="read-only"):
        lower[0] = 1.0
