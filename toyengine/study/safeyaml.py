"""A YAML loader for study files that cannot be turned against the machine reading them.

On top of :class:`yaml.SafeLoader` (no ``!!python`` tags, so nothing is ever constructed
from an arbitrary class) it refuses, before any Python object is built:

* documents larger than :data:`MAX_BYTES`;
* nesting deeper than :data:`MAX_DEPTH` levels (the composer is recursive);
* documents whose size *with every alias expanded* exceeds :data:`MAX_NODES` nodes — the
  "billion laughs" attack, where nine nested anchors of ten aliases each make 10⁹ strings:
  PyYAML shares the aliased objects, so loading is cheap, but anything that walks the
  result (an error message, a digest, a deep copy) would run for hours;
* duplicate keys in one mapping (YAML 1.2 forbids them; PyYAML silently keeps the last);
* integers longer than :data:`MAX_INT_DIGITS` characters (Python refuses to convert more
  than 4300 digits, and converting fewer still costs quadratic time);
* characters YAML does not allow in a document (NUL and other control characters).

Each refusal is a :class:`~toyengine.errors.SpecError` naming the file and the line.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import SpecError

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_INT_DIGITS", "MAX_NODES", "load_yaml"]

#: largest study file accepted (bytes); the reference studies are < 10 kB, an importance-sampled
#: Z_c study with 6208 injected points of 20 parameters (`importance.points`) 1.2 MB
MAX_BYTES = 4_000_000
#: deepest nesting of mappings and sequences; the reference studies use 6
MAX_DEPTH = 32
#: most nodes after alias expansion; the reference studies expand to < 2500, the importance-
#: sampled Z_c study to 124 000
MAX_NODES = 400_000
#: longest integer literal (characters, sign and underscores included); the largest a study
#: file uses is a 64-bit seed (19 digits)
MAX_INT_DIGITS = 100


class _Refused(Exception):
    def __init__(self, expected: str, mark: Any = None, path: list[str | int] | None = None):
        super().__init__(expected)
        self.expected = expected
        self.mark = mark
        self.path = path or []


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader with a nesting limit and duplicate-key detection."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._path: list[str | int] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node:  # type: ignore[override]
        key = index.value if isinstance(index, ScalarNode) else index
        self._path.append(key if isinstance(key, (str, int)) else "?")
        try:
            if len(self._path) > MAX_DEPTH + 1:
                raise _Refused(f"nesting at most {MAX_DEPTH} levels deep",
                               self.peek_event().start_mark, self._path[1:MAX_DEPTH + 1])
            node = super().compose_node(parent, index)  # type: ignore[misc]
            if (isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:int"
                    and len(node.value) > MAX_INT_DIGITS):
                raise _Refused(f"an integer of at most {MAX_INT_DIGITS} digits (this one has "
                               f"{len(node.value)})", node.start_mark, self._path[1:])
            return node
        finally:
            self._path.pop()

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise _Refused(f"each key once per mapping (duplicate key {key_node.value!r})",
                               key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(root: Node) -> dict[int, int]:
    """Number of nodes with every alias expanded, of every node (by ``id``), computed on
    the shared node graph in time linear in the number of *distinct* nodes (never
    expanding anything); saturates at ``MAX_NODES + 1``."""
    size: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are being sized (a cycle if met again)
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in size:
            continue
        if isinstance(node, ScalarNode):
            size[id(node)] = 1
            continue
        kids: list[Node] = []
        if isinstance(node, SequenceNode):
            kids = list(node.value)
        elif isinstance(node, MappingNode):
            for k, v in node.value:
                kids += [k, v]
        if children_done:
            open_.discard(id(node))
            total = 1 + sum(size[id(k)] for k in kids)
            size[id(node)] = min(total, MAX_NODES + 1)  # saturate: no huge ints
            continue
        if any(id(k) in open_ or k is node for k in kids):  # &a [*a]
            raise _Refused("no recursive anchors", node.start_mark)
        open_.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)
    return size


def _largest_path(root: Node, size: dict[int, int]) -> list[str | int]:
    """Keys leading from ``root`` to where the expansion exceeds the limit (the field
    holding the alias bomb)."""
    path: list[str | int] = []
    node = root
    for _ in range(MAX_DEPTH):
        nxt = None
        if isinstance(node, MappingNode):
            for k, v in node.value:
                if size[id(v)] > MAX_NODES:
                    nxt, key = v, (k.value if isinstance(k, ScalarNode) else "?")
                    break
        elif isinstance(node, SequenceNode):
            for i, v in enumerate(node.value):
                if size[id(v)] > MAX_NODES:
                    nxt, key = v, i
                    break
        if nxt is None:
            break
        path.append(key)
        node = nxt
    return path


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document with the limits above.

    Raises
    ------
    SpecError
        Not valid YAML, or over a limit; the message names ``source`` and the line.
    """
    if len(text) > MAX_BYTES:
        raise SpecError("(file)", f"{len(text)} bytes", f"a study file of at most {MAX_BYTES} "
                        "bytes", source)
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader refuses characters YAML does not allow
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size[id(node)] > MAX_NODES:
            raise _Refused(f"at most {MAX_NODES} values with aliases expanded (an alias bomb?)",
                           node.start_mark, _largest_path(node, size))
        return loader.construct_document(node)
    except _Refused as exc:
        line = f" (line {exc.mark.line + 1})" if exc.mark is not None else ""
        where = _format(exc.path) if exc.path else "(file)"
        raise SpecError(where, f"YAML{line}", exc.expected, source) from None
    except RecursionError:
        raise SpecError("(file)", "the document", "less deeply nested YAML", source) from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: a scalar that does not
        # convert to its type (a timestamp 2020-13-45)
        raise SpecError("(file)", source, f"valid YAML ({_one_line(exc)})", source) from None
    finally:
        if loader is not None:
            loader.dispose()


def _format(path: list[str | int]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
