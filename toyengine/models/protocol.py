"""The model contract: what a builder returns and what the toy recipe calls.

A model for toyengine is anything that has the members of :class:`ToyModel` — a small,
declared set, in the way iminuit's ``Cost`` is the contract of a function that ``Minuit``
minimises. Three members are the model itself:

``parameters``
    A :class:`~toyengine.core.params.ParameterSet`: names, generation and start values,
    limits, fixed flags, steps, Gaussian constraints, display labels and units. An
    assignable attribute (the study's ``parameters:`` overrides replace it).
``sample(values, rng)``
    One toy generated at the full parameter vector ``values`` (``None``:
    ``parameters.values``), drawing only from ``rng`` (the engine seeds it per toy).
``nll(data)``
    The negative log-likelihood of ``data`` as a function ``f(x) -> float`` of the full
    parameter vector (``f.errordef = 0.5``; optionally ``f.grad`` and ``f.hessian``),
    Gaussian constraint terms included; minimised by :func:`toyengine.core.fit.fit`.

The optional members have their defaults in :class:`ToyModelBase`; derive from it (after
the model's own base class: ``class MyModel(Model1D, ToyModelBase)``) and override what
applies:

``derived_names`` / ``derived(values)``
    Quantities computed from the fitted values and stored next to the parameters (value
    only, error NaN), e.g. the fit fractions of a Dalitz model (LHCb, Eur. Phys. J. C 78
    (2018) 1019). Default: none.
``gof_statistic(data, values)``
    The goodness-of-fit statistic recorded per toy by studies of kind ``goodness_of_fit``.
    Default: NaN.
``load_data(path)``
    The fixed data set of the kinds that refit one (``data:`` in the study). Default: the
    ``x`` array of an ``.npz`` file.
``asimov(values)``
    The Asimov data set at ``values``: ``(data, weights)`` such that
    ``nll(data, weights)`` is the likelihood of the expected data, whose minimum is at
    ``values`` (Cowan, Cranmer, Gross, Vitells, Eur. Phys. J. C 71 (2011) 1554). Used by
    :func:`toyengine.study.recipe.asimov_data` and ``toyengine data --asimov``; not needed
    to run toys. Default: a :class:`~toyengine.errors.ModelError` saying the model has none.
``scan_parameters``
    The parameters that exist only under the alternative hypothesis (the mass and width of
    a new state), whose start values the multi-start spreads over their range and which a
    look-elsewhere scan fixes on a grid (Gross and Vitells, Eur. Phys. J. C 70 (2010) 525).
    Default: none.

:func:`toyengine.study.spec.build_model` refuses a builder result that is not a
:class:`ToyModel` with a :class:`~toyengine.errors.ModelError` naming the missing members
(:func:`missing_members`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..core.params import ParameterSet
from ..errors import ModelError

__all__ = ["REQUIRED_MEMBERS", "ToyModel", "ToyModelBase", "missing_members"]


@runtime_checkable
class ToyModel(Protocol):
    """The members a study needs of a model (see the module documentation)."""

    parameters: ParameterSet
    derived_names: tuple[str, ...]
    scan_parameters: tuple[str, ...]

    def sample(self, values: np.ndarray | None, rng: np.random.Generator) -> Any:
        """One toy data set generated at ``values`` with ``rng``."""
        ...

    def nll(self, data: Any) -> Callable[[np.ndarray], float]:
        """−ln L of ``data`` as a function of the full parameter vector: a
        :class:`toyengine.core.likelihood.Likelihood` (the built-in models), or any callable,
        which the fitter wraps (:func:`toyengine.core.likelihood.as_likelihood`)."""
        ...

    def derived(self, values: np.ndarray) -> np.ndarray:
        """The derived quantities at ``values``, in the order of :attr:`derived_names`."""
        ...

    def gof_statistic(self, data: Any, values: np.ndarray) -> float:
        """The goodness-of-fit statistic of ``data`` at the fitted ``values``."""
        ...

    def load_data(self, path: str | Path) -> Any:
        """The fixed data set stored at ``path``."""
        ...


#: the members a model must define itself (:class:`ToyModelBase` has no default for them)
REQUIRED_MEMBERS = ("parameters", "sample", "nll")


class ToyModelBase:
    """Defaults of the optional :class:`ToyModel` members (mix in after the model class)."""

    #: no derived quantities
    derived_names: tuple[str, ...] = ()
    #: no parameters that exist only under the alternative hypothesis
    scan_parameters: tuple[str, ...] = ()

    def derived(self, values: np.ndarray) -> np.ndarray:
        """No derived quantities: an empty array."""
        return np.empty(0)

    def gof_statistic(self, data: Any, values: np.ndarray) -> float:
        """No goodness-of-fit statistic: NaN."""
        return math.nan

    def load_data(self, path: str | Path) -> Any:
        """The ``x`` array of the ``.npz`` file at ``path``, as float (nothing unpickled).

        A file with a ``weight`` array (an Asimov data set written by ``toyengine data
        --asimov``) is refused: a study's ``data:`` is unweighted."""
        with np.load(path, allow_pickle=False) as f:
            if "weight" in f.files:
                msg = (f"{path}: holds weighted events (an Asimov data set); a study's "
                       "data: file must be unweighted")
                raise ModelError(msg)
            return np.asarray(f["x"], dtype=float)

    def asimov(self, values: np.ndarray | None = None) -> tuple[Any, Any]:
        """No Asimov data set: raises :class:`~toyengine.errors.ModelError`."""
        msg = (f"{type(self).__name__} has no Asimov data set: define asimov(values) "
               "returning (data, weights) for nll(data, weights)")
        raise ModelError(msg)


def _members() -> tuple[str, ...]:
    names = {*ToyModel.__annotations__, *(n for n in vars(ToyModel) if not n.startswith("_"))}
    return tuple(sorted(names))


def missing_members(model: object) -> list[str]:
    """The :class:`ToyModel` members that ``model`` lacks or has in the wrong form (a
    ``parameters`` without ``names``/``values``, a method that is not callable); empty
    when ``model`` is a :class:`ToyModel`."""
    out = []
    for name in _members():
        member = getattr(model, name, None)
        if name == "parameters":
            ok = hasattr(member, "names") and hasattr(member, "values")
        elif name in ("derived_names", "scan_parameters"):
            ok = member is not None and not callable(member)
        else:
            ok = callable(member)
        if not ok:
            out.append(name)
    return out
