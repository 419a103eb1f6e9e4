"""Kinematics of B0 → ηc K+ π−: DP boundary, helicity angles, square Dalitz plot, vetoes.

Independent references: explicit four-vectors boosted with numpy (helicity angles), the PDG
"Kinematics" boundary formula, scipy.integrate.quad (DP area), finite differences (Jacobian)
and the mass ranges computed by hand from the PDG 2018 masses.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import quad

from toyengine.core.dalitz.dalitz_plot import DalitzKinematics, Vetoes
from toyengine.core.dalitz.integration import RowGrid

KIN = DalitzKinematics()
MB, MK, MPI, META = KIN.m_parent, KIN.m_k, KIN.m_pi, KIN.m_etac


def _random_dp(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lo, hi = KIN.mass_range("kpi")
    ylo, yhi = KIN.mass_range("etacpi")
    x = rng.uniform(lo**2, hi**2, 4 * n)
    y = rng.uniform(ylo**2, yhi**2, 4 * n)
    ok = KIN.inside(x, y)
    return x[ok][:n], y[ok][:n]


def _four_vectors(x: np.ndarray, y: np.ndarray):
    """K, π, ηc four-momenta in the K+π− rest frame, then boosted to the B rest frame.

    In the K+π− frame the ηc moves along −z and the K+ direction is fixed by
    m²(ηc π−); the other pairs' angles are then obtained by genuine boosts.
    """
    m12 = np.sqrt(x)
    # K+π− rest frame: ηc moves along -z' (opposite to the K+π− direction in the B frame)
    e_k = (x + MK**2 - MPI**2) / (2 * m12)
    e_pi = (x - MK**2 + MPI**2) / (2 * m12)
    e_eta = (MB**2 - x - META**2) / (2 * m12)
    pk = np.sqrt(e_k**2 - MK**2)
    peta = np.sqrt(e_eta**2 - META**2)
    # y = (p_eta + p_pi)^2 fixes the angle between pi and eta: solve for cos(K, eta)
    cos_k_eta = (y - META**2 - MPI**2 - 2 * e_eta * e_pi) / (2 * peta * pk)
    sin_k_eta = np.sqrt(np.clip(1 - cos_k_eta**2, 0, None))
    zero = np.zeros_like(x)
    eta = np.stack([e_eta, zero, zero, -peta], axis=-1)
    # K at angle θ to the ηc direction (-z): direction = (sinθ, 0, -cosθ)
    k = np.stack([e_k, pk * sin_k_eta, zero, -pk * cos_k_eta], axis=-1)
    pi = np.stack([e_pi, -k[:, 1], -k[:, 2], -k[:, 3]], axis=-1)
    b = k + pi + eta  # the B in this frame; go to its rest frame
    return _boost_to_rest(k, b), _boost_to_rest(pi, b), _boost_to_rest(eta, b)


def _boost_to_rest(p: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """Boost four-vectors ``p`` into the rest frame of ``frame`` (both (n, 4))."""
    beta = frame[:, 1:] / frame[:, :1]
    b2 = np.sum(beta**2, axis=1)
    gamma = 1.0 / np.sqrt(1.0 - b2)
    bp = np.sum(beta * p[:, 1:], axis=1)
    coef = np.where(b2 > 0, (gamma - 1.0) * bp / np.where(b2 > 0, b2, 1.0), 0.0)
    e = gamma * (p[:, 0] - bp)
    vec = p[:, 1:] + (coef - gamma * p[:, 0])[:, None] * beta
    return np.column_stack([e, vec])


def _minv2(*ps: np.ndarray) -> np.ndarray:
    t = sum(ps)
    return t[:, 0] ** 2 - np.sum(t[:, 1:] ** 2, axis=1)


def _angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a[:, 1:] * b[:, 1:], axis=1) / (np.linalg.norm(a[:, 1:], axis=1)
                                                   * np.linalg.norm(b[:, 1:], axis=1))


def test_mass_ranges_match_pdg2018_values() -> None:
    # m_K + m_π, m_B − m_ηc etc. with PDG 2018 masses, MeV, quoted to 0.01 MeV
    for pair, (lo, hi) in {"kpi": (633.25, 2295.73), "etacpi": (3123.47, 4785.95),
                           "etack": (3477.58, 5140.06)}.items():
        mlo, mhi = KIN.mass_range(pair)
        assert mlo * 1e3 == pytest.approx(lo, abs=0.006)
        assert mhi * 1e3 == pytest.approx(hi, abs=0.006)


def test_four_vector_construction_is_consistent() -> None:
    x, y = _random_dp(200)
    k, pi, eta = _four_vectors(x, y)
    np.testing.assert_allclose(_minv2(k, pi), x, rtol=1e-10)
    np.testing.assert_allclose(_minv2(eta, pi), y, rtol=1e-10)
    np.testing.assert_allclose(_minv2(k, pi, eta), MB**2, rtol=1e-10)


@pytest.mark.parametrize("pair, first, bachelor", [("kpi", "k", "eta"),
                                                   ("etacpi", "pi", "k"),
                                                   ("etack", "eta", "pi")])
def test_helicity_cosine_against_boosted_four_vectors(pair: str, first: str,
                                                      bachelor: str) -> None:
    x, y = _random_dp(300, seed=2)
    vec = dict(zip(("k", "pi", "eta"), _four_vectors(x, y), strict=True))
    daughters = {"kpi": ("k", "pi"), "etacpi": ("pi", "eta"), "etack": ("eta", "k")}[pair]
    frame = vec[daughters[0]] + vec[daughters[1]]
    a = _boost_to_rest(vec[first], frame)
    b = _boost_to_rest(vec[bachelor], frame)
    pv = KIN.pair_variables(pair, x, y)
    np.testing.assert_allclose(pv.cos, _angle(a, b), atol=1e-9)
    np.testing.assert_allclose(pv.q, np.linalg.norm(a[:, 1:], axis=1), rtol=1e-9)
    np.testing.assert_allclose(pv.p, np.linalg.norm(b[:, 1:], axis=1), rtol=1e-9)
    np.testing.assert_allclose(pv.m, np.sqrt(_minv2(vec[daughters[0]], vec[daughters[1]])),
                               rtol=1e-12)


def test_boundary_points() -> None:
    lo, hi = KIN.mass_range("kpi")
    # PDG kinematics review: (m23²)_max,min = (E2* + E3*)² − (p2* ∓ p3*)² in the 12 frame
    for m in np.linspace(lo + 1e-6, hi - 1e-6, 7):
        e2 = (m * m - MK**2 + MPI**2) / (2 * m)
        e3 = (MB**2 - m * m - META**2) / (2 * m)
        p2, p3 = np.sqrt(e2**2 - MPI**2), np.sqrt(e3**2 - META**2)
        ymin, ymax = (e2 + e3) ** 2 - (p2 + p3) ** 2, (e2 + e3) ** 2 - (p2 - p3) ** 2
        ylo, yhi = KIN.y_limits(m * m)
        assert ylo == pytest.approx(ymin, rel=1e-12)
        assert yhi == pytest.approx(ymax, rel=1e-12)
        assert KIN.inside(m * m, 0.5 * (ylo + yhi))
        assert not KIN.inside(m * m, ylo - 1e-6)
        assert not KIN.inside(m * m, yhi + 1e-6)
    # at the K+π− threshold the boundary closes to one point
    ylo, yhi = KIN.y_limits(lo * lo)
    assert yhi - ylo == pytest.approx(0.0, abs=1e-9)
    # the extreme values of m(ηc π−) over the boundary are its kinematic limits
    mlo13 = KIN.mass_range("etacpi")[0]
    xs = np.linspace(lo**2, hi**2, 200001)
    assert np.min(KIN.y_limits(xs)[0]) == pytest.approx(mlo13**2, abs=1e-6)
    mhi13 = KIN.mass_range("etacpi")[1]
    assert np.max(KIN.y_limits(xs)[1]) == pytest.approx(mhi13**2, abs=1e-6)


def test_sdp_round_trips() -> None:
    x, y = _random_dp(1000, seed=3)
    mp, th = KIN.sdp_from_dp(x, y)
    assert np.all((mp >= 0) & (mp <= 1) & (th >= 0) & (th <= 1))
    x2, y2 = KIN.dp_from_sdp(mp, th)
    np.testing.assert_allclose(x2, x, rtol=1e-12)
    np.testing.assert_allclose(y2, y, rtol=1e-10, atol=1e-10)
    rng = np.random.default_rng(4)
    mp, th = rng.random(1000) * 0.998 + 0.001, rng.random(1000) * 0.998 + 0.001
    mp2, th2 = KIN.sdp_from_dp(*KIN.dp_from_sdp(mp, th))
    np.testing.assert_allclose(mp2, mp, atol=1e-9)
    np.testing.assert_allclose(th2, th, atol=1e-9)


def test_sdp_jacobian_matches_finite_differences() -> None:
    rng = np.random.default_rng(5)
    mp, th = rng.uniform(0.05, 0.95, 50), rng.uniform(0.05, 0.95, 50)
    h = 1e-6
    xa, ya = KIN.dp_from_sdp(mp + h, th)
    xb, yb = KIN.dp_from_sdp(mp - h, th)
    xc, yc = KIN.dp_from_sdp(mp, th + h)
    xd, yd = KIN.dp_from_sdp(mp, th - h)
    det = ((xa - xb) * (yc - yd) - (xc - xd) * (ya - yb)) / (2 * h) ** 2
    np.testing.assert_allclose(KIN.sdp_jacobian(mp, th), np.abs(det), rtol=1e-6)


def test_sdp_jacobian_integrates_to_dp_area() -> None:
    lo, hi = KIN.mass_range("kpi")
    area = quad(lambda x: np.subtract(*KIN.y_limits(x)[::-1]), lo**2, hi**2,
                epsabs=0, epsrel=1e-12, limit=200)[0]
    # ∫∫ |J| dm' dθ' over the unit square with an independent tensor Gauss–Legendre rule
    u, w = np.polynomial.legendre.leggauss(120)
    u, w = 0.5 * (u + 1), 0.5 * w
    J = KIN.sdp_jacobian(u[:, None], u[None, :])
    assert np.sum(w[:, None] * w[None, :] * J) == pytest.approx(area, rel=1e-10)
    assert KIN.area == pytest.approx(area, rel=1e-10)
    grid = RowGrid.build(KIN, Vetoes(d0=None, border=0.0))
    assert grid.w.sum() == pytest.approx(area, rel=1e-10)
    assert grid.w_sdp.sum() == pytest.approx(1.0, rel=1e-12)


def test_vetoes() -> None:
    v = Vetoes()
    lo, hi = KIN.mass_range("kpi")
    # D̄0 veto in m(K+π−) and the border band of 70 MeV
    m = np.array([0.9, 1.86, 1.80, lo + 0.05, hi - 0.05, 1.4])
    x = m * m
    y = 0.5 * np.add(*KIN.y_limits(x))
    assert list(v.passes(KIN, x, y)) == [True, False, True, False, False, True]
    assert not Vetoes(d0=None, border=0.0).passes(KIN, x, y + 100).any()
    # area of the allowed region: grid vs Monte Carlo (binomial error ~1e-3 relative)
    rng = np.random.default_rng(6)
    n = 400_000
    ylo, yhi = KIN.mass_range("etacpi")
    xs = rng.uniform(lo**2, hi**2, n)
    ys = rng.uniform(ylo**2, yhi**2, n)
    box = (hi**2 - lo**2) * (yhi**2 - ylo**2)
    frac = v.passes(KIN, xs, ys).mean()
    err = np.sqrt(frac * (1 - frac) / n) * box
    grid = RowGrid.build(KIN, v)
    assert abs(grid.w.sum() - frac * box) < 4 * err
    # every grid node passes the vetoes
    assert v.passes(KIN, grid.x.ravel(), grid.y.ravel()).all()
    with pytest.raises(ValueError, match="empty"):
        Vetoes(d0=(1.9, 1.8))
    with pytest.raises(ValueError, match="border"):
        Vetoes(border=-0.1)


def test_border_veto_kinks_lie_on_boundary() -> None:
    v = Vetoes()
    lim = v.s_limits(KIN)
    for m in v.kink_masses(KIN):
        ylo, yhi = KIN.y_limits(m * m)
        zlo, zhi = KIN.sum_s - m * m - yhi, KIN.sum_s - m * m - ylo
        cuts = [*lim["etacpi"], *lim["etack"]]
        assert min(abs(c - e) for c in cuts for e in (ylo, yhi, zlo, zhi)) < 1e-9
