"""The README's Python snippet, saved as a script, runs (with a small toy count)."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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


# --- every shell command and file name in the README and the docs -------------------------

#: the documents whose commands and file names must match the code
DOCS = ("README.md", "cluster/README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
#: top-level folders of the repository: a word starting with one of them names a file
REPO_DIRS = ("studies/", "cluster/", "docs/", "tests/", "examples/", "benchmarks/",
             "toyengine/", ".ci/")
#: options whose value is a file the command writes (need not exist)
OUTPUT_OPTIONS = ("--store", "-o", "--output", "-d", "--out")


def shell_commands(doc: str, inline: bool = True) -> list[str]:
    """The shell commands of ``doc``'s code blocks (continuation lines joined, comments and
    prompts removed) and, with ``inline``, its inline ``toyengine ...`` code spans (prose
    references such as ``toyengine run --scheduler``, not whole commands)."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    out = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang not in ("bash", "sh", "shell", "console", ""):
            continue
        body = re.sub(r"\\\n\s*", " ", body)
        for line in body.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip().removeprefix("$ ")
            if re.match(r"(\S*/)?(toyengine|python3? -m toyengine|cluster/\S+\.sh|dask)\b",
                        line):
                out.append(line)
    if not inline:
        return out
    for span in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"toyengine (run|show|status|verify|summary|data|report|plot|schema|"
                    r"submit|cluster)\b", span):
            out.append(span)
    return out


def repo_paths(doc: str) -> list[str]:
    """Every word of ``doc`` (prose and code) that names a file of the repository."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    dirs = "|".join(map(re.escape, REPO_DIRS))
    words = re.findall(r"(?<![\w/.~-])((?:" + dirs + r")[\w./*-]*)", text)
    return sorted({w.rstrip(".,:;)") for w in words})


@pytest.mark.parametrize("doc", DOCS)
def test_docs_name_existing_files(doc):
    """A file name the docs give (``studies/examples/x.yaml``, ``cluster/profiles/...``)
    exists; output names after ``--store``/``-o`` and placeholders are not checked."""
    outputs = set()
    for cmd in shell_commands(doc):
        words = shlex.split(cmd, comments=False, posix=True)
        outputs |= {w for o, w in itertools.pairwise(words) if o in OUTPUT_OPTIONS}
    missing = []
    for p in repo_paths(doc):
        if p in outputs or (p.endswith("/") and (ROOT / p).is_dir()):
            continue
        if "*" in p:
            if not list(ROOT.glob(p)):
                missing.append(p)
        elif not (ROOT / p).exists():
            missing.append(p)
    assert missing == [], f"{doc} names files that do not exist: {missing}"


def _toyengine_argv(cmd: str) -> list[str] | None:
    cmd = re.sub(r'"\$\([^)]*\)"', "tcp://127.0.0.1:8786", cmd)
    cmd = cmd.split(" > ")[0].split(" | ")[0]
    words = shlex.split(cmd)
    while words and words[0] in ("source",):
        return None
    if words[:3] in (["python", "-m", "toyengine"], ["python3", "-m", "toyengine"]):
        return words[3:]
    if words and words[0].endswith("toyengine"):
        return words[1:]
    return None


def _subcommand_options(parser, argv: list[str]) -> tuple[list[str], set[str]] | None:
    """The subcommand path at the start of ``argv`` and the options it takes (None when the
    first word is not a subcommand)."""
    import argparse

    path, opts = [], set(parser._option_string_actions)
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
        path.append(word)
        opts = set(parser._option_string_actions)
    return (path, opts) if path else None


@pytest.mark.parametrize("doc", DOCS)
def test_docs_toyengine_commands_parse(doc):
    """Every ``toyengine`` command of the docs' code blocks parses (argparse, the real
    parser: subcommand, options, their values); every inline mention
    (``toyengine submit --tls-config FILE``) names a subcommand and options that exist."""
    from toyengine.cli.main import build_parser

    parser = build_parser()
    blocks = shell_commands(doc, inline=False)
    bad = []
    for cmd in shell_commands(doc):
        argv = _toyengine_argv(cmd)
        if argv is None or argv in (["--version"], ["--help"]):
            continue
        if cmd in blocks:
            try:
                parser.parse_args(argv)
            except SystemExit as exc:
                bad.append(f"{cmd}  (exit {exc.code})")
            continue
        found = _subcommand_options(parser, argv)
        if found is None:
            bad.append(f"{cmd}  (no such subcommand)")
            continue
        bad += [f"{cmd}  ({w} is not an option of toyengine {' '.join(found[0])})"
                for w in argv if re.fullmatch(r"--?[a-z][\w-]*", w) and w not in found[1]]
    assert bad == [], f"{doc}: commands the CLI refuses:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS)
def test_docs_cluster_script_options_exist(doc):
    """``cluster/*.sh`` commands of the docs use options the scripts handle."""
    bad = []
    for cmd in shell_commands(doc):
        words = shlex.split(cmd)
        if not words or not re.fullmatch(r"cluster/\S+\.sh", words[0]):
            continue
        script = (ROOT / words[0]).read_text(encoding="utf-8")
        bad += [f"{words[0]} {w}" for w in words[1:] if w.startswith("-") and w not in script]
    assert bad == []


def test_readme_cheap_commands_run(cli):
    """The README's commands that need no store run for real: version, help, show."""
    cmds = [c for c in shell_commands("README.md") if (argv := _toyengine_argv(c)) is not None
            and argv[:1] in (["--version"], ["--help"], ["schema"], ["show"])]
    assert len(cmds) >= 3
    for c in cmds:
        r = cli(*_toyengine_argv(c))
        assert r.returncode == 0, (c, r.stderr[-2000:])
