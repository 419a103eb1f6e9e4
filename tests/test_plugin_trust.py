"""Nothing runs that the user did not allow: a study file (or the study text saved in a
result store) that names ``subprocess:run``, ``os:system``, a module with import-time side
effects or a plug-in the user has not allowed is read, validated, shown, summarised and
refused without importing or calling any of them; each refusal is one line that names the
module and how to allow it. The positive controls show that the same files do run their
code once allowed, so a marker file that stays absent means something."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import toyengine.models

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "studies" / "examples" / "plugins"

STUDY = """
name: evil
kind: pulls
seed: 3
toys: 4
models:
  m:
    builder: {builder}
    options: {options}
generate: m
hypotheses: [m]
"""

#: a module whose import creates the marker file
SIDE_EFFECT = """
import pathlib
pathlib.Path({marker!r}).touch()
from toyengine.models import model_builder
from toyengine.models.gauss import build_gauss


@model_builder
def build(options, rng=None):
    return build_gauss({{}}, rng)
"""

#: a well-formed plug-in (marked builder, no import-time effect) that creates the marker
#: when it builds a model
QUIET = """
import pathlib
from toyengine.models import model_builder
from toyengine.models.gauss import build_gauss


@model_builder
def build(options, rng=None):
    pathlib.Path({marker!r}).touch()
    return build_gauss({{}}, rng)
"""


def _cases(marker: Path) -> dict[str, tuple[str, str, str]]:
    """name -> (builder, options, module)."""
    return {
        # subprocess.run({"touch": 0, MARKER: 0}, None) would run `touch MARKER`
        "subprocess": ("subprocess:run", json.dumps({"touch": 0, str(marker): 0}),
                       "subprocess"),
        "os": ("os:system", json.dumps({f"touch {marker}": 0}), "os"),
        "side_effect": ("sidefx_p28:build", "{}", "sidefx_p28"),
        "not_allowed": ("quiet_p28:build", "{}", "quiet_p28"),
    }


@pytest.fixture
def evil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """One study file per case in tmp_path, the plug-in modules importable, nothing
    allowed (restored afterwards); returns the study paths (and the marker under "marker")."""
    marker = tmp_path / "MARKER"
    (tmp_path / "sidefx_p28.py").write_text(SIDE_EFFECT.format(marker=str(marker)))
    (tmp_path / "quiet_p28.py").write_text(QUIET.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(toyengine.models, "_ALLOWED", set())
    for mod in ("sidefx_p28", "quiet_p28"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    out = {"marker": marker}
    for name, (builder, options, _) in _cases(marker).items():
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(STUDY.format(builder=builder, options=options))
    return out


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", ["subprocess", "os", "side_effect", "not_allowed"])
def test_study_file_runs_nothing(evil, case, cli, tmp_path):
    marker = evil["marker"]
    builder, _, module = _cases(marker)[case]
    study = evil[case]
    for args in (["show", study, "--time-toys", "0"],
                 ["run", study, "--store", tmp_path / "s.zarr", "--workers", "1", "--quiet"],
                 ["data", study, "--toy", "0", "--out", tmp_path / "d.npz"],
                 ["submit", study, "--store", tmp_path / "s.zarr", "--cluster", "slurm",
                  "--dry-run"]):
        r = cli(*args)
        line = _one_line(r.stderr)
        assert r.returncode == 2, (args, r.stderr)
        assert f"plug-in module '{module}' (builder '{builder}') is not allowed" in line
        assert f"--plugin {module}" in line and "toyengine.plugins.allow" in line
        assert not marker.exists()
    assert not (tmp_path / "s.zarr").exists()
    assert "sidefx_p28" not in sys.modules and "quiet_p28" not in sys.modules


def test_schema_validation_imports_nothing(evil):
    import jsonschema
    import yaml

    from toyengine.study.studyfile import study_json_schema

    schema = study_json_schema()
    for case in ("subprocess", "os", "side_effect", "not_allowed"):
        jsonschema.validate(yaml.safe_load(evil[case].read_text()), schema)
    assert not evil["marker"].exists()
    assert "sidefx_p28" not in sys.modules and "quiet_p28" not in sys.modules


@pytest.mark.parametrize("case", ["subprocess", "os"])
def test_an_allowed_module_still_needs_a_marked_builder(evil, case, cli):
    """Allowing subprocess (or os) does not make subprocess.run a model builder."""
    builder, _, module = _cases(evil["marker"])[case]
    r = cli("show", evil[case], "--time-toys", "0", "--plugin", module)
    line = _one_line(r.stderr)
    assert r.returncode == 2
    func = builder.replace(":", ".")
    assert f"{func} is not marked as a model builder" in line, line
    assert not evil["marker"].exists()


def test_positive_controls(evil, cli):
    """The same files do run their code once allowed: the marker is a working detector."""
    r = cli("show", evil["side_effect"], "--time-toys", "0", "--plugin", "sidefx_p28")
    assert r.returncode == 0, r.stderr
    assert evil["marker"].exists()
    evil["marker"].unlink()
    r = cli("show", evil["not_allowed"], "--time-toys", "0", "--plugin", "quiet_p28")
    assert r.returncode == 0, r.stderr
    assert evil["marker"].exists()


def test_config_key_allows(evil, cli):
    """``toyengine.plugins.allow`` in the Dask config allows as --plugin does."""
    import dask.config

    with dask.config.set({"toyengine.plugins.allow": ["quiet_p28"]}):
        r = cli("show", evil["not_allowed"], "--time-toys", "0")
    assert r.returncode == 0, r.stderr
    assert evil["marker"].exists()


@pytest.fixture
def store(tmp_path: Path, client) -> Path:
    """A complete store of a built-in model (the study text is replaced by the tests)."""
    from toyengine.run.runner import run_study
    from toyengine.study.spec import StudySpec

    spec = StudySpec.from_text(STUDY.format(builder="gauss", options="{events: 20}"))
    path = tmp_path / "s.zarr"
    assert run_study(spec, path, client=client, chunk_size=2, progress=None).complete
    return path


def _set_study_text(store: Path, text: str) -> None:
    """Replace the study text saved in ``store`` as whoever hands the store over can: in
    the root attributes and the study record, with the checksums of ``state.json``
    recomputed by the library's own writer (they detect damage, they are no signature), so
    that the store is consistent and opens."""
    import zarr

    from toyengine.store.location import Location
    from toyengine.store.results import STATE_KEY, STUDY_KEY, _write_state

    zarr.open_group(str(store), mode="r+").attrs["study_yaml"] = text
    loc = Location.of(store)
    study, state = loc.read_json(STUDY_KEY), loc.read_json(STATE_KEY)
    study["attrs"]["study_yaml"] = text
    _write_state(loc, state["toys"], state["chunks"], state["history"], attrs=study["attrs"],
                 fmt=state["format_version"])


@pytest.mark.parametrize("case", ["subprocess", "os", "side_effect", "not_allowed"])
def test_store_from_someone_else_runs_nothing(evil, store, case, cli, tmp_path):
    """A store whose saved study names the code (a consistent store: verify finds nothing
    wrong): verify, summary and status read it without importing anything; data (which
    rebuilds a toy) refuses in one line."""
    marker = evil["marker"]
    builder, _, module = _cases(marker)[case]
    _set_study_text(store, evil[case].read_text())
    for args in (["verify", store], ["summary", store], ["status", store]):
        r = cli(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert r.stderr == ""
    r = cli("data", store, "--toy", "0", "--out", tmp_path / "d.npz")
    assert r.returncode == 2
    line = _one_line(r.stderr)
    assert f"plug-in module '{module}' (builder '{builder}') is not allowed" in line
    assert not marker.exists()
    assert not (tmp_path / "d.npz").exists()
    assert "sidefx_p28" not in sys.modules and "quiet_p28" not in sys.modules


def test_fresh_interpreter_imports_nothing(evil, tmp_path):
    """The same in a new process (nothing imported before): show exits 2 with one line and
    the module with import-time effects was never imported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
               PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-m", "toyengine", "show", str(evil["side_effect"]),
                        "--time-toys", "0"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 2
    assert "plug-in module 'sidefx_p28'" in _one_line(r.stderr)
    assert not evil["marker"].exists()
