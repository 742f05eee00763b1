"""The I/O engine for a generic BlockDevice: one request at a time, timed on the device's clock.

A simulated SD bus takes one command at a time, and a BlockDevice's
``read``/``write`` return when the request is done, so requests are served in
order whatever the job's ``iodepth`` (:func:`~.blockport.open_block_port`
warns once per job).  Every op is timed with ``clock.now_ns()`` before and
after it: virtual time on a simulated card, wall time otherwise; ``runtime``,
``time_based`` and every pacing option (rates, think time) go by that clock
too, a wait advancing a virtual clock.  Block order, sizes, read/write mix
and data come from the same plan and seeds as the descriptor engine
(:mod:`~.plan`).  On a virtual clock the run id stamped into blocks is derived
from the job's seed and the virtual time, so a simulated run is repeatable.
"""
from __future__ import annotations

import hashlib
import os
import random
import time
from typing import Any

import numpy as np

from ...clock import VirtualClock
from ...media.base import BlockDevice
from ...records import MIB
from .blockport import BlockPort
from .buffers import WriteBuffers
from .ioengine import LoopIO, Slot, flush_into, run_sync, rw_flags
from .jobs import JobConfig
from .pacing import Monitor, Pacer, sleep_wall
from .plan import IoPlan, io_amount, pool_count, pool_seed
from .results import LoopResult
from .stats import JobStats
from .target import ProgressFn
from .verify import Backlog, ReadCheck, check_blocks, dump_blocks, verify_mode, verify_report

#: wall seconds between progress reports (the loop itself never waits)
_PROGRESS_EVERY_S = 0.1


#: the rows a job can give, by the kind of I/O: a recording marks each around the job (see run_loop)
ROW_KINDS = ("read", "write", "trim")


def timing_dependent(job: JobConfig) -> str:
    """Why ``job``'s requests, or what its rows measure, could depend on the clock ("" when they cannot): a
    run for a time, a ramp, a rate, think time, flow, a latency target or steady state decides what comes next by
    the time; several loops, clones or a reporting group give rows that are not one span from a first I/O to a
    last."""
    if job.runtime_s > 0 or job.time_based:
        return "runs for a time"
    if job.ramp_time_s > 0 or job.ramp_size_bytes > 0:
        return "has a ramp"
    if job.startdelay_s > 0 or job.startdelay_max_s > 0:
        return "starts after a delay"
    if Pacer(job, lambda: 0, lambda t: None).enabled or job.flow:
        return "is paced (rate, think time or flow)"
    if Monitor(job, 0).active:
        return "has a latency target or steady state"
    if job.loops > 1 or job.numjobs > 1 or job.group_reporting:
        return "runs several loops or clones"
    return ""


def block_run_id(dev: BlockDevice, job: JobConfig) -> int:
    """The id that tells this job's blocks from stale ones: repeatable on a virtual clock, random otherwise."""
    if dev.clock.simulated:
        key = f"sdbench-fio {job.seed} {job.name} {dev.clock.now_ns()}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1
    return int.from_bytes(os.urandom(8), "little") >> 1


def random_pool(nbytes: int, seed: int) -> bytearray:
    """The bytes ``target._fill_random`` puts in a buffer of ``nbytes`` with ``seed``."""
    rng, step = random.Random(seed), 1 << 20
    out = bytearray(nbytes)
    for i in range(0, nbytes, step):
        n = min(step, nbytes - i)
        out[i:i + n] = rng.randbytes(n)
    return out


class _Buffer:
    """A plain buffer with the view and close() of an AlignedBuffer (a BlockDevice takes any bytes)."""

    def __init__(self, nbytes: int) -> None:
        self.data = bytearray(nbytes)
        self.view = memoryview(self.data)

    def close(self) -> None:
        self.view.release()


class _DeviceIO:
    """Synchronous I/O on the device for :func:`~.ioengine.run_sync`, on the device's clock."""

    def __init__(self, engine: "BlockEngine", slot: Slot) -> None:
        self.dev = engine.dev
        self.ss = engine.dev.geometry.sector_size
        self.slot = slot
        self.block = engine.block
        self.now = engine.dev.clock.now_ns
        self.sim = isinstance(engine.dev.clock, VirtualClock)
        self.last = b""

    def write_view(self, j: int, size: int) -> memoryview:
        return self.slot.bufs.view[j * self.block: j * self.block + size]

    @property
    def read_view(self) -> memoryview:
        return memoryview(self.last)

    def read(self, fd: int, off: int, size: int) -> int:
        self.last = self.dev.read(off // self.ss, size // self.ss)
        return size

    def write(self, fd: int, view: memoryview, off: int) -> int:
        self.dev.write(off // self.ss, view)
        return len(view)

    def trim(self, fd: int, off: int, size: int) -> int:
        self.dev.trim(off // self.ss, size // self.ss)
        return size

    def sync(self, fd: int, data_only: bool) -> None:
        self.dev.sync()

    def wait_until(self, t: int) -> None:
        if self.sim:
            left = t - self.dev.clock.now_ns()
            if left > 0:
                self.dev.clock.advance_ns(left, "other")  # type: ignore[attr-defined]
        else:
            sleep_wall(t)


class BlockEngine:
    def __init__(self, port: BlockPort, job: JobConfig, run_id: int, *, ctx: Any = None) -> None:
        self.port, self.job, self.run_id = port, job, run_id
        self.dev = port.dev
        self.ctx = ctx
        clone = getattr(ctx, "clone", 0)
        self.plan = IoPlan(job, port.length, port.first_lba * self.dev.geometry.sector_size, clone=clone,
                           run_seed=getattr(ctx, "run_seed", 0))
        self.block = self.plan.fixed_bs or job.max_bs
        self.nblocks = port.length // self.block
        self.npool = pool_count(self.block) if job.writes else 0
        self.buffers = WriteBuffers(job, self.block, run_id, port.length)
        buf = _Buffer(self.block * (self.npool + 1))
        crcs = self.buffers.fill(buf.view, self.npool, pool_seed(job, 0)) if job.writes else None
        self.slot = Slot(0, buf, crcs)  # type: ignore[arg-type]
        self.written = bytearray(self.nblocks) if job.verify != "none" and job.do_verify and job.writes else None
        self.read_check = ReadCheck(job, self.block, port.first_lba * self.dev.geometry.sector_size) \
            if job.verify != "none" and not job.writes else None
        ss = self.dev.geometry.sector_size
        self.backlog = Backlog(job, self.block, run_id,
                               lambda off, n: self.dev.read(port.first_lba + off // ss, n // ss), self.written) \
            if job.verify_backlog and self.written is not None else None
        self._pass: tuple[int, Any] | None = None

    def now(self) -> int:
        return self.dev.clock.now_ns()

    def pass_io(self, loop: int, window: int = 0) -> Any:
        if self._pass is None or self._pass[0] != (loop, window):
            self._pass = ((loop, window), self.plan.pass_io(loop, window=window))
        return self._pass[1]

    def close(self) -> None:
        self.slot.bufs.close()

    def run_loop(self, loop: int, progress: ProgressFn | None, label: str, stats: JobStats, timer: Any,
                 ios_left: int) -> LoopResult:
        job, dev = self.job, self.dev
        nwin = self.plan.windows()
        p = self.pass_io(loop)
        total = min(io_amount(job, p, self.plan.pass_ios if nwin > 1 else 0), ios_left)
        start = self.now()
        # a recording for re-pricing (sdbench.ledger) marks the job's span as one timed call of each row it can
        # give (fioprotocol.paced says when that span is the row's one sample)
        rec = getattr(dev.clock, "recording", None)
        marks = tuple(f"{label} {kind}" for kind in ROW_KINDS) if rec is not None else ()
        for m in marks:
            rec.mark(m)
        deadline = timer.begin(start)
        ls = JobStats(start, bw_ms=job.bwavgtime_ms, iops_ms=job.iopsavgtime_ms, keep_logs=stats.logs is not None)
        ls.measure_from = max(stats.measure_from, start) if stats.measure_from > stats.start_ns else start
        dio = _DeviceIO(self, self.slot)
        pacer = Pacer(job, self.now, dio.wait_until, flow=getattr(self.ctx, "flow", None), seed=job.seed)
        pacer.start(start)
        pacer.deadline = [deadline]
        mon = Monitor(job, start)
        control = getattr(self.ctx, "control", None)
        self.slot.reset()
        done, window = 0, 0
        while True:  # the pass, or its windows in turn
            take = total if nwin == 1 else min(len(p), total - done)
            self._run_pass(p, take, done, total, pacer, mon, ls, dio, start, progress, label)
            done += take
            if nwin == 1 or done >= total or self.now() >= deadline or mon.ended \
                    or (control is not None and control.stopped):
                break
            window = (window + 1) % nwin
            p = self.pass_io(loop, window)
        if mon.active:
            mon.report_into(ls)
        if job.writes and job.fsync_on_end:
            dev.sync()   # the device's fdatasync: a cache writes its dirty blocks, a bridge drains
        stop = self.now()
        for m in marks:
            rec.mark(m)
        if progress is not None:
            progress(label, 1.0)
        ls.stop_ns = stop
        stats.merge(ls)
        stats.stop_ns = max(stats.stop_ns, stop)
        return LoopResult.of(start, stop, ls)

    def _run_pass(self, p: Any, total: int, before: int, loop_total: int, pacer: Pacer, mon: Monitor,
                  ls: JobStats, dio: "_DeviceIO", start: int, progress: ProgressFn | None, label: str) -> None:
        """``total`` I/Os of pass (or window) ``p``; ``before`` I/Os of the loop ran before it."""
        job, dev = self.job, self.dev
        io = LoopIO(job, -1, p, self.npool, self.run_id, total, pacer.deadline, self.written, fast=False,
                    buffers=self.buffers, pacer=pacer if pacer.enabled else None,
                    control=getattr(self.ctx, "control", None), region=self.port.length,
                    base=self.port.first_lba * dev.geometry.sector_size, rw_flags=rw_flags(job), stats=ls,
                    read_check=self.read_check, backlog=self.backlog)
        io.flush = lambda slot: flush_into(ls, None, p, io.base, job, slot)
        io.monitor = mon if mon.active else None
        errors: list[BaseException] = []
        counter = iter(range(total)) if total < (1 << 62) else _count()
        nxt = counter.__next__
        report_at = time.monotonic() + _PROGRESS_EVERY_S

        def step() -> int:
            nonlocal report_at
            try:
                k = nxt()
            except StopIteration:
                return 1 << 63
            if progress is not None and not k & 63 and time.monotonic() >= report_at:
                report_at = time.monotonic() + _PROGRESS_EVERY_S
                t = self.now()
                frac_t = (t - start) / 1e9 / job.runtime_s if job.runtime_s > 0 else 0.0
                frac_n = (before + k) / max(min(loop_total, 1 << 62), 1)
                progress(label, min(frac_t if job.time_based else max(frac_n, frac_t), 1.0))
            if job.time_based and k and k % len(p) == 0 and self.now() == start:
                self.port.warnings.append(f"job {job.name}: the clock of {dev.kind} did not move over the region; "
                                          f"time_based stopped after one pass")
                return 1 << 63
            return k
        try:
            run_sync(io, self.slot, step, errors, dio)
        finally:
            io.flush(self.slot)
        if errors:
            raise errors[0]

    def verify(self, progress: ProgressFn | None) -> dict[str, Any]:
        """Read back every written block through the device and check it (outside the job time)."""
        assert self.written is not None
        job, dev = self.job, self.dev
        bs = self.block
        if self.backlog is not None:
            self.backlog.check()
        spb = bs // dev.geometry.sector_size
        first_lba = self.port.first_lba
        chunk_blocks = max(1, (8 * MIB) // bs)
        idx = np.nonzero(np.frombuffer(bytes(self.written), dtype=np.uint8))[0]
        bad: list[int] = []
        checked = 0
        mode, pattern, step = verify_mode(job, bs)
        if idx.size:
            # runs of consecutive written blocks, read in chunks
            for run in np.split(idx, np.nonzero(np.diff(idx) != 1)[0] + 1):
                first, count = int(run[0]), int(run.size)
                for pos in range(0, count, chunk_blocks):
                    n = min(chunk_blocks, count - pos)
                    data = dev.read(first_lba + (first + pos) * spb, n * spb)
                    found = check_blocks(data, step, (first + pos) * bs, self.run_id, mode=mode, pattern=pattern)
                    if found and job.verify_dump:
                        dump_blocks(job, data, step, (first + pos) * bs, found, pattern)
                    bad += found
                    checked += n
                    if progress is not None:
                        progress(f"{job.name} verify", checked / idx.size)
                    if bad and job.verify_fatal:
                        break
                if bad and job.verify_fatal:
                    break
        if self.backlog is not None:
            checked += self.backlog.checked
            bad = self.backlog.bad + bad
        return verify_report(job, checked, bad, bs)


def _count() -> Any:
    import itertools

    return itertools.count()
