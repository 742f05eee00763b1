"""Replacement policies for :class:`~sdbench.cache.BlockCache`.

A policy only orders *keys* (cache block numbers); the cache owns the data,
the dirty set and pinned blocks (which never enter a policy).  Every
operation is O(1) on ``OrderedDict`` (LRUC's clean/dirty merge after a flush
is the one exception: O(n log n) per flush, not per access).

Protocol, as the cache drives it:

``hit(key, first)``     a resident key is referenced.  ``first`` is true for
                        the first demand reference of a read-ahead block: it
                        was never asked for before, so frequency-aware
                        policies must not count the prefetch as a reference.
``admit(key)``          make a new key resident; returns the key evicted to
                        make room, or None.  Ghost lists are consulted here.
``discard(key)``        forget a key entirely (erase/trim invalidation).
``set_dirty(key)`` / ``set_clean(keys)``  dirty-state changes (LRUC only).
``must_flush_to_admit()`` true when ``admit`` could not find a victim until
                        dirty blocks are written (LRUC with no clean block).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any


class Policy:
    """Base: bookkeeping shared by all policies."""

    name = "policy"

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 1:
            raise ValueError("a cache policy needs room for at least one block")
        self.capacity_blocks = capacity_blocks

    def __len__(self) -> int:  # resident keys
        raise NotImplementedError

    def __contains__(self, key: int) -> bool:
        raise NotImplementedError

    def hit(self, key: int, first: bool = False) -> None:
        raise NotImplementedError

    def admit(self, key: int) -> int | None:
        raise NotImplementedError

    def discard(self, key: int) -> None:
        raise NotImplementedError

    def set_dirty(self, key: int) -> None:
        """Only LRUC cares whether a block is dirty."""

    def set_clean(self, keys: Iterable[int]) -> None:
        """Only LRUC cares whether a block is dirty."""

    def must_flush_to_admit(self) -> bool:
        return False

    def state(self) -> dict[str, Any]:
        """Sizes of the internal lists, for describe() and tests."""
        return {"resident": len(self)}


class LruPolicy(Policy):
    """Least recently used."""

    name = "lru"

    def __init__(self, capacity_blocks: int) -> None:
        super().__init__(capacity_blocks)
        self._order: OrderedDict[int, None] = OrderedDict()  # LRU first

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: int) -> bool:
        return key in self._order

    def hit(self, key: int, first: bool = False) -> None:
        self._order.move_to_end(key)

    def admit(self, key: int) -> int | None:
        victim = None
        if len(self._order) >= self.capacity_blocks:
            victim = self._order.popitem(last=False)[0]
        self._order[key] = None
        return victim

    def discard(self, key: int) -> None:
        self._order.pop(key, None)


class LrucPolicy(Policy):
    """Least recently used among *clean* blocks; with none clean the cache flushes first.

    Clean and dirty keys live in two recency lists so the victim is found in
    O(1).  A per-key access tick lets a flush put the newly clean keys back in
    their true recency position.
    """

    name = "lruc"

    def __init__(self, capacity_blocks: int) -> None:
        super().__init__(capacity_blocks)
        self._clean: OrderedDict[int, None] = OrderedDict()
        self._dirty: OrderedDict[int, None] = OrderedDict()
        self._tick: dict[int, int] = {}
        self._now = 0

    def __len__(self) -> int:
        return len(self._clean) + len(self._dirty)

    def __contains__(self, key: int) -> bool:
        return key in self._clean or key in self._dirty

    def _stamp(self, key: int) -> None:
        self._now += 1
        self._tick[key] = self._now

    def hit(self, key: int, first: bool = False) -> None:
        (self._clean if key in self._clean else self._dirty).move_to_end(key)
        self._stamp(key)

    def admit(self, key: int) -> int | None:
        victim = None
        if len(self) >= self.capacity_blocks:
            # the cache flushes first when nothing is clean (must_flush_to_admit)
            victim = self._clean.popitem(last=False)[0]
            del self._tick[victim]
        self._clean[key] = None
        self._stamp(key)
        return victim

    def discard(self, key: int) -> None:
        if self._clean.pop(key, 0) is None or self._dirty.pop(key, 0) is None:
            del self._tick[key]

    def set_dirty(self, key: int) -> None:
        if key in self._clean:
            del self._clean[key]
            self._dirty[key] = None
        else:
            self._dirty.move_to_end(key)
        self._stamp(key)

    def set_clean(self, keys: Iterable[int]) -> None:
        dirty, clean, tick = self._dirty, self._clean, self._tick
        moved = [k for k in keys if k in dirty]
        if not moved:
            return
        for k in moved:
            del dirty[k]
        moved.sort(key=tick.__getitem__)
        if not clean or tick[next(reversed(clean))] < tick[moved[0]]:
            for k in moved:  # usual case: the flushed blocks are the most recent
                clean[k] = None
            return
        merged = sorted([*clean, *moved], key=tick.__getitem__)
        clean.clear()
        for k in merged:
            clean[k] = None

    def must_flush_to_admit(self) -> bool:
        return not self._clean and len(self) >= self.capacity_blocks

    def state(self) -> dict[str, Any]:
        return {"clean": len(self._clean), "dirty": len(self._dirty)}


class ArcPolicy(Policy):
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003).

    T1 holds blocks seen once recently, T2 blocks seen at least twice; B1/B2
    remember keys recently evicted from T1/T2 (no data).  A hit in a ghost
    list moves the target size ``p`` of T1 towards the list that would have
    kept the block, so the split between recency and frequency adapts.
    """

    name = "arc"

    def __init__(self, capacity_blocks: int) -> None:
        super().__init__(capacity_blocks)
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.p = 0.0  # target size of T1, in blocks

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def __contains__(self, key: int) -> bool:
        return key in self.t1 or key in self.t2

    def hit(self, key: int, first: bool = False) -> None:
        if key in self.t1:
            if first:  # first demand use of a prefetched block: still "seen once"
                self.t1.move_to_end(key)
                return
            del self.t1[key]
            self.t2[key] = None
        else:
            self.t2.move_to_end(key)

    def _replace(self, key_in_b2: bool) -> int:
        t1 = len(self.t1)
        if t1 and ((key_in_b2 and t1 == self.p) or t1 > self.p or not self.t2):
            victim = self.t1.popitem(last=False)[0]
            self.b1[victim] = None
        else:
            victim = self.t2.popitem(last=False)[0]
            self.b2[victim] = None
        return victim

    def admit(self, key: int) -> int | None:
        c = self.capacity_blocks
        full = len(self) >= c  # invalidations can leave the cache below c
        victim = None
        if key in self.b1:
            self.p = min(float(c), self.p + max(len(self.b2) / len(self.b1), 1.0))
            del self.b1[key]
            if full:
                victim = self._replace(False)
            self.t2[key] = None
            return victim
        if key in self.b2:
            self.p = max(0.0, self.p - max(len(self.b1) / len(self.b2), 1.0))
            del self.b2[key]
            if full:
                victim = self._replace(True)
            self.t2[key] = None
            return victim
        l1 = len(self.t1) + len(self.b1)
        if l1 >= c:
            if len(self.t1) < c:
                self.b1.popitem(last=False)
                if full:
                    victim = self._replace(False)
            else:  # T1 alone fills the cache: drop its LRU without a ghost
                victim = self.t1.popitem(last=False)[0]
        else:
            total = l1 + len(self.t2) + len(self.b2)
            if total >= c:
                if total >= 2 * c and self.b2:
                    self.b2.popitem(last=False)
                if full:
                    victim = self._replace(False)
        self.t1[key] = None
        return victim

    def discard(self, key: int) -> None:
        for lst in (self.t1, self.t2, self.b1, self.b2):
            if lst.pop(key, 0) is None:
                return

    def state(self) -> dict[str, Any]:
        return {"t1": len(self.t1), "t2": len(self.t2), "b1": len(self.b1), "b2": len(self.b2),
                "p": round(self.p, 3)}


class TwoQPolicy(Policy):
    """2Q (Johnson & Shasha, VLDB 1994), the full version.

    New blocks enter the FIFO A1in; blocks pushed out of A1in are remembered
    in the ghost FIFO A1out; a block referenced again while in A1out was used
    twice at a distance, so it enters the LRU Am.  Hits inside A1in are
    treated as correlated references and do not promote.  A one-pass scan
    only cycles through A1in and cannot push out Am.
    """

    name = "2q"

    def __init__(self, capacity_blocks: int, in_percent: float = 25.0, out_percent: float = 50.0) -> None:
        super().__init__(capacity_blocks)
        self.kin = max(1, round(capacity_blocks * in_percent / 100.0))
        self.kout = max(1, round(capacity_blocks * out_percent / 100.0))
        self.a1in: OrderedDict[int, None] = OrderedDict()   # oldest first
        self.a1out: OrderedDict[int, None] = OrderedDict()  # ghosts, oldest first
        self.am: OrderedDict[int, None] = OrderedDict()     # LRU first

    def __len__(self) -> int:
        return len(self.a1in) + len(self.am)

    def __contains__(self, key: int) -> bool:
        return key in self.a1in or key in self.am

    def hit(self, key: int, first: bool = False) -> None:
        if key in self.am:
            self.am.move_to_end(key)

    def _reclaim(self) -> int:
        if len(self.a1in) > self.kin or not self.am:
            victim = self.a1in.popitem(last=False)[0]
            self.a1out[victim] = None
            if len(self.a1out) > self.kout:
                self.a1out.popitem(last=False)
        else:
            victim = self.am.popitem(last=False)[0]
        return victim

    def admit(self, key: int) -> int | None:
        seen = self.a1out.pop(key, 0) is None  # before reclaim can age it out
        victim = self._reclaim() if len(self) >= self.capacity_blocks else None
        if seen:
            self.am[key] = None
        else:
            self.a1in[key] = None
        return victim

    def discard(self, key: int) -> None:
        for lst in (self.a1in, self.am, self.a1out):
            if lst.pop(key, 0) is None:
                return

    def state(self) -> dict[str, Any]:
        return {"a1in": len(self.a1in), "a1out": len(self.a1out), "am": len(self.am), "kin": self.kin,
                "kout": self.kout}


#: policy name -> class (the names CacheConfig.policy accepts)
POLICIES: dict[str, type[Policy]] = {
    "lru": LruPolicy,
    "lruc": LrucPolicy,
    "arc": ArcPolicy,
    "2q": TwoQPolicy,
}
