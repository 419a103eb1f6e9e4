"""The Zc(4100) Dalitz model: ToyModel protocol, builder options, normalisation accuracy,
PDF normalisation, likelihood gradient, generator against PDF, data handling, GoF helper."""

from __future__ import annotations

import types

import numpy as np
import pytest

from toyengine.core.dalitz import DalitzData, RunSample, adaptive_chi2
from toyengine.core.dalitz.dalitz_plot import DalitzKinematics, Vetoes
from toyengine.core.dalitz.integration import RowGrid, refined_row_points
from toyengine.core.dalitz.maps import SDPHistogram
from toyengine.core.dalitz.model import Component, DalitzModel, RunSpec
from toyengine.core.dalitz.resonances import Lineshape
from toyengine.core.params import Parameter, ParameterSet
from toyengine.errors import ModelError
from toyengine.models.zc4100 import build_zc4100


@pytest.fixture(scope="module")
def nominal():
    return build_zc4100({"maps": "synthetic"})


@pytest.fixture(scope="module")
def data(nominal):
    return nominal.sample(nominal.parameters.values, np.random.default_rng(11))


def _fine_grid(model, **kw) -> RowGrid:
    """Independent, much finer rule with panel edges at the efficiency-spline knots."""
    x = model.parameters.values
    knots = list(model.kin.m_from_mprime(model.runs[0].efficiency.centres[0]))
    opts = {"n_m": 8, "du": 0.004, "n_t": 16, "t_panels": 40, **kw}
    return RowGrid.build(model.kin, model.vetoes, breaks=[*model._breaks(x).get("kpi", ()),
                                                          *knots], **opts)


# --- protocol and builder -------------------------------------------------------------
def test_toymodel_protocol(nominal, data) -> None:
    p = nominal.parameters
    assert isinstance(p, ParameterSet)
    for name in ("m_zc", "w_zc", "re_zc", "im_zc", "n_sig_run1", "n_nr_run2", "a_lass"):
        assert name in p
    assert p["re_kst892"].fixed and p["im_kst892"].fixed
    assert not p["m_zc"].fixed and p["m_lass"].constraint is not None
    # yields fixed by default (Eur. Phys. J. C 78 (2018) 1019, Sect. 6)
    assert p["n_sig_run1"].fixed
    assert set(data.runs) == {"run1", "run2"}
    # Poisson yields around 950 + 300 + 250 (run 1): within 5σ
    n1 = len(data["run1"])
    assert abs(n1 - 1500) < 5 * np.sqrt(1500)
    nll = nominal.nll(data)
    v = nll(p.values)
    assert np.isfinite(v)
    assert nll.grad(p.values).shape == p.values.shape
    base = build_zc4100({"maps": "synthetic", "hypothesis": "baseline"})
    assert "m_zc" not in base.parameters and "zc" not in base.component_names
    assert np.isfinite(base.nll(data)(base.parameters.values))


def test_model_provides_the_view_its_likelihood_reads(nominal) -> None:
    """nll, state and space annotate against DalitzModelView (so they never import the model):
    every attribute the view declares exists on a built model, with the declared kind."""
    from toyengine.core.dalitz.normalisation import _NormGrid
    from toyengine.core.dalitz.protocol import DalitzModelView

    # the protocol's own members (typing.get_protocol_members needs Python 3.13)
    declared = [*DalitzModelView.__annotations__,
                *(n for n, v in vars(DalitzModelView).items()
                  if isinstance(v, property) or (callable(v) and not n.startswith("__")))]
    assert {"run_names", "_norm", "_check_norm", "_sdp_terms", "kin"} <= set(declared)
    missing = [n for n in declared if not hasattr(nominal, n)]
    assert missing == []
    assert isinstance(nominal._norm, _NormGrid)
    assert isinstance(nominal.run_names, tuple)
    ej, bk = nominal._sdp_terms(0, np.array([1.5]), np.array([12.0]))
    assert ej.shape == (1,) and len(bk) == len(nominal.runs[0].backgrounds)


def test_builder_options() -> None:
    """Options change the model as documented (baseline builds: no Zc kernels, fast)."""
    bl = {"maps": "synthetic", "hypothesis": "baseline"}
    with pytest.raises(ModelError, match="option nonsense: .*no such key"):
        build_zc4100({"nonsense": 1})
    with pytest.raises(ModelError, match="hypothesis"):
        build_zc4100({"hypothesis": "other"})
    with pytest.raises(ModelError, match="zc_spin"):
        build_zc4100({"zc_spin": 3, "maps": "synthetic"})
    base = build_zc4100(bl)
    assert {"lass", "nr"} <= set(base.component_names)
    ex = build_zc4100({**bl, "extra": ["kst3_1780", "kst4_2045"]})
    assert {"kst3_1780", "kst4_2045"} <= set(ex.component_names)
    split = build_zc4100({**bl, "swave": "lass_split"})
    assert "lass_nr" in split.component_names and "nr" not in split.component_names
    rbw = build_zc4100({**bl, "swave": "rbw"})
    assert {"kst0_1430", "kst0_700", "nr"} <= set(rbw.component_names)
    pol = build_zc4100({**bl, "coefficients": "polar"})
    assert "mag_lass" in pol.parameters and "ph_lass" in pol.parameters
    # polar and cartesian describe the same amplitude
    np.testing.assert_allclose(pol.coefficients(pol.parameters.values),
                               base.coefficients(base.parameters.values), rtol=1e-12)
    con = build_zc4100({**bl, "yields": "constrained"})
    assert con.parameters["n_sig_run2"].constraint.sigma == 60.0
    assert not con.parameters["n_sig_run2"].fixed
    nob = build_zc4100({**bl, "border_veto": False})
    assert nob.grid.w.sum() > 1.05 * base.grid.w.sum()
    nom = build_zc4100({"maps": "synthetic"})
    r3 = build_zc4100({"maps": "synthetic", "r_kpi": 3.0, "r_etacpi": 5.0})
    assert r3.components[0].lineshape.radius == 3.0
    assert r3.components[-1].lineshape.radius == 5.0
    pt = (np.array([1.2**2]), np.array([4.1**2]))  # the K*(892) tail and the Zc band
    f3 = r3.component_values(r3.parameters.values, *pt)[0]
    f4 = nom.component_values(nom.parameters.values, *pt)[0]
    assert abs(f3[0] / f4[0] - 1) > 1e-3 and abs(f3[-1] / f4[-1] - 1) > 1e-3


def test_parameter_draws() -> None:
    bl = {"maps": "synthetic", "hypothesis": "baseline"}
    with pytest.raises(ModelError, match="rng"):
        build_zc4100({**bl, "draw_kstar": True})
    a = build_zc4100({**bl, "draw_kstar": True}, np.random.default_rng(1))
    b = build_zc4100({**bl, "draw_kstar": True}, np.random.default_rng(2))
    nom = build_zc4100(bl)
    for name, width in (("m_kst1410", 9.0), ("w_kst1680", 110.0), ("m_kst892", 0.2)):
        assert abs(a.parameters[name].value - nom.parameters[name].value) <= width
        assert a.parameters[name].fixed
    assert a.parameters["m_kst1410"].value != b.parameters["m_kst1410"].value
    # the floating LASS parameters are not drawn
    assert a.parameters["m_lass"].value == nom.parameters["m_lass"].value


# --- normalisation ----------------------------------------------------------------------
@pytest.mark.parametrize("zc_mass, zc_width", [(4096.0, 152.0), (3500.0, 40.0),
                                               (4550.0, 400.0)])
def test_normalisation_accuracy_against_finer_grid(zc_mass: float, zc_width: float) -> None:
    """N_ij = ∫ F_i F_j* ε on the default grid vs a grid 2-3× finer in every direction and
    a 2× finer Zc spline: the total ∫|A|²ε agrees to < 1e-5 (requirement 1e-4), every
    element to < 1e-4 of sqrt(N_ii N_jj)."""
    opts = {"maps": "synthetic", "zc_mass": zc_mass, "zc_width": zc_width}
    m = build_zc4100(opts)
    f = build_zc4100({**opts, "grid": {"du": 0.02, "n_t": 16, "t_panels": 8,
                                       "spline_dm": 0.002, "coarse_du": 0.04}})
    x = m.parameters.values
    c = m.coefficients(x)
    for N, Nf in zip(m.norm_matrices(x), f.norm_matrices(x), strict=True):
        total = np.real(c @ N @ c.conj())
        total_f = np.real(c @ Nf @ c.conj())
        assert abs(total / total_f - 1) < 1e-5
        d = np.sqrt(np.outer(np.diag(Nf).real, np.diag(Nf).real))
        assert np.max(np.abs(N - Nf) / d) < 1e-4


def test_pdfs_normalised(nominal) -> None:
    """Signal and background SDP densities integrate to one over the allowed region, with
    an independent rule (~14× more rows, 16× more θ' nodes): |∫P − 1| < 1e-6."""
    g = _fine_grid(nominal)
    x = nominal.parameters.values
    for run in nominal.run_names:
        dens = nominal.densities(x, run, g.x, g.y)
        for name, d in dens.items():
            assert abs(np.sum(d * g.w_sdp) - 1.0) < 1e-6, (run, name)


def test_narrow_zc_pdf_normalised() -> None:
    """A 40 MeV Zc (the lower width limit) is integrated through its 1-D spline kernel, so
    the accuracy does not degrade; the check integrates the narrow band with points aligned
    to 3 MeV steps in m(ηc π−) (4-point Gauss–Legendre on each)."""
    m = build_zc4100({"maps": "synthetic", "zc_width": 40.0, "zc_mass": 3700.0,
                      "coefficient_values": {"zc": [1.0, 0.5]}})
    x = m.parameters.values
    g = _fine_grid(m, du=0.01, t_panels=2)
    spl = types.SimpleNamespace(pair="etacpi", knots=np.linspace(*m.kin.mass_range("etacpi"),
                                                                 555))
    pts = refined_row_points(m.kin, g, spl, n_g=4)
    dens = m.densities(x, "run1", pts["x"], pts["y"])["signal"]
    w_sdp = pts["w"] / m.kin.sdp_jacobian(pts["mp"], pts["thp"])
    assert abs(np.sum(dens * w_sdp) - 1.0) < 1e-6


# --- likelihood ---------------------------------------------------------------------------
@pytest.mark.parametrize("opts", [{}, {"coefficients": "polar", "yields": "constrained"},
                                  {"swave": "lass_split", "zc_spin": 2}])
def test_gradient_against_finite_differences(opts) -> None:
    m = build_zc4100({"maps": "synthetic", **opts})
    d = m.sample(m.parameters.values, np.random.default_rng(3))
    nll = m.nll(d)
    rng = np.random.default_rng(4)
    x = m.parameters.values.copy()
    free = np.flatnonzero(m.parameters.free_mask)
    x[free] += 0.3 * np.array([m.parameters.params[i].error_guess for i in free]) \
        * rng.standard_normal(free.size)
    g = nll.grad(x)
    for i in free:
        h = 1e-4 * m.parameters.params[i].error_guess
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        num = (nll(xp) - nll(xm)) / (2 * h)
        # the gradient is analytic in every parameter (lineshape ones included); the
        # central difference errs by its truncation, h²/6 |d³nll| ~ 1e-8/step (the NLL varies
        # on the scale of the step), plus rounding, 1e-16 |nll| (~1e4) / h ~ 1e-8/step:
        # measured ≤ 1.3e-7/step over these models, bounded with a margin by 2e-6/step
        tol = 1e-5 * abs(num) + 2e-6 / m.parameters.params[i].error_guess
        assert abs(g[i] - num) < tol, m.parameters.names[i]
    assert np.all(g[~m.parameters.free_mask] == 0)


def test_weighted_gradient_against_finite_differences() -> None:
    """Weighted events (sWeights, Asimov): the value and the analytic gradient carry each
    event's weight, negative ones included; unit weights give exactly the unweighted value
    and gradient. Central differences as in test_gradient_against_finite_differences
    (truncation and rounding ~ 1e-8/step each, bound 2e-6/step)."""
    m = build_zc4100({"maps": "synthetic"})
    p = m.parameters
    d = m.sample(p.values, np.random.default_rng(3))
    plain = m.nll(d)
    unit = m.nll(d, {r: np.ones(len(d[r])) for r in d.runs})
    rng = np.random.default_rng(4)
    x = p.values.copy()
    free = np.flatnonzero(p.free_mask)
    x[free] += 0.3 * np.array([p.params[i].error_guess for i in free]) \
        * rng.standard_normal(free.size)
    assert unit(x) == plain(x)
    assert np.array_equal(unit.grad(x), plain.grad(x))
    # weights around 1, a tenth of them negative (as sWeights of background-like events)
    w = {r: rng.normal(1.0, 0.5, len(d[r])) for r in d.runs}
    assert min(float(v.min()) for v in w.values()) < 0
    nll = m.nll(d, w)
    g = nll.grad(x)
    for i in free:
        h = 1e-4 * p.params[i].error_guess
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        num = (nll(xp) - nll(xm)) / (2 * h)
        assert abs(g[i] - num) < 1e-5 * abs(num) + 2e-6 / p.params[i].error_guess, p.names[i]


def test_gradient_three_pairs_against_finite_differences() -> None:
    """The analytic gradient where every branch of the normalisation enters: a floating
    K+π− LASS next to a fixed K*(892) (coarse-row kernels), an ηc π− and an ηc K−
    resonance with floating mass and width (spline kernels; direct sums between the two
    pairs). Central differences with h = 1e-4 of the step: truncation and rounding
    ~ 1e-8/step each (as in test_gradient_against_finite_differences), bound 2e-6/step."""
    kin = DalitzKinematics()
    flat = SDPHistogram.from_function(lambda a, b: 1.0 + 0.3 * a * b, 5, 5, "efficiency")
    P = Parameter
    params = ParameterSet((
        P("re_k", 1.0, fixed=True), P("im_k", 0.0, fixed=True),
        P("m_k", 895.55, fixed=True), P("w_k", 47.3, fixed=True),
        P("re_s", 0.8, step=0.05), P("im_s", -0.3, step=0.05),
        P("m_s", 1425.0, (1300.0, 1550.0), step=5.0), P("w_s", 270.0, (150.0, 400.0), step=8.0),
        P("a_s", 3.83, (1.0, 10.0), step=0.3), P("r_s", 2.86, (0.5, 8.0), step=0.3),
        P("re_z", 0.6, step=0.05), P("im_z", 0.2, step=0.05),
        P("m_z", 4100.0, (3800.0, 4400.0), step=10.0), P("w_z", 150.0, (50.0, 300.0), step=10.0),
        P("re_x", -0.4, step=0.05), P("im_x", 0.3, step=0.05),
        P("m_x", 4300.0, (4000.0, 4600.0), step=10.0), P("w_x", 120.0, (50.0, 300.0), step=10.0),
        P("n_sig", 2000.0, (0.0, 1e5), fixed=True)))
    comps = [Component("k", Lineshape("rbw", "kpi", 1), ("m_k", "w_k")),
             Component("s", Lineshape("lass", "kpi"), ("m_s", "w_s", "a_s", "r_s")),
             Component("z", Lineshape("rbw", "etacpi", 1), ("m_z", "w_z")),
             Component("x", Lineshape("rbw", "etack", 2), ("m_x", "w_x"))]
    m = DalitzModel(kin, comps, params, [RunSpec("run", flat, "n_sig")], Vetoes())
    assert m._norm.direct and m._norm.var_pos.size and m._norm.stat_pos.size
    nll = m.nll(m.sample(None, np.random.default_rng(5)))
    x = params.values
    g = nll.grad(x)
    for i in np.flatnonzero(params.free_mask):
        h = 1e-4 * params.params[i].error_guess
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        num = (nll(xp) - nll(xm)) / (2 * h)
        assert abs(g[i] - num) < 1e-5 * abs(num) + 2e-6 / params.params[i].error_guess, \
            params.names[i]


@pytest.mark.parametrize("weighted", [False, True])
def test_coupling_hessian_against_gradient_differences(weighted: bool) -> None:
    """``DalitzNLL.restricted`` with only cartesian coefficients floating (three components'
    couplings, one of them the Z_c): its value and gradient are the full likelihood's, its
    Hessian the central differences of the full exact gradient. Differences with
    h = 1e-5: truncation h²/6 |d⁴nll| and rounding 1e-16 |grad| / h are ~1e-8 relative to
    the largest entry (measured 3e-10); bound 1e-6. Weighted events (Asimov) as well."""
    m = build_zc4100({"maps": "synthetic"})
    if weighted:
        d, w = m.asimov()
    else:
        d, w = m.sample(m.parameters.values, np.random.default_rng(3)), None
    nll = m.nll(d, w)
    p = m.parameters
    x = p.values.copy()
    x[p.index("m_zc")] = 3900.0
    names = ["re_zc", "im_zc", "re_kst1410", "im_lass"]
    idx = np.array(sorted(p.index(n) for n in names))
    free = np.zeros(len(p), dtype=bool)
    free[idx] = True
    x[idx] += 0.03 * np.random.default_rng(4).standard_normal(idx.size)
    r = nll.restricted(free)
    assert r is not None
    assert r(x) == pytest.approx(nll(x), rel=1e-12)
    g = r.grad(x)
    np.testing.assert_allclose(g[idx], nll.grad(x)[idx], rtol=1e-9)
    assert np.all(g[~free] == 0)
    h = r.hessian(x)
    num = np.empty((idx.size, idx.size))
    for a, k in enumerate(idx):
        xp, xm = x.copy(), x.copy()
        xp[k] += 1e-5
        xm[k] -= 1e-5
        num[a] = (nll.grad(xp)[idx] - nll.grad(xm)[idx]) / 2e-5
    assert np.max(np.abs(h[np.ix_(idx, idx)] - num)) < 1e-6 * np.max(np.abs(num))
    assert np.all(h[~free] == 0) and np.all(h[:, ~free] == 0)
    # a lineshape parameter floating: no cheap restriction
    free[p.index("m_zc")] = True
    assert nll.restricted(free) is None


@pytest.mark.parametrize("coefficients", ["cartesian", "polar"])
def test_event_jacobian_against_finite_differences(coefficients: str) -> None:
    """``DalitzNLL.event_jacobian``: every event's ∂tot/∂x against central differences of
    the total densities, in every free parameter (coefficients, LASS and Z_c lineshape
    parameters, through the normalisations n_j and I_r). h = 1e-5 step: truncation
    h²/6 |∂³tot| and rounding 1e-16 |tot| / h are ~1e-9 of the row's largest entry
    (measured 4e-9); bound 1e-6. Zero rows for the fixed parameters."""
    m = build_zc4100({"maps": "synthetic", "coefficients": coefficients})
    p = m.parameters
    nll = m.nll(m.sample(p.values, np.random.default_rng(3)))
    x = p.values.copy()
    x[p.index("m_zc")] = 4050.0  # away from the generation point
    jac = nll.event_jacobian(x)
    assert jac.shape == (len(p), nll.n_events)
    for i in np.flatnonzero(p.free_mask):
        h = 1e-5 * p.params[i].error_guess
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        num = (nll._terms(xp)[5] - nll._terms(xm)[5]) / (2 * h)
        assert np.max(np.abs(jac[i] - num)) < 1e-6 * np.max(np.abs(num)), p.names[i]
    assert np.all(jac[~p.free_mask] == 0)


def test_expected_hessian_is_the_hessian_of_the_asimov_data() -> None:
    """On the Asimov data set at the generation values the Hessian's second term,
    ``Σ_i w_i ∂_ab tot_i / tot_i``, is the Asimov grid's quadrature of ``∫ ∂_ab tot = 0``, so
    ``DalitzNLL.expected_hessian`` must equal the exact Hessian (central differences of the
    exact gradient, h = 1e-4 step) up to that quadrature. In units of
    ``sqrt(H_aa H_bb)`` the difference is measured 1.3e-2 for the Z_c mass–width pair (the
    narrowest lineshape on the grid) and ≤ 2.5e-3 for every other entry; bounds 3e-2 and
    5e-3. The matrix is symmetric and positive definite."""
    m = build_zc4100({"maps": "synthetic"})
    p = m.parameters
    nll = m.nll(*m.asimov())
    x = p.values
    idx = np.flatnonzero(p.free_mask)
    h_f = nll.expected_hessian(x)
    assert np.all(h_f[~p.free_mask] == 0) and np.all(h_f[:, ~p.free_mask] == 0)
    h_f = h_f[np.ix_(idx, idx)]
    num = np.empty((idx.size, idx.size))
    for a, k in enumerate(idx):
        step = 1e-4 * p.params[k].error_guess
        xp, xm = x.copy(), x.copy()
        xp[k] += step
        xm[k] -= step
        num[a] = (nll.grad(xp)[idx] - nll.grad(xm)[idx]) / (2 * step)
    scale = np.sqrt(np.outer(np.diag(num), np.diag(num)))
    rel = np.abs(h_f - num) / scale
    zc = [list(idx).index(p.index(n)) for n in ("m_zc", "w_zc")]
    assert rel[np.ix_(zc, zc)].max() < 3e-2
    rest = np.ones_like(rel, dtype=bool)
    rest[np.ix_(zc, zc)] = False
    assert rel[rest].max() < 5e-3
    np.testing.assert_array_equal(h_f, h_f.T)
    assert np.linalg.eigvalsh(h_f)[0] > 0


def test_nll_matches_direct_formula(nominal, data) -> None:
    """Eq. 14 written out with the public densities: Σ_k N_k − Σ_i ln Σ_k N_k P_k(i)."""
    x = nominal.parameters.values
    nll = nominal.nll(data)
    total = 0.0
    for r, run in enumerate(nominal.runs):
        rs = data[run.name]
        dens = nominal.densities(x, run.name, rs.m2_kpi, rs.m2_etacpi)
        mix = x[nominal._sig_idx[r]] * dens["signal"]
        total += x[nominal._sig_idx[r]]
        for k, (bname, _, _) in enumerate(run.backgrounds):
            mix = mix + x[nominal._bkg_idx[r][k]] * dens[bname]
            total += x[nominal._bkg_idx[r][k]]
        total -= np.sum(np.log(mix))
    idx, mu, sig = nominal.parameters.constraint_terms()
    total += np.sum(0.5 * ((x[idx] - mu) / sig) ** 2)
    assert nll(x) == pytest.approx(total, rel=1e-10)


def test_cache_consistency(nominal, data) -> None:
    """Values after many parameter changes equal those of a fresh likelihood."""
    nll = nominal.nll(data)
    rng = np.random.default_rng(8)
    x0 = nominal.parameters.values
    free = np.flatnonzero(nominal.parameters.free_mask)
    for _ in range(20):
        x = x0.copy()
        x[free] += 0.2 * rng.standard_normal(free.size) * np.array(
            [nominal.parameters.params[i].error_guess for i in free])
        nll(x)
        nll.grad(x)
    assert nll(x) == pytest.approx(nominal.nll(data)(x), rel=1e-12, abs=1e-9)


def test_data_handling(nominal, data, tmp_path) -> None:
    data.save_npz(str(tmp_path / "d.npz"), seed=11)
    back = DalitzData.load_npz(str(tmp_path / "d.npz"))
    for run in data.runs:
        np.testing.assert_array_equal(back[run].m2_kpi, data[run].m2_kpi)
        np.testing.assert_array_equal(back[run].label, data[run].label)
    # vetoed events are removed, events outside the DP are an error
    rs = data["run1"]
    m = np.sqrt(rs.m2_kpi[:3])
    vetoed = RunSample(np.full(3, 1.865**2), rs.m2_etacpi[:3] * 0 + 14.0)
    both = DalitzData({"run1": RunSample(np.concatenate([rs.m2_kpi, vetoed.m2_kpi]),
                                         np.concatenate([rs.m2_etacpi, vetoed.m2_etacpi])),
                       "run2": data["run2"]})
    assert nominal.nll(both).n_dropped == 3
    outside = DalitzData({"run1": RunSample(m * 0 + 9.0, m * 0 + 9.0), "run2": data["run2"]})
    with pytest.raises(ModelError, match="outside the kinematic Dalitz plot"):
        nominal.nll(outside)
    with pytest.raises(ModelError, match="do not match"):
        nominal.nll(DalitzData({"run1": rs}))
    with pytest.raises(ModelError, match="file not found"):
        DalitzData.load_npz(str(tmp_path / "none.npz"))


def test_reference_data_set_loads() -> None:
    from toyengine.models.zc4100 import STUDY_DIR

    d = DalitzData.load_npz(str(STUDY_DIR / "reference_data.npz"))
    m = build_zc4100({})
    assert m.nll(d).n_dropped == 0
    assert 2800 < d.n_events < 3600


# --- generator against PDF ----------------------------------------------------------------
def _projection_chi2(model, x, run, sample, pair: str, edges: np.ndarray, comp: str) -> tuple:
    """χ² of a projection onto m(pair) with expected bin contents integrated exactly per bin
    (rows aligned with bin edges for K+π−, knot-aligned sub-intervals for ηc π−)."""
    if pair == "kpi":
        g = RowGrid.build(model.kin, model.vetoes, breaks=list(edges), n_m=6, du=0.01,
                          n_t=16, t_panels=8)
        dens = model.densities(x, run, g.x, g.y)[comp]
        mass = np.broadcast_to(g.m[:, None], g.shape)
        exp, _ = np.histogram(mass, edges, weights=dens * g.w_sdp)
    else:
        g = RowGrid.build(model.kin, model.vetoes, n_m=8, du=0.01, n_t=4, t_panels=4)
        spl = types.SimpleNamespace(pair=pair, knots=edges)
        pts = refined_row_points(model.kin, g, spl, n_g=5)
        dens = model.densities(x, run, pts["x"], pts["y"])[comp]
        w_sdp = pts["w"] / model.kin.sdp_jacobian(pts["mp"], pts["thp"])
        exp, _ = np.histogram(pts["m_pair"], edges, weights=dens * w_sdp)
    pv = model.kin.pair_variables(pair, sample.m2_kpi, sample.m2_etacpi)
    obs, _ = np.histogram(pv.m, edges)
    exp = exp * len(sample)
    ok = exp > 5
    return float(np.sum((obs[ok] - exp[ok]) ** 2 / exp[ok])), int(ok.sum())


@pytest.mark.parametrize("comp", ["signal", "comb"])
def test_generator_against_pdf_projections(comp: str) -> None:
    """40k generated events vs the PDF projected onto m(K+π−) and m(ηc π−) (50 bins each).
    Under the null χ² ~ χ²(k): mean k, sd sqrt(2k); the fixed-seed χ² must lie below
    k + 5 sqrt(2k) (p ≈ 1e-5 for a correct generator; a 2 % shape distortion in a few bins
    gives χ² of several hundred)."""
    yv = {"run1": {"sig": [40000.0 if comp == "signal" else 0.0, 1.0],
                   "comb": [40000.0 if comp == "comb" else 0.0, 1.0], "nr": [0.0, 1.0]},
          "run2": {"sig": [0.0, 1.0], "comb": [0.0, 1.0], "nr": [0.0, 1.0]}}
    m = build_zc4100({"maps": "synthetic", "yield_values": yv})
    x = m.parameters.values
    sample = m.sample(x, np.random.default_rng(21))["run1"]
    for pair in ("kpi", "etacpi"):
        lo, hi = m.kin.mass_range(pair)
        edges = np.linspace(lo + 0.07, hi - 0.07, 51)
        chi2, k = _projection_chi2(m, x, "run1", sample, pair, edges, comp)
        assert k >= 40
        assert chi2 < k + 5 * np.sqrt(2 * k), (pair, chi2, k)


# --- goodness of fit ----------------------------------------------------------------------
def test_adaptive_chi2(nominal) -> None:
    """At the true parameters Pearson's χ² over 144 equally populated bins has mean ≈ 144
    and sd ≈ 17: the mean of 4 toys lies within 144 ± 4 × 17/sqrt(4) (± 34)."""
    x = nominal.parameters.values
    chis = []
    for s in range(4):
        d = nominal.sample(x, np.random.default_rng(100 + s))
        res = adaptive_chi2(nominal, x, d)
        assert res["n_bins"] == 144
        obs = res["observed"]
        assert obs.max() - obs.min() <= 2  # equally populated (up to ties at edges)
        yields = sum(x[nominal.parameters.index(n)] for n in nominal.parameters.names
                     if n.startswith("n_"))
        # expected contents integrate to the total yield (θ' trapezoid across the veto
        # edges: O(1/800) per edge; 2e-4 relative is 0.001 events per bin)
        assert res["expected"].sum() == pytest.approx(yields, rel=2e-4)
        chis.append(res["chi2"])
    assert abs(np.mean(chis) - 144) < 34


@pytest.mark.parametrize("n_runs", [1, 2, 3])
def test_kpi_block_is_the_quadrature_of_each_row_against_every_row(n_runs: int) -> None:
    """The K+π− block of the normalisation matrices, ``N[r, j, k] = Σ_a esel[r, p, k, a]
    H_p(a) H_k*(a)`` and its conjugate, against numpy's einsum, for one, two and three runs
    (the kernel sums two runs at a time and an odd last run alone). Tolerance: a few
    roundings of sums of 37 terms of order 1."""
    from toyengine.core.dalitz.state_kernels import kpi_block

    rng = np.random.default_rng(11)
    nk, na = 5, 37
    esel = rng.random((n_runs, nk, nk, na))
    esel = esel + esel.swapaxes(1, 2)  # symmetric in the two components, as the model's
    H = rng.standard_normal((nk, na)) + 1j * rng.standard_normal((nk, na))
    ki = np.array([0, 2, 3, 5, 6])
    pos = np.array([1, 3])
    N = np.zeros((n_runs, 8, 8), complex)
    kpi_block(esel, H, pos, ki[pos], ki, N)
    for p in pos:
        want = np.einsum("rka,a,ka->rk", esel[:, p], H[p], H.conj())
        np.testing.assert_allclose(N[:, ki[p], ki], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(N[:, ki, ki[p]], want.conj(), rtol=1e-12, atol=1e-12)
