"""Minuit2's C++ diagnostics (``E VariableMetricBuilder Initial matrix not pos.def.``) do not
leak from toyengine's fits: Minuit2 writes them to stdout, where they would corrupt a
command's JSON or CSV output (the fit status says what happened)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A maximum at the start: MIGRAD's first metric is not positive definite, which Minuit2
# reports on stderr at its default print level (the first test checks that it does, so that
# the second one can fail).
_SCRIPT = textwrap.dedent("""
    import sys
    from toyengine.core.fit import fit
    from toyengine.core.params import Parameter, ParameterSet

    import numpy as np
    a = np.random.default_rng(5).normal(size=3)  # (-0.80, -1.32, -0.25)

    def f(x, y):
        return a[0] * x**2 - abs(a[1]) * y**2 + 0.1 * (x**4 + y**4) + a[2] * x * y

    if sys.argv[1] == "loud":
        from iminuit import Minuit
        m = Minuit(f, 0.0, 0.0)
        m.errordef = 1
        m.migrad()
    else:
        ps = ParameterSet((Parameter("x", 0.0, (-5.0, 5.0)), Parameter("y", 0.0, (-5.0, 5.0))))
        r = fit(lambda v: float(f(v[0], v[1])), ps, hesse=True)
        print(round(float(f(*r.values)), 3))
""")


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True,
                          text=True, timeout=120, check=True)


def test_minuit2_would_print_on_this_saddle() -> None:
    assert "VariableMetricBuilder" in _run("loud").stdout  # Minuit2 writes to stdout


def test_toyengine_fit_prints_nothing_of_minuit2() -> None:
    out = _run("quiet")
    assert out.stderr == ""
    assert "VariableMetricBuilder" not in out.stdout
    assert float(out.stdout) < -3.0  # a minimum (f ≈ -3.2 or lower), not the start f = 0
