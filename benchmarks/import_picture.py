"""Print the import picture of the toyengine package: for each sub-package (layer), the
layers it imports and how many import statements do so; then modules over 800 lines and
functions over 150 lines. Run from the repository root: ``python benchmarks/import_picture.py``.
Reads the source with :mod:`ast`; imports nothing of toyengine."""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "toyengine"


def _layer(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0].removesuffix(".py") if len(rel) > 1 else f"({rel[0].removesuffix('.py')})"


def _target(path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    pkg = list(path.relative_to(ROOT).parts[:-1])
    out = []
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            mod = [*base, *(node.module.split(".") if node.module else [])]
        elif node.module and node.module.startswith("toyengine"):
            mod = node.module.split(".")[1:]
        else:
            return []
        if not mod and node.level:  # from . import x / from .. import x
            mod = [a.name for a in node.names][:1]
        out.append(mod[0] if mod else "(toyengine)")
    else:
        for a in node.names:
            if a.name.startswith("toyengine."):
                out.append(a.name.split(".")[1])
    return out


def main() -> int:
    arrows: collections.Counter[tuple[str, str]] = collections.Counter()
    big, long_funcs = [], []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        src = _layer(path)
        n = text.count("\n")
        if n > 800:
            big.append((n, str(path.relative_to(ROOT.parent))))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _target(path, node):
                    t = t.removesuffix(".py")
                    if t != src.strip("()"):
                        arrows[(src, t)] += 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 150:
                    long_funcs.append((length, f"{path.relative_to(ROOT.parent)}:{node.name}"))
    print("imports between layers (from → to: import statements)")
    for (a, b), k in sorted(arrows.items()):
        print(f"  {a:>14} → {b:<14} {k}")
    print("modules over 800 lines:", *(f"\n  {n:5d} {p}" for n, p in sorted(big, reverse=True))
          or " none")
    print("functions over 150 lines:",
          *(f"\n  {n:5d} {p}" for n, p in sorted(long_funcs, reverse=True)) or " none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
