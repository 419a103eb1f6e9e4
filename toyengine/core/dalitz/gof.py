"""Adaptive binned χ² goodness of fit on the square Dalitz plot (LHCb, Eur. Phys. J. C 78 (2018)
1019, Sect. 6.4 "Amplitude model with only K+π− contributions").

The paper quotes χ²/ndof = 195/129 (baseline) and 164/125 (nominal) "using an adaptive 2D
binning schema to obtain 144 equally populated bins". The binning here: the events (all runs
together) are split into ``n_mprime`` slices of equal population in m', and every slice
into ``n_thprime`` bins of equal population in θ' (our choice: the paper does not describe its
scheme further). The expected content of a bin is the fitted yields times the integral of
each run's normalised PDF over the bin rectangle, summed over runs; χ² is Pearson's
``Σ (n − ν)²/ν``. Its distribution is best calibrated with toys (a toy-based p-value), since
the number of degrees of freedom of a χ² with fitted parameters is only approximately
``n_bins − n_free``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError
from .data import DalitzData
from .model import DalitzModel

__all__ = ["AdaptiveBinning", "adaptive_chi2"]


@dataclass(frozen=True)
class AdaptiveBinning:
    """Bins as rectangles on the SDP: ``mp_edges`` (n_m' + 1) and, per m' slice,
    ``th_edges[i]`` (n_θ' + 1)."""

    mp_edges: np.ndarray
    th_edges: np.ndarray

    @classmethod
    def equal_population(cls, mp: np.ndarray, th: np.ndarray, n_mprime: int = 12,
                         n_thprime: int = 12) -> AdaptiveBinning:
        """Equal-population edges from event SDP coordinates (outer edges 0 and 1)."""
        mp = np.asarray(mp, float)
        th = np.asarray(th, float)
        if mp.size < n_mprime * n_thprime:
            msg = (f"adaptive binning: {mp.size} events cannot fill {n_mprime} x {n_thprime} "
                   "equally populated bins")
            raise ModelError(msg)
        q = np.linspace(0.0, 1.0, n_mprime + 1)
        me = np.quantile(mp, q)
        me[0], me[-1] = 0.0, 1.0
        the = np.empty((n_mprime, n_thprime + 1))
        idx = np.clip(np.searchsorted(me, mp, side="right") - 1, 0, n_mprime - 1)
        qt = np.linspace(0.0, 1.0, n_thprime + 1)
        for i in range(n_mprime):
            e = np.quantile(th[idx == i], qt)
            e[0], e[-1] = 0.0, 1.0
            the[i] = e
        return cls(me, the)

    def counts(self, mp: np.ndarray, th: np.ndarray) -> np.ndarray:
        """Event counts per bin, shape ``(n_m', n_θ')``."""
        n_m, n_t = self.th_edges.shape[0], self.th_edges.shape[1] - 1
        i = np.clip(np.searchsorted(self.mp_edges, mp, side="right") - 1, 0, n_m - 1)
        out = np.zeros((n_m, n_t))
        for k in range(n_m):
            sel = i == k
            j = np.clip(np.searchsorted(self.th_edges[k], th[sel], side="right") - 1, 0, n_t - 1)
            out[k] = np.bincount(j, minlength=n_t)
        return out


def _expected(model: DalitzModel, x: np.ndarray, binning: AdaptiveBinning,
              n_m_nodes: int, n_th: int) -> np.ndarray:
    """Expected counts per bin: Gauss–Legendre in m' inside every slice (split where the
    vetoes or the LASS cut-off make the density jump), cumulative trapezoid in θ'
    interpolated at the slice's bin edges."""
    from .integration import composite_gauss_legendre

    kin, v = model.kin, model.vetoes
    lo, hi = kin.mass_range("kpi")
    # m' of every edge where the density jumps or kinks along m' (vetoes, LASS cut-off)
    masses = [lo + v.border, hi - v.border, *v.kink_masses(kin),
              *(v.d0 if v.d0 is not None else ()),
              *(c.lineshape.cutoff for c in model.components
                if c.lineshape.kind in ("lass", "lass_nr"))]
    jumps = np.sort(kin.mprime_from_m(np.array(masses)))
    th_grid = np.linspace(0.0, 1.0, n_th + 1)
    n_m = binning.th_edges.shape[0]
    out = np.zeros((n_m, binning.th_edges.shape[1] - 1))
    for k in range(n_m):
        a, b = binning.mp_edges[k], binning.mp_edges[k + 1]
        edges = [a, *jumps[(jumps > a) & (jumps < b)], b]
        mps, ws = composite_gauss_legendre(edges, n_m_nodes, b - a)
        MP, TH = np.meshgrid(mps, th_grid, indexing="ij")
        X, Y = model.kin.dp_from_sdp(MP.ravel(), TH.ravel())
        dens = np.zeros(MP.size)
        for r, run in enumerate(model.runs):
            d = model.densities(x, run.name, X, Y)
            dens += x[model._sig_idx[r]] * d["signal"]
            for kb, (bname, _, _) in enumerate(run.backgrounds):
                dens += x[model._bkg_idx[r][kb]] * d[bname]
        marg = (ws[:, None] * dens.reshape(MP.shape)).sum(axis=0)  # ∫ dm' at each θ'
        cum = np.concatenate([[0.0], np.cumsum(0.5 * (marg[1:] + marg[:-1]) * np.diff(th_grid))])
        out[k] = np.diff(np.interp(binning.th_edges[k], th_grid, cum))
    return out


def adaptive_chi2(model: DalitzModel, values: np.ndarray, data: DalitzData, *,
                  n_mprime: int = 12, n_thprime: int = 12,
                  binning: AdaptiveBinning | None = None, n_m_nodes: int = 16,
                  n_th: int = 800) -> dict[str, object]:
    """Pearson χ² of ``data`` against ``model`` at ``values`` in equally populated SDP bins.

    Parameters
    ----------
    model, values, data
        The fitted model, its fitted parameter vector and the data set (all runs).
    n_mprime, n_thprime : int
        Slices in m' and bins per slice in θ' (12 × 12 = 144 as in the paper's Sect. 6.4).
    binning : AdaptiveBinning, optional
        Reuse fixed bins (e.g. those of the data set when evaluating toys); by default
        the bins are made from ``data``.

    Returns
    -------
    dict
        ``chi2``, ``n_bins``, ``observed`` and ``expected`` (n_m' × n_θ' arrays) and the
        ``binning``.
    """
    x = np.asarray(values, float)
    nll = model.nll(data)  # applies the vetoes and checks the runs
    mp, th = model.kin.sdp_from_dp(nll.x, nll.y)
    if binning is None:
        binning = AdaptiveBinning.equal_population(mp, th, n_mprime, n_thprime)
    obs = binning.counts(mp, th)
    exp = _expected(model, x, binning, n_m_nodes, n_th)
    good = exp > 0
    chi2 = float(np.sum((obs[good] - exp[good]) ** 2 / exp[good]))
    return {"chi2": chi2, "n_bins": int(obs.size), "observed": obs, "expected": exp,
            "binning": binning}
