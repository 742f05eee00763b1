"""BlockCache: a block cache that is itself a BlockDevice around a BlockDevice.

One cache block holds one sector of the inner device (or, when the inner
device's read/prog unit is larger than a sector, one such unit, so that every
inner op the cache issues stays aligned).  The replacement policy only orders
block numbers (see :mod:`sdbench.cache.policies`); this module owns the data,
the dirty set, pinned blocks, read-ahead and write-back.

Inner ops issued by the cache use the cache's own (driver-owned, aligned)
buffers, so they carry ``buf_addr=0``; write-through passes the caller's
buffer address down, since the data goes straight from it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfigError
from ..media.base import BlockDevice, BlockDeviceWrapper
from ..options import opt, to_mapping
from .policies import POLICIES, Policy, TwoQPolicy

WRITE_MODES = ("write-back", "write-through")
EVICT_FLUSH_MODES = ("run", "block")


@dataclass(frozen=True)
class CacheConfig:
    """Options of a :class:`BlockCache` (TOML table ``[cache]``)."""

    blocks: int = opt(64, unit="blocks", min=0, max=1 << 24,
                      help="cache size in cache blocks (one inner sector each; pinned ones count); 0 = no cache")
    policy: str = opt("lru", choices=tuple(POLICIES),
                      help="replacement policy: lru, lruc (LRU among clean blocks), arc, 2q")
    read_ahead_blocks: int = opt(0, unit="blocks", min=0, max=1 << 16,
                                 help="blocks read after a missed block in the same inner read; 0 = off; less than "
                                      "blocks")
    write_mode: str = opt("write-back", choices=WRITE_MODES,
                          help="write-back: dirty blocks written at sync/eviction; write-through: written at once")
    evict_flush: str = opt("run", choices=EVICT_FLUSH_MODES,
                           help="evicting a dirty block writes its contiguous dirty run (one inner write) "
                                "or only that block")
    pinned_lba_ranges: tuple[tuple[int, ...], ...] = opt(
        (), unit="[LBA, sectors]",
        help="[first_lba, sector_count] ranges whose blocks, once loaded, are never evicted (FAT, superblocks)")
    twoq_in_percent: float = opt(25.0, unit="%", min=1.0, max=99.0,
                                 help="2Q: size of the first-reference FIFO A1in, as a share of the unpinned cache")
    twoq_out_percent: float = opt(50.0, unit="%", min=1.0, max=400.0,
                                  help="2Q: size of the ghost FIFO A1out, relative to the cache")
    lookup_cycles: int = opt(200, unit="cycles", min=0,
                             help="host CPU cycles per block looked up, read ahead, flushed or invalidated")
    copy_cycles_per_byte: float = opt(0.25, unit="cycles/B", min=0.0, max=1_000_000.0,
                                      help="host CPU cycles per byte copied between the caller and the cache")
    cpu_hz: int = opt(240_000_000, unit="Hz", min=1, help="host CPU clock that turns cycles into time")

    def __post_init__(self) -> None:
        # from_mapping checks these too; repeat for direct construction
        for f in fields(self):
            v = getattr(self, f.name)
            m = f.metadata
            unit = f" {m['unit']}" if m.get("unit") and not m["unit"].startswith("[") else ""
            if m.get("choices") is not None and v not in m["choices"]:
                raise ConfigError(f"cache.{f.name} = {v!r} is not one of {', '.join(map(str, m['choices']))}")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if m.get("min") is not None and v < m["min"]:
                    raise ConfigError(f"cache.{f.name} = {v}{unit} is below the minimum {m['min']}{unit}")
                if m.get("max") is not None and v > m["max"]:
                    raise ConfigError(f"cache.{f.name} = {v}{unit} is above the maximum {m['max']}{unit}")
        if self.blocks and self.read_ahead_blocks >= self.blocks:  # (0 blocks: no cache, nothing to read ahead)
            # the missed block and what is read after it must fit the cache, or each read evicts its own read-ahead
            # (ValueError: the option loader names the table)
            raise ValueError(f"read_ahead_blocks = {self.read_ahead_blocks} blocks does not fit a {self.blocks}-block "
                             f"cache with the block it follows (at most {self.blocks - 1})")
        ranges = []
        for i, r in enumerate(self.pinned_lba_ranges):
            ok = isinstance(r, (list, tuple)) and len(r) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) for x in r)
            if not ok or r[0] < 0 or r[1] < 1:
                raise ConfigError(f"cache.pinned_lba_ranges[{i}] = {r!r}: expected [first_lba >= 0, sector_count >= 1]")
            ranges.append((r[0], r[1]))
        object.__setattr__(self, "pinned_lba_ranges", tuple(ranges))


@dataclass
class CacheStats:
    """Cache counters.  Block counts are in cache blocks.

    hits / misses        read-request blocks served from the cache / read from
                         the inner device on demand (misses also count blocks
                         filled before a partial-block write)
    write_hits / write_misses  written blocks that were / were not resident
    evictions            blocks pushed out by the policy
    flushes              inner write ops issued to write dirty blocks
    flushed_blocks       blocks written by those ops
    read_ahead_blocks    blocks fetched beyond the request by read-ahead
    read_ahead_used      of those, blocks later hit by a read
    read_ahead_wasted    of those, blocks evicted, invalidated or overwritten
                         without ever being read
    invalidated          resident blocks dropped by erase/trim
    dropped_dirty        dirty blocks whose data erase/trim made moot
    """

    hits: int = 0
    misses: int = 0
    write_hits: int = 0
    write_misses: int = 0
    evictions: int = 0
    flushes: int = 0
    flushed_blocks: int = 0
    read_ahead_blocks: int = 0
    read_ahead_used: int = 0
    read_ahead_wasted: int = 0
    invalidated: int = 0
    dropped_dirty: int = 0

    @property
    def hit_ratio(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    @property
    def read_ahead_pending(self) -> int:
        """Read-ahead blocks still resident and not yet read."""
        return self.read_ahead_blocks - self.read_ahead_used - self.read_ahead_wasted

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)


class BlockCache(BlockDeviceWrapper):
    """A caching BlockDevice in front of ``inner`` (same geometry)."""

    kind = "cache"

    def __init__(self, inner: BlockDevice, config: CacheConfig | None = None) -> None:
        super().__init__(inner)
        cfg = config if config is not None else CacheConfig()
        if cfg.blocks < 1:
            raise ConfigError("cache.blocks = 0 means no cache: the stack is built without one")
        self.config = cfg
        g = inner.geometry
        ss = g.sector_size
        unit = math.lcm(g.read_size, g.prog_size)
        #: sectors per cache block
        self.block_sectors = unit // ss
        self.block_bytes = unit
        if g.sector_count % self.block_sectors:
            raise ConfigError(f"cache: device of {g.sector_count} sectors is not a whole number of "
                              f"{unit}-byte cache blocks")
        self._nblocks = g.sector_count // self.block_sectors
        k = self.block_sectors
        pinned: set[int] = set()
        for first, count in cfg.pinned_lba_ranges:
            if first + count > g.sector_count:
                raise ConfigError(f"cache.pinned_lba_ranges: [{first}, {count}] ends past the device "
                                  f"({g.sector_count} sectors)")
            pinned.update(range(first // k, (first + count - 1) // k + 1))
        if len(pinned) >= cfg.blocks:
            raise ConfigError(f"cache.pinned_lba_ranges: {len(pinned)} pinned blocks leave no room in a "
                              f"{cfg.blocks}-block cache")
        self._pinned = frozenset(pinned)
        # pinned blocks get reserved slots; the policy manages the rest
        cap = cfg.blocks - len(pinned)
        self.policy: Policy = (TwoQPolicy(cap, cfg.twoq_in_percent, cfg.twoq_out_percent)
                               if cfg.policy == "2q" else POLICIES[cfg.policy](cap))
        self.cache_stats = CacheStats()
        self._data: dict[int, bytes] = {}       # block -> contents (block_bytes)
        self._dirty: set[int] = set()
        self._prefetched: set[int] = set()      # read-ahead blocks not yet read
        self._write_back = cfg.write_mode == "write-back"
        self._evict_run = cfg.evict_flush == "run"
        clock = self.clock
        self._charge_host = getattr(clock, "kind", "") == "virtual" and hasattr(clock, "advance_ns")
        self._ns_per_cycle = 1e9 / cfg.cpu_hz
        self._cycles = 0.0
        self._ns_carry = 0.0

    # ---- introspection ---------------------------------------------------------
    @property
    def resident_blocks(self) -> int:
        return len(self._data)

    @property
    def dirty_blocks(self) -> int:
        return len(self._dirty)

    def is_cached(self, lba: int) -> bool:
        return lba // self.block_sectors in self._data

    def is_dirty(self, lba: int) -> bool:
        return lba // self.block_sectors in self._dirty

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["cache"] = {**to_mapping(self.config), "block_bytes": self.block_bytes,
                      "pinned_blocks": len(self._pinned)}
        return d

    # ---- host cost ---------------------------------------------------------------
    def _charge(self) -> None:
        """Turn the cycles spent in this op into virtual time ("host")."""
        cycles, self._cycles = self._cycles, 0.0
        if not self._charge_host or cycles <= 0:
            return
        ns = cycles * self._ns_per_cycle + self._ns_carry
        step = int(ns)
        self._ns_carry = ns - step  # keep sub-ns remainders so many small ops add up exactly
        if step:
            # at the cache's own CPU clock: no profile field a range varies sets it (sdbench.ledger)
            self.clock.advance_priced(step, "host", None, "cache.cpu")  # type: ignore[attr-defined]

    # ---- policy glue --------------------------------------------------------------
    def _touch(self, b: int) -> None:
        first = b in self._prefetched
        if first:
            self._prefetched.discard(b)
            self.cache_stats.read_ahead_used += 1
        if b not in self._pinned:
            self.policy.hit(b, first)

    def _insert(self, b: int, block: bytes) -> None:
        """Make ``b`` resident with ``block``, evicting (and flushing) as needed."""
        if b not in self._pinned:
            if self.policy.must_flush_to_admit():
                self._flush_all()
            victim = self.policy.admit(b)
            if victim is not None:
                self._evict(victim)
        self._data[b] = block

    def _evict(self, v: int) -> None:
        if v in self._dirty:
            if self._evict_run:
                lo, hi = v, v + 1
                dirty = self._dirty
                while lo - 1 in dirty:
                    lo -= 1
                while hi in dirty:
                    hi += 1
                self._write_run(lo, hi)
            else:
                self._write_run(v, v + 1)
        if v in self._prefetched:
            self._prefetched.discard(v)
            self.cache_stats.read_ahead_wasted += 1
        del self._data[v]
        self.cache_stats.evictions += 1

    def _drop(self, b: int) -> None:
        """Forget ``b`` without writing it (erase/trim)."""
        del self._data[b]
        self._dirty.discard(b)
        if b in self._prefetched:
            self._prefetched.discard(b)
            self.cache_stats.read_ahead_wasted += 1
        if b not in self._pinned:
            self.policy.discard(b)

    def _write_run(self, lo: int, hi: int) -> None:
        """Write dirty blocks lo..hi-1 (all resident) as one inner write; they become clean."""
        data = self._data
        k = self.block_sectors
        self.inner.write(lo * k, b"".join([data[b] for b in range(lo, hi)]), buf_addr=0)
        keys = range(lo, hi)
        self._dirty.difference_update(keys)
        self.policy.set_clean(keys)
        st = self.cache_stats
        st.flushes += 1
        st.flushed_blocks += hi - lo
        self._cycles += self.config.lookup_cycles * (hi - lo)

    def _flush_all(self) -> None:
        """Write every dirty block, sorted by LBA, one inner write per contiguous run."""
        if not self._dirty:
            return
        keys = sorted(self._dirty)
        start = prev = keys[0]
        for b in keys[1:]:
            if b != prev + 1:
                self._write_run(start, prev + 1)
                start = b
            prev = b
        self._write_run(start, prev + 1)

    # ---- BlockDevice primitives -------------------------------------------------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        if count == 0:
            return b""
        k = self.block_sectors
        B = self.block_bytes
        b0, b1 = lba // k, (lba + count - 1) // k
        data = self._data
        parts: list[bytes | None] = []
        runs: list[list[int]] = []  # [start, end) of missing blocks
        run: list[int] | None = None
        touch = self._touch
        for b in range(b0, b1 + 1):
            blk = data.get(b)
            parts.append(blk)
            if blk is None:
                if run is None:
                    run = [b, b + 1]
                    runs.append(run)
                else:
                    run[1] = b + 1
            else:
                run = None
                touch(b)
        n_hit = len(parts) - sum(e - s for s, e in runs)
        st = self.cache_stats
        st.hits += n_hit
        n_ra = 0
        ra = self.config.read_ahead_blocks
        if runs:
            last = runs[-1]
            if ra and last[1] == b1 + 1:
                # extend the last miss run past the request, up to the device end or a cached block
                end, limit = last[1], min(self._nblocks, last[1] + ra)
                while end < limit and end not in data:
                    end += 1
                n_ra = end - last[1]
            # read every run before touching the cache: evictions below must not matter to them
            fetched = []
            for i, (s, e) in enumerate(runs):
                e_read = e + n_ra if i == len(runs) - 1 else e
                fetched.append(self.inner.read(s * k, (e_read - s) * k, buf_addr=0))
            for (s, e), buf in zip(runs, fetched):
                for j, b in enumerate(range(s, e)):
                    blk = buf[j * B:(j + 1) * B]
                    parts[b - b0] = blk
                    self._insert(b, blk)
                st.misses += e - s
            if n_ra:
                s, e = runs[-1]
                buf = fetched[-1]
                off = (e - s) * B
                prefetched = self._prefetched
                for j, b in enumerate(range(e, e + n_ra)):
                    self._insert(b, buf[off + j * B:off + (j + 1) * B])
                    prefetched.add(b)
                st.read_ahead_blocks += n_ra
        out = b"".join(parts)  # type: ignore[arg-type]
        if k > 1:
            head = (lba - b0 * k) * self.geometry.sector_size
            out = out[head:head + count * self.geometry.sector_size]
        self._cycles += self.config.lookup_cycles * (b1 - b0 + 1 + n_ra) \
            + self.config.copy_cycles_per_byte * count * self.geometry.sector_size
        self._charge()
        return out

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        n_bytes = len(data)
        if n_bytes == 0:
            return
        k = self.block_sectors
        B = self.block_bytes
        ss = self.geometry.sector_size
        count = n_bytes // ss
        b0, b1 = lba // k, (lba + count - 1) // k
        head = (lba - b0 * k) * ss                  # bytes of block b0 before the data
        tail = ((b1 + 1) * k - lba - count) * ss    # bytes of block b1 after the data
        cache = self._data
        st = self.cache_stats
        if not self._write_back:
            self.inner.write(lba, data, buf_addr=buf_addr)
        padded: bytes | None = data
        if head or tail:
            # a cache block spans several sectors and this write covers only part of it
            need_first = bool(head) or b1 == b0
            first = cache.get(b0) if need_first else None
            if need_first and first is None and self._write_back:
                first = self.inner.read(b0 * k, k, buf_addr=0)
                st.misses += 1
            if b1 == b0:
                last = first
            else:
                last = cache.get(b1) if tail else None
                if tail and last is None and self._write_back:
                    last = self.inner.read(b1 * k, k, buf_addr=0)
                    st.misses += 1
            if (head and first is None) or (tail and last is None):
                padded = None  # write-through over an uncached partial block: patch cached blocks only
            else:
                padded = (first[:head] if head else b"") + data + (last[B - tail:] if tail else b"")  # type: ignore[index]
        dirty = self._dirty
        policy = self.policy
        pinned = self._pinned
        prefetched = self._prefetched
        for i, b in enumerate(range(b0, b1 + 1)):
            if padded is not None:
                blk = padded[i * B:(i + 1) * B]
            else:  # write-through, some edge block not cached: patch what is cached
                old = cache.get(b)
                lo = b * k * ss - lba * ss
                if old is None:
                    if lo < 0 or lo + B > n_bytes:
                        st.write_misses += 1
                        continue
                    blk = data[lo:lo + B]
                else:
                    s0, s1 = max(lo, 0), min(lo + B, n_bytes)
                    blk = old[:s0 - lo] + data[s0:s1] + old[s1 - lo:]
            if b in cache:
                st.write_hits += 1
                if b in prefetched:  # overwritten before it was ever read
                    prefetched.discard(b)
                    st.read_ahead_wasted += 1
                    if b not in pinned:
                        policy.hit(b, True)
                elif b not in pinned:
                    policy.hit(b)
                cache[b] = blk
            else:
                st.write_misses += 1
                self._insert(b, blk)
            if self._write_back:
                dirty.add(b)
                if b not in pinned:
                    policy.set_dirty(b)
        self._cycles += self.config.lookup_cycles * (b1 - b0 + 1) + self.config.copy_cycles_per_byte * n_bytes
        self._charge()

    def _invalidate(self, lba: int, count: int) -> None:
        """Drop cached copies of the range; dirty data in it is moot (erased or trimmed)."""
        if count == 0:
            return
        k = self.block_sectors
        b0, b1 = lba // k, (lba + count - 1) // k
        cache = self._data
        if b1 - b0 + 1 <= len(cache):
            hit = [b for b in range(b0, b1 + 1) if b in cache]
        else:  # whole-card erase: walk the cache, not the range
            hit = [b for b in cache if b0 <= b <= b1]
        head_partial = lba % k != 0
        tail_partial = (lba + count) % k != 0
        st = self.cache_stats
        for b in hit:
            if b in self._dirty:
                if (b == b0 and head_partial) or (b == b1 and tail_partial):
                    self._write_run(b, b + 1)  # the part outside the range is still live
                else:
                    st.dropped_dirty += 1
            self._drop(b)
            st.invalidated += 1
        self._cycles += self.config.lookup_cycles * len(hit)

    def _erase(self, lba: int, count: int) -> None:
        self._invalidate(lba, count)
        self.inner.erase(lba, count)
        self._charge()

    def _trim(self, lba: int, count: int) -> None:
        self._invalidate(lba, count)
        self.inner.trim(lba, count)
        self._charge()

    def _sync(self) -> None:
        self._flush_all()
        self._charge()
        self.inner.sync()

    def flush(self) -> None:
        """Write dirty blocks without syncing the inner device."""
        self._flush_all()
        self._charge()

    def _close(self) -> None:
        # as a driver's deinit/unmount does: dirty data reaches the medium first
        if not self.inner.closed and not self.inner.read_only:
            self._flush_all()
            self._charge()
        self.inner.close()
