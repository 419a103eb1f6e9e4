"""Store integrity: checksummed chunks, status/verify over missing or damaged chunks,
``run`` recomputing exactly those (issue 15)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from toyengine import load_spec, open_results, run_study
from toyengine.cli import main
from toyengine.store import StoreInfo
from toyengine.store.integrity import check_metadata, verify_store
from toyengine.store.opening import open_checked

ROOT = Path(__file__).parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
#: every variable except the one that measures the machine (fit wall time)
COMPARED = ["value", "error", "minos_lower", "minos_upper", "nll", "valid", "edm", "nfcn",
            "status", "fail_reason", "gof", "n_events", "truth", "reference", "chunk_variant",
            "chunk_start", "chunk_stop"]


def assert_same_store(a, b):
    da, db = xr.open_zarr(a, consolidated=False), xr.open_zarr(b, consolidated=False)
    assert dict(da.sizes) == dict(db.sizes)
    for v in COMPARED:
        np.testing.assert_array_equal(da[v].values, db[v].values, err_msg=v)
    assert StoreInfo(a).done().all() and StoreInfo(b).done().all()


@pytest.fixture(scope="module")
def spec():
    return load_spec(HELLO).with_overrides(toys=40)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spec, client):
    path = tmp_path_factory.mktemp("ref") / "ref.zarr"
    report = run_study(spec, path, client=client, chunk_size=10, progress=None)
    assert report.complete and report.chunks_run == 4
    return path


def test_chunks_are_checksummed(reference):
    meta = json.loads((reference / "value" / "zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]][-1] == "crc32c"


def damage(store: Path) -> None:
    """Delete chunk 1's `value` object and truncate chunk 2's `nll` object."""
    (store / "value" / "c" / "0" / "1" / "0" / "0").unlink()
    nll = store / "nll" / "c" / "0" / "2" / "0"
    nll.write_bytes(nll.read_bytes()[: nll.stat().st_size // 2])


def test_status_verify_and_run_repair(tmp_path, spec, client, reference, capsys):
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    damage(store)

    assert main(["status", str(store), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] is False
    assert out["chunks_done"] == 2
    assert len(out["damaged_chunks"]) == 2
    assert "toys 10-19" in out["damaged_chunks"][0] and "missing" in out["damaged_chunks"][0]
    assert "toys 20-29" in out["damaged_chunks"][1]

    assert main(["verify", str(store)]) == 1
    text = capsys.readouterr().out
    assert "toys 10-19" in text and "toys 20-29" in text
    assert "2 missing or corrupt" in text
    assert StoreInfo(store).done().tolist() == [True, False, False, True]

    report = run_study(spec, store, client=client, progress=None)
    assert report.complete
    assert report.chunks_run == 2 and report.chunks_skipped == 2
    assert_same_store(store, reference)
    assert main(["verify", str(store)]) == 0


def test_run_repairs_without_verify(tmp_path, spec, client, reference):
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    damage(store)
    report = run_study(spec, store, client=client, progress=None)
    assert report.complete and report.chunks_run == 2
    assert len(report.repaired) == 2 and "toys 10-19" in report.repaired[0]
    assert_same_store(store, reference)


def test_bit_flip_found_by_verify_checksum(tmp_path, spec, client, reference, capsys):
    """Same size, one byte changed: only the checksum can tell; verify reads it."""
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    obj = store / "value" / "c" / "0" / "3" / "0" / "0"
    raw = bytearray(obj.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    obj.write_bytes(bytes(raw))
    assert main(["verify", str(store)]) == 1
    assert "toys 30-39" in capsys.readouterr().out
    report = run_study(spec, store, client=client, progress=None)
    assert report.chunks_run == 1
    assert_same_store(store, reference)


def test_status_of_complete_store(reference, capsys):
    assert main(["status", str(reference), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] is True and out["damaged_chunks"] == []
    assert out["toys_done"] == 40


# --- corruption matrix ------------------------------------------------------------------
#
# Every array of a small store (40 toys of the hello study in 4 chunks of 10): a chunk
# object of each per-toy array (chunk 1, toys 10-19), coordinate, `truth`, `reference` and
# chunk-table array is deleted, truncated, bit-flipped (same size) or swapped with an
# object of other content; each array's `zarr.json` is truncated or bit-flipped. Every
# case: `verify` flags it, `summary` refuses it (non-zero, nothing on stdout, one line),
# `open_results` raises (at once or when the damaged object is read), and `verify
# --repair` then `run` ends bit-identical to the undamaged store. The default suite runs
# the matrix over one array of each kind; the rest is `slow`.

#: per-toy arrays of the hello study (the record fields it has)
TOY_ARRAYS = ("value", "error", "minos_lower", "minos_upper", "nll", "valid", "edm", "nfcn",
              "fit_time", "status", "fail_reason", "gof", "n_best", "at_limit", "covar_ok",
              "n_starts", "global_obs", "n_events")
#: study-level arrays and coordinates with a chunk object
STATIC_ARRAYS = ("truth", "reference", "toy", "hypothesis", "param", "param_label",
                 "variant_name", "variant_group", "chunk_start", "chunk_stop")
#: arrays whose values are all the fill value: zarr writes no chunk object for them
NO_OBJECT = ("variant", "variant_separate", "param_unit", "chunk_variant")
#: one array of each kind in the default suite: a float and a 1-d integer per-toy array,
#: truth, reference, an index coordinate, a string coordinate and the chunk table
DEFAULT_ARRAYS = {"value", "n_events", "truth", "reference", "toy", "param", "chunk_start"}
KINDS = ("delete", "truncate", "flip", "swap")


def _objects(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*")
                  if p.is_file() and not str(p.relative_to(store)).startswith("_toyengine"))


def _chunk_object(store: Path, name: str) -> str | None:
    """Chunk 1 of a per-toy array, else the array's chunk object (None: it has none)."""
    objs = [o for o in _objects(store) if o.startswith(f"{name}/c/")]
    toy = [o for o in objs if o.startswith(f"{name}/c/0/1")]
    return (toy or objs or [None])[0]


def _swap_partner(store: Path, key: str) -> str:
    """An object of other content and of the same kind to swap ``key`` with: a sibling
    chunk of the same array if one differs, else (a per-toy array whose chunks are all
    alike) the same chunk of another per-toy array, else (a study-level array) another
    study-level array's object."""
    raw = (store / key).read_bytes()
    name = key.split("/", 1)[0]
    toy = name in TOY_ARRAYS
    objs = [o for o in _objects(store) if "/c/" in o and o != key
            and (o.split("/", 1)[0] in TOY_ARRAYS) == toy]
    siblings = [o for o in objs if o.startswith(f"{name}/c/")]
    same_chunk = [o for o in objs if toy and o.split("/")[3] == key.split("/")[3]]
    for other in siblings + same_chunk + objs:
        if (store / other).read_bytes() != raw:
            return other
    raise AssertionError(key)


def _damage(store: Path, key: str, how: str) -> list[str]:
    """Damage ``key``; returns the objects damaged (two for a swap)."""
    path = store / key
    raw = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "flip":
        flipped = bytearray(raw)
        flipped[len(raw) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
    elif how == "swap":
        partner = _swap_partner(store, key)
        other = store / partner
        path.write_bytes(other.read_bytes())
        other.write_bytes(raw)
        return [key, partner]
    else:
        raise AssertionError(how)
    return [key]


def _matrix():
    for name in TOY_ARRAYS + STATIC_ARRAYS:
        for how in KINDS:
            marks = () if name in DEFAULT_ARRAYS else (pytest.mark.slow,)
            yield pytest.param(name, how, marks=marks, id=f"{how}-{name}")
    for name in (*TOY_ARRAYS, *STATIC_ARRAYS, *NO_OBJECT, ""):
        for how in ("truncate", "flip"):
            default = name in DEFAULT_ARRAYS | {"", "chunk_variant"}
            yield pytest.param(f"{name}/zarr.json".lstrip("/"), how,
                               marks=() if default else (pytest.mark.slow,),
                               id=f"{how}-{name or 'root'}-zarr.json")
    yield pytest.param("zarr.json", "delete", id="delete-root-zarr.json")


@pytest.fixture(scope="module")
def reference_arrays(reference):
    ds = xr.open_zarr(reference, consolidated=False)
    return {v: ds[v].values for v in COMPARED}


def test_matrix_covers_every_array(reference):
    """The matrix damages a chunk object of every array that has one, and every
    array's metadata."""
    arrays = {p.parent.name for p in reference.glob("*/zarr.json")} - {"_toyengine"}
    assert arrays == set(TOY_ARRAYS + STATIC_ARRAYS + NO_OBJECT)
    for name in TOY_ARRAYS + STATIC_ARRAYS:
        assert _chunk_object(reference, name) is not None, name
    for name in NO_OBJECT:
        assert _chunk_object(reference, name) is None, name


def _summary_refuses(store: Path, capsys) -> str:
    capsys.readouterr()
    code = main(["summary", str(store)])
    out, err = capsys.readouterr()
    assert code != 0
    assert out == ""  # no numbers
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(("target", "how"), list(_matrix()))
def test_corruption_matrix(target, how, tmp_path, spec, client, reference,
                           reference_arrays, capsys):
    from toyengine.errors import StoreError

    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    key = target if target.endswith("zarr.json") else _chunk_object(store, target)
    damaged = _damage(store, key, how)

    with pytest.raises(StoreError):  # at once, or when the damaged object is read
        open_results(store).load()
    with pytest.raises(StoreError):
        open_checked(store)[1]()  # what a command checks before writing its output
    err = _summary_refuses(store, capsys)
    assert "verify --repair" in err and any(k in err for k in damaged), err

    assert main(["verify", str(store)]) != 0
    out, err = capsys.readouterr()
    toy_chunk = "/c/" in key and target in TOY_ARRAYS
    assert ("toys 10-19" in out) if toy_chunk else all(k in err + out for k in damaged), \
        out + err

    assert main(["verify", "--repair", str(store)]) in (0, 1)
    report = run_study(spec, store, client=client, progress=None)
    assert report.complete
    # chunk damage is recomputed (the damaged chunks only), metadata is rebuilt
    assert report.chunks_run == (len({k.split("/")[3] for k in damaged}) if toy_chunk
                                 else 0)
    got = xr.open_zarr(store, consolidated=False)
    for v in COMPARED:
        np.testing.assert_array_equal(got[v].values, reference_arrays[v], err_msg=v)
    info = StoreInfo(store)
    assert info.done().all() and verify_store(info) == [] and check_metadata(info) == []


# --- markers, control files, incomplete stores --------------------------------------------


def _marker(store: Path, index: int) -> Path:
    return store / "_toyengine" / "done" / f"{index}.json"


@pytest.mark.parametrize("how", ["truncate", "flip", "swap", "truncate-and-delete-data"])
def test_damaged_marker_is_not_done(how, tmp_path, spec, client, reference, capsys):
    """A done marker that cannot be read, fails its checksum or describes another chunk
    marks its chunk not done: status, verify and summary say so, run recomputes it. The
    last case: an unreadable marker whose data chunk is also gone (on the old format:
    status complete, verify clean, values NaN)."""
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    m = _marker(store, 1)
    raw = m.read_bytes()
    if how.startswith("truncate"):
        m.write_bytes(raw[: len(raw) // 2])
    elif how == "flip":  # a digit of a size: still valid JSON
        i = raw.index(b'"sizes": {') + len(b'"sizes": {"edm": ')
        m.write_bytes(raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:])
        assert json.loads(m.read_bytes()) != json.loads(raw)
    else:
        other = _marker(store, 2)
        m.write_bytes(other.read_bytes())
        other.write_bytes(raw)
    if how.endswith("delete-data"):
        (store / "value" / "c" / "0" / "1" / "0" / "0").unlink()
    chunks_bad = 2 if how == "swap" else 1

    assert main(["status", str(store), "--json"]) == 1
    st = json.loads(capsys.readouterr().out)
    assert st["complete"] is False and st["chunks_done"] == 4 - chunks_bad
    assert "toys 10-19" in st["damaged_chunks"][0] and "done marker" in st["damaged_chunks"][0]
    err = _summary_refuses(store, capsys)
    assert ("toys 10-29" if how == "swap" else "toys 10-19") in err
    assert main(["verify", str(store)]) == 1
    assert "toys 10-19" in capsys.readouterr().out
    report = run_study(spec, store, client=client, progress=None)
    assert report.complete and report.chunks_run == chunks_bad
    assert_same_store(store, reference)


def test_lost_state_with_leftover_creating_is_not_wiped(tmp_path, spec, client, reference,
                                                        capsys):
    """A kill between writing state.json and removing creating.json, then state.json
    lost: `run` refuses (it used to wipe the complete store and recompute everything),
    `verify --repair` rebuilds state.json from the chunks, `run` then has nothing to do."""
    from toyengine.errors import StoreError

    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    (store / "_toyengine" / "state.json").unlink()
    (store / "_toyengine" / "creating.json").write_text('{"study": "hello"}')
    before = _objects(store)

    with pytest.raises(StoreError, match="verify --repair"):
        run_study(spec, store, client=client, progress=None)
    assert _objects(store) == before  # nothing deleted
    err = _summary_refuses(store, capsys)
    assert "state.json is missing" in err and "verify --repair" in err
    assert "is it a toyengine store" not in err

    assert main(["verify", "--repair", str(store)]) == 0
    out = capsys.readouterr().out
    assert "rebuilt _toyengine/state.json" in out and "creating.json" in out
    assert not (store / "_toyengine" / "creating.json").exists()
    report = run_study(spec, store, client=client, progress=None)
    assert report.complete and report.chunks_run == 0
    assert_same_store(store, reference)


def test_lost_state_and_damaged_root_metadata(tmp_path, spec, client, reference, capsys):
    """state.json lost and the root zarr.json (the study text) truncated: repaired from
    the study record _toyengine/study.json; no chunk is recomputed."""
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    (store / "_toyengine" / "state.json").unlink()
    root = store / "zarr.json"
    root.write_bytes(root.read_bytes()[:100])
    _summary_refuses(store, capsys)
    assert main(["verify", "--repair", str(store)]) == 0
    assert "rebuilt zarr.json" in capsys.readouterr().out
    report = run_study(spec, store, client=client, progress=None)
    assert report.chunks_run == 0
    assert_same_store(store, reference)
    assert StoreInfo(store).attrs == StoreInfo(reference).attrs


def test_not_done_chunks_refused_unless_allowed(tmp_path, reference, capsys):
    """A store with a chunk not done (e.g. while its study runs): readers refuse it naming
    the toys and the command; with --allow-incomplete / allow_incomplete=True they read it
    with those toys not run and say so first."""
    from toyengine.store.results import IncompleteStoreError

    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    _marker(store, 3).unlink()

    with pytest.raises(IncompleteStoreError, match="not done .variant nominal toys 30-39"):
        open_results(store)
    err = _summary_refuses(store, capsys)
    assert "toys 30-39" in err and "toyengine run" in err and "--allow-incomplete" in err

    ds = open_results(store, allow_incomplete=True)
    assert "toys 30-39" in ds.attrs["incomplete"]
    assert (ds["status"].values[0, 30:] == 0).all() and (ds["status"].values[0, :30] != 0).all()
    assert ds["chunk_done"].values.tolist() == [True, True, True, False]

    assert main(["summary", str(store), "--allow-incomplete"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("INCOMPLETE STORE") and "toys 30-39" in first
    assert main(["summary", str(store), "--allow-incomplete", "--format", "json"]) == 0
    assert "toys 30-39" in json.loads(capsys.readouterr().out)["incomplete"]
    for argv in (["report", str(store), "-o", str(tmp_path / "r.html")],
                 ["plot", str(store), "--outdir", str(tmp_path / "plots")],
                 ["data", str(store), "--toy", "3", "--out", str(tmp_path / "t.npz")]):
        assert main(argv) == 2, argv
        assert "toys 30-39" in capsys.readouterr().err
        written = [p for p in tmp_path.rglob("*") if p.suffix in (".html", ".png", ".npz")]
        assert written == [], argv  # nothing written from the refused store
        assert main([*argv, "--allow-incomplete"]) == 0, argv
        assert capsys.readouterr().out.startswith("INCOMPLETE STORE"), argv
        for p in tmp_path.rglob("*"):
            if p.suffix in (".html", ".png", ".npz"):
                p.unlink()


def test_format_2_store_still_readable(tmp_path, reference, capsys):
    """A store of the previous format (markers with sizes only, no checksums of the other
    objects, no study record) is read, verified and summarised as before."""
    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    control = store / "_toyengine"
    state = json.loads((control / "state.json").read_text())
    (control / "state.json").write_text(json.dumps(
        {"format_version": 2, "toys": state["toys"], "chunks": state["chunks"]}))
    (control / "study.json").unlink()
    for m in (control / "done").glob("*.json"):
        rec = json.loads(m.read_text())
        m.write_text(json.dumps({k: v for k, v in rec.items() if k not in ("digest", "digests")}))
    root = json.loads((store / "zarr.json").read_text())
    root["attributes"]["format_version"] = 2
    (store / "zarr.json").write_text(json.dumps(root))

    info = StoreInfo(store)
    assert info.format_version == 2 and info.done().all()
    assert verify_store(info) == [] and check_metadata(info) == []
    assert main(["summary", str(store)]) == 0
    assert "Pulls" in capsys.readouterr().out
    obj = store / "value" / "c" / "0" / "3" / "0" / "0"
    raw = bytearray(obj.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    obj.write_bytes(bytes(raw))
    assert main(["verify", str(store)]) == 1
    assert "toys 30-39" in capsys.readouterr().out


# --- the one-line messages, from the command line ----------------------------------------


def test_cli_messages(tmp_path, reference, cli):
    """summary on a store with a chunk deleted, a truncated zarr.json and a lost
    state.json: one line each, no traceback, nothing on stdout; verify --repair brings the
    metadata back."""
    deleted = tmp_path / "deleted.zarr"
    shutil.copytree(reference, deleted)
    (deleted / "value" / "c" / "0" / "1" / "0" / "0").unlink()
    meta = tmp_path / "meta.zarr"
    shutil.copytree(reference, meta)
    (meta / "value" / "zarr.json").write_bytes((meta / "value" / "zarr.json").read_bytes()[:40])
    lost = tmp_path / "lost.zarr"
    shutil.copytree(reference, lost)
    (lost / "_toyengine" / "state.json").unlink()

    for store, expect in ((deleted, "toys 10-19"), (meta, "value/zarr.json"),
                          (lost, "state.json is missing")):
        r = cli("summary", store)
        assert r.returncode == 2 and r.stdout == "", r
        assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert expect in r.stderr and "verify --repair" in r.stderr, r.stderr

    r = cli("summary", deleted, "--allow-incomplete")
    assert r.returncode == 0 and r.stdout.startswith("INCOMPLETE STORE"), r
    for store in (meta, lost):
        r = cli("verify", "--repair", store)
        assert r.returncode == 0 and "repaired: rebuilt" in r.stdout, r
        r = cli("summary", store)
        assert r.returncode == 0 and "Pulls" in r.stdout, r


def test_resumed_run_reads_damaged_done_chunk_as_one_line(tmp_path, spec, client, reference):
    """A resumed run folds the chunks already done into its live numbers, reading them as
    readers do: a done chunk whose object was bit-flipped (same size, so only its
    checksum tells) stops the run with the one-line StoreError naming it, never zarr's
    codec error (the run used to decode every object of the row, damaged or not)."""
    from toyengine.errors import StoreError

    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)
    (_marker(store, 2)).unlink()  # something to resume: chunk 2 is not done
    obj = store / "value" / "c" / "0" / "3" / "0" / "0"
    raw = bytearray(obj.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    obj.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match=r"value/c/0/3/0/0 \(variant 0 toys 30-40\) fails "
                                         r"its checksum.*verify --repair"):
        run_study(spec, store, client=client, progress=None)


def test_writable_arrays_leave_zarr_global_config_alone(tmp_path, reference, monkeypatch):
    """The toy arrays are opened with write_empty_chunks set on them: zarr's global config
    (process-wide, and left set by two threads' overlapping ``config.set``) is not
    touched."""
    import zarr

    from toyengine.store import writing as writing_mod
    from toyengine.store.location import Location

    store = tmp_path / "s.zarr"
    shutil.copytree(reference, store)

    def no_global_set(*args, **kwargs):
        raise AssertionError("zarr.config.set called")

    monkeypatch.setattr(zarr.config, "set", no_global_set)
    monkeypatch.setattr(writing_mod, "_GROUPS", {})
    arrays = writing_mod._writable_arrays(Location(str(store)), 40, 10)
    assert all(a._async_array.config.write_empty_chunks for a in arrays.values())
