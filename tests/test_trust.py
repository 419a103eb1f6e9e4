"""Never a headline from nothing; failures carry their cause: a summary of toys whose fits
failed says so in its first line and in JSON, and ``run`` exits non-zero when every fit of a
hypothesis failed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from toyengine.cli.finish import EXIT_ALL_FITS_FAILED
from toyengine.summary import render_summary
from toyengine.summary.testing import make_results_dataset


def _significance_ds(valid_h0: np.ndarray, valid_h1: np.ndarray, observed: float = 9.0):
    n = valid_h0.size
    rng = np.random.default_rng(7)
    t = rng.chisquare(1.0, n)
    nll = np.stack([t / 2.0, np.zeros(n)], axis=-1)[None]
    valid = np.stack([valid_h0, valid_h1], axis=-1)[None]
    return make_results_dataset(
        params=["n_sig"], hypotheses=["H0", "H1"], value=np.zeros((1, n, 2, 1)), nll=nll,
        valid=valid, kind="significance", h0="H0", h1="H1", ndof_wilks=1,
        observed_t=observed)


def test_summary_of_no_usable_toy_says_so_first():
    n = 200
    ds = _significance_ds(np.zeros(n, bool), np.ones(n, bool))
    text = render_summary(ds)
    first = text.splitlines()[0]
    assert first.startswith("WARNING: every fit of H0 failed (200/200)"), first
    assert "0 usable toys" in first and first.endswith("no result below")
    # no Z from nothing: the headline table names the absence instead of a number
    assert "Z χ²(Wilks ndof)" not in text
    assert "none: 0 usable toys of 200 done" in text
    data = json.loads(render_summary(ds, "json"))
    assert data["warning"] == first
    md = render_summary(ds, "markdown")
    assert md.splitlines()[0] == f"**{first}**"


@pytest.mark.parametrize(("n_failed", "warns"), [(10, False), (11, True)])
def test_failed_fraction_threshold(n_failed, warns):
    """200 toys x 2 fits: 10 failed H1 fits are 5 % of the toys (not above 5 %: no
    warning), 11 are 5.5 % (warning)."""
    n = 200
    v1 = np.ones(n, bool)
    v1[:n_failed] = False
    ds = _significance_ds(np.ones(n, bool), v1)
    first = render_summary(ds).splitlines()[0]
    assert first.startswith("WARNING") == warns, first
    if warns:
        assert "5.5 % of the toys unusable" in first
        assert first.endswith("use only the fits that converged")
    # configurable
    assert render_summary(ds, max_failed=0.2).splitlines()[0].startswith("toyengine summary")
    warning = json.loads(render_summary(ds, "json"))["warning"]
    assert warning == (first if warns else None)


def test_clean_summary_has_no_warning():
    n = 100
    ds = _significance_ds(np.ones(n, bool), np.ones(n, bool))
    assert render_summary(ds).splitlines()[0].startswith("toyengine summary")
    assert json.loads(render_summary(ds, "json"))["warning"] is None


def test_exit_code_is_distinct():
    assert EXIT_ALL_FITS_FAILED not in (0, 1, 2, 3, 130)


# --- failures carry their cause ------------------------------------------------------------
PLUGINS = __import__("pathlib").Path(__file__).resolve().parents[1] / "studies" / "examples" \
    / "plugins"


def _raising_plugin_study(tmp_path, monkeypatch):
    """A study of a plug-in whose likelihood calls a numpy function that does not exist
    (as ``np.trapz`` after numpy 2): the worked example ``expgauss`` with its -ln L changed
    (its ``build`` stays marked with ``@model_builder``). The plug-in is importable through
    ``sys.path`` (the mechanism of tests/test_plugins.py); this is the one place that makes
    it available. Nothing is allowed here (restored afterwards): the run allows it with
    ``--plugin raising_plugin``."""
    code = (PLUGINS / "expgauss.py").read_text()
    old = "return float(v[0] + v[3] - np.sum("
    assert old in code
    code = code.replace(old, "return float(np.trapz_removed(x) + v[0] + v[3] - np.sum(")
    assert "@model_builder" in code
    (tmp_path / "raising_plugin.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toyengine.models

    monkeypatch.setattr(toyengine.models, "_ALLOWED", set())
    study = tmp_path / "study.yaml"
    study.write_text("""
name: raising-plugin
kind: pulls
seed: 5
toys: 4
models:
  m:
    builder: raising_plugin:build
    options: {range: [5180.0, 5380.0]}
generate: m
hypotheses: [m]
""")
    return study


@pytest.mark.filterwarnings("ignore::toyengine.errors.FitFailureWarning")
def test_a_raising_plugin_is_named_by_run_and_status(tmp_path, monkeypatch, cli):
    study = _raising_plugin_study(tmp_path, monkeypatch)
    store = tmp_path / "s.zarr"
    r = cli("run", study, "--store", store, "--workers", "1", "--quiet",
            "--plugin", "raising_plugin")
    assert r.returncode == EXIT_ALL_FITS_FAILED, (r.stdout, r.stderr)
    cause = "AttributeError: module 'numpy' has no attribute 'trapz_removed'"
    lines = [ln for ln in r.stdout.splitlines() if cause in ln]
    assert len(lines) == 1, r.stdout  # one line: type and message
    assert lines[0].startswith("4 failed fits (100 %), most common: " + cause)
    assert "first: toy 0, variant nominal, hypothesis m, worker" in lines[0]
    assert "toyengine: every fit of hypothesis m failed (4/4)" in r.stderr

    s = cli("status", store)
    assert s.returncode == 0
    assert f"most common: {cause}" in s.stdout
    summ = cli("summary", store)
    first = summ.stdout.splitlines()[0]
    assert first.startswith("WARNING: every fit of m failed (4/4)") and cause in first

    # the store keeps the cause: fail_reason per fit, the first failure of each kind
    from toyengine.core.fit import FailReason
    from toyengine.store import open_results

    ds = open_results(store)
    assert np.all(ds["fail_reason"].values == int(FailReason.EXCEPTION))
    causes = json.loads(ds.attrs["failure_causes"])
    assert [c["kind"] for c in causes] == ["EXCEPTION:AttributeError"]
    assert causes[0]["count"] == 4 and causes[0]["toy"] == 0


def _as_format_2_without_fail_reason(path) -> None:
    """Turn a fresh store into what the version before ``fail_reason`` wrote (store format
    2): no ``fail_reason`` array; ``state.json`` with the shape only (no checksums of the
    objects, no toy-count history); no study record; done markers with the sizes of the
    objects and the failed-fit count only (no checksums, cause, epoch or toy count); and
    ``format_version`` 2 in the root attributes."""
    import shutil

    shutil.rmtree(path / "fail_reason")
    control = path / "_toyengine"
    state = json.loads((control / "state.json").read_text())
    (control / "state.json").write_text(json.dumps(
        {"format_version": 2, "toys": state["toys"], "chunks": state["chunks"]}))
    (control / "study.json").unlink()
    for m in (control / "done").glob("*.json"):
        rec = json.loads(m.read_text())
        old = {k: rec[k] for k in ("chunk", "variant", "start", "stop", "failed")}
        old["sizes"] = {k: v for k, v in rec["sizes"].items() if k != "fail_reason"}
        m.write_text(json.dumps(old))
    root = json.loads((path / "zarr.json").read_text())
    root["attributes"]["format_version"] = 2
    (path / "zarr.json").write_text(json.dumps(root))


def test_old_store_without_fail_reason_still_reads(tmp_path, cli):
    """A store written before ``fail_reason`` existed (format 2, see
    :func:`_as_format_2_without_fail_reason`) opens, verifies, and its summary and status
    work."""
    from toyengine.store import StoreInfo, create_store, open_results, write_chunk
    from toyengine.store.integrity import check_metadata, verify_store
    from toyengine.study.plan import Plan
    from toyengine.study.recipe import run_chunk
    from toyengine.study.spec import load_spec

    spec = load_spec(PLUGINS.parent / "hello.yaml").with_overrides(toys=4)
    path = tmp_path / "s.zarr"
    plan = Plan.of(spec)
    for c in create_store(path, plan, 4):
        write_chunk(path, run_chunk(plan, c), 4, 4)
    _as_format_2_without_fail_reason(path)
    info = StoreInfo(path)
    assert info.format_version == 2 and "fail_reason" not in info.toy_vars
    assert info.done().all()
    assert verify_store(info) == [] and check_metadata(info) == []
    ds = open_results(path)
    assert "fail_reason" not in ds and int(ds["status"].sum()) == 4
    assert render_summary(ds).startswith("toyengine summary")
    for args in (["summary", path], ["status", path], ["verify", path]):
        r = cli(*args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        assert r.stderr == "", (args, r.stderr)
    assert cli("summary", path).stdout.startswith("toyengine summary")


# --- model variation: a reference fit that fails refuses the variant -----------------------
def _variation_spec():
    from toyengine.study.spec import load_spec

    spec = load_spec(PLUGINS.parent / "gauss_exp_model_variation.yaml")
    return spec.with_overrides(toys=2)


def test_unconverged_reference_fit_refuses_the_variant(monkeypatch):
    """A generator whose fit to the reference does not converge (here: every fit reports
    failure) is refused with one line naming the variant, not generated from its last
    values."""
    from toyengine.core.fit import FailReason, fit
    from toyengine.errors import ModelError
    from toyengine.study import reference

    def failing(*args, **kw):
        res = fit(*args, **kw)
        return type(res)(**{**res.__dict__, "valid": False, "status": 2,
                            "reason": FailReason.EDM})

    monkeypatch.setattr(reference, "fit", failing)
    monkeypatch.setattr(reference, "_FITTED", {})
    spec = _variation_spec()
    with pytest.raises(ModelError) as err:
        reference.generator_model(spec, spec.variants[1])
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("variant 'crystal_ball': the fit of its generator to the reference "
                          "did not converge (EDM above tolerance)")


@pytest.mark.slow
def test_tcc_b21_reference_fit_converges():
    """B'21 of studies/tcc/model_variation.yaml: its first reference fit stops with the EDM
    above tolerance (two background shapes the Asimov reference cannot tell apart); the
    continued MIGRAD converges, so the variant generates from a minimum."""
    from toyengine.study.reference import generator_model
    from toyengine.study.spec import load_spec

    spec = load_spec(PLUGINS.parents[1] / "tcc" / "model_variation.yaml")
    v = next(v for v in spec.variants if v.name == "B'21")
    gen = generator_model(spec, v)
    assert np.all(np.isfinite(gen.parameters.values))


# --- bounds ---------------------------------------------------------------------------------
HUGE = """
name: huge
kind: pulls
seed: 1
toys: 10
models:
  m: {builder: gauss, options: {events: 100000000000000}}
generate: m
hypotheses: [m]
"""


def test_huge_builder_size_is_refused_before_anything_starts(tmp_path, cli):
    study = tmp_path / "huge.yaml"
    study.write_text(HUGE)
    store = tmp_path / "s.zarr"
    r = cli("run", study, "--store", store, "--workers", "1", "--quiet")
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("toyengine: variant 'nominal' (model 'm'): about 1e+14 events "
                               "per toy need ~2e+07 GB for 1 task(s) at once")  # 1e14 x 200 B
    assert lines[0].endswith("add --yes to run anyway")
    assert not store.exists()  # nothing started


def test_more_local_workers_than_cores_needs_yes(tmp_path):
    import os

    from toyengine.errors import ConfirmationNeeded
    from toyengine.run.preflight import check_resources

    cores = os.cpu_count() or 1
    with pytest.raises(ConfirmationNeeded, match=rf"--workers {cores + 1}: this machine has "
                                                 rf"{cores} cores"):
        check_resources({}, cores + 1, True, False)
    check_resources({}, cores + 1, True, True)  # --yes
    check_resources({}, cores + 1, False, False)  # workers of a cluster elsewhere: not ours
    check_resources({}, cores, True, False)


@pytest.mark.filterwarnings("ignore::toyengine.errors.FitFailureWarning")
def test_toys_below_the_store_says_what_it_did(tmp_path, cli):
    study = PLUGINS.parent / "hello.yaml"
    store = tmp_path / "s.zarr"
    assert cli("run", study, "--store", store, "--toys", "6", "--workers", "1",
               "--quiet").returncode == 0
    r = cli("run", study, "--store", store, "--toys", "3", "--workers", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    assert ("note: the store holds 6 toys per variant, more than --toys 3: a store never "
            "shrinks") in r.stdout
