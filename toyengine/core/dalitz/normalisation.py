"""Precomputed normalisation grid of a Dalitz model (static per model): the Hermitian matrix
``N_ij = ∫ F_i F_j* ε`` of LHCb, Eur. Phys. J. C 78 (2018) 1019, Eq. 11, per subsample.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.sparse import csr_matrix

from .dalitz_plot import DalitzKinematics
from .data import Component
from .integration import MassQuadrature, PairSpline, RowGrid, refined_row_points
from .maps import SDPSpline
from .resonances import legendre


# ---------------------------------------------------------------------------------------
# Precomputed normalisation grid (static per model)
# ---------------------------------------------------------------------------------------
def _pair_kernels(kin: DalitzKinematics, grid: RowGrid, spl: PairSpline,
                  members: Sequence[int], spins: np.ndarray, lvals: Sequence[int],
                  effs: Sequence[SDPSpline | None], with_kappa: bool):
    """Kernels of the components ``members`` (all in ``spl.pair``) on the rows of ``grid``.

    ``K[r][i][l, a, k] = ∫_row a ε_r P_{lvals[l]}(cos θ_Kπ) P_{J_i}(cos θ_pair) ψ_k(m_pair)``
    with the cardinal spline functions ψ_k of the pair's nodes, and (``with_kappa``)
    ``κ[r][(i, k)][n] = ∫ ε_r P_{J_i} P_{J_k} ψ_n``. Integration points are aligned with the
    spline knots (:func:`refined_row_points`).
    """
    pts = refined_row_points(kin, grid, spl)
    B = spl.design(pts["m_pair"]).tocsr()
    pv = kin.pair_variables(spl.pair, pts["x"], pts["y"])
    ang = {i: legendre(pv.cos, int(spins[i])) for i in members}
    plk = {L: legendre(pts["cos"], L) for L in lvals}
    n_pts = pts["row"].size
    n_rows = grid.m.size
    counts = np.bincount(pts["row"], minlength=n_rows)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    cols = np.arange(n_pts)
    K: list[dict[int, np.ndarray]] = []
    kappa: list[dict[tuple[int, int], np.ndarray]] = []
    for e in effs:
        eps = np.ones(n_pts) if e is None else e.on_rows(grid.mp, pts["thp"], indptr)
        wbase = pts["w"] * eps
        Kr, kr = {}, {}
        for i in members:
            ks = []
            for L in lvals:
                agg = csr_matrix((wbase * plk[L] * ang[i], cols, indptr), shape=(n_rows, n_pts))
                ks.append(np.asarray((agg @ B).todense()) @ spl.coef)
            Kr[i] = np.ascontiguousarray(np.stack(ks)) if ks else np.zeros((0, n_rows, spl.n))
        if with_kappa:
            for a_, i in enumerate(members):
                for k in members[a_:]:
                    kr[(i, k)] = np.asarray(B.T @ (wbase * ang[i] * ang[k])).ravel() @ spl.coef
        K.append(Kr)
        kappa.append(kr)
    return K, kappa


class _NormGrid:
    """Normalisation integrals ``N_ij = ∫ F_i F_j* ε`` on one :class:`RowGrid`, for a list
    of efficiencies (one per run), as arrays with a leading run axis.

    K+π− components factorise on the grid rows as ``h_j(m) P_L(cos θ)``: their block is
    ``Σ_a h_i h_j* E_{L_i L_j}(a)`` with the angular moments ``E`` of the efficiency.
    Components of another pair are represented on the nodes of a :class:`PairSpline`; their
    blocks use kernels integrated once on knot-aligned points (:func:`_pair_kernels`):
    ``K_{i,L}(a, k)`` against K+π− rows and ``κ_{ik}(k)`` within the pair. Against K+π−
    components with floating parameters (broad by construction: LASS) the kernels live on
    the rows of a coarser grid ``coarse``, so that a change on either side is cheap.
    Components of two different non-K+π− pairs are integrated directly on the grid nodes.
    """

    def __init__(self, kin: DalitzKinematics, grid: RowGrid, comps: Sequence[Component],
                 effs: Sequence[SDPSpline | None], splines: dict[str, PairSpline],
                 static: np.ndarray, coarse: RowGrid | None, mq: MassQuadrature | None):
        self.kin = kin
        self.grid = grid
        self.comps = tuple(comps)
        self.n_eff = len(effs)
        self.is_kpi = np.array([c.pair == "kpi" for c in comps])
        self.kpi_idx = np.flatnonzero(self.is_kpi)
        self.other_idx = [int(i) for i in np.flatnonzero(~self.is_kpi)]
        self.spins = np.array([c.spin for c in comps], dtype=int)
        self.lvals = sorted({int(self.spins[j]) for j in self.kpi_idx})
        self.lpos = {L: k for k, L in enumerate(self.lvals)}
        self.kpos = {int(j): k for k, j in enumerate(self.kpi_idx)}
        l_of_kpi = np.array([self.lpos[int(self.spins[j])] for j in self.kpi_idx], int)
        shape = grid.shape
        mp2 = grid.mp2
        self.eff = [np.ones(shape) if e is None else e(mp2, grid.thp) for e in effs]
        pl = {L: legendre(grid.cos, L) for L in self.lvals}
        nl = len(self.lvals)
        esel = []
        for eff in self.eff:
            we = grid.w * eff
            E = np.empty((nl, nl, shape[0]))
            for a, La in enumerate(self.lvals):
                for b, Lb in enumerate(self.lvals):
                    E[a, b] = np.sum(we * pl[La] * pl[Lb], axis=1)
            esel.append(E[l_of_kpi[:, None], l_of_kpi[None, :]])
        self.esel = np.ascontiguousarray(np.stack(esel))  # (R, nk, nk, n_rows)
        # static / floating K+π− components
        self.static = np.asarray(static, bool)
        self.stat_pos = np.array([k for k, j in enumerate(self.kpi_idx) if self.static[j]], int)
        self.var_pos = np.array([k for k, j in enumerate(self.kpi_idx) if not self.static[j]],
                                int)
        self.var_lvals = sorted({int(self.spins[self.kpi_idx[k]]) for k in self.var_pos})
        self.var_l = np.array([self.var_lvals.index(int(self.spins[self.kpi_idx[k]]))
                               for k in self.var_pos], int)
        stat_l = sorted({int(self.spins[self.kpi_idx[k]]) for k in self.stat_pos})
        self.stat_l = np.array([stat_l.index(int(self.spins[self.kpi_idx[k]]))
                                for k in self.stat_pos], int)
        self.coarse = coarse if (self.other_idx and self.var_pos.size) else None
        self.n_rows = shape[0]
        self.n_coarse = self.coarse.m.size if self.coarse is not None else 0
        # points at which each component is evaluated: K+π−: norm rule, rows (, coarse rows);
        # other pairs: spline nodes (, grid nodes for direct 2-D sums)
        self.mq = mq
        self.pts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.slices: dict[int, dict[str, slice]] = {}
        for j in self.kpi_idx:
            j = int(j)
            assert mq is not None
            ms = [mq.m, grid.m]
            if self.coarse is not None and not self.static[j]:
                ms.append(self.coarse.m)
            m = np.concatenate(ms)
            q, p = kin.pair_momenta("kpi", m)
            self.pts[j] = (m, q, p)
            n0, n1 = mq.m.size, mq.m.size + grid.m.size
            self.slices[j] = {"norm": slice(0, n0), "rows": slice(n0, n1),
                              "coarse": slice(n1, m.size)}
        self.pair_of = {i: comps[i].pair for i in self.other_idx}
        for i in self.other_idx:
            spl = splines[self.pair_of[i]]
            self.pts[i] = (spl.nodes, spl.q, spl.p)
            self.slices[i] = {"nodes": slice(0, spl.n)}
        # kernels of other-pair components, stacked over runs
        self.K: dict[int, np.ndarray] = {}     # (R, n_statl, n_rows, n_nodes)
        self.Kc: dict[int, np.ndarray] = {}    # (R * n_varl * n_coarse, n_nodes)
        self.kappa: dict[tuple[int, int], np.ndarray] = {}  # (R, n_nodes)
        for pair in sorted(set(self.pair_of.values())):
            members = [i for i in self.other_idx if self.pair_of[i] == pair]
            K, kappa = _pair_kernels(kin, grid, splines[pair], members, self.spins, stat_l,
                                     effs, True)
            for i in members:
                self.K[i] = np.stack([K[r][i] for r in range(self.n_eff)])
            for key in kappa[0]:
                self.kappa[key] = np.stack([kappa[r][key] for r in range(self.n_eff)])
            if self.coarse is not None:
                Kc, _ = _pair_kernels(kin, self.coarse, splines[pair], members, self.spins,
                                      self.var_lvals, effs, False)
                for i in members:
                    self.Kc[i] = np.ascontiguousarray(
                        np.stack([Kc[r][i] for r in range(self.n_eff)]).reshape(
                            -1, splines[pair].n))
        # other-pair components at the grid nodes (for generation envelopes)
        self.on_grid: dict[int, tuple] = {}
        for i in self.other_idx:
            pv = kin.pair_variables(comps[i].pair, grid.x.ravel(), grid.y.ravel())
            self.on_grid[i] = (splines[comps[i].pair].design(pv.m).tocsr(),
                               legendre(pv.cos, int(self.spins[i])).reshape(shape))
        # different non-K+π− pairs: direct sums on the grid nodes
        self.direct = [(i, k) for a_, i in enumerate(self.other_idx)
                       for k in self.other_idx[a_ + 1:] if self.pair_of[i] != self.pair_of[k]]
        self.WW: dict[tuple[int, int], np.ndarray] = {}
        if self.direct:
            ang2d = {}
            for i in {j for pr in self.direct for j in pr}:
                pv = kin.pair_variables(comps[i].pair, grid.x.ravel(), grid.y.ravel())
                m0 = self.pts[i]
                n0 = m0[0].size
                self.pts[i] = tuple(np.concatenate([a_, b_]) for a_, b_ in
                                    zip(m0, (pv.m, pv.q, pv.p), strict=True))
                self.slices[i]["grid"] = slice(n0, n0 + pv.m.size)
                ang2d[i] = legendre(pv.cos, int(self.spins[i])).reshape(shape)
            for i, k in self.direct:
                self.WW[(i, k)] = np.stack([grid.w * eff * ang2d[i] * ang2d[k]
                                            for eff in self.eff])

