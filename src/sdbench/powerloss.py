"""Is it safe?  Cut the power at many points of a workload and check what survives (``sdbench powerloss``).

One *cell* is a stack: a scenario's medium with a filesystem (FAT, LittleFS, SPIFFS or none: raw sectors), a
block cache (none, write-through, write-back) and a USB bridge (none, single-sector, multi-sector,
background).  Its workload is a data logger's: files written in chunks, synced every few chunks and closed
(raw: consecutive sectors per file, one device write per chunk).  An *acknowledgement* is a promise that data
is safe: a returned sync or close for a filesystem; for raw sectors a returned write (the layer below said
it was done, as a USB WRITE completion does).

A clean run counts the medium's writes, erases and trims after format and mount (the cut points) and times
the workload (the cost column of the matrix).  Each cut run builds the cell again with ``[sd.faults]`` or
``[flash.faults]`` cutting the power during one of them (seeded torn length), drops the filesystem as the
cut left it, powers on, mounts a fresh one on the medium (the filesystem's own recovery: FatFs mount, lfs
mount, SPIFFS mount) and reads every file back.  Each cut is classified by its worst finding:

``clean`` < ``lost_unacknowledged`` (acceptable) < ``lost_acknowledged`` < ``corrupted`` (bytes that were
never written at that place) < ``needs_repair`` (FAT: clusters allocated that no file holds, or files
holding more than allocated) < ``unmountable``.

The *logger* workload (:class:`LogReplay`, ``sdbench powerloss --workload logger``) is the logger protocol's
own log instead: the scenario's record size, rate (the writer waits for each record on the virtual clock),
sync policy (by records or by time) and rotation, through the same calls (``write_log``); a returned sync
acknowledges the file's data so far, a rotation's returned close the whole file.  It starts at three sync
intervals and doubles until it has the cut points asked for.
"""
from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ConfigError, SdbenchError
from .media.base import BlockDevice, BlockDeviceWrapper, bottom
from .media.memory import MemoryDevice
from .options import opt
from .scenarios import Scenario
from .workloads.logger import LoggerConfig, Schedule, record_bytes, write_log
from .workloads.logger.session import FileEvents, pattern_of

FILESYSTEMS = ("fat", "littlefs", "spiffs", "raw")
CACHES = ("none", "write-through", "write-back")
BRIDGES = ("none", "single-sector", "multi-sector", "background")
CLASSES = ("clean", "lost_unacknowledged", "lost_acknowledged", "corrupted", "needs_repair", "unmountable")
#: filesystem -> the stack part that mounts it, per medium section
PARTS = {"sd": {"fat": "sd_fatfs", "littlefs": "sd_littlefs"},
         "flash": {"fat": "flash_fatfs", "littlefs": "flash_littlefs", "spiffs": "flash_spiffs"}}


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
    seed: int = opt(1, help="seed of the cut points, torn lengths and data")

    def grown(self) -> "WorkloadConfig | None":
        """The workload with twice the files (None past MAX_FILES)."""
        return replace(self, files=self.files * 2) if self.files * 2 <= MAX_FILES else None

    def make(self) -> "Logger":
        return Logger(self)

    def describe(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("file_bytes", "chunk_bytes", "sync_every")}


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


@dataclass(frozen=True)
class Cell:
    fs: str
    cache: str = "none"
    bridge: str = "none"

    @property
    def name(self) -> str:
        return f"{self.fs} / cache {self.cache} / bridge {self.bridge}"


@dataclass
class CutResult:
    op: int
    cls: str
    lost_acknowledged_bytes: int = 0
    lost_bytes: int = 0              # written (acknowledged or not) and not read back intact
    corrupted_files: int = 0
    detail: str = ""
    layer: str = ""


@dataclass
class CellResult:
    cell: Cell
    section: str
    ops: int = 0                     # medium operations of the workload (the cut points there are)
    workload_ms: float = 0.0         # the clean run's time, virtual clock
    data_bytes: int = 0
    cuts: list[CutResult] = field(default_factory=list)
    skipped: str = ""                # why the cell does not apply to this target
    files: int = 0                   # files of the workload (grown until it has enough cut points)
    workload: dict[str, Any] = field(default_factory=dict)   # the workload as sized for this cell
    cache_config: dict[str, Any] = field(default_factory=dict)  # the block cache's size and policy (none: empty)

    def count(self, cls: str) -> int:
        return sum(c.cls == cls for c in self.cuts)

    @property
    def throughput_kib_s(self) -> float:
        return self.data_bytes / 1024 / (self.workload_ms / 1e3) if self.workload_ms else 0.0

    @property
    def first_loss(self) -> CutResult | None:
        return next((c for c in self.cuts if CLASSES.index(c.cls) >= CLASSES.index("lost_acknowledged")), None)

    def to_dict(self, seed: int) -> dict[str, Any]:
        d: dict[str, Any] = {"fs": self.cell.fs, "cache": self.cell.cache, "bridge": self.cell.bridge}
        if self.skipped:
            return {**d, "skipped": self.skipped}
        first = self.first_loss
        d.update({"cuts": len(self.cuts), "cut_points": self.ops, "files": self.files,
                  **{c: self.count(c) for c in CLASSES},
                  "lost_acknowledged_bytes": sum(c.lost_acknowledged_bytes for c in self.cuts),
                  "lost_acknowledged_bytes_max": max((c.lost_acknowledged_bytes for c in self.cuts), default=0),
                  "lost_bytes": sum(c.lost_bytes for c in self.cuts),
                  "lost_bytes_max": max((c.lost_bytes for c in self.cuts), default=0),
                  "workload": self.workload, **({"cache_config": self.cache_config} if self.cache_config else {}),
                  "corrupted_files": sum(c.corrupted_files for c in self.cuts),
                  "throughput_kib_s": round(self.throughput_kib_s, 3),
                  "first_loss": None if first is None else {"op": first.op, "seed": seed, "class": first.cls,
                                                            "layer": first.layer, "detail": first.detail}})
        return d


# ---- the workload ---------------------------------------------------------------------------------------------
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
        """What was written and promised so far (a cut's bookkeeping, see :class:`MediumLog`)."""
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
        from .workloads.logger import SYNC, WRITE

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


# ---- checking after the cut ----------------------------------------------------------------------------------
def _check_files(logger: Workload, read: Callable[[int], bytes | None]) -> CutResult:
    res = CutResult(0, "clean")
    worst = 0
    for i, want, acked, written in logger.checks():
        got = read(i) or b""
        n = min(len(got), len(want))
        res.lost_bytes += max(0, written - _common_prefix(got, want[:written]))
        if got[:n] != want[:n] or len(got) > len(want):
            res.corrupted_files += 1
            worst = max(worst, CLASSES.index("corrupted"))
            res.detail = res.detail or f"file {i}: bytes that were never written at that place"
        elif len(got) < acked:
            res.lost_acknowledged_bytes += acked - len(got)
            worst = max(worst, CLASSES.index("lost_acknowledged"))
            res.detail = res.detail or f"file {i}: {len(got)} of {acked} acknowledged bytes"
        elif len(got) < written:
            worst = max(worst, CLASSES.index("lost_unacknowledged"))
    res.cls = CLASSES[worst]
    return res


def fat_entries_used(raw: bytes, fat_type: int, cluster_count: int) -> int:
    """Clusters 2..cluster_count+1 whose FAT entry is not 0 (free), from the FAT's bytes."""
    import numpy as np

    end = cluster_count + 2
    if fat_type == 12:  # 12-bit entries, two in three bytes
        b = np.frombuffer(raw[:(end * 3 + 1) // 2 + 1], dtype=np.uint8).astype(np.uint16)
        c = np.arange(2, end)
        lo = (c * 3) // 2
        v = b[lo] | (b[lo + 1] << 8)
        v = np.where(c & 1, v >> 4, v & 0xFFF)
        return int(np.count_nonzero(v))
    if fat_type == 16:
        return int(np.count_nonzero(np.frombuffer(raw[:end * 2], dtype="<u2")[2:end]))
    return int(np.count_nonzero(np.frombuffer(raw[:end * 4], dtype="<u4")[2:end] & 0x0FFFFFFF))


def fat_problems(fs: Any) -> str:
    """FAT: clusters allocated that no file holds (lost), or files holding more than is allocated: what a
    chkdsk/fsck would repair.  Empty when consistent."""
    inner = getattr(fs, "inner", fs)
    lay = inner.layout
    dev = inner.volume_device
    if lay is None:
        return ""
    raw = dev.read(lay.fat_start, lay.fat_sectors)
    used = fat_entries_used(raw, lay.fat_type, lay.cluster_count)
    held = 0
    for name in fs.listdir("/"):
        st = fs.stat("/" + name)
        held += -(-st.size // lay.cluster_bytes) if not st.is_dir else 1
    if lay.fat_type == 32:
        held += 1  # the root directory's cluster
    if used > held:
        return f"{used - held} lost cluster(s)"
    if used < held:
        return f"files hold {held - used} cluster(s) more than the FAT allocates"
    return ""


class MediumLog(BlockDeviceWrapper):
    """Passes every operation through and keeps the writes (with their data), erases and trims in order, with
    ``state()`` (the workload's bookkeeping) as it was when each was issued."""

    kind = "medium-log"

    def __init__(self, inner: BlockDevice, state: Callable[[], Any] | None = None) -> None:
        super().__init__(inner)
        self._state = state
        self.ops: list[tuple[str, int, Any]] = []
        self.states: list[Any] = []

    def _note(self, what: str, lba: int, arg: Any) -> None:
        self.ops.append((what, lba, arg))
        self.states.append(self._state() if self._state is not None else None)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        self._note("write", lba, bytes(data))
        self.inner.write(lba, data, buf_addr=buf_addr)

    def _erase(self, lba: int, count: int) -> None:
        self._note("erase", lba, count)
        self.inner.erase(lba, count)

    def _trim(self, lba: int, count: int) -> None:
        self._note("trim", lba, count)
        self.inner.trim(lba, count)

    def replay(self, device: BlockDevice, first: int = 0) -> None:
        """Make the same operations on ``device``, in order from the ``first``, until one raises (a power
        cut)."""
        for what, lba, arg in self.ops[first:]:
            if what == "write":
                device.write(lba, arg)
            elif what == "erase":
                device.erase(lba, arg)
            else:
                device.trim(lba, arg)


@dataclass(frozen=True)
class Recording:
    """A clean run as the medium saw it: the workload, the operations before the set-up and before the workload,
    every operation from the set-up on, and the medium's contents once set up (None: not taken)."""

    cfg: Any
    begun: int
    start: int
    log: MediumLog
    image: Any = None


def _medium_image(fault: Any) -> Any:
    """The simulated medium's contents under the fault wrapper (a card's store; the NOR partition's bytes), or
    None for a medium that cannot give them."""
    low = bottom(fault)
    store = getattr(low, "store", None)
    if isinstance(store, MemoryDevice) and store.geometry == fault.geometry:
        return store.snapshot()
    chip = getattr(low, "chip", None)
    if chip is not None and hasattr(low, "offset_bytes") and low.geometry == fault.geometry:
        return chip.peek(low.offset_bytes, low.geometry.size_bytes)
    return None


def _image_device(geometry: Any, image: Any) -> MemoryDevice:
    """An untimed medium holding ``image``: a card's sectors, or a NOR partition (programs only clear bits, an
    erase sets them, as on the chip).  A cut run replays into it and recovers from it: data is all a cut's
    outcome depends on, and the bus and card models would only add time."""
    if isinstance(image, dict):
        mem = MemoryDevice(geometry)
        mem.restore(image)
    else:
        mem = MemoryDevice(geometry, program_and=True)
        mem.write_bytes(0, image)
    return mem


def _untimed(fault: Any) -> BlockDevice:
    """What recovery reads: the simulated card's store itself (the same bytes, no timing: reading a log back
    through the bus model would cost more than the run), unless the fault wrapper changes reads (bit flips, bad
    sectors) or the medium has no store."""
    store = getattr(bottom(fault), "store", None)
    cfg = fault.config
    if store is None or cfg.bitflip_probability or cfg.bad_sectors or store.geometry != fault.geometry:
        return fault
    return store


def cache_detail(built: Any) -> dict[str, Any]:
    """The block cache of a built stack: its size and policy (empty without one)."""
    cfg = getattr(built, "sd_cache", None)
    if cfg is None:
        return {}
    dev = built.target.sd_device
    block = int(getattr(dev, "block_bytes", 0))
    return {"blocks": cfg.blocks, "block_bytes": block, "bytes": cfg.blocks * block, "policy": cfg.policy,
            "write_mode": cfg.write_mode, "evict_flush": cfg.evict_flush}


# ---- one cell ------------------------------------------------------------------------------------------------
class CellRunner:
    def __init__(self, sc: Scenario, cell: Cell, cfg: WorkloadConfig | LogReplayConfig) -> None:
        self.base, self.cell, self.cfg = sc, cell, cfg
        self.cache: dict[str, Any] = {}   # the block cache as built (clean_run)
        #: what reached the medium in the last clean run
        self.recording: Recording | None = None
        self.section = "sd" if sc.sd else "flash"
        if isinstance(cfg, LogReplayConfig) and cell.fs == "raw":
            raise _NotApplicable("the logger writes files: raw sectors have none")
        if self.section == "flash":
            if cell.bridge != "none":
                raise _NotApplicable("USB bridges are modelled in front of SD cards only")
            if cell.cache != "none" and cell.fs not in ("fat", "littlefs"):
                raise _NotApplicable("on SPI flash a block cache is modelled under FAT and LittleFS (SPIFFS has "
                                     "its own page cache; raw sectors go to wear levelling)")
        elif cell.fs == "spiffs":
            raise _NotApplicable("SPIFFS runs on SPI flash only")
        if cell.cache != "none" and cell.bridge != "none":
            raise _NotApplicable("a block cache behind a USB bridge is not modelled")

    def scenario(self, faults: dict[str, Any]) -> Scenario:
        table = dict(getattr(self.base, self.section))
        cache = table.pop("cache", None)
        if self.cell.cache != "none":  # [sd.cache] or [flash.cache]: the scenario's own, in this cell's mode
            cache = {**(cache or {}), "write_mode": self.cell.cache}
            if cache.get("blocks") == 0:   # the scenario's "no cache": the cell's cache has the default size
                cache.pop("blocks")
            table["cache"] = cache
        if self.section == "sd":
            table.pop("bridge", None)
            if self.cell.bridge != "none":
                table["bridge"] = {"mode": self.cell.bridge}
        table["faults"] = {**table.get("faults", {}), **faults}   # the scenario's own faults stay (a volatile card)
        return replace(self.base, **{self.section: table})

    def _build(self, cut_at: int, seed: int) -> tuple[Any, Any]:
        built = self.scenario({"cut_at_op": cut_at, "seed": seed}).build()
        return built, built.faults[self.section]

    def _fs(self, built: Any) -> Any:
        part = PARTS[self.section].get(self.cell.fs)
        return built.target.fs_factories[part]()

    def _raw_dev(self, built: Any) -> BlockDevice:
        if self.section == "sd":
            return built.target.sd_device
        return built.target.flash_raw_device

    def _prepare(self, built: Any) -> Any:
        """Format (and mount) before the workload: its operations are not cut points."""
        if self.cell.fs == "raw":
            return self._raw_dev(built)
        fs = self._fs(built)
        fs.format()
        fs.mount()
        return fs

    def _work(self, target: Any, logger: Workload, clock: Any) -> None:
        if self.cell.fs == "raw":
            assert isinstance(logger, Logger)
            logger.run_raw(target)
        else:
            logger.run_fs(target, clock)
            target.unmount()

    def clean_run(self, cfg: WorkloadConfig | LogReplayConfig) -> tuple[int, int, float]:
        """(ops before the workload, ops after it, workload ms) of a run of ``cfg`` without a cut; what reached
        the medium is kept (:attr:`recording`) for the cut runs to replay."""
        built, fault = self._build(0, cfg.seed)
        try:
            self.cache = cache_detail(built)
            work = cfg.make()
            begun = fault.ops
            log = MediumLog(fault.inner, work.state)
            fault.inner = log  # under the fault wrapper: exactly the operations it counts, in its order
            target = self._prepare(built)
            start, t0 = fault.ops, built.clock.now_ns()
            # the formatted medium, for the cut runs to start from (not with a volatile cache: its last writes
            # of the set-up would be lost at an early cut, and only a replay from the start has them)
            image = _medium_image(fault) if not fault.config.volatile_sectors else None
            self._work(target, work, built.clock)
            self.recording = Recording(cfg, begun, start, log, image)
            return start, fault.ops, (built.clock.now_ns() - t0) / 1e6
        finally:
            built.close()

    def cut_run(self, op: int, seed: int) -> CutResult:
        """The medium as the cut at operation ``op`` leaves it, then recovery.  The workload is deterministic,
        so the operations before the cut are those of the clean run: they are replayed into the fault wrapper
        (which tears the cut one and powers off) rather than made again through the filesystem, and the
        workload's bookkeeping is what it was when that operation was issued."""
        built, fault = self._build(op, seed)
        logger = self.cfg.make()
        try:
            rec = self.recording if self.recording is not None and self.recording.cfg == self.cfg else None
            target = None
            try:
                if rec is None:
                    target = self._prepare(built)
                    self._work(target, logger, built.clock)
                else:
                    # format, mount and workload as the medium saw them, up to the cut
                    if fault.ops != rec.begun:
                        raise SdbenchError(f"{self.cell.name}: the stack made {fault.ops} medium operations "
                                           f"before the set-up, the clean run {rec.begun}")
                    index = op - rec.begun - 1
                    if 0 <= index < len(rec.log.ops):
                        logger.restore(rec.log.states[index])
                    first = 0
                    if rec.image is not None and op > rec.start:   # from the formatted medium, untimed
                        fault.inner = _image_device(fault.inner.geometry, rec.image)
                        fault.ops = rec.start
                        first = rec.start - rec.begun
                    rec.log.replay(fault, first)
            except Exception:
                if fault.powered:
                    raise  # an error that is not the cut: the stack is broken, not unsafe
            if fault.powered:
                raise SdbenchError(f"{self.cell.name}: cut point {op} was never reached")
            if target is not None and self.cell.fs != "raw":
                target.crash()
            fault.power_on()
            res = self._recover(built, fault, logger)
            res.op = op
            if CLASSES.index(res.cls) >= CLASSES.index("lost_acknowledged"):
                res.layer = self._layer(fault)
            return res
        finally:
            built.close()

    def _recover(self, built: Any, fault: Any, logger: Workload) -> CutResult:
        if self.cell.fs == "raw":
            assert isinstance(logger, Logger)
            medium = fault if self.section == "sd" else self._flash_target(built).fresh_raw_device()
            ss = medium.geometry.sector_size

            def read(i: int) -> bytes:
                n = logger.region_sectors(ss)
                data = medium.read(i * n, n)[:logger.cfg.file_bytes]
                # raw sectors have no length: what survived is the prefix that holds the data written
                return data[:_agreeing(data, logger.data[i])]
            return _check_files(logger, read)
        fs = self._recovery_fs(built, fault)
        try:
            fs.mount()
        except Exception as e:
            return CutResult(0, "unmountable", detail=f"mount: {e}")

        def read_file(i: int) -> bytes | None:
            try:
                with fs.open(logger.path(i), "r") as f:
                    return f.read()
            except Exception:
                return None
        res = _check_files(logger, read_file)
        if self.cell.fs == "fat" and CLASSES.index(res.cls) < CLASSES.index("needs_repair"):
            try:
                problem = fat_problems(fs)
            except SdbenchError as e:  # a directory entry the volume cannot even name (a torn directory sector)
                problem = f"directory: {e}"
            if problem:
                res.cls, res.detail = "needs_repair", problem
        fs.crash()
        return res

    @staticmethod
    def _flash_target(built: Any) -> Any:
        return next(d for d in built.devices if hasattr(d, "fresh_raw_device"))

    def _recovery_fs(self, built: Any, fault: Any) -> Any:
        """A fresh filesystem on the medium, as after a reboot: nothing above the medium survives."""
        if self.section == "flash":
            return self._fs(built)  # the flash factories build wear levelling afresh over the partition
        from .fs.fat import FatFileSystem
        from .fs.littlefs import LittleFsFileSystem

        medium = _untimed(fault)
        if self.cell.fs == "fat":
            return FatFileSystem(medium, self.base.sd_fat)
        return LittleFsFileSystem(medium, self.base.sd_littlefs)

    def _layer(self, fault: Any) -> str:
        """The layer that broke the promise: the lowest one in the stack that acknowledges before the medium
        has the data (the card's volatile cache, the background bridge, a write-back cache), else the
        filesystem."""
        if fault.volatile_lost:
            return "card (volatile write cache)"
        if self.cell.bridge == "background":
            return "USB bridge (acknowledges writes before the card has them)"
        if self.cell.cache == "write-back":
            return "block cache (write-back: dirty blocks are written at sync)"
        return "filesystem"


def _common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    i = 0
    while i < n:
        j = min(i + 4096, n)
        if a[i:j] != b[i:j]:
            while a[i] == b[i]:
                i += 1
            return i
        i = j
    return n


def _agreeing(data: bytes, want: bytes) -> int:
    """Length of the prefix of ``data`` that equals ``want``."""
    n = 0
    step = 512
    while n < len(data) and data[n:n + step] == want[n:n + step]:
        n += step
    return min(n, len(data))


class _NotApplicable(Exception):
    pass


def cut_points(start: int, end: int, n: int, seed: int) -> list[int]:
    """The workload's operations ``start+1..end``: all of them, or ``n`` drawn with ``seed``."""
    ops = list(range(start + 1, end + 1))
    if len(ops) <= n:
        return ops
    return sorted(random.Random(f"powerloss-cuts:{seed}").sample(ops, n))


#: a workload grows (more files) until it has this many cut points, up to this many files
MAX_FILES = 256


def sized_workload(runner: CellRunner, cfg: Any) -> tuple[Any, int, int, float]:
    """The workload with at least ``cfg.cuts`` cut points where the medium allows: its files (a log: its length)
    double until then (up to MAX_FILES, MAX_LOG_RECORDS, or until the medium is full).  Returns (workload, ops
    before it, ops after, ms)."""
    start, end, ms = runner.clean_run(cfg)
    while end - start < cfg.cuts:
        bigger = cfg.grown()
        if bigger is None:
            break
        try:
            b_start, b_end, b_ms = runner.clean_run(bigger)
        except SdbenchError:
            break  # the medium holds no more: keep the last workload that ran
        cfg, start, end, ms = bigger, b_start, b_end, b_ms
    if runner.recording is None or runner.recording.cfg != cfg:
        start, end, ms = runner.clean_run(cfg)   # a bigger workload that did not fit ran last
    return cfg, start, end, ms


def run_cell(sc: Scenario, cell: Cell, cfg: WorkloadConfig | LogReplayConfig,
             progress: Callable[[str, float], None] | None = None) -> CellResult:
    section = "sd" if sc.sd else "flash"
    res = CellResult(cell, section)
    try:
        runner = CellRunner(sc, cell, cfg)
    except _NotApplicable as e:
        res.skipped = str(e)
        return res
    work, start, end, ms = sized_workload(runner, cfg)
    runner.cfg = work
    res.workload, res.cache_config = work.describe(), runner.cache
    if isinstance(work, LogReplayConfig):
        res.files = work.log.files_per_session()
        res.data_bytes = work.log.records * work.log.record_bytes
    else:
        res.files = work.files
        res.data_bytes = work.files * work.file_bytes
    res.ops, res.workload_ms = end - start, ms
    points = cut_points(start, end, cfg.cuts, cfg.seed)
    for k, op in enumerate(points):
        if progress is not None:
            progress(cell.name, k / len(points))
        res.cuts.append(runner.cut_run(op, seed=cut_seed(cfg.seed, op)))
    return res


def cut_seed(seed: int, op: int) -> int:
    """The seed of one cut's torn length: the run's seed and the cut point, so a replay draws the same."""
    return seed * 1_000_003 + op


def replay(sc: Scenario, cell: Cell, cfg: WorkloadConfig | LogReplayConfig, op: int) -> CutResult:
    """One cut again, as the matrix ran it: the same cell, workload, cut point and seed give the same result."""
    try:
        runner = CellRunner(sc, cell, cfg)
    except _NotApplicable as e:
        raise ConfigError(f"{cell.name}: {e}") from None
    work, start, end, _ = sized_workload(runner, cfg)
    runner.cfg = work
    if not start < op <= end:
        raise ConfigError(f"--replay {op}: the workload's cut points in this cell are {start + 1}..{end}")
    return runner.cut_run(op, seed=cut_seed(cfg.seed, op))


def cells(fs: list[str], caches: list[str], bridges: list[str]) -> list[Cell]:
    return [Cell(f, c, b) for f in fs for c in caches for b in bridges]




# ---- the matrix ----------------------------------------------------------------------------------------------
def _cell_job(job: tuple[int, str, list[str], Cell, Any]) -> tuple[int, CellResult]:
    """One cell in a worker process: the scenario is loaded there from its name and overrides."""
    from .scenarios import load

    i, name, sets, cell, cfg = job
    return i, run_cell(load(name, sets), cell, cfg)


def run_matrix(name: str, sets: list[str], cell_list: list[Cell], cfg: WorkloadConfig | LogReplayConfig, *,
               workers: int = 1, dask: str | None = None,
               done: Callable[[int], None] | None = None) -> list[CellResult]:
    """Every cell, in ``workers`` processes (or on a Dask cluster: "local" or a scheduler address)."""
    from .parallel import run_dask, run_pool

    jobs = [(i, name, list(sets), c, cfg) for i, c in enumerate(cell_list)]
    tick = (lambda i, _cell: done(i)) if done is not None else (lambda i, _cell: None)
    out = (run_dask(jobs, dask, workers, True, tick, fn=_cell_job) if dask
           else run_pool(jobs, workers, tick, fn=_cell_job))
    return [out[i] for i in range(len(jobs))]
