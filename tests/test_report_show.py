"""`toyengine run` prints a cost estimate; `show`, `report` (one self-contained HTML file)
and `status --watch` on a small finished study."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest

STUDY = Path(__file__).parent / "data" / "tcc_small.yaml"


@pytest.fixture(scope="module")
def finished(tmp_path_factory, cli) -> tuple[Path, subprocess.CompletedProcess[str]]:
    store = tmp_path_factory.mktemp("run") / "small.zarr"
    res = cli("run", str(STUDY), "--store", str(store), "--workers", "1", "--toys", "6")
    assert res.returncode == 0, res.stderr
    return store, res


def test_run_prints_estimate_and_physics_on_stderr(finished):
    _, res = finished
    assert re.search(r"estimate: 6 toys, 6 fits; .* s per toy", res.stderr)
    assert "pull N_sig" in res.stderr and "pull N_sig" not in res.stdout
    assert res.stdout.startswith("store: ")


def test_show_prints_study_fits_and_cost(cli):
    res = cli("show", str(STUDY), "--time-toys", "1", "--workers", "2")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "name: tcc-small" in out and "starts: 3" in out  # the study, defaults filled in
    assert re.search(r"delta_m\s+δm_BW \[MeV\]\s+= -0.273", out)  # parameters with units
    assert "1 variant(s) × 24 toys × 1 hypothesis(es) = 24 fits" in out
    assert re.search(r"cost estimate: 24 toys, 24 fits; .* on 2 worker\(s\)", out)


def test_show_times_toys_only_when_asked(cli):
    res = cli("show", str(STUDY))
    assert res.returncode == 0, res.stderr
    assert "cost estimate" not in res.stdout and "timing" not in res.stderr
    assert "1 variant(s) × 24 toys × 1 hypothesis(es) = 24 fits" in res.stdout


def test_report_is_one_self_contained_html_file(finished, tmp_path, cli):
    store, _ = finished
    out = tmp_path / "r.html"
    res = cli("report", str(store), "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(out)
    html = out.read_text(encoding="utf-8")
    assert "Pulls, bias and coverage" in html and "name: tcc-small" in html
    assert "root seed" in html and "study digest" in html and "fits attempted" in html
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', html)
    assert imgs and all(s.startswith("data:image/png;base64,") for s in imgs)
    png = base64.b64decode(imgs[0].split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # nothing outside the file: no other src/href than data URIs
    assert not re.search(r'(src|href)="(?!data:)', html)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def test_status_watch_reads_the_live_status(finished, cli):
    store, _ = finished
    res = cli("status", str(store), "--watch", "--interval", "0.1", "--max-updates", "5")
    assert res.returncode == 0, res.stderr
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("[tcc-small] 6/6 toys") and "finished" in line
    assert "pull N_sig" in line


def test_report_does_not_create_directories(tmp_path, cli):
    """``-o`` into a directory that does not exist: one line, nothing created."""
    out = tmp_path / "no" / "such" / "r.html"
    res = cli("report", str(tmp_path / "s.zarr"), "-o", str(out))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"toyengine: report -o {out}: the directory {out.parent} does not exist (create it "
        "first)"]
    assert not (tmp_path / "no").exists()


def test_cost_estimate_counts_the_set_up_each_worker_pays():
    """The first toy of a process builds the models and compiles the kernels; every worker
    pays that once, so the estimate adds it (it left it out: "≈ 3s", then 94 s)."""
    from toyengine.study.show import CostEstimate

    c = CostEstimate(seconds_per_toy=0.01, toys_timed=2, toys_total=1000, fits_total=2000,
                     workers=2, setup_seconds=30.0)
    assert c.seconds == pytest.approx(0.01 * 1000 / 2 + 30.0)
    assert "plus 30s set-up per worker" in c.text()
    assert "not counting the workers' start-up" in c.text()
