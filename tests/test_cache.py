"""BlockCache: conformance for every policy x write mode x read-ahead, policy behaviour, stats, costs."""
from __future__ import annotations

import itertools
import time

import pytest

from sdbench.cache import BlockCache, CacheConfig, LrucPolicy
from sdbench.clock import VirtualClock, WallClock
from sdbench.errors import ConfigError
from sdbench.media import Geometry, MemoryDevice, TraceDevice
from sdbench.options import from_mapping
from sdbench.testing import BlockDeviceSuite

SS = 512
POLICY_NAMES = ("lru", "lruc", "arc", "2q")
MATRIX = list(itertools.product(POLICY_NAMES, ("write-back", "write-through"), (0, 4)))


def _id(p: tuple) -> str:
    return f"{p[0]}-{p[1]}-ra{p[2]}"


class TestCacheConformance(BlockDeviceSuite):
    @pytest.fixture(autouse=True, params=MATRIX, ids=_id)
    def _cfg(self, request):
        policy, mode, ra = request.param
        self.cfg = CacheConfig(blocks=16, policy=policy, write_mode=mode, read_ahead_blocks=ra)

    def make_device(self):
        return BlockCache(MemoryDevice.of_size(1 << 20), self.cfg)


class TestCacheConformanceErasable(BlockDeviceSuite):
    @pytest.fixture(autouse=True, params=[("lruc", "write-back", 2), ("arc", "write-through", 0)], ids=_id)
    def _cfg(self, request):
        policy, mode, ra = request.param
        self.cfg = CacheConfig(blocks=8, policy=policy, write_mode=mode, read_ahead_blocks=ra,
                               pinned_lba_ranges=((0, 2),))

    def make_device(self):
        return BlockCache(MemoryDevice(Geometry(sector_size=512, sector_count=4096, erase_size=4096,
                                                erase_value=0xFF)), self.cfg)


class TestCacheConformanceWideBlocks(BlockDeviceSuite):
    """Inner read/prog unit larger than a sector: a cache block spans several sectors."""

    @pytest.fixture(autouse=True, params=[("2q", "write-back", 1), ("lru", "write-through", 1)], ids=_id)
    def _cfg(self, request):
        policy, mode, ra = request.param
        self.cfg = CacheConfig(blocks=6, policy=policy, write_mode=mode, read_ahead_blocks=ra)

    def make_device(self):
        return BlockCache(MemoryDevice(Geometry(sector_size=512, sector_count=1024, read_size=2048, prog_size=1024,
                                                erase_size=4096, erase_value=0xFF)), self.cfg)


# ---- helpers -------------------------------------------------------------------------------

def _stack(blocks: int = 8, sectors: int = 256, geometry: Geometry | None = None, **kw):
    mem = MemoryDevice(geometry or Geometry(sector_size=SS, sector_count=sectors))
    trace = TraceDevice(mem)
    return BlockCache(trace, CacheConfig(blocks=blocks, **kw)), trace, mem


def _blk(v: int, n: int = 1) -> bytes:
    return bytes([v & 0xFF]) * (SS * n)


def _ops(trace: TraceDevice, kind: str | None = None) -> list[tuple[str, int, int]]:
    return [(e.op, e.lba, e.count) for e in trace.ops() if kind is None or e.op == kind]


def _read_each(cache: BlockCache, lbas) -> None:
    for lba in lbas:
        cache.read(lba, 1)


# ---- policies ------------------------------------------------------------------------------

def test_lru_evicts_least_recently_used():
    cache, trace, _ = _stack(blocks=3, policy="lru")
    _read_each(cache, [0, 1, 2, 0, 3])  # 0 was re-used, so 1 is the oldest
    assert not cache.is_cached(1)
    assert all(cache.is_cached(b) for b in (0, 2, 3))
    assert cache.cache_stats.evictions == 1
    trace.clear()
    cache.read(0, 1)
    assert _ops(trace) == []


def test_lruc_evicts_a_clean_block_before_a_dirty_one():
    res = {}
    for policy in ("lru", "lruc"):
        cache, trace, _ = _stack(blocks=4, policy=policy)
        for b in (1, 2, 3):
            cache.write(b, _blk(b))
        cache.read(0, 1)  # clean, and the most recently used
        cache.read(4, 1)
        res[policy] = (cache.is_cached(0), cache.is_cached(1), _ops(trace, "write"))
    assert res["lru"] == (True, False, [("write", 1, 3)])  # LRU victim 1 was dirty: written (its run)
    assert res["lruc"] == (False, True, [])                # LRUC dropped clean block 0 instead


def test_lruc_flushes_everything_first_when_nothing_is_clean():
    cache, trace, mem = _stack(blocks=4, policy="lruc")
    for b in (3, 0, 2, 1):
        cache.write(b, _blk(b + 1))
    cache.read(9, 1)
    assert _ops(trace, "write") == [("write", 0, 4)]  # one sorted, coalesced flush
    assert not cache.is_cached(3)                      # then the least recently used goes
    assert all(cache.is_cached(b) for b in (0, 1, 2, 9))
    assert cache.dirty_blocks == 0
    assert mem.read(0, 4) == b"".join(_blk(b + 1) for b in range(4))


def test_lruc_keeps_recency_order_across_a_flush():
    cache, _, _ = _stack(blocks=4, policy="lruc")
    cache.read(0, 1)
    cache.write(1, _blk(1))
    cache.read(2, 1)
    cache.write(3, _blk(3))
    cache.sync()  # 1 and 3 become clean in their true recency position: order 0, 1, 2, 3
    _read_each(cache, [10, 11])
    assert not cache.is_cached(0) and not cache.is_cached(1)
    assert cache.is_cached(2) and cache.is_cached(3)


def _working_set_after_scan(policy: str, warm) -> int:
    cache, _, _ = _stack(blocks=8, sectors=4096, policy=policy)
    ws = [0, 1, 2, 3]
    warm(cache, ws)
    _read_each(cache, range(1000, 1040))  # one-pass scan, 5x the cache
    before = cache.cache_stats.hits
    _read_each(cache, ws)
    return cache.cache_stats.hits - before


def _warm_twice(cache, ws):
    _read_each(cache, ws)
    _read_each(cache, ws)


def _warm_2q(cache, ws):
    # 2Q promotes a block re-used after it left A1in (a "distant" second use)
    _read_each(cache, ws)
    _read_each(cache, range(500, 508))
    _read_each(cache, ws)


def test_scan_flushes_the_working_set_from_lru_but_not_from_arc():
    assert _working_set_after_scan("lru", _warm_twice) == 0
    assert _working_set_after_scan("lruc", _warm_twice) == 0
    assert _working_set_after_scan("arc", _warm_twice) == 4


def test_2q_resists_scans():
    assert _working_set_after_scan("lru", _warm_2q) == 0
    assert _working_set_after_scan("2q", _warm_2q) == 4


def test_2q_correlated_hits_in_a1in_do_not_promote():
    cache, _, _ = _stack(blocks=8, sectors=4096, policy="2q")
    _warm_twice(cache, [0, 1, 2, 3])  # both uses while in A1in: still "seen once"
    assert cache.policy.state()["am"] == 0


def test_arc_ghost_hit_moves_the_target_towards_recency():
    cache, _, _ = _stack(blocks=4, policy="arc")
    arc = cache.policy
    _warm_twice(cache, [0, 1])            # T2 = {0, 1}
    _read_each(cache, [10, 11, 12])       # 12 pushes 10 from T1 into ghost list B1
    assert 10 in arc.b1 and arc.p == 0
    cache.read(10, 1)                     # a B1 ghost hit: T1 should have been larger
    assert arc.p > 0
    assert 10 in arc.t2


def test_arc_ghost_hit_in_b2_moves_the_target_towards_frequency():
    cache, _, _ = _stack(blocks=4, policy="arc")
    arc = cache.policy
    _warm_twice(cache, [0, 1, 2])         # T2 = {0, 1, 2}
    arc.p = 4.0                           # as if recency had been winning
    _read_each(cache, [10, 11])           # with T1 under target, T2's LRU (0) becomes a B2 ghost
    assert 0 in arc.b2
    cache.read(0, 1)                      # a B2 ghost hit: T2 should have been larger
    assert arc.p < 4.0 and 0 in arc.t2


# ---- write-back, write-through ------------------------------------------------------------------

def test_write_back_flush_is_sorted_and_coalesced():
    cache, trace, mem = _stack(blocks=32)
    for b in (9, 3, 20, 4, 5, 10, 7):
        cache.write(b, _blk(b))
    assert _ops(trace) == []
    cache.sync()
    assert _ops(trace) == [("write", 3, 3), ("write", 7, 1), ("write", 9, 2), ("write", 20, 1), ("sync", 0, 0)]
    assert cache.cache_stats.flushes == 4 and cache.cache_stats.flushed_blocks == 7
    for b in (9, 3, 20, 4, 5, 10, 7):
        assert mem.read(b, 1) == _blk(b)
    trace.clear()
    cache.sync()  # nothing dirty any more
    assert _ops(trace) == [("sync", 0, 0)]


def test_rewrites_of_a_dirty_block_reach_the_device_once():
    cache, trace, mem = _stack(blocks=8)
    for v in range(5):
        cache.write(2, _blk(v))
    cache.sync()
    assert _ops(trace, "write") == [("write", 2, 1)]
    assert mem.read(2, 1) == _blk(4)


@pytest.mark.parametrize("mode,expect", [("run", [("write", 0, 4)]), ("block", [("write", 0, 1)])])
def test_evicting_a_dirty_block_writes_its_run_or_only_itself(mode, expect):
    cache, trace, _ = _stack(blocks=4, policy="lru", evict_flush=mode)
    for b in range(4):
        cache.write(b, _blk(b))
    cache.read(10, 1)
    assert _ops(trace, "write") == expect


def test_write_through_writes_at_once_and_updates_the_cache():
    cache, trace, mem = _stack(blocks=8, write_mode="write-through")
    cache.write(4, _blk(1, 3))
    assert _ops(trace) == [("write", 4, 3)]
    assert mem.read(4, 3) == _blk(1, 3)
    assert cache.dirty_blocks == 0
    trace.clear()
    assert cache.read(4, 3) == _blk(1, 3)
    assert _ops(trace) == []
    cache.sync()
    assert _ops(trace) == [("sync", 0, 0)]


def test_write_through_passes_the_callers_buffer_address():
    cache, trace, _ = _stack(write_mode="write-through")
    cache.write(1, _blk(1), buf_addr=0x3FFB0002)
    cache.read(40, 1, buf_addr=0x3FFB0002)
    assert [e.buf_addr for e in trace.ops()] == [0x3FFB0002, 0]  # cache reads land in its own buffers


def test_multi_block_read_serves_cached_blocks_and_reads_missing_runs():
    cache, trace, _ = _stack(blocks=16)
    cache.read(2, 2)
    trace.clear()
    cache.read(0, 8)
    assert _ops(trace) == [("read", 0, 2), ("read", 4, 4)]
    s = cache.cache_stats
    assert (s.hits, s.misses) == (2, 8)


def test_multi_block_write_back_is_one_inner_write():
    cache, trace, mem = _stack(blocks=16)
    cache.write(100, _blk(7, 8))
    cache.sync()
    assert _ops(trace, "write") == [("write", 100, 8)]
    assert mem.read(100, 8) == _blk(7, 8)


def test_close_flushes_dirty_blocks():
    cache, _, mem = _stack()
    cache.write(5, _blk(9))
    cache.close()
    assert mem.read_bytes(5 * SS, SS) == _blk(9)


# ---- erase, trim ------------------------------------------------------------------------------

def test_erase_drops_dirty_data_and_reads_back_erased():
    g = Geometry(sector_size=SS, sector_count=256, erase_size=4 * SS, erase_value=0xFF)
    cache, trace, _ = _stack(blocks=8, geometry=g)
    cache.write(4, _blk(1, 2))
    cache.erase(4, 4)
    assert _ops(trace) == [("erase", 4, 4)]  # the dirty data never reached the device
    assert cache.cache_stats.dropped_dirty == 2 and cache.cache_stats.invalidated == 2
    assert cache.read(4, 4) == b"\xff" * (4 * SS)


def test_trim_invalidates_and_passes_down():
    cache, trace, mem = _stack(blocks=8)
    cache.read(3, 1)
    cache.write(5, _blk(1))
    cache.trim(3, 4)
    assert _ops(trace)[-1] == ("trim", 3, 4)
    assert not cache.is_cached(3) and not cache.is_cached(5)
    assert cache.cache_stats.dropped_dirty == 1
    assert mem.read(5, 1) == bytes(SS)  # trimmed data is undefined; the cache did not write it


def test_erase_of_a_whole_card_walks_the_cache_not_the_range():
    cache, _, _ = _stack(blocks=8, sectors=1 << 24)
    cache.write(7, _blk(1))
    t = time.perf_counter()
    cache.erase(0, 1 << 24)
    assert time.perf_counter() - t < 0.5
    assert cache.resident_blocks == 0


def test_partial_erase_of_a_wide_block_keeps_the_rest():
    # cache blocks of 2 sectors (read unit 1024 B), erase unit 1 sector
    g = Geometry(sector_size=SS, sector_count=64, read_size=2 * SS, erase_value=0xEE)
    cache, _, mem = _stack(blocks=4, geometry=g)
    cache.write(4, _blk(1, 2))
    cache.erase(5, 1)
    cache.sync()
    assert mem.read(4, 2) == _blk(1) + b"\xee" * SS
    assert cache.read(4, 2) == _blk(1) + b"\xee" * SS


# ---- read-ahead -------------------------------------------------------------------------------

def test_read_ahead_is_one_inner_read_and_counts_use():
    cache, trace, _ = _stack(blocks=16, read_ahead_blocks=4)
    cache.read(0, 1)
    assert _ops(trace) == [("read", 0, 5)]
    cache.read(1, 2)
    s = cache.cache_stats
    assert (s.read_ahead_blocks, s.read_ahead_used, s.read_ahead_wasted) == (4, 2, 0)
    assert s.read_ahead_pending == 2
    cache.erase(3, 2)  # two prefetched blocks dropped unread
    assert (s.read_ahead_used, s.read_ahead_wasted, s.read_ahead_pending) == (2, 2, 0)


def test_read_ahead_clips_at_the_device_end_and_at_cached_blocks():
    cache, trace, _ = _stack(blocks=16, sectors=64, read_ahead_blocks=4)
    cache.read(62, 1)
    cache.read(10, 1)
    cache.read(8, 1)
    assert _ops(trace) == [("read", 62, 2), ("read", 10, 5), ("read", 8, 2)]
    assert cache.cache_stats.read_ahead_blocks == 1 + 4 + 1


def test_read_ahead_evicted_unread_is_wasted():
    cache, _, _ = _stack(blocks=4, read_ahead_blocks=3)
    cache.read(0, 1)
    cache.read(100, 1)
    s = cache.cache_stats
    assert (s.read_ahead_blocks, s.read_ahead_used, s.read_ahead_wasted) == (6, 0, 3)


def test_read_ahead_overwritten_unread_is_wasted():
    cache, _, _ = _stack(blocks=8, read_ahead_blocks=2)
    cache.read(0, 1)
    cache.write(1, _blk(3))
    assert cache.cache_stats.read_ahead_wasted == 1
    assert cache.read(1, 1) == _blk(3)


def test_read_ahead_does_not_count_as_a_second_use_for_arc():
    cache, _, _ = _stack(blocks=16, policy="arc", read_ahead_blocks=4)
    _read_each(cache, range(0, 10))  # sequential: demand + prefetched blocks, each read once
    assert len(cache.policy.t2) == 0


# ---- pinned -----------------------------------------------------------------------------------

def test_pinned_blocks_are_never_evicted():
    for policy in POLICY_NAMES:
        cache, trace, _ = _stack(blocks=4, sectors=4096, policy=policy, pinned_lba_ranges=[[0, 2]])
        _read_each(cache, [0, 1])
        _read_each(cache, range(100, 160))
        cache.write(200, _blk(1, 20))
        trace.clear()
        _read_each(cache, [0, 1])
        assert _ops(trace) == [], policy
        assert cache.resident_blocks <= 4


def test_dirty_pinned_blocks_are_flushed_at_sync():
    cache, trace, mem = _stack(blocks=4, pinned_lba_ranges=[[10, 2]])
    cache.write(10, _blk(5, 2))
    _read_each(cache, range(20, 40))
    assert _ops(trace, "write") == []
    cache.sync()
    assert _ops(trace, "write") == [("write", 10, 2)]
    assert mem.read(10, 2) == _blk(5, 2)


# ---- host cost --------------------------------------------------------------------------------

def test_host_cost_is_charged_on_a_virtual_clock():
    vc = VirtualClock()
    mem = MemoryDevice(Geometry(sector_size=SS, sector_count=2048), vc)
    cache = BlockCache(mem, CacheConfig(blocks=8, lookup_cycles=100, copy_cycles_per_byte=1.0, cpu_hz=100_000_000))
    cache.read(0, 2)                       # 2 lookups + 1024 B copied = 1224 cycles at 10 ns
    assert vc.breakdown_ns() == {"host": 12_240}
    cache.write(0, _blk(1))                # 1 lookup + 512 B = 612 cycles
    cache.sync()                           # 1 flushed block = 100 cycles
    assert vc.breakdown_ns() == {"host": 12_240 + 6_120 + 1_000}
    assert vc.now_ns() == 19_360


def test_host_cost_fractions_of_a_nanosecond_add_up():
    vc = VirtualClock()
    mem = MemoryDevice(Geometry(sector_size=SS, sector_count=64), vc)
    cache = BlockCache(mem, CacheConfig(blocks=8, lookup_cycles=1, copy_cycles_per_byte=0.0, cpu_hz=3_000_000_000))
    for _ in range(3000):
        cache.read(0, 1)                   # 1/3 ns each
    assert vc.now_ns() == 1000


class _NoAdvanceWallClock(WallClock):
    def advance_ns(self, ns, category="other"):  # pragma: no cover - must not be called
        raise AssertionError("a wall clock must not be charged")


def test_no_host_cost_on_a_wall_clock():
    mem = MemoryDevice(Geometry(sector_size=SS, sector_count=2048), _NoAdvanceWallClock())
    cache = BlockCache(mem, CacheConfig(blocks=4, read_ahead_blocks=2))
    cache.write(0, _blk(1, 8))
    cache.read(0, 8)
    cache.sync()
    assert cache.clock.kind == "wall"


# ---- config -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,msg", [
    ({"blocks": -1}, "cache.blocks = -1"),
    ({"policy": "mru"}, "cache.policy = 'mru' is not one of"),
    ({"write_mode": "lazy"}, "cache.write_mode"),
    ({"read_ahead_blocks": -1}, "cache.read_ahead_blocks"),
    ({"cpu_hz": 0}, "cache.cpu_hz"),
    ({"pinned_lba_ranges": [[5]]}, "cache.pinned_lba_ranges[0]"),
    ({"pinned_lba_ranges": [[5, 0]]}, "cache.pinned_lba_ranges[0]"),
    ({"pinned_lba_ranges": [[-1, 2]]}, "cache.pinned_lba_ranges[0]"),
])
def test_bad_config_is_one_clear_line(kw, msg):
    with pytest.raises(ConfigError) as e:
        CacheConfig(**kw)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_config_from_toml_table():
    cfg = from_mapping(CacheConfig, {"blocks": 32, "policy": "2q", "read_ahead_blocks": 4,
                                     "write_mode": "write-through", "pinned_lba_ranges": [[0, 8], [100, 2]],
                                     "lookup_cycles": 50}, "cache")
    assert cfg.pinned_lba_ranges == ((0, 8), (100, 2))
    assert cfg.policy == "2q" and cfg.write_mode == "write-through"
    with pytest.raises(ConfigError, match="cache.blocks"):
        from_mapping(CacheConfig, {"blocks": -1}, "cache")
    with pytest.raises(ConfigError, match="unknown option cache.size"):
        from_mapping(CacheConfig, {"size": 8}, "cache")


def test_pinned_ranges_must_fit_the_cache_and_the_device():
    mem = MemoryDevice.of_size(1 << 20)
    with pytest.raises(ConfigError, match="leave no room"):
        BlockCache(mem, CacheConfig(blocks=4, pinned_lba_ranges=[[0, 4]]))
    with pytest.raises(ConfigError, match="past the device"):
        BlockCache(mem, CacheConfig(blocks=4, pinned_lba_ranges=[[2047, 2]]))


def test_describe_includes_the_config_and_the_device_below():
    cache, _, _ = _stack(blocks=12, policy="arc", read_ahead_blocks=2)
    d = cache.describe()
    assert d["kind"] == "cache"
    assert d["cache"]["blocks"] == 12 and d["cache"]["policy"] == "arc"
    assert d["cache"]["read_ahead_blocks"] == 2 and d["cache"]["block_bytes"] == SS
    assert d["below"]["kind"] == "memory"


def test_stats_reset_and_snapshot():
    cache, _, _ = _stack()
    cache.read(0, 1)
    cache.read(0, 1)
    assert cache.cache_stats.hit_ratio == 0.5
    snap = cache.cache_stats.snapshot()
    assert snap["hits"] == 1 and snap["misses"] == 1
    cache.cache_stats.reset()
    assert cache.cache_stats.snapshot() == dict.fromkeys(snap, 0)


# ---- policy internals ---------------------------------------------------------------------------

def test_lruc_policy_discard_and_capacity():
    p = LrucPolicy(2)
    assert p.admit(1) is None and p.admit(2) is None
    p.set_dirty(1)
    p.set_dirty(2)
    assert p.must_flush_to_admit()
    p.discard(2)
    assert not p.must_flush_to_admit() and len(p) == 1


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_many_ops_stay_fast(policy):
    import random

    rng = random.Random(1)
    cache, _, _ = _stack(blocks=64, sectors=1 << 14, policy=policy, read_ahead_blocks=2)
    t = time.perf_counter()
    for _ in range(20_000):
        lba = int(rng.paretovariate(1.2)) % (1 << 14)
        if rng.random() < 0.3:
            cache.write(lba, _blk(lba))
        else:
            cache.read(lba, 1)
    cache.sync()
    assert time.perf_counter() - t < 5.0


def test_read_ahead_into_a_pinned_block_counts_as_used():
    cache, _, _ = _stack(blocks=8, read_ahead_blocks=2, pinned_lba_ranges=[[1, 1]])
    cache.read(0, 1)
    cache.read(1, 1)
    s = cache.cache_stats
    assert (s.read_ahead_blocks, s.read_ahead_used, s.read_ahead_pending) == (2, 1, 1)


def test_zero_blocks_is_no_cache_and_never_a_cache_of_nothing(tmp_path):
    """A sweep grid says "no cache" with sd.cache.blocks = 0: the stack is built without one."""
    from sdbench import scenarios as scen
    from sdbench.cache import BlockCache
    from sdbench.media.memory import MemoryDevice

    sc = scen.load("logger-sd-fat-pauses", ["sd.cache.blocks=0", 'sd.cache.write_mode="write-through"'])
    assert sc.cache_config() is None
    built = sc.build()
    try:
        assert built.sd_cache is None and not isinstance(built.target.sd_device, BlockCache)
    finally:
        built.close()
    with_cache = scen.load("logger-sd-fat-pauses", ["sd.cache.blocks=8"])
    assert with_cache.cache_config().blocks == 8
    with pytest.raises(ConfigError, match="cache.blocks = 0 means no cache"):
        BlockCache(MemoryDevice.of_size(1 << 20), CacheConfig(blocks=0))


def test_read_ahead_larger_than_the_cache_is_refused():
    """Issue 32, defect 5: read_ahead_blocks = 4095 with a 64-block cache made every 512-byte read fetch 4096
    blocks (93 s instead of 1.7 s); the read-ahead and the block it follows must fit the cache."""
    from sdbench import scenarios as scen
    from sdbench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"sd.cache: read_ahead_blocks = 4095 blocks does not fit a 64-block cache"):
        scen.load("sdfat-bench-esp32c3-sdspi", ["sd.cache.read_ahead_blocks=4095"])
    with pytest.raises(ConfigError, match="at most 63"):
        scen.load("sdfat-bench-esp32c3-sdspi", ["sd.cache.read_ahead_blocks=64"])
    sc = scen.load("sdfat-bench-esp32c3-sdspi", ["sd.cache.read_ahead_blocks=63"])
    assert sc.cache_config(None).read_ahead_blocks == 63
