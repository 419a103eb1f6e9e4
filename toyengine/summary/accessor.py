"""``Dataset.toys``: summary methods on a results Dataset (registered on import).

xarray's recommended extension mechanism (composition over inheritance; xarray documentation,
"Extending xarray")::

    >>> import toyengine.summary  # registers the accessor
    >>> ds.toys.t()               # doctest: +SKIP
    >>> ds.toys.pvalue(41.4)      # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ._common import CL_1SIGMA, SummaryError, attr_float, fit_masks
from .ndof import Chi2Fit, fit_chi2_ndof
from .pulls import PullTable, pull_summary
from .pvalues import EmpiricalP, empirical_pvalue, p_to_z
from .report import failed_summary, render_summary
from .significance import SignificanceSummary, significance_summary
from .systematics import SystTable, systematic_table
from .teststat import test_statistic, variant_index

__all__ = ["ToysAccessor"]


@xr.register_dataset_accessor("toys")
class ToysAccessor:
    """Summary methods of a toyengine results Dataset (``ds.toys``)."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def _variant(self, variant: int | str | None) -> int:
        if variant is None:
            nv = self._ds.sizes.get("variant", 0)
            if nv != 1:
                msg = f"the Dataset has {nv} variants; pass variant= (index or variant_name)"
                raise SummaryError(msg)
            return 0
        return variant_index(self._ds, variant)

    def t(
        self, h0: str | None = None, h1: str | None = None, *, include_failed: bool = False
    ) -> xr.DataArray:
        """Per-toy test statistic ``2 (nll[h0] − nll[h1])`` (see :func:`test_statistic`)."""
        return test_statistic(self._ds, h0, h1, include_failed=include_failed)

    def pvalue(
        self,
        t_obs: float | None = None,
        *,
        variant: int | str | None = None,
        cl: float = CL_1SIGMA,
        include_failed: bool = False,
    ) -> EmpiricalP:
        """Toy p-value of ``t_obs`` (default ``attrs["observed_t"]``) with a CP interval."""
        if t_obs is None:
            t_obs = attr_float(self._ds, "observed_t")
            if math.isnan(t_obs):
                msg = "attrs['observed_t'] is NaN: pass t_obs= to ds.toys.pvalue()"
                raise SummaryError(msg)
        v = self._variant(variant)
        t = self.t(include_failed=include_failed).isel(variant=v).values
        return empirical_pvalue(t, t_obs, cl)

    def z(self, t_obs: float | None = None, *, sided: str = "two", **kw: Any) -> float:
        """Significance of the toy p-value of ``t_obs`` (``inf`` if no toy exceeds)."""
        return float(p_to_z(self.pvalue(t_obs, **kw).p, sided))  # type: ignore[arg-type]

    def chi2_fit(
        self,
        *,
        variant: int | str | None = None,
        scale: bool = False,
        include_failed: bool = False,
    ) -> Chi2Fit:
        """Fit χ²(ndof) [× scale] to the toy t (see :func:`fit_chi2_ndof`)."""
        v = self._variant(variant)
        return fit_chi2_ndof(self.t(include_failed=include_failed).isel(variant=v).values, scale)

    def significance(self, variant: int | str = 0, **kw: Any) -> SignificanceSummary:
        """:func:`significance_summary` of one variant."""
        return significance_summary(self._ds, variant, **kw)

    def pulls(self, hypothesis: str | None = None, include_failed: bool = False) -> PullTable:
        """:func:`pull_summary`."""
        return pull_summary(self._ds, hypothesis, include_failed)

    def coverage(
        self,
        level: float = CL_1SIGMA,
        *,
        hypothesis: str | None = None,
        include_failed: bool = False,
    ) -> xr.DataArray:
        """HESSE coverage at ``level`` per (variant, hypothesis, param).

        Fraction of toys with ``|x̂ − truth| ≤ z σ̂``, ``z = Φ⁻¹((1 + level)/2)``; NaN where
        there is no truth or no usable toy. The binomial (CP) interval of the ±1σ level is
        in :meth:`pulls`.
        """
        ds = self._ds
        if not 0 < level < 1:
            msg = f"coverage level {level!r} must lie in (0, 1)"
            raise SummaryError(msg)
        z = float(p_to_z(1.0 - level, "two"))
        done, valid = fit_masks(ds)
        ok = done if include_failed else valid
        x, e = ds["value"], ds["error"]
        use = ok & np.isfinite(x) & np.isfinite(e) & (e > 0) & np.isfinite(ds["truth"])
        inside = (np.abs(x - ds["truth"]) <= z * e) & use
        cov = inside.sum("toy") / use.sum("toy").where(use.sum("toy") > 0)
        if hypothesis is not None:
            cov = cov.sel(hypothesis=hypothesis)
        cov.name = "coverage"
        cov.attrs = {"level": level, "z": z}
        return cov

    def systematics(
        self,
        params: Sequence[str] | str | None = None,
        hypothesis: str | None = None,
        **kw: Any,
    ) -> SystTable:
        """:func:`systematic_table`."""
        return systematic_table(self._ds, params, hypothesis, **kw)

    def failed(self) -> xr.Dataset:
        """Fit bookkeeping per (variant, hypothesis): done, failed, not done, fraction."""
        return failed_summary(self._ds)

    def summary(self, fmt: str = "text") -> str:
        """:func:`render_summary`."""
        return render_summary(self._ds, fmt)  # type: ignore[arg-type]

    def plots(self, outdir: str | Path) -> list[Path]:
        """:func:`write_plots` (needs matplotlib)."""
        from .plots import write_plots

        return write_plots(self._ds, outdir)

    def describe_groups(self) -> Mapping[str, list[str]]:
        """variant_group → variant names, in store order."""
        ds = self._ds
        out: dict[str, list[str]] = {}
        for g, n in zip(ds["variant_group"].values, ds["variant_name"].values, strict=True):
            out.setdefault(str(g), []).append(str(n))
        return out
