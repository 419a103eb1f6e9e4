"""The public surface is pinned: a change to it must show up here."""

import subprocess
import sys

import toyengine


def test_public_api():
    assert sorted(dir(toyengine)) == sorted(toyengine.__all__)
    assert set(toyengine.__all__) == {
        "Constraint", "FitResult", "ModelError", "Parameter", "ParameterSet",
        "RunReport", "SpecError", "StoreError", "StudySpec", "ToyEngineError", "__version__",
        "fit", "load_spec", "open_results", "run_study",
    }
    assert len(toyengine.__all__) <= 15


def test_layers_import_down_only():
    """No module imports a higher layer (core < models < study < run < cli; store and
    summary below run and cli), and the store does not import the package root or summary."""
    import ast
    from pathlib import Path

    rank = {"core": 0, "errors": 0, "_version": 0, "models": 1, "study": 2, "store": 3,
            "summary": 3, "run": 4, "cli": 5}
    root = Path(toyengine.__file__).parent
    bad = []
    for f in root.rglob("*.py"):
        rel = f.relative_to(root).parts
        layer = rel[0].removesuffix(".py")
        if layer not in rank:
            continue
        depth = len(rel) - 1  # packages below the root holding f
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            if node.level <= depth:
                continue  # stays inside its own layer
            target = (node.module or "").split(".")[0]
            names = [a.name for a in node.names] if not target else [target]
            for t in names:
                if (t in rank and rank[t] > rank[layer]) or (layer == "store" and (
                        t == "summary" or (not node.module and t == "__version__"))):
                    bad.append(f"{'/'.join(rel)} imports {t}")
    assert bad == []


def test_cli_status_summary_plot(tmp_path):
    from pathlib import Path

    study = Path(__file__).parent / "data" / "tcc_small.yaml"
    store = tmp_path / "s.zarr"

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "toyengine.cli", *args],
                              capture_output=True, text=True, timeout=300)

    res = cli("run", str(study), "--store", str(store), "--workers", "1", "--toys", "6",
              "--summary")
    assert res.returncode == 0, res.stderr
    assert "Dask dashboard" in res.stderr and "6/6 toys" in res.stderr
    assert "Pulls" in res.stdout
    res = cli("status", str(store), "--json")
    assert res.returncode == 0 and '"toys_done": 6' in res.stdout
    for fmt, label in (("text", "δm_BW [MeV]"), ("markdown", "δm_BW [MeV]"),
                       ("latex", r"$\delta$m\_BW [MeV]"), ("json", "delta_m")):
        res = cli("summary", str(store), "--format", fmt)
        assert res.returncode == 0 and label in res.stdout, (fmt, res.stderr)
    res = cli("summary", str(store), "--format", "csv", "--section", "pulls")
    assert res.returncode == 0 and "delta_m" in res.stdout, res.stderr
    res = cli("plot", str(store), "--outdir", str(tmp_path / "plots"))
    assert res.returncode == 0, res.stderr
    pngs = list((tmp_path / "plots").glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)
