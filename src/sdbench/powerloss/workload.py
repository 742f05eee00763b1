"""The workloads a power cut interrupts: the data logger's files (:class:`WorkloadConfig`, :class:`Logger`) and
the logger protocol's own log (:class:`LogReplayConfig`, :class:`LogReplay`), each writer keeping what it wrote and
what was acknowledged."""
from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError
from ..media.base import BlockDevice
from ..options import opt
from ..scenarios import Scenario
from ..workloads.logger import LoggerConfig, Schedule, record_bytes, write_log
from ..workloads.logger.session import FileEvents, pattern_of
from .results import PARTS


@dataclass(frozen=True)
class WorkloadConfig:
    """The data logger a power-loss run cuts (table ``[powerloss]``)."""

    files: int = opt(3, min=1, max=64, help="files written one after the other")
    file_bytes: int = opt(8192, unit="B", min=512, max=1 << 24, help="bytes per file")
    chunk_bytes: int = opt(1024, unit="B", min=1, max=1 << 20,
                           help="bytes per write() call (raw: rounded up to whole sectors per device write)")
    sync_every: int = opt(4, unit="chunks", min=0, max=1 << 16,
                          help="chunks between fsync calls (0 = only at close)")
    cuts: int = opt(200, min=1, max=100_000, help="cut points per cell (all of them when there are fewer)")
    seed: int = opt(1, min=0, max=(1 << 63) - 1, help="seed of the cut points, torn lengths and data")

    def grown(self) -> "WorkloadConfig | None":
        """The workload with twice the files (None past MAX_FILES)."""
        return replace(self, files=self.files * 2) if self.files * 2 <= MAX_FILES else None

    def make(self) -> "Logger":
        return Logger(self)

    def describe(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("file_bytes", "chunk_bytes", "sync_every")}


#: a workload grows (more files) until it has this many cut points, up to this many files
MAX_FILES = 256


#: most records a logger workload grows to
MAX_LOG_RECORDS = 200_000


@dataclass(frozen=True)
class LogReplayConfig:
    """The logger protocol's log as the workload a power-loss run cuts (``--workload logger``)."""

    log: LoggerConfig
    cuts: int = 200
    seed: int = 1

    @classmethod
    def start(cls, log: LoggerConfig, cuts: int, seed: int) -> "LogReplayConfig":
        """The shortest log worth cutting: three sync intervals (by time or by records; 100 records without a
        sync policy), at most the scenario's, one session, and a buffer that holds every record (the RAM buffer
        is not the medium)."""
        period_s = 1.0 / log.rate_hz
        by_time = log.sync_every_ms / 1000.0 if log.sync_every_ms else 0.0
        by_records = log.sync_every_records * period_s if log.sync_every_records else 0.0
        interval = min(x for x in (by_time, by_records) if x) if (by_time or by_records) else 100 * period_s
        duration = min(log.duration_s, max(3 * interval + period_s / 2, period_s))
        return cls(replace(log, duration_s=duration, runs=1, buffer_bytes=max(log.buffer_bytes, log.record_bytes)),
                   cuts, seed)

    def grown(self) -> "LogReplayConfig | None":
        """The log twice as long (None past MAX_LOG_RECORDS)."""
        if self.log.records * 2 > MAX_LOG_RECORDS:
            return None
        return replace(self, log=replace(self.log, duration_s=self.log.duration_s * 2))

    def make(self) -> "LogReplay":
        return LogReplay(self)

    def describe(self) -> dict[str, Any]:
        log = self.log
        return {"record_bytes": log.record_bytes, "rate_hz": log.rate_hz, "sync_every_ms": log.sync_every_ms,
                "sync_every_records": log.sync_every_records, "rotate_bytes": log.rotate_bytes,
                "keep_files": log.keep_files, "duration_s": log.duration_s, "records": log.records}


#: the data logger's filesystem part -> the power-loss filesystem
_LOGGER_FS = {part: fs for section in PARTS.values() for fs, part in section.items()}


def log_replay(sc: Scenario, cuts: int, seed: int) -> LogReplayConfig:
    """The logger workload of a logger scenario (``--workload logger``); ConfigError for any other scenario."""
    log = sc.options.get("logger") if sc.protocol == "logger" else None
    if log is None:
        raise ConfigError(f"--workload logger replays a logger scenario's log; scenario {sc.name} runs protocol "
                          f"{sc.protocol} (use a scenario with protocol = \"logger\")")
    return LogReplayConfig.start(log, cuts, seed)


def logger_workload(sc: Scenario) -> tuple[dict[str, int], str | None]:
    """For a data-logger scenario ([logger]): its write size and sync interval as workload fields, and its
    filesystem; for any other scenario nothing."""
    log = sc.options.get("logger") if sc.protocol == "logger" else None
    if log is None:
        return {}, None
    every = log.sync_every_records or round(log.sync_every_ms / 1000 * log.rate_hz)
    return {"chunk_bytes": log.record_bytes, "sync_every": every}, _LOGGER_FS.get(log.part)


class Logger:
    """Writes the files and records what was written and what was acknowledged."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        self.cfg = cfg
        rng = random.Random(f"powerloss-data:{cfg.seed}")
        self.data = [rng.randbytes(cfg.file_bytes) for _ in range(cfg.files)]
        self.written = [0] * cfg.files
        self.acked = [0] * cfg.files

    def path(self, i: int) -> str:
        return f"/log{i}.bin"

    def state(self) -> Any:
        """What was written and promised so far (a cut's bookkeeping, see
        :class:`~sdbench.powerloss.medium.MediumLog`)."""
        return list(self.written), list(self.acked)

    def restore(self, state: Any) -> None:
        self.written, self.acked = list(state[0]), list(state[1])

    def checks(self) -> list[tuple[int, bytes, int, int]]:
        """(file, its whole intended contents, bytes acknowledged, bytes written) of every file to read back."""
        return [(i, self.data[i], self.acked[i], self.written[i]) for i in range(self.cfg.files)]

    def run_fs(self, fs: Any, clock: Any = None) -> None:
        c = self.cfg
        for i in range(c.files):
            f = fs.open(self.path(i), "w")
            n = 0
            for off in range(0, c.file_bytes, c.chunk_bytes):
                chunk = self.data[i][off:off + c.chunk_bytes]
                f.write(chunk)
                self.written[i] = off + len(chunk)
                n += 1
                if c.sync_every and n % c.sync_every == 0:
                    f.sync()
                    self.acked[i] = self.written[i]
            f.close()
            self.acked[i] = self.written[i]

    def run_raw(self, dev: BlockDevice) -> None:
        c = self.cfg
        ss = dev.geometry.sector_size
        step = -(-c.chunk_bytes // ss) * ss           # whole sectors per device write
        for i in range(c.files):
            base = i * self.region_sectors(ss)
            data = self.data[i] + bytes(-len(self.data[i]) % ss)
            for n, off in enumerate(range(0, c.file_bytes, step), start=1):
                dev.write(base + off // ss, data[off:off + step])
                self.written[i] = self.acked[i] = min(off + step, c.file_bytes)  # a returned write is a promise
                if c.sync_every and n % c.sync_every == 0:
                    dev.sync()
            dev.sync()

    def region_sectors(self, ss: int) -> int:
        return -(-self.cfg.file_bytes // ss)


class LogReplay:
    """The logger protocol's log (:func:`sdbench.workloads.logger.write_log`), with what each file was promised:
    a returned sync acknowledges the open file's bytes so far, a rotation's returned close the whole closed file.
    A file the ring began to delete is no longer checked."""

    def __init__(self, cfg: LogReplayConfig) -> None:
        self.cfg = cfg
        log = cfg.log
        self.pattern = pattern_of(log, cfg.seed)
        self.per_file = log.rotate_bytes // log.record_bytes if log.rotate_bytes else log.records
        self.names = log.file_names(log.files_per_session())
        self.events = FileEvents()
        self.written: list[int] = []
        self.acked: list[int] = []
        self.dropped: set[str] = set()

    def path(self, i: int) -> str:
        return self.names[i]

    def state(self) -> Any:
        return list(self.written), list(self.acked), list(self.events.names), set(self.dropped)

    def restore(self, state: Any) -> None:
        self.written, self.acked = list(state[0]), list(state[1])
        self.events.names, self.dropped = list(state[2]), set(state[3])

    def _grow(self) -> int:
        """Index of the open file (the lists grow as the log creates files)."""
        while len(self.written) < len(self.events.names):
            self.written.append(0)
            self.acked.append(0)
        return len(self.events.names) - 1

    def _file(self, event: str, name: str) -> None:
        i = self.names.index(name)
        if event == "closed":
            self.acked[i] = self.written[i]
        else:
            self.dropped.add(name)

    def run_fs(self, fs: Any, clock: Any) -> None:
        from ..workloads.logger import SYNC, WRITE

        log = self.cfg.log

        def call(kind: int, fn: Callable[[], Any], written: int, offset: int) -> None:
            fn()
            i = self._grow()
            if kind == WRITE:
                self.written[i] += log.record_bytes
            elif kind == SYNC:
                self.acked[i] = self.written[i]

        write_log(log, fs, clock, Schedule(log, self.cfg.seed, 0), self.pattern, call, fresh=False,
                  events=self.events, on_file=self._file)
        self.acked[self._grow()] = self.written[-1]   # the last file: closed

    def contents(self, i: int) -> bytes:
        """What file ``i`` holds once all its records are written."""
        return _log_contents(self.cfg.log, self.cfg.seed, i)

    def checks(self) -> list[tuple[int, bytes, int, int]]:
        self._grow()
        return [(i, self.contents(i), self.acked[i], self.written[i]) for i, name in enumerate(self.events.names)
                if name not in self.dropped]


@functools.lru_cache(maxsize=16)
def _log_contents(log: LoggerConfig, seed: int, i: int) -> bytes:
    """File ``i`` of a log, whole (the same for every cut of a cell)."""
    r = log.record_bytes
    per_file = log.rotate_bytes // r if log.rotate_bytes else log.records
    pattern = pattern_of(log, seed)
    first = i * per_file
    return b"".join(record_bytes(k, r, pattern) for k in range(first, min(first + per_file, log.records)))


Workload = Logger | LogReplay
