"""Plots of the summary layer (PNG, matplotlib; optional dependency ``toyengine[plot]``).

Figures are built with :class:`matplotlib.figure.Figure` and the Agg canvas directly — no
``pyplot``, no global backend switch, so the functions are safe in workers and notebooks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from ..core.status import FitStatus
from ..study.kinds import kind_info
from ._common import MissingDependencyError, SummaryError, default_hypothesis
from .labels import param_label, with_units
from .pulls import pull_summary
from .significance import significance_summary
from .systematics import SystTable
from .teststat import test_statistic, variant_index

__all__ = ["plot_pulls", "plot_systematics", "plot_t_distribution", "write_plots"]


def _figure(figsize: tuple[float, float]) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        msg = (
            "plotting requires the optional package 'matplotlib'; install it with "
            "pip install 'toyengine[plot]'  (or: pip install matplotlib)"
        )
        raise MissingDependencyError(msg) from exc
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | Path | None) -> None:
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)


def plot_t_distribution(
    ds: xr.Dataset,
    path: str | Path | None = None,
    *,
    variant: int | str = 0,
    bins: int = 50,
    log: bool = True,
) -> Any:
    """Toy t = Δ(−2 ln L) against the fitted-χ² and Wilks-χ² descriptions.

    Left: histogram (density) of the toy t with the fitted χ² and the Wilks χ²(ndof_wilks)
    densities (nested hypotheses; negative t clipped to 0 as in :func:`~.fit_chi2_ndof`).
    For J^P studies (non-nested, t of either sign) the signed histogram is shown alone.
    Right: tail probability P(t ≥ x) of the toys (with the Clopper–Pearson ±1σ band) and of
    the χ² descriptions — the p-value as a function of the observed t. The observed t
    (``attrs["observed_t"]``) is a vertical line in both. Returns the Figure (saved as PNG
    to ``path`` if given).
    """
    fig = _figure((11.0, 4.4))
    ax, ax2 = fig.subplots(1, 2)
    summ = significance_summary(ds, variant)
    t = test_statistic(ds).isel(variant=variant_index(ds, variant)).values
    t = t[np.isfinite(t)]
    nested = kind_info(summ.kind).nested
    if nested:
        t = np.clip(t, 0.0, None)
    title = f"{summ.study_name or 'study'} — {summ.kind} ({summ.variant_name})"
    fig.suptitle(title, fontsize=10)
    if t.size == 0:
        ax.text(0.5, 0.5, "no usable toys", ha="center", transform=ax.transAxes)
        _save(fig, path)
        return fig
    hi = float(np.quantile(t, 0.999)) * 1.15
    if math.isfinite(summ.observed_t):
        hi = max(hi, summ.observed_t * 1.1)
    lo = min(0.0, float(t.min()))
    edges = np.linspace(lo, hi, bins + 1)
    ax.hist(
        t,
        bins=edges,
        density=True,
        histtype="stepfilled",
        alpha=0.35,
        color="C0",
        label=f"toys ({t.size}; failed {summ.n_done - summ.n_used})",
    )
    x = np.linspace(max(lo, 1e-3), hi, 400)
    f = summ.chi2_fit
    curves = []
    if f is not None:
        lab = f"fitted χ²: ndof = {f.ndof:.2f} ± {f.ndof_err:.2f}"
        curves.append(("C1-", lab, f.ndof, f.scale, 1.0 - f.zero_fraction))
    if math.isfinite(summ.ndof_wilks):
        curves.append(("C2--", f"Wilks χ²(ndof = {summ.ndof_wilks:g})", summ.ndof_wilks, 1.0, 1.0))
    if nested:
        for style, lab, k, sc, norm in curves:
            ax.plot(x, norm * stats.chi2.pdf(x, k, scale=sc), style, label=lab)
    ax.set_xlabel(f"t = 2(nll[{summ.h0}] − nll[{summ.h1}])")
    ax.set_ylabel("density")
    # right panel: tail probabilities
    ts = np.sort(t)
    n = ts.size
    grid = np.linspace(lo, hi, 300)
    k = n - np.searchsorted(ts, grid, side="left")
    p_toy = k / n
    a = 1.0 - 0.682689492137086
    lo_b = np.where(k > 0, stats.beta.ppf(a / 2, np.maximum(k, 1), n - k + 1), 0.0)
    hi_b = np.where(k < n, stats.beta.ppf(1 - a / 2, k + 1, np.maximum(n - k, 1)), 1.0)
    ax2.fill_between(grid, lo_b, hi_b, color="C0", alpha=0.25, step="post", lw=0)
    ax2.step(grid, p_toy, where="post", color="C0", label="toys P(t_toy ≥ t) ± CP 68%")
    xs = np.linspace(max(lo, 0.0), hi, 400)
    for style, lab, kk, sc, norm in curves:
        ax2.plot(xs, norm * stats.chi2.sf(xs, kk, scale=sc), style, label=lab)
    ax2.set_yscale("log")
    ax2.set_ylim(max(0.3 / n, 1e-12), 1.5)
    ax2.set_xlabel("t")
    ax2.set_ylabel("tail probability P(t_toy ≥ t)")
    for a_ in (ax, ax2):
        if math.isfinite(summ.observed_t):
            a_.axvline(
                summ.observed_t, color="C3", lw=1.5, label=f"observed t = {summ.observed_t:.4g}"
            )
        a_.legend(fontsize=8)
    if log:
        ax.set_yscale("log")
    _save(fig, path)
    return fig


#: pull histograms span ±PULL_RANGE; pulls beyond are counted on the plot
PULL_RANGE = 5.0


class _Normality:
    """Shapiro–Wilk test of normality (S. S. Shapiro and M. B. Wilk, Biometrika 52 (1965)
    591); truthy unless normality is rejected at 1e-3 (or fewer than 8 values)."""

    def __init__(self, pvalue: float) -> None:
        self.pvalue = pvalue

    def __bool__(self) -> bool:
        return not self.pvalue < 1e-3


def _looks_gaussian(g: np.ndarray) -> _Normality:
    if g.size < 8 or np.ptp(g) == 0:
        return _Normality(math.nan)
    sample = g if g.size <= 5000 else np.random.default_rng(0).choice(g, 5000, replace=False)
    return _Normality(float(stats.shapiro(sample).pvalue))


def plot_pulls(
    ds: xr.Dataset,
    path: str | Path | None = None,
    *,
    hypothesis: str | None = None,
    variant: int | str = 0,
    params: Sequence[str] | None = None,
    bins: int = 30,
) -> Any:
    """Pull distributions (HESSE) per parameter with the ML Gaussian fit overlaid.

    The Gaussian's mean and width are the ML estimates (sample mean and standard deviation,
    as in :func:`~.pull_summary`), shown with their uncertainties; the N(0, 1) expectation
    is drawn dashed.
    """
    hyp = hypothesis or default_hypothesis(ds)
    v = variant_index(ds, variant)
    table = pull_summary(ds, hypothesis=hyp)
    labels = param_label(ds)
    rows = [r for r in table.rows if r.variant == v and (params is None or r.param in params)]
    if not rows:
        msg = f"plot_pulls: no parameter with a truth value and HESSE errors for {hyp!r}"
        raise SummaryError(msg)
    ncol = min(3, len(rows))
    nrow = math.ceil(len(rows) / ncol)
    fig = _figure((4.0 * ncol, 3.2 * nrow))
    axes = fig.subplots(nrow, ncol, squeeze=False)
    val = ds["value"].isel(variant=v).sel(hypothesis=hyp)
    err = ds["error"].isel(variant=v).sel(hypothesis=hyp)
    ok = ds["valid"].isel(variant=v).sel(hypothesis=hyp).values.astype(bool)
    if "status" in ds:
        ok &= ds["status"].isel(variant=v).sel(hypothesis=hyp).values != FitStatus.NOT_RUN
    for ax, r in zip(axes.flat, rows, strict=False):
        x = val.sel(param=r.param).values
        e = err.sel(param=r.param).values
        m = ok & np.isfinite(x) & np.isfinite(e) & (e > 0)
        g = (x[m] - r.truth) / e[m]
        edges = np.linspace(-PULL_RANGE, PULL_RANGE, bins + 1)
        ax.hist(g, bins=edges, histtype="stepfilled", alpha=0.4, color="C0")
        xx = np.linspace(-PULL_RANGE, PULL_RANGE, 300)
        w = (edges[1] - edges[0]) * g.size
        stats_text = (f"μ = {r.pull_mean:.3f} ± {r.pull_mean_err:.3f}\n"
                      f"σ = {r.pull_width:.3f} ± {r.pull_width_err:.3f}")
        gaussian = _looks_gaussian(g)
        if g.size > 1 and gaussian:
            ax.plot(xx, w * stats.norm.pdf(xx, r.pull_mean, r.pull_width), "C1-",
                    label=stats_text)
        elif g.size > 1:  # a Gaussian over a clearly non-Gaussian histogram would mislead
            ax.plot([], [], " ", label=f"{stats_text}\nnot Gaussian (Shapiro–Wilk "
                                       f"p = {gaussian.pvalue:.1g}): no fit drawn")
        ax.plot(xx, w * stats.norm.pdf(xx), "k--", lw=0.8, label="N(0, 1)")
        beyond = int(np.count_nonzero(np.abs(g) > PULL_RANGE))
        if beyond:
            ax.text(0.02, 0.97, f"{beyond} pull(s) beyond ±{PULL_RANGE:g} not shown\n"
                    f"(min {g.min():.3g}, max {g.max():.3g})", transform=ax.transAxes,
                    va="top", fontsize=7, color="C3")
        ax.set_xlabel(f"pull of {labels.get(r.param, r.param)}  (x̂ − truth)/σ̂")
        ax.set_ylabel(f"toys / {edges[1] - edges[0]:.2g}")
        ax.set_title(
            f"{r.hypothesis}: n={r.n_used}, failed {100 * r.failed_fraction:.2g}%", fontsize=9
        )
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(rows) :]:
        ax.set_visible(False)
    _save(fig, path)
    return fig


def _clip_fit_bias(ax: Any, st: SystTable, sh: np.ndarray, er: np.ndarray, tot: float,
                   y: np.ndarray) -> None:
    """Scale a panel to the systematic variants: the nominal ensemble's bar (its fit bias,
    not a systematic) is clipped at the edge with its value written, when it is larger."""
    nominal = np.array([vs.group == "nominal" for vs in st.variants])
    reach = np.abs(sh) + np.where(np.isfinite(er), er, 0.0)
    others = reach[~nominal & np.isfinite(reach)]
    lim = max([*others, tot if math.isfinite(tot) else 0.0], default=0.0) * 1.2
    big = nominal & np.isfinite(sh) & (reach > lim)
    if lim <= 0 or not big.any():
        return
    ax.set_xlim(-lim, lim)
    for i in np.flatnonzero(big):
        side = 1.0 if sh[i] > 0 else -1.0
        ax.text(side * 0.97 * lim, y[i], f"fit bias {sh[i]:.3g} ▸" if side > 0
                else f"◂ fit bias {sh[i]:.3g}", ha="right" if side > 0 else "left",
                va="center", fontsize=9, color="k", zorder=5,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def plot_systematics(
    table: SystTable | xr.Dataset,
    path: str | Path | None = None,
    *,
    max_variants: int = 40,
) -> Any:
    """Systematic-shift chart, one panel per parameter.

    With at most ``max_variants`` variants: one bar per variant with its signed shift and
    the toy statistical error, coloured by source (variant_group). With more (random draws,
    smeared templates): one bar per source spanning ``[−down, +up]`` with the symmetric value
    marked. Dashed lines mark ± the quadrature total. Accepts a :class:`SystTable` or a
    Dataset (then :func:`systematic_table` with defaults).
    """
    st = with_units(table) if isinstance(table, xr.Dataset) else table
    per_variant = len(st.variants) <= max_variants
    nrows = len(st.variants) if per_variant else len(st.rows) + len(st.separate)
    npar = len(st.params)
    fig = _figure((4.2 * npar + 2.6, 0.42 * max(nrows, 3) + 1.8))
    axes = fig.subplots(1, npar, squeeze=False, sharey=True)[0]
    y = np.arange(nrows)
    if per_variant:
        groups = list(dict.fromkeys(vs.group for vs in st.variants))
        colors = {g: f"C{i % 10}" for i, g in enumerate(groups)}
        labels = [f"{vs.group}: {vs.name}" for vs in st.variants]
    else:
        sources = [*st.rows, *st.separate]
        labels = [f"{r.source}{' (separate)' if r.separate else ''}" for r in sources]
    for ax, p in zip(axes, st.params, strict=True):
        k = st.scale.get(p, 1.0)
        if per_variant:
            sh = np.array([vs.shift[p] for vs in st.variants]) * k
            er = np.array([vs.stat[p] for vs in st.variants]) * k
            ax.barh(
                y,
                sh,
                xerr=np.where(np.isfinite(er), er, 0.0),
                color=[colors[vs.group] for vs in st.variants],
                alpha=0.8,
            )
        else:
            up = np.array([r.up[p] for r in sources]) * k
            down = np.array([r.down[p] for r in sources]) * k
            val = np.array([r.value[p] for r in sources]) * k
            ax.barh(y, up + down, left=-down, color="C0", alpha=0.5, label="[−down, +up]")
            ax.plot(val, y, "k|", ms=12, label="symmetric value")
            ax.legend(fontsize=7)
        tot = st.total[p] * k
        if math.isfinite(tot):
            for s in (-1, 1):
                ax.axvline(s * tot, color="k", ls="--", lw=0.8)
        if per_variant:
            _clip_fit_bias(ax, st, sh, er, tot, y)
        ax.axvline(0.0, color="k", lw=0.6)
        unit = f" [{st.units[p]}]" if p in st.units else ""
        ax.set_xlabel(f"shift of {p}{unit}")
        ax.set_ylabel("")
    axes[0].set_yticks(y, labels, fontsize=10)
    axes[0].invert_yaxis()
    fig.suptitle(f"Systematic shifts (vs {st.relative_to}); dashed: ± total", fontsize=11)
    _save(fig, path)
    return fig


def write_plots(ds: xr.Dataset, outdir: str | Path) -> list[Path]:
    """Write the PNGs that fit the study kind into ``outdir``; return their paths.

    ``t_distribution[_<variant>].png`` for significance / J^P studies; ``pulls_<hyp>.png``
    for every hypothesis with truth values (first variant); ``systematics.png`` for the
    variation kinds.
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    kind = kind_info(ds.attrs.get("kind", ""))
    if ds.attrs.get("h0") and ds.attrs.get("h1") and (kind.toy_test or ds.sizes["variant"] == 1):
        for v in range(ds.sizes["variant"]):
            suffix = f"_{v}" if ds.sizes["variant"] > 1 else ""
            p = out / f"t_distribution{suffix}.png"
            plot_t_distribution(ds, p, variant=v)
            written.append(p)
    if "truth" in ds and bool(np.isfinite(ds["truth"].values).any()):
        from .report import generating_hypothesis

        gen = generating_hypothesis(ds) if kind.toy_test else None
        table = pull_summary(ds, hypothesis=gen)
        for h in dict.fromkeys(r.hypothesis for r in table.rows if r.variant == 0):
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in h)
            p = out / f"pulls_{safe}.png"
            plot_pulls(ds, p, hypothesis=h)
            written.append(p)
    if kind.systematic:
        p = out / "systematics.png"
        plot_systematics(with_units(ds), p)
        written.append(p)
    return written
