"""Efficiency and background maps: 2-D histograms in the square Dalitz plot (m', θ'),
smoothed by 2-D cubic spline interpolation (LHCb, Eur. Phys. J. C 78 (2018) 1019, Sects. 6.2
"Parametrisation of the backgrounds" and 6.3 "Signal efficiency"), and their smeared variations
for the systematics of Sect. 7 "Systematic uncertainties".

File format (``.npz``; see ``studies/zc4100/README.md``):

=================  ==================================================================
``values``         (n_m', n_θ') bin contents (efficiency, or background counts/density)
``errors``         same shape; one-standard-deviation uncertainty of each bin
``mprime_edges``   n_m' + 1 increasing edges spanning [0, 1]
``thprime_edges``  n_θ' + 1 increasing edges spanning [0, 1]
``kind``           optional string, ``"efficiency"`` or ``"background"``
=================  ==================================================================

ROOT ``TH2`` input (:meth:`SDPHistogram.from_root`: x = m′, y = θ′, errors from the sum of
weights squared) needs ``uproot``: ``pip install 'toyengine[root]'``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.interpolate import RectBivariateSpline

from ...errors import ModelError

__all__ = ["SDPHistogram", "SDPSpline"]

_KINDS = ("efficiency", "background")


@dataclass(frozen=True, eq=False)
class SDPSpline:
    """A bicubic interpolating spline through the bin centres of an SDP histogram.

    Values are clipped at zero (a cubic spline may undershoot near steep edges); outside
    the outermost bin centres the spline extends to the SDP edges 0 and 1.
    """

    spline: RectBivariateSpline
    source: str = ""

    def __call__(self, mp: np.ndarray, thp: np.ndarray) -> np.ndarray:
        mp = np.asarray(mp, float)
        thp = np.asarray(thp, float)
        shape = np.broadcast(mp, thp).shape
        mpb = np.broadcast_to(mp, shape).ravel()
        thb = np.broadcast_to(thp, shape).ravel()
        v = self.spline.ev(np.clip(mpb, 0.0, 1.0), np.clip(thb, 0.0, 1.0))
        return np.clip(v, 0.0, None).reshape(shape)

    def on_rows(self, mp_rows: np.ndarray, thp: np.ndarray, indptr: np.ndarray) -> np.ndarray:
        """Values at points grouped in rows of constant ``m'``: row ``a`` holds
        ``thp[indptr[a]:indptr[a+1]]`` (increasing) at ``m' = mp_rows[a]``. Same values as
        :meth:`__call__`, evaluated row by row on FITPACK's tensor path (much faster)."""
        out = np.empty(thp.size)
        sp = self.spline
        for a in range(mp_rows.size):
            lo, hi = indptr[a], indptr[a + 1]
            if hi > lo:
                t = np.clip(thp[lo:hi], 0.0, 1.0)
                out[lo:hi] = sp(np.clip(mp_rows[a], 0.0, 1.0), t, grid=True)[0]
        return np.clip(out, 0.0, None)


@dataclass(frozen=True, eq=False)
class SDPHistogram:
    """A validated 2-D histogram on the square Dalitz plot.

    Parameters
    ----------
    values, errors : ndarray
        Bin contents and their uncertainties, shape ``(n_m', n_θ')``.
    mprime_edges, thprime_edges : ndarray
        Bin edges spanning [0, 1].
    kind : str
        ``"efficiency"`` or ``"background"`` (used in messages and checks).
    source : str
        Where the map came from (file name), quoted in every error message.
    """

    values: np.ndarray
    errors: np.ndarray
    mprime_edges: np.ndarray
    thprime_edges: np.ndarray
    kind: str = "efficiency"
    source: str = "<array>"
    _spline: list = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        where = f"{self.kind} map {self.source}"
        if self.kind not in _KINDS:
            msg = f"{where}: kind must be one of {_KINDS}, got {self.kind!r}"
            raise ModelError(msg)
        v = np.asarray(self.values, float)
        e = np.asarray(self.errors, float)
        mx = np.asarray(self.mprime_edges, float)
        tx = np.asarray(self.thprime_edges, float)
        if v.ndim != 2:
            msg = f"{where}: 'values' must be 2-D (n_mprime, n_thprime), got shape {v.shape}"
            raise ModelError(msg)
        for nm, ed in (("mprime_edges", mx), ("thprime_edges", tx)):
            if ed.ndim != 1 or ed.size < 5:
                msg = (f"{where}: '{nm}' must be 1-D with >= 5 edges (4 bins for a cubic "
                       f"spline), got shape {ed.shape}")
                raise ModelError(msg)
            if not np.all(np.isfinite(ed)) or np.any(np.diff(ed) <= 0):
                msg = f"{where}: '{nm}' must be finite and strictly increasing"
                raise ModelError(msg)
            if abs(ed[0]) > 1e-9 or abs(ed[-1] - 1.0) > 1e-9:
                msg = (f"{where}: '{nm}' must span the square Dalitz plot [0, 1], "
                       f"got [{ed[0]}, {ed[-1]}]")
                raise ModelError(msg)
        expected = (mx.size - 1, tx.size - 1)
        if v.shape != expected:
            msg = (f"{where}: 'values' has shape {v.shape} but the edges define {expected} "
                   "bins (wrong shape or binning)")
            raise ModelError(msg)
        if e.shape != v.shape:
            msg = f"{where}: 'errors' has shape {e.shape}, expected {v.shape} like 'values'"
            raise ModelError(msg)
        bad = ~np.isfinite(v)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            msg = f"{where}: {int(bad.sum())} NaN/inf bin(s) in 'values', first at bin ({i}, {j})"
            raise ModelError(msg)
        if np.any(v < 0):
            i, j = np.argwhere(v < 0)[0]
            msg = (f"{where}: {int((v < 0).sum())} negative bin(s) in 'values', first at bin "
                   f"({i}, {j}) = {v[i, j]}")
            raise ModelError(msg)
        if not np.all(np.isfinite(e)) or np.any(e < 0):
            msg = f"{where}: 'errors' must be finite and >= 0"
            raise ModelError(msg)
        if not np.any(v > 0):
            what = ("efficiency is zero everywhere" if self.kind == "efficiency"
                    else "map is empty (all bins zero)")
            msg = f"{where}: {what}"
            raise ModelError(msg)
        object.__setattr__(self, "values", v)
        object.__setattr__(self, "errors", e)
        object.__setattr__(self, "mprime_edges", mx)
        object.__setattr__(self, "thprime_edges", tx)

    # --- I/O ---------------------------------------------------------------------------
    @classmethod
    def from_npz(cls, path: str | Path, kind: str) -> SDPHistogram:
        """Read and validate a map from an ``.npz`` file (format in the module docstring)."""
        p = Path(path)
        if not p.is_file():
            msg = f"{kind} map {p}: file not found"
            raise ModelError(msg)
        try:
            with np.load(p, allow_pickle=False) as f:
                content = {k: f[k] for k in f.files}
        except Exception as exc:  # noqa: BLE001  (any reader error: one line naming the file)
            msg = f"{kind} map {p}: cannot be read as .npz ({type(exc).__name__}: {exc})"
            raise ModelError(msg) from None
        missing = [k for k in ("values", "mprime_edges", "thprime_edges") if k not in content]
        if missing:
            msg = f"{kind} map {p}: missing array(s) {missing}; found {sorted(content)}"
            raise ModelError(msg)
        if "kind" in content and str(content["kind"]) != kind:
            msg = f"{kind} map {p}: file says kind={str(content['kind'])!r}, expected {kind!r}"
            raise ModelError(msg)
        values = content["values"]
        errors = content.get("errors")
        if errors is None:
            errors = np.zeros_like(values, dtype=float)
        return cls(values, errors, content["mprime_edges"], content["thprime_edges"], kind, str(p))

    @classmethod
    def from_root(cls, path: str | Path, key: str, kind: str) -> SDPHistogram:
        """Read a ROOT ``TH2`` (x = m', y = θ') with ``uproot`` (the ``[root]`` extra).

        ``key`` names the histogram in the file; empty: the file's only ``TH2``. Bin errors
        are the square roots of the stored sums of squared weights (``TH1::Sumw2``), the
        bin contents themselves when none are stored (ROOT's convention)."""
        try:
            import uproot  # type: ignore[import-not-found]
        except ImportError:
            msg = (f"{kind} map {path}: reading ROOT files requires the optional package "
                   "'uproot': pip install 'toyengine[root]' (or convert the map to .npz)")
            raise ModelError(msg) from None
        p = Path(path)
        if not p.is_file():
            msg = f"{kind} map {p}: file not found"
            raise ModelError(msg)
        try:
            with uproot.open(p) as f:
                if not key:
                    th2 = [k for k, c in f.classnames().items() if c.startswith("TH2")]
                    if len(th2) != 1:
                        msg = (f"{kind} map {p}: name the histogram as 'file.root:name'; "
                               f"the file has TH2s {th2}")
                        raise ModelError(msg)
                    key = th2[0].split(";")[0]
                h = f[key]
                values, xe, ye = h.to_numpy()
                errors = np.sqrt(h.variances())
        except ModelError:
            raise
        except Exception as exc:  # noqa: BLE001  (any uproot error: one line naming the file)
            msg = f"{kind} map {p}:{key}: cannot read TH2 ({type(exc).__name__}: {exc})"
            raise ModelError(msg) from None
        return cls(values, errors, xe, ye, kind, f"{p}:{key}")

    def save_npz(self, path: str | Path) -> None:
        """Write the map in the ``.npz`` format read by :meth:`from_npz`."""
        np.savez(path, values=self.values, errors=self.errors, mprime_edges=self.mprime_edges,
                 thprime_edges=self.thprime_edges, kind=np.array(self.kind))

    # --- smoothing -----------------------------------------------------------------------
    @property
    def centres(self) -> tuple[np.ndarray, np.ndarray]:
        mx, tx = self.mprime_edges, self.thprime_edges
        return 0.5 * (mx[1:] + mx[:-1]), 0.5 * (tx[1:] + tx[:-1])

    def spline(self) -> SDPSpline:
        """The 2-D cubic interpolating spline through the bin centres (cached)."""
        if not self._spline:
            cm, ct = self.centres
            sp = RectBivariateSpline(cm, ct, self.values, bbox=[0.0, 1.0, 0.0, 1.0],
                                     kx=3, ky=3, s=0)
            self._spline.append(SDPSpline(sp, self.source))
        return self._spline[0]

    # --- variations (Sect. 7 of the paper) ---------------------------------------------
    def smeared(self, rng: np.random.Generator, mode: str = "independent", *,
                n_bins: int = 10, radius: int = 2) -> SDPHistogram:
        """A fluctuated copy of the histogram, before the spline (Eur. Phys. J. C 78 (2018) 1019,
        Sect. 7).

        Parameters
        ----------
        rng : numpy.random.Generator
            Source of the fluctuations.
        mode : {"independent", "correlated"}
            ``independent``: every bin moves by ``σ_ij · z_ij`` with independent standard
            normal ``z_ij`` (the background and efficiency variations of Sect. 7).
            ``correlated``: ``n_bins`` bins (drawn without replacement among the non-empty
            ones) move by ``σ z_k``; their neighbours within ``radius`` bins (Chebyshev
            distance d) move by the linear interpolation ``σ z_k (1 − d/(radius + 1))``
            towards zero (the "10 bins varied, neighbours by linear interpolation" of Sect. 7;
            the tent shape and radius are our choice). Overlapping tents add.
        n_bins, radius : int
            Parameters of the correlated mode.

        Negative results are set to zero; a variation that empties the map raises
        :class:`ModelError` (it cannot be used as a PDF or efficiency).
        """
        v, e = self.values, self.errors
        if mode == "independent":
            z = rng.standard_normal(v.shape)
        elif mode == "correlated":
            nonempty = np.flatnonzero(v.ravel() > 0)
            k = min(int(n_bins), nonempty.size)
            if k < 1 or radius < 0:
                msg = (f"{self.kind} map {self.source}: correlated smearing needs n_bins >= 1, "
                       "radius >= 0")
                raise ModelError(msg)
            anchors = rng.choice(nonempty, size=k, replace=False)
            zk = rng.standard_normal(k)
            ii, jj = np.indices(v.shape)
            z = np.zeros(v.shape)
            for a, za in zip(anchors, zk, strict=True):
                ai, aj = np.unravel_index(a, v.shape)
                d = np.maximum(np.abs(ii - ai), np.abs(jj - aj))
                z += za * np.clip(1.0 - d / (radius + 1.0), 0.0, None)
        else:
            msg = (f"{self.kind} map {self.source}: smearing mode must be 'independent' or "
                   f"'correlated', got {mode!r}")
            raise ModelError(msg)
        new = np.clip(v + e * z, 0.0, None)
        src = f"{self.source} [smeared: {mode}]"
        return replace(self, values=new, source=src, _spline=[])

    @classmethod
    def from_function(cls, func, n_mprime: int, n_thprime: int, kind: str, *,
                      rel_error: float | None = None, counts_scale: float | None = None,
                      source: str = "<function>", oversample: int = 4) -> SDPHistogram:
        """Histogram of a smooth function (bin averages), for synthetic stand-in maps.

        ``errors = rel_error · values`` if ``rel_error`` is given; otherwise, for counts,
        ``errors = sqrt(counts_scale · values)`` (a Poisson error inflated by
        ``counts_scale``, e.g. for sPlot weights).
        """
        mx = np.linspace(0.0, 1.0, n_mprime + 1)
        tx = np.linspace(0.0, 1.0, n_thprime + 1)
        # bin averages by midpoint sub-sampling
        sub = (np.arange(oversample) + 0.5) / oversample
        mpts = (mx[:-1, None] + np.diff(mx)[:, None] * sub[None, :]).ravel()
        tpts = (tx[:-1, None] + np.diff(tx)[:, None] * sub[None, :]).ravel()
        grid = func(mpts[:, None], tpts[None, :])
        vals = grid.reshape(n_mprime, oversample, n_thprime, oversample).mean(axis=(1, 3))
        if rel_error is not None:
            err = rel_error * vals
        elif counts_scale is not None:
            err = np.sqrt(counts_scale * vals)
        else:
            err = np.zeros_like(vals)
        if not math.isfinite(float(np.sum(vals))):
            msg = f"{kind} map {source}: function gave non-finite values"
            raise ModelError(msg)
        return cls(vals, err, mx, tx, kind, source)
