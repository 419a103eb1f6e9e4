"""One-call summary of a results Dataset: picks the blocks that fit the study kind.

* fit bookkeeping (attempted, failed, not done per variant × hypothesis) — always;
* significance / rejection block when ``attrs["h0"]`` and ``attrs["h1"]`` are set: the toy
  t distribution for ``significance`` / ``jp_rejection`` studies, the spread over variants
  for the fixed-data variation kinds;
* pulls, bias and coverage when any ``truth`` is finite;
* the systematic table for ``model_variation``, ``template_smearing`` and
  ``parameter_variation``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import numpy as np
import xarray as xr

from ._common import SummaryError, fit_masks, fmt_num, jsonable, require_vars
from .pulls import pull_summary
from .significance import TOY_TEST_KINDS, significance_summary, variant_significance
from .systematics import systematic_table
from .tables import Cell, Table

__all__ = ["SYSTEMATIC_KINDS", "failed_summary", "failed_table", "render_summary"]

#: Kinds whose summary includes a systematic table.
SYSTEMATIC_KINDS = ("model_variation", "template_smearing", "parameter_variation")

Format = Literal["text", "markdown", "latex", "csv", "json"]


def failed_summary(ds: xr.Dataset) -> xr.Dataset:
    """Fit bookkeeping per (variant, hypothesis).

    Returns a Dataset with ``n_toys``, ``n_done`` (attempted), ``n_valid``, ``n_failed``
    (attempted, not converged), ``n_invalid`` (status 2: invalid minimum), ``n_error``
    (status 3: exception/NaN), ``n_not_done`` and ``failed_fraction = n_failed / n_done``.
    """
    require_vars(ds, ["valid"], "failed_summary")
    done, valid = fit_masks(ds)
    n_toys = xr.full_like(done.isel(toy=0, drop=True), ds.sizes["toy"], dtype=np.int64)
    n_done = done.sum("toy").astype(np.int64)
    n_valid = valid.sum("toy").astype(np.int64)
    n_failed = (done & ~valid).sum("toy").astype(np.int64)
    out = xr.Dataset(
        {
            "n_toys": n_toys,
            "n_done": n_done,
            "n_valid": n_valid,
            "n_failed": n_failed,
            "n_not_done": (n_toys - n_done).astype(np.int64),
            "failed_fraction": (n_failed / n_done.where(n_done > 0)).astype(float),
        }
    )
    if "status" in ds:
        out["n_invalid"] = (ds["status"] == 2).sum("toy").astype(np.int64)
        out["n_error"] = (ds["status"] == 3).sum("toy").astype(np.int64)
    return out


def failed_table(ds: xr.Dataset, *, max_variants: int = 12) -> Table:
    """:func:`failed_summary` as a display/CSV table.

    With more than ``max_variants`` variants (e.g. 300 smeared templates) the counts are
    summed per ``variant_group`` so the table stays readable; the row label then reads
    ``"<group> (<n> variants)"``.
    """
    fs = failed_summary(ds)
    nv = ds.sizes["variant"]
    names = (
        [str(n) for n in ds["variant_name"].values]
        if "variant_name" in ds
        else [str(i) for i in range(nv)]
    )
    groups = [str(g) for g in ds["variant_group"].values] if "variant_group" in ds else names
    if nv > max_variants:
        order = list(dict.fromkeys(groups))
        members = {g: [v for v in range(nv) if groups[v] == g] for g in order}
        labels = {g: f"{g} ({len(members[g])} variants)" for g in order}
    else:
        members = {str(v): [v] for v in range(nv)}
        labels = {str(v): names[v] for v in range(nv)}
    hyps = [str(h) for h in ds["hypothesis"].values]
    has_status = "n_invalid" in fs
    rows, raw = [], []
    for key, idx in members.items():
        for h in hyps:
            sel = fs.isel(variant=idx).sel(hypothesis=h)
            vals = {k: int(sel[k].sum()) for k in fs.data_vars if k != "failed_fraction"}
            frac = vals["n_failed"] / vals["n_done"] if vals["n_done"] else float("nan")
            ni = vals.get("n_invalid", -1)
            ne = vals.get("n_error", -1)
            rows.append(
                (
                    labels[key],
                    h,
                    str(vals["n_toys"]),
                    str(vals["n_done"]),
                    str(vals["n_failed"]),
                    f"{ni} / {ne}" if has_status else "—",
                    str(vals["n_not_done"]),
                    fmt_num(100 * frac, 3) + "%",
                )
            )
            raw.append(
                (
                    labels[key],
                    h,
                    vals["n_toys"],
                    vals["n_done"],
                    vals["n_failed"],
                    ni,
                    ne,
                    vals["n_not_done"],
                    frac,
                )
            )
    return Table(
        title="Fit bookkeeping",
        headers=tuple(
            Cell.of(h)
            for h in (
                "variant",
                "hypothesis",
                "toys",
                "attempted",
                "failed",
                "invalid / error",
                "not done",
                "failed fraction",
            )
        ),
        rows=tuple(tuple(Cell.of(c) for c in r) for r in rows),
        csv_header=(
            "variant",
            "hypothesis",
            "n_toys",
            "n_done",
            "n_failed",
            "n_invalid",
            "n_error",
            "n_not_done",
            "failed_fraction",
        ),
        csv_rows=tuple(raw),
        notes=("failed = attempted fits that did not converge (status 2 or 3).",),
        align="ll",
    )


def ensemble_table(ds: xr.Dataset) -> Table | None:
    """Mean and RMS of the fitted parameters of interest per variant and hypothesis, over
    converged fits — the shape of seed 002's Table 2 (cross-check ensembles). ``None`` when
    the study names no ``poi`` present in the store."""
    poi = [p for p in str(ds.attrs.get("poi", "")).split() if p in list(ds["param"].values)]
    if not poi:
        return None
    names = [str(n) for n in ds["variant_name"].values]
    rows, raw = [], []
    for v, vname in enumerate(names):
        for h in [str(x) for x in ds["hypothesis"].values]:
            ok = np.asarray(ds["valid"].isel(variant=v).sel(hypothesis=h).values, dtype=bool)
            for p in poi:
                vals = np.asarray(ds["value"].isel(variant=v).sel(hypothesis=h, param=p).values)
                vals = vals[ok & np.isfinite(vals)]
                if vals.size == 0:
                    continue
                mean = float(vals.mean())
                rms = float(vals.std(ddof=1)) if vals.size > 1 else float("nan")
                err = rms / np.sqrt(vals.size) if vals.size > 1 else float("nan")
                rows.append((vname, h, p, str(vals.size), f"{fmt_num(mean, 4)} ± {fmt_num(err, 2)}",
                             fmt_num(rms, 3)))
                raw.append((vname, h, p, int(vals.size), mean, err, rms))
    if not rows:
        return None
    return Table(
        title="Ensembles: mean and RMS of the parameters of interest",
        headers=tuple(Cell.of(c) for c in ("variant", "hypothesis", "param", "n", "mean", "RMS")),
        rows=tuple(tuple(Cell.of(c) for c in r) for r in rows),
        csv_header=("variant", "hypothesis", "param", "n", "mean", "mean_error", "rms"),
        csv_rows=tuple(raw),
        notes=("converged fits only; mean error = RMS/√n.",),
        align="lll",
    )


def gof_table(ds: xr.Dataset) -> Table | None:
    """Toy distribution of the goodness-of-fit statistic (``gof``) and the toy-based p-value
    of the observed value (``observed_t`` attribute, from the study's ``test.observed``):
    the fraction of toys with a larger statistic, with its Clopper–Pearson interval
    (seed 000 §6.4)."""
    if "gof" not in ds or str(ds.attrs.get("kind", "")) != "goodness_of_fit":
        return None
    from .significance import empirical_pvalue

    rows, raw = [], []
    obs = float(ds.attrs.get("observed_t", float("nan")))
    for h in [str(x) for x in ds["hypothesis"].values]:
        g = np.asarray(ds["gof"].isel(variant=0).sel(hypothesis=h).values, dtype=float)
        g = g[np.isfinite(g)]
        if g.size == 0:
            continue
        if np.isfinite(obs):
            ep = empirical_pvalue(g, obs)
            p_txt = f"{fmt_num(ep.p, 3)} [{fmt_num(ep.lo, 2)}, {fmt_num(ep.hi, 2)}]"
            p, lo, hi = ep.p, ep.lo, ep.hi
        else:
            p_txt, p, lo, hi = "—", float("nan"), float("nan"), float("nan")
        rows.append((h, str(g.size), fmt_num(float(g.mean()), 4), fmt_num(float(g.std()), 3),
                     fmt_num(obs, 4) if np.isfinite(obs) else "—", p_txt))
        raw.append((h, int(g.size), float(g.mean()), float(g.std()), obs, p, lo, hi))
    if not rows:
        return None
    return Table(
        title="Goodness of fit: toy distribution of the statistic",
        headers=tuple(Cell.of(c) for c in ("hypothesis", "toys", "mean", "std", "observed",
                                            "p (toys, CP 68%)")),
        rows=tuple(tuple(Cell.of(c) for c in r) for r in rows),
        csv_header=("hypothesis", "n", "mean", "std", "observed", "p", "p_lo", "p_hi"),
        csv_rows=tuple(raw),
        notes=("p = fraction of toys whose statistic exceeds the observed one.",),
        align="l",
    )


def variation_significance_table(ds: xr.Dataset) -> Table | None:
    """Significance (or J^P rejection) per systematic variation, shaped like seed 000's
    Tables 5 and 6: one row per variant group, t = 2(nll_h0 − nll_h1) on the fixed data set
    and Z = Φ⁻¹(1 − p/2) with p from χ²(``ndof_wilks``) (the papers' two-sided convention).
    Groups of random variants (smeared templates, parameter draws) show the mean t, its Z and
    the lowest Z. Only for kinds that refit one data set per variant."""
    from scipy import stats

    from .significance import test_statistic

    h0, h1 = str(ds.attrs.get("h0", "") or ""), str(ds.attrs.get("h1", "") or "")
    kind = str(ds.attrs.get("kind", ""))
    if not (h0 and h1) or kind not in ("template_smearing", "parameter_variation"):
        return None
    ndof = int(ds.attrs.get("ndof_wilks", -1))
    ndof = ndof if ndof > 0 else 1
    t = np.asarray(test_statistic(ds, h0, h1).values, dtype=float)  # (variant, toy)
    finite = np.isfinite(t)
    n_ok = finite.sum(axis=1)
    t_var = np.where(n_ok > 0, np.where(finite, t, 0.0).sum(axis=1) / np.maximum(n_ok, 1),
                     np.nan)  # mean over toys of the valid t (NaN if none)

    def z_of(x: float) -> float:
        return float(stats.norm.isf(stats.chi2.sf(max(x, 0.0), ndof) / 2)) if np.isfinite(x) \
            else float("nan")

    groups = [str(g) for g in ds["variant_group"].values]
    rows, raw = [], []
    for g in dict.fromkeys(groups):
        idx = [i for i, gg in enumerate(groups) if gg == g]
        vals = t_var[idx]
        vals = vals[np.isfinite(vals)]
        if vals.size == 0:
            rows.append((g, str(len(idx)), "—", "—", "—"))
            raw.append((g, len(idx), float("nan"), float("nan"), float("nan")))
            continue
        mean_t = float(vals.mean())
        z_mean, z_min = z_of(mean_t), z_of(float(vals.min()))
        rows.append((g, str(len(idx)), fmt_num(mean_t, 4), f"{z_mean:.2f}σ",
                     f"{z_min:.2f}σ" if vals.size > 1 else "—"))
        raw.append((g, len(idx), mean_t, z_mean, z_min))
    return Table(
        title=f"Significance per variation (t = 2(nll[{h0}] − nll[{h1}]), χ²({ndof}), two-sided)",
        headers=tuple(Cell.of(c) for c in ("variation", "variants", "t (mean)", "Z", "lowest Z")),
        rows=tuple(tuple(Cell.of(c) for c in r) for r in rows),
        csv_header=("variation", "n_variants", "t_mean", "z", "z_min"),
        csv_rows=tuple(raw),
        notes=("seed 000 Tables 5/6: Z from χ²(ndof) at the refitted data set's t; "
               "failed fits excluded.",),
        align="l",
    )


def _blocks(ds: xr.Dataset) -> tuple[list[Table], dict[str, Any]]:
    kind = str(ds.attrs.get("kind", ""))
    tables: list[Table] = [failed_table(ds)]
    data: dict[str, Any] = {
        "study_name": str(ds.attrs.get("study_name", "")),
        "kind": kind,
        "toyengine_version": str(ds.attrs.get("toyengine_version", "")),
        "spec_digest": str(ds.attrs.get("spec_digest", "")),
        "failed": jsonable(
            {k: np.asarray(v.values).tolist() for k, v in failed_summary(ds).data_vars.items()}
        ),
        "variant_names": [str(n) for n in ds["variant_name"].values]
        if "variant_name" in ds
        else [],
        "hypotheses": [str(h) for h in ds["hypothesis"].values],
    }
    h0 = str(ds.attrs.get("h0", "") or "")
    h1 = str(ds.attrs.get("h1", "") or "")
    if h0 and h1:
        if kind in TOY_TEST_KINDS or ds.sizes["variant"] == 1:
            sums = [significance_summary(ds, v) for v in range(ds.sizes["variant"])]
            for s in sums:
                tables.extend(s.tables())
            data["significance"] = [s.to_dict() for s in sums]
        else:
            sp = variant_significance(ds)
            tables.extend(sp.tables())
            data["significance_spread"] = sp.to_dict()
    if "truth" in ds and bool(np.isfinite(ds["truth"].values).any()):
        pt = pull_summary(ds)
        if pt.rows:
            tables.extend(pt.tables())
        data["pulls"] = pt.to_dict()
    vt = variation_significance_table(ds)
    if vt is not None:
        tables.append(vt)
        data["significance_per_variation"] = [dict(zip(vt.csv_header, r, strict=True))
                                              for r in vt.csv_rows]
    gt = gof_table(ds)
    if gt is not None:
        tables.append(gt)
        data["goodness_of_fit"] = [dict(zip(gt.csv_header, r, strict=True)) for r in gt.csv_rows]
    ens = ensemble_table(ds)
    if ens is not None:
        tables.append(ens)
        data["ensembles"] = [dict(zip(ens.csv_header, r, strict=True)) for r in ens.csv_rows]
    if kind in SYSTEMATIC_KINDS:
        try:
            st = systematic_table(ds)
        except SummaryError:  # no parameter with a reference value: nothing to tabulate
            st = None
        if st is not None:
            tables.extend(st.tables())
            data["systematics"] = st.to_dict()
    return tables, data


def render_summary(ds: xr.Dataset, fmt: Format = "text") -> str:
    """Render the summary blocks that fit ``ds.attrs["kind"]``.

    Parameters
    ----------
    ds : xarray.Dataset
        Results store.
    fmt : {"text", "markdown", "latex", "csv", "json"}
        ``csv``: the tables one after another, each preceded by a ``# title`` line and
        separated by a blank line. ``json``: one object with keys ``study_name``, ``kind``,
        ``failed`` (bookkeeping arrays over variant × hypothesis) and, as applicable,
        ``significance`` (list over variants), ``significance_spread``, ``pulls``,
        ``systematics``; NaN is written as ``null``.

    Returns
    -------
    str
    """
    if fmt not in ("text", "markdown", "md", "latex", "csv", "json"):
        msg = f"render_summary: fmt={fmt!r} must be one of text, markdown, latex, csv, json"
        raise SummaryError(msg)
    tables, data = _blocks(ds)
    if fmt == "json":
        return json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n"
    head = (
        f"toyengine summary: study {data['study_name']!r}, kind {data['kind']!r}"
        f" (toyengine {data['toyengine_version']})"
    )
    if fmt == "csv":
        return "\n".join(f"# {t.title}\n{t.to_csv()}" for t in tables)
    if fmt in ("markdown", "md"):
        return f"# {head}\n\n" + "\n".join(t.to_markdown() for t in tables)
    if fmt == "latex":
        return f"% {head}\n" + "\n".join(t.to_latex() for t in tables)
    return head + "\n\n" + "\n".join(t.to_text() for t in tables)
