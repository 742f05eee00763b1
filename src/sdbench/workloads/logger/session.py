"""One logging session: the producer's schedule, the writer's calls (write, sync, rotate), the RAM buffer
between them.  The protocol times the calls (:mod:`.figures`); a power-loss run makes the same calls untimed
and cuts the power during one of them (:mod:`sdbench.powerloss`)."""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import SdbenchError
from ...fs.base import File, FileSystem
from .config import ROTATE, SYNC, WRITE, LoggerConfig

#: the stall details kept in the metadata (the longest first)
MAX_STALLS_LISTED = 20


def sync_file(f: File) -> None:
    """Commit an open file's data and metadata to the medium, as a logger's f_sync/fsync does: File.sync (FatFs
    ``f_sync``, ``lfs_file_sync``, ``SPIFFS_fflush``, ``fsync`` in a directory).  A costed file (simulated host)
    charges one call first, like a write."""
    f.sync()


class Schedule:
    """When each record of a session is produced, ns after the session's start: record k at ``k / rate_hz``,
    plus, with ``jitter_ms``, a seeded uniform delay below the record period (records stay in order)."""

    def __init__(self, cfg: LoggerConfig, seed: int, session: int) -> None:
        self.n = cfg.records
        self.period = cfg.period_ns
        self._jitter: list[int] | None = None
        if cfg.jitter_ms > 0:
            rng = random.Random(f"logger-jitter:{seed}:{session}")
            j = cfg.jitter_ms * 1e6
            self._jitter = [int(rng.random() * j) for _ in range(self.n)]

    def t(self, k: int) -> int:
        """When record k is produced."""
        base = int(k * self.period)
        return base if self._jitter is None else base + self._jitter[k]

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


def record_bytes(k: int, r: int, pattern: bytes) -> bytes:
    """Record k's contents: its index (little-endian, up to 8 bytes) and then the session's pattern."""
    head = min(8, r)
    return (k.to_bytes(8, "little")[:head] + pattern[head:r]) if r > 8 else k.to_bytes(8, "little")[:r]


def pattern_of(cfg: LoggerConfig, seed: int) -> bytes:
    """The filler of every record (seeded)."""
    return random.Random(f"logger:{seed}").randbytes(max(cfg.record_bytes, 8) + 8)


#: call(kind, fn, written records once it ends, file offset before it) runs one call of the writer
Call = Callable[[int, Callable[[], Any], int, int], None]


@dataclass
class FileEvents:
    """What a session did to its files (a power-loss run checks the survivors against it)."""

    names: list[str] = field(default_factory=list)     # every file created, in order
    deleted: list[str] = field(default_factory=list)   # files removed by the ring (keep_files)


def write_log(cfg: LoggerConfig, fs: FileSystem, clock: Any, schedule: Schedule, pattern: bytes, call: Call, *,
              fresh: bool = True, on_start: Callable[[int], None] | None = None,
              on_end: Callable[[], None] | None = None, events: FileEvents | None = None,
              on_file: Callable[[str, str], None] | None = None) -> tuple[int, int]:
    """One session on ``fs``: format it (``fresh``; a directory is never formatted), mount, open the first file
    (untimed set-up), then every record's write() at its time, syncs by the policy, rotations (deleting the
    oldest file of the ring), the final sync, close.  ``on_start(t0)`` when the log begins, ``on_end()`` after
    its final sync (before the close); ``on_file("closed", name)`` once a rotation's close returned and
    ``on_file("deleting", name)`` before the ring removes a file.  Each write, sync
    and rotation goes through ``call``.  The writer waits for a record that is not due yet: on a virtual clock
    the wait advances it, on the wall clock it sleeps.  Returns (end of the log ns after t0, files created)."""
    n, r = cfg.records, cfg.record_bytes
    per_file = cfg.rotate_bytes // r if cfg.rotate_bytes else n
    names = cfg.file_names(cfg.files_per_session())
    ev = events if events is not None else FileEvents()
    virtual = clock.simulated and hasattr(clock, "advance_ns")
    if fresh:
        fs.format()
    fs.mount()
    # set-up, untimed: the log starts with its (new) file open; "w", as LittleFS' "a" creates no file
    f = fs.open(names[0], "w")
    ev.names.append(names[0])
    files = 1
    in_file = 0
    try:
        t0 = clock.now_ns()
        if on_start is not None:
            on_start(t0)
        sync_ns = cfg.sync_every_ms * 1e6
        next_sync = sync_ns   # time-based syncs are due at whole multiples of sync_every_ms
        for k in range(n):
            due = t0 + schedule.t(k)
            now = clock.now_ns()
            if now < due:
                if virtual:
                    # the writer task blocked on its queue
                    clock.advance_ns(due - now, "other", "logger.waiting_for_records")
                else:
                    time.sleep((due - now) / 1e9)
            rec = record_bytes(k, r, pattern)
            call(WRITE, lambda: f.write(rec), k + 1, in_file * r)
            in_file += 1
            now = clock.now_ns() - t0
            if (cfg.sync_every_records and (k + 1) % cfg.sync_every_records == 0) or \
                    (sync_ns and now >= next_sync):
                call(SYNC, lambda: sync_file(f), k + 1, in_file * r)
                if sync_ns:
                    done = clock.now_ns() - t0
                    while next_sync <= done:
                        next_sync += sync_ns
            if in_file == per_file and k + 1 < n:
                nxt = names[files]
                old = ev.names[-cfg.keep_files] if cfg.keep_files and len(ev.names) - len(ev.deleted) >= \
                    cfg.keep_files else None

                def rotate() -> File:
                    f.close()
                    if on_file is not None:
                        on_file("closed", ev.names[-1])
                    if old is not None:
                        if on_file is not None:
                            on_file("deleting", old)
                        fs.remove(old)
                    return fs.open(nxt, "w")

                holder: list[File] = []
                call(ROTATE, lambda: holder.append(rotate()), k + 1, in_file * r)
                if old is not None:
                    ev.deleted.append(old)
                f = holder[0]
                ev.names.append(nxt)
                files += 1
                in_file = 0
        call(SYNC, lambda: sync_file(f), n, in_file * r)
        end = clock.now_ns() - t0
        if on_end is not None:
            on_end()
        f.close()
        size = fs.stat(names[files - 1]).size
        if size != in_file * r:
            raise SdbenchError(f"logger: {names[files - 1]} holds {size} B after the log, not the "
                               f"{in_file * r} B written")
    finally:
        if not f.closed:
            try:
                f.close()
            except SdbenchError:
                pass
    return end, files


# ---- the sessions' record -----------------------------------------------------------------------------------

@dataclass
class Op:
    kind: int
    start_ns: int   # relative to the session's start
    dur_ns: int
    written: int    # records written once the op ended
    offset: int     # file offset before the op


class Session:
    """The calls of one session, their times, and the producer's schedule."""

    def __init__(self, index: int, cfg: LoggerConfig, schedule: Schedule) -> None:
        self.index = index
        self.n = cfg.records
        self.schedule = schedule
        self.ops: list[Op] = []
        self.end_ns = 0
        self.files = 0
        self.card: dict[str, Any] = {}

    def t(self, k: int) -> int:
        """When record k is produced, ns after the session's start."""
        return self.schedule.t(k)

    def produced_before(self, t_ns: int) -> int:
        return self.schedule.produced_before(t_ns)

    def held(self) -> list[tuple[int, int]]:
        """(records held, when ns) just before each call ends: produced but not yet written (the record being
        written is still in the buffer)."""
        out = []
        done = 0
        for op in self.ops:
            end = op.start_ns + op.dur_ns
            out.append((self.produced_before(end) - done, end))
            done = op.written
        return out

    def backlog(self) -> tuple[int, int]:
        """(most records held at once, when, ns)."""
        best, when = 0, 0
        for held, end in self.held():
            if held > best:
                best, when = held, end
        return max(best, 1 if self.ops else 0), when

    def busy_ns(self) -> int:
        return sum(op.dur_ns for op in self.ops)


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


class Stalls:
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
            self.trim()

    def trim(self) -> None:
        self.listed.sort(key=lambda s: -s["ms"])
        del self.listed[MAX_STALLS_LISTED:]
