"""Property-based fuzzing of the study-file validator (issue 13).

Every reference study file is mutated (keys dropped, wrong types, NaN, ±inf, huge numbers,
unknown keys, wrong enum values, deep nesting, alias bombs) and validated. The properties:
only :class:`~toyengine.errors.SpecError` is ever raised, the error names the mutated
field, a rejection takes less than 5 s, the CLI creates no store for a rejected file, and
the JSON Schema of ``toyengine schema`` gives the same verdict as the validator except for
the checks the docs list as beyond a schema. The default run is small and derandomised;
``-m slow`` runs 1000 files and prints the numbers.
"""

from __future__ import annotations

import copy
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toyengine.errors import SpecError
from toyengine.study.spec import StudySpec, load_spec
from toyengine.study.studyfile import study_json_schema

ROOT = Path(__file__).parent.parent
STUDIES = sorted((ROOT / "studies").glob("*/*.yaml"))
RAW = {f: yaml.safe_load(f.read_text()) for f in STUDIES}
KINDS = ("drop", "wrong_type", "nan", "inf", "-inf", "huge", "negative", "unknown_key",
         "bad_enum", "deep", "bomb")
WRONG = [None, "x", True, 1.5, -1, 0, [], {}, {"a": 1}, [1, "x"], "", 10**30]
#: a "billion laughs" inline mapping (9^9 strings expanded), put where the mutated value was
BOMB = "{" + ", ".join(['b0: &b0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
                       + [f"b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]"
                          for i in range(1, 9)]) + "}"
MARK = "__FUZZ_VALUE__"


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


PATHS = {f: _paths(RAW[f]) for f in STUDIES}


def _fmt(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def mutate(study: Path, path: tuple, kind: str, wrong: Any) -> tuple[str, tuple, Any]:
    """The mutated file text, the path of the field the mutation concerns and the value
    that was there."""
    doc = copy.deepcopy(RAW[study])
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    target = path
    old = parent[last]
    if kind == "drop":
        del parent[last]
    elif kind == "unknown_key":
        if isinstance(parent[last], dict):
            parent[last]["colour_fuzz"] = wrong
            target = (*path, "colour_fuzz")
        elif isinstance(parent, dict):
            parent["colour_fuzz"] = wrong
            target = (*path[:-1], "colour_fuzz")
        else:  # an item of a list: becomes a mapping with an unknown key
            parent[last] = {"colour_fuzz": wrong}
    else:
        value = {"wrong_type": wrong, "nan": math.nan, "inf": math.inf, "-inf": -math.inf,
                 "huge": 10**30 if isinstance(parent[last], int) else 1e308,
                 "negative": -(abs(parent[last]) + 1) if isinstance(parent[last], (int, float))
                 and not isinstance(parent[last], bool) else -1,
                 "bad_enum": "no_such_choice", "deep": MARK, "bomb": MARK}[kind]
        parent[last] = value
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10**6)
    if kind == "deep":
        text = text.replace(MARK, "[" * 60 + "1" + "]" * 60)
    elif kind == "bomb":
        text = text.replace(MARK, BOMB)
    return text, target, old


def names_field(err: SpecError, target: tuple, kind: str, old: Any,
                study: Path | None = None) -> bool:
    """Does the error name the mutated field, a field inside it or the mapping that lost a
    key? For a dropped model or hypothesis, naming a field that still refers to it (with
    the dropped name in the message) counts too."""
    path = err.path
    if path.startswith(("(", "[")):
        return False
    want = _fmt(target)
    if path.startswith(want) or want.startswith(path):
        return True
    # a YAML alias (``truth: *default``): the mutated node is shared, and the error may name
    # it under the model it was first written for
    if study is not None and len(target) > 1 and target[0] == "models":
        models = RAW[study]["models"]
        for other, node in models.items():
            if other != target[1] and node is models.get(target[1]):
                alt = _fmt(("models", other, *target[2:]))
                if path.startswith(alt) or alt.startswith(path):
                    return True
    if kind == "drop":
        name = target[-1] if isinstance(target[-1], str) else old
        return (isinstance(name, str) and repr(name) in str(err)) or f"{name}" in path
    return False


@dataclass
class Stats:
    files: int = 0
    rejected: int = 0
    named: int = 0
    tracebacks: list[str] = field(default_factory=list)
    not_named: list[str] = field(default_factory=list)
    max_reject_s: float = 0.0
    slow: list[str] = field(default_factory=list)
    schema_disagree: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)


_VALIDATOR = jsonschema.Draft202012Validator(study_json_schema())
#: validator checks the schema cannot express (docs/study-format.md); a rejection for one
#: of these is not a disagreement
_BEYOND_SCHEMA = ("model names", "hypotheses", "buildable model", "parameter of the models",
                  "parameters of the model", "unique variant", "lo < hi", "finite", "data file",
                  "grid points", "open decay", "h0 and h1", "distinct", "at most 100000 variants",
                  "with an entry", "with a 'sig'", "with an 'efficiency'", "sigma > 0",
                  "aliases expanded", "nesting", "mapping (a study file)")


def _mass1d_inner(err: SpecError, study: Path) -> bool:
    """A rejection by the ``mass1d`` builder's own checks of its nested declarations
    (``NOT_IN_SCHEMA``): the study has a mass1d model and the error is inside one of its
    declarations."""
    mass1d = [n for n, m in RAW[study]["models"].items() if m.get("builder") == "mass1d"]
    return any(re.search(rf"models\.{re.escape(n)}\.options\."
                         r"(observable|parameters|components|resolution|discriminants)\b", err.path)
               for n in mass1d)


def _dalitz_inner(err: SpecError, study: Path) -> bool:
    """A rejection by the ``dalitz`` builder's checks across fields (a pair of unknown
    daughters, a spin the lineshape cannot take, a missing lineshape parameter, a closed
    phase space): the error is inside one of the study's dalitz declarations."""
    dalitz = [n for n, m in RAW[study]["models"].items() if m.get("builder") == "dalitz"]
    return any(re.search(rf"models\.{re.escape(n)}\.options\."
                         r"(parent|daughters|isobars|runs|vetoes|scan)\b", err.path)
               for n in dalitz)


def run_one(stats: Stats, study: Path, path: tuple, kind: str, wrong: Any, tmp: Path,
            cli: bool) -> None:
    text, target, old = mutate(study, path, kind, wrong)
    stats.files += 1
    label = f"{study.relative_to(ROOT)} {_fmt(path)} {kind} {wrong!r}"
    t0 = time.perf_counter()
    try:
        StudySpec.from_text(text, "fuzz.yaml", str(study.parent))
        err = None
    except SpecError as exc:
        err = exc
    except Exception as exc:  # noqa: BLE001 - what the test looks for
        stats.tracebacks.append(f"{label}: {type(exc).__name__}: {exc}"[:300])
        return
    seconds = time.perf_counter() - t0
    if err is None:
        accepted = True
    else:
        accepted = False
        stats.rejected += 1
        stats.max_reject_s = max(stats.max_reject_s, seconds)
        if seconds > 5.0:
            stats.slow.append(f"{label}: {seconds:.1f} s")
        if names_field(err, target, kind, old, study):
            stats.named += 1
        else:
            stats.not_named.append(f"{label}: {err}"[:300])
    if kind not in ("bomb", "deep"):  # the schema sees the parsed document
        doc = yaml.safe_load(text)
        schema_ok = not any(True for _ in _VALIDATOR.iter_errors(doc))
        if schema_ok != accepted and not (
                err is not None and (any(s in str(err) for s in _BEYOND_SCHEMA)
                                     or _mass1d_inner(err, study)
                                     or _dalitz_inner(err, study))):
            stats.schema_disagree.append(f"{label}: schema {'accepts' if schema_ok else 'rejects'}"
                                         f", validator {err}"[:300])
    if cli and err is not None:
        from toyengine.cli import main

        f = tmp / "fuzz.yaml"
        f.write_text(text)
        for name in ("reference_data.npz",):
            src = study.parent / name
            if src.exists() and not (tmp / name).exists():
                (tmp / name).symlink_to(src)
        store = tmp / "fuzz.zarr"
        code = main(["run", str(f), "--store", str(store), "--workers", "1", "--quiet"])
        if code != 2 or store.exists():
            stats.stores.append(f"{label}: exit {code}, store {store.exists()}")


def fuzz(n: int, tmp: Path, cli: bool) -> Stats:
    """Validate ``n`` mutated study files (derandomised hypothesis search)."""
    stats = Stats()
    for f in STUDIES:  # warm the validator's build cache: mutations then cost no rebuild
        load_spec(f)

    @settings(max_examples=n, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: st.DataObject) -> None:
        study = data.draw(st.sampled_from(STUDIES))
        path = data.draw(st.sampled_from(PATHS[study]))
        kind = data.draw(st.sampled_from(KINDS))
        wrong = data.draw(st.sampled_from(WRONG))
        run_one(stats, study, path, kind, wrong, tmp, cli)

    one()
    return stats


def _check(stats: Stats) -> None:
    assert not stats.tracebacks, stats.tracebacks[:5]
    assert not stats.slow, stats.slow[:5]
    assert not stats.stores, stats.stores[:5]
    assert stats.rejected > 0.5 * stats.files
    assert stats.named >= 0.95 * stats.rejected, stats.not_named[:10]
    assert not stats.schema_disagree, stats.schema_disagree[:5]


def test_fuzzed_study_files_give_one_spec_error_naming_the_field(tmp_path):
    _check(fuzz(60, tmp_path, cli=True))


@pytest.mark.slow
def test_fuzz_1000_study_files(tmp_path):
    stats = fuzz(1000, tmp_path, cli=False)
    print(f"\nfuzz: {stats.files} files, {stats.rejected} rejected, "
          f"{len(stats.tracebacks)} tracebacks, {len(stats.slow)} > 5 s, max rejection "
          f"{stats.max_reject_s:.2f} s, field named in {stats.named}/{stats.rejected} "
          f"({100 * stats.named / max(stats.rejected, 1):.1f} %), schema disagreements "
          f"{len(stats.schema_disagree)}")
    for line in stats.not_named[:20] + stats.schema_disagree[:20]:
        print("  ", line)
    _check(stats)
