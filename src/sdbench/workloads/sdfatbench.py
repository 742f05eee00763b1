"""SdFat's ``bench`` example (Arduino SdFat, examples/bench/bench.ino) as a protocol: ``protocol = "sdfat-bench"``.

The sketch, as published, per run (one ``loop()``, started by a key press):

1. ``sd.begin()`` (card init, mount), open ``bench.dat`` with O_RDWR | O_CREAT | O_TRUNC, fill a
   ``BUF_SIZE`` buffer with 'A'..'Z' repeated, ending in CR LF;
2. ``WRITE_COUNT`` write passes: ``truncate(0)``, ``preAllocate(FILE_SIZE)`` (PRE_ALLOCATE), then
   ``t = millis()``, ``n = FILE_SIZE / BUF_SIZE`` calls ``write(buf, BUF_SIZE)`` each timed with
   ``micros()``, ``sync()``, ``t = millis() - t``; ``truncate()`` to the written size (untimed);
3. ``READ_COUNT`` read passes: ``rewind()``, ``t = millis()``, n calls ``read(buf, BUF_SIZE)`` each timed,
   checking the buffer's last byte is '\\n' ("data check error" otherwise), ``t = millis() - t``;
4. per pass ``speed,max,min,avg``: speed = file size / t in whole ms (KB/s, KB = 1000 B, the file size
   being the n * BUF_SIZE bytes written), max/min/avg latency of the calls in µs (max and min skip the
   first call, SKIP_FIRST_LATENCY; avg = total / n over every call); then "Done".

Here the calls go through the stack's filesystem:

* an ``[sd]`` device (a simulated card, memory, an image, a device with ``--allow-write``): FAT through
  FatFs (the ``sd_fatfs`` part, fatfs-ng), formatted and mounted untimed first.  FatFs has no
  ``preAllocate``: pre-allocation is FatFs' own way to reserve a file's clusters, ``f_lseek`` past the end
  of a file open for writing (the cluster chain and the size, no data written), then a sync, untimed, once
  per run; SdFat's ``truncate(0)`` + ``preAllocate`` at each later pass give the same clusters back, so the
  later passes overwrite them in place (reopened read/write).  FatFs' ``f_close`` is its ``f_sync`` plus
  releasing the handle (no I/O of its own), so the sync in the pass time is the close.  FatFs keeps no
  ``truncate()`` to the written size: the file keeps FILE_SIZE bytes (the n * BUF_SIZE bytes the
  passes move are the same).  Without pre-allocation each write pass reopens the file truncated and the
  writes allocate clusters as they go (FatFs' allocator continues after the last cluster it handed out,
  SdFat's starts from the lowest free one).
* a mounted directory (``sdbench run --dir``): a real file ``BENCH.DAT``, ``ftruncate`` +
  ``posix_fallocate`` for the pre-allocation, O_DIRECT where the filesystem takes it at this buffer size
  (else the page cache, dropped with ``posix_fadvise`` before each read pass), ``fsync`` as the sync; the
  file is removed afterwards.

Every pass is one timed call (``ctx.row(...).time``) on the stack's clock, so rows, counters, the simulated
time breakdown and traces cover exactly the sketch's timed region; the per-call latencies are read from the
same clock in whole µs, as ``micros()`` does.  Rows: ``sdfat write`` and ``sdfat read`` (the labels of
:mod:`sdbench.importers.sdfat`), unit KB/s, ``bytes`` = FILE_SIZE, one sample per pass = the pass time.
The printed figures per pass are in the run's metadata (``metadata["sdfat_bench"]``), and
:func:`sdfat_output` renders a run as the sketch's serial output.

``--runs N`` sets ``sdfat_bench.runs``: the sketch's loop run N times (a key press each), every run
adding ``write_passes`` and ``read_passes`` samples to the rows.
"""
from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, SdbenchError
from ..fs.fat import plan_volume, volume_capacity_bytes
from ..media.linux import AlignedBuffer
from ..options import opt
from ..records import Row, RunRecord
from ..runner import Context
from .fio import sdfat_pattern

TABLE = "sdfat_bench"
FAT_FILE = "/bench.dat"     # the sketch's name (FAT keeps it as the short name BENCH.DAT)
DIR_FILE = "/BENCH.DAT"
SECTOR = 512
MB = 1_000_000              # the sketch's MB
#: FAT's largest file (and SdFat's uint32_t preAllocate length)
MAX_FILE_BYTES = 0xFFFF_FFFF
MAX_BUF_BYTES = 1 << 20
#: simulated address of the sketch's ``uint32_t buf32[]`` (4-byte aligned, internal RAM)
BUF_ADDR = 0x3FFB_0000
#: the sketch's initial minLatency
MIN_LATENCY_START = 9_999_999
LABELS = {"write": "sdfat write", "read": "sdfat read"}


@dataclass(frozen=True)
class SdFatBenchConfig:
    """Options of the ``sdfat-bench`` protocol (table ``[sdfat_bench]``)."""

    file_bytes: int = opt(5 * MB, unit="B", min=SECTOR, max=MAX_FILE_BYTES,
                          help="FILE_SIZE: the file a pass writes or reads (FILE_SIZE_MB = 5, MB = 10^6 B); "
                               "n = file_bytes / buf_bytes calls")
    buf_bytes: int = opt(512, unit="B", min=SECTOR, max=MAX_BUF_BYTES,
                         help="BUF_SIZE: bytes per write()/read() call; a multiple of 512")
    write_passes: int = opt(2, min=1, max=255, help="WRITE_COUNT: write passes per run")
    read_passes: int = opt(2, min=1, max=255, help="READ_COUNT: read passes per run")
    pre_allocate: bool = opt(True, help="PRE_ALLOCATE: reserve the file's clusters before the write passes "
                                        "(FAT: f_lseek past the end; dir: posix_fallocate)")
    runs: int = opt(1, min=1, max=1000,
                    help="runs of the sketch's loop (a key press each; --runs sets it), each adding its "
                         "passes' samples to the rows")

    def __post_init__(self) -> None:
        if self.buf_bytes % SECTOR:
            raise ValueError(f"buf_bytes = {self.buf_bytes} B is not a whole number of {SECTOR}-byte sectors")
        if self.buf_bytes > self.file_bytes:
            raise ValueError(f"buf_bytes = {self.buf_bytes} B is larger than file_bytes = {self.file_bytes} B: "
                             "a pass would make no call")

    @property
    def calls(self) -> int:
        """n: calls per pass."""
        return self.file_bytes // self.buf_bytes

    @property
    def moved_bytes(self) -> int:
        """The bytes a pass moves, the file's size the sketch divides by: n * BUF_SIZE."""
        return self.calls * self.buf_bytes


def config_of(sc: Any) -> SdFatBenchConfig:
    cfg = sc.options.get(TABLE)
    return cfg if cfg is not None else SdFatBenchConfig()


def timed_calls(sc: Any) -> int:
    """One timed call per pass."""
    cfg = config_of(sc)
    return cfg.runs * (cfg.write_passes + cfg.read_passes)


# ---- preflight -------------------------------------------------------------------------------------------

def preflight(sc: Any, built: Any) -> None:
    """Refuse, before any I/O, what cannot run: a file larger than the FAT volume or the directory's free
    space, an existing BENCH.DAT in a directory, a stack with neither (ConfigError naming the option)."""
    cfg = config_of(sc)
    dev = built.target.sd_device
    if dev is not None:
        if "sd_fatfs" not in built.target.fs_factories:
            raise ConfigError(f"scenario {sc.name}: protocol sdfat-bench needs FAT on the [sd] device")
        lay = plan_volume(dev.geometry, sc.sd_fat, where="sd_fat")
        cap = volume_capacity_bytes(lay)
        need = -(-cfg.file_bytes // lay.cluster_bytes) * lay.cluster_bytes
        if need > cap:
            raise ConfigError(f"{TABLE}.file_bytes = {cfg.file_bytes} B ({need} B in {lay.cluster_bytes} B "
                              f"clusters) is more than the FAT volume on the {dev.geometry.size_bytes} B device "
                              f"holds ({cap} B)")
        return
    if "dir" not in built.target.fs_factories:
        raise ConfigError(f"scenario {sc.name}: protocol sdfat-bench needs an [sd] device or a directory")
    fs = built.target.make_fs("dir")
    host = fs.host_path(DIR_FILE)
    if os.path.lexists(host):
        raise ConfigError(f"{host} exists already: the SdFat bench writes its own {DIR_FILE[1:]} and removes it "
                          f"afterwards; move that file away or run in another directory")
    st = os.statvfs(fs.root)
    free = st.f_bavail * st.f_frsize
    if cfg.file_bytes > free:
        raise ConfigError(f"{TABLE}.file_bytes = {cfg.file_bytes} B is more than the {free} B free in {fs.root}")


# ---- one pass's figures, as the sketch computes them ------------------------------------------------------

def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def sketch_speed(moved_bytes: int, ms: int) -> float:
    """``s / t``: float file size over uint32 milliseconds, in float (inf for a pass under 1 ms)."""
    if ms <= 0:
        return float("inf")
    return _f32(_f32(float(moved_bytes)) / _f32(float(ms)))


def put_double(x: float, digits: int = 2) -> str:
    """SdFat's ``ostream::putDouble`` at its default precision: add half a unit of the last digit, print the
    integer part and ``digits`` truncated fraction digits; "BIG FLT" above 4E9 (and for inf)."""
    sign = "-" if x < 0 else ""
    x = abs(x)
    if x > 4.0e9:
        return "BIG FLT"
    r = 0.5
    for _ in range(digits):
        r *= 0.1
    x += r
    whole = int(x)
    frac = x - whole
    out = [sign, str(whole), "." if digits else ""]
    for _ in range(digits):
        frac *= 10.0
        d = int(frac)
        out.append(chr(48 + d))
        frac -= d
    return "".join(out)


def pass_figures(op: str, lat_us: list[int], positions: list[int], ms: int, moved: int,
                 skip_first: bool = True) -> dict[str, Any]:
    """One pass's printed figures: speed, max/min (skipping the first call: SKIP_FIRST_LATENCY; a write is
    skipped while the file position after it is below 512), avg = total / n (uint32 division)."""
    mx, mn, total = 0, MIN_LATENCY_START, 0
    skip = skip_first
    for i, m in enumerate(lat_us):
        total += m
        if skip:
            skip = positions[i] < 512 if op == "write" else False
        else:
            mx, mn = max(mx, m), min(mn, m)
    n = len(lat_us)
    return {"kb_s": sketch_speed(moved, ms), "max_us": mx, "min_us": mn, "avg_us": total // n if n else 0,
            "ms": ms}


# ---- the run ---------------------------------------------------------------------------------------------

def _kb_s(row: Row) -> float:
    return row.bytes / row.time_ms if row.time_ms else 0.0


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = config_of(sc)
    dev = built.target.sd_device
    devices = (dev,) if dev is not None else ()
    w = ctx.row(LABELS["write"], "write", cfg.file_bytes, devices, unit="KB/s", value_fn=_kb_s)
    r = ctx.row(LABELS["read"], "read", cfg.file_bytes, devices, unit="KB/s", value_fn=_kb_s)
    passes: dict[str, list[dict[str, Any]]] = {"write": [], "read": []}
    meta: dict[str, Any] = {
        "file_bytes": cfg.file_bytes, "buf_bytes": cfg.buf_bytes, "moved_bytes": cfg.moved_bytes,
        "write_passes": cfg.write_passes, "read_passes": cfg.read_passes, "runs": cfg.runs,
        "pre_allocate": cfg.pre_allocate, "skip_first_latency": True,
        "rows": {LABELS[op]: {"passes": passes[op], "calls_per_pass": cfg.calls, "call_bytes": cfg.buf_bytes}
                 for op in ("write", "read")}}
    built.metadata["sdfat_bench"] = meta
    if dev is not None:
        _run_fat(built, cfg, ctx, w, r, passes, meta)
    else:
        _run_dir(built, cfg, ctx, w, r, passes, meta)
    yield w.finish()
    yield r.finish()


def _timed_pass(ctx: Context, timer: Any, op: str, cfg: SdFatBenchConfig, call: Callable[[], int],
                sync: Callable[[], None] | None) -> dict[str, Any]:
    """One pass as the sketch times it: millis() around the loop (and the sync), micros() around each call.
    ``call`` does one read or write and returns the file position after it."""
    now = ctx.clock.now_ns
    n = cfg.calls
    lat: list[int] = []
    pos: list[int] = []

    def body() -> int:
        t = now() // 1_000_000
        for _ in range(n):
            m = now() // 1000
            p = call()
            lat.append(now() // 1000 - m)
            pos.append(p)
        if sync is not None:
            sync()
        return now() // 1_000_000 - t

    ms = timer.time(body)
    return pass_figures(op, lat, pos, ms, cfg.moved_bytes)


def _check_read(data: bytes, buf_bytes: int, offset: int) -> None:
    if len(data) != buf_bytes:
        raise SdbenchError(f"read failed: {len(data)} of {buf_bytes} B at offset {offset}")
    if data[-1:] != b"\n":   # the sketch's check (FULL_READ_VERIFY false): the buffer's last byte
        raise SdbenchError(f"data check error at offset {offset}")


def _run_fat(built: Any, cfg: SdFatBenchConfig, ctx: Context, w: Any, r: Any,
             passes: dict[str, list[dict[str, Any]]], meta: dict[str, Any]) -> None:
    dev = built.target.sd_device
    fs = built.target.make_fs("sd_fatfs")
    pattern = sdfat_pattern(cfg.buf_bytes)
    buf = cfg.buf_bytes
    fs.format()
    mounted = False
    try:
        for run_no in range(cfg.runs):
            fs.mount()   # sd.begin()
            mounted = True
            if run_no == 0:
                layout = fs.describe().get("layout", {})
                meta["fs_type"] = layout.get("fat_type", "")
                meta["card_bytes"] = dev.geometry.size_bytes
                if cfg.pre_allocate:
                    # open O_TRUNC + preAllocate(FILE_SIZE): FatFs reserves the clusters with f_lseek past the
                    # end of a file open for writing; the close writes the FAT and directory entry (the sync
                    # preAllocate ends with). Later passes and runs get these clusters back (SdFat's truncate(0)
                    # + preAllocate) and overwrite them in place.
                    f = fs.open(FAT_FILE, "w")
                    f.seek(cfg.file_bytes)
                    f.seek(0)
                    f.close()
            for _ in range(cfg.write_passes):
                f = fs.open(FAT_FILE, "r+" if cfg.pre_allocate else "w")

                def write(f: Any = f) -> int:
                    if f.write(pattern, buf_addr=BUF_ADDR) != buf:
                        raise SdbenchError("write failed")
                    return f.tell()

                passes["write"].append(_timed_pass(ctx, w, "write", cfg, write, f.close))
            f = fs.open(FAT_FILE, "r")
            try:
                for _ in range(cfg.read_passes):
                    f.seek(0)   # rewind()

                    def read(f: Any = f) -> int:
                        at = f.tell()
                        _check_read(f.read(buf, buf_addr=BUF_ADDR), buf, at)
                        return f.tell()

                    passes["read"].append(_timed_pass(ctx, r, "read", cfg, read, None))
            finally:
                f.close()
            fs.unmount()   # sd.end()
            mounted = False
    finally:
        if mounted:
            fs.unmount()


def _run_dir(built: Any, cfg: SdFatBenchConfig, ctx: Context, w: Any, r: Any,
             passes: dict[str, list[dict[str, Any]]], meta: dict[str, Any]) -> None:
    fs = built.target.make_fs("dir")
    buf = cfg.buf_bytes
    want_direct = bool(fs.direct_align_bytes) and buf % fs.direct_align_bytes == 0
    if fs.direct_align_bytes and not want_direct:
        built.warnings.append(f"{fs.root}: O_DIRECT needs {fs.direct_align_bytes}-byte transfers here; the "
                              f"{buf}-byte calls go through the page cache (fsync in each write pass, "
                              "posix_fadvise before each read pass)")
    fd, direct = fs.open_fd(DIR_FILE, write=True, direct=want_direct, create=True)
    meta["direct"] = direct
    wbuf, rbuf = AlignedBuffer(buf), AlignedBuffer(buf)
    wbuf.view[:] = sdfat_pattern(buf)
    wv, rv = wbuf.view, rbuf.view
    fallocate = cfg.pre_allocate
    try:
        for _ in range(cfg.runs):
            os.ftruncate(fd, 0)   # O_TRUNC
            for _ in range(cfg.write_passes):
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                if fallocate:
                    try:
                        os.posix_fallocate(fd, 0, cfg.file_bytes)
                    except OSError as e:
                        if e.errno == errno.ENOSPC:
                            raise SdbenchError(f"preAllocate failed: no space for {cfg.file_bytes} B in "
                                               f"{fs.root}") from None
                        built.warnings.append(f"{fs.root}: posix_fallocate failed ({e.strerror}); the write "
                                              "passes allocate as they go")
                        fallocate = False

                def write() -> int:
                    try:
                        got = os.write(fd, wv)
                    except OSError as e:
                        raise SdbenchError(f"write failed: {e.strerror}") from None
                    if got != buf:
                        raise SdbenchError(f"write failed: {got} of {buf} B")
                    return os.lseek(fd, 0, os.SEEK_CUR)

                passes["write"].append(_timed_pass(ctx, w, "write", cfg, write, lambda: os.fsync(fd)))
                os.ftruncate(fd, cfg.moved_bytes)   # truncate(): drop the pre-allocated tail
            for _ in range(cfg.read_passes):
                os.lseek(fd, 0, os.SEEK_SET)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass
                fs.drop_caches_now()

                def read() -> int:
                    at = os.lseek(fd, 0, os.SEEK_CUR)
                    try:
                        got = os.readv(fd, [rv])
                    except OSError as e:
                        raise SdbenchError(f"read failed: {e.strerror}") from None
                    _check_read(bytes(rv[:got]), buf, at)
                    return at + got

                passes["read"].append(_timed_pass(ctx, r, "read", cfg, read, None))
    finally:
        os.close(fd)
        wbuf.close()
        rbuf.close()
        if fs.exists(DIR_FILE):
            fs.remove(DIR_FILE)


# ---- the sketch's serial output ----------------------------------------------------------------------

def _mb_text(file_bytes: int) -> str:
    """FILE_SIZE_MB as printed: an integer, or (a size the sketch's integer constant cannot give) the exact
    decimal, e.g. 0.262144."""
    if file_bytes % MB == 0:
        return str(file_bytes // MB)
    whole, part = divmod(file_bytes, MB)
    return f"{whole}.{part:06d}".rstrip("0")


def _bench_meta(rec: RunRecord) -> dict[str, Any]:
    """The per-pass figures of a run of this protocol, or of an imported SdFat bench output."""
    meta = rec.metadata.get("sdfat_bench")
    if isinstance(meta, dict):
        return meta
    if "rows" in rec.metadata and "buf_bytes" in rec.metadata:   # sdbench.importers.sdfat
        m = rec.metadata
        runs = int(m.get("runs", 1)) or 1
        wp, rp = int(m.get("write_passes", 0)), int(m.get("read_passes", 0))
        if wp % runs or rp % runs:
            runs = 1
        out = {"file_bytes": m["file_bytes"], "buf_bytes": m["buf_bytes"], "rows": m["rows"], "runs": runs,
               "write_passes": wp // runs, "read_passes": rp // runs, "fs_type": rec.stack.get("fs_type", "")}
        if isinstance(m.get("device"), dict):
            out["device"] = m["device"]
        return out
    raise SdbenchError(f"run of {rec.scenario} ({rec.protocol or 'no protocol'}) has no SdFat bench figures")


def _pass_line(p: dict[str, Any]) -> str:
    return f"{put_double(float(p['kb_s']))},{p['max_us']},{p['min_us']},{p['avg_us']}"


def sdfat_output(rec: RunRecord) -> str:
    """The run as the sketch prints it on the serial monitor: the set-up lines, then per run the card and
    settings, the write and read sections with one ``speed,max,min,avg`` line per pass, "Done", and the prompt
    the sketch waits at.  :mod:`sdbench.importers.sdfat` reads it back into the same rows."""
    m = _bench_meta(rec)
    runs = int(m.get("runs", 1))
    wp, rp = int(m["write_passes"]), int(m["read_passes"])
    wpasses = m["rows"].get(LABELS["write"], {}).get("passes", [])
    rpasses = m["rows"].get(LABELS["read"], {}).get("passes", [])
    out = ["", "Use a freshly formatted SD for best performance.", ""]
    for k in range(runs):
        out.append("Type any character to start")
        fs_type = m.get("fs_type", "")
        if fs_type:
            out.append("Type is exFAT" if fs_type.lower() == "exfat" else f"Type is {fs_type}")
        dev = m.get("device") if isinstance(m.get("device"), dict) else {}
        if m.get("card_bytes"):
            out.append(f"Card size: {put_double(m['card_bytes'] / SECTOR * 512e-9)} GB (GB = 1E9 bytes)")
        elif dev.get("size_gb"):
            out.append(f"Card size: {dev['size_gb']} GB (GB = 1E9 bytes)")
        if dev.get("manufacturer_id"):   # the CID dump (an imported run's card)
            out += ["", f"Manufacturer ID: {dev['manufacturer_id']}", f"OEM ID: {dev.get('oem_id', '')}",
                    f"Product: {dev.get('product', '')}", f"Revision: {dev.get('revision', '')}",
                    f"Serial number: {dev.get('serial', '')}",
                    f"Manufacturing date: {dev.get('manufactured', '')}", ""]
        elif fs_type or m.get("card_bytes"):
            out.append("")   # a simulated card or an image has no CID to dump
        out += [f"FILE_SIZE_MB = {_mb_text(int(m['file_bytes']))}", f"BUF_SIZE = {m['buf_bytes']} bytes",
                "Starting write test, please wait.", "", "write speed and latency", "speed,max,min,avg",
                "KB/Sec,usec,usec,usec"]
        out += [_pass_line(p) for p in wpasses[k * wp:(k + 1) * wp]]
        out += ["", "Starting read test, please wait.", "", "read speed and latency", "speed,max,min,avg",
                "KB/Sec,usec,usec,usec"]
        out += [_pass_line(p) for p in rpasses[k * rp:(k + 1) * rp]]
        out += ["", "Done"]
    out.append("Type any character to start")
    return "\n".join(out) + "\n"
