"""One cell: its stack built with a cut at each cut point, the workload sized to the cut points asked for, and each
cut's recovery classified (:func:`run_cell`, :func:`replay`)."""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..errors import ConfigError, SdbenchError
from ..media.base import BlockDevice
from ..scenarios import Scenario
from .checks import _agreeing, _check_files, fat_problems
from .medium import MediumLog, Recording, _image_device, _medium_image, _untimed, cache_detail
from .results import CLASSES, PARTS, Cell, CellResult, CutResult
from .workload import Logger, LogReplayConfig, Workload, WorkloadConfig


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
        from ..fs.fat import FatFileSystem
        from ..fs.littlefs import LittleFsFileSystem

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


class _NotApplicable(Exception):
    pass


def cut_points(start: int, end: int, n: int, seed: int) -> list[int]:
    """The workload's operations ``start+1..end``: all of them, or ``n`` drawn with ``seed``."""
    ops = list(range(start + 1, end + 1))
    if len(ops) <= n:
        return ops
    return sorted(random.Random(f"powerloss-cuts:{seed}").sample(ops, n))


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
