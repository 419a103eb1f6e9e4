"""The builder registry imports a shipped builder's module only when a study names it
(issue 16, start-up): a T_cc+ study never imports the Z_c(4100) Dalitz model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from toyengine.models import BUILDERS, get_builder, known_names, register_builder
from toyengine.models.gauss import GaussOptions

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = {"mass1d", "tcc", "zc4100", "gauss"}


def _fresh(code: str) -> dict:
    """Run ``code`` (which prints one JSON value) in a new interpreter."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def test_tcc_study_imports_only_its_builder():
    got = _fresh(
        "import json, sys, toyengine\n"
        "from toyengine.study.plan import Plan\n"
        "from toyengine.study.recipe import run_chunk\n"
        "from toyengine.study.plan import Chunk\n"
        "plan = Plan.of(toyengine.load_spec('studies/tcc/pulls.yaml'))\n"
        "run_chunk(plan, Chunk(0, 0, 0, 1))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('toyengine.'))))\n")
    assert "toyengine.models.tcc" in got
    assert "toyengine.models.zc4100" not in got
    assert not [m for m in got if m.startswith("toyengine.core.dalitz")]


def test_names_are_known_without_importing_the_builders():
    got = _fresh(
        "import json, sys\n"
        "from toyengine.models import BUILDERS, known_names, plugin_module\n"
        "names = known_names()\n"
        "shipped = [n for n in ('mass1d', 'tcc', 'zc4100', 'gauss') if n in BUILDERS]\n"
        "modules = [plugin_module(n) for n in shipped]\n"
        "print(json.dumps({'names': names, 'shipped': shipped, 'len': len(BUILDERS),\n"
        "                  'modules': modules,\n"
        "                  'imported': [m for m in sys.modules\n"
        "                               if m.startswith('toyengine.models.')\n"
        "                               and m.rsplit('.', 1)[1] in\n"
        "                               ('mass1d', 'tcc', 'zc4100', 'gauss')]}))\n")
    assert SHIPPED <= set(got["names"])
    assert set(got["shipped"]) == SHIPPED
    assert got["len"] >= len(SHIPPED)
    assert got["modules"] == [None] * len(SHIPPED)  # registered: no plug-in module
    assert got["imported"] == []


def test_lookup_imports_and_registers_the_builder():
    for name in sorted(SHIPPED):
        b = BUILDERS[name]
        assert b.name == name
        assert b.options.builder_name == name
        assert get_builder(name) is b.build
    assert dict(BUILDERS.items()).keys() >= SHIPPED
    assert known_names() == sorted(set(known_names()))


def test_register_builder_replaces_a_shipped_one():
    original = BUILDERS["gauss"]

    def build(options, rng=None):
        return original.build(options, rng)

    try:
        register_builder("gauss", build, GaussOptions)
        assert BUILDERS["gauss"].build is build
        assert get_builder("gauss") is build
        assert list(BUILDERS).count("gauss") == 1
    finally:
        BUILDERS["gauss"] = original
    assert get_builder("gauss") is original.build
