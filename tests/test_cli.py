"""Command-line conventions: --version, python -m toyengine, help on every argument,
summary formats/sections/output files, results on stdout and errors on stderr."""

from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_summary_render import kind_dataset

import toyengine
from toyengine.cli.main import build_parser, main
from toyengine.summary.testing import make_results_dataset

DATA = Path(__file__).parent / "data"


def _walk(parser: argparse.ArgumentParser, path: str = "toyengine"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_argument_has_help():
    missing = [f"{path} {a.option_strings or a.dest}" for path, a in _walk(build_parser())
               if not a.help]
    assert missing == []


def _commands(parser: argparse.ArgumentParser, path: str = "toyengine"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from _commands(sub, f"{path} {name}")


def test_every_command_has_a_description():
    """``toyengine X --help`` explains the command, not just its arguments (a group of
    commands such as ``cluster`` may rely on its subcommands' descriptions)."""
    missing = [path for path, sub in _commands(build_parser())
               if not sub.description and not any(
                   isinstance(a, argparse._SubParsersAction) for a in sub._actions)]
    assert missing == []


def test_output_into_a_closed_pipe_is_quiet():
    """``toyengine schema | head -c 10``: the reader leaving is not an error; no message,
    and the exit status of a process ended by SIGPIPE (141), as ``cat`` would give."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write: EPIPE, every time
    try:
        proc = subprocess.run([sys.executable, "-m", "toyengine", "schema"], stdout=write_end,
                              stderr=subprocess.PIPE, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr == b""


def test_version_and_python_m(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"toyengine {toyengine.__version__}"
    r = subprocess.run([sys.executable, "-m", "toyengine", "--version"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"toyengine {toyengine.__version__}"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, client) -> Path:
    """A small significance store with an observed t (toys generated under H0, fitted
    with H0 and H1), run as a user would."""
    from toyengine import load_spec, run_study

    where = tmp_path_factory.mktemp("cli")
    # the background yield is the parameter of interest: it exists under H0, which
    # generates the toys, so the summary has pulls (of H0's fits only; HESSE on, which
    # significance studies skip by default)
    text = (DATA / "tcc_small_sig.yaml").read_text().replace("poi: [n_sig]", "poi: [n_bkg]")
    text = text.replace("fit: {starts: 1}", "fit: {starts: 1, hesse: true}")
    assert "poi: [n_bkg]" in text and "hesse: true" in text
    (where / "sig.yaml").write_text(text)
    spec = load_spec(where / "sig.yaml").with_overrides(toys=8)
    path = where / "sig.zarr"
    assert run_study(spec, path, client=client, chunk_size=4, progress=None).complete
    return path


def test_summary_latex_section_and_output(store: Path, tmp_path: Path, capsys):
    assert main(["summary", str(store), "--format", "latex"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    tex = out.out
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    # headline first: the p-value / Z table precedes the toy bookkeeping
    assert tex.index("Significance of observed") < tex.index("Significance toys")
    assert main(["summary", str(store), "--section", "pulls", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "Pulls" in md and "Significance" not in md and "Fit bookkeeping" not in md
    target = tmp_path / "sig.tex"
    assert main(["summary", str(store), "--format", "latex", "-o", str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert target.read_text() == tex


def test_summary_csv_one_tidy_table_each(store: Path, tmp_path: Path, capsys):
    # several tables to stdout: refused with the list of names, on stderr, exit 2
    assert main(["summary", str(store), "--format", "csv"]) == 2
    err = capsys.readouterr()
    assert err.out == "" and "significance-pvalues" in err.err and "--section" in err.err
    assert main(["summary", str(store), "--format", "csv", "--section",
                 "significance-pvalues"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert {"method", "p", "z_two_sided"} <= set(df.columns)
    assert main(["summary", str(store), "--format", "csv", "--section",
                 "significance-headline"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(df.columns) == ["quantity", "value"] and "Z toys" in set(df["quantity"])
    outdir = tmp_path / "csv"
    assert main(["summary", str(store), "--format", "csv", "-o", str(outdir)]) == 0
    written = sorted(p.name for p in outdir.glob("*.csv"))
    assert "pulls.csv" in written and "bookkeeping.csv" in written
    for p in outdir.glob("*.csv"):
        rows = list(csv.reader(p.open()))
        assert len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows), p
        pd.read_csv(p)  # parses as one table
    capsys.readouterr()
    assert main(["summary", str(store), "--section", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert "nonsense" in err and "bookkeeping" in err and "Traceback" not in err


def test_significance_summary_has_no_pulls_of_the_other_hypothesis(store: Path):
    # toys generated under H0 and fitted with H0 and H1: only H0's fits are pulled
    from toyengine import open_results
    from toyengine.summary import summary_tables

    ds = open_results(store)

    pulls = next(t for t in summary_tables(ds) if t.section == "pulls")
    assert set(pulls.to_dataframe()["hypothesis"]) == {"H0"}
    assert any("not shown" in n and "H1" in n for n in pulls.notes)


def test_table_dataframe_and_reprs():
    ds = kind_dataset("pulls")
    from toyengine.summary import summary_tables

    t = summary_tables(ds, ["pulls"])[0]
    df = t.to_dataframe()
    assert list(df.columns) == list(t.csv_header) and len(df) == len(t.csv_rows)
    assert repr(t) == t.to_text()
    html = t._repr_html_()
    assert html.startswith('<table class="toyengine">') and "<caption>" in html


def test_text_tables_fit_120_columns_and_hide_empty_minos():
    import numpy as np

    from toyengine.summary import summary_tables

    rng = np.random.default_rng(3)
    val = rng.normal(-0.273, 0.05, (1, 40, 1, 1))
    kw = dict(params=["delta_m"], hypotheses=["nominal"], value=val,
              error=np.full(val.shape, 0.05), truth=np.array([[-0.273]]), kind="pulls")
    no_minos = summary_tables(make_results_dataset(**kw), ["pulls"])[0]
    text = no_minos.to_text()
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "cov. MINOS" not in text and "cov. MINOS" not in no_minos.to_latex()
    assert "coverage_minos" in no_minos.csv_header  # the CSV keeps every column
    with_minos = summary_tables(make_results_dataset(
        **kw, minos_lower=np.full(val.shape, -0.05), minos_upper=np.full(val.shape, 0.05)),
        ["pulls"])[0]
    text = with_minos.to_text()
    assert "cov. MINOS" in text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_pull_offsets_beyond_3_sigma_are_flagged():
    import numpy as np

    from toyengine.summary import summary_tables

    rng = np.random.default_rng(4)
    # 400 toys: pull mean error 1/20 = 0.05; an offset of 0.5σ̂ is 10 standard errors away,
    # a width of 1 within its error 1/√798 ≈ 0.035 (3σ band ±0.11) for the unbiased one
    val = np.empty((1, 400, 1, 2))
    val[..., 0] = rng.normal(0.0, 1.0, (1, 400, 1))
    val[..., 1] = rng.normal(0.5, 1.0, (1, 400, 1))
    ds = make_results_dataset(params=["ok", "biased"], hypotheses=["nominal"], value=val,
                              error=np.ones(val.shape), truth=np.array([[0.0, 0.0]]))
    t = summary_tables(ds, ["pulls"])[0]
    rows = {r[2].text: r for r in t.rows}
    assert not rows["ok"][11].text.endswith("!")
    assert rows["biased"][11].text.endswith("!")
    assert any(n.startswith("! = pull mean") for n in t.notes)


def test_toy_z_is_a_lower_limit_when_no_toy_exceeds():
    from toyengine.summary import summary_tables

    ds = kind_dataset("significance")
    ds.attrs["observed_t"] = 60.0  # far beyond every χ²(2) toy of 197
    t = next(t for t in summary_tables(ds) if t.name == "significance-pvalues")
    toys = next(r for r in t.rows if r[0].text.startswith("toys"))
    # CP 68.27% upper end for 0/197 is 1 − 0.1587^(1/197) ≈ 0.0093 → Z(two-sided) ≈ 2.6
    assert toys[5].text.startswith("> ") and "∞" not in toys[5].text
    assert 2.4 < float(toys[5].text[2:]) < 2.8


def test_summaries_print_as_tables():
    import toyengine.summary as summary

    sig = summary.significance_summary(kind_dataset("significance"))
    assert repr(sig).startswith("Significance toys") and "<table" in sig._repr_html_()
    syst = summary.systematic_table(kind_dataset("model_variation"))
    assert repr(syst).startswith("Systematic uncertainties") and "<table" in syst._repr_html_()
    spread = summary.variant_significance(kind_dataset("template_smearing"))
    assert repr(spread).startswith("Significance spread") and "<table" in spread._repr_html_()
