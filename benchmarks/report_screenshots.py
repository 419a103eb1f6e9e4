"""Time ``toyengine report`` and screenshot the HTML in headless Chromium.

Builds (once, into OUT/stores/) a 1000-toy pulls store of the Gaussian-on-exponential study
and a 300-toy model-variation store of the same model, times ``write_report`` on each, and
renders each report with headless Chromium into ``OUT/<name>.png`` (full page at 1280 px
wide). Usage::

    PYTHONPATH=$PWD python benchmarks/report_screenshots.py OUT [chromium]

Used to check the HTML report's layout (docs/img/report-*.png are its output).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDIES = {
    "pulls": (ROOT / "studies/examples/gauss_exp_pulls.yaml", 1000),
    "model_variation": (ROOT / "studies/examples/gauss_exp_model_variation.yaml", 300),
}
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--hide-scrollbars")


def build(out: Path) -> dict[str, Path]:
    from toyengine import load_spec, run_study

    stores = {}
    for name, (study, toys) in STUDIES.items():
        store = out / "stores" / f"{name}.zarr"
        if not store.exists():
            spec = load_spec(study).with_overrides(toys=toys)
            run_study(spec, store, workers=2, progress=None, yes=True)
        stores[name] = store
    return stores


def screenshot(chromium: str, page: Path, png: Path, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}",
                        f"--window-size=1280,{height}", f"--screenshot={png}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "report_shots")
    chromium = argv[2] if len(argv) > 2 else (shutil.which("chromium")
                                             or shutil.which("chromium-browser"))
    out.mkdir(parents=True, exist_ok=True)
    from toyengine.summary.html import write_report

    for name, store in build(out).items():
        t0 = time.perf_counter()
        page = write_report(store, out / f"{name}.html")
        dt = time.perf_counter() - t0
        print(f"{name}: report in {dt:.1f} s ({page})")
        if chromium:
            for part, height in (("top", 1600), ("full", 7000)):
                screenshot(chromium, page, out / f"{name}-{part}.png", height)
            print(f"  screenshots {out}/{name}-top.png, {name}-full.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
