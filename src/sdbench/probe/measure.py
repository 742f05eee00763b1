"""Card behaviour measured through its block interface, as flashbench measures it by hand.

Every test times single operations on the device's own clock (a simulated card's virtual clock, a real
card's wall clock) and keeps medians, so a background pause or a scheduling hiccup moves no figure.

* **Alignment** (read-only, flashbench ``-a``): for each power-of-two boundary size B, reads of
  two sectors just before, across and just after odd multiples of B.  A read across a flash page or an
  allocation-unit (AU) boundary costs more; the extra cost steps up at the page size and again at the AU size.
* **Latency**: one-sector and multi-block reads (read-only) and writes, sequential and random.
* **Open units** (writes, flashbench ``--open-au``): 16 KiB writes round-robin to N streams one spacing apart.
  While N is at most the AUs the card keeps open, each write lands in an open update block; beyond, every
  write first merges the least recently used one, so the time per write jumps (and stays up: the next N
  must be slow too, so one hiccup of a real device is not taken for it).
* **AU size** (writes): with one stream more than the card keeps open, the streams' spacing is halved until
  the streams share AUs and the jump disappears: the smallest slow spacing is the AU.
* **Erase** (writes, where the device takes it): ERASE of one and of four spacings, and DISCARD, timed.
"""
from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SdbenchError
from ..media.base import BlockDevice, BlockDeviceError

KiB, MiB = 1024, 1 << 20
#: largest AU the SD spec allows (SDXC: 64 MiB): stream spacing starts here
MAX_AU_BYTES = 64 * MiB
#: bytes per open-unit test write: a whole page on every card we know of, small enough to fill no update block
STREAM_CHUNK_BYTES = 16 * KiB
STREAM_ROUNDS = 6
#: a time that is this many times the one-stream time, and SLOW_MIN_US more, means a merge
SLOW_RATIO = 1.5
SLOW_MIN_US = 50.0
#: reads of this many bytes straddle each candidate boundary
ALIGN_READ_BYTES = 1024
ALIGN_BOUNDARIES = 8
ALIGN_REPEATS = 3
#: boundary sizes up to this are flash pages, from AU_MIN_BYTES on they are allocation units (SD: pages
#: 2..64 KiB, AUs 512 KiB..64 MiB)
PAGE_MAX_BYTES = 256 * KiB
AU_MIN_BYTES = 512 * KiB
LATENCY_SAMPLES = 32
#: the smallest range probed: the sequential runs of LATENCY_SAMPLES one-sector reads and writes (the writes
#: after one that loads the card's tables) with room to spare
MIN_RANGE_SECTORS = 2 * LATENCY_SAMPLES
MULTI_SMALL_BYTES = 8 * KiB
MULTI_LARGE_BYTES = 64 * KiB

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class Latency:
    """Median and 90th percentile of one kind of operation."""

    op: str            # read / write
    pattern: str       # sequential / random
    size_bytes: int
    samples: int
    median_us: float
    p90_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "pattern": self.pattern, "size_bytes": self.size_bytes, "samples": self.samples,
                "median_us": round(self.median_us, 3), "p90_us": round(self.p90_us, 3)}


@dataclass
class ProbeResult:
    """What the probe measured, and for every card quantity it did not, why."""

    target: str
    range_bytes: int
    sector_bytes: int
    clock: str
    writes: bool
    #: what the card says it is (``sdbench info``'s summary), when the target tells
    identity: str = ""
    #: where the range probed starts on the target (its ``--offset``)
    offset_bytes: int = 0
    latency: list[Latency] = field(default_factory=list)
    #: per boundary size: median µs of the reads before, across and after, and the extra of the one across
    alignment: list[dict[str, float]] = field(default_factory=list)
    page_bytes: int | None = None
    page_cross_us: float | None = None
    au_bytes_read: int | None = None
    au_cross_us: float | None = None
    stream_spacing_bytes: int = 0
    open_streams: list[dict[str, float]] = field(default_factory=list)
    open_aus: int | None = None
    merge_us: float | None = None
    au_spacing: list[dict[str, float]] = field(default_factory=list)
    au_bytes_write: int | None = None
    erase: list[dict[str, Any]] = field(default_factory=list)
    not_measured: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def au_bytes(self) -> int | None:
        """The AU the writes found, else the one the reads found."""
        return self.au_bytes_write if self.au_bytes_write is not None else self.au_bytes_read

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "identity": self.identity, "offset_bytes": self.offset_bytes,
                "range_bytes": self.range_bytes,
                "sector_bytes": self.sector_bytes, "clock": self.clock, "writes": self.writes,
                "page_bytes": self.page_bytes, "page_cross_us": _r(self.page_cross_us),
                "au_bytes": self.au_bytes, "au_bytes_read": self.au_bytes_read,
                "au_bytes_write": self.au_bytes_write, "au_cross_us": _r(self.au_cross_us),
                "open_aus": self.open_aus, "merge_us": _r(self.merge_us),
                "stream_spacing_bytes": self.stream_spacing_bytes,
                "latency": [x.to_dict() for x in self.latency],
                "alignment": [{k: _r(v) for k, v in a.items()} for a in self.alignment],
                "open_streams": [{k: _r(v) for k, v in a.items()} for a in self.open_streams],
                "au_spacing": [{k: _r(v) for k, v in a.items()} for a in self.au_spacing],
                "erase": self.erase, "not_measured": dict(self.not_measured),
                "elapsed_s": round(self.elapsed_s, 3)}


def _r(v: Any) -> Any:
    return round(v, 3) if isinstance(v, float) else v


def _p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * len(s)))]


class Prober:
    """The tests on one device; ``writes`` allows the write tests (the caller holds the user's permission)."""

    def __init__(self, dev: BlockDevice, *, target: str = "", writes: bool = False, seed: int = 1,
                 max_streams: int = 16, progress: Progress | None = None) -> None:
        self.dev = dev
        g = dev.geometry
        self.ss = g.sector_size
        self.sectors = g.sector_count
        self.writes = writes
        self.max_streams = max_streams
        self.rng = random.Random(f"probe:{seed}")
        self.progress = progress or (lambda label, frac: None)
        self.res = ProbeResult(target, g.size_bytes, self.ss, dev.clock.kind, writes)
        least = MIN_RANGE_SECTORS * self.ss
        if g.size_bytes < least:
            raise SdbenchError(f"the range probed is {g.size_bytes:,} B: probe needs at least {least:,} B "
                               f"({MIN_RANGE_SECTORS} sectors of {self.ss} B) for its runs of one-sector I/O")
        self._pattern = random.Random(f"probe-data:{seed}").randbytes(MULTI_LARGE_BYTES)

    # ---- timing -------------------------------------------------------------------------
    def _us(self, fn: Callable[[], Any]) -> float:
        clock = self.dev.clock
        t0 = clock.now_ns()
        fn()
        return (clock.now_ns() - t0) / 1e3

    def _read_us(self, off: int, nbytes: int) -> float:
        return self._us(lambda: self.dev.read(off // self.ss, nbytes // self.ss))

    def _write_us(self, off: int, nbytes: int) -> float:
        data = self._pattern[:nbytes] if nbytes <= len(self._pattern) else bytes(nbytes)
        return self._us(lambda: self.dev.write(off // self.ss, data))

    # ---- the whole probe ------------------------------------------------------------------------
    def run(self) -> ProbeResult:
        w0 = time.monotonic()
        self.read_latency()
        self.alignment()
        if self.writes:
            self.write_latency()
            self.open_units()
            self.au_by_spacing()
            self.erase()
        else:
            for k in ("open_aus", "au_bytes_write", "write latency", "erase"):
                self.res.not_measured[k] = "write tests need --allow-write"
        self.res.elapsed_s = time.monotonic() - w0
        return self.res

    # ---- reads ------------------------------------------------------------------------------
    def _random_offsets(self, nbytes: int, n: int) -> list[int]:
        units = self.res.range_bytes // nbytes
        return [self.rng.randrange(units) * nbytes for _ in range(n)]

    def _latency(self, op: str, pattern: str, nbytes: int, offsets: list[int]) -> Latency:
        timer = self._read_us if op == "read" else self._write_us
        xs = [timer(o, nbytes) for o in offsets]
        lat = Latency(op, pattern, nbytes, len(xs), statistics.median(xs), _p90(xs))
        self.res.latency.append(lat)
        return lat

    def read_latency(self) -> None:
        self.progress("read latency", 0.0)
        n = LATENCY_SAMPLES
        self._latency("read", "random", self.ss, self._random_offsets(self.ss, n))
        start = self._random_offsets(MiB, 1)[0] if self.res.range_bytes >= 2 * MiB else 0
        self._latency("read", "sequential", self.ss, [start + i * self.ss for i in range(n)])
        for size in (MULTI_SMALL_BYTES, MULTI_LARGE_BYTES):
            if size * 4 <= self.res.range_bytes:
                self._latency("read", "random", size, self._random_offsets(size, n // 2))

    def alignment(self, only: tuple[int, ...] = ()) -> None:
        """flashbench -a: the extra time of a read across a boundary of size B, per B (``only``: these B, and no
        conclusions drawn)."""
        r = max(ALIGN_READ_BYTES, 2 * self.ss)
        sizes: list[int] = []
        b = max(4 * KiB, 2 * r)
        while b <= MAX_AU_BYTES and 3 * b <= self.res.range_bytes:
            sizes.append(b)
            b *= 2
        if only:
            sizes = [b for b in sizes if b in only]
        if not sizes:
            self.res.not_measured["page_bytes"] = self.res.not_measured["au_bytes_read"] = \
                "the range is too small for the alignment test"
            return
        for i, b in enumerate(sizes):
            self.progress("alignment", i / len(sizes))
            odd = (self.res.range_bytes // b - 1) // 2      # odd multiples 2k+1 with (2k+1) * b < range
            ks = sorted({2 * self.rng.randrange(max(odd, 1)) + 1 for _ in range(ALIGN_BOUNDARIES)})
            pre, on, post = [], [], []
            for _ in range(ALIGN_REPEATS):
                for k in ks:
                    x = k * b
                    pre.append(self._read_us(x - r, r))
                    on.append(self._read_us(x - r // 2, r))
                    post.append(self._read_us(x, r))
            # paired: each read across against the two beside it, read just before and after it
            diffs = [o - (p + q) / 2 for p, o, q in zip(pre, on, post)]
            extra = statistics.median(diffs)
            mad = statistics.median(abs(d - extra) for d in diffs)
            self.res.alignment.append({"boundary_bytes": b, "pre_us": statistics.median(pre),
                                       "on_us": statistics.median(on), "post_us": statistics.median(post),
                                       "extra_us": extra, "noise_us": 1.4826 * mad / len(diffs) ** 0.5})
        if not only:
            self._read_boundaries()

    def _read_boundaries(self) -> None:
        """Steps in the extra time of a read across a boundary: at the page size and at the AU size."""
        rows = self.res.alignment
        base = statistics.median(a["pre_us"] for a in rows)

        def threshold(a: dict[str, float]) -> float:
            # a step is several times the noise of its median, and not lost in the read's own time
            return max(2.0, 0.01 * base, 4 * a["noise_us"])

        # the smallest boundary is inside every page: its extra is noise around zero, never below it
        level = max(rows[0]["extra_us"], 0.0)
        steps: list[tuple[int, float]] = []
        for i, a in enumerate(rows[1:], start=1):
            # a step holds for the larger boundaries too (a multiple of an AU is a multiple of a page): most of
            # them must stay above the old level, so one noisy size makes no step
            rest = rows[i:]
            held = sum(x["extra_us"] - level > threshold(x) / 2 for x in rest)
            if a["extra_us"] - level > threshold(a) and held >= 0.75 * len(rest):
                steps.append((int(a["boundary_bytes"]), a["extra_us"] - level))
                level = a["extra_us"]
        for b, extra in steps:
            if b <= PAGE_MAX_BYTES and self.res.page_bytes is None:
                self.res.page_bytes, self.res.page_cross_us = b, extra
            elif b >= AU_MIN_BYTES and self.res.au_bytes_read is None:
                self.res.au_bytes_read, self.res.au_cross_us = b, extra
        if self.res.page_bytes is None:
            self.res.not_measured["page_bytes"] = ("no read across a boundary up to "
                                                   f"{PAGE_MAX_BYTES // KiB} KiB took longer")
        if self.res.au_bytes_read is None:
            self.res.not_measured["au_bytes_read"] = "no read across a larger boundary took longer"

    # ---- writes -----------------------------------------------------------------------------
    def _spacing(self) -> int:
        s = MAX_AU_BYTES
        while s > 4 * MiB and self.res.range_bytes // s < min(self.max_streams, 8):
            s //= 2
        return s

    def write_latency(self) -> None:
        self.progress("write latency", 0.0)
        n = LATENCY_SAMPLES
        s = self._spacing()
        # the last spacing of the range, clear of the streams when the range has room
        base = max(0, (self.res.range_bytes // s - 1) * s)
        self._write_us(base, self.ss)  # the first write after power-up may load the card's tables
        self._latency("write", "sequential", self.ss, [base + self.ss * (1 + i) for i in range(n)])
        off = base + MiB
        for size in (MULTI_SMALL_BYTES, MULTI_LARGE_BYTES):
            if off + size * n // 2 <= self.res.range_bytes:
                self._latency("write", "sequential", size, [off + size * i for i in range(n // 2)])
                off += size * n // 2
        self._latency("write", "random", self.ss, self._random_offsets(self.ss, n))

    def _streams_us(self, n: int, spacing: int, shift: int) -> float:
        """Median time of a 16 KiB write, round-robin over ``n`` streams ``spacing`` apart (first round left out:
        it opens the units)."""
        times: list[float] = []
        for r in range(STREAM_ROUNDS):
            for i in range(n):
                t = self._write_us(i * spacing + shift + r * STREAM_CHUNK_BYTES, STREAM_CHUNK_BYTES)
                if r:
                    times.append(t)
        return statistics.median(times)

    def _slow(self, t: float, fast: float) -> bool:
        return t > SLOW_RATIO * fast and t - fast > SLOW_MIN_US

    def open_units(self) -> None:
        s = self._spacing()
        self.res.stream_spacing_bytes = s
        n_max = min(self.max_streams, self.res.range_bytes // s)
        if n_max < 2:
            self.res.not_measured["open_aus"] = f"the range holds fewer than two streams {s // MiB} MiB apart"
            return
        fast = 0.0
        shift = 0
        slow_from: int | None = None
        for n in range(1, n_max + 1):
            self.progress("open units", n / n_max)
            t = self._streams_us(n, s, shift)
            shift += STREAM_ROUNDS * STREAM_CHUNK_BYTES
            self.res.open_streams.append({"streams": n, "write_us": t})
            if n == 1:
                fast = t
            elif not self._slow(t, fast):
                slow_from = None  # a slow count alone was noise (a real device's hiccup)
            elif slow_from is not None or n == n_max:
                # beyond the open units every larger count merges too: the second slow count in a row confirms
                first = slow_from if slow_from is not None else n
                self.res.open_aus = first - 1
                self.res.merge_us = self.res.open_streams[first - 1]["write_us"] - fast
                return
            else:
                slow_from = n
        self.res.not_measured["open_aus"] = (f"writes to up to {n_max} streams {s // MiB} MiB apart did not slow "
                                             f"down: the card keeps at least {n_max} open, or merges cost little")

    def au_by_spacing(self) -> None:
        if self.res.open_aus is None:
            self.res.not_measured["au_bytes_write"] = "needs the open-unit count"
            return
        n = self.res.open_aus + 1
        fast = self.res.open_streams[0]["write_us"]
        d = self.res.stream_spacing_bytes
        # continue past the open-unit test's writes in each stream's unit
        shift = len(self.res.open_streams) * STREAM_ROUNDS * STREAM_CHUNK_BYTES
        found = None
        while d >= 2 * STREAM_ROUNDS * STREAM_CHUNK_BYTES:
            self.progress("AU size", 0.0)
            t = self._streams_us(n, d, shift % d)
            shift += STREAM_ROUNDS * STREAM_CHUNK_BYTES
            self.res.au_spacing.append({"spacing_bytes": d, "write_us": t})
            if not self._slow(t, fast):
                break
            found = d
            d //= 2
        if found is None:
            self.res.not_measured["au_bytes_write"] = "the streams were not slow at the largest spacing"
        else:
            self.res.au_bytes_write = found

    def erase(self) -> None:
        """ERASE of one and of four spacings, then a trim of one, where the device has them of its own (a
        simulated card's CMD38; a Linux device's BLKDISCARD), timed."""
        s = self.res.stream_spacing_bytes or self._spacing()
        eu = self.dev.geometry.erase_size // self.ss
        tests = [("erase", s), ("erase", 4 * s), ("trim", s)]
        for kind, nbytes in tests:
            if not own_primitive(self.dev, kind):
                self.res.not_measured[kind] = f"the device has no {kind} command of its own"
                continue
            if nbytes > self.res.range_bytes:
                continue
            count = nbytes // self.ss // eu * eu
            fn = self.dev.erase if kind == "erase" else self.dev.trim
            try:
                us = self._us(lambda fn=fn, count=count: fn(0, count))
            except BlockDeviceError as e:
                self.res.not_measured[kind] = str(e)
                continue
            self.res.erase.append({"kind": kind, "bytes": count * self.ss, "us": round(us, 3)})


def own_primitive(dev: BlockDevice, kind: str) -> bool:
    """Whether ``dev`` implements ``erase``/``trim`` itself rather than by the base class's fallback (writing
    the erased value; ignoring the hint)."""
    name = f"_{kind}"
    return getattr(type(dev), name) is not getattr(BlockDevice, name)
