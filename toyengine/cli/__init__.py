"""The command line, ``toyengine run | status | summary | plot | submit | ...``."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
