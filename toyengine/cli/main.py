"""``toyengine run | status | summary | plot`` — thin wrappers over the Python API."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ..errors import SpecError, StoreError, ToyEngineError
from .finish import finish_run

__all__ = ["main"]


def _cmd_run(args: argparse.Namespace) -> int:
    from ..run.runner import run_study
    from ..study.spec import load_spec

    spec = load_spec(args.study).with_overrides(toys=args.toys, seed=args.seed)
    security = None
    if args.tls_config:
        from ..run.cluster import load_security

        security = load_security(args.tls_config)
    report = run_study(spec, args.store, workers=args.workers, scheduler=args.scheduler,
                       chunk_size=args.chunk_size, security=security,
                       progress=None if args.quiet else sys.stderr)
    return finish_run(report, args.store, args.summary)


def _cmd_status(args: argparse.Namespace) -> int:
    import numpy as np

    from ..store import StoreInfo, open_results

    info = StoreInfo(args.store)
    chunks, done = info.chunks(), info.done()
    toys_done = sum(c.size for c in chunks if done[c.index])
    total = sum(c.size for c in chunks)
    ds = open_results(args.store)
    status = ds["status"].values
    ran = status != 0
    failed = int(np.sum(ran & (status != 1)))
    out = {
        "study": info.attrs.get("study_name"), "kind": info.attrs.get("kind"),
        "variants": info.n_variants, "toys_per_variant": info.toys,
        "hypotheses": [str(h) for h in ds["hypothesis"].values],
        "chunks_done": int(done.sum()), "chunks_total": len(chunks),
        "toys_done": toys_done, "toys_total": total,
        "fits_run": int(ran.sum()), "fits_failed": failed,
        "complete": bool(done.all()),
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:>18}: {v}")
    return 0 if out["complete"] else 1


def _cmd_summary(args: argparse.Namespace) -> int:
    from ..store import open_results
    from ..summary import render_summary

    print(render_summary(open_results(args.store), args.format))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..store import open_results
    from ..summary import write_plots

    outdir = Path(args.outdir or (str(args.store).rstrip("/") + "_plots"))
    for p in write_plots(open_results(args.store), outdir):
        print(p)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toyengine",
                                description="Distributed toy studies for likelihood fits.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run (or resume, or extend) a study into a result store")
    r.add_argument("study", help="study file (YAML)")
    r.add_argument("--store", required=True, help="result store path (zarr directory)")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--workers", type=int, help="local worker processes (default: one per core)")
    g.add_argument("--scheduler", help="address of an existing Dask scheduler")
    r.add_argument("--toys", type=int, help="toys per variant (overrides the study file)")
    r.add_argument("--seed", type=int, help="root seed (overrides the study file)")
    r.add_argument("--chunk-size", type=int, help="toys per task (default: automatic)")
    r.add_argument("--tls-config", help="Dask security YAML for a TLS scheduler")
    r.add_argument("--summary", action="store_true", help="print the summary at the end")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.set_defaults(func=_cmd_run)

    s = sub.add_parser("status", help="chunks and toys done, failed fits")
    s.add_argument("store")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_status)

    m = sub.add_parser("summary", help="significance, pulls and systematic tables")
    m.add_argument("store")
    m.add_argument("--format", default="text", choices=["text", "markdown", "csv", "json"])
    m.set_defaults(func=_cmd_summary)

    pl = sub.add_parser("plot", help="write PNG plots of a store")
    pl.add_argument("store")
    pl.add_argument("--outdir", help="directory for the PNGs (default: STORE_plots)")
    pl.set_defaults(func=_cmd_plot)

    from .cluster import add_commands

    add_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SpecError as exc:
        print(f"toyengine: invalid study file: {exc}", file=sys.stderr)
        return 2
    except (StoreError, ToyEngineError) as exc:
        print(f"toyengine: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
