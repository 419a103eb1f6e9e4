"""A small table type rendered as plain text, Markdown, LaTeX (booktabs) or CSV.

Every summary table of :mod:`toyengine.summary` is converted to a :class:`Table` for
display. Display cells carry a plain-text and a LaTeX spelling (so that asymmetric
uncertainties print as ``+11 / −14`` in text and ``${}^{+11}_{-14}$`` in LaTeX); the CSV
output is written from separate raw (machine-readable) columns so that it can be parsed back
without any string surgery.
"""

from __future__ import annotations

import csv
import html
import io
import textwrap
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MAX_WIDTH", "Cell", "Table"]

#: Widest plain-text line: wider tables are split into column blocks (key columns repeated).
MAX_WIDTH = 120
#: A display column whose cells are all one of these is empty and not shown.
_EMPTY = ("—", "")


class Cell(NamedTuple):
    """One display cell: plain/Markdown text and its LaTeX spelling."""

    text: str
    latex: str

    @classmethod
    def of(cls, text: str, latex: str | None = None) -> Cell:
        """A cell whose LaTeX form is ``latex`` or the escaped plain text."""
        return cls(text, latex if latex is not None else latex_escape(text))


#: ASCII characters that are special in LaTeX text mode (``<``, ``>`` and ``|`` print as
#: other glyphs in the default OT1 font encoding, so they are set in math)
_LATEX_SPECIAL = {
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
    "<": r"$<$",
    ">": r"$>$",
    "|": r"$|$",
}
#: Unicode characters as LaTeX math (wrapped in ``$...$``), for plain pdflatex with no
#: Unicode input support: every non-ASCII character a summary prints must be here
_LATEX_MATH = {
    "−": "-", "±": r"\pm", "∓": r"\mp", "×": r"\times", "·": r"\cdot", "÷": r"\div",
    "∞": r"\infty", "⟨": r"\langle", "⟩": r"\rangle", "√": r"\surd", "∂": r"\partial",
    "∫": r"\int", "∑": r"\sum", "∏": r"\prod", "∝": r"\propto", "∈": r"\in",
    "∉": r"\notin", "≡": r"\equiv", "≈": r"\approx", "≃": r"\simeq", "∼": r"\sim",
    "≠": r"\neq", "≤": r"\leq", "≥": r"\geq",
    "≲": r"\stackrel{<}{\sim}", "≳": r"\stackrel{>}{\sim}",
    "≪": r"\ll", "≫": r"\gg", "→": r"\to", "←": r"\leftarrow", "↔": r"\leftrightarrow",
    "⇒": r"\Rightarrow", "⇔": r"\Leftrightarrow", "⊗": r"\otimes", "⊕": r"\oplus",
    "†": r"\dagger", "‡": r"\ddagger", "′": "'", "″": "''", "°": r"^\circ",
    "½": r"\frac{1}{2}", "¼": r"\frac{1}{4}", "¾": r"\frac{3}{4}", "⋯": r"\cdots",
    "✓": r"\surd", "ℓ": r"\ell", "ħ": r"\hbar", "ŝ": r"\hat{s}", "∬": r"\int\!\!\int",
    "𝔐": "M", "𝔪": "m", "𝔴": "w", "ϱ": r"\varrho", "▸": r"\triangleright",
    "◂": r"\triangleleft", "∅": r"\emptyset", "∆": r"\Delta", "µ": r"\mu",
    # Greek (capitals without a LaTeX command are Latin letters)
    "α": r"\alpha", "β": r"\beta", "γ": r"\gamma", "δ": r"\delta", "ε": r"\epsilon",
    "ϵ": r"\epsilon", "ζ": r"\zeta", "η": r"\eta", "θ": r"\theta", "ϑ": r"\vartheta",
    "ι": r"\iota", "κ": r"\kappa", "λ": r"\lambda", "μ": r"\mu", "ν": r"\nu", "ξ": r"\xi",
    "ο": "o", "π": r"\pi", "ρ": r"\rho", "σ": r"\sigma", "ς": r"\varsigma", "τ": r"\tau",
    "υ": r"\upsilon", "φ": r"\varphi", "ϕ": r"\phi", "χ": r"\chi", "ψ": r"\psi",
    "ω": r"\omega", "Α": "A", "Β": "B", "Γ": r"\Gamma", "Δ": r"\Delta", "Ε": "E", "Ζ": "Z",
    "Η": "H", "Θ": r"\Theta", "Ι": "I", "Κ": "K", "Λ": r"\Lambda", "Μ": "M", "Ν": "N",
    "Ξ": r"\Xi", "Ο": "O", "Π": r"\Pi", "Ρ": "P", "Σ": r"\Sigma", "Τ": "T",
    "Υ": r"\Upsilon", "Φ": r"\Phi", "Χ": "X", "Ψ": r"\Psi", "Ω": r"\Omega",
}
# super- and subscript digits and signs (ᵀ: the transpose, xᵀ)
_LATEX_MATH.update({c: "^{" + r + "}" for c, r in zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱᵀ", "0123456789+-=()niT",
                                                      strict=True)})
_LATEX_MATH.update({c: "_{" + r + "}" for c, r in zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₛᵢₐₑₒₓ",
                                                      "0123456789+-=()siaeox", strict=True)})
#: Unicode characters as LaTeX text
_LATEX_TEXT = {
    "—": "---", "–": "--", "…": r"\ldots{}", "‘": "`", "’": "'", "“": "``", "”": "''",
    "\u00a0": "~", "\u2009": r"\,", "\u202f": r"\,", "é": r"\'e", "è": r"\`e", "ä": r"\"a",
    "ö": r"\"o", "ü": r"\"u", "Å": r"\AA{}", "ß": r"\ss{}",
}
#: combining accents: applied (in math) to the character before them
_LATEX_ACCENTS = {"\u0302": r"\hat", "\u0304": r"\bar", "\u0303": r"\tilde", "\u0307": r"\dot"}


def _latex_token(c: str) -> tuple[bool, str]:
    """``(is_math, latex)`` of one character."""
    if c in _LATEX_MATH:
        return True, _LATEX_MATH[c]
    if c in _LATEX_SPECIAL:
        t = _LATEX_SPECIAL[c]
        return (True, t[1:-1]) if t.startswith("$") else (False, t)
    if c in _LATEX_TEXT:
        return False, _LATEX_TEXT[c]
    if c.isascii():
        return False, c
    # anything else: its compatibility decomposition if that is ASCII, else a visible marker
    # (pdflatex without Unicode input support would stop on the raw character)
    plain = unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode()
    return False, plain or "?"


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters and map every non-ASCII symbol to plain LaTeX.

    The result is ASCII: it compiles with ``pdflatex`` and no Unicode input package.
    Greek letters, super- and subscripts (``χ²``, ``T_cc⁺``, ``ν₊``, ``Φ⁻¹``), mathematical
    signs (``±``, ``≥``, ``√``, ``†``, ``½``) and combining accents (``θ̂``) become math, one
    ``$...$`` per run of them; ``<``, ``>`` and ``|`` too (in text mode they print as other
    glyphs).
    """
    tokens: list[tuple[bool, str]] = []
    i = 0
    while i < len(text):
        c = text[i]
        accents = []
        while i + 1 < len(text) and text[i + 1] in _LATEX_ACCENTS:
            accents.append(_LATEX_ACCENTS[text[i + 1]])
            i += 1
        if c in _LATEX_ACCENTS:  # an accent with nothing before it
            tokens.append((True, _LATEX_ACCENTS[c] + "{}"))
        elif accents:
            base = _LATEX_MATH.get(c, c if c.isascii() and c.isalnum() else "{}")
            for a in accents:
                base = a + "{" + base + "}"
            tokens.append((True, base))
        else:
            tokens.append(_latex_token(c))
        i += 1
    out: list[str] = []
    math: list[str] = []

    def flush() -> None:
        if math:
            run, prev = "", ""
            for m in math:
                if m[:2] in ("^{", "_{") and prev[:2] == m[:2]:
                    # one script: ``^{-}`` + ``^{1}`` is ``^{-1}`` (two would be an error)
                    run, m = run[:-1] + m[2:], prev[:-1] + m[2:]
                else:
                    if run and run[-1].isalpha() and m[0].isalpha():
                        run += " "
                    run += m
                prev = m
            out.append("$" + run + "$")
            math.clear()

    for is_math, t in tokens:
        if is_math:
            math.append(t)
        else:
            flush()
            out.append(t)
    flush()
    return "".join(out)


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
    align : str
        One letter per column (``l`` left, ``r`` right); the leading ``l`` columns are the
        row keys, repeated in every block when a text table is split to fit
        :data:`MAX_WIDTH`.
    name : str
        Short machine name (file name of its CSV, ``--section`` choice), e.g. ``pulls``.
    section : str
        The summary section the table belongs to (``significance``, ``pulls``, ...).

    Display columns whose cells are all ``—`` (e.g. MINOS coverage when MINOS did not run)
    are not shown; the CSV keeps every column.
    """

    title: str
    headers: tuple[Cell, ...]
    rows: tuple[tuple[Cell, ...], ...]
    csv_header: tuple[str, ...]
    csv_rows: tuple[tuple[object, ...], ...]
    notes: tuple[str, ...] = field(default=())
    align: str = ""
    name: str = ""
    section: str = ""

    def _aligns(self) -> str:
        n = len(self.headers)
        return (self.align or ("l" + "r" * (n - 1)))[:n].ljust(n, "r")

    def _shown(self) -> tuple[Table, list[int]]:
        """``self`` without its empty display columns, and the kept column indices."""
        n = len(self.headers)
        body = [r for r in self.rows if len(r) == n]
        keep = [j for j in range(n)
                if not body or any(r[j].text not in _EMPTY for r in body)]
        if len(keep) == n:
            return self, keep
        aligns = self._aligns()
        rows = tuple(tuple(r[j] for j in keep) if len(r) == n else r for r in self.rows)
        from dataclasses import replace

        return replace(self, headers=tuple(self.headers[j] for j in keep), rows=rows,
                       align="".join(aligns[j] for j in keep)), keep

    def to_text(self, width: int = MAX_WIDTH) -> str:
        """Fixed-width plain text, no line wider than ``width`` where the columns allow:
        a wider table is printed in column blocks, each repeating the key columns."""
        t, _ = self._shown()
        n = len(t.headers)
        body = [r for r in t.rows if len(r) == n]
        widths = [len(h.text) for h in t.headers]
        for r in body:
            widths = [max(w, len(c.text)) for w, c in zip(widths, r, strict=True)]
        aligns = t._aligns()
        n_key = min(len(aligns) - len(aligns.lstrip("l")), n - 1) if n > 1 else 0
        blocks: list[list[int]] = []
        cur: list[int] = []
        key_w = sum(widths[:n_key]) + 2 * n_key
        used = key_w
        for j in range(n_key, n):
            if cur and used + widths[j] > width:
                blocks.append(cur)
                cur, used = [], key_w
            cur.append(j)
            used += widths[j] + 2
        blocks.append(cur)

        def line(cells: Sequence[Cell], cols: list[int]) -> str:
            parts = []
            for j in cols:
                c, w = cells[j], widths[j]
                parts.append(c.text.ljust(w) if aligns[j] == "l" else c.text.rjust(w))
            return "  ".join(parts).rstrip()

        out = [t.title, "=" * len(t.title)] if t.title else []
        for b, block in enumerate(blocks):
            cols = list(range(n_key)) + block
            if b:
                out.append("")
            out.append(line(t.headers, cols))
            out.append("  ".join("-" * widths[j] for j in cols))
            for r in t.rows:
                out.append(line(r, cols) if len(r) == n else f"[{r[0].text}]")
        for note in t.notes:
            out.extend(textwrap.wrap(note, width, subsequent_indent="  ") or [""])
        return "\n".join(out) + "\n"

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_html(self) -> str:
        """An HTML ``<table>`` (caption, header row, notes in a ``<tfoot>``)."""
        t, _ = self._shown()
        n = len(t.headers)
        aligns = t._aligns()

        def td(c: Cell, a: str, tag: str = "td") -> str:
            side = "left" if a == "l" else "right"
            text = c.text.lstrip(" ")
            # a row key indented in text (a variant under its source) keeps its indent
            indent = len(c.text) - len(text)
            pad = f";padding-left:{0.7 + 0.5 * indent:g}em" if indent and a == "l" else ""
            return f'<{tag} style="text-align:{side}{pad}">{html.escape(text)}</{tag}>'

        out = ['<table class="toyengine">']
        if t.title:
            out.append(f"<caption>{html.escape(t.title)}</caption>")
        out.append("<thead><tr>" + "".join(td(h, a, "th") for h, a in
                                           zip(t.headers, aligns, strict=True))
                   + "</tr></thead><tbody>")
        for r in t.rows:
            if len(r) == n:
                out.append("<tr>" + "".join(td(c, a) for c, a in zip(r, aligns, strict=True))
                           + "</tr>")
            else:
                out.append(f'<tr><th colspan="{n}" style="text-align:left">'
                           f"{html.escape(r[0].text)}</th></tr>")
        out.append("</tbody>")
        if t.notes:
            out.append(f'<tfoot><tr><td colspan="{n}"><small>'
                       + "<br>".join(html.escape(s) for s in t.notes)
                       + "</small></td></tr></tfoot>")
        out.append("</table>")
        return "\n".join(out) + "\n"

    def to_dataframe(self) -> pd.DataFrame:
        """The raw (CSV) columns as a :class:`pandas.DataFrame`, one row per CSV row."""
        import pandas as pd

        return pd.DataFrame([list(r) for r in self.csv_rows], columns=list(self.csv_header))

    def to_records(self) -> list[dict[str, object]]:
        """The raw columns as a list of ``{column: value}`` dicts (labelled JSON)."""
        return [dict(zip(self.csv_header, r, strict=True)) for r in self.csv_rows]

    def to_markdown(self) -> str:
        """GitHub-flavoured Markdown table (title in bold above, notes below)."""
        t, _ = self._shown()
        if t is not self:
            return t.to_markdown()
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
        t, _ = self._shown()
        if t is not self:
            return t.to_latex()
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
        """Render in ``fmt`` ∈ {"text", "markdown", "latex", "csv", "html"}."""
        renderers = {
            "text": self.to_text,
            "html": self.to_html,
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
