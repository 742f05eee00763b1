"""One job on a target: :func:`run_job` (its loops, its verify, what it measured).

On a real device, image file or directory the I/O is done by an engine
(:mod:`.ioengine`): ``io_uring`` (:mod:`.uring`, every I/O in flight of a
process on one ring) or ``psync`` (one thread per I/O in flight, synchronous
``preadv``/``pwritev``).  The job's ``ioengine`` names it; ``auto`` takes
io_uring at iodepth 1 and from ``AUTO_QUEUED_MIN_IODEPTH`` where the kernel
allows it and psync otherwise (:func:`.jobs.auto_queues`), and a job that asked for io_uring where it is unavailable
runs on psync with a warning in its result.  Deep queues are spread over
forked processes where the engine says so.  Any other block device runs on
:class:`~.blockengine.BlockEngine`, one request at a time on its own clock.

A job's time limit (``runtime``, after ``ramp_time``) covers all its loops; its
amount is one pass over the region per loop, ``io_size`` per loop, or until
``number_ios`` I/Os or the time limit.  Running several jobs side by side is
:mod:`.schedule`'s.
"""
from __future__ import annotations

import os
import pickle
import resource
import select
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...media.base import BlockDeviceError
from ...media.linux import AlignedBuffer
from .blockengine import BlockEngine, block_run_id
from .blockport import BlockPort
from .buffers import WriteBuffers
from .ioengine import (PROCESS_MIN_IODEPTH, Control, EngineFlags, IoEngineOps, LoopIO, PsyncEngine, Slot,
                       flush_into, io_failed, rw_flags)
from .jobs import AUTO_QUEUED_MIN_IODEPTH, IOENGINES, JobConfig, auto_queues
from .pacing import FlowCell, Monitor, Pacer, RateTooLow, sleep_wall
from .plan import IoPlan, PassIO, command_prios, io_amount, pool_count, pool_seed
from .results import JobResult, LoopResult
from .stats import JobStats
from .target import ProgressFn, Target, _open_port, _Port
from .uring import UringEngine
from .verify import Backlog, ReadCheck, check_blocks, dump_blocks, verify_mode, verify_report

__all__ = ["AUTO_QUEUED_MIN_IODEPTH", "ENGINES", "PROCESS_MIN_IODEPTH", "pick_ioengine", "preflight", "run_job"]

#: the engines by name, in the order ``ioengine = "auto"`` prefers them
ENGINES: dict[str, IoEngineOps] = {e.name: e for e in (UringEngine(), PsyncEngine())}
#: loops of a job kept apart in its result; past this, later loops are added to the last one (fsx-like jobs of
#: hundreds of thousands of loops keep a bounded result)
MAX_LOOP_RESULTS = 1000


def pick_ioengine(job: JobConfig) -> tuple[IoEngineOps, list[str]]:
    """The engine that runs ``job`` on a descriptor, and the warning when it is not the one asked for.
    ``auto``: the first available engine that queues (QUEUED) at the depths :func:`.jobs.auto_queues` names,
    at the others the first that does one synchronous I/O per thread (SYNC).  An engine that cannot run here falls back to
    psync."""
    want = IOENGINES[job.ioengine]
    if want == "auto":
        need = EngineFlags.QUEUED if auto_queues(job.iodepth) else EngineFlags.SYNC
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


def needs_general_loop(job: JobConfig) -> bool:
    """Whether a job asks for more than the engines' fast loops do: pacing, trims, errors it goes on after,
    per-I/O log fields, priorities, syncs, polled or flagged I/O, a latency target or steady state."""
    return bool(any(job.rate_bytes_s) or any(job.rate_iops) or any(job.rate_min_bytes_s) or any(job.rate_iops_min)
                or job.thinktime_us or job.flow or job.trims or job.continue_on_error != "none"
                or job.ignore_read_errors or job.ignore_write_errors or job.log_offset or job.log_prio
                or job.log_issue_time or any(job.cmdprio_percentage) or job.cmdprio_bssplit
                or job.fsync_every or job.fdatasync_every or job.hipri or job.nowait or job.atomic or job.uncached
                or job.latency_target_us or job.steadystate != "none" or any(job.max_latency_us)
                or job.sqthread_poll or job.iodepth_low or job.iodepth_batch_complete_min > 1
                or (job.verify != "none" and not job.writes) or job.verify_backlog > 0)


def check_engine(job: JobConfig, engine: str) -> None:
    """Refuse what the engine that will run the job cannot do."""
    if (any(job.cmdprio_percentage) or job.cmdprio_bssplit) and engine != "io_uring":
        raise ConfigError(f"job {job.name}: cmdprio needs ioengine io_uring or libaio (fio's synchronous engines "
                          f"have no per-command priority either)")
    if (job.sqthread_poll or job.iodepth_low or job.iodepth_batch_complete_min > 1) and engine != "io_uring":
        raise ConfigError(f"job {job.name}: sqthread_poll, iodepth_low and iodepth_batch_complete_min need "
                          f"ioengine io_uring or libaio")


def preflight(target: Target, job: JobConfig, clone: int = 0) -> None:
    """A job's region, files and engine checked before any job of the run starts (its port opened and closed;
    on a directory its files laid out)."""
    port = _open_port(target, replace(job, unlink=False), clone)
    try:
        if not isinstance(port, BlockPort):
            check_engine(job, pick_ioengine(job)[0].name)
        files = getattr(port, "files", None)
        IoPlan(job, port.length, files=[(f.base, f.length) for f in files] if files else None)  # its limits
    finally:
        port.close()


@dataclass
class JobContext:
    """What a job gets from the run around it: its clone number, stop flag, shared flow table, the run's seed
    (randrepeat=0) and statistics set-up."""
    clone: int = 0
    control: Control | None = None
    flow: FlowCell | None = None
    run_seed: int = 0
    keep_logs: bool = False
    #: called once the job is set up, just before its clock starts (the run lines up jobs that start together)
    ready: Callable[[], None] | None = None


@dataclass
class JobTimer:
    """A job's clock: it starts with the first I/O of the first loop (set-up is not timed), and ends ``limit_ns``
    later (ramp included); None: no time limit."""
    limit_ns: int | None
    ramp_ns: int
    stats: JobStats
    deadline: int = sys.maxsize
    started: bool = False
    #: the time the run let this job go (0: its own first I/O), so jobs started together end together
    start_at: int = 0

    def begin(self, now: int) -> int:
        """The deadline, the job's clock started at ``now`` (or when the run let it go) if this is its first
        loop."""
        if not self.started:
            self.started = True
            if self.start_at and self.start_at <= now:
                now = self.start_at
            self.stats.start_ns = self.stats.stop_ns = now
            self.stats.measure_from = now + self.ramp_ns
            self.deadline = now + self.limit_ns if self.limit_ns is not None else sys.maxsize
        return self.deadline


class _Engine:
    def __init__(self, port: _Port, job: JobConfig, run_id: int, ops: IoEngineOps | None = None, *,
                 ctx: JobContext | None = None) -> None:
        self.port, self.job, self.run_id = port, job, run_id
        self.ctx = ctx or JobContext()
        self.ops, self.warnings = (ops, []) if ops is not None else pick_ioengine(job)
        self.plan = IoPlan(job, port.length, port.base, clone=self.ctx.clone, run_seed=self.ctx.run_seed,
                           files=[(f.base, f.length) for f in port.files] if port.files else None)
        self.block = self.plan.fixed_bs or job.max_bs
        self.buffers = WriteBuffers(job, self.block, run_id, port.length)
        self.fast = self.plan.simple and self.buffers.plain and not needs_general_loop(job)
        check_engine(job, self.ops.name)
        self.nblocks = port.length // self.block
        # write buffers (several, so consecutive writes differ) + one read buffer, per I/O in flight
        self.npool = pool_count(self.block) if job.writes else 0
        self.slots: list[Slot] = []
        self.written = bytearray(self.nblocks) if job.verify != "none" and job.do_verify and job.writes else None
        self.read_check = ReadCheck(job, self.block, port.base) if job.verify != "none" and not job.writes \
            else None
        self.backlog = Backlog(job, self.block, run_id, self._read_back, self.written) \
            if job.verify_backlog and self.written is not None else None
        self._back_buf: AlignedBuffer | None = None
        for t in range(job.iodepth):
            buf = AlignedBuffer(self.block * (self.npool + 1))
            crcs = self.buffers.fill(buf.view, self.npool, pool_seed(job, t)) if job.writes else None
            self.slots.append(Slot(t, buf, crcs))
        self._pass: tuple[int, PassIO] | None = None

    def close(self) -> None:
        for s in self.slots:
            s.bufs.close()
        if self._back_buf is not None:
            self._back_buf.close()

    def _read_back(self, rel_off: int, size: int) -> memoryview:
        """One block read back for verify_backlog (O_DIRECT needs an aligned buffer)."""
        if self._back_buf is None:
            self._back_buf = AlignedBuffer(self.block)
        view = self._back_buf.view[:size]
        got = os.preadv(self.port.fd, [view], self.port.base + rel_off)
        if got != size:
            raise BlockDeviceError(f"job {self.job.name}: short read while verifying at byte {rel_off}")
        return view

    @staticmethod
    def now() -> int:
        return time.perf_counter_ns()

    def processes(self) -> int:
        """Processes to spread the slots over: as the engine says, where fork is; one for the general loop."""
        if not hasattr(os, "fork") or not self.ops.flags & EngineFlags.FORKS or not self.fast:
            return 1
        return self.ops.processes(self.job, _cpus())

    def pass_io(self, loop: int, window: int = 0) -> PassIO:
        # a plain pass is the same every loop for a sequential job: made once
        key = (loop if self.job.random or self.plan.files or not self.plan.fixed_bs else 0, window)
        if self._pass is None or self._pass[0] != key:
            self._pass = (key, self.plan.pass_io(loop, window=window))
        return self._pass[1]

    def run_loop(self, loop: int, progress: ProgressFn | None, label: str, stats: JobStats,
                 timer: JobTimer, ios_left: int) -> LoopResult:
        """One loop: a pass (or as many as io_size or the time ask for), window after window when the pass is
        made in windows."""
        job, port = self.job, self.port
        for s in self.slots:
            s.reset()
        if job.reads and not port.direct and job.invalidate:
            port.drop()
        nwin = self.plan.windows()
        p = self.pass_io(loop)
        total = min(io_amount(job, p, self.plan.pass_ios if nwin > 1 else 0), ios_left)
        start = time.perf_counter_ns()
        dl = [timer.begin(start)]
        ls = JobStats(start, bw_ms=job.bwavgtime_ms, iops_ms=job.iopsavgtime_ms, ramp_end_ns=stats.measure_from,
                      keep_logs=stats.logs is not None)
        ls.measure_from = stats.measure_from
        pacer = None
        if not self.fast:
            pacer = Pacer(job, time.perf_counter_ns, sleep_wall, share=1.0 / max(1, job.iodepth)
                          if self.ops.name == "psync" else 1.0, flow=self.ctx.flow, seed=job.seed)
            pacer.start(start)
            pacer.deadline = dl
            if not pacer.enabled:
                pacer = None
        mon = Monitor(job, start)
        done, window = 0, 0
        while True:
            take = total if nwin == 1 else min(len(p), total - done)
            self._run_pass(p, take, dl, ls, pacer, mon if mon.active else None, start, progress, label)
            done += take
            if nwin == 1 or done >= total or time.perf_counter_ns() >= dl[0] or mon.ended \
                    or (self.ctx.control is not None and self.ctx.control.stopped):
                break
            window = (window + 1) % nwin
            p = self.pass_io(loop, window)
        if mon.active:
            mon.report_into(ls)
        return self._end_loop(start, ls, stats)

    def _run_pass(self, p: PassIO, total: int, dl: list[int], ls: JobStats, pacer: Pacer | None, mon: Any,
                  start: int, progress: ProgressFn | None, label: str) -> None:
        """``total`` I/Os of pass (or window) ``p``, measured into ``ls``."""
        job, port = self.job, self.port
        io = LoopIO(job, port.fd, p, self.npool, self.run_id, total, dl, self.written, first=0, step=1,
                    fast=self.fast, fds=[f.fd for f in port.files] if port.files else (), buffers=self.buffers,
                    pacer=pacer, control=self.ctx.control, region=port.length, base=port.base,
                    rw_flags=rw_flags(job), stats=ls, read_check=self.read_check, prios=command_prios(job, p),
                    backlog=self.backlog)
        io.monitor = mon
        nproc = self.processes()
        if nproc > 1:
            self._run_loop_forked(nproc, io, start, progress, label, ls)
            return
        import threading
        lock = threading.Lock() if self.ops.name == "psync" and job.iodepth > 1 else None
        io.flush = lambda slot: flush_into(ls, lock, p, port.base, job, slot, io.prios)

        def tick(done: int) -> None:
            assert progress is not None
            frac_t = (time.perf_counter_ns() - start) / 1e9 / job.runtime_s if job.runtime_s > 0 else 0.0
            frac = frac_t if job.time_based else max(done / max(min(total, 1 << 62), 1), frac_t)
            progress(label, min(frac, 1.0))
        try:
            self.ops.run(io, self.slots, tick if progress is not None else None)
        except RateTooLow:
            raise
        except OSError as e:  # outside any one I/O: setting the engine up
            raise io_failed(job, e) from None

    def _end_loop(self, start: int, ls: JobStats, stats: JobStats) -> LoopResult:
        """fdatasync a job that wrote (inside its time), then the loop's result."""
        job = self.job
        if job.writes and job.fsync_on_end:
            for fd in [f.fd for f in self.port.files] if self.port.files else [self.port.fd]:
                try:
                    os.fdatasync(fd)
                except OSError as e:
                    raise BlockDeviceError(f"job {job.name}: fdatasync failed: {e.strerror}") from None
        stop = time.perf_counter_ns()
        ls.stop_ns = stop
        stats.merge(ls)
        if ls.latency_target is not None:  # measured afresh at the depth found
            stats.measure_from = max(stats.measure_from, ls.measure_from)
        stats.stop_ns = max(stats.stop_ns, stop)
        for name in ("latency_target", "steadystate"):
            if getattr(ls, name, None) is not None:
                setattr(stats, name, getattr(ls, name))
        return LoopResult.of(start, stop, ls)

    def _run_loop_forked(self, nproc: int, io: LoopIO, start: int, progress: ProgressFn | None,
                         label: str, ls: JobStats) -> None:
        """The loop's slots spread over ``nproc`` forked processes: process p takes I/O numbers p, p + nproc,
        ... (the same sequence of blocks, interleaved) with slots p, p + nproc, ..., and sends what it measured
        back through a pipe."""
        job = self.job
        children: list[tuple[int, int]] = []
        for p in range(nproc):
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: its share of the slots, then its results, then out (no cleanup)
                code = 0
                try:
                    die_with_parent()
                    os.close(rfd)
                    mine = self.slots[p::nproc]
                    own = JobStats(ls.start_ns, bw_ms=job.bwavgtime_ms, iops_ms=job.iopsavgtime_ms,
                                   keep_logs=ls.logs is not None)
                    own.measure_from = ls.measure_from
                    import threading
                    lock = threading.Lock()
                    sub = replace(io, first=p, step=nproc, stats=own,
                                  flush=lambda slot: flush_into(own, lock, io.plan, io.base, job, slot))
                    err = ""
                    try:
                        self.ops.run(sub, mine, None)
                    except Exception as e:  # noqa: BLE001 - the parent reports it
                        err = str(io_failed(job, e))
                    payload = pickle.dumps((err, own))
                    with os.fdopen(wfd, "wb") as f:
                        f.write(payload)
                except BaseException:  # noqa: BLE001 - the parent sees a short or empty payload
                    code = 1
                finally:
                    os._exit(code)
            os.close(wfd)
            children.append((pid, rfd))
        results: list[tuple[str, JobStats]] = []
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
        for _, own in results:
            ls.merge(own)

    def verify(self, progress: ProgressFn | None) -> dict[str, Any]:
        """Read back every written block and check it (untimed): its trailer, or its pattern."""
        assert self.written is not None
        job, port = self.job, self.port
        bs = self.block
        fd = port.fd
        if self.backlog is not None:
            self.backlog.check()  # the writes since the last backlog check, before the rest
        if job.writes and not job.fsync_on_end:
            try:
                os.fdatasync(fd)  # so the page cache's copy can be dropped and the medium's read back
            except OSError:
                pass
        port.drop()
        chunk_blocks = max(1, (8 * (1 << 20)) // bs)
        buf = AlignedBuffer(chunk_blocks * bs)
        bad: list[int] = []
        checked = 0
        written = np.frombuffer(bytes(self.written), dtype=np.uint8)
        idx = np.nonzero(written)[0]
        mode, pattern, step = verify_mode(job, bs)
        try:
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
                            r = os.preadv(fd, [view[got:]], port.base + (first + pos) * bs + got)
                            if r <= 0:
                                raise BlockDeviceError(f"short read while verifying at block {first + pos}")
                            got += r
                        found = check_blocks(view, step, (first + pos) * bs, self.run_id, mode=mode,
                                             pattern=pattern)
                        if found and job.verify_dump:
                            dump_blocks(job, view, step, (first + pos) * bs, found, pattern)
                        bad += found
                        del view
                        pos += n
                        checked += n
                        if progress is not None:
                            progress(f"{job.name} verify", checked / idx.size)
                        if bad and job.verify_fatal:
                            break
                    if bad and job.verify_fatal:
                        break
        except OSError as e:
            raise BlockDeviceError(f"job {job.name}: verify read failed: {e.strerror}") from None
        finally:
            buf.close()
        if self.backlog is not None:  # what was checked during the job counts too
            checked += self.backlog.checked
            bad = self.backlog.bad + bad
        return verify_report(job, checked, bad, bs)


def die_with_parent() -> None:
    """Have the kernel end this (forked) process when its parent dies (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _cpu_now() -> tuple[float, float, int, int, int]:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (a.ru_utime + b.ru_utime, a.ru_stime + b.ru_stime, a.ru_nvcsw + a.ru_nivcsw + b.ru_nvcsw + b.ru_nivcsw,
            a.ru_majflt + b.ru_majflt, a.ru_minflt + b.ru_minflt)


def run_job(target: Target, job: JobConfig, *, progress: ProgressFn | None = None,
            before_verify: Callable[[], None] | None = None, ctx: JobContext | None = None) -> JobResult:
    """Run one job (all its loops) and, with verify, check what it wrote.

    A LinuxBlockDevice or DirTarget runs on the descriptor engine with the job's ``ioengine``, any other
    BlockDevice on :class:`~.blockengine.BlockEngine` (one request at a time, timed on the device's clock;
    ``ioengine`` has no effect there)."""
    ctx = ctx or JobContext()
    port = _open_port(target, job, ctx.clone)
    engine: _Engine | BlockEngine
    ioengine = None
    if job.create_only:
        port.close()
        return JobResult(job, [], None, list(port.warnings), None, JobStats(time.perf_counter_ns()))
    if isinstance(port, BlockPort):
        engine = BlockEngine(port, job, block_run_id(port.dev, job), ctx=ctx)
    else:
        run_id = int.from_bytes(os.urandom(8), "little") >> 1  # tells this run's blocks from stale ones
        try:
            engine = _Engine(port, job, run_id, ctx=ctx)
        except BaseException:
            port.close()
            raise
        port.warnings += engine.warnings
        ioengine = engine.ops.name
    cpu0 = _cpu_now()
    engine.pass_io(0)  # the first pass made before the clock starts
    start_at = 0
    if ctx.ready is not None:
        ctx.ready()
        if ctx.control is not None and isinstance(engine, _Engine):
            start_at = ctx.control.go_ns  # jobs let go together keep one clock
    start = engine.now()
    ramp_ns = int(job.ramp_time_s * 1e9)
    stats = JobStats(start, bw_ms=job.bwavgtime_ms, iops_ms=job.iopsavgtime_ms, ramp_end_ns=start + ramp_ns,
                     ramp_bytes=job.ramp_size_bytes, keep_logs=ctx.keep_logs)
    timer = JobTimer(int((job.runtime_s + job.ramp_time_s) * 1e9) if job.runtime_s > 0 else None, ramp_ns, stats,
                     start_at=start_at)
    ios_left = job.number_ios or sys.maxsize
    loops: list[LoopResult] = []
    try:
        for i in range(job.loops):
            lp = engine.run_loop(i, progress, job.name, stats, timer, ios_left)
            if len(loops) < MAX_LOOP_RESULTS:
                loops.append(lp)
            else:
                loops[-1] = loops[-1].merged(lp)
            ios_left -= sum(lp.ops.values())
            if ios_left <= 0 or engine.now() >= timer.deadline or stats_stopped(stats, ctx):
                break
        verify = None
        if engine.read_check is not None:
            verify = engine.read_check.report()
        elif job.verify != "none" and job.do_verify:
            if before_verify is not None:
                before_verify()
            verify = engine.verify(progress)
    finally:
        engine.close()
        if job.fsync_on_close and (job.writes or job.trims):
            if isinstance(port, BlockPort):
                port.dev.sync()
            else:
                port.sync()
        port.close()
        if ctx.flow is not None:
            ctx.flow.leave()
    cpu1 = _cpu_now()
    stats.cpu = {"usr_s": cpu1[0] - cpu0[0], "sys_s": cpu1[1] - cpu0[1], "ctx": cpu1[2] - cpu0[2],
                 "majf": cpu1[3] - cpu0[3], "minf": cpu1[4] - cpu0[4]}
    return JobResult(job, loops, verify, list(port.warnings), ioengine, stats)


def stats_stopped(stats: JobStats, ctx: JobContext) -> bool:
    """Whether the job ended early: stopped from outside, steady, or its latency target found."""
    return bool((ctx.control is not None and ctx.control.stopped) or stats.ended)
