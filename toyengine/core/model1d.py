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
- Shape derivatives reach the likelihood through the adjoint (transpose) of the
  interpolation and the convolution: with ``a_i = w_i / D_i`` the gradient needs
  ``sum_i a_i dG(x_i)/dθ = u . df/dθ`` with ``u`` one correlation of the scattered ``a``,
  whatever the number of shape parameters (:class:`UnbinnedNLL`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import scipy.fft

from ..errors import ModelError
from .params import ParameterSet
from .resolution import Resolution
from .streams import DataStreams, as_streams

__all__ = [
    "TOTAL_STREAM",
    "Component",
    "LinearShape",
    "Model1D",
    "Observable",
    "Shape",
    "UnbinnedNLL",
    "inverse_cdf_piecewise_linear",
    "sample_piecewise_linear",
]

#: how many shape values :meth:`Model1D._shape_grid_with_hessian` keeps per component
_HESSIAN_MEMO = 8

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
    """

    def __init__(self, observable: Observable, components: Sequence[Component],
                 parameters: ParameterSet, resolution: Resolution | None = None,
                 grid_step: float = 0.01, scan_parameters: Sequence[str] = ()):
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
            self._kernel_fft = scipy.fft.rfft(kernel, self._nfft)
            self._kernel_fft_conj = np.conj(self._kernel_fft)
        else:
            self.pad = 0
            self.ext_grid = self.grid
            self._nfft = 0
            self._kernel_fft = None
        # the integral over [lo, hi] as a linear map: trapz(G) = G . w on the grid, and for
        # G = conv(f), = f . correlate(w) on the padded grid (its gradient in f)
        self._trapz_weights = np.full(n, self.h)
        self._trapz_weights[[0, -1]] *= 0.5
        self._norm_adjoint = (self._correlate(self._trapz_weights)
                              if self._kernel_fft is not None else None)

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
        # per component: the values its entry belongs to and the normalised grid density
        self._cache: list[dict[str, object]] = [{} for _ in self.components]
        # per parametric component: its grid terms up to second derivatives at the last
        # few shape values (:meth:`_shape_grid_with_hessian`)
        self._hessian_memo: list[dict[tuple[float, ...], tuple]] = [
            {} for _ in self.components]

    # --- grid evaluation ------------------------------------------------------------------
    def _convolve(self, f_ext: np.ndarray) -> np.ndarray:
        """Discrete convolution with the kernel along the last axis (rows batched)."""
        spec = scipy.fft.rfft(f_ext, axis=-1)
        spec *= self._kernel_fft
        # the spectrum is a temporary: overwriting it spares a copy (~10 % of the pair)
        full = scipy.fft.irfft(spec, self._nfft, axis=-1, overwrite_x=True)
        start = 2 * self.pad
        return full[..., start:start + len(self.grid)]

    def _correlate(self, b: np.ndarray) -> np.ndarray:
        """The adjoint of :meth:`_convolve` (rows batched): for ``b`` on the fit-range grid,
        the vector ``u`` on the padded grid with ``u . f = b . conv(f)`` for every ``f``,
        i.e. the gradient of ``b . conv(f)`` in ``f`` (a circular correlation)."""
        full = np.zeros((*b.shape[:-1], self._nfft))
        start = 2 * self.pad
        full[..., start:start + len(self.grid)] = b
        spec = scipy.fft.rfft(full, axis=-1, overwrite_x=True)
        spec *= self._kernel_fft_conj
        return scipy.fft.irfft(spec, self._nfft, axis=-1, overwrite_x=True)

    def _shape_grid(self, i: int, vals: tuple[float, ...]) -> tuple[np.ndarray, float]:
        """Parametric component ``i`` at its shape values ``vals``: the unnormalised
        (convolved) density on the fit-range grid and its trapezoid integral."""
        comp = self.components[i]
        xs = self.ext_grid if comp.convolve else self.grid
        f = np.asarray(comp.shape.evaluate(xs, vals), dtype=float)  # type: ignore[union-attr]
        g = self._convolve(f) if comp.convolve else f
        g = np.maximum(g, 0.0)  # FFT round-off can leave -1e-17 where the shape is zero
        return g, float(g @ self._trapz_weights)

    def _shape_grid_with_hessian(self, i: int, vals: tuple[float, ...]
                                 ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
        """Parametric component ``i`` at shape values ``vals``: the unnormalised
        (convolved) density and its first derivatives on the fit-range grid (rows, one
        batched FFT pair), its trapezoid integral, and the shape's first and second
        derivatives on its evaluation grid; what a likelihood's Hessian needs before the
        events enter.

        Shared by every likelihood of the model and kept for the last
        :data:`_HESSIAN_MEMO` values asked for: the fits of a study's toys all start at the
        same values (the generation values), so each toy's first point is found here. The
        entries are never modified."""
        memo = self._hessian_memo[i]
        hit = memo.pop(vals, None)
        if hit is None:
            comp = self.components[i]
            xs = self.ext_grid if comp.convolve else self.grid
            v, dv, d2v = comp.shape.evaluate_with_hessian(xs, vals)  # type: ignore[union-attr]
            rows = np.concatenate([np.asarray(v, dtype=float)[None, :], dv])
            grid_rows = self._convolve(rows) if comp.convolve else rows
            # FFT round-off can leave -1e-17 where the shape is zero (as in _shape_grid)
            grid_rows[0] = np.maximum(grid_rows[0], 0.0)
            hit = (grid_rows, float(grid_rows[0] @ self._trapz_weights), dv, d2v)
            for a in (grid_rows, dv, d2v):
                a.setflags(write=False)
            while len(memo) >= _HESSIAN_MEMO:
                try:  # the oldest entry (dicts keep their order of insertion)
                    memo.pop(next(iter(memo)), None)
                except (StopIteration, RuntimeError):  # another thread changed it
                    break
        memo[vals] = hit
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
            g, norm = self._shape_grid(i, vals)
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
        return np.concatenate(parts)

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

    def nll(self, data: np.ndarray, weights: np.ndarray | None = None) -> UnbinnedNLL:
        """Extended unbinned negative log-likelihood of ``data`` (events inside the range)."""
        return UnbinnedNLL(self, data, weights)

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


class _Terms:
    """One component of an :class:`UnbinnedNLL` at one set of its shape values.

    The component's density at the events is ``events(v) / norm(v)``, both linear in a
    vector ``v`` that depends on the shape parameters only: the shape on its evaluation grid
    (a parametric shape; ``events`` is the convolution, if any, then the interpolation at
    the events) or the coefficients of its fixed basis (a linear shape; ``events`` is the
    basis at the events). ``norm`` is ``v . kappa`` with ``kappa`` the integral over the
    range as a linear map. Entries are filled as the likelihood, its gradient and its
    Hessian ask for them.
    """

    __slots__ = ("d2v", "dg", "dv", "f", "i_a", "i_ab", "norm", "vals")

    def __init__(self, vals: tuple[float, ...], f: np.ndarray, norm: float):
        self.vals = vals
        self.f = f  # normalised density at the events
        self.norm = norm
        self.dv: np.ndarray | None = None  # (p, M) derivatives of v
        self.i_a: np.ndarray | None = None  # (p,) derivatives of norm
        self.d2v: np.ndarray | None = None  # (p, p, M)
        self.i_ab: np.ndarray | None = None  # (p, p)
        self.dg: np.ndarray | None = None  # (p, n) derivatives of f at the events


class UnbinnedNLL:
    """Extended unbinned −ln L with Gaussian constraints and optional per-event weights.

    ``-ln L = sum_c N_c - sum_i w_i ln(sum_c N_c f_c(x_i)) + sum_p (p - mu_p)^2 / (2 s_p^2)``

    (constant terms dropped). With weights (sWeighted data, as in the T_cc+ papers) the point
    estimate is the weighted-likelihood one and :meth:`weighted_covariance` gives the sandwich
    covariance ``H^-1 (sum_i w_i^2 g_i g_i^T) H^-1`` (Langenbruch, EPJC 82 (2022) 393, Eq. 18).

    The gradient and Hessian are analytic (:meth:`_grad`, :meth:`_hessian`). The shape
    derivatives enter through the adjoint of the convolution: for ``a_i = w_i / D_i``,
    ``sum_i a_i dG(x_i)/dθ = u . df/dθ`` with ``u = correlate(interp^T a)`` computed once per
    point, so a gradient needs one FFT pair whatever the number of shape parameters.
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
        k = np.clip(np.floor(pos).astype(int), 0, len(model.grid) - 2)
        self._k = k
        self._t = pos - k
        self._k1 = k + 1
        self._t1 = 1.0 - self._t
        self._event_basis = [None if b is None else self._interp(b) for b in model._basis_grid]
        # per component: its terms at the shape values asked for last
        self._terms_cache: list[_Terms | None] = [None] * len(model.components)
        # the parameter vector asked for last, its event densities and adjoint vectors
        self._last_key: bytes | None = None
        self._last_dens = np.empty(0)
        self._last_adjoint: dict[object, np.ndarray] = {}  # and its derivatives
        self._w = np.ones_like(self.data) if weights is None else weights
        self._cidx, self._cmu, self._csig = model.parameters.constraint_terms()
        # per component: its yield's index, its shape parameters' and their Hessian block
        # (a slice when they are consecutive: basic indexing, no copies)
        self._param_slots: list[tuple[int, slice | np.ndarray, tuple]] = []
        for yi, sidx in zip(model._yield_idx, model._shape_idx, strict=True):
            if sidx and list(sidx) == list(range(sidx[0], sidx[0] + len(sidx))):
                sl = slice(sidx[0], sidx[0] + len(sidx))
                self._param_slots.append((int(yi), sl, (sl, sl)))
            else:
                idx = np.array(sidx, dtype=int)
                self._param_slots.append((int(yi), idx, np.ix_(idx, idx)))
        if model.supports_gradient():
            self.grad = self._grad  # iminuit uses it when present
            if model.supports_hessian():
                self.hessian = self._hessian  # and this one, in MIGRAD's seed and HESSE

    def _interp(self, g: np.ndarray) -> np.ndarray:
        # np.take along the last axis: ~2x faster than fancy indexing on stacked rows
        out = np.take(g, self._k, axis=-1)
        out *= self._t1
        right = np.take(g, self._k1, axis=-1)
        right *= self._t
        out += right
        return out

    def _interp_adjoint(self, a: np.ndarray) -> np.ndarray:
        """The transpose of :meth:`_interp`: ``b`` on the grid with ``b . g = a . interp(g)``."""
        n = len(self.model.grid)
        return (np.bincount(self._k, a * self._t1, n)
                + np.bincount(self._k1, a * self._t, n))

    def _terms(self, i: int, x: np.ndarray, order: int) -> _Terms:
        """Component ``i`` at the shape values of ``x`` with its derivatives up to
        ``order`` (cached on those values)."""
        m = self.model
        vals = tuple([float(x[j]) for j in m._shape_idx[i]])
        t = self._terms_cache[i]
        comp = m.components[i]
        eb = self._event_basis[i]
        if (t is None or t.vals != vals) and order >= 2:
            t = self._terms_cache[i] = (self._terms_with_hessian(i, vals) if eb is None
                                        else self._linear_terms_with_hessian(i, vals))
        if t is None or t.vals != vals:
            if eb is not None:
                coef = np.asarray(comp.shape.coefficients(vals), dtype=float)  # type: ignore[union-attr]
                norm = float(coef @ m._basis_int[i])
                f = (coef @ eb) / norm
            else:
                g, norm = m._shape_grid(i, vals)
                if norm > 0 and math.isfinite(norm):
                    f = self._interp(g) / norm
                else:
                    f = np.full_like(self.data, np.nan)
            t = self._terms_cache[i] = _Terms(vals, f, norm)
        if order >= 1 and t.dv is None:
            if eb is not None:
                t.dv = np.asarray(comp.shape.coefficients_jacobian(vals), dtype=float).T  # type: ignore[union-attr]
            else:
                xs = m.ext_grid if comp.convolve else m.grid
                t.dv = comp.shape.evaluate_with_gradient(xs, vals)[1]  # type: ignore[union-attr]
            t.i_a = t.dv @ self._norm_map(i)
        if order >= 2 and t.dg is None:
            if eb is not None:
                ch = comp.shape.coefficients_with_hessian(vals)[2]  # type: ignore[union-attr]
                t.d2v = np.asarray(ch, dtype=float).transpose(1, 2, 0)
                dv_events = t.dv @ eb
            else:
                if t.d2v is None:
                    xs = m.ext_grid if comp.convolve else m.grid
                    t.d2v = comp.shape.evaluate_with_hessian(xs, vals)[2]  # type: ignore[union-attr]
                dv_events = self._interp(m._convolve(t.dv) if comp.convolve else t.dv)
            t.i_ab = t.d2v @ self._norm_map(i)
            t.dg = (dv_events - t.i_a[:, None] * t.f[None, :]) / t.norm  # type: ignore[index]
        return t

    def _terms_with_hessian(self, i: int, vals: tuple[float, ...]) -> _Terms:
        """Parametric component ``i`` at shape values ``vals`` with all its terms up to the
        second derivatives, the shape and its first derivatives convolved and interpolated
        together (one batched FFT pair): what a Hessian asked for before the value needs
        (the Newton fitter's order)."""
        grid_rows, norm, dv, d2v = self.model._shape_grid_with_hessian(i, vals)
        events = self._interp(grid_rows)
        f = (events[0] / norm if norm > 0 and math.isfinite(norm)
             else np.full_like(self.data, np.nan))
        t = _Terms(vals, f, norm)
        kappa = self._norm_map(i)
        t.dv, t.d2v = dv, d2v
        t.i_a = dv @ kappa
        t.i_ab = d2v @ kappa
        t.dg = (events[1:] - t.i_a[:, None] * f[None, :]) / norm
        return t

    def _linear_terms_with_hessian(self, i: int, vals: tuple[float, ...]) -> _Terms:
        """Linear component ``i`` at coefficient parameters ``vals`` with all its terms up
        to the second derivatives, the coefficients and their derivatives computed together
        (``coefficients_with_hessian``)."""
        m = self.model
        eb = self._event_basis[i]
        coef, jac, ch = m.components[i].shape.coefficients_with_hessian(vals)  # type: ignore[union-attr]
        kappa = m._basis_int[i]
        norm = float(np.asarray(coef, dtype=float) @ kappa)  # type: ignore[operator]
        t = _Terms(vals, (coef @ eb) / norm, norm)  # type: ignore[operator]
        t.dv = np.asarray(jac, dtype=float).T
        t.i_a = t.dv @ kappa
        t.d2v = np.asarray(ch, dtype=float).transpose(1, 2, 0)
        t.i_ab = t.d2v @ kappa
        t.dg = (t.dv @ eb - t.i_a[:, None] * t.f[None, :]) / norm  # type: ignore[index]
        return t

    def _norm_map(self, i: int) -> np.ndarray:
        """``kappa`` of component ``i``: its integral over the range is ``v . kappa``."""
        m = self.model
        if m._basis_int[i] is not None:
            return m._basis_int[i]  # type: ignore[return-value]
        return m._norm_adjoint if m.components[i].convolve else m._trapz_weights  # type: ignore[return-value]

    def _adjoint(self, i: int, a: np.ndarray) -> np.ndarray:
        """``u`` with ``u . dv = sum_i a_i events(dv)_i`` for component ``i``, where ``a`` is
        ``w / D`` at the point of the last :meth:`event_densities` (memoised there per kind
        of component)."""
        eb = self._event_basis[i]
        if eb is not None:
            return eb @ a
        memo = self._last_adjoint
        convolve = self.model.components[i].convolve
        if convolve not in memo:
            b = self._interp_adjoint(a)
            memo[convolve] = self.model._correlate(b) if convolve else b
        return memo[convolve]

    def component_at_events(self, i: int, x: np.ndarray) -> np.ndarray:
        """Normalised density of component ``i`` at the events."""
        return self._terms(i, x, 0).f

    def event_densities(self, x: np.ndarray, order: int = 0) -> np.ndarray:
        """``sum_c N_c f_c(x_i)`` for every event (cached for the last ``x``); at a new
        ``x`` the components' terms are computed with their derivatives up to ``order``
        (in one pass: :meth:`_terms_with_hessian`)."""
        x = np.asarray(x, dtype=float)
        key = x.tobytes()
        if key == self._last_key:
            return self._last_dens
        m = self.model
        yields = x[m._yield_idx]
        dens = yields[0] * self._terms(0, x, order if m._shape_idx[0] else 0).f
        for i in range(1, len(yields)):
            dens += yields[i] * self._terms(i, x, order if m._shape_idx[i] else 0).f
        self._last_key, self._last_dens, self._last_adjoint = key, dens, {}
        return dens

    def __call__(self, x: np.ndarray) -> float:
        x = np.asarray(x, dtype=float)
        yields = x[self.model._yield_idx]
        if not yields.sum() > 0.0:
            return 1e300  # no expected events: outside the model (negative yields may only
            #               cancel part of the total), as for a non-finite value below
        dens = self.event_densities(x)
        logd = np.log(np.maximum(dens, 1e-300))
        if self.weights is None:
            val = yields.sum() - logd.sum()
        else:
            val = yields.sum() - self.weights @ logd
        if len(self._cidx):
            val += 0.5 * float(np.sum(((x[self._cidx] - self._cmu) / self._csig) ** 2))
        return float(val) if math.isfinite(val) else 1e300

    def _grad(self, x: np.ndarray) -> np.ndarray:
        """Analytic gradient of :meth:`__call__` (:meth:`_derivatives`)."""
        return self._derivatives(x, 1)[0].copy()

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        """Analytic Hessian of :meth:`__call__` over all parameters, fixed ones included
        (:meth:`_derivatives`)."""
        return self._derivatives(x, 2)[1].copy()  # type: ignore[union-attr]

    def _derivatives(self, x: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The gradient and, for ``order`` 2, the Hessian of :meth:`__call__`, memoised at
        the point of the last :meth:`event_densities` (a Hessian brings the gradient at the
        same point for free).

        Gradient: ``d/dN_c = 1 - sum_i a_i f_c(x_i)`` and
        ``d/dθ = -N_c sum_i a_i d f_c(x_i)/dθ`` (``a_i = w_i / D_i``) for the shape
        parameters θ of component ``c``, plus the constraint terms. With ``f_c = G/I``:
        ``sum_i a_i df_c(x_i)/dθ = (u . dv/dθ - I_θ S)/I``, ``S = sum_i a_i f_c(x_i)``
        (:meth:`_adjoint`).

        Hessian: with D_i = sum_c N_c f_c(x_i) and weights w_i (1 without weights),
        ``d2(-ln L)/da db = sum_i w_i [D_a D_b / D_i^2 - D_ab / D_i]`` plus the constraint
        terms ``1/s_p^2``; ``D_{N_c} = f_c``, ``D_θ = N_c df_c/dθ``,
        ``D_{N_c θ} = df_c/dθ`` and ``D_{θθ'} = N_c d2f_c/dθ dθ'`` for the shape
        parameters θ of component ``c``. Differentiating ``f I = G`` twice,
        ``f_ab = (G_ab - f_a I_b - f_b I_a - f I_ab)/I``, whose sum over the events with
        weights ``a_i = w_i / D_i`` takes ``G_ab`` through the adjoint (:meth:`_adjoint`).
        """
        x = np.asarray(x, dtype=float)
        m = self.model
        dens = np.maximum(self.event_densities(x, order), 1e-300)
        memo = self._last_adjoint
        grad = memo.get("grad")
        hess = memo.get("hessian")
        if grad is not None and (order < 2 or hess is not None):
            return grad, hess
        yields = x[m._yield_idx]
        a = self._w / dens
        grad = np.zeros_like(x)
        if order >= 2:
            jac = np.zeros((len(x), len(dens)))  # dD_i / d param
            hess = np.zeros((len(x), len(x)))
        for i, (yi, idx, block) in enumerate(self._param_slots):
            has_shape = bool(m._shape_idx[i])
            t = self._terms(i, x, order if has_shape else 0)
            s = float(t.f @ a)
            grad[yi] += 1.0 - s
            if order >= 2:
                jac[yi] += t.f
            if not has_shape:
                continue
            u = self._adjoint(i, a)
            cross = (t.dv @ u - t.i_a * s) / t.norm  # sum_i a_i D_{N θ}  # type: ignore[operator]
            grad[idx] -= yields[i] * cross
            if order < 2:
                continue
            jac[idx] += yields[i] * t.dg
            hess[yi, idx] -= cross
            hess[idx, yi] -= cross
            ci = cross[:, None] * t.i_a[None, :]  # type: ignore[index]
            second = (t.d2v @ u - ci - ci.T - t.i_ab * s) / t.norm  # type: ignore[operator]
            hess[block] -= yields[i] * second
        if len(self._cidx):
            grad[self._cidx] += (x[self._cidx] - self._cmu) / self._csig**2
        if order >= 2:
            hess += (jac * (a / dens)) @ jac.T
            if len(self._cidx):
                hess[self._cidx, self._cidx] += 1.0 / self._csig**2
            memo["hessian"] = hess
        memo["grad"] = grad
        return grad, hess

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
        hess = _numerical_hessian(self, x, idx, steps)
        hinv = np.linalg.inv(hess)
        return hinv @ ((g * w**2) @ g.T) @ hinv


def _numerical_hessian(f: Callable[[np.ndarray], float], x: np.ndarray, idx: Sequence[int],
                       steps: Sequence[float]) -> np.ndarray:
    n = len(idx)
    hess = np.empty((n, n))
    for a in range(n):
        for b in range(a, n):
            ia, ib, sa, sb = idx[a], idx[b], steps[a], steps[b]
            vals = []
            for da, db in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                xx = x.copy()
                xx[ia] += da * sa
                xx[ib] += db * sb
                vals.append(f(xx))
            hess[a, b] = hess[b, a] = (vals[0] - vals[1] - vals[2] + vals[3]) / (4 * sa * sb)
    return hess


def _trapz_rows(g: np.ndarray, h: float) -> np.ndarray:
    return h * (g.sum(axis=-1) - 0.5 * (g[..., 0] + g[..., -1]))


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
    """:func:`inverse_cdf_piecewise_linear` with the density's :func:`_cdf_table`."""
    u = np.asarray(u, dtype=float)
    if u.size == 0:
        return np.empty(0)
    dens, area, below, dx = table
    total = below[-1]
    if not (total > 0 and math.isfinite(total)):
        msg = "cannot sample a density that is zero or not finite everywhere"
        raise ModelError(msg)
    target = u * total
    cell = np.searchsorted(below[1:], target, side="right")
    np.minimum(cell, len(area) - 1, out=cell)
    area_c = np.take(area, cell)
    w = np.divide(target - np.take(below, cell), area_c, out=np.full(target.shape, 0.5),
                  where=area_c > 0)
    np.maximum(w, 0.0, out=w)
    np.minimum(w, 1.0, out=w)
    a, b = np.take(dens, cell), np.take(dens, cell + 1)
    den = a + np.sqrt(a * a + (b * b - a * a) * w)
    t = np.divide(w * (a + b), den, out=w.copy(), where=den > 0)
    return np.take(grid, cell) + t * np.take(dx, cell)
