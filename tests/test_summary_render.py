"""render_summary over every study kind and format, table renderers, and the ds.toys accessor."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest
import xarray as xr

import toyengine.summary as summary
from toyengine.summary import SummaryError, render_summary
from toyengine.summary.tables import Cell, Table
from toyengine.summary.testing import make_results_dataset

#: the kinds whose summary leads with a systematic table
SYSTEMATIC = ("model_variation", "template_smearing", "parameter_variation")
KINDS = [
    "pulls",
    "significance",
    "jp_rejection",
    "model_variation",
    "template_smearing",
    "parameter_variation",
]


def kind_dataset(kind: str, seed: int = 0) -> xr.Dataset:
    """A small store of each kind, with a few failed fits in every one."""
    rng = np.random.default_rng(seed)
    params = ["n_sig", "mass"]
    if kind in ("pulls", "significance", "jp_rejection"):
        nv, nt = 1, 200
        hyps = (
            ["nominal"]
            if kind == "pulls"
            else (["H0", "H1"] if kind == "significance" else ["0+", "1-"])
        )
        names, groups, seps = ["nominal"], ["nominal"], [False]
        truth = np.array([[50.0, 3.875]])
    else:
        nv = 7
        nt = 50 if kind == "model_variation" else 1
        hyps = ["H0", "H1"] if kind == "template_smearing" else ["nominal"]
        names = ["default", "apollonios", "student_t", "scale+", "scale-", "L=0", "L=2"]
        groups = ["nominal", "resolution", "resolution", "scale", "scale", "J^P", "J^P"]
        seps = [False] * 5 + [True, True]
        truth = (
            np.tile([50.0, 3.875], (nv, 1))
            if kind == "model_variation"
            else np.full((nv, 2), np.nan)
        )
    nh = len(hyps)
    shift = rng.normal(0, 0.002, (nv, 1, 1, 2)) * np.array([1000, 1])
    val = np.array([50.0, 3.875]) + shift + rng.normal(0, 1, (nv, nt, nh, 2)) * [8.0, 0.001]
    err = np.broadcast_to([8.0, 0.001], val.shape).copy()
    nll = np.zeros((nv, nt, nh))
    kw = {}
    if nh == 2:
        if kind == "jp_rejection":
            t = rng.normal(-5, 4, (nv, nt))
        else:
            t = rng.chisquare(2, (nv, nt)) + (30.0 if kind == "template_smearing" else 0.0)
        nll[..., 0] = t / 2
        kw = {
            "h0": hyps[0],
            "h1": hyps[1],
            "ndof_wilks": 2 if kind != "jp_rejection" else 1,
            "observed_t": 9.0 if kind != "template_smearing" else math.nan,
        }
        if kind == "template_smearing":
            val[:, :, 0, 0] = np.nan  # n_sig absent from H0
            err[:, :, 0, 0] = np.nan
    status = np.ones((nv, nt, nh), np.int8)
    if nt > 4:
        status[:, :2, -1] = 2
        status[:, -1, :] = 0
    else:  # fixed data set (one toy per variant): one failed fit in variant 1
        status[1, 0, -1] = 2
    return make_results_dataset(
        params=params,
        hypotheses=hyps,
        value=val,
        error=err,
        nll=nll,
        status=status,
        truth=truth,
        reference=np.array([50.0, 3.875]),
        variant_names=names,
        variant_groups=groups,
        variant_separate=seps,
        kind=kind,
        poi="mass",
        study_name=f"test-{kind}",
        **kw,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_render_summary_all_formats(kind):
    ds = kind_dataset(kind)
    txt = render_summary(ds, "text")
    assert "Fit bookkeeping" in txt and "failed" in txt
    md = render_summary(ds, "markdown")
    warning = json.loads(render_summary(ds, "json"))["warning"]  # e.g. a failed variant
    assert md.startswith((f"**{warning}**\n\n" if warning else "") + "# toyengine summary")
    assert "| variant |" in md
    tex = render_summary(ds, "latex")
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") >= 2
    # CSV: one tidy table per call (several tables refuse); every table parses with one header
    tables = summary.summary_tables(ds)
    assert len(tables) >= 2 and len({t.name for t in tables}) == len(tables)
    with pytest.raises(SummaryError, match="one table"):
        render_summary(ds, "csv")
    for t in tables:
        rows = list(csv.reader(io.StringIO(render_summary(ds, "csv", sections=[t.name]))))
        assert len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows)
        assert rows[0] == list(t.csv_header)
    # headline first: the systematic table / the p-value table; bookkeeping last
    first = tables[0].section
    if kind in SYSTEMATIC:
        assert first == "systematics"
    elif kind in ("significance", "jp_rejection"):
        assert first == "significance" and "observed t" in tables[0].title
    assert tables[-1].section == "bookkeeping"
    data = json.loads(render_summary(ds, "json"))
    assert data["kind"] == kind
    # bookkeeping always present, one labelled record per variant × hypothesis
    assert len(data["failed"]) == ds.sizes["variant"] * ds.sizes["hypothesis"]
    assert {"variant", "hypothesis", "n_failed", "n_toys"} <= set(data["failed"][0])
    has_sig = kind in ("significance", "jp_rejection")
    assert ("significance" in data) == has_sig
    assert ("significance_spread" in data) == (kind == "template_smearing")
    assert ("systematics" in data) == (kind in SYSTEMATIC)
    assert ("pulls" in data) == (kind not in ("template_smearing", "parameter_variation"))
    if kind == "significance":
        s = data["significance"][0]
        assert s["n_failed_h1"] == 2 and s["n_done"] == 199 and s["n_used"] == 197
        assert "Significance of observed t" in txt and "fitted ndof" in txt
    if kind == "jp_rejection":
        assert "Rejection level of h0" in txt
    if kind == "template_smearing":
        assert "pessimistic" in txt
        spread = data["significance_spread"]
        t = np.asarray(summary.test_statistic(ds).values).ravel()
        t = t[np.isfinite(t)]
        assert spread["t_pessimistic"] == pytest.approx(t.mean() - 3 * t.std(ddof=1))
    if kind in SYSTEMATIC:
        assert "Total (quadrature)" in txt and "Reported separately" in txt
    with pytest.raises(SummaryError, match="fmt"):
        render_summary(ds, "docx")


def test_pull_and_significance_tables_render_everywhere():
    ds = kind_dataset("significance")
    s = summary.significance_summary(ds)
    tables = [*s.tables(), *summary.pull_summary(ds).tables(), summary.report.failed_table(ds)]
    for t in tables:
        for fmt in ("text", "markdown", "latex", "csv"):
            out = t.render(fmt)
            assert out.strip()
        rows = list(csv.reader(io.StringIO(t.to_csv())))
        assert tuple(rows[0]) == t.csv_header and len(rows) == len(t.csv_rows) + 1
    pt = summary.pull_summary(ds)
    back = list(csv.DictReader(io.StringIO(pt.to_csv())))
    assert len(back) == len(pt.rows)
    for r, row in zip(back, pt.rows, strict=True):
        assert float(r["pull_mean"]) == pytest.approx(row.pull_mean, rel=1e-12)
        assert int(r["n_failed"]) == row.n_failed
    assert r"$\pm$" in pt.to_latex()


def test_table_escaping_and_sections():
    t = Table(
        title="a_b & 50%",
        headers=(Cell.of("x|y"), Cell.of("v")),
        rows=((Cell.of("sec"),), (Cell.of("k_1"), Cell.of("−1 ± 2", r"$-1\pm2$"))),
        csv_header=("k", "v"),
        csv_rows=(("k_1", math.nan),),
    )
    tex = t.to_latex()
    assert r"a\_b \& 50\%" in tex and r"k\_1 & $-1\pm2$ \\" in tex
    assert r"\multicolumn{2}{l}{sec}" in tex
    assert r"x\|y" in t.to_markdown() and "| **sec** | |" in t.to_markdown()
    assert "[sec]" in t.to_text()
    assert t.to_csv() == "k,v\nk_1,nan\n"


def test_accessor_methods():
    ds = kind_dataset("significance")
    t = ds.toys.t()
    assert t.dims == ("variant", "toy") and int(np.isfinite(t).sum()) == 197
    e = ds.toys.pvalue()  # attrs observed_t = 9
    tv = t.values[np.isfinite(t.values)]
    assert e.n_exceed == int(np.count_nonzero(tv >= 9.0)) and e.n_toys == 197
    assert ds.toys.pvalue(0.0).p == 1.0
    assert ds.toys.z(9.0) == pytest.approx(summary.p_to_z(e.p))
    fit = ds.toys.chi2_fit()
    assert abs(fit.ndof - 2) < 3 * fit.ndof_err
    f = ds.toys.failed()
    assert f["n_failed"].sel(hypothesis="H1").item() == 2
    assert f["n_not_done"].sel(hypothesis="H0").item() == 1
    assert f["failed_fraction"].sel(hypothesis="H1").item() == pytest.approx(2 / 199)
    assert ds.toys.pulls().rows and ds.toys.significance().n_used == 197
    assert "Fit bookkeeping" in ds.toys.summary()
    mv = kind_dataset("model_variation")
    st = mv.toys.systematics()
    assert st.params == ("mass",) and mv.toys.describe_groups()["J^P"] == ["L=0", "L=2"]
    with pytest.raises(SummaryError, match="variant"):
        mv.toys.pvalue(1.0)
    with pytest.raises(SummaryError, match="h0/h1"):
        mv.toys.t()
    with pytest.raises(SummaryError, match="observed_t"):
        kind_dataset("significance").assign_attrs(observed_t=math.nan).toys.pvalue()


def test_public_api_surface():
    assert dir(summary) == sorted(summary.__all__)
    for name in summary.__all__:
        assert hasattr(summary, name), name


def test_bookkeeping_is_grouped_for_many_variants():
    nv = 30
    val = np.zeros((nv, 1, 2, 1))
    status = np.ones((nv, 1, 2), np.int8)
    status[5:8, 0, 1] = 3  # three fits raised
    ds = make_results_dataset(
        params=["a"],
        hypotheses=["H0", "H1"],
        value=val,
        status=status,
        variant_names=["nominal"] + [f"tmpl{i}" for i in range(nv - 1)],
        variant_groups=["nominal"] + ["bkg template"] * (nv - 1),
        kind="template_smearing",
        h0="H0",
        h1="H1",
    )
    t = summary.report.failed_table(ds)
    assert len(t.rows) == 4  # (nominal, bkg template) × (H0, H1)
    row = next(r for r in t.csv_rows if r[0] == "bkg template (29 variants)" and r[1] == "H1")
    assert row[2:8] == (29, 29, 3, 0, 3, 0)
    assert row[8] == pytest.approx(3 / 29)


@pytest.mark.filterwarnings("ignore:The data type")  # zarr v3: fixed-width unicode dtype
@pytest.mark.filterwarnings("ignore:Consolidated metadata")  # zarr v3 + xarray default
@pytest.mark.parametrize("kind", ["significance", "model_variation"])
def test_lazy_zarr_store_gives_identical_summary(tmp_path, kind):
    # the summary must work on a dask-backed Dataset opened from zarr, as open_results returns
    ds = kind_dataset(kind)
    ds.to_zarr(tmp_path / "s.zarr", mode="w")
    lazy = xr.open_zarr(tmp_path / "s.zarr")
    assert lazy["value"].chunks is not None
    assert render_summary(lazy, "json") == render_summary(ds, "json")


def test_html_keeps_variant_indentation_and_rows_on_one_line():
    """In the HTML report a variant stays indented under its source, and cells do not wrap."""
    from toyengine.summary.html import _CSS

    t = Table(title="t", headers=(Cell.of("Source"), Cell.of("x")),
              rows=((Cell.of("resolution"), Cell.of("1")), (Cell.of("    apollonios"),
                                                            Cell.of("2"))),
              csv_header=("source", "x"), csv_rows=(("resolution", 1), ("apollonios", 2)),
              align="lr")
    out = t.to_html()
    assert '<td style="text-align:left">resolution</td>' in out
    assert '<td style="text-align:left;padding-left:2.7em">apollonios</td>' in out
    assert "white-space: nowrap" in _CSS
