"""Statistics and summaries of toy-study results (xarray Dataset in, numbers and tables out).

Importing this package registers the ``Dataset.toys`` accessor.

>>> from toyengine.summary import chi2_pvalue, p_to_z
>>> p = chi2_pvalue(41.4, 8)             # Zc(4100): Δ(−2 ln L) = 41.4, ndof = 8
>>> round(p_to_z(p, "two"), 2), round(p_to_z(p, "one"), 2)
(4.78, 4.64)
>>> round(p_to_z(chi2_pvalue(18.6, 1)), 3)   # J^P 0+ rejection = √18.6
4.313

Modules, in three parts. Extraction: :mod:`.extract` (arrays out of the Dataset),
:mod:`.teststat` (the test statistic t per toy). Statistics on arrays: :mod:`.pvalues` (p ↔ Z,
χ² and toy p-values), :mod:`.ndof` (the fitted χ²-ndof of the toy t), :mod:`.lee`
(look-elsewhere effect), :mod:`.importance` (importance-sampled p-values), :mod:`.syststats`
(shifts, group rules and bootstrap of systematic tables). Summaries built from those:
:mod:`.significance` (significance / J^P), :mod:`.spread` (t over the variants of a
fixed-data study), :mod:`.pulls` (bias, pulls, coverage), :mod:`.systematics` (systematic
tables), :mod:`.report` (:func:`render_summary`, :func:`summary_tables`). Rendering:
:mod:`.tables` (text, Markdown, LaTeX, HTML, CSV, JSON), :mod:`.labels` (parameter labels and
units), :mod:`.plots` (PNG, needs matplotlib). Also :mod:`.accessor` (``ds.toys``) and
:mod:`.testing` (synthetic Datasets).
"""

from __future__ import annotations

from . import accessor as _accessor  # noqa: F401  (registers Dataset.toys)
from ._common import MissingDependencyError, SummaryError, clopper_pearson
from .ndof import Chi2Fit, fit_chi2_ndof
from .plots import plot_pulls, plot_systematics, plot_t_distribution, write_plots
from .pulls import PullRow, PullTable, pull_summary
from .pvalues import EmpiricalP, PValue, TailCheck, chi2_pvalue, empirical_pvalue, p_to_z, z_to_p
from .report import SECTIONS, failed_summary, render_summary, summary_tables
from .shift_definitions import ShiftDefinitions, ShiftPair, shift_definitions
from .significance import SignificanceSummary, significance_summary
from .spread import SpreadSummary, variant_significance
from .systematics import SystRow, SystTable, VariantShift, systematic_table
from .tables import Table
from .teststat import test_statistic

__all__ = [
    "SECTIONS",
    "Chi2Fit",
    "EmpiricalP",
    "MissingDependencyError",
    "PValue",
    "PullRow",
    "PullTable",
    "ShiftDefinitions",
    "ShiftPair",
    "SignificanceSummary",
    "SpreadSummary",
    "SummaryError",
    "SystRow",
    "SystTable",
    "Table",
    "TailCheck",
    "VariantShift",
    "chi2_pvalue",
    "clopper_pearson",
    "empirical_pvalue",
    "failed_summary",
    "fit_chi2_ndof",
    "p_to_z",
    "plot_pulls",
    "plot_systematics",
    "plot_t_distribution",
    "pull_summary",
    "render_summary",
    "shift_definitions",
    "significance_summary",
    "summary_tables",
    "systematic_table",
    "test_statistic",
    "variant_significance",
    "write_plots",
    "z_to_p",
]


def __dir__() -> list[str]:
    return sorted(__all__)
