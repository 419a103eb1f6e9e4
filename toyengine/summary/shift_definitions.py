"""Two definitions of a model-variation shift, side by side.

The engine's default (:func:`~toyengine.summary.systematics.systematic_table` on a paired
store) is the **paired shift**: the mean over toys of ``value(v, t) − value(nominal, t)``,
the fit to variant v's data set minus the fit to its nominal twin (the same random numbers),
or — for a variant with ``mode: fit`` — the alternative model's fit minus the default
model's fit to the very same toy. The default model's own fit bias cancels, and so does most
of the toy noise.

The T_cc⁺ papers define the shift of an alternative as **|ensemble mean − value obtained
from the fit to the data sample|** (LHCb, Nature Physics 18 (2022) 751, Methods,
"Systematic uncertainties"; LHCb, Nature Communications 13 (2022) 3351, "Systematic
uncertainties"). A toy study has no data: the value of the fit to the data is that of the
default model fitted to the reference — the Asimov data set of the nominal generator, whose
fit returns the nominal generation values, the store's ``reference`` (with a ``data`` file,
the study's data value). The paper's shift of variant v is then ``|mean_t value(v, t) −
reference|``, with statistical error ``std/√n`` of the ensemble. It differs from the paired
shift by the default model's fit bias (the ensemble mean of the nominal variant minus the
reference, shown as the "nominal" row) plus the toy noise that pairing removes.

:func:`shift_definitions` computes both, per variant and per source (the maximum over a
source's alternatives, ± pairs by half-difference, as the systematic table does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import xarray as xr

from ._common import SummaryError, fmt_num, jsonable
from .labels import param_unit
from .systematics import SystRow, SystTable, systematic_table
from .tables import Cell, Table

__all__ = ["ShiftDefinitions", "ShiftPair", "shift_definitions"]


@dataclass(frozen=True)
class ShiftPair:
    """One variant or one source under both definitions.

    Attributes
    ----------
    name, group : str
        Variant name (a source row: the source) and its source.
    row_type : {"source", "separate", "variant", "nominal"}
    mode : str
        ``"generate"`` or ``"fit"`` (variants), ``""`` for sources.
    paired, paired_stat : dict
        Signed paired shift and its error (sources: the value the table takes).
    paper, paper_signed, paper_stat : dict
        ``|ensemble mean − reference|``, its signed value and the error ``std/√n``
        (sources: the maximum over the alternatives, ± pairs by half-difference).
    """

    name: str
    group: str
    row_type: str
    mode: str
    paired: dict[str, float]
    paired_stat: dict[str, float]
    paper: dict[str, float]
    paper_signed: dict[str, float]
    paper_stat: dict[str, float]


@dataclass(frozen=True)
class ShiftDefinitions:
    """The paired and the paper's shifts of a model-variation store (see module doc).

    Attributes
    ----------
    params : tuple of str
    hypothesis : str
    reference : dict
        The fit to the reference per parameter (the paper's "value obtained from the fit to
        the data sample").
    rows : tuple of ShiftPair
        Sources (each followed by its variants), separate sources, then the nominal
        variant (its paper shift is the default model's fit bias).
    units : dict
        Display units per parameter.
    """

    params: tuple[str, ...]
    hypothesis: str
    reference: dict[str, float]
    rows: tuple[ShiftPair, ...]
    units: dict[str, str] = field(default_factory=dict)
    study_name: str = ""

    def row(self, name: str) -> ShiftPair:
        """The row of variant or source ``name`` (a source takes precedence)."""
        for rt in ("source", "separate", "nominal", "variant"):
            for r in self.rows:
                if r.name == name and r.row_type == rt:
                    return r
        msg = f"no variant or source {name!r}; rows: {sorted({r.name for r in self.rows})}"
        raise SummaryError(msg)

    def table(self, *, digits: int = 2) -> Table:
        """Display table: per parameter, the paired shift and the paper's |mean − ref|,
        each ± its toy-count error."""
        headers = [Cell.of("Source / variant"), Cell.of("mode")]
        for p in self.params:
            u = f" [{self.units[p]}]" if self.units.get(p) else ""
            headers += [Cell.of(f"{p} paired{u}"), Cell.of(f"{p} |mean − ref|{u}")]
        rows = []
        for r in self.rows:
            label = r.name if r.row_type != "variant" else f"    {r.name}"
            if r.row_type == "nominal":
                label = f"{r.name} (fit bias)"
            cells = [Cell.of(label), Cell.of(r.mode)]
            for p in self.params:
                cells.append(Cell.of(_pm(r.paired[p], r.paired_stat[p], digits)))
                cells.append(Cell.of(_pm(r.paper[p], r.paper_stat[p], digits)))
            rows.append(tuple(cells))
        refs = ", ".join(f"{p} = {fmt_num(self.reference[p], 6)}" for p in self.params)
        notes = (
            "paired: mean over toys of (fit to the variant's data − fit to its nominal twin); "
            "mode fit: (alternative model's fit − default model's fit) to the same toy. "
            "Default of the systematic table.",
            "|mean − ref|: |ensemble mean − fit to the reference| (LHCb, Nature Physics 18 "
            "(2022) 751, Methods; Nature Communications 13 (2022) 3351); ref = the default "
            f"model's fit to the reference: {refs}. It adds the default model's fit bias "
            "(row 'nominal') and the toy noise that pairing cancels (± = std/√n).",
            "sources: maximum |shift| over the alternatives (± pairs: half-difference).",
        )
        csv_header = ["row_type", "group", "name", "mode"]
        for p in self.params:
            csv_header += [f"{p}_paired", f"{p}_paired_stat", f"{p}_paper",
                           f"{p}_paper_signed", f"{p}_paper_stat"]
        csv_rows = []
        for r in self.rows:
            vals: list[object] = [r.row_type, r.group, r.name, r.mode]
            for p in self.params:
                vals += [r.paired[p], r.paired_stat[p], r.paper[p], r.paper_signed[p],
                         r.paper_stat[p]]
            csv_rows.append(tuple(vals))
        return Table(
            title="Shift definitions: paired vs the paper's"
            + (f" — {self.study_name}" if self.study_name else ""),
            headers=tuple(headers), rows=tuple(rows), csv_header=tuple(csv_header),
            csv_rows=tuple(csv_rows), notes=notes,
        )

    def tables(self) -> list[Table]:
        return [self.table()]

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-compatible record per row."""
        return [jsonable(r) for r in self.rows]  # type: ignore[misc]

    def to_text(self, *, digits: int = 2) -> str:
        return self.table(digits=digits).to_text()


def _pm(x: float, s: float, digits: int) -> str:
    if not math.isfinite(x):
        return "—"
    out = fmt_num(x, digits)
    return out + (f" ± {fmt_num(s, 1)}" if math.isfinite(s) else "")


def _source_pair(a: SystRow, b: SystRow, row_type: str) -> ShiftPair:
    return ShiftPair(a.source, a.source, row_type, "", dict(a.signed), dict(a.stat),
                     dict(b.value), dict(b.signed), dict(b.stat))


def shift_definitions(ds: xr.Dataset, params: Sequence[str] | str | None = None,
                      hypothesis: str | None = None, *,
                      include_failed: bool = False) -> ShiftDefinitions:
    """The paired shift and the paper's |ensemble mean − fit to the reference| of every
    variant and source of a paired model-variation store (see module doc).

    Parameters
    ----------
    ds : xarray.Dataset
        Results store with common random numbers (``paired = 1``) and a variant of group
        ``"nominal"``.
    params : sequence of str or str, optional
        Parameters; default as :func:`~toyengine.summary.systematics.systematic_table`.
    hypothesis : str, optional
        Fitted hypothesis; default the first.
    include_failed : bool
        Use attempted-but-invalid fits too.

    Returns
    -------
    ShiftDefinitions

    Raises
    ------
    SummaryError
        Not a paired store with a nominal variant, or no finite reference value.
    """
    if int(ds.attrs.get("paired", 0)) != 1:
        msg = "shift_definitions: the store is not paired (common random numbers)"
        raise SummaryError(msg)
    kw = {"params": params, "hypothesis": hypothesis, "include_failed": include_failed,
          "n_bootstrap": 0}
    paired: SystTable = systematic_table(ds, relative_to="paired", **kw)
    paper: SystTable = systematic_table(ds, relative_to="reference", **kw)
    rows: list[ShiftPair] = []
    by_group: dict[str, list[int]] = {}
    for i, vs in enumerate(paired.variants):
        by_group.setdefault(vs.group, []).append(i)

    def variant_rows(group: str) -> None:
        for i in by_group.get(group, []):
            a, b = paired.variants[i], paper.variants[i]
            rows.append(ShiftPair(a.name, a.group, "variant", a.mode, dict(a.shift),
                                  dict(a.stat), {p: abs(x) for p, x in b.shift.items()},
                                  dict(b.shift), dict(b.stat)))

    for rt, ra, rb in (("source", paired.rows, paper.rows),
                       ("separate", paired.separate, paper.separate)):
        for a, b in zip(ra, rb, strict=True):
            rows.append(_source_pair(a, b, rt))
            variant_rows(a.source)
    if paired.nominal is not None:
        i = by_group[paired.nominal.source][0]
        b = paper.variants[i]
        rows.append(ShiftPair(b.name, b.group, "nominal", b.mode,
                              {p: 0.0 for p in paired.params},
                              {p: 0.0 for p in paired.params},
                              {p: abs(x) for p, x in b.shift.items()}, dict(b.shift),
                              dict(b.stat)))
    units = {p: u for p, u in param_unit(ds).items() if u and p in paired.params}
    return ShiftDefinitions(paired.params, paired.hypothesis, dict(paper.reference),
                            tuple(rows), units, str(ds.attrs.get("study_name", "")))
