"""Quadrature rules for Dalitz-plot integrals.

Two rules are used:

- :class:`MassQuadrature` — 1-D composite Gauss–Legendre over the full mass range of one
  pair, in the variable ``u`` with ``m = m_lo + (m_hi − m_lo)(1 + cos π u)/2`` (the ``m'``
  of LHCb, Eur. Phys. J. C 78 (2018) 1019, Eq. (15), for that pair). The square-root edges of the
  momenta are absorbed by ``dm/du``, so the integrand is smooth. It gives the component
  normalisations of Eq. (5) there, which reduce to 1-D integrals because the angular factor
  integrates to ``2/(2L+1)`` at fixed pair mass.
- :class:`RowGrid` — 2-D rule on the square Dalitz plot, organised in *rows*: composite
  Gauss–Legendre nodes in ``m'`` (panel edges at the vetoes, at the LASS cut-off and around
  narrow resonances), and in each row Gauss–Legendre nodes in ``θ'`` over the interval the
  border veto leaves. Vetoed regions are thus excluded exactly rather than by an indicator
  (a discontinuous integrand would spoil the convergence). Weights include the Jacobian, so
  ``Σ w f ≈ ∫ f dm²(K+π−) dm²(ηc π−)`` over the allowed region.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from .dalitz_plot import DalitzKinematics, Vetoes

__all__ = ["MassQuadrature", "RowGrid", "composite_gauss_legendre"]


def composite_gauss_legendre(edges: Sequence[float], n: int,
                             max_width: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of ``n``-point Gauss–Legendre on each panel between sorted
    ``edges``, every panel being split further so that none is wider than ``max_width``."""
    x0, w0 = np.polynomial.legendre.leggauss(n)
    nodes, weights = [], []
    for a, b in pairwise(edges):
        if b <= a:
            continue
        k = max(1, int(np.ceil((b - a) / max_width - 1e-9)))
        sub = np.linspace(a, b, k + 1)
        for lo, hi in pairwise(sub):
            h = 0.5 * (hi - lo)
            nodes.append(lo + h * (x0 + 1.0))
            weights.append(h * w0)
    if not nodes:
        return np.empty(0), np.empty(0)
    return np.concatenate(nodes), np.concatenate(weights)


def _u_of_m(m: np.ndarray | float, lo: float, hi: float) -> np.ndarray:
    return np.arccos(np.clip(2.0 * (np.asarray(m, float) - lo) / (hi - lo) - 1.0, -1, 1)) / np.pi


@dataclass(frozen=True, eq=False)
class MassQuadrature:
    """1-D rule for ``∫ f(m) dm`` over the full kinematic range of ``pair``.

    ``m``, ``q``, ``p`` are the pair mass and the daughter/bachelor momenta at the nodes;
    ``w`` the weights (``dm``); ``weight_ds`` the weights of ``∫ dx dy`` for a function of
    the pair mass only after the angular integral, i.e. ``2m · 2pq · w``.
    """

    pair: str
    m: np.ndarray
    q: np.ndarray
    p: np.ndarray
    w: np.ndarray

    @classmethod
    def build(cls, kin: DalitzKinematics, pair: str, breaks: Iterable[float] = (),
              n: int = 8, du: float = 0.004) -> MassQuadrature:
        """Composite rule with extra panel edges at the masses ``breaks`` (GeV)."""
        lo, hi = kin.mass_range(pair)
        ub = {0.0, 1.0}
        for b in breaks:
            if lo < b < hi:
                ub.add(float(_u_of_m(b, lo, hi)))
        u, wu = composite_gauss_legendre(sorted(ub), n, du)
        m = lo + (hi - lo) * 0.5 * (1.0 + np.cos(np.pi * u))
        w = wu * 0.5 * np.pi * np.sin(np.pi * u) * (hi - lo)
        q, p = kin.pair_momenta(pair, m)
        return cls(pair, m, q, p, w)

    @property
    def weight_ds(self) -> np.ndarray:
        return 4.0 * self.m * self.p * self.q * self.w


@dataclass(frozen=True, eq=False)
class RowGrid:
    """2-D rule on the allowed part of the square Dalitz plot (see module docstring).

    Attributes
    ----------
    mp, m : (n_rows,) arrays
        Row positions in ``m'`` and in ``m(K+π−)`` (GeV).
    thp, cos : (n_rows, n_cols) arrays
        Node positions in ``θ'`` and ``cos θ(K+π−)``.
    w : (n_rows, n_cols)
        Weights of ``∫ … dm²(K+π−) dm²(ηc π−)`` (Jacobian included).
    w_sdp : (n_rows, n_cols)
        Weights of ``∫ … dm' dθ'`` (for densities defined on the SDP, e.g. backgrounds).
    x, y : (n_rows, n_cols)
        The DP coordinates of the nodes.
    """

    mp: np.ndarray
    m: np.ndarray
    thp: np.ndarray
    cos: np.ndarray
    w: np.ndarray
    w_sdp: np.ndarray
    x: np.ndarray
    y: np.ndarray
    t_lo: np.ndarray
    t_hi: np.ndarray
    row_w: np.ndarray

    @classmethod
    def build(cls, kin: DalitzKinematics, vetoes: Vetoes, *, breaks: Iterable[float] = (),
              n_m: int = 8, du: float = 0.02, n_t: int = 12, t_panels: int = 4) -> RowGrid:
        """Build the grid.

        Parameters
        ----------
        breaks : iterable of float
            Extra row-panel edges in ``m(K+π−)`` (GeV), e.g. ``m0 ± kΓ`` of narrow states
            and the LASS cut-off.
        n_m, du : int, float
            Gauss–Legendre order and maximum panel width in ``m'``.
        n_t, t_panels : int
            Gauss–Legendre order and number of equal panels in ``θ'`` per row.
        """
        lo, hi = kin.mass_range("kpi")
        segments = []
        breaks = [*breaks, *vetoes.kink_masses(kin)]
        for a, b in vetoes.kpi_mass_intervals(kin):
            ua, ub = float(_u_of_m(b, lo, hi)), float(_u_of_m(a, lo, hi))  # u decreases with m
            inner = sorted(float(_u_of_m(c, lo, hi)) for c in breaks if a < c < b)
            segments.append([ua, *inner, ub])
        us, wus = [], []
        for seg in segments:
            u, wu = composite_gauss_legendre(seg, n_m, du)
            us.append(u)
            wus.append(wu)
        mp = np.concatenate(us)
        wm = np.concatenate(wus)
        m = kin.m_from_mprime(mp)
        q, p = kin.pair_momenta("kpi", m)
        row_w = wm * 4.0 * m * p * q * kin.dm_dmprime(mp)
        clo, chi = vetoes.cos_interval(kin, m)
        tlo = np.arccos(np.clip(chi, -1, 1)) / np.pi
        thi = np.arccos(np.clip(clo, -1, 1)) / np.pi
        empty = thi <= tlo
        thi = np.where(empty, tlo, thi)
        x0, w0 = np.polynomial.legendre.leggauss(n_t)
        k = np.arange(t_panels)
        # panel j of row a: [tlo + j h, tlo + (j+1) h], h = (thi - tlo)/t_panels
        h = (thi - tlo) / t_panels
        starts = tlo[:, None] + h[:, None] * k[None, :]
        thp = (starts[:, :, None] + 0.5 * h[:, None, None] * (x0[None, None, :] + 1.0))
        wt = (0.5 * h[:, None, None] * w0[None, None, :]) * np.ones_like(thp)
        thp = thp.reshape(len(m), -1)
        wt = wt.reshape(len(m), -1)
        wt[empty] = 0.0
        cos = np.cos(np.pi * thp)
        w_sdp = wm[:, None] * wt
        w = row_w[:, None] * wt * np.pi * np.sin(np.pi * thp)
        x, y = kin.y_from_pair("kpi", np.broadcast_to(m[:, None], thp.shape), cos)
        keep = ~empty
        return cls(mp[keep], m[keep], thp[keep], cos[keep], w[keep], w_sdp[keep], x[keep],
                   y[keep], tlo[keep], thi[keep], row_w[keep])

    @property
    def shape(self) -> tuple[int, int]:
        return self.thp.shape

    @property
    def size(self) -> int:
        return int(self.thp.size)

    @property
    def mp2(self) -> np.ndarray:
        """``m'`` broadcast to the node shape."""
        return np.broadcast_to(self.mp[:, None], self.thp.shape)


@dataclass(frozen=True, eq=False)
class PairSpline:
    """Cubic-spline representation of functions of one pair mass (product integration).

    A function ``g(m)`` of the pair mass is represented by its values at ``nodes`` (uniform
    in m, spacing ``dm``) through the not-a-knot cubic interpolating spline, so any integral
    ``∫ g(m(P)) K(P) dP`` over the Dalitz plot becomes ``Σ_k g(nodes_k) κ_k`` with weights
    ``κ = (∫ B(m(P)) K(P) dP) @ C`` computed once (``B`` the B-spline basis, ``C`` the
    cardinal coefficient matrix). Used for components outside the K+π− pair (the Zc), whose
    lineshape then costs one evaluation on the nodes per parameter change, however narrow.

    ``lam`` are the weights of the full-DP normalisation ``∫ |g|² 2m · 2pq dm`` (Eq. 5,
    before the angular factor ``2/(2J+1)``), applied to ``|g(nodes)|²``.
    """

    pair: str
    nodes: np.ndarray
    q: np.ndarray
    p: np.ndarray
    knots: np.ndarray
    coef: np.ndarray
    lam: np.ndarray

    @classmethod
    def build(cls, kin: DalitzKinematics, pair: str, dm: float = 0.003) -> PairSpline:
        from scipy.interpolate import BSpline, make_interp_spline

        lo, hi = kin.mass_range(pair)
        n = max(int(np.ceil((hi - lo) / dm)) + 1, 8)
        nodes = np.linspace(lo, hi, n)
        spl = make_interp_spline(nodes, np.eye(n), k=3)
        t, coef = spl.t, spl.c
        q, p = kin.pair_momenta(pair, nodes)
        # λ: Gauss–Legendre (8 nodes) on every knot interval; the end intervals carry the
        # square-root edges of p and q, handled by the substitution m = lo + (hi-lo)(1-cos πu)/2
        u, wu = composite_gauss_legendre([0.0, 1.0], 8, 1.0 / (4 * n))
        mm = lo + (hi - lo) * 0.5 * (1.0 - np.cos(np.pi * u))
        wm = wu * 0.5 * np.pi * np.sin(np.pi * u) * (hi - lo)
        qq, pp = kin.pair_momenta(pair, mm)
        B = BSpline.design_matrix(np.clip(mm, lo, hi), t, 3)
        lam = np.asarray(B.T @ (wm * 4.0 * mm * pp * qq)) @ coef
        return cls(pair, nodes, q, p, t, coef, lam)

    @property
    def n(self) -> int:
        return int(self.nodes.size)

    def design(self, m: np.ndarray):
        """Sparse B-spline design matrix at masses ``m`` (clipped into the node range)."""
        from scipy.interpolate import BSpline

        return BSpline.design_matrix(np.clip(m, self.nodes[0], self.nodes[-1]), self.knots, 3)


def refined_row_points(kin: DalitzKinematics, grid: RowGrid, spline: PairSpline,
                       n_g: int = 3) -> dict[str, np.ndarray]:
    """Integration points on the rows of ``grid`` whose ``θ'`` panels end where the mass of
    ``spline.pair`` crosses a spline knot, so that every piecewise-cubic basis function is
    integrated by Gauss–Legendre on a smooth piece.

    Returns arrays ``row`` (row index), ``thp``, ``cos`` (K+π−), ``w`` (DP-measure weight),
    ``x``, ``y`` and ``m_pair``.
    """
    x0, w0 = np.polynomial.legendre.leggauss(n_g)
    knots = np.unique(spline.knots)
    s_knots = knots * knots
    rows, ths, ws = [], [], []
    ones = np.ones(2)
    for a in range(grid.m.size):
        m = grid.m[a]
        tlo, thi = grid.t_lo[a], grid.t_hi[a]
        # s_pair = alpha + beta cos θ along the row
        xx, yy = kin.y_from_pair("kpi", m * ones, np.array([-1.0, 1.0]))
        s_pair = kin.invariants(xx, yy)[spline.pair]
        alpha = 0.5 * (s_pair[0] + s_pair[1])
        beta = 0.5 * (s_pair[1] - s_pair[0])
        if beta != 0:
            c = (s_knots - alpha) / beta
            c = c[(c > -1) & (c < 1)]
            tc = np.arccos(c) / np.pi
            tc = tc[(tc > tlo) & (tc < thi)]
        else:
            tc = np.empty(0)
        edges = np.concatenate([[tlo], np.sort(tc), [thi]])
        h = 0.5 * np.diff(edges)
        h = h[h > 0]
        starts = edges[:-1][np.diff(edges) > 0]
        th = (starts[:, None] + h[:, None] * (x0[None, :] + 1.0)).ravel()
        wt = (h[:, None] * w0[None, :]).ravel()
        rows.append(np.full(th.size, a))
        ths.append(th)
        ws.append(wt * grid.row_w[a] * np.pi * np.sin(np.pi * th))
    row = np.concatenate(rows)
    thp = np.concatenate(ths)
    w = np.concatenate(ws)
    cos = np.cos(np.pi * thp)
    x, y = kin.y_from_pair("kpi", grid.m[row], cos)
    m_pair = np.sqrt(np.clip(kin.invariants(x, y)[spline.pair], 0.0, None))
    return {"row": row, "thp": thp, "mp": grid.mp[row], "cos": cos, "w": w, "x": x, "y": y,
            "m_pair": m_pair}
