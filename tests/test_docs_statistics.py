"""docs/statistics.md explains every label the text summaries print.

The labels are taken from the summaries of every committed reference store (the real
summaries of every reference study, at a few toys): each table's title (up to the study
name or the first parenthesis), each column header that is not a parameter label (a
header that starts with one, ``mu paired [MeV]``, as ``<param> paired [unit]``), the row
labels of the quantity and method tables, the fixed rows of the systematic tables, and the
term each footnote defines (``pull = ...``, ``! = ...``, ``† ...``). Each must appear in
the document, written as the summary prints it (inside backticks there).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from reference_datasets import reference_dataset, reference_keys
from test_summary_render import KINDS, kind_dataset

from toyengine.summary import summary_tables

DOC = Path(__file__).parent.parent / "docs" / "statistics.md"


def _plain(s: str) -> str:
    return " ".join(s.split())


def _generic_param(heads: list[str], params: set[str]) -> dict[str, str]:
    """The per-parameter column headers of one table as the document writes them: the
    parameter's name as ``<param>``, its unit as ``[unit]`` (``mu paired [MeV]`` ->
    ``<param> paired [unit]``, ``n_sig paired`` -> ``<param> paired``). A header is
    per-parameter when it starts with a parameter's name and carries a unit, or when the
    same rest follows two parameters' names in the table (so a fixed header such as
    ``n used`` stays itself even in a model with a parameter ``n``)."""
    split = {}
    for h in heads:
        for p in sorted(params, key=len, reverse=True):
            if h.startswith(p + " "):
                rest = h[len(p):]
                split[h] = (p, re.sub(r" \[[^\]]*\]$", "", rest), rest)
                break
    out = {}
    for h, (p, bare, rest) in split.items():
        others = {q for q, b, _ in split.values() if b == bare and q != p}
        if rest != bare or others:
            out[h] = "<param>" + bare + (" [unit]" if rest != bare else "")
    return out


def table_labels(ds) -> set[str]:
    """The fixed labels of the text summary of ``ds`` (see the module docstring)."""
    params = {str(x) for x in ds.param.values}
    params |= {str(x) for x in ds.param_label.values} if "param_label" in ds.coords else set()
    names = {str(x) for x in ds.variant_name.values} | {str(x) for x in ds.variant_group.values}
    names |= {str(x) for x in ds.hypothesis.values}
    out: set[str] = set()
    for t in summary_tables(ds):
        title = re.split(r" = | — | \(", t.title)[0]
        out.add(_plain(title))
        heads = [h.text for h in t.headers]
        generic = _generic_param(heads, params)
        for h in heads:
            base = h.split(" [")[0]
            if base not in params and h not in params and h.strip():
                out.add(_plain(generic.get(h, h)))
        if heads and heads[0] in ("quantity", "method"):
            for r in t.rows:
                if len(r) == len(heads):
                    label = r[0].text if heads[0] == "quantity" else r[0].text.split("(")[0]
                    out.add(_plain(label))
        for r in t.rows:
            if len(r) == 1:  # a section row: [Reported separately (not in total)]
                out.add(_plain(r[0].text.strip("[]")))
            elif r and r[0].text.strip() in ("Total (quadrature)", "68 % bootstrap interval"):
                out.add(r[0].text.strip())
        for note in t.notes:
            if "docs/statistics.md" in note:
                continue
            m = re.match(r"([^=:;]{1,40}?) = ", note)
            if m:
                out.add(_plain(m.group(1)))
            elif note[:1] in "†!":
                out.add(note[:1])
            else:  # a count leading the note ("2 failed fits (...)") is written N
                out.add(_plain(re.sub(r"^\d+ ", "N ", re.split(r"[:(;,]", note)[0])))
    return {x for x in out if x and x not in names}


def _sources():
    for key in reference_keys():
        yield pytest.param(lambda k=key: reference_dataset(k), id=key)
    for kind in KINDS:
        yield pytest.param(lambda k=kind: kind_dataset(k), id=f"synthetic-{kind}")


@pytest.mark.parametrize("make", list(_sources()))
def test_every_summary_label_is_in_docs_statistics(make):
    doc = _plain(DOC.read_text(encoding="utf-8"))
    missing = sorted(lab for lab in table_labels(make()) if f"`{lab}`" not in doc)
    assert missing == [], f"docs/statistics.md does not explain: {missing}"


@pytest.mark.parametrize("make", list(_sources()))
def test_every_summary_section_links_docs_statistics(make):
    """The notes of every section point to its part of the document, and that part exists."""
    doc = DOC.read_text(encoding="utf-8")
    anchors = set(re.findall(r"^## .*\{#([a-z_]+)\}|^<a id=\"([a-z_]+)\"></a>", doc, flags=re.M))
    anchors = {a for pair in anchors for a in pair if a}
    sections: dict[str, list[str]] = {}
    for t in summary_tables(make()):
        sections.setdefault(t.section, []).extend(t.notes)
    for sec, notes in sections.items():
        assert f"docs/statistics.md#{sec}" in " ".join(notes), sec
        assert sec in anchors, f"docs/statistics.md has no anchor {sec!r}"
