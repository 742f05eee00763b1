"""Is this card what it claims?  A capacity probe like f3probe (quick) and f3write/f3read (full).

Every probed sector gets a *record*: a magic, a per-run random nonce, its own
LBA, filler, and a CRC-32C of all that.  Reading a sector back classifies it:

* ``good``: the record of this very sector;
* ``corrupted``: no valid record of this run (bad checksum, zeros, old data,
  another run's nonce): the write was lost or mangled;
* ``aliased``: a valid record of this run naming *another* LBA: the two
  addresses share storage (a wrap-around fake);
* ``unreadable``: the read (or the write) failed with an I/O error.

Quick mode writes a few hundred well-spread sectors (the first and the last,
every power of two and the sector before it, an even spread, random ones),
high addresses before low ones so a wrap-around fake overwrites its high data
with the low data written later, then reads them back past any cache.  When a
probe is bad, a ladder of points between the highest good probe below it and
it narrows the boundary (16 points a round) down to the first bad sector.
The original contents of every probed sector are saved to a restore file
(atomically, before any write) and put back at the end, then verified.

Full mode writes every sector (high chunks first), then reads every sector:
the card's data is destroyed.

Works on any :class:`~sdbench.media.base.BlockDevice`; on a
:class:`~sdbench.media.linux.LinuxBlockDevice` the read-back uses a freshly
opened descriptor (O_DIRECT where possible) after ``fdatasync`` and
``posix_fadvise(DONTNEED)``.
"""
from __future__ import annotations

import json
import os
import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c

from .errors import SdbenchError
from .media.base import BlockDevice, BlockDeviceError
from .media.linux import AlignedBuffer, LinuxBlockDevice
from .output_files import write_atomically

MAGIC = b"SDBCAP01"
_HDR = struct.Struct("<8s8sQ")          # magic, nonce, lba
RESTORE_MAGIC = b"SDBCAPRESTORE1\n"
_ENTRY = struct.Struct("<QI")           # lba, byte count

GOOD, CORRUPTED, ALIASED, UNREADABLE = "good", "corrupted", "aliased", "unreadable"
CLASSES = (GOOD, CORRUPTED, ALIASED, UNREADABLE)

LADDER_POINTS = 16
FULL_CHUNK_BYTES = 1 << 20

Progress = Callable[[str, float], None]


class RecordMaker:
    """Records of one run: ``record(lba)`` is one sector, ``classify(data, lba)`` judges one read back."""

    def __init__(self, sector_bytes: int, nonce: bytes) -> None:
        if sector_bytes < 64:
            raise SdbenchError(f"sector size {sector_bytes} B is too small for capacity records")
        self.ss = sector_bytes
        self.nonce = nonce
        pool = random.Random(nonce).randbytes(2 * sector_bytes)
        self._pool = pool
        self._body = sector_bytes - _HDR.size - 4

    def record(self, lba: int) -> bytes:
        r = lba % self.ss
        head = _HDR.pack(MAGIC, self.nonce, lba) + self._pool[r:r + self._body]
        return head + crc32c(head).to_bytes(4, "little")

    def records(self, lba: int, count: int) -> bytes:
        return b"".join(self.record(s) for s in range(lba, lba + count))

    def is_ours(self, data: bytes) -> bool:
        """A record of this run (any LBA, checksum not checked)."""
        return data[:8] == MAGIC and data[8:16] == self.nonce

    def classify(self, data: bytes, lba: int) -> tuple[str, int | None]:
        """(class, LBA named by the record when aliased)."""
        if data[:8] != MAGIC or data[8:16] != self.nonce:
            return CORRUPTED, None
        if crc32c(data[:-4]).to_bytes(4, "little") != data[-4:]:
            return CORRUPTED, None
        named = _HDR.unpack_from(data)[2]
        return (GOOD, None) if named == lba else (ALIASED, named)


# ---- reading past caches ---------------------------------------------------------------
class _ReadPass:
    """Reads for one verification pass: a fresh descriptor (and no page cache) on Linux targets."""

    def __init__(self, dev: BlockDevice) -> None:
        self.dev = dev
        self.fd = -1
        self.buf: AlignedBuffer | None = None
        dev.sync()
        if isinstance(dev, LinuxBlockDevice):
            dev.drop_cache()
            self.fd = dev.reopen_fd(direct=dev.direct)
            try:
                os.posix_fadvise(self.fd, dev.offset_bytes, dev.window_bytes, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass

    def read(self, lba: int, count: int) -> bytes:
        dev = self.dev
        if self.fd < 0:
            return dev.read(lba, count)
        assert isinstance(dev, LinuxBlockDevice)
        ss = dev.geometry.sector_size
        dev.check_region(lba * ss, count * ss)
        n = count * ss
        if self.buf is None or self.buf.size < n:
            if self.buf is not None:
                self.buf.close()
            self.buf = AlignedBuffer(max(n, 64 * 1024))
        view = self.buf.view[:n]
        off = dev.offset_bytes + lba * ss
        done = 0
        while done < n:
            try:
                got = os.preadv(self.fd, [view[done:]], off + done)
            except OSError as e:
                raise BlockDeviceError(f"read of {n} B at byte {off} of {dev.path} failed: {e.strerror}") from None
            if got <= 0:
                raise BlockDeviceError(f"short read at byte {off + done} of {dev.path}")
            done += got
        return bytes(view)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.buf is not None:
            self.buf.close()
            self.buf = None


# ---- restore file ----------------------------------------------------------------------
@dataclass
class RestoreLog:
    """Original contents of the probed sectors, in the order they were saved."""

    path: Path
    target: str
    sector_bytes: int
    sector_count: int
    nonce: bytes
    entries: list[tuple[int, bytes]] = field(default_factory=list)

    def add(self, lba: int, data: bytes) -> None:
        self.entries.append((lba, data))

    def encode(self) -> bytes:
        head = json.dumps({"target": self.target, "sector_bytes": self.sector_bytes,
                           "sector_count": self.sector_count, "nonce": self.nonce.hex(),
                           "entries": len(self.entries)}, sort_keys=True).encode() + b"\n"
        body = bytearray(RESTORE_MAGIC + head)
        for lba, data in self.entries:
            body += _ENTRY.pack(lba, len(data)) + data
        return bytes(body) + crc32c(body).to_bytes(4, "little")

    def save(self) -> None:
        """Atomically (temporary file, fsync, rename): a crash leaves the old log or the new one."""
        write_atomically(self.path, self.encode())

    @classmethod
    def load(cls, path: Path) -> "RestoreLog":
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise SdbenchError(f"cannot read restore file {path}: {e.strerror}") from None
        bad = SdbenchError(f"{path} is not a valid sdbench capacity restore file (damaged or truncated)")
        if not raw.startswith(RESTORE_MAGIC) or len(raw) < len(RESTORE_MAGIC) + 4:
            raise bad
        if crc32c(raw[:-4]).to_bytes(4, "little") != raw[-4:]:
            raise bad
        nl = raw.find(b"\n", len(RESTORE_MAGIC))
        try:
            head = json.loads(raw[len(RESTORE_MAGIC):nl])
            log = cls(Path(path), str(head["target"]), int(head["sector_bytes"]), int(head["sector_count"]),
                      bytes.fromhex(head["nonce"]))
            pos, end = nl + 1, len(raw) - 4
            for _ in range(int(head["entries"])):
                lba, n = _ENTRY.unpack_from(raw, pos)
                pos += _ENTRY.size
                log.add(lba, raw[pos:pos + n])
                pos += n
        except (ValueError, KeyError, TypeError, struct.error):
            raise bad from None
        if pos != end:
            raise bad
        return log


@dataclass
class RestoreResult:
    restored: int = 0          # sectors written back
    verified: int = 0          # read back equal to their original
    mismatched: int = 0        # read back different (aliasing fakes share storage)
    skipped_foreign: int = 0   # --restore: sector holds neither our record nor the original (left alone)
    unreadable: int = 0        # could not be read or written


def restore(dev: BlockDevice, log: RestoreLog, *, only_ours: bool = False) -> RestoreResult:
    """Write the saved originals back (last saved first, so aliased addresses end with the earliest original),
    then verify them through a fresh read pass.  ``only_ours``: touch only sectors that still hold a record of
    that run (or already hold the original), as after a crash."""
    g = dev.geometry
    if log.sector_bytes != g.sector_size or log.sector_count != g.sector_count:
        raise SdbenchError(f"restore file {log.path} is for a target of {log.sector_count} sectors of "
                           f"{log.sector_bytes} B, not this one ({g.sector_count} sectors of {g.sector_size} B)")
    ss = g.sector_size
    for lba, data in log.entries:
        if len(data) % ss or lba + len(data) // ss > g.sector_count:
            raise SdbenchError(f"restore file {log.path} names sectors outside the target")
    maker = RecordMaker(ss, log.nonce)
    res = RestoreResult()
    written: list[tuple[int, bytes]] = []
    for lba, data in reversed(log.entries):
        count = len(data) // ss
        if only_ours:
            try:
                cur = dev.read(lba, count)
            except BlockDeviceError:
                res.unreadable += count
                continue
            keep = all(maker.is_ours(cur[i * ss:(i + 1) * ss]) or cur[i * ss:(i + 1) * ss] == data[i * ss:(i + 1) * ss]
                       for i in range(count))
            if not keep:
                res.skipped_foreign += count
                continue
        try:
            dev.write(lba, data)
        except BlockDeviceError:
            res.unreadable += count
            continue
        res.restored += count
        written.append((lba, data))
    rp = _ReadPass(dev)
    try:
        for lba, data in written:
            try:
                got = rp.read(lba, len(data) // ss)
            except BlockDeviceError:
                res.unreadable += len(data) // ss
                continue
            if got == data:
                res.verified += len(data) // ss
            else:
                res.mismatched += len(data) // ss
    finally:
        rp.close()
    return res


# ---- results ---------------------------------------------------------------------------
@dataclass
class CapacityResult:
    announced_bytes: int
    sector_bytes: int
    mode: str
    first_bad_lba: int | None = None
    last_good_lba: int | None = None
    counts: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CLASSES})
    aliases: list[tuple[int, int]] = field(default_factory=list)   # (lba, lba its record names), a sample
    probes: int = 0
    rounds: int = 0
    restore_file: str | None = None
    restore: RestoreResult | None = None
    elapsed_s: float = 0.0
    bytes_written: int = 0

    @property
    def verdict(self) -> str:
        if self.first_bad_lba is None:
            return "genuine"
        if self.counts[ALIASED]:
            return "fake"
        good_above = self.last_good_lba is not None and self.last_good_lba > self.first_bad_lba
        return "fake" if self.first_bad_lba > 0 and not good_above else "damaged"

    @property
    def usable_bytes(self) -> int:
        if self.first_bad_lba is None:
            return self.announced_bytes
        return self.first_bad_lba * self.sector_bytes

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"announced_bytes": self.announced_bytes, "usable_bytes": self.usable_bytes,
                             "verdict": self.verdict, "first_bad_lba": self.first_bad_lba,
                             "counts": dict(self.counts), "mode": self.mode, "sector_bytes": self.sector_bytes,
                             "probes": self.probes}
        if self.aliases:
            d["aliases"] = [{"lba": a, "holds_lba": b} for a, b in self.aliases[:16]]
        if self.restore_file is not None:
            d["restore_file"] = self.restore_file
        if self.restore is not None:
            d["restore"] = vars(self.restore).copy()
        return d


def _note(res: CapacityResult, lba: int, cls: str, named: int | None) -> None:
    res.counts[cls] += 1
    if cls == GOOD:
        if res.last_good_lba is None or lba > res.last_good_lba:
            res.last_good_lba = lba
    else:
        if res.first_bad_lba is None or lba < res.first_bad_lba:
            res.first_bad_lba = lba
        if cls == ALIASED and named is not None and len(res.aliases) < 64:
            res.aliases.append((lba, named))


# ---- quick mode ------------------------------------------------------------------------
def _unit(dev: BlockDevice) -> int:
    g = dev.geometry
    return max(g.read_size, g.prog_size) // g.sector_size


def probe_plan(sector_count: int, unit: int, rng: random.Random, spread: int = 128, randoms: int = 64) -> list[int]:
    """Unit-aligned probe addresses: first, last, powers of two and the unit before each, an even spread,
    random ones."""
    units = sector_count // unit
    last = (units - 1) * unit

    def al(x: int) -> int:
        return min(max(x, 0) // unit * unit, last)

    pts = {0, last}
    k = 1
    while k < sector_count:
        pts.add(al(k))
        pts.add(al(k - 1))
        k *= 2
    for i in range(spread):
        pts.add(al(sector_count * i // spread))
    for _ in range(randoms):
        pts.add(rng.randrange(units) * unit)
    return sorted(pts)


class QuickProbe:
    """f3probe-like: few writes, originals saved first and put back."""

    def __init__(self, dev: BlockDevice, restore_path: Path, *, nonce: bytes | None = None, target: str = "",
                 progress: Progress | None = None) -> None:
        self.dev = dev
        self.nonce = nonce or os.urandom(8)
        g = dev.geometry
        self.maker = RecordMaker(g.sector_size, self.nonce)
        self.unit = _unit(dev)
        self.log = RestoreLog(Path(restore_path), target, g.sector_size, g.sector_count, self.nonce)
        self.progress = progress or (lambda label, frac: None)
        self.res = CapacityResult(g.size_bytes, g.sector_size, "quick", restore_file=str(restore_path))
        self._saved: set[int] = set()
        self._bad: set[int] = set()      # probe start LBAs that were not all good
        self._good: set[int] = set()

    def run(self) -> CapacityResult:
        t0 = time.monotonic()
        g = self.dev.geometry
        rng = random.Random(self.nonce)
        try:
            self._round(probe_plan(g.sector_count, self.unit, rng))
            self._refine()
            # the test is over: put the originals back
            self.progress("restoring", 1.0)
        finally:
            if self.log.entries:
                self.res.restore = restore_sectors(self.dev, self.log)
        self.res.elapsed_s = time.monotonic() - t0
        if self.res.restore is not None and self.res.verdict == "genuine" and (
                self.res.restore.mismatched or self.res.restore.unreadable):
            raise SdbenchError(f"the original data of {self.res.restore.mismatched + self.res.restore.unreadable} "
                               f"sector(s) did not read back after restoring; the restore file "
                               f"{self.log.path} is kept")
        return self.res

    def _refine(self) -> None:
        u = self.unit
        while self._bad:
            hi = min(self._bad)
            lower = [p for p in self._good if p < hi]
            lo = max(lower) if lower else -u
            if hi - lo <= u:
                return
            span_units = (hi - lo) // u - 1          # unit positions strictly between lo and hi
            n = min(LADDER_POINTS, span_units)
            pts = sorted({lo + u * (1 + (i * span_units) // n) for i in range(n)} - self._good - self._bad)
            pts = [p for p in pts if lo < p < hi]
            if not pts:
                return
            self._round(pts)

    def _round(self, points: list[int]) -> None:
        dev, u, ss = self.dev, self.unit, self.dev.geometry.sector_size
        self.res.rounds += 1
        label = f"round {self.res.rounds}"
        # 1. save the originals (before any write of this round)
        live: list[int] = []
        for p in points:
            try:
                data = dev.read(p, u)
            except BlockDeviceError:
                self._mark_unreadable(p)
                continue
            if p not in self._saved:
                self.log.add(p, data)
                self._saved.add(p)
            live.append(p)
        self.log.save()
        # 2. write high addresses before low ones: a wrap-around fake keeps the low records
        for i, p in enumerate(sorted(live, reverse=True)):
            try:
                dev.write(p, self.maker.records(p, u))
                self.res.bytes_written += u * ss
            except BlockDeviceError:
                self._mark_unreadable(p)
            self.progress(f"{label}: writing", i / max(len(live), 1))
        self.written(live)
        # 3. read back past caches
        rp = _ReadPass(dev)
        try:
            for i, p in enumerate(sorted(live)):
                if p in self._bad:
                    continue
                try:
                    data = rp.read(p, u)
                except BlockDeviceError:
                    self._mark_unreadable(p)
                    continue
                ok = True
                for s in range(u):
                    cls, named = self.maker.classify(data[s * ss:(s + 1) * ss], p + s)
                    _note(self.res, p + s, cls, named)
                    ok = ok and cls == GOOD
                (self._good if ok else self._bad).add(p)
                self.res.probes += 1
                self.progress(f"{label}: reading", i / max(len(live), 1))
        finally:
            rp.close()

    def written(self, points: list[int]) -> None:
        """Hook: called after a round's writes, before they are read back (tests simulate a crash here)."""

    def _mark_unreadable(self, p: int) -> None:
        if p in self._bad:
            return
        for s in range(self.unit):
            _note(self.res, p + s, UNREADABLE, None)
        self._bad.add(p)
        self.res.probes += 1


def restore_sectors(dev: BlockDevice, log: RestoreLog) -> RestoreResult:
    """The end of a quick run: every saved sector is written back and verified."""
    return restore(dev, log)


def quick_probe(dev: BlockDevice, restore_path: Path, *, nonce: bytes | None = None, target: str = "",
                progress: Progress | None = None) -> CapacityResult:
    return QuickProbe(dev, restore_path, nonce=nonce, target=target, progress=progress).run()


# ---- full mode -------------------------------------------------------------------------
def full_probe(dev: BlockDevice, *, nonce: bytes | None = None, progress: Progress | None = None,
               chunk_bytes: int = FULL_CHUNK_BYTES) -> CapacityResult:
    """f3write/f3read: write every sector (high chunks first), then read every sector.  Destroys the data."""
    g = dev.geometry
    ss = g.sector_size
    nonce = nonce or os.urandom(8)
    maker = RecordMaker(ss, nonce)
    u = _unit(dev)
    chunk = max(chunk_bytes // ss // u, 1) * u
    res = CapacityResult(g.size_bytes, ss, "full")
    prog = progress or (lambda label, frac: None)
    total = g.sector_count
    starts = list(range(0, total, chunk))
    failed_writes: set[int] = set()
    t0 = time.monotonic()
    done = 0
    for start in reversed(starts):
        n = min(chunk, total - start)
        try:
            dev.write(start, maker.records(start, n))
            res.bytes_written += n * ss
        except BlockDeviceError:
            failed_writes.add(start)
        done += n
        dt = time.monotonic() - t0
        prog(f"writing {done * ss / 1e6 / dt if dt > 0 else 0:.1f} MB/s", done / total)
    t1 = time.monotonic()
    rp = _ReadPass(dev)
    done = 0
    try:
        for start in starts:
            n = min(chunk, total - start)
            data = None
            if start not in failed_writes:
                try:
                    data = rp.read(start, n)
                except BlockDeviceError:
                    data = None
            if data is None and start not in failed_writes:
                # the chunk failed: read it unit by unit to find the bad sectors
                parts = []
                for s in range(start, start + n, u):
                    try:
                        parts.append(rp.read(s, u))
                    except BlockDeviceError:
                        parts.append(None)
                for j, part in enumerate(parts):
                    s0 = start + j * u
                    for i in range(u):
                        if part is None:
                            _note(res, s0 + i, UNREADABLE, None)
                        else:
                            cls, named = maker.classify(part[i * ss:(i + 1) * ss], s0 + i)
                            _note(res, s0 + i, cls, named)
            elif data is None:
                for s in range(start, start + n):
                    _note(res, s, UNREADABLE, None)
            elif data == maker.records(start, n):
                res.counts[GOOD] += n
                res.last_good_lba = start + n - 1
            else:
                for i in range(n):
                    cls, named = maker.classify(data[i * ss:(i + 1) * ss], start + i)
                    _note(res, start + i, cls, named)
            done += n
            dt = time.monotonic() - t1
            prog(f"reading {done * ss / 1e6 / dt if dt > 0 else 0:.1f} MB/s", done / total)
    finally:
        rp.close()
    res.probes = total
    res.elapsed_s = time.monotonic() - t0
    return res
