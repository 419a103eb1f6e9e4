"""The HTML report of a results Dataset: one self-contained document to attach to an analysis
note (``toyengine report STORE`` opens the store and writes it: :mod:`toyengine.cli.report`).

The file holds the summary tables (headline first), the plots as embedded PNG images
(``data:`` URIs — no external files), the study file, and the provenance: study digest,
software versions (those that wrote the store and those that made the report), root seed,
toys, failed fits and fit timings. Plots use mplhep's LHCb style when mplhep is installed.
"""

from __future__ import annotations

import base64
import html
import io
import platform
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np
import xarray as xr

from ..core.status import FitStatus
from ..study.kinds import kind_info
from ._common import MissingDependencyError, SummaryError
from .report import summary_tables

__all__ = ["render_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 90em; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table.toyengine, table.prov { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
table.toyengine caption { font-weight: bold; text-align: left; padding: 0.3em 0; }
table.toyengine th, table.toyengine td, table.prov td { padding: 0.2em 0.7em; }
table.toyengine thead th, table.toyengine tbody td { white-space: nowrap; }
div.scroll { overflow-x: auto; }
table.toyengine tfoot td { white-space: normal; }
table.toyengine thead th { border-top: 2px solid #222; border-bottom: 1px solid #222; }
table.toyengine tbody tr:last-child td { border-bottom: 2px solid #222; }
table.prov td:first-child { color: #555; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; }
"""


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("toyengine", "numpy", "scipy", "iminuit", "xarray", "zarr", "dask",
                "distributed", "matplotlib", "mplhep", "uproot"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    if "toyengine" not in out:
        from .._version import __version__

        out["toyengine"] = __version__
    return out


def _provenance(ds: xr.Dataset, store: str | None,
                last_run: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    a = ds.attrs
    status = np.asarray(ds["status"].values)
    done = status != FitStatus.NOT_RUN
    failed = done & (status != FitStatus.VALID)
    rows = [
        ("study", f"{a.get('study_name', '')} (kind {a.get('kind', '')})"),
        ("study digest (sha256)", str(a.get("spec_digest", ""))),
        ("root seed", str(a.get("root_seed", ""))),
        ("toys per variant × variants", f"{ds.sizes['toy']} × {ds.sizes['variant']}"),
        ("hypotheses fitted", ", ".join(str(h) for h in ds["hypothesis"].values)),
        ("fits attempted / failed",
         f"{int(done.sum())} / {int(failed.sum())}"
         f" ({100 * failed.sum() / max(int(done.sum()), 1):.2f}%)"),
        ("fits not done", str(int((~done).sum()))),
        ("chunks done", f"{int(np.asarray(ds['chunk_done'].values).sum())} / "
                        f"{ds.sizes.get('chunk', 0)} (chunk size {a.get('chunk_size', '')})")
        if "chunk_done" in ds else ("chunks", "—"),
        ("fit options", f"starts {a.get('fit_starts', '')}, MINOS "
                        f"{'on' if a.get('fit_minos') else 'off'}"),
    ]
    if "fit_time" in ds:
        ft = np.asarray(ds["fit_time"].values, dtype=float)
        ft = ft[np.isfinite(ft)]
        if ft.size:
            rows.append(("fit time: total / mean per fit",
                         f"{ft.sum():.1f} s CPU / {1e3 * ft.mean():.1f} ms"))
    if store is not None:
        st = last_run
        if st is not None and st.get("elapsed_s") is not None:
            rows.append(("last run", f"{st.get('state', '')}, {st['elapsed_s']:.0f} s wall, "
                                     f"{st.get('rate') or 0:.2f} toys/s, ended "
                                     f"{st.get('updated', '')}"))
        rows.append(("store", str(store)))
    rows.append(("written by", f"toyengine {a.get('toyengine_version', '')}"))
    rows.append(("report made with", ", ".join(f"{k} {v}" for k, v in _versions().items())))
    rows.append(("report made", datetime.now(UTC).isoformat(timespec="seconds")))
    return rows


@contextmanager
def _style() -> Iterator[str]:
    """mplhep's LHCb style where installed, else matplotlib's defaults."""
    import matplotlib as mpl

    try:
        import mplhep
    except ImportError:
        yield "matplotlib default"
        return
    style = getattr(mplhep.style, "LHCb2", None) or mplhep.style.LHCb
    with mpl.style.context(style):
        yield "mplhep LHCb"


def _figures(ds: xr.Dataset) -> list[tuple[str, Any]]:
    """(caption, figure) for the plots that fit the study kind (see ``write_plots``)."""
    from .plots import plot_pulls, plot_systematics, plot_t_distribution
    from .pulls import pull_summary
    from .report import generating_hypothesis

    kind = kind_info(ds.attrs.get("kind", ""))
    out: list[tuple[str, Any]] = []
    if kind.systematic:
        try:
            out.append(("Systematic shifts per variant with their toy statistical errors; "
                        "dashed: ± the total; the nominal ensemble's fit bias is clipped at "
                        "the edge (value written) when it is larger than the systematics",
                        plot_systematics(ds)))
        except SummaryError:
            pass
    if ds.attrs.get("h0") and ds.attrs.get("h1") and (kind.toy_test
                                                      or ds.sizes["variant"] == 1):
        for v in range(ds.sizes["variant"]):
            out.append((f"Toy test statistic (variant {v}) with the χ² descriptions "
                        "(Wilks ndof and fitted ndof)", plot_t_distribution(ds, variant=v)))
    if "truth" in ds and bool(np.isfinite(ds["truth"].values).any()):
        gen = generating_hypothesis(ds) if kind.toy_test else None
        table = pull_summary(ds, hypothesis=gen)
        for h in dict.fromkeys(r.hypothesis for r in table.rows if r.variant == 0):
            out.append((f"Pulls of the {h} fit with the Gaussian ML fit (not drawn where "
                        "Shapiro–Wilk rejects a Gaussian); dashed: N(0, 1); pulls beyond ±5 "
                        "are counted on the panel",
                        plot_pulls(ds, hypothesis=h)))
    return out


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_html(ds: xr.Dataset, store: str | None = None,
                last_run: Mapping[str, Any] | None = None) -> str:
    """The report of ``ds`` as one HTML document (plots embedded as base64 PNG).

    Parameters
    ----------
    ds : xarray.Dataset
        Results store (:func:`toyengine.open_results`).
    store : str, optional
        The store's path or URL, shown in the provenance.
    last_run : mapping, optional
        The live status of the last run (:func:`toyengine.store.read_status`), shown in the
        provenance with ``store``.

    Returns
    -------
    str
    """
    name = str(ds.attrs.get("study_name", "study"))
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>toyengine report: {html.escape(name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>toyengine report: {html.escape(name)}</h1>",
        f"<p>kind <b>{html.escape(str(ds.attrs.get('kind', '')))}</b>; tables headline "
        "first; parameters as label [unit] in the models' units.</p>",
        "<h2>Summary</h2>",
    ]
    # one table row per line (no wrapping inside a cell); a table wider than the page scrolls
    parts.extend(f'<div class="scroll">{t.to_html()}</div>' for t in summary_tables(ds))
    parts.append("<h2>Plots</h2>")
    try:
        with _style() as style_name:
            figs = [(cap, _png(fig)) for cap, fig in _figures(ds)]
        parts.append(f"<p><small>style: {style_name}</small></p>")
        for cap, b64 in figs:
            parts.append(f'<figure><img alt="{html.escape(cap)}" '
                         f'src="data:image/png;base64,{b64}"><figcaption>'
                         f"{html.escape(cap)}</figcaption></figure>")
    except MissingDependencyError as exc:
        parts.append(f"<p>No plots: {html.escape(str(exc))}</p>")
    parts.append("<h2>Provenance</h2>")
    parts.append('<table class="prov">' + "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
        for k, v in _provenance(ds, store, last_run)) + "</table>")
    parts.append("<h2>Study file</h2>")
    parts.append(f"<pre>{html.escape(str(ds.attrs.get('study_yaml', '')))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
