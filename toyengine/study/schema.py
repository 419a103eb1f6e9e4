"""The one record schema: what every toy writes into the result store.

Each :class:`Field` has its dimensions after ``(variant, toy)``, a dtype, the fill value of
a toy not yet run, a unit and a meaning. The recipe makes a chunk's arrays with
:func:`empty_records`, the store creates its per-toy variables from the same table, the
synthetic Datasets of :mod:`toyengine.summary.testing` follow it, and ``docs/store-format.md``
shows it (``tests/test_record_schema.py`` checks that the page matches).

A field marked ``machine`` measures the computer, not the toy (``fit_time``): it is the only
per-toy field that differs between two runs of the same study, so "same study + same root
seed ⇒ identical store" holds exactly for every other field. A field with ``requires`` exists
only in the stores of studies that have that feature (``scan_t``: a look-elsewhere scan,
``fit.scan``; ``sampled_from`` and ``log_ratio``: importance sampling, ``importance:``;
``error_naive`` and ``error_sumw2``: models with discriminating observables, fitted to
sWeighted data).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["RECORD_FIELDS", "Field", "empty_records", "field", "machine_fields",
           "study_fields"]


@dataclass(frozen=True)
class Field:
    """One per-toy variable of the store; its full dims are ``("variant", "toy", *dims)``.

    ``unit`` is ``"param"`` where the unit is that of the parameter (the store's
    ``param_unit`` coordinate); ``requires`` names the study feature without which the
    field is absent (``""``: always present).
    """

    name: str
    dims: tuple[str, ...]
    dtype: np.dtype
    fill: float | int | bool
    unit: str
    doc: str
    machine: bool = False
    requires: str = ""


_HP = ("hypothesis", "param")
_H = ("hypothesis",)
_F8, _I8, _I1, _B = np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.int8), np.dtype(bool)
_I2 = np.dtype(np.int16)  # up to 20000 injected components (`importance.points`)

#: every per-toy field, in store order
RECORD_FIELDS: tuple[Field, ...] = (
    Field("value", _HP, _F8, math.nan, "param",
          "fitted value; NaN where the parameter is not in that hypothesis or the toy is not "
          "done"),
    Field("error", _HP, _F8, math.nan, "param",
          "HESSE error, or √diag of the inverse analytic Hessian after a Newton fit (NaN "
          "for fixed parameters); for a fit to sWeighted data the asymptotically correct "
          "error (see `error_naive`)"),
    Field("minos_lower", _HP, _F8, math.nan, "param",
          "signed MINOS lower error (NaN when MINOS was not run or failed for that "
          "parameter); for a fit to sWeighted data scaled by `error` / `error_naive`"),
    Field("minos_upper", _HP, _F8, math.nan, "param",
          "signed MINOS upper error (NaN when MINOS was not run or failed for that "
          "parameter); for a fit to sWeighted data scaled by `error` / `error_naive`"),
    Field("nll", _H, _F8, math.nan, "", "−ln L at the minimum"),
    Field("valid", _H, _B, False, "",
          "converged (MIGRAD valid, or Newton's EDM below tolerance) with a positive-definite "
          "covariance"),
    Field("edm", _H, _F8, math.nan, "", "estimated distance to minimum"),
    Field("nfcn", _H, _I8, 0, "",
          "likelihood calls, all starts (a Newton point counts once for value, gradient and "
          "Hessian)"),
    Field("fit_time", _H, _F8, math.nan, "s", "wall seconds of the fit (all starts)",
          machine=True),
    Field("status", _H, _I1, 0, "",
          "`FitStatus`: 0 not run, 1 valid, 2 invalid minimum, 3 exception (generation or "
          "fit)"),
    Field("fail_reason", _H, _I1, 0, "",
          "`FailReason` of a failed fit: 0 none (valid or not run), 1 generation raised, 2 "
          "likelihood or fitter raised, 3 −ln L not finite, 4 covariance not positive "
          "definite, 5 call limit, 6 EDM above tolerance, 7 other (absent from stores made "
          "before it: read as 0)"),
    Field("gof", _H, _F8, math.nan, "",
          "goodness-of-fit statistic (kind `goodness_of_fit`, models that define one), else "
          "NaN"),
    Field("n_best", _H, _I8, 0, "",
          "starting points of the multi-start that reached the best minimum (within 0.005 in "
          "−ln L; 0 = not fitted)"),
    Field("at_limit", _HP, _B, False, "",
          "the parameter ended within 0.001 steps of a finite limit (free in the fit, or "
          "refitted fixed there); False for parameters not in that hypothesis (absent from "
          "stores of format 3 and before)"),
    Field("covar_ok", _H, _B, False, "",
          "the fit computed its covariance and it is accurate (HESSE's, or the inverse "
          "analytic Hessian of a Newton fit); False with `fit.hesse: false` (absent from "
          "stores of format 3 and before)"),
    Field("n_starts", _H, _I8, 0, "",
          "starting points the multi-start tried (0 = not fitted; absent from stores of "
          "format 3 and before)"),
    Field("global_obs", ("param",), _F8, math.nan, "param",
          "the toy's auxiliary measurement of each Gaussian-constrained parameter (the "
          "constraint mean used in its fits; NaN for unconstrained parameters)"),
    Field("n_events", (), _I8, -1, "", "events in the toy (−1 if not generated)"),
    Field("scan_t", ("scan_point",), _F8, math.nan, "",
          "t = 2(nll_h0 − nll_h1(θ)) with the scan parameters fixed at each grid point θ "
          "(NaN for toys beyond `fit.scan.toys`)", requires="scan"),
    Field("sampled_from", (), _I2, -1, "",
          "mixture component the toy was generated from: 0 the study's `generate` model, k "
          "the k-th model of `importance.inject` or point of `importance.points` (−1 if "
          "not generated; int8 in stores made before points existed)",
          requires="importance"),
    Field("log_ratio", ("injected",), _F8, math.nan, "",
          "ln p_k(data) − ln p_0(data): the toy's log-likelihood under each injected model "
          "(or the injected model at each point) minus that under `generate`, both at their "
          "generation values (extended, constraint terms left out)", requires="importance"),
    Field("error_naive", _HP, _F8, math.nan, "param",
          "the sWeighted fit's naive error √diag H⁻¹ (H the weighted Hessian); `error` "
          "holds the asymptotically correct one (Langenbruch, Eur. Phys. J. C 82 (2022) 393)",
          requires="sweights"),
    Field("error_sumw2", _HP, _F8, math.nan, "param",
          "the sWeighted fit's sum-of-weights-squared error √diag H⁻¹H₂H⁻¹ (H₂ the "
          "w²-weighted Hessian)", requires="sweights"),
)

_BY_NAME = {f.name: f for f in RECORD_FIELDS}


def field(name: str) -> Field:
    """The field called ``name`` (``KeyError`` if there is none)."""
    return _BY_NAME[name]


def machine_fields() -> tuple[str, ...]:
    """Names of the fields that measure the machine (left out of identity checks)."""
    return tuple(f.name for f in RECORD_FIELDS if f.machine)


def study_fields(features: Iterable[str] = ()) -> tuple[Field, ...]:
    """The fields of a study with ``features`` (e.g. ``{"scan"}``), in store order."""
    have = set(features)
    return tuple(f for f in RECORD_FIELDS if not f.requires or f.requires in have)


def empty_records(fields: Iterable[Field], sizes: Mapping[str, int],
                  leading: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Arrays of ``fields`` filled with their fill values.

    ``leading`` is the shape before each field's own dims (``(n_toys,)`` for a chunk,
    ``(n_variants, n_toys)`` for a whole store); ``sizes`` gives the length of each of
    those dims (``hypothesis``, ``param``, ``scan_point``, ``injected``).
    """
    return {f.name: np.full((*leading, *(sizes[d] for d in f.dims)), f.fill, dtype=f.dtype)
            for f in fields}
