"""Cached evaluation of a Dalitz model: component values at the data points and on the
normalisation grid, recomputed only when their own parameters change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .normalisation import _NormGrid
from .resonances import legendre

if TYPE_CHECKING:
    from .protocol import DalitzModelView

def _kernels():
    """:mod:`.state_kernels` (numba: compiled on first use, never at ``import toyengine``)."""
    global _KERNELS
    if _KERNELS is None:
        from . import state_kernels

        _KERNELS = state_kernels
    return _KERNELS


_KERNELS = None
#: empty arrays: no destination (for the compiled loops)
_EMPTY = np.zeros(0)
_EMPTY_C = np.zeros(0, complex)


# ---------------------------------------------------------------------------------------
# Cached evaluation
# ---------------------------------------------------------------------------------------
class _State:
    """Cached component values and normalisation matrices for one :class:`_NormGrid`,
    optionally also at a set of events (``ev``: per component ``(m, q, p, P_L(cos θ))``).

    Each component is evaluated in one call on the concatenation of all its points (norm
    rule, rows, coarse rows or spline nodes, events), and only when its own parameters
    change.
    """

    def __init__(self, model: DalitzModelView, norm: _NormGrid,
                 ev: list[tuple[np.ndarray, ...]] | None = None):
        self.model = model
        self.norm = norm
        nc = len(model.components)
        kin = model.kin
        self.keys: list[tuple | None] = [None] * nc
        self.g: list[np.ndarray | None] = [None] * nc  # unnormalised g at all points
        self.n = np.zeros(nc)
        nk = len(norm.kpi_idx)
        self.rows = np.zeros((nk, norm.n_rows), complex)
        self.rows_c = np.zeros((nk, norm.n_coarse), complex)
        self.nodes: dict[int, np.ndarray] = {}
        self.full2d: dict[int, np.ndarray] = {}
        self.V: dict[int, np.ndarray] = {}
        self.R: dict[int, np.ndarray] = {}
        self.N = np.zeros((norm.n_eff, nc, nc), complex)
        self.n_ev = 0 if ev is None else int(ev[0][0].size)
        self.F = np.zeros((nc, self.n_ev), complex).T  # column-major
        self.geom: list[dict[str, np.ndarray]] = []
        self.ev_ang: list[np.ndarray | None] = []
        self.ev_slice: list[slice] = []
        self.norm_w: list[np.ndarray] = []  # weights of Eq. 5's integral at norm_sel
        self.norm_sel: list[slice] = []
        for j, c in enumerate(model.components):
            m, q, p = norm.pts[j]
            n0 = m.size
            if ev is not None:
                em, eq, ep, eang = ev[j]
                m, q, p = (np.concatenate([m, em]), np.concatenate([q, eq]),
                           np.concatenate([p, ep]))
                self.ev_ang.append(eang)
            else:
                self.ev_ang.append(None)
            self.ev_slice.append(slice(n0, m.size))
            self.geom.append(c.lineshape.geometry(kin, m, q, p))
            self.norm_sel.append(norm.slices[j]["norm" if c.pair == "kpi" else "nodes"])
            fac = 2.0 / (2 * c.spin + 1)
            if c.pair == "kpi":
                self.norm_w.append(norm.mq.weight_ds * fac)
            else:
                self.norm_w.append(model._splines[c.pair].lam * fac)
        self._shape = [c.lineshape for c in model.components]
        # where update() puts each component's normalised values: (out1, start1, out2,
        # start2) into its rows and coarse rows (K+π−) or its nodes and 2-D grid (other
        # pairs), from those positions of its points
        self._dest: list[tuple[np.ndarray, int, np.ndarray, int]] = []
        for j, c in enumerate(model.components):
            sl = norm.slices[j]
            if c.pair == "kpi":
                k = norm.kpos[j]
                coarse = norm.n_coarse and not norm.static[j]
                self._dest.append((self.rows[k], sl["rows"].start,
                                   self.rows_c[k] if coarse else _EMPTY_C,
                                   sl["coarse"].start if coarse else 0))
            else:
                self.nodes[j] = np.zeros(sl["nodes"].stop - sl["nodes"].start, complex)
                if "grid" in sl:
                    self.full2d[j] = np.zeros(norm.grid.shape, complex)
                self._dest.append((self.nodes[j], sl["nodes"].start,
                                   self.full2d[j].reshape(-1) if "grid" in sl else _EMPTY_C,
                                   sl["grid"].start if "grid" in sl else 0))
        self._pidx = model._p_idx
        self._all_pidx = np.concatenate(self._pidx).astype(int)
        self._offsets = np.concatenate([[0], np.cumsum([pi.size for pi in self._pidx])]).tolist()
        self._last: list[float] | None = None  # the lineshape parameters of self.keys
        self._ki = norm.kpi_idx
        # the component of each static and each floating K+π− row; a floating one's L index
        self._stat_comp = [int(norm.kpi_idx[kk]) for kk in norm.stat_pos]
        self._var_comp = {int(norm.kpi_idx[kk]) for kk in norm.var_pos}
        self._stat_cols = np.ascontiguousarray(norm.kpi_idx[norm.stat_pos], dtype=np.int64)
        self._var_cols = np.ascontiguousarray(norm.kpi_idx[norm.var_pos], dtype=np.int64)
        self._kpi_rows: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._var_lj = {int(kk): int(lv) for kk, lv in zip(norm.var_pos, norm.var_l, strict=True)}

    def update(self, x: np.ndarray) -> list[int]:
        """Recompute the components whose lineshape parameters changed; returns their
        indices (empty when none did, e.g. after a coefficient-only step)."""
        xl = x[self._all_pidx].tolist()
        if xl == self._last:
            return []
        o = self._offsets
        vals = [tuple(xl[o[j]:o[j + 1]]) for j in range(len(self.keys))]
        dirty = [j for j, v in enumerate(vals) if v != self.keys[j]]
        model, norm = self.model, self.norm
        kin = model.kin
        dset = set(dirty)
        kernels = _kernels()
        for j in dirty:
            self.keys[j] = vals[j]
            g = self._shape[j].evaluate(kin, self.geom[j], vals[j])
            self.g[j] = g
            out1, s1, out2, s2 = self._dest[j]
            integral = kernels.normalise_component(
                g, self.norm_w[j], self.norm_sel[j].start, out1, s1, out2, s2,
                self.F.T[j] if self.n_ev else _EMPTY_C, self.ev_slice[j].start,
                self.ev_ang[j] if self.n_ev else _EMPTY)
            self.n[j] = model._check_norm(j, integral)
        self._last = xl  # every component's key is now its slice of xl
        ki = self._ki
        N = self.N
        H = self.rows
        dk = tuple(j for j in dirty if j in norm.kpos)
        # K+π− block, all runs at once
        if dk:
            rows = self._kpi_rows.get(dk)
            if rows is None:
                rows = self._kpi_rows[dk] = (np.array([norm.kpos[j] for j in dk]),
                                             np.array(dk))
            kernels.kpi_block(norm.esel, H, rows[0], rows[1], ki, N)
        stat_dirty = [s_ for s_, j in enumerate(self._stat_comp) if j in dset]
        var_dirty = not self._var_comp.isdisjoint(dset)
        # other pairs against K+π−: N_ij = Σ_k V_ij(k) G_i(k) for static K+π− components
        # (V_ij = Σ_a h_j*(a) K_{i,L_j}(a, k), computed once), Σ_a R_{i,L_j}(a) h_j*(a) on
        # the coarse rows for floating ones (R_{i,L} = Kc_{i,L} G_i, when G_i changes)
        for i in norm.other_idx:
            i_d = i in dset
            if not (i_d or dk):
                continue
            G = self.nodes[i]
            if norm.stat_pos.size and (i_d or stat_dirty):
                Vm = self.V.get(i)
                if Vm is None:
                    Vm = self.V[i] = np.zeros((norm.n_eff, norm.stat_pos.size, G.size), complex)
                    redo = list(range(norm.stat_pos.size))
                else:
                    redo = stat_dirty
                K = norm.K[i]
                for s_ in redo:
                    h = H[norm.stat_pos[s_]]
                    hh = np.stack([h.real, -h.imag])
                    for r in range(norm.n_eff):
                        vv = hh @ K[r, norm.stat_l[s_]]
                        Vm[r, s_] = vv[0] + 1j * vv[1]
                kernels.set_cross(N, i, self._stat_cols, Vm @ G)  # Vm @ G: (R, n_stat)
            if norm.var_pos.size and (i_d or var_dirty):
                if i_d or i not in self.R:
                    # two matrix-vector products: ~2x faster than one product with a
                    # two-column matrix (BLAS's small-n matrix product)
                    Kc = norm.Kc[i]
                    RR = np.empty(Kc.shape[0], complex)
                    RR.real = Kc @ G.real
                    RR.imag = Kc @ G.imag
                    self.R[i] = RR.reshape(norm.n_eff, len(norm.var_lvals), norm.n_coarse)
                kernels.coarse_cross(self.R[i], norm.var_l, norm.var_pos, self.rows_c, i,
                                     self._var_cols, N)
        # within one other pair
        for (i, k), kap in norm.kappa.items():
            if i in dset or k in dset:
                kernels.pair_integral(kap, self.nodes[i], self.nodes[k], i, k, N)
        # two different other pairs
        for i, k in norm.direct:
            if i in dset or k in dset:
                val = np.sum(norm.WW[(i, k)] * (self.full2d[i] * self.full2d[k].conj()),
                             axis=(1, 2))
                N[:, i, k] = val
                N[:, k, i] = val.conj()
        return dirty

    def norm_row_weights(self, j: int, fracs: np.ndarray, cc: np.ndarray) -> np.ndarray:
        """Weights ``W`` on the points of component ``j`` (its concatenated evaluation
        points; zero where unused) such that, for any values ``v`` replacing those of ``j``,
        ``Σ_r fracs_r Σ_k (∫ v F_k* ε)_r cc_k = Σ_points v W``, with the integrals computed
        as in :meth:`update` (row ``j`` of ``N``). This is the adjoint of that linear map,
        so the derivative of ``N`` along any change of ``j``'s values is one dot product.
        ``j`` has floating parameters (so a K+π− ``j`` is not static)."""
        norm = self.norm
        ki = norm.kpi_idx
        sl = norm.slices[j]
        W = np.zeros(self.g[j].size, complex)
        if j in norm.kpos:
            kj = norm.kpos[j]
            _kernels().kpi_row_weights(fracs, norm.esel, kj, cc[ki], self.rows, W,
                                       sl["rows"].start)
            if norm.other_idx:  # floating K+π− components meet other pairs on coarse rows
                lj = self._var_lj[kj]
                W[sl["coarse"]] = sum(cc[i] * (fracs @ self.R[i][:, lj]).conj()
                                      for i in norm.other_idx)
            return W
        wn = W[sl["nodes"]]
        if norm.stat_pos.size:
            vm = self.V[j]  # (R, n_stat, n_nodes)
            wn += cc[ki[norm.stat_pos]] @ (fracs @ vm.reshape(vm.shape[0], -1)).reshape(
                vm.shape[1:])
        if norm.var_pos.size:
            Y = np.zeros((norm.n_eff, len(norm.var_lvals), norm.n_coarse), complex)
            for v_, kk in enumerate(norm.var_pos):
                Y[:, norm.var_l[v_]] += fracs[:, None] * (cc[ki[kk]] * self.rows_c[kk].conj())
            Kc = norm.Kc[j]  # real kernels; two vector-matrix products (as in update)
            yy = np.empty(Kc.shape[1], complex)
            yy.real = Y.real.ravel() @ Kc
            yy.imag = Y.imag.ravel() @ Kc
            wn += yy
        for (i, k), kap in norm.kappa.items():
            if j in (i, k):
                other = k if i == j else i
                wn += cc[other] * self.nodes[other].conj() * (fracs @ kap)
        for i, k in norm.direct:
            if j in (i, k):
                other = k if i == j else i
                W[sl["grid"]] += (cc[other] * self.full2d[other].conj()
                                  * np.tensordot(fracs, norm.WW[(i, k)], 1)).ravel()
        return W

    def amplitude_on_grid(self, c: np.ndarray) -> np.ndarray:
        """``A`` at the grid nodes (other-pair components through their node splines)."""
        norm = self.norm
        A = np.zeros(norm.grid.shape, complex)
        pl = {L: legendre(norm.grid.cos, L) for L in norm.lvals}
        for k, j in enumerate(norm.kpi_idx):
            A += c[j] * self.rows[k][:, None] * pl[int(norm.spins[j])]
        for i in norm.other_idx:
            B, ang = norm.on_grid[i]
            vals = B @ (self.model._splines[norm.pair_of[i]].coef @ self.nodes[i])
            A += c[i] * vals.reshape(norm.grid.shape) * ang
        return A

