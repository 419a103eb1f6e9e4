"""Benchmark: CPU per Z_c(4100) significance toy pair (LHCb, Eur. Phys. J. C 78 (2018) 1019)
with the study's own global search, on an older likelihood engine and on this checkout,
side by side on one core.

The search that ``studies/zc4100/significance.yaml`` settled on (profile with line, edges
and screen, then restarts over the K pi S-wave, the Z_c and the K*0(1950)) needs a fit
layer from commit cef1a05 or later; the engine the speed issue compares against, 2c715bd,
predates it and cannot run it. This benchmark runs that search both ways:

- **old**: the fit layer and study code of ``--fit-commit`` (default cef1a05, the first
  commit with the settled search, before a restart's brief fit ran MIGRAD once and before
  repeated restart points were dropped), with every model's likelihood replaced by that of
  ``--old`` (default 2c715bd: its ``DalitzModel.nll`` on the same events);
- **new**: this checkout, unchanged.

Both generate the same toys (the same seeds and generator) and run the same search, so the
difference is the likelihood engine plus what changed in the fit layer since
``--fit-commit``. The two processes alternate (old, new, old, new, ...), each timing toys
``--first`` to ``--last`` (``time.process_time`` around each toy's ``run_chunk``, after an
untimed toy that builds the models and compiles the kernels). Prints the mean CPU per pair
of each run, the ratio per round, the calls per pair, and the largest difference of
``-2 ln L`` between the two engines (the same minima: well below the search's 0.01).

Needs the git history (``git archive`` of the two commits into a temporary directory).

Usage::

    python benchmarks/bench_zc_pair_engines.py [--rounds 3] [--first 2] [--last 41]
        [--core 1] [--old 2c715bd] [--fit-commit cef1a05] [--study FILE]
"""

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _extract(commit: str, paths: list[str], dest: Path) -> None:
    """``git archive commit paths`` unpacked into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    tar = dest / "a.tar"
    with tar.open("wb") as fh:
        subprocess.run(["git", "-C", str(REPO), "archive", commit, *paths], stdout=fh,
                       check=True)
    with tarfile.open(tar) as tf:
        tf.extractall(dest, filter="data")
    tar.unlink()


def _patch_old_likelihood(old_root: str) -> None:
    """Give every model the study builds the likelihood of the old engine (imported from
    ``old_root`` as ``toyengine_old``) on the same events."""
    import numpy as np

    sys.path.insert(0, old_root)
    from toyengine_old.core.dalitz.model import DalitzData as OldData
    from toyengine_old.core.dalitz.model import RunSample as OldRun
    from toyengine_old.models.zc4100 import build_zc4100 as old_build

    import toyengine.study.recipe as recipe
    import toyengine.study.spec as spec_mod

    new_build = spec_mod.build_model

    def build_model(spec, variant, name):
        model = new_build(spec, variant, name)
        if getattr(model, "_old_engine", None) is None:
            cfg = spec.model_config(variant, name)
            old = old_build(cfg.get("options") or {}, None)
            if (tuple(old.parameters.names) != tuple(model.parameters.names)
                    or not np.array_equal(old.parameters.values, model.parameters.values)):
                raise SystemExit(f"model {name}: the old engine's parameters differ")

            def nll(data, weights=None, _old=old):
                runs = {k: OldRun(r.m2_kpi, r.m2_etacpi, r.label) for k, r in data.runs.items()}
                return _old.nll(OldData(runs), weights)

            model.nll = nll
            model._old_engine = old
        return model

    spec_mod.build_model = build_model
    recipe.build_model = build_model


def _worker(args: argparse.Namespace) -> int:
    """Time toys ``first..last`` of the study; one JSON line per toy."""
    if args.core is not None:
        os.sched_setaffinity(0, {args.core})
    if args.old_root:
        _patch_old_likelihood(args.old_root)
    import toyengine
    from toyengine.study.plan import Chunk, Plan
    from toyengine.study.recipe import run_chunk
    from toyengine.study.spec import load_spec

    plan = Plan.of(load_spec(args.study))
    run_chunk(plan, Chunk(0, 0, args.first - 1, args.first))  # builds models, compiles
    print(json.dumps({"package": toyengine.__file__}), flush=True)
    for t in range(args.first, args.last + 1):
        c0 = time.process_time()
        rec = run_chunk(plan, Chunk(0, 0, t, t + 1)).arrays
        cpu = time.process_time() - c0
        print(json.dumps({"toy": t, "cpu": cpu, "nll": rec["nll"][0].tolist(),
                          "nfcn": rec["nfcn"][0].tolist()}), flush=True)
    return 0


def _run(label: str, env: dict[str, str], args: argparse.Namespace,
         old_root: str | None) -> dict[int, dict]:
    cmd = [sys.executable, __file__, "--worker", "--study", args.study,
           "--first", str(args.first), "--last", str(args.last)]
    if args.core is not None:
        cmd += ["--core", str(args.core)]
    if old_root:
        cmd += ["--old-root", old_root]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{label} run failed:\n{out.stderr[-3000:]}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    expect = str(Path(env["PYTHONPATH"]).resolve())
    package = next(r["package"] for r in rows if "package" in r)
    if not str(Path(package).resolve()).startswith(expect):
        raise SystemExit(f"{label} run imported {package}, not the package under {expect}")
    return {r["toy"]: r for r in rows if "toy" in r}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--first", type=int, default=2)
    ap.add_argument("--last", type=int, default=41)
    ap.add_argument("--core", type=int, default=None, help="pin both runs to this core")
    ap.add_argument("--old", default="2c715bd", help="commit of the old likelihood engine")
    ap.add_argument("--fit-commit", default="cef1a05",
                    help="commit whose fit layer and study code run the old engine")
    ap.add_argument("--study", default=str(REPO / "studies/zc4100/significance.yaml"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--old-root", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)

    tmp = Path(tempfile.mkdtemp(prefix="toyengine-engines-"))
    try:
        _extract(args.fit_commit, ["toyengine", "studies/zc4100"], tmp / "fit")
        _extract(args.old, ["toyengine", "studies/zc4100"], tmp / "old")
        # relative imports only: the old package imports under another name; its maps are
        # looked up next to it (studies/zc4100)
        (tmp / "old" / "toyengine").rename(tmp / "old" / "toyengine_old")
        base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env_old = {**base, "PYTHONPATH": str(tmp / "fit")}
        env_new = {**base, "PYTHONPATH": str(REPO)}
        print(f"Z_c significance pair, toys {args.first}-{args.last}, study {args.study}\n"
              f"old: likelihood of {args.old} under the search code of {args.fit_commit}; "
              f"new: this checkout", flush=True)
        for rnd in range(1, args.rounds + 1):
            old = _run("old", env_old, args, str(tmp / "old"))
            new = _run("new", env_new, args, None)
            toys = sorted(set(old) & set(new))
            co = sum(old[t]["cpu"] for t in toys) / len(toys)
            cn = sum(new[t]["cpu"] for t in toys) / len(toys)
            no = sum(sum(old[t]["nfcn"]) for t in toys) / len(toys)
            nn = sum(sum(new[t]["nfcn"]) for t in toys) / len(toys)
            dt = max(abs(2 * (a - b)) for t in toys
                     for a, b in zip(old[t]["nll"], new[t]["nll"], strict=True))
            print(f"round {rnd}: mean CPU per pair old {co:.3f} s, new {cn:.3f} s, "
                  f"ratio {co / cn:.2f}; calls per pair {no:.0f} / {nn:.0f}; "
                  f"max |d(-2 ln L)| {dt:.1e} over {len(toys)} toys", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
