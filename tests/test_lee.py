"""Gross–Vitells look-elsewhere extrapolation on random fields with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import fft, stats

from toyengine.summary._common import SummaryError
from toyengine.summary.lee import calibrate, euler_characteristic, upcrossings


def gaussian_fields(rng: np.random.Generator, n_fields: int, shape: tuple[int, ...],
                    ell: float) -> np.ndarray:
    """Unit-variance stationary Gaussian fields with correlation exp(−Δ²/(2 ℓ²)) (Δ, ℓ in
    grid steps): white noise convolved with a Gaussian kernel of width ℓ/√2, cropped so that
    no boundary effect remains."""
    pad = int(3 * ell)  # the kernel is exp(−9) there
    big = tuple(n + 2 * pad for n in shape)
    w = rng.standard_normal((n_fields, *big))
    axes = tuple(range(1, len(shape) + 1))
    k = np.ones(big)
    for ax, n in enumerate(big):
        d = np.minimum(np.arange(n), n - np.arange(n))
        g = np.exp(-(d ** 2) / ell ** 2)  # exp(−d²/(2 σ_k²)) with σ_k = ℓ/√2
        k = k * g.reshape([-1 if i == ax else 1 for i in range(len(big))])
    k /= math.sqrt(np.sum(k ** 2))
    z = fft.irfftn(fft.rfftn(w, axes=axes) * fft.rfftn(k)[None], s=big, axes=axes)
    sl = (slice(None), *(slice(pad, pad + n) for n in shape))
    return z[sl]


def test_counts_on_hand_made_sets():
    assert upcrossings(np.array([0.0, 2.0, 0.0, 2.0, 2.0, 0.0]), 1.0) == 2
    ring = np.zeros((5, 5))
    ring[1:4, 1:4] = 2.0
    assert euler_characteristic(ring, 1.0) == 1          # one blob
    ring[2, 2] = 0.0
    assert euler_characteristic(ring, 1.0) == 0          # a ring: one component, one hole
    two = np.zeros((5, 5))
    two[0, 0] = two[4, 4] = 2.0
    assert euler_characteristic(two, 1.0) == 2


def test_1d_calibration_matches_rice_and_predicts_the_global_p():
    """χ²_1 field Z(θ)² over L = 30 ℓ: Rice's formula gives E[N_u] = L/(π ℓ) e^(−u/2)
    (Z up-crossing +√u or down-crossing −√u, each at rate e^(−u/2)/(2π ℓ)); Gross–Vitells
    extrapolates from u0 = 1 to u = 9, compared with the fraction of independent fields
    whose maximum exceeds 9."""
    rng = np.random.default_rng(2010)
    ell, n = 10.0, 300                      # grid step ℓ/10, length 29.9 ℓ
    cal = calibrate(gaussian_fields(rng, 1500, (n,), ell) ** 2, 1.0, dof=1)
    rice = (n - 1) / (math.pi * ell)
    (coef,) = cal.coefficients
    err = math.sqrt(cal.coef_cov[0, 0])
    assert err < 0.02 * rice  # 1500 scans: ~1.5 % statistical precision
    # tolerance: 3 standard errors plus the grid's 1 % undercount of close crossings
    assert abs(coef - rice) < 3 * err + 0.01 * rice
    direct = gaussian_fields(rng, 4000, (n,), ell) ** 2
    k = int(np.sum(direct.max(axis=1) > 9.0))
    p_direct, p_err = k / 4000, math.sqrt(k * (4000 - k)) / 4000
    p, dp = cal.p_global(9.0)
    # Gross–Vitells is an upper bound whose excess is the chance of ≥ 2 upcrossings,
    # ≤ E[N]²/2 ≈ 0.006 here: compare within 3 combined standard errors plus that excess
    assert p_direct - 3 * math.hypot(p_err, dp) < p < p_direct + 3 * math.hypot(p_err, dp) \
        + 0.5 * cal.expected_excursions(9.0) ** 2
    assert cal.trials_factor(9.0) > 10


def test_2d_euler_characteristic_predicts_the_global_p_of_a_chi2_2_field():
    """t = Z1² + Z2² (a complex amplitude: 2 dof at fixed θ) over a 2-D scan; calibrated at
    u = 1 and 3, extrapolated to u = 16 and compared with the direct fraction."""
    rng = np.random.default_rng(2011)
    ell, shape = 4.0, (40, 40)

    def fields(n: int) -> np.ndarray:
        return gaussian_fields(rng, n, shape, ell) ** 2 + gaussian_fields(rng, n, shape, ell) ** 2

    cal = calibrate(fields(1000), (1.0, 3.0), dof=2)
    direct = fields(3000)
    u = 16.0
    k = int(np.sum(direct.max(axis=(1, 2)) > u))
    p_direct, p_err = k / 3000, math.sqrt(k * (3000 - k)) / 3000
    p, dp = cal.p_global(u)
    assert p > 20 * float(stats.chi2.sf(u, 2))   # a real look-elsewhere effect
    # within 3 combined standard errors (E[φ] approximates p_global to O(p²) at this level)
    assert abs(p - p_direct) < 3 * math.hypot(p_err, dp) + p_direct ** 2


def test_bad_input_is_one_clear_error():
    with pytest.raises(SummaryError, match="calibration level"):
        calibrate(np.zeros((5, 4, 4)), (1.0,))
    with pytest.raises(SummaryError, match="shape"):
        calibrate(np.zeros(5))
