"""Random streams of a study: one documented key scheme, derived from the root seed.

Every random number a study uses comes from ``numpy.random.SeedSequence(root_seed,
spawn_key=(DOMAIN, *key))`` — a pure function of the root seed and the key, so nothing
depends on chunking, worker count, scheduling order, retries or resumes.

Key scheme (the first spawn-key word is the domain; add new domains at the end):

===================  ========================================  ==================================
domain               key                                       used for
===================  ========================================  ==================================
``DATA`` = 1         ``(toy, component_id, slot)``              generated data, **paired** studies
``DATA_UNPAIRED``=2  ``(variant, toy, component_id, slot)``     generated data, ``paired: false``
``MODEL`` = 3        ``(variant,)``                             random variants' model building
``FIT`` = 4          ``(toy, hypothesis)`` (+ variant unpaired) multi-start points of a fit
``GLOBAL_OBS`` = 5   ``(toy,)``                                 constraint means (global
                                                               observables) of unconditional toys
``IMPORTANCE`` = 6   ``(toy,)`` (+ variant unpaired)            the mixture component an
                                                               importance-sampled toy is drawn
                                                               from (``importance:``)
===================  ========================================  ==================================

``component_id`` and ``slot`` (0: the component's Poisson count, 1: its per-event draws) are
added by :class:`toyengine.core.streams.DataStreams`. Paired data streams do not depend on
the variant: toy *t* of every variant draws the same uniforms, so two variants' data sets
differ only where their models differ (common random numbers; a systematic shift is then the
mean of per-toy differences, with a much smaller spread than the difference of two
independent ensembles).
"""

from __future__ import annotations

import numpy as np

from ..core.streams import DataStreams

__all__ = ["DATA", "DATA_UNPAIRED", "FIT", "GLOBAL_OBS", "IMPORTANCE", "MODEL", "data_streams",
           "fit_rng", "global_observables_rng", "importance_rng", "model_rng", "seed_sequence"]

DATA = 1
DATA_UNPAIRED = 2
MODEL = 3
FIT = 4
GLOBAL_OBS = 5
IMPORTANCE = 6


def seed_sequence(root_seed: int, domain: int, *key: int) -> np.random.SeedSequence:
    """``SeedSequence(root_seed, spawn_key=(domain, *key))``."""
    return np.random.SeedSequence(int(root_seed), spawn_key=(int(domain), *map(int, key)))


def data_streams(root_seed: int, toy: int, variant: int | None = None) -> DataStreams:
    """Data streams of ``toy``: paired (same for every variant) unless ``variant`` is given."""
    if variant is None:
        return DataStreams(root_seed, (DATA, toy))
    return DataStreams(root_seed, (DATA_UNPAIRED, variant, toy))


def model_rng(root_seed: int, variant: int) -> np.random.Generator:
    """The generator a random variant (template smearing, parameter draws) builds its models
    with."""
    return np.random.default_rng(seed_sequence(root_seed, MODEL, variant))


def fit_rng(root_seed: int, toy: int, hypothesis: int,
            variant: int | None = None) -> np.random.Generator:
    """The generator of the multi-start points of ``hypothesis``'s fit to ``toy`` (paired:
    the same for every variant, unless ``variant`` is given)."""
    key = (toy, hypothesis) if variant is None else (toy, hypothesis, variant)
    return np.random.default_rng(seed_sequence(root_seed, FIT, *key))


def global_observables_rng(root_seed: int, toy: int) -> np.random.Generator:
    """The generator of toy ``toy``'s global observables (constraint means): the same for
    every variant, independent of the data streams."""
    return np.random.default_rng(seed_sequence(root_seed, GLOBAL_OBS, toy))


def importance_rng(root_seed: int, toy: int, variant: int | None = None) -> np.random.Generator:
    """The generator that picks toy ``toy``'s mixture component in an importance-sampled
    study (paired: the same for every variant, unless ``variant`` is given); independent of
    the data streams, which the chosen model then samples as any generator would."""
    key = (toy,) if variant is None else (toy, variant)
    return np.random.default_rng(seed_sequence(root_seed, IMPORTANCE, *key))
