"""Display labels and units of the parameters of a results Dataset.

The models declare a label and a unit for each parameter (:class:`toyengine.Parameter`);
the store keeps them as the ``param_label`` and ``param_unit`` coordinates. Tables and plots
print ``label [unit]``; values are shown in the unit the model works in (the store's unit),
so a table and the CSV written from it agree number for number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import xarray as xr

if TYPE_CHECKING:
    from .systematics import SystTable

__all__ = ["param_display", "param_label", "param_unit", "with_units"]


def _coord(ds: xr.Dataset, name: str, default: dict[str, str]) -> dict[str, str]:
    params = [str(p) for p in ds["param"].values]
    if name not in ds.coords and name not in ds:
        return {p: default[p] for p in params}
    vals = [str(v) for v in ds[name].values]
    return {p: (v or default[p]) if name == "param_label" else v
            for p, v in zip(params, vals, strict=True)}


def param_label(ds: xr.Dataset) -> dict[str, str]:
    """``{param: label}`` (the name where the store has no label)."""
    return _coord(ds, "param_label", {str(p): str(p) for p in ds["param"].values})


def param_unit(ds: xr.Dataset) -> dict[str, str]:
    """``{param: unit}`` (``""`` for dimensionless parameters or old stores)."""
    return _coord(ds, "param_unit", {str(p): "" for p in ds["param"].values})


def param_display(ds: xr.Dataset) -> dict[str, str]:
    """``{param: "label [unit]"}``, e.g. ``{"delta_m": "δm_BW [MeV]", "n_sig": "N_sig"}``."""
    units = param_unit(ds)
    return {p: f"{lab} [{units[p]}]" if units[p] else lab for p, lab in param_label(ds).items()}


def with_units(ds: xr.Dataset) -> SystTable:
    """:func:`systematic_table` of ``ds`` with the store's parameter units on its labels."""
    from .systematics import systematic_table

    st = systematic_table(ds)
    units = {p: u for p, u in param_unit(ds).items() if u and p in st.params}
    return st.scaled({}, units) if units else st
