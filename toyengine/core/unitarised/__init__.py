"""The unitarised Breit–Wigner profile of the T_cc⁺ (LHCb, Nature Communications 13 (2022)
3351, arXiv:2109.01056, Eqs. 4–8 and 50–52): :mod:`.profile` holds the model."""

from __future__ import annotations

from .profile import *  # noqa: F403
from .profile import __all__ as __all__
