"""Parametric 1-D shapes for :class:`toyengine.core.model1d.Model1D`.

Each shape maps the observable ``x`` (here a mass difference in MeV) to a non-negative,
unnormalised density; the model normalises numerically on the fit range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.polynomial import chebyshev

from ..errors import ModelError
from .kinematics import phase_space_2body, phase_space_3body
from .lineshapes import (
    BreitWignerGrid,
    bernstein_basis,
    rbw_density,
    sphere_coefficients,
    sphere_coefficients_jacobian,
    sphere_coefficients_with_derivatives,
)

__all__ = ["Chebyshev", "Exponential", "PeakShape", "PhaseSpacePolynomial", "RelativisticBW"]


@dataclass(frozen=True)
class RelativisticBW:
    """Relativistic Breit–Wigner with mass-dependent width (LHCb, Eur. Phys. J. C 78 (2018)
    1019, Eqs. (7)–(8)) for a two-body decay ``R -> A B`` in angular momentum ``L``.

    The observable is ``x = m - offset`` (e.g. ``delta_m = m(D0D0pi+) - (m_D*+ + m_D0)``);
    the parameters are the pole position ``x0 = m0 - offset`` and the width ``Gamma0``.
    """

    mass_param: str
    width_param: str
    offset: float
    m_a: float
    m_b: float
    L: int = 1
    radius: float = 3.5  # GeV^-1

    def __post_init__(self) -> None:
        if not 0 <= self.L <= 4:
            msg = f"RelativisticBW: L={self.L} not supported (need 0..4)"
            raise ModelError(msg)
        if self.radius < 0:
            msg = f"RelativisticBW: radius {self.radius} must be >= 0"
            raise ModelError(msg)

    @property
    def param_names(self) -> tuple[str, ...]:
        return (self.mass_param, self.width_param)

    def _grid(self, x: np.ndarray) -> BreitWignerGrid | None:
        # the model evaluates on one fixed grid: precompute q(m), D_L(z(m)) there once
        cache = self.__dict__.setdefault("_cache", {})
        key = (x.shape, float(x[0]), float(x[-1])) if x.ndim == 1 and x.size else None
        if key is None:
            return None
        if key not in cache:
            cache.clear()
            cache[key] = BreitWignerGrid(x + self.offset, self.m_a, self.m_b, self.L, self.radius)
        return cache[key]

    def evaluate(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray:
        x0, gamma0 = values
        m0 = self.offset + x0
        if m0 <= self.m_a + self.m_b or gamma0 <= 0:
            return np.zeros_like(x)
        grid = self._grid(x)
        if grid is None:
            return rbw_density(x + self.offset, m0, gamma0, self.m_a, self.m_b, self.L,
                               self.radius)
        return grid(m0, gamma0)

    def evaluate_with_gradient(self, x: np.ndarray, values: tuple[float, ...]
                               ) -> tuple[np.ndarray, np.ndarray]:
        """The shape and its derivatives with respect to ``(x0, Gamma0)``, shape (2, n)."""
        x0, gamma0 = values
        m0 = self.offset + x0
        if m0 <= self.m_a + self.m_b or gamma0 <= 0:
            return np.zeros_like(x), np.zeros((2, len(x)))
        grid = self._grid(x)
        assert grid is not None
        return grid.density_and_gradient_rows(m0, gamma0)

    def evaluate_with_hessian(self, x: np.ndarray, values: tuple[float, ...]
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shape, its gradient (2, n) and its Hessian (2, 2, n) in ``(x0, Gamma0)``
        (:meth:`~toyengine.lineshapes.BreitWignerGrid.density_derivatives`)."""
        x0, gamma0 = values
        m0 = self.offset + x0
        if m0 <= self.m_a + self.m_b or gamma0 <= 0:
            return np.zeros_like(x), np.zeros((2, len(x))), np.zeros((2, 2, len(x)))
        grid = self._grid(x)
        assert grid is not None
        return grid.density_derivatives(m0, gamma0)

    def hessian_rows(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray:
        """:meth:`evaluate_with_hessian` stacked as a likelihood needs it: the rows F, ∂F/∂x0,
        ∂F/∂Γ0, ∂²F/∂x0², ∂²F/∂x0∂Γ0, ∂²F/∂Γ0² of one new (6, n) array
        (:meth:`~toyengine.lineshapes.BreitWignerGrid.derivative_rows`)."""
        x0, gamma0 = values
        m0 = self.offset + x0
        if m0 <= self.m_a + self.m_b or gamma0 <= 0:
            return np.zeros((6, len(x)))
        grid = self._grid(x)
        assert grid is not None
        return grid.derivative_rows(m0, gamma0)


@dataclass(frozen=True)
class PhaseSpacePolynomial:
    """Phase space × positive polynomial, a linear shape (LHCb, Nature Communications 13 (2022)
    3351, Eqs. (2)–(3)).

    ``B(x) = Phi(x + offset) * sum_k c_k b_k(x)`` with Bernstein basis ``b_k`` of the given
    ``order`` on ``[lo, hi]`` and ``c = sphere_coefficients(phi_1..phi_order)`` — non-negative
    for every parameter value, so the background is positive everywhere (Ostap's positive
    polynomial). ``masses`` has two entries (two-body phase space, e.g. ``D*+ D0``), three
    (three-body phase space, e.g. ``D0 D0 pi+``) or none (``Phi = 1``: a plain positive
    Bernstein polynomial).
    """

    coef_params: tuple[str, ...]
    offset: float
    masses: tuple[float, ...]
    lo: float
    hi: float
    #: the coefficients are :func:`sphere_coefficients` of the parameters (a fit may step in
    #: the amplitudes ``N c_k``: :func:`toyengine.core.newton_kernels.amplitude_step`)
    coefficients_on_sphere: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if len(self.masses) not in (0, 2, 3):
            msg = f"PhaseSpacePolynomial: need 0, 2 or 3 masses, got {self.masses}"
            raise ModelError(msg)

    @property
    def order(self) -> int:
        return len(self.coef_params)

    @property
    def param_names(self) -> tuple[str, ...]:
        return self.coef_params

    def phase_space(self, x: np.ndarray) -> np.ndarray:
        m = np.asarray(x, dtype=float) + self.offset
        if not self.masses:
            return np.ones_like(m)
        if len(self.masses) == 2:
            return phase_space_2body(m, *self.masses)
        return phase_space_3body(m, *self.masses)

    def basis(self, x: np.ndarray) -> np.ndarray:
        # the polynomial is clamped to its end values outside [lo, hi] (convolution padding)
        xc = np.clip(x, self.lo, self.hi)
        return bernstein_basis(xc, self.lo, self.hi, self.order) * self.phase_space(x)

    def coefficients(self, values: tuple[float, ...]) -> np.ndarray:
        return sphere_coefficients(np.asarray(values, dtype=float))

    def coefficients_jacobian(self, values: tuple[float, ...]) -> np.ndarray:
        """``d c_k / d phi_j``, shape (order + 1, order)."""
        if not values:
            return np.zeros((1, 0))
        return sphere_coefficients_jacobian(np.asarray(values, dtype=float))

    def coefficients_with_hessian(self, values: tuple[float, ...]
                                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The coefficients ``c_k``, ``d c_k / d phi_j`` and ``d2 c_k / d phi_j d phi_l``
        together (shapes (order + 1,), (order + 1, order), (order + 1, order, order))."""
        if not values:
            return np.ones(1), np.zeros((1, 0)), np.zeros((1, 0, 0))
        return sphere_coefficients_with_derivatives(np.asarray(values, dtype=float))

    def coefficient_rows(self, values: tuple[float, ...], order: int) -> np.ndarray:
        """The coefficients and, up to ``order``, their first and second derivatives (upper
        triangle, row-major) as the rows of one array, as a likelihood stacks them
        (compiled: :func:`toyengine.core.model1d_kernels.sphere_rows`)."""
        from .model1d_kernels import sphere_rows

        return sphere_rows(np.array(values, dtype=float), order)


@dataclass(frozen=True)
class PeakShape:
    """A peak ``density(x - location, **shape)`` built from a normalised offset density of
    :mod:`toyengine.resolution` (Gaussian, double Gaussian, Crystal Ball, Johnson SU,
    Student's t, Novosibirsk, Apollonios; their papers are cited there).

    ``param_names`` are the model parameters read, location first, then one per entry of
    ``density_args`` (the density's keyword arguments, in the same order). ``flip`` mirrors
    the shape about its location (``density(location - x)``): the high-side Crystal Ball.
    """

    density: Callable[..., np.ndarray]
    param_names: tuple[str, ...]
    density_args: tuple[str, ...]
    flip: bool = False

    def __post_init__(self) -> None:
        if len(self.param_names) != 1 + len(self.density_args):
            msg = (f"PeakShape: {len(self.param_names)} parameter names for a location and "
                   f"{list(self.density_args)}")
            raise ModelError(msg)

    def evaluate(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray:
        offset = np.asarray(x, dtype=float) - values[0]
        if self.flip:
            offset = -offset
        with np.errstate(all="ignore"):
            return self.density(offset, **dict(zip(self.density_args, values[1:], strict=True)))


@dataclass(frozen=True)
class Exponential:
    """``exp(c (x - x_ref))``; ``x_ref`` (e.g. the range centre) keeps the exponent small.

    Has an analytic derivative ``d/dc = (x - x_ref) f``.
    """

    slope_param: str
    x_ref: float = 0.0

    @property
    def param_names(self) -> tuple[str, ...]:
        return (self.slope_param,)

    def evaluate(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(values[0] * (np.asarray(x, dtype=float) - self.x_ref))

    def evaluate_with_gradient(self, x: np.ndarray, values: tuple[float, ...]
                               ) -> tuple[np.ndarray, np.ndarray]:
        """The shape and its derivative with respect to the slope, shape (1, n)."""
        u = np.asarray(x, dtype=float) - self.x_ref
        f = self.evaluate(x, values)
        return f, (u * f)[None, :]


@dataclass(frozen=True)
class Chebyshev:
    """``max(0, 1 + sum_k c_k T_k(t))``, ``t = 2 (x - lo) / (hi - lo) - 1`` (clamped to
    [−1, 1] outside the range, as in the convolution padding), ``k = 1..order``.

    Unlike :class:`PhaseSpacePolynomial` it can become negative; it is clipped at zero, so
    coefficients near that boundary give a non-smooth likelihood — prefer the positive
    Bernstein polynomial for fits that probe it.
    """

    coef_params: tuple[str, ...]
    lo: float
    hi: float

    @property
    def param_names(self) -> tuple[str, ...]:
        return self.coef_params

    def evaluate(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray:
        t = np.clip(2.0 * (np.asarray(x, dtype=float) - self.lo) / (self.hi - self.lo) - 1.0,
                    -1.0, 1.0)
        return np.maximum(chebyshev.chebval(t, (1.0, *values)), 0.0)
