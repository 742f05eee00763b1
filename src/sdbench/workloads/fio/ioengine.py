"""The I/O engines of the descriptor engine, after fio's: one small ops interface with capability flags.

An engine (:class:`IoEngineOps`) does one loop's I/O, or one process's
share of it, on a descriptor: the blocks, their order and the stop rule come
in a :class:`LoopIO`; the I/Os in flight are :class:`Slot` objects, each
with its page-aligned buffers and its record of latencies and completion
times.  The driver (:mod:`.engine`) picks the engine, spreads the slots over
forked processes where the engine says it may (``processes``) and turns the
records into the loop's result, whichever engine ran.

``psync`` (:class:`PsyncEngine`, here) keeps one thread per slot, each doing
synchronous ``preadv``/``pwritev``: the syscalls release the GIL, so the
device sees that many requests.  ``io_uring`` (:mod:`.uring`) queues every
slot of a process on one ring.
"""
from __future__ import annotations

import array
import enum
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ...errors import SdbenchError
from ...media.base import BlockDeviceError
from ...media.linux import AlignedBuffer
from .jobs import JobConfig
from .plan import SEQ_STAMP
from .verify import stamp_block

#: queues at least this deep run their threads in several processes (PsyncEngine.processes)
PROCESS_MIN_IODEPTH = 8
#: wall seconds between progress reports
PROGRESS_EVERY_S = 0.1

#: progress of a loop in the calling process: I/Os completed so far
Tick = Callable[[int], None]


class EngineFlags(enum.Flag):
    NONE = 0
    #: one I/O in flight per worker thread, so ``iodepth`` threads (fio's FIO_SYNCIO)
    SYNC = enum.auto()
    #: many I/Os in flight per worker: a process's slots share one submission queue
    QUEUED = enum.auto()
    #: deep queues may be spread over forked processes (``processes``)
    FORKS = enum.auto()


@dataclass
class Slot:
    """One I/O in flight: its buffers (``npool`` write buffers, then the read buffer), the CRC-32C of each write
    buffer's payload under verify, and per direction the recorded latencies and completion times (ns)."""
    index: int
    bufs: AlignedBuffer
    crcs: list[int] | None
    lat: dict[str, array.array]
    ends: dict[str, array.array]

    def reset(self) -> None:
        for d in (self.lat, self.ends):
            for k in d:
                d[k] = array.array("q")

    def done(self) -> int:
        return len(self.lat["read"]) + len(self.lat["write"])


@dataclass
class LoopIO:
    """One loop's I/O as an engine sees it.  I/O number ``k`` goes to block ``order[k % nblocks]`` and reads when
    ``kinds[k % len(kinds)]``; an engine takes the numbers ``first, first + step, ...`` below ``total`` and starts
    none after ``deadline`` (``perf_counter_ns``)."""
    job: JobConfig
    fd: int
    base: int                    # byte offset of the region in the descriptor
    nblocks: int
    npool: int                   # write buffers per slot
    run_id: int
    order: Sequence[int]
    kinds: bytes
    total: int
    deadline: int
    written: bytearray | None    # blocks written, for verify
    first: int = 0
    step: int = 1


class IoEngineOps:
    """What the driver needs of an engine.  ``run`` returns when its share is done and raises
    :class:`BlockDeviceError` (or another :class:`SdbenchError`) on a failed I/O; ``tick``, when given, is
    called at least every ``PROGRESS_EVERY_S`` while I/O completes."""
    name: ClassVar[str]
    flags: ClassVar[EngineFlags]

    def unavailable(self) -> str | None:
        """Why this engine cannot run here; None when it can."""
        return None

    def processes(self, job: JobConfig, cpus: int) -> int:
        """Processes to spread the job's slots over (1: the calling process only)."""
        return 1

    def run(self, io: LoopIO, slots: Sequence[Slot], tick: Tick | None) -> None:
        raise NotImplementedError


def io_failed(job: JobConfig, e: BaseException) -> SdbenchError:
    if isinstance(e, SdbenchError):
        return e
    return BlockDeviceError(f"job {job.name}: I/O failed: {getattr(e, 'strerror', None) or e}")


class PsyncEngine(IoEngineOps):
    name = "psync"
    flags = EngineFlags.SYNC | EngineFlags.FORKS

    def processes(self, job: JobConfig, cpus: int) -> int:
        """One process's threads share the interpreter lock between their I/Os, which caps deep queues at about
        0.75x of fio; forked processes do not share it.  Only deep queues (>= PROCESS_MIN_IODEPTH) without
        verify (its record of written blocks lives in one process)."""
        if job.iodepth < PROCESS_MIN_IODEPTH or job.verify != "none":
            return 1
        return max(1, min(cpus, job.iodepth // (PROCESS_MIN_IODEPTH // 2)))

    def run(self, io: LoopIO, slots: Sequence[Slot], tick: Tick | None) -> None:
        counter = itertools.count(io.first, io.step)
        errors: list[BaseException] = []
        threads = [threading.Thread(target=self._work, name=f"sdbench-io-{s.index}",
                                    args=(io, s, counter, errors), daemon=True) for s in slots]
        for t in threads:
            t.start()
        # this thread only watches: wakes ten times a second for the progress bar
        while True:
            alive = [t for t in threads if t.is_alive()]
            if not alive:
                break
            alive[0].join(PROGRESS_EVERY_S)
            if tick is not None:
                tick(sum(s.done() for s in slots))
        if errors:
            raise io_failed(io.job, errors[0])

    # One thread per in-flight I/O.  Keep this loop lean: locals only, no allocation per op.
    @staticmethod
    def _work(io: LoopIO, w: Slot, counter: itertools.count, errors: list[BaseException]) -> None:
        job = io.job
        bs, nblocks, nk, total, deadline = job.bs_bytes, io.nblocks, len(io.kinds), io.total, io.deadline
        fd, base, order, kinds = io.fd, io.base, io.order, io.kinds
        nxt = counter.__next__
        now = time.perf_counter_ns
        preadv, pwritev = os.preadv, os.pwritev
        npool = io.npool
        iovs = [w.bufs.iov(bs, j * bs) for j in range(npool)]
        read_iov = w.bufs.iov(bs, npool * bs)
        views = [iov[0] for iov in iovs] + read_iov
        r_lat, r_end = w.lat["read"].append, w.ends["read"].append
        w_lat, w_end = w.lat["write"].append, w.ends["write"].append
        written = io.written
        crcs = w.crcs
        run_id = io.run_id
        stamp = SEQ_STAMP.pack_into
        off = base
        try:
            # the common cases get their own loops: fewer branches and lookups per I/O
            if job.rw in ("read", "randread"):
                while not errors:
                    k = nxt()
                    if k >= total:
                        break
                    off = base + order[k % nblocks] * bs
                    t0 = now()
                    n = preadv(fd, read_iov, off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short read at byte {off} ({n} of {bs} B)")
                    r_lat(t1 - t0)
                    r_end(t1)
                    if t1 >= deadline:
                        break
                return
            if job.rw in ("write", "randwrite") and crcs is None:
                while not errors:
                    k = nxt()
                    if k >= total:
                        break
                    off = base + order[k % nblocks] * bs
                    j = k % npool
                    stamp(views[j], 0, run_id, k)
                    t0 = now()
                    n = pwritev(fd, iovs[j], off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short write at byte {off} ({n} of {bs} B)")
                    w_lat(t1 - t0)
                    w_end(t1)
                    if t1 >= deadline:
                        break
                return
            while not errors:
                k = nxt()
                if k >= total:
                    break
                blk = order[k % nblocks]
                off = base + blk * bs
                if kinds[k % nk]:
                    t0 = now()
                    n = preadv(fd, read_iov, off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short read at byte {off} ({n} of {bs} B)")
                    r_lat(t1 - t0)
                    r_end(t1)
                else:
                    j = k % npool
                    if crcs is not None:
                        stamp_block(views[j], crcs[j], blk * bs, k, run_id)
                    else:
                        stamp(views[j], 0, run_id, k)
                    t0 = now()
                    n = pwritev(fd, iovs[j], off)
                    t1 = now()
                    if n != bs:
                        raise BlockDeviceError(f"short write at byte {off} ({n} of {bs} B)")
                    w_lat(t1 - t0)
                    w_end(t1)
                    if written is not None:
                        written[blk] = 1
                if t1 >= deadline:
                    break
        except OSError as e:
            errors.append(BlockDeviceError(f"job {job.name}: I/O at byte {off} failed: {e.strerror}"))
        except BaseException as e:  # noqa: BLE001 - reported by the watching thread
            errors.append(e)
        finally:
            for v in views:
                v.release()

