"""numpy's ``SeedSequence`` hash, compiled (numba, ``cache=True``): the PCG64 seed of one of
a toy's streams (:class:`~toyengine.core.streams.DataStreams`) from the pool its key's first
words leave, without building a ``SeedSequence`` per stream.

The algorithm is numpy's (``numpy/random/bit_generator.pyx``: ``SeedSequence.mix_entropy``
and ``generate_state``, after M. E. O'Neill's ``seed_seq`` replacement,
https://www.pcg-random.org/posts/developing-a-seed_seq-alternative.html), in 32-bit unsigned
arithmetic. Its hash constant advances the same way whatever the words are, so the pool after
a key's leading words can be kept and the last words mixed in per stream: the same state,
bit for bit (``tests/test_seeds.py`` compares it with numpy's for random keys).

Imported by :mod:`toyengine.core.streams` on a toy's first stream, never by
``import toyengine``; a worker's start-up loads it (:func:`load`).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["absorb", "load", "pcg64_seed"]

_INIT_A = np.uint32(0x43B0D7E5)
_MULT_A = np.uint32(0x931E8875)
_INIT_B = np.uint32(0x8B51F9DD)
_MULT_B = np.uint32(0x58F38DED)
_MIX_MULT_L = np.uint32(0xCA01F9DD)
_MIX_MULT_R = np.uint32(0x4973F715)
_XSHIFT = np.uint32(16)
#: numpy's pool size (32-bit words)
POOL_SIZE = 4


@numba.njit(cache=True)
def _hashmix(value: np.uint32, hash_const: np.uint32) -> tuple[np.uint32, np.uint32]:
    value = np.uint32(value ^ hash_const)
    hash_const = np.uint32(hash_const * _MULT_A)
    value = np.uint32(value * hash_const)
    value = np.uint32(value ^ (value >> _XSHIFT))
    return value, hash_const


@numba.njit(cache=True)
def _mix(x: np.uint32, y: np.uint32) -> np.uint32:
    result = np.uint32(np.uint32(_MIX_MULT_L * x) - np.uint32(_MIX_MULT_R * y))
    return np.uint32(result ^ (result >> _XSHIFT))


@numba.njit(cache=True)
def absorb(words: np.ndarray) -> tuple[np.ndarray, np.uint32]:
    """The pool and hash constant after ``SeedSequence.mix_entropy`` of ``words`` (at least
    :data:`POOL_SIZE` 32-bit words): the state from which more words are mixed in by
    :func:`pcg64_seed`."""
    pool = np.zeros(POOL_SIZE, dtype=np.uint32)
    h = _INIT_A
    for i in range(POOL_SIZE):
        pool[i], h = _hashmix(np.uint32(words[i]), h)
    for i_src in range(POOL_SIZE):
        for i_dst in range(POOL_SIZE):
            if i_src != i_dst:
                v, h = _hashmix(pool[i_src], h)
                pool[i_dst] = _mix(pool[i_dst], v)
    for i_src in range(POOL_SIZE, words.shape[0]):
        for i_dst in range(POOL_SIZE):
            v, h = _hashmix(np.uint32(words[i_src]), h)
            pool[i_dst] = _mix(pool[i_dst], v)
    return pool, h


@numba.njit(cache=True)
def pcg64_seed(pool: np.ndarray, hash_const: np.uint32, w1: int, w2: int) -> np.ndarray:
    """``generate_state(4, uint64)`` of the ``SeedSequence`` whose entropy is the words
    :func:`absorb` took followed by the 32-bit words ``w1`` and ``w2``: what ``PCG64`` seeds
    itself from."""
    p = pool.copy()
    h = hash_const
    for w in (w1, w2):
        for i_dst in range(POOL_SIZE):
            v, h = _hashmix(np.uint32(w), h)
            p[i_dst] = _mix(p[i_dst], v)
    out = np.empty(8, dtype=np.uint32)
    hb = _INIT_B
    for i in range(8):
        d = np.uint32(p[i % POOL_SIZE] ^ hb)
        hb = np.uint32(hb * _MULT_B)
        d = np.uint32(d * hb)
        out[i] = np.uint32(d ^ (d >> _XSHIFT))
    return out.view(np.uint64)


def load() -> None:
    """Load the kernels from numba's cache (compiling them the first time)."""
    pool, h = absorb(np.zeros(POOL_SIZE + 1, dtype=np.uint32))
    pcg64_seed(pool, h, 0, 1)
