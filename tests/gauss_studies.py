"""Significance study files of a Gaussian mean, for the tests.

``t = 2 (nll_H0 − nll_H1)`` for the mean of 100 unit-width Gaussian values (H0: mean 0;
H1: mean free; the width fixed at 1) is ``t = 100 x̄²``, exactly χ²(1) under H0: no
asymptotics, so a toy or importance-sampled p-value can be checked against
``scipy.stats.chi2.sf(t_obs, 1)``.
"""

from __future__ import annotations


def gauss_significance(*, name: str, seed: int, toys: int | str, observed: float | str,
                       injected_mu: float | str | None = None,
                       importance: str | None = None) -> str:
    """The study file: models ``H0`` and ``H1``, with ``injected_mu`` also ``up`` and
    ``down`` (the mean fixed at ``±injected_mu``), generated under ``H0``, the test at
    ``observed``, and ``importance`` (its flow-style value) when given. A string for
    ``toys``, ``observed`` or ``injected_mu`` is written as it is (a placeholder a test
    replaces)."""
    text = f"""
name: {name}
kind: significance
seed: {seed}
toys: {toys}
models:
  H0:
    builder: gauss
    options: {{events: 100}}
    parameters: {{mu: {{value: 0.0, fixed: true}}, sigma: {{value: 1.0, fixed: true}}}}
  H1:
    builder: gauss
    options: {{events: 100}}
    parameters: {{sigma: {{value: 1.0, fixed: true}}}}
"""
    if injected_mu is not None:
        down = f"-{injected_mu}".replace("--", "")
        text += f"""  up:
    builder: gauss
    options: {{events: 100, mu: {injected_mu}}}
    parameters: {{sigma: {{value: 1.0, fixed: true}}}}
  down:
    builder: gauss
    options: {{events: 100, mu: {down}}}
    parameters: {{sigma: {{value: 1.0, fixed: true}}}}
"""
    text += f"""generate: H0
hypotheses: [H0, H1]
test: {{h0: H0, h1: H1, ndof: 1, observed: {observed}}}
"""
    if importance is not None:
        text += f"importance: {importance}\n"
    return text
