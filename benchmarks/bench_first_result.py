"""Start-up: how soon the README's ``toyengine run`` shows its first toy result, and the
cost of ``import toyengine`` and ``toyengine --help``.

The README command ``toyengine run studies/tcc/pulls.yaml --store DIR/tcc_pulls.zarr
--summary`` (embedded LocalCluster, one worker per core, here ``--workers 2``) is run as a
user runs it: a new Python process (``python -m toyengine``), a fresh store in a temporary
directory, standard error read through a pipe. Every line of standard error is stamped
with this process's monotonic clock as it arrives (the progress lines are flushed as they
are written; standard error is line-buffered when it is a pipe). Two moments are read:

* cluster up: the line ``Dask dashboard: ...``, which the runner prints once the cluster's
  workers are connected, before the store is created and any toy is timed;
* first result: the first progress line ``[study] N/TOTAL toys ...`` with N > 0, printed
  when the first chunk's results are in (the progress lines of a non-terminal are plain).

Printed per run and as medians: cluster up → first result (target ≤ 1 s; the workers load
the store writer and the 1-D kernels before they join, :mod:`toyengine.run.preload`), launch →
cluster up, launch → first result. Then the medians over fresh processes of
``import toyengine`` (timed inside the process: the import alone) and of the whole
``python -m toyengine --help`` process (wall clock, interpreter start included).

The code under test is whatever ``python -m toyengine`` imports in this environment: set
``PYTHONPATH`` to a checkout to measure it (this script imports nothing of toyengine, so it
measures older commits too; the processes run in an empty directory, so that ``-m`` does
not pick up a checkout from the working directory; the package's path is printed). Compare
checkouts with their bytecode caches written (``python -m compileall CHECKOUT/toyengine``,
needed where ``PYTHONDONTWRITEBYTECODE`` is set): else every process, workers included,
compiles the sources again. The machine's load average is printed with the numbers.

Usage: python benchmarks/bench_first_result.py [--runs N] [--workers W] [--study PATH]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRESS = re.compile(r"^\[[^\]]+\] (\d+)/(\d+) toys")
CLUSTER_UP = "Dask dashboard:"


def first_result(study: Path, workers: int) -> tuple[float, float]:
    """One run of the study in a fresh store: (launch → cluster up, launch → first result)
    in seconds, read from the time stamps of its standard-error lines."""
    tmp = Path(tempfile.mkdtemp(prefix="bench_first_result_"))
    cmd = [sys.executable, "-m", "toyengine", "run", str(study.resolve()), "--store",
           str(tmp / "tcc_pulls.zarr"), "--summary", "--workers", str(workers)]
    up = first = None
    lines: list[str] = []
    try:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            now = time.monotonic() - t0
            lines.append(line)
            if up is None and line.startswith(CLUSTER_UP):
                up = now
            m = PROGRESS.match(line)
            if first is None and m and int(m.group(1)) > 0:
                first = now
        rc = proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0 or up is None or first is None:
        msg = (f"{' '.join(cmd)} exited {rc} (cluster-up line seen: {up is not None}, "
               f"progress line seen: {first is not None}):\n{''.join(lines[-20:])}")
        raise RuntimeError(msg)
    return up, first


def import_seconds(cwd: str) -> tuple[float, str]:
    """``import toyengine`` in a fresh interpreter, timed inside it; and the package's path."""
    code = ("import time; t = time.perf_counter(); import toyengine; "
            "print(time.perf_counter() - t, toyengine.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[-2]), out[-1]


def help_seconds(cwd: str) -> float:
    """The whole ``python -m toyengine --help`` process, wall clock."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "toyengine", "--help"], cwd=cwd, check=True,
                   capture_output=True)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="study runs (default 5)")
    ap.add_argument("--workers", type=int, default=2, help="local workers (default 2)")
    ap.add_argument("--study", type=Path, default=ROOT / "studies/tcc/pulls.yaml",
                    help="the study file (default: this checkout's T_cc+ pulls study)")
    ap.add_argument("--quick-runs", type=int, default=10,
                    help="runs of the import and --help timings (default 10)")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    gaps, ups, firsts = [], [], []
    for i in range(args.runs):
        up, first = first_result(args.study, args.workers)
        gaps.append(first - up)
        ups.append(up)
        firsts.append(first)
        print(f"run {i + 1}: launch → cluster up {up:.2f} s, cluster up → first result "
              f"{first - up:.2f} s, launch → first result {first:.2f} s")
    with tempfile.TemporaryDirectory() as cwd:
        timed = [import_seconds(cwd) for _ in range(args.quick_runs)]
        helps = [help_seconds(cwd) for _ in range(args.quick_runs)]
    imports = [t for t, _ in timed]
    med = statistics.median
    print(f"cluster up → first result: median {med(gaps):.2f} s "
          f"(min {min(gaps):.2f}, max {max(gaps):.2f}; {args.runs} runs, "
          f"{args.workers} workers)")
    print(f"launch → cluster up: median {med(ups):.2f} s; launch → first result: median "
          f"{med(firsts):.2f} s")
    print(f"import toyengine: median {med(imports):.3f} s "
          f"(min {min(imports):.3f}; {args.quick_runs} fresh processes; {timed[0][1]})")
    print(f"toyengine --help (whole process): median {med(helps):.3f} s "
          f"(min {min(helps):.3f}; {args.quick_runs} runs)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
