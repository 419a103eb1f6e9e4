"""Tests of toyengine.core.kinematics: Källén function, break-up momentum, phase space, masses."""

from __future__ import annotations

import math

import numpy as np
import pytest
from particle import Particle
from scipy import integrate

from toyengine.core.kinematics import (
    MASSES,
    MASSES_PDG2018,
    MASSES_PDG2020,
    breakup_momentum,
    kallen,
    phase_space_2body,
    phase_space_3body,
    phase_space_3body_threshold_coefficient,
    tcc_thresholds,
)
from toyengine.errors import ModelError

M20 = MASSES_PDG2020
PDGID = {
    "D0": 421,
    "D+": 411,
    "D*+": 413,
    "D*0": 423,
    "pi+": 211,
    "pi0": 111,
    "K+": 321,
    "B0": 511,
    "eta_c": 441,
}


def momentum_from_energy(m: float, m1: float, m2: float) -> float:
    """Independent evaluation: k = sqrt(E1² − m1²), E1 = (m² + m1² − m2²)/(2m)."""
    e1 = (m * m + m1 * m1 - m2 * m2) / (2.0 * m)
    return math.sqrt(e1 * e1 - m1 * m1)


def phase_space_3body_quad(big_m: float, m1: float, m2: float, m3: float) -> float:
    """Independent Φ3: adaptive quad of the Byckling–Kajantie integrand (eq. V.2.17)."""

    def integrand(s: float) -> float:
        lam1 = kallen(s, big_m**2, m1**2)
        lam2 = kallen(s, m2**2, m3**2)
        return math.sqrt(max(float(lam1), 0.0) * max(float(lam2), 0.0)) / s

    val, _ = integrate.quad(
        integrand, (m2 + m3) ** 2, (big_m - m1) ** 2, epsabs=0.0, epsrel=1e-13, limit=200
    )
    return val / (128.0 * math.pi**3 * big_m**2)


# --- Källén and two-body ----------------------------------------------------------------


def test_kallen_closed_form_and_symmetry() -> None:
    x, y, z = 3.0, 1.5, 0.25
    expected = (x - (math.sqrt(y) + math.sqrt(z)) ** 2) * (x - (math.sqrt(y) - math.sqrt(z)) ** 2)
    assert kallen(x, y, z) == pytest.approx(expected, rel=1e-13)
    assert kallen(x, y, z) == pytest.approx(kallen(y, z, x), rel=1e-13)
    assert kallen(x, y, z) == pytest.approx(kallen(z, x, y), rel=1e-13)
    assert kallen([1.0, 4.0], 0.0, 0.0) == pytest.approx([1.0, 16.0])


@pytest.mark.parametrize(
    ("m", "m1", "m2"),
    [(3880.0, 2 * 1864.83, 139.57039), (895.55, 493.677, 139.57061), (5000.0, 0.0, 0.0)],
)
def test_breakup_momentum_vs_energy_formula(m: float, m1: float, m2: float) -> None:
    assert breakup_momentum(m, m1, m2) == pytest.approx(momentum_from_energy(m, m1, m2), rel=1e-12)
    # symmetric in the daughters
    assert breakup_momentum(m, m2, m1) == pytest.approx(breakup_momentum(m, m1, m2), rel=1e-14)


def test_breakup_momentum_threshold_and_vectorised() -> None:
    m1, m2 = 2 * M20["D0"], M20["pi+"]
    thr = m1 + m2
    m = np.array([0.0, -5.0, thr - 10.0, thr, thr + 1e-6, thr + 30.0])
    with np.errstate(all="raise"):  # no invalid sqrt or division warnings
        k = breakup_momentum(m, m1, m2)
    assert k.shape == m.shape
    assert np.all(np.isfinite(k))
    assert np.all(k[:4] == 0.0)
    assert k[4] > 0.0 and k[5] > k[4]
    # q ∝ sqrt(2 μ Q) just above threshold (non-relativistic limit)
    mu = m1 * m2 / thr
    q_small = thr + 1e-6
    assert breakup_momentum(q_small, m1, m2) == pytest.approx(math.sqrt(2 * mu * 1e-6), rel=1e-5)


def test_tcc_reference_momenta() -> None:
    # computed by hand from PDG 2020 masses: q0 = 39.114 MeV (A = 2 D0, B = pi+), 103.892 MeV (alt.)
    m0 = tcc_thresholds()["D*+D0"] - 0.273
    assert breakup_momentum(m0, 2 * M20["D0"], M20["pi+"]) == pytest.approx(39.114, abs=1e-3)
    assert breakup_momentum(m0, M20["D0"], M20["D0"] + M20["pi+"]) == pytest.approx(
        103.892, abs=1e-3
    )
    # K*(892) q0 = 290.82 MeV with PDG-2018 masses (computed by hand)
    m18 = MASSES_PDG2018
    assert breakup_momentum(895.55, m18["K+"], m18["pi+"]) == pytest.approx(290.82, abs=1e-2)


def test_phase_space_2body() -> None:
    m1, m2 = M20["D*+"], M20["D0"]
    m = np.linspace(3870.0, 3900.0, 301)
    phi = phase_space_2body(m, m1, m2)
    lam = np.clip(kallen(m**2, m1**2, m2**2), 0.0, None)
    expected = np.sqrt(lam) / (8.0 * math.pi * m**2)
    np.testing.assert_allclose(phi, expected, rtol=1e-9, atol=1e-300)
    assert np.all(phi[m <= m1 + m2] == 0.0)
    assert phase_space_2body(2000.0, 0.0, 0.0) == pytest.approx(1.0 / (8.0 * math.pi))


# --- three-body phase space -------------------------------------------------------------

CONFIGS = [
    (3880.0, M20["pi+"], M20["D0"], M20["D0"]),  # Tcc D0 D0 pi+
    (3880.0, M20["D0"], M20["D0"], M20["pi+"]),  # same, other pair
    (3900.0, M20["pi0"], M20["D0"], M20["D+"]),  # D0 D+ pi0
    (3900.0, M20["D0"], M20["D+"], 0.0),  # D0 D+ gamma
    (3869.5, M20["D0"], M20["D0"], M20["pi+"]),  # 0.27 MeV above threshold
    (5279.65, MASSES_PDG2018["eta_c"], 493.677, 139.57061),  # B0 -> eta_c K pi
    (1000.0, 10.0, 20.0, 30.0),
    (1000.0, 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_phase_space_3body_vs_quad(config: tuple[float, float, float, float]) -> None:
    big_m, m1, m2, m3 = config
    ref = phase_space_3body_quad(big_m, m1, m2, m3)
    assert phase_space_3body(big_m, m1, m2, m3) == pytest.approx(ref, rel=1e-7)


def test_phase_space_3body_massless_closed_form() -> None:
    # massless daughters: integrand = M² − s, ∫₀^{M²} = M⁴/2, so Φ3 = M²/(256 π³)
    big_m = np.array([1.0, 10.0, 3875.0])
    np.testing.assert_allclose(
        phase_space_3body(big_m, 0.0, 0.0, 0.0), big_m**2 / (256.0 * math.pi**3), rtol=1e-12
    )


def test_phase_space_3body_threshold_q2_scaling() -> None:
    m1, m2, m3 = M20["D0"], M20["D0"], M20["pi+"]
    coeff = phase_space_3body_threshold_coefficient(m1, m2, m3)
    q_values = np.array([1e-3, 1e-2, 1e-1, 1.0])
    ratio = phase_space_3body(m1 + m2 + m3 + q_values, m1, m2, m3) / (coeff * q_values**2)
    # leading correction is O(Q / m_pi): |ratio − 1| < Q / m_pi (≈ 7e-3 at Q = 1 MeV)
    assert np.all(np.abs(ratio - 1.0) < 2.0 * q_values / m3)
    assert abs(ratio[0] - 1.0) < 1e-4
    # pure power law: doubling Q quadruples Φ3 near threshold
    q = 1e-3
    r = phase_space_3body(m1 + m2 + m3 + 2 * q, m1, m2, m3) / phase_space_3body(
        m1 + m2 + m3 + q, m1, m2, m3
    )
    assert r == pytest.approx(4.0, rel=1e-5)


def test_phase_space_3body_below_threshold_and_symmetry() -> None:
    m1, m2, m3 = M20["D0"], M20["D+"], M20["pi0"]
    thr = m1 + m2 + m3
    m = np.array([[thr - 5.0, thr], [thr + 2.0, thr + 20.0]])
    with np.errstate(all="raise"):
        phi = phase_space_3body(m, m1, m2, m3)
    assert phi.shape == m.shape
    assert phi[0, 0] == 0.0 and phi[0, 1] == 0.0 and np.all(phi[1] > 0.0)
    for perm in [(m2, m3, m1), (m3, m1, m2), (m2, m1, m3)]:
        np.testing.assert_allclose(phase_space_3body(m, *perm), phi, rtol=1e-10)


def test_phase_space_3body_bad_inputs() -> None:
    with pytest.raises(ModelError, match="daughter masses"):
        phase_space_3body(1000.0, -1.0, 0.0, 0.0)
    with pytest.raises(ModelError, match="n must be"):
        phase_space_3body(1000.0, 1.0, 1.0, 1.0, n=1)


# --- masses -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PDGID))
def test_masses_match_particle_package(name: str) -> None:
    part = Particle.from_pdgid(PDGID[name])
    # MASSES are the particle-1.1.0 values; allow 1 σ for a future data update
    tol = max(part.mass_upper or 0.0, 1e-6)
    assert MASSES[name] == pytest.approx(part.mass, abs=tol)


@pytest.mark.parametrize("name", ["D0", "D+", "pi+", "pi0", "K+", "D*+", "D*0", "B0"])
def test_pdg2020_masses_consistent_with_current_pdg(name: str) -> None:
    part = Particle.from_pdgid(PDGID[name])
    # PDG-2020 values agree with today's within a few combined uncertainties
    sigma = math.hypot(part.mass_upper or 0.0, 0.05)
    assert abs(MASSES_PDG2020[name] - part.mass) < 3.0 * sigma


def test_tcc_thresholds() -> None:
    thr = tcc_thresholds()
    # sums of PDG 2020 masses (D*+ = D0 + 145.4258 MeV, as in Tcc2DDpi.jl)
    assert thr["D*+D0"] == pytest.approx(3875.0858, abs=1e-4)
    assert thr["D*0D+"] == pytest.approx(3876.500, abs=1e-4)
    assert thr["D0D0pi+"] == pytest.approx(3869.2304, abs=1e-4)
    assert thr["D0D+pi0"] == pytest.approx(3869.4568, abs=1e-4)
    assert thr["D0D0"] == pytest.approx(3729.66, abs=1e-4)
    assert thr["D0D+"] == pytest.approx(3734.48, abs=1e-4)
    assert tcc_thresholds(MASSES)["D*+D0"] == pytest.approx(MASSES["D*+"] + MASSES["D0"], abs=1e-12)


def test_mass_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        MASSES["D0"] = 0.0  # type: ignore[index]
    with pytest.raises(TypeError):
        MASSES_PDG2020["D0"] = 0.0  # type: ignore[index]
