"""A data logger: fixed-size records from a real-time producer, appended to a file by one writer task.

Record ``k`` (``record_bytes`` R each) is produced at ``t_k = k / rate_hz`` for ``duration_s``; the writer
writes the records in order, one ``write()`` call per record, as soon as it can: it waits for record k when it
is ahead, and when a call takes longer than the record period the records produced meanwhile queue in a RAM
buffer.  After a write the writer syncs the file (FatFs ``f_sync``, ``lfs_file_sync``, ``fsync``) every
``sync_every_records`` records and/or after the first write at or past each multiple of ``sync_every_ms``
since the log began, and once after the last record; with
``rotate_bytes`` a full file is closed and the next one created (``log-0001.bin``, ...).  On simulated stacks
time is the virtual clock (the writer's waits advance it); on real media and directories the wall clock (the
writer sleeps until the next record is due).

Every ``write()``, sync and rotation is one timed call (rows ``logger write``, ``logger sync``, ``logger
rotate``); ``logger run`` is the whole log: the bytes written over the log's duration.  The run's metadata
``logger`` holds the rest:

* ``write_latency_ms`` / ``sync_latency_ms``: p50, p99, p99.9 (nearest rank), max, mean;
* ``buffer``: ``needed_bytes``, the RAM buffer that would have lost no record = max over time of (records
  produced - records written) x R (the record being written is still in the buffer); and ``records_lost`` for
  ``buffer_bytes``: the run's calls replayed, in order and with their measured durations, against the producer
  with room for ``buffer_bytes // record_bytes`` records (a record produced when the buffer is full is dropped
  and never written, so the writer catches up sooner).  The replay is exact while the i-th call costs the same
  whichever records were dropped (each write appends R bytes at the same offset either way);
* ``longest_stall``: the largest write/sync/rotate time and its cause; ``stalls``: every call longer than the
  record period (the writer falls behind), counted by cause;
* ``histogram`` (latency buckets), ``timeline`` (per record or, past ``TIMELINE_POINTS``, the worst of each
  group of consecutive records: time, write latency, record age when written, backlog) and ``sync_timeline``.

Stall causes are attributed from what the stack counts during the call (nothing is added to the models): the
clock's time breakdown (card, rtos, flash, host, bus), the card model's pauses (exact time) and merges, the
driver's commands (CMD38 = erase) and the block-op counters of the filesystem's device.  The call's time is
split into shares and the largest names the stall:

* ``card background pause``: the card model's pause time in the call (card busy plus the tick waits of a long
  busy);
* ``erase wait``: erase commands' busy plus the RTOS tick waits of the driver's erase wait (SD), or the
  esp_flash yields during an erase (NOR);
* ``card merge (garbage collection)``: when the card merged in the call, the card busy beyond what the profile
  predicts for the commands sent (program, read access, erase);
* ``FAT allocation`` / ``LittleFS compaction``: the rest of the call times the share of the filesystem's own
  I/O: on FAT the sector reads and writes beyond the record's data sector (FAT entries, directory entry,
  FSInfo), on LittleFS the reads and erases (allocation scans, compaction of metadata pairs, new blocks);
* ``flash program/erase busy``: the card's ordinary program busy, NOR program/erase waits;
* ``other``: host software and bus transfer (and everything on the wall clock, where no breakdown exists).

``runs`` (``--runs``) is the number of logging sessions, one after the other on the same stack: each formats
the filesystem (a directory: a new file), logs ``duration_s`` and closes; the card keeps its state and its
pause draws continue, so sessions differ.  Latencies pool all sessions; the buffer needed is the largest of
any session, records lost add up.
"""
from __future__ import annotations

import bisect
import math
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError, SdbenchError
from ..fs.base import File, FileSystem
from ..media.base import BlockDevice, bottom
from ..options import opt
from ..records import Row, make_row
from ..runner import Context, RowTimer

KIB = 1024
PARTS = ("sd_fatfs", "sd_littlefs", "flash_fatfs", "flash_littlefs", "flash_spiffs", "dir")
#: the names of stall causes, in the order ties are broken
CAUSES = ("card background pause", "card merge (garbage collection)", "erase wait", "FAT allocation",
          "LittleFS compaction", "flash program/erase busy", "other")
#: upper edges of the latency histogram's buckets, ms (the last bucket is everything above)
HIST_EDGES_MS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
#: most points of a timeline in the metadata
TIMELINE_POINTS = 2000
#: most records one session may produce (per-record arrays are kept in memory)
MAX_RECORDS = 5_000_000
#: the stall details kept in the metadata (the longest first)
MAX_STALLS_LISTED = 20
WRITE, SYNC, ROTATE = 0, 1, 2
OP_NAMES = ("write", "sync", "rotate")


@dataclass(frozen=True)
class LoggerConfig:
    part: str = opt("sd_fatfs", choices=PARTS, help="filesystem the log goes to: a part of the stack, or dir "
                                                    "(sdbench run --dir)")
    record_bytes: int = opt(64, unit="B", min=1, max=1 << 20, help="bytes per record (one write() call each)")
    rate_hz: float = opt(200.0, unit="Hz", min=0.01, max=100_000.0, help="records produced per second")
    duration_s: float = opt(60.0, unit="s", min=0.001, max=86_400.0, help="length of the log, per session")
    sync_every_records: int = opt(0, unit="records", min=0, help="sync the file after this many records; 0 = off")
    sync_every_ms: float = opt(1000.0, unit="ms", min=0.0, max=3_600_000.0,
                               help="sync the file after the first write at or past each multiple of this since "
                                    "the log began; 0 = off")
    buffer_bytes: int = opt(4096, unit="B", min=1, max=1 << 30,
                            help="RAM buffer between producer and writer, for records lost (at least one record)")
    rotate_bytes: int = opt(0, unit="B", min=0, max=1 << 40,
                            help="start a new file when the current one would grow past this; 0 = one file")
    file_name: str = opt("log.bin", help="log file in the root directory (rotated files: log-0000.bin, ...)")
    runs: int = opt(1, unit="sessions", min=1, max=1000, help="logging sessions one after the other (--runs)")

    def __post_init__(self) -> None:
        n = self.records
        if n > MAX_RECORDS:
            raise ConfigError(f"logger.duration_s = {self.duration_s:g} s at logger.rate_hz = {self.rate_hz:g} Hz "
                              f"is {n} records; at most {MAX_RECORDS} per session")
        if self.buffer_bytes < self.record_bytes:
            raise ConfigError(f"logger.buffer_bytes = {self.buffer_bytes} B holds no record of logger.record_bytes "
                              f"= {self.record_bytes} B")
        if self.rotate_bytes and self.rotate_bytes < self.record_bytes:
            raise ConfigError(f"logger.rotate_bytes = {self.rotate_bytes} B holds no record of "
                              f"logger.record_bytes = {self.record_bytes} B")
        name = self.file_name
        ok = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        if not name or len(name) > 30 or not set(name) <= ok or name.startswith("."):
            raise ConfigError(f"logger.file_name = {name!r:.40}: a name of 1..30 letters, digits, '.', '_' or '-' "
                              f"in the root directory (not starting with '.')")

    @property
    def records(self) -> int:
        """Records per session: every k with k / rate_hz < duration_s (at least record 0, at t = 0)."""
        return max(1, math.ceil(self.duration_s * self.rate_hz - 1e-9))

    @property
    def period_ns(self) -> float:
        return 1e9 / self.rate_hz

    def file_names(self, count: int) -> list[str]:
        """The first ``count`` log files: ``/log.bin``, or with rotation ``/log-0000.bin``, ``/log-0001.bin``..."""
        if not self.rotate_bytes:
            return [f"/{self.file_name}"]
        stem, dot, ext = self.file_name.rpartition(".")
        if not dot or not stem:
            stem, ext = self.file_name, ""
        return [f"/{stem}-{i:04d}{'.' + ext if ext else ''}" for i in range(count)]

    def files_per_session(self) -> int:
        if not self.rotate_bytes:
            return 1
        per_file = self.rotate_bytes // self.record_bytes
        return -(-self.records // per_file)

    def syncs_per_session(self) -> int:
        """About how many syncs a session makes (for progress): by count, by time, and the final one."""
        n = self.records
        by_count = n // self.sync_every_records if self.sync_every_records else 0
        by_time = int(self.duration_s * 1000.0 / self.sync_every_ms) if self.sync_every_ms else 0
        return by_count + by_time + 1


def config_of(sc: Any) -> LoggerConfig:
    cfg = sc.options.get("logger")
    return cfg if cfg is not None else LoggerConfig()


def retarget(cfg: LoggerConfig, kind: str) -> LoggerConfig:
    """``sdbench run --dir``: the log goes to the directory; ``--device``: to FAT or LittleFS on the device."""
    if kind == "dir":
        return replace(cfg, part="dir")
    if kind == "device" and not cfg.part.startswith("sd_"):
        return replace(cfg, part="sd_fatfs")
    return cfg


def timed_calls(sc: Any) -> int:
    cfg = config_of(sc)
    return cfg.runs * (cfg.records + cfg.syncs_per_session() + cfg.files_per_session() - 1)


def preflight(sc: Any, built: Any, capacity: Callable[[str], int | None]) -> None:
    """Refuse, before any I/O, a part the stack has not, a log that does not fit it, or a directory that holds a
    file of the log already (ConfigError naming the option)."""
    cfg = config_of(sc)
    parts = built.target.fs_factories
    if cfg.part not in parts:
        if cfg.part == "dir":
            raise ConfigError("logger.part = \"dir\" needs a directory: sdbench run --dir DIR")
        have = ", ".join(sorted(parts)) or "none"
        raise ConfigError(f"logger.part = {cfg.part!r}: this stack has no such filesystem (it has: {have})")
    need = cfg.records * cfg.record_bytes
    if cfg.part == "dir":
        fs = built.target.make_fs("dir")
        root = getattr(fs, "root", None)
        for name in cfg.file_names(cfg.files_per_session()):
            if fs.exists(name):
                raise ConfigError(f"logger.file_name: {name.lstrip('/')} exists in {root or 'the directory'}; the "
                                  f"logger does not overwrite files (remove it or choose another name)")
        if root is not None and shutil.disk_usage(root).free < need:
            raise ConfigError(f"logger.duration_s: the log's {need} B do not fit the {shutil.disk_usage(root).free} "
                              f"B free in {root}")
        return
    cap = capacity(cfg.part)  # also checks the filesystem's configuration against its device
    if cap is not None and need > cap:
        raise ConfigError(f"logger.duration_s = {cfg.duration_s:g} s x logger.rate_hz = {cfg.rate_hz:g} Hz x "
                          f"logger.record_bytes = {cfg.record_bytes} B = {need} B do not fit {cfg.part}'s "
                          f"{cap} B")


# ---- syncing a file through the FileSystem interface ------------------------------------------------------

def sync_file(f: File) -> None:
    """Commit an open file's data and metadata to the medium, as a logger's f_sync/fsync does: File.sync (FatFs
    ``f_sync``, ``lfs_file_sync``, ``SPIFFS_fflush``, ``fsync`` in a directory).  A costed file (simulated host)
    charges one call first, like a write."""
    f.sync()


# ---- what the stack counts around one call ---------------------------------------------------------------

class _Probe:
    """Snapshots of the counters the stack keeps (clock breakdown and commands, block-op counters of the
    filesystem's device and of the device at the bottom, the card model's pauses and merges)."""

    def __init__(self, clock: Any, fs: FileSystem) -> None:
        self.clock = clock
        dev = getattr(fs, "device", None)
        self.fs_dev: BlockDevice | None = dev if isinstance(dev, BlockDevice) else None
        low = bottom(self.fs_dev) if self.fs_dev is not None else None
        self.low: BlockDevice | None = low if low is not self.fs_dev else None
        card = getattr(low, "card", None)
        self.card = card if card is not None and hasattr(card, "pause_ns_total") else None
        self.profile = getattr(low, "profile", None) if self.card is not None else None
        self.fs_kind = getattr(fs, "kind", "")
        self.devices: tuple[BlockDevice, ...] = tuple(d for d in (self.fs_dev, self.low) if d is not None)

    def mark(self) -> tuple[Any, ...]:
        c = self.card
        return (self.clock.breakdown_ns(), self.clock.commands_snapshot(),
                self.fs_dev.stats.snapshot() if self.fs_dev is not None else None,
                self.low.stats.snapshot() if self.low is not None else None,
                (c.pauses, c.pause_ns_total, c.merges) if c is not None else None)

    def delta(self, m: tuple[Any, ...]) -> dict[str, Any]:
        bd0, cmd0, fs0, low0, card0 = m
        out: dict[str, Any] = {
            "breakdown_ns": _diff(self.clock.breakdown_ns(), bd0),
            "commands": _diff(self.clock.commands_snapshot(), cmd0),
            "fs_ops": _diff(self.fs_dev.stats.snapshot(), fs0) if self.fs_dev is not None else {},
            "device_ops": _diff(self.low.stats.snapshot(), low0) if self.low is not None else {},
        }
        if self.card is not None:
            c = self.card
            out["card"] = {"pauses": c.pauses - card0[0], "pause_ns": c.pause_ns_total - card0[1],
                           "merges": c.merges - card0[2]}
        return out


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _data_sector_writes(op: int, offset: int, nbytes: int, sector: int = 512) -> int:
    """Sector writes FatFs makes for the file's own data in a call: a write() flushes the buffered sector at
    each sector boundary it starts or crosses; a sync writes the buffered (partial) sector."""
    if op == SYNC:
        return 1 if offset > 0 else 0
    if op == ROTATE:
        return 1
    first = max(offset, 1)
    return max(0, (offset + nbytes - 1) // sector - (first - 1) // sector)


def attribute(d: dict[str, Any], dur_ns: int, *, op: int, offset: int, nbytes: int, fs_kind: str,
              profile: Any = None) -> tuple[str, dict[str, float]]:
    """The cause of one call and its time by cause (ns) from the counters of :meth:`_Probe.delta`."""
    shares = dict.fromkeys(CAUSES, 0.0)
    bd = d["breakdown_ns"]
    if not bd:  # the wall clock accounts for nothing
        shares["other"] = float(dur_ns)
        return "other", shares
    cmds, fs_ops, low_ops = d["commands"], d["fs_ops"], d["device_ops"]
    card = d.get("card")
    rtos = float(bd.get("rtos", 0))
    busy_pool = 0.0   # ordinary busy: program, read access (SD card or NOR flash)
    if card is not None:  # a simulated SD card: its busy is "card", the tick waits of a long busy "rtos"
        wait = float(bd.get("card", 0)) + rtos
        pause = min(float(card["pause_ns"]), wait)
        shares["card background pause"] = pause
        rest = wait - pause
        n38 = cmds.get("CMD38", 0)
        if n38:
            erase_est = n38 * (profile.erase_busy_us if profile is not None else 0.0) * 1e3
            erase = min(rest, erase_est + (rtos if pause == 0 else 0.0))
            shares["erase wait"] = erase
            rest -= erase
        if card["merges"] and profile is not None:
            merge = max(0.0, rest - _program_estimate_ns(cmds, low_ops or fs_ops, profile))
            shares["card merge (garbage collection)"] = merge
            rest -= merge
        busy_pool = rest
    else:  # NOR flash (or a device without a card model): "flash" waits, "rtos" yields
        flash = float(bd.get("flash", 0)) + float(bd.get("card", 0))
        erases = (low_ops or fs_ops).get("erases", 0)
        if erases and rtos:
            shares["erase wait"] = rtos
            busy_pool = flash
        else:
            busy_pool = flash + rtos
    other_pool = float(sum(v for k, v in bd.items() if k not in ("card", "rtos", "flash")))
    frac = _fs_share(fs_ops, op=op, offset=offset, nbytes=nbytes, fs_kind=fs_kind)
    fs_name = {"fat": "FAT allocation", "littlefs": "LittleFS compaction"}.get(fs_kind, "other")
    shares[fs_name] += (busy_pool + other_pool) * frac
    shares["flash program/erase busy"] += busy_pool * (1 - frac)
    shares["other"] += other_pool * (1 - frac)
    cause = max(CAUSES, key=lambda c: (shares[c], -CAUSES.index(c)))
    return cause, shares


def _program_estimate_ns(cmds: dict[str, int], ops: dict[str, int], p: Any) -> float:
    """Busy the card profile predicts for the commands of a call without merges or pauses (ns)."""
    w24, w25 = cmds.get("CMD24", 0), cmds.get("CMD25", 0)
    r17, r18 = cmds.get("CMD17", 0), cmds.get("CMD18", 0)
    blocks_w = ops.get("bytes_written", 0) // 512
    blocks_r = ops.get("bytes_read", 0) // 512
    us = (w24 * p.write_busy_single_us + w25 * p.write_busy_end_us
          + max(0, blocks_w - w24 - w25) * p.write_busy_block_us
          + (r17 + r18) * p.read_access_us + max(0, blocks_r - r17 - r18) * p.read_block_gap_us
          + cmds.get("CMD38", 0) * p.erase_busy_us)
    return us * 1e3


def _fs_share(fs_ops: dict[str, int], *, op: int, offset: int, nbytes: int, fs_kind: str) -> float:
    """The share of a call's device operations that are the filesystem's own (not the record's data)."""
    reads, writes, erases = fs_ops.get("reads", 0), fs_ops.get("writes", 0), fs_ops.get("erases", 0)
    total = reads + writes + erases
    if not total:
        return 0.0
    if fs_kind == "fat":
        if op == ROTATE:
            return 1.0
        data_w = _data_sector_writes(op, offset, nbytes)
        # FAT on 4096-byte sectors (wear levelling) reads each big sector before writing it
        data_r = data_w if fs_ops.get("bytes_written", 0) > 512 * max(writes, 1) else 0
        own = max(0, reads - data_r) + max(0, writes - data_w) + erases
        return min(1.0, own / total)
    if fs_kind == "littlefs":
        return (reads + erases) / total
    return 0.0


# ---- one logging session ---------------------------------------------------------------------------------

@dataclass
class _Op:
    kind: int
    start_ns: int   # relative to the session's start
    dur_ns: int
    written: int    # records written once the op ended
    offset: int     # file offset before the op


class _Session:
    """The calls of one session, their times, and the producer's schedule."""

    def __init__(self, index: int, cfg: LoggerConfig) -> None:
        self.index = index
        self.n = cfg.records
        self.period = cfg.period_ns
        self.ops: list[_Op] = []
        self.end_ns = 0
        self.files = 0
        self.card: dict[str, int] = {}

    def t(self, k: int) -> int:
        """When record k is produced, ns after the session's start."""
        return int(k * self.period)

    def produced_before(self, t_ns: int) -> int:
        """Records produced strictly before ``t_ns``."""
        if t_ns <= 0:
            return 0
        k = min(self.n, int(t_ns / self.period))
        while k > 0 and self.t(k - 1) >= t_ns:
            k -= 1
        while k < self.n and self.t(k) < t_ns:
            k += 1
        return k

    def backlog(self) -> tuple[int, int]:
        """(most records held at once, when, ns): produced but not yet written, just before each call ends."""
        best, when = 0, 0
        done = 0
        for op in self.ops:
            end = op.start_ns + op.dur_ns
            held = self.produced_before(end) - done
            if held > best:
                best, when = held, end
            done = op.written
        return max(best, 1 if self.ops else 0), when


def replay(ops: list[tuple[int, int]], n: int, t: Callable[[int], int], capacity: int | None) -> dict[str, Any]:
    """The producer and the writer with room for ``capacity`` records (None: unbounded), the writer making the
    calls ``ops`` ((kind, duration ns) in the order the run made them) with their durations.

    A record produced when the buffer is full is lost; a completion frees its slot before a record produced at
    the same instant.  Returns the records lost, the most held at once and when the first was lost."""
    cap = capacity if capacity is not None else n + 1
    now = 0
    k = 0          # next record to be produced
    held = 0       # records in the buffer (the one being written included)
    lost = 0
    most = 0
    first_lost: int | None = None

    def produce(until: int, inclusive: bool) -> None:
        nonlocal k, held, lost, most, first_lost
        while k < n:
            tk = t(k)
            if tk > until or (tk == until and not inclusive):
                break
            if held >= cap:
                lost += 1
                if first_lost is None:
                    first_lost = tk
            else:
                held += 1
                most = max(most, held)
            k += 1

    for kind, dur in ops:
        if kind == WRITE:
            produce(now, True)
            if held == 0:
                if k >= n:
                    break
                now = max(now, t(k))
                produce(now, True)
            end = now + dur
            produce(end, False)
            held -= 1
            now = end
        else:
            end = now + dur
            produce(end, False)
            now = end
    produce(now, True)
    return {"records_lost": lost, "most_held": most, "first_lost_ns": first_lost}


class _Stalls:
    """Calls longer than the record period, attributed; the longest call in full."""

    def __init__(self, period_ns: float) -> None:
        self.threshold = period_ns
        self.by_cause: dict[str, dict[str, float]] = {}
        self.listed: list[dict[str, Any]] = []
        self.longest: dict[str, Any] | None = None
        self.longest_ns = -1

    def note(self, detail: dict[str, Any], dur_ns: int) -> None:
        c = self.by_cause.setdefault(detail["cause"], {"count": 0, "total_ms": 0.0, "max_ms": 0.0})
        c["count"] += 1
        c["total_ms"] += dur_ns / 1e6
        c["max_ms"] = max(c["max_ms"], dur_ns / 1e6)
        self.listed.append(detail)
        if len(self.listed) > 4 * MAX_STALLS_LISTED:
            self._trim()

    def _trim(self) -> None:
        self.listed.sort(key=lambda s: -s["ms"])
        del self.listed[MAX_STALLS_LISTED:]


class _Writer:
    """Runs the sessions: the producer's schedule, the timed calls, the counters around them."""

    def __init__(self, cfg: LoggerConfig, ctx: Context, fs: FileSystem, seed: int) -> None:
        self.cfg, self.fs = cfg, fs
        self.clock = ctx.clock
        self.virtual = self.clock.simulated and hasattr(self.clock, "advance_ns")
        self.probe = _Probe(self.clock, fs)
        devs = self.probe.devices
        r = cfg.record_bytes
        self.rows: dict[int, RowTimer] = {
            WRITE: ctx.row("logger write", "write", r, devs),
            SYNC: ctx.row("logger sync", "sync", 0, devs),
            ROTATE: ctx.row("logger rotate", "rotate", 0, devs),
        }
        self.stalls = _Stalls(cfg.period_ns)
        rng = random.Random(f"logger:{seed}")
        self.pattern = rng.randbytes(max(r, 8) + 8)
        self.sessions: list[_Session] = []
        self.lat: dict[int, list[int]] = {WRITE: [], SYNC: [], ROTATE: []}

    def _wait_until(self, t_abs_ns: int) -> None:
        now = self.clock.now_ns()
        if now >= t_abs_ns:
            return
        if self.virtual:
            # the writer task blocked on its queue
            self.clock.advance_ns(t_abs_ns - now, "other", "logger.waiting_for_records")
        else:
            time.sleep((t_abs_ns - now) / 1e9)

    def _call(self, s: _Session, kind: int, fn: Callable[[], Any], t0: int, written: int, offset: int) -> None:
        probe = self.probe
        m = probe.mark()
        start = self.clock.now_ns()
        rt = self.rows[kind]
        rt.time(fn)
        dur = rt.samples_ns[-1]
        s.ops.append(_Op(kind, start - t0, dur, written, offset))
        self.lat[kind].append(dur)
        longest = dur > self.stalls.longest_ns
        if dur > self.stalls.threshold or longest:
            d = probe.delta(m)
            cause, shares = attribute(d, dur, op=kind, offset=offset, nbytes=self.cfg.record_bytes,
                                      fs_kind=probe.fs_kind, profile=probe.profile)
            detail = {"op": OP_NAMES[kind], "session": s.index, "at_s": round((start - t0) / 1e9, 6),
                      "record": written - (1 if kind == WRITE else 0), "ms": dur / 1e6, "cause": cause,
                      "shares_ms": {c: round(v / 1e6, 6) for c, v in shares.items() if v > 0},
                      "breakdown_ms": {c: v / 1e6 for c, v in sorted(d["breakdown_ns"].items())},
                      "commands": dict(sorted(d["commands"].items())), "fs_ops": _ops(d["fs_ops"]),
                      "device_ops": _ops(d["device_ops"])}
            if "card" in d:
                detail["card"] = {"pauses": d["card"]["pauses"], "pause_ms": d["card"]["pause_ns"] / 1e6,
                                  "merges": d["card"]["merges"]}
            if dur > self.stalls.threshold:
                self.stalls.note(detail, dur)
            if longest:
                self.stalls.longest, self.stalls.longest_ns = detail, dur

    def session(self, index: int) -> _Session:
        cfg, fs = self.cfg, self.fs
        s = _Session(index, cfg)
        self.sessions.append(s)
        n, r = cfg.records, cfg.record_bytes
        per_file = cfg.rotate_bytes // r if cfg.rotate_bytes else n
        names = cfg.file_names(cfg.files_per_session())
        card = self.probe.card
        card0: tuple[int, int, int] | None = None
        if cfg.part != "dir":
            fs.format()
        fs.mount()
        # set-up, untimed: the log starts with its (new) file open; "w", as LittleFS' "a" creates no file
        f = fs.open(names[0], "w")
        s.files = 1
        try:
            t0 = self.clock.now_ns()
            if card is not None:  # what the card does during the log (the set-up's pauses and merges are not)
                card0 = (card.pauses, card.pause_ns_total, card.merges)
            sync_ns = cfg.sync_every_ms * 1e6
            next_sync = sync_ns   # time-based syncs are due at whole multiples of sync_every_ms
            in_file = 0
            pat, head = self.pattern, min(8, r)
            for k in range(n):
                self._wait_until(t0 + s.t(k))
                rec = (k.to_bytes(8, "little")[:head] + pat[head:r]) if r > 8 else k.to_bytes(8, "little")[:r]
                off = in_file * r
                self._call(s, WRITE, lambda: f.write(rec), t0, k + 1, off)
                in_file += 1
                now = self.clock.now_ns() - t0
                if (cfg.sync_every_records and (k + 1) % cfg.sync_every_records == 0) or \
                        (sync_ns and now >= next_sync):
                    self._call(s, SYNC, lambda: sync_file(f), t0, k + 1, in_file * r)
                    if sync_ns:
                        done = self.clock.now_ns() - t0
                        while next_sync <= done:
                            next_sync += sync_ns
                if in_file == per_file and k + 1 < n:
                    nxt = names[s.files]

                    def rotate() -> File:
                        f.close()
                        return fs.open(nxt, "w")

                    holder: list[File] = []
                    self._call(s, ROTATE, lambda: holder.append(rotate()), t0, k + 1, in_file * r)
                    f = holder[0]
                    s.files += 1
                    in_file = 0
            self._call(s, SYNC, lambda: sync_file(f), t0, n, in_file * r)
            s.end_ns = self.clock.now_ns() - t0
            if card is not None and card0 is not None:
                s.card = {"pauses": card.pauses - card0[0], "pause_ms": (card.pause_ns_total - card0[1]) / 1e6,
                          "merges": card.merges - card0[2]}
            f.close()
            size = fs.stat(names[s.files - 1]).size
            if size != in_file * r:
                raise SdbenchError(f"logger: {names[s.files - 1]} holds {size} B after the log, not the "
                                   f"{in_file * r} B written")
        finally:
            if not f.closed:
                try:
                    f.close()
                except SdbenchError:
                    pass
            if cfg.part == "dir":
                for name in names[:s.files]:
                    if fs.exists(name):
                        fs.remove(name)
            fs.unmount()
        return s


def _ops(d: dict[str, int]) -> dict[str, int]:
    return {k: d[k] for k in ("reads", "writes", "erases", "trims", "syncs") if d.get(k)}


def percentiles_ms(samples_ns: list[int]) -> dict[str, float]:
    """p50, p99, p99.9 (nearest rank), max and mean of samples in ns, as ms."""
    if not samples_ns:
        return {}
    xs = sorted(samples_ns)
    n = len(xs)

    def rank(p: float) -> float:
        return xs[max(0, math.ceil(p / 100.0 * n) - 1)] / 1e6

    return {"p50_ms": rank(50), "p99_ms": rank(99), "p99_9_ms": rank(99.9), "max_ms": xs[-1] / 1e6,
            "mean_ms": sum(xs) / n / 1e6, "count": n}


def histogram(samples_ns: list[int]) -> list[int]:
    """Counts per bucket of HIST_EDGES_MS (the last bucket: above the last edge)."""
    counts = [0] * (len(HIST_EDGES_MS) + 1)
    edges = [e * 1e6 for e in HIST_EDGES_MS]
    for v in samples_ns:
        counts[bisect.bisect_left(edges, v)] += 1
    return counts


def _timeline(sessions: list[_Session]) -> dict[str, Any]:
    """Per record (the worst of each group when there are more than TIMELINE_POINTS): when it was produced
    (s after its session's start), its write() latency, its age once written, the records held."""
    rows: list[tuple[int, float, float, float, int]] = []
    for s in sessions:
        done = 0
        for op in s.ops:
            if op.kind == WRITE:
                k = op.written - 1
                end = op.start_ns + op.dur_ns
                rows.append((s.index, s.t(k) / 1e9, op.dur_ns / 1e6, (end - s.t(k)) / 1e6,
                             s.produced_before(end) - done))
            done = op.written
    group = max(1, -(-len(rows) // TIMELINE_POINTS))
    out: dict[str, list[Any]] = {"session": [], "t_s": [], "write_ms": [], "age_ms": [], "held_records": []}
    for i in range(0, len(rows), group):
        chunk = rows[i:i + group]
        out["session"].append(chunk[0][0])
        out["t_s"].append(round(chunk[0][1], 6))
        out["write_ms"].append(round(max(c[2] for c in chunk), 6))
        out["age_ms"].append(round(max(c[3] for c in chunk), 6))
        out["held_records"].append(max(c[4] for c in chunk))
    return {"records_per_point": group, **out}


def _sync_timeline(sessions: list[_Session]) -> dict[str, Any]:
    pts = [(s.index, op.start_ns / 1e9, op.dur_ns / 1e6) for s in sessions for op in s.ops if op.kind == SYNC]
    group = max(1, -(-len(pts) // TIMELINE_POINTS))
    out: dict[str, list[Any]] = {"session": [], "t_s": [], "sync_ms": []}
    for i in range(0, len(pts), group):
        chunk = pts[i:i + group]
        out["session"].append(chunk[0][0])
        out["t_s"].append(round(chunk[0][1], 6))
        out["sync_ms"].append(round(max(c[2] for c in chunk), 6))
    return {"syncs_per_point": group, **out}


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = config_of(sc)
    fs = built.target.make_fs(cfg.part)
    w = _Writer(cfg, ctx, fs, sc.seed)
    for i in range(cfg.runs):
        w.session(i)
    yield from _finish(cfg, w, built)


def _finish(cfg: LoggerConfig, w: _Writer, built: Any) -> Iterator[Row]:
    r = cfg.record_bytes
    for kind in (WRITE, SYNC, ROTATE):
        if w.rows[kind].samples_ns:
            yield w.rows[kind].finish()
    total = [s.end_ns for s in w.sessions]
    nbytes = cfg.records * r
    yield make_row("logger run", "write", nbytes, total, unit="KiB/s",
                   value_fn=lambda row: (nbytes / KIB) / (row.time_ms / 1000.0) if row.time_ms > 0 else 0.0)

    cap = cfg.buffer_bytes // r
    needed, needed_at, session_of = 0, 0, 0
    lost, first_lost = 0, None
    per_session = []
    for s in w.sessions:
        most, when = s.backlog()
        if most > needed:
            needed, needed_at, session_of = most, when, s.index
        ops = [(op.kind, op.dur_ns) for op in s.ops]
        got = replay(ops, s.n, s.t, cap)
        lost += got["records_lost"]
        if got["first_lost_ns"] is not None and first_lost is None:
            first_lost = (s.index, got["first_lost_ns"] / 1e9)
        busy = sum(op.dur_ns for op in s.ops)
        per_session.append({"session": s.index, "buffer_needed_bytes": most * r, "records_lost": got["records_lost"],
                            "duration_s": s.end_ns / 1e9, "writer_busy_pct": 100.0 * busy / max(s.end_ns, 1),
                            "files": s.files, **({"card": s.card} if s.card else {})})
    records = cfg.records * len(w.sessions)
    stalls = w.stalls
    stalls._trim()
    longest = stalls.longest
    meta: dict[str, Any] = {
        "part": cfg.part, "filesystem": w.probe.fs_kind, "clock": w.clock.kind, "record_bytes": r,
        "rate_hz": cfg.rate_hz, "duration_s": cfg.duration_s, "records": records, "sessions": len(w.sessions),
        "sync": {"every_records": cfg.sync_every_records, "every_ms": cfg.sync_every_ms,
                 "count": len(w.lat[SYNC])},
        "files": sum(s.files for s in w.sessions), "bytes_written": records * r,
        "write_latency_ms": percentiles_ms(w.lat[WRITE]), "sync_latency_ms": percentiles_ms(w.lat[SYNC]),
        "buffer": {"needed_bytes": needed * r, "needed_records": needed, "needed_at_s": needed_at / 1e9,
                   "needed_in_session": session_of, "buffer_bytes": cfg.buffer_bytes, "capacity_records": cap,
                   "records_lost": lost, "lost_pct": 100.0 * lost / max(records, 1),
                   **({"first_lost": {"session": first_lost[0], "at_s": first_lost[1]}} if first_lost else {})},
        "longest_stall": longest,
        "stalls": {"threshold_ms": cfg.period_ns / 1e6, "count": sum(int(c["count"]) for c in
                                                                        stalls.by_cause.values()),
                   "by_cause": {c: stalls.by_cause[c] for c in CAUSES if c in stalls.by_cause},
                   "longest": stalls.listed[:MAX_STALLS_LISTED]},
        "histogram": {"edges_ms": list(HIST_EDGES_MS), "write": histogram(w.lat[WRITE]),
                      "sync": histogram(w.lat[SYNC]), **({"rotate": histogram(w.lat[ROTATE])}
                                                          if w.lat[ROTATE] else {})},
        "sessions_detail": per_session,
        "timeline": _timeline(w.sessions),
        "sync_timeline": _sync_timeline(w.sessions),
    }
    if w.lat[ROTATE]:
        meta["rotate_latency_ms"] = percentiles_ms(w.lat[ROTATE])
    built.metadata["logger"] = meta
    if lost:
        built.warnings.append(f"logger: {lost} of {records} records lost with buffer_bytes = {cfg.buffer_bytes} B "
                              f"({cap} records); a buffer of {needed * r} B loses none")
    if not w.virtual:
        built.warnings.append("logger: the wall clock has no time breakdown; stall causes are 'other'")


def summary_lines(rec: Any) -> list[tuple[str, str]]:
    """What a logger user asks first: the buffer that loses nothing, records lost, the longest stall and why."""
    m = rec.metadata.get("logger") or {}
    buf, stall = m.get("buffer") or {}, m.get("longest_stall") or {}
    out = []
    if buf:
        out.append(("RAM buffer that loses no record", f"{buf.get('needed_bytes', 0):,} B "
                                                       f"({buf.get('needed_records', 0):,} records)"))
        if buf.get("buffer_bytes"):
            out.append((f"records lost with a {buf['buffer_bytes']:,} B buffer", f"{buf.get('records_lost', 0):,}"))
    if stall:
        out.append(("longest stall", f"{stall.get('ms', 0):.1f} ms ({stall.get('op', '?')} at "
                                     f"{stall.get('at_s', 0):.2f} s): {stall.get('cause', 'other')}"))
    for name in ("write_latency_ms", "sync_latency_ms"):
        lat = m.get(name)
        if lat:
            out.append((name.split("_")[0] + " p50 / p99 / p99.9 / max",
                        f"{lat['p50_ms']:.3f} / {lat['p99_ms']:.3f} / {lat['p99_9_ms']:.3f} / {lat['max_ms']:.3f} ms"))
    return out
