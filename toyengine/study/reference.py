"""Alternative generators fitted to a reference before generating, and degenerate variants.

LHCb, Nature Physics 18 (2022) 751, Methods ("Systematic uncertainties"): for each
alternative model an ensemble of pseudoexperiments is generated "with parameters obtained
from a fit to the data". Without a data set the reference is the Asimov data set of the
nominal generator (variant 0), and the store says so (attribute ``reference_fit``).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np

from ..core.fit import fit
from ..errors import DegenerateVariantWarning, ModelError
from .spec import StudySpec, Variant, build_model

__all__ = ["DEGENERATE_RTOL", "asimov_reference", "check_degenerate", "degenerate_variants",
           "generator_model"]

#: per-process cache of fitted generators (the fit is deterministic)
_FITTED: dict[tuple[str, int], Any] = {}
_FITTED_MAX = 32


def asimov_reference(model: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The reference of a model-variation study: the Asimov data set of a 1-D model
    (``model.asimov()``: grid nodes and the expected events each carries), or None for
    models without a density grid, whose alternatives generate with their own values."""
    if getattr(model, "density_grid", None) is None or not isinstance(
            getattr(model, "grid", None), np.ndarray):
        return None
    return model.asimov()


def generator_model(spec: StudySpec, variant: Variant) -> Any:
    """The model that generates ``variant``'s toys.

    With ``spec.reference_fit`` (model-variation studies; LHCb, Nature Physics 18 (2022)
    751, Methods: each alternative generates "with parameters obtained from a fit to the
    data"), a variant whose generator differs from the nominal one (variant 0) is first
    fitted to the reference — the Asimov data set of the nominal generator
    (:func:`asimov_reference`), there being no data — and generates with the fitted
    parameters (stored per variant as the store's ``truth``). The nominal generator and
    models without a density grid generate with their own values. Cached per process; the
    fit is deterministic. A reference fit that does not converge is continued once (MIGRAD
    strategy 2 from where it stopped, no HESSE: only the minimum is used); if it still does
    not, the variant is refused (:class:`~toyengine.errors.ModelError` naming it), never
    generated from unconverged values.
    """
    gen = build_model(spec, variant, variant.generate)
    base = spec.variants[0]
    if (not spec.reference_fit or variant.random
            or spec.model_config(variant, variant.generate)
            == spec.model_config(base, base.generate)):
        return gen
    key = (spec.digest, variant.index)
    if key in _FITTED:
        return _FITTED[key]
    ref = asimov_reference(build_model(spec, base, base.generate))
    if ref is None:
        return gen
    nll = gen.nll(ref[0], ref[1])
    res = fit(nll, gen.parameters, strategy=spec.fit["strategy"])
    if not res.valid and all(np.isfinite(res.values)):
        # only the minimum is needed, not errors: a second MIGRAD (strategy 2) from where the
        # first stopped, without HESSE (a flat direction — e.g. two background shapes that
        # the reference cannot tell apart — leaves the covariance singular at a true minimum)
        res = fit(nll, gen.parameters.updated(
            {n: float(x) for n, x in zip(res.names, res.values, strict=True)}),
            strategy=2, hesse=False)
    if not res.valid:
        msg = (f"variant {variant.name!r}: the fit of its generator to the reference did not "
               f"converge ({res.reason.text}); it is not generated from unconverged values — "
               "fix or remove the variant")
        raise ModelError(msg)
    fitted = copy.copy(gen)
    fitted.parameters = gen.parameters.updated(
        {n: float(x) for n, x in zip(res.names, res.values, strict=True)})
    if len(_FITTED) >= _FITTED_MAX:
        _FITTED.pop(next(iter(_FITTED)))
    _FITTED[key] = fitted
    return fitted


#: two generator densities closer than this (relative to the larger maximum) are the same
DEGENERATE_RTOL = 1e-9


def _expected_density(model: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(grid, expected events per unit)`` of a generator model that exposes its density
    on a grid (1-D models), else None."""
    grid = getattr(model, "grid", None)
    dens = getattr(model, "density_grid", None)
    if grid is None or dens is None or not isinstance(grid, np.ndarray):
        return None
    x = model.parameters.values
    yields = x[model._yield_idx] if hasattr(model, "_yield_idx") else np.ones(1)
    return grid, np.asarray(dens(x), dtype=float) * float(np.sum(yields))


def degenerate_variants(spec: StudySpec) -> list[tuple[str, str]]:
    """``(variant, earlier variant)`` pairs whose generator models (after the reference fit,
    :func:`generator_model`) have the same expected density on the model's grid to
    :data:`DEGENERATE_RTOL` (relative to its maximum).

    Such a variant tests nothing: with common random numbers it generates the very data of
    its twin. Random variants, variants that fit the nominal toys with another model
    (``mode: fit``, whose generator is the nominal one by design) and models without a
    density grid (Dalitz models) are not compared.
    """
    seen: list[tuple[str, tuple[np.ndarray, np.ndarray]]] = []
    out: list[tuple[str, str]] = []
    for v in spec.variants:
        if v.random or v.fits_alternative:
            continue
        gd = _expected_density(generator_model(spec, v))
        if gd is None:
            continue
        for name, (g0, d0) in seen:
            if g0.shape == gd[0].shape and np.array_equal(g0, gd[0]):
                scale = max(float(np.max(np.abs(d0))), float(np.max(np.abs(gd[1]))), 1e-300)
                if float(np.max(np.abs(d0 - gd[1]))) <= DEGENERATE_RTOL * scale:
                    out.append((v.name, name))
                    break
        seen.append((v.name, gd))
    return out


def check_degenerate(spec: StudySpec) -> tuple[tuple[str, str], ...]:
    """:func:`degenerate_variants`, each reported as a :class:`DegenerateVariantWarning`
    naming both variants (called before any task starts)."""
    pairs = tuple(degenerate_variants(spec)) if len(spec.variants) > 1 else ()
    for a, b in pairs:
        warnings.warn(f"study {spec.name!r}: variant {a!r} generates the same density as "
                      f"{b!r} (to 1e-9 on the model grid); its shift is zero by construction",
                      DegenerateVariantWarning, stacklevel=2)
    return pairs
