"""What every command that runs a study prints at its end (``run`` and ``submit``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..run.runner import RunReport

__all__ = ["EXIT_ALL_FITS_FAILED", "finish_run"]

#: exit code of a complete run in which every fit of a hypothesis failed (in every variant,
#: or in one variant): the store holds no result for it
EXIT_ALL_FITS_FAILED = 4


def finish_run(report: RunReport, store: str, summary: bool,
               storage_options: dict | None = None) -> int:
    """Print what a run did (and the summary if asked); the exit code: 0 when every toy is
    in the store, 3 when chunks are missing (rerun to resume), :data:`EXIT_ALL_FITS_FAILED`
    when the store is complete but every fit of a hypothesis failed (one line on stderr
    names it)."""
    r = report
    print(f"store: {r.store}")
    print(f"toys: {r.toys_total} in {r.chunks_total} chunks of <= {r.chunk_size} "
          f"(ran {r.chunks_run}, already done {r.chunks_skipped}) in "
          f"{r.seconds:.1f} s; failed fits this run: {r.failed_fits}")
    if r.write:
        print(f"results written by: {r.write}")
    for note in r.notes:
        print(note)
    for line in r.repaired[:20]:
        print(f"recomputed (was missing or damaged): {line}")
    if r.stopped:
        print(f"STOPPED: {r.stopped}", file=sys.stderr)
    for err in r.errors[:10]:
        if err != r.stopped:
            print(f"error: {err}", file=sys.stderr)
    if not r.complete:
        print(f"NOT COMPLETE: {len(r.missing_chunks)} chunk(s) not done; run the same "
              "command again to resume", file=sys.stderr)
        return 3
    from ..store import open_results

    ds = open_results(store, storage_options)
    if summary:
        from ..summary import render_summary

        print(render_summary(ds, "text"))
    from ..summary.report import failed_line

    line = failed_line(ds)
    if line:  # why fits failed, in one line: the most frequent cause
        print(line)
    empty = _all_failed(ds)
    if empty:
        print(f"toyengine: {empty}", file=sys.stderr)
        return EXIT_ALL_FITS_FAILED
    return 0


def _all_failed(ds: object) -> str:
    """One line naming the hypotheses (and variants) of which every fit failed; ``""``."""
    import numpy as np

    from ..summary.report import failed_summary

    fs = failed_summary(ds)
    done = np.asarray(fs["n_done"].transpose("variant", "hypothesis").values)
    failed = np.asarray(fs["n_failed"].transpose("variant", "hypothesis").values)
    names = [str(n) for n in ds["variant_name"].values]  # type: ignore[index]
    out = []
    for j, h in enumerate(str(x) for x in fs["hypothesis"].values):
        bad = [v for v in range(len(names)) if done[v, j] and failed[v, j] == done[v, j]]
        if not bad:
            continue
        where = "" if len(bad) == len(names) else (
            " in variant(s) " + ", ".join(names[v] for v in bad[:3])
            + (f" and {len(bad) - 3} more" if len(bad) > 3 else ""))
        out.append(f"every fit of hypothesis {h} failed{where} "
                   f"({int(failed[bad, j].sum())}/{int(done[bad, j].sum())})")
    return "; ".join(out)
