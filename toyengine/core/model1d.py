"""1-D extended mixture model on a finite range, with convolved resolution.

The model is ``sum_c N_c * f_c(x)`` on ``[lo, hi]`` where each normalised shape ``f_c`` is
either a parametric shape or a linear combination of fixed basis functions (a background
polynomial), optionally convolved with a resolution function.

Numerics (why it is fast and exact):

- Every shape is evaluated on one uniform grid of step ``h`` that covers the fit range plus
  a padding equal to the resolution's half width. The convolution is the discrete sum
  ``h * sum_j f(x_k - j h) R(j h)`` computed by FFT, with the kernel's FFT cached (the
  resolution has no free parameters in a fit) and the kernel normalised so that
  ``h * sum_j R(j h) = 1``. Its accuracy against direct numerical convolution is tested.
- The model density is the piecewise-linear interpolant of the convolved grid values inside
  ``[lo, hi]``. Its integral is then exactly the trapezoid sum, so every component is
  normalised to machine precision, and the generator samples that same density exactly
  (inverse CDF of a piecewise-linear density).
- Linear shapes (background ``sum_k c_k B_k(x)``) are convolved once per basis function at
  build time; a likelihood call only forms ``c @ B`` at the events.
- A parametric shape is re-evaluated and re-convolved only when its own parameters change.
- Interpolation and convolution are linear, so a shape's first and second derivatives
  reach the events through the same maps as the shape: they are convolved with it (one
  batched FFT pair) and interpolated at the events with it. The value, the gradient and
  the Hessian of the likelihood are then one compiled pass over the events
  (:func:`toyengine.core.model1d_kernels.nll_terms`, numba; :class:`UnbinnedNLL`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.fft

from ..errors import ModelError
from .discriminants import Discriminants, DiscriminatedSample, sweighted_covariance
from .likelihood import Likelihood, finite_difference_hessian
from .nll_layout import NllLayout, n_rows
from .params import ParameterSet
from .piecewise import _cdf_table, _inverse_cdf
from .resolution import Resolution
from .streams import DataStreams, as_streams
from .sweights import WeightedCovariance

__all__ = [
    "TOTAL_STREAM",
    "Component",
    "LinearShape",
    "Model1D",
    "Observable",
    "Shape",
    "UnbinnedNLL",
]

#: how many shape values :meth:`Model1D._shape_rows` keeps per component
_ROWS_MEMO = 8

#: suffix of the stream names of the discriminants of a component or species
DISCRIMINANT_SUFFIX = "#m"

#: stream name of a toy drawn from the total density (a model with a negative yield); not
#: a valid component name of the declarative builder, so it never shares a component's
#: streams
TOTAL_STREAM = "(total density)"


@runtime_checkable
class Shape(Protocol):
    """A non-negative, unnormalised density of the observable.

    ``param_names`` are the model parameters it reads; ``evaluate`` gets their values in
    that order.
    """

    param_names: tuple[str, ...]

    def evaluate(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray: ...


@runtime_checkable
class LinearShape(Protocol):
    """A density ``sum_k c_k(params) B_k(x)`` with fixed basis functions ``B_k >= 0`` and
    non-negative coefficients."""

    param_names: tuple[str, ...]

    def basis(self, x: np.ndarray) -> np.ndarray: ...  # (K, n)

    def coefficients(self, values: tuple[float, ...]) -> np.ndarray: ...  # (K,)


@dataclass(frozen=True)
class Observable:
    """The fitted variable and its finite range ``[lo, hi]``."""

    name: str
    lo: float
    hi: float
    unit: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.lo < self.hi):
            msg = (f"observable {self.name!r}: range [{self.lo}, {self.hi}] is empty or "
                   "not finite (need lo < hi)")
            raise ModelError(msg)


@dataclass(frozen=True)
class Component:
    """``yield_param`` × normalised ``shape``, convolved with the model resolution if
    ``convolve``."""

    name: str
    yield_param: str
    shape: Shape | LinearShape
    convolve: bool = True


class Model1D:
    """Extended mixture model of one observable (implements the ToyModel protocol).

    Parameters
    ----------
    observable : Observable
        Name and fit range.
    components : sequence of Component
        Signal and background components.
    parameters : ParameterSet
        All parameters the components read (yields included); values are the generation
        and start values.
    resolution : Resolution or None
        Convolved into every component with ``convolve=True``.
    grid_step : float
        Grid step ``h`` in observable units (adjusted so that ``lo`` and ``hi`` are nodes).
    scan_parameters : sequence of str
        Parameters that exist only under the alternative hypothesis (the mass and width of
        a signal whose yield can vanish). The fitter's multi-start covers their whole
        allowed range (:func:`toyengine.fit.fit`), and they are the coordinates of the
        look-elsewhere scan (:mod:`toyengine.lee`).
    discriminants : Discriminants or None
        Discriminating observables and the species they separate
        (:mod:`toyengine.core.discriminants`): the model then generates
        :class:`~toyengine.core.discriminants.DiscriminatedSample` toys, and its likelihood
        of such a toy is the sWeighted one. Default none (plain arrays, unweighted).
    """

    def __init__(self, observable: Observable, components: Sequence[Component],
                 parameters: ParameterSet, resolution: Resolution | None = None,
                 grid_step: float = 0.01, scan_parameters: Sequence[str] = (),
                 discriminants: Discriminants | None = None):
        if not components:
            msg = "model needs at least one component"
            raise ModelError(msg)
        if not (grid_step > 0 and math.isfinite(grid_step)):
            msg = f"grid_step must be > 0, got {grid_step}"
            raise ModelError(msg)
        self.observable = observable
        self.components = tuple(components)
        self.parameters = parameters
        for pname in scan_parameters:
            if pname not in parameters:
                msg = (f"scan parameter {pname!r} is not in the parameter set "
                       f"{parameters.names}")
                raise ModelError(msg)
        self.scan_parameters = tuple(scan_parameters)
        self.resolution = resolution
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            msg = f"duplicate component names: {names}"
            raise ModelError(msg)
        for c in self.components:
            for pname in (c.yield_param, *c.shape.param_names):
                if pname not in parameters:
                    msg = (f"component {c.name!r} reads parameter {pname!r}, which is not in "
                           f"the parameter set {parameters.names}")
                    raise ModelError(msg)
            if c.convolve and resolution is None:
                msg = f"component {c.name!r} asks for convolution but the model has no resolution"
                raise ModelError(msg)

        lo, hi = observable.lo, observable.hi
        n = max(int(round((hi - lo) / grid_step)), 2) + 1
        self.h = (hi - lo) / (n - 1)
        self.grid = lo + self.h * np.arange(n)
        self.grid[-1] = hi
        if resolution is not None and any(c.convolve for c in self.components):
            self.pad = int(math.ceil(resolution.half_width / self.h))
            offsets = self.h * np.arange(-self.pad, self.pad + 1)
            kernel = np.asarray(resolution.density(offsets), dtype=float)
            kernel = kernel / kernel.sum()  # the convolution sum's h * R(j h), summing to 1
            # circular convolution of length N: the kept outputs [2 pad, 2 pad + n) of the
            # linear convolution (length n + 4 pad) receive no wrapped-around terms once
            # N >= n + 2 pad, so that length is exact. The shapes are evaluated on N points
            # (the padded range plus up to a few nodes that feed only discarded outputs).
            self._nfft = scipy.fft.next_fast_len(n + 2 * self.pad, real=True)
            self.ext_grid = lo + self.h * np.arange(-self.pad, self._nfft - self.pad)
            self._kernel_fft = np.fft.rfft(kernel, self._nfft)  # as :meth:`_convolve`
        else:
            self.pad = 0
            self.ext_grid = self.grid
            self._nfft = 0
            self._kernel_fft = None
        # the integral over [lo, hi] as a linear map: trapz(G) = G . w on the grid
        self._trapz_weights = np.full(n, self.h)
        self._trapz_weights[[0, -1]] *= 0.5

        # parameter indices used on every call
        self._yield_idx = np.array([parameters.index(c.yield_param) for c in self.components])
        self._shape_idx = [tuple(parameters.index(p) for p in c.shape.param_names)
                           for c in self.components]
        # linear shapes: convolve each basis function once
        self._basis_grid: list[np.ndarray | None] = []
        for c in self.components:
            if isinstance(c.shape, LinearShape) and not isinstance(c.shape, Shape):
                xs = self.ext_grid if c.convolve else self.grid
                basis = np.atleast_2d(np.asarray(c.shape.basis(xs), dtype=float))
                if c.convolve:
                    basis = np.stack([self._convolve(b) for b in basis])
                self._basis_grid.append(basis)
            else:
                self._basis_grid.append(None)
        self._basis_int = [None if b is None else _trapz_rows(b, self.h)
                           for b in self._basis_grid]
        self.discriminants = discriminants
        if discriminants is not None:
            _check_discriminants(discriminants, self.components, len(self.grid))
        # per component: the values its entry belongs to and the normalised grid density
        self._cache: list[dict[str, object]] = [{} for _ in self.components]
        # per parametric component: its grid rows with derivatives at the last few shape
        # values and orders asked for (:meth:`_shape_rows`)
        self._rows_memo: list[dict[tuple, tuple]] = [{} for _ in self.components]

    # --- grid evaluation ------------------------------------------------------------------
    def _convolve(self, f_ext: np.ndarray) -> np.ndarray:
        """Discrete convolution with the kernel along the last axis (rows batched)."""
        # numpy's FFT (pocketfft, as scipy.fft): the same numbers; scipy.fft dispatches
        # each call through its backend machinery first, ~7 % of a T_cc+ pulls toy (3.2
        # six-row convolutions a toy, whole-process timings side by side)
        spec = np.fft.rfft(f_ext, axis=-1)
        spec *= self._kernel_fft
        full = np.fft.irfft(spec, self._nfft, axis=-1)
        start = 2 * self.pad
        return full[..., start:start + len(self.grid)]

    def _shape_rows(self, i: int, vals: tuple[float, ...], order: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Parametric component ``i`` at shape values ``vals``: the unnormalised
        (convolved) density on the fit-range grid, then (``order`` >= 1) its first
        derivatives and (``order`` 2) its second derivatives ``a <= b`` (row-major upper
        triangle), as rows convolved together (one batched FFT pair), and their trapezoid
        integrals: what a likelihood's derivatives need before the events enter.

        Shared by every likelihood of the model and kept for the last :data:`_ROWS_MEMO`
        values and orders asked for: the fits of a study's toys all start at the same values
        (the generation values), so each toy's first point is found here. The entries are
        never modified."""
        memo = self._rows_memo[i]
        key = (order, *vals)
        hit = memo.pop(key, None)
        if hit is None:
            comp = self.components[i]
            shape = comp.shape
            xs = self.ext_grid if comp.convolve else self.grid
            if order == 0:
                rows = np.array(shape.evaluate(xs, vals), dtype=float)[None, :]  # a copy
            elif order == 1:
                v, dv = shape.evaluate_with_gradient(xs, vals)  # type: ignore[union-attr]
                rows = np.concatenate([np.asarray(v, dtype=float)[None, :], dv])
            elif hasattr(shape, "hessian_rows"):  # the shape stacks them itself
                rows = shape.hessian_rows(xs, vals)
            else:
                v, dv, d2v = shape.evaluate_with_hessian(xs, vals)  # type: ignore[union-attr]
                upper = _upper(len(vals))
                rows = np.concatenate([np.asarray(v, dtype=float)[None, :], dv,
                                       d2v[upper]])
            grid_rows = np.ascontiguousarray(self._convolve(rows)) if comp.convolve else rows
            # FFT round-off can leave -1e-17 where the shape is zero
            np.maximum(grid_rows[0], 0.0, out=grid_rows[0])
            hit = (grid_rows, grid_rows @ self._trapz_weights)
            while len(memo) >= _ROWS_MEMO:
                try:  # the oldest entry (dicts keep their order of insertion)
                    memo.pop(next(iter(memo)), None)
                except (StopIteration, RuntimeError):  # another thread changed it
                    break
        memo[key] = hit
        return hit

    def _shape_values(self, i: int, x: np.ndarray) -> tuple[float, ...]:
        return tuple([float(x[j]) for j in self._shape_idx[i]])

    def _grid_entry(self, i: int, x: np.ndarray) -> dict[str, object]:
        """The cache entry of component ``i`` at the values of ``x``, with the normalised
        grid density ``"g"`` and its integral ``"norm"``. An entry belongs to one set of
        values and is replaced (never cleared), so threads sharing a model never mix them."""
        vals = self._shape_values(i, x)
        entry = self._cache[i]
        if entry.get("vals") != vals:
            entry = {"vals": vals}
            self._cache[i] = entry
        if "g" in entry:
            return entry
        comp = self.components[i]
        basis = self._basis_grid[i]
        if basis is not None:
            coef = np.asarray(comp.shape.coefficients(vals), dtype=float)  # type: ignore[union-attr]
            g = coef @ basis
            norm = coef @ self._basis_int[i]
        else:
            rows, integrals = self._shape_rows(i, vals, 0)
            g, norm = rows[0], float(integrals[0])
        if not (norm > 0 and math.isfinite(norm)):
            g = np.full_like(self.grid, np.nan)
        else:
            g = g / norm
        entry["norm"] = norm
        entry["g"] = g
        return entry

    def component_grid(self, i: int, x: np.ndarray) -> np.ndarray:
        """Normalised density of component ``i`` on the fit-range grid for full parameter
        vector ``x`` (cached on the component's own parameter values)."""
        return self._grid_entry(i, x)["g"]  # type: ignore[return-value]

    def supports_gradient(self) -> bool:
        """Every component can give analytic shape derivatives."""
        for c, basis in zip(self.components, self._basis_grid, strict=True):
            if basis is not None:
                if not hasattr(c.shape, "coefficients_jacobian"):
                    return False
            elif not hasattr(c.shape, "evaluate_with_gradient"):
                return False
        return True

    def supports_hessian(self) -> bool:
        """Every component can give analytic second derivatives of its shape."""
        for c, basis in zip(self.components, self._basis_grid, strict=True):
            if basis is not None:
                if not hasattr(c.shape, "coefficients_with_hessian"):
                    return False
            elif not hasattr(c.shape, "evaluate_with_hessian"):
                return False
        return True

    def density_grid(self, x: np.ndarray | None = None) -> np.ndarray:
        """Total normalised density ``sum_c N_c f_c / sum_c N_c`` on the grid."""
        x = self.parameters.values if x is None else np.asarray(x, dtype=float)
        yields = x[self._yield_idx]
        total = sum(n * self.component_grid(i, x) for i, n in enumerate(yields))
        return total / yields.sum()

    def pdf(self, obs: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
        """Normalised model density at ``obs`` (zero outside the range)."""
        obs = np.asarray(obs, dtype=float)
        d = np.interp(obs, self.grid, self.density_grid(x))
        inside = (obs >= self.observable.lo) & (obs <= self.observable.hi)
        return np.where(inside, d, 0.0)

    def component_pdf(self, name: str, obs: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
        x = self.parameters.values if x is None else np.asarray(x, dtype=float)
        i = [c.name for c in self.components].index(name)
        return np.interp(np.asarray(obs, dtype=float), self.grid, self.component_grid(i, x))

    # --- ToyModel protocol ----------------------------------------------------------------
    def sample(self, values: np.ndarray | None,
               rng: np.random.Generator | DataStreams) -> np.ndarray:
        """One toy: per component a Poisson count by inverse CDF of its count uniform, then
        events by the exact inverse CDF of its density, one uniform per event from the
        component's prefix-stable stream (:mod:`toyengine.core.streams`). Two models sampled
        with the same streams give data sets that differ only where their densities
        differ.

        A negative yield (a signal deficit, as the negative-signal model of an importance-
        sampled significance study needs) cannot be a component of its own: the events are
        then drawn from the total density ``sum_c N_c f_c`` (Poisson count of mean
        ``sum_c N_c``, from the streams of the reserved name :data:`TOTAL_STREAM`), which
        must be non-negative on the whole grid — exactly the density :meth:`nll` evaluates.
        """
        streams = as_streams(rng)
        x = self.parameters.values if values is None else np.asarray(values, dtype=float)
        if np.any(x[self._yield_idx] < 0.0):
            if self.discriminants is not None:
                msg = "a model with discriminants cannot be sampled with a negative yield"
                raise ModelError(msg)
            return self._sample_total(x, streams)
        parts = []
        for i, n in enumerate(x[self._yield_idx]):
            name = self.components[i].name
            k = streams.count(name, float(n))
            u = streams.events(name).random(k)
            entry = self._grid_entry(i, x)
            if "cdf" not in entry:
                entry["cdf"] = _cdf_table(self.grid, entry["g"])  # type: ignore[arg-type]
            parts.append(_inverse_cdf(self.grid, entry["cdf"], u))  # type: ignore[arg-type]
        if self.discriminants is not None:
            return self._sample_discriminants(parts, streams)
        return np.concatenate(parts)

    def _sample_discriminants(self, parts: list[np.ndarray], streams: DataStreams
                              ) -> DiscriminatedSample:
        """The events of the model's components (``parts``, species 0) with their
        discriminants, then the events of each subtracted species: a Poisson count, x from
        its density and its discriminants, each from streams of its own (the discriminants
        of a component ``c`` from ``c + "#m"``: one row of uniforms per event, prefix-stable).
        The discriminants are drawn independently of x, as sPlot assumes."""
        disc = self.discriminants
        assert disc is not None
        d = len(disc.names)
        xs, ms, sp = [], [], []

        def draw(species: int, name: str, k: int) -> np.ndarray:
            u = streams.events(name + DISCRIMINANT_SUFFIX).random((k, d))
            shapes = disc.species[species].shapes
            return np.stack([shapes[j].sample(u[:, j]) for j in range(d)], axis=1)

        for c, part in zip(self.components, parts, strict=True):
            xs.append(part)
            ms.append(draw(0, c.name, part.size))
            sp.append(np.zeros(part.size, dtype=np.int8))
        for k, s in enumerate(disc.species[1:], start=1):
            n = streams.count(s.name, s.expected)
            u = streams.events(s.name).random(n)
            xs.append(_inverse_cdf(self.grid, _cdf_table(self.grid, s.x_density), u))  # type: ignore[arg-type]
            ms.append(draw(k, s.name, n))
            sp.append(np.full(n, k, dtype=np.int8))
        return DiscriminatedSample(np.concatenate(xs), np.concatenate(ms),
                                   np.concatenate(sp))

    def _sample_total(self, x: np.ndarray, streams: DataStreams) -> np.ndarray:
        """Events of the total density ``sum_c N_c f_c`` (some ``N_c`` negative)."""
        yields = x[self._yield_idx]
        total = sum(n * self.component_grid(i, x) for i, n in enumerate(yields))
        low = float(np.min(total))
        if not (yields.sum() > 0.0 and low >= -1e-12 * float(np.max(np.abs(total)))):
            named = dict(zip([c.yield_param for c in self.components], yields.tolist(),
                             strict=True))
            msg = (f"cannot sample yields {named}: the total density is negative (min "
                   f"{low:.4g} on the grid)")
            raise ModelError(msg)
        k = streams.count(TOTAL_STREAM, float(yields.sum()))
        u = streams.events(TOTAL_STREAM).random(k)
        return _inverse_cdf(self.grid, _cdf_table(self.grid, total), u)

    def nll(self, data: np.ndarray | DiscriminatedSample,
            weights: np.ndarray | None = None) -> UnbinnedNLL:
        """Extended unbinned negative log-likelihood of ``data`` (events inside the range).

        For a :class:`~toyengine.core.discriminants.DiscriminatedSample` of a model with
        discriminants: the likelihood of its x weighted with the sWeights of species 0
        (:meth:`Discriminants.sweights <toyengine.core.discriminants.Discriminants.sweights>`)."""
        if isinstance(data, DiscriminatedSample):
            if weights is not None or self.discriminants is None:
                msg = ("a sample with discriminants is weighted by the model's sWeights: "
                       "give no weights, and fit it with a model that declares discriminants")
                raise ModelError(msg)
            return UnbinnedNLL(self, data.x, data.sweights(self.discriminants).weights[:, 0])
        return UnbinnedNLL(self, data, weights)

    def sweighted_covariance(self, data: DiscriminatedSample, values: np.ndarray,
                             free: Sequence[str]) -> WeightedCovariance:
        """Covariances (naive, sum of w², asymptotically correct) of the sWeighted fit of
        ``data`` at its minimum ``values`` over the parameters ``free``
        (:func:`toyengine.core.discriminants.sweighted_covariance`; Langenbruch, Eur. Phys.
        J. C 82 (2022) 393)."""
        if self.discriminants is None or not isinstance(data, DiscriminatedSample):
            msg = "sweighted_covariance needs a model with discriminants and its sample"
            raise ModelError(msg)
        sp = data.sweights(self.discriminants)
        w = sp.weights[:, 0]
        nll = UnbinnedNLL(self, data.x, w)
        nll_w2 = UnbinnedNLL(self, data.x, w * w)
        idx = [self.parameters.index(n) for n in free]
        return sweighted_covariance(nll, nll_w2, np.asarray(values, dtype=float), idx, sp)

    def negative_weight_note(self, data: Any, values: np.ndarray) -> str:
        """Why a fit of sWeighted ``data`` may have no minimum near ``values``: ``""``, or a
        sentence naming the event with a negative sWeight where the model's density at
        ``values`` is below 10⁻⁹ of its median over the events. −w ln D → −∞ as D → 0 for
        w < 0, so the weighted −ln L is unbounded below wherever the subtracted species put
        events that the fitted model does not cover (a weighted fit needs a model that is
        positive wherever its weighted events are)."""
        if self.discriminants is None or not isinstance(data, DiscriminatedSample):
            return ""
        nll = self.nll(data)
        dens = nll.event_densities(np.asarray(values, dtype=float))
        w = nll.weights
        scale = float(np.median(dens)) if dens.size else 0.0
        bad = np.flatnonzero((w < 0) & (dens < 1e-9 * scale))
        if not bad.size:
            return ""
        e = bad[np.argmin(dens[bad])]
        obs = self.observable
        return (f"an event with sWeight {w[e]:.3g} at {obs.name} = {nll.data[e]:.4g}"
                f"{' ' + obs.unit if obs.unit else ''} has a model density "
                f"{dens[e] / scale:.1e} of the median: the weighted -ln L is unbounded below "
                "where the subtracted species reach beyond the fitted model")

    def asimov(self, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Asimov data set at ``values`` (default: the generation values): the nodes of
        the fit-range grid, each weighted by the expected number of events it stands for
        (the likelihood's trapezoid weight × expected density), for ``nll(nodes, weights)``.

        The weights sum to the total expected yield; a fit returns ``values`` to the
        trapezoid rule's accuracy on the grid, the rule the likelihood normalises with
        (Cowan, Cranmer, Gross, Vitells, Eur. Phys. J. C 71 (2011) 1554, Sect. 3.1).
        """
        x = self.parameters.values if values is None else np.asarray(values, dtype=float)
        total = float(np.sum(x[self._yield_idx]))
        return self.grid.copy(), self.density_grid(x) * self._trapz_weights * total


class _Point:
    """What :class:`UnbinnedNLL` computes at one parameter vector with derivatives up to
    ``order``: the event densities, ``sum_i w_i ln D_i`` and (``order`` >= 1, constraint
    terms included) the gradient and (``order`` 2) the Hessian."""

    __slots__ = ("dens", "grad", "hess", "key", "logsum", "order")

    def __init__(self, key: bytes, order: int, dens: np.ndarray, logsum: float,
                 grad: np.ndarray, hess: np.ndarray):
        self.key, self.order, self.dens, self.logsum = key, order, dens, logsum
        self.grad, self.hess = grad, hess


class UnbinnedNLL(Likelihood):
    """Extended unbinned −ln L with Gaussian constraints and optional per-event weights.

    ``-ln L = sum_c N_c - sum_i w_i ln(sum_c N_c f_c(x_i)) + sum_p (p - mu_p)^2 / (2 s_p^2)``

    (constant terms dropped). With weights (sWeighted data, as in the T_cc+ papers) the point
    estimate is the weighted-likelihood one and :meth:`weighted_covariance` gives the sandwich
    covariance ``H^-1 (sum_i w_i^2 g_i g_i^T) H^-1`` (Langenbruch, EPJC 82 (2022) 393, Eq. 18).

    The gradient and Hessian are analytic (:meth:`_grad`, :meth:`_hessian`). Each
    component's density at the events is ``g / I`` with ``g`` linear in its shape: the
    interpolation of its (convolved) grid density, or its coefficients times its fixed basis
    at the events. Its first and second derivatives in the shape parameters are therefore
    the same maps applied to the derivatives of the shape (convolved together with it, one
    batched FFT pair), and one compiled pass over the events
    (:func:`toyengine.core.model1d_kernels.nll_terms`) gives the value, the gradient and the
    Hessian.
    """

    errordef = 0.5

    def __init__(self, model: Model1D, data: np.ndarray, weights: np.ndarray | None = None):
        data = np.asarray(data, dtype=float).ravel()
        obs = model.observable
        inside = (data >= obs.lo) & (data <= obs.hi)
        if weights is not None:
            weights = np.asarray(weights, dtype=float).ravel()
            if weights.shape != data.shape:
                msg = f"weights shape {weights.shape} does not match data shape {data.shape}"
                raise ModelError(msg)
            weights = weights[inside]
        self.model = model
        self.parameters = model.parameters
        self.data = data[inside]
        self.weights = weights
        # linear-interpolation stencil of each event on the grid (fixed during a fit)
        pos = (self.data - obs.lo) / model.h
        k = np.minimum(np.maximum(np.floor(pos).astype(np.int64), 0), len(model.grid) - 2)
        self._k = k
        self._t = pos - k
        self._w = np.ones_like(self.data) if weights is None else weights
        lay = NllLayout.of(model)
        self._linear, self._parametric = lay.linear, lay.parametric
        self._basis_cols, self._zoff = lay.basis_cols, lay.zoff
        self._yidx, self._pidx, self._npar = lay.yidx, lay.pidx, lay.npar
        self.constraint = lay.constraint
        self.amplitude_blocks = lay.amplitudes
        # the linear shapes' bases at the events, stacked (rows ``_basis_cols`` each)
        rows = [self._interp(model._basis_grid[i]) for i in self._linear]  # type: ignore[arg-type]
        self._basis = (np.concatenate(rows) if rows else np.empty((0, len(self.data))))
        # per component: its rows at the shape values and order asked for last
        self._rows_cache: list[tuple | None] = [None] * len(model.components)
        self._last: _Point | None = None
        if lay.has_grad:
            self.has_grad = True  # iminuit uses it when present
            if lay.has_hessian:
                self.has_hessian = True  # and this one, in MIGRAD's seed and HESSE

    @property
    def ndata(self) -> float:
        """The number of events inside the observable's range."""
        return float(self.data.size)

    def _interp(self, g: np.ndarray) -> np.ndarray:
        """The grid rows ``g`` linearly interpolated at the events."""
        return np.take(g, self._k, axis=-1) * (1.0 - self._t) + np.take(g, self._k + 1,
                                                                         axis=-1) * self._t

    def _rows(self, i: int, x: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
        """Component ``i`` at the shape values of ``x``: its rows up to ``order``
        (value, first derivatives, upper triangle of the second derivatives) and their
        integrals over the range; grid rows for a parametric shape
        (:meth:`Model1D._shape_rows`), coefficient rows of its basis for a linear one
        (cached on those values). A component without shape parameters has its value row
        only, whatever the order."""
        m = self.model
        vals = tuple([float(x[j]) for j in m._shape_idx[i]])
        order = order if vals else 0
        hit = self._rows_cache[i]
        if hit is None or hit[0] != vals or hit[1] < order:
            if m._basis_grid[i] is None:
                rows, integrals = m._shape_rows(i, vals, order)
            else:
                rows = _coefficient_rows(m.components[i].shape, vals, order)  # type: ignore[arg-type]
                integrals = rows @ m._basis_int[i]
            hit = self._rows_cache[i] = (vals, order, rows, integrals)
        nr = n_rows(len(vals), order)
        return hit[2][:nr], hit[3][:nr]

    def _point(self, x: np.ndarray, order: int) -> _Point:
        """The densities, ``sum_i w_i ln D_i`` and the derivatives up to ``order`` at
        ``x`` (:func:`toyengine.core.model1d_kernels.nll_terms`, plus the constraint terms),
        memoised for the last ``x`` (a Hessian brings the gradient and the value at the
        same point for free)."""
        x = np.asarray(x, dtype=float)
        key = x.tobytes()
        last = self._last
        if last is not None and last.key == key and last.order >= order:
            return last
        from .model1d_kernels import nll_terms

        grid = [self._rows(i, x, order) for i in self._parametric]
        lines = [self._rows(i, x, order) for i in self._linear]
        grid_rows = (grid[0][0] if len(grid) == 1 else
                     np.concatenate([g[0] for g in grid]) if grid else
                     np.empty((0, len(self.model.grid))))
        lin = np.zeros((sum(len(r) for r, _ in lines), len(self._basis)))
        start = 0
        for (r, _), cols in zip(lines, self._basis_cols, strict=True):
            lin[start:start + len(r), cols] = r
            start += len(r)
        iz = np.concatenate([g[1] for g in grid] + [r[1] for r in lines])
        dens, logsum, grad, hess = nll_terms(
            self._k, self._t, self._w, grid_rows, self._basis, lin, iz, self._zoff[order],
            self._npar, self._yidx, self._pidx, x[self._yidx], len(x), order)
        if order >= 1:
            self.constraint.add_grad(grad, x)
        if order >= 2:
            self.constraint.add_hessian(hess)
        self._last = point = _Point(key, order, dens, logsum, grad, hess)
        return point

    def component_at_events(self, i: int, x: np.ndarray) -> np.ndarray:
        """Normalised density of component ``i`` at the events."""
        return self._interp(self.model.component_grid(i, x))

    def event_densities(self, x: np.ndarray) -> np.ndarray:
        """``sum_c N_c f_c(x_i)`` for every event (memoised for the last ``x``)."""
        return self._point(x, 0).dens

    def _call(self, x: np.ndarray) -> float:
        x = np.asarray(x, dtype=float)
        total = x[self.model._yield_idx].sum()
        if not total > 0.0:
            return 1e300  # no expected events: outside the model (negative yields may only
            #               cancel part of the total), as for a non-finite value below
        val = self.constraint.add_value(total - self._point(x, 0).logsum, x)
        return float(val) if math.isfinite(val) else 1e300

    def _grad(self, x: np.ndarray) -> np.ndarray:
        """Analytic gradient of :meth:`__call__` (:meth:`_point`)."""
        return self._point(x, 1).grad.copy()

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        """Analytic Hessian of :meth:`__call__` over all parameters, fixed ones included
        (:meth:`_point`)."""
        return self._point(x, 2).hess.copy()

    def weighted_covariance(self, x: np.ndarray, free: Sequence[str],
                            step: float = 1e-5) -> np.ndarray:
        """Sandwich covariance for weighted fits at the minimum ``x`` (free parameters only).

        ``H`` is the Hessian of this (weighted) −ln L and ``g_i`` the gradient of event
        ``i``'s term ``ln(sum_c N_c f_c(x_i))``, both by central finite differences.
        """
        x = np.asarray(x, dtype=float)
        idx = [self.parameters.index(n) for n in free]
        w = np.ones_like(self.data) if self.weights is None else self.weights
        steps = [step * max(abs(x[j]), 1.0) for j in idx]

        def per_event(xx: np.ndarray) -> np.ndarray:
            # extended likelihood: the score of event i is the gradient of
            # ln(sum_c N_c f_c(x_i)); the Poisson term -sum N has no per-event share
            return -np.log(np.maximum(self.event_densities(xx), 1e-300))

        grads = []
        for j, s in zip(idx, steps, strict=True):
            xp, xm = x.copy(), x.copy()
            xp[j] += s
            xm[j] -= s
            grads.append((per_event(xp) - per_event(xm)) / (2 * s))
        g = np.array(grads)  # (p, n)
        hess = finite_difference_hessian(self, x, idx, steps)
        hinv = np.linalg.inv(hess)
        return hinv @ ((g * w**2) @ g.T) @ hinv


def _check_discriminants(disc: Discriminants, components: Sequence[Component],
                         n_grid: int) -> None:
    names = {c.name for c in components}
    for s in disc.species[1:]:
        if s.name in names or s.name == TOTAL_STREAM:
            msg = f"species {s.name!r} has the name of a component: names must differ"
            raise ModelError(msg)
        if s.x_density is None or np.shape(s.x_density) != (n_grid,):
            msg = (f"species {s.name!r} needs its density in the observable on the model's "
                   f"grid ({n_grid} nodes)")
            raise ModelError(msg)
        if not (s.expected >= 0 and math.isfinite(s.expected)):
            msg = f"species {s.name!r}: expected count must be >= 0, got {s.expected}"
            raise ModelError(msg)


@functools.cache
def _upper(p: int) -> tuple[np.ndarray, np.ndarray]:
    """The row-major upper triangle ``a <= b`` of a ``p x p`` matrix (``np.triu_indices``,
    read only: shared by every call)."""
    upper = np.triu_indices(p)
    for a in upper:
        a.setflags(write=False)
    return upper


def _coefficient_rows(shape: LinearShape, vals: tuple[float, ...], order: int
                      ) -> np.ndarray:
    """The coefficients of a linear shape and, up to ``order``, their first and second
    derivatives (upper triangle, row-major) as the rows of one ``(n_rows, K)`` array."""
    rows_of = getattr(shape, "coefficient_rows", None)
    if rows_of is not None:  # the shape stacks them itself (a compiled kernel)
        return rows_of(vals, order)
    if order == 0:
        return np.asarray(shape.coefficients(vals), dtype=float)[None, :]
    if order == 1:
        coef = np.asarray(shape.coefficients(vals), dtype=float)
        jac = np.asarray(shape.coefficients_jacobian(vals), dtype=float)  # type: ignore[attr-defined]
        return np.concatenate([coef[None, :], jac.T])
    coef, jac, hess = shape.coefficients_with_hessian(vals)  # type: ignore[attr-defined]
    upper = _upper(len(vals))
    return np.concatenate([np.asarray(coef, dtype=float)[None, :],
                           np.asarray(jac, dtype=float).T,
                           np.asarray(hess, dtype=float)[:, upper[0], upper[1]].T])


def _trapz_rows(g: np.ndarray, h: float) -> np.ndarray:
    return h * (g.sum(axis=-1) - 0.5 * (g[..., 0] + g[..., -1]))
