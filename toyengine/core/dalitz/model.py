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

import functools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import ModelError
from ..params import ParameterSet
from ..streams import DataStreams, as_streams
from .dalitz_plot import DalitzKinematics, Vetoes
from .data import Component, DalitzData, RunSample, RunSpec
from .integration import MassQuadrature, PairSpline, RowGrid
from .nll import DalitzNLL
from .normalisation import _NormGrid
from .resonances import legendre
from .space import space_mismatch
from .state import _State

__all__ = [
    "Component",
    "DalitzData",
    "DalitzModel",
    "DalitzNLL",
    "RunSample",
    "RunSpec",
]


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
        self._ff_norm: _NormGrid | None = None

    @functools.cached_property
    def _norm(self) -> _NormGrid:
        """The components' normalisation grid (Eq. 5), built on first use (≈ 85 % of a
        model's construction): a study's plan builds every variant's models for their
        parameter names only, and a worker builds the grid when it first fits or samples."""
        return _NormGrid(self.kin, self.grid, self.components,
                         [r.efficiency.spline() for r in self.runs], self._splines,
                         self._static, self._coarse_grid(self.vetoes), self._norm1d.get("kpi"))

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

    def data_space_mismatch(self, other: object) -> str | None:
        """How ``other`` describes another data space than this model (masses, vetoes,
        runs, efficiency or background maps; :func:`~toyengine.core.dalitz.space.space_mismatch`),
        or None when the two share it."""
        if not isinstance(other, DalitzModel):
            return f"a {type(other).__name__}, not a Dalitz model"
        return space_mismatch(self, other)

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
    def _sdp_terms(self, r: int, m2_kpi: np.ndarray,
                   m2_etacpi: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
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

