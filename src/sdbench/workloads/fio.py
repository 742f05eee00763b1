"""fio-like jobs on real media, and the presets users compare cards with.

A job (:class:`JobConfig`) moves ``bs_bytes`` blocks over a region of a
target -- a :class:`~sdbench.media.linux.LinuxBlockDevice` (raw device or
image file) or a :class:`~sdbench.media.dirtarget.DirTarget` (a file in a
mounted directory) -- sequentially or in a random permutation, with
``iodepth`` I/Os in flight (one thread each doing synchronous
``preadv``/``pwritev``; the syscalls release the GIL, so the device sees that
many concurrent requests).  The hot loop uses preallocated page-aligned
buffers and preallocated iovec lists: no allocation per I/O.

Results are :class:`~sdbench.records.RunRecord` objects.  One row per job and
direction: ``bytes`` = bytes moved in that direction over the whole job,
``runs`` = 1 and the sample = the job's wall time (including the final
fdatasync of a job that writes), so ``mib_s`` is the aggregate bandwidth even
at iodepth > 1.  IOPS, latency percentiles (µs), per-loop figures and a
per-second timeline are in ``RunRecord.metadata["rows"][label]``.

Verify (``verify = "crc32c"``): every written block ends with a 32-byte
trailer -- region offset, sequence number, run id, CRC-32C of everything
before the CRC, magic -- so after the job every written block is read back
and checked on its own (corruption, lost writes, misplaced blocks).
"""
from __future__ import annotations

import array
import itertools
import os
import random
import re
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, SdbenchError
from ..media.base import BlockDeviceError, ReadOnlyError
from ..media.dirtarget import DirTarget
from ..media.linux import AlignedBuffer, LinuxBlockDevice
from ..options import from_mapping, opt, read_toml_file, to_mapping
from ..records import MIB, Row, RunRecord, make_row
from ..stats_latency import LatencyHistogram, throughput_timeline

RW_MODES = ("read", "write", "randread", "randwrite", "randrw")
Target = LinuxBlockDevice | DirTarget
#: progress callback: (what is running, fraction 0..1 of it)
ProgressFn = Callable[[str, float], None]


class VerifyError(SdbenchError):
    """Data read back differs from what was written."""


# =====================================================================================
# CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, init and xorout 0xFFFFFFFF
# =====================================================================================
_POLY = 0x82F63B78


def _make_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()
_TABLE_NP = np.array(_TABLE, dtype=np.uint32)
_LANE_BYTES = 64


def _update_py(reg: int, data: bytes | memoryview) -> int:
    t = _TABLE
    for b in data:
        reg = t[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


# The register after n zero bytes is a linear map of the register before (GF(2), 32x32):
# it lets independent pieces be combined, so long buffers are split into lanes that
# numpy advances together.
def _op_apply(cols: Sequence[int], x: int) -> int:
    r, i = 0, 0
    while x:
        if x & 1:
            r ^= cols[i]
        x >>= 1
        i += 1
    return r


@lru_cache(maxsize=None)
def _shift_op(n: int) -> tuple[int, ...]:
    one = [_update_py(1 << i, b"\x00") for i in range(32)]
    result = [1 << i for i in range(32)]  # identity
    base = one
    while n:
        if n & 1:
            result = [_op_apply(base, c) for c in result]
        base = [_op_apply(base, c) for c in base]
        n >>= 1
    return tuple(result)


@lru_cache(maxsize=None)
def _shift_tables(n: int) -> np.ndarray:
    op = _shift_op(n)
    return np.array([[_op_apply(op, v << (8 * k)) for v in range(256)] for k in range(4)], dtype=np.uint32)


def _shift_np(reg: np.ndarray, n: int) -> np.ndarray:
    t = _shift_tables(n)
    return t[0][reg & 0xFF] ^ t[1][(reg >> 8) & 0xFF] ^ t[2][(reg >> 16) & 0xFF] ^ t[3][reg >> 24]


def _raw_rows(mat: np.ndarray) -> np.ndarray:
    """Register (start 0, no xorout) after each row of a (rows, m) uint8 matrix."""
    rows, m = mat.shape
    t = _TABLE_NP
    q = m // _LANE_BYTES
    reg = np.zeros(rows, dtype=np.uint32)
    if q:
        lanes = np.ascontiguousarray(mat[:, : q * _LANE_BYTES].reshape(rows * q, _LANE_BYTES).T)
        r = np.zeros(rows * q, dtype=np.uint32)
        for j in range(_LANE_BYTES):
            r = t[(r ^ lanes[j]) & 0xFF] ^ (r >> 8)
        r = r.reshape(rows, q)
        width = 1 << (q - 1).bit_length()
        if width != q:  # leading zero-state lanes do not change a register that starts at 0
            r = np.concatenate([np.zeros((rows, width - q), dtype=np.uint32), r], axis=1)
        span = _LANE_BYTES
        while r.shape[1] > 1:
            r = _shift_np(r[:, 0::2], span) ^ r[:, 1::2]
            span *= 2
        reg = r[:, 0].copy()
    for j in range(q * _LANE_BYTES, m):
        reg = t[(reg ^ mat[:, j]) & 0xFF] ^ (reg >> 8)
    return reg


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C of ``data``; pass a previous result as ``crc`` to continue it."""
    reg = (crc ^ 0xFFFFFFFF) & 0xFFFFFFFF
    n = len(data)
    if n < 512:
        return _update_py(reg, data) ^ 0xFFFFFFFF
    mat = np.frombuffer(data, dtype=np.uint8).reshape(1, n)
    start = _shift_np(np.array([reg], dtype=np.uint32), n)
    return int((start ^ _raw_rows(mat))[0]) ^ 0xFFFFFFFF


def crc32c_rows(mat: np.ndarray) -> np.ndarray:
    """CRC-32C of every row of a (rows, m) uint8 matrix, vectorised."""
    rows, m = mat.shape
    start = _shift_np(np.full(rows, 0xFFFFFFFF, dtype=np.uint32), m)
    return (start ^ _raw_rows(mat)) ^ np.uint32(0xFFFFFFFF)


# ---- block trailer used by verify -------------------------------------------------------
TRAILER_BYTES = 32
VERIFY_MAGIC = 0x56424453  # "SDBV" little-endian
_TRAILER = struct.Struct("<QQQ")   # region offset, sequence, run id
_CRC_MAGIC = struct.Struct("<II")


def stamp_block(view: memoryview, payload_crc: int, offset: int, seq: int, run_id: int) -> None:
    """Fill the trailer of a block whose payload (all but the last 32 bytes) has CRC ``payload_crc``."""
    bs = len(view)
    _TRAILER.pack_into(view, bs - TRAILER_BYTES, offset, seq, run_id)
    crc = _update_py(payload_crc ^ 0xFFFFFFFF, view[bs - TRAILER_BYTES: bs - 8]) ^ 0xFFFFFFFF
    _CRC_MAGIC.pack_into(view, bs - 8, crc, VERIFY_MAGIC)


def check_blocks(data: memoryview | bytes, bs: int, first_offset: int, run_id: int) -> list[int]:
    """Offsets (region-relative) of the blocks in ``data`` that fail the trailer checks."""
    mat = np.frombuffer(data, dtype=np.uint8).reshape(-1, bs)
    tail = mat[:, bs - TRAILER_BYTES:].copy().view(np.uint64)       # offset, seq, run id, crc|magic
    offsets = first_offset + bs * np.arange(mat.shape[0], dtype=np.uint64)
    crc_magic = mat[:, bs - 8:].copy().view(np.uint32)
    good = (crc_magic[:, 1] == VERIFY_MAGIC) & (tail[:, 0] == offsets) & (tail[:, 2] == np.uint64(run_id))
    good &= crc32c_rows(mat[:, : bs - 8]) == crc_magic[:, 0]
    return [int(x) for x in offsets[~good]]


# =====================================================================================
# Job configuration
# =====================================================================================
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_ALIASES = {"bs": "bs_bytes", "size": "size_bytes", "offset": "offset_bytes", "runtime": "runtime_s",
            "blocksize": "bs_bytes", "readwrite": "rw"}
_BYTE_FIELDS = ("bs_bytes", "size_bytes", "offset_bytes")


def parse_size(value: int | str, what: str = "size") -> int:
    """``4096``, ``"4k"``, ``"1M"``, ``"64MiB"``, ``"1g"`` -> bytes (k, M, G, T are binary, as in fio)."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"{what}: {value!r} is not a size (e.g. 4096, 4k, 1M, 64MiB)")
    mult = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    n = float(m.group(1)) * mult
    if not n.is_integer():
        raise ConfigError(f"{what}: {value!r} is not a whole number of bytes")
    return int(n)


@dataclass(frozen=True)
class JobConfig:
    name: str = opt("job", help="job name; rows are labelled '<name> read' / '<name> write'")
    rw: str = opt("read", choices=RW_MODES, help="read, write (sequential), randread, randwrite, randrw")
    bs_bytes: int = opt(4096, unit="B", min=512, max=64 * MIB, help="bytes per I/O")
    size_bytes: int = opt(64 * MIB, unit="B", min=0, help="region size (0: to the end of a device target)")
    offset_bytes: int = opt(0, unit="B", min=0, help="start of the region in the target")
    iodepth: int = opt(1, min=1, max=256, help="I/Os in flight (one thread each, synchronous I/O)")
    direct: bool = opt(True, help="O_DIRECT: bypass the page cache")
    runtime_s: float = opt(0.0, unit="s", min=0.0, help="stop after this long (0: no limit)")
    time_based: bool = opt(False, help="repeat the region until runtime_s has passed")
    loops: int = opt(1, min=1, max=1000, help="run the job this many times")
    rwmixread: int = opt(50, unit="%", min=0, max=100, help="share of reads in randrw")
    verify: str = opt("none", choices=("none", "crc32c"),
                      help="crc32c: stamp written blocks and check every one after the job")
    fsync_on_end: bool = opt(True, help="fdatasync at the end of a job that writes (inside its time)")
    seed: int = opt(0, help="seed for the random order and the data")

    def __post_init__(self) -> None:
        if self.rw not in RW_MODES:
            raise ConfigError(f"rw = {self.rw!r} is not one of {', '.join(RW_MODES)}")
        if self.bs_bytes < 512 or self.bs_bytes % 512:
            raise ConfigError(f"bs = {self.bs_bytes} B must be a multiple of 512 B")
        if self.size_bytes and self.size_bytes < self.bs_bytes:
            raise ConfigError(f"size = {self.size_bytes} B is smaller than one block (bs = {self.bs_bytes} B)")
        if self.offset_bytes % 512:
            raise ConfigError(f"offset = {self.offset_bytes} B must be a multiple of 512 B")
        if self.time_based and self.runtime_s <= 0:
            raise ConfigError("time_based needs runtime_s > 0")
        if self.verify != "none" and not self.writes:
            raise ConfigError(f"job {self.name}: verify needs a job that writes (rw = write, randwrite or randrw)")
        if self.iodepth < 1:
            raise ConfigError("iodepth must be at least 1")

    @property
    def writes(self) -> bool:
        return self.rw in ("write", "randwrite", "randrw")

    @property
    def reads(self) -> bool:
        return self.rw in ("read", "randread", "randrw")

    @property
    def random(self) -> bool:
        return self.rw.startswith("rand")


def job_from_mapping(data: dict[str, Any], where: str = "job") -> JobConfig:
    """A JobConfig from a TOML table or CLI values, accepting fio names (bs, size, offset, runtime)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = _ALIASES.get(k, k)
        if key in out:
            raise ConfigError(f"{where}: {k} given twice")
        if key in _BYTE_FIELDS and isinstance(v, str):
            v = parse_size(v, f"{where}.{k}")
        out[key] = v
    return from_mapping(JobConfig, out, where)


def load_job_file(path: str | os.PathLike[str]) -> list[JobConfig]:
    """Jobs from a TOML file: top-level keys (or a [global] table) are defaults, each other table a job."""
    p = Path(path)
    data = read_toml_file(p, "job file")
    glob = {k: v for k, v in data.items() if not isinstance(v, dict)}
    if isinstance(data.get("global"), dict):
        glob.update(data["global"])
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict) and k != "global"]
    if not tables:
        tables = [(p.stem, {})]
    jobs = []
    for name, table in tables:
        merged = {"name": name, **glob, **table}
        jobs.append(job_from_mapping(merged, f"{p.name}:{name}"))
    return jobs


# =====================================================================================
# Targets: a descriptor + region for the hot loop
# =====================================================================================
@dataclass
class _Port:
    fd: int
    base: int          # absolute byte offset of the job region in the descriptor
    length: int        # region bytes
    direct: bool
    owns_fd: bool
    drop: Callable[[], None]
    warnings: list[str] = field(default_factory=list)

    def close(self) -> None:
        if self.owns_fd:
            os.close(self.fd)


def _fill_random(buf: AlignedBuffer, seed: int) -> None:
    rng = random.Random(seed)
    step = 1 << 20
    for i in range(0, buf.size, step):
        n = min(step, buf.size - i)
        buf.view[i:i + n] = rng.randbytes(n)


def dir_file_name(job_name: str) -> str:
    return "/sdbench-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", job_name) + ".bin"


def lay_out_file(target: DirTarget, path: str, size_bytes: int, seed: int = 0) -> None:
    """Make ``path`` at least ``size_bytes`` long with random data, synced and out of the cache (untimed)."""
    host = target.host_path(path)
    have = os.path.getsize(host) if os.path.exists(host) else 0
    if have >= size_bytes:
        return
    st = os.statvfs(target.root)
    if (size_bytes - have) > st.f_bavail * st.f_frsize:
        raise SdbenchError(f"not enough free space in {target.root}: need {size_bytes - have} B more, "
                           f"{st.f_bavail * st.f_frsize} B free")
    fd, direct = target.open_fd(path, write=True, direct=True, create=True)
    chunk = 1 << 20
    buf = AlignedBuffer(chunk)
    _fill_random(buf, seed ^ 0x5DB)
    try:
        pos = have // chunk * chunk if direct else have
        while pos < size_bytes:
            n = min(chunk, size_bytes - pos)
            if direct and n % target.direct_align_bytes:
                os.close(fd)
                fd, direct = target.open_fd(path, write=True, direct=False)
            try:
                w = os.pwritev(fd, [buf.view[:n]], pos)
            except OSError as e:
                raise SdbenchError(f"cannot lay out {host}: {e.strerror}") from None
            pos += w
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
        buf.close()


def _open_port(target: Target, job: JobConfig) -> _Port:
    bs = job.bs_bytes
    if isinstance(target, LinuxBlockDevice):
        if job.writes and target.read_only:
            raise ReadOnlyError(f"{target.path} is open read-only; writing needs allow_write (--allow-write)")
        size = job.size_bytes or (target.window_bytes - job.offset_bytes) // bs * bs
        if size <= 0 or job.offset_bytes + size > target.window_bytes:
            raise SdbenchError(f"{target.path} is too small for job {job.name}: region "
                               f"[{job.offset_bytes}, {job.offset_bytes + size}) B, target {target.window_bytes} B")
        target.check_region(job.offset_bytes, size)
        warnings = []
        if job.direct and not target.direct:
            fd, owns, direct = target.fd, False, False
            warnings.append(f"job {job.name}: O_DIRECT is not available on {target.path}; buffered I/O")
        elif job.direct == target.direct:
            fd, owns, direct = target.fd, False, target.direct
        else:
            fd, owns, direct = target.reopen_fd(direct=job.direct), True, job.direct
        align = target.logical_block_bytes
        if direct and (bs % align or job.offset_bytes % align or target.offset_bytes % align):
            if owns:
                os.close(fd)
            raise SdbenchError(f"bs and offset must be multiples of the {align}-byte logical block size of "
                               f"{target.path} for O_DIRECT")
        base = target.offset_bytes + job.offset_bytes

        def drop() -> None:
            try:
                os.posix_fadvise(fd, base, size, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
        return _Port(fd, base, size // bs * bs, direct, owns, drop, warnings)

    if isinstance(target, DirTarget):
        if not job.size_bytes:
            raise ConfigError(f"job {job.name}: size is needed on a directory target")
        size = job.size_bytes // bs * bs
        path = dir_file_name(job.name)
        lay_out_file(target, path, job.offset_bytes + size, job.seed)
        fd, direct = target.open_fd(path, write=job.writes, direct=job.direct)
        warnings = []
        if job.direct and not direct:
            warnings.append(f"job {job.name}: {target.root} refuses O_DIRECT; buffered I/O with fsync and "
                            f"posix_fadvise(DONTNEED)")
        align = target.direct_align_bytes
        if direct and (bs % align or job.offset_bytes % align):
            os.close(fd)
            raise SdbenchError(f"bs and offset must be multiples of {align} B for O_DIRECT in {target.root}")

        def drop_dir() -> None:
            target.drop_caches_now()
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
        return _Port(fd, job.offset_bytes, size, direct, True, drop_dir, warnings)

    raise SdbenchError(f"fio jobs run on a LinuxBlockDevice or a DirTarget, not on {type(target).__name__}")


# =====================================================================================
# The engine
# =====================================================================================
@dataclass
class _Worker:
    lat: dict[str, array.array]
    ends: dict[str, array.array]
    bufs: AlignedBuffer | None = None


@dataclass
class LoopResult:
    start_ns: int
    stop_ns: int
    ops: dict[str, int]
    lat: dict[str, np.ndarray]      # per-op latency, ns
    ends: dict[str, np.ndarray]     # per-op completion time, ns

    @property
    def duration_ns(self) -> int:
        return self.stop_ns - self.start_ns


@dataclass
class JobResult:
    job: JobConfig
    loops: list[LoopResult]
    verify: dict[str, Any] | None
    warnings: list[str]


def _pool_count(bs: int) -> int:
    # a few distinct buffers per thread, at most 1 MiB together so they stay in the CPU cache
    # (fio also reuses one buffer); writes are made unique by a stamp, see _work
    return max(1, min(8, MIB // bs))


_SEQ_STAMP = struct.Struct("<QQ")  # run id, sequence: no two written blocks are identical (dedupe)


class _Engine:
    def __init__(self, port: _Port, job: JobConfig, run_id: int) -> None:
        self.port, self.job, self.run_id = port, job, run_id
        bs = job.bs_bytes
        self.nblocks = port.length // bs
        # write buffers (several, so consecutive writes differ) + one read buffer, per thread
        self.npool = _pool_count(bs) if job.writes else 0
        self.workers: list[_Worker] = []
        self.payload_crc: list[list[int]] = []
        self.written = bytearray(self.nblocks) if job.verify != "none" else None
        for t in range(job.iodepth):
            buf = AlignedBuffer(bs * (self.npool + 1))
            if job.writes:
                _fill_random(buf, (job.seed * 1_000_003 + t) & 0xFFFFFFFF)
            if job.verify != "none":
                mat = np.frombuffer(buf.view, dtype=np.uint8)[: self.npool * bs].reshape(self.npool, bs)
                self.payload_crc.append([int(c) for c in crc32c_rows(mat[:, : bs - TRAILER_BYTES])])
            self.workers.append(_Worker({"read": array.array("q"), "write": array.array("q")},
                                        {"read": array.array("q"), "write": array.array("q")}, buf))

    def close(self) -> None:
        for w in self.workers:
            if w.bufs is not None:
                w.bufs.close()

    def _order(self, loop: int) -> Sequence[int]:
        if not self.job.random:
            return range(self.nblocks)
        perm = np.random.default_rng([self.job.seed, loop, 0x0F10]).permutation(self.nblocks).astype(np.int64)
        a = array.array("q")
        a.frombytes(perm.tobytes())
        return a

    def _kinds(self, loop: int) -> bytes:
        job = self.job
        if job.rw != "randrw":
            return b"\x01" if job.reads else b"\x00"
        rng = np.random.default_rng([job.seed, loop, 0x0F11])
        return (rng.random(self.nblocks) * 100 < job.rwmixread).astype(np.uint8).tobytes()

    def run_loop(self, loop: int, progress: ProgressFn | None, label: str) -> LoopResult:
        job, port = self.job, self.port
        nblocks = self.nblocks
        order = self._order(loop)
        kinds = self._kinds(loop)
        total = sys.maxsize if job.time_based else nblocks
        for w in self.workers:
            for d in (w.lat, w.ends):
                for k in d:
                    d[k] = array.array("q")
        if job.reads and not port.direct:
            port.drop()
        counter = itertools.count()
        errors: list[BaseException] = []
        start = time.perf_counter_ns()
        deadline = start + int(job.runtime_s * 1e9) if job.runtime_s > 0 else sys.maxsize
        threads = [threading.Thread(target=self._work, name=f"sdbench-io-{i}",
                                    args=(w, i, counter, order, kinds, total, deadline, errors), daemon=True)
                   for i, w in enumerate(self.workers)]
        for t in threads:
            t.start()
        # the main thread only watches: wakes ten times a second for the progress bar
        while True:
            alive = [t for t in threads if t.is_alive()]
            if not alive:
                break
            alive[0].join(0.1)
            if progress is not None:
                frac_t = (time.perf_counter_ns() - start) / 1e9 / job.runtime_s if job.runtime_s > 0 else 0.0
                done = sum(len(w.lat["read"]) + len(w.lat["write"]) for w in self.workers)
                frac = frac_t if job.time_based else max(done / max(total, 1), frac_t)
                progress(label, min(frac, 1.0))
        if errors:
            e = errors[0]
            if isinstance(e, SdbenchError):
                raise e
            raise BlockDeviceError(f"job {job.name}: I/O failed: {getattr(e, 'strerror', None) or e}")
        if job.writes and job.fsync_on_end:
            try:
                os.fdatasync(port.fd)
            except OSError as e:
                raise BlockDeviceError(f"job {job.name}: fdatasync failed: {e.strerror}") from None
        stop = time.perf_counter_ns()
        lat = {k: np.concatenate([np.frombuffer(w.lat[k], dtype=np.int64) for w in self.workers])
               for k in ("read", "write")}
        ends = {k: np.concatenate([np.frombuffer(w.ends[k], dtype=np.int64) for w in self.workers])
                for k in ("read", "write")}
        return LoopResult(start, stop, {k: int(v.size) for k, v in lat.items()}, lat, ends)

    # One thread per in-flight I/O.  Keep this loop lean: locals only, no allocation per op.
    def _work(self, w: _Worker, tid: int, counter: Any, order: Sequence[int], kinds: bytes, total: int,
              deadline: int, errors: list[BaseException]) -> None:
        job, port = self.job, self.port
        bs, nblocks, nk = job.bs_bytes, self.nblocks, len(kinds)
        fd, base = port.fd, port.base
        nxt = counter.__next__
        now = time.perf_counter_ns
        preadv, pwritev = os.preadv, os.pwritev
        npool = self.npool
        assert w.bufs is not None
        iovs = [w.bufs.iov(bs, j * bs) for j in range(npool)]
        read_iov = w.bufs.iov(bs, npool * bs)
        views = [iov[0] for iov in iovs] + read_iov
        r_lat, r_end = w.lat["read"].append, w.ends["read"].append
        w_lat, w_end = w.lat["write"].append, w.ends["write"].append
        written = self.written
        crcs = self.payload_crc[tid] if self.payload_crc else None
        run_id = self.run_id
        stamp = _SEQ_STAMP.pack_into
        off = base
        try:
            # the common cases get their own loops: fewer branches and lookups per I/O
            if job.rw in ("read", "randread"):
                while not errors:
                    k = nxt()
                    if k >= total:
                        break
                    off = base + order[k % nblocks] * bs
                    t0 = now()
                    n = preadv(fd, read_iov, off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short read at byte {off} ({n} of {bs} B)")
                    r_lat(t1 - t0)
                    r_end(t1)
                    if t1 >= deadline:
                        break
                return
            if job.rw in ("write", "randwrite") and crcs is None:
                while not errors:
                    k = nxt()
                    if k >= total:
                        break
                    off = base + order[k % nblocks] * bs
                    j = k % npool
                    stamp(views[j], 0, run_id, k)
                    t0 = now()
                    n = pwritev(fd, iovs[j], off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short write at byte {off} ({n} of {bs} B)")
                    w_lat(t1 - t0)
                    w_end(t1)
                    if t1 >= deadline:
                        break
                return
            while not errors:
                k = nxt()
                if k >= total:
                    break
                blk = order[k % nblocks]
                off = base + blk * bs
                if kinds[k % nk]:
                    t0 = now()
                    n = preadv(fd, read_iov, off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short read at byte {off} ({n} of {bs} B)")
                    r_lat(t1 - t0)
                    r_end(t1)
                else:
                    j = k % npool
                    if crcs is not None:
                        stamp_block(views[j], crcs[j], blk * bs, k, run_id)
                    else:
                        stamp(views[j], 0, run_id, k)
                    t0 = now()
                    n = pwritev(fd, iovs[j], off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short write at byte {off} ({n} of {bs} B)")
                    w_lat(t1 - t0)
                    w_end(t1)
                    if written is not None:
                        written[blk] = 1
                if t1 >= deadline:
                    break
        except OSError as e:
            errors.append(BlockDeviceError(f"job {job.name}: I/O at byte {off} failed: {e.strerror}"))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            for v in views:
                v.release()

    def verify(self, progress: ProgressFn | None) -> dict[str, Any]:
        """Read back every written block and check its trailer (untimed)."""
        assert self.written is not None
        job, port = self.job, self.port
        bs = job.bs_bytes
        port.drop()
        chunk_blocks = max(1, (8 * MIB) // bs)
        buf = AlignedBuffer(chunk_blocks * bs)
        bad: list[int] = []
        checked = 0
        written = np.frombuffer(bytes(self.written), dtype=np.uint8)
        idx = np.nonzero(written)[0]
        try:
            # runs of consecutive written blocks, read in chunks
            if idx.size:
                breaks = np.nonzero(np.diff(idx) != 1)[0] + 1
                for run in np.split(idx, breaks):
                    first, count = int(run[0]), int(run.size)
                    pos = 0
                    while pos < count:
                        n = min(chunk_blocks, count - pos)
                        view = buf.view[: n * bs]
                        got = 0
                        while got < n * bs:
                            r = os.preadv(port.fd, [view[got:]], port.base + (first + pos) * bs + got)
                            if r <= 0:
                                raise BlockDeviceError(f"short read while verifying at block {first + pos}")
                            got += r
                        bad += check_blocks(view, bs, (first + pos) * bs, self.run_id)
                        del view
                        pos += n
                        checked += n
                        if progress is not None:
                            progress(f"{job.name} verify", checked / idx.size)
        except OSError as e:
            raise BlockDeviceError(f"job {job.name}: verify read failed: {e.strerror}") from None
        finally:
            buf.close()
        return {"method": "crc32c", "checked_blocks": checked, "bad_blocks": len(bad),
                "first_bad_offset_bytes": bad[0] if bad else None, "ok": not bad,
                "bad_offsets_bytes": bad[:32]}


def run_job(target: Target, job: JobConfig, *, progress: ProgressFn | None = None,
            before_verify: Callable[[], None] | None = None) -> JobResult:
    """Run one job (all its loops) and, with verify, check what it wrote."""
    port = _open_port(target, job)
    run_id = int.from_bytes(os.urandom(8), "little") >> 1  # tells this run's blocks from stale ones
    engine = _Engine(port, job, run_id)
    try:
        loops = [engine.run_loop(i, progress, job.name) for i in range(job.loops)]
        verify = None
        if job.verify != "none":
            if before_verify is not None:
                before_verify()
            verify = engine.verify(progress)
    finally:
        engine.close()
        port.close()
    return JobResult(job, loops, verify, list(port.warnings))


# ---- results ----------------------------------------------------------------------------
def _value_mb_s(row: Row) -> float:
    return row.bytes / 1e6 / (row.time_ms / 1e3) if row.time_ms > 0 else 0.0


def op_summary(job: JobConfig, loops: list[LoopResult], kind: str) -> dict[str, Any]:
    """IOPS, bandwidth, latency percentiles, per-loop figures and timeline of one direction."""
    hist = LatencyHistogram()
    for lp in loops:
        hist.record_many(lp.lat[kind])
    total_ns = sum(lp.duration_ns for lp in loops)
    ops = sum(lp.ops[kind] for lp in loops)
    nbytes = ops * job.bs_bytes
    # stitch the loops' timelines back to back
    shifted, t0 = [], 0
    for lp in loops:
        shifted.append(lp.ends[kind] - lp.start_ns + t0)
        t0 += lp.duration_ns
    tl = throughput_timeline(np.concatenate(shifted) if shifted else [], job.bs_bytes, 0, 1.0, t0)
    return {
        "ops": ops, "bytes": nbytes, "runtime_s": total_ns / 1e9,
        "iops": ops / (total_ns / 1e9) if total_ns else 0.0,
        "bw_bytes_s": nbytes / (total_ns / 1e9) if total_ns else 0.0,
        "lat": hist.summary_us(), "lat_relative_error": hist.relative_error,
        "loops": [{"ops": lp.ops[kind], "duration_s": lp.duration_ns / 1e9,
                   "mib_s": lp.ops[kind] * job.bs_bytes / MIB / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0,
                   "iops": lp.ops[kind] / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0} for lp in loops],
        "timeline": {"interval_s": 1.0, **tl},
    }


def job_rows(res: JobResult, *, label: str | None = None, best_loop: bool = False,
             unit: str | None = None) -> tuple[list[Row], dict[str, Any]]:
    """Rows (one per direction with I/O) and their metadata."""
    job = res.job
    rows, meta = [], {}
    for kind in ("read", "write"):
        ops = sum(lp.ops[kind] for lp in res.loops)
        if not ops:
            continue
        lab = f"{label or job.name} {kind}"
        summ = op_summary(job, res.loops, kind)
        if best_loop:
            best = max(res.loops, key=lambda lp: lp.ops[kind] / max(lp.duration_ns, 1))
            nbytes, samples = best.ops[kind] * job.bs_bytes, [best.duration_ns]
            summ["row_is"] = "best loop"
        else:
            nbytes, samples = ops * job.bs_bytes, [sum(lp.duration_ns for lp in res.loops)]
            summ["row_is"] = "all loops"
        u = unit or ("IOPS" if job.random else "MiB/s")
        iops = summ["iops"] if not best_loop else max(x["iops"] for x in summ["loops"])
        vfn = {"IOPS": lambda r, i=iops: i, "MiB/s": lambda r: r.mib_s, "MB/s": _value_mb_s}[u]
        rows.append(make_row(lab, kind, nbytes, samples, unit=u, value_fn=vfn))
        meta[lab] = summ
    return rows, meta


def run_jobs(target: Target, jobs: Sequence[JobConfig], *, scenario: str = "fio", progress: ProgressFn | None = None,
             before_verify: Callable[[], None] | None = None, identity: dict[str, Any] | None = None) -> RunRecord:
    """Run jobs one after another (fio's stonewall) into one RunRecord."""
    rows: list[Row] = []
    meta_rows: dict[str, Any] = {}
    verify: dict[str, Any] = {}
    warnings: list[str] = list(getattr(target, "warnings", []))
    for job in jobs:
        res = run_job(target, job, progress=progress, before_verify=before_verify)
        r, m = job_rows(res)
        rows += r
        meta_rows.update(m)
        if res.verify is not None:
            verify[job.name] = res.verify
        warnings += [w for w in res.warnings if w not in warnings]
    meta: dict[str, Any] = {"jobs": [to_mapping(j) for j in jobs], "rows": meta_rows}
    if verify:
        meta["verify"] = verify
    if identity:
        meta["identity"] = identity
    return RunRecord(scenario=scenario, stack=target.describe(), clock="wall", rows=tuple(rows),
                     seed=jobs[0].seed if jobs else None, protocol="fio", source="measured", metadata=meta,
                     warnings=tuple(warnings))


def verify_failures(rec: RunRecord) -> list[str]:
    """One line per job whose verify found bad data."""
    out = []
    for name, v in rec.metadata.get("verify", {}).items():
        if not v.get("ok", True):
            what = "blocks" if "bad_blocks" in v else "chunks"
            bad = v.get("bad_blocks", v.get("bad_chunks"))
            total = v.get("checked_blocks", v.get("checked_chunks"))
            out.append(f"{name}: {bad} of {total} {what} corrupted (first at byte {v.get('first_bad_offset_bytes')})")
    return out


# =====================================================================================
# Presets
# =====================================================================================
CDM_TESTS = (("SEQ1M Q8T1", False, MIB, 8), ("SEQ1M Q1T1", False, MIB, 1),
             ("RND4K Q32T1", True, 4096, 32), ("RND4K Q1T1", True, 4096, 1))


def _prefill(target: Target, size_bytes: int, offset_bytes: int, progress: ProgressFn | None, name: str) -> None:
    """Write the test region once so reads never see unwritten (sparse or erased) space."""
    job = JobConfig(name=name, rw="write", bs_bytes=MIB if size_bytes >= MIB else 4096, size_bytes=size_bytes,
                    offset_bytes=offset_bytes, iodepth=1, fsync_on_end=True)
    if isinstance(target, DirTarget):
        lay_out_file(target, dir_file_name(name), offset_bytes + size_bytes)
    else:
        run_job(target, job, progress=progress)


def run_cdm(target: Target, *, size_bytes: int = 1024 * MIB, loops: int = 5, runtime_s: float = 5.0,
            offset_bytes: int = 0, mode: str = "all", progress: ProgressFn | None = None,
            identity: dict[str, Any] | None = None) -> RunRecord:
    """CrystalDiskMark-style: SEQ1M Q8T1, SEQ1M Q1T1, RND4K Q32T1, RND4K Q1T1; reads first, then writes.

    Each test runs ``loops`` times, each loop over the region until it has been
    covered once or ``runtime_s`` passed; the row reports the best loop, as
    CrystalDiskMark does (mean and every loop are in the metadata).  Values in
    MB/s (10^6 B/s) with IOPS and µs alongside.
    """
    if mode not in ("all", "read", "write"):
        raise ConfigError(f"mode {mode!r} is not one of all, read, write")
    writable = not (isinstance(target, LinuxBlockDevice) and target.read_only)
    if mode in ("all", "write") and not writable:
        raise ReadOnlyError("the CrystalDiskMark write tests need a writable target (--allow-write), "
                            "or run the read tests only (--mode read)")
    name = "cdm"
    if writable and mode in ("all", "read"):
        _prefill(target, size_bytes, offset_bytes, progress, name)
    rows, meta_rows, warnings = [], {}, list(getattr(target, "warnings", []))
    kinds = {"all": ("read", "write"), "read": ("read",), "write": ("write",)}[mode]
    for kind in kinds:
        for label, rnd, bs, qd in CDM_TESTS:
            rw = ("rand" if rnd else "") + kind
            job = JobConfig(name=name, rw=rw, bs_bytes=bs, size_bytes=size_bytes, offset_bytes=offset_bytes,
                            iodepth=qd, runtime_s=runtime_s, loops=loops)
            res = run_job(target, job, progress=(lambda w, f, lab=f"{label} {kind}": progress(lab, f))
                          if progress else None)
            r, m = job_rows(res, label=label, best_loop=True, unit="MB/s")
            rows += r
            for lab, summ in m.items():
                summ["mean_loop_mib_s"] = float(np.mean([x["mib_s"] for x in summ["loops"]]))
            meta_rows.update(m)
            warnings += [w for w in res.warnings if w not in warnings]
    meta = {"preset": "cdm", "size_bytes": size_bytes, "loops": loops, "runtime_s": runtime_s, "rows": meta_rows}
    if identity:
        meta["identity"] = identity
    return RunRecord(scenario="CrystalDiskMark-style", stack=target.describe(), clock="wall", rows=tuple(rows),
                     protocol="cdm", source="measured", metadata=meta, warnings=tuple(warnings))


#: Raspberry Pi agnostics' "SD card speed test" (A1 sniff test) thresholds
A1_SEQ_WRITE_KIB_S = 10_000    # fio reports KiB/s; agnostics compares against 10000
A1_RAND_WRITE_IOPS = 500
A1_RAND_READ_IOPS = 1500


def a1_jobs(size_bytes: int = 64 * MIB, runtime_s: float = 10.0, iodepth: int = 4) -> list[JobConfig]:
    """agnostics' job list: prepare-file, seq-write (512 KiB), rand-4k-write, rand-4k-read; QD4, O_DIRECT."""
    common = {"size_bytes": size_bytes, "iodepth": iodepth, "direct": True, "fsync_on_end": True}
    return [
        JobConfig(name="prepare-file", rw="write", bs_bytes=512 * 1024, **common),
        JobConfig(name="seq-write", rw="write", bs_bytes=512 * 1024, **common),
        JobConfig(name="rand-4k-write", rw="randwrite", bs_bytes=4096, runtime_s=runtime_s, **common),
        JobConfig(name="rand-4k-read", rw="randread", bs_bytes=4096, runtime_s=runtime_s, **common),
    ]


def run_a1(target: Target, *, size_bytes: int = 64 * MIB, runtime_s: float = 10.0, iodepth: int = 4,
           offset_bytes: int = 0, progress: ProgressFn | None = None,
           identity: dict[str, Any] | None = None) -> RunRecord:
    """The A1 sniff test: pass/fail per criterion in ``metadata["a1"]``."""
    jobs = [replace(j, offset_bytes=offset_bytes, name=j.name) for j in a1_jobs(size_bytes, runtime_s, iodepth)]
    if isinstance(target, DirTarget):
        # one test file for all jobs, as agnostics uses
        jobs = [replace(j, name="a1-test") for j in jobs]
    rows, meta_rows, warnings = [], {}, list(getattr(target, "warnings", []))
    labels = ["prepare-file", "seq-write", "rand-4k-write", "rand-4k-read"]
    for label, job in zip(labels, jobs):
        res = run_job(target, job, progress=(lambda w, f, lab=label: progress(lab, f)) if progress else None)
        unit = "MB/s" if label in ("prepare-file", "seq-write") else "IOPS"
        r, m = job_rows(res, label=label, unit=unit)
        rows += r
        meta_rows.update(m)
        warnings += [w for w in res.warnings if w not in warnings]
    seq = meta_rows["seq-write write"]["bw_bytes_s"] / 1024
    rw_iops = meta_rows["rand-4k-write write"]["iops"]
    rr_iops = meta_rows["rand-4k-read read"]["iops"]
    criteria = [
        {"name": "sequential write", "value": seq, "unit": "KiB/s", "threshold": A1_SEQ_WRITE_KIB_S,
         "pass": seq >= A1_SEQ_WRITE_KIB_S},
        {"name": "random 4K write", "value": rw_iops, "unit": "IOPS", "threshold": A1_RAND_WRITE_IOPS,
         "pass": rw_iops >= A1_RAND_WRITE_IOPS},
        {"name": "random 4K read", "value": rr_iops, "unit": "IOPS", "threshold": A1_RAND_READ_IOPS,
         "pass": rr_iops >= A1_RAND_READ_IOPS},
    ]
    meta = {"preset": "a1", "jobs": [to_mapping(j) for j in jobs], "rows": meta_rows,
            "a1": {"criteria": criteria, "pass": all(c["pass"] for c in criteria)}}
    if identity:
        meta["identity"] = identity
    return RunRecord(scenario="A1 sniff test (agnostics)", stack=target.describe(), clock="wall", rows=tuple(rows),
                     protocol="a1", source="measured", metadata=meta, warnings=tuple(warnings))


SDFAT_FILE_BYTES = 5_000_000   # FILE_SIZE_MB = 5 with MB = 1,000,000 bytes
SDFAT_BUF_BYTES = 512


def sdfat_pattern(buf_bytes: int) -> bytes:
    """SdFat bench's buffer: 'A'..'Z' repeated, ending in CR LF."""
    body = bytes(ord("A") + i % 26 for i in range(buf_bytes - 2))
    return body + b"\r\n"


def run_sdfat(target: Target, *, file_bytes: int = SDFAT_FILE_BYTES, buf_bytes: int = SDFAT_BUF_BYTES,
              write_passes: int = 2, read_passes: int = 2, offset_bytes: int = 0,
              progress: ProgressFn | None = None, identity: dict[str, Any] | None = None) -> RunRecord:
    """SdFat ``bench``: a file of ``file_bytes // buf_bytes`` writes of ``buf_bytes`` (sync in the pass
    time), then read passes with a data check; per pass KB/s (10^3 B/s) and max/min/avg latency per call."""
    n = file_bytes // buf_bytes
    if n < 1:
        raise ConfigError(f"file size {file_bytes} B is smaller than the {buf_bytes}-byte buffer")
    if write_passes < 1 or read_passes < 0:
        raise ConfigError("need at least one write pass and no negative read passes")
    size = n * buf_bytes
    pattern = sdfat_pattern(buf_bytes)
    warnings = list(getattr(target, "warnings", []))
    if isinstance(target, LinuxBlockDevice):
        if target.read_only:
            raise ReadOnlyError(f"{target.path} is open read-only; the SdFat bench writes (--allow-write)")
        target.check_region(offset_bytes, size)
        if target.direct and (buf_bytes % target.logical_block_bytes or offset_bytes % target.logical_block_bytes):
            raise SdbenchError(f"the buffer ({buf_bytes} B) and offset must be multiples of the "
                               f"{target.logical_block_bytes}-byte logical block size of {target.path}")
        fd, base, owns = target.fd, target.offset_bytes + offset_bytes, False
        pre = None
    elif isinstance(target, DirTarget):
        path = "/BENCH.DAT"
        direct = bool(target.direct_align_bytes) and buf_bytes % target.direct_align_bytes == 0
        fd, direct = target.open_fd(path, write=True, direct=direct, create=True)
        if not direct:
            warnings.append(f"{target.root}: {buf_bytes}-byte transfers go through the page cache "
                            f"(O_DIRECT unavailable at this size); sync is included in each write pass")
        base, owns = 0, True

        def pre() -> None:  # truncate and pre-allocate, as the bench does with PRE_ALLOCATE
            os.ftruncate(fd, 0)
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError:
                pass
    else:
        raise SdbenchError(f"the SdFat bench runs on a LinuxBlockDevice or a DirTarget, not {type(target).__name__}")

    buf = AlignedBuffer(buf_bytes)
    rbuf = AlignedBuffer(buf_bytes)
    buf.view[:] = pattern
    iov, riov = buf.iov(), rbuf.iov()
    rows: list[Row] = []
    meta_rows: dict[str, Any] = {}
    bad_reads = 0
    first_bad: int | None = None
    now = time.perf_counter_ns
    try:
        for kind, passes in (("write", write_passes), ("read", read_passes)):
            if passes == 0:
                continue
            pass_ns, pass_meta = [], []
            hist_all = LatencyHistogram()
            for p in range(passes):
                lat = array.array("q")
                add = lat.append
                if kind == "write" and pre is not None:
                    pre()
                if kind == "read":
                    try:
                        os.posix_fadvise(fd, base, size, os.POSIX_FADV_DONTNEED)
                    except OSError:
                        pass
                    if isinstance(target, DirTarget):
                        target.drop_caches_now()
                t_start = now()
                try:
                    if kind == "write":
                        pw = os.pwritev
                        for i in range(n):
                            t0 = now()
                            pw(fd, iov, base + i * buf_bytes)
                            add(now() - t0)
                            if progress is not None and not i & 255:
                                progress(f"sdfat {kind} pass {p + 1}", i / n)
                        if isinstance(target, DirTarget):
                            os.fsync(fd)  # also commits the file's size and allocation
                        else:
                            os.fdatasync(fd)
                    else:
                        pr = os.preadv
                        rv = rbuf.view
                        for i in range(n):
                            t0 = now()
                            got = pr(fd, riov, base + i * buf_bytes)
                            add(now() - t0)
                            if got != buf_bytes or rv != pattern:
                                bad_reads += 1
                                if first_bad is None:
                                    first_bad = i * buf_bytes
                            if progress is not None and not i & 255:
                                progress(f"sdfat {kind} pass {p + 1}", i / n)
                except OSError as e:
                    raise BlockDeviceError(f"SdFat bench {kind} failed: {e.strerror}") from None
                t_total = now() - t_start
                pass_ns.append(t_total)
                h = LatencyHistogram()
                h.record_many(lat)
                hist_all.merge(h)
                pass_meta.append({"kb_s": size / (t_total / 1e6) if t_total else 0.0,  # bytes per ms = KB/s
                                  "max_us": h.max_ns / 1e3, "min_us": h.min_ns / 1e3, "avg_us": h.mean_ns / 1e3})
            label = f"sdfat {kind}"
            rows.append(make_row(label, kind, size, pass_ns, unit="KB/s",
                                 value_fn=lambda r: r.bytes / r.time_ms if r.time_ms else 0.0))
            meta_rows[label] = {"passes": pass_meta, "lat": hist_all.summary_us(), "calls_per_pass": n,
                                "call_bytes": buf_bytes}
    finally:
        buf.close()
        rbuf.close()
        if owns:
            os.close(fd)
    verify = {"method": "compare", "checked_chunks": n * read_passes, "bad_chunks": bad_reads,
              "first_bad_offset_bytes": first_bad, "ok": bad_reads == 0}
    meta = {"preset": "sdfat", "file_bytes": size, "buf_bytes": buf_bytes, "write_passes": write_passes,
            "read_passes": read_passes, "rows": meta_rows, "verify": {"sdfat": verify} if read_passes else {}}
    if identity:
        meta["identity"] = identity
    return RunRecord(scenario="SdFat bench", stack=target.describe(), clock="wall", rows=tuple(rows),
                     protocol="sdfat", source="measured", metadata=meta, warnings=tuple(warnings))
