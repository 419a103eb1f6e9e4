"""Command-line options shared by ``toyengine`` subcommands defined in different modules
(:mod:`toyengine.cli.main` and :mod:`toyengine.cli.cluster`), so that neither imports the
other for them."""

from __future__ import annotations

import argparse
import re

__all__ = ["add_plugin_option"]


def _module_name(text: str) -> str:
    """A dotted module name, else argparse's one-line error."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", text):
        msg = f"{text!r} is not a module name such as mypkg.models"
        raise argparse.ArgumentTypeError(msg)
    return text


def add_plugin_option(p: argparse.ArgumentParser) -> None:
    """``--plugin MODULE``: allow a plug-in module (and its submodules) to run."""
    p.add_argument("--plugin", action="append", type=_module_name, metavar="MODULE",
                   help="allow the study's plug-in builders from MODULE (and its submodules) "
                   "to be imported and run (repeatable); a study file cannot allow code by "
                   "itself. Permanent: toyengine.plugins.allow in your Dask config "
                   "(docs/security.md)")
