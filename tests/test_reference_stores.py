"""Every reference study rebuilds a bit-identical store, whatever the workers and chunking.

The references in ``tests/data/reference_stores/`` were made with one worker and chunks of
``CHUNK_SIZE`` toys by ``tests/data/make_reference_stores.py`` (rerun it, one command, when a
change is meant to alter the numbers). Here each small study is rebuilt with other worker
counts and chunk sizes and every stored array except the machine-measuring ``fit_time`` is
compared byte for byte, dtypes included; the chunk table is compared when the chunk size is
the reference's. The default suite runs the cheap T_cc studies over the whole matrix and one
Dalitz study once with two workers and one-toy chunks (both differ from the reference);
everything else is ``slow`` (``pytest -m slow tests/test_reference_stores.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
import make_reference_stores as ref  # noqa: E402

STUDIES = ref.studies()
CHUNK_TABLE = ("chunk_variant", "chunk_start", "chunk_stop", "chunk_done")


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


#: studies whose whole matrix runs in the default suite (a few seconds each)
CHEAP = {"tcc__pulls", "tcc__significance", "tcc__model_variation", "examples__hello"}
#: studies that run once (two workers, one-toy chunks) in the default suite: one Dalitz
#: study with two hypotheses and a multi-start fit. The others cost a minute or more per
#: fresh worker process on a loaded 2-core machine (Dalitz fits; the unitarised profile's
#: tables), so they are ``slow``.
ONCE = {"zc4100__significance"}


def _cases():
    for p in STUDIES:
        k = ref.key(p)
        for workers, chunk in ((2, 1), (1, 3), (2, 3), (1, ref.CHUNK_SIZE)):
            default = k in CHEAP or (k in ONCE and (workers, chunk) == (2, 1))
            marks = () if default else (pytest.mark.slow,)
            yield pytest.param(p, workers, chunk, marks=marks,
                               id=f"{ref.key(p)}-w{workers}-c{chunk}")


def test_every_study_has_a_reference():
    have = {f.stem for f in ref.OUT.glob("*.npz")}
    assert have == {ref.key(p) for p in STUDIES}


@pytest.mark.parametrize(("study", "workers", "chunk"), list(_cases()))
def test_store_is_bit_identical(study, workers, chunk, clients, tmp_path):
    with np.load(ref.OUT / f"{ref.key(study)}.npz") as f:
        expected = {k: f[k] for k in f.files}
    want_attrs = json.loads(str(expected.pop("__attrs__")))
    store = ref.build_store(study, tmp_path / "s.zarr", client=clients(workers),
                            chunk_size=chunk)
    got, got_attrs = ref.store_arrays(store)

    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        if name in CHUNK_TABLE and chunk != ref.CHUNK_SIZE:
            continue
        have = got[name]
        assert have.dtype == want.dtype and have.shape == want.shape, name
        assert have.tobytes() == want.tobytes(), f"{ref.key(study)}: {name} differs"
    assert got["chunk_done"].all()
    # every attribute of the reference (new ones may be added), dtypes as stored; compared
    # as JSON so that a NaN attribute equals itself
    for k, v in want_attrs.items():
        if k in ref.VOLATILE_ATTRS:  # e.g. format_version/study_dir, in older references
            continue
        assert json.dumps(got_attrs.get(k), sort_keys=True) == json.dumps(v, sort_keys=True), k
