"""Statistics and summaries of toy-study results (xarray Dataset in, numbers and tables out).

Importing this package registers the ``Dataset.toys`` accessor.

>>> from toyengine.summary import chi2_pvalue, p_to_z
>>> p = chi2_pvalue(41.4, 8)             # Zc(4100): Δ(−2 ln L) = 41.4, ndof = 8
>>> round(p_to_z(p, "two"), 2), round(p_to_z(p, "one"), 2)
(4.78, 4.64)
>>> round(p_to_z(chi2_pvalue(18.6, 1)), 3)   # J^P 0+ rejection = √18.6
4.313

Modules: :mod:`.significance` (p ↔ Z, χ² and toy p-values, χ²-ndof fit, test statistic,
significance / J^P summaries), :mod:`.pulls` (bias, pulls, coverage), :mod:`.systematics`
(systematic tables), :mod:`.report` (:func:`render_summary`, :func:`summary_tables`),
:mod:`.labels` (parameter labels and units), :mod:`.plots` (PNG, needs
matplotlib), :mod:`.accessor` (``ds.toys``), :mod:`.testing` (synthetic Datasets).
"""

from __future__ import annotations

from . import accessor as _accessor  # noqa: F401  (registers Dataset.toys)
from ._common import MissingDependencyError, SummaryError, clopper_pearson
from .plots import plot_pulls, plot_systematics, plot_t_distribution, write_plots
from .pulls import PullRow, PullTable, pull_summary
from .report import SECTIONS, failed_summary, render_summary, summary_tables
from .significance import (
    Chi2Fit,
    EmpiricalP,
    PValue,
    SignificanceSummary,
    SpreadSummary,
    TailCheck,
    chi2_pvalue,
    empirical_pvalue,
    fit_chi2_ndof,
    p_to_z,
    significance_summary,
    test_statistic,
    variant_significance,
    z_to_p,
)
from .systematics import SystRow, SystTable, VariantShift, systematic_table
from .tables import Table

__all__ = [
    "SECTIONS",
    "Chi2Fit",
    "EmpiricalP",
    "MissingDependencyError",
    "PValue",
    "PullRow",
    "PullTable",
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
