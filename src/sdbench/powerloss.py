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
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ConfigError, SdbenchError
from .media.base import BlockDevice
from .options import opt
from .scenarios import Scenario

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


#: the data logger's filesystem part -> the power-loss filesystem
_LOGGER_FS = {part: fs for section in PARTS.values() for fs, part in section.items()}


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

    def run_fs(self, fs: Any) -> None:
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


# ---- checking after the cut ----------------------------------------------------------------------------------
def _check_files(logger: Logger, read: Callable[[int], bytes | None]) -> CutResult:
    res = CutResult(0, "clean")
    worst = 0
    for i in range(logger.cfg.files):
        got = read(i) or b""
        want, acked, written = logger.data[i], logger.acked[i], logger.written[i]
        n = min(len(got), len(want))
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


def fat_problems(fs: Any) -> str:
    """FAT: clusters allocated that no file holds (lost), or files holding more than is allocated: what a
    chkdsk/fsck would repair.  Empty when consistent."""
    inner = getattr(fs, "inner", fs)
    lay = inner.layout
    dev = inner.volume_device
    if lay is None:
        return ""
    raw = dev.read(lay.fat_start, lay.fat_sectors)
    used = 0
    for c in range(2, lay.cluster_count + 2):
        if lay.fat_type == 12:  # 12-bit entries, two in three bytes
            v = int.from_bytes(raw[c * 3 // 2:c * 3 // 2 + 2], "little")
            v = v >> 4 if c & 1 else v & 0xFFF
        else:
            w = lay.fat_type // 8
            v = int.from_bytes(raw[c * w:c * w + w], "little") & (0x0FFFFFFF if w == 4 else 0xFFFF)
        used += v != 0
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


# ---- one cell ------------------------------------------------------------------------------------------------
class CellRunner:
    def __init__(self, sc: Scenario, cell: Cell, cfg: WorkloadConfig) -> None:
        self.base, self.cell, self.cfg = sc, cell, cfg
        self.section = "sd" if sc.sd else "flash"
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
            table["cache"] = {**(cache or {}), "write_mode": self.cell.cache}
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

    def _work(self, target: Any, logger: Logger) -> None:
        if self.cell.fs == "raw":
            logger.run_raw(target)
        else:
            logger.run_fs(target)
            target.unmount()

    def clean_run(self, cfg: WorkloadConfig) -> tuple[int, int, float]:
        """(ops before the workload, ops after it, workload ms) of a run of ``cfg`` without a cut."""
        built, fault = self._build(0, cfg.seed)
        try:
            target = self._prepare(built)
            start, t0 = fault.ops, built.clock.now_ns()
            self._work(target, Logger(cfg))
            return start, fault.ops, (built.clock.now_ns() - t0) / 1e6
        finally:
            built.close()

    def cut_run(self, op: int, seed: int) -> CutResult:
        built, fault = self._build(op, seed)
        logger = Logger(self.cfg)
        try:
            target = self._prepare(built)
            try:
                self._work(target, logger)
            except Exception:
                if fault.powered:
                    raise  # an error that is not the cut: the stack is broken, not unsafe
            if fault.powered:
                raise SdbenchError(f"{self.cell.name}: cut point {op} was never reached")
            if self.cell.fs != "raw":
                target.crash()
            fault.power_on()
            res = self._recover(built, fault, logger)
            res.op = op
            if CLASSES.index(res.cls) >= CLASSES.index("lost_acknowledged"):
                res.layer = self._layer(fault)
            return res
        finally:
            built.close()

    def _recover(self, built: Any, fault: Any, logger: Logger) -> CutResult:
        if self.cell.fs == "raw":
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

        if self.cell.fs == "fat":
            return FatFileSystem(fault, self.base.sd_fat)
        return LittleFsFileSystem(fault, self.base.sd_littlefs)

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


def sized_workload(runner: CellRunner, cfg: WorkloadConfig) -> tuple[WorkloadConfig, int, int, float]:
    """The workload with at least ``cfg.cuts`` cut points where the medium allows: its files double until
    then (up to MAX_FILES, or until the medium is full).  Returns (workload, ops before it, ops after, ms)."""
    start, end, ms = runner.clean_run(cfg)
    while end - start < cfg.cuts and cfg.files * 2 <= MAX_FILES:
        bigger = replace(cfg, files=cfg.files * 2)
        try:
            b_start, b_end, b_ms = runner.clean_run(bigger)
        except SdbenchError:
            break  # the medium holds no more: keep the last workload that ran
        cfg, start, end, ms = bigger, b_start, b_end, b_ms
    return cfg, start, end, ms


def run_cell(sc: Scenario, cell: Cell, cfg: WorkloadConfig,
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
    res.files = work.files
    res.ops, res.workload_ms = end - start, ms
    res.data_bytes = work.files * work.file_bytes
    points = cut_points(start, end, cfg.cuts, cfg.seed)
    for k, op in enumerate(points):
        if progress is not None:
            progress(cell.name, k / len(points))
        res.cuts.append(runner.cut_run(op, seed=cut_seed(cfg.seed, op)))
    return res


def cut_seed(seed: int, op: int) -> int:
    """The seed of one cut's torn length: the run's seed and the cut point, so a replay draws the same."""
    return seed * 1_000_003 + op


def replay(sc: Scenario, cell: Cell, cfg: WorkloadConfig, op: int) -> CutResult:
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
def _cell_job(job: tuple[int, str, list[str], Cell, WorkloadConfig]) -> tuple[int, CellResult]:
    """One cell in a worker process: the scenario is loaded there from its name and overrides."""
    from .scenarios import load

    i, name, sets, cell, cfg = job
    return i, run_cell(load(name, sets), cell, cfg)


def run_matrix(name: str, sets: list[str], cell_list: list[Cell], cfg: WorkloadConfig, *, workers: int = 1,
               dask: str | None = None, done: Callable[[int], None] | None = None) -> list[CellResult]:
    """Every cell, in ``workers`` processes (or on a Dask cluster: "local" or a scheduler address)."""
    from .parallel import run_dask, run_pool

    jobs = [(i, name, list(sets), c, cfg) for i, c in enumerate(cell_list)]
    tick = (lambda i, _cell: done(i)) if done is not None else (lambda i, _cell: None)
    out = (run_dask(jobs, dask, workers, True, tick, fn=_cell_job) if dask
           else run_pool(jobs, workers, tick, fn=_cell_job))
    return [out[i] for i in range(len(jobs))]
