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


def test_significance_summary_reports_local_and_global_z_from_toy_scans():
    """A store whose toys carry 1-D scans (χ²_1 fields, two-sided): the summary's z_global
    is the Gross–Vitells extrapolation of those scans, z_local the fixed-θ χ²_1 one, and the
    toy p-value uses the toys' maxima (the global statistic)."""
    from toyengine.summary.significance import significance_summary
    from toyengine.summary.testing import make_results_dataset

    rng = np.random.default_rng(5)
    scans = gaussian_fields(rng, 400, (120,), 6.0) ** 2
    t = scans.max(axis=1)
    nll = np.stack([100.0 + t / 2, np.full(t.size, 100.0)], axis=1)[None]
    ds = make_results_dataset(params=["n_sig"], hypotheses=["H0", "H1"],
                              value=np.zeros((1, t.size, 2, 1)), nll=nll,
                              status=np.ones((1, t.size, 2), np.int8), kind="significance",
                              h0="H0", h1="H1", ndof_wilks=3, observed_t=25.0)
    ds["scan_t"] = (("variant", "toy", "scan_point"), scans[None])
    ds.attrs.update(scan_grid=[120], lee_dof=1, lee_one_sided=0)
    s = significance_summary(ds)
    cal = calibrate(scans, 1.0, dof=1)
    assert s.z_global == pytest.approx(cal.z_global(25.0)[0])
    assert s.z_local == pytest.approx(5.0, abs=1e-9)       # √25: χ²_1, two-sided Z
    assert 3.5 < s.z_global < s.z_local                    # the trials factor costs ~1σ
    assert s.z_toys_is_lower_limit and s.p_toys_count == (0, 400)
    assert s.z_toys == pytest.approx(float(stats.norm.isf(s.p_toys_interval[1] / 2)))
    assert s.z_chi2_wilks == pytest.approx(float(stats.norm.isf(stats.chi2.sf(25, 3) / 2)))
    d = s.to_dict()
    for key in ("p_toys", "p_toys_interval", "z_local", "z_global", "ndof_mixture",
                "ndof_mixture_err", "z_chi2_wilks"):
        assert d[key] is not None, key
    txt = s.to_text()
    assert "Z global (Gross–Vitells)" in txt and "no toy exceeds" in txt
