"""``toyengine report STORE``: open the store, render its HTML report
(:func:`toyengine.summary.html.render_html`) and write it next to the store."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ..store.location import Location
from ..store.opening import open_checked
from ..store.status import read_status
from ..summary.html import render_html

__all__ = ["write_report"]


def write_report(store: str | Path, output: str | Path | None = None,
                 storage_options: dict[str, Any] | None = None, *,
                 allow_incomplete: bool = False) -> Path:
    """Write the HTML report of the store at ``store`` (a path or an fsspec URL) to
    ``output`` (default ``STORE.html`` next to a local store, ``NAME.html`` in the working
    directory for a URL); return its path. A store with chunks missing, damaged or not
    done is refused (:func:`toyengine.open_results`) unless ``allow_incomplete``: then the
    report's first line (an HTML comment) and a banner say which toys are missing."""
    loc = Location.of(store, storage_options)
    if output:
        out = Path(output)
    elif loc.is_local:
        root = Path(loc.root)
        out = root.with_name(root.name + ".html")
    else:
        out = Path(loc.url.rstrip("/").rsplit("/", 1)[-1] + ".html")
    ds, verify_unread = open_checked(loc, allow_incomplete=allow_incomplete)
    text = render_html(ds, str(loc), read_status(loc))
    verify_unread()  # nothing is written from a damaged store
    if ds.attrs.get("incomplete"):
        what = html.escape(str(ds.attrs["incomplete"]))
        text = f"<!-- INCOMPLETE STORE: {what} -->\n" + text.replace(
            "<body>", f"<body>\n<p><strong>INCOMPLETE STORE (read with "
            f"--allow-incomplete): {what}</strong></p>", 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
