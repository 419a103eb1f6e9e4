"""Citations a reader of the repository can follow.

Docstrings, comments, docs and study files cite papers (journal, volume, year, equation,
table, section title), never internal notes ("PHYSICS.md", "ARCHITECTURE.md"), the numbering
of the paper files given to the developers ("seed 000") or section signs of documents that are
not in the repository.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCANNED = ("toyengine", "docs", "studies", "examples", "README.md")
FORBIDDEN = ("seed 00", "physics.md", "architecture.md", "§")


def text_files() -> list[Path]:
    """Every text file under the scanned paths (binary files such as .npz are skipped)."""
    out = []
    for name in SCANNED:
        top = ROOT / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for p in paths:
            if "__pycache__" in p.parts:
                continue
            raw = p.read_bytes()
            if b"\0" in raw:
                continue
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append(p)
    return out


def offending_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line holding a forbidden string (case-insensitive)."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if any(f in line.lower() for f in FORBIDDEN)]


def test_scan_covers_the_package_and_the_docs():
    files = {p.relative_to(ROOT).as_posix() for p in text_files()}
    assert "README.md" in files
    assert "toyengine/summary/significance.py" in files
    assert "docs/study-format.md" in files
    assert "studies/zc4100/README.md" in files
    assert not any(f.endswith(".npz") for f in files)


@pytest.mark.parametrize("line", ["see PHYSICS.md §1.8", "seed 000 Eq. 5", "(ARCHITECTURE.md)",
                                  "Seed 002 quotes", "STYLE §7"])
def test_detects_internal_citations(line: str):
    assert offending_lines(f"ok\n{line}\n") == [(2, line)]


def test_no_internal_citations():
    bad = [f"{p.relative_to(ROOT)}:{n}: {line}" for p in text_files()
           for n, line in offending_lines(p.read_text(encoding="utf-8"))]
    assert not bad, "cite the paper or the literature instead:\n" + "\n".join(bad)
