"""The likelihood contract: what the fitter may ask of a negative log-likelihood.

In the spirit of iminuit's ``Cost`` (``iminuit.cost``: public ``__call__``/``grad``/
``hessian`` calling private hooks, ``CostSum``, ``NormalConstraint`` added with ``+``):

- :class:`Likelihood` — ``−ln L`` of one data set as a function of the full parameter
  vector (fixed parameters included). The public :meth:`~Likelihood.__call__`,
  :meth:`~Likelihood.grad`, :meth:`~Likelihood.hessian` and
  :meth:`~Likelihood.expected_hessian` call the private hooks ``_call``, ``_grad``,
  ``_hessian`` and ``_expected_hessian``; the flags ``has_grad``, ``has_hessian`` and
  ``has_expected_hessian`` say which of them a likelihood offers. ``ndata`` is the number of
  events, ``weights`` the per-event weights (None: unweighted), ``errordef`` 0.5 (a
  ``−ln L``), :meth:`~Likelihood.restricted` an optional faster copy valid while only some
  parameters float.
- :class:`NormalConstraint` — Gaussian constraint terms ``Σ (x_i − μ_i)² / (2 σ_i²)``
  (the auxiliary measurements of Cowan, Cranmer, Gross, Vitells, Eur. Phys. J. C 71 (2011)
  1554, Sect. 2), the one implementation every likelihood uses for its constraint terms.
- ``likelihood + term`` — a :class:`LikelihoodSum`; :meth:`NormalConstraint.shift` gives the
  term that moves constraint means to a toy's global observables.
- :func:`finite_difference_hessian` — the Hessian of any ``f(x)`` by central differences,
  for likelihoods without an analytic one (e.g. the sandwich covariance of sWeighted fits).
- :func:`as_likelihood` — any callable ``f(x) -> float`` (e.g. a plug-in model's NLL) as a
  :class:`Likelihood`; the only place that looks for optional members by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Likelihood", "LikelihoodSum", "NormalConstraint", "as_likelihood",
           "finite_difference_hessian"]


class Likelihood:
    """Base class of every negative log-likelihood the fitter minimises.

    Subclasses implement ``_call(x) -> float`` and, where they have them, ``_grad``,
    ``_hessian`` and ``_expected_hessian`` (full vector in, full vector or matrix out),
    setting the matching ``has_*`` flag. ``x`` is the full parameter vector.
    """

    #: ``−ln L``: a change of 0.5 is one standard deviation (iminuit's ``errordef``)
    errordef: float = 0.5
    has_grad: bool = False
    has_hessian: bool = False
    has_expected_hessian: bool = False
    #: per-event weights, None for an unweighted likelihood
    weights: np.ndarray | None = None
    #: positive polynomials whose yield and angles Newton may step in amplitude coordinates:
    #: ``(blocks, integrals)`` as :func:`toyengine.core.newton.minimize` takes them, or None
    amplitude_blocks: tuple[np.ndarray, np.ndarray] | None = None

    def __call__(self, x: np.ndarray) -> float:
        return self._call(x)

    def grad(self, x: np.ndarray) -> np.ndarray:
        """The analytic gradient (``has_grad``)."""
        return self._grad(x)

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """The analytic Hessian (``has_hessian``)."""
        return self._hessian(x)

    def expected_hessian(self, x: np.ndarray) -> np.ndarray:
        """The expected (Fisher) information as a Hessian estimate (``has_expected_hessian``):
        a seed of MIGRAD's metric, no errors."""
        return self._expected_hessian(x)

    def restricted(self, free: np.ndarray) -> Likelihood | None:
        """This likelihood valid while only the parameters ``free`` (a mask over the full
        vector) vary, with an exact gradient and Hessian, or None (the default)."""
        del free
        return None

    def closed_form_minimum(self, x0: np.ndarray, free: np.ndarray) -> np.ndarray | None:
        """The minimum over the parameters ``free`` (a mask over the full vector), the
        others held at their values in ``x0``, where the likelihood has closed-form
        estimates; None (the default) otherwise. The fitter starts its Newton iteration
        there, so that it stops at once."""
        del x0, free
        return None

    @property
    def ndata(self) -> float:
        """The number of events (NaN where unknown)."""
        return math.nan

    def _call(self, x: np.ndarray) -> float:
        raise NotImplementedError

    def _grad(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no analytic gradient")

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no analytic Hessian")

    def _expected_hessian(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no expected Hessian")

    def _add_value(self, total: float, x: np.ndarray) -> float:
        """``total`` plus this term's value (in a :class:`LikelihoodSum`)."""
        return total + float(self(x))

    def __add__(self, other: Likelihood) -> LikelihoodSum:
        return LikelihoodSum(self, other)


class LikelihoodSum(Likelihood):
    """``first + other + …``: values, gradients and Hessians added term by term; a
    derivative is offered when every term offers it (a term whose second derivatives vanish,
    such as :meth:`NormalConstraint.shift`, offers both Hessians)."""

    def __init__(self, *terms: Likelihood) -> None:
        flat: list[Likelihood] = []
        for t in terms:
            flat.extend(t.terms if isinstance(t, LikelihoodSum) else (as_likelihood(t),))
        self.terms = tuple(flat)
        self.has_grad = all(t.has_grad for t in flat)
        self.has_hessian = all(t.has_hessian for t in flat)
        self.has_expected_hessian = all(t.has_expected_hessian for t in flat)

    @property
    def ndata(self) -> float:
        return self.terms[0].ndata

    @property
    def weights(self) -> np.ndarray | None:
        return self.terms[0].weights

    def _call(self, x: np.ndarray) -> float:
        x = np.asarray(x, dtype=float)
        total = float(self.terms[0](x))
        for t in self.terms[1:]:
            total = t._add_value(total, x)
        return total

    def _grad(self, x: np.ndarray) -> np.ndarray:
        g = np.array(self.terms[0].grad(x), dtype=float)
        for t in self.terms[1:]:
            g = t._add_grad(g, x) if isinstance(t, _Term) else g + t.grad(x)
        return g

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        h = self.terms[0].hessian(x)
        for t in self.terms[1:]:
            h = h if isinstance(t, _Term) and t.linear else h + t.hessian(x)
        return h

    def _expected_hessian(self, x: np.ndarray) -> np.ndarray:
        h = self.terms[0].expected_hessian(x)
        for t in self.terms[1:]:
            h = h if isinstance(t, _Term) and t.linear else h + t.expected_hessian(x)
        return h

    def restricted(self, free: np.ndarray) -> Likelihood | None:
        """The first term's restriction plus the other terms (None where it has none)."""
        inner = self.terms[0].restricted(free)
        return None if inner is None else LikelihoodSum(inner, *self.terms[1:])


class _Term(Likelihood):
    """A term with no data: constraint terms (``ndata`` 0)."""

    has_grad = True
    has_hessian = True
    has_expected_hessian = True
    #: no second derivatives (adds nothing to a Hessian)
    linear = False

    @property
    def ndata(self) -> float:
        return 0.0

    def _add_grad(self, g: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class NormalConstraint(_Term):
    """Gaussian constraints ``Σ_i (x[idx_i] − μ_i)² / (2 σ_i²)`` on the parameters ``idx``
    of the full vector (Cowan, Cranmer, Gross, Vitells, Eur. Phys. J. C 71 (2011) 1554,
    Sect. 2: the auxiliary measurements of the nuisance parameters).

    The likelihoods add it to their own sums with :meth:`add_value`, :meth:`add_grad` and
    :meth:`add_hessian`, at the place in their arithmetic where they always did (which keeps
    their values bit for bit); as a term of a :class:`LikelihoodSum` it is added last.
    """

    def __init__(self, idx: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> None:
        self.idx = np.asarray(idx, dtype=int)
        self.mu = np.asarray(mu, dtype=float)
        self.sigma = np.asarray(sigma, dtype=float)

    @classmethod
    def from_parameters(cls, parameters: Any) -> NormalConstraint:
        """The constraints declared on a :class:`~toyengine.core.params.ParameterSet`."""
        return cls(*parameters.constraint_terms())

    @property
    def size(self) -> int:
        """The number of constrained parameters."""
        return int(self.idx.size)

    def __len__(self) -> int:
        return self.size

    def subset(self, keep: np.ndarray) -> NormalConstraint:
        """The constraints on the parameters of ``keep`` (a mask over these constraints)."""
        return NormalConstraint(self.idx[keep], self.mu[keep], self.sigma[keep])

    def value(self, x: np.ndarray, dot: bool = False) -> float:
        """``Σ (x − μ)² / (2 σ²)``; ``dot``: the sum of squares as one dot product (the
        Dalitz likelihood's summation order, which rounds differently from ``np.sum``)."""
        d = (x[self.idx] - self.mu) / self.sigma
        return 0.5 * float(d @ d) if dot else 0.5 * float(np.sum(d**2))

    def add_value(self, val: float, x: np.ndarray, dot: bool = False) -> float:
        """``val`` plus the constraint terms (``val`` unchanged without constraints)."""
        return val + self.value(x, dot) if self.idx.size else val

    def add_grad(self, g: np.ndarray, x: np.ndarray, at: np.ndarray | None = None) -> None:
        """Add the gradient ``(x − μ)/σ²`` to ``g`` in place, at the entries ``at``
        (default: the parameters' own indices; another index map for a gradient over a
        subset of the parameters)."""
        if self.idx.size:
            g[self.idx if at is None else at] += (x[self.idx] - self.mu) / self.sigma**2

    def add_hessian(self, h: np.ndarray, at: np.ndarray | None = None) -> None:
        """Add the diagonal ``1/σ²`` to ``h`` in place (``at`` as in :meth:`add_grad`)."""
        if self.idx.size:
            pos = self.idx if at is None else at
            h[pos, pos] += 1.0 / self.sigma**2

    def shift(self, mu_new: np.ndarray) -> ConstraintShift:
        """The term that moves the means to ``mu_new`` (a toy's global observables):
        ``Σ [(x − μ')² − (x − μ)²] / (2 σ²)``, linear in ``x``."""
        return ConstraintShift(self, np.asarray(mu_new, dtype=float))

    def _call(self, x: np.ndarray) -> float:
        return self.value(np.asarray(x, dtype=float))

    def _add_value(self, total: float, x: np.ndarray) -> float:
        return self.add_value(total, x)

    def _grad(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        g = np.zeros(x.size)
        self.add_grad(g, x)
        return g

    def _add_grad(self, g: np.ndarray, x: np.ndarray) -> np.ndarray:
        self.add_grad(g, x)
        return g

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        h = np.zeros((np.size(x), np.size(x)))
        self.add_hessian(h)
        return h

    _expected_hessian = _hessian


class ConstraintShift(_Term):
    """:meth:`NormalConstraint.shift`: ``a·x[idx] + b`` with ``a = (μ − μ')/σ²`` and
    ``b = Σ (μ'² − μ²)/(2σ²)``; added to a likelihood's value in two steps (first ``a·x``,
    then ``b``)."""

    linear = True

    def __init__(self, constraint: NormalConstraint, mu_new: np.ndarray) -> None:
        mu, sig = constraint.mu, constraint.sigma
        self.idx = constraint.idx
        self._a = (mu - mu_new) / sig**2          # d/dx of the added term
        self._b = float(np.sum((mu_new**2 - mu**2) / (2.0 * sig**2)))

    def _call(self, x: np.ndarray) -> float:
        return self._add_value(0.0, np.asarray(x, dtype=float))

    def _add_value(self, total: float, x: np.ndarray) -> float:
        return total + float(self._a @ x[self.idx]) + self._b

    def _grad(self, x: np.ndarray) -> np.ndarray:
        return self._add_grad(np.zeros(np.size(x)), x)

    def _add_grad(self, g: np.ndarray, x: np.ndarray) -> np.ndarray:
        g[self.idx] += self._a
        return g

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        return np.zeros((np.size(x), np.size(x)))

    _expected_hessian = _hessian


class _Callable(Likelihood):
    """A plain callable ``f(x) -> float`` (with optional ``grad``, ``hessian``,
    ``expected_hessian``, ``restricted``, ``errordef`` members) as a :class:`Likelihood`."""

    def __init__(self, f: Callable[[np.ndarray], float]) -> None:
        self.f = f
        self.errordef = float(getattr(f, "errordef", 0.5))
        self.has_grad = getattr(f, "grad", None) is not None
        self.has_hessian = self.has_grad and getattr(f, "hessian", None) is not None
        self.has_expected_hessian = (self.has_grad
                                     and getattr(f, "expected_hessian", None) is not None)

    @property
    def ndata(self) -> float:
        n = getattr(self.f, "n_events", None)
        return math.nan if n is None else float(n)

    @property
    def weights(self) -> np.ndarray | None:
        return getattr(self.f, "weights", None)

    def _call(self, x: np.ndarray) -> float:
        return self.f(x)

    def _grad(self, x: np.ndarray) -> np.ndarray:
        return self.f.grad(x)  # type: ignore[attr-defined]

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        return self.f.hessian(x)  # type: ignore[attr-defined]

    def _expected_hessian(self, x: np.ndarray) -> np.ndarray:
        return self.f.expected_hessian(x)  # type: ignore[attr-defined]

    def closed_form_minimum(self, x0: np.ndarray, free: np.ndarray) -> np.ndarray | None:
        found = getattr(self.f, "closed_form_minimum", None)
        return None if found is None else found(x0, free)

    def restricted(self, free: np.ndarray) -> Likelihood | None:
        restrict = getattr(self.f, "restricted", None)
        inner = restrict(free) if restrict is not None else None
        return None if inner is None else as_likelihood(inner)


class ValueOnly(Likelihood):
    """A likelihood without its derivatives: a fit with few free parameters, for which
    numerical derivatives (two calls each) are cheaper than a full analytic gradient."""

    def __init__(self, nll: Likelihood) -> None:
        self.nll = nll

    def _call(self, x: np.ndarray) -> float:
        return self.nll(x)


def as_likelihood(nll: Any) -> Likelihood:
    """``nll`` as a :class:`Likelihood`: itself if it is one, else a plain callable wrapped
    (its ``grad``/``hessian``/``expected_hessian``/``restricted`` used where present)."""
    if isinstance(nll, Likelihood):
        return nll
    if not callable(nll):
        raise TypeError(f"a likelihood must be callable, not {type(nll).__name__}")
    return _Callable(nll)


def finite_difference_hessian(f: Callable[[np.ndarray], float], x: np.ndarray,
                              idx: Sequence[int], steps: Sequence[float]) -> np.ndarray:
    """The Hessian of ``f`` at ``x`` in the coordinates ``idx`` by central differences.

    Each element is ``[f(x + a + b) − f(x + a − b) − f(x − a + b) + f(x − a − b)] / (4 h_a h_b)``
    with ``a = h_a e_i``, ``b = h_b e_j`` (Press et al., Numerical Recipes, 3rd ed., Sect. 5.7):
    error O(h²), 4 evaluations per element.

    Parameters
    ----------
    f : callable
        ``f(x) -> float`` on the full parameter vector.
    x : ndarray
        The point (full vector; not modified).
    idx : sequence of int
        The coordinates of the Hessian, in its row order.
    steps : sequence of float
        The step ``h`` of each coordinate in ``idx``.

    Returns
    -------
    ndarray
        ``(len(idx), len(idx))``, symmetric.

    Examples
    --------
    >>> import numpy as np
    >>> h = finite_difference_hessian(lambda v: v[0] ** 2 + 3 * v[0] * v[1], np.zeros(2),
    ...                               [0, 1], [1e-3, 1e-3])
    >>> np.round(h, 6).tolist()
    [[2.0, 3.0], [3.0, 0.0]]
    """
    n = len(idx)
    hess = np.empty((n, n))
    for a in range(n):
        for b in range(a, n):
            ia, ib, sa, sb = idx[a], idx[b], steps[a], steps[b]
            vals = []
            for da, db in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                xx = np.array(x, dtype=float)
                xx[ia] += da * sa
                xx[ib] += db * sb
                vals.append(f(xx))
            hess[a, b] = hess[b, a] = (vals[0] - vals[1] - vals[2] + vals[3]) / (4 * sa * sb)
    return hess
