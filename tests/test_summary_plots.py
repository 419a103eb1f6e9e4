"""Plots: written, non-empty PNG files; actionable error without matplotlib."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from toyengine.errors import ToyEngineError
from toyengine.summary import (
    MissingDependencyError,
    plot_pulls,
    plot_systematics,
    plot_t_distribution,
    systematic_table,
    write_plots,
)
from toyengine.summary.testing import make_results_dataset

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_png(path, min_size=5000):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) > min_size, (path, len(data))


def _significance_ds(kind="significance"):
    rng = np.random.default_rng(0)
    n = 400
    t = rng.chisquare(3, n) if kind == "significance" else rng.normal(-4, 3, n)
    nll = np.zeros((1, n, 2))
    nll[0, :, 0] = t / 2
    val = np.stack([rng.normal(0, 10, n), rng.normal(5, 1, n)], axis=-1)
    value = np.stack([val, val], axis=1)[None]  # (1, n, 2, 2)
    err = np.broadcast_to([10.0, 1.0], value.shape).copy()
    valid = np.ones((1, n, 2), bool)
    valid[0, :7, 1] = False
    return make_results_dataset(
        params=["n_sig", "mass"],
        hypotheses=["H0", "H1"],
        value=value,
        error=err,
        nll=nll,
        valid=valid,
        truth=np.array([[0.0, 5.0]]),
        kind=kind,
        h0="H0",
        h1="H1",
        ndof_wilks=3 if kind == "significance" else 1,
        observed_t=12.0,
    )


def _variation_ds():
    rng = np.random.default_rng(1)
    nv, n = 5, 40
    mean = np.array([10.0, 10.4, 9.7, 10.2, 9.9])
    value = mean[:, None, None, None] + rng.normal(0, 0.3, (nv, n, 1, 1))
    return make_results_dataset(
        params=["delta_m"],
        hypotheses=["nominal"],
        value=value,
        error=np.full_like(value, 0.3),
        truth=np.full((nv, 1), 10.0),
        reference=np.array([10.0]),
        variant_names=["default", "student_t", "johnson_su", "scale_up", "scale_down"],
        variant_groups=["nominal", "resolution", "resolution", "scale", "scale"],
        kind="model_variation",
    )


@pytest.mark.parametrize("kind", ["significance", "jp_rejection"])
def test_write_plots_significance(tmp_path, kind):
    paths = write_plots(_significance_ds(kind), tmp_path / "out")
    names = sorted(p.name for p in paths)
    assert names == ["pulls_H0.png", "pulls_H1.png", "t_distribution.png"]
    for p in paths:
        _check_png(p)


def test_write_plots_model_variation(tmp_path):
    paths = write_plots(_variation_ds(), tmp_path)
    assert {p.name for p in paths} == {"pulls_nominal.png", "systematics.png"}
    for p in paths:
        _check_png(p)


def test_individual_plot_functions(tmp_path):
    ds = _significance_ds()
    fig = plot_t_distribution(ds, tmp_path / "t.png", log=False)
    for ax in fig.axes:  # density panel and tail-probability panel
        labels = [line.get_label() for line in ax.get_lines()]
        assert any(lbl.startswith("fitted χ²") for lbl in labels)
        assert any(lbl.startswith("Wilks χ²") for lbl in labels)
        assert any(lbl.startswith("observed t") for lbl in labels)
    _check_png(tmp_path / "t.png")
    fig = plot_pulls(ds, tmp_path / "p.png", hypothesis="H1")
    assert len([a for a in fig.axes if a.get_visible()]) == 2
    _check_png(tmp_path / "p.png")
    st = systematic_table(_variation_ds()).scaled(1e3, "keV")
    fig = plot_systematics(st, tmp_path / "s.png")
    assert "keV" in fig.axes[0].get_xlabel()
    assert len(fig.axes[0].get_yticklabels()) == 5  # one bar per variant
    _check_png(tmp_path / "s.png")
    fig = plot_systematics(st, tmp_path / "s2.png", max_variants=3)
    assert len(fig.axes[0].get_yticklabels()) == 2  # one bar per source
    _check_png(tmp_path / "s2.png")


def test_missing_matplotlib_gives_actionable_error(monkeypatch, tmp_path):
    for mod in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, mod, None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'toyengine\[plot\]'") as exc:
        write_plots(_variation_ds(), tmp_path)
    assert isinstance(exc.value, ToyEngineError) and isinstance(exc.value, ImportError)


def test_report_plots_say_what_they_leave_out():
    """The tail panel's axis is t; a Gaussian is not drawn over clearly non-Gaussian pulls;
    pulls beyond ±5 are counted on the panel; the nominal fit bias does not set the
    systematic panel's scale."""
    ds = _significance_ds()
    fig = plot_t_distribution(ds, log=False)
    assert fig.axes[1].get_xlabel() == "t"
    # n_sig: Gaussian pulls; mass: a two-point (clearly non-Gaussian) distribution with 3
    # pulls beyond ±5
    rng = np.random.default_rng(3)
    n = 400
    value = np.empty((1, n, 1, 2))
    value[0, :, 0, 0] = rng.normal(0, 1, n)
    value[0, :, 0, 1] = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    value[0, :3, 0, 1] = [7.0, -8.0, 6.0]
    pulls = make_results_dataset(params=["n_sig", "mass"], hypotheses=["nominal"],
                                 value=value, error=np.ones_like(value),
                                 truth=np.zeros((1, 2)))
    fig = plot_pulls(pulls)
    gauss, two_point = fig.axes[:2]
    labels = [line.get_label() for line in gauss.get_lines()]
    assert any(lb.startswith("μ =") for lb in labels)  # the Gaussian fit is drawn
    assert not [t for t in gauss.texts if "beyond" in t.get_text()]
    fitted = [ln for ln in two_point.get_lines() if ln.get_label().startswith("μ =")]
    assert len(fitted) == 1 and len(fitted[0].get_xdata()) == 0  # legend entry, no curve
    assert "not Gaussian" in fitted[0].get_label()
    (note,) = [t.get_text() for t in two_point.texts if "beyond" in t.get_text()]
    assert note.startswith("3 pull(s) beyond ±5")
    # systematics: a nominal fit bias 100x the variants' shifts is clipped at the edge
    vds = _variation_ds()
    vds["value"][0] = vds["value"][0] + 30.0
    st = systematic_table(vds)
    fig = plot_systematics(st)
    _, hi = fig.axes[0].get_xlim()
    assert hi < 10.0 and [t for t in fig.axes[0].texts if "fit bias" in t.get_text()]
