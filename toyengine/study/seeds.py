"""Random streams of a study, keyed by the root seed (ARCHITECTURE.md, "Seeds").

Toy ``(v, t)`` draws everything from ``SeedSequence(root_seed, spawn_key=(v, t))``; a random
variant ``v`` builds its models with ``SeedSequence(root_seed, spawn_key=(v,))``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["toy_seed", "variant_rng"]


def toy_seed(root_seed: int, variant: int, toy: int) -> np.random.SeedSequence:
    """The seed sequence of toy ``(variant, toy)``."""
    return np.random.SeedSequence(root_seed, spawn_key=(variant, toy))


def variant_rng(root_seed: int, variant: int) -> np.random.Generator:
    """The generator a random variant builds its models with."""
    return np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(variant,)))
