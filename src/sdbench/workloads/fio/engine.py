"""The descriptor engine: a job's loops on a real device or file, :func:`run_job`, :func:`run_jobs`.

The I/O itself is done by an engine (:mod:`.ioengine`): ``io_uring``
(:mod:`.uring`, every I/O in flight of a process on one ring) or ``psync``
(one thread per I/O in flight, synchronous ``preadv``/``pwritev``).  The
job's ``ioengine`` names it; ``auto`` takes io_uring from iodepth
``AUTO_QUEUED_MIN_IODEPTH`` where the kernel allows it and psync otherwise,
and a job that asked for io_uring where it is unavailable runs on psync with
a warning in its result.  Deep queues are spread over forked processes where
the engine says so.  Either way the hot loop uses preallocated page-aligned
buffers: no allocation per I/O.
"""
from __future__ import annotations

import array
import os
import pickle
import select
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ...media.base import BlockDeviceError
from ...media.linux import AlignedBuffer
from ...options import to_mapping
from ...records import MIB, Row, RunRecord
from .blockengine import BlockEngine, block_run_id
from .blockport import BlockPort, clock_fields
from .ioengine import PROCESS_MIN_IODEPTH, EngineFlags, IoEngineOps, LoopIO, PsyncEngine, Slot, io_failed
from .jobs import AUTO_QUEUED_MIN_IODEPTH, IOENGINES, JobConfig
from .plan import block_order, op_kinds, pool_count, pool_seed
from .results import JobResult, LoopResult, job_rows
from .target import ProgressFn, Target, _fill_random, _open_port, _Port
from .uring import UringEngine
from .verify import TRAILER_BYTES, check_blocks, crc32c_rows

__all__ = ["AUTO_QUEUED_MIN_IODEPTH", "ENGINES", "PROCESS_MIN_IODEPTH", "pick_ioengine", "run_job", "run_jobs"]

#: the engines by name, in the order ``ioengine = "auto"`` prefers them
ENGINES: dict[str, IoEngineOps] = {e.name: e for e in (UringEngine(), PsyncEngine())}


def pick_ioengine(job: JobConfig) -> tuple[IoEngineOps, list[str]]:
    """The engine that runs ``job`` on a descriptor, and the warning when it is not the one asked for.
    ``auto``: the first available engine that queues (QUEUED) from iodepth AUTO_QUEUED_MIN_IODEPTH, below it
    the first that does one synchronous I/O per thread (SYNC).  An engine that cannot run here falls back to
    psync."""
    want = IOENGINES[job.ioengine]
    if want == "auto":
        need = EngineFlags.QUEUED if job.iodepth >= AUTO_QUEUED_MIN_IODEPTH else EngineFlags.SYNC
        tried = [e for e in ENGINES.values() if e.flags & need]
    else:
        tried = [ENGINES[want]]
    why = ""
    for ops in tried:
        why = ops.unavailable() or ""
        if not why:
            return ops, []
    fallback = ENGINES[PsyncEngine.name]
    asked = tried[0].name
    return fallback, [f"job {job.name}: {asked} is not available here: {why}; iodepth {job.iodepth} runs as "
                      f"{fallback.name} (a thread of synchronous I/O per I/O in flight)"]


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _Engine:
    def __init__(self, port: _Port, job: JobConfig, run_id: int, ops: IoEngineOps | None = None) -> None:
        self.port, self.job, self.run_id = port, job, run_id
        self.ops, self.warnings = (ops, []) if ops is not None else pick_ioengine(job)
        bs = job.bs_bytes
        self.nblocks = port.length // bs
        # write buffers (several, so consecutive writes differ) + one read buffer, per I/O in flight
        self.npool = pool_count(bs) if job.writes else 0
        self.slots: list[Slot] = []
        self.written = bytearray(self.nblocks) if job.verify != "none" else None
        for t in range(job.iodepth):
            buf = AlignedBuffer(bs * (self.npool + 1))
            if job.writes:
                _fill_random(buf, pool_seed(job, t))
            crcs = None
            if job.verify != "none":
                mat = np.frombuffer(buf.view, dtype=np.uint8)[: self.npool * bs].reshape(self.npool, bs)
                crcs = [int(c) for c in crc32c_rows(mat[:, : bs - TRAILER_BYTES])]
                del mat
            self.slots.append(Slot(t, buf, crcs, {"read": array.array("q"), "write": array.array("q")},
                                   {"read": array.array("q"), "write": array.array("q")}))

    def close(self) -> None:
        for s in self.slots:
            s.bufs.close()

    def processes(self) -> int:
        """Processes to spread the slots over: as the engine says, where fork is."""
        if not hasattr(os, "fork") or not self.ops.flags & EngineFlags.FORKS:
            return 1
        return self.ops.processes(self.job, _cpus())

    def run_loop(self, loop: int, progress: ProgressFn | None, label: str) -> LoopResult:
        job, port = self.job, self.port
        nblocks = self.nblocks
        for s in self.slots:
            s.reset()
        if job.reads and not port.direct:
            port.drop()
        start = time.perf_counter_ns()
        deadline = start + int(job.runtime_s * 1e9) if job.runtime_s > 0 else sys.maxsize
        io = LoopIO(job, port.fd, port.base, nblocks, self.npool, self.run_id, block_order(job, nblocks, loop),
                    op_kinds(job, nblocks, loop), sys.maxsize if job.time_based else nblocks, deadline,
                    self.written)
        nproc = self.processes()
        if nproc > 1:
            return self._run_loop_forked(nproc, io, start, progress, label)
        def tick(done: int) -> None:
            assert progress is not None
            frac_t = (time.perf_counter_ns() - start) / 1e9 / job.runtime_s if job.runtime_s > 0 else 0.0
            frac = frac_t if job.time_based else max(done / max(io.total, 1), frac_t)
            progress(label, min(frac, 1.0))
        try:
            self.ops.run(io, self.slots, tick if progress is not None else None)
        except OSError as e:  # outside any one I/O: setting the engine up
            raise io_failed(job, e) from None
        return self._end_loop(start, [s.lat for s in self.slots], [s.ends for s in self.slots])

    def _end_loop(self, start: int, lats: Sequence[Any], ends_: Sequence[Any]) -> LoopResult:
        """fdatasync a job that wrote (inside its time), then the loop's result from the slots' latencies and
        end times (per direction, int64 buffers)."""
        job = self.job
        if job.writes and job.fsync_on_end:
            try:
                os.fdatasync(self.port.fd)
            except OSError as e:
                raise BlockDeviceError(f"job {job.name}: fdatasync failed: {e.strerror}") from None
        stop = time.perf_counter_ns()
        lat = {k: np.concatenate([np.frombuffer(x[k], dtype=np.int64) for x in lats]) for k in ("read", "write")}
        ends = {k: np.concatenate([np.frombuffer(x[k], dtype=np.int64) for x in ends_]) for k in ("read", "write")}
        return LoopResult(start, stop, {k: int(v.size) for k, v in lat.items()}, lat, ends)

    def _run_loop_forked(self, nproc: int, io: LoopIO, start: int, progress: ProgressFn | None,
                         label: str) -> LoopResult:
        """The loop's slots spread over ``nproc`` forked processes: process p takes I/O numbers p, p + nproc,
        ... (the same sequence of blocks, interleaved) with slots p, p + nproc, ..., and sends its latencies back
        through a pipe."""
        job = self.job
        children: list[tuple[int, int]] = []
        for p in range(nproc):
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: its share of the slots, then its results, then out (no cleanup)
                code = 0
                try:
                    os.close(rfd)
                    mine = self.slots[p::nproc]
                    err = ""
                    try:
                        self.ops.run(replace(io, first=p, step=nproc), mine, None)
                    except Exception as e:  # noqa: BLE001 - the parent reports it
                        err = str(io_failed(job, e))
                    payload = pickle.dumps((err, {d: {k: b"".join(bytes(getattr(s, d)[k]) for s in mine)
                                                      for k in ("read", "write")} for d in ("lat", "ends")}))
                    with os.fdopen(wfd, "wb") as f:
                        f.write(payload)
                except BaseException:  # noqa: BLE001 - the parent sees a short or empty payload
                    code = 1
                finally:
                    os._exit(code)
            os.close(wfd)
            children.append((pid, rfd))
        results: list[tuple[str, dict[str, dict[str, bytes]]]] = []
        failed = ""
        for pid, rfd in children:
            with os.fdopen(rfd, "rb") as f:
                while True:  # wake for the progress bar while the child works
                    ready, _, _ = select.select([f], [], [], 0.1)
                    if ready:
                        break
                    if progress is not None and job.runtime_s > 0:
                        progress(label, min((time.perf_counter_ns() - start) / 1e9 / job.runtime_s, 1.0))
                data = f.read()
            _, status = os.waitpid(pid, 0)
            try:
                results.append(pickle.loads(data))
            except Exception:  # noqa: BLE001 - reported below
                failed = failed or f"an I/O process ended without its results (status {status})"
        errors = [e for e, _ in results if e]
        if errors:
            raise BlockDeviceError(errors[0])
        if failed:
            raise BlockDeviceError(f"job {job.name}: I/O failed: {failed}")
        return self._end_loop(start, [r[1]["lat"] for r in results], [r[1]["ends"] for r in results])

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
    """Run one job (all its loops) and, with verify, check what it wrote.

    A LinuxBlockDevice or DirTarget runs on the descriptor engine with the job's ``ioengine``, any other
    BlockDevice on :class:`~.blockengine.BlockEngine` (one request at a time, timed on the device's clock;
    ``ioengine`` has no effect there)."""
    port = _open_port(target, job)
    engine: _Engine | BlockEngine
    ioengine = None
    if isinstance(port, BlockPort):
        engine = BlockEngine(port, job, block_run_id(port.dev, job))
    else:
        run_id = int.from_bytes(os.urandom(8), "little") >> 1  # tells this run's blocks from stale ones
        try:
            engine = _Engine(port, job, run_id)
        except BaseException:
            port.close()
            raise
        port.warnings += engine.warnings
        ioengine = engine.ops.name
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
    return JobResult(job, loops, verify, list(port.warnings), ioengine)


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
        if res.ioengine:
            for summ in m.values():
                summ["ioengine"] = res.ioengine
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
    return RunRecord(scenario=scenario, stack=target.describe(), rows=tuple(rows),
                     seed=jobs[0].seed if jobs else None, protocol="fio", metadata=meta,
                     warnings=tuple(warnings), **clock_fields(target))
