"""The README's Python snippet, saved as a script, runs (with a small toy count)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_snippet_runs_as_a_script(tmp_path: Path):
    (snippet,) = python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert 'if __name__ == "__main__":' in snippet
    small = snippet.replace("toys=100", "toys=4").replace(
        '"out/pulls100.zarr"', repr(str(tmp_path / "pulls.zarr")))
    assert small.count(str(tmp_path)) == 2 and "toys=4" in small  # the edits took
    script = tmp_path / "readme_snippet.py"
    script.write_text(small, encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "bootstrapping phase" not in r.stderr
    # the pulls table prints as a table (not a dataclass repr), then the DataFrame
    assert "Pulls, bias and coverage" in r.stdout and "PullTable(" not in r.stdout
    assert "δm_BW [MeV]" in r.stdout and "pull_mean" in r.stdout
