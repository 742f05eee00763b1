"""Property: a cache never changes what the device holds or what reads return.

Any sequence of reads, single/multi-block writes, erases and syncs through any
policy, size, read-ahead, write mode and pinning, followed by sync, leaves the
inner device exactly as the same sequence leaves a bare MemoryDevice, and
every read returns what the bare device returns.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdbench.cache import BlockCache, CacheConfig
from sdbench.cache.policies import ArcPolicy, POLICIES, TwoQPolicy
from sdbench.media import Geometry, MemoryDevice

GEOMETRIES = [
    # one sector per cache block
    Geometry(sector_size=16, sector_count=40),
    Geometry(sector_size=8, sector_count=60, erase_size=32, erase_value=0xFF),
    # cache blocks of 2 sectors (read == prog unit)
    Geometry(sector_size=16, sector_count=48, read_size=32, prog_size=32, erase_size=64, erase_value=0xFF),
    # cache blocks of 3 sectors: writes and erases cover parts of a block
    Geometry(sector_size=16, sector_count=48, read_size=48, prog_size=16, erase_size=32, erase_value=0xAA),
]


def _op(draw, g: Geometry):
    ss = g.sector_size
    kind = draw(st.sampled_from(["read", "read", "write", "write", "write", "erase", "sync"]))
    if kind == "sync":
        return ("sync",)
    unit = {"read": g.read_size, "write": g.prog_size, "erase": g.erase_size}[kind] // ss
    units = g.sector_count // unit
    first = draw(st.integers(0, units - 1))
    n = draw(st.integers(1, min(units - first, 6)))
    if kind == "write":
        return ("write", first * unit, n * unit, draw(st.integers(0, 2**32)))
    return (kind, first * unit, n * unit)


@st.composite
def scenarios(draw):
    g = draw(st.sampled_from(GEOMETRIES))
    blocks = draw(st.integers(1, 12))
    pinned = ()
    k = max(g.read_size, g.prog_size) // g.sector_size  # sectors per cache block
    if blocks > 2 and draw(st.booleans()):
        first = draw(st.integers(0, g.sector_count - k))
        pinned = ((first, k),)  # one or two cache blocks, always fewer than blocks
    cfg = CacheConfig(
        blocks=blocks,
        policy=draw(st.sampled_from(sorted(POLICIES))),
        read_ahead_blocks=min(draw(st.sampled_from([0, 0, 1, 3, 16])), blocks - 1),  # it must fit the cache
        write_mode=draw(st.sampled_from(["write-back", "write-back", "write-through"])),
        evict_flush=draw(st.sampled_from(["run", "block"])),
        pinned_lba_ranges=pinned,
    )
    ops = [_op(draw, g) for _ in range(draw(st.integers(1, 40)))]
    return g, cfg, ops


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_cache_is_transparent(case):
    g, cfg, ops = case
    model = MemoryDevice(g)
    inner = MemoryDevice(g)
    cache = BlockCache(inner, cfg)
    for op in ops:
        if op[0] == "read":
            assert cache.read(op[1], op[2]) == model.read(op[1], op[2]), op
        elif op[0] == "write":
            data = random.Random(op[3]).randbytes(op[2] * g.sector_size)
            cache.write(op[1], data)
            model.write(op[1], data)
        elif op[0] == "erase":
            cache.erase(op[1], op[2])
            model.erase(op[1], op[2])
        else:
            cache.sync()
        assert cache.resident_blocks <= cfg.blocks
        assert cache._dirty <= cache._data.keys()
        if cfg.write_mode == "write-through":
            assert cache.dirty_blocks == 0
    cache.sync()
    assert cache.dirty_blocks == 0
    size = g.size_bytes
    assert inner.read_bytes(0, size) == model.read_bytes(0, size)
    assert cache.read(0, g.sector_count) == model.read(0, g.sector_count)
    s = cache.cache_stats
    assert s.read_ahead_pending == len(cache._prefetched) >= 0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10), st.sampled_from(["arc", "2q"]),
       st.lists(st.tuples(st.sampled_from(["use", "use", "use", "discard"]), st.integers(0, 30)), max_size=200))
def test_ghost_directories_stay_bounded(cap, name, steps):
    pol = ArcPolicy(cap) if name == "arc" else TwoQPolicy(cap)
    for kind, key in steps:
        if kind == "discard":
            pol.discard(key)
        elif key in pol:
            pol.hit(key)
        else:
            victim = pol.admit(key)
            assert victim is None or (victim != key and victim not in pol)
        assert len(pol) <= cap
        if name == "arc":
            assert 0 <= pol.p <= cap
            assert len(pol.t1) + len(pol.b1) <= cap + 1
            assert len(pol) + len(pol.b1) + len(pol.b2) <= 2 * cap
        else:
            assert len(pol.a1out) <= pol.kout


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_cache_is_transparent_long(case):
    test_cache_is_transparent.hypothesis.inner_test(case)
