"""Dalitz lineshapes and components against independent evaluations (LHCb, Eur. Phys. J. C 78 (2018)
1019, Eqs. (5)–(10)): Blatt–Weisskopf polynomials, Zemach factors vs Legendre polynomials in
the helicity angle, RBW and LASS against direct complex-arithmetic transcriptions, unit
normalisation against scipy quad, fit fractions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import eval_legendre

from toyengine.core.dalitz.dalitz_plot import DalitzKinematics, Vetoes
from toyengine.core.dalitz.maps import SDPHistogram
from toyengine.core.dalitz.model import Component, DalitzModel, RunSpec
from toyengine.core.dalitz.resonances import Lineshape, blatt_weisskopf_d, legendre, zemach_radial
from toyengine.core.params import Parameter, ParameterSet
from toyengine.errors import ModelError
from toyengine.models.zc4100 import build_zc4100

KIN = DalitzKinematics()


@pytest.fixture(scope="module")
def nominal():
    return build_zc4100({"maps": "synthetic", "extra": ["kst3_1780", "kst4_2045"],
                         "swave": "lass_split"})


def test_blatt_weisskopf_table() -> None:
    z = np.array([0.0, 0.3, 1.163, 2.5, 3.83])
    table = {0: np.ones_like(z), 1: 1 + z**2, 2: z**4 + 3 * z**2 + 9,
             3: z**6 + 6 * z**4 + 45 * z**2 + 225,
             4: z**8 + 10 * z**6 + 135 * z**4 + 1575 * z**2 + 11025}
    for L, ref in table.items():
        np.testing.assert_allclose(blatt_weisskopf_d(z, L), ref, rtol=1e-14)
    with pytest.raises(ModelError):
        blatt_weisskopf_d(z, 7)


def test_zemach_table_and_legendre() -> None:
    c = np.linspace(-1, 1, 11)
    p, q = 1.3, 0.4
    for L in range(6):
        np.testing.assert_allclose(legendre(c, L), eval_legendre(L, c), atol=1e-14)
    table = {0: np.ones_like(c), 1: -2 * p * q * c,
             2: 4 / 3 * (p * q) ** 2 * (3 * c**2 - 1),
             3: -24 / 15 * (p * q) ** 3 * (5 * c**3 - 3 * c),
             4: 16 / 35 * (p * q) ** 4 * (35 * c**4 - 30 * c**2 + 3)}
    for L, ref in table.items():  # Zemach factors (Laura++ ``Zemach_P``)
        np.testing.assert_allclose(zemach_radial(p, q, L) * legendre(c, L), ref, atol=1e-13)


@pytest.mark.parametrize("name, spin", [("kst892", 1), ("kst2_1430", 2), ("kst3_1780", 3),
                                        ("kst4_2045", 4), ("lass", 0), ("zc", 1)])
def test_spin_factor_is_legendre_in_helicity_angle(nominal, name: str, spin: int) -> None:
    """At fixed pair mass, F ∝ P_L(cos θ) (the Zemach factor, C. Zemach, Phys. Rev. 133
    (1964) B1201)."""
    j = nominal.component_names.index(name)
    pair = nominal.components[j].pair
    lo, hi = KIN.mass_range(pair)
    m = lo + 0.43 * (hi - lo)
    cos = np.array([-0.93, -0.66, -0.45, -0.2, 0.15, 0.42, 0.68, 0.92])  # no zeros of P_L
    x, y = KIN.y_from_pair(pair, np.full_like(cos, m), cos)
    F = nominal.component_values(nominal.parameters.values, x, y)[:, j]
    # cos θ recomputed from the invariants (checked against boosted four-vectors in
    # test_dalitz_kinematics.py)
    cos_check = KIN.pair_variables(pair, x, y).cos
    np.testing.assert_allclose(cos_check, cos, atol=1e-10)
    ratio = F / eval_legendre(spin, cos)
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def _rbw_direct(m, m0, w0, L, r, m1, m2, mb, mparent):
    """Eur. Phys. J. C 78 (2018) 1019, Eqs. (6)–(8), written out: X(p r) X(q r) Z T with complex
    arithmetic."""
    def mom(M, a, b):
        return np.sqrt((M**2 - (a + b) ** 2) * (M**2 - (a - b) ** 2) + 0j).real / (2 * M)

    q = mom(m, m1, m2)
    q0 = mom(m0, m1, m2)
    p = np.sqrt((mparent**2 - (m + mb) ** 2) * (mparent**2 - (m - mb) ** 2)) / (2 * m)
    d = {0: lambda z: 1.0, 1: lambda z: 1 + z**2, 2: lambda z: z**4 + 3 * z**2 + 9}[L]
    xq2 = d(q0 * r) / d(q * r)
    gamma = w0 * (q / q0) ** (2 * L + 1) * (m0 / m) * xq2
    t = 1.0 / (m0**2 - m**2 - 1j * m0 * gamma)
    xp = 1.0 / np.sqrt(d(p * r))  # production barrier up to a constant
    z = (-2 * p * q) ** L * math.factorial(L) / {0: 1, 1: 1, 2: 3}[L]
    return xp * np.sqrt(xq2) * z * t


@pytest.mark.parametrize("L, m0, w0", [(0, 1.945, 0.201), (1, 0.89555, 0.0473),
                                       (2, 1.4324, 0.109)])
def test_rbw_against_direct_formula(L: int, m0: float, w0: float) -> None:
    ls = Lineshape("rbw", "kpi", L, 4.0)
    lo, hi = KIN.mass_range("kpi")
    m = np.linspace(lo + 1e-3, hi - 1e-3, 300)
    q, p = KIN.pair_momenta("kpi", m)
    g = ls.evaluate(KIN, ls.geometry(KIN, m, q, p), (m0 * 1e3, w0 * 1e3))
    ref = _rbw_direct(m, m0, w0, L, 4.0, KIN.m_k, KIN.m_pi, KIN.m_etac, KIN.m_parent)
    ratio = g / ref
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-11)  # equal up to a constant
    # at the pole Γ(m0) = Γ0: T(m0) = i/(m0 Γ0)
    q0, p0 = KIN.pair_momenta("kpi", np.array([m0]))
    t0 = ls.evaluate(KIN, ls.geometry(KIN, np.array([m0]), q0, p0), (m0 * 1e3, w0 * 1e3))
    base0 = zemach_radial(p0, q0, L) / np.sqrt(blatt_weisskopf_d(p0 * 4.0, L))
    np.testing.assert_allclose(t0 / base0, 1j / (m0 * w0), rtol=1e-12)


def test_lass_against_direct_formula() -> None:
    m0, w0, a, r, cut = 1.427, 0.256, 3.1, 7.0, 1.7
    lo, hi = KIN.mass_range("kpi")
    m = np.linspace(lo + 1e-3, hi - 1e-3, 400)
    q, p = KIN.pair_momenta("kpi", m)
    q0 = KIN.pair_momenta("kpi", np.array([m0]))[0][0]
    cot = 1 / (a * q) + 0.5 * r * q  # Eq. 10
    delta = np.arctan2(1.0, cot)
    nr = np.where(m <= cut, m / (q * cot - 1j * q), 0)  # Eq. 9, first term, zero above 1.7
    bw = np.exp(2j * delta) * m0 * w0 * (m0 / q0) / (
        m0**2 - m**2 - 1j * m0 * w0 * (q / m) * (m0 / q0))
    vals = (m0 * 1e3, w0 * 1e3, a, r)
    for kind, ref in (("lass", nr + bw), ("lass_nr", nr), ("lass_bw", bw)):
        ls = Lineshape(kind, "kpi", 0, 4.0, cut)
        g = ls.evaluate(KIN, ls.geometry(KIN, m, q, p), vals if kind != "lass_nr" else (a, r))
        np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-14)
    # the slowly varying term has phase δ_B below the cut-off
    below = m < cut
    np.testing.assert_allclose(np.angle(nr[below]), delta[below], atol=1e-12)


def _norm_integral(model, j: int) -> float:
    """∫|F_j|² dm²(K+π−) dm²(ηc π−) by scipy quad over the pair mass squared and a 24-point
    Gauss–Legendre rule in cos θ (exact: |P_L|² is a polynomial of degree ≤ 8)."""
    c = model.components[j]
    lo, hi = KIN.mass_range(c.pair)
    u, w = np.polynomial.legendre.leggauss(24)
    x0 = model.parameters.values

    def inner(s: float) -> float:
        m = math.sqrt(s)
        q, p = KIN.pair_momenta(c.pair, np.array([m]))
        x, y = KIN.y_from_pair(c.pair, np.full(u.size, m), u)
        F = model.component_values(x0, x, y)[:, j]
        return float(np.sum(w * np.abs(F) ** 2) * 2 * p[0] * q[0])

    pts = []
    for pi_ in model._p_idx[j][:1]:
        m0 = x0[pi_] / 1000.0
        if lo < m0 < hi:
            pts.append(m0 * m0)
    if c.lineshape.kind in ("lass", "lass_nr"):
        pts.append(c.lineshape.cutoff**2)
    val, _ = quad(inner, lo**2, hi**2, points=pts or None, limit=500, epsabs=0,
                    epsrel=1e-10)
    return val


@pytest.mark.parametrize(("ls", "values"), [
    (Lineshape("rbw", "etacpi", 1), (4096.0, 152.0)),
    (Lineshape("rbw", "etacpi", 0, radius=3.0), (4200.0, 40.0)),
    (Lineshape("rbw", "kpi", 2), (1432.4, 109.0)),
    (Lineshape("lass", "kpi"), (1425.0, 270.0, 3.83, 2.86)),
    (Lineshape("lass_bw", "kpi"), (1425.0, 270.0, 3.83, 2.86)),
    (Lineshape("lass_nr", "kpi"), (3.83, 2.86)),
])
def test_lineshape_derivatives_against_finite_differences(ls: Lineshape, values) -> None:
    """``Lineshape.derivatives`` (all parameters, and each alone) against central
    differences of ``evaluate``. With h = 1e-5 of the value the truncation error
    (h² times the third derivative / 6, g varying on the scale of the width, >= 40 MeV) is
    < 1e-6 of max |dg| and rounding ~ 1e-16/1e-5 |g|/|dg| < 1e-9: the bound 1e-5 leaves a
    margin and still catches a wrong term (a missing q0 or Blatt-Weisskopf pole term is
    > 1e-3 of max |dg|)."""
    lo, hi = KIN.mass_range(ls.pair)
    m = np.linspace(lo + 1e-3, hi - 1e-3, 400)
    q, p = KIN.pair_momenta(ls.pair, m)
    geom = ls.geometry(KIN, m, q, p)
    g = ls.evaluate(KIN, geom, values)
    d = ls.derivatives(KIN, geom, values, g)
    for k in range(len(values)):
        h = 1e-5 * abs(values[k])
        up, dn = list(values), list(values)
        up[k] += h
        dn[k] -= h
        num = (ls.evaluate(KIN, geom, tuple(up)) - ls.evaluate(KIN, geom, tuple(dn))) / (2 * h)
        assert np.max(np.abs(d[k] - num)) < 1e-5 * np.max(np.abs(num)), k
        np.testing.assert_array_equal(ls.derivatives(KIN, geom, values, g, [k])[0], d[k])


@pytest.mark.parametrize("name", ["kst892", "kst1410", "lass", "lass_nr", "kst2_1430",
                                  "kst4_2045", "kst0_1950", "zc"])
def test_components_unit_normalised(nominal, name: str) -> None:
    j = nominal.component_names.index(name)
    assert _norm_integral(nominal, j) == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("name", ["lass", "nr"])
def test_default_swave_components_unit_normalised(name: str) -> None:
    m = build_zc4100({"maps": "synthetic"})  # one LASS amplitude + flat NR
    j = m.component_names.index(name)
    assert _norm_integral(m, j) == pytest.approx(1.0, abs=1e-7)


def test_zc_spin_two_and_narrow_width_normalised() -> None:
    m = build_zc4100({"maps": "synthetic", "zc_spin": 2, "zc_width": 40.0, "zc_mass": 3600.0})
    assert _norm_integral(m, m.component_names.index("zc")) == pytest.approx(1.0, abs=1e-6)


def _single_component_model() -> DalitzModel:
    flat = SDPHistogram.from_function(lambda a, b: 1.0 + 0 * a * b, 5, 5, "efficiency")
    params = ParameterSet((Parameter("re_k", 1.0, fixed=True), Parameter("im_k", 0.0, fixed=True),
                           Parameter("m_k", 895.55, fixed=True), Parameter("w_k", 47.3, fixed=True),
                           Parameter("n_sig", 100.0, fixed=True)))
    comp = Component("k", Lineshape("rbw", "kpi", 1, 4.0), ("m_k", "w_k"))
    return DalitzModel(KIN, [comp], params, [RunSpec("run", flat, "n_sig")], Vetoes())


def test_single_component_fit_fraction_is_one() -> None:
    ff = _single_component_model().fit_fractions()
    assert ff["ff"]["k"] == pytest.approx(1.0, abs=1e-12)


def test_fit_fractions_sum_to_one(nominal) -> None:
    res = nominal.fit_fractions()
    mat = res["matrix"]
    total = np.sum(np.triu(mat))
    assert total == pytest.approx(1.0, abs=1e-12)
    # with unit-normalised components FF_i = |c_i|²/∫|A|²: the FF grid and the 1-D
    # normalisation agree (diagonal of the full-DP matrix = 1)
    st_M = nominal._ff_grid()
    from toyengine.core.dalitz.state import _State

    st = _State(nominal, st_M)
    st.update(nominal.parameters.values)
    np.testing.assert_allclose(np.diag(st.N[0]).real, 1.0, atol=2e-6)
    assert res["ff"]["kst892"] > 0.4  # K*(892) dominant (the illustrative coefficients)


def test_bad_resonance_masses() -> None:
    with pytest.raises(ModelError, match="pole mass"):
        Lineshape("rbw", "kpi", 1).check_values(KIN, (600.0, 50.0), "k")  # below Kπ threshold
    with pytest.raises(ModelError, match="pole mass"):
        Lineshape("rbw", "etacpi", 1).check_values(KIN, (6000.0, 50.0), "zc")  # above B mass
    with pytest.raises(ModelError, match="width"):
        Lineshape("rbw", "kpi", 1).check_values(KIN, (900.0, -1.0), "k")
    with pytest.raises(ModelError, match="spin"):
        Lineshape("lass", "kpi", 1)
    # a resonance above the kinematic limit (but below the B mass) is allowed (K*5(2380))
    Lineshape("rbw", "kpi", 4).check_values(KIN, (2380.0, 180.0), "k5")
