"""Shared helpers of the summary layer: errors, dataset access, intervals, number formatting.

Nothing here is public API; the public names are re-exported by :mod:`toyengine.summary`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from ..core.status import FitStatus
from ..errors import MissingDependencyError, SummaryError

__all__ = [
    "MissingDependencyError",
    "SummaryError",
    "clopper_pearson",
    "default_hypothesis",
    "fit_masks",
    "fmt_num",
    "jsonable",
    "require_vars",
]

#: Default confidence level of every interval in this package: the ±1σ Gaussian content.
CL_1SIGMA = 0.682689492137086


def require_vars(ds: xr.Dataset, names: Iterable[str], what: str) -> None:
    """Raise :class:`SummaryError` if ``ds`` lacks any of ``names`` (needed for ``what``)."""
    missing = [n for n in names if n not in ds.variables]
    if missing:
        msg = (
            f"{what} needs the result-store variables {missing}, which the Dataset does not "
            f"have (it has {sorted(map(str, ds.variables))}); is it a toyengine results store "
            "(format_version 1)?"
        )
        raise SummaryError(msg)


def fit_masks(ds: xr.Dataset) -> tuple[xr.DataArray, xr.DataArray]:
    """Return ``(done, valid)`` boolean DataArrays over (variant, toy, hypothesis).

    ``done`` means the fit was attempted (``status != 0``); ``valid`` means it converged
    (``valid`` variable, and done). A failed fit is ``done & ~valid``. If ``status`` is absent,
    a fit counts as done when its ``nll`` is finite or it is flagged valid.
    """
    require_vars(ds, ["valid"], "fit bookkeeping")
    valid = ds["valid"].astype(bool)
    if "status" in ds.variables:
        done = ds["status"] != FitStatus.NOT_RUN
    elif "nll" in ds.variables:
        done = np.isfinite(ds["nll"]) | valid
    else:
        done = valid | True
    return done, valid & done


def default_hypothesis(ds: xr.Dataset) -> str:
    """The hypothesis whose fitted values a summary should use when none is given.

    The alternative hypothesis ``attrs["h1"]`` if set (the model whose parameters of
    interest are measured), else the first hypothesis of the store.
    """
    hyps = [str(h) for h in ds["hypothesis"].values]
    h1 = str(ds.attrs.get("h1", "") or "")
    if h1 and h1 in hyps:
        return h1
    if not hyps:
        msg = "the Dataset has an empty 'hypothesis' dimension; nothing to summarise"
        raise SummaryError(msg)
    return hyps[0]


def check_hypothesis(ds: xr.Dataset, name: str) -> str:
    """Return ``name`` if it is a hypothesis of ``ds``, else raise with the allowed values."""
    hyps = [str(h) for h in ds["hypothesis"].values]
    if name not in hyps:
        msg = f"hypothesis {name!r} is not in the Dataset; allowed values: {hyps}"
        raise SummaryError(msg)
    return name


def clopper_pearson(k: int, n: int, cl: float = CL_1SIGMA) -> tuple[float, float]:
    """Clopper–Pearson (exact binomial) central interval for ``k`` successes out of ``n``.

    Uses the beta-quantile form ``[B(α/2; k, n−k+1), B(1−α/2; k+1, n−k)]`` with
    ``α = 1 − cl``, and the conventions ``lo = 0`` for ``k = 0`` and ``hi = 1`` for ``k = n``
    (C. J. Clopper and E. S. Pearson, Biometrika 26 (1934) 404). Returns ``(nan, nan)`` for
    ``n = 0``.
    """
    if not 0.0 < cl < 1.0:
        msg = f"cl={cl!r}: the confidence level must lie strictly between 0 and 1"
        raise SummaryError(msg)
    k = int(k)
    n = int(n)
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= k <= n:
        msg = f"clopper_pearson: k={k} must lie in [0, n={n}]"
        raise SummaryError(msg)
    alpha = 1.0 - cl
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def fmt_num(x: float, digits: int = 3) -> str:
    """Format a number with ``digits`` significant digits; NaN as ``—``, infinities as ``∞``."""
    if x is None:
        return "—"
    x = float(x)
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    if -4 <= mag < 6:
        decimals = max(digits - 1 - mag, 0)
        return f"{x:.{decimals}f}"
    return f"{x:.{digits - 1}e}"


def fmt_to_scale(x: float, scale: float, digits: int = 3) -> str:
    """Format ``x`` to the decimal place at which ``scale`` (a spread or an error of ``x``)
    has ``digits`` significant digits, so that a mean of 5279.934 next to a truth of 5280
    does not print as ``5280`` twice; :func:`fmt_num` with 4 digits when ``scale`` is not a
    positive finite number."""
    if x is None or scale is None or not math.isfinite(float(x)) or not (
            math.isfinite(float(scale)) and float(scale) > 0):
        return fmt_num(x, 4)
    decimals = max(digits - 1 - math.floor(math.log10(float(scale))), 0)
    if decimals > 12 or abs(float(x)) >= 1e6:
        return fmt_num(x, 4)
    return f"{float(x):.{decimals}f}"


def jsonable(obj: Any) -> Any:
    """Convert dataclass-ish nested structures to JSON-compatible values (NaN/inf → None)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if obj is None or isinstance(obj, str):
        return obj
    if hasattr(obj, "__dataclass_fields__"):
        return {k: jsonable(getattr(obj, k)) for k in obj.__dataclass_fields__}
    return str(obj)


def attr_float(ds: xr.Dataset, name: str) -> float:
    """A numeric attribute as float; ``""``, ``None``, negative ndof markers → NaN."""
    v = ds.attrs.get(name, math.nan)
    if v is None or (isinstance(v, str) and v.strip() == ""):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        msg = f"Dataset attribute {name!r}={v!r} is not a number"
        raise SummaryError(msg) from None
