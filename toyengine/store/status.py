"""The live status of a running study: ``_toyengine/status.json`` inside the store (fields
in ``docs/store-format.md``), so that a campaign writing to an object store can be watched
from anywhere. Written by the runner, read by ``toyengine status --watch`` and the HTML
report; not part of the results (deleting it loses nothing)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .location import Location

__all__ = ["STATUS_KEY", "read_status", "write_status"]

#: where the live status lives, relative to the store's root
STATUS_KEY = "_toyengine/status.json"


def read_status(store: str | Path | Location,
                storage_options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The last status a run wrote into ``store`` (``None`` if there is none)."""
    try:
        got = Location.of(store, storage_options).read_json(STATUS_KEY)
    except OSError:
        return None
    return got if isinstance(got, dict) else None


def write_status(store: Location, status: dict[str, Any]) -> None:
    """Replace the status atomically (NaN/inf written as ``null``); a store that cannot be
    written is ignored (the status must never stop a run)."""
    try:
        store.write_json(STATUS_KEY, _finite(status))
    except OSError:
        pass


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x
