"""Extraction: the arrays and labels the summaries need, pulled out of a results Dataset.

The statistics (:mod:`.pvalues`, :mod:`.syststats`, :mod:`.lee`, ...) work on the plain numpy
arrays returned here; the summaries (:mod:`.systematics`, :mod:`.significance`, ...) call
both and hand the numbers to the rendering (:mod:`.tables`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import xarray as xr

from ._common import SummaryError, fit_masks

__all__ = ["degenerate_pairs", "fit_arrays", "fit_variant_names", "table_params",
           "variant_groups", "variant_names", "variant_separate"]


def variant_names(ds: xr.Dataset) -> list[str]:
    """``variant_name`` of every variant (its index where the store has none)."""
    if "variant_name" in ds:
        return [str(x) for x in ds["variant_name"].values]
    return [str(i) for i in range(ds.sizes["variant"])]


def variant_groups(ds: xr.Dataset) -> list[str]:
    """``variant_group`` of every variant (without one: "nominal" for the first variant,
    "variation" for the others)."""
    if "variant_group" in ds:
        return [str(x) for x in ds["variant_group"].values]
    return ["nominal" if i == 0 else "variation" for i in range(ds.sizes["variant"])]


def variant_separate(ds: xr.Dataset) -> list[bool]:
    """``variant_separate`` of every variant (False where the store has none)."""
    if "variant_separate" in ds:
        return [bool(x) for x in ds["variant_separate"].values]
    return [False] * ds.sizes["variant"]


def fit_arrays(
    ds: xr.Dataset, hyp: str, params: Sequence[str], include_failed: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ok, done, valid, vals)`` of hypothesis ``hyp``: the fits used ``ok[v, t]`` (the valid
    ones, or every attempted one with ``include_failed``), the attempted and the valid fits
    ``[v, t]`` and the fitted values ``vals[v, t, p]`` of ``params``."""
    done, valid = fit_masks(ds)
    ok = (done if include_failed else valid).sel(hypothesis=hyp)
    ok = ok.transpose("variant", "toy").values
    donev = done.sel(hypothesis=hyp).transpose("variant", "toy").values
    validv = valid.sel(hypothesis=hyp).transpose("variant", "toy").values
    vals = ds["value"].sel(hypothesis=hyp, param=params).transpose("variant", "toy", "param").values
    return ok, donev, validv, vals


def degenerate_pairs(ds: xr.Dataset) -> dict[str, str]:
    """Variant name → the variant whose generator density it equals (store attribute
    ``degenerate_variants``; the first partner of each)."""
    same_as: dict[str, str] = {}
    raw_deg = ds.attrs.get("degenerate_variants", "")
    if raw_deg:
        for a_name, b_name in json.loads(raw_deg):
            same_as.setdefault(str(a_name), str(b_name))
    return same_as


def fit_variant_names(ds: xr.Dataset) -> set[str]:
    """Names of the variants whose models fit the nominal toys (store attribute
    ``fit_variants``)."""
    return {str(n) for n in json.loads(ds.attrs.get("fit_variants", "") or "[]")}


def table_params(
    ds: xr.Dataset, params: Sequence[str] | str | None, hyp: str, caller: str
) -> list[str]:
    """The parameters (columns) of a table: ``params`` checked against the Dataset; by default
    ``attrs["poi"]``, else every parameter with a finite reference that ``hyp`` fits."""
    all_params = [str(p) for p in ds["param"].values]
    if params is None:
        poi = str(ds.attrs.get("poi", "") or "").split()
        if poi:
            params = poi
        else:
            ref = ds["reference"]
            vals = ds["value"].sel(hypothesis=hyp)
            present = np.isfinite(vals).any(dim=("variant", "toy"))
            params = [
                p
                for p in all_params
                if np.isfinite(float(ref.sel(param=p))) and bool(present.sel(param=p))
            ]
    elif isinstance(params, str):
        params = params.split()
    params = list(params)
    for p in params:
        if p not in all_params:
            msg = f"{caller}: param {p!r} is not in the Dataset; allowed: {all_params}"
            raise SummaryError(msg)
    if not params:
        msg = f"{caller}: no parameters to tabulate (pass params=[...])"
        raise SummaryError(msg)
    return params
