"""ESP-IDF ``examples/storage/perf_benchmark``, step for step.

Order: SPI flash raw, SPI FATFS, SPIFFS, SPI LittleFS, SD raw, SD FATFS,
SD LittleFS.  Every filesystem part starts by formatting (on the target each
mount finds the previous part's data and reformats).  Per filesystem and mode:
write/read of the target size, int(target*1.2), int(target/1.2) and 255 bytes.
The timer covers only the single write()/read() call; open, close and unlink
are untimed and fsync is never called.

"(new file)" mode opens (create+truncate for writes, read-only for reads),
does one call at offset 0 and closes, every run; read tests unlink the file
afterwards.  Normal mode opens once and runs the N calls back to back, so
writes append at i*size and reads walk through that file.

SD raw: ESP-IDF labels its four rows 16/32/48/64 kB but every call moves the
whole target (128 sectors at LBA 0, one CMD25/CMD18) from a zeroed, aligned
buffer; N writes then N reads per row.  ``raw_corrected_sizes`` moves the
labelled size instead.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..fs.base import FileSystem
from ..fs.raw import RawVolume
from ..media.base import BlockDevice
from ..options import opt
from ..records import Row
from ..runner import Context
from ..stack.target import Target

PARTS = ("flash_raw", "flash_fatfs", "flash_spiffs", "flash_littlefs", "sd_raw", "sd_fatfs", "sd_littlefs", "dir")
PART_NAMES = {
    "flash_raw": "SPI Flash raw", "flash_fatfs": "SPI FATFS", "flash_spiffs": "SPI SPIFFS",
    "flash_littlefs": "SPI LittleFS", "sd_raw": "SD raw", "sd_fatfs": "SD FATFS", "sd_littlefs": "SD LittleFS",
    "dir": "DIR",  # a mounted directory through the OS (sdbench run --dir): never formatted
}
#: simulated address of the benchmark's calloc'd buffer (ESP32 internal DRAM, 4-byte aligned)
DEFAULT_BUF_ADDR = 0x3FFB_0000


@dataclass(frozen=True)
class EspIdfConfig:
    runs: int = opt(10, unit="calls", min=1, max=100_000,
                    help="timed calls per row (CONFIG_EXAMPLE_TEST_TRIES; the published log used 100)")
    spiffs_runs: int = opt(1, unit="calls", min=1, max=100_000,
                           help="runs for SPIFFS rows (the example passes 1: SPIFFS cannot delete files fast)")
    target_size_bytes: int = opt(65536, unit="B", min=512, max=16 << 20,
                                 help="CONFIG_EXAMPLE_TARGET_RW_SIZE; a multiple of 512 for the SD raw test")
    parts: tuple[str, ...] = opt(factory=lambda: ("sd_raw", "sd_fatfs", "sd_littlefs"),
                                 help=f"parts to run, in protocol order; any of {', '.join(PARTS)}")
    sd_modes: tuple[str, ...] = opt(factory=lambda: ("new_file", "normal"),
                                    help="modes for SD FATFS/LittleFS: new_file and/or normal")
    raw_corrected_sizes: bool = opt(False, help="SD raw: move the labelled size (16/32/48/64 kB) instead of the "
                                               "full target as the example really does")
    buf_addr: int = opt(DEFAULT_BUF_ADDR, unit="address", min=0,
                        help="simulated address of the test buffer (alignment matters to DMA drivers)")

    def __post_init__(self) -> None:
        if not self.parts:
            raise ConfigError(f"espidf.parts: name at least one part ({', '.join(PARTS)})")
        if not self.sd_modes:
            raise ConfigError("espidf.sd_modes: name at least one mode (new_file, normal)")
        bad = [p for p in self.parts if p not in PARTS]
        if bad:
            raise ConfigError(f"espidf.parts: unknown part {bad[0]!r} (known: {', '.join(PARTS)})")
        badm = [m for m in self.sd_modes if m not in ("new_file", "normal")]
        if badm:
            raise ConfigError(f"espidf.sd_modes: unknown mode {badm[0]!r} (new_file, normal)")
        if self.target_size_bytes % 512:
            raise ConfigError(f"espidf.target_size_bytes = {self.target_size_bytes} B must be a multiple of 512 B")

    def sizes(self) -> list[tuple[str, int]]:
        t = self.target_size_bytes
        # C: size_t from double, truncating
        return [("target", t), ("more than target", int(t * 1.2)), ("less than target", int(t / 1.2)),
                ("tiny", 255)]

    def timed_calls(self) -> int:
        """Number of timed calls the configured parts make (for progress bars)."""
        n = 0
        for p in self.parts:
            if p == "sd_raw":
                n += 8 * self.runs
            elif p == "flash_raw":
                n += 2 * self.runs
            elif p == "flash_spiffs":
                n += 8 * self.spiffs_runs
            elif p in ("sd_fatfs", "sd_littlefs", "dir"):
                n += 8 * self.runs * len(self.sd_modes)
            else:
                n += 8 * self.runs
        return n


#: parts that run both modes ("new_file" and, with ``sd_modes``, "normal": one file that grows every run)
_SD_FS_PARTS = ("sd_fatfs", "sd_littlefs")


def preflight(target: Target, cfg: EspIdfConfig, fs_capacity: Callable[[str], int | None]) -> None:
    """Refuse, before any I/O, sizes the parts cannot hold: ConfigError naming the option.

    ``fs_capacity(part)`` checks a filesystem part's configuration against its device (no I/O) and returns the
    bytes of file data it holds at most, or None when it cannot tell."""
    t = cfg.target_size_bytes
    largest = max(size for _, size in cfg.sizes())
    for part in cfg.parts:
        if part in ("sd_raw", "flash_raw"):
            dev = target.sd_device if part == "sd_raw" else target.flash_raw_device
            if dev is None:
                what = "an SD device" if part == "sd_raw" else "a wear-levelled flash device"
                raise ConfigError(f"part {part} needs {what} in the scenario")
            g = dev.geometry
            if t % g.sector_size:
                raise ConfigError(f"espidf.target_size_bytes = {t} B is not a whole number of the {g.sector_size} B "
                                  f"sectors part {part} moves")
            if t > g.size_bytes:
                raise ConfigError(f"espidf.target_size_bytes = {t} B does not fit part {part}'s device of "
                                  f"{g.size_bytes} B (it moves the target size from offset 0)")
        elif part == "dir":
            continue  # a mounted directory: the OS reports a full disk itself
        else:
            if part not in target.fs_factories:
                raise ConfigError(f"this target has no filesystem for part {part!r}")
            cap = fs_capacity(part)
            if cap is None:
                continue
            normal = part in _SD_FS_PARTS and "normal" in cfg.sd_modes
            runs = cfg.spiffs_runs if part == "flash_spiffs" else cfg.runs
            need = largest * runs if normal else largest
            if need > cap:
                how = (f"espidf.runs = {runs} appends of {largest} B in one file (normal mode)" if normal
                       else f"a file of {largest} B (1.2 x the target)")
                raise ConfigError(f"espidf.target_size_bytes = {t} B: part {part} writes {how}, {need} B, but its "
                                  f"filesystem holds at most {cap} B")


def run(target: Target, cfg: EspIdfConfig, ctx: Context, *, seed: int = 1) -> Iterator[Row]:
    """Run the configured parts; yields rows as they finish (callers may store each at once)."""
    rng = random.Random(seed)
    for part in PARTS:
        if part not in cfg.parts:
            continue
        if part == "sd_raw":
            yield from _sd_raw(target, cfg, ctx)
        elif part == "flash_raw":
            yield from _flash_raw(target, cfg, ctx, rng)
        else:
            fs = target.make_fs(part)
            if part != "dir":
                fs.format()
            fs.mount()
            try:
                name = PART_NAMES[part]
                if part in ("sd_fatfs", "sd_littlefs", "dir"):
                    modes = [m for m in ("new_file", "normal") if m in cfg.sd_modes]
                    runs = cfg.runs
                elif part == "flash_spiffs":
                    modes, runs = ["new_file"], cfg.spiffs_runs
                else:
                    modes, runs = ["new_file"], cfg.runs
                devs = target.devices_for(part, fs.device)
                for mode in modes:
                    yield from _fs_tests(fs, name, mode == "new_file", runs, cfg, ctx, rng, devs)
            finally:
                fs.unmount()


def _sd_raw(target: Target, cfg: EspIdfConfig, ctx: Context) -> Iterator[Row]:
    dev = target.sd_device
    if dev is None:
        raise ConfigError("part sd_raw needs an SD device in the scenario")
    vol = RawVolume(dev)
    ss = dev.geometry.sector_size
    sectors = cfg.target_size_bytes // ss
    quarter = sectors // 4
    buf = bytes(sectors * ss)  # calloc'd, never filled in the example
    devs = target.devices_for("sd_raw", dev)
    for i in range(4):
        label_sectors = quarter * (i + 1)
        label_kib = label_sectors * ss // 1024
        moved = label_sectors * ss if cfg.raw_corrected_sizes else sectors * ss
        data = buf[:moved]
        for op in ("write", "read"):
            label = f"SD raw {op} [{label_kib} kB label]"
            rt = ctx.row(label, op, moved, devs, reported_bytes=label_sectors * ss)
            for _ in range(cfg.runs):
                if op == "write":
                    rt.time(lambda: vol.write(0, data, buf_addr=cfg.buf_addr))
                else:
                    rt.time(lambda: vol.read(0, moved, buf_addr=cfg.buf_addr))
            yield rt.finish()


def _flash_raw(target: Target, cfg: EspIdfConfig, ctx: Context, rng: random.Random) -> Iterator[Row]:
    dev = target.flash_raw_device
    if dev is None:
        raise ConfigError("part flash_raw needs a wear-levelled flash device in the scenario")
    vol = RawVolume(dev)
    size = cfg.target_size_bytes
    buf = rng.randbytes(size)
    devs = target.devices_for("flash_raw", dev)
    rt = ctx.row("SPI Flash raw write", "write", size, devs)
    for _ in range(cfg.runs):
        rt.time(lambda: vol.write(0, buf, buf_addr=cfg.buf_addr))
    yield rt.finish()
    rt = ctx.row("SPI Flash raw read", "read", size, devs)
    for _ in range(cfg.runs):
        rt.time(lambda: vol.read(0, size, buf_addr=cfg.buf_addr))
    yield rt.finish()


def _fs_tests(fs: FileSystem, name: str, new_file: bool, runs: int, cfg: EspIdfConfig, ctx: Context,
              rng: random.Random, devs: tuple[BlockDevice, ...]) -> Iterator[Row]:
    prefix = f"{name} (new file): " if new_file else f"{name}: "
    path = "/test.bin"
    sizes = cfg.sizes()
    buf = rng.randbytes(max(s for _, s in sizes))  # esp_fill_random over the whole buffer
    for what, size in sizes:
        yield _fs_test(fs, f"{prefix}write {what} size", path, buf[:size], True, False, new_file, runs, cfg, ctx,
                       devs)
        yield _fs_test(fs, f"{prefix}read {what} size", path, buf[:size], False, True, new_file, runs, cfg, ctx,
                       devs)


def _fs_test(fs: FileSystem, label: str, path: str, data: bytes, is_write: bool, cleanup: bool, new_file: bool,
             runs: int, cfg: EspIdfConfig, ctx: Context, devs: tuple[BlockDevice, ...]) -> Row:
    mode = "w" if is_write else "r"
    size = len(data)
    rt = ctx.row(label, "write" if is_write else "read", size, devs)
    f: Any = None
    if not new_file:
        f = fs.open(path, mode)
    for _ in range(runs):
        if new_file:
            f = fs.open(path, mode)
        if is_write:
            rt.time(lambda: f.write(data, buf_addr=cfg.buf_addr))
        else:
            rt.time(lambda: f.read(size, buf_addr=cfg.buf_addr))
        if new_file:
            f.close()
    if not new_file:
        f.close()
    if cleanup:
        fs.remove(path)
    return rt.finish()


def espidf_line(row: Row) -> str:
    """One line in the example's printf format: ``[%-55s] (%dx) %8.3f ms %8.2f kB %10.3f MB/s``, then
    `` [%.3f–%.3f ms]`` when the row has a range (its time's 10th-90th percentile; the importer reads both)."""
    size = row.reported_bytes if row.reported_bytes is not None else row.bytes
    mean_ms = row.time_ms
    speed = (size / (mean_ms * 1000.0)) / (1024 * 1024) * 1e6 if mean_ms > 0 else 0.0
    line = "[%-55s] (%dx) %8.3f ms %8.2f kB %10.3f MB/s" % (row.label, row.runs, mean_ms, size / 1024, speed)
    if row.time_ms_range is not None:
        line += " [%.3f\u2013%.3f ms]" % row.time_ms_range
    return line
