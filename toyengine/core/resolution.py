"""Detector-resolution functions for the Tcc+ mass fits.

The default double Gaussian and the five alternative shapes of the resolution-model
systematic are those of LHCb, Nature Physics 18 (2022) 751 and Nature Communications 13
(2022) 3351 (Methods, "Resolution model for the D0D0π+ mass" and "Systematic
uncertainties"); the formulas follow the authors' toolkit Ostap
(``github.com/OstapHEP/ostap``, ``source/src/Peaks.cpp``) and the references cited there.

Each shape is a density of the offset x = m_reco − m_true (MeV), normalised over the real
line. All normalisation constants are analytic (derivations in the docstrings), so nothing
is integrated numerically at run time; ``tests/test_resolution.py`` checks each constant,
mean and RMS against ``scipy.integrate.quad``.

The :class:`Resolution` dataclass bundles a kind and its parameters and offers the density,
CDF, sampling, RMS, the convolution half-width and the width scaling used by the
"resolution scale 1.0 / 1.1" systematic. :func:`default_tcc_resolution` is the double
Gaussian of the T_cc+ papers and :func:`tcc_alternative_resolutions` the five alternative shapes of
the resolution-model systematic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import numpy as np
import scipy  # scipy.integrate/.optimize/.stats load on first use (stats alone costs ~0.3 s)
from numpy.typing import ArrayLike, NDArray
from scipy import special

from ..errors import ModelError

__all__ = [
    "HALF_WIDTH_CAP",
    "KINDS",
    "TAIL_MASS",
    "TCC_ALTERNATIVE_SHAPES",
    "TCC_FRAC",
    "TCC_SIGMA1_SIM",
    "TCC_SIGMA_RATIO",
    "Resolution",
    "apollonios_density",
    "cb2_density",
    "crystal_ball_density",
    "default_tcc_resolution",
    "double_gaussian_density",
    "gaussian_density",
    "johnson_su_density",
    "novosibirsk_density",
    "student_t_density",
    "tcc_alternative_resolutions",
]

_SQRT2PI: Final = math.sqrt(2.0 * math.pi)
_SQRT_LN4: Final = math.sqrt(math.log(4.0))

#: parameter names per kind, in canonical order (the first entry is the width parameter
#: for every kind except ``double_gaussian``, whose widths are sigma1 and sigma2)
KINDS: Final[Mapping[str, tuple[str, ...]]] = {
    "gaussian": ("sigma",),
    "double_gaussian": ("sigma1", "sigma2", "frac"),
    "apollonios": ("sigma", "beta"),
    "cb2": ("sigma", "alpha", "n"),
    "student_t": ("sigma", "n"),
    "johnson_su": ("lambda_", "delta"),
    "novosibirsk": ("sigma", "tau"),
}
_WIDTHS: Final = frozenset({"sigma", "sigma1", "sigma2", "lambda_"})
_POSITIVE_SHAPES: Final = frozenset({"beta", "alpha", "n", "delta"})

#: tail probability that defines :attr:`Resolution.half_width` (each side)
TAIL_MASS: Final = 1e-7
#: cap of :attr:`Resolution.half_width` in units of the width parameter
HALF_WIDTH_CAP: Final = 30.0


# ---------------------------------------------------------------------------------------
# Densities (pure functions, normalised over the real line)
# ---------------------------------------------------------------------------------------


def gaussian_density(x: ArrayLike, sigma: float) -> NDArray[np.float64]:
    """Gaussian G(x; 0, σ); analytic normalisation."""
    d = np.asarray(x, dtype=float) / sigma
    return np.exp(-0.5 * d * d) / (_SQRT2PI * sigma)


def double_gaussian_density(
    x: ArrayLike, sigma1: float, sigma2: float, frac: float
) -> NDArray[np.float64]:
    """Double Gaussian α G(x; 0, σ1) + (1 − α) G(x; 0, σ2), α = ``frac``.

    The default Tcc+ resolution (LHCb, Nature Communications 13 (2022) 3351, Methods,
    "Resolution model for the D0D0π+ mass"); analytic normalisation.
    """
    return frac * gaussian_density(x, sigma1) + (1.0 - frac) * gaussian_density(x, sigma2)


def _apollonios_norm(beta: float) -> float:
    """∫ exp(β(β − √(β²+δ²))) dδ = 2β e^{β²} K1(β²) (δ = β sinh u; ∫₀^∞ e^{−z cosh u}
    cosh u du = K1(z))."""
    return 2.0 * beta * special.k1e(beta * beta)


def apollonios_density(x: ArrayLike, sigma: float, beta: float) -> NDArray[np.float64]:
    """Symmetric Apollonios f ∝ exp(β(β − √(β² + δ²))), δ = x/σ.

    Ostap ``Apollonios2`` with σ_L = σ_R (2021 form); Santos & Dupertuis, NIM A764 (2014)
    150. It is a symmetric hyperbolic distribution: Gaussian for β → ∞, Laplace for β → 0.
    Analytic normalisation σ · 2β e^{β²} K1(β²) (substitute δ = β sinh u).
    """
    d = np.asarray(x, dtype=float) / sigma
    # β(β − √(β²+δ²)) written without cancellation
    expo = -beta * d * d / (beta + np.sqrt(beta * beta + d * d))
    return np.exp(expo) / (sigma * _apollonios_norm(beta))


def _cb2_pieces(alpha: float, n: float) -> tuple[float, float, float]:
    """Return (core integral, one-tail integral, N) in units of σ for :func:`cb2_density`."""
    big_n = n + 1.0
    core = _SQRT2PI * math.erf(alpha / math.sqrt(2.0))
    tail = math.exp(-0.5 * alpha * alpha) * big_n / (alpha * (big_n - 1.0))
    return core, tail, big_n


def cb2_density(x: ArrayLike, sigma: float, alpha: float, n: float) -> NDArray[np.float64]:
    """Gaussian core with symmetric power-law tails (double-sided Crystal Ball).

    f = exp(−δ²/2) for |δ| ≤ α and exp(−α²/2) [N / (N − α(α − |δ|))]^N beyond, with
    N = n + 1 (Ostap ``CrystalBallDoubleSided``, whose ``n`` is N − 1). Continuous with
    continuous derivative at |δ| = α. Analytic normalisation
    σ [√(2π) erf(α/√2) + 2 e^{−α²/2} N / (α (N − 1))]; needs n > 0.
    """
    d = np.abs(np.asarray(x, dtype=float) / sigma)
    core, tail, big_n = _cb2_pieces(alpha, n)
    inside = d <= alpha
    # N − α² + α|δ| ≥ N > 0 in the tail region; clip only to keep the masked branch finite
    arg = np.maximum(big_n - alpha * alpha + alpha * d, big_n)
    tail_val = np.exp(-0.5 * alpha * alpha + big_n * np.log(big_n / arg))
    return np.where(inside, np.exp(-0.5 * d * d), tail_val) / (sigma * (core + 2.0 * tail))


def crystal_ball_density(x: ArrayLike, sigma: float, alpha: float, n: float
                         ) -> NDArray[np.float64]:
    """One-sided Crystal Ball: Gaussian core with a power-law tail on the low side.

    f = exp(−δ²/2) for δ > −α and exp(−α²/2) [N / (N − α(α + δ))]^N for δ ≤ −α, δ = x/σ,
    N = n + 1 — the same tail and the same ``n`` convention as :func:`cb2_density` (Ostap
    ``CrystalBall``; Skwarnicki, DESY F31-86-02 (1986), Appendix E, whose exponent is N).
    Continuous with continuous derivative at δ = −α. Analytic normalisation
    σ [√(π/2) (1 + erf(α/√2)) + e^{−α²/2} N / (α (N − 1))]; needs α > 0, n > 0.
    For the tail on the high side evaluate at −x.
    """
    d = np.asarray(x, dtype=float) / sigma
    _, tail, big_n = _cb2_pieces(alpha, n)
    core = math.sqrt(0.5 * math.pi) * (1.0 + math.erf(alpha / math.sqrt(2.0)))
    inside = d > -alpha
    arg = np.maximum(big_n - alpha * alpha - alpha * d, big_n)
    tail_val = np.exp(-0.5 * alpha * alpha + big_n * np.log(big_n / arg))
    return np.where(inside, np.exp(-0.5 * d * d), tail_val) / (sigma * (core + tail))


def student_t_density(x: ArrayLike, sigma: float, n: float) -> NDArray[np.float64]:
    """Student's t with ν = 1 + |n| degrees of freedom and scale σ.

    Ostap 2021 ``StudentT`` parametrisation (ν = 1 + |n|); "Student", Biometrika 6 (1908) 1.
    Analytic normalisation Γ((ν+1)/2) / (√(πν) Γ(ν/2) σ).
    """
    nu = 1.0 + abs(n)
    d = np.asarray(x, dtype=float) / sigma
    log_c = special.gammaln(0.5 * (nu + 1.0)) - special.gammaln(0.5 * nu)
    log_c -= 0.5 * math.log(math.pi * nu)
    return np.exp(log_c - 0.5 * (nu + 1.0) * np.log1p(d * d / nu)) / sigma


def johnson_su_density(x: ArrayLike, lambda_: float, delta: float) -> NDArray[np.float64]:
    """Symmetric Johnson SU (γ = 0, ξ = 0; Johnson, Biometrika 36 (1949) 149).

    f = δ/(λ√(2π)) (1 + y²)^{−1/2} exp(−½ δ² asinh²y), y = x/λ. It is the density of
    λ sinh(Z/δ) for standard normal Z, hence analytically normalised.
    """
    y = np.asarray(x, dtype=float) / lambda_
    a = delta * np.arcsinh(y)
    return delta / (lambda_ * _SQRT2PI) / np.sqrt(1.0 + y * y) * np.exp(-0.5 * a * a)


def _novosibirsk_lambda(tau: float) -> float:
    """Λ = sinh(τ√ln4) / (τ√ln4), → 1 for τ → 0."""
    t = tau * _SQRT_LN4
    return 1.0 if t == 0.0 else math.sinh(t) / t


def novosibirsk_density(x: ArrayLike, sigma: float, tau: float) -> NDArray[np.float64]:
    """Modified Novosibirsk function (Ostap ``Novosibirsk``).

    f ∝ exp(−½ [ln²(1 + Λτδ)/τ² + τ²]), Λ = sinh(τ√ln4)/(τ√ln4), δ = x/σ, and f = 0 where
    1 + Λτδ ≤ 0 (Ikeda et al., NIM A441 (2000) 401). τ = 0 is the Gaussian.

    With y = ln(1 + Λτδ)/τ the variable y is N(τ, 1)-distributed, which gives the analytic
    normalisation σ√(2π)/Λ, the CDF Φ(y − τ) and
    mean = σ (e^{3τ²/2} − 1)/(Λτ), variance = σ² e^{3τ²}(e^{τ²} − 1)/(Λτ)².
    The mode is at x = 0 but for τ ≠ 0 the mean is not: the shape is asymmetric with the
    long tail on the side of sign(τ).
    """
    d = np.asarray(x, dtype=float) / sigma
    if tau == 0.0:
        return np.exp(-0.5 * d * d) / (_SQRT2PI * sigma)
    lam = _novosibirsk_lambda(tau)
    u = lam * tau * d
    ok = u > -1.0
    y = np.log1p(np.where(ok, u, 0.0)) / tau
    val = np.exp(-0.5 * (y * y + tau * tau)) * lam / (_SQRT2PI * sigma)
    return np.where(ok, val, 0.0)


_DENSITIES: Final[Mapping[str, Callable[..., NDArray[np.float64]]]] = {
    "gaussian": gaussian_density,
    "double_gaussian": double_gaussian_density,
    "apollonios": apollonios_density,
    "cb2": cb2_density,
    "student_t": student_t_density,
    "johnson_su": johnson_su_density,
    "novosibirsk": novosibirsk_density,
}


# ---------------------------------------------------------------------------------------
# The Resolution dataclass
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=True)
class Resolution:
    """A resolution function: ``kind`` plus its parameters (widths in MeV).

    Kinds and parameters:

    ===================  ==============================  ==================================
    kind                 params                          density
    ===================  ==============================  ==================================
    ``gaussian``         sigma                           :func:`gaussian_density`
    ``double_gaussian``  sigma1, sigma2, frac            :func:`double_gaussian_density`
    ``apollonios``       sigma, beta                     :func:`apollonios_density`
    ``cb2``              sigma, alpha, n                 :func:`cb2_density`
    ``student_t``        sigma, n (ν = 1 + n)            :func:`student_t_density`
    ``johnson_su``       lambda_, delta                  :func:`johnson_su_density`
    ``novosibirsk``      sigma, tau                      :func:`novosibirsk_density`
    ===================  ==============================  ==================================

    All densities are normalised analytically over the real line. Every kind except
    ``novosibirsk`` is symmetric about 0; the Novosibirsk shape peaks at 0 and has mean
    :attr:`mean` ≠ 0 for τ ≠ 0.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    params : Mapping[str, float]
        Exactly the parameters of that kind. Stored as a plain ``dict`` copy of floats;
        treat it as read-only (the object is hashable on its contents).

    Raises
    ------
    ModelError
        Unknown kind, missing or unknown parameter, non-finite value, a width
        (sigma, sigma1, sigma2, lambda_) <= 0, frac outside [0, 1], or beta, alpha, n,
        delta <= 0. The message names the parameter.
    """

    kind: str
    params: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            msg = f"unknown resolution kind {self.kind!r}; expected one of {sorted(KINDS)}"
            raise ModelError(msg)
        expected = KINDS[self.kind]
        given = dict(self.params)
        missing = [p for p in expected if p not in given]
        unknown = [p for p in given if p not in expected]
        if missing or unknown:
            msg = (
                f"resolution {self.kind!r}: missing parameter(s) {missing}, unknown "
                f"parameter(s) {unknown}; expected exactly {list(expected)}"
            )
            raise ModelError(msg)
        clean: dict[str, float] = {}
        for name in expected:
            try:
                value = float(given[name])
            except (TypeError, ValueError):
                msg = (
                    f"resolution {self.kind!r}: parameter {name!r}={given[name]!r} is not a number"
                )
                raise ModelError(msg) from None
            if not math.isfinite(value):
                msg = f"resolution {self.kind!r}: parameter {name!r}={value!r} is not finite"
                raise ModelError(msg)
            if name in _WIDTHS and value <= 0.0:
                msg = f"resolution {self.kind!r}: width {name!r}={value!r} must be > 0"
                raise ModelError(msg)
            if name in _POSITIVE_SHAPES and value <= 0.0:
                msg = f"resolution {self.kind!r}: shape parameter {name!r}={value!r} must be > 0"
                raise ModelError(msg)
            if name == "frac" and not 0.0 <= value <= 1.0:
                msg = f"resolution {self.kind!r}: fraction 'frac'={value!r} must be in [0, 1]"
                raise ModelError(msg)
            clean[name] = value
        object.__setattr__(self, "params", clean)

    def __hash__(self) -> int:
        return hash((self.kind, tuple(self.params.items())))

    # -- evaluation -----------------------------------------------------------------------

    def density(self, x: ArrayLike) -> NDArray[np.float64]:
        """Normalised density at offsets ``x`` (MeV), vectorised."""
        return _DENSITIES[self.kind](x, **self.params)

    def cdf(self, x: ArrayLike) -> NDArray[np.float64]:
        """Cumulative distribution ∫_{−∞}^x f. Analytic for every kind except
        ``apollonios`` (``scipy.integrate.quad`` per point; slow, meant for checks)."""
        x = np.asarray(x, dtype=float)
        p = self.params
        kind = self.kind
        if kind == "gaussian":
            return special.ndtr(x / p["sigma"])
        if kind == "double_gaussian":
            return p["frac"] * special.ndtr(x / p["sigma1"]) + (1.0 - p["frac"]) * special.ndtr(
                x / p["sigma2"]
            )
        if kind == "student_t":
            return special.stdtr(1.0 + p["n"], x / p["sigma"])  # = scipy.stats.t.cdf
        if kind == "johnson_su":
            return special.ndtr(p["delta"] * np.arcsinh(x / p["lambda_"]))
        if kind == "novosibirsk":
            return _novosibirsk_cdf(x / p["sigma"], p["tau"])
        if kind == "cb2":
            return _cb2_cdf(x / p["sigma"], p["alpha"], p["n"])
        return _apollonios_cdf(x / p["sigma"], p["beta"])

    def sample(self, size: int | tuple[int, ...], rng: np.random.Generator) -> NDArray[np.float64]:
        """Draw offsets from the density (exact samplers, no accept–reject).

        gaussian/double_gaussian: normal (mixture); student_t: ``rng.standard_t``;
        johnson_su: λ sinh(Z/δ); novosibirsk: δ = (e^{τy} − 1)/(Λτ), y ~ N(τ, 1);
        cb2: mixture of truncated-normal core and inverse-CDF power-law tails;
        apollonios: normal variance mixture √W·Z with W ~ GIG(p=1, a=b=β²)
        (``scipy.stats.geninvgauss``), the representation of the hyperbolic distribution.
        """
        p = self.params
        kind = self.kind
        if kind == "gaussian":
            return rng.normal(0.0, p["sigma"], size)
        if kind == "double_gaussian":
            first = rng.random(size) < p["frac"]
            z = rng.standard_normal(size)
            return z * np.where(first, p["sigma1"], p["sigma2"])
        if kind == "student_t":
            return p["sigma"] * rng.standard_t(1.0 + p["n"], size)
        if kind == "johnson_su":
            return p["lambda_"] * np.sinh(rng.standard_normal(size) / p["delta"])
        if kind == "novosibirsk":
            tau = p["tau"]
            if tau == 0.0:
                return rng.normal(0.0, p["sigma"], size)
            y = tau + rng.standard_normal(size)
            return p["sigma"] * np.expm1(tau * y) / (_novosibirsk_lambda(tau) * tau)
        if kind == "cb2":
            return p["sigma"] * _cb2_sample(p["alpha"], p["n"], size, rng)
        beta = p["beta"]
        w = scipy.stats.geninvgauss.rvs(1.0, beta * beta, size=size, random_state=rng)
        return p["sigma"] * np.sqrt(w) * rng.standard_normal(size)

    # -- summaries ------------------------------------------------------------------------

    @cached_property
    def mean(self) -> float:
        """Mean offset (MeV): 0 for the symmetric kinds, analytic for ``novosibirsk``."""
        if self.kind != "novosibirsk":
            return 0.0
        sigma, tau = self.params["sigma"], self.params["tau"]
        if tau == 0.0:
            return 0.0
        return sigma * math.expm1(1.5 * tau * tau) / (_novosibirsk_lambda(tau) * tau)

    @cached_property
    def rms(self) -> float:
        """Standard deviation (MeV) about :attr:`mean`; equals the RMS about 0 for the
        symmetric kinds. ``inf`` where the second moment diverges (student_t with ν ≤ 2,
        cb2 with N = n + 1 ≤ 3).

        Analytic: double Gaussian √(ασ1² + (1−α)σ2²); Apollonios σ√(K2(β²)/K1(β²));
        cb2 core + power-law tail moments; Student σ√(ν/(ν−2)); Johnson SU
        λ√((e^{2/δ²} − 1)/2); Novosibirsk see :func:`novosibirsk_density`. The tests check
        every value against ``scipy.integrate.quad``.
        """
        p = self.params
        kind = self.kind
        if kind == "gaussian":
            return p["sigma"]
        if kind == "double_gaussian":
            return math.sqrt(p["frac"] * p["sigma1"] ** 2 + (1.0 - p["frac"]) * p["sigma2"] ** 2)
        if kind == "apollonios":
            z = p["beta"] ** 2
            return p["sigma"] * math.sqrt(special.kve(2, z) / special.kve(1, z))
        if kind == "cb2":
            return p["sigma"] * _cb2_rms(p["alpha"], p["n"])
        if kind == "student_t":
            nu = 1.0 + p["n"]
            return p["sigma"] * math.sqrt(nu / (nu - 2.0)) if nu > 2.0 else math.inf
        if kind == "johnson_su":
            return p["lambda_"] * math.sqrt(0.5 * math.expm1(2.0 / p["delta"] ** 2))
        sigma, tau = p["sigma"], p["tau"]
        if tau == 0.0:
            return sigma
        lam = _novosibirsk_lambda(tau)
        return (
            sigma * math.exp(1.5 * tau * tau) * math.sqrt(math.expm1(tau * tau)) / (lam * abs(tau))
        )

    @cached_property
    def width_scale(self) -> float:
        """The (largest) width parameter in MeV: sigma, max(sigma1, sigma2) or lambda_."""
        return max(v for k, v in self.params.items() if k in _WIDTHS)

    @cached_property
    def half_width(self) -> float:
        """Offset h (MeV) with ∫_{h}^{∞} f < 1e-7 and ∫_{−∞}^{−h} f < 1e-7 (:data:`TAIL_MASS`).

        Used to size the convolution padding. Capped at 30 × :attr:`width_scale`
        (:data:`HALF_WIDTH_CAP`): heavy-tailed shapes (Student t with small ν, cb2 with small
        n) can leave more than 1e-7 outside the cap; :meth:`tail_mass` reports how much.
        """
        cap = HALF_WIDTH_CAP * self.width_scale

        def excess(h: float) -> float:
            return self.tail_mass(h) - TAIL_MASS

        if excess(cap) > 0.0:
            return cap
        root = scipy.optimize.brentq(excess, 0.0, cap, xtol=1e-10 * cap, rtol=1e-12)
        return min(float(root) * (1.0 + 1e-6), cap)  # step just past the root: tail < 1e-7

    def tail_mass(self, h: float) -> float:
        """max(∫_{h}^{∞} f, ∫_{−∞}^{−h} f): the larger one-sided probability beyond ±|h|."""
        h = abs(float(h))
        p = self.params
        if self.kind == "apollonios":
            return _apollonios_upper_tail(h / p["sigma"], p["beta"])
        if self.kind == "novosibirsk":
            return max(float(self.cdf(-h)), _novosibirsk_sf(h / p["sigma"], p["tau"]))
        return float(self.cdf(-h))  # symmetric kinds: lower tail, no cancellation

    def scaled(self, factor: float) -> Resolution:
        """A copy with every width parameter multiplied by ``factor`` (shape unchanged).

        The "resolution correction factor" systematic of the T_cc+ papers (1.0 and 1.1 instead
        of 1.05; LHCb, Nature Physics 18 (2022) 751, Methods, "Systematic uncertainties").
        """
        factor = float(factor)
        if not (math.isfinite(factor) and factor > 0.0):
            msg = f"resolution scale factor {factor!r} must be finite and > 0"
            raise ModelError(msg)
        new = {k: (v * factor if k in _WIDTHS else v) for k, v in self.params.items()}
        return Resolution(self.kind, new)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form ``{"kind": ..., "params": {...}}`` (for specs and stores)."""
        return {"kind": self.kind, "params": dict(self.params)}


# ---------------------------------------------------------------------------------------
# Helpers: CDFs, samplers and moments
# ---------------------------------------------------------------------------------------


def _novosibirsk_cdf(d: NDArray, tau: float) -> NDArray:
    if tau == 0.0:
        return special.ndtr(d)
    u = _novosibirsk_lambda(tau) * tau * d
    ok = u > -1.0
    y = np.log1p(np.where(ok, u, 0.0)) / tau
    inside = special.ndtr(y - tau)
    outside = 0.0 if tau > 0.0 else 1.0
    return np.where(ok, inside, outside)


def _novosibirsk_sf(d: float, tau: float) -> float:
    """Upper tail 1 − F(d) without cancellation."""
    if tau == 0.0:
        return float(special.ndtr(-d))
    u = _novosibirsk_lambda(tau) * tau * d
    if u <= -1.0:
        return 1.0 if tau > 0.0 else 0.0
    y = math.log1p(u) / tau
    return float(special.ndtr(tau - y))


def _cb2_tail_beyond(t: NDArray, alpha: float, big_n: float) -> NDArray:
    """One-tail mass beyond t ≥ α in σ units: e^{−α²/2} u0 (u0/(u0 + t − α))^{N−1}/(N − 1),
    u0 = N/α (the power law A (B + t)^{−N} integrated, written without overflow)."""
    u0 = big_n / alpha
    ratio = u0 / (u0 + np.maximum(t - alpha, 0.0))
    return (
        math.exp(-0.5 * alpha * alpha) * u0 * np.exp((big_n - 1.0) * np.log(ratio)) / (big_n - 1.0)
    )


def _cb2_cdf(d: NDArray, alpha: float, n: float) -> NDArray:
    core, tail, big_n = _cb2_pieces(alpha, n)
    total = core + 2.0 * tail
    tail_beyond = _cb2_tail_beyond(np.abs(d), alpha, big_n)
    core_part = _SQRT2PI * (special.ndtr(np.clip(d, -alpha, alpha)) - special.ndtr(-alpha))
    lower = np.where(d < -alpha, tail_beyond, tail + core_part)
    upper = total - tail_beyond
    return np.where(d > alpha, upper, lower) / total


def _cb2_sample(alpha: float, n: float, size: Any, rng: np.random.Generator) -> NDArray:
    core, tail, big_n = _cb2_pieces(alpha, n)
    total = core + 2.0 * tail
    u = rng.random(size)
    v = rng.random(size)
    # core: truncated normal by inverse CDF
    lo, hi = special.ndtr(-alpha), special.ndtr(alpha)
    core_x = special.ndtri(lo + (hi - lo) * v)
    # tail: solve (u0/(u0 + t − α))^{N−1} = 1 − v for t ≥ α
    u0 = big_n / alpha
    tail_t = alpha + u0 * np.expm1(-np.log1p(-v) / (big_n - 1.0))
    p_tail = tail / total
    return np.where(u < p_tail, -tail_t, np.where(u < 1.0 - p_tail, core_x, tail_t))


def _cb2_rms(alpha: float, n: float) -> float:
    """σ-units RMS of :func:`cb2_density`; ∞ for N ≤ 3.

    With t = α + w the tail is e^{−α²/2}(1 + w/u0)^{−N}, u0 = N/α, whose moments are
    ∫w^k(1 + w/u0)^{−N} dw = u0^{k+1} k! Γ(N−k−1)/Γ(N).
    """
    core, tail, big_n = _cb2_pieces(alpha, n)
    if big_n <= 3.0:
        return math.inf
    u0 = big_n / alpha
    m0 = u0 / (big_n - 1.0)
    m1 = m0 * u0 / (big_n - 2.0)
    m2 = 2.0 * m1 * u0 / (big_n - 3.0)
    tail_m2 = math.exp(-0.5 * alpha * alpha) * (alpha * alpha * m0 + 2.0 * alpha * m1 + m2)
    core_m2 = core - 2.0 * alpha * math.exp(-0.5 * alpha * alpha)
    return math.sqrt((core_m2 + 2.0 * tail_m2) / (core + 2.0 * tail))


def _apollonios_upper_tail(d: float, beta: float) -> float:
    """∫_d^∞ of the unit-σ Apollonios density (quad)."""
    d = abs(d)
    val, _ = scipy.integrate.quad(
        lambda t: float(apollonios_density(t, 1.0, beta)), d, np.inf, epsabs=0.0, epsrel=1e-10
    )
    return val


def _apollonios_cdf(d: NDArray, beta: float) -> NDArray:
    flat = np.atleast_1d(d).ravel()
    upper = np.array([_apollonios_upper_tail(v, beta) for v in flat])
    out = np.where(flat < 0.0, upper, 1.0 - upper)
    return out.reshape(np.shape(d))


# ---------------------------------------------------------------------------------------
# Tcc+ resolutions
# ---------------------------------------------------------------------------------------

#: σ1 of the Tcc+ double Gaussian before the data/simulation factor (MeV); LHCb, Nature
#: Communications 13 (2022) 3351, Methods, "Resolution model for the D0D0π+ mass"
TCC_SIGMA1_SIM: Final = 0.263
#: σ2/σ1 of the Tcc+ double Gaussian (same source)
TCC_SIGMA_RATIO: Final = 2.413
#: fraction of the narrow Gaussian (same source)
TCC_FRAC: Final = 0.778


def default_tcc_resolution(scale: float = 1.05) -> Resolution:
    """Double-Gaussian resolution of the T_cc+ papers near the D*+D0 threshold.

    LHCb, Nature Communications 13 (2022) 3351, Methods, "Resolution model for the D0D0π+
    mass".

    σ1 = scale × 0.263 MeV, σ2 = 2.413 σ1, narrow fraction 0.778. ``scale`` = 1.05 is the
    data/simulation correction (RMS 397.4 keV); 1.0 and 1.1 are the systematic variations
    (RMS 378.4 and 416.3 keV). Mass independent (our assumption: the paper quotes the
    parameters "in the vicinity of the D*+D0 mass threshold").
    """
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0.0):
        msg = f"default_tcc_resolution: scale={scale!r} must be finite and > 0"
        raise ModelError(msg)
    sigma1 = scale * TCC_SIGMA1_SIM
    return Resolution(
        "double_gaussian",
        {"sigma1": sigma1, "sigma2": TCC_SIGMA_RATIO * sigma1, "frac": TCC_FRAC},
    )


def _central_probability(res: Resolution, half: float) -> float:
    """P(|x| < half) under ``res``."""
    return float(res.cdf(half) - res.cdf(-half))


def _rms_matched(kind: str, shape: Mapping[str, float], rms: float) -> Resolution:
    """Resolution of ``kind`` with the given shape and its width set to give ``rms``."""
    width_name = KINDS[kind][0]
    unit = Resolution(kind, {width_name: 1.0, **shape})
    return Resolution(kind, {width_name: rms / unit.rms, **shape})


def _match_tcc_shape(kind: str) -> dict[str, float]:
    """Derive the shape constants of :data:`TCC_ALTERNATIVE_SHAPES` (documentation/tests).

    Solves for the shape parameter(s) of ``kind`` such that the RMS-matched shape has the
    same P(|x| < σ1) as the default double Gaussian (and, for ``cb2``, also the same
    P(|x| < 2σ1)). Scale independent, since all conditions scale with the widths.
    """
    target = default_tcc_resolution(1.0)
    s1 = target.params["sigma1"]
    p1 = _central_probability(target, s1)
    if kind == "cb2":
        p2 = _central_probability(target, 2.0 * s1)

        def eqs(v: NDArray) -> list[float]:
            res = _rms_matched(kind, {"alpha": v[0], "n": math.exp(v[1])}, target.rms)
            return [_central_probability(res, s1) - p1, _central_probability(res, 2.0 * s1) - p2]

        sol = scipy.optimize.root(eqs, [1.4, math.log(9.0)], tol=1e-13)
        return {"alpha": float(sol.x[0]), "n": float(math.exp(sol.x[1]))}
    name, bracket = {
        "apollonios": ("beta", (0.3, 3.0)),
        "student_t": ("n", (2.0, 10.0)),
        "johnson_su": ("delta", (0.8, 3.0)),
    }[kind]

    def eq(v: float) -> float:
        return _central_probability(_rms_matched(kind, {name: v}, target.rms), s1) - p1

    return {name: float(scipy.optimize.brentq(eq, *bracket, xtol=1e-14, rtol=1e-13))}


#: Shape parameters of the alternative Tcc+ resolutions, derived by ``_match_tcc_shape``
#: (see :func:`tcc_alternative_resolutions`; ``tests/test_resolution.py`` re-derives them).
TCC_ALTERNATIVE_SHAPES: Final[Mapping[str, Mapping[str, float]]] = {
    "apollonios": {"beta": 0.7551342629},
    "cb2": {"alpha": 1.406638620, "n": 8.389224694},
    "student_t": {"n": 3.468603701},
    "johnson_su": {"delta": 1.462159261},
}


def tcc_alternative_resolutions(
    scale: float = 1.05, *, novosibirsk_tau: float = 0.0
) -> dict[str, Resolution]:
    """The five alternative resolution shapes of the T_cc+ resolution systematic.

    LHCb, Nature Physics 18 (2022) 751 and Nature Communications 13 (2022) 3351 (Methods,
    "Systematic uncertainties") fit these shapes to simulation, which we do not have; our stand-in
    for the simulation is the default double Gaussian (:func:`default_tcc_resolution` at the same
    ``scale``), itself a fit to that simulation. Every alternative has exactly the same RMS
    (397.4 keV at scale 1.05); the remaining shape parameters are our choice, as follows:

    - ``apollonios`` (β = 0.755), ``student_t`` (n = 3.469, ν = 4.469) and ``johnson_su``
      (δ = 1.462): the same probability within ±σ1 as the double Gaussian,
      P(|x| < σ1) = 0.6025, i.e. an equally peaked core (a Gaussian of the same RMS has
      0.513).
    - ``cb2`` (α = 1.407, n = 8.389): additionally the same P(|x| < 2σ1) = 0.8742, which
      fixes the power-law tail. (Matching P(|x| < 3σ1) instead drives n to ≈ 276, i.e.
      exponential tails, so the 2σ1 point was preferred.)
    - ``novosibirsk``: the one asymmetric family; its formula pins the *mode* at 0. Matching
      P(|x| < σ1) would need τ = 0.44, which moves the mean by +217 keV (3.5 × the
      statistical error on δm_BW and ≈ 40 × the paper's total systematic of 5 keV), so it
      cannot be what a fit to near-symmetric simulation gave. A maximum-likelihood fit of
      the Novosibirsk to the symmetric double Gaussian converges to τ = 0 (checked in the
      tests), i.e. the RMS-matched Gaussian; that is the default. ``novosibirsk_tau``
      selects an asymmetric variant (σ is re-set to keep the RMS; the mean offset is then
      :attr:`Resolution.mean` ≠ 0).

    The shape constants live in :data:`TCC_ALTERNATIVE_SHAPES`; the widths follow from the
    analytic RMS, so the RMS condition holds to rounding at every ``scale``.

    Returns
    -------
    dict
        ``{"apollonios", "cb2", "student_t", "johnson_su", "novosibirsk"}`` → Resolution.
    """
    target = default_tcc_resolution(scale)
    out = {
        kind: _rms_matched(kind, shape, target.rms)
        for kind, shape in TCC_ALTERNATIVE_SHAPES.items()
    }
    tau = float(novosibirsk_tau)
    if not math.isfinite(tau):
        msg = f"tcc_alternative_resolutions: novosibirsk_tau={tau!r} must be finite"
        raise ModelError(msg)
    out["novosibirsk"] = _rms_matched("novosibirsk", {"tau": tau}, target.rms)
    return out
