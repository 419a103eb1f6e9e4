# %% [markdown]
# # A toy study from Python: pulls, a systematic table and one toy's data
#
# Cells (`# %%`) for VS Code, Spyder or Jupyter (jupytext); or run the whole file:
# `.venv/bin/python examples/pulls_walkthrough.py` from the repository root. The test suite
# runs it (`tests/test_examples.py`) so it never goes stale. The studies are the T_cc⁺ ones of
# LHCb, Nature Physics 18 (2022) 751, with few toys so that the walkthrough takes a minute.
#
# The `__main__` guard matters when run as a script: the local Dask cluster starts worker
# processes that import this file.

# %%
import os
from pathlib import Path

import xarray as xr

import toyengine
from toyengine.study.recipe import toy_data
from toyengine.summary import plot_pulls, summary_tables

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("TOYENGINE_EXAMPLE_OUT", "out/examples"))


def main() -> None:
    # %% Run a small pulls study (20 toys of the BW signal model) on 2 local workers
    spec = toyengine.load_spec(ROOT / "studies/tcc/pulls.yaml").with_overrides(toys=20)
    store = OUT / "pulls.zarr"
    report = toyengine.run_study(spec, store, workers=2)
    print(f"{report.toys_total} toys, {report.failed_fits} failed fits")

    # %% Open the store with plain xarray: one row per toy, hypothesis and parameter
    ds = xr.open_zarr(store, consolidated=False)
    print(ds["value"].sel(param="delta_m", hypothesis="nominal").isel(variant=0).values[:5])
    print(dict(zip(ds["param"].values, ds["param_unit"].values, strict=True)))

    # %% The pulls table (label [unit], flags pull offsets > 3σ) and the pull plot
    ds = toyengine.open_results(store)       # the same Dataset, with the ds.toys accessor
    pulls = ds.toys.pulls()
    print(pulls)                             # a table (in Jupyter: an HTML table)
    df = summary_tables(ds, ["pulls"])[0].to_dataframe()
    print(df[["param", "pull_mean", "pull_mean_err", "pull_width"]])
    fig = plot_pulls(ds)
    fig.savefig(OUT / "pulls.png")

    # %% A model-variation study (alternative resolution, background and J^P models, 3 toys
    #    each) and its systematic table: the headline of such a study
    mv = toyengine.load_spec(ROOT / "studies/tcc/model_variation.yaml").with_overrides(toys=3)
    mv_store = OUT / "model_variation.zarr"
    toyengine.run_study(mv, mv_store, workers=2)
    syst = summary_tables(toyengine.open_results(mv_store), ["systematics"])
    print(syst[0])

    # %% One toy's data set, regenerated from its seed: the events toy 3 was fitted to
    events = toy_data(spec, variant=0, toy=3)
    print(f"toy 3: {len(events)} candidates, stored n_events = "
          f"{int(ds['n_events'].isel(variant=0, toy=3))}")


if __name__ == "__main__":
    main()
