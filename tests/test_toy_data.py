"""Toy data rebuilt from the seeds, and frequentist toys that sample the global observables."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toyengine.study.plan import Chunk, Plan
from toyengine.study.recipe import run_chunk, toy_data, toy_nll
from toyengine.study.spec import StudySpec

ROOT = Path(__file__).resolve().parents[1]

CONSTRAINED = """
name: constrained-bkg
kind: pulls
seed: 99
toys: {toys}
models:
  B:
    builder: tcc
    options: {{signal: none, background_order: 1}}
    parameters:
      n_bkg: {{value: 700, constraint: {{mean: 700, sigma: 30}}}}
generate: B
hypotheses: [B]
fit: {{starts: 1{extra}}}
"""


def _pulls(extra: str, toys: int) -> np.ndarray:
    spec = StudySpec.from_text(CONSTRAINED.format(toys=toys, extra=extra))
    plan = Plan.of(spec)
    a = run_chunk(plan, Chunk(0, 0, 0, toys)).arrays
    i = plan.params.index("n_bkg")
    assert np.all(a["status"] == 1)
    return (a["value"][:, 0, i] - 700.0) / a["error"][:, 0, i], a["global_obs"][:, i]


def test_sampled_global_observables_give_unit_pulls_fixed_ones_do_not():
    """n_bkg = 700 with a 30-event constraint: Poisson (26.5) and constraint combine to a
    fitted error of about 19.9. Fixing the constraint mean at the truth in every toy
    shrinks the spread of the fitted n_bkg to about 0.67 of that error; drawing it per toy
    restores 1. 200 toys: the standard error of a Gaussian width is 1/√400 = 0.05, the
    tolerance is 3 of them."""
    pulls, gobs = _pulls("", 200)
    assert abs(np.std(pulls, ddof=1) - 1.0) < 0.15
    # the global observables are N(700, 30) and stored
    assert abs(np.mean(gobs) - 700.0) < 3 * 30 / math.sqrt(200)
    assert abs(np.std(gobs, ddof=1) / 30.0 - 1.0) < 0.15
    fixed, gfix = _pulls(", global_observables: fixed", 200)
    assert np.all(gfix == 700.0)
    assert np.std(fixed, ddof=1) < 0.85


def test_toy_data_reproduces_the_stored_fit_exactly(tmp_path):
    spec = StudySpec.from_text(CONSTRAINED.format(toys=4, extra=""))
    params = Plan.of(spec).params
    a = run_chunk(Plan.of(spec), Chunk(0, 0, 0, 4)).arrays
    for toy in (1, 3):
        data = toy_data(spec, toy)
        assert len(data) == a["n_events"][toy]
        vals = a["value"][toy, 0, :len(params)]
        assert toy_nll(spec, toy, "B", vals) == a["nll"][toy, 0]  # bit-identical
    # the CLI rebuilds it from a store (its study text and seed) as an .npz with the array
    # name the 1-D loader reads
    from toyengine.store import create_store, write_chunk

    spec2 = spec.with_overrides(seed=123)  # a --seed override is recorded in the store
    plan2 = Plan.of(spec2)
    store = tmp_path / "s.zarr"
    create_store(store, plan2, 4)
    res = run_chunk(plan2, Chunk(0, 0, 0, 4))
    write_chunk(store, res, spec2.toys, 4)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = tmp_path / "toy3.npz"
    r = subprocess.run([sys.executable, "-m", "toyengine.cli", "data", str(store), "--toy", "3",
                        "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    from toyengine.study.spec import build_model

    model = build_model(spec2, spec2.variants[0], "B")
    with np.load(out) as f:
        x = f["x"]
    np.testing.assert_array_equal(x, toy_data(spec2, 3))
    assert not np.array_equal(x, toy_data(spec, 3))
    # −ln L of the written data at the stored fitted values, global observable included
    from toyengine.study.recipe import _with_global_observables

    nll = _with_global_observables(model.nll(x), model.parameters,
                                   res.arrays["global_obs"][3], {n: i for i, n in
                                                                 enumerate(params)})
    assert nll(res.arrays["value"][3, 0]) == res.arrays["nll"][3, 0]


def test_toy_data_bad_variant_is_one_clear_error():
    from toyengine.errors import ModelError

    spec = StudySpec.from_text(CONSTRAINED.format(toys=4, extra=""))
    with pytest.raises(ModelError, match="variant 3 is out of range"):
        toy_data(spec, 0, variant=3)
