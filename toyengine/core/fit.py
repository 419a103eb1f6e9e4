"""The fitter: trust-region Newton with the analytic Hessian (:mod:`.newton`) where the
likelihood has one, else MIGRAD + HESSE (optional MINOS) on iminuit; with multi-start.

A fit never raises for a numerical failure: it returns a :class:`FitResult` with
``valid=False`` and a status code, so a study records it: a failed fit is data, not an
exception.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .fitresult import LIMIT_TOLERANCE as LIMIT_TOLERANCE
from .fitresult import FitResult, _at_limits
from .likelihood import ValueOnly, as_likelihood
from .minimize import _migrad_fit as _migrad_fit
from .minimize import _newton_fit as _newton_fit
from .minimize import _single_fit
from .params import ParameterSet
from .status import FailReason, FitStatus

__all__ = ["FailReason", "FitResult", "FitStatus", "ProfileStarts", "Restarts", "edge_lines",
           "fit", "flat_parameters", "line_grid", "lower_of", "scan_grid"]


def _scan_box(params: ParameterSet, name: str,
              around: float | None = None) -> tuple[float, float]:
    """The range a parameter's starts cover: its limits, or ``value ± 10 steps`` on an open
    side, the steps counted from ``around`` where given (:class:`Restarts`: the minimum they
    start from, which may lie far from the nominal start; on a Z_c(4100)⁻ J^P toy only
    starts with Re ≳ 0.39 reached the K*0(1950) coupling's lower solution at Re = 0.63: the
    box around the nominal −0.2 ends at 0.4, the one around the minimum's −0.04 at 0.56)."""
    p = params[name]
    lo, hi = p.limits
    half = 10.0 * p.error_guess
    centre = p.value if around is None else around
    return (lo if math.isfinite(lo) else centre - half,
            hi if math.isfinite(hi) else centre + half)


def _start_points(params: ParameterSet, starts: int, rng: np.random.Generator | None,
                  scan: Sequence[str] = ()) -> list[np.ndarray]:
    """The nominal start, then ``starts - 1`` others.

    With free ``scan`` parameters (those that exist only under the alternative hypothesis,
    e.g. the mass and width of a signal whose yield may vanish) the other starts are a
    scrambled Halton (low-discrepancy) sequence over their whole allowed range
    (:func:`_scan_box`), every other parameter at its nominal start: the likelihood has a
    local minimum near every fluctuation of the data, and only starts across the whole
    range find the global one (the "look-elsewhere" maximum of Gross & Vitells,
    Eur. Phys. J. C 70 (2010) 525). Without scan parameters each free parameter is drawn
    uniformly within ``value ± 10 steps`` (:attr:`Parameter.error_guess`), clipped to its
    limits.
    """
    x0 = params.values
    points = [x0]
    if starts <= 1:
        return points
    if rng is None:
        rng = np.random.default_rng(0)
    free_scan = [n for n in scan if not params[n].fixed]
    if free_scan:
        from scipy.stats import qmc

        idx = [params.index(n) for n in free_scan]
        box = np.array([_scan_box(params, n) for n in free_scan])
        u = qmc.Halton(len(idx), scramble=True, seed=rng).random(starts - 1)
        for row in box[:, 0] + u * (box[:, 1] - box[:, 0]):
            x = x0.copy()
            x[idx] = row
            points.append(x)
        return points
    for _ in range(starts - 1):
        x = x0.copy()
        for i, p in enumerate(params):
            if p.fixed:
                continue
            lo, hi = p.limits
            half = 10.0 * p.error_guess
            a, b = max(lo, p.value - half), min(hi, p.value + half)
            x[i] = rng.uniform(a, b) if b > a else p.value
        points.append(x)
    return points


@dataclass(frozen=True)
class ProfileStarts:
    """Starts from a coarse profile of the likelihood over the scan parameters.

    Before the full fits, the scan parameters (e.g. the mass and width of a signal that
    exists only under the alternative hypothesis) are fixed at each point of a ``grid``
    over their whole allowed range (cell centres of :func:`_scan_box`) and only the
    ``free`` parameters are fitted there, cheaply (loose tolerance, no HESSE; Newton steps
    with the likelihood's exact derivatives in those parameters where it offers them,
    :func:`_profile_objective`, else MIGRAD strategy 0 with numerical derivatives). The
    full fit then starts from the ``best`` grid points
    (lowest profile −ln L) with the profile's fitted values. The profile over the scan
    parameters is the quantity whose maximum over the range is the look-elsewhere test
    statistic (Gross & Vitells, Eur. Phys. J. C 70 (2010) 525), so its coarse scan finds
    the basin of the global minimum where random starts land in it only by chance.

    Attributes
    ----------
    grid : tuple of int
        Points per scan parameter, in ``scan`` order.
    best : int
        Number of grid points the full fit starts from: the lowest local minima of the
        profile on the grid (no neighbour lower: one start per basin).
    free : tuple of str, optional
        Parameters fitted at each grid point (default: every free parameter that is not a
        scan parameter). A nested test floats only the parameters of the alternative alone
        (the signal couplings), the others at the null minimum (``base``).
    base : numpy.ndarray, optional
        Values of the parameters that are not ``free`` (default: the nominal values); the
        ``free`` ones start at their nominal values.
    refine : int
        If > 0, the ``refine`` lowest grid minima are first refitted with the scan
        parameters free as well (the others as in the grid fits), and the full fit starts
        from the ``best`` lowest of those (distinct by more than ``SAME_MINIMUM``).
    line : int
        If > 0, also profile ``line`` equally spaced values (cell centres) of the first scan
        parameter with the others at their lower limit (:func:`line_grid`: for a mass and a
        width, the narrowest state allowed). A narrow state's basin in the mass is about
        its width wide, narrower than a coarse grid's cells at larger widths; the local
        minima of this line join the grid's (ranked together by their profile −ln L).
    edges : int
        If > 0, also profile ``edges`` cell centres along every edge of the scan box
        (:func:`edge_lines`: each scan parameter at its lower and upper limit, the other
        across its range; with a ``line`` not the edge it lies on), and start one more full
        fit from the lowest point of each edge. A minimum on a limit lies half a grid cell
        beyond the grid's outermost points, and the profile (the parameters outside
        ``free`` held at ``base``) ranks it below minima whose full fits are higher, or
        below another edge's: each edge gets a start of its own.
    screen : int
        If > 0, the ``screen`` lowest profile minima (grid and line) and each edge's
        lowest point are each first fitted briefly with every parameter free (loose tolerance, no
        HESSE), and the full fit starts from the ``best`` lowest of those ends (distinct by
        more than ``SAME_MINIMUM``), the edge points' included. The profile ranks basins
        with the parameters outside ``free`` held at ``base``; a brief full fit ranks them
        as the full fit will, at a fraction of its cost, so that fewer full fits reach the
        same minima.
    """

    grid: tuple[int, ...]
    best: int = 2
    free: tuple[str, ...] | None = None
    base: np.ndarray | None = None
    refine: int = 0
    line: int = 0
    edges: int = 0
    screen: int = 0

    def __post_init__(self) -> None:
        if self.refine and self.screen:
            msg = "ProfileStarts: give refine or screen (two rankings of the profile's minima)"
            raise ValueError(msg)


@dataclass(frozen=True)
class Restarts:
    """Brief fits from the lowest minimum with some parameters moved across their range.

    After every start, the lowest minimum's vector is refitted briefly (every parameter
    free, the profile's loose tolerance, no HESSE, one MIGRAD without iminuit's retries:
    the end only says whether the start leads lower) from ``points`` low-discrepancy points (a
    Halton sequence without scrambling, its first point — the box's corner — skipped) over
    the ranges of ``params`` (:func:`_scan_box` around the minimum), the other parameters at
    the minimum's values; a brief fit that ends lower than the minimum is followed by a full
    fit from its end. For nuisance parameters with several minima at the same signal, e.g.
    the LASS scattering length and effective range of a K π S-wave (Aston et al., Nucl.
    Phys. B 296 (1988) 493, Eq. 1), whose second minima no start of the signal's scan
    reaches; with the signal's scan parameters among ``params`` the points move both, for
    minima where the nuisances and the signal differ at once. A restart that found a lower
    minimum is followed by another round around it (``RESTART_ROUNDS`` in all at most).

    Attributes
    ----------
    params : tuple of str
        The parameters moved (those the model does not have, or has fixed, are ignored).
    points : int
        Number of restarts.
    """

    params: tuple[str, ...]
    points: int = 4


def _restart_points(params: ParameterSet, x: np.ndarray,
                    restarts: Restarts | Sequence[Restarts]) -> list[np.ndarray]:
    """The start vectors of :class:`Restarts` (one set or several, in order) around the
    minimum ``x``, each once: a set whose other parameters the model lacks or fixes
    repeats an earlier set's points (the Halton sequence is not scrambled), e.g. the
    null hypothesis of a search has no signal mass or width to move with the S-wave."""
    from scipy.stats import qmc

    out = []
    for one in (restarts,) if isinstance(restarts, Restarts) else restarts:
        names = [n for n in one.params if n in params and not params[n].fixed]
        if not names or one.points < 1:
            continue
        idx = [params.index(n) for n in names]
        box = np.array([_scan_box(params, n, float(x[i])) for n, i in zip(names, idx, strict=True)])
        u = qmc.Halton(len(idx), scramble=False).random(one.points + 1)[1:]
        for row in box[:, 0] + u * (box[:, 1] - box[:, 0]):
            y = np.array(x, dtype=float)
            y[idx] = row
            if not any(np.array_equal(y, z) for z in out):
                out.append(y)
    return out


#: MIGRAD's EDM tolerance factor in a profile fit: the grid only ranks basins
_PROFILE_TOL = 1.0


def _profile_objective(nll: Callable[[np.ndarray], float],
                       params: ParameterSet) -> Callable[[np.ndarray], float]:
    """What a profile fit over the free parameters of ``params`` minimises: the likelihood's
    own restriction to them with an exact gradient and Hessian (``nll.restricted(free)``,
    e.g. :meth:`toyengine.core.dalitz.DalitzNLL.restricted`, then a Newton fit) where it
    offers one, else ``nll`` with numerical derivatives
    (:class:`~toyengine.core.likelihood.ValueOnly`)."""
    obj = as_likelihood(nll).restricted(params.free_mask)
    return obj if obj is not None else ValueOnly(nll)


def scan_grid(params: ParameterSet, names: Sequence[str],
               shape: Sequence[int]) -> np.ndarray:
    """Cell centres of a ``shape`` grid over the scan box (:func:`_scan_box`: the limits)
    of the parameters ``names``, one row a point, the first parameter varying slowest."""
    axes = []
    for n, k in zip(names, shape, strict=True):
        lo, hi = _scan_box(params, n)
        axes.append(lo + (np.arange(k) + 0.5) * (hi - lo) / k)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1)


def line_grid(params: ParameterSet, names: Sequence[str], points: int) -> np.ndarray:
    """The points of :attr:`ProfileStarts.line`: ``points`` cell centres over the scan box
    (:func:`_scan_box`) of the first parameter of ``names``, every other one at its lower
    limit plus :data:`LINE_OFFSET` of its box (a start on the limit itself leaves a
    bounded minimiser no room to move inwards). One row a point."""
    lo, hi = _scan_box(params, names[0])
    first = lo + (np.arange(int(points)) + 0.5) * (hi - lo) / int(points)
    out = np.empty((first.size, len(names)))
    out[:, 0] = first
    for j, n in enumerate(names[1:], start=1):
        a, b = _scan_box(params, n)
        out[:, j] = a + LINE_OFFSET * (b - a)
    return out


#: where :func:`line_grid` puts the other scan parameters: this fraction of their range
#: above their lower limit
LINE_OFFSET = 0.002


def edge_lines(params: ParameterSet, names: Sequence[str], points: int) -> list[np.ndarray]:
    """The lines of :attr:`ProfileStarts.edges`: for every scan parameter of ``names`` and
    each of its two limits (moved :data:`LINE_OFFSET` of its box inwards), ``points`` cell
    centres of the other scan parameter (one scan parameter: the two limits alone). One
    array per edge, one row a point."""
    boxes = [_scan_box(params, n) for n in names]
    out = []
    for j, (lo, hi) in enumerate(boxes):
        for at in (lo + LINE_OFFSET * (hi - lo), hi - LINE_OFFSET * (hi - lo)):
            if len(names) == 1:
                out.append(np.array([[at]]))
                continue
            k = 1 - j
            a, b = boxes[k]
            line = np.empty((int(points), 2))
            line[:, j] = at
            line[:, k] = a + (np.arange(int(points)) + 0.5) * (b - a) / int(points)
            out.append(line)
    return out


def _profile_starts(nll: Callable[[np.ndarray], float], params: ParameterSet,
                    scan: Sequence[str], profile: ProfileStarts) -> tuple[list[np.ndarray], int]:
    """The start vectors of :class:`ProfileStarts` and the NLL calls they cost."""
    free_scan = [n for n in scan if not params[n].fixed]
    if not free_scan:
        return [], 0
    if len(profile.grid) != len(free_scan):
        raise ValueError(f"profile grid {profile.grid} has {len(profile.grid)} axes, "
                         f"the free scan parameters are {free_scan}")
    floated = (profile.free if profile.free is not None
               else tuple(p.name for p in params if not p.fixed and p.name not in scan))
    base = params.values if profile.base is None else np.asarray(profile.base, dtype=float)
    x0 = base.copy()
    for n in floated:
        x0[params.index(n)] = params[n].value
    fixed = params.updated({n: {"fixed": True} for n in params.free_names
                            if n not in floated})
    idx = [params.index(n) for n in free_scan]
    plain = _profile_objective(nll, fixed)
    points = scan_grid(params, free_scan, profile.grid)
    prof, values, nfcn = _profile_values(plain, fixed, x0, idx, points)
    order = [k for k in _grid_minima(prof.reshape(profile.grid)) if math.isfinite(prof[k])]
    if profile.line:
        # the line's local minima join the grid's, indexed after them
        lprof, lvalues, lfcn = _profile_values(plain, fixed, x0, idx,
                                               line_grid(params, free_scan, profile.line))
        nfcn += lfcn
        n = len(points)
        order += [n + k for k in _grid_minima(lprof) if math.isfinite(lprof[k])]
        prof = np.concatenate([prof, lprof])
        values = [*values, *lvalues]
    edge_start: list[np.ndarray] = []
    if profile.edges:
        # the lowest point of each edge of the box is one more start of its own: the
        # profile (the other parameters at the base) ranks a minimum on a limit too low to
        # compete with the grid's, or with another edge's
        edges = edge_lines(params, free_scan, profile.edges)
        if profile.line and len(free_scan) == 2:
            edges = [e for j, e in enumerate(edges) if j != 2]  # the line lies on that edge
        lowest = []
        for edge in edges:
            eprof, evalues, efcn = _profile_values(plain, fixed, x0, idx, edge)
            nfcn += efcn
            k = int(np.argmin(eprof))
            if math.isfinite(eprof[k]):
                lowest.append((float(eprof[k]), len(lowest), evalues[k]))
        edge_start = [x for _, _, x in sorted(lowest, key=lambda e: (e[0], e[1]))]
    order.sort(key=lambda k: (prof[k], k))  # ties by grid order: deterministic
    if profile.screen:
        # brief full fits rank the candidates as the full fit would (every parameter free)
        ends: list[tuple[float, int, np.ndarray]] = []
        cands = [values[k] for k in order[: profile.screen]] + edge_start
        for i, x in enumerate(cands):
            res = _single_fit(nll, params, x, False, 0, _PROFILE_TOL, False)
            nfcn += res.nfcn
            if math.isfinite(res.nll) and not any(abs(res.nll - e[0]) <= SAME_MINIMUM
                                                  for e in ends):
                ends.append((res.nll, i, res.values))
        ends.sort(key=lambda e: (e[0], e[1]))
        return [v for _, _, v in ends[: max(int(profile.best), 0)]], nfcn
    if not profile.refine:
        return [values[k] for k in order[: max(int(profile.best), 0)]] + edge_start, nfcn
    # each basin's minimum with the scan parameters free too (still few parameters): the
    # grid point's profile value ranks basins only up to the grid spacing
    loose = params.updated({n: {"fixed": True} for n in params.free_names
                            if n not in floated and n not in free_scan})
    refined: list[tuple[float, int, np.ndarray]] = []
    for k in order[: profile.refine]:
        res = _single_fit(plain, loose, values[k], False, 0, _PROFILE_TOL, False)
        nfcn += res.nfcn
        if math.isfinite(res.nll) and not any(abs(res.nll - r[0]) <= SAME_MINIMUM
                                              for r in refined):
            refined.append((res.nll, k, res.values))
    refined.sort(key=lambda r: (r[0], r[1]))
    return [v for _, _, v in refined[: max(int(profile.best), 0)]] + edge_start, nfcn


def _profile_values(plain: Callable[[np.ndarray], float], fixed: ParameterSet, x0: np.ndarray,
                    idx: Sequence[int], points: np.ndarray) -> tuple[np.ndarray,
                                                                     list[np.ndarray], int]:
    """Profile fits of ``plain`` over the free parameters of ``fixed``, from ``x0`` with the
    scan parameters (positions ``idx``) at each row of ``points``: −ln L (inf where not
    finite), fitted vectors and the calls spent."""
    prof = np.full(len(points), np.inf)
    values = [x0] * len(points)
    nfcn = 0
    for k, row in enumerate(points):
        x = x0.copy()
        x[idx] = row
        res = _single_fit(plain, fixed, x, False, 0, _PROFILE_TOL, False)
        nfcn += res.nfcn
        if math.isfinite(res.nll):
            prof[k], values[k] = res.nll, res.values
    return prof, values, nfcn


def _grid_minima(z: np.ndarray) -> list[int]:
    """Flat indices of the local minima of ``z`` on its grid (no neighbour, diagonals
    included, is lower): one start per basin, not several in the same one."""
    padded = np.pad(z, 1, constant_values=np.inf)
    lowest = np.ones(z.shape, dtype=bool)
    for shift in np.ndindex(*(3,) * z.ndim):
        if all(s == 1 for s in shift):
            continue
        window = tuple(slice(s, s + n) for s, n in zip(shift, z.shape, strict=True))
        lowest &= z <= padded[window]
    return [int(k) for k in np.flatnonzero(lowest.ravel())]


def fit(nll: Callable[[np.ndarray], float], params: ParameterSet, *, starts: int = 1,
        rng: np.random.Generator | None = None, minos: bool = False,
        strategy: int | None = None, tol: float | None = None, hesse: bool = True,
        scan: Sequence[str] = (), extra_starts: Sequence[np.ndarray] = (),
        profile: ProfileStarts | None = None,
        restarts: Restarts | Sequence[Restarts] | None = None,
        fixed_flat: Sequence[str] = ()) -> FitResult:
    """Minimise ``nll``: trust-region Newton when it has an analytic ``grad`` and
    ``hessian`` and MINOS is not asked for (:func:`_single_fit`), else MIGRAD, then HESSE
    (and MINOS if asked).

    Parameters
    ----------
    nll : callable
        ``nll(x) -> float`` on the full parameter vector in ``params`` order (fixed
        parameters included); may carry ``nll.grad(x)``. The function must already contain
        the Gaussian constraint terms.
    params : ParameterSet
        Start values, limits and fixed flags.
    starts : int
        Number of starts: the nominal one plus ``starts - 1`` others (drawn from ``rng``;
        see :func:`_start_points`). The lowest minimum is kept; a valid one is preferred if
        it is within ``VALID_PREFERENCE`` of the lowest (see :func:`_better`).
    rng : numpy.random.Generator, optional
        Source of the randomised starts (needed for reproducibility when ``starts > 1``).
    minos : bool
        Also run MINOS for every free parameter.
    strategy : int, optional
        MIGRAD strategy; default 0 when ``nll`` has an analytic ``grad``, else 1. HESSE
        runs after a valid MIGRAD (analytically when ``nll`` has ``hessian``), so the
        covariance is the full one either way. (A Newton fit has no strategy.)
    tol : float, optional
        MIGRAD's EDM tolerance factor (iminuit's ``Minuit.tol``; default 0.1); a Newton fit
        converges to the same EDM threshold (:func:`newton.edm_threshold`).
    hesse : bool
        Run HESSE. Without it (a significance study needs −ln L, not errors) ``valid``
        means a converged MIGRAD, and ``errors`` and ``covariance`` are NaN; MIGRAD's
        metric is then seeded with ``nll.expected_hessian`` (the Fisher information)
        where the likelihood offers one and has no exact ``hessian``
        (:func:`_seed_hessian`).
    scan : sequence of str
        The model's scan parameters (``model.scan_parameters``): the extra starts cover
        their whole allowed range.
    extra_starts : sequence of arrays
        Further full start vectors, tried after the others (e.g. the null-hypothesis
        minimum embedded in the alternative model, so that a nested fit cannot end above it).
    profile : ProfileStarts, optional
        Also start from the best points of a coarse profile over the free ``scan``
        parameters (tried after the others, before ``extra_starts``); its cost is in
        ``nfcn`` and ``time``, its starts in ``n_starts``.
    restarts : Restarts or sequence of Restarts, optional
        Then brief fits from the lowest minimum with some parameters moved across their
        range (:class:`Restarts`; several sets: the points of each in turn, e.g. the
        nuisances alone, then the nuisances with the signal); their cost is in ``nfcn`` and
        ``time``, their count in ``n_starts``.
    fixed_flat : sequence of str
        Parameters already fixed because they are flat (set by the rerun below; every
        start then has them at their nominal values).

    Returns
    -------
    FitResult
        ``valid=False`` (never an exception) when the fit fails numerically. A start that
        ends with free parameters on a limit is refitted with them fixed there
        (:func:`_refit_at_limits`) before the starts are compared. A failed fit of a
        model that fixes a parameter at 0 is rerun with the parameters the likelihood then
        does not depend on (:func:`flat_parameters`) fixed at their nominal values
        (``fixed_flat``; the calls of both in ``nfcn``).
    """
    t0 = time.perf_counter()
    nll = as_likelihood(nll)
    results = []
    total_nfcn = 0
    points = _start_points(params, max(int(starts), 1), rng, scan)
    if profile is not None:
        found, nfcn = _profile_starts(nll, params, scan, profile)
        points += found
        total_nfcn += nfcn
    points += [np.asarray(x, dtype=float) for x in extra_starts]
    if fixed_flat:  # a rerun with flat parameters fixed (below): at their nominal values
        idx = [params.index(n) for n in fixed_flat]
        points = [np.array(x, dtype=float) for x in points]
        for x in points:
            x[idx] = params.values[idx]
    def full_fit(x0: np.ndarray) -> FitResult:
        """One start's fit, refitted with the parameters it left on a limit fixed there;
        its calls (both fits') added to ``total_nfcn``."""
        nonlocal total_nfcn
        res = _single_fit(nll, params, x0, minos, strategy, tol, hesse)
        total_nfcn += res.nfcn
        refit = _refit_at_limits(nll, params, res, minos, strategy, tol, hesse)
        if refit is not None:
            total_nfcn += refit.nfcn
            res = refit
        results.append(res)
        return res

    best: FitResult | None = None
    for x0 in points:
        res = full_fit(x0)
        if best is None or _better(res, best):
            best = res
    assert best is not None
    n_restarts = 0
    replaced: list[np.ndarray] = []
    # restarts around the lowest minimum, again around a lower one they found (its other
    # parameters moved too, so the points around it are new starts), at most RESTART_ROUNDS
    origin: FitResult | None = None
    for _ in range(RESTART_ROUNDS if restarts is not None else 0):
        if origin is best or not math.isfinite(best.nll):
            break
        origin = best
        for x0 in _restart_points(params, origin.values, restarts):
            n_restarts += 1
            brief = _single_fit(nll, params, x0, False, 0, _PROFILE_TOL, False, once=True)
            total_nfcn += brief.nfcn
            if not (math.isfinite(brief.nll) and brief.nll < best.nll - SAME_MINIMUM):
                continue
            res = full_fit(brief.values)
            if _better(res, best):
                if res.nll < best.nll - SAME_MINIMUM:  # another mode, not the same minimum
                    replaced.append(best.values)
                best = res
    n_best = sum(1 for r in results
                 if math.isfinite(r.nll) and r.nll <= best.nll + SAME_MINIMUM)
    flat = (flat_parameters(nll, params)
            if not best.valid and _fixed_at_zero(params) else ())
    if flat:
        # e.g. the mass and width of a signal whose yield is fixed at 0: no minimum along
        # them (HESSE singular); fixed at their nominal values, the fit is regular. Only
        # after a failed fit: a valid one is never changed (the probe's likelihood calls
        # could change a cached likelihood's last bits)
        again = fit(nll, params.updated({n: {"fixed": True} for n in flat}), starts=starts,
                    rng=rng, minos=minos, strategy=strategy, tol=tol, hesse=hesse, scan=scan,
                    extra_starts=extra_starts, profile=profile, restarts=restarts,
                    fixed_flat=(*fixed_flat, *flat))
        return FitResult(**{**again.__dict__, "time": time.perf_counter() - t0,
                            "nfcn": again.nfcn + total_nfcn})
    elapsed = time.perf_counter() - t0
    return FitResult(**{**best.__dict__, "time": elapsed, "nfcn": total_nfcn,
                        "n_starts": len(points) + n_restarts, "n_best": n_best,
                        "replaced_minima": tuple(replaced),
                        "fixed_flat": tuple(dict.fromkeys((*fixed_flat, *best.fixed_flat)))})


def _fixed_at_zero(params: ParameterSet) -> bool:
    """Does ``params`` fix a parameter at 0 (a signal yield or amplitude switched off)? Only
    then can other parameters lose every influence on the likelihood."""
    return any(p.fixed and p.value == 0.0 for p in params) and bool(params.free_names)


def flat_parameters(nll: Callable[[np.ndarray], float], params: ParameterSet,
                    x: np.ndarray | None = None) -> tuple[str, ...]:
    """The free parameters on which ``nll`` does not depend at ``x`` (default: the values
    of ``params``).

    With a signal yield (or amplitude) at zero the signal's shape parameters — its mass,
    width, tail — drop out of the likelihood: the minimum is not a point but a line along
    them, MIGRAD cannot converge there and HESSE is singular, although the fit is
    well defined (the null hypothesis of a nested test, Wilks, Ann. Math. Stat. 9 (1938)
    60; Chernoff, Ann. Math. Stat. 25 (1954) 573). A parameter counts as flat when moving it
    one step (:attr:`~toyengine.core.params.Parameter.error_guess`) up, one step down and
    ten steps up (within its limits) changes −ln L by at most ``FLAT_TOLERANCE`` relative,
    i.e. not at all beyond rounding. These probe calls are not counted in any ``nfcn``.
    """
    x = params.values if x is None else np.asarray(x, dtype=float)
    try:
        with np.errstate(all="ignore"):
            f0 = float(nll(x))
    except Exception:  # noqa: BLE001 - the fit itself reports a failing likelihood
        return ()
    if not math.isfinite(f0):
        return ()
    tol = FLAT_TOLERANCE * max(1.0, abs(f0))
    out = []
    for i, p in enumerate(params):
        if p.fixed:
            continue
        lo, hi = p.limits
        moved = {min(max(x[i] + k * p.error_guess, lo), hi) for k in (1.0, -1.0, 10.0)}
        moved.discard(float(x[i]))
        if not moved:
            continue
        flat = True
        for xi in sorted(moved):
            y = x.copy()
            y[i] = xi
            try:
                with np.errstate(all="ignore"):
                    fy = float(nll(y))
            except Exception:  # noqa: BLE001 - a probe that fails is no evidence of flatness
                fy = math.nan
            if not (math.isfinite(fy) and abs(fy - f0) <= tol):
                flat = False
                break
        if flat:
            out.append(p.name)
    return tuple(out)


def _refit_at_limits(nll: Callable[[np.ndarray], float], params: ParameterSet,
                     best: FitResult, minos: bool, strategy: int | None,
                     tol: float | None, hesse: bool = True) -> FitResult | None:
    """Refit a minimum that ended on parameter limits with those parameters fixed there.

    At a limit the covariance of the free fit is not positive definite (the minimum is not
    a stationary point), so MIGRAD/HESSE flag it invalid although it is the constrained
    maximum-likelihood point; with the parameter fixed at the limit the remaining fit is
    regular. For a signal yield bounded at zero this is the χ̄² case of Chernoff,
    Ann. Math. Stat. 25 (1954) 573: the alternative collapses onto the null, t = 0.
    The refit is kept when it is not worse than ``best`` by more than ``SAME_MINIMUM``;
    returns None when nothing is at a limit or the refit is worse.
    """
    if not math.isfinite(best.nll):
        return None
    limits = _at_limits(params, best.values)
    if not limits:
        return None
    fixed = params.updated({n: {"value": v, "fixed": True} for n, v in limits.items()})
    x0 = np.array(best.values, dtype=float)
    for n, v in limits.items():
        x0[params.index(n)] = v
    res = _single_fit(nll, fixed, x0, minos, strategy, tol, hesse)
    flat: tuple[str, ...] = ()
    if not res.valid and any(v == 0.0 for v in limits.values()):
        # a signal yield on its limit 0: its shape parameters are flat there (no minimum
        # along them, HESSE singular); fixed at their nominal values
        # (:func:`flat_parameters`) the refit is regular
        flat = flat_parameters(nll, fixed, x0)
        if flat:
            fixed = fixed.updated({n: {"fixed": True} for n in flat})
            for n in flat:
                x0[params.index(n)] = params[n].value
            again = _single_fit(nll, fixed, x0, minos, strategy, tol, hesse)
            res = FitResult(**{**again.__dict__, "nfcn": again.nfcn + res.nfcn})
    if not (math.isfinite(res.nll) and res.nll <= best.nll + SAME_MINIMUM):
        return None
    return FitResult(**{**res.__dict__, "at_limit": True, "fixed_at_limit": tuple(limits),
                        "fixed_flat": flat})


def lower_of(a: FitResult, b: FitResult) -> FitResult:
    """The better of two searches of the same likelihood (:func:`_better`), with the calls,
    time and starts of both, and the starts of both that reached its minimum."""
    best, other = (b, a) if _better(b, a) else (a, b)
    same = math.isfinite(other.nll) and other.nll <= best.nll + SAME_MINIMUM
    return FitResult(**{**best.__dict__, "nfcn": a.nfcn + b.nfcn, "time": a.time + b.time,
                        "n_starts": a.n_starts + b.n_starts,
                        "n_best": best.n_best + (other.n_best if same else 0)})


def _better(a: FitResult, b: FitResult) -> bool:
    """Is ``a`` a better minimum than ``b``?

    The lower −ln L wins, except that a valid minimum is preferred to an invalid one whose
    −ln L is lower by less than ``VALID_PREFERENCE`` (a valid fit at essentially the same
    point). A "valid" minimum far above another one is a false minimum, not a result.
    """
    if not math.isfinite(a.nll):
        return False
    if not math.isfinite(b.nll):
        return True
    if a.valid != b.valid:
        valid, invalid = (a, b) if a.valid else (b, a)
        prefer_valid = valid.nll - invalid.nll < VALID_PREFERENCE
        return (a is valid) == prefer_valid
    return a.nll < b.nll


#: two minima closer than this in −ln L (0.01 in t = Δ(−2 ln L)) are the same minimum
SAME_MINIMUM = 0.005

#: rounds of :class:`Restarts`: a round that found a lower minimum is followed by another
#: around it
RESTART_ROUNDS = 3

#: relative change of −ln L within which a parameter is flat (:func:`flat_parameters`):
#: rounding only
FLAT_TOLERANCE = 1e-12

#: −ln L margin within which a valid minimum beats a lower invalid one (0.05 in −ln L is
#: 0.1 in Δ(−2 ln L), far below any statistical resolution)
VALID_PREFERENCE = 0.05
