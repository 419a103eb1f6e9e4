"""Never a headline from nothing; failures carry their cause: a summary of toys whose fits
failed says so in its first line and in JSON, and ``run`` exits non-zero when every fit of a
hypothesis failed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from toyengine.cli.finish import EXIT_ALL_FITS_FAILED
from toyengine.summary import render_summary
from toyengine.summary.testing import make_results_dataset


def _significance_ds(valid_h0: np.ndarray, valid_h1: np.ndarray, observed: float = 9.0):
    n = valid_h0.size
    rng = np.random.default_rng(7)
    t = rng.chisquare(1.0, n)
    nll = np.stack([t / 2.0, np.zeros(n)], axis=-1)[None]
    valid = np.stack([valid_h0, valid_h1], axis=-1)[None]
    return make_results_dataset(
        params=["n_sig"], hypotheses=["H0", "H1"], value=np.zeros((1, n, 2, 1)), nll=nll,
        valid=valid, kind="significance", h0="H0", h1="H1", ndof_wilks=1,
        observed_t=observed)


def test_summary_of_no_usable_toy_says_so_first():
    n = 200
    ds = _significance_ds(np.zeros(n, bool), np.ones(n, bool))
    text = render_summary(ds)
    first = text.splitlines()[0]
    assert first.startswith("WARNING: every fit of H0 failed (200/200)"), first
    assert "0 usable toys" in first and first.endswith("no result below")
    # no Z from nothing: the headline table names the absence instead of a number
    assert "Z χ²(Wilks ndof)" not in text
    assert "none: 0 usable toys of 200 done" in text
    data = json.loads(render_summary(ds, "json"))
    assert data["warning"] == first
    md = render_summary(ds, "markdown")
    assert md.splitlines()[0] == f"**{first}**"


@pytest.mark.parametrize(("n_failed", "warns"), [(10, False), (11, True)])
def test_failed_fraction_threshold(n_failed, warns):
    """200 toys x 2 fits: 10 failed H1 fits are 5 % of the toys (not above 5 %: no
    warning), 11 are 5.5 % (warning)."""
    n = 200
    v1 = np.ones(n, bool)
    v1[:n_failed] = False
    ds = _significance_ds(np.ones(n, bool), v1)
    first = render_summary(ds).splitlines()[0]
    assert first.startswith("WARNING") == warns, first
    if warns:
        assert "5.5 % of the toys unusable" in first
        assert first.endswith("use only the fits that converged")
    # configurable
    assert render_summary(ds, max_failed=0.2).splitlines()[0].startswith("toyengine summary")
    warning = json.loads(render_summary(ds, "json"))["warning"]
    assert warning == (first if warns else None)


def test_clean_summary_has_no_warning():
    n = 100
    ds = _significance_ds(np.ones(n, bool), np.ones(n, bool))
    assert render_summary(ds).splitlines()[0].startswith("toyengine summary")
    assert json.loads(render_summary(ds, "json"))["warning"] is None


def test_exit_code_is_distinct():
    assert EXIT_ALL_FITS_FAILED not in (0, 1, 2, 3, 130)
