"""Every reference study rebuilds the same store, whatever the workers, chunking and machine.

The references in ``tests/data/reference_stores/`` were made with one worker and chunks of
``CHUNK_SIZE`` toys by ``tests/data/make_reference_stores.py`` (rerun it, one command, when a
change is meant to alter the numbers; it records the libraries and CPU each reference was
made with in ``provenance.json``). Here each small study is first rebuilt on this machine with
the reference's settings; that store must agree with the committed reference: everything
discrete identical, floating-point numbers within the rounding bounds derived in
``make_reference_stores.differences`` (another CPU or numpy/scipy/numba release rounds
differently). Rebuilt with other worker counts and chunk sizes, a store must then be
bit-identical to the one made on this machine, every array except the machine-measuring
``fit_time`` byte for byte, dtypes and attributes included (the chunk table only when the
chunk size is the reference's). The default suite runs the cheap T_cc studies over the
whole matrix and one Dalitz study with two workers and one-toy chunks (both differ from the
reference); everything else is ``slow`` (``pytest -m slow tests/test_reference_stores.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
import make_reference_stores as ref  # noqa: E402

STUDIES = ref.studies()
CHUNK_TABLE = ("chunk_variant", "chunk_start", "chunk_stop", "chunk_done")
ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def clients():
    """One client per worker count, started on first use and shared by the module."""
    from distributed import Client, LocalCluster

    made: dict[int, tuple] = {}

    def get(workers: int):
        if workers not in made:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                   silence_logs=40)
            made[workers] = (cluster, Client(cluster))
        return made[workers][1]

    yield get
    # newest first: each Client restores the default scheduler it replaced, so closing in
    # creation order would leave the first one's "dask.distributed" set for later tests
    for cluster, client in reversed(list(made.values())):
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def here(clients, tmp_path_factory):
    """The arrays and attributes of each study's store made on this machine with the
    reference's settings (one worker, ``CHUNK_SIZE``), built on first use."""
    made: dict[str, tuple] = {}

    def get(study: Path):
        k = ref.key(study)
        if k not in made:
            store = ref.build_store(study, tmp_path_factory.mktemp(k) / "s.zarr",
                                    client=clients(1))
            made[k] = ref.store_arrays(store)
        return made[k]

    return get


#: studies whose whole matrix runs in the default suite (a few seconds each)
CHEAP = {"tcc__pulls", "tcc__significance", "tcc__model_variation", "examples__hello",
         "tcc__pulls_sweighted"}
#: studies that run once (two workers, one-toy chunks) in the default suite: one Dalitz
#: study with two hypotheses and a multi-start fit. The others cost a minute or more per
#: fresh worker process on a loaded 2-core machine (Dalitz fits; the unitarised profile's
#: tables), so they are ``slow``.
ONCE = {"zc4100__significance"}


def _studies():
    for p in STUDIES:
        marks = () if ref.key(p) in CHEAP | ONCE else (pytest.mark.slow,)
        yield pytest.param(p, marks=marks, id=ref.key(p))


def _cases():
    for p in STUDIES:
        k = ref.key(p)
        for workers, chunk in ((2, 1), (1, 3), (2, 3)):
            default = k in CHEAP or (k in ONCE and (workers, chunk) == (2, 1))
            marks = () if default else (pytest.mark.slow,)
            yield pytest.param(p, workers, chunk, marks=marks,
                               id=f"{ref.key(p)}-w{workers}-c{chunk}")


def test_every_study_has_a_reference_and_its_provenance():
    have = {f.stem for f in ref.OUT.glob("*.npz")}
    assert have == {ref.key(p) for p in STUDIES}
    assert set(ref.read_provenance()) == have


def _load(study: Path) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(ref.OUT / f"{ref.key(study)}.npz") as f:
        expected = {k: f[k] for k in f.files}
    return expected, json.loads(str(expected.pop("__attrs__")))


@pytest.mark.parametrize("study", list(_studies()))
def test_store_agrees_with_the_committed_reference(study, here):
    expected, want_attrs = _load(study)
    got, got_attrs = here(study)
    problems, other_paths = ref.differences(expected, got)
    made = ref.read_provenance().get(ref.key(study))
    assert not problems, (f"{ref.key(study)}: {'; '.join(problems)} ({other_paths} fits "
                          f"took another path)\n  reference made with: {ref.describe(made)}"
                          f"\n  this machine: {ref.describe(ref.provenance())}")
    assert got["chunk_done"].all()
    # every attribute of the reference (new ones may be added), dtypes as stored; compared
    # as JSON so that a NaN attribute equals itself
    for k, v in want_attrs.items():
        if k in ref.VOLATILE_ATTRS:  # e.g. format_version/study_dir, in older references
            continue
        assert json.dumps(got_attrs.get(k), sort_keys=True) == json.dumps(v, sort_keys=True), k


@pytest.mark.parametrize(("study", "workers", "chunk"), list(_cases()))
def test_store_is_bit_identical(study, workers, chunk, clients, here, tmp_path):
    want, want_attrs = here(study)
    store = ref.build_store(study, tmp_path / "s.zarr", client=clients(workers),
                            chunk_size=chunk)
    got, got_attrs = ref.store_arrays(store)

    assert sorted(got) == sorted(want)
    for name, w in want.items():
        if name in CHUNK_TABLE and chunk != ref.CHUNK_SIZE:
            continue
        have = got[name]
        assert have.dtype == w.dtype and have.shape == w.shape, name
        assert have.tobytes() == w.tobytes(), f"{ref.key(study)}: {name} differs"
    assert got["chunk_done"].all()
    assert json.dumps(got_attrs, sort_keys=True) == json.dumps(want_attrs, sort_keys=True)


# the comparison with a reference can fail: each perturbation below is a fraction of an
# error, far beyond rounding, or changes something discrete


def _perturbed(study: str, what: str) -> tuple[list[str], int]:
    want, _ = _load(ROOT / "studies" / f"{study.replace('__', '/')}.yaml")
    got = {k: v.copy() for k, v in want.items()}
    fit = (0, 0, 0)  # first toy's first fit
    if what == "value":  # 1e-4 of its error: 30 times the case-A bound 10 sqrt(ef) sigma
        got["value"][(*fit, 0)] += 1e-4 * want["error"][(*fit, 0)]
    elif what == "nll":  # the case-A bound is 300 (ef + sqrt(2 edm ef)) = 6e-7 here
        got["nll"][fit] += 1e-5
    elif what == "error":  # 1e-3 relative: four times the case-A bound 800 sqrt(ef)
        got["error"][(*fit, 0)] *= 1 + 1e-3
    elif what == "status":
        got["status"][fit] = 2
    elif what == "n_events":
        got["n_events"][0, 0] += 1
    elif what == "nan":
        got["gof"][fit] = 0.0 if np.isnan(want["gof"][fit]) else np.nan
    elif what == "nll_other_path":  # another path is no licence to end far away
        got["nfcn"][fit] += 1
        got["nll"][fit] += 10 * want["edm"][fit]
    elif what == "value_other_path":  # 1e-2 relative (no error stored): 14 times the bound
        got["value"][(*fit, 0)] *= 1 + 1e-2
    elif what == "scan_points":
        got["scan_points"][0, 0] *= 1 + 1e-12
    return ref.differences(want, got)


@pytest.mark.parametrize(("study", "what"), [
    *[("tcc__pulls", w) for w in ("value", "nll", "error", "status", "n_events", "nan")],
    *[("tcc__significance", w) for w in ("nll_other_path", "value_other_path",
                                        "scan_points")],
])
def test_the_reference_comparison_sees_more_than_rounding(study, what):
    problems, _ = _perturbed(study, what)
    assert problems


@pytest.mark.parametrize("study", ["tcc__pulls", "tcc__significance"])
def test_the_reference_comparison_accepts_itself(study):
    want, _ = _load(ROOT / "studies" / f"{study.replace('__', '/')}.yaml")
    problems, other = ref.differences(want, {k: v.copy() for k, v in want.items()})
    assert problems == []
    assert other == (0 if study == "tcc__pulls" else want["nll"].size)


def _wider_simd() -> list[str]:
    """numpy's SIMD extensions beyond AVX2 that this CPU has (its AVX-512 loops)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as have
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as have
    return [k for k, on in have.items() if on and k.startswith(("AVX512", "X86_V4"))]


def test_another_cpu_agrees_with_the_references(tmp_path):
    """The run of another machine: the numba kernels compiled for a generic CPU (no AVX,
    no FMA) and numpy without its AVX-512 loops (where this CPU has them; numpy's exp and
    log round differently there): the stores still agree with the references. A numba
    cache of its own: numba keys each cache entry by the CPU name and features it was
    compiled for (``Codegen.magic_tuple`` in the index key), so an entry for another CPU
    is never loaded, but the shared cache stays as it was."""
    env = {**os.environ, "NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_CPU_FEATURES", None)
    if _wider_simd():
        env["NPY_DISABLE_CPU_FEATURES"] = ",".join(_wider_simd())
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-p", "no:cacheprovider",
         "-k", "agrees_with_the_committed and (tcc__pulls or tcc__model_variation or "
         "tcc__significance) and not sweighted"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "3 passed" in run.stdout
    assert list(tmp_path.rglob("*.nbi")), "the kernels were not cached in the test's cache"
