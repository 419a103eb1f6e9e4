"""Per-component random streams of one generated data set (common random numbers).

A :class:`DataStreams` is a root seed and a key prefix; component ``c`` of the data set
draws its Poisson count from ``SeedSequence(root, spawn_key=(*prefix, id(c), 0))`` and its
events from ``(*prefix, id(c), 1)``, with ``id`` = :func:`component_id`. The count is the
Poisson inverse CDF of one uniform, so it is monotone in the yield; event *k* of a component
uses the same numbers whatever the count (prefix-stable). Two models sampled with the same
streams therefore give data sets that differ only where the models differ. Which prefix a
toy uses (the study's key scheme) is decided in :mod:`toyengine.study.seeds`.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from functools import lru_cache

import numpy as np
from numpy.random.bit_generator import ISeedSequence
from scipy import special

__all__ = ["DataStreams", "as_streams", "component_id", "poisson_quantile"]

_COUNT_SLOT = 0
_EVENT_SLOT = 1
#: spawn-key word after the prefix for models that take a plain generator (component ids
#: come from a 32-bit hash and always carry a slot after them, so this key cannot collide)
_WHOLE_TOY = 2**32


#: numpy's SeedSequence pool size (32-bit words)
_POOL_SIZE = 4


def _uint32_words(n: int) -> list[int]:
    """The little-endian 32-bit words of a non-negative integer (``[0]`` for zero), as
    numpy's SeedSequence reads an integer."""
    if n < 0:
        msg = f"a seed or key must be a non-negative integer, got {n}"
        raise ValueError(msg)
    words = [n & 0xFFFFFFFF]
    n >>= 32
    while n:
        words.append(n & 0xFFFFFFFF)
        n >>= 32
    return words


@lru_cache(maxsize=256)
def component_id(name: str) -> int:
    """Stable 32-bit id of a component name (first four bytes of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


#: means up to which :func:`poisson_quantile` searches a table of the CDF
_TABLE_MEAN = 1.0e4
#: the last means :func:`poisson_quantile` was asked for (a table is made from the second)
_MEANS_SEEN: set[float] = set()


@lru_cache(maxsize=64)
def _poisson_cdf(mean: float) -> tuple[float, ...] | None:
    """``P(N <= k)`` for ``k = 0, 1, ...`` up to the first ``k`` where it is 1.0, the same
    ``special.pdtr`` values the search of :func:`poisson_quantile` computes one by one; None
    above :data:`_TABLE_MEAN` or if the values do not rise monotonically to 1.0."""
    if not 0.0 < mean <= _TABLE_MEAN:
        return None
    cdf = special.pdtr(np.arange(int(mean + 40.0 * math.sqrt(mean)) + 60), mean)
    if cdf[-1] != 1.0 or np.any(np.diff(cdf) < 0.0):
        return None
    # a tuple (shared, never modified): bisect finds a count in it in a fifth of
    # np.searchsorted's time
    return tuple(cdf[:int(np.argmax(cdf == 1.0)) + 1].tolist())


def poisson_quantile(u: float, mean: float) -> int:
    """Smallest ``k`` with ``P(N <= k) >= u`` for ``N ~ Poisson(mean)``; nondecreasing in
    ``mean`` at fixed ``u`` (the Poisson family is stochastically increasing)."""
    if not mean > 0.0:
        return 0
    if mean in _MEANS_SEEN:  # a study's toys share their means: one table each, kept
        table = _poisson_cdf(mean)
        if table is not None:
            return bisect.bisect_left(table, u)  # as np.searchsorted(side="left")
    else:  # a mean met once (e.g. toys of an importance-sampled study's many models) is
        # searched for, not tabled
        if len(_MEANS_SEEN) >= 256:
            _MEANS_SEEN.clear()
        _MEANS_SEEN.add(mean)
    guess = float(special.pdtrik(u, mean))  # NaN at u = 1 (a uniform 1 - 2^-53, + 2^-54)
    k = max(int(math.ceil(guess)), 0) if math.isfinite(guess) else int(mean)
    # pdtrik inverts the regularised gamma function; fix its last-digit rounding exactly
    while k > 0 and special.pdtr(k - 1, mean) >= u:
        k -= 1
    while special.pdtr(k, mean) < u:
        k += 1
    return k


#: :mod:`toyengine.core.streams_kernels` once loaded (numba: on the first stream, not at
#: ``import toyengine``)
_KERNELS = None


def _load_kernels():  # noqa: ANN202 - the module
    global _KERNELS
    from . import streams_kernels

    _KERNELS = streams_kernels
    return _KERNELS


class _Seed(ISeedSequence):
    """A seed sequence whose state is already known: what ``PCG64(seed)`` asks a
    ``SeedSequence`` for (``generate_state(4, uint64)``), computed by
    :func:`toyengine.core.streams_kernels.pcg64_seed`."""

    __slots__ = ("_state",)

    def __init__(self, state: np.ndarray):
        self._state = state

    def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:
        if n_words != 4 or np.dtype(dtype) != np.uint64:
            msg = f"_Seed holds PCG64's seed (4 uint64 words), not {n_words} of {dtype}"
            raise ValueError(msg)
        return self._state


class DataStreams:
    """The data streams of one toy: per component a count uniform and an event stream.

    Parameters
    ----------
    root_seed : int
        The study's root seed.
    prefix : tuple of int
        Spawn-key prefix chosen by the study's key scheme (:mod:`toyengine.study.seeds`).
    """

    def __init__(self, root_seed: int, prefix: tuple[int, ...]):
        self.root_seed = int(root_seed)
        self.prefix = tuple(int(k) for k in prefix)
        # the entropy numpy assembles for SeedSequence(root_seed, spawn_key=(*prefix, ...)),
        # up to the component's words: the root's 32-bit words, zero-padded to the pool
        # size, then each key entry's (numpy's ``get_assembled_entropy``)
        root = _uint32_words(self.root_seed)
        self._head = [*root, *[0] * (_POOL_SIZE - len(root)),
                      *[w for k in self.prefix for w in _uint32_words(k)]]
        self._pool: tuple | None = None  # the hash's state after the head (_seed)

    def _seed(self, component: str, slot: int) -> _Seed:
        """The seed of ``SeedSequence(root_seed, spawn_key=(*prefix,
        component_id(component), slot))`` for PCG64: the head's words are hashed once per
        data set and the last two per stream (:mod:`toyengine.core.streams_kernels`), a
        fifth of the time of building the ``SeedSequence``; the same numbers
        (``tests/test_seeds.py``)."""
        k = _KERNELS or _load_kernels()
        if self._pool is None:
            self._pool = k.absorb(np.array(self._head, dtype=np.uint32))
        return _Seed(k.pcg64_seed(*self._pool, component_id(component), slot))

    def _generator(self, component: str, slot: int) -> np.random.Generator:
        """``default_rng(SeedSequence(root_seed, spawn_key=(*prefix,
        component_id(component), slot)))``."""
        return np.random.Generator(np.random.PCG64(self._seed(component, slot)))

    def count(self, component: str, mean: float) -> int:
        """Poisson count of ``component`` with mean ``mean`` by inverse CDF of one uniform."""
        u = self._generator(component, _COUNT_SLOT).random()
        return poisson_quantile(u + 2.0**-54, max(float(mean), 0.0))  # u in (0, 1)

    def events(self, component: str) -> np.random.Generator:
        """A fresh generator at the start of ``component``'s per-event stream.

        Draw per-event numbers as rows (``rng.random((n, d))``) so that event *k* uses the
        same numbers whatever ``n`` is.
        """
        return self._generator(component, _EVENT_SLOT)

    def __getattr__(self, name: str):  # noqa: ANN204 - forwards to numpy.random.Generator
        """Models that take a plain ``numpy.random.Generator`` (e.g. user plug-ins calling
        ``rng.poisson``/``rng.random``) get one generator for the whole toy, keyed by the
        same prefix: still the same numbers for every variant (paired), but not prefix-stable
        per component; use :meth:`count` and :meth:`events` for that."""
        if name.startswith("__"):
            raise AttributeError(name)
        gen = self.__dict__.get("_whole_toy")
        if gen is None:
            gen = np.random.default_rng(np.random.SeedSequence(
                self.root_seed, spawn_key=(*self.prefix, _WHOLE_TOY)))
            self.__dict__["_whole_toy"] = gen
        return getattr(gen, name)


def as_streams(rng: np.random.Generator | DataStreams) -> DataStreams:
    """``rng`` itself if it is a :class:`DataStreams`, else streams seeded from one draw of it
    (so that ``model.sample(values, np.random.default_rng(s))`` keeps working)."""
    if isinstance(rng, DataStreams):
        return rng
    return DataStreams(int(rng.integers(2**63)), ())
