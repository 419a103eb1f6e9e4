"""The likelihood-ratio test statistic of each toy, ``t = Δ(−2 ln L) = 2 (nll[h0] − nll[h1])``.

``nll`` is −ln L at the minimum, so t is positive when h1 describes the data better. For the
Zc significance of LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5, h0 = no Zc and h1 = with
Zc; for a J^P rejection, h0 = the disfavoured J^P (the toys are generated under it) and h1 =
the preferred one.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ._common import SummaryError, check_hypothesis, fit_masks, require_vars

__all__ = ["test_statistic", "variant_index"]


def variant_index(ds: xr.Dataset, variant: int | str) -> int:
    """Position of ``variant`` (an index, or a ``variant_name``) along the variant dim."""
    nv = int(ds.sizes.get("variant", 0))
    if isinstance(variant, str):
        names = [str(v) for v in ds["variant_name"].values] if "variant_name" in ds else []
        if variant not in names:
            msg = f"variant {variant!r} is not a variant_name of the Dataset; allowed: {names}"
            raise SummaryError(msg)
        return names.index(variant)
    v = int(variant)
    if not 0 <= v < nv:
        msg = f"variant={variant!r} is out of range: the Dataset has {nv} variant(s)"
        raise SummaryError(msg)
    return v


def _h0_h1(ds: xr.Dataset, h0: str | None, h1: str | None) -> tuple[str, str]:
    h0 = h0 if h0 else str(ds.attrs.get("h0", "") or "")
    h1 = h1 if h1 else str(ds.attrs.get("h1", "") or "")
    if not h0 or not h1:
        hyps = [str(h) for h in ds["hypothesis"].values]
        msg = (
            "the test statistic needs two hypotheses: the Dataset attrs h0/h1 are empty "
            f"(kind={ds.attrs.get('kind', '?')!r}); pass h0= and h1= from {hyps}"
        )
        raise SummaryError(msg)
    return check_hypothesis(ds, h0), check_hypothesis(ds, h1)


def test_statistic(
    ds: xr.Dataset,
    h0: str | None = None,
    h1: str | None = None,
    *,
    include_failed: bool = False,
) -> xr.DataArray:
    """Per-toy ``t = 2 (nll[h0] − nll[h1]) = Δ(−2 ln L)``.

    LHCb, Eur. Phys. J. C 78 (2018) 1019, Sect. 6.5.

    Parameters
    ----------
    ds : xarray.Dataset
        Results store (schema format_version 1).
    h0, h1 : str, optional
        Hypothesis names; default ``ds.attrs["h0"]``, ``ds.attrs["h1"]``.
    include_failed : bool
        If False (default) t is NaN unless both fits converged (``valid``). If True, fits that
        were attempted but flagged invalid are used when their nll is finite.

    Returns
    -------
    xarray.DataArray
        Dims (variant, toy), named ``"t"``; NaN where either fit is invalid or not done.
    """
    require_vars(ds, ["nll", "valid"], "test_statistic")
    h0, h1 = _h0_h1(ds, h0, h1)
    done, valid = fit_masks(ds)
    ok = done if include_failed else valid
    nll = ds["nll"]
    t = 2.0 * (nll.sel(hypothesis=h0) - nll.sel(hypothesis=h1))
    mask = ok.sel(hypothesis=h0) & ok.sel(hypothesis=h1) & np.isfinite(t)
    t = t.where(mask)
    if "hypothesis" in t.coords:
        t = t.drop_vars("hypothesis")
    t.name = "t"
    t.attrs = {
        "long_name": f"2 (nll[{h0}] - nll[{h1}])",
        "h0": h0,
        "h1": h1,
        "include_failed": int(include_failed),
    }
    return t


# The name starts with "test_": keep pytest from collecting it when a test module imports it.
test_statistic.__test__ = False  # type: ignore[attr-defined]
