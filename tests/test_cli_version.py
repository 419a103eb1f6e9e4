"""``toyengine --version`` and ``python -m toyengine`` (the package's command line)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import toyengine
from toyengine.cli.main import main


def test_version_and_python_m(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"toyengine {toyengine.__version__}"
    r = subprocess.run([sys.executable, "-m", "toyengine", "--version"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"toyengine {toyengine.__version__}"
