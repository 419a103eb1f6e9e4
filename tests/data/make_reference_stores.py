"""Regenerate the reference stores of every study in ``studies/`` (one command).

    PYTHONPATH=$PWD python tests/data/make_reference_stores.py            # all studies
    PYTHONPATH=$PWD python tests/data/make_reference_stores.py tcc/pulls  # some of them

Each study is shrunk to a few toys and a few variants (:func:`small_spec`), run with one
worker into a temporary store, and the store's arrays (every data variable and coordinate
except the fields that measure the machine, :data:`MACHINE_FIELDS`) and attributes are
saved to ``tests/data/reference_stores/<dir>__<study>.npz``, and the machine that made it
(library versions, CPU and its features: :func:`provenance`) to
``tests/data/reference_stores/provenance.json``. ``tests/test_reference_stores.py`` rebuilds
the same small studies on the machine under test: with other worker counts and chunk sizes the
stores must be bit-identical to one made there with the reference's settings, and that one
must agree with the committed reference within the rounding tolerances of :func:`differences`
(another CPU or library release rounds differently). Run this script again whenever a change
to generation or fitting is *meant* to change the numbers, and commit the new ``.npz`` files
and ``provenance.json`` with that change.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from toyengine.study.schema import machine_fields

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "studies"
OUT = Path(__file__).resolve().parent / "reference_stores"
#: where each reference was made: ``{key: provenance()}``
PROVENANCE = OUT / "provenance.json"

#: store variables that measure the machine, not the toy (the record schema's ``machine``
#: fields): never compared
MACHINE_FIELDS = machine_fields()
#: attributes that legitimately differ between runs of the same study (``format_version``
#: is the layout of the store, not its numbers: format 2 moved the done flags into markers;
#: ``study_dir`` is where the study file lies on this machine, provenance for ``toyengine data``)
VOLATILE_ATTRS = ("toyengine_version", "chunk_size", "format_version", "study_dir")
#: toys per variant of the small studies, by study folder (kinds that refit one data set
#: keep their 1); Dalitz fits cost seconds each
TOYS = {"tcc": 4, "zc4100": 2, "examples": 4}
#: multi-start fits keep at most this many starts (still more than one: the start streams
#: are part of what must reproduce)
MAX_STARTS = 2
#: profile starts (``fit.profile``) keep at most this many full fits from the profile grid;
#: the grid itself stays (its fits float a few parameters and cost milliseconds, a full
#: Dalitz fit from each extra start costs as much as the null fit)
MAX_PROFILE_BEST = 1
#: chunk size of the reference run (the test also runs other sizes)
CHUNK_SIZE = 2
#: at most this many listed variants (first ones, plus the last: often a special case)
MAX_VARIANTS = {"tcc": 4, "zc4100": 3, "examples": 4}
#: random variants (``count``) are cut to two draws, or to one when the study lists several
MAX_COUNT = 2


def studies() -> list[Path]:
    """Every study file under ``studies/``."""
    return sorted(STUDIES.glob("*/*.yaml"))


def key(path: Path) -> str:
    """``studies/tcc/pulls.yaml`` -> ``tcc__pulls``."""
    return f"{path.parent.name}__{path.stem}"


def small_spec(path: Path) -> Any:
    """The study at ``path`` shrunk for a reference store: few toys, few variants."""
    from toyengine.study.spec import StudySpec

    raw = yaml.safe_load(path.read_text())
    folder = path.parent.name
    if raw.get("data") is None:
        raw["toys"] = TOYS[folder]
    raw.pop("chunk_size", None)
    if raw.get("fit", {}).get("starts", 1) > MAX_STARTS:
        raw["fit"]["starts"] = MAX_STARTS
    prof = raw.get("fit", {}).get("profile")
    if prof and prof.get("best", 2) > MAX_PROFILE_BEST:
        prof["best"] = MAX_PROFILE_BEST
    variants = raw.get("variants")
    if variants:
        nmax = MAX_VARIANTS[folder]
        if len(variants) > nmax:
            variants = [*variants[: nmax - 1], variants[-1]]
        for v in variants:
            if "count" in v:
                v["count"] = min(v["count"], MAX_COUNT if len(variants) == 1 else 1)
        raw["variants"] = variants
    text = yaml.safe_dump(raw, sort_keys=False)
    return StudySpec.from_text(text, str(path), str(path.parent))


def store_arrays(store: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays (strings as fixed-width unicode) and the comparable attributes of a
    store; ``attrs["__dtypes__"]`` holds each array's dtype as stored."""
    import xarray as xr

    from toyengine.store import StoreInfo

    ds = xr.open_zarr(store, consolidated=False, chunks=None)
    if "chunk_done" not in ds:  # format 2: one done marker per chunk, not an array
        ds = ds.assign(chunk_done=("chunk", StoreInfo(store).done()))
    arrays, dtypes = {}, {}
    for name in [*ds.data_vars, *ds.coords]:
        if name in MACHINE_FIELDS:
            continue
        a = np.asarray(ds[name].values)
        dtypes[str(name)] = str(a.dtype)
        if a.dtype.kind in "OT":  # object or StringDType
            a = np.array(a.tolist(), dtype=str)
        arrays[str(name)] = a
    attrs = {k: v for k, v in ds.attrs.items() if k not in VOLATILE_ATTRS}
    attrs["__dtypes__"] = dtypes
    return arrays, attrs


def build_store(path: Path, store: Path, *, client: Any = None, workers: int = 1,
                chunk_size: int = CHUNK_SIZE) -> Path:
    """Run the small version of study ``path`` into ``store``."""
    from toyengine.run.runner import run_study

    report = run_study(small_spec(path), store, workers=workers, client=client,
                       chunk_size=chunk_size, progress=None)
    if not report.complete:
        msg = f"{path}: run incomplete: {report.errors}"
        raise RuntimeError(msg)
    return store


def save(path: Path, store: Path) -> Path:
    arrays, attrs = store_arrays(store)
    out = OUT / f"{key(path)}.npz"
    np.savez_compressed(out, __attrs__=np.array(json.dumps(attrs, sort_keys=True)), **arrays)
    made = read_provenance()
    made[key(path)] = provenance()
    PROVENANCE.write_text(json.dumps(made, indent=1, sort_keys=True) + "\n")
    return out


# ---------------------------------------------------------------------------------------
# where a store was made


def provenance() -> dict[str, Any]:
    """This machine as far as it decides the last bits of a store: Python and the numeric
    libraries, the CPU, the features the numba kernels are compiled for (``NUMBA_CPU_NAME``
    and ``NUMBA_CPU_FEATURES`` override the host's) and the SIMD extensions numpy dispatches
    to (``NPY_DISABLE_CPU_FEATURES`` removes some). numpy's AVX-512 loops of ``exp``/``log``
    round differently from its AVX2 ones, so two machines with the same libraries still
    differ in the last bits."""
    import iminuit
    import llvmlite
    import llvmlite.binding as llvm
    import numba
    import scipy

    try:
        from numpy._core._multiarray_umath import __cpu_features__ as npy_features
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as npy_features
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    host = llvm.get_host_cpu_features()
    wanted = ("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512vl", "neon", "sve")
    return {
        "python": platform.python_version(),
        "numpy": np.__version__, "scipy": scipy.__version__, "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "iminuit": iminuit.__version__,
        "machine": platform.machine(), "cpu": model,
        "numba_cpu": os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name(),
        "numba_cpu_features": os.environ.get("NUMBA_CPU_FEATURES")
        or ",".join(f for f in wanted if host.get(f)),
        "numpy_simd": ",".join(k for k in ("FMA3", "AVX2", "AVX512F", "AVX512_SKX", "ASIMD",
                                           "SVE") if npy_features.get(k)),
    }


def read_provenance() -> dict[str, dict[str, Any]]:
    """The committed ``provenance.json`` (``{}`` if there is none)."""
    try:
        return json.loads(PROVENANCE.read_text())
    except FileNotFoundError:
        return {}


def describe(made: dict[str, Any] | None) -> str:
    """One line for an assertion message."""
    if not made:
        return "not recorded"
    return ", ".join(f"{k} {v}" for k, v in made.items())


# ---------------------------------------------------------------------------------------
# comparison with a reference made on another machine
#
# Another CPU or another numpy/scipy/numba release rounds some operations differently (the
# AVX-512 and AVX2 loops of numpy's exp/log, the BLAS kernels, a library's summation
# order). Everything discrete must still be identical: names, shapes, dtypes, strings,
# integers, flags, statuses, the NaN pattern and the attributes. Floating-point numbers are
# compared with bounds derived from how a rounding error of the likelihood propagates into
# what a fit reports. Let eps = 2.2e-16 and, per fit, ef = eps * max(|nll|, 1), the size of
# one rounding of -ln L (the sum of many terms rounds to a few tens of ef, absorbed in
# K_NLL). Two cases:
#
# A. The fit took the same path on both machines (same ``nfcn``, and one start reached the
#    best minimum, ``n_best`` 1): every step moved by rounding only. At a minimum -ln L is
#    flat: a point is only determined where 1/2 (dx/sigma)^2 exceeds the rounding of
#    -ln L, so the fitted values move by dx ~ sqrt(2 ef) sigma (the sqrt(eps) conditioning
#    of any minimum), -ln L by ~ef plus gradient * dx ~ sqrt(2 edm ef) (the fit stops
#    where the gradient is not yet 0), the EDM by about as much, and the errors, from
#    MIGRAD's updated covariance or HESSE's finite-difference second derivatives
#    (differences of gradients, not values), by a larger multiple of sqrt(ef). Where the
#    error is not stored (no HESSE), the value itself is the scale. The prefactors are
#    measured on the 16 reference studies, made on another x86-64 machine and rebuilt on
#    an AMD EPYC with AVX-512 and, as a third machine, there with numpy's AVX-512 loops
#    off (``NPY_DISABLE_CPU_FEATURES``) and the kernels compiled for a generic CPU, same
#    libraries: at most 0.32 (values), 80 (errors), 27 (-ln L), 0.23 (EDM), 27 ef (scan
#    t); K_NLL and K_ERR are ten times those, K_X and K_EDM thirty times, for other CPUs
#    and library releases.
# B. The fit may have taken another path: ``nfcn`` differs (rounding flipped a decision of
#    the minimiser, e.g. a line search), or several starts reached the best minimum
#    (``n_best`` > 1: which start's end point is reported is decided by differences in
#    -ln L below the minimiser's tolerance). Both machines then end anywhere within
#    MIGRAD's convergence tolerance, which is what each fit reports as its EDM: for a
#    quadratic -ln L (up = 1/2) a point with EDM e lies e above the minimum and within
#    sqrt(2 e) sigma of it in every parameter, so two fits differ by at most e_a + e_b in
#    -ln L and by (sqrt(2 e_a) + sqrt(2 e_b)) sigma in a value (measured up to 1.0 and
#    0.22 of these bounds); K_B = 2 allows for the EDM being computed with MIGRAD's
#    approximate covariance. An error may move with the point by as much as the point
#    moves in sigma (a curvature that changes over one sigma). ``n_best`` (the starts
#    within 0.005 of the best -ln L) may then change too; the EDM itself is only required
#    to be as valid as before (``status``).
# Quantities outside the fits: generated ones (``global_obs``, ``scan_points``) are a few
# roundings each (K_GEN eps relative: measured 0); ``truth`` and ``reference`` come from
# fits without a stored -ln L (Asimov and data fits) and are compared to K_X sqrt(eps)
# times the larger of the value and the parameter's typical error (measured 0.009);
# ``scan_t`` = 2 (nll_H0 - nll_profile) to 4 K_NLL ef where both fits of the toy took the
# same path; else (case B: the scan fits start from the null's and the alternative's
# minima, which then moved) each scan fit ends within MIGRAD's convergence, EDM <
# SCAN_EDM, and t = 2 Δ(-ln L) to 2 K_B (2 SCAN_EDM + the toy's larger EDM) (measured: 2.1e-6
# on the T_cc+ study with the kernels compiled for a generic CPU).

EPS = float(np.finfo(np.float64).eps)
K_NLL = 300.0
K_X = 10.0
K_ERR = 800.0
K_EDM = 10.0
K_B = 2.0
K_GEN = 8.0
#: MIGRAD's convergence of a scan fit (EDM < 0.002 tol up with iminuit's default tol 0.1 and
#: up = 1/2 for -ln L); the scan does not store its fits' EDM
SCAN_EDM = 0.002 * 0.1 * 0.5
#: fields that count the minimiser's work: identical unless the fit took another path
PATH_FIELDS = ("nfcn", "n_best")
#: per-fit float fields (dims end with hypothesis, or hypothesis and param)
FIT_FLOATS = ("value", "error", "minos_lower", "minos_upper", "nll", "edm", "gof")


def _worst(name: str, diff: np.ndarray, tol: np.ndarray, out: list[str]) -> None:
    """Append a line to ``out`` if any finite ``diff`` exceeds ``tol``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        bad = np.isfinite(diff) & ~(diff <= tol)
    if bad.any():
        tol = np.broadcast_to(tol, diff.shape)
        i = np.unravel_index(np.argmax(np.where(bad, diff / tol, -1.0)), diff.shape)
        out.append(f"{name}: {int(bad.sum())} of {diff.size} beyond tolerance, worst at "
                   f"{tuple(int(j) for j in i)}: |difference| {diff[i]:.3g} > {tol[i]:.3g}")


def differences(want: dict[str, np.ndarray], got: dict[str, np.ndarray],
                skip: tuple[str, ...] = ()) -> tuple[list[str], int]:
    """What differs between a committed reference's arrays ``want`` and a store's ``got``
    beyond rounding (the bounds above), and how many fits took another path (case B)."""
    out: list[str] = []
    if sorted(want) != sorted(got):
        return [f"arrays {sorted(want)} != {sorted(got)}"], 0
    for name, w in want.items():
        g = got[name]
        if name in skip:
            continue
        if g.dtype != w.dtype or g.shape != w.shape:
            out.append(f"{name}: {g.dtype}{g.shape} != reference {w.dtype}{w.shape}")
        elif w.dtype.kind == "f":
            if not np.array_equal(np.isnan(g), np.isnan(w)):
                out.append(f"{name}: NaN in other places")
        elif name not in PATH_FIELDS and g.tobytes() != w.tobytes():
            n = int((g != w).sum())
            out.append(f"{name}: {n} of {w.size} differ (must be identical)")
    if out:
        return out, 0
    with np.errstate(invalid="ignore"):
        return _float_differences(want, got, out)


def _log_ratio_bound(want: dict[str, np.ndarray], same: np.ndarray, e_max: np.ndarray,
                     shift_b: np.ndarray) -> np.ndarray:
    """The bound on ``log_ratio`` (``importance:``). At fixed injected values it is
    ln p_k − ln p_0 of a data set generated to a few roundings: 4 K_NLL ef of the toy.
    With ``importance.family`` (one column; a store with one fixed injected model gets the
    same, looser bound, as its arrays do not tell the two apart) it also depends on H1's
    fitted values (the centre and covariance of r) and on the shift's Asimov fits, which
    the store does not record: where the toy's fits took the same path those move by
    ~sqrt(ef) sigma and L by K_X sqrt(eps) max(|L|, 1); else the centre moves as ``value``
    does (K_B shift_b sigma), r's ½ d² by up to (|d| + Δd) Δd with |d| ≤ 8, and each of the
    three shift fits ends anywhere within MIGRAD's convergence (2 K_B SCAN_EDM each)."""
    lr = want["log_ratio"]
    nll = want["nll"]
    ef_toy = EPS * np.maximum(np.nanmax(np.abs(nll), axis=-1), 1.0)[..., None]
    fixed = np.broadcast_to(4 * K_NLL * ef_toy, lr.shape)
    if lr.shape[-1] != 1:
        return fixed
    toy_same = np.all(same, axis=-1)[..., None]
    moved = np.nanmax(shift_b, axis=-1)[..., None]
    e_toy = np.nanmax(e_max, axis=-1)[..., None]
    case_b = 8 * K_B * moved + K_B * (3 * 2 * SCAN_EDM + e_toy)
    return fixed + np.where(toy_same, K_X * np.sqrt(EPS) * np.maximum(np.abs(lr), 1.0),
                            case_b)


def _float_differences(want: dict[str, np.ndarray], got: dict[str, np.ndarray],
                       out: list[str]) -> tuple[list[str], int]:
    nll = want["nll"]
    ef = EPS * np.maximum(np.abs(nll), 1.0)
    # case A only where one start won clearly (n_best 1) and the path was as long
    same = (want["nfcn"] == got["nfcn"]) & (want["n_best"] <= 1) & (got["n_best"] <= 1)
    for name in PATH_FIELDS:
        if name != "nfcn" and not np.array_equal(want[name][same], got[name][same]):
            out.append(f"{name}: differs in a fit that took the same path")
    e_w, e_g = want["edm"], got["edm"]
    e_max = np.maximum(e_w, e_g)
    grad = np.sqrt(2 * e_max * ef)
    shift_b = np.sqrt(2 * (e_w + ef)) + np.sqrt(2 * (e_g + ef))  # case B, in sigma
    rel_err = np.where(same, K_ERR * np.sqrt(ef), K_ERR * np.sqrt(ef) + K_B * shift_b)

    def d(name: str) -> np.ndarray:
        return np.abs(got[name] - want[name])

    _worst("nll", d("nll"), np.where(same, K_NLL * (ef + grad), K_B * (e_w + e_g + 2 * ef)),
           out)
    _worst("edm", np.where(same, d("edm"), np.nan),
           K_EDM * grad + 2 * K_ERR * np.sqrt(ef) * e_max, out)
    _worst("gof", d("gof"), K_X * np.sqrt(ef) * np.maximum(np.abs(want["gof"]), 1.0)
           + np.where(same, 0.0, K_B * shift_b * np.abs(want["gof"])), out)
    sigma = np.where(np.isfinite(want["error"]), want["error"], np.abs(want["value"]))
    shift = np.where(same, K_X * np.sqrt(ef), K_B * shift_b)[..., None]
    _worst("value", d("value"), shift * sigma, out)
    for name in ("error", "minos_lower", "minos_upper"):
        _worst(name, d(name), rel_err[..., None] * np.abs(want[name]), out)
    # one typical error per parameter, the scale of truth and reference
    errs = want["error"].reshape(-1, want["error"].shape[-1])
    typical = np.zeros(errs.shape[-1])
    for j in range(errs.shape[-1]):
        col = errs[:, j][np.isfinite(errs[:, j])]
        typical[j] = float(np.median(col)) if col.size else 0.0
    for name in ("truth", "reference"):
        _worst(name, d(name), K_X * np.sqrt(EPS) * np.maximum(np.abs(want[name]), typical),
               out)
    for name in ("global_obs", "scan_points"):
        if name in want:
            _worst(name, d(name), K_GEN * EPS * np.abs(want[name]), out)
    if "scan_t" in want:
        ef_toy = EPS * np.maximum(np.nanmax(np.abs(nll), axis=-1), 1.0)[..., None]
        # case B: a toy whose fits took another path starts its scan fits elsewhere (they
        # start from both minima), and each ends anywhere within MIGRAD's convergence
        moved = ~np.all(same, axis=-1)[..., None]
        e_toy = np.nanmax(e_max, axis=-1)[..., None]
        _worst("scan_t", d("scan_t"), np.where(moved, 2 * K_B * (2 * SCAN_EDM + e_toy),
                                               4 * K_NLL * ef_toy), out)
    if "log_ratio" in want:
        _worst("log_ratio", d("log_ratio"), _log_ratio_bound(want, same, e_max, shift_b),
               out)
    known = {*FIT_FLOATS, *PATH_FIELDS, "truth", "reference", "global_obs", "scan_points",
             "scan_t", "log_ratio"}
    for name, w in want.items():
        if w.dtype.kind == "f" and name not in known and got[name].tobytes() != w.tobytes():
            out.append(f"{name}: a float array without a rounding bound differs")
    return out, int((~same).sum())


def main(argv: list[str]) -> int:
    import time

    from distributed import Client, LocalCluster

    OUT.mkdir(exist_ok=True)
    chosen = [p for p in studies() if not argv or any(a in str(p) for a in argv)]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client, \
            tempfile.TemporaryDirectory() as tmp:
        for p in chosen:
            t0 = time.perf_counter()
            store = build_store(p, Path(tmp) / f"{key(p)}.zarr", client=client)
            out = save(p, store)
            print(f"{out.relative_to(ROOT)}: {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
