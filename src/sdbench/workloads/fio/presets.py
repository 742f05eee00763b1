"""Presets users compare cards with: CrystalDiskMark-style, the A1 sniff test, SdFat's bench."""
from __future__ import annotations

import array
import os
import time
from dataclasses import replace
from typing import Any

import numpy as np

from ...errors import ConfigError, SdbenchError
from ...media.base import BlockDeviceError, ReadOnlyError
from ...fs.hostdir import DirTarget
from ...media.linux import AlignedBuffer, LinuxBlockDevice
from ...options import to_mapping
from ...records import MIB, Row, RunRecord, make_row
from ...stats_latency import LatencyHistogram
from .engine import run_job
from .jobs import JobConfig
from .results import job_rows
from .target import ProgressFn, Target, dir_file_name, lay_out_file


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
