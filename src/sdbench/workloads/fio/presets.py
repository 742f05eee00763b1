"""Presets users compare cards with: CrystalDiskMark-style, the A1 sniff test, SdFat's bench (:mod:`~.sdfat`).

Each runs on any target :func:`~.engine.run_job` takes: a LinuxBlockDevice, a
DirTarget or any other BlockDevice (a simulated card on its virtual clock too).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...media.base import BlockDevice, ReadOnlyError
from ...fs.hostdir import DirTarget
from ...options import to_mapping
from ...records import MIB, RunRecord
from .blockport import clock_fields
from .engine import run_job
from .jobs import JobConfig
from .results import job_rows
from .sdfat import SDFAT_BUF_BYTES, SDFAT_FILE_BYTES, run_sdfat, sdfat_pattern
from .target import ProgressFn, Target, dir_file_name, lay_out_file

# the SdFat bench lives in .sdfat; its names stay reachable here
__all__ = ["A1_RAND_READ_IOPS", "A1_RAND_WRITE_IOPS", "A1_SEQ_WRITE_KIB_S", "CDM_TESTS", "SDFAT_BUF_BYTES",
           "SDFAT_FILE_BYTES", "a1_jobs", "run_a1", "run_cdm", "run_sdfat", "sdfat_pattern"]


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
    writable = not (isinstance(target, BlockDevice) and target.read_only)
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
    return RunRecord(scenario="CrystalDiskMark-style", stack=target.describe(), rows=tuple(rows), protocol="cdm",
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
    return RunRecord(scenario="A1 sniff test (agnostics)", stack=target.describe(), rows=tuple(rows),
                     protocol="a1", metadata=meta, warnings=tuple(warnings), **clock_fields(target))
