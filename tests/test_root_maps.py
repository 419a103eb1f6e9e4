"""Z_c(4100) maps from ROOT files: TH2 efficiency and background maps written with uproot
give a study identical to the same maps in .npz."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import uproot
import xarray as xr

from toyengine import load_spec, open_results, run_study
from toyengine.core.dalitz.maps import SDPHistogram

MAPS = Path(__file__).parent.parent / "studies" / "zc4100"
NAMES = {"eff_run1": "efficiency", "eff_run2": "efficiency", "bkg_comb": "background",
         "bkg_nr": "background"}


def th2(h: SDPHistogram, name: str):
    """A ROOT TH2D with the map's contents and errors (sum of squared weights)."""
    from uproot.writing.identify import to_TAxis, to_TH2x

    nx, ny = h.values.shape

    def flow(a: np.ndarray) -> np.ndarray:  # ROOT layout: (ny+2) rows of (nx+2), x fastest
        out = np.zeros((ny + 2, nx + 2))
        out[1:-1, 1:-1] = a.T
        return out.ravel()

    xa = to_TAxis("xaxis", "m'", nx, 0.0, 1.0, fXbins=h.mprime_edges)
    ya = to_TAxis("yaxis", "theta'", ny, 0.0, 1.0, fXbins=h.thprime_edges)
    w = float(h.values.sum())
    return to_TH2x(name, name, flow(h.values), fEntries=float(nx * ny), fTsumw=w,
                   fTsumw2=float((h.errors ** 2).sum()), fTsumwx=0.0, fTsumwx2=0.0,
                   fTsumwy=0.0, fTsumwy2=0.0, fTsumwxy=0.0, fSumw2=flow(h.errors ** 2),
                   fXaxis=xa, fYaxis=ya)


STUDY = """
name: zc-root-maps
kind: pulls
seed: 5
toys: 1
models:
  nominal:
    builder: zc4100
    options:
      hypothesis: baseline
      map_dir: {map_dir}
      map_files:
        run1: {{efficiency: {eff1}, comb: {comb}, nr: {nr}}}
        run2: {{efficiency: {eff2}, comb: {comb}, nr: {nr}}}
generate: nominal
hypotheses: [nominal]
fit: {{starts: 1}}
"""


def test_root_maps_give_the_npz_study(tmp_path: Path, client):
    with uproot.recreate(tmp_path / "maps.root") as f:
        for stem, kind in NAMES.items():
            f[stem] = th2(SDPHistogram.from_npz(MAPS / f"{stem}.npz", kind), stem)
    for stem in NAMES:
        shutil.copy(MAPS / f"{stem}.npz", tmp_path / f"{stem}.npz")
    # the maps read back from ROOT equal the .npz ones
    for stem, kind in NAMES.items():
        a = SDPHistogram.from_npz(MAPS / f"{stem}.npz", kind)
        b = SDPHistogram.from_root(tmp_path / "maps.root", stem, kind)
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(a.errors, b.errors)
        np.testing.assert_array_equal(a.mprime_edges, b.mprime_edges)
    root = {k: f"'maps.root:{k}'" for k in NAMES}
    npz = {k: f"{k}.npz" for k in NAMES}
    stores = {}
    for tag, names in (("root", root), ("npz", npz)):
        text = STUDY.format(map_dir=tmp_path, eff1=names["eff_run1"], eff2=names["eff_run2"],
                            comb=names["bkg_comb"], nr=names["bkg_nr"])
        (tmp_path / f"{tag}.yaml").write_text(text)
        spec = load_spec(tmp_path / f"{tag}.yaml")
        stores[tag] = tmp_path / f"{tag}.zarr"
        assert run_study(spec, stores[tag], client=client, progress=None, chunk_size=1).complete
    a, b = (open_results(stores[t]) for t in ("root", "npz"))
    assert int(a["status"].values.ravel()[0]) == 1, "the fit converged"
    for var in ("value", "error", "nll", "n_events"):
        xr.testing.assert_identical(a[var], b[var])
