"""fio-like jobs on real and simulated media, and the presets users compare cards with.

A job (:class:`JobConfig`) moves ``bs_bytes`` blocks over a region of a
target -- a :class:`~sdbench.media.linux.LinuxBlockDevice` (raw device or
image file) or a :class:`~sdbench.fs.hostdir.DirTarget` (a file in a
mounted directory) -- sequentially or in a random permutation, with
``iodepth`` I/Os in flight, kept there by the job's ``ioengine``: io_uring
rings (one per CPU for deep queues) or psync's threads, each doing
synchronous ``preadv``/``pwritev`` (the syscalls release the GIL, so the
device sees that many concurrent requests).  ``auto`` takes io_uring at
iodepth 1 and from 8, psync's threads between, and falls back to psync, with a
warning, where io_uring is unavailable.  The hot loops use preallocated page-aligned buffers: no
allocation per I/O.

Any other :class:`~sdbench.media.base.BlockDevice` -- a simulated SD card on a
virtual clock, a memory device, a cache or USB bridge around one -- runs the
same jobs through its ``read``/``write``, one request at a time (a warning
says so when ``iodepth`` > 1), every op timed on the device's clock.  Records
then say ``clock = "virtual"``, ``source = "simulated"`` on a simulated
device, and the same scenario and seed give the same record.

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

The modules, each depending only on those listed before it:

- ``jobs``: :class:`JobConfig` (every option, declared once), sizes, TOML job files;
- ``fiosyntax``, ``fiooptions``, ``fiofile``: fio's value syntax, its option table, its job files and command line;
- ``verify``: CRC-32C, the block trailer, checking blocks read back;
- ``blockport``: a job's region on a generic BlockDevice, checked before any I/O; records' clock fields;
- ``target``: a device or directory target turned into descriptors + regions (or a block port);
- ``plan``: offsets, sizes and directions of every I/O, the same for every engine;
- ``buffers``: what writes carry; ``stats``: what a job measured; ``pacing``: rates, think time, flow, targets;
- ``results``: loops, job results, rows and their metadata;
- ``ioengine``: the I/O engines' ops interface and capability flags, psync's threads, the general loop;
- ``uring``: the io_uring engine; ``blockengine``: a generic BlockDevice, one request at a time;
- ``engine``: one job (picks the I/O engine, forks deep queues), :func:`run_job`;
- ``procsetup``, ``schedule``: a job's process settings; jobs side by side, :func:`run_jobs`;
- ``fioout``, ``logs``: fio's JSON, json+, normal and terse outputs, and its log files;
- ``sdfat``: SdFat's bench;
- ``presets``: CrystalDiskMark-style, the A1 sniff test (and SdFat's bench, re-exported).
"""
from __future__ import annotations

# Three private names stay reachable here as they were before the split:
# _fill_random (used by the stream workload), _Engine and _update_py (tests).
from .blockengine import BlockEngine, block_run_id, timing_dependent
from .blockport import BlockPort, clock_fields, open_block_port
from .engine import _Engine, run_job
from .fiofile import FioJob, FioRun, load_fio_file, load_job_file, parse_argv, parse_fio_ini, read_run
from .jobs import RW_MODES, JobConfig, job_from_mapping, parse_size
from .schedule import FioOutcome, StopRequest, run_fio, run_jobs
from .presets import A1_RAND_READ_IOPS, A1_RAND_WRITE_IOPS, A1_SEQ_WRITE_KIB_S, CDM_TESTS, a1_jobs, run_a1, run_cdm
from .sdfat import SDFAT_BUF_BYTES, SDFAT_FILE_BYTES, run_sdfat, sdfat_pattern
from .results import JobResult, LoopResult, job_rows, op_summary
from .target import ProgressFn, Target, _fill_random, dir_file_name, lay_out_file
from .verify import (TRAILER_BYTES, VERIFY_MAGIC, VerifyError, _update_py, check_blocks, crc32c, crc32c_rows,
                     stamp_block, verify_failures)

__all__ = [
    "A1_RAND_READ_IOPS", "A1_RAND_WRITE_IOPS", "A1_SEQ_WRITE_KIB_S", "BlockEngine", "BlockPort", "CDM_TESTS",
    "FioJob", "FioOutcome", "FioRun", "JobConfig", "JobResult", "LoopResult", "ProgressFn", "RW_MODES",
    "SDFAT_BUF_BYTES", "SDFAT_FILE_BYTES", "StopRequest",
    "TRAILER_BYTES", "Target", "VERIFY_MAGIC", "VerifyError", "a1_jobs", "block_run_id", "check_blocks",
    "clock_fields", "crc32c", "crc32c_rows", "dir_file_name", "job_from_mapping", "job_rows", "lay_out_file",
    "load_fio_file", "load_job_file", "op_summary", "open_block_port", "parse_argv", "parse_fio_ini", "parse_size",
    "read_run",
    "run_a1", "run_cdm", "run_fio", "run_job", "run_jobs", "run_sdfat", "sdfat_pattern", "stamp_block", "timing_dependent",
    "verify_failures",
]
