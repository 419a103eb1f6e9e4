"""Spread of the data-fit test statistic over the variants of a fixed-data variation study
(template smearing, parameter variation): LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 7."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from ..study.kinds import kind_info
from ._common import attr_float, fit_masks, fmt_num, jsonable
from .pvalues import chi2_pvalue, p_to_z
from .tables import Cell, Table
from .teststat import test_statistic

__all__ = ["SpreadSummary", "variant_significance"]


@dataclass(frozen=True)
class SpreadSummary:
    """Spread of the data-fit t over variants (template smearing / parameter variation).

    LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 7: about 300 bin-fluctuated background
    histograms give a Gaussian Δ(−2 ln L) distribution; the "most pessimistic"
    parametrisation is the one ``n_sigma`` = 3 standard deviations below its mean, and the
    significance is recomputed with it (3.4σ for the Zc, its Table 5).
    Significances here use χ²(ndof_wilks), two-sided.
    """

    h0: str
    h1: str
    ndof_wilks: float
    n_values: int
    n_done: int
    n_failed: int
    failed_fraction: float
    t_mean: float
    t_std: float
    t_min: float
    t_max: float
    n_sigma: float
    t_pessimistic: float
    z_mean: float
    z_min: float
    z_pessimistic: float
    nominal_t: float
    nominal_z: float
    per_variant: tuple[tuple[str, str, float, float], ...] = field(default=())

    def __repr__(self) -> str:
        return "\n".join(t.to_text() for t in self.tables())

    def _repr_html_(self) -> str:
        return "\n".join(t.to_html() for t in self.tables())

    def tables(self) -> list[Table]:
        """One key-value table."""
        rows = [
            ("hypotheses", f"h0={self.h0}, h1={self.h1}", ""),
            ("values used / done", f"{self.n_values} / {self.n_done}", self.n_values),
            ("failed fits", str(self.n_failed), self.n_failed),
            ("failed-fit fraction", fmt_num(self.failed_fraction), self.failed_fraction),
            ("Wilks ndof", fmt_num(self.ndof_wilks), self.ndof_wilks),
            (
                "nominal t (Z)",
                f"{fmt_num(self.nominal_t)} ({fmt_num(self.nominal_z)}σ)",
                self.nominal_t,
            ),
            ("mean ± std of t", f"{fmt_num(self.t_mean)} ± {fmt_num(self.t_std)}", self.t_mean),
            ("min / max of t", f"{fmt_num(self.t_min)} / {fmt_num(self.t_max)}", self.t_min),
            ("Z at mean t", fmt_num(self.z_mean), self.z_mean),
            ("Z at min t", fmt_num(self.z_min), self.z_min),
            (
                f"pessimistic t (mean − {fmt_num(self.n_sigma)} std), Z",
                f"{fmt_num(self.t_pessimistic)}, {fmt_num(self.z_pessimistic)}σ",
                self.t_pessimistic,
            ),
        ]
        return [
            Table(
                title="Significance spread over variants (Z two-sided from Wilks χ²)",
                headers=(Cell.of("quantity"), Cell.of("value")),
                rows=tuple((Cell.of(a), Cell.of(b)) for a, b, _ in rows),
                csv_header=("quantity", "value"),
                csv_rows=tuple((a, v if v != "" else b) for a, b, v in rows),
                align="ll",
            )
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible dict."""
        return jsonable(self)  # type: ignore[no-any-return]


def variant_significance(
    ds: xr.Dataset, *, n_sigma: float = 3.0, include_failed: bool = False
) -> SpreadSummary:
    """Distribution of t over the variants (and toys) of a fixed-data variation study.

    See :class:`SpreadSummary`. The nominal t is taken from the variant whose
    ``variant_group`` is ``"nominal"`` (NaN if none). Significances use ``ndof_wilks``.
    """
    t = test_statistic(ds, include_failed=include_failed)
    done, _ = fit_masks(ds)
    h0, h1 = t.attrs["h0"], t.attrs["h1"]
    both = np.asarray((done.sel(hypothesis=h0) & done.sel(hypothesis=h1)).values, bool)
    tv = np.asarray(t.values, float)
    vals = tv[np.isfinite(tv)]
    n_done = int(both.sum())
    ndof = attr_float(ds, "ndof_wilks")
    if not ndof > 0:
        ndof = 1.0 if not kind_info(ds.attrs.get("kind", "")).nested else math.nan

    def z(x: float) -> float:
        if not (math.isfinite(x) and math.isfinite(ndof)):
            return math.nan
        return float(p_to_z(chi2_pvalue(x, ndof), "two"))

    groups = (
        [str(g) for g in ds["variant_group"].values]
        if "variant_group" in ds
        else [""] * t.sizes["variant"]
    )
    names = (
        [str(g) for g in ds["variant_name"].values]
        if "variant_name" in ds
        else [str(i) for i in range(t.sizes["variant"])]
    )
    per_variant = []
    nominal_t = math.nan
    for i in range(t.sizes["variant"]):
        row = tv[i][np.isfinite(tv[i])]
        ti = float(np.mean(row)) if row.size else math.nan
        per_variant.append((names[i], groups[i], ti, z(ti)))
        if groups[i].lower() == "nominal" and math.isnan(nominal_t):
            nominal_t = ti
    n = int(vals.size)
    mean = float(np.mean(vals)) if n else math.nan
    std = float(np.std(vals, ddof=1)) if n > 1 else math.nan
    pess = mean - n_sigma * std
    return SpreadSummary(
        h0=h0,
        h1=h1,
        ndof_wilks=ndof,
        n_values=n,
        n_done=n_done,
        n_failed=n_done - n,
        failed_fraction=(n_done - n) / n_done if n_done else math.nan,
        t_mean=mean,
        t_std=std,
        t_min=float(np.min(vals)) if n else math.nan,
        t_max=float(np.max(vals)) if n else math.nan,
        n_sigma=float(n_sigma),
        t_pessimistic=pess,
        z_mean=z(mean),
        z_min=z(float(np.min(vals))) if n else math.nan,
        z_pessimistic=z(pess),
        nominal_t=nominal_t,
        nominal_z=z(nominal_t),
        per_variant=tuple(per_variant),
    )
