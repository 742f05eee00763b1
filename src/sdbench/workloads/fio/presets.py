"""Presets users compare cards with: CrystalDiskMark-style, the A1 sniff test, SdFat's bench (:mod:`~.sdfat`).

Each runs on any target :func:`~.engine.run_job` takes: a LinuxBlockDevice, a
DirTarget or any other BlockDevice (a simulated card on its virtual clock too).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from ...media.base import BlockDevice, ReadOnlyError
from ...fs.hostdir import DirTarget
from ...options import from_mapping, opt, to_mapping
from ...records import MIB, Row, RunRecord, make_row
from ...stats_latency import LatencyHistogram
from .blockport import clock_fields
from .engine import run_job
from .jobs import JobConfig
from .results import JobResult, job_rows, op_summary
from .sdfat import SDFAT_BUF_BYTES, SDFAT_FILE_BYTES, run_sdfat, sdfat_pattern
from .target import ProgressFn, Target, dir_file_name, lay_out_file

# the SdFat bench lives in .sdfat; its names stay reachable here
__all__ = ["A1_RAND_READ_IOPS", "A1_RAND_WRITE_IOPS", "A1_SEQ_WRITE_KIB_S", "CDM_PROFILES", "CDM_PROFILE_TITLES",
           "CDM_TESTS", "CdmConfig", "CdmTest", "SDFAT_BUF_BYTES", "SDFAT_FILE_BYTES", "a1_jobs", "cdm_mix_label",
           "run_a1", "run_cdm", "run_sdfat", "sdfat_pattern"]


@dataclass(frozen=True)
class CdmTest:
    """One CrystalDiskMark test, named as CrystalDiskMark names it: block size, queues (Q) and threads (T)."""

    label: str
    random: bool
    bs_bytes: int
    queues: int
    threads: int = 1

    @property
    def in_flight(self) -> int:
        """I/Os in flight: queues x threads, as fio's numjobs multiplies iodepth (:func:`~.jobs.parse_fio_ini`)."""
        return self.queues * self.threads


_SEQ1M_Q8T1 = CdmTest("SEQ1M Q8T1", False, MIB, 8)
_SEQ1M_Q1T1 = CdmTest("SEQ1M Q1T1", False, MIB, 1)
_RND4K_Q32T1 = CdmTest("RND4K Q32T1", True, 4096, 32)
_RND4K_Q32T16 = CdmTest("RND4K Q32T16", True, 4096, 32, 16)
_RND4K_Q1T1 = CdmTest("RND4K Q1T1", True, 4096, 1)

#: CrystalDiskMark's profiles and the tests each runs.  Peak is version 7's (and 8's and 9's under their
#: "NVMe SSD" settings); with their default settings 8 and 9 run RND4K Q32T1 there, the default profile's row.
CDM_PROFILES: dict[str, tuple[CdmTest, ...]] = {
    "default": (_SEQ1M_Q8T1, _SEQ1M_Q1T1, _RND4K_Q32T1, _RND4K_Q1T1),
    "peak": (_SEQ1M_Q8T1, _RND4K_Q32T16),
    "real": (_SEQ1M_Q1T1, _RND4K_Q1T1),
}
#: the profiles as CrystalDiskMark's Profile menu names them
CDM_PROFILE_TITLES = {"default": "Default", "peak": "Peak Performance", "real": "Real World Performance"}

#: the default profile as (label, random, block bytes, queue depth)
CDM_TESTS = tuple((t.label, t.random, t.bs_bytes, t.queues) for t in CDM_PROFILES["default"])

#: the most I/Os in flight a job takes (JobConfig's declared range); Q32T16 asks for 512
_MAX_IODEPTH = int({f.name: f for f in fields(JobConfig)}["iodepth"].metadata["max"])


@dataclass(frozen=True)
class CdmConfig:
    """What a CrystalDiskMark-style run runs, besides its size, loops and time (``sdbench preset cdm``)."""

    profile: str = opt("default", choices=tuple(CDM_PROFILES),
                       help="default: SEQ1M Q8T1, SEQ1M Q1T1, RND4K Q32T1, RND4K Q1T1; peak: SEQ1M Q8T1, "
                            "RND4K Q32T16; real: SEQ1M Q1T1, RND4K Q1T1")
    mode: str = opt("all", choices=("all", "read", "write"),
                    help="all: the read tests, then the write tests; read, write: those only")
    mix: bool = opt(False, help="after the writes, each test once more as a read/write mix (one row, MB/s of "
                                "both)")
    mix_read_pct: int = opt(70, unit="%", min=1, max=99,
                            help="share of reads in the mix rows (CrystalDiskMark offers R10%/W90% to R90%/W10%)")


def cdm_mix_label(test: CdmTest, read_pct: int) -> str:
    """The row of a test's mix, e.g. ``RND4K Q32T16 mix 70/30`` (reads/writes, %)."""
    return f"{test.label} mix {read_pct}/{100 - read_pct}"


def _prefill(target: Target, size_bytes: int, offset_bytes: int, progress: ProgressFn | None, name: str) -> None:
    """Write the test region once so reads never see unwritten (sparse or erased) space."""
    job = JobConfig(name=name, rw="write", bs_bytes=MIB if size_bytes >= MIB else 4096, size_bytes=size_bytes,
                    offset_bytes=offset_bytes, iodepth=1, fsync_on_end=True)
    if isinstance(target, DirTarget):
        lay_out_file(target, dir_file_name(name), offset_bytes + size_bytes)
    else:
        run_job(target, job, progress=progress)


def part_progress(progress: ProgressFn | None, part: int, parts: int, label: str = "") -> ProgressFn | None:
    """Progress of part ``part`` (from 0) of ``parts`` equal parts of a preset, as the fraction of the whole: the
    fraction shown never goes back when the next job or loop starts.  ``label``: what the part is called (else
    what the job says)."""
    if progress is None:
        return None
    return lambda said, frac: progress(label or said, (part + max(0.0, min(1.0, frac))) / parts)


def run_loops(target: Target, job: JobConfig, progress: ProgressFn | None = None) -> JobResult:
    """CrystalDiskMark's loops: each loop of ``job`` a run of its own, with ``runtime_s`` as its limit (a job's
    runtime covers all its loops), gathered into one result; ``progress`` of all the loops together."""
    one = replace(job, loops=1)
    results = [run_job(target, one, progress=part_progress(progress, i, job.loops)) for i in range(job.loops)]
    first = results[0]
    assert first.stats is not None
    for r in results[1:]:
        assert r.stats is not None
        first.stats.merge(r.stats)
        first.loops += r.loops
    return replace(first, job=job)


def _mb_s(row: Row) -> float:
    return row.bytes / 1e6 / (row.time_ms / 1e3) if row.time_ms > 0 else 0.0


def _mix_row(res: JobResult, label: str) -> tuple[Row, dict[str, Any]]:
    """One row for a read/write mix, one figure as CrystalDiskMark shows a mix: the bytes of both directions over
    the best loop's time, MB/s; the metadata has the read share counted from the ops and each direction's figures."""
    job = res.job
    both = [lp.ops.get("read", 0) + lp.ops.get("write", 0) for lp in res.loops]
    moved = [lp.bytes.get("read", 0) + lp.bytes.get("write", 0) for lp in res.loops]
    best = max(range(len(res.loops)), key=lambda i: both[i] / max(res.loops[i].duration_ns, 1))
    row = make_row(label, job.rw, moved[best], [res.loops[best].duration_ns], unit="MB/s", value_fn=_mb_s)
    hist = LatencyHistogram(6)
    stats = res.stats
    assert stats is not None
    for kind in ("read", "write"):
        d = stats.dirs.get(kind)
        if d is not None:
            hist.merge(d.lat.h)
    reads, ops = sum(lp.ops.get("read", 0) for lp in res.loops), sum(both)
    total_s = sum(lp.duration_ns for lp in res.loops) / 1e9
    nbytes = sum(moved)
    loops = [{"ops": n, "read_ops": lp.ops.get("read", 0), "write_ops": lp.ops.get("write", 0),
              "duration_s": lp.duration_ns / 1e9,
              "mib_s": b / MIB / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0,
              "iops": n / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0}
             for n, b, lp in zip(both, moved, res.loops)]
    summ = {"ops": ops, "read_ops": reads, "write_ops": ops - reads, "rwmixread_pct": job.rwmixread,
            "read_share_pct": 100.0 * reads / ops if ops else None, "bytes": nbytes,
            "runtime_s": total_s, "iops": ops / total_s if total_s else 0.0,
            "bw_bytes_s": nbytes / total_s if total_s else 0.0, "lat": hist.summary_us(),
            "lat_relative_error": hist.relative_error, "loops": loops, "row_is": "best loop",
            "mean_loop_mib_s": float(np.mean([x["mib_s"] for x in loops])),
            "read": op_summary(job, res.loops, "read", stats), "write": op_summary(job, res.loops, "write", stats)}
    return row, summ


def run_cdm(target: Target, *, size_bytes: int = 1024 * MIB, loops: int = 5, runtime_s: float = 5.0,
            offset_bytes: int = 0, mode: str = "all", profile: str = "default", mix: bool = False,
            mix_read_pct: int = 70, progress: ProgressFn | None = None,
            identity: dict[str, Any] | None = None) -> RunRecord:
    """CrystalDiskMark-style: the tests of ``profile`` (:data:`CDM_PROFILES`), reads first, then writes, then
    (``mix``) each test as a read/write mix with ``mix_read_pct`` % reads.

    Each test runs ``loops`` times, each loop over the region until it has been
    covered once or ``runtime_s`` passed; the row reports the best loop, as
    CrystalDiskMark does (mean and every loop are in the metadata).  Values in
    MB/s (10^6 B/s) with IOPS and µs alongside.  Threads multiply the I/Os in
    flight (Q32T16: 512), up to the 256 a job takes.  A mix row's op is fio's
    ``rw`` (SEQ tests) or ``randrw`` (RND tests).
    """
    cfg = from_mapping(CdmConfig, {"profile": profile, "mode": mode, "mix": mix, "mix_read_pct": mix_read_pct},
                       "cdm")
    tests = CDM_PROFILES[cfg.profile]
    writable = not (isinstance(target, BlockDevice) and target.read_only)
    if cfg.mode in ("all", "write") and not writable:
        raise ReadOnlyError("the CrystalDiskMark write tests need a writable target (--allow-write), "
                            "or run the read tests only (--mode read)")
    if cfg.mix and not writable:
        raise ReadOnlyError("the CrystalDiskMark mix tests write: they need a writable target (--allow-write)")
    name = "cdm"
    kinds = {"all": ("read", "write"), "read": ("read",), "write": ("write",)}[cfg.mode]
    mixed = list(tests) if cfg.mix else []
    # the mix reads too: it needs written data as much as the read tests do
    prefill = writable and (cfg.mode != "write" or cfg.mix)
    parts = int(prefill) + len(kinds) * len(tests) + len(mixed)  # the prefill weighs as much as a test
    next_part = itertools.count().__next__
    if prefill:
        _prefill(target, size_bytes, offset_bytes, part_progress(progress, next_part(), parts), name)
    rows, meta_rows, warnings = [], {}, list(getattr(target, "warnings", []))

    def job_of(test: CdmTest, rw: str) -> JobConfig:
        if test.in_flight > _MAX_IODEPTH:
            note = (f"{test.label}: {test.queues} queues x {test.threads} threads = {test.in_flight} I/Os in "
                    f"flight; run with {_MAX_IODEPTH}, the most a job takes (iodepth)")
            if note not in warnings:
                warnings.append(note)
        return JobConfig(name=name, rw=rw, bs_bytes=test.bs_bytes, size_bytes=size_bytes,
                         offset_bytes=offset_bytes, iodepth=min(test.in_flight, _MAX_IODEPTH), runtime_s=runtime_s,
                         loops=loops, rwmixread=cfg.mix_read_pct)

    def run(job: JobConfig, label: str) -> JobResult:
        res = run_loops(target, job, progress=part_progress(progress, next_part(), parts, label))
        warnings.extend(w for w in res.warnings if w not in warnings)
        return res

    for kind in kinds:
        for test in tests:
            res = run(job_of(test, ("rand" if test.random else "") + kind), f"{test.label} {kind}")
            r, m = job_rows(res, label=test.label, best_loop=True, unit="MB/s")
            rows += r
            for summ in m.values():
                summ["mean_loop_mib_s"] = float(np.mean([x["mib_s"] for x in summ["loops"]]))
            meta_rows.update(m)
    for test in mixed:
        label = cdm_mix_label(test, cfg.mix_read_pct)
        row, summ = _mix_row(run(job_of(test, "randrw" if test.random else "rw"), label), label)
        rows.append(row)
        meta_rows[label] = summ
    meta: dict[str, Any] = {
        "preset": "cdm", "profile": cfg.profile, "profile_title": CDM_PROFILE_TITLES[cfg.profile], "mode": cfg.mode,
        "tests": [{**to_mapping(t), "iodepth": min(t.in_flight, _MAX_IODEPTH)} for t in tests],
        "size_bytes": size_bytes, "loops": loops, "runtime_s": runtime_s, "rows": meta_rows}
    if cfg.mix:
        meta["mix"] = {"read_pct": cfg.mix_read_pct, "write_pct": 100 - cfg.mix_read_pct,
                       "rows": [cdm_mix_label(t, cfg.mix_read_pct) for t in mixed]}
    if identity:
        meta["identity"] = identity
    scenario = "CrystalDiskMark-style"
    if cfg.profile != "default":  # another test set: runs of different profiles do not compare row by row
        scenario += f" ({CDM_PROFILE_TITLES[cfg.profile]})"
    return RunRecord(scenario=scenario, stack=target.describe(), rows=tuple(rows), protocol="cdm",
                     metadata=meta, warnings=tuple(warnings), **clock_fields(target))


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
    for i, (label, job) in enumerate(zip(labels, jobs)):
        res = run_job(target, job, progress=part_progress(progress, i, len(jobs), label))
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
    return RunRecord(scenario="A1 sniff test (agnostics)", stack=target.describe(), rows=tuple(rows),
                     protocol="a1", metadata=meta, warnings=tuple(warnings), **clock_fields(target))
