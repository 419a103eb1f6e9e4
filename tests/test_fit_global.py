"""Global multi-start over scan parameters, boundary refits and t >= 0 for nested tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from toyengine.core.fit import (
    LINE_OFFSET,
    SAME_MINIMUM,
    ProfileStarts,
    Restarts,
    _grid_minima,
    _start_points,
    edge_lines,
    fit,
    line_grid,
    lower_of,
)
from toyengine.core.minimize import _single_fit
from toyengine.core.params import Parameter, ParameterSet
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk
from toyengine.study.spec import StudySpec


def _two_wells(x: np.ndarray) -> float:
    """(m² − 4)²/4 − m/2: a shallow well near m = −2 (where the nominal start is), a deeper
    one near m = +2, the barrier between them at m = −0.125 (root of m(m² − 4) = 1/2).

    ``a`` is a nuisance with its minimum at 1 everywhere."""
    m, a = x
    return 0.25 * (m * m - 4.0) ** 2 - 0.5 * m + 0.5 * (a - 1.0) ** 2


BARRIER = -0.1254


WELL_PARAMS = ParameterSet((Parameter("m", -2.0, (-4.0, 4.0), step=0.05),
                            Parameter("a", 0.0, (-10.0, 10.0), step=0.5)))


def test_scan_starts_cover_the_whole_range_and_keep_the_rest_nominal():
    pts = np.array(_start_points(WELL_PARAMS, 17, np.random.default_rng(1), scan=("m",)))
    assert np.array_equal(pts[0], WELL_PARAMS.values)
    m = np.sort(pts[1:, 0])
    # 16 low-discrepancy points in [-4, 4]: no gap wider than 2 of the 0.5 spacing
    assert m[0] >= -4.0 and m[-1] <= 4.0
    assert np.max(np.diff(np.concatenate(([-4.0], m, [4.0])))) < 1.0
    assert np.all(pts[1:, 1] == 0.0)


def test_scan_multistart_finds_the_global_minimum_that_local_starts_miss():
    rng = np.random.default_rng(5)
    local = fit(_two_wells, WELL_PARAMS, starts=8, rng=rng)  # ±10 steps = ±0.5 around -2
    assert local.value("m") == pytest.approx(-1.9343, abs=0.01)  # root of m³ − 4m = 1/2
    glob = fit(_two_wells, WELL_PARAMS, starts=8, rng=np.random.default_rng(5), scan=("m",))
    assert glob.value("m") == pytest.approx(2.0591, abs=0.01)
    assert glob.nll < local.nll - 1.5  # the deeper well: V(2.06) ≈ −1.0 vs V(−1.94) ≈ +1.0
    assert glob.n_starts == 8
    # exactly the starts right of the barrier reach the best minimum
    pts = _start_points(WELL_PARAMS, 8, np.random.default_rng(5), scan=("m",))
    assert min(abs(p[0] - BARRIER) for p in pts) > 0.1
    assert glob.n_best == sum(p[0] > BARRIER for p in pts)
    assert 1 <= glob.n_best < 8


def test_restarts_reach_a_nuisance_minimum_no_start_reaches():
    """A parameter with two minima (the wells of :func:`_two_wells`) and no scan: the
    nominal start stays in the shallow well; 4 restarts from that minimum over m's range
    (Halton points 0, -2, 2, -3: the first one, the box's corner -4, skipped) reach the deeper one,
    with a full fit from the lower brief end; then 4 more around the deeper minimum."""
    local = fit(_two_wells, WELL_PARAMS)
    assert local.value("m") == pytest.approx(-1.9343, abs=0.01)
    res = fit(_two_wells, WELL_PARAMS, restarts=Restarts(("m", "not_a_parameter"), 4))
    assert res.value("m") == pytest.approx(2.0591, abs=0.01)
    assert res.value("a") == pytest.approx(1.0, abs=1e-3)
    assert res.nll < local.nll - 1.5
    assert res.valid
    # a round of 4 around the shallow minimum, which found the deep one, then a round of 4
    # around that, which found nothing lower: no third round
    assert res.n_starts == local.n_starts + 2 * 4
    assert res.nfcn > local.nfcn
    # the minimum the restarts moved away from is kept: another mode of the nuisance
    assert local.replaced_minima == ()
    assert len(res.replaced_minima) == 1
    np.testing.assert_allclose(res.replaced_minima[0], local.values, atol=1e-3)
    # restarts of fixed or absent parameters do nothing
    none = fit(_two_wells, WELL_PARAMS, restarts=Restarts(("not_a_parameter",), 4))
    assert none.n_starts == local.n_starts and none.nll == local.nll
    assert none.replaced_minima == ()
    # several sets: the points of each in turn (a set of absent parameters adds none);
    # moving the nuisance alone does not leave the shallow well, then m's points do
    nuisance = fit(_two_wells, WELL_PARAMS, restarts=Restarts(("a",), 2))
    assert nuisance.nll == pytest.approx(local.nll, abs=1e-6)
    assert nuisance.n_starts == local.n_starts + 2
    sets = fit(_two_wells, WELL_PARAMS, restarts=(Restarts(("a",), 2),
                                                  Restarts(("not_a_parameter",), 3),
                                                  Restarts(("m",), 4)))
    assert sets.value("m") == pytest.approx(2.0591, abs=0.01)
    assert sets.n_starts == local.n_starts + 2 * (2 + 4)


def test_restart_sets_repeating_an_earlier_sets_points_are_tried_once():
    """A set naming a parameter the model lacks moves only the others: its points are the
    unscrambled Halton sequence of an earlier set's parameters again (the first 2 of its 4
    are the 2 of ``("a",)``), and a start already tried is not fitted again (the null
    hypothesis of a search has no signal mass to move with the nuisances)."""
    one = fit(_two_wells, WELL_PARAMS, restarts=Restarts(("a",), 2))
    two = fit(_two_wells, WELL_PARAMS, restarts=(Restarts(("a",), 2),
                                                 Restarts(("a", "not_a_parameter"), 4)))
    local = fit(_two_wells, WELL_PARAMS)
    assert one.n_starts == local.n_starts + 2
    assert two.n_starts == local.n_starts + 4  # 2 + (4 - the 2 repeated)
    assert two.nll == one.nll


class _WrongGradient:
    """u² + v² with a gradient off by (0.3, −0.2): MIGRAD's line searches along it stall
    before the minimum (invalid), and iminuit's retries (SIMPLEX, which uses no gradient,
    then MIGRAD at strategy 2) reach it."""

    def __call__(self, x: np.ndarray) -> float:
        return float(x[0] ** 2 + x[1] ** 2)

    def grad(self, x: np.ndarray) -> np.ndarray:
        return 2.0 * np.asarray(x) + np.array([0.3, -0.2])


def test_a_fit_once_is_not_retried():
    """``once``: one MIGRAD, not iminuit's retries at strategy 2 after SIMPLEX (up to four
    more), which a restart's brief fit does not need: its end only ranks the start."""
    params = ParameterSet((Parameter("u", 3.0, (-10.0, 10.0), step=0.5),
                           Parameter("v", -2.0, (-10.0, 10.0), step=0.5)))
    x0 = params.values
    retried = _single_fit(_WrongGradient(), params, x0, False, 0, 1.0, False)
    once = _single_fit(_WrongGradient(), params, x0, False, 0, 1.0, False, once=True)
    assert retried.valid and retried.nll < 1e-6
    assert not once.valid and once.nll > 1e-3  # stalled where the first MIGRAD stopped
    assert once.nfcn < retried.nfcn


def _coupling_wells(x: np.ndarray) -> float:
    """100 ∫ (c − 0.3)(c − 0.6)(c − 1) dc: a shallow well at c = 0.3 (reached from the
    nominal start 0), the barrier at 0.6, a deeper well at 1.0 (lower by 0.29)."""
    c = x[0]
    return 100.0 * (c**4 / 4 - 1.9 * c**3 / 3 + 0.54 * c**2 - 0.18 * c)


def test_restarts_of_an_unbounded_parameter_are_centred_on_the_minimum():
    """A parameter without limits (a complex coupling) is moved over ±10 steps around the
    minimum the restarts start from, not around its nominal value: with step 0.05 the box
    is [-0.2, 0.8] around the shallow well at 0.3, and the seventh of 8 Halton points
    (0.875 of the box: c = 0.675) lies past the barrier at 0.6. Around the nominal 0 the box
    [-0.5, 0.5] lies wholly on the shallow side and no restart could leave it."""
    # positions to 0.01: MIGRAD stops at an EDM of ~1e-4, i.e. sqrt(2e-4 / V'') with V'' = 21
    params = ParameterSet((Parameter("c", 0.0, (-math.inf, math.inf), step=0.05),))
    local = fit(_coupling_wells, params)
    assert local.value("c") == pytest.approx(0.3, abs=0.01)
    res = fit(_coupling_wells, params, restarts=Restarts(("c",), 8))
    assert res.value("c") == pytest.approx(1.0, abs=0.01)
    assert res.nll == pytest.approx(local.nll - 0.2858, abs=1e-3)
    # 6 points are not enough: the highest, 0.75 of the box (c = 0.55), is before the barrier
    assert fit(_coupling_wells, params, restarts=Restarts(("c",), 6)).value("c") == \
        pytest.approx(0.3, abs=0.01)


def test_lower_of_two_searches_keeps_the_lower_minimum_and_both_costs():
    shallow = fit(_two_wells, WELL_PARAMS)
    deep = fit(_two_wells, WELL_PARAMS, extra_starts=[np.array([2.0, 1.0])])
    for a, b in ((shallow, deep), (deep, shallow)):
        both = lower_of(a, b)
        assert both.nll == deep.nll
        assert both.value("m") == deep.value("m")
        assert both.nfcn == shallow.nfcn + deep.nfcn
        assert both.n_starts == shallow.n_starts + deep.n_starts
        assert both.time == pytest.approx(shallow.time + deep.time)
        assert both.n_best == deep.n_best  # the shallow search did not reach the minimum
    assert lower_of(deep, deep).n_best == 2 * deep.n_best


def _two_bumps(x: np.ndarray) -> float:
    """A signal of amplitude ``a`` at position ``mu`` over data with two narrow bumps, at
    mu = 3 (height 1) and mu = 8 (height 2): −ln L = a²/2 − a s(mu). Profiled over ``a``
    (a = s) it is −s(mu)²/2: a local minimum −1/2 at mu = 3, the global one −2 at mu = 8,
    and nearly flat between them (s < 1e-5 more than 1.5 from a bump), so MIGRAD from the
    nominal start mu = 3.2 stays in the near bump."""
    mu, a = x
    s = math.exp(-0.5 * ((mu - 3.0) / 0.3) ** 2) + 2.0 * math.exp(-0.5 * ((mu - 8.0) / 0.3) ** 2)
    return 0.5 * a * a - a * s


BUMP_PARAMS = ParameterSet((Parameter("mu", 3.2, (0.0, 10.0), step=0.1),
                            Parameter("a", 1.0, (-10.0, 10.0), step=0.1)))


def test_profile_starts_find_the_global_minimum_the_nominal_start_misses():
    plain = fit(_two_bumps, BUMP_PARAMS)
    assert plain.value("mu") == pytest.approx(3.0, abs=1e-2)  # the local bump near 3.2
    assert plain.nll == pytest.approx(-0.5, abs=1e-4)
    prof = ProfileStarts((10,), best=1)  # cell centres 0.5, 1.5, ..., 9.5 over [0, 10]
    res = fit(_two_bumps, BUMP_PARAMS, scan=("mu",), profile=prof)
    assert res.value("mu") == pytest.approx(8.0, abs=1e-2)
    assert res.value("a") == pytest.approx(2.0, abs=1e-2)
    assert res.nll == pytest.approx(-2.0, abs=1e-4)
    assert res.n_starts == 2 and res.n_best == 1  # nominal + the best profile point
    again = fit(_two_bumps, BUMP_PARAMS, scan=("mu",), profile=prof)
    assert np.array_equal(again.values, res.values) and again.nfcn == res.nfcn
    # refitting the two lowest grid minima with mu free ranks the bumps the same way
    refined = fit(_two_bumps, BUMP_PARAMS, scan=("mu",),
                  profile=ProfileStarts((10,), best=1, refine=2))
    assert refined.value("mu") == pytest.approx(8.0, abs=1e-2)
    assert refined.nll == pytest.approx(-2.0, abs=1e-4)
    # the profile's cost is counted: the nominal fit (same as ``plain``), at least one call
    # at each of the 10 grid points and one for the fit from the best of them
    assert res.nfcn >= plain.nfcn + 10 + 1


def _narrow_and_broad(x: np.ndarray) -> float:
    """−ln L = a²/2 − a s(mu, w): a broad bump at mu = 3 (height 1, seen at every width w)
    and a narrow one at mu = 7.3 (height 2) that only a state at the width's lower limit
    0.1 sees (its factor falls as exp(−((w − 0.1)/0.1)²/2))."""
    mu, w, a = x
    s = (math.exp(-0.5 * ((mu - 3.0) / (0.5 + w)) ** 2)
         + 2.0 * math.exp(-0.5 * ((mu - 7.3) / 0.1) ** 2 - 0.5 * ((w - 0.1) / 0.1) ** 2))
    return 0.5 * a * a - a * s


NARROW_PARAMS = ParameterSet((Parameter("mu", 3.2, (0.0, 10.0), step=0.1),
                              Parameter("w", 1.0, (0.1, 2.0), step=0.1),
                              Parameter("a", 1.0, (-10.0, 10.0), step=0.1)))


def test_profile_line_at_the_width_limit_finds_a_narrow_state_the_grid_misses():
    """A 10 x 3 grid has no point within 0.2 of mu = 7.3 and none below w = 0.42, where the
    narrow bump's factor is exp(−0.5 · 3.2²) < 0.01: the fit stays in the broad bump
    (−ln L = −1/2). A line of 40 mu points at w's lower limit (0.25 apart, one at 7.375)
    reaches the narrow one (−ln L = −2)."""
    grid = fit(_narrow_and_broad, NARROW_PARAMS, scan=("mu", "w"),
               profile=ProfileStarts((10, 3), best=3))
    assert grid.nll == pytest.approx(-0.5, abs=1e-3)
    line = fit(_narrow_and_broad, NARROW_PARAMS, scan=("mu", "w"),
               profile=ProfileStarts((10, 3), best=3, line=40))
    assert line.value("mu") == pytest.approx(7.3, abs=1e-2)
    assert line.nll == pytest.approx(-2.0, abs=1e-3)
    pts = line_grid(NARROW_PARAMS, ("mu", "w"), 40)
    assert pts.shape == (40, 2) and np.allclose(np.diff(pts[:, 0]), 0.25)
    assert np.all(pts[:, 1] == pytest.approx(0.1 + LINE_OFFSET * 1.9))


def _broad_and_limit(x: np.ndarray) -> float:
    """−ln L = a²/2 − a s(mu, w): the broad bump of :func:`_narrow_and_broad` at mu = 3
    (height 1) and a state on the upper limit of mu, at mu = 10 and w = 1.5 (height 2, a
    half-width of 0.15 in mu): its maximum lies on the limit, half a cell beyond a 10 x 3
    grid's outermost points (mu = 9.5, where its factor is exp(−0.5 (0.5/0.15)²) < 0.004)."""
    mu, w, a = x
    s = (math.exp(-0.5 * ((mu - 3.0) / (0.5 + w)) ** 2)
         + 2.0 * math.exp(-0.5 * ((mu - 10.0) / 0.15) ** 2 - 0.5 * ((w - 1.5) / 0.2) ** 2))
    return 0.5 * a * a - a * s


def test_profile_edges_find_a_minimum_on_a_limit_the_grid_misses():
    grid = fit(_broad_and_limit, NARROW_PARAMS, scan=("mu", "w"),
               profile=ProfileStarts((10, 3), best=3))
    assert grid.nll == pytest.approx(-0.5, abs=1e-3)  # the broad bump
    edges = fit(_broad_and_limit, NARROW_PARAMS, scan=("mu", "w"),
                profile=ProfileStarts((10, 3), best=3, edges=24))
    assert edges.value("mu") == pytest.approx(10.0, abs=1e-3)  # on the limit
    assert edges.value("w") == pytest.approx(1.5, abs=1e-2)
    # −s²/2 with s = 2 + the broad bump's tail there, exp(−0.5 (7/2)²)
    assert edges.nll == pytest.approx(-0.5 * (2.0 + math.exp(-6.125)) ** 2, abs=1e-3)
    assert edges.n_starts == grid.n_starts + 4  # one more start per edge: its lowest point
    lines = edge_lines(NARROW_PARAMS, ("mu", "w"), 24)
    assert len(lines) == 4 and all(e.shape == (24, 2) for e in lines)
    # mu at its lower and upper limit (moved inwards), w across its range; then w's limits
    assert np.all(lines[0][:, 0] == pytest.approx(LINE_OFFSET * 10.0))
    assert np.all(lines[1][:, 0] == pytest.approx(10.0 - LINE_OFFSET * 10.0))
    assert np.allclose(np.diff(lines[0][:, 1]), 1.9 / 24)
    assert np.all(lines[3][:, 1] == pytest.approx(2.0 - LINE_OFFSET * 1.9))
    assert [e.shape for e in edge_lines(BUMP_PARAMS, ("mu",), 24)] == [(1, 1), (1, 1)]


def _two_edges_and_nuisance(x: np.ndarray) -> float:
    """−ln L = a²/2 − a s + b²/2 − 2 b g_B: the broad bump of :func:`_broad_and_limit`
    (height 1 at mu = 3) and two narrow states on limits, A at mu = 0, w = 1 (height 1.5)
    and B at mu = 10, w = 1.5 (height 1, g_B its shape), with s = broad + 1.5 g_A + g_B.
    With b at 0 (a profile floating only a) A is the lower edge point (−1.125 against
    −0.5); with b free B is the global minimum (−0.5 − 2 = −2.5)."""
    mu, w, a, b = x
    g_a = math.exp(-0.5 * (mu / 0.15) ** 2 - 0.5 * ((w - 1.0) / 0.2) ** 2)
    g_b = math.exp(-0.5 * ((mu - 10.0) / 0.15) ** 2 - 0.5 * ((w - 1.5) / 0.2) ** 2)
    s = math.exp(-0.5 * ((mu - 3.0) / (0.5 + w)) ** 2) + 1.5 * g_a + g_b
    return 0.5 * a * a - a * s + 0.5 * b * b - 2.0 * b * g_b


def test_each_edge_gets_a_start_of_its_own():
    """Two minima on limits: the profile (b held at 0) ranks the one on mu's lower limit
    below the one on its upper limit, whose full fit (b free) is the global minimum. With
    one start for the lowest point over all edges the fit ends on the wrong limit."""
    params = ParameterSet((*NARROW_PARAMS, Parameter("b", 0.0, (-10.0, 10.0), step=0.1)))
    prof = ProfileStarts((10, 3), best=1, free=("a",), base=params.values, edges=24)
    res = fit(_two_edges_and_nuisance, params, scan=("mu", "w"), profile=prof)
    assert res.value("mu") == pytest.approx(10.0, abs=1e-3)  # B, on mu's upper limit
    assert res.value("b") == pytest.approx(2.0, abs=1e-2)
    # −(1 + broad tail)²/2 − 2: the broad bump's factor at mu = 10 is exp(−0.5 (7/2)²)
    assert res.nll == pytest.approx(-0.5 * (1.0 + math.exp(-6.125)) ** 2 - 2.0, abs=1e-3)


def _bumps_and_nuisance(x: np.ndarray) -> float:
    """The two bumps of :func:`_two_bumps` (heights 1.2 at mu = 3 and 2 at mu = 8) and a
    nuisance ``b`` whose minimum is 1.8 g(mu) (g: the far bump's shape, 0 near mu = 3):
    −ln L = a²/2 − a s(mu) + (b − 1.8 g(mu))²/2. With ``b`` free the far bump is the global
    minimum (−2 against −0.72); a profile that floats only ``a`` (``b`` at its base 0)
    ranks it above the near bump."""
    mu, a, b = x
    g = math.exp(-0.5 * ((mu - 8.0) / 0.3) ** 2)
    s = 1.2 * math.exp(-0.5 * ((mu - 3.0) / 0.3) ** 2) + 2.0 * g
    return 0.5 * a * a - a * s + 0.5 * (b - 1.8 * g) ** 2


def test_profile_screen_ranks_basins_by_brief_full_fits():
    params = ParameterSet((*BUMP_PARAMS, Parameter("b", 0.0, (-5.0, 5.0), step=0.1)))
    # on the 10-cell grid (centres 0.5, ..., 9.5) the profile is −0.045 at mu = 2.5 and 3.5
    # and −0.024 at 7.5 and 8.5 (−(2 g)²/2 + (1.8 g)²/2 with g = exp(−0.5 (0.5/0.3)²))
    plain = fit(_bumps_and_nuisance, params, scan=("mu",),
                profile=ProfileStarts((10,), best=1, free=("a",)))
    assert plain.value("mu") == pytest.approx(3.0, abs=1e-2)
    assert plain.nll == pytest.approx(-0.72, abs=1e-4)
    # the four lowest profile minima, each fitted briefly with mu, a and b free: the far
    # bump's ends lowest, and the one full fit starts from there
    screened = fit(_bumps_and_nuisance, params, scan=("mu",),
                   profile=ProfileStarts((10,), best=1, free=("a",), screen=4))
    assert screened.value("mu") == pytest.approx(8.0, abs=1e-2)
    assert screened.value("b") == pytest.approx(1.8, abs=1e-2)
    assert screened.nll == pytest.approx(-2.0, abs=1e-4)
    assert screened.n_starts == plain.n_starts == 2  # the nominal start + the best one
    # the brief fits are counted
    assert screened.nfcn > plain.nfcn
    # screen and refine are two rankings: one of them, in the API and in a study file
    with pytest.raises(ValueError, match="refine or screen"):
        ProfileStarts((10,), best=1, refine=2, screen=4)
    from pathlib import Path

    from toyengine.errors import SpecError

    path = Path(__file__).resolve().parents[1] / "studies" / "zc4100" / "significance.yaml"
    text = path.read_text()
    assert "screen: 8}" in text
    with pytest.raises(SpecError, match="refine and screen are two ways"):
        StudySpec.from_text(text.replace("screen: 8}", "screen: 8, refine: 2}"), str(path),
                            str(path.parent))


def test_profile_with_fixed_base_floats_only_the_named_parameters():
    """``free``/``base``: the nuisance ``b`` stays at the base value in the profile (its
    minimum is at 1 everywhere, the base puts it at 1), the bumps are found all the same."""
    def nll(x: np.ndarray) -> float:
        return _two_bumps(x[:2]) + 0.5 * (x[2] - 1.0) ** 2

    params = ParameterSet((*BUMP_PARAMS, Parameter("b", 0.0, (-5.0, 5.0), step=0.5)))
    prof = ProfileStarts((10,), best=1, free=("a",), base=np.array([0.0, 0.0, 1.0]))
    res = fit(nll, params, scan=("mu",), profile=prof)
    assert res.value("mu") == pytest.approx(8.0, abs=1e-2)
    assert res.nll == pytest.approx(-2.0, abs=1e-4)


def test_grid_minima_keep_one_point_per_basin():
    z = np.array([[3.0, 1.0, 2.0, 5.0, 0.5, 4.0],
                  [3.0, 1.5, 2.0, 5.0, 0.7, 4.0]])
    assert _grid_minima(z) == [1, 4]


def test_yield_step_is_poisson_not_limit_width():
    p = Parameter("n_bkg", 700.0, (0.0, 1e7), is_yield=True)
    assert p.error_guess == pytest.approx(math.sqrt(700.0))
    q = Parameter("g", 8.0, (0.1, 1e4))  # no step: 10 % of the value, never of the limits
    assert q.error_guess == pytest.approx(0.8)


def test_fit_ending_on_a_limit_is_refitted_fixed_there():
    # the unconstrained minimum of mu is at -1, outside mu >= 0; b is correlated with mu
    def nll(x: np.ndarray) -> float:
        mu, b = x
        return 0.5 * (mu + b - 4.0) ** 2 + 0.5 * (b - 5.0) ** 2

    params = ParameterSet((Parameter("mu", 2.0, (0.0, 10.0), step=0.5),
                           Parameter("b", 4.0, (-20.0, 20.0), step=0.5)))
    res = fit(nll, params)
    assert res.fixed_at_limit == ("mu",)
    assert res.value("mu") == 0.0 and math.isnan(res.error("mu"))
    assert res.valid and res.at_limit
    assert res.value("b") == pytest.approx(4.5, abs=1e-3)  # min over b of the fixed-mu nll
    assert res.nll == pytest.approx(0.25, abs=1e-6)
    assert res.error("b") == pytest.approx(1 / math.sqrt(2.0), rel=1e-3)


SIG_SPEC = """
name: sig-small
kind: significance
seed: 7
toys: 12
models:
  H0:
    builder: tcc
    options: {signal: none, background_order: 1}
    parameters: {n_bkg: 150}
  H1:
    builder: tcc
    options: {signal: bw, background_order: 1}
    parameters:
      n_sig: {value: 5.0, limits: [0.0, 500.0]}
      n_bkg: 150
      delta_m: {value: -0.273, fixed: true}   # a fixed-shape signal: t ~ ½δ(0) + ½χ²(1)
      gamma: {value: 0.41, fixed: true}
generate: H0
hypotheses: [H1, H0]
test: {h0: H0, h1: H1, ndof: 3}
fit: {starts: 4}
"""


def test_nested_significance_toys_have_t_nonnegative_and_zero_at_zero_signal():
    spec = StudySpec.from_text(SIG_SPEC)
    plan = Plan.of(spec)
    res = run_chunk(plan, Chunk(0, 0, 0, spec.toys))
    a = res.arrays
    h1, h0 = 0, 1  # hypotheses are listed H1 first: the null is still fitted first
    assert np.all(a["status"] == 1), "every fit valid (boundary fits refitted, not dropped)"
    t = 2.0 * (a["nll"][:, h0] - a["nll"][:, h1])
    # MIGRAD only descends from the embedded null start: t >= 0 up to its tolerance
    assert np.all(t >= -2 * SAME_MINIMUM), t
    n_sig = a["value"][:, h1, plan.params.index("n_sig")]
    at_zero = n_sig == 0.0
    # background-only toys, fixed signal shape, n_sig >= 0: many end at zero signal (the
    # unconstrained n_sig of this model is negative in most H0 toys: the signal sits below
    # the D*+ D0 threshold where the background vanishes); t is exactly 0 there because
    # H1 with n_sig = 0 is H0
    assert at_zero.sum() >= 3
    assert np.all(t[at_zero] == 0.0)
    assert np.all(a["n_best"][:, h1] >= 1)


def test_alternative_searches_again_from_each_mode_the_null_restarts_left(monkeypatch):
    """When the null fit's restarts found a lower minimum than a first one (another mode of
    its nuisance parameters, ``replaced_minima``), the alternative's search runs once more
    with that mode embedded (signal at zero, shared parameters at the mode's values) as its
    nested start, and the lower of the two searches is stored with the cost of both."""
    from dataclasses import replace

    import toyengine.study.recipe as recipe

    spec = StudySpec.from_text(SIG_SPEC.replace("fit: {starts: 4}", "fit: {starts: 1}"))
    plan = Plan.of(spec)
    real = recipe.fit
    calls: list[tuple[tuple[str, ...], list[np.ndarray]]] = []
    mode: dict[str, float] = {}

    def spy(nll, params, **kw):
        res = real(nll, params, **kw)
        calls.append((params.names, [np.array(x) for x in kw.get("extra_starts", ())]))
        if "n_sig" not in params.names:  # the null: pretend its restarts left a mode
            x = res.values.copy()
            x[params.index("n_bkg")] += 7.0
            mode.update(zip(params.names, x, strict=True))
            res = replace(res, replaced_minima=(x,))
        return res

    monkeypatch.setattr(recipe, "fit", spy)
    a = run_chunk(plan, Chunk(0, 0, 0, 1)).arrays
    h1 = spec.hypotheses.index("H1")
    alt = [extra for names, extra in calls if "n_sig" in names]
    assert len(alt) == 2, "one search from the null minimum, one from its other mode"
    second = alt[1][0]
    names = next(n for n, _ in calls if "n_sig" in n)
    assert second[names.index("n_sig")] == 0.0
    assert second[names.index("n_bkg")] == pytest.approx(mode["n_bkg"])
    assert alt[0][0][names.index("n_bkg")] == pytest.approx(mode["n_bkg"] - 7.0)
    monkeypatch.setattr(recipe, "fit", real)
    once = run_chunk(plan, Chunk(0, 0, 0, 1)).arrays
    assert a["n_starts"][0, h1] == 2 * once["n_starts"][0, h1]
    assert a["nll"][0, h1] <= once["nll"][0, h1] + SAME_MINIMUM


SCAN_SPEC = """
name: sig-scan
kind: significance
seed: 11
toys: 3
models:
  H0:
    builder: tcc
    options: {signal: none, background_order: 1}
    parameters: {n_bkg: 150}
  H1:
    builder: tcc
    options: {signal: bw, background_order: 1}
    parameters:
      n_sig: {value: 5.0, limits: [0.0, 500.0]}
      n_bkg: 150
      delta_m: {value: -0.273, limits: [-3.0, 3.0]}
      gamma: {value: 0.41, limits: [0.02, 2.0]}
generate: H0
hypotheses: [H0, H1]
test: {h0: H0, h1: H1, ndof: 3, observed: 12.0}
fit: {starts: 8, scan: {grid: [4, 2], toys: 2}}
"""


def test_scan_is_stored_and_never_beats_the_global_fit(tmp_path):
    import xarray as xr

    from toyengine.store import create_store, open_results, write_chunk
    from toyengine.summary.significance import significance_summary

    spec = StudySpec.from_text(SCAN_SPEC)
    plan = Plan.of(spec)
    names, points = plan.scan.names, plan.scan.points
    assert names == ("delta_m", "gamma") and points.shape == (8, 2)
    assert points[0].tolist() == [-2.25, 0.515] and points[-1].tolist() == [2.25, 1.505]
    res = run_chunk(plan, Chunk(0, 0, 0, 3))
    a = res.arrays
    t = 2.0 * (a["nll"][:, 0] - a["nll"][:, 1])
    scan = a["scan_t"]
    assert np.all(np.isfinite(scan[:2])) and np.all(np.isnan(scan[2]))  # toys: 2
    assert np.all(scan[:2] >= -2 * SAME_MINIMUM)
    # the global H1 fit is at least as good as every fixed-(δm, Γ) point
    assert np.all(scan[:2].max(axis=1) <= t[:2] + 2 * SAME_MINIMUM)
    store = tmp_path / "s.zarr"
    create_store(store, plan, 3)
    write_chunk(store, res, spec.toys, 3)
    ds = open_results(store)
    assert isinstance(ds, xr.Dataset) and ds.attrs["lee_dof"] == 1 and ds.attrs["lee_one_sided"]
    np.testing.assert_array_equal(ds["scan_t"].values[0], scan)
    s = significance_summary(ds, min_toys_for_fit=1000)
    # two 4 x 2 scans cannot calibrate the 2-D Euler characteristic (a coefficient comes
    # out non-positive): the summary falls back to 1-D upcrossings of the scan profiled
    # over gamma, and says so
    assert s.lee is not None and s.lee["scan_dims"] == 2 and s.lee["n_scans"] == 2
    assert s.lee["dim"] == 1 and "profiled over its 2nd axis" in s.to_text()
    # local: p = ½ P(χ²_1 > 12) (one-sided yield), two-sided Z = Φ⁻¹(1 − p/2)
    assert s.z_local == pytest.approx(float(stats.norm.isf(0.25 * stats.chi2.sf(12.0, 1))))


def test_toys_for_precision():
    from toyengine.errors import ToyEngineError
    from toyengine.run.precision import toys_for_precision

    # p = 0.01 from 10/1000: relative error 0.31; 10 % needs (1 − p)/(p · 0.01) = 9900 toys
    assert toys_for_precision(10, 1000, 0.1, 10**6) == 9900
    assert toys_for_precision(10, 1000, 0.1, 5000) == 5000          # capped
    assert toys_for_precision(100, 1000, 0.1, 10**6) == 1000        # 0.095 <= 0.1: done
    # nothing exceeds yet: p is guessed at the upper end of the central 68 % CP interval,
    # 1 − 0.1587^(1/n) ≈ 1.84e-3
    hi = 1.0 - ((1.0 - 0.682689492137086) / 2) ** (1.0 / 1000)
    assert toys_for_precision(0, 1000, 0.1, 10**6) == math.ceil((1 - hi) / (hi * 0.01))
    with pytest.raises(ToyEngineError, match="precision"):
        toys_for_precision(1, 10, 1.5, 100)


def test_profile_line_and_free_in_a_study_file():
    """``fit.profile.line``/``free`` are read from the study file, left out of the digest
    when unset (older stores keep theirs), and a ``free`` name no model has is one error."""
    from pathlib import Path

    from toyengine.errors import ToyEngineError
    from toyengine.study.plan import check_profile

    path = Path(__file__).resolve().parents[1] / "studies" / "tcc" / "significance.yaml"
    text = path.read_text()
    base = StudySpec.from_text(text, str(path), str(path.parent))
    assert "line" not in base.fit["profile"] and "free" not in base.fit["profile"]
    zero = StudySpec.from_text(text.replace("best: 3}", "best: 3, line: 0}"), str(path),
                               str(path.parent))
    assert zero.digest == base.digest
    lined = StudySpec.from_text(text.replace("best: 3}", "best: 3, line: 30, free: [n_sig]}"),
                                str(path), str(path.parent))
    assert lined.fit["profile"]["line"] == 30 and lined.digest != base.digest
    check_profile(lined)
    bad = StudySpec.from_text(text.replace("best: 3}", "best: 3, free: [nope]}"), str(path),
                              str(path.parent))
    with pytest.raises(ToyEngineError, match=r"fit.profile.free names \['nope'\]"):
        check_profile(bad)


def test_restarts_in_a_study_file():
    """``fit.restarts`` is read from the study file, left out of the digest when unset, and
    a parameter no model has is one error naming it."""
    from pathlib import Path

    from toyengine.errors import ToyEngineError
    from toyengine.study.plan import check_profile

    path = Path(__file__).resolve().parents[1] / "studies" / "tcc" / "significance.yaml"
    text = path.read_text()
    base = StudySpec.from_text(text, str(path), str(path.parent))
    assert "restarts" not in base.fit
    marker = "  profile: {"
    assert marker in text
    moved = StudySpec.from_text(text.replace(marker, "  restarts: {params: [n_sig]}\n" + marker),
                                str(path), str(path.parent))
    assert moved.fit["restarts"] == {"params": ["n_sig"], "points": 4}
    assert moved.digest != base.digest
    check_profile(moved)
    bad = StudySpec.from_text(text.replace(marker, "  restarts: {params: [nope], points: 2}\n"
                                           + marker), str(path), str(path.parent))
    with pytest.raises(ToyEngineError, match=r"fit.restarts.params names \['nope'\]"):
        check_profile(bad)
    # a list of sets: each set's points in turn; an unknown name is named with its set
    sets = StudySpec.from_text(text.replace(
        marker, "  restarts:\n  - {params: [n_sig], points: 2}\n"
        "  - {params: [n_sig, delta_m], points: 3}\n" + marker), str(path), str(path.parent))
    assert sets.fit["restarts"] == [{"params": ["n_sig"], "points": 2},
                                    {"params": ["n_sig", "delta_m"], "points": 3}]
    assert sets.digest not in (base.digest, moved.digest)
    check_profile(sets)
    bad = StudySpec.from_text(text.replace(
        marker, "  restarts:\n  - {params: [n_sig]}\n  - {params: [n_sig, nope]}\n" + marker),
        str(path), str(path.parent))
    with pytest.raises(ToyEngineError, match=r"fit.restarts\[1\].params names \['nope'\]"):
        check_profile(bad)


def test_separate_hypotheses_profile_around_the_fitted_shared_parameters():
    """A test of separate hypotheses (J^P): the second model's coupling-only profile keeps
    the parameters it shares with the first at that fit's minimum on this toy (not at their
    start values); unshared parameters at their start values; a fixed shared
    parameter keeps its own value; values are clipped into the second model's limits."""
    from types import SimpleNamespace

    from toyengine.study.recipe import _fitted_base

    params = ParameterSet((Parameter("m", 4.1, (3.5, 4.6)), Parameter("a", 0.0, (-1.0, 1.0)),
                           Parameter("c", 2.0, (0.0, 5.0), fixed=True),
                           Parameter("only_here", 0.3, (0.0, 1.0))))
    model = SimpleNamespace(parameters=params)
    first = SimpleNamespace(names=("a", "c", "m", "elsewhere"),
                            values=np.array([1.7, 9.0, 3.9, 5.0]), nll=-12.0)
    assert _fitted_base(model, {}) is None
    base = _fitted_base(model, {0: first})
    np.testing.assert_array_equal(base, [3.9, 1.0, 2.0, 0.3])
    failed = SimpleNamespace(names=("a",), values=np.array([0.5]), nll=math.nan)
    assert _fitted_base(model, {0: failed}) is None


def test_scan_fits_also_start_from_the_alternatives_own_minimum():
    """Each scan point is fitted from the null minimum and from the alternative's own one.
    A nuisance ``k`` with the two wells of :func:`_two_wells`: the null fit ended in the
    shallow well (k ≈ −1.93), the alternative's search in the deeper one (k ≈ 2.06), as the
    Z_c(4100) fits do with the two solutions of the K π S-wave. From the null minimum alone
    the scan stays in the shallow well and its t misses the deeper well's share."""
    from types import SimpleNamespace

    from toyengine.study.recipe import _scan_toy

    def nll(x: np.ndarray) -> float:  # mu: the signal's position (scanned), s: its size
        mu, s, k = x
        return _two_wells(np.array([k, 1.0])) + 0.5 * (s - 2.0) ** 2 + 0.1 * (mu - 1.0) ** 2

    shallow, deep = -1.9343, 2.0591  # the wells' minima (test_restarts_reach_...)
    params = ParameterSet((Parameter("mu", 0.0, (-3.0, 3.0), step=0.1),
                           Parameter("s", 1.0, (0.0, 10.0), step=0.5),
                           Parameter("k", 0.0, (-10.0, 10.0), step=0.5)))
    model = SimpleNamespace(parameters=params, scan_parameters=("mu",))
    spec = SimpleNamespace(fit={"strategy": None})
    nll0 = nll(np.array([1.0, 0.0, shallow]))  # the null: no signal (s = 0)
    r0 = SimpleNamespace(names=("k",), values=np.array([shallow]))
    r1 = SimpleNamespace(names=("mu", "s", "k"), values=np.array([1.0, 2.0, deep]),
                         nll=nll(np.array([1.0, 2.0, deep])))
    point = np.array([[1.0]])
    both = _scan_toy(model, nll, ("mu",), point, r0, nll0, spec, {"k"}, r1)[0]
    null_only = _scan_toy(model, nll, ("mu",), point, r0, nll0, spec, {"k"})[0]
    # MIGRAD's convergence (EDM < 2e-4 in -ln L) bounds the difference of each t
    assert both == pytest.approx(2.0 * (nll0 - r1.nll), abs=1e-3)
    assert null_only == pytest.approx(4.0, abs=1e-3)  # 2 × ½ (s − 2)² at s = 0: no k gain
    assert both > null_only + 1.0


def test_each_hypothesis_is_refitted_from_the_others_nuisance_mode():
    """``fit.restarts`` in a nested test: the null is refitted from the alternative's
    minimum, the alternative from the null's nuisance values with its own signal, each kept
    only when lower by more than ``SAME_MINIMUM``; a null fit that ended in another minimum
    is returned as a mode for the alternative's search to start from. A nuisance ``k`` with
    the two wells of :func:`_two_wells` (as the two solutions of the Z_c(4100) fits' K π
    S-wave): a search that ended in the shallow well gets the deep one from the other
    hypothesis' minimum — t too high (null in the shallow well) or too low (alternative
    there), by 2 × the wells' depth difference, without it."""
    from types import SimpleNamespace

    from toyengine.study.recipe import _cross_starts

    def nll1(x: np.ndarray) -> float:  # mu: signal position, s: its size; s = 0 is the null
        mu, s, k = x
        return _two_wells(np.array([k, 1.0])) + 0.5 * (s - 2.0) ** 2 + 0.1 * s * s * (mu - 1) ** 2

    def nll0(x: np.ndarray) -> float:
        return nll1(np.array([1.0, 0.0, x[0]]))

    shallow, deep = -1.9343, 2.0591  # the wells' minima (test_restarts_reach_...)
    p0 = ParameterSet((Parameter("k", 0.0, (-10.0, 10.0), step=0.5),))
    p1 = ParameterSet((Parameter("mu", 0.0, (-3.0, 3.0), step=0.1),
                       Parameter("s", 1.0, (0.0, 10.0), step=0.5),
                       Parameter("k", 0.0, (-10.0, 10.0), step=0.5)))
    hyps = [SimpleNamespace(parameters=p0, scan_parameters=()),
            SimpleNamespace(parameters=p1, scan_parameters=("mu",))]
    spec = SimpleNamespace(fit={"strategy": None, "hesse": False})

    def cross(k0: float, k1: float):
        fitted = {0: fit(nll0, p0.with_values({"k": k0}), hesse=False)}
        r1 = fit(nll1, p1.with_values({"mu": 1.0, "s": 2.0, "k": k1}), hesse=False)
        r0 = fitted[0]
        out, mode = _cross_starts((0, 1), hyps, fitted, {0: nll0}, nll1, r1, spec)
        return r0, r1, fitted[0], out, mode

    depth = 2.0 * (_two_wells(np.array([shallow, 1.0])) - _two_wells(np.array([deep, 1.0])))
    assert depth > 1.0
    # the null in the shallow well, the alternative in the deep one: t too high by `depth`
    r0, r1, n0, out, mode = cross(shallow, deep)
    assert n0.value("k") == pytest.approx(deep, abs=1e-2)
    assert 2.0 * (n0.nll - out.nll) == pytest.approx(2.0 * (r0.nll - r1.nll) - depth, abs=1e-3)
    assert out.values.tolist() == r1.values.tolist()  # the alternative was at its minimum
    assert out.nfcn > r1.nfcn and out.n_starts == r1.n_starts + 1  # its cross fit counted
    # the mode to search from: the null's new minimum embedded (signal off, s = 0)
    assert mode is not None and mode[1] == 0.0 and mode[2] == pytest.approx(deep, abs=1e-2)
    # the alternative in the shallow well: t too low by `depth`; the null's fit from there
    # ended in its shallow well, a mode for the alternative's search
    r0, r1, n0, out, mode = cross(deep, shallow)
    assert n0.values.tolist() == r0.values.tolist()
    assert out.value("k") == pytest.approx(deep, abs=1e-2)
    assert 2.0 * (n0.nll - out.nll) == pytest.approx(2.0 * (r0.nll - r1.nll) + depth, abs=1e-3)
    assert mode is not None and mode[2] == pytest.approx(shallow, abs=1e-2)
    # both in the deep well already: nothing replaced, the values bit for bit, no mode
    r0, r1, n0, out, mode = cross(deep, deep)
    assert n0.values.tolist() == r0.values.tolist() and n0.nll == r0.nll
    assert out.values.tolist() == r1.values.tolist() and out.nll == r1.nll
    assert mode is None
