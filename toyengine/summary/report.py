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
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from ..core.status import FitStatus
from ..study.kinds import SECTIONS, kind_info
from ._common import SummaryError, fit_masks, fmt_num, jsonable, require_vars
from .labels import param_display, with_units
from .pulls import pull_summary
from .significance import significance_summary
from .spread import variant_significance
from .tables import Cell, Table

__all__ = ["MAX_FAILED_FRACTION", "SECTIONS", "failed_summary", "failed_table",
           "generating_hypothesis", "render_summary", "summary_tables", "trust_warning"]

Format = Literal["text", "markdown", "latex", "csv", "json", "html"]


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
        out["n_invalid"] = (ds["status"] == FitStatus.INVALID).sum("toy").astype(np.int64)
        out["n_error"] = (ds["status"] == FitStatus.EXCEPTION).sum("toy").astype(np.int64)
    return out


#: failed-fit fraction above which a summary warns in its first line (``--max-failed``)
MAX_FAILED_FRACTION = 0.05


def trust_warning(ds: xr.Dataset, *, max_failed: float = MAX_FAILED_FRACTION,
                  n_used: int | None = None, lost_fraction: float | None = None) -> str:
    """One line saying why a summary's numbers are not (all) a result, or ``""``.

    Warns when every fit of a hypothesis failed (in a variant, or in all of them), when a
    summary uses no toy (``n_used`` = 0, e.g. a significance summary whose t needs both
    fits), and when the failed fraction of all attempted fits exceeds ``max_failed``
    (failed toys are dropped, which biases what remains if failing depends on the data), or
    ``lost_fraction``, the share of done toys a summary could not use (a significance toy
    needs both fits), exceeds it.
    """
    fs = failed_summary(ds)
    names = ([str(n) for n in ds["variant_name"].values] if "variant_name" in ds
             else [str(i) for i in range(ds.sizes["variant"])])
    done = np.asarray(fs["n_done"].transpose("variant", "hypothesis").values)
    failed = np.asarray(fs["n_failed"].transpose("variant", "hypothesis").values)
    hyps = [str(h) for h in fs["hypothesis"].values]
    problems = []
    nothing = n_used == 0
    for j, h in enumerate(hyps):
        d, f = int(done[:, j].sum()), int(failed[:, j].sum())
        if d and f == d:
            problems.append(f"every fit of {h} failed ({f}/{d})")
            nothing = True
            continue
        whole = [names[v] for v in range(len(names)) if done[v, j] and failed[v, j] == done[v, j]]
        if whole:
            more = f" and {len(whole) - 3} more" if len(whole) > 3 else ""
            problems.append(f"every fit of {h} failed in variant(s) {', '.join(whole[:3])}{more}")
    total_d, total_f = int(done.sum()), int(failed.sum())
    if n_used == 0 and total_d:
        problems.append("0 usable toys")
    limit = f"{100 * max_failed:.3g} %"
    if total_d and total_f / total_d > max_failed:
        problems.append(f"{total_f} of {total_d} fits failed "
                        f"({100 * total_f / total_d:.3g} % > {limit})")
    elif lost_fraction is not None and lost_fraction > max_failed and n_used:
        problems.append(f"{100 * lost_fraction:.3g} % of the toys unusable "
                        f"(a fit failed; > {limit})")
    if not problems:
        return ""
    cause = _common_cause(ds)
    return ("WARNING: " + "; ".join(problems) + (f"; most common: {cause}" if cause else "")
            + (": no result below" if nothing
               else ": the numbers below use only the fits that converged"))


def _common_cause(ds: xr.Dataset) -> str:
    """The most frequent failure cause recorded in the store (attribute ``failure_causes``
    that :func:`~toyengine.store.open_results` adds from the done markers; ``""`` when
    there is none, e.g. a store written before causes were recorded)."""
    raw = ds.attrs.get("failure_causes")
    if not raw:
        return ""
    causes = json.loads(str(raw))
    return str(causes[0].get("text", "")) if causes else ""


def failed_line(ds: xr.Dataset) -> str:
    """``"N failed fits (x %), most common: …"`` over the whole store; ``""`` when no fit
    failed."""
    fs = failed_summary(ds)
    done, failed = int(fs["n_done"].sum()), int(fs["n_failed"].sum())
    if not failed:
        return ""
    cause = _common_cause(ds)
    return (f"{failed} failed fits ({100 * failed / done:.3g} %)"
            + (f", most common: {cause}" if cause else ""))


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
        notes=("failed = attempted fits that did not converge (status 2 or 3).",
               *((line,) if (line := failed_line(ds)) else ())),
        align="ll",
    )


def ensemble_table(ds: xr.Dataset) -> Table | None:
    """Mean and RMS of the fitted parameters of interest per variant and hypothesis, over
    converged fits — the shape of the pseudoexperiment cross-check table (Table 2) of LHCb,
    Nature Communications 13 (2022) 3351. ``None`` when
    the study names no ``poi`` present in the store."""
    poi = [p for p in str(ds.attrs.get("poi", "")).split() if p in list(ds["param"].values)]
    if not poi:
        return None
    names = [str(n) for n in ds["variant_name"].values]
    display = param_display(ds)
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
                rows.append((vname, h, display[p], str(vals.size),
                             f"{fmt_num(mean, 4)} ± {fmt_num(err, 2)}", fmt_num(rms, 3)))
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
    (LHCb, Eur. Phys. J. C 78 (2018) 1019: adaptive binned χ² and its toy p-value)."""
    if "gof" not in ds or not kind_info(ds.attrs.get("kind", "")).records_gof:
        return None
    from .pvalues import empirical_pvalue

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
    """Significance (or J^P rejection) per systematic variation, shaped like Tables 5 and
    6 of LHCb, Eur. Phys. J. C 78 (2018) 1019: one row per variant group,
    t = 2(nll_h0 − nll_h1) on the fixed data set and Z = Φ⁻¹(1 − p/2) with p from
    χ²(``ndof_wilks``) (the papers' two-sided convention).
    Groups of random variants (smeared templates, parameter draws) show the mean t, its Z and
    the lowest Z. Only for kinds that refit one data set per variant."""
    from scipy import stats

    from .teststat import test_statistic

    h0, h1 = str(ds.attrs.get("h0", "") or ""), str(ds.attrs.get("h1", "") or "")
    if not (h0 and h1) or not kind_info(ds.attrs.get("kind", "")).one_data_set:
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
        notes=("as Tables 5/6 of the Z_c(4100) paper (EPJC 78 (2018) 1019): Z from χ²(ndof) "
               "at the refitted data set's t; failed fits excluded.",),
        align="l",
    )



def generating_hypothesis(ds: xr.Dataset) -> str | None:
    """The hypothesis whose model generated the toys (the study's ``generate``), if it is one
    of the fitted hypotheses; read from the study file kept in the store."""
    import yaml

    try:
        raw = yaml.safe_load(str(ds.attrs.get("study_yaml", "")) or "{}")
    except yaml.YAMLError:
        return None
    gen = str(raw.get("generate", "")) if isinstance(raw, dict) else ""
    return gen if gen in [str(h) for h in ds["hypothesis"].values] else None


_SHORT_NAMES = (("Significance of observed", "pvalues"), ("Rejection level", "pvalues"),
                ("Significance toys", "toys"), ("J^P rejection toys", "toys"),
                ("Toy tail fractions", "tails"))


def _slug(section: str, title: str) -> str:
    import re

    if title.endswith(": headline"):  # the p-value and Z in brief, before the details
        return "headline"
    for prefix, short in _SHORT_NAMES:
        if title.startswith(prefix):
            return short
    head = re.split(r" — | of |\(", title, maxsplit=1)[0]
    slug = re.sub(r"[^a-z0-9]+", "-", head.lower()).strip("-")
    return slug.removeprefix(section).strip("-") or "table"


def _named(section: str, tables: list[Table]) -> list[Table]:
    """Name the tables of a section: the section name for a lone table, else
    ``section-<short name>`` (``significance-headline``, ``significance-pvalues``,
    ``significance-toys`` ...)."""
    from dataclasses import replace

    out, used = [], set()
    for t in tables:
        name = section if len(tables) == 1 else f"{section}-{_slug(section, t.title)}"
        base, i = name, 2
        while name in used:
            name, i = f"{base}-{i}", i + 1
        used.add(name)
        out.append(replace(t, name=name, section=section))
    return out


def _headline_first(tables: list[Table]) -> list[Table]:
    """The p-value tables ("Significance of observed t", "Rejection level") before the toy
    bookkeeping of each significance summary."""
    head = [t for t in tables if t.title.startswith(("Significance of observed",
                                                     "Rejection level"))]
    return head + [t for t in tables if t not in head]


def _blocks(ds: xr.Dataset, max_failed: float = MAX_FAILED_FRACTION
            ) -> tuple[dict[str, list[Table]], dict[str, Any]]:
    kind = str(ds.attrs.get("kind", ""))
    info = kind_info(kind)
    bookkeeping = failed_table(ds)
    sections: dict[str, list[Table]] = {"bookkeeping": [bookkeeping]}
    data: dict[str, Any] = {
        "study_name": str(ds.attrs.get("study_name", "")),
        "kind": kind,
        "toyengine_version": str(ds.attrs.get("toyengine_version", "")),
        "spec_digest": str(ds.attrs.get("spec_digest", "")),
        "failed": bookkeeping.to_records(),
        "failure_causes": json.loads(str(ds.attrs.get("failure_causes") or "[]")),
        "variant_names": [str(n) for n in ds["variant_name"].values]
        if "variant_name" in ds
        else [],
        "hypotheses": [str(h) for h in ds["hypothesis"].values],
    }
    n_used: int | None = None
    lost: float | None = None
    h0 = str(ds.attrs.get("h0", "") or "")
    h1 = str(ds.attrs.get("h1", "") or "")
    if h0 and h1:
        if info.toy_test or ds.sizes["variant"] == 1:
            sums = [significance_summary(ds, v) for v in range(ds.sizes["variant"])]
            sections["significance"] = _headline_first([t for s in sums for t in s.tables()])
            data["significance"] = [s.to_dict() for s in sums]
            n_used = min(s.n_used for s in sums)
            lost = max((s.failed_fraction for s in sums if s.n_done), default=None)
        else:
            sp = variant_significance(ds)
            sections["significance"] = sp.tables()
            data["significance_spread"] = sp.to_dict()
    if "truth" in ds and bool(np.isfinite(ds["truth"].values).any()):
        # toys generated under one hypothesis and fitted with several: only the generating
        # hypothesis' fits have a truth to pull against
        gen = generating_hypothesis(ds) if info.toy_test else None
        pt = pull_summary(ds, hypothesis=gen)
        if pt.rows:
            tabs = pt.tables()
            others = [str(h) for h in ds["hypothesis"].values if str(h) != gen]
            if gen is not None and others:
                from dataclasses import replace

                note = (f"pulls of the {', '.join(others)} fit(s) are not shown: the toys "
                        f"were generated under {gen}, so they have no truth.")
                tabs = [replace(tabs[0], notes=(*tabs[0].notes, note)), *tabs[1:]]
            sections["pulls"] = tabs
        data["pulls"] = pt.to_dict()
    vt = variation_significance_table(ds)
    if vt is not None:
        sections["variations"] = [vt]
        data["significance_per_variation"] = vt.to_records()
    gt = gof_table(ds)
    if gt is not None:
        sections["gof"] = [gt]
        data["goodness_of_fit"] = gt.to_records()
    ens = ensemble_table(ds)
    if ens is not None:
        sections["ensembles"] = [ens]
        data["ensembles"] = ens.to_records()
    if info.systematic:
        try:
            st = with_units(ds)
        except SummaryError:  # no parameter with a reference value: nothing to tabulate
            st = None
        if st is not None:
            sections["systematics"] = st.tables()
            data["systematics"] = st.to_dict()
            if st.relative_to == "paired":
                _add_shift_definitions(ds, sections, data)
    note = precision_note(ds)
    if note:
        from dataclasses import replace

        data["precision"] = json.loads(str(ds.attrs["precision_rounds"]))
        head = next((sec for sec in ("systematics", "significance") if sections.get(sec)), None)
        if head is not None:
            first = sections[head][0]
            sections[head] = [replace(first, notes=(*first.notes, note)), *sections[head][1:]]
    # never a headline from nothing: the first line says when the numbers are not a result
    data["warning"] = trust_warning(ds, max_failed=max_failed, n_used=n_used,
                                    lost_fraction=lost) or None
    named = {sec: _named(sec, _with_docs_link(sec, sections[sec]))
             for sec in info.sections if sections.get(sec)}
    return named, data


def _add_shift_definitions(ds: xr.Dataset, sections: dict[str, list[Table]],
                           data: dict[str, Any]) -> None:
    """The paired shifts next to the paper's |ensemble mean − reference| (section
    ``shift_definitions``), for a paired store whose references are finite."""
    from .shift_definitions import shift_definitions

    try:
        sd = shift_definitions(ds)
    except SummaryError:  # e.g. no finite reference value: only the paired table
        return
    sections["shift_definitions"] = sd.tables()
    data["shift_definitions"] = sd.to_records()


#: where every number, label and flag of a summary section is defined
STATISTICS_DOC = "docs/statistics.md"


def _with_docs_link(section: str, tables: list[Table]) -> list[Table]:
    """The section's last table with a note pointing to its part of :data:`STATISTICS_DOC`."""
    from dataclasses import replace

    last = tables[-1]
    note = f"definitions, references and what to do about flags: {STATISTICS_DOC}#{section}"
    return [*tables[:-1], replace(last, notes=(*last.notes, note))]


def precision_note(ds: xr.Dataset) -> str:
    """One line on a precision-targeted run (``toyengine run --precision``): its targets,
    rounds and toys per variant, and whether it reached them; ``""`` for other stores."""
    raw = ds.attrs.get("precision_rounds")
    if not raw:
        return ""
    rec = json.loads(str(raw))
    rounds = rec.get("rounds", [])
    targets = rec.get("targets")
    what = (", ".join(f"stat({p}) ≤ {v:g}" for p, v in targets.items())
            if isinstance(targets, dict) else f"relative error of p_toys ≤ {targets:g}")
    toys = " → ".join(str(r["toys"]) for r in rounds)
    end = ("reached" if rec.get("reached")
           else f"NOT reached (stopped at --max-toys {rec.get('max_toys')})")
    return (f"Precision run: {what}; {len(rounds)} round(s), toys per variant {toys}; "
            f"target {end}.")


def summary_tables(ds: xr.Dataset, sections: Sequence[str] | None = None) -> list[Table]:
    """The summary tables of ``ds``, headline first (the systematic table of a systematic
    study; the p-value and Z of a significance study), bookkeeping last.

    Parameters
    ----------
    ds : xarray.Dataset
        Results store.
    sections : sequence of str, optional
        Keep only these sections (:data:`SECTIONS`) or tables (by :attr:`Table.name`,
        e.g. ``significance-toys``); default all.

    Returns
    -------
    list of Table
        Each with its ``name`` and ``section`` set.
    """
    named, _ = _blocks(ds)
    return _select(named, sections)


def _select(named: dict[str, list[Table]], sections: Sequence[str] | None) -> list[Table]:
    tables = [t for ts in named.values() for t in ts]
    if not sections:
        return tables
    known = list(named) + [t.name for t in tables if t.name not in named]
    sections = list(sections)
    bad = [s for s in sections if s not in known]
    if bad:
        msg = (f"section {', '.join(map(repr, bad))} is not in this summary; it has "
               f"{', '.join(known)}")
        raise SummaryError(msg)
    return [t for t in tables if t.section in sections or t.name in sections]


def render_summary(ds: xr.Dataset, fmt: Format = "text", *,
                   sections: Sequence[str] | None = None,
                   max_failed: float = MAX_FAILED_FRACTION) -> str:
    """Render the summary blocks that fit ``ds.attrs["kind"]``, headline first.

    Parameters
    ----------
    ds : xarray.Dataset
        Results store.
    fmt : {"text", "markdown", "latex", "csv", "json", "html"}
        ``csv``: one table (select it with ``sections``; a tidy CSV has one header, so
        several tables raise :class:`SummaryError` — write them one per file with
        :func:`summary_tables` and :meth:`Table.to_csv`). ``json``: one object with keys
        ``study_name``, ``kind``, ``failed`` (one record per variant × hypothesis) and, as
        applicable, ``significance`` (list over variants), ``significance_spread``,
        ``pulls``, ``systematics``, ``significance_per_variation``, ``goodness_of_fit``,
        ``ensembles``; NaN is written as ``null``. ``latex``: booktabs tables.
    sections : sequence of str, optional
        Only these sections or tables (see :func:`summary_tables`).
    max_failed : float
        Failed-fit fraction above which the first line is a warning
        (:func:`trust_warning`; also when a hypothesis failed in every fit or no toy is
        usable). JSON: key ``warning`` (``null`` when there is none); CSV has no place
        for it.

    Returns
    -------
    str
    """
    if fmt not in ("text", "markdown", "md", "latex", "csv", "json", "html"):
        msg = f"render_summary: fmt={fmt!r} must be one of text, markdown, latex, csv, json, html"
        raise SummaryError(msg)
    named, data = _blocks(ds, max_failed)
    tables = _select(named, sections)
    warning = data["warning"]
    if fmt == "json":
        if sections:
            keep = {"study_name", "kind", "toyengine_version", "spec_digest", "variant_names",
                    "hypotheses", "warning"}
            data = {k: v for k, v in data.items() if k in keep}
            data["tables"] = {t.name: t.to_records() for t in tables}
        return json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n"
    head = (
        f"toyengine summary: study {data['study_name']!r}, kind {data['kind']!r}"
        f" (toyengine {data['toyengine_version']})"
    )
    if fmt == "csv":
        if len(tables) != 1:
            msg = (f"CSV holds one table and this summary has {len(tables)} "
                   f"({', '.join(t.name for t in tables)}): choose one with --section NAME, "
                   "or write one CSV per table with -o DIRECTORY")
            raise SummaryError(msg)
        return tables[0].to_csv()
    if fmt in ("markdown", "md"):
        first = f"**{warning}**\n\n" if warning else ""
        return first + f"# {head}\n\n" + "\n".join(t.to_markdown() for t in tables)
    if fmt == "latex":
        first = f"% {warning}\n" if warning else ""
        return (first + f"% {head}\n% needs \\usepackage{{booktabs}}\n"
                + "\n".join(t.to_latex() for t in tables))
    if fmt == "html":
        import html

        first = f'<p class="warning"><b>{html.escape(warning)}</b></p>\n' if warning else ""
        return first + "\n".join(t.to_html() for t in tables)
    return (f"{warning}\n" if warning else "") + head + "\n\n" + "\n".join(
        t.to_text() for t in tables)
