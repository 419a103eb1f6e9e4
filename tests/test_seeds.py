"""Common random numbers (toyengine.study.seeds, toyengine.core.streams): Poisson counts
by inverse CDF, prefix-stable per-component streams, variant-free data keys, and what that
means for generated data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import special, stats

from toyengine.core.streams import DataStreams, as_streams, component_id, poisson_quantile
from toyengine.models.tcc import build_tcc
from toyengine.study.seeds import DATA, DATA_UNPAIRED, data_streams, fit_rng, model_rng


def test_poisson_quantile_is_the_inverse_cdf_and_monotone_in_the_mean() -> None:
    rng = np.random.default_rng(1)
    us = np.concatenate([rng.random(300), [1e-12, 0.5, 1 - 1e-12]])
    means = np.array([0.0, 0.3, 4.0, 117.0, 700.0, 5000.0])
    for u in us:
        ks = [poisson_quantile(float(u), float(m)) for m in means]
        assert all(b >= a for a, b in itertools.pairwise(ks)), (u, ks)
        for m, k in zip(means[1:], ks[1:], strict=True):
            # smallest k with CDF(k) >= u
            assert stats.poisson.cdf(k, m) >= u
            assert k == 0 or stats.poisson.cdf(k - 1, m) < u


def test_poisson_quantile_at_u_one() -> None:
    # the largest uniform, 1 - 2^-53, plus the 2^-54 that keeps u above zero rounds to 1.0,
    # where scipy's pdtrik is NaN (it raised ValueError): the smallest k with CDF(k) = 1
    u = (1.0 - 2.0**-53) + 2.0**-54
    assert u == 1.0
    for m in (4.0, 117.0):
        k = poisson_quantile(u, m)
        assert special.pdtr(k, m) >= 1.0 > special.pdtr(k - 1, m)


def _quantile_by_search(u: float, m: float) -> int:
    """The search poisson_quantile does above its table's means: pdtr one k at a time."""
    k = 0
    while special.pdtr(k, m) < u:
        k += 1
    return k


def test_poisson_quantile_table_gives_the_counts_of_the_search() -> None:
    # the table of P(N <= k) a mean keeps must give the same count as searching pdtr one k
    # at a time, also for uniforms exactly on, just below and just above a table entry
    # (where a search through another CDF evaluation would round differently), at u = 1 and
    # at the smallest u
    from toyengine.core.streams import _poisson_cdf

    rng = np.random.default_rng(3)
    for m in (1e-3, 0.5, 3.7, 117.0, 700.0, 9999.0):
        table = _poisson_cdf(m)
        assert table is not None and table[-1] == 1.0 and table[-2] < 1.0
        us = [*rng.random(200), 1.0, 2.0**-54]
        for k in (0, 1, len(table) // 2, len(table) - 2, len(table) - 1):
            us += [table[k], np.nextafter(table[k], 0.0), np.nextafter(table[k], 2.0)]
        for u in us:
            if 0.0 < u <= 1.0:
                assert poisson_quantile(float(u), m) == _quantile_by_search(float(u), m), (m, u)
    assert _poisson_cdf(2e4) is None  # above the table's means: pdtrik and the search
    # a mean is tabled from its second toy on, not for one met once
    m = 123.4567
    before = _poisson_cdf.cache_info().misses
    poisson_quantile(0.5, m)
    assert _poisson_cdf.cache_info().misses == before
    poisson_quantile(0.5, m)
    assert _poisson_cdf.cache_info().misses == before + 1
    u = float(rng.random())
    assert poisson_quantile(u, 2e4) == _quantile_by_search(u, 2e4)


def test_streams_are_numpys_seed_sequences() -> None:
    # DataStreams hashes the entropy numpy assembles from (root, spawn_key) itself
    # (streams_kernels): the same PCG64 seed and numbers as SeedSequence(root,
    # spawn_key=...) for roots of one to six 32-bit words and keys with zero and multi-word
    # entries
    rng = np.random.default_rng(8)
    roots = [0, 1, 2**32 - 1, 2**32, 20211, 2**63 + 5, 2**190 + 3] + [
        int(rng.integers(2**62)) for _ in range(20)]
    prefixes = [(), (0,), (1, 2**32), (2**40 + 7, 3, 0), (2**32 - 1,)]
    for root in roots:
        for prefix in prefixes:
            streams = DataStreams(root, prefix)
            for name in ("signal", "bkg"):
                for slot in (0, 1):
                    ref = np.random.SeedSequence(
                        root, spawn_key=(*prefix, component_id(name), slot))
                    ours = streams._seed(name, slot)  # the compiled hash's PCG64 seed
                    np.testing.assert_array_equal(ours.generate_state(4, np.uint64),
                                                  ref.generate_state(4, np.uint64))
                    assert (streams._generator(name, slot).random()
                            == np.random.default_rng(ref).random())
            ref_events = np.random.default_rng(np.random.SeedSequence(
                root, spawn_key=(*prefix, component_id("signal"), 1))).random(5)
            np.testing.assert_array_equal(streams.events("signal").random(5), ref_events)
    with pytest.raises(ValueError, match="non-negative"):
        DataStreams(-1, ())
    # the precomputed seed is PCG64's four 64-bit words and nothing else
    with pytest.raises(ValueError, match="PCG64's seed"):
        DataStreams(1, ())._seed("signal", 0).generate_state(8)


def test_counts_follow_poisson() -> None:
    # 4000 toys' counts at mean 117: sample mean within 4 standard errors (sqrt(117/4000))
    counts = np.array([data_streams(5, t).count("signal", 117.0) for t in range(4000)])
    assert abs(counts.mean() - 117.0) < 4 * np.sqrt(117.0 / 4000)
    assert abs(counts.var(ddof=1) / 117.0 - 1) < 4 * np.sqrt(2 / 4000)


def test_keys_are_variant_free_when_paired_and_distinct_otherwise() -> None:
    a = data_streams(3, 10).events("signal").random(5)
    b = data_streams(3, 10).events("signal").random(5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, data_streams(3, 11).events("signal").random(5))
    assert not np.array_equal(a, data_streams(3, 10).events("background").random(5))
    u0 = data_streams(3, 10, variant=0).events("signal").random(5)
    u1 = data_streams(3, 10, variant=1).events("signal").random(5)
    assert not np.array_equal(u0, u1)
    assert not np.array_equal(a, u0)
    assert data_streams(3, 10).prefix == (DATA, 10)
    assert data_streams(3, 10, variant=0).prefix == (DATA_UNPAIRED, 0, 10)
    assert component_id("signal") == component_id("signal") != component_id("background")
    # model and fit streams: distinct domains, reproducible
    assert model_rng(3, 1).random() == model_rng(3, 1).random() != model_rng(3, 2).random()
    assert fit_rng(3, 4, 0).random() != fit_rng(3, 4, 0, variant=2).random()


def test_event_streams_are_prefix_stable() -> None:
    s = data_streams(9, 2)
    short = s.events("signal").random(7)
    long = s.events("signal").random(100)
    np.testing.assert_array_equal(short, long[:7])


@pytest.fixture(scope="module")
def tcc():
    return build_tcc({"range": [-4.0, 11.0]})


def test_tcc_sample_is_prefix_stable_in_the_yield(tcc) -> None:
    x = tcc.parameters.values.copy()
    names = tcc.parameters.names
    streams = DataStreams(21, (DATA, 0))
    lo = tcc.sample(x, streams)
    x2 = x.copy()
    x2[names.index("n_sig")] = 3 * x[names.index("n_sig")]
    hi = tcc.sample(x2, streams)
    n_lo = streams.count("signal", x[names.index("n_sig")])
    n_hi = streams.count("signal", x2[names.index("n_sig")])
    assert n_hi > n_lo  # same uniform, larger mean: larger count
    # signal comes first; the first n_lo signal events agree, the background is identical
    np.testing.assert_array_equal(lo[:n_lo], hi[:n_lo])
    np.testing.assert_array_equal(lo[n_lo:], hi[n_hi:])


def test_same_model_same_streams_gives_identical_data_and_generator_rng_still_works(tcc) -> None:
    x = tcc.parameters.values
    a = tcc.sample(x, data_streams(4, 3))
    b = build_tcc({"range": [-4.0, 11.0], "background_order": 2}).sample(x, data_streams(4, 3))
    np.testing.assert_array_equal(a, b)
    c = tcc.sample(x, np.random.default_rng(8))
    d = tcc.sample(x, np.random.default_rng(8))
    np.testing.assert_array_equal(c, d)
    assert isinstance(as_streams(np.random.default_rng(8)), DataStreams)


def test_shared_streams_couple_two_resolutions_by_their_quantiles(tcc) -> None:
    # the signal events of two resolution models drawn with the same uniforms are the same
    # quantiles of two close densities: the event-by-event difference is far smaller than
    # the spread of the sample (independent draws would differ by ~sqrt(2) x the spread)
    alt = build_tcc({"range": [-4.0, 11.0], "resolution": "student_t"})
    x = tcc.parameters.values
    s = data_streams(12, 0)
    n = s.count("signal", x[tcc.parameters.names.index("n_sig")])
    a, b = tcc.sample(x, s)[:n], alt.sample(x, s)[:n]
    assert np.std(a - b) < 0.2 * np.std(a)
