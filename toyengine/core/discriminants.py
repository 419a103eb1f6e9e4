"""Discriminating observables of a 1-D model, for sPlot-weighted fits.

An analysis that subtracts a background with the sPlot technique (Pivk & Le Diberder, Nucl.
Instrum. Meth. A 555 (2005) 356) measures, besides the fitted observable x, discriminating
observables m (for T_cc⁺ → D⁰D⁰π⁺: the masses of the two D⁰ candidates, LHCb, Nature Physics
18 (2022) 751, Methods). Each event belongs to a *species*: species 0 is the model's own
components (signal and background of x, all with genuine D⁰ mesons), the others are the
backgrounds that the sWeights subtract (fake D⁰ candidates). A species has a fixed density
in every discriminant and, for the subtracted ones, a fixed density in x and an expected
count. The generator draws each event's discriminants from its species' densities,
independently of x: that factorisation is what makes the sWeighted x distribution of species
0 unbiased (Dembinski, Kenzie, Langenbruch & Schmelling, Nucl. Instrum. Meth. A 1040 (2022)
167270, Sect. 2).

Per toy the analysis is then (:meth:`Discriminants.sweights`): the extended fit of the species'
yields to the discriminants with the shapes known (:func:`~toyengine.core.sweights.fit_yields`),
classic sWeights of species 0 (:func:`~toyengine.core.sweights.splot`) — or, as an option, custom
orthogonal weight functions with a uniform variance function, which need no fit
(:func:`~toyengine.core.sweights.cows`) — and the weighted fit
of x (:class:`~toyengine.core.model1d.UnbinnedNLL` with those weights), whose asymptotically
correct covariance is :func:`sweighted_covariance` (Langenbruch, Eur. Phys. J. C 82 (2022)
393).

Checking the independence a user's data must have: within each species, x and m must be
independent (and the discriminants of one species independent of each other where the
densities are written as a product). A :class:`DiscriminatedSample` keeps the species of
every generated event, so the generated toys can be checked directly
(:func:`independence_check`: the correlation of x with each discriminant within each
species); on data the usual check is that the sWeighted x distribution does not change when
the discriminant range is narrowed, or a Kendall-τ test of x against m in a background-only
sideband (Dembinski et al., Sect. 4).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ModelError
from .likelihood import as_likelihood, finite_difference_hessian
from .sweights import SPlot, WeightedCovariance, cows, fit_yields, splot, weighted_covariance

__all__ = [
    "Density1D",
    "Discriminants",
    "DiscriminatedSample",
    "Species",
    "independence_check",
    "sweighted_covariance",
]


@dataclass(frozen=True)
class Density1D:
    """A fixed normalised density on ``[grid[0], grid[-1]]``: the piecewise-linear interpolant
    of ``dens`` (trapezoid integral 1). Sampled exactly by inverse CDF, so generated events
    and the sPlot fit see the same density."""

    grid: np.ndarray
    dens: np.ndarray

    @classmethod
    def of(cls, f: Callable[[np.ndarray], np.ndarray], lo: float, hi: float,
           n: int = 4001) -> Density1D:
        """``f`` tabulated on ``n`` nodes of ``[lo, hi]`` and normalised."""
        grid = np.linspace(lo, hi, n)
        dens = np.maximum(np.asarray(f(grid), dtype=float), 0.0)
        norm = float(np.sum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid)))
        if not (norm > 0 and math.isfinite(norm)):
            msg = f"a discriminant density is zero or not finite on [{lo}, {hi}]"
            raise ModelError(msg)
        return cls(grid, dens / norm)

    def __call__(self, m: np.ndarray) -> np.ndarray:
        m = np.asarray(m, dtype=float)
        inside = (m >= self.grid[0]) & (m <= self.grid[-1])
        return np.where(inside, np.interp(m, self.grid, self.dens), 0.0)

    def sample(self, u: np.ndarray) -> np.ndarray:
        """The inverse CDF at uniforms ``u``."""
        from .piecewise import inverse_cdf_piecewise_linear

        return inverse_cdf_piecewise_linear(self.grid, self.dens, u)


@dataclass(frozen=True)
class Species:
    """One species of events: its density in each discriminant and, for a subtracted
    species, its expected count and its normalised density in x on the model's grid
    (``x_density``; None for species 0, whose x density is the model's)."""

    name: str
    shapes: tuple[Density1D, ...]
    expected: float = 0.0
    x_density: np.ndarray | None = None


@dataclass(frozen=True)
class Discriminants:
    """The discriminating observables of a model and its species (see the module doc).

    Attributes
    ----------
    names : tuple of str
        The discriminants' names (with ``ranges`` and ``units``).
    species : tuple of Species
        Species 0 is the model's own components; the others are subtracted by sWeights.
    method : str
        ``"splot"`` (classic sWeights at the yields fitted per toy; default) or ``"cows"``
        (custom orthogonal weight functions with I(m) = 1: fixed functions of m,
        Dembinski et al., Nucl. Instrum. Meth. A 1040 (2022) 167270, Sect. 3).
    """

    names: tuple[str, ...]
    ranges: tuple[tuple[float, float], ...]
    units: tuple[str, ...]
    species: tuple[Species, ...]
    method: str = "splot"

    def __post_init__(self) -> None:
        d = len(self.names)
        if len(self.species) < 2:
            msg = "discriminants need at least two species (the model's and one subtracted)"
            raise ModelError(msg)
        for s in self.species:
            if len(s.shapes) != d:
                msg = f"species {s.name!r} has {len(s.shapes)} discriminant shapes, need {d}"
                raise ModelError(msg)
        if self.method not in ("splot", "cows"):
            msg = f"sWeights method must be 'splot' or 'cows', got {self.method!r}"
            raise ModelError(msg)

    def densities(self, m: np.ndarray) -> np.ndarray:
        """g_k(m_e) of every species, shape ``(n_events, n_species)``: the product of its
        discriminant densities."""
        m = np.atleast_2d(np.asarray(m, dtype=float))
        cols = []
        for s in self.species:
            g = np.ones(m.shape[0])
            for j, shape in enumerate(s.shapes):
                g = g * shape(m[:, j])
            cols.append(g)
        return np.stack(cols, axis=1)

    def sweights(self, m: np.ndarray) -> SPlot:
        """The weights of every species for the discriminants ``m``: classic sWeights at the
        yields of the extended fit to ``m`` (shapes known), or the COWs of
        :meth:`cow_matrix` (``method``)."""
        g = self.densities(m)
        if self.method == "cows":
            return cows(g, self.cow_matrix)
        yields, _ = fit_yields(g)
        return splot(g, yields)

    @functools.cached_property
    def cow_matrix(self) -> np.ndarray:
        """W_kl = ∫ g_k g_l dm over the discriminants' box (I(m) = 1): the product over the
        discriminants of the one-dimensional integrals, each exact for the piecewise-linear
        densities (on the union of their grids)."""
        k = len(self.species)
        w = np.ones((k, k))
        for a in range(k):
            for b in range(a + 1):
                for j in range(len(self.names)):
                    w[a, b] *= _product_integral(self.species[a].shapes[j],
                                                 self.species[b].shapes[j])
                w[b, a] = w[a, b]
        return w


def _product_integral(a: Density1D, b: Density1D) -> float:
    """∫ a(m) b(m) dm of two piecewise-linear densities: on the union of their nodes both
    are linear in every interval, where ∫ = h (2 a₀b₀ + a₀b₁ + a₁b₀ + 2 a₁b₁) / 6."""
    lo, hi = max(a.grid[0], b.grid[0]), min(a.grid[-1], b.grid[-1])
    if not lo < hi:
        return 0.0
    x = np.union1d(a.grid, b.grid)
    x = x[(x >= lo) & (x <= hi)]
    fa, fb = a(x), b(x)
    h = np.diff(x)
    return float(np.sum(h * (2 * fa[:-1] * fb[:-1] + fa[:-1] * fb[1:] + fa[1:] * fb[:-1]
                             + 2 * fa[1:] * fb[1:])) / 6.0)


@dataclass(frozen=True)
class DiscriminatedSample:
    """A toy with discriminants: the fitted observable ``x``, the discriminants ``m``
    (``(n_events, n_discriminants)``) and the species each event was generated from
    (``species``; −1 for data of unknown origin)."""

    x: np.ndarray
    m: np.ndarray
    species: np.ndarray
    _splots: list[tuple[Discriminants, SPlot]] = field(default_factory=list, init=False,
                                                         repr=False, compare=False)

    def sweights(self, discriminants: Discriminants) -> SPlot:
        """``discriminants.sweights(self.m)``, computed once per sample and discriminants:
        the weighted fit, its covariance and the note on a failed fit of one toy use the
        same weights (and the yield fit of the classic sPlot runs once)."""
        for d, sp in self._splots:
            if d is discriminants:
                return sp
        sp = discriminants.sweights(self.m)
        self._splots.append((discriminants, sp))
        return sp

    @property
    def n_events(self) -> int:
        return int(self.x.size)

    def __len__(self) -> int:
        return int(self.x.size)

    def save_npz(self, path: str, weights: np.ndarray | None = None) -> None:
        """Write ``x``, ``m`` and ``species`` to an ``.npz`` file (what ``toyengine data``
        writes for a toy; a model with discriminants loads ``x`` and ``m`` back)."""
        if weights is not None:
            msg = "a sample with discriminants is weighted by its sWeights, not given weights"
            raise ModelError(msg)
        np.savez(path, x=self.x, m=self.m, species=self.species)


def independence_check(sample: DiscriminatedSample) -> dict[tuple[int, int], float]:
    """Pearson correlation of x with each discriminant ``j`` within each species ``k``:
    ``{(k, j): r}``. For independent x and m, r is N(0, 1/n_k) for n_k events of the species:
    ``|r| √n_k`` beyond 3 is a sign that the generator (or the data) violates the sPlot
    assumption."""
    out: dict[tuple[int, int], float] = {}
    for k in np.unique(sample.species):
        sel = sample.species == k
        if sel.sum() < 3:
            continue
        for j in range(sample.m.shape[1]):
            out[(int(k), j)] = float(np.corrcoef(sample.x[sel], sample.m[sel, j])[0, 1])
    return out


def _free_hessian(nll: object, x: np.ndarray, free: Sequence[int]) -> np.ndarray | None:
    lik = as_likelihood(nll)
    if not lik.has_hessian:
        return None
    h = np.asarray(lik.hessian(x), dtype=float)
    return h[np.ix_(free, free)]


def sweighted_covariance(nll: object, nll_w2: object, x: np.ndarray, free: Sequence[int],
                         sp: SPlot, component: int = 0,
                         rel_step: float = 1e-5) -> WeightedCovariance:
    """Covariances of the weighted extended fit of x at its minimum ``x`` (free parameters
    ``free``): naive, sum of weights squared and the asymptotically correct one
    (:func:`toyengine.core.sweights.weighted_covariance`; Langenbruch, Eur. Phys. J. C 82
    (2022) 393).

    Parameters
    ----------
    nll : UnbinnedNLL
        The weighted −ln L that was minimised (weights ``sp.weights[:, component]``); its
        analytic Hessian is H.
    nll_w2 : UnbinnedNLL
        The same likelihood with the weights squared; its Hessian is H₂.
    x : ndarray
        The minimum (full parameter vector).
    free : sequence of int
        Indices of the parameters the covariance is over.
    sp : SPlot
        The sWeights (:meth:`Discriminants.sweights`) of the same events, in the same order.

    Notes
    -----
    The per-event scores ∂ ln D_e/∂θ (D_e = Σ_c N_c f_c(x_e)) are central differences of
    the event densities; the Hessians are the likelihood's analytic ones (central second
    differences with steps 10⁻³ × max(|θ|, 1) where the model has none). The extended
    term Σ N_c is linear in the yields, so H = −Σ w ∂² ln D is the Hessian of the weighted
    −ln L, and its constant part enters the estimating equations only through their
    expectation.
    """
    x = np.asarray(x, dtype=float)
    data = nll.data  # type: ignore[attr-defined]
    if data.size != sp.g.shape[0]:
        msg = (f"the weighted fit has {data.size} events in its range but the sPlot "
               f"{sp.g.shape[0]}: every event must lie inside the fitted range")
        raise ModelError(msg)
    free = list(free)
    params = nll.parameters  # type: ignore[attr-defined]
    scores = np.empty((data.size, len(free)))

    def log_dens(xx: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(nll.event_densities(xx), 1e-300))  # type: ignore[attr-defined]

    for c, j in enumerate(free):
        step = rel_step * max(abs(x[j]), 1.0)
        lo, hi = params[params.names[j]].limits
        # central difference, one-sided within a limit (a width at 0, an angle at π/2)
        a, b = (-step if x[j] - step >= lo else 0.0), (step if x[j] + step <= hi else 0.0)
        xp, xm = x.copy(), x.copy()
        xp[j] += b
        xm[j] += a
        scores[:, c] = (log_dens(xp) - log_dens(xm)) / (b - a)
    steps = [1e2 * rel_step * max(abs(x[j]), 1.0) for j in free]
    h, h2 = (_free_hessian(f, x, free) for f in (nll, nll_w2))
    if h is None:
        h = finite_difference_hessian(nll, x, free, steps)  # type: ignore[arg-type]
    if h2 is None:
        h2 = finite_difference_hessian(nll_w2, x, free, steps)  # type: ignore[arg-type]
    return weighted_covariance(sp.weights[:, component], scores, h, h2, sp=sp,
                               component=component)
