"""The hello-world model: a Gaussian of unknown mean and width fitted to ``events``
normally distributed values (a closed-form fit: well under 1 ms per toy).

It exists to try a new cluster or store quickly and to benchmark the run and store
layers, where the physics models would hide the engine's own costs. The unbinned
negative log-likelihood uses the sufficient statistics of the sample,

    -ln L(mu, sigma) = [S2 - 2 mu S1 + n mu^2] / (2 sigma^2) + n ln sigma,

with ``S1 = sum x`` and ``S2 = sum x^2``, its analytic gradient and exact Hessian. The
maximum-likelihood estimates have a closed form, the sample mean and the (biased, 1/n)
standard deviation (Cowan, *Statistical Data Analysis*, Oxford 1998, Sec. 6.5, Eq. 6.21
and 6.23): the likelihood offers them as ``closed_form_minimum``, which the fitter
(:func:`toyengine.core.fit.fit`) uses as the start of its Newton iteration, so that a toy
fit is one evaluation of the value, gradient and Hessian (errors from the exact Hessian,
as HESSE's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..core.likelihood import Likelihood
from ..core.params import Parameter, ParameterSet
from ..errors import ModelError
from .options import BuilderOptions, Field, FiniteFloat
from .protocol import ToyModelBase

__all__ = ["GaussModel", "GaussOptions", "build_gauss"]


class GaussOptions(BuilderOptions):
    """Options of the ``gauss`` (hello-world) builder."""

    builder_name: ClassVar[str] = "gauss"

    events: int = Field(100, ge=2, description="values per toy")
    mu: FiniteFloat = Field(0.0, description="generated mean")
    sigma: FiniteFloat = Field(1.0, gt=0, description="generated width")


class _GaussNLL(Likelihood):
    """``-ln L`` of one sample as a function of the full parameter vector (mu, sigma)."""

    has_grad = True
    has_hessian = True

    def __init__(self, x: np.ndarray, weights: np.ndarray | None = None):
        if weights is None:
            self.n = float(len(x))
            self.s1 = float(np.sum(x))
            self.s2 = float(np.sum(x * x))
        else:
            w = np.asarray(weights, dtype=float)
            if w.shape != x.shape:
                msg = f"weights shape {w.shape} does not match data shape {x.shape}"
                raise ModelError(msg)
            self.n = float(np.sum(w))
            self.s1 = float(w @ x)
            self.s2 = float(w @ (x * x))
        self.weights = None if weights is None else w
        # the mean and the centred sum of squares, for the closed-form minimum without the
        # cancellation of S2/n - mean^2
        self.mean = self.s1 / self.n if self.n > 0 else math.nan
        d = x - self.mean
        self.m2 = float(np.dot(d, d) if weights is None else w @ (d * d))

    def _q(self, mu: float) -> float:
        """``sum (x - mu)^2 = S2 - 2 mu S1 + n mu^2``, computed as ``M2 + n (mu - mean)^2``
        (no cancellation when the values sit far from zero)."""
        if self.n > 0:
            return self.m2 + self.n * (mu - self.mean) ** 2
        return self.s2 - 2.0 * mu * self.s1 + self.n * mu * mu

    @property
    def ndata(self) -> float:
        return float(self.n)

    def _call(self, p: np.ndarray) -> float:
        mu, sigma = float(p[0]), float(p[1])
        q = self._q(mu)
        return q / (2.0 * sigma * sigma) + self.n * math.log(sigma)

    def _grad(self, p: np.ndarray) -> np.ndarray:
        mu, sigma = float(p[0]), float(p[1])
        q = self._q(mu)
        return np.array([(self.n * mu - self.s1) / (sigma * sigma),
                         -q / sigma**3 + self.n / sigma])

    def _hessian(self, p: np.ndarray) -> np.ndarray:
        """The exact Hessian of ``-ln L`` in (mu, sigma)."""
        mu, sigma = float(p[0]), float(p[1])
        q = self._q(mu)
        s2 = sigma * sigma
        off = -2.0 * (self.n * mu - self.s1) / (s2 * sigma)
        return np.array([[self.n / s2, off],
                         [off, 3.0 * q / (s2 * s2) - self.n / s2]])

    def closed_form_minimum(self, x0: np.ndarray, free: np.ndarray) -> np.ndarray | None:
        """The maximum-likelihood estimates over the ``free`` parameters, the others held
        at their values in ``x0``: ``mu = S1/n``; ``sigma^2 = sum (x - mu)^2 / n`` at that
        (or the fixed) ``mu``. None when there is none (no events, all values equal)."""
        x = np.array(x0, dtype=float)
        if not self.n > 0:
            return None
        if free[0]:
            x[0] = self.mean
        if free[1]:
            var = (self.m2 + self.n * (x[0] - self.mean) ** 2) / self.n
            if not (math.isfinite(var) and var > 0.0):
                return None
            x[1] = math.sqrt(var)
        return x


class GaussModel(ToyModelBase):
    """Gaussian of mean ``mu`` and width ``sigma``; ``events`` values per toy."""

    def __init__(self, events: int, mu: float, sigma: float):
        self.events = int(events)
        self.parameters = ParameterSet((
            Parameter("mu", mu, step=0.1 * sigma),
            Parameter("sigma", sigma, limits=(1e-6 * sigma, math.inf), step=0.1 * sigma),
        ))

    def sample(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(float(values[0]), float(values[1]), self.events)

    def expected_events(self) -> int:
        """Values per toy (the memory check before a run,
        :func:`toyengine.run.preflight.check_resources`)."""
        return self.events

    def nll(self, data: np.ndarray, weights: np.ndarray | None = None) -> _GaussNLL:
        return _GaussNLL(np.asarray(data, dtype=float), weights)

    def asimov(self, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Asimov data set: 32 Gauss–Hermite nodes ``mu + √2 sigma t_k`` weighted by
        ``events · ω_k / √π``. The rule is exact for the sums of 1, x and x² that the
        likelihood uses, so a fit returns ``values`` to rounding."""
        x = self.parameters.values if values is None else np.asarray(values, dtype=float)
        t, w = np.polynomial.hermite.hermgauss(32)
        return (float(x[0]) + math.sqrt(2.0) * float(x[1]) * t,
                self.events * w / math.sqrt(math.pi))


def build_gauss(options: Mapping[str, Any] | None = None,
                rng: np.random.Generator | None = None) -> GaussModel:
    """Build the hello-world model (options: :class:`GaussOptions`).

    Raises
    ------
    OptionsError
        An option failed its declaration (path, value, what was expected).
    """
    del rng  # no random variations
    opts = GaussOptions.parse(options)
    return GaussModel(opts.events, opts.mu, opts.sigma)
