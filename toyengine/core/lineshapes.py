"""Resonance line shapes, Blatt–Weisskopf barrier factors and positive polynomials.

Units: masses and momenta in MeV, Blatt–Weisskopf radii ``r`` in GeV⁻¹, so the barrier
argument is ``z = q[MeV] / 1000 * r``. All functions are vectorised over the mass argument.

References
----------
- Blatt–Weisskopf barrier factors: J. M. Blatt and V. F. Weisskopf, *Theoretical Nuclear
  Physics* (Wiley, 1952); F. von Hippel and C. Quigg, Phys. Rev. D 5 (1972) 624. Normalised
  at the pole as in Laura++ (J. Back et al., Comput. Phys. Commun. 231 (2018) 198) and
  Ostap (``github.com/OstapHEP/ostap``, ``source/src/BreitWigner.cpp``).
- LHCb, Eur. Phys. J. C 78 (2018) 1019, Eq. (7) (relativistic Breit–Wigner) and Eq. (8)
  (mass-dependent width).
- The T_cc+ signal of LHCb, Nature Physics 18 (2022) 751: a relativistic P-wave two-body
  Breit–Wigner with a Blatt–Weisskopf form factor (main text and Methods, "Systematic
  uncertainties"); its density is the Ostap ``Ostap::Math::BW`` form.
- The T_cc+ background: two-body phase space × a *positive* polynomial (LHCb, Nature
  Communications 13 (2022) 3351, Eq. (2)), coded as Ostap ``PositivePolynomial``: a
  Bernstein basis with coefficients on the unit sphere.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ModelError
from .kinematics import breakup_momentum

__all__ = [
    "BreitWignerGrid",
    "barrier_factor",
    "bernstein_basis",
    "blatt_weisskopf_polynomial",
    "blatt_weisskopf_sq",
    "mass_dependent_width",
    "rbw_amplitude",
    "rbw_density",
    "sphere_angles",
    "sphere_coefficients",
    "sphere_coefficients_hessian",
    "sphere_coefficients_jacobian",
    "sphere_coefficients_with_derivatives",
]

#: D_L(z) as polynomials in z², lowest power first (von Hippel and Quigg, Phys. Rev. D 5
#: (1972) 624; the ``s_BW_L`` tables of Ostap ``source/src/BreitWigner.cpp``).
_BW_COEFFS: tuple[tuple[float, ...], ...] = (
    (1.0,),
    (1.0, 1.0),
    (9.0, 3.0, 1.0),
    (225.0, 45.0, 6.0, 1.0),
    (11025.0, 1575.0, 135.0, 10.0, 1.0),
    (893025.0, 99225.0, 6300.0, 315.0, 15.0, 1.0),
)
#: the highest orbital angular momentum of the 1-D lineshapes (the table goes one higher,
#: for the Dalitz lineshapes of :mod:`toyengine.core.dalitz.resonances`)
MAX_L = 4


def _check_L(L: int) -> int:
    if isinstance(L, bool) or int(L) != L or not 0 <= int(L) <= MAX_L:
        msg = f"orbital angular momentum L={L!r} is not supported: use an integer 0..{MAX_L}"
        raise ModelError(msg)
    return int(L)


def blatt_weisskopf_sq(z: ArrayLike, L: int) -> NDArray[np.float64]:
    """Blatt–Weisskopf denominator polynomial D_L(z) (von Hippel and Quigg, PRD 5 (1972) 624).

    ===  ==========================================
    L    D_L(z)
    ===  ==========================================
    0    1
    1    1 + z²
    2    z⁴ + 3z² + 9
    3    z⁶ + 6z⁴ + 45z² + 225
    4    z⁸ + 10z⁶ + 135z⁴ + 1575z² + 11025
    ===  ==========================================

    The squared barrier factor is the ratio X_L²(z) = D_L(z0)/D_L(z) (see
    :func:`barrier_factor`). ``z = q r`` is dimensionless.

    Raises
    ------
    ModelError
        If ``L`` is not an integer in 0..4.
    """
    return blatt_weisskopf_polynomial(z, _check_L(L))


def blatt_weisskopf_polynomial(z: ArrayLike, L: int) -> NDArray[np.float64]:
    """D_L(z) of :func:`blatt_weisskopf_sq` for L = 0..5 without the check of ``L`` (von
    Hippel and Quigg, Phys. Rev. D 5 (1972) 624; D_5 = z¹⁰ + 15z⁸ + 315z⁶ + 6300z⁴ +
    99225z² + 893025): the one implementation, shared with the Dalitz lineshapes."""
    coeffs = _BW_COEFFS[L]
    z2 = np.square(np.asarray(z, dtype=float))
    out = np.full_like(z2, coeffs[-1])
    for c in coeffs[-2::-1]:  # Horner in z²
        out = out * z2 + c
    return out


def barrier_factor(q: ArrayLike, q0: ArrayLike, r: float, L: int) -> NDArray[np.float64]:
    """Pole-normalised Blatt–Weisskopf factor X_L = √(D_L(z0) / D_L(z)) (Blatt–Weisskopf).

    Parameters
    ----------
    q, q0 : array_like
        Break-up momentum and its value at the pole, MeV.
    r : float
        Barrier radius in GeV⁻¹ (z = q/1000 · r).
    L : int
        Orbital angular momentum, 0..4.

    Returns
    -------
    ndarray
        X_L, with X_L = 1 at q = q0 and for L = 0.
    """
    r = _check_radius(r)
    z = np.asarray(q, dtype=float) * (r / 1000.0)
    z0 = np.asarray(q0, dtype=float) * (r / 1000.0)
    return np.sqrt(blatt_weisskopf_sq(z0, L) / blatt_weisskopf_sq(z, L))


def _check_radius(r: float) -> float:
    r = float(r)
    if not (math.isfinite(r) and r >= 0.0):
        msg = f"barrier radius r={r!r} GeV^-1 must be finite and >= 0"
        raise ModelError(msg)
    return r


def _breakup_scalar(m: float, m1: float, m2: float) -> float:
    """:func:`~toyengine.kinematics.breakup_momentum` for one mass, in plain floats (the
    same factorised formula, hence the same value; no array overhead in a fit's inner loop)."""
    if not m > m1 + m2:
        return 0.0
    lam = (m - m1 - m2) * (m + m1 + m2) * (m - m1 + m2) * (m + m1 - m2)
    return math.sqrt(lam) / (2.0 * m)


def _check_bw(m0: float, gamma0: float, m1: float, m2: float) -> tuple[float, float, float]:
    """Validate Breit–Wigner inputs; return (m0, gamma0, q0)."""
    m0, gamma0 = float(m0), float(gamma0)
    if not (math.isfinite(m0) and m0 > 0.0):
        msg = f"Breit-Wigner mass m0={m0!r} MeV must be finite and > 0"
        raise ModelError(msg)
    if not (math.isfinite(gamma0) and gamma0 > 0.0):
        msg = f"Breit-Wigner width gamma0={gamma0!r} MeV must be finite and > 0"
        raise ModelError(msg)
    q0 = _breakup_scalar(m0, float(m1), float(m2))
    if q0 <= 0.0:
        msg = (
            f"Breit-Wigner mass m0={m0!r} MeV is at or below the decay threshold "
            f"m1 + m2 = {float(m1) + float(m2)!r} MeV, so q0 = 0 and the mass-dependent width "
            "Gamma0 (q/q0)^(2L+1) is undefined"
        )
        raise ModelError(msg)
    return m0, gamma0, q0


def mass_dependent_width(
    m: ArrayLike, m0: float, gamma0: float, m1: float, m2: float, L: int, r: float
) -> NDArray[np.float64]:
    """Mass-dependent width Γ(m) = Γ0 (q/q0)^{2L+1} (m0/m) X_L²(q r) (LHCb, Eur. Phys. J. C 78
    (2018) 1019, Eq. (8)).

    ``q = k(m; m1, m2)`` and ``q0 = k(m0; m1, m2)``
    (:func:`~toyengine.core.kinematics.breakup_momentum`); X_L is pole-normalised so Γ(m0) = Γ0.

    Parameters
    ----------
    m : array_like
        Mass, MeV.
    m0, gamma0 : float
        Pole mass and width, MeV.
    m1, m2 : float
        Daughter masses, MeV (the T_cc+ of Nature Physics 18 (2022) 751: m1 = 2 m(D0),
        m2 = m(π+)).
    L : int
        Orbital angular momentum of the decay, 0..4.
    r : float
        Barrier radius, GeV⁻¹.

    Returns
    -------
    ndarray
        Γ(m) in MeV; 0 at and below threshold.

    Raises
    ------
    ModelError
        If ``m0`` is at/below threshold (q0 = 0), ``gamma0 <= 0``, ``r < 0`` or L ∉ 0..4.
    """
    m0, gamma0, q0 = _check_bw(m0, gamma0, m1, m2)
    L = _check_L(L)
    r = _check_radius(r)
    m = np.asarray(m, dtype=float)
    q = breakup_momentum(m, m1, m2)
    return _width_from_q(m, q, m0, gamma0, q0, L, r, blatt_weisskopf_sq(q * (r / 1000.0), L))


def _width_from_q(
    m: NDArray, q: NDArray, m0: float, gamma0: float, q0: float, L: int, r: float, d_z: NDArray
) -> NDArray:
    """Γ(m) from precomputed q(m) and D_L(z(m)); zero where q = 0."""
    d_z0 = float(blatt_weisskopf_sq(q0 * r / 1000.0, L))
    safe_m = np.where(q > 0.0, m, 1.0)
    ratio = q / q0
    return gamma0 * ratio ** (2 * L + 1) * (m0 / safe_m) * (d_z0 / d_z)


def rbw_amplitude(
    m: ArrayLike, m0: float, gamma0: float, m1: float, m2: float, L: int, r: float
) -> NDArray[np.complex128]:
    """Relativistic Breit–Wigner T(m) = 1 / (m0² − m² − i m0 Γ(m)).

    LHCb, Eur. Phys. J. C 78 (2018) 1019, Eq. (7); Γ(m) is :func:`mass_dependent_width`
    (Eq. (8) there). Units MeV⁻². Below threshold Γ = 0 and T is real.
    """
    m = np.asarray(m, dtype=float)
    width = mass_dependent_width(m, m0, gamma0, m1, m2, L, r)
    m0 = float(m0)
    return 1.0 / ((m0 * m0 - m * m) - 1j * m0 * width)


def rbw_density(
    m: ArrayLike, m0: float, gamma0: float, m1: float, m2: float, L: int, r: float
) -> NDArray[np.float64]:
    """Relativistic Breit–Wigner line shape with mass-dependent width.

    F(m) = (2/π) m m0 Γ(m) / [(m0² − m²)² + m0² Γ(m)²],

    the Ostap ``Ostap::Math::BW`` form of the T_cc+ signal of LHCb, Nature Physics 18 (2022)
    751 (with m1 = 2 m(D0), m2 = m(π+), L = 1, r = 3.5 GeV⁻¹). Equal to (2/π) m m0 Γ(m) |T(m)|² with
    T of :func:`rbw_amplitude`.

    Normalisation: F is *not* normalised on a finite range; for a narrow resonance far
    from threshold its integral over all m tends to 1, and exactly, for L = 0 and massless
    daughters (where Γ(m) = Γ0), ∫₀^∞ F dm = 1/2 + arctan(m0/Γ0)/π. Models normalise
    numerically over their fit range (after resolution convolution).

    Returns
    -------
    ndarray
        F(m) in MeV⁻¹; 0 at and below threshold.

    See Also
    --------
    BreitWignerGrid : the same function with the m-dependent pieces precomputed.
    """
    m = np.asarray(m, dtype=float)
    width = mass_dependent_width(m, m0, gamma0, m1, m2, L, r)
    m0 = float(m0)
    return _density_from_width(m, m0, width)


def _density_from_width(m: NDArray, m0: float, width: NDArray) -> NDArray:
    m0_width = m0 * width
    return (2.0 / math.pi) * m * m0_width / ((m0 * m0 - m * m) ** 2 + m0_width * m0_width)


class BreitWignerGrid:
    """:func:`rbw_density` on a fixed mass grid, with the m-dependent pieces precomputed.

    In a fit m0 and Γ0 change but the grid, the daughter masses, L and r do not, so q(m),
    D_L(z(m)) and m² are computed once here. ``grid(m0, gamma0)`` then costs a few vector
    operations (LHCb, Eur. Phys. J. C 78 (2018) 1019, Eqs. (7)–(8)).

    Parameters
    ----------
    m : array_like
        Mass grid, MeV (1-D).
    m1, m2 : float
        Daughter masses, MeV.
    L : int
        Orbital angular momentum, 0..4.
    r : float
        Barrier radius, GeV⁻¹.
    """

    def __init__(self, m: ArrayLike, m1: float, m2: float, L: int, r: float) -> None:
        self.m = np.array(m, dtype=float)
        self.m.setflags(write=False)
        self.m1, self.m2 = float(m1), float(m2)
        self.L = _check_L(L)
        self.r = _check_radius(r)
        self._q = breakup_momentum(self.m, self.m1, self.m2)
        self._d_z = blatt_weisskopf_sq(self._q * (self.r / 1000.0), self.L)
        self._m2 = self.m * self.m
        # Γ(m) = Γ0 · m0 · g(m) / (q0^{2L+1} / D_L(z0)), with g(m) = q^{2L+1} / (m D_L(z))
        safe_m = np.where(self._q > 0.0, self.m, 1.0)
        self._g = self._q ** (2 * self.L + 1) / (safe_m * self._d_z)
        self._pref = (2.0 / math.pi) * self.m  # P(m) of F = P w / (u² + w²)

    def _c0(self, q0: float) -> float:
        """D_L(z0) / q0^{2L+1}."""
        z0 = q0 * self.r / 1000.0
        d_z0 = 1.0
        for c in _BW_COEFFS[self.L][-2::-1]:
            d_z0 = d_z0 * z0 * z0 + c
        return d_z0 / q0 ** (2 * self.L + 1)

    def width(self, m0: float, gamma0: float) -> NDArray[np.float64]:
        """Γ(m) on the grid (Eur. Phys. J. C 78 (2018) 1019, Eq. (8))."""
        m0, gamma0, q0 = _check_bw(m0, gamma0, self.m1, self.m2)
        c0 = self._c0(q0)
        return (gamma0 * m0 * c0) * self._g

    def __call__(self, m0: float, gamma0: float) -> NDArray[np.float64]:
        """F(m) of :func:`rbw_density` on the grid."""
        m0, gamma0, q0 = _check_bw(m0, gamma0, self.m1, self.m2)
        c0 = self._c0(q0)
        m0_width = (gamma0 * m0 * m0 * c0) * self._g
        return self._pref * m0_width / ((m0 * m0 - self._m2) ** 2 + m0_width**2)

    def density_and_gradient(
        self, m0: float, gamma0: float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """F(m) and its analytic derivatives ∂F/∂m0 and ∂F/∂Γ0 on the grid
        (:meth:`density_and_gradient_rows`).

        Returns
        -------
        (F, dF_dm0, dF_dgamma0) : tuple of ndarray
        """
        f, df = self.density_and_gradient_rows(m0, gamma0)
        return f, df[0], df[1]

    def density_and_gradient_rows(
        self, m0: float, gamma0: float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """F(m) and its analytic derivatives in (m0, Γ0) on the grid, as one array.

        With w = m0 Γ(m) = Γ0 m0² c0 g(m), c0 = D_L(z0)/q0^{2L+1}, u = m0² − m² and
        D = u² + w²: F = P w / D (P = (2/π) m), ∂F/∂w = P (u² − w²)/D², ∂F/∂u = −2 P u w/D²,
        ∂u/∂m0 = 2 m0, ∂w/∂Γ0 = w/Γ0 and ∂ln w/∂m0 = 2/m0 + d ln c0/dm0, where
        d ln c0/dm0 = [D_L'(z0) z0 / D_L(z0) − (2L+1)] (dq0/dm0)/q0.

        Returns
        -------
        (F, dF) : tuple of ndarray
            Shapes (n,) and (2, n); row 0 is ∂F/∂m0, row 1 is ∂F/∂Γ0.
        """
        m0, gamma0, q0 = _check_bw(m0, gamma0, self.m1, self.m2)
        c0 = self._c0(q0)
        w = (gamma0 * m0 * m0 * c0) * self._g
        u = m0 * m0 - self._m2
        uw = u * w
        e = u * u  # u² − w², formed in place below
        w2 = w * w
        d = e + w2
        e -= w2
        r = self._pref / d
        f = r * w
        r /= d  # P/D²
        e *= w  # (u² − w²) w = w ∂F/∂w · D²/P
        out = np.empty((2, len(w)))
        lm = 2.0 / m0 + self._dlog_c0(m0, q0)[0]
        # ∂F/∂m0 = ∂F/∂u 2 m0 + ∂F/∂w w lm; ∂F/∂Γ0 = ∂F/∂w w / Γ0
        np.multiply(e, lm, out=out[0])
        uw *= 4.0 * m0
        out[0] -= uw
        out[0] *= r
        np.multiply(e, r, out=out[1])
        out[1] *= 1.0 / gamma0
        return f, out

    def _dlog_c0(self, m0: float, q0: float) -> tuple[float, float]:
        """a = d ln c0/dm0 and da/dm0 for c0 = D_L(z0)/q0^{2L+1}, z0 = q0 r.

        a = (s − (2L+1)) q0'/q0 with s = d ln D_L/d ln z at z0, so
        da/dm0 = (ds/d ln z) (q0'/q0)² + (s − (2L+1)) (q0''/q0 − (q0'/q0)²).
        """
        z0 = q0 * self.r / 1000.0
        s, ds = _dlog_blatt_weisskopf_dlogz(z0, self.L)
        dq, d2q = _dq_dm(m0, q0, self.m1, self.m2)
        rq = dq / q0
        a = (s - (2 * self.L + 1)) * rq
        da = ds * rq * rq + (s - (2 * self.L + 1)) * (d2q / q0 - rq * rq)
        return a, da

    def density_derivatives(
        self, m0: float, gamma0: float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """F(m), its gradient and its Hessian in (m0, Γ0) on the grid, all analytic.

        F = P Im 1/(u − i w) = P w / (u² + w²) with P = (2/π) m, u = m0² − m² and
        w = Γ0 m0² c0(m0) g(m) (see :meth:`density_and_gradient`). As a function of (u, w),
        F_w = P (u² − w²)/D², F_u = −2 P u w/D², F_ww = −F_uu = −2 P w (3u² − w²)/D³ and
        F_uw = 2 P u (3w² − u²)/D³ (D = u² + w²); the chain rule with u' = 2 m0, u'' = 2,
        w_Γ = w/Γ0, w_m = w (2/m0 + a), w_mm = w [(2/m0 + a)² − 2/m0² + a'],
        a = d ln c0/dm0 (:meth:`_dlog_c0`) gives the derivatives in (m0, Γ0).

        Computed in one compiled pass over the grid
        (:func:`toyengine.core.model1d_kernels.bw_rows`).

        Returns
        -------
        (F, dF, d2F) : tuple of ndarray
            Shapes (n,), (2, n) and (2, 2, n); index 0 is m0, 1 is Γ0.
        """
        rows = self.derivative_rows(m0, gamma0)
        return rows[0], rows[1:3], rows[[3, 4, 4, 5]].reshape(2, 2, -1)

    def derivative_rows(self, m0: float, gamma0: float) -> NDArray[np.float64]:
        """:meth:`density_derivatives` as the rows of one (6, n) array: F, ∂F/∂m0,
        ∂F/∂Γ0, ∂²F/∂m0², ∂²F/∂m0∂Γ0, ∂²F/∂Γ0² (a new array)."""
        from .model1d_kernels import bw_rows

        m0, gamma0, q0 = _check_bw(m0, gamma0, self.m1, self.m2)
        a, da = self._dlog_c0(m0, q0)
        return bw_rows(self._pref, self._m2, self._g, m0, gamma0, self._c0(q0), a, da)


def _dlog_blatt_weisskopf_dlogz(z: float, L: int) -> tuple[float, float]:
    """s = d ln D_L/d ln z and ds/d ln z (D_L a polynomial in y = z²: d y^k/d ln z = 2k y^k)."""
    y = z * z
    den = num = num2 = 0.0
    for k, c in enumerate(_BW_COEFFS[L]):
        t = c * y**k
        den += t
        num += 2 * k * t
        num2 += 4 * k * k * t
    s = num / den
    return s, num2 / den - s * s


def _dq_dm(m: float, q: float, m1: float, m2: float) -> tuple[float, float]:
    """dq/dm and d²q/dm² of the break-up momentum: with u = q² = m²/4 − (s₊ + s₋)/4 +
    s₊s₋/(4m²), u' = m/2 − s₊s₋/(2m³), u'' = 1/2 + 3 s₊s₋/(2m⁴), q' = u'/(2q) and
    q'' = u''/(2q) − u'²/(4q³)."""
    pp = (m1 + m2) ** 2 * (m1 - m2) ** 2
    du = 0.5 * m - pp / (2.0 * m**3)
    d2u = 0.5 + 1.5 * pp / m**4
    return du / (2.0 * q), d2u / (2.0 * q) - du * du / (4.0 * q**3)


# ---------------------------------------------------------------------------------------
# Positive polynomials: Bernstein basis with coefficients on the unit sphere
# ---------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _binomials(order: int) -> NDArray:
    out = np.array([math.comb(order, k) for k in range(order + 1)], dtype=float)
    out.setflags(write=False)
    return out


def bernstein_basis(x: ArrayLike, lo: float, hi: float, order: int) -> NDArray[np.float64]:
    """Bernstein basis b_{k,n}(t) = C(n,k) t^k (1−t)^{n−k}, t = (x − lo)/(hi − lo).

    Ostap ``Bernstein``/``PositivePolynomial`` basis (the T_cc+ background is phase space ×
    positive polynomial, LHCb, Nature Communications 13 (2022) 3351, Eq. (2)). A polynomial Σ a_k
    b_{k,n} with a_k ≥ 0 is ≥ 0 on [lo, hi]; each basis function integrates to (hi − lo)/(n + 1)
    over [lo, hi] and Σ_k b_{k,n} = 1.

    Outside [lo, hi] the polynomial continuation is returned (it can be negative there):
    callers that evaluate on a padded grid should choose [lo, hi] to cover that grid.

    Parameters
    ----------
    x : array_like
        Points (1-D or scalar).
    lo, hi : float
        Polynomial domain, lo < hi.
    order : int
        Degree n ≥ 0.

    Returns
    -------
    ndarray
        Shape ``(order + 1, len(x))``.
    """
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        msg = f"bernstein_basis: domain [lo, hi] = [{lo}, {hi}] must be finite with lo < hi"
        raise ModelError(msg)
    if isinstance(order, bool) or int(order) != order or order < 0:
        msg = f"bernstein_basis: order={order!r} must be an integer >= 0"
        raise ModelError(msg)
    order = int(order)
    t = (np.atleast_1d(np.asarray(x, dtype=float)) - lo) / (hi - lo)
    k = np.arange(order + 1)[:, np.newaxis]
    return _binomials(order)[:, np.newaxis] * t**k * (1.0 - t) ** (order - k)


def sphere_coefficients(phis: ArrayLike) -> NDArray[np.float64]:
    """Map n angles to n+1 non-negative coefficients summing to 1 (Ostap positive polynomial).

    b_0 = cos²φ1, b_1 = sin²φ1 cos²φ2, …, b_{n−1} = (Π_{i<n} sin²φ_i) cos²φ_n,
    b_n = Π_i sin²φ_i: the squared Cartesian coordinates of a point on the unit n-sphere
    (Ostap ``PositivePolynomial``). Used as Bernstein coefficients this makes the
    polynomial ≥ 0 on its domain for every value of the angles, so a fit can never reach a
    negative background density. An empty input gives ``[1.0]``.

    Parameters
    ----------
    phis : array_like
        Angles, shape (n,), radians.

    Returns
    -------
    ndarray
        Shape (n + 1,).

    See Also
    --------
    sphere_angles : the inverse map.
    sphere_coefficients_jacobian : derivatives ∂b_k/∂φ_j.

    Notes
    -----
    Plain Python, no compiled kernel: building a model (and validating a study file) needs
    the coefficients at their start values only, and numba's start costs more than the
    whole model. The products are formed in the order of the compiled
    :func:`~toyengine.core.model1d_kernels.sphere_products`, whose values these equal bit
    for bit.
    """
    phis = _sphere_angles_1d(phis)
    out = np.empty(phis.size + 1)
    prod = 1.0
    for i, p in enumerate(phis.tolist()):
        c, s = math.cos(p), math.sin(p)
        out[i] = prod * (c * c)
        prod *= s * s
    out[-1] = prod
    return out


def _sphere_products(phis: ArrayLike, order: int
                     ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """b_k, ∂b_k/∂φ_j and ∂²b_k/∂φ_j∂φ_l up to ``order`` (compiled:
    :func:`toyengine.core.model1d_kernels.sphere_products`).

    Raises
    ------
    ModelError
        If ``phis`` is not 1-D.
    """
    from .model1d_kernels import sphere_products

    return sphere_products(np.ascontiguousarray(_sphere_angles_1d(phis)), order)


def _sphere_angles_1d(phis: ArrayLike) -> NDArray[np.float64]:
    """``phis`` as a 1-D float array (a scalar is one angle).

    Raises
    ------
    ModelError
        If ``phis`` is not 1-D.
    """
    phis = np.atleast_1d(np.asarray(phis, dtype=float))
    if phis.ndim != 1:
        msg = f"sphere_coefficients: phis must be 1-D, got shape {phis.shape}"
        raise ModelError(msg)
    return phis


def sphere_coefficients_with_derivatives(
    phis: ArrayLike,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """:func:`sphere_coefficients`, :func:`sphere_coefficients_jacobian` and
    :func:`sphere_coefficients_hessian` together (the same numbers), their common products
    formed once: shapes (n + 1,), (n + 1, n) and (n + 1, n, n)."""
    return _sphere_products(phis, 2)


def sphere_coefficients_jacobian(phis: ArrayLike) -> NDArray[np.float64]:
    """Jacobian J[k, j] = ∂b_k/∂φ_j of :func:`sphere_coefficients`, shape (n + 1, n).

    b_k = (Π_{i<k} sin²φ_i) · c_k with c_k = cos²φ_k (k < n), c_n = 1, so
    ∂b_k/∂φ_j = (Π_{i<k, i≠j} sin²φ_i) sin(2φ_j) c_k for j < k,
    ∂b_k/∂φ_k = −(Π_{i<k} sin²φ_i) sin(2φ_k) and 0 for j > k. Computed without dividing by
    sin or cos, so it is exact at φ = 0 or π/2.
    """
    return _sphere_products(phis, 1)[1]


def sphere_coefficients_hessian(phis: ArrayLike) -> NDArray[np.float64]:
    """Second derivatives H[k, j, l] = ∂²b_k/∂φ_j∂φ_l of :func:`sphere_coefficients`,
    shape (n + 1, n, n).

    b_k is a product of one-angle factors h_i: sin²φ_i for i < k and cos²φ_k for k < n.
    Hence ∂²b_k/∂φ_j∂φ_l = h_j' h_l' Π_{i∉{j,l}} h_i (j ≠ l) and h_j'' Π_{i≠j} h_i (j = l),
    zero when φ_j or φ_l is not a factor; (sin²)' = sin 2φ, (sin²)'' = 2 cos 2φ and
    (cos²)' = −sin 2φ, (cos²)'' = −2 cos 2φ. Products are formed without division.
    """
    return _sphere_products(phis, 2)[2]


def sphere_angles(coeffs: ArrayLike) -> NDArray[np.float64]:
    """Inverse of :func:`sphere_coefficients`: angles in [0, π/2] for given coefficients.

    The coefficients are first normalised to unit sum (only the shape of the polynomial is
    meaningful). cos²φ_{k+1} = b_k / Σ_{i≥k} b_i; where that tail sum is 0 the remaining
    angles are arbitrary and set to 0. Use it to choose generation values for a
    background polynomial given, e.g., Bernstein coefficients fitted elsewhere.

    Raises
    ------
    ModelError
        If a coefficient is negative or non-finite, or all are zero.
    """
    b = np.atleast_1d(np.asarray(coeffs, dtype=float))
    if b.ndim != 1 or b.size < 1:
        msg = f"sphere_angles: coeffs must be a non-empty 1-D array, got shape {b.shape}"
        raise ModelError(msg)
    if not np.all(np.isfinite(b)) or np.any(b < 0.0) or not b.sum() > 0.0:
        msg = f"sphere_angles: coeffs must be finite, >= 0 and not all zero, got {b.tolist()}"
        raise ModelError(msg)
    b = b / b.sum()
    tail = np.cumsum(b[::-1])[::-1]  # Σ_{i≥k} b_i
    ratio = np.divide(b[:-1], tail[:-1], out=np.ones(b.size - 1), where=tail[:-1] > 0.0)
    return np.arccos(np.sqrt(np.clip(ratio, 0.0, 1.0)))
