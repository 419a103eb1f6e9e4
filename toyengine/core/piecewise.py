"""Sampling from a density given on a grid and linear between its nodes (the 1-D models'
generator, :class:`toyengine.core.model1d.Model1D`, and the discriminants'): the exact
inverse of its piecewise-quadratic CDF."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError

__all__ = ["inverse_cdf_piecewise_linear", "sample_piecewise_linear"]


def sample_piecewise_linear(grid: np.ndarray, dens: np.ndarray, n: int,
                            rng: np.random.Generator) -> np.ndarray:
    """``n`` exact samples from the piecewise-linear density through ``(grid, dens)``
    (:func:`inverse_cdf_piecewise_linear` of ``rng.random(n)``)."""
    return inverse_cdf_piecewise_linear(grid, dens, rng.random(n))


def inverse_cdf_piecewise_linear(grid: np.ndarray, dens: np.ndarray,
                                 u: np.ndarray) -> np.ndarray:
    """The inverse CDF of the piecewise-linear density through ``(grid, dens)`` at ``u``.

    ``u * total`` picks the cell whose cumulative trapezoid area covers it; the remainder
    ``w`` in ``[0, 1)`` of that cell's area is inverted exactly: inside a cell of densities
    ``a`` (left) and ``b`` (right) the CDF of ``a + (b - a) t`` is ``w`` at
    ``t = w (a + b) / (a + sqrt(a^2 + (b^2 - a^2) w))`` (the cancellation-free root). The
    map is monotone in ``u``, so uniform ``u`` gives exact samples and common ``u`` couple
    two densities by their quantiles.
    """
    return _inverse_cdf(grid, _cdf_table(grid, dens), u)


def _cdf_table(grid: np.ndarray, dens: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The density clipped at zero, the trapezoid area of each cell, their cumulative sum
    with a leading zero (the area below each node) and the cell widths: what
    :func:`_inverse_cdf` needs (a model keeps it with its grid density)."""
    dens = np.maximum(np.asarray(dens, dtype=float), 0.0)
    dx = np.diff(grid)
    area = 0.5 * (dens[:-1] + dens[1:]) * dx
    below = np.empty(len(grid))
    below[0] = 0.0
    np.cumsum(area, out=below[1:])
    return dens, area, below, dx


def _inverse_cdf(grid: np.ndarray,
                 table: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                 u: np.ndarray) -> np.ndarray:
    """:func:`inverse_cdf_piecewise_linear` with the density's :func:`_cdf_table`
    (:func:`toyengine.core.model1d_kernels.inverse_cdf`)."""
    from .model1d_kernels import inverse_cdf

    u = np.asarray(u, dtype=float)
    if u.size == 0:
        return np.empty(0)
    dens, area, below, dx = table
    total = below[-1]
    if not (total > 0 and math.isfinite(total)):
        msg = "cannot sample a density that is zero or not finite everywhere"
        raise ModelError(msg)
    return inverse_cdf(grid, dens, area, below, dx, u.ravel()).reshape(u.shape)
