"""The LaTeX summary of every study kind compiles with a real ``pdflatex``.

The sources are the committed reference stores of every reference study (their real
parameter labels: ``Φ``, ``T_cc⁺``, ``δm_BW``, ``√``, ``†`` ...) and the synthetic store of
every kind of ``test_summary_render``. Each summary's ``render_summary(ds, "latex")`` goes
into a minimal ``article`` with ``booktabs`` (what the output's header asks for) and is
compiled with ``-halt-on-error``; the test fails on any LaTeX error, on a character missing
from the font, and on non-ASCII output (plain pdflatex has no glyph for raw Unicode).
``pdflatex`` comes from Debian's ``texlive-latex-base`` and ``texlive-latex-recommended``
(booktabs), which ``.ci/run`` installs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from reference_datasets import reference_dataset, reference_keys
from test_summary_render import KINDS, kind_dataset

from toyengine.summary import render_summary
from toyengine.summary.tables import _LATEX_MATH, _LATEX_SPECIAL, _LATEX_TEXT, latex_escape

ROOT = Path(__file__).parent.parent
PREAMBLE = "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"


def compile_latex(body: str, where: Path) -> str:
    """Compile ``body`` in a minimal document; the log (raises on a LaTeX error)."""
    pdflatex = shutil.which("pdflatex")
    if not pdflatex:  # a system tool, not a Python dependency: skip where it is missing,
        # fail where it is required (.ci/run installs it and sets TOYENGINE_REQUIRE_LATEX=1)
        reason = ("no pdflatex here: apt-get install --no-install-recommends "
                  "texlive-latex-base texlive-latex-recommended")
        if os.environ.get("TOYENGINE_REQUIRE_LATEX") == "1":
            pytest.fail(f"{reason} (TOYENGINE_REQUIRE_LATEX=1: the LaTeX tests must run)")
        pytest.skip(reason)
    tex = where / "summary.tex"
    tex.write_text(PREAMBLE + body + "\n\\end{document}\n", encoding="utf-8")
    r = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error",
                        "-no-shell-escape", tex.name], cwd=where, capture_output=True,
                       text=True, errors="replace", timeout=120)
    log = (where / "summary.log").read_text(encoding="utf-8", errors="replace")
    errors = [m.start() for m in re.finditer(r"^! ", log, flags=re.M)]
    assert r.returncode == 0 and not errors, log[errors[0] if errors else -3000:][:3000]
    assert (where / "summary.pdf").stat().st_size > 0
    return log


def _check(ds, tmp_path: Path) -> None:
    tex = render_summary(ds, "latex")
    bad = sorted({c for c in tex if not c.isascii()})
    assert not bad, f"raw non-ASCII characters in the LaTeX output: {bad}"
    log = compile_latex(tex, tmp_path)
    assert "Missing character" not in log
    assert tex.count(r"\begin{tabular}") >= 2


@pytest.mark.parametrize("key", reference_keys())
def test_reference_study_summary_compiles(key, tmp_path):
    _check(reference_dataset(key), tmp_path)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_summary_compiles(kind, tmp_path):
    _check(kind_dataset(kind), tmp_path)


def test_every_symbol_the_code_prints_has_a_latex_spelling(tmp_path):
    """Every non-ASCII character in the summary, model and study code (where labels, notes
    and captions come from) maps to LaTeX, and all of them together compile."""
    sources = [*ROOT.glob("toyengine/summary/*.py"), *ROOT.glob("toyengine/models/*.py"),
               *ROOT.glob("toyengine/study/*.py"), *ROOT.glob("toyengine/core/**/*.py")]
    chars = sorted({c for p in sources for c in p.read_text(encoding="utf-8")
                    if not c.isascii()})
    known = {*_LATEX_MATH, *_LATEX_TEXT, "\u0302", "\u0304", "\u0303", "\u0307"}
    assert [c for c in chars if c not in known] == []
    text = " ".join(chars) + " " + "".join(_LATEX_SPECIAL) + " Φ⁻¹(1 − p) θ̂ ν₊⁻ x̄ ½(s₊ − s₋)"
    out = latex_escape(text)
    assert out.isascii()
    log = compile_latex(out, tmp_path)
    assert "Missing character" not in log


def test_latex_escape_spellings():
    assert latex_escape("χ² ≥ 3") == r"$\chi^{2}$ $\geq$ 3"
    assert latex_escape("Φ⁻¹(1−p)") == r"$\Phi^{-1}$(1$-$p)"  # one superscript, not two
    assert latex_escape("T_cc⁺ > 5%") == r"T\_cc$^{+}$ $>$ 5\%"
    assert latex_escape("θ̂") == r"$\hat{\theta}$"
    assert latex_escape("πΑ") == r"$\pi A$"  # a command never swallows the next letter
