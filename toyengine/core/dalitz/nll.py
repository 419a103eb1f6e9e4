"""The Dalitz-plot likelihood of LHCb, Eur. Phys. J. C 78 (2018) 1019, Eq. 14, with its exact
gradient, and its restriction to the cartesian couplings alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ...errors import ModelError
from ..likelihood import Likelihood, NormalConstraint
from .data import DalitzData
from .resonances import legendre
from .state import _kernels, _State

if TYPE_CHECKING:
    from .protocol import DalitzModelView

#: an empty array: no backgrounds, no weights (for the compiled loops)
_NONE = np.zeros(0)


class DalitzNLL(Likelihood):
    """Callable ``nll(x_full) -> float`` for one data set, with ``.grad(x_full)``.

    The gradient is analytic in all parameters: coefficients, yields and lineshape
    parameters (:meth:`Lineshape.derivatives` at the cached points, propagated through the
    component normalisation and, linearly, through row ``j`` of the normalisation matrices,
    whose adjoint :meth:`_State.norm_row_weights` turns each parameter's contribution into
    one dot product over the component's points).
    """

    errordef = 0.5
    has_grad = True
    has_expected_hessian = True

    def __init__(self, model: DalitzModelView, data: DalitzData,
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
        self.constraint = NormalConstraint(model._cidx, model._cmu, model._csig)
        # per component with floating lineshape parameters: their positions in
        # Component.params and their indices in the parameter vector
        free = model.parameters.free_mask
        self._ls_free = {j: (np.flatnonzero(free[pi]), pi[free[pi]])
                         for j, pi in enumerate(model._p_idx) if np.any(free[pi])}

    @property
    def n_events(self) -> int:
        return int(self.x.size)

    @property
    def ndata(self) -> float:
        """The number of events outside the vetoes."""
        return float(self.x.size)

    @property
    def weights(self) -> np.ndarray | None:  # type: ignore[override]
        """Per-event weights (None: unweighted)."""
        return self.w

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
        n = self.x.size
        A = np.empty(n, complex)
        a2, sig, tot = np.empty(n), np.empty(n), np.empty(n)
        b = self.bk @ x[self.bk_idx] if self.bk_idx.size else _NONE
        _kernels().event_terms(self.state.F.T, c, self.ej, self.run_of, x[m._sig_idx] / norms,
                               b, A, a2, sig, tot)
        self._terms_key, self._terms_out = key, (c, norms, A, a2, sig, tot)
        return self._terms_out

    def _call(self, x: np.ndarray) -> float:
        x = np.asarray(x, float)
        _, norms, _, _, _, tot = self._terms(x)
        return self._value(x, norms, tot)

    def _value(self, x: np.ndarray, norms: np.ndarray, tot: np.ndarray) -> float:
        """−ln L from the terms of :meth:`_terms`."""
        nl = norms.tolist()
        if not (min(nl) > 0 and math.isfinite(sum(nl))):
            return 1e30
        logs = np.log(np.maximum(tot, 1e-300))
        val = float(np.sum(x[self._yield_idx])
                    - _kernels().weighted_sum(logs, _NONE if self.w is None else self.w))
        val = self.constraint.add_value(val, x, dot=True)
        return val if math.isfinite(val) else 1e30

    def _grad(self, x: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`__call__` on the full parameter vector (zeros for fixed)."""
        x = np.asarray(x, float)
        m = self.model
        g = np.zeros_like(x)
        c, norms, A, a2, sig, tot = self._terms(x)
        # per event: w/tot and A* ∂ln tot/∂|A|²; per run: Σ |A|² ε|J| w/tot, Σ sig w/tot
        kernels = _kernels()
        n = tot.size
        aw, inv, sums = np.empty(n, complex), np.empty(n), np.empty((2, self.n_runs))
        kernels.event_weights(A, a2, sig, tot, self.ej, self.run_of, x[m._sig_idx] / norms,
                              _NONE if self.w is None else self.w, aw, inv, sums)
        # yields: d/dN_sig,r = 1 - sum_{i in r} (|A|^2 eps|J| / I_r)_i / tot_i
        np.add.at(g, m._sig_idx, 1.0 - sums[0] / norms)  # a yield may serve several runs
        if self.bk_idx.size:
            np.add.at(g, self.bk_idx, 1.0 - self.bk.T @ inv)
        # coefficients: d(-sum log tot)/dc  (cartesian first)
        S = self.state.F.T @ aw  # sum_i conj(A_i) F_ij w_i
        d_re = -2.0 * S.real
        d_im = 2.0 * S.imag
        fracs = sums[1] / norms  # Σ sig/tot/I per run
        for r in range(self.n_runs):
            Nc = self.state.N[r] @ c.conj()
            d_re += fracs[r] * 2.0 * Nc.real
            d_im += fracs[r] * (-2.0 * Nc.imag)
        d_a, d_b = m.coefficient_chain(x, d_re, d_im)
        np.add.at(g, m._c_idx[:, 0], d_a)
        np.add.at(g, m._c_idx[:, 1], d_b)
        # constraints
        self.constraint.add_grad(g, x)
        # lineshape parameters, exactly: ∂(−Σ ln tot)/∂θ = −2 Re(c_j Σ_i w_i A_i* ∂F_ij)
        # + Σ_r frac_r ∂I_r with ∂I_r = 2 Re(c_j Σ_k ∂N_rjk c_k*) (N_rjk = ∫ F_j F_k* ε) and
        # ∂F_j = n_j ∂g_j + (∂n_j/n_j) F_j, ∂n_j = −n_j³ Σ w Re(g_j* ∂g_j) (Eq. 5): all of it
        # is Re(Σ ∂g_j W) over the points of component j, with one weight vector W per
        # component (events, normalisation rule, the adjoint of its row of N)
        st = self.state
        cc = c.conj()
        for j, (pos, idx) in self._ls_free.items():
            nj = st.n[j]
            cj = c[j]
            # the ∂n_j terms: ∂n_j/n_j times the F_j parts of both sums
            k_ = 2.0 * (cj * (fracs @ (st.N[:, j] @ cc) - S[j])).real
            W = st.norm_row_weights(j, fracs, cc)
            kernels.gradient_weights(W, 2.0 * cj * nj, st.ev_slice[j].start, st.ev_ang[j],
                                     aw, st.norm_sel[j].start, nj * nj * k_, st.norm_w[j],
                                     st.g[j])
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
        Nc = st.N @ c.conj()  # (R, nc): ∂I_r/∂Re c_j = 2 Re, ∂I_r/∂Im c_j = −2 Im
        kernels = _kernels()
        kernels.coefficient_jacobian(st.F.T, A, scale, rel, Nc, run_of, m._c_idx, m.polar,
                                     x[m._c_idx[:, 0]], x[m._c_idx[:, 1]], J)
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
            dI = np.empty((len(pos), self.n_runs))
            for r in range(self.n_runs):
                W = (2.0 * cj * nj) * st.norm_row_weights(j, eye[r], cc)
                dI[:, r] = ((dg @ W).real
                            + rho_n * 2.0 * (cj * (st.N[r, j] @ cc)).real)
            kernels.lineshape_jacobian(dg, st.ev_slice[j].start, st.ev_ang[j], nj, rho_n,
                                       st.F.T[j], cj, A, scale, rel, dI, run_of, idx, J)
        J[~free] = 0.0
        return J

    def _expected_hessian(self, x: np.ndarray) -> np.ndarray:
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
        if self.constraint.size:
            self.constraint.add_hessian(h)
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


class _CouplingNLL(Likelihood):
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
    has_grad = True
    has_hessian = True

    def __init__(self, nll: DalitzNLL, idx: np.ndarray, comp: np.ndarray,
                 omega: np.ndarray) -> None:
        self.nll = nll
        self.idx = idx
        self.comp = comp
        self.omega = omega
        self.constraint = nll.constraint.subset(np.isin(nll.constraint.idx, idx))
        self._key: bytes | None = None
        self._out: tuple[float, np.ndarray, np.ndarray] | None = None
        self._base_key: bytes | None = None
        self._base: tuple | None = None
        self._block = np.ix_(idx, idx)

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
        a0 = A0.real * A0.real + A0.imag * A0.imag
        beta = 2.0 * (A0.conj() * D).real
        gam = np.ascontiguousarray((D.conj()[:, None, :] * D[None, :, :]).real)  # (nf, nf, n)
        N = nll.state.N
        cc0 = c0.conj()
        I0 = ((N @ cc0) @ c0).real
        bN = 2.0 * (self.omega * (N[:, self.comp] @ cc0)).real  # (R, nf)
        GN = (self.omega[:, None] * self.omega.conj()
              * N[:, self.comp][:, :, self.comp]).real  # (R, nf, nf)
        b = nll.bk @ x[nll.bk_idx] if nll.bk_idx.size else _NONE
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
        GNu = GN @ u
        I = I0 + bN @ u + GNu @ u
        tot = np.empty(a0.size)
        ga, ha = np.empty(nf), np.empty((nf, nf))
        _kernels().coupling_sums(a0, beta, gam, u, x[m._sig_idx] / I, nll.ej, nll.run_of,
                                 b, _NONE if nll.w is None else nll.w, bN, GN, I, tot, ga,
                                 ha)
        n = x.size
        g = np.zeros(n)
        h = np.zeros((n, n))
        if self.constraint.size:
            pos = np.searchsorted(self.idx, self.constraint.idx)
            self.constraint.add_grad(ga, x, at=pos)
            self.constraint.add_hessian(ha, at=pos)
        g[self.idx] = ga
        h[self._block] = ha
        val = nll._value(x, I, tot)
        self._key, self._out = key, (val, g, h)
        return self._out

    @property
    def ndata(self) -> float:
        return self.nll.ndata

    @property
    def weights(self) -> np.ndarray | None:  # type: ignore[override]
        return self.nll.w

    def _call(self, x: np.ndarray) -> float:
        return self._eval(x)[0]

    def _grad(self, x: np.ndarray) -> np.ndarray:
        """Gradient on the full vector (zero outside the floating coefficients)."""
        return self._eval(x)[1].copy()

    def _hessian(self, x: np.ndarray) -> np.ndarray:
        """Hessian on the full vector (zero outside the floating coefficients' block)."""
        return self._eval(x)[2].copy()

