"""Build small in-memory result Datasets in the store schema (the record fields of
:mod:`toyengine.study.schema`).

For tests, examples and documentation of the summary layer: it lets a Dataset be made from
plain numpy arrays without running a study. The layout follows the result-store schema
(dims variant, toy, hypothesis, param, chunk; one chunk per variant).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import xarray as xr

from ..core.status import FitStatus
from ..study.schema import empty_records, study_fields
from ._common import SummaryError

__all__ = ["make_results_dataset"]


def _arr(x: np.ndarray | None, shape: tuple[int, ...], fill: float, name: str) -> np.ndarray:
    if x is None:
        return np.full(shape, fill, dtype=float)
    a = np.asarray(x, dtype=float)
    if a.shape != shape:
        msg = f"make_results_dataset: {name} has shape {a.shape}, expected {shape}"
        raise SummaryError(msg)
    return a


def make_results_dataset(
    *,
    params: Sequence[str],
    hypotheses: Sequence[str],
    value: np.ndarray,
    error: np.ndarray | None = None,
    nll: np.ndarray | None = None,
    valid: np.ndarray | None = None,
    status: np.ndarray | None = None,
    minos_lower: np.ndarray | None = None,
    minos_upper: np.ndarray | None = None,
    truth: np.ndarray | None = None,
    reference: np.ndarray | None = None,
    variant_names: Sequence[str] | None = None,
    variant_groups: Sequence[str] | None = None,
    variant_separate: Sequence[bool] | None = None,
    kind: str = "pulls",
    h0: str = "",
    h1: str = "",
    ndof_wilks: int = -1,
    observed_t: float = math.nan,
    poi: str = "",
    study_name: str = "synthetic",
    paired: bool = False,
) -> xr.Dataset:
    """Assemble a results Dataset from arrays.

    Parameters
    ----------
    params, hypotheses : sequence of str
        Coordinates.
    value : ndarray (variant, toy, hypothesis, param)
        Fitted values (NaN where absent).
    error, minos_lower, minos_upper : ndarray, optional
        Same shape as ``value``; default NaN.
    nll : ndarray (variant, toy, hypothesis), optional
        −ln L at the minimum; default 0.
    valid : bool ndarray (variant, toy, hypothesis), optional
        Default: all True (or ``status == 1`` if status is given).
    status : int ndarray, optional
        0 not run, 1 valid, 2 invalid, 3 exception; default from ``valid`` (1 or 2).
    truth : ndarray (variant, param), optional
        Default NaN.
    reference : ndarray (param,), optional
        Default ``truth[0]``.
    variant_names, variant_groups, variant_separate : sequences, optional
        Defaults "v0", "v1", ...; "nominal"; False.
    kind, h0, h1, ndof_wilks, observed_t, poi, study_name
        Dataset attributes.
    paired : bool
        Attribute ``paired`` (toy t of every variant from the same random numbers).
    """
    value = np.asarray(value, dtype=float)
    if value.ndim != 4:
        msg = (
            "make_results_dataset: value must be 4-D (variant, toy, hypothesis, param), "
            f"got shape {value.shape}"
        )
        raise SummaryError(msg)
    nv, nt, nh, npar = value.shape
    if (nh, npar) != (len(hypotheses), len(params)):
        msg = "make_results_dataset: value shape does not match hypotheses/params"
        raise SummaryError(msg)
    shape4 = value.shape
    shape3 = (nv, nt, nh)
    error = _arr(error, shape4, math.nan, "error")
    mlo = _arr(minos_lower, shape4, math.nan, "minos_lower")
    mhi = _arr(minos_upper, shape4, math.nan, "minos_upper")
    nll_a = _arr(nll, shape3, 0.0, "nll")
    if status is None:
        valid_a = np.ones(shape3, bool) if valid is None else np.asarray(valid, bool)
        status_a = np.where(valid_a, FitStatus.VALID, FitStatus.INVALID).astype(np.int8)
    else:
        status_a = np.asarray(status, dtype=np.int8)
        valid_a = ((status_a == FitStatus.VALID) if valid is None
                   else np.asarray(valid, bool) & (status_a != FitStatus.NOT_RUN))
    truth_a = _arr(truth, (nv, npar), math.nan, "truth")
    ref_a = truth_a[0].copy() if reference is None else _arr(reference, (npar,), 0.0, "reference")
    names = list(variant_names) if variant_names is not None else [f"v{i}" for i in range(nv)]
    groups = list(variant_groups) if variant_groups is not None else ["nominal"] * nv
    seps = list(variant_separate) if variant_separate is not None else [False] * nv
    done_toy = (status_a != FitStatus.NOT_RUN).any(axis=2)
    # every field of the record schema (a study without a look-elsewhere scan), at its fill
    # value unless given here
    fields = study_fields()
    records = empty_records(fields, {"hypothesis": nh, "param": npar}, (nv, nt))
    records.update(value=value, error=error, minos_lower=mlo, minos_upper=mhi, nll=nll_a,
                   valid=valid_a, edm=np.zeros(shape3), fit_time=np.zeros(shape3),
                   nfcn=np.zeros(shape3, np.int64), status=status_a,
                   n_best=(status_a != FitStatus.NOT_RUN).astype(np.int64),
                   n_events=np.where(done_toy, 100, -1).astype(np.int64))
    ds = xr.Dataset(
        {
            **{f.name: (("variant", "toy", *f.dims), records[f.name]) for f in fields},
            "truth": (("variant", "param"), truth_a),
            "reference": (("param",), ref_a),
            "chunk_done": (("chunk",), np.ones(nv, bool)),
            "chunk_start": (("chunk",), np.zeros(nv, np.int64)),
            "chunk_stop": (("chunk",), np.full(nv, nt, np.int64)),
            "chunk_variant": (("chunk",), np.arange(nv, dtype=np.int64)),
        },
        coords={
            "variant": np.arange(nv, dtype=np.int64),
            "variant_name": ("variant", np.array(names, dtype=str)),
            "variant_group": ("variant", np.array(groups, dtype=str)),
            "variant_separate": ("variant", np.array(seps, dtype=bool)),
            "toy": np.arange(nt, dtype=np.int64),
            "hypothesis": np.array(list(hypotheses), dtype=str),
            "param": np.array(list(params), dtype=str),
        },
        attrs={
            "format_version": 1,
            "toyengine_version": "0.1.0",
            "study_name": study_name,
            "kind": kind,
            "study_yaml": "",
            "spec_digest": "0" * 64,
            "root_seed": 0,
            "h0": h0,
            "h1": h1,
            "ndof_wilks": int(ndof_wilks),
            "observed_t": float(observed_t),
            "poi": poi,
            "paired": int(paired),
        },
    )
    return ds
