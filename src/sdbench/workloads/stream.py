"""The streaming protocol (a dd-style test on a card): write N MiB of random data
from RAM with a sync, read it back, verify, report MB/s.

The data are generated before the timer starts (from RAM, like ``dd`` from a
file in tmpfs).  Each chunk ends with a 24-byte stamp (chunk number, pass, run
id) so a chunk that lands in the wrong place is caught, not only a flipped
bit.  A pass's time is the sum of its transfer calls plus, for writes, the
final fsync/fdatasync: verification happens between calls and is not timed.

Targets: a :class:`~sdbench.media.linux.LinuxBlockDevice` (the window from
its first sector) or a :class:`~sdbench.fs.hostdir.DirTarget` (a file
``sdbench-stream.bin``, O_DIRECT where the filesystem takes it, otherwise the
page cache is dropped before reading).
"""
from __future__ import annotations

import array
import os
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from ..errors import ConfigError, SdbenchError
from ..media.base import BlockDeviceError, ReadOnlyError
from ..fs.hostdir import DirTarget
from ..media.linux import AlignedBuffer, LinuxBlockDevice
from ..records import MIB, RunRecord, make_row
from ..stats_latency import LatencyHistogram, throughput_timeline
from .fio import ProgressFn, _fill_random

STREAM_FILE = "/sdbench-stream.bin"
POOL_MAX_BYTES = 64 * MIB     # distinct random data kept in RAM; longer streams reuse it with new stamps
_STAMP = struct.Struct("<QQQ")  # chunk number, pass, run id


def _mb_s(row: Any) -> float:
    return row.bytes / 1e6 / (row.time_ms / 1e3) if row.time_ms > 0 else 0.0


def run_stream(target: LinuxBlockDevice | DirTarget, *, size_mib: int = 40, chunk_bytes: int = MIB,
               passes: int = 1, verify: bool = True, seed: int = 0, direct: bool = True,
               progress: ProgressFn | None = None, before_verify: Callable[[], None] | None = None,
               identity: dict[str, Any] | None = None) -> RunRecord:
    """Write ``size_mib`` MiB in ``chunk_bytes`` calls + sync, then read back; ``passes`` times."""
    if size_mib < 1:
        raise ConfigError("stream size must be at least 1 MiB")
    if chunk_bytes < 4096 or chunk_bytes % 4096 or (size_mib * MIB) % chunk_bytes:
        raise ConfigError(f"chunk size {chunk_bytes} B must be a multiple of 4096 B that divides {size_mib} MiB")
    if passes < 1:
        raise ConfigError("passes must be at least 1")
    total = size_mib * MIB
    nchunks = total // chunk_bytes
    warnings = list(getattr(target, "warnings", []))

    # ---- open the target ------------------------------------------------------------
    if isinstance(target, LinuxBlockDevice):
        if target.read_only:
            raise ReadOnlyError(f"{target.path} is open read-only; the stream test writes (--allow-write)")
        if total > target.window_bytes:
            raise ConfigError(f"{target.path} is too small: the stream needs {total} B ({size_mib} MiB), the "
                              f"target has {target.window_bytes} B")
        if target.direct and chunk_bytes % target.logical_block_bytes:
            raise ConfigError(f"chunk size {chunk_bytes} B must be a multiple of the {target.logical_block_bytes}-"
                              f"byte logical block size of {target.path}")
        if direct == target.direct:
            fd, owns, is_direct = target.fd, False, target.direct
        else:
            fd, owns, is_direct = target.reopen_fd(direct=direct), True, direct
        base = target.offset_bytes
    elif isinstance(target, DirTarget):
        st = os.statvfs(target.root)
        if total > st.f_bavail * st.f_frsize:
            raise SdbenchError(f"not enough free space in {target.root}: the stream needs {total} B, "
                               f"{st.f_bavail * st.f_frsize} B free")
        fd, is_direct = target.open_fd(STREAM_FILE, write=True, direct=direct, create=True)
        if is_direct and chunk_bytes % target.direct_align_bytes:
            os.close(fd)
            fd, is_direct = target.open_fd(STREAM_FILE, write=True, direct=False)
        owns, base = True, 0
        os.ftruncate(fd, 0)
    else:
        raise SdbenchError(f"the stream test runs on a LinuxBlockDevice or a DirTarget, not {type(target).__name__}")
    if direct and not is_direct:
        warnings.append("O_DIRECT unavailable: the stream goes through the page cache; the write time includes "
                        "the final sync and the cache is dropped before reading")

    pool_chunks = max(1, min(nchunks, POOL_MAX_BYTES // chunk_bytes))
    pool = AlignedBuffer(pool_chunks * chunk_bytes)
    _fill_random(pool, seed)
    rbuf = AlignedBuffer(chunk_bytes)
    # iovecs and array views made once: the loops below allocate nothing per call
    chunk_iovs = [pool.iov(chunk_bytes, j * chunk_bytes) for j in range(pool_chunks)]
    chunk_views = [iov[0] for iov in chunk_iovs]
    pool_words = np.frombuffer(pool.view, dtype=np.uint64).reshape(pool_chunks, chunk_bytes // 8)
    read_words = np.frombuffer(rbuf.view, dtype=np.uint64)
    run_id = int.from_bytes(os.urandom(8), "little") >> 1
    stamp_at = chunk_bytes - _STAMP.size
    now = time.perf_counter_ns
    samples: dict[str, list[int]] = {"write": [], "read": []}
    hists = {"write": LatencyHistogram(), "read": LatencyHistogram()}
    timelines: dict[str, list[Any]] = {"write": [], "read": []}
    bad_chunks, first_bad, checked = 0, None, 0
    steps = 2 * passes * nchunks
    step = 0
    try:
        for p in range(passes):
            # ---- write pass ------------------------------------------------------------
            lat, ends = array.array("q"), array.array("q")
            spent = 0
            t_pass = now()
            try:
                for i in range(nchunks):
                    j = i % pool_chunks
                    _STAMP.pack_into(chunk_views[j], stamp_at, i, p, run_id)
                    t0 = now()
                    done = os.pwritev(fd, chunk_iovs[j], base + i * chunk_bytes)
                    while done < chunk_bytes:  # short writes are rare (signals, full filesystems)
                        done += os.pwritev(fd, [chunk_views[j][done:]], base + i * chunk_bytes + done)
                    t1 = now()
                    spent += t1 - t0
                    lat.append(t1 - t0)
                    ends.append(t1)
                    step += 1
                    if progress is not None and not i & 15:
                        progress(f"stream write pass {p + 1}", step / steps)
                t0 = now()
                if isinstance(target, DirTarget):
                    os.fsync(fd)
                else:
                    os.fdatasync(fd)
                spent += now() - t0
            except OSError as e:
                raise BlockDeviceError(f"stream write failed: {e.strerror}") from None
            samples["write"].append(spent)
            hists["write"].record_many(lat)
            timelines["write"].append(throughput_timeline(ends, chunk_bytes, t_pass, 1.0))

            if before_verify is not None and p == 0:
                before_verify()
            # ---- read pass: from the medium, not the page cache ------------------------
            if not is_direct:
                try:
                    os.posix_fadvise(fd, base, total, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass
            if isinstance(target, DirTarget):
                target.drop_caches_now()
            lat, ends = array.array("q"), array.array("q")
            spent = 0
            t_pass = now()
            riov = rbuf.iov()
            try:
                for i in range(nchunks):
                    t0 = now()
                    got = os.preadv(fd, riov, base + i * chunk_bytes)
                    t1 = now()
                    spent += t1 - t0
                    lat.append(t1 - t0)
                    ends.append(t1)
                    if verify:
                        j = i % pool_chunks
                        _STAMP.pack_into(chunk_views[j], stamp_at, i, p, run_id)
                        checked += 1
                        if got != chunk_bytes or not np.array_equal(read_words, pool_words[j]):
                            bad_chunks += 1
                            if first_bad is None:
                                first_bad = i * chunk_bytes
                    step += 1
                    if progress is not None and not i & 15:
                        progress(f"stream read pass {p + 1}", step / steps)
            except OSError as e:
                raise BlockDeviceError(f"stream read failed: {e.strerror}") from None
            finally:
                riov[0].release()
            samples["read"].append(spent)
            hists["read"].record_many(lat)
            timelines["read"].append(throughput_timeline(ends, chunk_bytes, t_pass, 1.0))
    finally:
        del pool_words, read_words
        for v in chunk_views:
            v.release()
        pool.close()
        rbuf.close()
        if owns:
            os.close(fd)

    rows = []
    meta_rows: dict[str, Any] = {}
    for kind in ("write", "read"):
        label = f"stream {kind}"
        rows.append(make_row(label, kind, total, samples[kind], unit="MB/s", value_fn=_mb_s))
        meta_rows[label] = {"lat": hists[kind].summary_us(), "chunk_bytes": chunk_bytes,
                            "timeline": {"interval_s": 1.0, "passes": timelines[kind]}}
    meta: dict[str, Any] = {"protocol": "stream", "size_bytes": total, "chunk_bytes": chunk_bytes, "passes": passes,
                            "direct": is_direct, "rows": meta_rows}
    if verify:
        meta["verify"] = {"stream": {"method": "compare", "checked_chunks": checked, "bad_chunks": bad_chunks,
                                     "first_bad_offset_bytes": first_bad, "ok": bad_chunks == 0}}
    if identity:
        meta["identity"] = identity
    return RunRecord(scenario="stream", stack=target.describe(), clock="wall", rows=tuple(rows), seed=seed,
                     protocol="stream", source="measured", metadata=meta, warnings=tuple(warnings))
