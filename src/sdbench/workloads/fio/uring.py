"""The io_uring engine: a process's slots queued on one ring, submitted and reaped in batches.

After each reap the slots that became free are prepared again and submitted
``SUBMIT_BATCH`` at a time (fio's ``iodepth_batch_submit``), the last of them by
the ``io_uring_submit_and_wait`` call that waits for the next completion (at
least ``iodepth_batch_complete_min`` of them); then every completion that is
there is reaped.  A slot's latency runs from when its request was prepared (at
most ``SUBMIT_BATCH - 1`` preparations, about a microsecond, before the kernel
has it) to the reap that found it done, stamped once per reap as fio does; the
general loop also stamps the submission, which splits the latency into fio's
submission (slat) and completion (clat) parts.  The buffers are the slots'
page-aligned mappings, so O_DIRECT works as with ``preadv``, and are registered
with the ring where the kernel has READV_FIXED (6.15), so the pages are not
pinned again for each I/O.  Reads and writes both go through the ring: 4 KiB
random writes at QD32 on a RAM-backed loop device ran at about 0.85x of fio
there against 0.52x with psync's threads.  Trims, which the ring has no plain
operation for on every kernel, are done synchronously in the loop, as fio's
io_uring engine does.

The binding (``liburing`` on PyPI) holds the interpreter lock while it waits,
so the ring runs in the calling thread, which reports progress between reaps
itself.  :meth:`UringEngine.unavailable` says why a ring cannot be used here
(the binding does not load, the kernel is too old, seccomp or
``kernel.io_uring_disabled`` refuse it) and the driver falls back to psync.
"""
from __future__ import annotations

import array
import ctypes
import errno
import os
import time
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import numpy as np

from ...media.base import BlockDeviceError
from .ioengine import (CHUNK, FIO_DIR, FLUSH_EVERY, PROGRESS_EVERY_S, EngineFlags, IoEngineOps, LoopIO, Slot, Tick,
                       is_block_fd, lone_kind, tolerated, trim_range)
from .jobs import JobConfig
from .pacing import Monitor, sleep_wall
from .procsetup import set_thread_ioprio
from .plan import KIND_NAMES, READ, SEQ_STAMP, TRIM, WRITE
from .verify import stamp_block

#: queues at least this deep get one ring per CPU, in forked processes (UringEngine.processes)
RING_PER_CPU_MIN_IODEPTH = 16
#: slots of one ring at least, when a queue is spread over processes
MIN_RING_DEPTH = 8
#: SQEs prepared between two submissions while refilling: the device starts on the first few while the
#: interpreter prepares the rest (submitting all at once left a RAM-backed device idle meanwhile: 0.83x of fio at
#: QD32 against 1.0x; every one on its own costs a syscall each)
SUBMIT_BATCH = 4
#: rings with at most this many slots submit, return, then wait for the completion in a second call, as fio does,
#: rather than submit and wait in one: 4 KiB random reads at QD1 on a RAM-backed loop device ran at about twice
#: the rate so (the device's worker runs while the thread is between the calls, and the wait finds the completion)
SPLIT_WAIT_MAX_SLOTS = 1


#: Iovec objects by (address, length); see _iovec
_IOVECS: dict[tuple[Any, ...], Any] = {}
_IOVECS_MAX = 1 << 14


def _iovec(lib: Any, *views: memoryview) -> Any:
    """The binding's Iovec over ``views``.  The binding never releases the buffer export of a memoryview it is
    given, which would keep the slots' mappings from ever being unmapped; so it gets views of ctypes arrays at the
    same addresses instead (which pin only those small arrays), and the Iovec is kept for the next buffers at
    those addresses (the kernel reuses freed mappings' addresses), so few are made."""
    key = []
    for v in views:
        anchor = ctypes.c_char.from_buffer(v)
        key.append((ctypes.addressof(anchor), len(v)))
        del anchor
    iov = _IOVECS.get(tuple(key))
    if iov is None:
        if len(_IOVECS) >= _IOVECS_MAX:
            _IOVECS.clear()
        iov = _IOVECS[tuple(key)] = lib.Iovec([memoryview((ctypes.c_char * n).from_address(a)) for a, n in key])
    return iov


def register_buffers(lib: Any, ring: Any, slots: Sequence[Slot]) -> bool:
    """Register every slot's buffers with the ring, so its I/Os (READV_FIXED, WRITEV_FIXED: kernel 6.15) skip
    pinning the pages each time; False where the kernel cannot (older, or over its locked-memory limit)."""
    try:
        ops = lib.probe()
        if not (ops.get("IORING_OP_READV_FIXED") and ops.get("IORING_OP_WRITEV_FIXED")):
            return False
        lib.io_uring_register_buffers(ring, _iovec(lib, *(s.bufs.view for s in slots)))
    except Exception:  # noqa: BLE001 - an optimisation: plain READV/WRITEV do the same without it
        return False
    return True


def _binding() -> Any:
    import liburing  # a compiled extension: may be missing, or fail to load on this system

    return liburing


def open_ring(lib: Any, entries: int, extra: int = 0) -> Any:
    """A ring of ``entries`` submission slots, reaped only by the thread that made it.  A single issuer whose
    completions run when it waits for them (SINGLE_ISSUER with DEFER_TASKRUN, kernel 6.1; as fio sets up its
    rings) saves the kernel work per I/O; older kernels refuse the flags (EINVAL) and get the next set that
    works: COOP_TASKRUN (6.0), then none.  ``extra``: set-up flags the job asks for (IOPOLL, SQPOLL), never
    dropped."""
    tries = [lib.IORING_SETUP_SINGLE_ISSUER | lib.IORING_SETUP_DEFER_TASKRUN,
             lib.IORING_SETUP_SINGLE_ISSUER | lib.IORING_SETUP_COOP_TASKRUN, 0]
    if extra & lib.IORING_SETUP_SQPOLL:
        tries = [0]  # the kernel's polling thread submits: no single issuer
    def init(flags: int) -> Any:
        ring = lib.Ring()
        lib.io_uring_queue_init(entries, ring, flags | extra)
        return ring
    for flags in tries[:-1]:
        try:
            return init(flags)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
    return init(tries[-1])


def _preps(lib: Any, fixed: bool) -> tuple[Callable[..., None], Callable[..., None]]:
    """Read and write preparation, both called (sqe, fd, iovec, slot, offset): the slot is the registered
    buffer's index."""
    if fixed:
        return lib.io_uring_prep_readv_fixed, lib.io_uring_prep_writev_fixed
    readv, writev = lib.io_uring_prep_readv, lib.io_uring_prep_writev

    def prep_read(sqe: Any, fd: int, iov: Any, slot: int, off: int) -> None:
        readv(sqe, fd, iov, off)

    def prep_write(sqe: Any, fd: int, iov: Any, slot: int, off: int) -> None:
        writev(sqe, fd, iov, off)
    return prep_read, prep_write


def _slot_sqes(lib: Any, n: int) -> list[Any]:
    """A submission entry per slot, made once and copied into the ring for each I/O (put_sqe): its user data,
    the slot's number, survives the preparations, and no entry object is made per I/O."""
    sqes = []
    for s in range(n):
        sqe = lib.Sqe()
        sqe.user_data = s
        sqes.append(sqe)
    return sqes


class UringEngine(IoEngineOps):
    name = "io_uring"
    flags = EngineFlags.QUEUED | EngineFlags.FORKS

    def unavailable(self) -> str | None:
        try:
            lib = _binding()
        except Exception as e:  # noqa: BLE001 - ImportError, or OSError from the loader
            return f"the liburing binding does not load ({e})"
        try:
            ring = open_ring(lib, 2)
        except OSError as e:
            return f"the kernel refuses io_uring ({e.strerror or e})"
        except Exception as e:  # noqa: BLE001 - whatever the binding raises instead
            return f"io_uring does not start ({e})"
        try:
            # seccomp may allow the set-up and refuse io_uring_enter: one no-op round trip
            sqe = lib.io_uring_get_sqe(ring)
            lib.io_uring_prep_nop(sqe)
            lib.io_uring_submit_and_wait(ring, 1)
            cqe = lib.Cqe()
            lib.io_uring_wait_cqe(ring, cqe)
            lib.io_uring_cqe_seen(ring, cqe[0])
        except OSError as e:
            return f"the kernel refuses io_uring ({e.strerror or e})"
        except Exception as e:  # noqa: BLE001
            return f"io_uring does not work ({e})"
        finally:
            lib.io_uring_queue_exit(ring)
        return None

    def processes(self, job: JobConfig, cpus: int) -> int:
        """One ring per CPU for deep queues: one process reaping for the whole queue spends its CPU on the
        interpreter while the device could take more.  Verify keeps one (its record of written blocks lives
        there)."""
        if job.iodepth < RING_PER_CPU_MIN_IODEPTH or job.verify != "none":
            return 1
        return max(1, min(cpus, job.iodepth // MIN_RING_DEPTH))

    def run(self, io: LoopIO, slots: Sequence[Slot], tick: Tick | None) -> None:
        lib = _binding()
        job = io.job
        big, npool = io.block, io.npool
        views = [[s.bufs.view[j * big:(j + 1) * big] for j in range(npool + 1)] for s in slots]
        extra = 0
        if job.hipri:
            extra |= lib.IORING_SETUP_IOPOLL
        if job.sqthread_poll:
            extra |= lib.IORING_SETUP_SQPOLL
        ring = open_ring(lib, len(slots), extra)
        fixed = register_buffers(lib, ring, slots)
        try:
            if io.fast:
                read_iov = [_iovec(lib, v[npool]) for v in views]
                write_iov = [[_iovec(lib, b) for b in v[:npool]] for v in views]
                kind = lone_kind(io, slots[0]) if len(slots) == 1 else None
                if kind is not None:
                    self._lone(lib, ring, fixed, io, slots[0], kind, views[0], read_iov[0], write_iov[0], tick)
                elif job.rw in ("read", "randread"):
                    self._reads(lib, ring, fixed, io, slots, read_iov, tick)
                else:
                    self._mixed(lib, ring, fixed, io, slots, views, read_iov, write_iov, tick)
            else:
                self._general(lib, ring, fixed, io, slots, views, tick)
        finally:
            lib.io_uring_queue_exit(ring)
            for s in slots:
                io.flush(s)
            for v in views:
                for b in v:
                    b.release()

    @staticmethod
    def _failed(lib: Any, ring: Any, io: LoopIO, off: int, what: str, res: int, inflight: int) -> BlockDeviceError:
        """The error of the I/O at byte ``off`` (``res``: bytes moved or -errno), once the ``inflight`` others are
        done: their buffers stay in use until then."""
        _drain(lib, ring, inflight)
        size = io.plan.size or 0
        if res < 0:
            return BlockDeviceError(f"job {io.job.name}: I/O at byte {off} failed: {os.strerror(-res)}")
        return BlockDeviceError(f"short {what} at byte {off} ({res} of {size} B)")

    # The hot loops: locals only, no allocation per I/O but the binding's own.
    #
    # A depth-1 job: each I/O is submitted, then waited for in a second call (see SPLIT_WAIT_MAX_SLOTS), and the
    # next one is prepared in between, so that the wake-up goes straight on to the next submission (4 KiB random
    # reads on a RAM-backed loop device: 0.96x of fio's io_uring against 0.89x preparing after the wake-up); a
    # write whose buffer is the one in flight (one buffer: 1 MiB blocks) is prepared after it instead.  Like
    # psync's lone loop it takes the plan CHUNK offsets at a time and keeps the two clock readings of each I/O as
    # they are; one comparison per I/O (with the earlier of the deadline and the next report) finds when to
    # report progress and look at the stop flag, so a slow card reports as often as a fast one.  Reads and
    # writes have a loop each, alike on purpose.
    @staticmethod
    def _lone(lib: Any, ring: Any, fixed: bool, io: LoopIO, w: Slot, kind: str, views: list[memoryview],
              read_iov: Any, write_iov: list[Any], tick: Tick | None) -> None:
        plan = io.plan
        bs, n, total, dl, step = plan.size, len(plan), io.total, io.deadline, io.step
        fd, offs, npool, run_id = io.fd, plan.offs, io.npool, io.run_id
        put_sqe, submit, wait, seen = lib.put_sqe, lib.io_uring_submit, lib.io_uring_wait_cqe, lib.io_uring_cqe_seen
        prep_read, prep_write = _preps(lib, fixed)
        sqe = _slot_sqes(lib, 1)[0]
        cqe = lib.Cqe()
        now = time.perf_counter_ns
        stamp = SEQ_STAMP.pack_into
        every = int(PROGRESS_EVERY_S * 1e9)
        report_at = now() + every
        w.stamps = array.array("q")
        put = w.stamps.append

        def checkpoint(t1: int, end: int) -> int:
            """At the deadline or a report's time (rare: not in the per-I/O path): 0 to stop (the deadline, or a
            stop from outside), else the next time to come back."""
            nonlocal report_at
            if t1 >= end:
                return 0
            report_at = t1 + every
            if io.control is not None and io.control.stopped:
                return 0
            if tick is not None:
                tick(w.done())
            return min(end, report_at)

        def again_or_fail(what: str, off: int, res: int, buf: memoryview) -> None:
            """An I/O that did not move ``bs`` bytes: done again, synchronously, when io_uring cancelled it
            (ECANCELED: it could not start a worker thread for it while a signal was pending); else the job's
            error."""
            if res == -errno.ECANCELED:
                try:
                    res = (os.preadv if what == "read" else os.pwritev)(fd, [buf[:bs]], off)
                except OSError as x:
                    res = -(x.errno or errno.EIO)
            if res == bs:
                return
            if res < 0:
                raise BlockDeviceError(f"job {io.job.name}: I/O at byte {off - io.base} failed: "
                                       f"{os.strerror(-res)}")
            raise BlockDeviceError(f"short {what} at byte {off - io.base} ({res} of {bs} B)")

        k, off, res = io.first, 0, bs
        # the next write's buffer is not the one in flight, so it may be stamped meanwhile
        ahead = npool > 1 and step % npool != 0
        if k < total:  # the first I/O waits in the queue; each later one is put there while the one before runs
            if kind == "read":
                prep_read(sqe, fd, read_iov, 0, offs[k % n])
                put_sqe(ring, sqe)
            elif ahead:
                stamp(views[k % npool], 0, run_id, k)
                prep_write(sqe, fd, write_iov[k % npool], 0, offs[k % n])
                put_sqe(ring, sqe)
        try:
            while k < total:
                end = dl[0]
                limit = min(end, report_at)
                i = k % n
                m = min(CHUNK, -(-(n - i) // step), -(-(total - k) // step))
                chunk = offs[i:i + m * step:step]
                after = k + m * step
                nexts = chain(chunk[1:], (offs[after % n] if after < total else -1,))
                if kind == "read":
                    for off, nxt in zip(chunk, nexts):
                        t0 = now()
                        try:
                            submit(ring)
                        except InterruptedError:
                            _again(submit, ring)
                        if nxt >= 0:
                            prep_read(sqe, fd, read_iov, 0, nxt)
                            put_sqe(ring, sqe)
                        try:
                            wait(ring, cqe)
                        except InterruptedError:
                            _again(wait, ring, cqe)
                        t1 = now()
                        e = cqe[0]
                        try:
                            res = e.res
                        except OSError as x:  # the binding raises for a negative result
                            res = -(x.errno or errno.EIO)
                        seen(ring, e)
                        if res != bs:
                            again_or_fail("read", off, res, views[npool])
                            t1 = now()
                        put(t0)
                        put(t1)
                        if t1 >= limit:
                            limit = checkpoint(t1, end)
                            if not limit:
                                return
                else:
                    for kk, off, nxt in zip(range(k, after, step), chunk, nexts):
                        j = kk % npool
                        if not ahead:
                            stamp(views[j], 0, run_id, kk)
                            prep_write(sqe, fd, write_iov[j], 0, off)
                            put_sqe(ring, sqe)
                        t0 = now()
                        try:
                            submit(ring)
                        except InterruptedError:
                            _again(submit, ring)
                        if ahead and nxt >= 0:
                            j2 = (kk + step) % npool
                            stamp(views[j2], 0, run_id, kk + step)
                            prep_write(sqe, fd, write_iov[j2], 0, nxt)
                            put_sqe(ring, sqe)
                        try:
                            wait(ring, cqe)
                        except InterruptedError:
                            _again(wait, ring, cqe)
                        t1 = now()
                        e = cqe[0]
                        try:
                            res = e.res
                        except OSError as x:
                            res = -(x.errno or errno.EIO)
                        seen(ring, e)
                        if res != bs:
                            again_or_fail("write", off, res, views[j])
                            t1 = now()
                        put(t0)
                        put(t1)
                        if t1 >= limit:
                            limit = checkpoint(t1, end)
                            if not limit:
                                return
                k = after
                if len(w.stamps) >= 2 * FLUSH_EVERY:
                    w.settle(kind)
                    io.flush(w)
                    put = w.stamps.append
        except OSError as x:
            raise BlockDeviceError(f"job {io.job.name}: I/O at byte {off - io.base} failed: "
                                   f"{os.strerror(x.errno or errno.EIO)}") from None
        finally:
            w.settle(kind)
            w.stamps = None

    def _reads(self, lib: Any, ring: Any, fixed: bool, io: LoopIO, slots: Sequence[Slot], read_iov: list[Any],
               tick: Tick | None) -> None:
        plan = io.plan
        bs, n, fd, offs = plan.size, len(plan), io.fd, plan.offs
        k, step, total, dl = io.first, io.step, io.total, io.deadline
        nslots = len(slots)
        batch_n = io.job.iodepth_batch_submit or SUBMIT_BATCH
        put, submit, submit_wait = lib.put_sqe, lib.io_uring_submit, lib.io_uring_submit_and_wait
        prep, _ = _preps(lib, fixed)  # (depth 1 runs on _lone)
        sqes = _slot_sqes(lib, nslots)
        it_init, it_next, advance = lib.io_uring_cqe_iter_init, lib.io_uring_cqe_iter_next, lib.io_uring_cq_advance
        now = time.perf_counter_ns
        cqe = lib.Cqe()
        rec = slots[0]
        lat, ends = rec.lat["read"], rec.ends["read"]
        lat_add, end_add = lat.append, ends.append
        free = list(range(nslots))      # slots with nothing in flight
        free_add = free.append
        t_sub = [0] * nslots            # when each slot's I/O was prepared
        k_sub = [0] * nslots            # and its I/O number
        every = int(PROGRESS_EVERY_S * 1e9)
        report_at = now() + every
        stop = False
        stats = io.stats
        while True:
            if free and not stop:
                m = min(len(free), (total - k + step - 1) // step) if k < total else 0
                if m:
                    batch = free[-m:]
                    del free[-m:]
                    for i, s in enumerate(batch, 1):
                        sqe = sqes[s]
                        prep(sqe, fd, read_iov[s], s, offs[k % n])
                        put(ring, sqe)
                        k_sub[s] = k
                        k += step
                        t_sub[s] = now()
                        if not i % batch_n:
                            try:
                                submit(ring)
                            except InterruptedError:
                                _again(submit, ring)
                    if stats is not None:
                        stats.count_depth(nslots - len(free), m)
            if len(free) == nslots:
                break
            try:
                submit_wait(ring, 1)
            except InterruptedError:
                _again(submit_wait, ring, 1)
            it = it_init(ring)
            t1 = now()
            got = 0
            while it_next(it, cqe):
                e = cqe[0]
                s = e.user_data
                try:
                    res = e.res
                except OSError as x:  # the binding raises for a negative result
                    res = -(x.errno or errno.EIO)
                got += 1
                if res != bs:
                    if res == -errno.ECANCELED:  # cancelled as a signal came (see _lone): queued again
                        put(ring, sqes[s])
                        t_sub[s] = now()
                        continue
                    advance(ring, got)
                    raise self._failed(lib, ring, io, offs[k_sub[s] % n] - io.base, "read", res,
                                       nslots - len(free) - 1)
                lat_add(t1 - t_sub[s])
                end_add(t1)
                free_add(s)
            advance(ring, got)
            if t1 >= dl[0]:
                stop = True
            if t1 >= report_at:
                report_at = t1 + every
                if stats is not None:
                    stats.count_complete(got)
                io.flush(rec)
                lat, ends = rec.lat["read"], rec.ends["read"]
                lat_add, end_add = lat.append, ends.append
                if io.control is not None and io.control.stopped:
                    stop = True
                if tick is not None:
                    tick(rec.done())

    def _mixed(self, lib: Any, ring: Any, fixed: bool, io: LoopIO, slots: Sequence[Slot],
               views: list[list[memoryview]], read_iov: list[Any], write_iov: list[list[Any]],
               tick: Tick | None) -> None:
        job = io.job
        plan = io.plan
        bs, n, fd, offs, kinds = plan.size, len(plan), io.fd, plan.offs, plan.kinds
        k, step, total, dl = io.first, io.step, io.total, io.deadline
        nslots, nk, npool, run_id, written = len(slots), len(kinds), io.npool, io.run_id, io.written
        base = io.base
        batch_n = job.iodepth_batch_submit or SUBMIT_BATCH
        crcs = [s.crcs for s in slots]
        verify = crcs[0] is not None
        put, submit, submit_wait = lib.put_sqe, lib.io_uring_submit, lib.io_uring_submit_and_wait
        lone = nslots <= SPLIT_WAIT_MAX_SLOTS
        prep_read, prep_write = _preps(lib, fixed)
        sqes = _slot_sqes(lib, nslots)
        it_init, it_next, advance = lib.io_uring_cqe_iter_init, lib.io_uring_cqe_iter_next, lib.io_uring_cq_advance
        now = time.perf_counter_ns
        stamp = SEQ_STAMP.pack_into
        cqe = lib.Cqe()
        rec = slots[0]

        def appends() -> tuple[Any, Any, Any, Any]:
            return rec.lat["read"].append, rec.ends["read"].append, rec.lat["write"].append, rec.ends["write"].append
        r_lat, r_end, w_lat, w_end = appends()
        free = list(range(nslots))
        free_add = free.append
        t_sub = [0] * nslots
        k_sub = [0] * nslots
        every = int(PROGRESS_EVERY_S * 1e9)
        report_at = now() + every
        stop = False
        stats = io.stats
        while True:
            if free and not stop:
                m = min(len(free), (total - k + step - 1) // step) if k < total else 0
                if m:
                    batch = free[-m:]
                    del free[-m:]
                    for i, s in enumerate(batch, 1):
                        off = offs[k % n]
                        sqe = sqes[s]
                        if kinds[k % nk]:
                            prep_read(sqe, fd, read_iov[s], s, off)
                        else:
                            j = k % npool
                            if verify:
                                stamp_block(views[s][j], crcs[s][j][0], off - base, k, run_id)
                            else:
                                stamp(views[s][j], 0, run_id, k)
                            prep_write(sqe, fd, write_iov[s][j], s, off)
                        put(ring, sqe)
                        k_sub[s] = k
                        k += step
                        t_sub[s] = now()
                        if not i % batch_n:
                            try:
                                submit(ring)
                            except InterruptedError:
                                _again(submit, ring)
                    if stats is not None:
                        stats.count_depth(nslots - len(free), m)
            if len(free) == nslots:
                break
            if lone:
                _submit_then_wait(lib, ring, cqe)
            else:
                try:
                    submit_wait(ring, 1)
                except InterruptedError:
                    _again(submit_wait, ring, 1)
            it = it_init(ring)
            t1 = now()
            got = 0
            while it_next(it, cqe):
                e = cqe[0]
                s = e.user_data
                try:
                    res = e.res
                except OSError as x:
                    res = -(x.errno or errno.EIO)
                got += 1
                kk = k_sub[s]
                if res != bs:
                    if res == -errno.ECANCELED:  # cancelled as a signal came (see _lone): queued again, its
                        put(ring, sqes[s])      # buffer as it was
                        t_sub[s] = now()
                        continue
                    advance(ring, got)
                    raise self._failed(lib, ring, io, offs[kk % n] - base, "read" if kinds[kk % nk] else "write",
                                       res, nslots - len(free) - 1)
                if kinds[kk % nk]:
                    r_lat(t1 - t_sub[s])
                    r_end(t1)
                else:
                    w_lat(t1 - t_sub[s])
                    w_end(t1)
                    if written is not None:
                        written[(offs[kk % n] - base) // bs] = 1
                free_add(s)
            advance(ring, got)
            if t1 >= dl[0]:
                stop = True
            if t1 >= report_at:
                report_at = t1 + every
                if stats is not None:
                    stats.count_complete(got)
                io.flush(rec)
                r_lat, r_end, w_lat, w_end = appends()
                if io.control is not None and io.control.stopped:
                    stop = True
                if tick is not None:
                    tick(rec.done())

    def _general(self, lib: Any, ring: Any, fixed: bool, io: LoopIO, slots: Sequence[Slot],
                 views: list[list[memoryview]], tick: Tick | None) -> None:
        """Everything a job may ask for: sizes, files, trims, pacing, priorities, a latency target, steady state,
        errors a job goes on after.  Latencies split into submission and completion."""
        job = io.job
        plan = io.plan
        n, nk, offs, kinds, sizes, files = len(plan), len(plan.kinds), plan.offs, plan.kinds, plan.sizes, plan.files
        fixed_size = plan.size
        fds = list(io.fds or (io.fd,))
        block_fd = {fd: is_block_fd(fd) for fd in fds}
        k, step, total, dl = io.first, io.step, io.total, io.deadline
        nslots, npool, written, base = len(slots), io.npool, io.written, io.base
        batch_n = job.iodepth_batch_submit or SUBMIT_BATCH
        cmin = max(1, job.iodepth_batch_complete_min)
        low = job.iodepth_low
        flags = io.rw_flags
        buffers = io.buffers
        pacer = io.pacer
        stats = io.stats
        crcs = [s.crcs for s in slots]
        readv, writev = lib.io_uring_prep_readv, lib.io_uring_prep_writev
        put, submit, submit_wait = lib.put_sqe, lib.io_uring_submit, lib.io_uring_submit_and_wait
        lone = nslots <= SPLIT_WAIT_MAX_SLOTS
        sqes = _slot_sqes(lib, nslots)
        it_init, it_next, advance = lib.io_uring_cqe_iter_init, lib.io_uring_cqe_iter_next, lib.io_uring_cq_advance
        now = time.perf_counter_ns
        cqe = lib.Cqe()
        rec = slots[0]
        prios = io.prios
        cur_prio = -1
        mon = io.monitor if io.monitor is not None else Monitor(job, now())
        rcheck = io.read_check
        backlog = io.backlog
        max_lat = [x * 1000 for x in job.max_latency_us]
        # iovecs for every size a slot may move: its buffers' prefixes
        size_set = sorted({fixed_size} if fixed_size
                          else {int(x) for x in np.unique(np.frombuffer(sizes, dtype=np.int64))})
        r_iov = [{sz: _iovec(lib, views[s][npool][:sz]) for sz in size_set} for s in range(nslots)]
        w_iov = [[{sz: _iovec(lib, views[s][j][:sz]) for sz in size_set} for j in range(npool)] for s in range(nslots)]
        free = list(range(nslots))
        t_sub = [0] * nslots
        t_in = [0] * nslots       # when each slot's I/O went to the kernel (its submission latency ends)
        unsub: list[int] = []     # slots prepared but not yet submitted

        def mark() -> None:
            t = now()
            for x in unsub:
                t_in[x] = t
            unsub.clear()
        k_sub = [0] * nslots
        every = int(PROGRESS_EVERY_S * 1e9)
        report_at = now() + every
        stop = False
        writes_since = 0

        def record(s: int, t1: int) -> None:
            kk = k_sub[s]
            kind = kinds[kk % nk]
            name = KIND_NAMES[kind]
            lat = t1 - t_sub[s]
            rec.lat[name].append(lat)
            rec.ends[name].append(t1)
            rec.ks[name].append(kk)
            rec.slat[name].append(t_in[s] - t_sub[s])
            size = fixed_size or sizes[kk % n]  # type: ignore[index]
            mon.record(size, lat)
            limit = max_lat[FIO_DIR[kind]]
            if limit and lat > limit:
                raise BlockDeviceError(f"job {job.name}: a {name} took {lat / 1000:.0f} µs, over max_latency "
                                       f"{limit / 1000:.0f} µs")
            if written is not None and kind == WRITE:
                written[(offs[kk % n] - base) // (fixed_size or job.bs_for("write"))] = 1
            if backlog is not None and kind == WRITE:
                backlog.wrote((offs[kk % n] - base) // (fixed_size or job.bs_for("write")))
            if rcheck is not None and kind == READ:
                rcheck.check(views[s][npool][:size], offs[kk % n])
            if pacer is not None:
                pacer.after(FIO_DIR[kind], size, t1)

        def reap(wait: int) -> int:
            """Wait for ``wait`` completions, then take every one there is; returns how many."""
            if wait and lone:
                _submit_then_wait(lib, ring, cqe, mark)
            elif wait:
                mark()  # the kernel takes what is prepared as the call starts
                _again(submit_wait, ring, wait)
            else:
                _again(submit, ring)
                mark()
            it = it_init(ring)
            t1 = now()
            got = 0
            while it_next(it, cqe):
                e = cqe[0]
                s = e.user_data
                try:
                    res = e.res
                except OSError as x:
                    res = -(x.errno or errno.EIO)
                got += 1
                kk = k_sub[s]
                kind = kinds[kk % nk]
                size = fixed_size or sizes[kk % n]  # type: ignore[index]
                free.append(s)
                if res != size:
                    err = -res if res < 0 else errno.EIO
                    if res >= 0 or not tolerated(job, kind, err):
                        advance(ring, got)
                        raise self._failed(lib, ring, io, offs[kk % n] - base, KIND_NAMES[kind], res,
                                           nslots - len(free))
                    if stats is not None:
                        stats.error(err)
                    continue
                record(s, t1)
            advance(ring, got)
            if stats is not None and got:
                stats.count_complete(got)
            return got

        def quiesce_then(t: int) -> None:
            while len(free) < nslots:
                reap(1)
            sleep_wall(t)
        if pacer is not None:
            pacer.wait_until = quiesce_then
        while True:
            depth = mon.depth or nslots
            inflight = nslots - len(free)
            refill = not stop and k < total and inflight < depth and (not low or inflight <= low)
            if refill:
                prepared = 0
                while free and nslots - len(free) < depth and k < total and not stop:
                    i = k % n
                    kind = kinds[k % nk]
                    size = fixed_size or sizes[i]  # type: ignore[index]
                    off = offs[i]
                    fd = fds[files[i]] if files is not None else fds[0]
                    if pacer is not None:
                        pacer.before(FIO_DIR[kind], size)
                    if now() >= dl[0]:
                        stop = True
                        break
                    if kind == TRIM:
                        t0 = now()
                        try:
                            trim_range(fd, off, size, block_fd[fd])
                        except OSError as e:
                            if not tolerated(job, kind, e.errno or errno.EIO):
                                raise BlockDeviceError(f"job {job.name}: trim at byte {off - base} failed: "
                                                       f"{e.strerror}") from None
                            if stats is not None:
                                stats.error(e.errno or errno.EIO)
                            k += step
                            continue
                        t1 = now()
                        s = free.pop()
                        k_sub[s], t_sub[s], t_in[s] = k, t0, t0
                        record(s, t1)
                        free.append(s)
                        k += step
                        continue
                    s = free.pop()
                    sqe = sqes[s]
                    if kind == READ:
                        readv(sqe, fd, r_iov[s][size], off, flags)
                    else:
                        j = k % npool
                        view = views[s][j][:size]
                        if buffers is not None:
                            buffers.prepare(view, crcs[s][j] if crcs[s] is not None else None, off - base, k)
                        writev(sqe, fd, w_iov[s][j][size], off, flags)
                        del view
                        writes_since += 1
                    if prios is not None and prios[i] != cur_prio:
                        # the kernel gives a request the submitting thread's I/O priority: what is prepared goes
                        # first, then the thread takes this I/O's priority
                        if unsub:
                            _again(submit, ring)
                            mark()
                        cur_prio = prios[i]
                        set_thread_ioprio(cur_prio)
                    put(ring, sqe)
                    k_sub[s] = k
                    t_sub[s] = now()
                    unsub.append(s)
                    k += step
                    prepared += 1
                    if not prepared % batch_n:
                        _again(submit, ring)
                        mark()
                if prepared and stats is not None:
                    stats.count_submit(prepared)
                    stats.count_depth(nslots - len(free), prepared)
            if len(free) == nslots and (stop or k >= total):
                break
            if len(free) == nslots:
                continue
            want = min(cmin, nslots - len(free))
            reap(want)
            t1 = now()
            if t1 >= dl[0]:
                stop = True
            if job.fsync_every and writes_since >= job.fsync_every or \
                    job.fdatasync_every and writes_since >= job.fdatasync_every:
                while len(free) < nslots:
                    reap(1)
                (os.fsync if job.fsync_every else os.fdatasync)(fds[0])
                writes_since = 0
            if t1 >= report_at:
                report_at = t1 + every
                io.flush(rec)
                if mon.active:
                    if mon.check(t1):
                        stop = True
                    if mon.lt is not None and mon.lt.reset_stats and stats is not None:
                        mon.lt.reset_stats = False  # the final window at the found depth is measured afresh
                        stats.reset(t1)
                if io.control is not None and io.control.stopped:
                    stop = True
                if tick is not None:
                    tick(rec.done())
        io.flush(rec)


def _submit_then_wait(lib: Any, ring: Any, cqe: Any, submitted: Callable[[], None] | None = None) -> None:
    """What is queued submitted, then a completion waited for in a second call (SPLIT_WAIT_MAX_SLOTS);
    ``submitted`` is called in between."""
    _again(lib.io_uring_submit, ring)
    if submitted is not None:
        submitted()
    _again(lib.io_uring_wait_cqe, ring, cqe)


def _again(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, made again while a signal interrupts it (EINTR: its handler has run, a Ctrl-C that stops
    the run at the loop's next look at its stop flag).  The hot loops call the ring themselves and come here
    after an interruption; the others call through it."""
    while True:
        try:
            return call(*args)
        except InterruptedError:
            continue


def _drain(lib: Any, ring: Any, inflight: int) -> None:
    cqe = lib.Cqe()
    for _ in range(inflight):
        # a request that fails as it is submitted stops the kernel submitting the rest of its batch: submit
        # again, or their completions never come
        _again(lib.io_uring_submit_and_wait, ring, 1)
        _again(lib.io_uring_wait_cqe, ring, cqe)
        lib.io_uring_cqe_seen(ring, cqe[0])
