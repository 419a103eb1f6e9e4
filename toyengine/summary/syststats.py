"""Statistics of systematic-uncertainty tables, as functions of arrays and of the per-variant
shifts: the per-variant shift and its toy uncertainty (paired, against the reference or the
nominal ensemble), the combination of a source's alternatives (maximum, half-difference of a ±
pair, rms), and the bootstrap over toys of the total (see :mod:`.systematics` for the
procedure and the papers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["HALF_68", "PAIR_SUFFIXES", "SystRow", "VariantShift", "bootstrap_spread",
           "bootstrap_totals", "combine_group", "group_values", "quadrature", "quadrature_stat",
           "variant_shifts"]

#: Suffix pairs (plus, minus) that mark a ± variation pair within one variant_group.
PAIR_SUFFIXES: tuple[tuple[str, str], ...] = (("_up", "_down"), ("_plus", "_minus"), ("+", "-"))

@dataclass(frozen=True)
class VariantShift:
    """Ensemble mean and shift of one variant (one alternative model / draw)."""

    variant: int
    name: str
    group: str
    separate: bool
    n_toys: int
    n_done: int
    n_failed: int
    n_used: int
    mean: dict[str, float]
    shift: dict[str, float]
    stat: dict[str, float]
    #: toys whose pair (this variant, nominal twin) was dropped for a failed fit (paired)
    n_pairs_dropped: int = 0
    #: the variant whose generator density this one equals ("" if none)
    same_as: str = ""
    #: "generate" (its models generate, the default fits) or "fit" (the nominal toys
    #: fitted with its models; store attribute ``fit_variants``)
    mode: str = "generate"


@dataclass(frozen=True)
class SystRow:
    """One source (a variant_group) of the table.

    ``value`` is the symmetric uncertainty, ``up``/``down`` the magnitudes of the positive
    and negative sides, ``stat`` the statistical uncertainty of ``value`` from the toy count,
    ``chosen`` the variant (or pair) that gives the maximum, ``signed`` the signed shift of
    that candidate.
    """

    source: str
    separate: bool
    rule: str
    variants: tuple[str, ...]
    value: dict[str, float]
    up: dict[str, float]
    down: dict[str, float]
    stat: dict[str, float]
    signed: dict[str, float]
    chosen: dict[str, str]
    n_done: int
    n_failed: int
    #: value ≥ 2 stat (a shift resolved from toy noise)
    significant: dict[str, bool] = field(default_factory=dict)
    n_pairs_dropped: int = 0
    #: "name ≡ other" for members whose generator equals another variant's
    degenerate: tuple[str, ...] = ()

    @property
    def failed_fraction(self) -> float:
        """Failed fits / attempted fits over the variants of this source."""
        return self.n_failed / self.n_done if self.n_done else math.nan


def _pair_stem(name: str) -> tuple[str, int] | None:
    """``(stem, +1|-1)`` if ``name`` ends with a ± pair suffix, else None."""
    low = name.lower()
    for plus, minus in PAIR_SUFFIXES:
        if low.endswith(plus) and len(name) > len(plus):
            return name[: -len(plus)], +1
        if low.endswith(minus) and len(name) > len(minus):
            return name[: -len(minus)], -1
    return None


def _split_pairs(
    members: Sequence[VariantShift], rule: str
) -> tuple[list[VariantShift], list[tuple[str, VariantShift, VariantShift]]]:
    """The single candidates and the ± pairs ``(name of +, +, −)`` of a group (pairs only
    under rule "max")."""
    stems: dict[str, dict[int, VariantShift]] = {}
    for vs in members:
        ps = _pair_stem(vs.name)
        if ps is not None:
            stems.setdefault(ps[0].lower(), {})[ps[1]] = vs
    paired: set[int] = set()
    pairs: list[tuple[str, VariantShift, VariantShift]] = []
    if rule == "max":
        for d in stems.values():
            if +1 in d and -1 in d:
                pairs.append((d[+1].name, d[+1], d[-1]))
                paired.update((d[+1].variant, d[-1].variant))
    return [vs for vs in members if vs.variant not in paired], pairs


def group_values(shift: np.ndarray, members: Sequence[VariantShift], rule: str) -> np.ndarray:
    """The source value of a group for shifts ``shift[..., variant, param]`` (any leading
    axes, e.g. bootstrap replicas): max |candidate| (pairs: half-difference) or the rms."""
    singles, pairs = _split_pairs(members, rule)
    cands = [shift[..., vs.variant, :] for vs in singles]
    cands += [0.5 * (shift[..., vp.variant, :] - shift[..., vm.variant, :])
              for _, vp, vm in pairs]
    c = np.stack(cands, axis=-2)  # (..., candidate, param)
    fin = np.isfinite(c)
    with np.errstate(invalid="ignore"):
        if rule == "rms":
            n = fin.sum(axis=-2)
            out = np.sqrt(np.where(fin, c * c, 0.0).sum(axis=-2) / np.maximum(n, 1))
        else:
            n = fin.sum(axis=-2)
            out = np.where(fin, np.abs(c), -np.inf).max(axis=-2)
    return np.where(n > 0, out, np.nan)


def combine_group(
    group: str,
    members: Sequence[VariantShift],
    params: Sequence[str],
    rule: str,
    separate: bool,
) -> SystRow:
    # candidates: (label, signed shift, stat, is_pair)
    singles, pairs = _split_pairs(members, rule)
    value, up, down, stat, signed, chosen = {}, {}, {}, {}, {}, {}
    for p in params:
        cands: list[tuple[str, float, float, bool]] = [
            (vs.name, vs.shift[p], vs.stat[p], False) for vs in singles
        ]
        for name, vp, vm in pairs:
            stem = _pair_stem(name)
            label = f"{stem[0] if stem else name}±"
            h = 0.5 * (vp.shift[p] - vm.shift[p])
            cands.append((label, h, 0.5 * math.hypot(vp.stat[p], vm.stat[p]), True))
        cands = [c for c in cands if math.isfinite(c[1])]
        if not cands:
            value[p] = up[p] = down[p] = stat[p] = signed[p] = math.nan
            chosen[p] = ""
            continue
        if rule == "rms":
            s = np.array([c[1] for c in cands])
            st = np.array([c[2] for c in cands])
            nc = s.size
            val = float(np.sqrt(np.mean(s**2)))
            value[p] = val
            up[p] = float(np.sqrt(np.sum(s[s > 0] ** 2) / nc))
            down[p] = float(np.sqrt(np.sum(s[s < 0] ** 2) / nc))
            stat[p] = float(np.sqrt(np.sum((s * st) ** 2)) / (nc * val)) if val > 0 else math.nan
            signed[p] = float(np.mean(s))
            chosen[p] = f"rms of {nc}"
        else:
            best = max(cands, key=lambda c: abs(c[1]))
            value[p] = abs(best[1])
            stat[p] = best[2]
            signed[p] = best[1]
            chosen[p] = best[0]
            ups = [abs(c[1]) if c[3] else c[1] for c in cands if c[3] or c[1] > 0]
            downs = [abs(c[1]) if c[3] else -c[1] for c in cands if c[3] or c[1] < 0]
            up[p] = max(ups, default=0.0)
            down[p] = max(downs, default=0.0)
    if rule == "rms":
        rname = "rms"
    elif pairs and not singles:
        rname = "half-diff"
    elif pairs:
        rname = "max (incl. half-diff)"
    else:
        rname = "max" if len(members) > 1 else "single"
    return SystRow(
        source=group,
        separate=separate,
        rule=rname,
        variants=tuple(vs.name for vs in members),
        value=value,
        up=up,
        down=down,
        stat=stat,
        signed=signed,
        chosen=chosen,
        n_done=sum(vs.n_done for vs in members),
        n_failed=sum(vs.n_failed for vs in members),
        significant={p: bool(value[p] >= 2 * stat[p]) for p in params},
        n_pairs_dropped=sum(vs.n_pairs_dropped for vs in members),
        degenerate=tuple(f"{vs.name} ≡ {vs.same_as}" for vs in members if vs.same_as),
    )


def quadrature(rows: Sequence[SystRow], attr: str, p: str) -> float:
    vals = [getattr(r, attr)[p] for r in rows]
    vals = [v for v in vals if math.isfinite(v)]
    return float(math.sqrt(sum(v * v for v in vals))) if vals else math.nan


def variant_shifts(
    vals: np.ndarray,
    ok: np.ndarray,
    done: np.ndarray,
    ref_arr: np.ndarray,
    nom: int,
    relative_to: str,
) -> tuple[np.ndarray, ...]:
    """The signed shift of every variant and its toy uncertainty.

    ``vals[v, t, p]`` are the fitted values, ``ok[v, t]`` the fits used, ``done[v, t]`` the
    fits attempted, ``ref_arr[p]`` the reference values, ``nom`` the nominal variant (-1 if
    none) and ``relative_to`` one of "paired", "reference", "nominal".

    Returns ``(d, m, shift, stat, mean, n_used, n_dropped)``: the per-toy quantities
    ``d[v, t, p]`` (zero outside the mask ``m``) whose masked mean is the shift (the input of
    :func:`bootstrap_totals`), the shifts and their uncertainties ``[v, p]``, the ensemble
    means over each variant's own used fits ``[v, p]``, the toys used per variant and the
    pairs dropped for a failed fit on either side (paired).
    """
    nv = vals.shape[0]
    # per-toy quantity d[v, t, p] averaged over the toys in mask m[v, t]
    m = ok[:, :, None] & np.isfinite(vals)
    d = vals.copy()
    n_dropped = np.zeros(nv, int)
    for v in range(nv):
        if relative_to == "reference" or (relative_to == "paired" and v == nom):
            d[v] = vals[v] - ref_arr
        elif relative_to == "nominal":
            pass  # raw values; the nominal mean is subtracted below
        else:  # the nominal twin of the same toy; a failed fit on either side drops the pair
            m[v] &= m[nom]
            d[v] = vals[v] - vals[nom]
            both_done = done[v] & done[nom]
            n_dropped[v] = int((both_done & ~m[v].all(axis=-1)).sum())
    d = np.where(m, d, 0.0)
    cnt = m.sum(axis=1)  # (variant, param)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(cnt > 0, d.sum(axis=1) / np.maximum(cnt, 1), math.nan)
        dev = np.where(m, d - means[:, None, :], 0.0)
        stats_ = np.where(cnt > 1, np.sqrt((dev**2).sum(axis=1) / np.maximum(cnt - 1, 1)
                                           / np.maximum(cnt, 1)), math.nan)
    n_used = m.all(axis=-1).sum(axis=1)
    if relative_to == "nominal":
        sh_all = means - means[nom]
        sh_all[nom] = means[nom] - ref_arr
        st_all = np.hypot(stats_, np.nan_to_num(stats_[nom]))
        st_all[nom] = stats_[nom]
    else:
        sh_all, st_all = means, stats_
    # ensemble means (for display) are over each variant's own valid fits
    okf = ok[:, :, None] & np.isfinite(vals)
    with np.errstate(invalid="ignore", divide="ignore"):
        ens_mean = np.where(okf, vals, 0.0).sum(axis=1) / okf.sum(axis=1)
    return d, m, sh_all, st_all, ens_mean, n_used, n_dropped


#: half of the 68.27 % central probability (±1σ of a normal)
HALF_68 = 0.5 * math.erf(1 / math.sqrt(2))


def bootstrap_totals(
    d: np.ndarray,
    m: np.ndarray,
    subtract: int,
    groups: Sequence[tuple[Sequence[VariantShift], str]],
    n_boot: int,
    seed: int,
    batch: int = 100,
) -> np.ndarray:
    """Totals ``(n_boot, param)`` from resampling the toys with replacement — the same toy
    indices for every variant, so paired differences stay paired.

    ``d[v, t, p]`` (zero outside the mask ``m``) are the per-toy quantities whose masked
    mean is variant v's shift; ``subtract`` >= 0 subtracts that variant's mean from the
    others (``relative_to="nominal"``).
    """
    nv, nt, npar = d.shape
    rng = np.random.default_rng(seed)
    x = d.transpose(1, 0, 2).reshape(nt, nv * npar)
    w = m.transpose(1, 0, 2).reshape(nt, nv * npar).astype(float)
    out = np.empty((n_boot, npar))
    for b0 in range(0, n_boot, batch):
        nb = min(batch, n_boot - b0)
        counts = np.stack([np.bincount(rng.integers(0, nt, nt), minlength=nt)
                           for _ in range(nb)]).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            sh = ((counts @ x) / (counts @ w)).reshape(nb, nv, npar)
        if subtract >= 0:
            base = sh[:, subtract, :].copy()
            sh = sh - base[:, None, :]
            sh[:, subtract, :] = base
        tot2 = np.zeros((nb, npar))
        for members, rule in groups:
            val = group_values(sh, members, rule)
            tot2 += np.where(np.isfinite(val), val * val, 0.0)
        out[b0:b0 + nb] = np.sqrt(tot2)
    return out


def bootstrap_spread(
    reps: np.ndarray, total: Mapping[str, float], params: Sequence[str]
) -> tuple[dict[str, float], dict[str, tuple[float, float]], dict[str, float]]:
    """``(bias, interval, error)`` per parameter from the bootstrap replicas ``reps[b, p]`` of
    the total: the mean of the replicas − the total, the basic (reverse-percentile) 68.3 %
    interval ``[2T − q₈₄, 2T − q₁₆]`` clipped at 0 (Efron & Tibshirani, *An Introduction to
    the Bootstrap*, Chapman & Hall 1993, Sect. 13.4), and the replicas' standard deviation."""
    total_bias: dict[str, float] = {}
    total_interval: dict[str, tuple[float, float]] = {}
    total_error: dict[str, float] = {}
    for i, p in enumerate(params):
        t = total[p]
        r_p = reps[:, i]
        r_p = r_p[np.isfinite(r_p)]
        if not (math.isfinite(t) and r_p.size):
            continue
        q_lo, q_hi = np.quantile(r_p, [0.5 - HALF_68, 0.5 + HALF_68])
        total_bias[p] = float(r_p.mean() - t)
        if r_p.size > 1:
            total_error[p] = float(np.std(r_p, ddof=1))
        total_interval[p] = (float(max(2 * t - q_hi, 0.0)), float(max(2 * t - q_lo, 0.0)))
    return total_bias, total_interval, total_error


def quadrature_stat(
    rows: Sequence[SystRow], total: Mapping[str, float], params: Sequence[str]
) -> dict[str, float]:
    """The statistical error of the quadrature total propagated from the chosen candidates'
    errors (it ignores that a maximum was taken)."""
    total_stat = {}
    for p in params:
        num = [
            r.value[p] * r.stat[p]
            for r in rows
            if math.isfinite(r.value[p]) and math.isfinite(r.stat[p])
        ]
        total_stat[p] = (
            math.sqrt(sum(x * x for x in num)) / total[p] if num and total[p] > 0 else math.nan
        )
    return total_stat
