"""The unitarised Breit–Wigner model of the T_cc⁺ (LHCb, Nature Communications 13 (2022)
3351, Methods, Eqs. 47–64): ϱ_f, Σ, A_U and F^U (:class:`UnitarisedModel`), and the fast 1-D
shape of the mixture model (:class:`UnitarisedShape`)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import fields
from functools import lru_cache
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.interpolate import CubicSpline

from ...errors import ModelError
from .channels import (
    CHANNEL_NAMES,
    CODE_MATCHING_MEV,
    PAPER_MATCHING_GEV,
    TccConstants,
    channel_weights,
    rho_dalitz,
    tcc_channels,
    two_body_rho,
)
from .dispersion import _channel_tables, _graded_grid, dispersion_integral

# ---------------------------------------------------------------------------------------
# The model: ϱ_f, Σ, A_U, F^U
# ---------------------------------------------------------------------------------------


def _matching_energy(matching: str | float, c: TccConstants) -> float:
    """E* = √s* − m_th in MeV for ``"paper"`` (3.9 GeV), ``"code"`` (+4 MeV) or a number
    (MeV above the D*+ D0 threshold)."""
    if isinstance(matching, str):
        if matching == "paper":
            return 1e3 * (PAPER_MATCHING_GEV - c.threshold)
        if matching == "code":
            return CODE_MATCHING_MEV
        msg = f"matching must be 'paper', 'code' or a number in MeV, got {matching!r}"
        raise ModelError(msg)
    val = float(matching)
    if not (math.isfinite(val) and val > 0.5):
        msg = f"matching: {matching!r} MeV must be a finite number > 0.5 (above threshold)"
        raise ModelError(msg)
    return val


class _FastSpline:
    """Scalar evaluation of a scipy CubicSpline without the per-call overhead."""

    def __init__(self, spline: CubicSpline):
        self.x = [float(v) for v in spline.x]
        self.c = [[float(v) for v in row] for row in spline.c.T]

    def __call__(self, v: float) -> float:
        i = min(max(bisect_right(self.x, v) - 1, 0), len(self.c) - 1)
        d = v - self.x[i]
        c0, c1, c2, c3 = self.c[i]
        return ((c0 * d + c1) * d + c2) * d + c3


class UnitarisedModel:
    """ϱ_f(s), Σ(s), A_U(s) and F^U(s) of Nat. Commun. 13 (2022) 3351 for fixed constants
    and matching.

    Parameters
    ----------
    constants : TccConstants, optional
        Masses, widths and couplings (defaults: :class:`TccConstants`).
    matching : {"paper", "code"} or float
        √s* of Eqs. 50–52: 3.9 GeV (paper), m_th + 4 MeV (public code) or a value in MeV
        above the D*+ D0 threshold.

    Notes
    -----
    Energies ``e`` are E = √s − (m_D*+ + m_D0) in MeV; ``delta_m_u`` is m_U − m_th in MeV;
    ``g`` is |g| in GeV with ``None`` (or inf) for the |g| → ∞ limit. The profile is returned
    as |g|⁴ F^U = ϱ_f / |(m_U² − s)/|g|² − Σ(s)|², which tends to ϱ_f/|Σ|² for |g| → ∞.
    """

    #: ξ is tabulated on [E_MIN_XI, E_MAX_XI] MeV; profiles are available up to E_MAX_XI.
    E_MIN_XI: Final = -40.0
    E_MAX_XI: Final = 80.0
    #: upper end of the piecewise-linear part of the dispersion integral (MeV)
    E_MAX_DISP: Final = 500.0

    def __init__(self, constants: TccConstants | None = None, matching: str | float = "paper"):
        self.constants = TccConstants() if constants is None else constants
        c = self.constants
        self.threshold = c.threshold  # GeV
        self.e_star = _matching_energy(matching, c)
        if self.e_star > self.E_MAX_DISP - 10.0:
            msg = f"matching point {self.e_star} MeV is too far above threshold"
            raise ModelError(msg)
        self.channels = tcc_channels(c)
        tables = _channel_tables(c.kinematic_key(), self.e_star)
        self._rho_nodes: list[tuple[NDArray, NDArray]] = []
        self._splines: list[CubicSpline] = []
        cf = []
        for ch, tab in zip(self.channels, tables, strict=True):
            r = np.tensordot(np.asarray(channel_weights(ch, c)), tab.terms, axes=1)
            self._rho_nodes.append((tab.e, r))
            self._splines.append(CubicSpline(tab.e, r))
            cf.append(float(r[-1] / two_body_rho(self.s(self.e_star), *ch.two_body)))
        #: continuity constants c_f of Eqs. 50–52 (w.r.t. λ^{1/2}(s, M², m²)/s)
        self.c = np.array(cf)
        self.e_thresholds = np.array([tab.e[0] for tab in tables])
        self._build_dispersion()

    # --- kinematics ----------------------------------------------------------------------
    def s(self, e: ArrayLike) -> Any:
        """s in GeV² at E = √s − m_th (MeV); complex E allowed."""
        return (self.threshold + 1e-3 * np.asarray(e)) ** 2

    def e_of_s(self, s: ArrayLike) -> Any:
        return 1e3 * (np.sqrt(np.asarray(s)) - self.threshold)

    @property
    def rho_inf(self) -> float:
        """ϱ_tot(s → ∞) = Σ c_f (used in |g|² = 2 m_th Γ0 / ϱ_∞, as in the public code's
        ``scripts/S-002-effectiverange.jl``)."""
        return float(self.c.sum())

    # --- phase-space functions -----------------------------------------------------------
    def rho(self, e: ArrayLike, channel: int | str | None = None) -> NDArray:
        """ϱ_f(E) (Eqs. 49–52) for one channel (index or name) or ϱ_tot (``None``)."""
        e = np.asarray(e, dtype=float)
        if channel is None:
            return sum(self.rho(e, i) for i in range(3))  # type: ignore[return-value]
        i = CHANNEL_NAMES.index(channel) if isinstance(channel, str) else int(channel)
        e_nodes = self._rho_nodes[i][0]
        below = np.clip(e, e_nodes[0], self.e_star)
        inside = np.maximum(self._splines[i](below), 0.0)
        above = self.c[i] * two_body_rho(self.s(np.maximum(e, self.e_star)),
                                         *self.channels[i].two_body)
        out = np.where(e <= self.e_star, inside, above)
        return np.where(e <= e_nodes[0], 0.0, out)

    def rho_complex(self, e: complex | ArrayLike) -> NDArray:
        """ϱ_tot at complex E by the continued Dalitz integral (Eq. 65), without matching."""
        s = np.atleast_1d(self.s(np.asarray(e, dtype=complex)))
        return sum(rho_dalitz(ch, s, self.constants) for ch in self.channels)  # type: ignore[return-value]

    # --- dispersion integral ---------------------------------------------------------------
    def _build_dispersion(self) -> None:
        c = self.constants
        feats2 = ((0.0, 0.5e3 * c.gamma_dstar_plus),
                  (1e3 * (c.m_dstar0 + c.m_d_plus - self.threshold), 0.5e3 * c.gamma_dstar0))
        self._src: list[tuple[NDArray, NDArray]] = []
        tail = _graded_grid(self.e_star, self.E_MAX_DISP, feats2, alpha=0.02, h_max=5.0,
                            far=1e9)
        for i in range(3):
            e_nodes = self._rho_nodes[i][0]
            fine = np.concatenate([np.linspace(e_nodes[j], e_nodes[j + 1], 9)[:-1]
                                   for j in range(e_nodes.size - 1)])
            e_src = np.concatenate([fine, tail])
            self._src.append((self.s(e_src), self.rho(e_src, i)))
        feats = (*feats2, (self.e_star, 0.05))
        self._xi_e = _graded_grid(self.E_MIN_XI, self.E_MAX_XI, feats, alpha=0.07, h_max=0.3)
        self._xi_spline = CubicSpline(self._xi_e, self.xi_exact(self._xi_e))
        self._xi_fast = _FastSpline(self._xi_spline)

    def _tail_rho(self, i: int) -> Any:
        ch = self.channels[i]
        ci = self.c[i]
        return lambda s: ci * two_body_rho(s, *ch.two_body)

    def sigma_unsubtracted(self, s: ArrayLike) -> NDArray:
        """(s/2π) ∫ ϱ_tot(s')/(s'(s' − s)) ds' (Eqs. 57, 58, 63): ξ(s) + iϱ_tot/2 for real s
        (limit from above), the first-sheet analytic function for complex s. Each channel
        integral starts at its own threshold (Eq. 58); beyond E = 500 MeV the matched form
        c_f Φ is integrated analytically-smoothly (:func:`dispersion_integral`)."""
        s = np.asarray(s)
        return sum(dispersion_integral(sn, gn, s, tail=self._tail_rho(i))  # type: ignore[return-value]
                   for i, (sn, gn) in enumerate(self._src))

    def xi_exact(self, e: ArrayLike) -> NDArray:
        """ξ(s(E)) (Eq. 57) from the dispersion integral (no table)."""
        return np.real(self.sigma_unsubtracted(self.s(np.asarray(e, dtype=float))))

    def xi(self, e: ArrayLike) -> NDArray:
        """ξ(s(E)) from the cubic-spline table on [E_MIN_XI, E_MAX_XI] MeV."""
        e = np.asarray(e, dtype=float)
        if np.any(e > self.E_MAX_XI) or np.any(e < self.E_MIN_XI):
            msg = (f"xi: E outside the tabulated range [{self.E_MIN_XI}, {self.E_MAX_XI}] MeV "
                   f"(got {e.min():.3f} .. {e.max():.3f})")
            raise ModelError(msg)
        return self._xi_spline(e)

    def xi_at(self, e: float) -> float:
        """ξ at one energy (fast scalar path of :meth:`xi`)."""
        if not self.E_MIN_XI <= e <= self.E_MAX_XI:
            msg = f"delta_m_u = {e} MeV outside [{self.E_MIN_XI}, {self.E_MAX_XI}] MeV"
            raise ModelError(msg)
        return self._xi_fast(e)

    # --- self-energy and amplitude ------------------------------------------------------------
    def sigma(self, e: ArrayLike, delta_m_u: float, sheet: int = 1) -> NDArray:
        """Σ(s) = [unsubtracted] − ξ(m_U²) at (complex) E (Eqs. 56, 63); on ``sheet=2`` and
        Im E < 0 the continuation Σ + iϱ_tot (continuous across the cut, see module doc).

        This is the exact (untabulated) path used for poles and low-energy parameters: both
        terms come from the same dispersion integral, so Re Σ(m_U²) = 0 to rounding. The
        fit path (:meth:`profile`, :class:`UnitarisedShape`) uses the ξ spline for both
        terms (they agree to ~1e-10, i.e. ~1e-6 keV in energy)."""
        e = np.asarray(e)
        xi_u = float(self.xi_exact(np.array([float(delta_m_u)]))[0])
        val = self.sigma_unsubtracted(self.s(e)) - xi_u
        if sheet == 2:
            lower = np.imag(e) < 0
            if np.any(lower):
                val = np.asarray(val, dtype=complex)
                val[lower] = val[lower] + 1j * self.rho_complex(e[lower])
        elif sheet != 1:
            msg = f"sheet must be 1 or 2, got {sheet}"
            raise ModelError(msg)
        return val

    def inverse_amplitude(self, e: ArrayLike, delta_m_u: float, g: float | None = None,
                          sheet: int = 1) -> NDArray:
        """|g|⁻² / A_U = (m_U² − s)/|g|² − Σ(s) (Eqs. 48, 53, 64); −Σ for |g| → ∞."""
        e = np.asarray(e)
        val = -self.sigma(e, delta_m_u, sheet)
        if not _is_infinite(g):
            val = val + (self.s(delta_m_u) - self.s(e)) / float(g) ** 2  # type: ignore[arg-type]
        return val

    def profile(self, e: ArrayLike, delta_m_u: float, g: float | None = None,
                channel: int | str = 0) -> NDArray:
        """|g|⁴ F^U_f(E) = ϱ_f / |(m_U² − s)/|g|² − Σ|² (Eq. 47) on real E (MeV)."""
        e = np.asarray(e, dtype=float)
        if np.any(e > self.E_MAX_XI):
            msg = f"profile: E above {self.E_MAX_XI} MeV is not tabulated"
            raise ModelError(msg)
        rho_f = self.rho(e, channel)
        ee = np.clip(e, self.E_MIN_XI, self.E_MAX_XI)
        re = self.xi(ee) - self.xi_at(delta_m_u)
        if not _is_infinite(g):
            re = re - (self.s(delta_m_u) - self.s(ee)) / float(g) ** 2  # type: ignore[arg-type]
        im = 0.5 * self.rho(ee)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = rho_f / (re * re + im * im)
        return np.where(rho_f > 0, out, 0.0)


def _is_infinite(g: float | str | None) -> bool:
    if g is None:
        return True
    if isinstance(g, str):
        if g.lower() in ("inf", "infinity", "infinite"):
            return True
        msg = f"|g| must be a number, None or 'inf', got {g!r}"
        raise ModelError(msg)
    return math.isinf(float(g))


@lru_cache(maxsize=16)
def _cached_model(key: tuple[float, ...], matching: str | float) -> UnitarisedModel:
    return UnitarisedModel(TccConstants(*key), matching)


def unitarised_model(constants: TccConstants | None = None,
                     matching: str | float = "paper") -> UnitarisedModel:
    """A (process-wide cached) :class:`UnitarisedModel`."""
    c = TccConstants() if constants is None else constants
    key = tuple(getattr(c, f.name) for f in fields(c))
    return _cached_model(key, matching)


# ---------------------------------------------------------------------------------------
# The 1-D shape used by the mixture model
# ---------------------------------------------------------------------------------------

_DEFAULT_OFFSET_MEV: Final = 1e3 * TccConstants().threshold


class UnitarisedShape:
    """F^U of the D0D0π+ channel as a 1-D shape for :class:`toyengine.core.model1d.Model1D`.

    Parameters (all keyword, plain values so that a study file can give them)
    ----------
    g : float, "inf" or None
        ``None``/``"inf"`` (default): the |g| → ∞ limit of the default fit, one parameter
        ``mass_param``. A number: finite |g| (GeV) becomes the second parameter ``g_param``;
        the number is only its suggested start value (the model builder reads it).
    matching : "paper", "code" or float
        Matching point of Eqs. 50–52 (see :class:`UnitarisedModel`).
    f2, h2, mu0, mu_plus : float, optional
        Coupling constants (defaults: :class:`TccConstants`), for the coupling-constant
        systematic.
    constants : mapping, optional
        Other :class:`TccConstants` fields (GeV), e.g. ``{"m_dstar_plus": 2.010258}``.
    channel : str
        Final state of the profile, default ``"D0D0pi+"``.
    offset : float
        Observable offset in MeV: the shape is evaluated at E = x + offset − m_th. Default
        m(D*+) + m(D0) of the default constants (3875.0858 MeV), the model's δm offset.
    mass_param, g_param : str
        Parameter names (δm_U in MeV, |g| in GeV).

    Notes
    -----
    ``evaluate(x, values)`` returns |g|⁴ F^U (unnormalised, ≥ 0); with |g| finite it tends to
    the |g| → ∞ shape. The tables are built once per process for each set of constants
    (about 1–2 s; coupling changes reuse the Dalitz tables).
    """

    def __init__(self, *, g: float | str | None = None, matching: str | float = "paper",
                 f2: float | None = None, h2: float | None = None, mu0: float | None = None,
                 mu_plus: float | None = None, constants: Mapping[str, float] | None = None,
                 channel: str = "D0D0pi+", offset: float = _DEFAULT_OFFSET_MEV,
                 mass_param: str = "delta_m_u", g_param: str = "g"):
        changes = dict(constants or {})
        for name, val in (("f2", f2), ("h2", h2), ("mu0", mu0), ("mu_plus", mu_plus)):
            if val is not None:
                changes[name] = float(val)
        self.constants = TccConstants().updated(changes)
        self.matching = matching
        _matching_energy(matching, self.constants)  # validate early
        if channel not in CHANNEL_NAMES:
            msg = f"UnitarisedShape: channel must be one of {CHANNEL_NAMES}, got {channel!r}"
            raise ModelError(msg)
        self.channel = channel
        self.infinite_g = _is_infinite(g)
        if not self.infinite_g and not float(g) > 0:  # type: ignore[arg-type]
            msg = f"UnitarisedShape: g = {g!r} must be > 0 (GeV) or 'inf'"
            raise ModelError(msg)
        self.g_start = None if self.infinite_g else float(g)  # type: ignore[arg-type]
        self.offset = float(offset)
        self.mass_param = mass_param
        self.g_param = g_param
        self.param_names: tuple[str, ...] = ((mass_param,) if self.infinite_g
                                             else (mass_param, g_param))
        self._cache: dict[tuple, tuple[NDArray, ...]] = {}
        self._model: UnitarisedModel | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None) -> UnitarisedShape:
        """Build from a plain mapping (unknown keys raise :class:`ModelError`)."""
        opts = dict(options or {})
        known = {"g", "matching", "f2", "h2", "mu0", "mu_plus", "constants", "channel",
                 "offset", "mass_param", "g_param"}
        unknown = sorted(set(opts) - known)
        if unknown:
            msg = f"UnitarisedShape: unknown option(s) {unknown}; known: {sorted(known)}"
            raise ModelError(msg)
        return cls(**opts)

    builder = from_options

    @property
    def model(self) -> UnitarisedModel:
        if self._model is None:
            self._model = unitarised_model(self.constants, self.matching)
        return self._model

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}
        state["_model"] = None  # rebuilt (and shared) in the receiving process
        return state

    def _prepare(self, x: NDArray) -> tuple[NDArray, ...]:
        key = (x.shape, x.tobytes())
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        m = self.model
        e = x + (self.offset - 1e3 * m.threshold)
        if np.any(e > m.E_MAX_XI):
            msg = (f"UnitarisedShape: x up to {x.max():.3f} MeV exceeds the tabulated range "
                   f"(E <= {m.E_MAX_XI} MeV above threshold)")
            raise ModelError(msg)
        ee = np.clip(e, m.E_MIN_XI, m.E_MAX_XI)
        rho_f = m.rho(e, self.channel)
        live = rho_f > 0
        entry = (m.s(ee)[live], rho_f[live], m.xi(ee)[live], 0.5 * m.rho(ee)[live], live)
        if len(self._cache) > 8:
            self._cache.clear()
        self._cache[key] = entry
        return entry

    def evaluate(self, x: np.ndarray, values: tuple[float, ...]) -> np.ndarray:
        """|g|⁴ F^U at the observable values ``x`` (MeV) for ``values`` = (δm_U[, |g|])."""
        x = np.asarray(x, dtype=float)
        s, rho_f, xi, half_rho, live = self._prepare(x)
        m = self.model
        dmu = float(values[0])
        re = xi - m.xi_at(dmu)
        if not self.infinite_g:
            g = abs(float(values[1]))
            if g == 0.0:
                return np.zeros_like(x)
            if math.isfinite(g):
                mu2 = (m.threshold + 1e-3 * dmu) ** 2
                re = re - (mu2 - s) / (g * g)
        out = np.zeros_like(x)
        out[live] = rho_f / (re * re + half_rho * half_rho)
        return out


