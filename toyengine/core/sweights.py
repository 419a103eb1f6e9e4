"""sPlot weights and the covariance of a fit to sWeighted data.

The sPlot technique (Pivk & Le Diberder, Nucl. Instrum. Meth. A 555 (2005) 356) unfolds the
distribution of a control variable t for one component of a sample from an extended fit in
discriminating variables m, in which the components' shapes g_k(m) are known and only their
yields N_k are fitted. With g_tot(m) = Σ_j N_j g_j(m) and

    W_kl = Σ_e g_k(m_e) g_l(m_e) / g_tot(m_e)²,   A = W⁻¹,

the sWeight of event e for component k is w_k(e) = Σ_l A_kl g_l(m_e) / g_tot(m_e) (the
"summation" estimate of W; Dembinski, Kenzie, Langenbruch & Schmelling, Nucl. Instrum. Meth.
A 1040 (2022) 167270). Σ_e w_k(e) = N_k at the fitted yields.

A maximum-likelihood fit of a shape h(t; θ) to the weighted events (score equation Σ_e w_e
∂ ln h(t_e; θ)/∂θ = 0) is consistent when the components factorise in (m, t), but the inverse
of its weighted Hessian is not its covariance. With

    H = −Σ_e w_e ∂² ln h_e,   H' = Σ_e w_e² (∂ ln h_e)(∂ ln h_e)ᵀ,
    E_{i,(xy)} = Σ_e ∂w_e/∂W_xy · ∂_i ln h_e,   C_{(xy),(x'y')} = Σ_e g_x g_y g_x' g_y' / g_tot⁴,

((xy) over the independent elements of the symmetric W) Langenbruch, Eur. Phys. J. C 82 (2022)
393 (arXiv:2112.04574), Eq. (51), gives V = H⁻¹ H' H⁻¹ − H⁻¹ E C Eᵀ H⁻¹ for sWeights whose W
is estimated from the sample at known yields (``known_yields``). When the yields are fitted
to the same sample as well (the usual sPlot), their fluctuation adds variance back: the
asymptotically correct covariance (``corrected``) is then the sandwich B⁻¹ M B⁻ᵀ of the stacked
per-event estimating equations of yields, W and θ (M-estimation, Huber, Proc. Fifth Berkeley
Symp. 1 (1967) 221), of which Eq. (51) is the known-yield case. The first-order term
H⁻¹ H' H⁻¹ alone (``sandwich``, weights treated as known) is close to it for fitted yields and
overestimates for known ones; H⁻¹ alone (``naive``) and the sum-of-weights-squared error
H⁻¹ H₂ H⁻¹ with H₂ = −Σ w_e² ∂² ln h_e (RooFit's ``SumW2Error``, ``sumw2``) undercover.

Custom orthogonal weight functions (COWs; Dembinski, Kenzie, Langenbruch & Schmelling,
Nucl. Instrum. Meth. A 1040 (2022) 167270, Sect. 3) replace g_tot by a fixed, positive
variance function I(m) and the sum by an integral over the discriminant range:

    W_kl = ∫ g_k(m) g_l(m) / I(m) dm,   A = W⁻¹,   w_k(m) = Σ_l A_kl g_l(m) / I(m).

Their weights are fixed functions of m, unbiased for any such I (the sPlot choice
I = g_tot/N is the one of minimal variance); nothing is fitted to the sample, so the
sandwich H⁻¹ H' H⁻¹ is their asymptotically correct covariance (the correction terms above
come only from estimating W and the yields on the sample).
:func:`cows` takes W precomputed (the integral does not depend on the sample).

The check against the ``sweights`` package (the authors' implementation of the two papers
above) is ``tests/test_sweights.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ModelError

__all__ = ["SPlot", "WeightedCovariance", "cows", "fit_yields", "splot", "w_pairs",
           "weighted_covariance"]


@dataclass(frozen=True)
class SPlot:
    """sWeights of every component.

    Attributes
    ----------
    weights : ndarray, shape (n_events, n_components)
        ``weights[e, k]`` = w_k(e).
    yields : ndarray, shape (n_components,)
        The yields the weights were computed at (COWs: Σ_e w_k(e), their yield estimate).
    W, A : ndarray, shape (n_components, n_components)
        W_kl = Σ_e g_k g_l / g_tot² (COWs: ∫ g_k g_l / I dm) and its inverse.
    g, g_tot : ndarray
        The discriminant densities ``(n_events, n_components)`` and Σ_j N_j g_j per event
        (COWs: I(m) per event).
    method : str
        ``"splot"`` (classic sWeights, :func:`splot`) or ``"cows"`` (:func:`cows`).
    """

    weights: np.ndarray
    yields: np.ndarray
    W: np.ndarray
    A: np.ndarray
    g: np.ndarray
    g_tot: np.ndarray
    method: str = "splot"

    def dw_dW(self, component: int) -> np.ndarray:
        """∂w_component(e)/∂W_xy for the independent elements (x ≥ y, in the order (0,0),
        (1,0), (1,1), (2,0), … of :func:`w_pairs`): shape ``(n_events, n_pairs)``.

        With w = (A g)_c / g_tot and ∂A/∂W_xy = −A S_xy A, S_xy the symmetric unit matrix
        of the element (x, y)."""
        k = self.A.shape[0]
        ag = self.g @ self.A.T  # (n, k): (A g)_l per event
        out = []
        for x, y in w_pairs(k):
            s = np.zeros((k, k))
            s[x, y] = s[y, x] = 1.0
            out.append(-(self.A[component] @ s) @ ag.T / self.g_tot)
        return np.stack(out, axis=1)

    def c_matrix(self) -> np.ndarray:
        """C_{(xy),(x'y')} = Σ_e g_x g_y g_x' g_y' / g_tot⁴ over the pairs of :func:`w_pairs`."""
        k = self.A.shape[0]
        prod = np.stack([self.g[:, x] * self.g[:, y] for x, y in w_pairs(k)], axis=1)
        prod = prod / self.g_tot[:, None] ** 2
        return prod.T @ prod


def w_pairs(k: int) -> list[tuple[int, int]]:
    """The independent elements (x, y), x ≥ y, of a symmetric k × k matrix, row by row."""
    return [(x, y) for x in range(k) for y in range(x + 1)]


def _check_g(g: np.ndarray) -> np.ndarray:
    g = np.asarray(g, dtype=float)
    if g.ndim != 2 or g.shape[1] < 2:
        msg = f"discriminant densities must have shape (n_events, n_components >= 2), got {g.shape}"
        raise ModelError(msg)
    if not np.all(np.isfinite(g)) or np.any(g < 0):
        msg = "discriminant densities must be finite and non-negative"
        raise ModelError(msg)
    return g


def fit_yields(g: np.ndarray, start: np.ndarray | None = None, *, tol: float = 1e-10,
               max_iter: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Extended maximum-likelihood yields of components with known normalised densities.

    Minimises −ln L = Σ_j N_j − Σ_e ln Σ_j N_j g_j(m_e): expectation-maximisation steps
    N_j ← Σ_e N_j g_je / g_tot,e (monotone; their fixed point has Σ N_j = n) polished by
    Newton steps with the Hessian Σ_e g_j g_k / g_tot². Yields stay ≥ 0.

    Parameters
    ----------
    g : ndarray, shape (n_events, n_components)
        g_j(m_e), each normalised over the discriminant range.
    start : ndarray, optional
        Starting yields (default: equal shares of n).

    Returns
    -------
    yields : ndarray, shape (n_components,)
    covariance : ndarray, shape (n_components, n_components)
        Inverse of the Hessian of −ln L at the minimum.
    """
    g = _check_g(g)
    n, k = g.shape
    nj = np.full(k, n / k) if start is None else np.asarray(start, dtype=float).copy()
    for _ in range(50):  # EM: robust start for Newton
        nj = nj * (g / (g @ nj)[:, None]).sum(axis=0)
    for _ in range(max_iter):
        tot = g @ nj
        grad = 1.0 - (g / tot[:, None]).sum(axis=0)
        hess = (g / tot[:, None]).T @ (g / tot[:, None])
        step = np.linalg.solve(hess, grad)
        new = nj - step
        if np.any(new < 0):  # fall back to an EM step at the boundary
            new = nj * (g / tot[:, None]).sum(axis=0)
        done = np.max(np.abs(new - nj)) < tol * max(1.0, float(np.max(np.abs(nj))))
        nj = new
        if done:
            break
    tot = g @ nj
    hess = (g / tot[:, None]).T @ (g / tot[:, None])
    return nj, np.linalg.inv(hess)


def splot(g: np.ndarray, yields: np.ndarray) -> SPlot:
    """Classic sWeights (summation estimate of W) of every component; see module doc.

    Parameters
    ----------
    g : ndarray, shape (n_events, n_components)
        Normalised discriminant densities per event.
    yields : ndarray, shape (n_components,)
        The fitted yields (:func:`fit_yields`).
    """
    g = _check_g(g)
    yields = np.asarray(yields, dtype=float)
    if yields.shape != (g.shape[1],):
        msg = f"yields must have shape ({g.shape[1]},), got {yields.shape}"
        raise ModelError(msg)
    tot = g @ yields
    if np.any(tot <= 0):
        msg = "an event has zero total density: the discriminant shapes do not cover it"
        raise ModelError(msg)
    r = g / tot[:, None]
    w_mat = r.T @ r
    a = np.linalg.inv(w_mat)
    return SPlot(r @ a.T, yields, w_mat, a, g, tot)


def cows(g: np.ndarray, w_matrix: np.ndarray, norm: np.ndarray | None = None) -> SPlot:
    """Custom orthogonal weight functions of every component (see module doc).

    Parameters
    ----------
    g : ndarray, shape (n_events, n_components)
        Normalised discriminant densities per event.
    w_matrix : ndarray, shape (n_components, n_components)
        W_kl = ∫ g_k g_l / I dm over the discriminant range (symmetric, positive definite).
    norm : ndarray, shape (n_events,), optional
        I(m) per event (default 1: the uniform variance function).
    """
    g = _check_g(g)
    w_matrix = np.asarray(w_matrix, dtype=float)
    k = g.shape[1]
    if w_matrix.shape != (k, k) or not np.allclose(w_matrix, w_matrix.T, rtol=1e-12):
        msg = f"W must be a symmetric ({k}, {k}) matrix, got shape {w_matrix.shape}"
        raise ModelError(msg)
    norm = np.ones(g.shape[0]) if norm is None else np.asarray(norm, dtype=float)
    if norm.shape != (g.shape[0],) or not np.all(norm > 0):
        msg = "the variance function I(m) must be positive at every event"
        raise ModelError(msg)
    try:
        a = np.linalg.inv(w_matrix)
    except np.linalg.LinAlgError:
        msg = "W of the COWs is singular: two components have the same discriminant shapes"
        raise ModelError(msg) from None
    weights = (g @ a.T) / norm[:, None]
    return SPlot(weights, weights.sum(axis=0), w_matrix, a, g, norm, "cows")


@dataclass(frozen=True)
class WeightedCovariance:
    """Covariances of a fit to weighted data (see module doc).

    Attributes
    ----------
    naive : ndarray
        H⁻¹, the inverse weighted Hessian.
    sumw2 : ndarray
        H⁻¹ H₂ H⁻¹ with the w²-weighted Hessian H₂.
    sandwich : ndarray
        H⁻¹ H' H⁻¹ (weights treated as known).
    corrected : ndarray
        The asymptotically correct covariance: the stacked sandwich of the yield, W and θ
        estimating equations (yields fitted to the same sample); equals ``sandwich`` when no
        :class:`SPlot` is given.
    known_yields : ndarray or None
        Langenbruch, Eur. Phys. J. C 82 (2022) 393, Eq. (51): W estimated, yields known.
    """

    naive: np.ndarray
    sumw2: np.ndarray
    sandwich: np.ndarray
    corrected: np.ndarray
    known_yields: np.ndarray | None = None


def _stacked_covariance(sp: SPlot, component: int, w: np.ndarray, s: np.ndarray,
                        hessian: np.ndarray, e: np.ndarray) -> np.ndarray:
    """θ block of the sandwich B⁻¹ M B⁻ᵀ of the stacked estimating equations of the yields
    (Σ_e g_j/g_tot − 1 = 0), the independent elements of W (Σ_e g_x g_y/g_tot² − W_xy = 0)
    and θ (Σ_e w_e s_e − ∂ν/∂θ = 0, ν the expected count of an extended fit, else 0) — the
    M-estimator covariance (Huber, Proc. Fifth Berkeley Symp. 1 (1967) 221) for a Poisson
    number of events, of which Langenbruch, Eur. Phys. J. C 82 (2022) 393, Eq. (51) is the
    known-yield case."""
    g, tot = sp.g, sp.g_tot
    k = g.shape[1]
    pairs = w_pairs(k)
    npr, p = len(pairs), s.shape[1]
    r = g / tot[:, None]
    gg = np.stack([r[:, x] * r[:, y] for x, y in pairs], axis=1)  # (n, npr)
    # per-event terms of the estimating equations; their constant parts (−1, −W_xy, −∂ν)
    # do not enter M: the events are a Poisson process (extended fits), whose sums Σ φ(x_e)
    # have covariance Σ φ φᵀ (Campbell's theorem)
    psi = np.concatenate([r, gg, w[:, None] * s], axis=1)
    d = k + npr + p
    b = np.zeros((d, d))
    b[:k, :k] = -r.T @ r
    b[k:k + npr, :k] = -2.0 * gg.T @ r
    b[k:k + npr, k:k + npr] = -np.eye(npr)
    b[k + npr:, :k] = -(s * w[:, None]).T @ r  # ∂w/∂N_j = −w g_j/g_tot (A held fixed)
    b[k + npr:, k:k + npr] = e
    b[k + npr:, k + npr:] = -np.atleast_2d(hessian)
    b_inv = np.linalg.inv(b)
    v = b_inv @ (psi.T @ psi) @ b_inv.T
    return v[k + npr:, k + npr:]


def weighted_covariance(weights: np.ndarray, scores: np.ndarray, hessian: np.ndarray,
                        hessian_w2: np.ndarray | None = None, sp: SPlot | None = None,
                        component: int = 0) -> WeightedCovariance:
    """Covariances of the weighted maximum-likelihood estimate θ̂ (see module doc).

    Parameters
    ----------
    weights : ndarray, shape (n_events,)
        The weights w_e the fit used.
    scores : ndarray, shape (n_events, n_params)
        ∂ ln h(t_e; θ)/∂θ at θ̂.
    hessian : ndarray, shape (n_params, n_params)
        H = −Σ_e w_e ∂² ln h_e at θ̂ (the weighted fit's Hessian).
    hessian_w2 : ndarray, optional
        H₂ = −Σ_e w_e² ∂² ln h_e (for ``sumw2``; default: Σ w² s sᵀ, its expectation).
    sp : SPlot, optional
        The sWeights the weights are column ``component`` of: gives ``corrected`` (W and
        the yields estimated from the sample) and ``known_yields`` (Langenbruch, Eur. Phys.
        J. C 82 (2022) 393, Eq. (51)). COWs (``sp.method == "cows"``) are fixed functions
        of m: both are then the sandwich.
    component : int
        The component of ``sp`` that was fitted.
    """
    w = np.asarray(weights, dtype=float)
    s = np.atleast_2d(np.asarray(scores, dtype=float).T).T
    if s.shape[0] != w.shape[0]:
        msg = f"scores have {s.shape[0]} events, weights {w.shape[0]}"
        raise ModelError(msg)
    h_inv = np.linalg.inv(np.atleast_2d(hessian))
    hp = (s * (w**2)[:, None]).T @ s
    h2 = hp if hessian_w2 is None else np.atleast_2d(hessian_w2)
    sandwich = h_inv @ hp @ h_inv.T
    corrected, known = sandwich, None
    if sp is not None and sp.method == "cows":
        known = sandwich
    elif sp is not None:
        e = s.T @ sp.dw_dW(component)  # (n_params, n_pairs)
        known = sandwich - h_inv @ (e @ sp.c_matrix() @ e.T) @ h_inv.T
        corrected = _stacked_covariance(sp, component, w, s, hessian, e)
    return WeightedCovariance(h_inv, h_inv @ h2 @ h_inv.T, sandwich, corrected, known)
