"""Study-file YAML: alias bombs, duplicate keys, deep nesting and python tags are refused
fast, with one SpecError (issue 13)."""

import time
from pathlib import Path

import pytest

from toyengine.errors import SpecError
from toyengine.study.spec import StudySpec

DATA = Path(__file__).parent / "data"
GOOD = (DATA / "tcc_small.yaml").read_text()


def _bomb(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("where", ["unknown key", "description", "options"])
def test_billion_laughs_refused_fast(where):
    bomb = _bomb()  # 9^9 = 387 million strings when expanded
    if where == "unknown key":
        text = GOOD + "junk:\n" + "".join("  " + ln + "\n" for ln in bomb.splitlines())
    elif where == "description":
        text = bomb + GOOD + "description: *l8\n"
    else:
        text = bomb + GOOD.replace("options: {range: [-4.0, 11.0]}", "options: {range: *l8}")
    t0 = time.perf_counter()
    with pytest.raises(SpecError, match="aliases expanded"):
        StudySpec.from_text(text, "bomb.yaml", str(DATA))
    assert time.perf_counter() - t0 < 2.0


def test_small_aliases_still_work():
    text = GOOD.replace("models:\n  nominal:", "models:\n  nominal: &m") \
        .replace("generate: nominal", "  other: *m\ngenerate: nominal")
    spec = StudySpec.from_text(text, "alias.yaml", str(DATA))
    assert set(spec.models) == {"nominal", "other"}


@pytest.mark.parametrize(("text", "expected"), [
    (GOOD + "toys: 25\n", "duplicate key 'toys'"),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nesting"),
    ("a: &x [1, *x]\n", "recursive"),
    (GOOD + "description: !!python/object/apply:os.system [echo hi]\n", "valid YAML"),
    ("- 1\n- 2\n", "a mapping"),
    ("a: [\n", "valid YAML"),
    (GOOD.replace("name: tcc-small", "name: tcc\x00small"), "unacceptable character #x0000"),
    (GOOD.replace("seed: 7", "seed: " + "9" * 5000), r"seed: got 'YAML \(line 4\)'; expected "
     "an integer of at most 100 digits"),
    (GOOD.replace("toys: 24", "toys: -" + "1_0" * 40), "toys: .*at most 100 digits"),
    (GOOD.replace("seed: 7", "seed: 2020-13-45"), r"valid YAML \(month must be in 1..12\)"),
])
def test_bad_yaml_refused(text, expected):
    with pytest.raises(SpecError, match=expected):
        StudySpec.from_text(text, "bad.yaml", str(DATA))


def test_long_integers_within_the_limit_still_work():
    spec = StudySpec.from_text(GOOD.replace("seed: 7", f"seed: {2**63 - 1}"), "s.yaml",
                               str(DATA))
    assert spec.seed == 2**63 - 1
