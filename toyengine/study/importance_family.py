"""A continuous family of injected signals for importance-sampled significance toys
(``importance.family``): the toys of the injected share are generated from the alternative
at a signal drawn afresh for each toy — masses uniform, widths with density ∝ 1/Γ², the
complex coupling with a uniform phase and a log-normal magnitude around the size that the
study can just see — instead of at K fixed points.

A data set ``x`` then has no tractable density under the proposal (an integral over the
signal), so the toys sample the extended space ``(x, s)`` (Owen, *Monte Carlo theory,
methods and examples* (2013), ch. 9 and 10): under the target a toy is a null data set
``x ~ p_0`` with ``s ~ r(s | x)``, a Gaussian around the alternative's fit of the signal to
``x`` with the inverse Fisher information as covariance; the proposal is the defensive
mixture ``q(x, s) = (1 − a) p_0(x) r(s | x) + a π(s) p_s(x)`` (``r`` folded into the masses'
and widths' limits, where π lives: a null toy whose fit sits on a limit would otherwise
draw half its signals where π is zero, and weigh the most ``1/(1 − a)``). The weight ``p_0 r / q =
1 / ((1 − a) + a e^L)`` with ``L = ln π(s) + ln p_s(x) − ln p_0(x) − ln r(s | x)`` (the
record field ``log_ratio``) is exact for any ``r`` and ``π``; their choice only sets the
variance. With ``r`` at the fit and ``π`` near the Jeffreys density of the signal, ``e^L``
is close to ``e^{t/2}`` times a constant (Laplace), so the weights at a given t scarcely
vary.

The injected states sit where the null's fit to their Asimov data set (Cowan, Cranmer,
Gross, Vitells, Eur. Phys. J. C 71 (2011) 1554) returns the null's generation values (a few
fixed-point steps): the alternative's other parameters move to absorb what the null would
absorb of the signal, and ``ln p_s(x) − ln p_0(x)`` stays close to ``t/2`` minus a
quadratic in the coupling's distance from its fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.fit import fit
from ..core.likelihood import NormalConstraint
from ..errors import ModelError
from ..models.protocol import ToyModel

__all__ = ["SHIFT_STEPS", "SignalFamily"]

#: fixed-point steps that put an injected state's other parameters where the null's fit to
#: its Asimov set returns the null's generation values (on the Z_c(4100)− study the null's
#: gain in −2 ln L from the injected state's Asimov set drops from 3.0–5.9 after the first
#: step to 0.06–1.1 after the third)
SHIFT_STEPS = 3


class SignalFamily:
    """The injected signals of ``importance.family`` for one variant of a study.

    Parameters
    ----------
    model : ToyModel
        The alternative that generates the injected toys (``importance.inject``).
    null : ToyModel
        The model that generates the null toys (``generate``); every one of its parameters
        is a parameter of ``model``.
    settings : mapping
        ``importance.family``: ``masses`` and ``widths`` (parameter names), ``coupling``
        (the real and imaginary parts of the signal's complex coupling), ``strength`` and
        ``spread``.
    """

    def __init__(self, model: ToyModel, null: ToyModel, settings: Mapping[str, Any]) -> None:
        self.model, self.null = model, null
        pset, nset = model.parameters, null.parameters
        names = list(pset.names)
        missing = [n for n in nset.names if n not in pset]
        if missing:
            msg = (f"importance.family: the null model's parameters {missing} are not "
                   f"parameters of the injected model ({', '.join(names)})")
            raise ModelError(msg)
        self.masses = [str(n) for n in settings.get("masses", ())]
        self.widths = [str(n) for n in settings.get("widths", ())]
        self.coupling = [str(n) for n in settings["coupling"]]
        signal = [*self.masses, *self.widths, *self.coupling]
        for n in signal:
            if n not in pset:
                msg = (f"importance.family: {n!r} is not a parameter of the injected model "
                       f"({', '.join(names)})")
                raise ModelError(msg)
            if pset[n].fixed:
                msg = f"importance.family: {n!r} is fixed in the injected model"
                raise ModelError(msg)
        extra = [n for n in names if n not in nset and n not in signal and not pset[n].fixed]
        if extra:
            msg = (f"importance.family: the injected model's free parameters {extra} are "
                   "neither the null's nor the family's (masses, widths, coupling)")
            raise ModelError(msg)
        self._limits = {n: tuple(float(v) for v in pset[n].limits)
                        for n in [*self.masses, *self.widths]}
        for n, (lo, hi) in self._limits.items():
            bad = not (math.isfinite(lo) and math.isfinite(hi) and lo < hi)
            if bad or (n in self.widths and lo <= 0):
                msg = (f"importance.family: {n!r} needs finite limits (a width's lower one "
                       f"> 0) to draw it from; it has [{lo:g}, {hi:g}]")
                raise ModelError(msg)
        self.strength = float(settings["strength"])
        self.spread = float(settings["spread"])
        self.index = np.array([names.index(n) for n in signal])
        self.to_null = np.array([names.index(n) for n in nset.names])
        self.null_values = np.asarray(nset.values, dtype=float)
        self.null_free = np.asarray(nset.free_mask, dtype=float)
        nu0 = np.asarray(pset.values, dtype=float).copy()
        nu0[self.to_null] = self.null_values
        nu0[self.index[-2:]] = 0.0
        self.nu0 = nu0
        self.lo, self.hi = (np.asarray(a, dtype=float) for a in pset.limit_arrays[:2])
        free = np.asarray(pset.free_mask, dtype=bool)
        self.free = np.flatnonzero(free)
        self.nuisances = np.array([i for i in self.free if i not in set(self.index)])
        self._null_start = nset
        self._asimov_nll: Any = None
        self._fisher: dict[bytes, np.ndarray] = {}
        self._values: dict[bytes, np.ndarray] = {}

    # -- the density π(s) of the injected signals -------------------------------------------

    def _coupling_fisher(self, shape: np.ndarray) -> np.ndarray:
        """The 2 × 2 Fisher information of the coupling at zero, the other free parameters
        profiled (Schur complement), on the null's Asimov data set with the signal's masses
        and widths at ``shape``."""
        key = shape.tobytes()
        if key not in self._fisher:
            if self._asimov_nll is None:
                nll = self.model.nll(*self.null.asimov())
                if not getattr(nll, "has_expected_hessian", False):
                    msg = ("importance.family needs a likelihood with the expected (Fisher) "
                           f"information; {type(self.model).__name__}'s has none")
                    raise ModelError(msg)
                self._asimov_nll = nll
            x = self.nu0.copy()
            x[self.index[:-2]] = shape
            h = self._asimov_nll.expected_hessian(x)
            c, n = self.index[-2:], self.nuisances
            b = np.linalg.solve(h[np.ix_(n, n)], h[np.ix_(n, c)]) if n.size else np.zeros((0, 2))
            self._fisher[key] = h[np.ix_(c, c)] - h[np.ix_(c, n)] @ b
        return self._fisher[key]

    def _magnitude(self, shape: np.ndarray, phase: float) -> float:
        """The coupling's magnitude at ``phase`` whose expected −Δ ln L on the null's Asimov
        set (½ cᵀ F c) is ``strength``."""
        u = np.array([math.cos(phase), math.sin(phase)])
        return math.sqrt(2.0 * self.strength / float(u @ self._coupling_fisher(shape) @ u))

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One signal ``s`` (masses, widths, Re and Im of the coupling) from π."""
        shape = []
        for n in self.masses:
            lo, hi = self._limits[n]
            shape.append(lo + (hi - lo) * rng.random())
        for n in self.widths:
            lo, hi = self._limits[n]
            shape.append(1.0 / (1.0 / lo - rng.random() * (1.0 / lo - 1.0 / hi)))
        s = np.asarray(shape, dtype=float)
        phase = 2.0 * math.pi * rng.random()
        rho = self._magnitude(s, phase) * math.exp(self.spread * rng.standard_normal())
        return np.array([*s, rho * math.cos(phase), rho * math.sin(phase)])

    def ln_density(self, s: np.ndarray) -> float:
        """``ln π(s)`` (−inf outside the masses' and widths' limits)."""
        out = 0.0
        k = len(self.masses)
        for j, n in enumerate([*self.masses, *self.widths]):
            lo, hi = self._limits[n]
            if not lo <= s[j] <= hi:
                return -math.inf
            out -= (math.log(hi - lo) if j < k
                    else 2.0 * math.log(s[j]) + math.log(1.0 / lo - 1.0 / hi))
        rho = math.hypot(s[-2], s[-1])
        if rho == 0.0:
            return -math.inf
        phase = math.atan2(s[-1], s[-2]) % (2.0 * math.pi)
        z = (math.log(rho) - math.log(self._magnitude(s[:-2], phase))) / self.spread
        # the coupling in polar form: phase uniform, ln ρ normal; dRe dIm = ρ dρ dφ
        return (out - math.log(2.0 * math.pi) - 0.5 * z * z
                - math.log(self.spread * math.sqrt(2.0 * math.pi)) - 2.0 * math.log(rho))

    # -- the injected state and the weights -------------------------------------------------

    def values(self, s: np.ndarray) -> np.ndarray:
        """The injected model's parameters at signal ``s``: the other parameters where the
        null's fit to this state's Asimov set returns the null's generation values
        (:data:`SHIFT_STEPS` fixed-point steps from the null's values)."""
        s = np.asarray(s, dtype=float)
        key = s.tobytes()
        if key not in self._values:
            x = self.nu0.copy()
            x[self.index] = s
            m = self.to_null
            for _ in range(SHIFT_STEPS):
                res = fit(self.null.nll(*self.model.asimov(x)), self._null_start, hesse=False)
                step = (np.asarray(res.values, dtype=float) - self.null_values) * self.null_free
                x = x.copy()
                x[m] = np.clip(x[m] - step, self.lo[m], self.hi[m])
            self._values[key] = x
        return self._values[key].copy()

    def _around_fit(self, data: Any, fitted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ŝ, L)``: the alternative's fit of the signal to ``data`` and the Cholesky
        factor of its covariance (the inverse expected Hessian of every free parameter at
        the fit, eigenvalues floored at 1e-12 of the largest), the centre and scale of
        ``r(s | x)``."""
        h = self.model.nll(data).expected_hessian(fitted)[np.ix_(self.free, self.free)]
        ev, vec = np.linalg.eigh(0.5 * (h + h.T))
        ev = np.maximum(ev, 1e-12 * max(float(ev.max()), 1e-300))
        pos = [list(self.free).index(i) for i in self.index]
        cov = ((vec / ev) @ vec.T)[np.ix_(pos, pos)]
        return fitted[self.index], np.linalg.cholesky(0.5 * (cov + cov.T))

    def _fold(self, s: np.ndarray) -> np.ndarray:
        """``s`` with each mass and width reflected into its limits (a triangle wave of
        period 2 (hi − lo)), so that ``r`` lives where π does."""
        out = np.array(s, dtype=float)
        for j, n in enumerate([*self.masses, *self.widths]):
            lo, hi = self._limits[n]
            u = (out[j] - lo) % (2.0 * (hi - lo))
            out[j] = lo + (u if u <= hi - lo else 2.0 * (hi - lo) - u)
        return out

    def _ln_r(self, s: np.ndarray, centre: np.ndarray, chol: np.ndarray) -> float:
        """``ln r(s | x)``: the Gaussian N(centre, chol cholᵀ) folded into the limits
        (:meth:`_fold`), summed over the preimages of ``s`` within 12 standard deviations
        of the centre (the fold moves no volume: its Jacobian is 1)."""
        sd = np.sqrt(np.sum(chol * chol, axis=1))
        axes = []
        for j, n in enumerate([*self.masses, *self.widths]):
            lo, hi = self._limits[n]
            period = 2.0 * (hi - lo)
            k = np.arange(math.floor((centre[j] - 12 * sd[j] - hi) / period),
                          math.ceil((centre[j] + 12 * sd[j] - lo) / period) + 1)
            pre = np.concatenate([s[j] + k * period, 2.0 * lo - s[j] + k * period])
            axes.append(pre[np.abs(pre - centre[j]) <= 12 * sd[j]])
        if any(a.size == 0 for a in axes):
            return -math.inf
        grids = np.meshgrid(*axes, indexing="ij")
        pts = np.tile(s, (grids[0].size, 1)) if axes else s[None, :]
        for j, g in enumerate(grids):
            pts[:, j] = g.ravel()
        d = np.linalg.solve(chol, (pts - centre).T)
        lg = -0.5 * np.sum(d * d, axis=0)
        top = float(lg.max())
        return (top + math.log(float(np.sum(np.exp(lg - top))))
                - float(np.sum(np.log(np.diag(chol)))) - 0.5 * s.size * math.log(2.0 * math.pi))

    def log_ratio(self, data: Any, fitted: np.ndarray, s: np.ndarray | None,
                  normal: np.ndarray, l0: float) -> tuple[float, np.ndarray]:
        """``(L, s)`` of one toy: ``L = ln π(s) + ln p_s(x) − ln p_0(x) − ln r(s | x)``.

        Parameters
        ----------
        data
            The toy's data set x.
        fitted : ndarray
            The alternative's fitted values on x (full parameter vector).
        s : ndarray or None
            The signal that generated x (an injected toy), or None for a null toy, whose
            ``s`` is drawn from ``r(s | x)``: ``ŝ + L · normal`` folded into the masses'
            and widths' limits.
        normal : ndarray
            Standard normal draws of the toy's importance stream (used for a null toy).
        l0 : float
            ``ln p_0(x)`` at the null's generation values.
        """
        centre, chol = self._around_fit(data, np.asarray(fitted, dtype=float))
        if s is None:
            s = self._fold(centre + chol @ normal)
        lp = self.ln_density(s)
        if not math.isfinite(lp):
            return -math.inf, s
        x = self.values(s)
        l1 = NormalConstraint.from_parameters(self.model.parameters).add_value(
            -float(self.model.nll(data)(x)), x)
        return lp + l1 - l0 - self._ln_r(s, centre, chol), s
