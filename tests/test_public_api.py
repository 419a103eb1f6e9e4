"""The public surface is pinned: a change to it must show up here."""

import subprocess
import sys

import toyengine


def test_public_api():
    assert sorted(dir(toyengine)) == sorted(toyengine.__all__)
    assert set(toyengine.__all__) == {
        "Chunk", "Constraint", "FitResult", "ModelError", "Parameter", "ParameterSet",
        "RunReport", "SpecError", "StoreError", "StudySpec", "ToyEngineError", "__version__",
        "fit", "load_spec", "open_results", "run_chunk", "run_study",
    }


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
    for fmt in ("text", "markdown", "csv", "json"):
        res = cli("summary", str(store), "--format", fmt)
        assert res.returncode == 0 and "delta_m" in res.stdout, (fmt, res.stderr)
    res = cli("plot", str(store), "--outdir", str(tmp_path / "plots"))
    assert res.returncode == 0, res.stderr
    pngs = list((tmp_path / "plots").glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)
