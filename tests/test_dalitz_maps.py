"""SDP efficiency/background maps: reading, validation (bad inputs name the file and the
problem), cubic-spline smoothing, and the smearing variations of LHCb,
Eur. Phys. J. C 78 (2018) 1019, Sect. 7."""

from __future__ import annotations

import numpy as np
import pytest

from toyengine.core.dalitz.maps import SDPHistogram
from toyengine.errors import ModelError
from toyengine.models.zc4100 import build_zc4100
from toyengine.models.zc4100_maps import background_maps, efficiency_maps


def _write(path, **arrays) -> str:
    np.savez(path, **arrays)
    return str(path)


def _good(n=(6, 5)) -> dict[str, np.ndarray]:
    v = np.full(n, 0.5)
    return {"values": v, "errors": 0.1 * v, "mprime_edges": np.linspace(0, 1, n[0] + 1),
            "thprime_edges": np.linspace(0, 1, n[1] + 1)}


def test_npz_round_trip(tmp_path) -> None:
    h = efficiency_maps()["run1"]
    h.save_npz(tmp_path / "e.npz")
    g = SDPHistogram.from_npz(tmp_path / "e.npz", "efficiency")
    np.testing.assert_array_equal(g.values, h.values)
    np.testing.assert_array_equal(g.errors, h.errors)
    assert g.source.endswith("e.npz")


@pytest.mark.parametrize("change, match", [
    ({"values": np.full((5, 5), 0.5)}, "wrong shape or binning"),
    ({"mprime_edges": np.linspace(0, 0.9, 7)}, r"span the square Dalitz plot \[0, 1\]"),
    ({"thprime_edges": np.array([0, 0.3, 0.2, 0.6, 0.8, 1.0])}, "strictly increasing"),
    ({"values": np.where(np.eye(6, 5) > 0, -0.1, 0.5)}, "negative bin"),
    ({"values": np.where(np.eye(6, 5) > 0, np.nan, 0.5)}, "NaN"),
    ({"values": np.zeros((6, 5))}, "efficiency is zero everywhere"),
    ({"errors": np.zeros((5, 5))}, "'errors' has shape"),
    ({"mprime_edges": np.linspace(0, 1, 4), "values": np.ones((3, 5))}, ">= 5 edges"),
])
def test_bad_maps_name_file_and_problem(tmp_path, change, match) -> None:
    arrays = {**_good(), **change}
    path = _write(tmp_path / "bad_eff.npz", **arrays)
    with pytest.raises(ModelError, match=match) as exc:
        SDPHistogram.from_npz(path, "efficiency")
    assert "bad_eff.npz" in str(exc.value)


def test_missing_file_and_key(tmp_path) -> None:
    with pytest.raises(ModelError, match="nope.npz: file not found"):
        SDPHistogram.from_npz(tmp_path / "nope.npz", "background")
    arrays = _good()
    del arrays["thprime_edges"]
    path = _write(tmp_path / "k.npz", **arrays)
    with pytest.raises(ModelError, match=r"k.npz: missing array\(s\) \['thprime_edges'\]"):
        SDPHistogram.from_npz(path, "efficiency")
    path = _write(tmp_path / "kind.npz", **_good(), kind=np.array("background"))
    with pytest.raises(ModelError, match="expected 'efficiency'"):
        SDPHistogram.from_npz(path, "efficiency")


def test_builder_reports_bad_map_file(tmp_path) -> None:
    for run in ("run1", "run2"):
        efficiency_maps()[run].save_npz(tmp_path / f"eff_{run}.npz")
    background_maps()["comb"].save_npz(tmp_path / "bkg_comb.npz")
    _write(tmp_path / "bkg_nr.npz", **{**_good(), "values": -np.ones((6, 5))})
    with pytest.raises(ModelError, match="bkg_nr.npz: .*negative"):
        build_zc4100({"map_dir": str(tmp_path)})
    (tmp_path / "bkg_nr.npz").unlink()
    with pytest.raises(ModelError, match="bkg_nr.npz: file not found"):
        build_zc4100({"map_dir": str(tmp_path)})


def test_efficiency_zero_on_allowed_region() -> None:
    """An efficiency whose smoothed map vanishes wherever the vetoes allow events is
    rejected at build time (here: non-zero only at m' > 0.9, i.e. m(K+π−) inside the
    70 MeV border band)."""
    from toyengine.core.dalitz.maps import SDPSpline
    from toyengine.core.dalitz.model import DalitzModel, RunSpec

    class EdgeOnly(SDPHistogram):
        def spline(self):
            inner = SDPHistogram.spline(self)

            class S(SDPSpline):
                def __call__(self, mp, thp):
                    return np.where(np.asarray(mp) > 0.9, inner(mp, thp), 0.0)

            return S(inner.spline, self.source)

    good = build_zc4100({"maps": "synthetic", "hypothesis": "baseline"})
    h = efficiency_maps()["run1"]
    edge = EdgeOnly(h.values, h.errors, h.mprime_edges, h.thprime_edges, "efficiency",
                    "edge_only_eff.npz")
    runs = [RunSpec("run1", edge, "n_sig_run1", good.runs[0].backgrounds), good.runs[1]]
    with pytest.raises(ModelError, match="edge_only_eff.npz .* zero over the whole allowed"):
        DalitzModel(good.kin, good.components, good.parameters, runs, good.vetoes)


def test_spline_reproduces_cubic_polynomials() -> None:
    """A not-a-knot bicubic interpolating spline is exact for bicubic polynomials, also
    between the outermost bin centres and the SDP edges."""
    def f(a, b):
        return 2.0 + a - 0.5 * a**2 + 0.3 * a**3 + (0.4 * b - 0.2 * b**3) * (1 + a)

    n = (9, 7)
    me, te = np.linspace(0, 1, n[0] + 1), np.linspace(0, 1, n[1] + 1)
    cm, ct = 0.5 * (me[1:] + me[:-1]), 0.5 * (te[1:] + te[:-1])
    h = SDPHistogram(f(cm[:, None], ct[None, :]), np.zeros(n), me, te, "background")
    rng = np.random.default_rng(1)
    a, b = rng.random(500), rng.random(500)
    np.testing.assert_allclose(h.spline()(a, b), f(a, b), rtol=1e-10)
    # interpolating: passes through the bin contents at the bin centres
    np.testing.assert_allclose(h.spline()(cm[:, None], ct[None, :]), h.values, rtol=1e-12)


def test_independent_smearing_statistics() -> None:
    b = background_maps()["nr"]  # scaled up so that no bin is clipped at zero
    h = SDPHistogram(100 * b.values, 10 * b.errors, b.mprime_edges, b.thprime_edges,
                     "background")
    rng = np.random.default_rng(2)
    n = 400
    draws = np.stack([h.smeared(rng).values for _ in range(n)])
    # bins with values > 3σ are (almost) never clipped at zero: mean = value within
    # 5 σ/sqrt(n); the spread matches the error within 5 × its own sampling error
    ok = h.values > 3 * h.errors
    assert ok.sum() >= 90
    mean_dev = (draws.mean(axis=0) - h.values)[ok] / (h.errors[ok] / np.sqrt(n))
    assert np.max(np.abs(mean_dev)) < 5.0
    rel_sd = draws.std(axis=0)[ok] / h.errors[ok]
    assert np.max(np.abs(rel_sd - 1.0)) < 5.0 / np.sqrt(2 * n)
    assert np.all(draws >= 0)


def test_correlated_smearing_is_local_and_linear() -> None:
    h = efficiency_maps()["run1"]
    rng = np.random.default_rng(3)
    g = h.smeared(rng, "correlated", n_bins=1, radius=2)
    z = (g.values - h.values) / h.errors
    i, j = np.unravel_index(np.argmax(np.abs(z)), z.shape)
    ii, jj = np.indices(z.shape)
    d = np.maximum(np.abs(ii - i), np.abs(jj - j))
    # tent: z(d) = z0 (1 − d/3) for d <= 2, zero beyond
    expected = z[i, j] * np.clip(1 - d / 3.0, 0, None)
    np.testing.assert_allclose(z, expected, atol=1e-12)
    g10 = h.smeared(np.random.default_rng(4), "correlated", n_bins=10, radius=2)
    changed = np.count_nonzero(g10.values != h.values)
    assert 25 <= changed <= 10 * 25
    with pytest.raises(ModelError, match="mode"):
        h.smeared(rng, "nonsense")


def test_builder_smearing_variants() -> None:
    bl = {"maps": "synthetic", "hypothesis": "baseline"}
    base = build_zc4100(bl)
    with pytest.raises(ModelError, match="need an rng"):
        build_zc4100({**bl, "smearing": "background"})
    sm = build_zc4100({**bl, "smearing": "background"}, np.random.default_rng(5))
    b0 = base.runs[0].backgrounds[0][1]
    b1 = sm.runs[0].backgrounds[0][1]
    assert not np.allclose(b0.values, b1.values)
    # the merged background shape stays shared between the runs
    assert sm.runs[0].backgrounds[0][1] is sm.runs[1].backgrounds[0][1]
    np.testing.assert_array_equal(sm.runs[0].efficiency.values, base.runs[0].efficiency.values)
    se = build_zc4100({**bl, "smearing": "efficiency_correlated"},
                      np.random.default_rng(6))
    assert not np.allclose(se.runs[1].efficiency.values, base.runs[1].efficiency.values)
    np.testing.assert_array_equal(se.runs[0].backgrounds[1][1].values,
                                  base.runs[0].backgrounds[1][1].values)
    # same rng seed, same variant
    a = build_zc4100({**bl, "smearing": "efficiency"}, np.random.default_rng(7))
    b = build_zc4100({**bl, "smearing": "efficiency"}, np.random.default_rng(7))
    np.testing.assert_array_equal(a.runs[0].efficiency.values, b.runs[0].efficiency.values)


def test_root_input_is_optional(tmp_path) -> None:
    try:
        import uproot  # type: ignore[import-not-found]
    except ImportError:
        with pytest.raises(ModelError, match="requires optional package 'uproot'"):
            SDPHistogram.from_root(tmp_path / "x.root", "h", "efficiency")
        return
    arr = _good()
    with uproot.recreate(tmp_path / "x.root") as f:
        f["h"] = (arr["values"], arr["mprime_edges"], arr["thprime_edges"])
    h = SDPHistogram.from_root(tmp_path / "x.root", "h", "efficiency")
    np.testing.assert_allclose(h.values, arr["values"])
