"""Systematic-uncertainty tables from variation studies.

Procedure (LHCb, Nature Physics 18 (2022) 751, Methods, "Systematic uncertainties"; LHCb,
Nature Communications 13 (2022) 3351, Results, "Systematic uncertainties"): for every alternative
model an ensemble of pseudoexperiments is generated with parameters fitted to data and fitted
with the default model; the systematic of one alternative is |ensemble mean − data value|,
and the uncertainty of a source is the **maximum over its alternatives**. The total is the
**sum in quadrature over sources**, except sources flagged to be reported separately (the
J^P = S-/D-wave rows of Nature Physics 18 (2022) 751, Table 2). LHCb, Eur. Phys. J. C 78 (2018)
1019, Sect. 7 "Systematic uncertainties", instead combines **positive and negative deviations in
quadrature separately**; Nature Physics 18 (2022) 751 takes **half the difference** of a
± variation pair (momentum scale 1 ± δα, energy loss ±10%).

Mapping onto the result store:

* a *variant* is one alternative; its signed **shift** is, for a **paired** store (common
  random numbers, store attribute ``paired = 1``; the default ``relative_to="auto"`` then
  means ``"paired"``), the mean over toys of the per-toy difference ``value(v, t) −
  value(nominal, t)`` between the fit to variant v's data set and the fit to its nominal twin
  (the same random numbers), with statistical uncertainty ``RMS(difference) / √n``; the
  default model's own fit bias cancels, and a variant identical to the nominal one gives
  exactly 0 ± 0. A pair with a failed fit on either side is dropped (counted in
  ``n_pairs_dropped``). For independent ensembles the shift is ``mean_toys(value) −
  reference`` (``reference`` = the data value; with ``relative_to="nominal"`` the ensemble
  mean of the nominal variant instead), with uncertainty ``std / √n`` (NaN for one toy);
* a *source* is a ``variant_group``; the group ``"nominal"`` (the default model itself) is
  shown for information (its shift is the fit bias) and never enters the total;
* ``variant_separate = True`` puts a group in the "reported separately" block;
* **± pairs**: two variants of one group whose ``variant_name`` differ only by the suffixes
  ``"+"``/``"-"``, ``"_up"``/``"_down"`` or ``"_plus"``/``"_minus"`` (case-insensitive)
  form a pair; the pair contributes the half-difference ``h = (shift₊ − shift₋)/2``
  (symmetric: ``|h|`` to both the + and − sides) instead of its two shifts;
* group rule ``"max"`` (default; the T_cc+ papers): value = max |candidate|; + side = largest
  positive candidate, − side = largest |negative| one (0 if none). Rule ``"rms"`` (for random
  draws, e.g. 100 draws of fixed masses/widths or ~300 smeared templates, Eur. Phys. J. C 78 (2018)
  1019, Sect. 7): value = √(mean shift²), + side = √(Σ₍ₛ>0₎ s²/N), − side = √(Σ₍ₛ<0₎ s²/N), so that
  (+)² + (−)² = value²; the pair marking is ignored under "rms";
* totals: symmetric ``√Σ value²``; asymmetric ``√Σ (+)²`` and ``√Σ (−)²`` separately;
  ``total_stat`` propagates the chosen candidates' errors (it ignores that a maximum was
  taken, so it is not the total's error: kept for reference); ``total_error``, the error
  quoted with the total, is the standard deviation of the bootstrap replicas of the total
  (below; ``total_stat`` without a bootstrap);
* the **bootstrap** over toys (the same resampled toy indices for every variant, so the
  pairing and the correlations between variants are kept) recomputes every shift, every
  source's maximum and the total ``n_bootstrap`` times: ``total_bias`` = mean of the
  replicas − total estimates the upward bias of taking maxima of noisy shifts, and
  ``total_interval`` is the basic (reverse-percentile) 68.3 % interval ``[2T − q₈₄,
  2T − q₁₆]`` (lower end clipped at 0), which corrects for that bias (Efron & Tibshirani,
  *An Introduction to the Bootstrap*, Chapman & Hall 1993, Sect. 13.4). It covers as stated when
  each source's largest shift is resolved (≳ 2 σ_stat); sources whose shift is below
  2 σ_stat are flagged (``significant`` False), and there the interval is too short;
* a variant whose generator density equals another's (store attribute
  ``degenerate_variants``, found when the study is validated) is flagged (``same_as``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import xarray as xr

from ..study.kinds import kind_info
from ._common import (
    SummaryError,
    check_hypothesis,
    default_hypothesis,
    fmt_num,
    jsonable,
    require_vars,
)
from .extract import (
    degenerate_pairs,
    fit_arrays,
    fit_variant_names,
    table_params,
    variant_groups,
    variant_names,
    variant_separate,
)
from .syststats import (
    PAIR_SUFFIXES,
    SystRow,
    VariantShift,
    bootstrap_spread,
    bootstrap_totals,
    combine_group,
    quadrature,
    quadrature_stat,
    variant_shifts,
)
from .tables import Cell, Table

__all__ = ["PAIR_SUFFIXES", "SystRow", "SystTable", "VariantShift", "systematic_table"]

Rule = Literal["max", "rms"]


@dataclass(frozen=True)
class SystTable:
    """Systematic table: rows = sources, columns = parameters (the shape of
    Nature Physics 18 (2022) 751, Table 2).

    Attributes
    ----------
    params : tuple of str
    hypothesis : str
        Fitted hypothesis whose values were used.
    reference : dict
        Reference value per parameter (data value).
    relative_to : {"paired", "reference", "nominal"}
    variants : tuple of VariantShift
        Every variant, including the nominal one.
    rows : tuple of SystRow
        Sources entering the total.
    separate : tuple of SystRow
        Sources reported separately (``variant_separate``).
    nominal : SystRow or None
        The default model's own ensemble (fit bias), not in the total.
    total, total_up, total_down : dict
        Quadrature sums over :attr:`rows`.
    total_stat : dict
        The chosen candidates' statistical errors propagated to the total, as if no maximum
        had been taken: not the total's error (see ``total_error``).
    total_error : dict
        The total's statistical error: the standard deviation of its bootstrap replicas
        (``total_stat`` where there is no bootstrap).
    total_bias, total_interval : dict
        From the bootstrap over toys (see module doc); empty without one.
    asymmetric : bool
        Default display mode (``+up / −down`` cells) of the renderers.
    scale, units : dict
        Display factors and unit labels per parameter (see :meth:`scaled`); raw numbers in
        the attributes are never scaled.
    """

    params: tuple[str, ...]
    hypothesis: str
    reference: dict[str, float]
    relative_to: str
    variants: tuple[VariantShift, ...]
    rows: tuple[SystRow, ...]
    separate: tuple[SystRow, ...]
    nominal: SystRow | None
    total: dict[str, float]
    total_up: dict[str, float]
    total_down: dict[str, float]
    total_stat: dict[str, float]
    asymmetric: bool = False
    scale: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    study_name: str = ""
    #: bootstrap over toys: replica mean − total, and the basic 68.3 % interval
    total_bias: dict[str, float] = field(default_factory=dict)
    total_interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    n_bootstrap: int = 0
    #: the total's statistical error: bootstrap spread (``total_stat`` without a bootstrap)
    total_error: dict[str, float] = field(default_factory=dict)
    #: (variant, same_as) pairs with identical generator densities
    degenerate: tuple[tuple[str, str], ...] = ()
    #: what the alternative generators were fitted to before generating ("" if not)
    reference_fit: str = ""

    # ------------------------------------------------------------------ access
    def source(self, name: str) -> SystRow:
        """The row of source (group) ``name`` (included, separate or nominal)."""
        for r in (*self.rows, *self.separate, *([self.nominal] if self.nominal else [])):
            if r.source == name:
                return r
        have = [r.source for r in (*self.rows, *self.separate)]
        msg = f"no systematic source {name!r}; sources: {have}"
        raise SummaryError(msg)

    def scaled(
        self, factors: Mapping[str, float] | float, units: Mapping[str, str] | str | None = None
    ) -> SystTable:
        """A copy whose *renderers* multiply parameter columns by ``factors`` and label units.

        Example: ``table.scaled({"delta_m": 1e3, "gamma": 1e3}, "keV")`` for MeV-valued
        parameters displayed in keV.
        """
        f = (
            {p: float(factors) for p in self.params}
            if isinstance(factors, (int, float))
            else {**self.scale, **{k: float(v) for k, v in factors.items()}}
        )
        u = dict(self.units)
        if isinstance(units, str):
            u.update({p: units for p in self.params})
        elif units is not None:
            u.update(units)
        return replace(self, scale=f, units=u)

    # ------------------------------------------------------------------ render
    def _col(self, p: str) -> str:
        return f"{p} [{self.units[p]}]" if p in self.units else p

    def _cell(
        self,
        p: str,
        sym: float,
        up: float,
        down: float,
        st: float,
        asym: bool,
        show_stat: bool,
        digits: int,
    ) -> Cell:
        k = self.scale.get(p, 1.0)
        if asym:
            u, d = fmt_num(up * k, digits), fmt_num(down * k, digits)
            text = f"+{u} / −{d}"
            latex = f"${{}}^{{+{u}}}_{{-{d}}}$".replace("—", "-")
        else:
            text = fmt_num(sym * k, digits)
            latex = None
        if show_stat and math.isfinite(st):
            s = fmt_num(st * k, 1)
            text += f" ± {s}"
            latex = (latex + f" $\\pm$ {s}") if latex is not None else None
            if not sym >= 2 * st:
                text += " †"
                latex = (latex + r" $^\dagger$") if latex is not None else None
        return Cell.of(text, latex)

    def table(
        self,
        asymmetric: bool | None = None,
        *,
        detail: bool = False,
        show_stat: bool = False,
        digits: int = 2,
    ) -> Table:
        """Build the display table.

        Parameters
        ----------
        asymmetric : bool, optional
            ``+up / −down`` cells (Eur. Phys. J. C 78 (2018) 1019, Sect. 7) instead of symmetric
            values; default
            :attr:`asymmetric`.
        detail : bool
            Add one indented row per variant (signed shift) under each source.
        show_stat : bool
            Append the statistical (toy-count) uncertainty ``± σ_stat`` to each cell.
        digits : int
            Significant digits.
        """
        asym = self.asymmetric if asymmetric is None else asymmetric
        n = 1 + len(self.params) + 1
        headers = (
            Cell.of("Source"),
            *(Cell.of(self._col(p)) for p in self.params),
            Cell.of("failed fits"),
        )
        rows: list[tuple[Cell, ...]] = []
        by_group: dict[str, list[VariantShift]] = {}
        for vs in self.variants:
            by_group.setdefault(vs.group, []).append(vs)

        def src_row(r: SystRow, label: str | None = None) -> tuple[Cell, ...]:
            cells = [
                self._cell(p, r.value[p], r.up[p], r.down[p], r.stat[p], asym, show_stat, digits)
                for p in self.params
            ]
            ff = f"{r.n_failed}/{r.n_done}"
            return (Cell.of(label or r.source), *cells, Cell.of(ff))

        def variant_rows(group: str) -> None:
            if not detail:
                return
            for vs in by_group.get(group, []):
                cells = []
                for p in self.params:
                    k = self.scale.get(p, 1.0)
                    txt = fmt_num(vs.shift[p] * k, digits)
                    if math.isfinite(vs.stat[p]):
                        txt += f" ± {fmt_num(vs.stat[p] * k, 1)}"
                        if not abs(vs.shift[p]) >= 2 * vs.stat[p]:
                            txt += " †"
                    cells.append(Cell.of(txt))
                label = vs.name + (f" (≡ {vs.same_as})" if vs.same_as else "")
                label += " [fit]" if vs.mode == "fit" else ""
                ff = f"{vs.n_failed}/{vs.n_done}"
                if vs.n_pairs_dropped:
                    ff += f" ({vs.n_pairs_dropped} pairs dropped)"
                rows.append(
                    (
                        Cell.of(f"    {label}", r"\quad " + _tex(label)),
                        *cells,
                        Cell.of(ff),
                    )
                )

        for r in self.rows:
            rows.append(src_row(r))
            variant_rows(r.source)
        tot_cells = [
            self._cell(
                p,
                self.total[p],
                self.total_up[p],
                self.total_down[p],
                self.total_error.get(p, self.total_stat[p]),
                asym,
                show_stat,
                digits,
            )
            for p in self.params
        ]
        nd = sum(r.n_done for r in self.rows)
        nf = sum(r.n_failed for r in self.rows)
        rows.append((Cell.of("Total (quadrature)"), *tot_cells, Cell.of(f"{nf}/{nd}")))
        if self.total_interval:
            iv = []
            for p in self.params:
                k = self.scale.get(p, 1.0)
                lo, hi = self.total_interval[p]
                iv.append(Cell.of(f"[{fmt_num(lo * k, digits)}, {fmt_num(hi * k, digits)}]"))
            rows.append((Cell.of("  68 % bootstrap interval"), *iv, Cell.of("")))
        if self.separate:
            rows.append((Cell.of("Reported separately (not in total)"),))
            for r in self.separate:
                rows.append(src_row(r))
                variant_rows(r.source)
        if self.nominal is not None:
            rows.append((Cell.of("Default model ensemble (fit bias; not in total)"),))
            rows.append(src_row(self.nominal))
        if self.relative_to == "paired":
            what = ("shift = mean over toys of (fit to the variant's data − fit to its nominal "
                    "twin), paired data sets (common random numbers); ± = RMS/√n")
        else:
            base = ("data/reference value" if self.relative_to == "reference"
                    else "nominal ensemble mean")
            what = f"shift = ensemble mean − {base}"
        notes = [
            f"{what} (hypothesis {self.hypothesis}); per source: "
            "max over alternatives (rule max), √mean(shift²) (rule rms), ½(shift₊ − shift₋) "
            "for ± pairs; total = quadrature sum"
            + ("; + and − sides combined separately." if asym else "."),
            "failed fits = attempted fits that did not converge / attempted fits.",
        ]
        rules = sorted({r.rule for r in (*self.rows, *self.separate)})
        if rules:
            notes.append("rules used: " + ", ".join(rules))
        if show_stat or detail:
            notes.append("† shift below 2 σ_stat (not resolved from toy noise).")
        if self.total_interval:
            notes.append(
                f"bootstrap over toys ({self.n_bootstrap} replicas, same toys for every "
                "variant): the total's ± is the replicas' standard deviation; basic 68 % "
                "interval, corrects the bias of taking maxima; bias = "
                + ", ".join(f"{p} {fmt_num(self.total_bias[p] * self.scale.get(p, 1.0), 2)}"
                            for p in self.params) + ".")
        if self.reference_fit:
            notes.append("alternative generators fitted to the reference before generating: "
                         f"{self.reference_fit} (no data set given).")
        if any(vs.mode == "fit" for vs in self.variants):
            notes.append("[fit]: the nominal toys fitted with the variant's model (fit with "
                         "the alternative) rather than generated with it.")
        for v, same in self.degenerate:
            notes.append(f"degenerate: variant {v!r} generates the same density as {same!r}.")
        assert all(len(r) in (1, n) for r in rows)
        return Table(
            title="Systematic uncertainties" + (f" — {self.study_name}" if self.study_name else ""),
            headers=headers,
            rows=tuple(rows),
            csv_header=self._csv_header(),
            csv_rows=self._csv_rows(),
            notes=tuple(notes),
        )

    def _csv_header(self) -> tuple[str, ...]:
        cols = ["row_type", "source", "variant", "rule", "separate"]
        for p in self.params:
            cols += [p, f"{p}_up", f"{p}_down", f"{p}_stat", f"{p}_signed", f"{p}_chosen",
                     f"{p}_significant", f"{p}_interval_lo", f"{p}_interval_hi"]
        return (*cols, "n_done", "n_failed", "failed_fraction", "n_pairs_dropped", "same_as")

    def _csv_rows(self) -> tuple[tuple[object, ...], ...]:
        out: list[tuple[object, ...]] = []

        def k(p: str) -> float:
            return self.scale.get(p, 1.0)

        def row_of(rt: str, r: SystRow) -> tuple[object, ...]:
            vals: list[object] = [rt, r.source, "", r.rule, r.separate]
            for p in self.params:
                vals += [
                    r.value[p] * k(p),
                    r.up[p] * k(p),
                    r.down[p] * k(p),
                    r.stat[p] * k(p),
                    r.signed[p] * k(p),
                    r.chosen[p],
                    r.significant.get(p, ""),
                    math.nan,
                    math.nan,
                ]
            return (*vals, r.n_done, r.n_failed, r.failed_fraction, r.n_pairs_dropped,
                    "; ".join(r.degenerate))

        for r in self.rows:
            out.append(row_of("source", r))
        tot: list[object] = ["total", "Total (quadrature)", "", "quadrature", False]
        for p in self.params:
            tot += [
                self.total[p] * k(p),
                self.total_up[p] * k(p),
                self.total_down[p] * k(p),
                self.total_error.get(p, self.total_stat[p]) * k(p),
                math.nan,
                "",
                "",
                *(x * k(p) for x in self.total_interval.get(p, (math.nan, math.nan))),
            ]
        nd = sum(r.n_done for r in self.rows)
        nf = sum(r.n_failed for r in self.rows)
        out.append((*tot, nd, nf, nf / nd if nd else math.nan,
                    sum(r.n_pairs_dropped for r in self.rows), ""))
        for r in self.separate:
            out.append(row_of("separate", r))
        if self.nominal is not None:
            out.append(row_of("nominal", self.nominal))
        for vs in self.variants:
            vals: list[object] = ["variant", vs.group, vs.name, "", vs.separate]
            for p in self.params:
                sh = vs.shift[p] * k(p)
                vals += [abs(sh), max(sh, 0.0), max(-sh, 0.0), vs.stat[p] * k(p), sh, vs.name,
                         bool(abs(vs.shift[p]) >= 2 * vs.stat[p]), math.nan, math.nan]
            out.append(
                (*vals, vs.n_done, vs.n_failed, vs.n_failed / vs.n_done if vs.n_done else math.nan,
                 vs.n_pairs_dropped, vs.same_as)
            )
        return tuple(out)

    def __repr__(self) -> str:
        return "\n".join(t.to_text() for t in self.tables())

    def _repr_html_(self) -> str:
        return "\n".join(t.to_html() for t in self.tables())

    def tables(self) -> list[Table]:
        """``[self.table(detail=True, show_stat=True)]`` (uniform interface with the other
        summaries): every source and variant with its shift ± stat."""
        return [self.table(detail=True, show_stat=True)]

    def to_text(
        self,
        asymmetric: bool | None = None,
        *,
        detail: bool = False,
        show_stat: bool = False,
        digits: int = 2,
    ) -> str:
        """Plain text."""
        return self.table(asymmetric, detail=detail, show_stat=show_stat, digits=digits).to_text()

    def to_markdown(
        self,
        asymmetric: bool | None = None,
        *,
        detail: bool = False,
        show_stat: bool = False,
        digits: int = 2,
    ) -> str:
        """Markdown."""
        return self.table(
            asymmetric, detail=detail, show_stat=show_stat, digits=digits
        ).to_markdown()

    def to_latex(
        self,
        asymmetric: bool | None = None,
        *,
        detail: bool = False,
        show_stat: bool = False,
        digits: int = 2,
    ) -> str:
        """LaTeX (booktabs; asymmetric cells as ``${}^{+u}_{-d}$``)."""
        return self.table(asymmetric, detail=detail, show_stat=show_stat, digits=digits).to_latex()

    def to_csv(self) -> str:
        """CSV: one row per source, the total, separate sources, nominal, then every variant.

        Columns: ``row_type`` (source/total/separate/nominal/variant), ``source``,
        ``variant``, ``rule``, ``separate``, then per parameter ``p, p_up, p_down, p_stat,
        p_signed, p_chosen`` (display-scaled), then ``n_done, n_failed, failed_fraction``.
        """
        return self.table().to_csv()

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible dict."""
        return jsonable(self)  # type: ignore[no-any-return]


def _tex(s: str) -> str:
    from .tables import latex_escape

    return latex_escape(s)

def _baseline_and_rules(
    ds: xr.Dataset,
    params: Sequence[str],
    reference: Mapping[str, float],
    relative_to: str,
    combine: str,
    group_rules: Mapping[str, str] | None,
) -> tuple[str, str, dict[str, str]]:
    """``relative_to`` with "auto" resolved, the default group rule and the per-group rules
    of :func:`systematic_table`, checked."""
    groups_all = (
        [str(x) for x in ds["variant_group"].values] if "variant_group" in ds else []
    )
    if relative_to == "auto":
        paired_store = int(ds.attrs.get("paired", 0)) == 1
        has_nominal = any(g.lower() == "nominal" for g in groups_all)
        relative_to = "paired" if paired_store and has_nominal else "reference"
    if relative_to == "reference":
        bad = [p for p in params if not math.isfinite(reference[p])]
        if bad:
            msg = f"systematic_table: reference value is NaN for {bad}; use relative_to='nominal'"
            raise SummaryError(msg)
    elif relative_to not in ("nominal", "paired"):
        msg = f"relative_to={relative_to!r} must be 'auto', 'paired', 'reference' or 'nominal'"
        raise SummaryError(msg)
    random_draws = kind_info(ds.attrs.get("kind", "")).random_draws
    default_rule = combine if combine != "auto" else ("rms" if random_draws else "max")
    rules = dict(group_rules or {})
    for g, r in [("<default>", default_rule), *rules.items()]:
        if r not in ("max", "rms"):
            msg = f"group rule {r!r} for {g!r} must be 'max' or 'rms'"
            raise SummaryError(msg)
    return relative_to, default_rule, rules



def systematic_table(
    ds: xr.Dataset,
    params: Sequence[str] | str | None = None,
    hypothesis: str | None = None,
    *,
    combine: Literal["auto", "max", "rms"] = "auto",
    group_rules: Mapping[str, str] | None = None,
    relative_to: Literal["auto", "paired", "reference", "nominal"] = "auto",
    asymmetric: bool = False,
    include_failed: bool = False,
    n_bootstrap: int = 1000,
    bootstrap_seed: int = 0,
) -> SystTable:
    """Per-source systematic shifts of ``params`` from a variation study (see module doc).

    Parameters
    ----------
    ds : xarray.Dataset
        Results store of a model_variation / template_smearing / parameter_variation study.
    params : sequence of str or str, optional
        Parameters (columns); default ``attrs["poi"]``, else every parameter with a finite
        reference that the hypothesis fits.
    hypothesis : str, optional
        Fitted hypothesis; default ``attrs["h1"]`` or the first hypothesis.
    combine : {"auto", "max", "rms"}
        Default group rule; "auto" = "rms" for template_smearing / parameter_variation
        (random draws), "max" otherwise (the T_cc+ papers).
    group_rules : mapping, optional
        Per-group override of the rule, e.g. ``{"K*0 masses": "rms"}``.
    relative_to : {"auto", "paired", "reference", "nominal"}
        Shift baseline. ``"paired"``: per-toy difference to the nominal twin fit (needs a
        variant of group "nominal"; meaningful for stores generated with common random
        numbers, ``paired = 1``). ``"reference"``: the stored reference (data value; seeds
        001/002). ``"nominal"``: the ensemble mean of the "nominal" group (its toy
        uncertainty is added in quadrature). ``"auto"``: "paired" for a paired store with a
        nominal group, else "reference".
    asymmetric : bool
        Default display mode of the returned table.
    include_failed : bool
        Use attempted-but-invalid fits too (counts are reported either way).
    n_bootstrap : int
        Bootstrap replicas over toys for ``total_bias`` and ``total_interval`` (0: none).
    bootstrap_seed : int
        Seed of the bootstrap resampling (the summary is deterministic).

    Returns
    -------
    SystTable
    """
    require_vars(ds, ["value", "valid", "reference"], "systematic_table")
    hyp = check_hypothesis(ds, hypothesis) if hypothesis else default_hypothesis(ds)
    params = table_params(ds, params, hyp, "systematic_table")
    reference = {p: float(ds["reference"].sel(param=p)) for p in params}
    relative_to, default_rule, rules = _baseline_and_rules(
        ds, params, reference, relative_to, combine, group_rules)

    ok, donev, validv, vals = fit_arrays(ds, hyp, params, include_failed)
    nv = ds.sizes["variant"]
    names, groups, seps = variant_names(ds), variant_groups(ds), variant_separate(ds)

    nominal_idx = [v for v in range(nv) if groups[v].lower() == "nominal"]
    if relative_to in ("nominal", "paired") and not nominal_idx:
        msg = f"relative_to={relative_to!r} needs a variant whose variant_group is 'nominal'"
        raise SummaryError(msg)
    nom = nominal_idx[0] if nominal_idx else -1
    ref_arr = np.array([reference[p] for p in params])
    d, m, sh_all, st_all, ens_mean, n_used, n_dropped = variant_shifts(
        vals, ok, donev, ref_arr, nom, relative_to)

    same_as = degenerate_pairs(ds)
    fit_names = fit_variant_names(ds)
    shifts: list[VariantShift] = []
    for v in range(nv):
        shifts.append(
            VariantShift(
                variant=v,
                name=names[v],
                group=groups[v],
                separate=seps[v],
                n_toys=int(ok.shape[1]),
                n_done=int(donev[v].sum()),
                n_failed=int((donev[v] & ~validv[v]).sum()),
                n_used=int(n_used[v]),
                mean={p: float(ens_mean[v, i]) for i, p in enumerate(params)},
                shift={p: float(sh_all[v, i]) for i, p in enumerate(params)},
                stat={p: float(st_all[v, i]) for i, p in enumerate(params)},
                n_pairs_dropped=int(n_dropped[v]),
                same_as=same_as.get(names[v], ""),
                mode="fit" if names[v] in fit_names else "generate",
            )
        )

    order: list[str] = []
    for g in groups:
        if g not in order:
            order.append(g)
    rows, sep_rows = [], []
    nominal_row = None
    for g in order:
        members = [s for s in shifts if s.group == g]
        separate = any(s.separate for s in members)
        if g.lower() == "nominal":
            nominal_row = combine_group(g, members, params, "max", separate)
            continue
        row = combine_group(g, members, params, rules.get(g, default_rule), separate)
        (sep_rows if separate else rows).append(row)

    total = {p: quadrature(rows, "value", p) for p in params}
    total_bias: dict[str, float] = {}
    total_interval: dict[str, tuple[float, float]] = {}
    total_error: dict[str, float] = {}
    if n_bootstrap > 0 and rows:
        members_of = {r.source: [s for s in shifts if s.group == r.source] for r in rows}
        rule_of = {r.source: rules.get(r.source, default_rule) for r in rows}
        reps = bootstrap_totals(d, m, nom if relative_to == "nominal" else -1,
                                 [(members_of[r.source], rule_of[r.source]) for r in rows],
                                 n_bootstrap, bootstrap_seed)
        total_bias, total_interval, total_error = bootstrap_spread(reps, total, params)
    total_stat = quadrature_stat(rows, total, params)
    for p in params:
        total_error.setdefault(p, total_stat[p])
    return SystTable(
        params=tuple(params),
        hypothesis=hyp,
        reference=reference,
        relative_to=relative_to,
        variants=tuple(shifts),
        rows=tuple(rows),
        separate=tuple(sep_rows),
        nominal=nominal_row,
        total=total,
        total_up={p: quadrature(rows, "up", p) for p in params},
        total_down={p: quadrature(rows, "down", p) for p in params},
        total_stat=total_stat,
        asymmetric=asymmetric,
        study_name=str(ds.attrs.get("study_name", "")),
        total_bias=total_bias,
        total_interval=total_interval,
        n_bootstrap=int(n_bootstrap) if total_interval else 0,
        total_error=total_error,
        degenerate=tuple(same_as.items()),
        reference_fit=str(ds.attrs.get("reference_fit", "") or ""),
    )
