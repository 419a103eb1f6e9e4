"""Minuit2's C++ messages, silenced where toyengine fits."""

from __future__ import annotations

__all__ = ["quiet_minuit2"]


def quiet_minuit2() -> None:
    """Silence Minuit2's C++ messages (``E VariableMetricBuilder Initial matrix not
    pos.def.`` and the like) in this process: they report states MIGRAD recovers from, on
    stdout, where they would corrupt a command's JSON or CSV output; the outcome of every fit
    is in its status and ``fail_reason`` instead. Process-wide (Minuit2 has one print level)."""
    try:
        from iminuit._core import MnPrint
    except ImportError:  # a future iminuit without the private module: messages stay
        return
    MnPrint.global_level = -1
