"""The shape of the code that keeps it readable: no module over 800 lines and no function
over 150 (compiled numba kernels and the declarative argparse parser excepted), and no
probing of likelihood objects for optional members outside the likelihood contract
(``toyengine/core/likelihood.py``). ``python benchmarks/import_picture.py`` prints the same
numbers and the imports between the layers."""

from __future__ import annotations

import ast
from pathlib import Path

import toyengine

ROOT = Path(toyengine.__file__).parent
#: functions allowed to be long: a compiled kernel (one loop over the events, kept whole so
#: numba fuses it) and the declarative command-line parser
LONG_ALLOWED = {"core/model1d_kernels.py:nll_terms", "cli/main.py:build_parser"}
#: the members of the likelihood contract (``Likelihood``)
CONTRACT = {"grad", "hessian", "expected_hessian", "restricted", "closed_form_minimum",
            "errordef", "ndata"}


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_no_module_over_800_lines():
    big = {rel: text.count("\n") for rel, text in _sources() if text.count("\n") > 800}
    assert big == {}


def test_no_function_over_150_lines():
    long = {}
    for rel, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 150 and f"{rel}:{node.name}" not in LONG_ALLOWED:
                    long[f"{rel}:{node.name}"] = n
    assert long == {}


def test_likelihood_members_are_probed_only_by_the_contract():
    """``getattr(x, "grad", None)`` and the like only in core/likelihood.py: everywhere else
    a likelihood is asked through its ``has_*`` flags and methods."""
    probes = []
    for rel, text in _sources():
        if rel == "core/likelihood.py":
            continue
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in {"getattr", "hasattr"} and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in CONTRACT):
                probes.append(f"{rel}:{node.lineno} {node.func.id}(…, {node.args[1].value!r})")
    assert probes == []
