"""Python model plug-ins: ``builder: package.module:function`` (allowed with ``--plugin``) and
the ``toyengine.models`` entry-point group, on a local cluster and on a hand-started scheduler
whose workers may lack the module. The plug-in is the worked example of ``docs/models.md``."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

import toyengine.models
from toyengine.errors import SpecError
from toyengine.models import allow_plugins, get_builder, plugin_module
from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk
from toyengine.study.spec import StudySpec

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "studies" / "examples" / "plugins"

STUDY = """
name: plugin-pulls
kind: pulls
seed: 11
toys: 6
models:
  m:
    builder: {builder}
    options: {{range: [5180.0, 5380.0]}}
generate: m
hypotheses: [m]
poi: [mu, sigma]
"""


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """expgauss importable, nothing allowed (restored afterwards)."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setattr(toyengine.models, "_ALLOWED", set())


@pytest.fixture
def on_path(importable: None) -> None:
    """expgauss importable and allowed, as ``--plugin expgauss`` does."""
    allow_plugins(["expgauss"])


def test_docs_show_the_tested_plugin_verbatim():
    code = (PLUGINS / "expgauss.py").read_text()
    assert code in (ROOT / "docs" / "models.md").read_text()


def test_import_path_builder(on_path):
    import hashlib

    from expgauss import build

    from toyengine.study.show import describe_study

    assert get_builder("expgauss:build") is build
    assert plugin_module("expgauss:build") == "expgauss"
    assert plugin_module("mass1d") is None
    spec = StudySpec.from_text(STUDY.format(builder="expgauss:build"))
    sha = hashlib.sha256((PLUGINS / "expgauss.py").read_bytes()).hexdigest()
    assert spec.plugin_sources == (("expgauss", f"sha256:{sha}"),)
    assert f"expgauss: sha256:{sha}" in describe_study(spec)
    res = run_chunk(Plan.of(spec), Chunk(0, 0, 0, 3)).arrays
    assert np.all(res["status"] == 1)


@pytest.mark.parametrize(("builder", "expected"), [
    ("nosuchmodule_xyz:build", "cannot import nosuchmodule_xyz (ModuleNotFoundError"),
    ("expgauss:ExpGauss", "expgauss.ExpGauss is not marked as a model builder (decorate it "
     "with @toyengine.models.model_builder"),
    ("expgauss:nope", "module expgauss has no function 'nope'"),
    ("expgauss.build", "write 'module:function' (e.g. expgauss:build)"),
    ("expgauss:ExpGauss.density", "expected 'package.module:function'"),
])
def test_bad_builder_names_the_field(on_path, builder, expected):
    allow_plugins(["nosuchmodule_xyz"])
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(STUDY.format(builder=builder))
    assert err.value.path == "models.m.builder"
    assert expected in str(err.value)


def test_builder_must_return_a_model(tmp_path, monkeypatch, importable):
    (tmp_path / "notamodel.py").write_text(
        "from toyengine.models import model_builder\n"
        "class M:\n    parameters = None\n    def sample(self, v, rng): pass\n\n"
        "@model_builder\ndef build(options, rng=None):\n    return M()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    allow_plugins(["notamodel"])
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(STUDY.format(builder="notamodel:build"))
    assert "returned a M without nll, parameters" in str(err.value)


def test_model_without_the_protocol_base_is_refused_naming_the_members(tmp_path, monkeypatch,
                                                                       importable):
    """The three required members alone are not a ToyModel: the optional members are named,
    with the base class that gives their defaults."""
    (tmp_path / "bare.py").write_text(
        "from toyengine.core.params import Parameter, ParameterSet\n"
        "class M:\n    parameters = ParameterSet((Parameter('a', 1.0),))\n"
        "    def sample(self, v, rng): return rng.normal(size=3)\n"
        "    def nll(self, data): return lambda x: 0.0\n\n"
        "from toyengine.models import model_builder\n"
        "@model_builder\ndef build(options, rng=None):\n    return M()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    allow_plugins(["bare"])
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(STUDY.format(builder="bare:build").replace(
            "poi: [mu, sigma]", ""))
    msg = str(err.value)
    assert ("without the optional members derived, derived_names, gof_statistic, load_data, "
            "scan_parameters") in msg
    assert "toyengine.models.protocol.ToyModelBase" in msg


def _install_entry_point(where: Path) -> None:
    """What pip writes for a package registering ``expgauss = expgauss:build``."""
    dist = where / "expgauss_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: expgauss-plugin\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text("[toyengine.models]\nexpgauss = expgauss:build\n")


@pytest.fixture
def entry_point(importable, tmp_path, monkeypatch) -> None:
    """expgauss installed with an entry point (a .dist-info on sys.path); nothing allowed."""
    (tmp_path / "site").mkdir()
    _install_entry_point(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def test_entry_point_builder(entry_point):
    """An installed package's entry point: the distribution is trusted by its
    installation, no --plugin needed; its version is the plug-in's recorded source."""
    from expgauss import build

    assert get_builder("expgauss") is build
    assert plugin_module("expgauss") == "expgauss"
    spec = StudySpec.from_text(STUDY.format(builder="expgauss"))
    assert spec.plugin_sources == (("expgauss", "expgauss-plugin 1.0"),)
    assert np.all(run_chunk(Plan.of(spec), Chunk(0, 0, 0, 2)).arrays["status"] == 1)


def test_plugin_is_normalised_and_samples_its_pdf(on_path):
    """The checks docs/models.md asks of a new model."""
    from expgauss import build

    model = build({"range": [5180.0, 5380.0]})
    v = model.parameters.values
    total = v[0] + v[3]
    integral, _ = integrate.quad(lambda x: model.density(np.array([x]), v)[0], 5180, 5380,
                                 points=[5280.0], limit=200)
    assert abs(integral / total - 1) < 1e-9
    rng = np.random.default_rng(5)
    big = v.copy()
    big[0], big[3] = 40000.0, 60000.0  # sample() takes any full parameter vector
    data = model.sample(big, rng)
    # Poisson count: |n - 1e5| < 4 sqrt(1e5)
    assert abs(len(data) - 1e5) < 4 * np.sqrt(1e5)
    assert data.min() >= 5180 and data.max() <= 5380
    edges = np.linspace(5180, 5380, 81)
    expected = np.array([integrate.quad(lambda x: model.density(np.array([x]), big)[0], a, b)[0]
                         for a, b in itertools.pairwise(edges)])
    observed, _ = np.histogram(data, edges)
    expected *= len(data) / expected.sum()
    chi2 = float(np.sum((observed - expected) ** 2 / expected))
    # 79 degrees of freedom: p > 1e-3 for a correct generator with this fixed seed
    assert stats.chi2.sf(chi2, 79) > 1e-3, chi2


@pytest.mark.parametrize(("builder", "setup"), [("expgauss:build", "on_path"),
                                                ("expgauss", "entry_point")])
def test_plugin_on_local_cluster(builder, setup, request, tmp_path):
    """The allowed module and the entry point on a local cluster (worker processes)."""
    from toyengine.run.runner import run_study
    from toyengine.store import open_results

    request.getfixturevalue(setup)
    spec = StudySpec.from_text(STUDY.format(builder=builder))
    report = run_study(spec, tmp_path / "s.zarr", workers=1, chunk_size=3, progress=None)
    assert report.complete, report.errors
    ds = open_results(tmp_path / "s.zarr")
    local = run_chunk(Plan.of(spec), Chunk(0, 0, 0, 6)).arrays
    np.testing.assert_array_equal(ds["value"].values[0], local["value"])


# --- a hand-started scheduler, workers in other directories -----------------------------
def _env(pythonpath: list[Path]) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    env["PYTHONWARNINGS"] = "ignore"
    return env


@contextlib.contextmanager
def _processes() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        # only what this test started; each worker stopped before the scheduler it reports
        # to (a worker process whose scheduler closes under it is killed by its nanny only
        # after 8 s)
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def _wait_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout="30s", set_as_default=False) as c:
        c.wait_for_workers(n, timeout=60)


def test_plugin_on_hand_started_scheduler(tmp_path):
    dask = str(Path(sys.executable).parent / "dask")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    shutil.copy(PLUGINS / "expgauss.py", good / "expgauss.py")
    _install_entry_point(good)
    study = tmp_path / "plugin.yaml"
    study.write_text(STUDY.format(builder="expgauss:build"))
    sched_file = tmp_path / "scheduler.json"
    client_env = _env([ROOT, PLUGINS])
    with _processes() as procs:
        procs.append(subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(sched_file)], cwd=tmp_path, env=_env([ROOT]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        import json

        address = json.loads(sched_file.read_text())["address"]
        worker = [dask, "worker", address, "--nthreads", "1", "--nworkers", "1",
                  "--no-dashboard", "--host", "127.0.0.1"]
        # the module is importable from the good worker's directory only
        procs.append(subprocess.Popen(worker, cwd=good, env=_env([ROOT, good]),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_workers(address, 1)
        cmd = [sys.executable, "-m", "toyengine.cli", "run", str(study), "--scheduler", address,
               "--chunk-size", "3", "--quiet", "--plugin", "expgauss"]
        r = subprocess.run([*cmd, "--store", str(tmp_path / "ok.zarr")], capture_output=True,
                           text=True, timeout=180, env=client_env)
        assert r.returncode == 0, r.stderr
        # the entry point, installed for the client and the good worker, needs no --plugin
        ep_study = tmp_path / "entry_point.yaml"
        ep_study.write_text(STUDY.format(builder="expgauss"))
        r = subprocess.run([sys.executable, "-m", "toyengine.cli", "run", str(ep_study),
                            "--scheduler", address, "--chunk-size", "3", "--quiet", "--store",
                            str(tmp_path / "ep.zarr")], capture_output=True, text=True,
                           timeout=180, env=_env([ROOT, PLUGINS, good]))
        assert r.returncode == 0, r.stderr

        procs.append(subprocess.Popen(worker, cwd=bad, env=_env([ROOT]),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_workers(address, 2)
        r = subprocess.run([*cmd, "--store", str(tmp_path / "bad.zarr")], capture_output=True,
                           text=True, timeout=180, env=client_env)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2
        assert len(lines) == 1, r.stderr
        assert re.match(r"toyengine: worker tcp://127\.0\.0\.1:\d+: cannot import expgauss "
                        r"\(ModuleNotFoundError", lines[0]), lines[0]
        assert not (tmp_path / "bad.zarr").exists()  # failed before any toy

        # the cluster/README.md remedy for a single module: upload it to the scheduler
        from distributed import Client

        with Client(address, timeout="30s", set_as_default=False) as c:
            c.upload_file(str(PLUGINS / "expgauss.py"))
        r = subprocess.run([*cmd, "--store", str(tmp_path / "fixed.zarr")],
                           capture_output=True, text=True, timeout=180, env=client_env)
        assert r.returncode == 0, r.stderr


def test_edited_plugin_between_runs_on_hand_started_scheduler(tmp_path):
    """A plug-in edited between two runs on the same (persistent) workers: the old store
    is refused in one line naming the module; a new store is computed with the new code
    (bit-identical to this process running the edited module), never with the model the
    workers built from the old code."""
    dask = str(Path(sys.executable).parent / "dask")
    shared = tmp_path / "shared"
    shared.mkdir()
    plugin = shared / "editp28.py"
    plugin.write_text((PLUGINS / "expgauss.py").read_text())
    study = tmp_path / "plugin.yaml"
    study.write_text(STUDY.format(builder="editp28:build"))
    sched_file = tmp_path / "scheduler.json"
    env = _env([ROOT, shared])
    with _processes() as procs:
        procs.append(subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(sched_file)], cwd=tmp_path, env=_env([ROOT]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        import json

        address = json.loads(sched_file.read_text())["address"]
        procs.append(subprocess.Popen(
            [dask, "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
             "--host", "127.0.0.1"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
        _wait_workers(address, 1)
        cmd = [sys.executable, "-m", "toyengine.cli", "run", str(study), "--scheduler", address,
               "--chunk-size", "3", "--quiet", "--plugin", "editp28"]
        r = subprocess.run([*cmd, "--store", str(tmp_path / "a.zarr")], capture_output=True,
                           text=True, timeout=180, env=env)
        assert r.returncode == 0, r.stderr

        # the edit: ten times the signal yield (the file's size changes too)
        code = plugin.read_text()
        assert 'Parameter("n_sig", 400.0,' in code
        plugin.write_text(code.replace('Parameter("n_sig", 400.0,', 'Parameter("n_sig", 4000.5,'))

        r = subprocess.run([*cmd, "--store", str(tmp_path / "a.zarr")], capture_output=True,
                           text=True, timeout=180, env=env)
        assert r.returncode == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert "was made with other code of plug-in module 'editp28'" in lines[0], lines[0]

        r = subprocess.run([*cmd, "--store", str(tmp_path / "b.zarr")], capture_output=True,
                           text=True, timeout=180, env=env)
        assert r.returncode == 0, r.stderr

    from toyengine.store import open_results

    ds = open_results(tmp_path / "b.zarr")
    i = list(ds["param"].values).index("n_sig")
    assert float(ds["truth"].values[0, i]) == 4000.5
    import toyengine.models

    old_allowed = set(toyengine.models._ALLOWED)
    sys.path.insert(0, str(shared))
    try:
        allow_plugins(["editp28"])
        spec = StudySpec.from_text(STUDY.format(builder="editp28:build"))
        local = run_chunk(Plan.of(spec), Chunk(0, 0, 0, 6)).arrays
    finally:
        sys.path.remove(str(shared))
        sys.modules.pop("editp28", None)
        toyengine.models._ALLOWED.clear()
        toyengine.models._ALLOWED.update(old_allowed)
    np.testing.assert_array_equal(ds["value"].values[0], local["value"])


def test_worker_with_other_plugin_code_refuses(importable):
    """What each worker checks before any toy (``check_workers_import``): the study's
    plug-in modules are allowed there because the client validated them, and the code
    must be the client's; other code is one line naming the module."""
    from toyengine.run.client import _try_builders

    src = dict([toyengine.models.plugin_source("expgauss:build")])
    assert _try_builders(["expgauss:build"], src) is None  # not allowed here, but shipped
    err = _try_builders(["expgauss:build"], {"expgauss": "sha256:" + "0" * 64})
    assert err is not None
    assert err.startswith("plug-in module 'expgauss' here (")
    assert "is not the code the study was validated with (source sha256:" in err
    err = _try_builders(["subprocess:run"],
                        dict([toyengine.models.plugin_source("subprocess:run")]))
    assert err == ("builder 'subprocess:run': subprocess.run is not marked as a model builder "
                   "(decorate it with @toyengine.models.model_builder, docs/models.md)")


def test_plugin_constraint_follows_the_global_observables(tmp_path, monkeypatch, importable):
    """The constrained-parameter pattern of docs/models.md: the plug-in declares
    ``Constraint(mean, sigma)`` and its nll reads the terms from ``self.parameters``. The
    engine's −ln L of a toy (global observables sampled) then equals the plug-in's own nll
    with the constraint mean set to that toy's global observable (a study override and
    conditional toys), to rounding."""
    from toyengine.study.recipe import global_observables, param_axis, toy_nll_function

    code = (PLUGINS / "expgauss.py").read_text()
    code = code.replace(
        'Parameter("sigma", 12.0, (2.0, 40.0)),',
        'Parameter("sigma", 12.0, (2.0, 40.0), constraint=Constraint(12.0, 0.6)),')
    code = code.replace("from toyengine.core.params import Parameter, ParameterSet",
                        "from toyengine.core.params import Constraint, Parameter, ParameterSet")
    old = ("            return float(v[0] + v[3] - "
           "np.sum(np.log(np.maximum(self.density(x, v), 1e-300))))")
    assert old in code
    code = code.replace(old, (
        "            idx, mu, sig = self.parameters.constraint_terms()\n"
        "            return float(v[0] + v[3] - np.sum(np.log(np.maximum(self.density(x, v), "
        "1e-300)))\n                         + 0.5 * np.sum(((v[idx] - mu) / sig) ** 2))"))
    (tmp_path / "cexpgauss.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    allow_plugins(["cexpgauss"])

    sampled = StudySpec.from_text(STUDY.format(builder="cexpgauss:build"))
    i = param_axis(sampled).index("sigma")
    gobs = float(global_observables(sampled, sampled.variants[0], 0, param_axis(sampled))[i])
    assert gobs != 12.0 and abs(gobs - 12.0) < 5 * 0.6  # drawn from N(12, 0.6)
    text = STUDY.format(builder="cexpgauss:build") + "fit: {global_observables: fixed}\n"
    nominal = StudySpec.from_text(text)
    opts = "    options: {range: [5180.0, 5380.0]}\n"
    assert opts in text
    fixed = StudySpec.from_text(text.replace(opts, opts + "    parameters: {sigma: {constraint: "
                                             f"{{mean: {gobs!r}, sigma: 0.6}}}}}}\n"))
    engine = toy_nll_function(sampled, 0, "m")
    direct = toy_nll_function(fixed, 0, "m")
    declared = toy_nll_function(nominal, 0, "m")
    rng = np.random.default_rng(3)
    for _ in range(5):
        x = (np.array([400, 5280, 12, 1500, -0.005])
             + np.array([20, 3, 1, 40, 0.001]) * rng.standard_normal(5))
        # a sum of ~2000 log terms of size ~10: rounding ~1e-11 absolute
        assert engine(x) == pytest.approx(direct(x), abs=1e-8)
    # the sampled toy differs from conditional toys by the moved constraint term, which is
    # not zero at sigma = 14 (gobs is neither 12 nor 16)
    x = np.array([400, 5280, 14.0, 1500, -0.005])
    moved = ((14.0 - gobs) ** 2 - (14.0 - 12.0) ** 2) / (2 * 0.6**2)
    assert abs(moved) > 1e-3
    assert engine(x) - declared(x) == pytest.approx(moved, abs=1e-8)
