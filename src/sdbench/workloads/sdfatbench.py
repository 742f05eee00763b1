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

A ``BUF_SIZE`` that is not a whole number of sectors (511, 64 bytes) goes through SdFat's one-sector cache,
not FatFs' file buffer (:mod:`sdbench.workloads.sdfatfile`): that is where the two differ in sectors moved.

Every pass is one timed call (``ctx.row(...).time``) on the stack's clock, so rows, counters, the simulated
time breakdown and traces cover exactly the sketch's timed region; the per-call latencies are read from the
same clock in whole µs, as ``micros()`` does.  Rows: ``sdfat write`` and ``sdfat read`` (the labels of
:mod:`sdbench.importers.sdfat`), unit KB/s, ``bytes`` = FILE_SIZE, one sample per pass = the pass time; with
``pass_rows`` one row per pass instead, ``sdfat write 512 B pass 1`` ..., as a source that prints each pass.
The printed figures per pass are in the run's metadata (``metadata["sdfat_bench"]``), and
:func:`sdfat_output` renders a run as the sketch's serial output.

``sketch = "sdio-demo"`` runs SdFat's other benchmark, examples/TeensySdioDemo (the same in SdFat 1.x and 2.x,
whose buffer-size sweeps print ``size,write,read``): open ``TeensyDemo.bin`` (O_RDWR | O_CREAT, untimed), then
for nb = 512, 1024 ... BUF_DIM (``buf_bytes``): ``truncate(0)`` (SdFat syncs there, untimed), ``micros()`` around
FILE_SIZE / nb writes of nb bytes (no pre-allocation, no sync: a transfer the driver left open ends in the
read pass's first call), ``rewind()``, ``micros()`` around as many reads, each checking the buffer's first and
last words; KB/s = 1000 * FILE_SIZE / t.  Rows ``sdfat write 4096 B``, ``sdfat read 4096 B`` ..., one per size.

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

from ..clock import VirtualClock
from ..errors import ConfigError, InternalError, SdbenchError
from ..fs.fat import plan_volume, volume_capacity_bytes
from ..ledger import Price
from ..media.linux import AlignedBuffer
from ..options import opt
from ..records import Row, RunRecord
from ..runner import Context
from .fio import sdfat_pattern
from .sdfatfile import SdFatFile

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
#: the sketches: examples/bench, examples/TeensySdioDemo
SKETCHES = ("bench", "sdio-demo")
#: TeensySdioDemo's smallest size and its file: 256 buffers of the largest (FILE_SIZE = 256UL * BUF_DIM)
DEMO_FIRST_BYTES = 512
DEMO_FILE = "/TeensyDemo.bin"


@dataclass(frozen=True)
class SdFatBenchConfig:
    """Options of the ``sdfat-bench`` protocol (table ``[sdfat_bench]``)."""

    file_bytes: int = opt(5 * MB, unit="B", min=SECTOR, max=MAX_FILE_BYTES,
                          help="FILE_SIZE: the file a pass writes or reads (FILE_SIZE_MB = 5, MB = 10^6 B); "
                               "n = file_bytes / buf_bytes calls")
    buf_bytes: int = opt(512, unit="B", min=8, max=MAX_BUF_BYTES,
                         help="BUF_SIZE: bytes per call (sdio-demo: BUF_DIM, its largest size, a power of two); "
                              "partial sectors go via SdFat's cache")
    write_passes: int = opt(2, min=1, max=255, help="WRITE_COUNT: write passes per run")
    read_passes: int = opt(2, min=1, max=255, help="READ_COUNT: read passes per run")
    pre_allocate: bool = opt(True, help="PRE_ALLOCATE: reserve the file's clusters before the write passes "
                                        "(FAT: f_lseek past the end; dir: posix_fallocate)")
    runs: int = opt(1, min=1, max=1000,
                    help="runs of the sketch's loop (a key press each; --runs sets it), each adding its "
                         "passes' samples to the rows")
    sketch: str = opt("bench", choices=SKETCHES,
                      help="bench: examples/bench; sdio-demo: examples/TeensySdioDemo, a write and a read pass per "
                           "size, 512 B to buf_bytes")
    pass_rows: bool = opt(False, help="bench: a row per pass ('sdfat write 512 B pass 1' ...); false: a row per "
                                      "operation, a sample per pass")

    def __post_init__(self) -> None:
        if self.buf_bytes > self.file_bytes:
            raise ValueError(f"buf_bytes = {self.buf_bytes} B is larger than file_bytes = {self.file_bytes} B: "
                             "a pass would make no call")
        if self.sketch == "sdio-demo":
            b = self.buf_bytes
            if b < DEMO_FIRST_BYTES or b & (b - 1):
                raise ValueError(f"buf_bytes = {b} B: the sdio-demo sketch's BUF_DIM is a power of two from "
                                 f"{DEMO_FIRST_BYTES} B (its sizes double from {DEMO_FIRST_BYTES} B up to it)")
            if self.pre_allocate or self.write_passes != 1 or self.read_passes != 1 or self.pass_rows:
                raise ValueError("the sdio-demo sketch writes and reads once per size, without pre-allocation: "
                                 "set pre_allocate = false, write_passes = 1, read_passes = 1, pass_rows = false")

    @property
    def sizes(self) -> tuple[int, ...]:
        """The buffer sizes a run goes through: BUF_SIZE (bench), 512 ... BUF_DIM (sdio-demo)."""
        if self.sketch == "bench":
            return (self.buf_bytes,)
        return tuple(DEMO_FIRST_BYTES << i for i in range((self.buf_bytes // DEMO_FIRST_BYTES).bit_length()))

    def calls_of(self, buf: int) -> int:
        """Calls per pass with ``buf``-byte calls."""
        return self.file_bytes // buf

    def labels(self) -> list[tuple[str, str]]:
        """(row label, op) of every row a run emits, in order."""
        if self.sketch == "sdio-demo":
            return [(f"{LABELS[op]} {b} B", op) for b in self.sizes for op in ("write", "read")]
        if self.pass_rows:
            return [(f"{LABELS[op]} {self.buf_bytes} B pass {k}", op)
                    for op, n in (("write", self.write_passes), ("read", self.read_passes)) for k in range(1, n + 1)]
        return [(LABELS["write"], "write"), (LABELS["read"], "read")]

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
    return cfg.runs * len(cfg.sizes) * (cfg.write_passes + cfg.read_passes)


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
    if cfg.sketch != "bench":
        raise ConfigError(f"{TABLE}.sketch = {cfg.sketch!r}: that sketch runs on an [sd] device (FAT) only, "
                          "not in a directory")
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


class _Rows:
    """The run's row timers (one per label of :meth:`SdFatBenchConfig.labels`) and each pass's printed figures,
    per operation in the order the sketch prints them."""

    def __init__(self, cfg: SdFatBenchConfig, ctx: Context, devices: tuple[Any, ...]) -> None:
        self.cfg = cfg
        self.timers = {label: ctx.row(label, op, cfg.file_bytes, devices, unit="KB/s", value_fn=_kb_s)
                       for label, op in cfg.labels()}
        self.passes: dict[str, list[dict[str, Any]]] = {"write": [], "read": []}

    def timer(self, op: str, k: int, buf: int) -> Any:
        """The row timer of pass ``k`` (0-based, within a run) of ``op`` with ``buf``-byte calls."""
        cfg = self.cfg
        if cfg.sketch == "sdio-demo":
            return self.timers[f"{LABELS[op]} {buf} B"]
        if cfg.pass_rows:
            return self.timers[f"{LABELS[op]} {buf} B pass {k + 1}"]
        return self.timers[LABELS[op]]


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = config_of(sc)
    dev = built.target.sd_device
    devices = (dev,) if dev is not None else ()
    rows = _Rows(cfg, ctx, devices)
    passes = rows.passes
    meta: dict[str, Any] = {
        "sketch": cfg.sketch, "file_bytes": cfg.file_bytes, "buf_bytes": cfg.buf_bytes,
        "moved_bytes": cfg.moved_bytes, "write_passes": cfg.write_passes, "read_passes": cfg.read_passes,
        "runs": cfg.runs, "pre_allocate": cfg.pre_allocate, "skip_first_latency": True,
        "rows": {LABELS[op]: {"passes": passes[op], "calls_per_pass": cfg.calls, "call_bytes": cfg.buf_bytes}
                 for op in ("write", "read")}}
    if cfg.sketch == "sdio-demo":
        meta["sizes"] = list(cfg.sizes)
    built.metadata["sdfat_bench"] = meta
    if dev is not None:
        _run_fat(built, cfg, ctx, rows, meta)
    else:
        _run_dir(built, cfg, ctx, rows, meta)
    for timer in rows.timers.values():
        yield timer.finish()


def _timed_pass(ctx: Context, timer: Any, op: str, cfg: SdFatBenchConfig, buf: int, call: Callable[[], int],
                sync: Callable[[], None] | None,
                short: Callable[[int], tuple[int, int]] | None = None) -> dict[str, Any]:
    """One pass as the sketch times it: bench: millis() around the loop (and the sync), micros() around each
    call; sdio-demo: micros() around the loop.  ``call`` does one read or write and returns the file position
    after it; ``short(limit)`` (on a virtual clock), up to ``limit`` calls at once while each costs the same fixed
    charges and nothing else: how many, and the file position before them (0 calls: the next goes to ``call``)."""
    now = ctx.clock.now_ns
    n = cfg.calls_of(buf)
    if cfg.sketch == "sdio-demo":
        def loop() -> int:
            t = now() // 1000
            for _ in range(n):
                call()
            return now() // 1000 - t

        us = timer.time(loop)
        # Serial.print(1000.0 * FILE_SIZE / t): a double, printed with two decimals
        return {"buf_bytes": buf, "us": us, "kb_s": 1000.0 * cfg.file_bytes / us if us else float("inf")}
    lat: list[int] = []
    pos: list[int] = []

    def body() -> int:
        t = now() // 1_000_000
        i = 0
        while i < n:
            if short is not None:
                t0 = now()
                k, p0 = short(n - i)
                if k:
                    # k calls of the same steps, d ns each: what micros() read around each of them
                    d, rest = divmod(now() - t0, k)
                    if rest:
                        raise InternalError(f"{k} short calls took {now() - t0} ns, not the same steps each")
                    lat.extend([(t0 + (j + 1) * d) // 1000 - (t0 + j * d) // 1000 for j in range(k)])
                    pos.extend(range(p0 + buf, p0 + (k + 1) * buf, buf))
                    i += k
                    continue
            m = now() // 1000
            p = call()
            lat.append(now() // 1000 - m)
            pos.append(p)
            i += 1
        if sync is not None:
            sync()
        return now() // 1_000_000 - t

    ms = timer.time(body)
    return pass_figures(op, lat, pos, ms, cfg.moved_bytes)


def _ends_a_line(last_byte: int) -> bool:
    """The sketch's check of a read buffer's last byte (see _check_read)."""
    return last_byte == 0x0A


def _check_read(data: bytes, buf_bytes: int, offset: int) -> None:
    if len(data) != buf_bytes:
        raise SdbenchError(f"read failed: {len(data)} of {buf_bytes} B at offset {offset}")
    if not data or not _ends_a_line(data[-1]):   # the sketch's check (FULL_READ_VERIFY false)
        raise SdbenchError(f"data check error at offset {offset}")


def _copy_charge(built: Any, clock: Any) -> Callable[..., None]:
    """Charges the CPU's copy of n bytes into or out of SdFat's sector cache (the host's copy_cycles_per_byte;
    ``times``: that many copies in a row; nothing on a stack with no simulated host)."""
    parts = built.sd_parts
    if parts is None or not isinstance(clock, VirtualClock):
        return lambda n, times=1: None
    host = parts.host
    charges: dict[int, Callable[..., None]] = {}  # by n: a 64-byte BUF_SIZE makes millions of the same copy

    def copy(n: int, times: int = 1) -> None:
        charge = charges.get(n)
        if charge is None:
            price = Price("sd.host", "copy_cycles_per_byte", n)
            charge = charges[n] = clock.pricer(price.ns(host), "host", price)
        charge(times)
    return copy


def _run_fat(built: Any, cfg: SdFatBenchConfig, ctx: Context, rows: _Rows, meta: dict[str, Any]) -> None:
    dev = built.target.sd_device
    fs = built.target.make_fs("sd_fatfs")
    copy = _copy_charge(built, ctx.clock)
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
            if cfg.sketch == "sdio-demo":
                _demo_fat(fs, cfg, ctx, rows, copy)
            else:
                _bench_fat(fs, cfg, ctx, rows, copy)
            fs.unmount()   # sd.end()
            mounted = False
    finally:
        if mounted:
            fs.unmount()


def _bench_fat(fs: Any, cfg: SdFatBenchConfig, ctx: Context, rows: _Rows, copy: Callable[[int], None]) -> None:
    """One loop() of examples/bench over FatFs, the calls as SdFat makes them (:class:`SdFatFile`)."""
    buf = cfg.buf_bytes
    pattern = sdfat_pattern(buf)
    virtual = isinstance(ctx.clock, VirtualClock)  # on a wall clock every call is timed as it runs
    for k in range(cfg.write_passes):
        f = fs.open(FAT_FILE, "r+" if cfg.pre_allocate else "w")
        sf = SdFatFile(f, copy, preallocated=cfg.pre_allocate)

        def write(sf: SdFatFile = sf) -> int:
            if sf.write(pattern, buf_addr=BUF_ADDR) != buf:
                raise SdbenchError("write failed")
            return sf.tell()

        def sync(sf: SdFatFile = sf, f: Any = f) -> None:
            sf.sync()
            f.close()

        def short_writes(limit: int, sf: SdFatFile = sf) -> tuple[int, int]:
            at = sf.tell()
            return sf.short_writes(pattern, limit), at

        rows.passes["write"].append(_timed_pass(ctx, rows.timer("write", k, buf), "write", cfg, buf, write, sync,
                                                short_writes if virtual else None))
    f = fs.open(FAT_FILE, "r")
    try:
        sf = SdFatFile(f, copy, preallocated=False)
        for k in range(cfg.read_passes):
            sf.seek(0)   # rewind()

            def read(sf: SdFatFile = sf) -> int:
                at = sf.tell()
                _check_read(sf.read(buf, buf_addr=BUF_ADDR), buf, at)
                return sf.tell()

            def short_reads(limit: int, sf: SdFatFile = sf) -> tuple[int, int]:
                at = sf.tell()
                return sf.short_reads(buf, limit, _ends_a_line), at

            rows.passes["read"].append(_timed_pass(ctx, rows.timer("read", k, buf), "read", cfg, buf, read, None,
                                                   short_reads if virtual else None))
    finally:
        f.close()


def _demo_fat(fs: Any, cfg: SdFatBenchConfig, ctx: Context, rows: _Rows, copy: Callable[[int], None]) -> None:
    """One runTest() of examples/TeensySdioDemo over FatFs."""
    f = fs.open(DEMO_FILE, "r+" if fs.exists(DEMO_FILE) else "w")   # O_RDWR | O_CREAT
    try:
        sf = SdFatFile(f, copy, preallocated=False)
        for nb in cfg.sizes:
            # file.truncate(0): SdFat frees the chain and syncs (FAT, directory entry); untimed
            f.seek(0)
            f.truncate(0)
            f.sync()
            sf.seek(0)
            block = bytearray(nb)
            counter = iter(range(cfg.calls_of(nb)))

            def write(nb: int = nb, block: bytearray = block, counter: Any = counter) -> int:
                n = next(counter)
                stamp = n.to_bytes(4, "little")       # buf32[0] = n; buf32[nb / 4 - 1] = n
                block[:4] = stamp
                block[nb - 4:] = stamp
                if sf.write(block, buf_addr=BUF_ADDR) != nb:
                    raise SdbenchError("write failed")
                return sf.tell()

            rows.passes["write"].append(_timed_pass(ctx, rows.timer("write", 0, nb), "write", cfg, nb, write, None))
            sf.seek(0)   # rewind()
            reads = iter(range(cfg.calls_of(nb)))

            def read(nb: int = nb, reads: Any = reads) -> int:
                n, at = next(reads), sf.tell()
                data = sf.read(nb, buf_addr=BUF_ADDR)
                stamp = n.to_bytes(4, "little")
                if len(data) != nb:
                    raise SdbenchError(f"read failed: {len(data)} of {nb} B at offset {at}")
                if data[:4] != stamp or data[nb - 4:] != stamp:   # the sketch's crude check of data
                    raise SdbenchError(f"data check at offset {at}")
                return sf.tell()

            rows.passes["read"].append(_timed_pass(ctx, rows.timer("read", 0, nb), "read", cfg, nb, read, None))
        sf.sync()
    finally:
        f.close()   # file.close()


def _run_dir(built: Any, cfg: SdFatBenchConfig, ctx: Context, rows: _Rows, meta: dict[str, Any]) -> None:
    fs = built.target.make_fs("dir")
    buf = cfg.buf_bytes
    passes = rows.passes
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
            for k in range(cfg.write_passes):
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

                passes["write"].append(_timed_pass(ctx, rows.timer("write", k, buf), "write", cfg, buf, write,
                                                   lambda: os.fsync(fd)))
                os.ftruncate(fd, cfg.moved_bytes)   # truncate(): drop the pre-allocated tail
            for k in range(cfg.read_passes):
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

                passes["read"].append(_timed_pass(ctx, rows.timer("read", k, buf), "read", cfg, buf, read, None))
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
    if m.get("sketch") == "sdio-demo":
        return _demo_output(m)
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


def _demo_output(m: dict[str, Any]) -> str:
    """A run of the sdio-demo sketch as TeensySdioDemo prints it: per run the ``size,write,read`` table (KB/sec
    with two decimals, Arduino's Print of a double), then "Done"."""
    wpasses = m["rows"].get(LABELS["write"], {}).get("passes", [])
    rpasses = m["rows"].get(LABELS["read"], {}).get("passes", [])
    out: list[str] = []
    for w, r in zip(wpasses, rpasses):
        if w["buf_bytes"] == DEMO_FIRST_BYTES:
            out += ["", "size,write,read", "bytes,KB/sec,KB/sec"]
        out.append(f"{w['buf_bytes']},{put_double(float(w['kb_s']))},{put_double(float(r['kb_s']))}")
        if w["buf_bytes"] == m["buf_bytes"]:
            out += ["", "Done"]
    return "\n".join(out) + "\n"
