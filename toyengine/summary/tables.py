"""A small table type rendered as plain text, Markdown, LaTeX (booktabs) or CSV.

Every summary table of :mod:`toyengine.summary` is converted to a :class:`Table` for
display. Display cells carry a plain-text and a LaTeX spelling (so that asymmetric
uncertainties print as ``+11 / −14`` in text and ``${}^{+11}_{-14}$`` in LaTeX); the CSV
output is written from separate raw (machine-readable) columns so that it can be parsed back
without any string surgery.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["Cell", "Table"]


class Cell(NamedTuple):
    """One display cell: plain/Markdown text and its LaTeX spelling."""

    text: str
    latex: str

    @classmethod
    def of(cls, text: str, latex: str | None = None) -> Cell:
        """A cell whose LaTeX form is ``latex`` or the escaped plain text."""
        return cls(text, latex if latex is not None else latex_escape(text))


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "−": "$-$",
    "±": r"$\pm$",
    "σ": r"$\sigma$",
    "∞": r"$\infty$",
    "—": "--",
    "⟨": r"$\langle$",
    "⟩": r"$\rangle$",
    "χ": r"$\chi$",
    "²": r"$^2$",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters and map the few Unicode symbols we print."""
    return "".join(_LATEX_ESCAPES.get(c, c) for c in text)


@dataclass(frozen=True)
class Table:
    """A rectangular table with display cells and raw CSV columns.

    Attributes
    ----------
    title : str
        Caption.
    headers : tuple of Cell
        Display column headers.
    rows : tuple of tuple of Cell
        Display cells; each row has ``len(headers)`` cells. A row of length 1 is a section
        label spanning the table (rendered as a bold line).
    csv_header : tuple of str
        Machine-readable column names of the CSV output.
    csv_rows : tuple of tuple
        Raw values (numbers as floats, ``nan`` allowed) of the CSV output.
    notes : tuple of str
        Footnotes printed under the table (conventions, failed-fit counts ...).
    """

    title: str
    headers: tuple[Cell, ...]
    rows: tuple[tuple[Cell, ...], ...]
    csv_header: tuple[str, ...]
    csv_rows: tuple[tuple[object, ...], ...]
    notes: tuple[str, ...] = field(default=())
    align: str = ""

    def _aligns(self) -> str:
        n = len(self.headers)
        return (self.align or ("l" + "r" * (n - 1)))[:n].ljust(n, "r")

    def to_text(self) -> str:
        """Fixed-width plain text."""
        n = len(self.headers)
        body = [r for r in self.rows if len(r) == n]
        widths = [len(h.text) for h in self.headers]
        for r in body:
            widths = [max(w, len(c.text)) for w, c in zip(widths, r, strict=True)]
        aligns = self._aligns()

        def line(cells: Sequence[Cell]) -> str:
            parts = []
            for c, w, a in zip(cells, widths, aligns, strict=True):
                parts.append(c.text.ljust(w) if a == "l" else c.text.rjust(w))
            return "  ".join(parts).rstrip()

        out = [self.title, "=" * len(self.title)] if self.title else []
        out.append(line(self.headers))
        out.append("  ".join("-" * w for w in widths))
        for r in self.rows:
            out.append(line(r) if len(r) == n else f"[{r[0].text}]")
        out.extend(self.notes)
        return "\n".join(out) + "\n"

    def to_markdown(self) -> str:
        """GitHub-flavoured Markdown table (title in bold above, notes below)."""
        n = len(self.headers)

        def esc(s: str) -> str:
            return s.replace("|", r"\|")

        out = [f"**{esc(self.title)}**", ""] if self.title else []
        out.append("| " + " | ".join(esc(h.text) for h in self.headers) + " |")
        out.append("|" + "|".join(":---" if a == "l" else "---:" for a in self._aligns()) + "|")
        for r in self.rows:
            if len(r) == n:
                out.append("| " + " | ".join(esc(c.text) for c in r) + " |")
            else:
                out.append("| **" + esc(r[0].text) + "** |" + " |" * (n - 1))
        if self.notes:
            out.append("")
            out.extend(f"{esc(s)}  " for s in self.notes)
        return "\n".join(out) + "\n"

    def to_latex(self) -> str:
        """A ``table`` environment around a booktabs ``tabular`` (``\\usepackage{booktabs}``)."""
        n = len(self.headers)
        out = [r"\begin{table}[htbp]", r"\centering"]
        if self.title:
            out.append(r"\caption{" + latex_escape(self.title) + "}")
        out.append(r"\begin{tabular}{" + self._aligns() + "}")
        out.append(r"\toprule")
        out.append(" & ".join(h.latex for h in self.headers) + r" \\")
        out.append(r"\midrule")
        for r in self.rows:
            if len(r) == n:
                out.append(" & ".join(c.latex for c in r) + r" \\")
            else:
                out.append(r"\midrule")
                out.append(r"\multicolumn{" + str(n) + "}{l}{" + r[0].latex + r"} \\")
        out.append(r"\bottomrule")
        out.append(r"\end{tabular}")
        for note in self.notes:
            out.append(r"\par\footnotesize " + latex_escape(note))
        out.append(r"\end{table}")
        return "\n".join(out) + "\n"

    def to_csv(self) -> str:
        """CSV (RFC 4180 via :mod:`csv`) of the raw columns; NaN written as ``nan``."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.csv_header)
        for r in self.csv_rows:
            w.writerow(["nan" if isinstance(v, float) and v != v else v for v in r])
        return buf.getvalue()

    def render(self, fmt: str) -> str:
        """Render in ``fmt`` ∈ {"text", "markdown", "latex", "csv"}."""
        renderers = {
            "text": self.to_text,
            "markdown": self.to_markdown,
            "md": self.to_markdown,
            "latex": self.to_latex,
            "csv": self.to_csv,
        }
        if fmt not in renderers:
            from ._common import SummaryError

            msg = f"table format {fmt!r} is not one of {sorted(renderers)}"
            raise SummaryError(msg)
        return renderers[fmt]()
