"""The Propeller 2 SD driver benchmark (SPI at 25 MHz), per card.

Metrics, each averaged over ``runs`` iterations:

* Mount (ms): card power-up initialisation (CMD0, CMD8, ACMD41 until ready,
  CMD58, CSD) plus the filesystem mount (MBR and boot sector reads).
* File Open (µs): opening an existing file in a near-empty root directory.
* Raw Read/Write 1x512B and 64x (32 KiB), in KiB/s (KB = 1024), through the
  driver's raw API: one CMD18 (with CMD12) or CMD25 (with the stop token)
  even for one sector, then CMD13.
* File Read 256KB: open, a 256 KiB file read sequentially through the file
  API in ``file_read_chunk_bytes`` calls, close, all timed.  File Write 32KB:
  the file is deleted (untimed), then created, written in
  ``file_write_chunk_bytes`` calls and closed, all timed (the close commits
  the last sector, the FAT and the directory entry).  The benchmark moves each
  file in one call; its driver's file layer then moves one sector per command
  (``sd_fat.max_transfer_sectors = 1`` in the scenarios).
* Summary (in the run's metadata): multi-sector gain (64x over 1x) and
  efficiency against the SPI byte rate (clock/8 = 3052 KiB/s at 25 MHz).

The filesystem is FAT32 through FatFs; the card is formatted and the test
files are created before timing starts.

On other stacks the metrics that exist there run: on an image or a device
(no card power-up to time) Mount is the filesystem mount alone; in a mounted
directory (:func:`run_dir`) File Open, File Read and File Write run on files
of the directory, which are removed afterwards. What was left out, and why, is
in the run's warnings.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..fs.base import FileSystem
from ..fs.raw import RawVolume
from ..media.base import BlockDevice
from ..options import opt
from ..records import Row
from ..runner import Context

KIB = 1024
#: test files are generated in memory: 16 MiB, as ESP-IDF's largest target size
MAX_FILE_BYTES = 16 << 20
METRICS = ("Mount", "File Open", "Raw Read 1x512B", "Raw Read 64x (32KB)", "Raw Write 1x512B",
           "Raw Write 64x (32KB)", "File Read", "File Write")


@dataclass(frozen=True)
class P2Config:
    runs: int = opt(10, unit="iterations", min=1, max=100_000, help="iterations averaged per metric")
    raw_lba: int = opt(0, unit="sector", min=0,
                       help="first sector of the raw tests; 0 = the middle of the card (free space)")
    file_read_bytes: int = opt(256 * KIB, unit="B", min=512, max=MAX_FILE_BYTES,
                               help="size of the file read test (its data is held in memory)")
    file_write_bytes: int = opt(32 * KIB, unit="B", min=512, max=MAX_FILE_BYTES,
                                help="size of the file write test (its data is held in memory)")
    file_read_chunk_bytes: int = opt(256 * KIB, unit="B", min=1, help="bytes per read call of the file read test")
    file_write_chunk_bytes: int = opt(32 * KIB, unit="B", min=1, help="bytes per write call of the file write test")
    open_files_in_root: int = opt(2, unit="files", min=1, max=64, help="files in the root directory")
    metrics: tuple[str, ...] = opt(factory=lambda: METRICS, help="metrics to run (default: all, in this order)")
    raw_multi_block: bool = opt(True, help="raw tests through the driver's multi-block entry (readSectorsRaw: "
                                           "CMD18/CMD25 even for one sector)")

    def __post_init__(self) -> None:
        if not self.metrics:
            raise ConfigError(f"p2.metrics: name at least one metric ({', '.join(METRICS)})")
        bad = [m for m in self.metrics if m not in METRICS]
        if bad:
            raise ConfigError(f"p2.metrics: unknown metric {bad[0]!r} (known: {', '.join(METRICS)})")


def kib_per_s(nbytes: int):
    def value(row: Row) -> float:
        return (nbytes / KIB) / (row.time_ms / 1000.0) if row.time_ms > 0 else 0.0

    return value


#: sectors of the raw tests: one single-sector and one 64-sector transfer at the same LBA
RAW_SECTORS = 64


def raw_lba(device: BlockDevice, cfg: P2Config) -> int:
    """First sector of the raw tests: ``raw_lba``, or the middle of the card (64-sector aligned)."""
    return cfg.raw_lba or (device.geometry.sector_count // 2) // RAW_SECTORS * RAW_SECTORS


def preflight(device: BlockDevice, cfg: P2Config, cluster_bytes: int | None = None,
              clusters: int | None = None) -> None:
    """Refuse, before any I/O, what cannot fit: the raw tests on the card and the files on the FAT volume
    (``cluster_bytes`` and ``clusters`` for files of the volume the protocol formats).  ConfigError naming
    the option."""
    g = device.geometry
    lba = raw_lba(device, cfg)
    if any(m.startswith("Raw") for m in cfg.metrics) and lba + RAW_SECTORS > g.sector_count:
        raise ConfigError(f"p2.raw_lba = {lba}: the {RAW_SECTORS}-sector raw tests end past the card's "
                          f"{g.sector_count} sectors of {g.sector_size} B")
    if cluster_bytes and clusters is not None:
        sizes = [cfg.file_read_bytes, cfg.file_write_bytes] + [100] * (cfg.open_files_in_root - 1)
        need = sum(-(-n // cluster_bytes) for n in sizes)
        if need > clusters:
            raise ConfigError(f"p2.file_read_bytes + p2.file_write_bytes = {cfg.file_read_bytes} + "
                              f"{cfg.file_write_bytes} B (with {cfg.open_files_in_root - 1} small files) need "
                              f"{need} clusters of {cluster_bytes} B; the FAT volume has {clusters} "
                              f"({clusters * cluster_bytes} B)")


#: the metrics a mounted directory has (no card to initialise, no raw sectors)
DIR_METRICS = ("File Open", "File Read", "File Write")


def preflight_dir(cfg: P2Config) -> None:
    """Refuse a directory run that would measure nothing (ConfigError naming the option)."""
    if not any(m in DIR_METRICS for m in cfg.metrics):
        raise ConfigError(f"p2.metrics: in a directory only {', '.join(DIR_METRICS)} run; none is selected")


def run(device: BlockDevice, make_fs, cfg: P2Config, ctx: Context, warnings: list[str], *,
        seed: int = 1) -> Iterator[Row]:
    """``device`` is the card's block device; ``make_fs`` builds FAT on it. A simulated card (one that offers
    ``initialise()``) has its power-up timed in Mount; on other devices Mount is the filesystem mount alone."""
    preflight(device, cfg)
    init = getattr(device, "initialise", None)
    if "Mount" in cfg.metrics and init is None:
        warnings.append(f"p2 Mount: {device.kind} has no card power-up to time; Mount is the FAT mount alone")
    rng = random.Random(seed)
    want = set(cfg.metrics)
    fs: FileSystem = make_fs()
    # set-up, untimed: format, create the files the tests read and open
    fs.format()
    fs.mount()
    read_data = rng.randbytes(cfg.file_read_bytes)
    with fs.open("/read.bin", "w") as f:
        f.write(read_data)
    for i in range(cfg.open_files_in_root - 1):
        with fs.open(f"/file{i}.txt", "w") as f:
            f.write(b"x" * 100)
    fs.unmount()

    if "Mount" in want:
        rt = ctx.row("Mount", "mount", 0, (device,), unit="ms")

        def mount() -> None:
            if init is not None:
                init()
            fs.mount()

        for _ in range(cfg.runs):
            rt.time(mount)
            fs.unmount()
        yield rt.finish()
    fs.mount()

    if "File Open" in want:
        rt = ctx.row("File Open", "open", 0, (device,), unit="us", value_fn=lambda r: r.time_ms * 1000.0)
        for _ in range(cfg.runs):
            f = rt.time(lambda: fs.open("/read.bin", "r"))
            f.close()
        yield rt.finish()

    # Raw sector tests, in free space away from the files. The benchmark calls the driver's raw API, which
    # sends CMD18/CMD25 even for one sector; the file layer below sends CMD17/CMD24 per sector.
    ss = device.geometry.sector_size
    lba = raw_lba(device, cfg)
    multi = cfg.raw_multi_block and hasattr(device, "read_multi")
    vol = RawVolume(device)
    read = device.read_multi if multi else (lambda at, count: vol.read(at * ss, count * ss))  # type: ignore
    write = device.write_multi if multi else (lambda at, data: vol.write(at * ss, data))  # type: ignore
    for op, count, label in (("read", 1, "Raw Read 1x512B"), ("read", 64, "Raw Read 64x (32KB)"),
                             ("write", 1, "Raw Write 1x512B"), ("write", 64, "Raw Write 64x (32KB)")):
        if label not in want:
            continue
        n = count * ss
        rt = ctx.row(label, op, n, (device,), unit="KiB/s", value_fn=kib_per_s(n))
        data = rng.randbytes(n)
        for _ in range(cfg.runs):
            if op == "read":
                rt.time(lambda: read(lba, count))
            else:
                rt.time(lambda: write(lba, data))
        yield rt.finish()

    if "File Read" in want:
        yield _file_read(fs, device, cfg, ctx)
    if "File Write" in want:
        yield _file_write(fs, device, cfg, ctx, rng)
    fs.unmount()


def run_dir(fs: FileSystem, cfg: P2Config, ctx: Context, warnings: list[str], *, seed: int = 1) -> Iterator[Row]:
    """The file metrics in a mounted directory ``fs``; its test files are removed afterwards."""
    preflight_dir(cfg)
    left = [m for m in cfg.metrics if m not in DIR_METRICS]
    if left:
        warnings.append(f"p2: {', '.join(left)} need a card or a block device; not run in a directory")
    rng = random.Random(seed)
    want = set(cfg.metrics)
    names = ["/read.bin", "/write.bin"] + [f"/file{i}.txt" for i in range(cfg.open_files_in_root - 1)]
    fs.mount()
    try:
        with fs.open("/read.bin", "w") as f:
            f.write(rng.randbytes(cfg.file_read_bytes))
        for name in names[2:]:
            with fs.open(name, "w") as f:
                f.write(b"x" * 100)
        if "File Open" in want:
            rt = ctx.row("File Open", "open", 0, (), unit="us", value_fn=lambda r: r.time_ms * 1000.0)
            for _ in range(cfg.runs):
                rt.time(lambda: fs.open("/read.bin", "r")).close()
            yield rt.finish()
        if "File Read" in want:
            yield _file_read(fs, None, cfg, ctx)
        if "File Write" in want:
            yield _file_write(fs, None, cfg, ctx, rng)
    finally:
        for name in names:
            if fs.exists(name):
                fs.remove(name)
        fs.unmount()


def _file_read(fs: FileSystem, device: BlockDevice | None, cfg: P2Config, ctx: Context) -> Row:
    n = cfg.file_read_bytes
    devs = (device,) if device is not None else ()
    rt = ctx.row(f"File Read {n // KIB}KB", "read", n, devs, unit="KiB/s", value_fn=kib_per_s(n))
    chunk = cfg.file_read_chunk_bytes

    def read_all() -> None:
        got = 0
        with fs.open("/read.bin", "r") as f:
            while got < n:
                got += len(f.read(min(chunk, n - got)))

    for _ in range(cfg.runs):
        rt.time(read_all)
    return rt.finish()


def _file_write(fs: FileSystem, device: BlockDevice | None, cfg: P2Config, ctx: Context,
                rng: random.Random) -> Row:
    """Delete (untimed), then create, write and close the file, timed."""
    n = cfg.file_write_bytes
    devs = (device,) if device is not None else ()
    rt = ctx.row(f"File Write {n // KIB}KB", "write", n, devs, unit="KiB/s", value_fn=kib_per_s(n))
    data = rng.randbytes(n)
    chunk = cfg.file_write_chunk_bytes

    def write_all() -> None:
        with fs.open("/write.bin", "w") as f:
            for off in range(0, n, chunk):
                f.write(data[off:off + chunk])

    for _ in range(cfg.runs):
        if fs.exists("/write.bin"):
            fs.remove("/write.bin")
        rt.time(write_all)
    return rt.finish()


def summary(rows: list[Row], spi_clock_hz: float) -> dict[str, Any]:
    """Multi-sector gain and efficiency against the SPI byte rate (clock/8)."""
    by = {r.label: r for r in rows}
    theo = spi_clock_hz / 8 / KIB
    out: dict[str, Any] = {"spi_byte_rate_kib_s": theo}
    for op in ("Read", "Write"):
        one, many = by.get(f"Raw {op} 1x512B"), by.get(f"Raw {op} 64x (32KB)")
        if one and many and one.value:
            out[f"multi_sector_gain_{op.lower()}"] = many.value / one.value  # type: ignore[operator]
            out[f"raw_{op.lower()}_efficiency"] = many.value / theo  # type: ignore[operator]
    for label in ("File Read 256KB", "File Write 32KB"):
        if label in by and by[label].value:
            out[f"{label.lower().replace(' ', '_')}_efficiency"] = by[label].value / theo  # type: ignore[operator]
    return out


#: what each summary key says, for people (the keys stay as they are in the JSON metadata)
SUMMARY_NAMES = {
    "spi_byte_rate_kib_s": "SPI byte rate (clock / 8)",
    "multi_sector_gain_read": "Raw read: 64 sectors per command vs 1 (throughput gain)",
    "multi_sector_gain_write": "Raw write: 64 sectors per command vs 1 (throughput gain)",
    "raw_read_efficiency": "Raw read 64x (32 KB) vs the SPI byte rate",
    "raw_write_efficiency": "Raw write 64x (32 KB) vs the SPI byte rate",
    "file_read_256kb_efficiency": "File Read 256KB vs the SPI byte rate",
    "file_write_32kb_efficiency": "File Write 32KB vs the SPI byte rate",
}


def summary_lines(rec: Any) -> list[tuple[str, str]]:
    """The P2 summary (run metadata ``p2_summary``) as lines with units."""
    out = []
    for k, v in (rec.metadata.get("p2_summary") or {}).items():
        shown = f"{v:.0f} KiB/s" if k.endswith("kib_s") else (f"{v * 100:.0f} %" if "efficiency" in k else f"{v:.2f}x")
        out.append((SUMMARY_NAMES.get(k, k.replace("_", " ")), shown))
    return out
