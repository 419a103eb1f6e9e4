"""What every command that runs a study prints at its end (``run`` and ``submit``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..run.runner import RunReport

__all__ = ["finish_run"]


def finish_run(report: RunReport, store: str, summary: bool,
               storage_options: dict | None = None) -> int:
    """Print what a run did (and the summary if asked); the exit code: 0 only when every
    toy is in the store, 3 when chunks are missing (rerun to resume)."""
    r = report
    print(f"store: {r.store}")
    print(f"toys: {r.toys_total} in {r.chunks_total} chunks of <= {r.chunk_size} "
          f"(ran {r.chunks_run}, already done {r.chunks_skipped}) in "
          f"{r.seconds:.1f} s; failed fits this run: {r.failed_fits}")
    if r.write:
        print(f"results written by: {r.write}")
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
    if summary:
        from ..store import open_results
        from ..summary import render_summary

        print(render_summary(open_results(store, storage_options), "text"))
    return 0
