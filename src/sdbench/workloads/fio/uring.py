"""The io_uring engine: a process's slots queued on one ring, submitted and reaped in batches.

After each reap the slots that became free are prepared again and submitted
``SUBMIT_BATCH`` at a time, the last of them by the ``io_uring_submit_and_wait``
call that waits for the next completion; then every completion that is there
is reaped.  A slot's latency runs from when its request was prepared (at most
``SUBMIT_BATCH - 1`` preparations, about a microsecond, before the kernel has
it) to the reap that found it done, stamped once per reap as fio does; it goes
into the same per-direction records as the threads of
:class:`~.ioengine.PsyncEngine`.  The buffers are the slots' page-aligned
mappings, so O_DIRECT works as with ``preadv``, and are registered with the
ring where the kernel has READV_FIXED (6.15), so the pages are not pinned
again for each I/O.  Reads and writes both go through the ring: 4 KiB random
writes at QD32 on a RAM-backed loop device ran at about 0.85x of fio there
against 0.52x with psync's threads.

The binding (``liburing`` on PyPI) holds the interpreter lock while it waits,
so the ring runs in the calling thread, which reports progress between reaps
itself.  :meth:`UringEngine.unavailable` says why a ring cannot be used here
(the binding does not load, the kernel is too old, seccomp or
``kernel.io_uring_disabled`` refuse it) and the driver falls back to psync.
"""
from __future__ import annotations

import ctypes
import errno
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...media.base import BlockDeviceError
from .ioengine import PROGRESS_EVERY_S, EngineFlags, IoEngineOps, LoopIO, Slot, Tick
from .jobs import JobConfig
from .plan import SEQ_STAMP
from .verify import stamp_block

#: queues at least this deep get one ring per CPU, in forked processes (UringEngine.processes)
RING_PER_CPU_MIN_IODEPTH = 16
#: slots of one ring at least, when a queue is spread over processes
MIN_RING_DEPTH = 8
#: SQEs prepared between two submissions while refilling: the device starts on the first few while the
#: interpreter prepares the rest (submitting all at once left a RAM-backed device idle meanwhile: 0.83x of fio at
#: QD32 against 1.0x; every one on its own costs a syscall each)
SUBMIT_BATCH = 4


#: Iovec objects by (address, length); see _iovec
_IOVECS: dict[tuple[int, int], Any] = {}
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


def open_ring(lib: Any, entries: int) -> Any:
    """A ring of ``entries`` submission slots.  A single issuer that runs its completions when it reaps
    (SINGLE_ISSUER, COOP_TASKRUN) saves the kernel work per I/O; kernels before 6.0 refuse the flags (EINVAL),
    and get a plain ring."""
    flags = lib.IORING_SETUP_SINGLE_ISSUER | lib.IORING_SETUP_COOP_TASKRUN
    while True:
        ring = lib.Ring()
        try:
            lib.io_uring_queue_init(entries, ring, flags)
            return ring
        except OSError as e:
            if e.errno != errno.EINVAL or not flags:
                raise
            flags = 0


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
        bs, npool = job.bs_bytes, io.npool
        views = [[s.bufs.view[j * bs:(j + 1) * bs] for j in range(npool + 1)] for s in slots]
        read_iov = [_iovec(lib, v[npool]) for v in views]
        write_iov = [[_iovec(lib, b) for b in v[:npool]] for v in views]
        ring = open_ring(lib, len(slots))
        fixed = register_buffers(lib, ring, slots)
        try:
            if job.rw in ("read", "randread"):
                self._reads(lib, ring, fixed, io, slots, read_iov, tick)
            else:
                self._mixed(lib, ring, fixed, io, slots, views, read_iov, write_iov, tick)
        finally:
            lib.io_uring_queue_exit(ring)
            for v in views:
                for b in v:
                    b.release()

    @staticmethod
    def _failed(lib: Any, ring: Any, io: LoopIO, k: int, what: str, res: int, inflight: int) -> BlockDeviceError:
        """The error of I/O number ``k`` (``res``: bytes moved or -errno), once the ``inflight`` others are
        done: their buffers stay in use until then."""
        cqe = lib.Cqe()
        for _ in range(inflight):
            # a request that fails as it is submitted stops the kernel submitting the rest of its batch: submit
            # again, or their completions never come
            lib.io_uring_submit_and_wait(ring, 1)
            lib.io_uring_wait_cqe(ring, cqe)
            lib.io_uring_cqe_seen(ring, cqe[0])
        bs = io.job.bs_bytes
        off = io.base + io.order[k % io.nblocks] * bs
        if res < 0:
            return BlockDeviceError(f"job {io.job.name}: I/O at byte {off} failed: {os.strerror(-res)}")
        return BlockDeviceError(f"short {what} at byte {off} ({res} of {bs} B)")

    # The hot loops: locals only, no allocation per I/O but the binding's own.
    def _reads(self, lib: Any, ring: Any, fixed: bool, io: LoopIO, slots: Sequence[Slot], read_iov: list[Any],
               tick: Tick | None) -> None:
        bs, nblocks, fd, base, order = io.job.bs_bytes, io.nblocks, io.fd, io.base, io.order
        k, step, total, deadline = io.first, io.step, io.total, io.deadline
        n = len(slots)
        put, submit, submit_wait = lib.put_sqe, lib.io_uring_submit, lib.io_uring_submit_and_wait
        prep, _ = _preps(lib, fixed)
        sqes = _slot_sqes(lib, n)
        it_init, it_next, advance = lib.io_uring_cqe_iter_init, lib.io_uring_cqe_iter_next, lib.io_uring_cq_advance
        now = time.perf_counter_ns
        cqe = lib.Cqe()
        lat, ends = slots[0].lat["read"], slots[0].ends["read"]
        lat_add, end_add = lat.append, ends.append
        free = list(range(n))      # slots with nothing in flight
        free_add = free.append
        t_sub = [0] * n            # when each slot's I/O was prepared
        k_sub = [0] * n            # and its I/O number
        every = int(PROGRESS_EVERY_S * 1e9)
        report_at = now() + every
        stop = False
        while True:
            if free and not stop:
                m = min(len(free), (total - k + step - 1) // step) if k < total else 0
                if m:
                    batch = free[-m:]
                    del free[-m:]
                    for i, s in enumerate(batch, 1):
                        sqe = sqes[s]
                        prep(sqe, fd, read_iov[s], s, base + order[k % nblocks] * bs)
                        put(ring, sqe)
                        k_sub[s] = k
                        k += step
                        t_sub[s] = now()
                        if not i % SUBMIT_BATCH:
                            submit(ring)
            if len(free) == n:
                break
            submit_wait(ring, 1)
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
                    advance(ring, got)
                    raise self._failed(lib, ring, io, k_sub[s], "read", res, n - len(free) - 1)
                lat_add(t1 - t_sub[s])
                end_add(t1)
                free_add(s)
            advance(ring, got)
            if t1 >= deadline:
                stop = True
            if tick is not None and t1 >= report_at:
                report_at = t1 + every
                tick(len(lat))

    def _mixed(self, lib: Any, ring: Any, fixed: bool, io: LoopIO, slots: Sequence[Slot],
               views: list[list[memoryview]], read_iov: list[Any], write_iov: list[list[Any]],
               tick: Tick | None) -> None:
        job = io.job
        bs, nblocks, fd, base, order, kinds = job.bs_bytes, io.nblocks, io.fd, io.base, io.order, io.kinds
        k, step, total, deadline = io.first, io.step, io.total, io.deadline
        n, nk, npool, run_id, written = len(slots), len(kinds), io.npool, io.run_id, io.written
        crcs = [s.crcs for s in slots]
        verify = crcs[0] is not None
        put, submit, submit_wait = lib.put_sqe, lib.io_uring_submit, lib.io_uring_submit_and_wait
        prep_read, prep_write = _preps(lib, fixed)
        sqes = _slot_sqes(lib, n)
        it_init, it_next, advance = lib.io_uring_cqe_iter_init, lib.io_uring_cqe_iter_next, lib.io_uring_cq_advance
        now = time.perf_counter_ns
        stamp = SEQ_STAMP.pack_into
        cqe = lib.Cqe()
        rec = slots[0]
        r_lat, r_end = rec.lat["read"].append, rec.ends["read"].append
        w_lat, w_end = rec.lat["write"].append, rec.ends["write"].append
        free = list(range(n))
        free_add = free.append
        t_sub = [0] * n
        k_sub = [0] * n
        every = int(PROGRESS_EVERY_S * 1e9)
        report_at = now() + every
        stop = False
        while True:
            if free and not stop:
                m = min(len(free), (total - k + step - 1) // step) if k < total else 0
                if m:
                    batch = free[-m:]
                    del free[-m:]
                    for i, s in enumerate(batch, 1):
                        blk = order[k % nblocks]
                        sqe = sqes[s]
                        if kinds[k % nk]:
                            prep_read(sqe, fd, read_iov[s], s, base + blk * bs)
                        else:
                            j = k % npool
                            if verify:
                                stamp_block(views[s][j], crcs[s][j], blk * bs, k, run_id)
                            else:
                                stamp(views[s][j], 0, run_id, k)
                            prep_write(sqe, fd, write_iov[s][j], s, base + blk * bs)
                        put(ring, sqe)
                        k_sub[s] = k
                        k += step
                        t_sub[s] = now()
                        if not i % SUBMIT_BATCH:
                            submit(ring)
            if len(free) == n:
                break
            submit_wait(ring, 1)
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
                    advance(ring, got)
                    raise self._failed(lib, ring, io, kk, "read" if kinds[kk % nk] else "write", res,
                                       n - len(free) - 1)
                if kinds[kk % nk]:
                    r_lat(t1 - t_sub[s])
                    r_end(t1)
                else:
                    w_lat(t1 - t_sub[s])
                    w_end(t1)
                    if written is not None:
                        written[order[kk % nblocks]] = 1
                free_add(s)
            advance(ring, got)
            if t1 >= deadline:
                stop = True
            if tick is not None and t1 >= report_at:
                report_at = t1 + every
                tick(rec.done())
