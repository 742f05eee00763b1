"""SdFat's ``bench``: write passes of ``buf_bytes`` calls (sync in the pass time), then read passes with a check.

On a LinuxBlockDevice the calls go to a raw region through the descriptor, on
a DirTarget to ``/BENCH.DAT``, and on any other BlockDevice (a simulated
card, a memory device, a cache or bridge) to a raw region through its
``read``/``write``, timed on the device's clock.
"""
from __future__ import annotations

import array
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, SdbenchError
from ...fs.hostdir import DirTarget
from ...media.base import BlockDevice, BlockDeviceError, ReadOnlyError
from ...media.linux import AlignedBuffer, LinuxBlockDevice
from ...records import Row, RunRecord, make_row
from ...stats_latency import LatencyHistogram
from .blockport import check_block_region, clock_fields
from .target import ProgressFn, Target

SDFAT_FILE_BYTES = 5_000_000   # FILE_SIZE_MB = 5 with MB = 1,000,000 bytes
SDFAT_BUF_BYTES = 512

#: per direction, per pass: (latency of every call in ns, pass time in ns)
_Passes = dict[str, list[tuple[array.array, int]]]


def sdfat_pattern(buf_bytes: int) -> bytes:
    """SdFat bench's buffer: 'A'..'Z' repeated, ending in CR LF."""
    body = bytes(ord("A") + i % 26 for i in range(buf_bytes - 2))
    return body + b"\r\n"


@dataclass
class _BadReads:
    count: int = 0
    first_offset: int | None = None

    def note(self, offset: int) -> None:
        self.count += 1
        if self.first_offset is None:
            self.first_offset = offset


def _fd_passes(target: LinuxBlockDevice | DirTarget, n: int, buf_bytes: int, offset_bytes: int,
               counts: dict[str, int], pattern: bytes, progress: ProgressFn | None, warnings: list[str],
               bad: _BadReads) -> _Passes:
    size = n * buf_bytes
    pre: Callable[[], None] | None
    if isinstance(target, LinuxBlockDevice):
        if target.read_only:
            raise ReadOnlyError(f"{target.path} is open read-only; the SdFat bench writes (--allow-write)")
        target.check_region(offset_bytes, size)
        if target.direct and (buf_bytes % target.logical_block_bytes or offset_bytes % target.logical_block_bytes):
            raise SdbenchError(f"the buffer ({buf_bytes} B) and offset must be multiples of the "
                               f"{target.logical_block_bytes}-byte logical block size of {target.path}")
        fd, base, owns = target.fd, target.offset_bytes + offset_bytes, False
        pre = None
    else:
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

    buf = AlignedBuffer(buf_bytes)
    rbuf = AlignedBuffer(buf_bytes)
    buf.view[:] = pattern
    iov, riov = buf.iov(), rbuf.iov()
    out: _Passes = {}
    now = time.perf_counter_ns
    try:
        parts, part = sum(counts.values()), -1
        for kind, passes in counts.items():
            for p in range(passes):
                part += 1
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
                                progress(f"sdfat {kind} pass {p + 1}", (part + i / n) / parts)
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
                                bad.note(i * buf_bytes)
                            if progress is not None and not i & 255:
                                progress(f"sdfat {kind} pass {p + 1}", (part + i / n) / parts)
                except OSError as e:
                    raise BlockDeviceError(f"SdFat bench {kind} failed: {e.strerror}") from None
                out.setdefault(kind, []).append((lat, now() - t_start))
    finally:
        buf.close()
        rbuf.close()
        if owns:
            os.close(fd)
    return out


def _block_passes(dev: BlockDevice, n: int, buf_bytes: int, offset_bytes: int, counts: dict[str, int],
                  pattern: bytes, progress: ProgressFn | None, bad: _BadReads) -> _Passes:
    """The bench on a raw region of a BlockDevice: each call one ``write``/``read``, the sync in the pass time."""
    check_block_region(dev, offset_bytes, n * buf_bytes, buf_bytes, what="the SdFat bench",
                       reads=counts.get("read", 0) > 0, writes=True)
    ss = dev.geometry.sector_size
    first, per = offset_bytes // ss, buf_bytes // ss
    now = dev.clock.now_ns
    out: _Passes = {}
    parts, part = sum(counts.values()), -1
    for kind, passes in counts.items():
        for p in range(passes):
            part += 1
            lat = array.array("q")
            add = lat.append
            t_start = now()
            if kind == "write":
                for i in range(n):
                    t0 = now()
                    dev.write(first + i * per, pattern)
                    add(now() - t0)
                    if progress is not None and not i & 255:
                        progress(f"sdfat {kind} pass {p + 1}", (part + i / n) / parts)
                dev.sync()
            else:
                for i in range(n):
                    t0 = now()
                    got = dev.read(first + i * per, per)
                    add(now() - t0)
                    if got != pattern:
                        bad.note(i * buf_bytes)
                    if progress is not None and not i & 255:
                        progress(f"sdfat {kind} pass {p + 1}", (part + i / n) / parts)
            out.setdefault(kind, []).append((lat, now() - t_start))
    return out


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
    counts = {"write": write_passes, "read": read_passes}
    bad = _BadReads()
    if isinstance(target, (LinuxBlockDevice, DirTarget)):
        passes = _fd_passes(target, n, buf_bytes, offset_bytes, counts, pattern, progress, warnings, bad)
    elif isinstance(target, BlockDevice):
        passes = _block_passes(target, n, buf_bytes, offset_bytes, counts, pattern, progress, bad)
    else:
        raise SdbenchError(f"the SdFat bench runs on a block device or a DirTarget, not {type(target).__name__}")

    rows: list[Row] = []
    meta_rows: dict[str, Any] = {}
    for kind, results in passes.items():
        pass_meta = []
        hist_all = LatencyHistogram()
        for lat, t_total in results:
            h = LatencyHistogram()
            h.record_many(lat)
            hist_all.merge(h)
            pass_meta.append({"kb_s": size / (t_total / 1e6) if t_total else 0.0,  # bytes per ms = KB/s
                              "max_us": h.max_ns / 1e3, "min_us": h.min_ns / 1e3, "avg_us": h.mean_ns / 1e3})
        label = f"sdfat {kind}"
        rows.append(make_row(label, kind, size, [t for _, t in results], unit="KB/s",
                             value_fn=lambda r: r.bytes / r.time_ms if r.time_ms else 0.0))
        meta_rows[label] = {"passes": pass_meta, "lat": hist_all.summary_us(), "calls_per_pass": n,
                            "call_bytes": buf_bytes}
    verify = {"method": "compare", "checked_chunks": n * read_passes, "bad_chunks": bad.count,
              "first_bad_offset_bytes": bad.first_offset, "ok": bad.count == 0}
    meta = {"preset": "sdfat", "file_bytes": size, "buf_bytes": buf_bytes, "write_passes": write_passes,
            "read_passes": read_passes, "rows": meta_rows, "verify": {"sdfat": verify} if read_passes else {}}
    if identity:
        meta["identity"] = identity
    return RunRecord(scenario="SdFat bench", stack=target.describe(), rows=tuple(rows), protocol="sdfat",
                     metadata=meta, warnings=tuple(warnings), **clock_fields(target))
