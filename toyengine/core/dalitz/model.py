"""Dalitz-plot isobar model, signal and background PDFs, likelihood and generator.

LHCb, Eur. Phys. J. C 78 (2018) 1019, Sects. 5 "Dalitz plot formalism" and 6 "Dalitz plot fit":
``A = Σ_j c_j F_j`` (Eq. 4) with unit-normalised components (Eq. 5),
``P_sig = |A|² ε / ∫|A|² ε`` (Eq. 11), fit fractions (Eqs. 12–13) and the likelihood of
Eq. 14 for several subsamples (Run 1 / Run 2) with shared amplitude parameters and their own
yields, efficiency and background maps.

All PDFs are evaluated as densities on the square Dalitz plot (SDP): the signal as
``|A|² ε |J| / ∫|A|² ε dx dy`` and each background as its smoothed SDP histogram divided by
its integral over the allowed SDP region. The common Jacobian would only add a constant to
−ln L, so this is the likelihood of Eq. 14.

Speed: component values are cached at the data points and on the normalisation
grid and recomputed only when their own parameters change; the normalisation is a Hermitian
matrix ``N_ij = ∫ F_i F_j* ε`` per subsample, so ``∫|A|²ε = c^T N c*``. Components of the
K+π− pair factorise as ``g(m) P_L(cos θ)`` on the grid rows, so their block of ``N`` is a
1-D sum with precomputed angular moments of the efficiency. Components of the other pairs
(the Zc) are carried by their values on the nodes of a cubic spline in their own pair mass
(:class:`~toyengine.core.dalitz.integration.PairSpline`); their blocks are products with kernels
integrated once at build time on knot-aligned points, so a Zc mass/width change costs one
lineshape evaluation on ~400 nodes and a few small matrix products, and the accuracy does
not depend on the Zc width. Per run the normalisation agrees with a 2–3× finer grid to
< 1e-5 and the PDFs integrate to 1 within 1e-6 (tests/test_dalitz_model.py).

The gradient of −ln L is exact in every parameter: the lineshape derivatives are evaluated
at the cached points of their component and enter the normalisation linearly (row ``j`` of
``N``), so a gradient costs a few NLL calls' worth of arithmetic, not one NLL call per
lineshape parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix

from ...errors import ModelError
from ..params import ParameterSet
from ..streams import DataStreams, as_streams
from .integration import MassQuadrature, PairSpline, RowGrid, refined_row_points
from .kinematics import DalitzKinematics, Vetoes
from .lineshapes import Lineshape, legendre
from .maps import SDPHistogram, SDPSpline

__all__ = [
    "Component",
    "DalitzData",
    "DalitzModel",
    "DalitzNLL",
    "RunSample",
    "RunSpec",
]


# ---------------------------------------------------------------------------------------
# Specifications
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Component:
    """One isobar component: a lineshape in a pair, its parameter names and coefficient.

    Parameters
    ----------
    name : str
        Component name; the coefficient parameters are ``re_<name>``/``im_<name>``
        (cartesian) or ``mag_<name>``/``ph_<name>`` (polar).
    lineshape : Lineshape
        Kind, pair, spin and barrier radius.
    params : tuple of str
        Names of the lineshape parameters in the model's ParameterSet, in the order of
        :data:`toyengine.core.dalitz.lineshapes.KINDS` (mass and width in MeV; a, r in GeV⁻¹).
    """

    name: str
    lineshape: Lineshape
    params: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.params) != self.lineshape.n_params:
            msg = (f"component {self.name!r}: lineshape {self.lineshape.kind!r} needs "
                   f"{self.lineshape.n_params} parameter names, got {self.params}")
            raise ModelError(msg)

    @property
    def pair(self) -> str:
        return self.lineshape.pair

    @property
    def spin(self) -> int:
        return self.lineshape.spin


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One subsample: efficiency map, background maps and yield parameter names.

    Parameters
    ----------
    name : str
        e.g. ``"run1"``.
    efficiency : SDPHistogram
        Efficiency map on the SDP (kind ``"efficiency"``).
    signal_yield : str
        Name of the signal-yield parameter.
    backgrounds : tuple of (name, SDPHistogram, yield parameter name)
        Background components with their SDP maps.
    """

    name: str
    efficiency: SDPHistogram
    signal_yield: str
    backgrounds: tuple[tuple[str, SDPHistogram, str], ...] = ()


@dataclass(frozen=True)
class RunSample:
    """Events of one subsample: ``m2_kpi = m²(K+π−)``, ``m2_etacpi = m²(ηc π−)`` in GeV²;
    ``label`` is the generating component (0 = signal, k = k-th background; −1 unknown)."""

    m2_kpi: np.ndarray
    m2_etacpi: np.ndarray
    label: np.ndarray | None = None

    def __post_init__(self) -> None:
        x = np.asarray(self.m2_kpi, float).ravel()
        y = np.asarray(self.m2_etacpi, float).ravel()
        if x.shape != y.shape:
            msg = f"RunSample: m2_kpi and m2_etacpi differ in length ({x.size} vs {y.size})"
            raise ModelError(msg)
        object.__setattr__(self, "m2_kpi", x)
        object.__setattr__(self, "m2_etacpi", y)
        if self.label is not None:
            lab = np.asarray(self.label).astype(np.int16).ravel()
            if lab.shape != x.shape:
                msg = "RunSample: label must have one entry per event"
                raise ModelError(msg)
            object.__setattr__(self, "label", lab)

    def __len__(self) -> int:
        return int(self.m2_kpi.size)


@dataclass(frozen=True)
class DalitzData:
    """A data set: one :class:`RunSample` per subsample, keyed by run name."""

    runs: dict[str, RunSample] = field(default_factory=dict)

    @property
    def n_events(self) -> int:
        return sum(len(r) for r in self.runs.values())

    def __getitem__(self, run: str) -> RunSample:
        return self.runs[run]

    def save_npz(self, path: str, weights: Mapping[str, np.ndarray] | None = None,
                 **meta: object) -> None:
        """Write ``<run>/m2_kpi``, ``<run>/m2_etacpi`` (and labels, and ``<run>/weight``
        for a weighted set such as the Asimov one) plus metadata strings."""
        arrays: dict[str, np.ndarray] = {}
        for name, rs in self.runs.items():
            arrays[f"{name}/m2_kpi"] = rs.m2_kpi
            arrays[f"{name}/m2_etacpi"] = rs.m2_etacpi
            if rs.label is not None:
                arrays[f"{name}/label"] = rs.label
            if weights is not None:
                arrays[f"{name}/weight"] = np.asarray(weights[name], dtype=float)
        for k, v in meta.items():
            arrays[f"meta/{k}"] = np.array(str(v))
        np.savez_compressed(path, **arrays)

    @classmethod
    def load_npz(cls, path: str) -> DalitzData:
        """Read a data set written by :meth:`save_npz`."""
        import os

        if not os.path.isfile(path):
            msg = f"Dalitz data file {path}: file not found"
            raise ModelError(msg)
        with np.load(path, allow_pickle=False) as f:
            keys = list(f.files)
            runs: dict[str, RunSample] = {}
            if any(k.endswith("/weight") for k in keys):
                msg = (f"Dalitz data file {path}: holds weighted events (an Asimov data "
                       "set); a study's data: file must be unweighted")
                raise ModelError(msg)
            names = sorted({k.split("/")[0] for k in keys if k.endswith("/m2_kpi")})
            if not names:
                msg = f"Dalitz data file {path}: no '<run>/m2_kpi' arrays found (keys: {keys})"
                raise ModelError(msg)
            for n in names:
                if f"{n}/m2_etacpi" not in keys:
                    msg = f"Dalitz data file {path}: run {n!r} lacks 'm2_etacpi'"
                    raise ModelError(msg)
                lab = f[f"{n}/label"] if f"{n}/label" in keys else None
                runs[n] = RunSample(f[f"{n}/m2_kpi"], f[f"{n}/m2_etacpi"], lab)
        return cls(runs)


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


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------
class DalitzModel:
    """Isobar model of P → K+ π− ηc with efficiency and backgrounds, several subsamples.

    Implements the ToyModel protocol: :attr:`parameters`, :meth:`sample`, :meth:`nll`.

    Parameters
    ----------
    kin : DalitzKinematics
        Masses.
    components : sequence of Component
        Isobar components, the first being the reference amplitude (its coefficient
        parameters should be fixed, e.g. to 1 + 0i; the paper's Sect. 6.4).
    parameters : ParameterSet
        All parameters: coefficients, lineshape parameters, yields.
    runs : sequence of RunSpec
        Subsamples, fitted simultaneously with shared amplitude parameters.
    vetoes : Vetoes
        D̄0 and border vetoes (applied to data, generation and all normalisations).
    polar : bool
        Coefficients as ``mag_*``/``ph_*`` instead of ``re_*``/``im_*``.
    grid_options : dict
        Options of :meth:`RowGrid.build` (``n_m``, ``du``, ``n_t``, ``t_panels``) and of the
        1-D normalisation rule (``norm_n``, ``norm_du``).
    """

    def __init__(self, kin: DalitzKinematics, components: Sequence[Component],
                 parameters: ParameterSet, runs: Sequence[RunSpec], vetoes: Vetoes, *,
                 polar: bool = False, grid_options: dict | None = None,
                 name: str = "dalitz"):
        self.kin = kin
        self.components = tuple(components)
        self.parameters = parameters
        self.runs = tuple(runs)
        self.vetoes = vetoes
        self.polar = polar
        self.name = name
        if not self.components:
            msg = f"{name}: the model needs at least one component"
            raise ModelError(msg)
        if not self.runs:
            msg = f"{name}: the model needs at least one run (subsample)"
            raise ModelError(msg)
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            msg = f"{name}: duplicate component names {names}"
            raise ModelError(msg)
        go = {"n_m": 8, "du": 0.05, "n_t": 10, "t_panels": 4, "norm_n": 8, "norm_du": 0.04,
              "spline_dm": 0.004, "knot_breaks": True, "coarse_du": 0.1}
        go.update(grid_options or {})
        self.grid_options = go
        idx = parameters.index
        # coefficient and lineshape parameter indices (ModelError for unknown names)
        if polar:
            self._c_idx = np.array([[idx(f"mag_{n}"), idx(f"ph_{n}")] for n in names])
        else:
            self._c_idx = np.array([[idx(f"re_{n}"), idx(f"im_{n}")] for n in names])
        self._p_idx = [np.array([idx(p) for p in c.params], dtype=int) for c in self.components]
        x0 = parameters.values
        for c, pi in zip(self.components, self._p_idx, strict=True):
            c.lineshape.check_values(kin, tuple(x0[pi]), c.name)
        run_names = [r.name for r in self.runs]
        if len(set(run_names)) != len(run_names):
            msg = f"{name}: duplicate run names {run_names}"
            raise ModelError(msg)
        self._sig_idx = np.array([idx(r.signal_yield) for r in self.runs])
        self._bkg_idx = [np.array([idx(b[2]) for b in r.backgrounds], dtype=int) for r in self.runs]
        self._cidx, self._cmu, self._csig = parameters.constraint_terms()

        # component normalisation (Eq. 5): 1-D rule for K+π− components, cubic-spline
        # nodes for the other pairs (shared with the normalisation kernels)
        self._static = np.array([all(parameters.params[int(i)].fixed for i in pi)
                                 for pi in self._p_idx], dtype=bool)
        self._norm1d: dict[str, MassQuadrature] = {}
        self._norm_geom: dict[int, dict[str, np.ndarray]] = {}
        self._splines: dict[str, PairSpline] = {}
        self._spline_geom: dict[int, dict[str, np.ndarray]] = {}
        breaks = self._breaks(x0)
        for j, c in enumerate(self.components):
            if c.pair == "kpi":
                if "kpi" not in self._norm1d:
                    self._norm1d["kpi"] = MassQuadrature.build(
                        kin, "kpi", breaks.get("kpi", ()), go["norm_n"], go["norm_du"])
                mq = self._norm1d["kpi"]
                self._norm_geom[j] = c.lineshape.geometry(kin, mq.m, mq.q, mq.p)
            else:
                if c.pair not in self._splines:
                    self._splines[c.pair] = PairSpline.build(kin, c.pair, go["spline_dm"])
                sp = self._splines[c.pair]
                self._spline_geom[j] = c.lineshape.geometry(kin, sp.nodes, sp.q, sp.p)
        # 2-D normalisation grid on the allowed region, efficiency per run
        # rows: panel edges also at the efficiency-spline knots in m' (the bin centres),
        # where the piecewise-cubic efficiency changes its third derivative
        eff_knots = sorted({float(v) for r in self.runs
                            for v in kin.m_from_mprime(r.efficiency.centres[0])})
        if go["knot_breaks"]:
            breaks.setdefault("kpi", []).extend(eff_knots)
        grid = RowGrid.build(kin, vetoes, breaks=breaks.get("kpi", ()), n_m=go["n_m"],
                             du=go["du"], n_t=go["n_t"], t_panels=go["t_panels"])
        self.grid = grid
        mp2 = grid.mp2
        self._bkg_grid = []  # SDP-density of each background at the nodes (normalised)
        self._bkg_norm = []
        bkg_cache: dict[int, float] = {}
        fine: RowGrid | None = None
        for r in self.runs:
            eff = r.efficiency.spline()(mp2, grid.thp)
            if not np.any(eff * grid.w > 0):
                msg = (f"{name}: efficiency map {r.efficiency.source} of run {r.name!r} is "
                       "zero over the whole allowed (non-vetoed) Dalitz plot")
                raise ModelError(msg)
            bn, bg = [], []
            for bname, bh, _ in r.backgrounds:
                b = bh.spline()(mp2, grid.thp)
                if id(bh) not in bkg_cache:  # once per map, on a finer rule (< 1e-6)
                    if fine is None:
                        fine = RowGrid.build(kin, vetoes, n_m=8, du=0.01, n_t=12, t_panels=8)
                    bkg_cache[id(bh)] = float(np.sum(bh.spline()(fine.mp2, fine.thp) * fine.w_sdp))
                integral = bkg_cache[id(bh)]
                if not integral > 0:
                    msg = (f"{name}: background map {bh.source} ({bname!r}, run {r.name!r}) "
                           "integrates to zero over the allowed Dalitz plot")
                    raise ModelError(msg)
                bn.append(integral)
                bg.append(b / integral)
            self._bkg_norm.append(bn)
            self._bkg_grid.append(bg)
        self._norm = _NormGrid(kin, grid, self.components,
                               [r.efficiency.spline() for r in self.runs], self._splines,
                               self._static, self._coarse_grid(vetoes),
                               self._norm1d.get("kpi"))
        self._ff_norm: _NormGrid | None = None

    # --- helpers ---------------------------------------------------------------------
    def _breaks(self, x0: np.ndarray) -> dict[str, list[float]]:
        """Panel edges: around every fixed RBW (m0 ± kΓ) and at the LASS cut-off."""
        out: dict[str, list[float]] = {}
        for c, pi in zip(self.components, self._p_idx, strict=True):
            ls = c.lineshape
            lst = out.setdefault(c.pair, [])
            if ls.kind in ("lass", "lass_nr"):
                lst.append(ls.cutoff)
            if ls.kind == "rbw":
                m0, w0 = x0[pi[0]] / 1000.0, x0[pi[1]] / 1000.0
                if all(self.parameters.params[i].fixed for i in pi):
                    ks = (-8, -4, -2, -1, -0.5, 0, 0.5, 1, 2, 4, 8) if w0 < 0.1 else (
                        -1, -0.5, 0, 0.5, 1)
                    lst.extend(m0 + k * w0 for k in ks)
        return out

    def _coarse_grid(self, vetoes: Vetoes) -> RowGrid:
        """Rows for the kernels between other-pair components and floating (broad) K+π−
        components: no panel edges around the fixed narrow states."""
        go = self.grid_options
        cb = [c.lineshape.cutoff for c in self.components
              if c.lineshape.kind in ("lass", "lass_nr")]
        return RowGrid.build(self.kin, vetoes, breaks=cb, n_m=go["n_m"], du=go["coarse_du"],
                             n_t=go["n_t"], t_panels=go["t_panels"])

    @property
    def run_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.runs)

    @property
    def component_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)

    def coefficients(self, x: np.ndarray) -> np.ndarray:
        """Complex coefficients ``c_j`` from the full parameter vector."""
        a = x[self._c_idx[:, 0]]
        b = x[self._c_idx[:, 1]]
        if self.polar:
            return a * np.exp(1j * b)
        return a + 1j * b

    def coefficient_chain(self, x: np.ndarray, d_re: np.ndarray, d_im: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Derivatives in the coefficient parameters from those in ``Re c_j`` and
        ``Im c_j`` (last axis the component): the same for cartesian coefficients; for polar
        ones ``c = ρ e^{iφ}``, ``∂/∂ρ = cos φ ∂/∂Re + sin φ ∂/∂Im`` and
        ``∂/∂φ = ρ (−sin φ ∂/∂Re + cos φ ∂/∂Im)``."""
        if not self.polar:
            return d_re, d_im
        rho = x[self._c_idx[:, 0]]
        phi = x[self._c_idx[:, 1]]
        return (d_re * np.cos(phi) + d_im * np.sin(phi),
                rho * (-d_re * np.sin(phi) + d_im * np.cos(phi)))

    def _values(self, values: np.ndarray | None) -> np.ndarray:
        if values is None:
            return self.parameters.values
        x = np.asarray(values, float)
        if x.shape != (len(self.parameters),):
            msg = (f"{self.name}: parameter vector has shape {x.shape}, expected "
                   f"({len(self.parameters)},) in the order of model.parameters.names")
            raise ModelError(msg)
        return x

    def norm_constant(self, j: int, x: np.ndarray) -> float:
        """``n_j`` with ``∫_DP |n_j g_j P_L|² dx dy = 1`` (Eur. Phys. J. C 78 (2018) 1019, Eq. (5)).

        At fixed pair mass the angular factor integrates to ``2/(2L+1)``, so this is a 1-D
        integral over the pair mass.
        """
        c = self.components[j]
        vals = tuple(x[self._p_idx[j]])
        if c.pair != "kpi":
            g = c.lineshape.evaluate(self.kin, self._spline_geom[j], vals)
            return self._norm_from_nodes(j, g)
        mq = self._norm1d[c.pair]
        g = c.lineshape.evaluate(self.kin, self._norm_geom[j], vals)
        integral = float(np.sum(mq.weight_ds * (g.real**2 + g.imag**2))) * 2.0 / (2 * c.spin + 1)
        return self._check_norm(j, integral)

    def _norm_from_nodes(self, j: int, g: np.ndarray) -> float:
        c = self.components[j]
        lam = self._splines[c.pair].lam
        integral = float(np.dot(lam, g.real**2 + g.imag**2)) * 2.0 / (2 * c.spin + 1)
        return self._check_norm(j, integral)

    def _check_norm(self, j: int, integral: float) -> float:
        if not (integral > 0 and math.isfinite(integral)):
            msg = (f"{self.name}: component {self.components[j].name!r} has a zero or "
                   "non-finite Dalitz-plot integral")
            raise ModelError(msg)
        return 1.0 / math.sqrt(integral)

    def component_values(self, x: np.ndarray, m2_kpi: np.ndarray, m2_etacpi: np.ndarray,
                         norms: np.ndarray | None = None) -> np.ndarray:
        """Normalised ``F_j`` at DP points, shape ``(n_points, n_components)`` (complex).

        ``norms`` may pass precomputed normalisation constants ``n_j``.
        """
        x = self._values(x)
        m2_kpi = np.asarray(m2_kpi, float)
        m2_etacpi = np.asarray(m2_etacpi, float)
        out = np.empty((m2_kpi.size, len(self.components)), complex)
        pvs = {}
        for j, c in enumerate(self.components):
            if c.pair not in pvs:
                pvs[c.pair] = self.kin.pair_variables(c.pair, m2_kpi.ravel(), m2_etacpi.ravel())
            pv = pvs[c.pair]
            geom = c.lineshape.geometry(self.kin, pv.m, pv.q, pv.p)
            g = c.lineshape.evaluate(self.kin, geom, tuple(x[self._p_idx[j]]))
            nj = self.norm_constant(j, x) if norms is None else norms[j]
            out[:, j] = nj * g * legendre(pv.cos, c.spin)
        return out

    def amplitude(self, x: np.ndarray, m2_kpi: np.ndarray, m2_etacpi: np.ndarray) -> np.ndarray:
        """``A = Σ c_j F_j`` at DP points (Eur. Phys. J. C 78 (2018) 1019, Eq. (4))."""
        x = self._values(x)
        m2_kpi = np.asarray(m2_kpi, float)
        return (self.component_values(x, m2_kpi, m2_etacpi) @ self.coefficients(x)).reshape(
            m2_kpi.shape)

    # --- normalisation -----------------------------------------------------------------
    def norm_matrices(self, x: np.ndarray | None = None) -> list[np.ndarray]:
        """``N_ij = ∫ F_i F_j* ε dx dy`` over the allowed DP, one matrix per run."""
        st = _State(self, self._norm)
        st.update(self._values(x))
        return [n.copy() for n in st.N]

    def _ff_grid(self) -> _NormGrid:
        if self._ff_norm is None:
            go = self.grid_options
            g = RowGrid.build(self.kin, Vetoes(d0=None, border=0.0),
                              breaks=self._breaks(self.parameters.values).get("kpi", ()),
                              n_m=go["n_m"], du=go["du"], n_t=go["n_t"],
                              t_panels=go["t_panels"])
            self._ff_norm = _NormGrid(self.kin, g, self.components, [None], self._splines,
                                      self._static,
                                      self._coarse_grid(Vetoes(d0=None, border=0.0)),
                                      self._norm1d.get("kpi"))
        return self._ff_norm

    def fit_fractions(self, x: np.ndarray | None = None) -> dict[str, object]:
        """Fit fractions and interference fit fractions (Eur. Phys. J. C 78 (2018) 1019, Eqs.
        (12)–(13)).

        Integrals over the full DP without efficiency or vetoes. Returns ``{"names",
        "matrix"}`` where ``matrix[i, i] = FF_i`` and ``matrix[i, j] = FF_ij`` (i < j,
        mirrored), so that ``Σ_i FF_i + Σ_{i<j} FF_ij = 1``; also ``"ff"`` as a dict.
        """
        x = self._values(x)
        st = _State(self, self._ff_grid())
        st.update(x)
        M = st.N[0]
        c = self.coefficients(x)
        total = float(np.real(c @ M @ c.conj()))
        P = np.real(c[:, None] * c.conj()[None, :] * M)
        mat = np.where(np.eye(len(c), dtype=bool), P, 2.0 * P) / total
        names = self.component_names
        return {"names": names, "matrix": mat,
                "ff": {n: float(mat[i, i]) for i, n in enumerate(names)}}

    # --- PDFs ----------------------------------------------------------------------------
    def _sdp_terms(self, r: int, m2_kpi: np.ndarray, m2_etacpi: np.ndarray):
        """``ε|J|`` and normalised background SDP densities at DP points of run ``r``."""
        mp, thp = self.kin.sdp_from_dp(m2_kpi, m2_etacpi)
        run = self.runs[r]
        ej = run.efficiency.spline()(mp, thp) * self.kin.sdp_jacobian(mp, thp)
        bk = [bh.spline()(mp, thp) / self._bkg_norm[r][k]
              for k, (_, bh, _) in enumerate(run.backgrounds)]
        return ej, bk

    def densities(self, x: np.ndarray | None, run: str, m2_kpi: np.ndarray,
                  m2_etacpi: np.ndarray) -> dict[str, np.ndarray]:
        """Per-component *normalised* SDP densities (signal, backgrounds) at DP points.

        Zero outside the allowed region. Multiply by the yields for Eq. 14.
        """
        x = self._values(x)
        r = self.run_names.index(run)
        m2_kpi = np.asarray(m2_kpi, float)
        m2_etacpi = np.asarray(m2_etacpi, float)
        ok = self.vetoes.passes(self.kin, m2_kpi, m2_etacpi)
        st = _State(self, self._norm)
        st.update(x)
        c = self.coefficients(x)
        norm = float(np.real(c @ st.N[r] @ c.conj()))
        A = self.amplitude(x, m2_kpi, m2_etacpi)
        ej, bk = self._sdp_terms(r, m2_kpi, m2_etacpi)
        out = {"signal": np.where(ok, np.abs(A) ** 2 * ej / norm, 0.0)}
        for (bname, _, _), b in zip(self.runs[r].backgrounds, bk, strict=True):
            out[bname] = np.where(ok, b, 0.0)
        return out

    # --- ToyModel protocol ---------------------------------------------------------------
    @property
    def derived_names(self) -> tuple[str, ...]:
        """Quantities recorded per toy next to the fitted parameters: the fit fraction of
        every component, ``ff_<name>`` (Eur. Phys. J. C 78 (2018) 1019, Eq. (12)), so a fit-bias
        study gives toy-based fit-fraction uncertainties."""
        return tuple(f"ff_{n}" for n in self.component_names)

    def derived(self, values: np.ndarray) -> np.ndarray:
        ff = self.fit_fractions(values)["ff"]
        return np.array([ff[n] for n in self.component_names], dtype=float)

    def load_data(self, path: str) -> DalitzData:
        """A fixed data set (a study's ``data:`` file) written by :meth:`DalitzData.save_npz`."""
        return DalitzData.load_npz(str(path))

    def nll(self, data: DalitzData,
            weights: Mapping[str, np.ndarray] | None = None) -> DalitzNLL:
        """Extended −ln L of Eur. Phys. J. C 78 (2018) 1019, Eq. (14), summed over runs, with
        Gaussian constraints.

        Events in vetoed regions are removed (the vetoes are selection cuts, Sect. 6
        of the paper);
        events outside the kinematic DP raise :class:`ModelError`. ``weights`` (one array
        per run, one weight per event) weight each event's ``ln`` density, as for the
        Asimov data set of :meth:`asimov`.
        """
        return DalitzNLL(self, data, weights)

    def asimov(self, values: np.ndarray | None = None
               ) -> tuple[DalitzData, dict[str, np.ndarray]]:
        """The Asimov data set at ``values`` (default: the generation values).

        The nodes of the model's normalisation rule (:class:`RowGrid`) in every run, each
        weighted by the expected number of events it stands for: ``Σ_c N_c f_c w`` with the
        yields ``N_c``, the normalised densities ``f_c`` of :meth:`densities` and the node's
        weight ``w`` on the square Dalitz plot. The weights sum to the expected yield of
        each run; a fit of ``nll(data, weights)`` returns ``values`` to the accuracy of the
        rule (Cowan, Cranmer, Gross, Vitells, Eur. Phys. J. C 71 (2011) 1554, Sect. 3.1).
        """
        x = self._values(values)
        grid = self._norm.grid
        px, py, wq = grid.x.ravel(), grid.y.ravel(), grid.w_sdp.ravel()
        keep = wq > 0
        px, py, wq = px[keep], py[keep], wq[keep]
        runs: dict[str, RunSample] = {}
        weights: dict[str, np.ndarray] = {}
        for r, run in enumerate(self.runs):
            dens = self.densities(x, run.name, px, py)
            expect = float(x[self._sig_idx[r]]) * dens["signal"]
            for (bname, _, _), k in zip(run.backgrounds, self._bkg_idx[r], strict=True):
                expect = expect + float(x[int(k)]) * dens[bname]
            w = expect * wq
            use = w > 0
            runs[run.name] = RunSample(px[use], py[use])
            weights[run.name] = w[use]
        return DalitzData(runs), weights

    def sample(self, values: np.ndarray | None,
               rng: np.random.Generator | DataStreams) -> DalitzData:
        """One pseudo-data set: Poisson yields per run and component, accept–reject on
        the SDP with the efficiency applied (signal) or from the smoothed maps (backgrounds).

        Proposals are drawn from a piecewise-constant envelope in ``m'`` built from the row
        maxima of the density on the normalisation grid (× 1.5), uniform in ``θ'``; a
        proposal above the envelope raises it and restarts the draw from the start of the
        stream, so the accepted sample follows the density exactly.

        Random numbers (:mod:`toyengine.core.streams`): component ``"<run>/signal"`` or
        ``"<run>/<background>"`` takes its count from the Poisson inverse CDF of its count
        uniform and proposal *j* from row *j* of its event stream (4 uniforms: segment,
        ``m'`` in the segment, ``θ'``, acceptance). Two models sampled with the same streams
        therefore share proposals wherever their envelopes agree, and accept a shared
        proposal together wherever their densities agree.
        """
        streams = as_streams(rng)
        x = self._values(values)
        st = _State(self, self._norm)
        st.update(x)
        c = self.coefficients(x)
        a2_grid = np.abs(st.amplitude_on_grid(c)) ** 2
        jac = self.grid.w / np.where(self.grid.w_sdp > 0, self.grid.w_sdp, 1.0)  # = |J|
        runs = {}
        for r, run in enumerate(self.runs):
            eff = run.efficiency.spline()
            comp = f"{run.name}/signal"
            n_sig = streams.count(comp, x[self._sig_idx[r]])

            def sig_density(mp, th, xx, yy, eff=eff):
                A = self.component_values(x, xx, yy, st.n) @ c
                return (A.real**2 + A.imag**2) * eff(mp, th) * self.kin.sdp_jacobian(mp, th)

            row_max = np.max(a2_grid * self._norm.eff[r] * jac, axis=1)
            xs, ys = self._accept_reject(sig_density, row_max, n_sig, streams, comp)
            parts_x, parts_y, labels = [xs], [ys], [np.zeros(n_sig, np.int16)]
            for k, (bname, bh, _) in enumerate(run.backgrounds):
                comp = f"{run.name}/{bname}"
                nb = streams.count(comp, x[self._bkg_idx[r][k]])
                spl = bh.spline()
                bx, by = self._accept_reject(lambda mp, th, xx, yy, spl=spl: spl(mp, th),
                                             np.max(self._bkg_grid[r][k], axis=1)
                                             * self._bkg_norm[r][k], nb, streams, comp)
                parts_x.append(bx)
                parts_y.append(by)
                labels.append(np.full(nb, k + 1, np.int16))
            runs[run.name] = RunSample(np.concatenate(parts_x), np.concatenate(parts_y),
                                       np.concatenate(labels))
        return DalitzData(runs)

    def _accept_reject(self, density, row_max: np.ndarray, n: int, streams: DataStreams,
                       component: str, safety: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
        """The first ``n`` accepted proposals of ``component``'s stream, SDP density ∝
        ``density`` on the allowed region."""
        if n == 0:
            return np.empty(0), np.empty(0)
        mp_rows = self.grid.mp
        order = np.argsort(mp_rows)
        mps = mp_rows[order]
        rm = row_max[order]
        # segment edges halfway between rows; envelope = max of the row and its neighbours
        edges = np.concatenate([[0.0], 0.5 * (mps[1:] + mps[:-1]), [1.0]])
        env = np.maximum(rm, np.maximum(np.concatenate([rm[1:], [0.0]]),
                                        np.concatenate([[0.0], rm[:-1]])))
        env = safety * np.maximum(env, 1e-300)
        widths = np.diff(edges)
        for _attempt in range(30):
            rng = streams.events(component)  # every attempt restarts the stream
            cum = np.cumsum(env * widths)
            total = cum[-1]
            xs, ys = [], []
            got = 0
            exceeded = False
            acc_rate = 0.3
            while got < n:
                m = int(min(max(1.3 * (n - got) / acc_rate, 500), 2_000_000))
                uu = rng.random((m, 4))  # row j = proposal j, whatever the batch size
                seg = np.searchsorted(cum, uu[:, 0] * total, side="right")
                seg = np.minimum(seg, env.size - 1)
                mp = edges[seg] + widths[seg] * uu[:, 1]
                th = uu[:, 2]
                xx, yy = self.kin.dp_from_sdp(mp, th)
                ok = self.vetoes.passes(self.kin, xx, yy)
                f = np.zeros(m)
                if ok.any():
                    f[ok] = density(mp[ok], th[ok], xx[ok], yy[ok])
                ratio = f / env[seg]
                if np.any(ratio > 1.0):
                    bad = ratio > 1.0
                    np.maximum.at(env, seg[bad], 1.5 * f[bad])
                    exceeded = True
                    break
                acc = uu[:, 3] < ratio
                acc_rate = max(acc.sum() / m, 1e-3)
                xs.append(xx[acc])
                ys.append(yy[acc])
                got += int(acc.sum())
            if not exceeded:
                return np.concatenate(xs)[:n], np.concatenate(ys)[:n]
        msg = f"{self.name}: accept-reject envelope could not be established"
        raise ModelError(msg)


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

    def __init__(self, model: DalitzModel, norm: _NormGrid,
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
        self._pidx = model._p_idx
        self._all_pidx = np.concatenate(self._pidx).astype(int)
        self._offsets = np.concatenate([[0], np.cumsum([pi.size for pi in self._pidx])]).tolist()
        self._last: list[float] | None = None  # the lineshape parameters of self.keys
        self._ki = norm.kpi_idx

    def changed(self, x: np.ndarray) -> list[int]:
        xl = x[self._all_pidx].tolist()
        if xl == self._last:
            return []  # no lineshape parameter moved (e.g. a coefficient-only step)
        o = self._offsets
        return [j for j in range(len(self.keys))
                if tuple(xl[o[j]:o[j + 1]]) != self.keys[j]]

    def update(self, x: np.ndarray, dirty: list[int] | None = None) -> list[int]:
        """Recompute components whose parameters changed; returns their indices."""
        if dirty is None:
            dirty = self.changed(x)
        if not dirty:
            return dirty
        model, norm = self.model, self.norm
        kin = model.kin
        dset = set(dirty)
        for j in dirty:
            c = model.components[j]
            vals = tuple(x[self._pidx[j]].tolist())
            self.keys[j] = vals
            g = c.lineshape.evaluate(kin, self.geom[j], vals)
            self.g[j] = g
            sl = norm.slices[j]
            gn = g[sl["norm"]] if c.pair == "kpi" else g[sl["nodes"]]
            nj = model._check_norm(j, float(np.dot(self.norm_w[j], gn.real**2 + gn.imag**2)))
            self.n[j] = nj
            if c.pair == "kpi":
                k = norm.kpos[j]
                self.rows[k] = nj * g[sl["rows"]]
                if norm.n_coarse and not norm.static[j]:
                    self.rows_c[k] = nj * g[sl["coarse"]]
            else:
                self.nodes[j] = nj * gn
                if "grid" in sl:
                    self.full2d[j] = nj * g[sl["grid"]].reshape(norm.grid.shape)
            if self.n_ev:
                fj = self.F[:, j]
                np.multiply(g[self.ev_slice[j]], self.ev_ang[j], out=fj)
                fj *= nj
        self._last = (None if any(k is None for k in self.keys)
                      else [v for k in self.keys for v in k])
        ki = self._ki
        N = self.N
        H = self.rows
        dk = [j for j in dirty if j in norm.kpos]
        # K+π− block, all runs at once
        if dk:
            pos = [norm.kpos[j] for j in dk]
            blk = np.matmul(norm.esel[:, pos] * H.conj(), H[pos][:, :, None])[..., 0]
            for d_, j in enumerate(dk):
                N[:, j, ki] = blk[:, d_]
                N[:, ki, j] = blk[:, d_].conj()
        stat_dirty = [s_ for s_, kk in enumerate(norm.stat_pos) if int(ki[kk]) in dset]
        var_dirty = any(int(ki[kk]) in dset for kk in norm.var_pos)
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
                col = Vm @ G  # (R, n_stat)
                cols = ki[norm.stat_pos]
                N[:, i, cols] = col
                N[:, cols, i] = col.conj()
            if norm.var_pos.size and (i_d or var_dirty):
                if i_d or i not in self.R:
                    # two matrix-vector products: ~2x faster than one product with a
                    # two-column matrix (BLAS's small-n matrix product)
                    Kc = norm.Kc[i]
                    RR = np.empty(Kc.shape[0], complex)
                    RR.real = Kc @ G.real
                    RR.imag = Kc @ G.imag
                    self.R[i] = RR.reshape(norm.n_eff, len(norm.var_lvals), norm.n_coarse)
                Rc = self.R[i][:, norm.var_l]  # (R, n_var, n_coarse)
                col = np.einsum("rva,va->rv", Rc, self.rows_c[norm.var_pos].conj())
                cols = ki[norm.var_pos]
                N[:, i, cols] = col
                N[:, cols, i] = col.conj()
        # within one other pair
        for (i, k), kap in norm.kappa.items():
            if i in dset or k in dset:
                val = kap @ (self.nodes[i] * self.nodes[k].conj())
                N[:, i, k] = val
                N[:, k, i] = val.conj()
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
            E = np.tensordot(fracs, norm.esel[:, kj], 1)  # (n_kpi, n_rows)
            W[sl["rows"]] = cc[ki] @ (E * self.rows.conj())
            if norm.other_idx:  # floating K+π− components meet other pairs on coarse rows
                lj = norm.var_l[int(np.flatnonzero(norm.var_pos == kj)[0])]
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


class DalitzNLL:
    """Callable ``nll(x_full) -> float`` for one data set, with ``.grad(x_full)``.

    The gradient is analytic in all parameters: coefficients, yields and lineshape
    parameters (:meth:`Lineshape.derivatives` at the cached points, propagated through the
    component normalisation and, linearly, through row ``j`` of the normalisation matrices,
    whose adjoint :meth:`_State.norm_row_weights` turns each parameter's contribution into
    one dot product over the component's points).
    """

    errordef = 0.5

    def __init__(self, model: DalitzModel, data: DalitzData,
                 weights: Mapping[str, np.ndarray] | None = None):
        self.model = model
        kin = model.kin
        missing = [r for r in model.run_names if r not in data.runs]
        extra = [r for r in data.runs if r not in model.run_names]
        if missing or extra:
            msg = (f"{model.name}: data runs {sorted(data.runs)} do not match the model runs "
                   f"{list(model.run_names)}")
            raise ModelError(msg)
        if weights is not None and set(weights) != set(data.runs):
            msg = (f"{model.name}: weights for runs {sorted(weights)} do not match the data "
                   f"runs {sorted(data.runs)}")
            raise ModelError(msg)
        xs, ys, run_of, ws = [], [], [], []
        ej_all, bk_cols = [], []
        nb_tot = sum(len(r.backgrounds) for r in model.runs)
        bk_off = 0
        self.n_dropped = 0
        for r, run in enumerate(model.runs):
            rs = data.runs[run.name]
            x, y = rs.m2_kpi, rs.m2_etacpi
            inside = kin.inside(x, y)
            if not np.all(inside):
                bad = np.flatnonzero(~inside)[0]
                msg = (f"{model.name}: run {run.name!r} has {int((~inside).sum())} event(s) "
                       f"outside the kinematic Dalitz plot, first (m2_kpi, m2_etacpi) = "
                       f"({x[bad]}, {y[bad]}) GeV^2")
                raise ModelError(msg)
            ok = model.vetoes.passes(kin, x, y)
            self.n_dropped += int((~ok).sum())
            if weights is not None:
                w = np.asarray(weights[run.name], dtype=float).ravel()
                if w.shape != x.shape or not np.all(np.isfinite(w)):
                    msg = (f"{model.name}: run {run.name!r} needs one finite weight per "
                           f"event ({x.size}), got shape {w.shape}")
                    raise ModelError(msg)
                ws.append(w[ok])
            x, y = x[ok], y[ok]
            xs.append(x)
            ys.append(y)
            run_of.append(np.full(x.size, r))
            ej, bk = model._sdp_terms(r, x, y)
            ej_all.append(ej)
            col = np.zeros((x.size, nb_tot))
            for k, b in enumerate(bk):
                col[:, bk_off + k] = b
            bk_off += len(bk)
            bk_cols.append(col)
        self.x = np.concatenate(xs)
        self.y = np.concatenate(ys)
        #: per-event weights (None: unweighted, every event counts once)
        self.w = np.concatenate(ws) if weights is not None else None
        self.run_of = np.concatenate(run_of)
        self.ej = np.concatenate(ej_all)
        self.bk = np.asfortranarray(np.concatenate(bk_cols) if nb_tot
                                    else np.zeros((self.x.size, 0)))
        self.bk_idx = (np.concatenate(model._bkg_idx) if nb_tot else np.zeros(0, int))
        self.n_runs = len(model.runs)
        ends = np.cumsum([x_.size for x_ in xs])
        self.run_slices = [slice(int(e - x_.size), int(e)) for e, x_ in zip(ends, xs, strict=True)]
        # event geometry per component (evaluated together with the grid points)
        ev = []
        pvs = {}
        for c in model.components:
            if c.pair not in pvs:
                pvs[c.pair] = kin.pair_variables(c.pair, self.x, self.y)
            pv = pvs[c.pair]
            ev.append((pv.m, pv.q, pv.p, legendre(pv.cos, c.spin)))
        self.state = _State(model, model._norm, ev)
        self._terms_key: bytes | None = None
        self._terms_out: tuple = ()
        self._yield_idx = np.concatenate([model._sig_idx, self.bk_idx]).astype(int)
        # per component with floating lineshape parameters: their positions in
        # Component.params and their indices in the parameter vector
        free = model.parameters.free_mask
        self._ls_free = {j: (np.flatnonzero(free[pi]), pi[free[pi]])
                         for j, pi in enumerate(model._p_idx) if np.any(free[pi])}

    @property
    def n_events(self) -> int:
        return int(self.x.size)

    def _terms(self, x: np.ndarray):
        """``(c, I_r, A, |A|², signal, total)`` at ``x`` (the state brought to ``x``); kept
        for the last ``x``, as MIGRAD asks for the gradient where it last asked for the
        value. The arrays are shared with the next call at the same ``x``: read only."""
        m = self.model
        self.state.update(x)  # always: a restricted likelihood may have moved the state
        key = x.tobytes()
        if key == self._terms_key:
            return self._terms_out
        c = m.coefficients(x)
        norms = ((self.state.N @ c.conj()) @ c).real
        A = self.state.F @ c
        a2 = A.real * A.real
        a2 += A.imag * A.imag  # |A|²
        scale = x[m._sig_idx] / norms
        sig = a2 * self.ej
        for r, sl in enumerate(self.run_slices):  # events are stored run by run
            sig[sl] *= scale[r]
        tot = sig + self.bk @ x[self.bk_idx] if self.bk_idx.size else sig
        self._terms_key, self._terms_out = key, (c, norms, A, a2, sig, tot)
        return self._terms_out

    def __call__(self, x: np.ndarray) -> float:
        x = np.asarray(x, float)
        _, norms, _, _, _, tot = self._terms(x)
        return self._value(x, norms, tot)

    def _value(self, x: np.ndarray, norms: np.ndarray, tot: np.ndarray) -> float:
        """−ln L from the terms of :meth:`_terms`."""
        m = self.model
        nl = norms.tolist()
        if not (min(nl) > 0 and math.isfinite(sum(nl))):
            return 1e30
        logs = np.log(np.maximum(tot, 1e-300))
        val = float(np.sum(x[self._yield_idx])
                    # np.sum of the products, not a BLAS dot product, whose summation
                    # order depends on its threads: unit weights give exactly the
                    # unweighted value, on any machine
                    - np.sum(logs if self.w is None else self.w * logs))
        if m._cidx.size:
            d = (x[m._cidx] - m._cmu) / m._csig
            val += 0.5 * float(d @ d)
        return val if math.isfinite(val) else 1e30

    def grad(self, x: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`__call__` on the full parameter vector (zeros for fixed)."""
        x = np.asarray(x, float)
        m = self.model
        g = np.zeros_like(x)
        c, norms, A, a2, sig, tot = self._terms(x)
        inv = 1.0 / np.maximum(tot, 1e-300)
        if self.w is not None:  # weighted events: every d ln tot / dθ carries its weight
            inv = inv * self.w
        # yields: d/dN_sig,r = 1 - sum_{i in r} (|A|^2 eps|J| / I_r)_i / tot_i
        ainv = a2 * self.ej * inv
        for r, sl in enumerate(self.run_slices):
            g[m._sig_idx[r]] += 1.0 - np.sum(ainv[sl]) / norms[r]
        if self.bk_idx.size:
            np.add.at(g, self.bk_idx, 1.0 - self.bk.T @ inv)
        # coefficients: d(-sum log tot)/dc  (cartesian first)
        nsig = x[m._sig_idx]
        wev = (nsig / norms)[self.run_of] * self.ej * inv  # d tot / d|A|^2 / tot
        S = self.state.F.T @ (np.conj(A) * wev)  # sum_i conj(A_i) F_ij w_i
        d_re = -2.0 * S.real
        d_im = 2.0 * S.imag
        fracs = np.empty(self.n_runs)
        sinv = sig * inv
        for r, sl in enumerate(self.run_slices):
            frac = fracs[r] = np.sum(sinv[sl]) / norms[r]  # Σ sig/tot/I
            Nc = self.state.N[r] @ c.conj()
            d_re += frac * 2.0 * Nc.real
            d_im += frac * (-2.0 * Nc.imag)
        d_a, d_b = m.coefficient_chain(x, d_re, d_im)
        np.add.at(g, m._c_idx[:, 0], d_a)
        np.add.at(g, m._c_idx[:, 1], d_b)
        # constraints
        if m._cidx.size:
            np.add.at(g, m._cidx, (x[m._cidx] - m._cmu) / m._csig**2)
        # lineshape parameters, exactly: ∂(−Σ ln tot)/∂θ = −2 Re(c_j Σ_i w_i A_i* ∂F_ij)
        # + Σ_r frac_r ∂I_r with ∂I_r = 2 Re(c_j Σ_k ∂N_rjk c_k*) (N_rjk = ∫ F_j F_k* ε) and
        # ∂F_j = n_j ∂g_j + (∂n_j/n_j) F_j, ∂n_j = −n_j³ Σ w Re(g_j* ∂g_j) (Eq. 5): all of it
        # is Re(Σ ∂g_j W) over the points of component j, with one weight vector W per
        # component (events, normalisation rule, the adjoint of its row of N)
        st = self.state
        aw = np.conj(A) * wev
        cc = c.conj()
        for j, (pos, idx) in self._ls_free.items():
            nj = st.n[j]
            cj = c[j]
            W = (2.0 * cj * nj) * st.norm_row_weights(j, fracs, cc)
            W[st.ev_slice[j]] -= (2.0 * cj * nj) * (st.ev_ang[j] * aw)
            # the ∂n_j terms: ∂n_j/n_j times the F_j parts of both sums
            k_ = 2.0 * (cj * (fracs @ (st.N[:, j] @ cc) - S[j])).real
            sel = st.norm_sel[j]
            W[sel] -= (nj * nj * k_) * st.norm_w[j] * st.g[j][sel].conj()
            dg = st.model.components[j].lineshape.derivatives(
                m.kin, st.geom[j], st.keys[j], st.g[j], pos)
            g[idx] += (dg @ W).real  # Re Σ ∂g W
        g[~m.parameters.free_mask] = 0.0
        return g

    def event_jacobian(self, x: np.ndarray) -> np.ndarray:
        """``∂tot_i/∂x_a``: the derivative of every event's total density ``tot_i`` (signal
        ``N_r ε|J|_i |A_i|² / I_r`` plus backgrounds; Eur. Phys. J. C 78 (2018) 1019,
        Eqs. 4, 11 and 14) in every free parameter, one row per parameter of the full
        vector (zero rows for fixed ones), exactly as :meth:`grad` takes them: yields,
        coefficients, and lineshape parameters through the component values, their
        normalisation ``n_j`` (Eq. 5) and the run normalisations ``I_r`` (the adjoint of
        row ``j`` of the normalisation matrices, one per run)."""
        x = np.asarray(x, float)
        m = self.model
        st = self.state
        c, norms, A, a2, sig, _ = self._terms(x)
        free = m.parameters.free_mask
        J = np.zeros((x.size, a2.size))
        run_of = self.run_of
        # signal yields: ∂tot/∂N_r = ε|J| |A|² / I_r on the events of run r
        for r, sl in enumerate(self.run_slices):
            J[m._sig_idx[r], sl] += a2[sl] * self.ej[sl] / norms[r]
        for k, p in enumerate(self.bk_idx):
            J[p] += self.bk[:, k]
        # ∂tot = (N_r ε|J| / I_r) ∂|A|² − sig ∂I_r / I_r
        scale = (x[m._sig_idx] / norms)[run_of] * self.ej
        rel = sig / norms[run_of]
        P = np.conj(A)[:, None] * st.F  # A_i* F_ij
        Nc = st.N @ c.conj()  # (R, nc): ∂I_r/∂Re c_j = 2 Re, ∂I_r/∂Im c_j = −2 Im
        d_re = (2.0 * scale)[:, None] * P.real - rel[:, None] * (2.0 * Nc.real)[run_of]
        d_im = (-2.0 * scale)[:, None] * P.imag + rel[:, None] * (2.0 * Nc.imag)[run_of]
        d_a, d_b = m.coefficient_chain(x, d_re, d_im)
        for j in range(len(m.components)):
            J[m._c_idx[j, 0]] += d_a[:, j]
            J[m._c_idx[j, 1]] += d_b[:, j]
        # lineshape parameters: ∂F_ij = n_j ∂g_j P_L + (∂n_j/n_j) F_ij with
        # ∂n_j/n_j = −n_j² Σ w Re(g_j* ∂g_j) (Eq. 5) and, per run,
        # ∂I_r = 2 Re(c_j Σ_k ∂N_rjk c_k*) (:meth:`_State.norm_row_weights`)
        cc = c.conj()
        eye = np.eye(self.n_runs)
        for j, (pos, idx) in self._ls_free.items():
            nj = st.n[j]
            cj = c[j]
            dg = st.model.components[j].lineshape.derivatives(
                m.kin, st.geom[j], st.keys[j], st.g[j], pos)
            sel = st.norm_sel[j]
            rho_n = -(nj * nj) * (dg[:, sel] @ (st.norm_w[j] * st.g[j][sel].conj())).real
            dF = nj * dg[:, st.ev_slice[j]] * st.ev_ang[j] + rho_n[:, None] * st.F[:, j]
            dA2 = 2.0 * (cj * dF * np.conj(A)).real  # (npos, n_ev)
            dI = np.empty((len(pos), self.n_runs))
            for r in range(self.n_runs):
                W = (2.0 * cj * nj) * st.norm_row_weights(j, eye[r], cc)
                dI[:, r] = ((dg @ W).real
                            + rho_n * 2.0 * (cj * (st.N[r, j] @ cc)).real)
            J[idx] += scale * dA2 - rel * dI[:, run_of]
        J[~free] = 0.0
        return J

    def expected_hessian(self, x: np.ndarray) -> np.ndarray:
        """The expected (Fisher) information of :meth:`__call__` as a Hessian estimate:
        ``Σ_i w_i ∂_a tot_i ∂_b tot_i / tot_i²`` (:meth:`event_jacobian`; ``|w_i|`` for
        negative weights, so that it stays positive semi-definite) plus the Gaussian
        constraint terms ``1/σ²``.

        The Hessian of the extended −ln L is that sum minus ``Σ_i w_i ∂_ab tot_i / tot_i``
        (the expected yield ``∫ tot`` is linear in the yields, so it adds nothing); the
        second sum has expectation ``∫ ∂_ab tot = 0`` at the true parameters, which makes
        the first the Fisher information (Eadie et al., *Statistical Methods in
        Experimental Physics*, North-Holland (1971), Sect. 5.2): positive semi-definite
        everywhere and, near the minimum of a large sample, close to the exact Hessian.
        It seeds MIGRAD's metric where no errors are needed (:func:`toyengine.core.fit.fit`
        with ``hesse=False``) instead of its numerical second derivatives; it is not the
        HESSE matrix and gives no errors. Full vector, zero rows and columns for fixed
        parameters."""
        x = np.asarray(x, float)
        m = self.model
        J = self.event_jacobian(x)
        _, _, _, _, _, tot = self._terms(x)
        root = 1.0 / np.maximum(tot, 1e-300)  # sqrt(w) / tot
        if self.w is not None:
            root *= np.sqrt(np.abs(self.w))
        free = np.flatnonzero(m.parameters.free_mask)
        Jw = J[free] * root
        h = np.zeros((x.size, x.size))
        h[np.ix_(free, free)] = Jw @ Jw.T  # exactly symmetric (one operand, transposed)
        if m._cidx.size:
            np.add.at(h, (m._cidx, m._cidx), 1.0 / m._csig**2)
            h[~m.parameters.free_mask] = 0.0
            h[:, ~m.parameters.free_mask] = 0.0
        return h

    def restricted(self, free: np.ndarray) -> _CouplingNLL | None:
        """This likelihood with an exact Hessian, valid while only the parameters ``free``
        (a mask over the full vector) vary, or None when that is not cheap.

        When only cartesian coefficients float (e.g. the couplings of one component at a
        point of a profile over its mass and width), the lineshapes, component values and
        normalisation matrices stay cached and ``−ln L`` is a function of the amplitude
        ``A = Σ c_j F_j``, linear in the floating coefficients, and of the quadratic
        normalisation ``c^T N c*`` (Eur. Phys. J. C 78 (2018) 1019, Eqs. 4, 11 and 14):
        its gradient and Hessian cost a few sums over the events (:class:`_CouplingNLL`).
        """
        m = self.model
        free = np.asarray(free, dtype=bool)
        idx = np.flatnonzero(free)
        if m.polar or idx.size == 0:
            return None
        where = {int(k): (j, w) for j, pair in enumerate(m._c_idx.tolist())
                 for k, w in zip(pair, (1.0, 1.0j), strict=True)}
        if not all(int(k) in where for k in idx):
            return None
        comp = np.array([where[int(k)][0] for k in idx], dtype=int)
        omega = np.array([where[int(k)][1] for k in idx], dtype=complex)
        return _CouplingNLL(self, idx, comp, omega)


class _CouplingNLL:
    """:class:`DalitzNLL` as a function of some cartesian coefficients alone, with its exact
    gradient and Hessian in them (:meth:`DalitzNLL.restricted`).

    With the floating coefficient parameters ``u`` (``∂A/∂u_a = ω_a F_{j_a}``, ``ω = 1``
    for a real part, ``i`` for an imaginary part) the amplitude is ``A = A_0 + Σ u_a ω_a
    F_{j_a}``, so per event ``|A|² = |A_0|² + β·u + u^T Γ u`` with ``β_a = 2 Re(A_0* ω_a
    F_{j_a})`` and ``Γ_ab = Re(ω_a* ω_b F_{j_a}* F_{j_b})``, and per run the normalisation
    ``I = c^T N c*`` is quadratic in ``u`` the same way. These coefficients are computed
    once per point of the other parameters; with ``s_i = ε|J|_i N_r |A_i|² / I_r`` and
    ``tot_i = s_i + b_i``, ``∂_ab(−ln L) = Σ_i [∂_a s_i ∂_b s_i / tot_i² − ∂_ab s_i / tot_i]``
    (plus the Gaussian constraint terms) is then a few sums over the events.
    Value, gradient and Hessian at one point are computed together and kept.
    """

    errordef = 0.5

    def __init__(self, nll: DalitzNLL, idx: np.ndarray, comp: np.ndarray,
                 omega: np.ndarray) -> None:
        self.nll = nll
        self.idx = idx
        self.comp = comp
        self.omega = omega
        m = nll.model
        con = np.isin(m._cidx, idx)
        self._con_idx = m._cidx[con]
        self._con_mu = m._cmu[con]
        self._con_sig = m._csig[con]
        self._key: bytes | None = None
        self._out: tuple[float, np.ndarray, np.ndarray] | None = None
        self._base_key: bytes | None = None
        self._base: tuple | None = None

    def _quadratic(self, x: np.ndarray) -> tuple:
        """The coefficients of ``|A|²`` and ``I`` in ``u`` at the other parameters of ``x``."""
        x0 = x.copy()
        x0[self.idx] = 0.0
        key = x0.tobytes()
        if key == self._base_key and self._base is not None:
            return self._base
        nll = self.nll
        m = nll.model
        nll.state.update(x0)
        c0 = m.coefficients(x0)
        F = nll.state.F
        A0 = F @ c0
        D = F.T[self.comp] * self.omega[:, None]  # ∂A/∂u, one row per u
        nf = self.idx.size
        a0 = A0.real * A0.real + A0.imag * A0.imag
        beta = 2.0 * (A0.conj() * D).real
        gam = (D.conj()[:, None, :] * D[None, :, :]).real.reshape(nf, nf * A0.size)
        N = nll.state.N
        cc0 = c0.conj()
        I0 = ((N @ cc0) @ c0).real
        bN = 2.0 * (self.omega * (N[:, self.comp] @ cc0)).real  # (R, nf)
        GN = (self.omega[:, None] * self.omega.conj()
              * N[:, self.comp][:, :, self.comp]).real  # (R, nf, nf)
        b = nll.bk @ x[nll.bk_idx] if nll.bk_idx.size else np.zeros(A0.size)
        self._base_key = key
        self._base = (a0, beta, gam, I0, bN, GN, b)
        return self._base

    def _eval(self, x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        x = np.asarray(x, float)
        key = x.tobytes()
        if key == self._key and self._out is not None:
            return self._out
        nll = self.nll
        m = nll.model
        a0, beta, gam, I0, bN, GN, b = self._quadratic(x)
        u = x[self.idx]
        nf = u.size
        n_ev = a0.size
        Gu = (u @ gam).reshape(nf, n_ev)  # Σ_b Γ_ab u_b
        gam3 = gam.reshape(nf, nf, n_ev)
        P = a0 + u @ beta + u @ Gu  # |A|²
        p = beta + 2.0 * Gu  # ∂|A|²/∂u
        GNu = GN @ u
        I = I0 + bN @ u + GNu @ u
        kr = x[m._sig_idx] / I
        ke = kr[nll.run_of] * nll.ej
        tot = ke * P + b
        wv = ke / np.maximum(tot, 1e-300)
        ww = wv if nll.w is None else wv * nll.w  # ∂(Σ w ln tot)/∂|A|² per event
        uP = ww * wv * P
        ga = np.zeros(nf)
        ha = np.zeros((nf, nf))
        for r, sl in enumerate(nll.run_slices):
            J = (bN[r] + 2.0 * GNu[r]) / I[r]
            Jab = 2.0 * GN[r] / I[r]
            pr, wr = p[:, sl], ww[sl]
            Sp = pr @ wr
            SP = float(wr @ P[sl])
            upp = (pr * (wr * wv[sl])) @ pr.T
            upP = pr @ uP[sl]
            uPP = float(uP[sl] @ P[sl])
            q = 2.0 * (gam3[:, :, sl] @ wr)  # Σ w ∂_ab |A|²
            ga -= Sp - SP * J
            JJ = np.outer(J, J)
            JS = np.outer(J, Sp)
            uJ = np.outer(J, upP)
            # Σ u M_a M_b (M = ∂|A|² − |A|² J) − Σ w ∂_ab s (I/(N ε|J|))
            ha += (upp - uJ - uJ.T + uPP * JJ
                   - q + JS + JS.T + SP * Jab - 2.0 * SP * JJ)
        n = x.size
        g = np.zeros(n)
        h = np.zeros((n, n))
        if self._con_idx.size:
            pos = np.searchsorted(self.idx, self._con_idx)
            ga[pos] += (x[self._con_idx] - self._con_mu) / self._con_sig**2
            ha[pos, pos] += 1.0 / self._con_sig**2
        g[self.idx] = ga
        h[np.ix_(self.idx, self.idx)] = ha
        val = nll._value(x, I, tot)
        self._key, self._out = key, (val, g, h)
        return self._out

    def __call__(self, x: np.ndarray) -> float:
        return self._eval(x)[0]

    def grad(self, x: np.ndarray) -> np.ndarray:
        """Gradient on the full vector (zero outside the floating coefficients)."""
        return self._eval(x)[1].copy()

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """Hessian on the full vector (zero outside the floating coefficients' block)."""
        return self._eval(x)[2].copy()
