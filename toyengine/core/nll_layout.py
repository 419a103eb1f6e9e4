"""What every unbinned likelihood of one 1-D model shares, whatever its data: which
components are linear or parametric, the rows and parameter indices the compiled likelihood
(:func:`~toyengine.core.model1d_kernels.nll_terms`) reads, the constraint terms, and the
positive polynomials Newton may step in amplitude coordinates
(:func:`~toyengine.core.newton_kernels.amplitude_step`). Built once per model and parameter
set by :meth:`NllLayout.of` for :class:`~toyengine.core.model1d.UnbinnedNLL`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .likelihood import NormalConstraint
from .params import ParameterSet

__all__ = ["NllLayout", "amplitude_blocks", "n_rows"]


@dataclass(frozen=True)
class NllLayout:
    """What every :class:`UnbinnedNLL` of one model shares (its components and parameter
    set, not its data): which components are linear or parametric, the rows and parameter
    indices :func:`~toyengine.core.model1d_kernels.nll_terms` reads, the constraint terms.
    Built once per model and parameter set (:meth:`of`), not once per toy."""

    parameters: ParameterSet
    linear: list[int]
    parametric: list[int]
    basis_cols: list[slice]
    yidx: np.ndarray
    pidx: np.ndarray
    npar: np.ndarray
    zoff: list[np.ndarray]
    constraint: NormalConstraint
    has_grad: bool
    has_hessian: bool
    amplitudes: tuple[np.ndarray, np.ndarray] | None

    @classmethod
    def of(cls, model: Any) -> NllLayout:
        """The layout of ``model`` with its current parameter set (kept on the model)."""
        lay = model.__dict__.get("_nll_layout")
        if lay is not None and lay.parameters is model.parameters:
            return lay
        linear = [i for i, b in enumerate(model._basis_grid) if b is not None]
        parametric = [i for i, b in enumerate(model._basis_grid) if b is None]
        edges = [0]
        for i in linear:
            edges.append(edges[-1] + len(model._basis_grid[i]))  # type: ignore[arg-type]
        npar = np.array([len(s) for s in model._shape_idx], dtype=np.int64)
        zoff = []
        for order in range(3):
            # where each component's rows start among the kernel's rows at ``order``: the
            # parametric components' grid rows, then the linear components' rows
            z = np.zeros(len(model.components), dtype=np.int64)
            start = 0
            for i in parametric + linear:
                z[i] = start
                start += n_rows(int(npar[i]), order)
            zoff.append(z)
        has_grad = model.supports_gradient()
        lay = cls(model.parameters, linear, parametric,
                  [slice(a, b) for a, b in itertools.pairwise(edges)],
                  np.asarray(model._yield_idx, dtype=np.int64),
                  np.array([j for s in model._shape_idx for j in s], dtype=np.int64), npar,
                  zoff, NormalConstraint.from_parameters(model.parameters), has_grad,
                  has_grad and model.supports_hessian(), amplitude_blocks(model, linear))
        model.__dict__["_nll_layout"] = lay
        return lay


def amplitude_blocks(model: Any, linear: Sequence[int]
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """The positive polynomials (linear shapes with ``coefficients_on_sphere``) whose yield
    and angles no other component reads, for :func:`toyengine.core.newton.minimize`'s steps
    in amplitude coordinates: per polynomial the parameter indices of its yield and angles
    (padded with -1) and its basis integrals over the range (``None`` without any)."""
    uses = np.bincount(np.concatenate([model._yield_idx, *map(np.asarray, model._shape_idx)]
                                      ).astype(np.int64), minlength=len(model.parameters))
    found = []
    for i in linear:
        angles = model._shape_idx[i]
        own = (model._yield_idx[i], *angles)
        if (getattr(model.components[i].shape, "coefficients_on_sphere", False) and angles
                and all(uses[j] == 1 for j in own)):
            found.append((own, model._basis_int[i]))
    if not found:
        return None
    width = max(len(own) for own, _ in found)
    blocks = np.full((len(found), width), -1, dtype=np.int64)
    integrals = np.zeros((len(found), width))
    for b, (own, integ) in enumerate(found):
        blocks[b, :len(own)] = own
        integrals[b, :len(own)] = integ
    return blocks, integrals


def n_rows(p: int, order: int) -> int:
    """Rows of a component with ``p`` shape parameters up to ``order``: the value, ``p``
    first derivatives, ``p (p + 1) / 2`` second derivatives."""
    return 1 + (p if order >= 1 else 0) + (p * (p + 1) // 2 if order >= 2 else 0)
