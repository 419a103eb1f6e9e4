"""The Z_c(4100)- significance (or J^P rejection) table as a paper prints it.

Fits the study's reference data set (``studies/zc4100/reference_data.npz`` next to the
study file, or ``--data``) with both hypotheses, exactly as the engine fits a toy (same
multi-start and profile search, nominal global observables), and prints
:func:`toyengine.summary.paper.significance_paper_table` of a store of the study's toys at
that observed t (and, with ``--paper``, at the study's ``test.observed``).

Usage::

    python benchmarks/zc_paper_table.py studies/zc4100/significance.yaml STORE.zarr \\
        [--data FILE] [--paper]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import xarray as xr

from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk
from toyengine.study.spec import load_spec
from toyengine.summary.paper import significance_paper_table


def reference_t(study: str, data: str) -> tuple[float, float]:
    """``(t, seconds)``: t = 2 (nll_h0 − nll_h1) of the study's search on ``data``."""
    spec = load_spec(study)
    spec = dataclasses.replace(spec, data=str(Path(data).resolve()), toys=1)
    plan = Plan.of(spec)
    t0 = time.process_time()
    res = run_chunk(plan, Chunk(0, 0, 0, 1))
    h0 = spec.hypotheses.index(spec.test["h0"])
    h1 = spec.hypotheses.index(spec.test["h1"])
    nll = res.arrays["nll"][0]
    return 2.0 * float(nll[h0] - nll[h1]), time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("study")
    ap.add_argument("store", nargs="?")
    ap.add_argument("--data", default=None)
    ap.add_argument("--paper", action="store_true", help="also the table at test.observed")
    a = ap.parse_args()
    data = a.data or str(Path(a.study).parent / "reference_data.npz")
    t, cpu = reference_t(a.study, data)
    print(f"t on {data}: {t:.4f} ({cpu:.1f} s CPU)")
    if a.store:
        ds = xr.open_zarr(a.store, consolidated=False)
        print(significance_paper_table(ds, t_reference=t).to_text())
        if a.paper:
            print(significance_paper_table(ds).to_text())


if __name__ == "__main__":
    main()
