"""The self-energy's dispersion integral (LHCb, Nature Communications 13 (2022) 3351,
Methods, Eqs. 56–58): graded energy grids, the closed-form Cauchy integral of a
piecewise-linear ϱ_tot, and the tabulated channels."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...errors import ModelError
from .channels import _TWO_PI, TccConstants, _leggauss, dalitz_terms, tcc_channels

# ---------------------------------------------------------------------------------------
# Grids and the piecewise-linear Cauchy integral
# ---------------------------------------------------------------------------------------


def _graded_grid(e0: float, e1: float, features: tuple[tuple[float, float], ...],
                 alpha: float, h_max: float, far: float = 5.0) -> NDArray:
    """Nodes on [e0, e1] with spacing alpha × (distance to the nearest feature (position,
    width)), at most h_max × max(1, |E|/far)."""
    out = [e0]
    e = e0
    while e < e1:
        d = min(math.hypot(e - p, w) for p, w in features)
        h = min(alpha * d, h_max * max(1.0, abs(e) / far))
        e = e + h
        out.append(e)
    out[-1] = e1
    if len(out) > 2 and out[-1] - out[-2] < 0.3 * (out[-2] - out[-3]):
        del out[-2]
    return np.array(out)


def _cauchy_pl(s_nodes: NDArray, g_nodes: NDArray, s: NDArray) -> NDArray:
    """H(s) = ∫ g(s')/(s' − s) ds' over [s_0, s_N] for piecewise-linear g (exact).

    Real ``s`` means s + i0 (so Im H = π g(s)); complex ``s`` off the real axis is the
    analytic function. Uses H = Σ_i m_i Δ_i + Σ_j (m_{j−1} − m_j)(s − s_j) log(s_j − s)
    + ℓ_{N−1}(s) log(s_N − s) − ℓ_0(s) log(s_0 − s), ℓ_i the line of segment i.
    """
    s = np.asarray(s)
    real = not np.iscomplexobj(s)
    m = np.diff(g_nodes) / np.diff(s_nodes)
    sc = s.astype(complex)[..., None]
    d = s_nodes - sc
    if real:
        d = d - 1e-300j  # s + i0: log(s_j - s - i0) = log|.| - i pi for s_j < s
    with np.errstate(divide="ignore", invalid="ignore"):
        logd = np.log(d)
        inner = (m[:-1] - m[1:]) * (sc - s_nodes[1:-1]) * logd[..., 1:-1]
        inner = np.where(np.isfinite(inner), inner, 0.0)  # (s - s_j) log(s_j - s) -> 0
        h = np.sum(inner, axis=-1) + np.sum(m * np.diff(s_nodes))
        last = (g_nodes[-2] + m[-1] * (sc[..., 0] - s_nodes[-2])) * logd[..., -1]
        first = (g_nodes[0] + m[0] * (sc[..., 0] - s_nodes[0])) * logd[..., 0]
        first = np.where(np.isfinite(first), first, 0.0)
        last = np.where(np.isfinite(last), last, 0.0)
    return h + last - first


def dispersion_integral(s_nodes: ArrayLike, rho_nodes: ArrayLike, s: ArrayLike,
                        tail: Any = None, n_tail: int = 48) -> NDArray:
    """(s/2π) ∫_{s_0}^∞ ϱ(s') / (s'(s' − s)) ds' (Nat. Commun. 13 (2022) 3351, Eqs. 57, 63);
    complex.

    ϱ is the piecewise-linear function through (``s_nodes``, ``rho_nodes``) on
    [s_0, s_N] (its Cauchy integral is exact in closed form) plus, if given, ``tail(s')``
    beyond s_N, integrated with an ``n_tail``-point Gauss–Legendre rule in t = s_N/s'
    (``tail`` must be smooth in t and bounded as s' → ∞). Real ``s`` means s + i0, so the
    result is ξ(s) + iϱ(s)/2; complex ``s`` gives the analytic function of the first sheet.
    Uses s/(s'(s' − s)) = 1/(s' − s) − 1/s'. Evaluation points must lie below s_N.
    """
    s_nodes = np.asarray(s_nodes, dtype=float)
    rho_nodes = np.asarray(rho_nodes, dtype=float)
    s = np.asarray(s)
    if np.any(np.real(s) >= s_nodes[-1]):
        msg = "dispersion_integral: evaluation points must lie below the last node"
        raise ModelError(msg)
    h0 = _cauchy_pl(s_nodes, rho_nodes, np.zeros(1))[0]
    out = (_cauchy_pl(s_nodes, rho_nodes, s) - h0) / _TWO_PI
    if tail is not None:
        tx, tw = _leggauss(int(n_tail))
        t = 0.5 * (tx + 1.0)
        w = 0.5 * tw * np.asarray(tail(s_nodes[-1] / t), dtype=float)
        sc = s[..., None]
        out = out + np.sum(w * sc / (s_nodes[-1] - sc * t), axis=-1) / _TWO_PI
    return out


@dataclass(frozen=True)
class _ChannelTable:
    """ϱ_f term values (unit couplings) on an E grid from the channel threshold to E*."""

    e: NDArray  # MeV relative to m(D*+) + m(D0)
    terms: NDArray  # (3, n)


@lru_cache(maxsize=8)
def _channel_tables(key: tuple[float, ...], e_star: float) -> tuple[_ChannelTable, ...]:
    c = TccConstants(*key)
    mth = c.threshold
    feats = ((0.0, 0.5e3 * c.gamma_dstar_plus),
             (1e3 * (c.m_dstar0 + c.m_d_plus - mth), 0.5e3 * c.gamma_dstar0))
    out = []
    for ch in tcc_channels(c):
        e_th = 1e3 * (ch.threshold - mth)
        if e_star <= e_th:
            msg = f"matching point E* = {e_star} MeV is below the {ch.name} threshold"
            raise ModelError(msg)
        e = _graded_grid(e_th, e_star, feats, alpha=0.07, h_max=0.15)
        terms = np.zeros((3, e.size))
        terms[:, 1:] = dalitz_terms(ch, (mth + 1e-3 * e[1:]) ** 2)
        out.append(_ChannelTable(e, terms))
    return tuple(out)


