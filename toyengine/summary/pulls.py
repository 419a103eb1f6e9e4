"""Fit bias, pulls and coverage of toy ensembles.

For each (variant, hypothesis, parameter) with a generation value (``truth``):

* bias = ⟨x̂⟩ − x_true, also in units of the mean HESSE error ⟨σ̂⟩ (the "possible bias due to the
  fitting procedure" from pseudoexperiments generated from the fit result, LHCb, Eur. Phys. J. C 78
  (2018) 1019, Sect. 7);
* pull ``g = (x̂ − x_true) / σ̂`` (HESSE), its mean ± σ_g/√n and width σ_g ± σ_g/√(2(n−1))
  (the large-n standard error of a Gaussian standard deviation);
* if MINOS ran, the asymmetric pull ``g = (x̂ − x_true)/σ⁺`` for ``x̂ < x_true`` and
  ``(x̂ − x_true)/|σ⁻|`` otherwise (the error towards the truth): where the likelihood is not
  parabolic (a width on a few hundred events) the HESSE error grows with x̂, which pulls the
  HESSE pull mean negative although x̂ itself is unbiased, and this pull does not;
* coverage of the ±1σ intervals, HESSE ``|x̂ − x_true| ≤ σ̂`` and, if MINOS ran,
  ``x̂ + σ⁻ ≤ x_true ≤ x̂ + σ⁺``, with a Clopper–Pearson 68.27% interval; nominal 68.27%;
* for fits to sWeighted data (stores with ``error_naive``; ``error`` is then the
  asymptotically correct error of Langenbruch, Eur. Phys. J. C 82 (2022) 393): the coverage
  and pull width with the naive and the sum-of-weights-squared errors beside it, on the
  same toys;
* the failed-fit fraction, always (a failed fit is never silently dropped; with
  ``include_failed=True`` invalid fits with finite results are used as well).

Fixed parameters (no finite HESSE error in any used toy) are skipped.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from ._common import (
    CL_1SIGMA,
    check_hypothesis,
    clopper_pearson,
    fit_masks,
    fmt_num,
    fmt_to_scale,
    jsonable,
    require_vars,
)
from .labels import param_display
from .tables import Cell, Table

__all__ = ["PullRow", "PullTable", "pull_summary"]


@dataclass(frozen=True)
class PullRow:
    """Pull/bias/coverage numbers of one (variant, hypothesis, parameter).

    Attributes
    ----------
    n_toys, n_done, n_failed : int
        Toy slots, attempted fits and attempted fits that did not converge.
    failed_fraction : float
        ``n_failed / n_done``.
    n_used : int
        Toys entering the numbers below (converged, or attempted if ``include_failed``, and
        with finite value and error).
    mean, rms : float
        Mean and standard deviation (ddof = 1) of the fitted values.
    mean_error : float
        Mean HESSE error ⟨σ̂⟩.
    bias, bias_over_error : float
        ``mean − truth`` and ``bias / mean_error``.
    pull_mean, pull_mean_err, pull_width, pull_width_err : float
        See the module docstring.
    coverage_hesse, coverage_hesse_lo, coverage_hesse_hi : float
        Fraction of toys with the truth inside ±1σ̂, and its CP interval.
    coverage_minos, coverage_minos_lo, coverage_minos_hi : float
        Same for the MINOS interval (NaN when MINOS did not run); ``n_minos`` toys.
    pull_mean_minos, pull_mean_minos_err, pull_width_minos, pull_width_minos_err : float
        Mean and width of the asymmetric MINOS pull (module docstring) on the ``n_minos``
        toys, with the errors of the HESSE ones (NaN when MINOS did not run).
    coverage_naive, pull_width_naive, coverage_sumw2, pull_width_sumw2 : float
        Coverage and pull width with the naive and the sum-of-weights-squared errors of a
        fit to sWeighted data (NaN for other stores).
    n_at_limit : int
        Of the toys used, those whose fit ended on (or was refitted fixed at) a limit of
        this parameter (the store's ``at_limit``; 0 for stores written before it existed):
        their pulls are not Gaussian.
    """

    variant: int
    variant_name: str
    hypothesis: str
    param: str
    truth: float
    n_toys: int
    n_done: int
    n_failed: int
    failed_fraction: float
    n_used: int
    mean: float
    rms: float
    mean_error: float
    bias: float
    bias_over_error: float
    pull_mean: float
    pull_mean_err: float
    pull_width: float
    pull_width_err: float
    coverage_hesse: float
    coverage_hesse_lo: float
    coverage_hesse_hi: float
    coverage_minos: float = math.nan
    coverage_minos_lo: float = math.nan
    coverage_minos_hi: float = math.nan
    n_minos: int = 0
    pull_mean_minos: float = math.nan
    pull_mean_minos_err: float = math.nan
    pull_width_minos: float = math.nan
    pull_width_minos_err: float = math.nan
    coverage_naive: float = math.nan
    pull_width_naive: float = math.nan
    coverage_sumw2: float = math.nan
    pull_width_sumw2: float = math.nan
    n_at_limit: int = 0


_CSV_FIELDS = tuple(PullRow.__dataclass_fields__)


@dataclass(frozen=True)
class PullTable:
    """All :class:`PullRow` of a Dataset, with renderers."""

    rows: tuple[PullRow, ...]
    include_failed: bool = False
    cl: float = CL_1SIGMA
    study_name: str = ""
    failed: tuple[tuple[int, str, str, int, int, int], ...] = field(default=())
    labels: tuple[tuple[str, str], ...] = field(default=())

    def row(self, param: str, hypothesis: str | None = None, variant: int = 0) -> PullRow:
        """The row of ``param`` (and ``hypothesis``/``variant`` if several)."""
        for r in self.rows:
            if (
                r.param == param
                and r.variant == variant
                and (hypothesis is None or r.hypothesis == hypothesis)
            ):
                return r
        from ._common import SummaryError

        have = sorted({(r.variant, r.hypothesis, r.param) for r in self.rows})
        msg = (
            f"no pull row for param={param!r}, hypothesis={hypothesis!r}, "
            f"variant={variant}; have {have}"
        )
        raise SummaryError(msg)

    def table(self) -> Table:
        """The display/CSV table: parameters by their display label and unit (values in that
        unit); a pull mean more than 3σ from 0 or a width more than 3σ from 1 (σ its
        statistical error) is flagged with ``!``; the variant column is left out when there
        is one variant, the MINOS column when MINOS did not run."""
        hdr = (
            "variant",
            "hyp.",
            "param",
            "truth",
            "n used",
            "failed",
            "mean",
            "RMS",
            "⟨σ⟩",
            "bias",
            "bias/⟨σ⟩",
            "pull mean",
            "pull width",
            "cov. HESSE",
            "cov. MINOS",
            "MINOS pull mean / width",
        )
        weighted = any(math.isfinite(r.coverage_naive) for r in self.rows)
        if weighted:
            hdr = (*hdr, "cov. naive", "cov. Σw²")
        display = dict(self.labels)
        one_variant = len({r.variant for r in self.rows}) <= 1
        n_flag = 0
        cells = []
        for r in self.rows:
            # truth and mean to the precision of the spread (a bias must show)
            scale = min((v for v in (r.rms, r.mean_error) if math.isfinite(v) and v > 0),
                        default=math.nan)
            flag_m = _off_by(r.pull_mean, 0.0, r.pull_mean_err)
            flag_w = _off_by(r.pull_width, 1.0, r.pull_width_err)
            n_flag += flag_m + flag_w
            cov_m = (
                f"{fmt_num(r.coverage_minos, 3)} [{fmt_num(r.coverage_minos_lo, 3)}, "
                f"{fmt_num(r.coverage_minos_hi, 3)}]"
                if r.n_minos
                else "—"
            )
            pull_m = (
                f"{fmt_num(r.pull_mean_minos, 2)} ± {fmt_num(r.pull_mean_minos_err, 1)} / "
                f"{fmt_num(r.pull_width_minos, 3)} ± {fmt_num(r.pull_width_minos_err, 1)}"
                if math.isfinite(r.pull_mean_minos)
                else "—"
            )
            cells.append(
                (
                    "—" if one_variant else (r.variant_name or str(r.variant)),
                    r.hypothesis,
                    display.get(r.param, r.param),
                    fmt_to_scale(r.truth, scale),
                    str(r.n_used),
                    f"{r.n_failed}/{r.n_done} ({fmt_num(100 * r.failed_fraction, 2)}%)",
                    fmt_to_scale(r.mean, scale),
                    fmt_num(r.rms, 3),
                    fmt_num(r.mean_error, 3),
                    fmt_num(r.bias, 3),
                    fmt_num(r.bias_over_error, 2),
                    f"{fmt_num(r.pull_mean, 2)} ± {fmt_num(r.pull_mean_err, 1)}"
                    + (" !" if flag_m else ""),
                    f"{fmt_num(r.pull_width, 3)} ± {fmt_num(r.pull_width_err, 1)}"
                    + (" !" if flag_w else ""),
                    f"{fmt_num(r.coverage_hesse, 3)} [{fmt_num(r.coverage_hesse_lo, 3)}, "
                    f"{fmt_num(r.coverage_hesse_hi, 3)}]",
                    cov_m,
                    pull_m,
                    *((f"{fmt_num(r.coverage_naive, 3)} (width {fmt_num(r.pull_width_naive, 3)})",
                       f"{fmt_num(r.coverage_sumw2, 3)} (width {fmt_num(r.pull_width_sumw2, 3)})")
                      if weighted else ()),
                )
            )
        notes = [
            "pull = (x̂ − truth)/σ̂(HESSE); width error σ/√(2(n−1)); coverage of ±1σ "
            "(nominal 0.683) with Clopper–Pearson 68.27% interval.",
            *(["MINOS pull = (x̂ − truth)/σ⁺ below the truth, /|σ⁻| above it (the error "
               "towards the truth): unlike the HESSE pull its mean is not pulled negative "
               "when the error grows with the value (docs/statistics.md, Pulls)."]
              if any(math.isfinite(r.pull_mean_minos) for r in self.rows) else []),
            *(["sWeighted fits: σ̂ is the asymptotically correct error (Langenbruch, Eur. "
               "Phys. J. C 82 (2022) 393); cov. naive and cov. Σw² use the inverse weighted "
               "Hessian and the sum-of-weights-squared error on the same toys (pull width in "
               "brackets): both ignore the uncertainty of the sWeights."] if weighted else []),
            *([f"! = pull mean more than 3σ from 0 or width more than 3σ from 1 "
               f"({n_flag} flagged)."] if n_flag else []),
            *(["fits that ended at a limit of the parameter (their pulls are not Gaussian: "
               "a flag there may be the boundary, not a bias; docs/statistics.md, Pulls): "
               + ", ".join(f"{display.get(r.param, r.param)}"
                           + ("" if one_variant else f" ({r.variant_name or r.variant})")
                           + f" {r.n_at_limit}/{r.n_used}"
                           for r in self.rows if r.n_at_limit)] if any(
                r.n_at_limit for r in self.rows) else []),
            "failed = attempted fits that did not converge / attempted fits; "
            + (
                "invalid fits ARE included in the numbers (include_failed=True)."
                if self.include_failed
                else "only converged fits enter the numbers."
            ),
        ]
        return Table(
            title=f"Pulls, bias and coverage{' — ' + self.study_name if self.study_name else ''}",
            headers=tuple(Cell.of(h) for h in hdr),
            rows=tuple(tuple(Cell.of(c) for c in r) for r in cells),
            csv_header=_CSV_FIELDS,
            csv_rows=tuple(tuple(getattr(r, f) for f in _CSV_FIELDS) for r in self.rows),
            notes=tuple(notes),
            align="lll" + "r" * (len(hdr) - 3),
        )

    def tables(self) -> list[Table]:
        """``[self.table()]`` (uniform interface with the other summaries)."""
        return [self.table()]

    def __repr__(self) -> str:
        return self.table().to_text()

    def _repr_html_(self) -> str:
        return self.table().to_html()

    def to_text(self) -> str:
        """Plain text."""
        return self.table().to_text()

    def to_markdown(self) -> str:
        """Markdown."""
        return self.table().to_markdown()

    def to_latex(self) -> str:
        """LaTeX (booktabs)."""
        return self.table().to_latex()

    def to_csv(self) -> str:
        """CSV with one column per :class:`PullRow` field."""
        return self.table().to_csv()

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible dict."""
        return jsonable(self)  # type: ignore[no-any-return]


def _off_by(x: float, target: float, err: float) -> bool:
    """``|x − target| > 3 err`` (False when either is not finite)."""
    return bool(math.isfinite(x) and math.isfinite(err) and err > 0
                and abs(x - target) > 3.0 * err)


class _Moments:
    """Count, mean and sum of squared deviations of a stream of values, combined block by
    block (Chan, Golub and LeVeque, Am. Stat. 37 (1983) 242): the summary reads a store one
    block of toys at a time, and the moments of the whole do not depend on the blocks
    beyond rounding."""

    __slots__ = ("m2", "mean", "n")

    def __init__(self) -> None:
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, x: np.ndarray) -> None:
        nb = int(x.size)
        if not nb:
            return
        mb = float(x.mean())
        m2b = float(((x - mb) ** 2).sum())
        if not self.n:
            self.n, self.mean, self.m2 = nb, mb, m2b
            return
        n = self.n + nb
        delta = mb - self.mean
        self.mean += delta * nb / n
        self.m2 += m2b + delta * delta * self.n * nb / n
        self.n = n

    def std(self) -> float:
        """Standard deviation (ddof = 1); NaN below two values."""
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else math.nan


class _PullSums:
    """What :func:`pull_summary` needs of one (variant, hypothesis, parameter), summed over
    blocks of toys."""

    def __init__(self, alt: tuple[str, ...]) -> None:
        self.n_toys = self.n_done = self.n_failed = self.k_h = self.n_at_limit = 0
        self.any_error = False
        self.x, self.pull, self.err_sum = _Moments(), _Moments(), 0.0
        self.n_m = self.k_m = 0
        self.minos_pull = _Moments()
        self.alt = {a: (_Moments(), [0, 0]) for a in alt}  # pulls; [n, inside]

    def add(self, truth: float, x: np.ndarray, err: np.ndarray, mlo: np.ndarray | None,
            mhi: np.ndarray | None, ok: np.ndarray, done: np.ndarray, valid: np.ndarray,
            at_limit: np.ndarray | None, alt: dict[str, np.ndarray]) -> None:
        self.n_toys += int(x.size)
        self.n_done += int(done.sum())
        self.n_failed += int((done & ~valid).sum())
        self.any_error |= bool(np.any(ok & np.isfinite(err)))
        finite = ok & np.isfinite(x) & np.isfinite(err)
        use = finite & (err > 0)
        if at_limit is not None:
            self.n_at_limit += int((at_limit & finite).sum())
        xs, es = x[use], err[use]
        self.x.add(xs)
        self.err_sum += float(es.sum())
        self.pull.add((xs - truth) / es)
        self.k_h += int(np.count_nonzero(np.abs(xs - truth) <= es))
        if mlo is not None and mhi is not None:
            um = ok & np.isfinite(x) & np.isfinite(mlo) & np.isfinite(mhi)
            self.n_m += int(um.sum())
            xm, lo, hi = x[um], mlo[um], mhi[um]
            self.k_m += int(np.count_nonzero((xm + lo <= truth) & (truth <= xm + hi)))
            # the asymmetric pull: the error towards the truth; toys where it is 0 (MINOS
            # on a limit) left out
            d = xm - truth
            toward = np.where(d < 0, hi, -lo)
            self.minos_pull.add(d[toward > 0] / toward[toward > 0])
        for name, e in alt.items():
            ea = e[use]
            ok_a = np.isfinite(ea) & (ea > 0)
            pulls, counts = self.alt[name]
            counts[0] += int(ok_a.sum())
            counts[1] += int(np.count_nonzero(np.abs(xs[ok_a] - truth) <= ea[ok_a]))
            pulls.add((xs[ok_a] - truth) / ea[ok_a])

    def row(self, v: int, vname: str, h: str, p: str, truth: float,
            cl: float) -> PullRow | None:
        n = self.x.n
        if n == 0 and not self.any_error:
            return None  # fixed (or absent) parameter: no HESSE error anywhere
        nan = math.nan
        mean = self.x.mean if n else nan
        merr = self.err_sum / n if n else nan
        bias = mean - truth
        pm = self.pull.mean if n else nan
        pw = self.pull.std()
        lo_h, hi_h = clopper_pearson(self.k_h, n, cl)
        cov_m = lo_m = hi_m = nan
        minos_pull: dict[str, float] = {}
        if self.n_m:
            cov_m = self.k_m / self.n_m
            lo_m, hi_m = clopper_pearson(self.k_m, self.n_m, cl)
            g = self.minos_pull
            if g.n >= 2:
                w = g.std()
                minos_pull = dict(pull_mean_minos=g.mean, pull_mean_minos_err=w / math.sqrt(g.n),
                                  pull_width_minos=w,
                                  pull_width_minos_err=w / math.sqrt(2.0 * (g.n - 1)))
        extra = {}
        for name, (pulls, (n_a, k_a)) in self.alt.items():
            if n_a:
                extra[f"coverage_{name}"] = k_a / n_a
                extra[f"pull_width_{name}"] = pulls.std()
        return PullRow(
            **extra,  # type: ignore[arg-type]
            **minos_pull,  # type: ignore[arg-type]
            variant=v,
            variant_name=vname,
            hypothesis=h,
            param=p,
            truth=truth,
            n_toys=self.n_toys,
            n_done=self.n_done,
            n_failed=self.n_failed,
            failed_fraction=self.n_failed / self.n_done if self.n_done else nan,
            n_used=n,
            mean=mean,
            rms=self.x.std(),
            mean_error=merr,
            bias=bias,
            bias_over_error=bias / merr if n else nan,
            pull_mean=pm,
            pull_mean_err=pw / math.sqrt(n) if n > 1 else nan,
            pull_width=pw,
            pull_width_err=pw / math.sqrt(2.0 * (n - 1)) if n > 1 else nan,
            coverage_hesse=self.k_h / n if n else nan,
            coverage_hesse_lo=lo_h,
            coverage_hesse_hi=hi_h,
            coverage_minos=cov_m,
            coverage_minos_lo=lo_m,
            coverage_minos_hi=hi_m,
            n_minos=self.n_m,
            n_at_limit=self.n_at_limit,
        )


def _toy_blocks(da: xr.DataArray) -> list[slice]:
    """Slices of the toy axis, one per dask block of ``da`` (one slice for in-memory data):
    a summary holds one block of toys at a time, whatever the store's size."""
    chunks = da.chunksizes.get("toy") if da.chunks is not None else None
    if not chunks:
        return [slice(0, da.sizes["toy"])]
    edges = np.concatenate([[0], np.cumsum(chunks)])
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def pull_summary(
    ds: xr.Dataset,
    hypothesis: str | None = None,
    include_failed: bool = False,
    *,
    cl: float = CL_1SIGMA,
) -> PullTable:
    """Bias, pulls and coverage per (variant, hypothesis, param) where ``truth`` is finite.

    Parameters
    ----------
    ds : xarray.Dataset
        Results store (needs value, error, valid, truth; MINOS columns optional).
    hypothesis : str, optional
        Restrict to one fitted hypothesis (default: all).
    include_failed : bool
        Also use attempted fits that did not converge (their count is reported either way).
    cl : float
        Confidence level of the coverage intervals.

    Returns
    -------
    PullTable
    """
    require_vars(ds, ["value", "error", "valid", "truth"], "pull_summary")
    hyps = [str(h) for h in ds["hypothesis"].values]
    if hypothesis is not None:
        hyps = [check_hypothesis(ds, hypothesis)]
    all_hyps = [str(h) for h in ds["hypothesis"].values]
    ihs = [all_hyps.index(h) for h in hyps]
    done, valid = fit_masks(ds)
    ok_all = done if include_failed else valid
    dims = ("variant", "toy", "hypothesis", "param")
    has_minos = "minos_lower" in ds and "minos_upper" in ds
    alt_names = tuple(k for k in ("naive", "sumw2") if f"error_{k}" in ds)
    truth = ds["truth"].transpose("variant", "param").values
    params = [str(p) for p in ds["param"].values]
    vnames = (
        [str(n) for n in ds["variant_name"].values]
        if "variant_name" in ds
        else [str(i) for i in range(ds.sizes["variant"])]
    )
    cells = [(v, ih, ip) for v in range(ds.sizes["variant"]) for ih in ihs
             for ip in range(len(params)) if math.isfinite(float(truth[v, ip]))]
    sums = {c: _PullSums(alt_names) for c in cells}
    counts = {(v, ih): [0, 0, 0] for v in range(ds.sizes["variant"]) for ih in ihs}

    def block(da: xr.DataArray, sel: slice) -> np.ndarray:
        """``da`` at the toys ``sel`` and the summarised hypotheses, in memory."""
        d = dims if "param" in da.dims else ("variant", "toy", "hypothesis")
        return np.asarray(da.isel(toy=sel, hypothesis=ihs).transpose(*d).values)

    def optional(name: str, sel: slice) -> np.ndarray | None:
        return block(ds[name], sel) if name in ds else None

    for sel in _toy_blocks(ds["value"]):
        value, error = block(ds["value"], sel), block(ds["error"], sel)
        mlo = optional("minos_lower", sel) if has_minos else None
        mhi = optional("minos_upper", sel) if has_minos else None
        at_limit = optional("at_limit", sel)
        alt = {k: block(ds[f"error_{k}"], sel) for k in alt_names}
        okv, donev, validv = block(ok_all, sel), block(done, sel), block(valid, sel)
        for v, ih in counts:
            j = ihs.index(ih)
            c = counts[v, ih]
            c[0] += int(donev.shape[1])
            c[1] += int(donev[v, :, j].sum())
            c[2] += int((donev[v, :, j] & ~validv[v, :, j]).sum())
        for v, ih, ip in cells:
            j = ihs.index(ih)
            sums[v, ih, ip].add(
                float(truth[v, ip]), value[v, :, j, ip], error[v, :, j, ip],
                mlo[v, :, j, ip] if mlo is not None else None,
                mhi[v, :, j, ip] if mhi is not None else None,
                okv[v, :, j], donev[v, :, j], validv[v, :, j],
                at_limit[v, :, j, ip] if at_limit is not None else None,
                {k: e[v, :, j, ip] for k, e in alt.items()})
    rows: list[PullRow] = []
    failed = []
    for v in range(ds.sizes["variant"]):
        for h, ih in zip(hyps, ihs, strict=True):
            failed.append((v, vnames[v], h, *counts[v, ih]))
            for ip, p in enumerate(params):
                if (v, ih, ip) not in sums:
                    continue
                r = sums[v, ih, ip].row(v, vnames[v], h, p, float(truth[v, ip]), cl)
                if r is not None:
                    rows.append(r)
    return PullTable(
        rows=tuple(rows),
        include_failed=include_failed,
        cl=cl,
        study_name=str(ds.attrs.get("study_name", "")),
        failed=tuple(failed),
        labels=tuple(param_display(ds).items()),
    )
