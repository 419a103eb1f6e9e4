"""``toyengine run | show | status | verify | summary | report | plot | schema`` — thin
wrappers over the Python API.

Results go to standard output, progress and errors to standard error, so that
``toyengine summary S --format csv --section pulls > pulls.csv`` holds the table only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from ..errors import (
    ClusterError,
    Interrupted,
    LeaseLost,
    SpecError,
    StoreError,
    SummaryError,
    ToyEngineError,
    UsageError,
)
from ..run.preflight import CONNECT_TIMEOUT
from .finish import finish_run
from .options import add_plugin_option

__all__ = ["main"]


def _cmd_run(args: argparse.Namespace) -> int:
    from ..run.preflight import check_store_path, parse_scheduler_address, probe_scheduler
    from ..run.runner import run_study
    from ..study.spec import load_spec

    scheduler = args.scheduler
    security = None
    if args.tls_config:
        from ..run.cluster import load_security

        security = load_security(args.tls_config)
    if scheduler is not None:  # the address first: nothing else is done for a bad one
        scheduler = parse_scheduler_address(scheduler, args.tls_config)
        probe_scheduler(scheduler, security, args.connect_timeout)
    if "://" not in str(args.store):  # a local path; a URL is checked when opened
        check_store_path(args.store)
    spec = load_spec(args.study).with_overrides(toys=args.toys, seed=args.seed)
    kw = {"workers": args.workers, "scheduler": scheduler, "chunk_size": args.chunk_size,
          "security": security, "progress": None if args.quiet else sys.stderr,
          "yes": args.yes, "connect_timeout": args.connect_timeout,
          "storage_options": _storage_options(args), "write": args.write,
          "worker_timeout": args.worker_timeout}
    if args.precision is not None:
        from ..run.precision import run_to_precision

        report = run_to_precision(spec, args.store, args.precision, args.max_toys, **kw)
    else:
        report = run_study(spec, args.store, **kw)
    return finish_run(report, args.store, args.summary, _storage_options(args))


def _storage_options(args: argparse.Namespace) -> dict:
    from ..store.location import parse_storage_options

    return parse_storage_options(getattr(args, "storage_option", None) or [])


@contextmanager
def _reading(store: str, storage_options: dict | None = None) -> Iterator[None]:
    """Turn a failure to read a store's data into one StoreError naming the damaged chunk."""
    try:
        yield
    except ToyEngineError:
        raise
    except Exception as exc:
        from ..store.repair import find_unreadable_chunk

        try:
            bad = find_unreadable_chunk(store, storage_options)
        except Exception:  # noqa: BLE001 - the store's metadata itself is unreadable
            bad = None
        if bad is None:
            raise
        name, key, err = bad
        msg = (f"store {store} is damaged: chunk {name}/{key} cannot be read ({err}); run "
               "the study into a new store")
        raise StoreError(msg) from exc


def _store_status(store: str, storage_options: dict) -> dict[str, object]:
    import numpy as np

    from ..core.status import FitStatus
    from ..store import StoreInfo
    from ..store.integrity import check_store
    from ..store.opening import open_checked_store

    info = StoreInfo(store, storage_options=storage_options)
    chk = check_store(info)
    problems, chunks, done = chk.problems, info.chunks(), chk.done
    toys_done = sum(c.size for c in chunks if done[c.index])
    total = sum(c.size for c in chunks)
    ds = open_checked_store(info, chk)[0]
    status = ds["status"].values
    ran = status != FitStatus.NOT_RUN
    failed = int(np.sum(ran & (status != FitStatus.VALID)))
    from ..summary.report import failed_line

    return {
        "study": info.attrs.get("study_name"), "kind": info.attrs.get("kind"),
        "variants": info.n_variants, "toys_per_variant": info.toys,
        "hypotheses": [str(h) for h in ds["hypothesis"].values],
        "chunks_done": int(done.sum()), "chunks_total": len(chunks),
        "toys_done": toys_done, "toys_total": total,
        "fits_run": int(ran.sum()), "fits_failed": failed,
        **({"failures": failed_line(ds)} if failed else {}),
        "damaged_chunks": [p.describe(info.variant_names) for p in problems],
        "complete": bool(done.all()),
    }


def _watch(store: str, storage_options: dict, interval: float,
           max_updates: int | None) -> int:
    """Follow the live status file a run writes next to the store (toys, rate, ETA, failed
    fits, running physics) until the run finishes."""
    import time

    from ..run.live import physics_text
    from ..store.status import STATUS_KEY, read_status
    from ..study.show import format_seconds

    last = None
    n = 0
    while True:
        st = read_status(store, storage_options)
        if st is None:
            print(f"toyengine: no live status yet ({store}/{STATUS_KEY}); waiting",
                  file=sys.stderr)
        elif st.get("updated") != last:
            last = st.get("updated")
            eta = st.get("eta_s")
            line = (f"[{st['study']}] {st['toys_done']}/{st['toys_total']} toys | "
                    f"{st.get('rate') or 0:.1f} toys/s | "
                    f"ETA {format_seconds(eta) if eta is not None else '?'} | failed fits "
                    f"{st['failed_fits']} ({100 * (st.get('failed_fraction') or 0):.1f}%) | "
                    f"{st['state']} {st['updated']}")
            phys = physics_text(st.get("physics") or {}, str(st.get("kind", "")))
            print(line + (f" | {phys}" if phys else ""), flush=True)
            if st.get("state") == "finished":
                return 0
        n += 1
        if max_updates is not None and n >= max_updates:
            return 1
        time.sleep(interval)


def _cmd_status(args: argparse.Namespace) -> int:
    opts = _storage_options(args)
    if args.watch:
        return _watch(args.store, opts, args.interval, args.max_updates)
    with _reading(args.store, opts):
        out = _store_status(args.store, opts)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            if k == "damaged_chunks":
                for line in v:
                    print(f"{'damaged':>18}: {line}")
                continue
            print(f"{k:>18}: {v}")
    return 0 if out["complete"] else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    from ..store import StoreInfo, unmark, verify_store
    from ..store.integrity import check_metadata
    from ..store.lease import Lease
    from ..store.location import Location
    from ..store.repair import repair_store

    loc = Location.of(args.store, _storage_options(args))
    if args.repair:
        with Lease(loc, progress=sys.stderr):
            actions, metadata, problems = repair_store(loc)
        for line in actions:
            print(f"repaired: {line}")
    else:
        info = StoreInfo(loc)
        with Lease(info.loc, progress=sys.stderr) as lease:
            info = StoreInfo(info.loc)
            metadata = check_metadata(info)
            problems = verify_store(info)
            lease.check()
            unmark(info, problems)
    info = StoreInfo(loc)
    n_done = int(info.done().sum())
    for line in metadata:
        print(f"damaged metadata: {line}")
    for p in problems:
        print(f"damaged, marked not done: {p.describe(info.variant_names)}")
    todo = []
    if metadata:
        todo.append(f"run `toyengine verify --repair {args.store}`")
    if problems or n_done < info.n_chunks:
        todo.append("run `toyengine run` again to compute the chunks not done")
    print(f"verified {n_done + len(problems)} done chunk(s) of {info.n_chunks}: "
          f"{len(problems)} missing or corrupt, {len(metadata)} damaged metadata object(s)"
          + (f"; {' and '.join(todo)}" if todo else ""))
    return 1 if problems or metadata else 0


def _cmd_show(args: argparse.Namespace) -> int:
    from ..study.plan import Plan
    from ..study.show import describe_study, estimate_cost
    from ..study.spec import load_spec

    spec = load_spec(args.study).with_overrides(toys=args.toys, seed=args.seed)
    cost = None
    if args.time_toys > 0:
        print(f"timing {args.time_toys} toy(s) ...", file=sys.stderr, flush=True)
        cost = estimate_cost(Plan.of(spec), toys=args.time_toys, workers=args.workers)
    sys.stdout.write(describe_study(spec, cost))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .report import write_report

    if args.output is not None and not Path(args.output).parent.is_dir():
        msg = (f"report -o {args.output}: the directory {Path(args.output).parent} does not "
               "exist (create it first)")
        raise UsageError(msg)
    opts = _storage_options(args)
    with _reading(args.store, opts):
        out = write_report(args.store, args.output, storage_options=opts,
                           allow_incomplete=args.allow_incomplete)
    first = out.read_text(encoding="utf-8").split("\n", 1)[0]
    if first.startswith("<!-- INCOMPLETE STORE: "):  # flagged first, as by summary
        import html

        what = html.unescape(first.removeprefix("<!-- INCOMPLETE STORE: ")[:-4])
        print(f"INCOMPLETE STORE (read with --allow-incomplete): {what}")
    print(out)
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from ..store.opening import open_checked

    opts = _storage_options(args)
    with _reading(args.store, opts):
        ds, verify_unread = open_checked(args.store, opts,
                                         allow_incomplete=args.allow_incomplete)
        return _summary(ds, args, verify_unread)


def _incomplete_line(ds: Any, fmt: str = "text") -> str:
    """The first line of a reader's output for a store read with --allow-incomplete."""
    what = ds.attrs.get("incomplete")
    if not what:
        return ""
    text = f"INCOMPLETE STORE (read with --allow-incomplete): {what}"
    lead = {"latex": "% ", "csv": "# "}.get(fmt, "")
    if fmt == "html":
        return f"<!-- {text} -->\n"
    return f"{lead}{text}\n"


def _summary(ds: Any, args: argparse.Namespace, verify_unread: Callable[[], None]) -> int:
    """Compute the summary, verify the objects it did not read, then write it (nothing is
    written from a damaged store)."""
    from pathlib import Path

    from ..summary import render_summary, summary_tables

    sections = [x for item in args.section or () for x in item.split(",") if x] or None
    out = Path(args.output) if args.output else None
    flag = _incomplete_line(ds, args.format)
    if args.format == "csv" and out is not None:
        tables = summary_tables(ds, sections)
        verify_unread()
        if len(tables) > 1 or out.is_dir() or str(args.output).endswith("/"):
            # one tidy CSV per table: DIRECTORY/<table name>.csv
            out.mkdir(parents=True, exist_ok=True)
            if flag:
                print(_incomplete_line(ds), end="")
            for t in tables:
                path = out / f"{t.name}.csv"
                path.write_text(flag + t.to_csv(), encoding="utf-8")
                print(path)
            return 0
    text = render_summary(ds, args.format, sections=sections, max_failed=args.max_failed)
    verify_unread()
    if flag and args.format == "json":
        text = json.dumps({"incomplete": ds.attrs["incomplete"], **json.loads(text)},
                          indent=2) + "\n"
    elif flag:
        text = flag + text
    if out is None:
        sys.stdout.write(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(out)
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..store.opening import open_checked
    from ..summary import write_plots

    default = str(args.store).rstrip("/").rsplit("/", 1)[-1] + "_plots"
    if "://" not in str(args.store):
        default = str(args.store).rstrip("/") + "_plots"
    outdir = Path(args.outdir or default)
    with _reading(args.store, _storage_options(args)):
        ds, verify_unread = open_checked(args.store, _storage_options(args),
                                         allow_incomplete=args.allow_incomplete)
        written = write_plots(ds, outdir)
        try:
            verify_unread()
        except StoreError:
            for p in written:  # nothing is left from a damaged store
                Path(p).unlink(missing_ok=True)
            raise
        print(_incomplete_line(ds), end="")
        for p in written:
            print(p)
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from ..study.studyfile import options_markdown, study_json_schema

    if args.markdown:
        print(options_markdown(), end="")
    else:
        print(json.dumps(study_json_schema(), indent=2, ensure_ascii=False))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"toyengine: {self.prog.removeprefix('toyengine ')}: {message} "
                     f"(see '{self.prog} --help')\n")


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            msg = f"{text!r} is not an integer"
            raise argparse.ArgumentTypeError(msg) from None
        if v < minimum:
            msg = f"{v} is not >= {minimum}"
            raise argparse.ArgumentTypeError(msg)
        return v

    return parse


def _precision(text: str) -> float | dict[str, float]:
    from ..run.precision import parse_precision

    try:
        return parse_precision(text)
    except ToyEngineError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        msg = f"{text!r} is not a number"
        raise argparse.ArgumentTypeError(msg) from None
    if not 0 < v < 1e6:
        msg = f"{v} is not a number of seconds > 0"
        raise argparse.ArgumentTypeError(msg)
    return v


def _cmd_data(args: argparse.Namespace) -> int:
    from pathlib import Path

    import numpy as np

    from ..store.results import spec_of_store
    from ..study.recipe import asimov_data, toy_data
    from ..study.spec import load_spec

    src = Path(args.source)
    if src.is_dir():
        from ..store.integrity import require_complete
        from ..store.results import StoreInfo

        chk = require_complete(StoreInfo(src), args.allow_incomplete)
        if not chk.complete:
            print(f"INCOMPLETE STORE (read with --allow-incomplete): {chk.ranges()}")
    spec = spec_of_store(src) if src.is_dir() else load_spec(src)
    if args.asimov:
        data, weights = asimov_data(spec, args.hypothesis, args.variant)
    elif args.hypothesis is not None:
        msg = "--hypothesis applies to --asimov only (a toy is generated by its study)"
        raise UsageError(msg)
    else:
        data, weights = toy_data(spec, args.toy, args.variant), None
    save = getattr(data, "save_npz", None)
    if save is not None:
        save(args.out, weights=weights)
    elif weights is not None:
        np.savez(args.out, x=np.asarray(data, dtype=float),
                 weight=np.asarray(weights, dtype=float))
    else:
        np.savez(args.out, x=np.asarray(data, dtype=float))
    print(args.out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__


    p = _Parser(
        prog="toyengine",
        description="Distributed toy studies (pseudoexperiments) for likelihood fits: run a "
        "study file into a result store, then summarise it.",
        epilog="Results go to stdout, progress and errors to stderr. "
        "'toyengine COMMAND --help' describes each command.")
    p.add_argument("--version", action="version", version=f"toyengine {__version__}",
                   help="print the version and exit")
    p.add_argument("--debug", action="store_true",
                   help="show the full traceback of an error (for bug reports)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run (or resume, or extend) a study into a result store",
                       description="Run a study into a result store; rerun the same command "
                       "to resume, or with a larger --toys to extend.")
    r.add_argument("study", help="study file (YAML)")
    r.add_argument("--store", required=True,
                   help="result store: a path or an fsspec URL (s3://bucket/x.zarr, file://)")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--workers", type=_int_at_least(1),
                   help="local worker processes, >= 1 (default: one per core)")
    g.add_argument("--scheduler", help="address of an existing Dask scheduler "
                   "(tcp://HOST:PORT or tls://HOST:PORT)")
    r.add_argument("--toys", type=_int_at_least(1),
                   help="toys per variant (overrides the study file)")
    r.add_argument("--seed", type=_int_at_least(0), help="root seed (overrides the study file)")
    r.add_argument("--chunk-size", type=_int_at_least(1), help="toys per task (default: automatic)")
    r.add_argument("--tls-config", help="Dask security YAML for a TLS scheduler")
    r.add_argument("--connect-timeout", type=_positive_float, default=CONNECT_TIMEOUT,
                   help=f"seconds allowed to reach --scheduler (default {CONNECT_TIMEOUT:g})")
    r.add_argument("--yes", action="store_true",
                   help="run even if the study's size estimate asks for confirmation")
    r.add_argument("--summary", action="store_true", help="print the summary at the end")
    r.add_argument("--precision", type=_precision, metavar="TARGET",
                   help="run in rounds, extending the store, until the target is reached: "
                   "a number is the relative error of the toy p-value at test.observed "
                   "(significance studies; the weighted estimate's standard error with "
                   "importance sampling); NAME=ERROR[,NAME=ERROR] the statistical error "
                   "of every paired shift and of the total, in the parameter's unit "
                   "(model-variation studies, e.g. delta_m=0.001)")
    r.add_argument("--max-toys", type=_int_at_least(1), default=100000,
                   help="upper bound on toys per variant with --precision (default 100000)")
    r.add_argument("--quiet", action="store_true", help="no progress output")
    r.add_argument("--write", default="auto", choices=["auto", "workers", "client"],
                   help="who writes results: each worker its own chunks, or the client "
                        "(auto: workers when they can reach the store)")
    r.add_argument("--worker-timeout", type=_positive_float, default=300.0,
                   help="stop when no worker has been alive for this many seconds "
                        "(default 300)")
    _add_storage_option(r)
    add_plugin_option(r)
    r.set_defaults(func=_cmd_run)

    sh = sub.add_parser("show", help="the validated study, its fits and (asked for) a cost "
                        "estimate",
                        description="Print the validated study with defaults filled in, "
                        "each model's parameters (labels, units, limits), the number of fits "
                        "and, with --time-toys N, a cost estimate from N toys timed in this "
                        "process.")
    sh.add_argument("study", help="study file (YAML)")
    sh.add_argument("--toys", type=_int_at_least(1),
                    help="toys per variant (overrides the study file)")
    sh.add_argument("--seed", type=_int_at_least(0), help="root seed (overrides the study file)")
    sh.add_argument("--time-toys", type=_int_at_least(0), default=0, metavar="N",
                    help="time N toys in this process for a cost estimate (default 0: "
                         "none; the models are built and the toys run, which can take "
                         "seconds per toy)")
    sh.add_argument("--workers", type=_int_at_least(1),
                    help="workers the estimate assumes (default: one per core)")
    add_plugin_option(sh)
    sh.set_defaults(func=_cmd_show)

    s = sub.add_parser("status", help="chunks and toys done, failed fits, damaged chunks; "
                       "--watch: live",
                       description="How far a store is: chunks and toys done, failed fits, "
                       "done chunks whose data are missing. Exit code 0 when complete, 1 "
                       "otherwise. With --watch, follow the live status a running study "
                       "writes into the store (_toyengine/status.json): rate, ETA, failed "
                       "fits and the running physics.")
    s.add_argument("store", help="result store: a path or an fsspec URL")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--watch", action="store_true",
                   help="follow the running study until it finishes")
    s.add_argument("--interval", type=_positive_float, default=2.0,
                   help="seconds between looks with --watch (default 2)")
    s.add_argument("--max-updates", type=_int_at_least(1),
                   help="with --watch: stop after this many looks (exit code 1)")
    _add_storage_option(s)
    s.set_defaults(func=_cmd_status)

    v = sub.add_parser("verify", help="read every done chunk; mark missing or corrupt ones "
                                      "not done",
                       description="Read and decode every chunk marked done (checksums); "
                       "report missing or corrupt ones by toy range and mark them not done, "
                       "so that the next `toyengine run` recomputes them. Exit code 1 if any.")
    v.add_argument("store", help="result store: a path or an fsspec URL")
    v.add_argument("--repair", action="store_true",
                   help="first rebuild damaged or lost metadata (zarr.json, state.json, "
                   "control files) from the study record, the chunks and their markers")
    _add_storage_option(v)
    v.set_defaults(func=_cmd_verify)

    m = sub.add_parser("summary", help="significance, pulls and systematic tables",
                       description="The summary of a store, headline table first (the "
                       "systematic table of a systematic study, the p-value and Z of a "
                       "significance study), fit bookkeeping last.")
    m.add_argument("store", help="result store: a path or an fsspec URL")
    m.add_argument("--format", default="text",
                   choices=["text", "markdown", "latex", "csv", "json", "html"],
                   help="output format (default: text); latex: booktabs tables; csv: one "
                   "table (choose it with --section) or, with -o DIRECTORY, one file per table")
    m.add_argument("--section", action="append", metavar="NAME",
                   help="only this section (significance, gof, systematics, variations, "
                   "pulls, ensembles, bookkeeping) or table (e.g. significance-pvalues); "
                   "repeatable or comma-separated; an unknown name lists the choices")
    m.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE instead of stdout (csv with several tables: a "
                   "directory, one FILE/<table>.csv each)")
    m.add_argument("--max-failed", type=_fraction, default=0.05, metavar="FRACTION",
                   help="failed-fit fraction above which the first line (JSON: warning) "
                   "says the numbers rest on the converged fits only (default 0.05)")
    _add_allow_incomplete(m)
    _add_storage_option(m)
    m.set_defaults(func=_cmd_summary)

    d = sub.add_parser("data", help="write the exact data set of one toy (rebuilt from the "
                       "seeds), or the model's Asimov data set, as .npz",
                       description="Write the data set of one toy as .npz: rebuilt from the "
                       "study's seeds, bit-identical to what the run fitted (toy TOY of "
                       "variant VARIANT), or the generating model's Asimov data set (expected "
                       "events as weighted points). Use it to refit one toy by hand or to "
                       "plot it; `toyengine data STORE --toy 17 --out toy17.npz`.")
    d.add_argument("source", help="result store (or study file)")
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument("--toy", type=_int_at_least(0), help="toy index")
    which.add_argument("--asimov", action="store_true",
                       help="the Asimov data set (expected events as weighted points, "
                       "array 'weight' / '<run>/weight') of the generating model")
    d.add_argument("--hypothesis", default=None,
                   help="with --asimov: the model of the study to take (default: the one "
                   "that generates the toys)")
    d.add_argument("--variant", type=_int_at_least(0), default=0, help="variant index (default 0)")
    d.add_argument("--out", required=True, help="output .npz (1-D models: array 'x'; "
                   "Dalitz models: the <run>/m2_kpi, <run>/m2_etacpi arrays their loader reads)")
    add_plugin_option(d)
    _add_allow_incomplete(d)
    d.set_defaults(func=_cmd_data)

    rp = sub.add_parser("report", help="one self-contained HTML report of a store",
                        description="Write one HTML file with the summary tables, the plots "
                        "(embedded), the study file and the provenance (digest, versions, "
                        "seeds, toys, failed fits, timings).")
    rp.add_argument("store", help="result store: a path or an fsspec URL")
    rp.add_argument("-o", "--output", metavar="FILE",
                    help="the HTML file (default: STORE.html next to a local store, "
                    "NAME.html here for a URL)")
    _add_allow_incomplete(rp)
    _add_storage_option(rp)
    rp.set_defaults(func=_cmd_report)

    pl = sub.add_parser("plot", help="write PNG plots of a store",
                        description="Write the plots of a store as PNG files.")
    pl.add_argument("store", help="result store: a path or an fsspec URL")
    pl.add_argument("--outdir", help="directory for the PNGs (default: STORE_plots)")
    _add_allow_incomplete(pl)
    _add_storage_option(pl)
    pl.set_defaults(func=_cmd_plot)

    sc = sub.add_parser("schema", help="print the JSON Schema of study files (for editors)",
                        description="Print the JSON Schema of study files, for an editor's "
                        "completion and checks (`toyengine schema > toyengine.schema.json`, then "
                        "`# yaml-language-server: $schema=toyengine.schema.json` as a study "
                        "file's first line), or the builder option tables of "
                        "docs/study-format.md with --markdown.")
    sc.add_argument("--markdown", action="store_true",
                    help="print the builder option tables of docs/study-format.md instead")
    sc.set_defaults(func=_cmd_schema)

    from .cluster import add_commands

    add_commands(sub)
    return p


def _add_allow_incomplete(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-incomplete", action="store_true",
                   help="read a store with chunks missing, damaged or not yet done (e.g. "
                   "while its study runs); the first line of the output says which toys "
                   "are missing (default: refuse such a store)")


def _add_storage_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="fsspec option of the store URL (repeatable), e.g. "
                        "endpoint_url=http://127.0.0.1:9000; S3 credentials come from the "
                        "AWS_* environment")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; every error is one line on stderr and an exit code: 2 for what the user
    must fix (command line, study file, store path or store of another study, summary
    options, cluster settings or scheduler address), 1 for a failed run (I/O errors such as
    a full disk, an unreachable object store, unexpected errors), 3 for a run that left chunks
    not done, 4 for a complete run in which every fit of a hypothesis failed
    (:data:`~toyengine.cli.finish.EXIT_ALL_FITS_FAILED`), 5 for a run that lost the
    store's lease to another run (and stopped writing), 130 after Ctrl-C/SIGTERM.
    ``--debug`` shows the traceback instead."""
    args = build_parser().parse_args(argv)
    if getattr(args, "plugin", None):
        from ..models import allow_plugins

        allow_plugins(args.plugin)
    if args.debug:
        return int(args.func(args))
    signal.signal(signal.SIGTERM, _raise_interrupt)
    old_hook, threading.excepthook = threading.excepthook, _quiet_store_thread_errors
    try:
        return int(args.func(args))
    except SpecError as exc:
        return _fail(f"invalid study file: {exc}", 2)
    except (UsageError, StoreError, ClusterError, SummaryError) as exc:  # fix the command,
        # store or setup (SummaryError: a summary option such as --section or --format)
        return _fail(str(exc), 2)
    except Interrupted as exc:
        return _fail(str(exc), 130)
    except LeaseLost as exc:
        return _fail(str(exc), 5)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except ToyEngineError as exc:
        return _fail(str(exc), 1)
    except BrokenPipeError:  # `toyengine schema | head`: the reader left; not an error of ours
        return _reader_left()
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _fail(f"{exc.strerror or exc}{where}", 1)
    except MemoryError:
        return _fail("out of memory", 1)
    except Exception as exc:  # noqa: BLE001 - one line, the traceback is behind --debug
        from ..store.location import store_unreachable_error

        gone = store_unreachable_error(getattr(args, "store", None) or "(the store)", exc)
        if gone is not None:  # an object store whose endpoint is down: not a bug, exit 1
            return _fail(str(gone), 1)
        text = " ".join(str(exc).split())[:300]
        return _fail(f"unexpected error: {type(exc).__name__}: {text} (run with --debug for "
                     "the traceback and please report it)", 1)
    finally:
        threading.excepthook = old_hook


def _quiet_store_thread_errors(hook: threading.ExceptHookArgs) -> None:
    """A background thread (the store's lease renewal) that fails because the store cannot
    be written or reached ends without a traceback: the command's own next access to the
    store reports it in one line. Any other failure is printed as usual."""
    from ..store.location import WRITE_ERRNOS, store_unreachable_error

    exc = hook.exc_value
    if exc is not None and (store_unreachable_error("", exc) is not None or (
            isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS)):
        return
    threading.__excepthook__(hook)


def _fraction(text: str) -> float:
    """A fraction in [0, 1] (argparse type)."""
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a fraction in [0, 1]")
    return x


def _reader_left() -> int:
    """The pipe that stdout writes to was closed by its reader: no message (the reader
    asked for no more), stdout pointed at /dev/null so that the interpreter's final flush
    does not fail again, and the exit status of a process ended by SIGPIPE (128 + 13), as a
    C tool such as ``cat`` would give."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _fail(message: str, code: int) -> int:
    print(f"toyengine: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
