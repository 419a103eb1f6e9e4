"""Fit parameters: value, limits, fixed flag and an optional Gaussian constraint.

A :class:`ParameterSet` is an ordered, immutable collection that maps to and from the
positional vectors iminuit works with. Models evaluate on *full* value vectors (fixed
parameters included) so that caches can be keyed on plain floats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from ..errors import ModelError

__all__ = ["Constraint", "Parameter", "ParameterSet"]


@dataclass(frozen=True)
class Constraint:
    """Gaussian constraint ``-ln L += (p - mean)^2 / (2 sigma^2)`` on one parameter."""

    mean: float
    sigma: float


@dataclass(frozen=True)
class Parameter:
    """One model parameter.

    Parameters
    ----------
    name : str
        Unique name within a model.
    value : float
        Start (and generation) value.
    limits : tuple of float
        ``(lo, hi)``; use ``-inf``/``inf`` for open sides.
    fixed : bool
        Fixed parameters are not varied by the fitter.
    constraint : Constraint or None
        Optional Gaussian constraint added to the negative log-likelihood.
    step : float or None
        Starting step of the minimiser (and the unit of randomised multi-start offsets).
    unit : str
        Unit of ``value`` (``"MeV"``; ``""`` for yields, angles in radians and other
        dimensionless numbers). Tables and plots print it next to the label.
    is_yield : bool
        An event yield: without an explicit ``step`` its step is the Poisson spread
        ``sqrt(max(|value|, 1))`` of a count of that size.
    label : str
        Display label (Unicode, e.g. ``"δm_BW"``); default the name.
    """

    name: str
    value: float
    limits: tuple[float, float] = (-math.inf, math.inf)
    fixed: bool = False
    constraint: Constraint | None = None
    step: float | None = None
    unit: str = ""
    is_yield: bool = False
    label: str = ""

    @property
    def display(self) -> str:
        """``label [unit]`` (the name if there is no label), e.g. ``"δm_BW [MeV]"``."""
        text = self.label or self.name
        return f"{text} [{self.unit}]" if self.unit else text

    def __post_init__(self) -> None:
        lo, hi = (float(v) for v in self.limits)
        object.__setattr__(self, "limits", (lo, hi))
        object.__setattr__(self, "value", float(self.value))
        if not math.isfinite(self.value):
            msg = f"parameter {self.name!r}: value {self.value} is not finite"
            raise ModelError(msg)
        if not lo < hi:
            msg = f"parameter {self.name!r}: limits {self.limits} are empty (need lo < hi)"
            raise ModelError(msg)
        if not lo <= self.value <= hi:
            msg = f"parameter {self.name!r}: value {self.value} is outside its limits {self.limits}"
            raise ModelError(msg)
        if self.constraint is not None:
            if not (self.constraint.sigma > 0 and math.isfinite(self.constraint.sigma)):
                msg = (
                    f"parameter {self.name!r}: constraint width {self.constraint.sigma} "
                    "must be a positive finite number"
                )
                raise ModelError(msg)

    @property
    def error_guess(self) -> float:
        """A starting step for the minimiser, from the model, never from the limits.

        In order: the explicit ``step``; the constraint width; ``sqrt(max(|value|, 1))`` for
        a yield; else ``max(0.1 |value|, 0.1)``. (A step of 5 % of the limit range made a
        yield with limits (0, 1e7) start anywhere up to 5e6 in a multi-start.)
        """
        if self.step is not None:
            return self.step
        if self.constraint is not None:
            return self.constraint.sigma
        if self.is_yield:
            return math.sqrt(max(abs(self.value), 1.0))
        return max(0.1 * abs(self.value), 0.1)


@dataclass(frozen=True)
class ParameterSet:
    """An ordered set of parameters with unique names."""

    params: tuple[Parameter, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        names = [p.name for p in self.params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            msg = f"duplicate parameter names: {sorted(dup)}"
            raise ModelError(msg)

    def __hash__(self) -> int:
        # the fitter keys its reused Minuit objects on the set: hash the parameters once per
        # process (string hashes differ between processes, so the value is never pickled)
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(self.params)
        return h

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    # --- container protocol -------------------------------------------------------------
    def __iter__(self) -> Iterator[Parameter]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __contains__(self, name: object) -> bool:
        return any(p.name == name for p in self.params)

    def __getitem__(self, name: str) -> Parameter:
        for p in self.params:
            if p.name == name:
                return p
        msg = f"unknown parameter {name!r}; known: {self.names}"
        raise ModelError(msg)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def values(self) -> np.ndarray:
        return np.array([p.value for p in self.params], dtype=float)

    @cached_property
    def free_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if not p.fixed)

    @cached_property
    def free_mask(self) -> np.ndarray:
        """Which parameters are free, as a read-only array (computed once per set: the
        fitter reads it on every fit)."""
        out = np.array([not p.fixed for p in self.params], dtype=bool)
        out.setflags(write=False)
        return out

    @cached_property
    def limit_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lower limits, upper limits and :attr:`Parameter.error_guess` of every parameter
        as read-only arrays (computed once per set: the fitter reads them on every fit)."""
        out = (np.array([p.limits[0] for p in self.params], dtype=float),
               np.array([p.limits[1] for p in self.params], dtype=float),
               np.array([p.error_guess for p in self.params], dtype=float))
        for a in out:
            a.setflags(write=False)
        return out

    @cached_property
    def _indices(self) -> dict[str, int]:
        return {p.name: i for i, p in enumerate(self.params)}

    def index(self, name: str) -> int:
        try:
            return self._indices[name]
        except KeyError:
            msg = f"unknown parameter {name!r}; known: {self.names}"
            raise ModelError(msg) from None

    def as_dict(self) -> dict[str, float]:
        return {p.name: p.value for p in self.params}

    # --- derived sets -------------------------------------------------------------------
    def updated(self, changes: Mapping[str, Mapping[str, object] | float]) -> ParameterSet:
        """A copy with some parameters changed.

        ``changes`` maps names to a new value (float) or to a dict of Parameter fields,
        e.g. ``{"gamma": 0.5, "n_bkg": {"fixed": True}}``.
        """
        unknown = [n for n in changes if n not in self]
        if unknown:
            msg = f"unknown parameter(s) {unknown}; known: {self.names}"
            raise ModelError(msg)
        new = []
        for p in self.params:
            if p.name in changes:
                ch = changes[p.name]
                if isinstance(ch, Mapping):
                    kw = dict(ch)
                    if "constraint" in kw and isinstance(kw["constraint"], Mapping):
                        kw["constraint"] = Constraint(**kw["constraint"])  # type: ignore[arg-type]
                    if "limits" in kw and kw["limits"] is not None:
                        kw["limits"] = tuple(kw["limits"])  # type: ignore[arg-type]
                    p = replace(p, **kw)  # type: ignore[arg-type]
                else:
                    p = replace(p, value=float(ch))
            new.append(p)
        return ParameterSet(tuple(new))

    def with_values(self, values: Iterable[float] | Mapping[str, float]) -> ParameterSet:
        """A copy with new values, clipped into the limits (used for fit start points)."""
        if isinstance(values, Mapping):
            vals = [values.get(p.name, p.value) for p in self.params]
        else:
            vals = list(values)
        out = []
        for p, v in zip(self.params, vals, strict=True):
            lo, hi = p.limits
            out.append(replace(p, value=float(min(max(v, lo), hi))))
        return ParameterSet(tuple(out))

    def constraint_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Indices, means and widths of the Gaussian-constrained parameters."""
        idx, mu, sig = [], [], []
        for i, p in enumerate(self.params):
            if p.constraint is not None:
                idx.append(i)
                mu.append(p.constraint.mean)
                sig.append(p.constraint.sigma)
        return np.array(idx, dtype=int), np.array(mu, dtype=float), np.array(sig, dtype=float)

    # --- iminuit mapping ----------------------------------------------------------------
    def to_minuit(self, minuit: object) -> None:
        """Copy limits, fixed flags and step sizes onto an ``iminuit.Minuit``, by name, for
        the parameters it has (e.g. one built over the free parameters alone)."""
        names = set(minuit.parameters)  # type: ignore[attr-defined]
        for p in self.params:
            if p.name not in names:
                continue
            minuit.limits[p.name] = p.limits  # type: ignore[attr-defined]
            minuit.fixed[p.name] = p.fixed  # type: ignore[attr-defined]
            minuit.errors[p.name] = p.error_guess  # type: ignore[attr-defined]

    def from_minuit(self, minuit: object) -> ParameterSet:
        """A copy whose values are the current values of an ``iminuit.Minuit``."""
        return self.with_values(list(minuit.values))  # type: ignore[attr-defined]
