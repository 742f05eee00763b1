"""The I/O engines of the descriptor engine, after fio's: one small ops interface with capability flags.

An engine (:class:`IoEngineOps`) does one loop's I/O, or one process's
share of it, on a descriptor: the I/O plan, the stop rule and where the
measurements go come in a :class:`LoopIO`; the I/Os in flight are
:class:`Slot` objects, each with its page-aligned buffers and its record of
latencies and completion times, handed to the job's statistics
(:meth:`LoopIO.flush`) every :data:`FLUSH_EVERY` I/Os and at the end, so a long
job keeps no memory per I/O.  The driver (:mod:`.engine`) picks the engine,
spreads the slots over forked processes where the engine says it may
(``processes``) and turns the records into the loop's result, whichever
engine ran.

Every engine has two loops: a lean one for the common case (one block size,
one file, no pacing: :attr:`LoopIO.fast`), timed against fio in ``make
bench``, and a general one that also paces (rates, think time, flow), trims,
varies sizes and files, and goes on after the errors a job allows.

``psync`` (:class:`PsyncEngine`, here) keeps one thread per slot, each doing
synchronous ``preadv``/``pwritev``: the syscalls release the GIL, so the
device sees that many requests.  ``io_uring`` (:mod:`.uring`) queues every
slot of a process on one ring.
"""
from __future__ import annotations

import array
import enum
import errno as errno_mod
import fcntl
import itertools
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...errors import SdbenchError
from ...media.base import BlockDeviceError
from ...media.linux import BLKDISCARD, AlignedBuffer
from .buffers import WriteBuffers
from .jobs import JobConfig
from .pacing import Pacer
from .plan import KIND_NAMES, READ, SEQ_STAMP, TRIM, WRITE, PassIO
from .stats import JobStats
from .verify import stamp_block

#: queues at least this deep run their threads in several processes (PsyncEngine.processes)
PROCESS_MIN_IODEPTH = 8
#: wall seconds between progress reports
PROGRESS_EVERY_S = 0.1
#: completions a slot records before handing them to the job's statistics
FLUSH_EVERY = 1 << 15
#: I/Os the lone-thread loop takes from the plan at a time (it looks at the stop flag and errors in between)
CHUNK = 256
#: fio's numbering of directions (0 read, 1 write, 2 trim) by the plan's kind codes
FIO_DIR = {READ: 0, WRITE: 1, TRIM: 2}
#: RWF flags of preadv2/pwritev2 and of the ring's readv/writev
RWF_HIPRI, RWF_NOWAIT, RWF_ATOMIC, RWF_DONTCACHE = 0x1, 0x8, 0x40, 0x80
#: the errors fio's continue_on_error treats as non-fatal (EIO, EILSEQ)
NONFATAL = (errno_mod.EIO, errno_mod.EILSEQ)

#: progress of a loop in the calling process: I/Os completed so far
Tick = Callable[[int], None]


def lone_kind(io: "LoopIO", w: "Slot") -> str | None:
    """The direction of a depth-1 job the engines' lone loops run: plain reads, or writes without verify."""
    if io.job.rw in ("read", "randread"):
        return "read"
    if io.job.rw in ("write", "randwrite") and w.crcs is None:
        return "write"
    return None


class EngineFlags(enum.Flag):
    NONE = 0
    #: one I/O in flight per worker thread, so ``iodepth`` threads (fio's FIO_SYNCIO)
    SYNC = enum.auto()
    #: many I/Os in flight per worker: a process's slots share one submission queue
    QUEUED = enum.auto()
    #: deep queues may be spread over forked processes (``processes``)
    FORKS = enum.auto()


def _arrays() -> dict[str, array.array]:
    return {"read": array.array("q"), "write": array.array("q"), "trim": array.array("q")}


@dataclass
class Slot:
    """One I/O in flight: its buffers (``npool`` write buffers, then the read buffer), the CRC-32C registers of
    each write buffer's payload under verify, and per direction the recorded latencies and completion times
    (ns); the general loops also record each I/O's number and submission latency."""
    index: int
    bufs: AlignedBuffer
    crcs: list[list[int]] | None
    lat: dict[str, array.array] = field(default_factory=_arrays)
    ends: dict[str, array.array] = field(default_factory=_arrays)
    ks: dict[str, array.array] = field(default_factory=_arrays)
    slat: dict[str, array.array] = field(default_factory=_arrays)
    done_total: int = 0
    #: the lone-thread loop's raw record, start and end of each I/O in turn, not yet in ``lat`` and ``ends``
    stamps: array.array | None = None

    def reset(self) -> None:
        for d in (self.lat, self.ends, self.ks, self.slat):
            for k in d:
                d[k] = array.array("q")

    def done(self) -> int:
        pending = len(self.stamps) // 2 if self.stamps is not None else 0
        return self.done_total + sum(len(v) for v in self.lat.values()) + pending

    def settle(self, kind: str) -> None:
        """Move :attr:`stamps` into the ``kind`` latencies and completion times."""
        st = self.stamps
        if not st:
            return
        self.stamps = array.array("q")
        a = np.frombuffer(st, dtype=np.int64)
        self.lat[kind].frombytes((a[1::2] - a[0::2]).tobytes())
        self.ends[kind].frombytes(a[1::2].tobytes())


class Control:
    """A job's stop flag, shared with the processes it forks (and set by the run when another job's end stops
    this one, fio's exitall), and its start flag: jobs that start together begin their I/O together, once every
    one of them is set up."""

    def __init__(self) -> None:
        self.map = mmap.mmap(-1, 24)

    def stop(self) -> None:
        struct.pack_into("<q", self.map, 0, 1)

    @property
    def stopped(self) -> bool:
        return struct.unpack_from("<q", self.map, 0)[0] != 0

    def go(self, at_ns: int = 0) -> None:
        """Let the job begin; ``at_ns`` (perf_counter_ns, the same clock in every process) is when its time
        starts, so jobs let go together end together."""
        struct.pack_into("<qq", self.map, 8, 1, at_ns)

    @property
    def go_ns(self) -> int:
        return struct.unpack_from("<q", self.map, 16)[0]

    def wait_go(self) -> None:
        """Wait (polling, a fraction of a millisecond at a time) until the run says go, or stop."""
        while not struct.unpack_from("<q", self.map, 8)[0] and not self.stopped:
            time.sleep(0.0002)


@dataclass
class LoopIO:
    """One loop's I/O as an engine sees it.  I/O number ``k`` is I/O ``k % len(plan)`` of the pass
    :attr:`plan` (a pass repeats for I/Os beyond it); an engine takes the numbers ``first, first + step, ...``
    below ``total`` and starts none after ``deadline[0]`` (``perf_counter_ns``, a list so a watcher can move
    it)."""
    job: JobConfig
    fd: int
    plan: PassIO
    npool: int
    run_id: int
    total: int
    deadline: list[int]
    written: bytearray | None    # blocks written, for verify
    flush: Callable[[Slot], None] = lambda s: None
    first: int = 0
    step: int = 1
    fast: bool = True
    fds: Sequence[int] = ()
    buffers: WriteBuffers | None = None
    pacer: Pacer | None = None
    control: Control | None = None
    region: int = 0
    base: int = 0
    rw_flags: int = 0
    depth: Callable[[], int] | None = None
    stats: JobStats | None = None
    monitor: Any = None
    read_check: Any = None
    backlog: Any = None
    prios: list[int] | None = None
    errors: list[BaseException] = field(default_factory=list)
    #: the I/O's plan entry in one lookup: (offset, size, kind code, fd)
    _sizes: Any = None

    @property
    def block(self) -> int:
        return self.plan.size or self.job.max_bs


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


def tolerated(job: JobConfig, kind: int, err: int) -> bool:
    """Whether the job goes on after an I/O of ``kind`` failed with ``err`` (fio's continue_on_error and
    ignore_error)."""
    ignore = job.ignore_read_errors if kind == READ else job.ignore_write_errors
    if err in ignore:
        return True
    coe = job.continue_on_error
    if err not in NONFATAL:
        return False
    return coe == "all" or coe == "io" or (coe == "read" and kind == READ) or (coe == "write" and kind != READ)


def trim_range(fd: int, off: int, size: int, is_block: bool) -> None:
    """Trim (discard) ``size`` bytes at ``off``: BLKDISCARD on a block device, a punched hole in a file."""
    if is_block:
        fcntl.ioctl(fd, BLKDISCARD, struct.pack("QQ", off, size))
        return
    libc = _libc()
    falloc_fl_keep_size, falloc_fl_punch_hole = 0x01, 0x02
    if libc.fallocate(fd, falloc_fl_keep_size | falloc_fl_punch_hole, off, size) != 0:
        import ctypes

        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
        _LIBC = lib
    return _LIBC


def is_block_fd(fd: int) -> bool:
    import stat

    return stat.S_ISBLK(os.fstat(fd).st_mode)


def flush_into(stats: JobStats, lock: threading.Lock | None, plan: PassIO, base: int, job: JobConfig,
               slot: Slot, prios: list[int] | None = None) -> None:
    """Hand a slot's records to ``stats`` (under ``lock`` when threads share it) and start the slot afresh."""
    for kind in ("read", "write", "trim"):
        lat = slot.lat[kind]
        if not len(lat):
            continue
        lat_np = np.frombuffer(lat, dtype=np.int64).copy()
        ends_np = np.frombuffer(slot.ends[kind], dtype=np.int64).copy()
        ks = slot.ks[kind]
        sl = slot.slat[kind]
        slat_np = np.frombuffer(sl, dtype=np.int64).copy() if len(sl) == len(lat) else None
        sizes: np.ndarray | int = plan.size or job.bs_for(kind)
        offsets = prio = None
        if len(ks) == len(lat):
            idx = np.frombuffer(ks, dtype=np.int64) % len(plan)
            if plan.sizes is not None:
                sizes = np.frombuffer(plan.sizes, dtype=np.int64)[idx]
            offsets = np.frombuffer(plan.offs, dtype=np.int64)[idx] - base
            if prios is not None:
                p = np.asarray(prios, dtype=np.int64)[idx]
                prio = p if job.log_prio else (p >> 13 == 1).astype(np.int64)
        if lock is not None:
            with lock:
                stats.add(kind, lat_np, ends_np, sizes, slat=slat_np, offsets=offsets, prio=prio)
        else:
            stats.add(kind, lat_np, ends_np, sizes, slat=slat_np, offsets=offsets, prio=prio)
        slot.done_total += len(lat)
    slot.reset()


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
        work = self._work if io.fast else self._general
        if io.fast and len(slots) == 1 and lone_kind(io, slots[0]):
            work = self._lone
        threads = [threading.Thread(target=work, name=f"sdbench-io-{s.index}",
                                    args=(io, s, counter, errors), daemon=True) for s in slots]
        for t in threads:
            t.start()
        # this thread only watches: wakes ten times a second for the progress bar and a stop from outside
        while True:
            alive = [t for t in threads if t.is_alive()]
            if not alive:
                break
            alive[0].join(PROGRESS_EVERY_S)
            if io.control is not None and io.control.stopped:
                io.deadline[0] = 0
            if tick is not None:
                tick(sum(s.done() for s in slots))
        if errors:
            raise io_failed(io.job, errors[0])

    # The one thread of a depth-1 job: the leanest loop, as close to fio's per-I/O cost as Python gets.  It takes
    # the plan CHUNK offsets at a time (no shared counter: nobody else takes I/O numbers), records the two clock
    # readings of each I/O as they are and works out latencies when it hands them on, and reads the stop flag
    # (``deadline``) and other threads' errors between chunks.  Reads and writes have a loop each, alike on
    # purpose: one loop branching on the direction costs every I/O a test.
    @staticmethod
    def _lone(io: LoopIO, w: Slot, counter: itertools.count, errors: list[BaseException]) -> None:
        kind = lone_kind(io, w)
        plan = io.plan
        bs, n, total, dl, step = plan.size, len(plan), io.total, io.deadline, io.step
        fd, offs, npool, run_id = io.fd, plan.offs, io.npool, io.run_id
        now = time.perf_counter_ns
        preadv, pwritev = os.preadv, os.pwritev
        iovs = [w.bufs.iov(bs, j * bs) for j in range(npool)]
        read_iov = w.bufs.iov(bs, npool * bs)
        views = [iov[0] for iov in iovs] + read_iov
        stamp = SEQ_STAMP.pack_into
        w.stamps = array.array("q")
        put = w.stamps.append
        k, off = io.first, 0
        try:
            while k < total and not errors:
                i = k % n
                m = min(CHUNK, -(-(n - i) // step), -(-(total - k) // step))
                chunk = offs[i:i + m * step:step]
                if kind == "read":
                    for off in chunk:
                        t0 = now()
                        got = preadv(fd, read_iov, off)
                        t1 = now()
                        if got != bs:
                            raise BlockDeviceError(f"short read at byte {off} ({got} of {bs} B)")
                        put(t0)
                        put(t1)
                        if t1 >= dl[0]:  # read each time: a stop sets it to 0 (a slow card's chunk takes seconds)
                            return
                else:
                    for kk, off in zip(range(k, k + m * step, step), chunk):
                        j = kk % npool
                        stamp(views[j], 0, run_id, kk)
                        t0 = now()
                        got = pwritev(fd, iovs[j], off)
                        t1 = now()
                        if got != bs:
                            raise BlockDeviceError(f"short write at byte {off} ({got} of {bs} B)")
                        put(t0)
                        put(t1)
                        if t1 >= dl[0]:
                            return
                k += m * step
                if len(w.stamps) >= 2 * FLUSH_EVERY:
                    w.settle(kind)
                    io.flush(w)
                    put = w.stamps.append
        except OSError as e:
            errors.append(BlockDeviceError(f"job {io.job.name}: I/O at byte {off} failed: {e.strerror}"))
        except BaseException as e:  # noqa: BLE001 - reported by the watching thread
            errors.append(e)
        finally:
            w.settle(kind)
            w.stamps = None
            io.flush(w)
            for v in views:
                v.release()

    # One thread per in-flight I/O.  Keep this loop lean: locals only, no allocation per op.
    @staticmethod
    def _work(io: LoopIO, w: Slot, counter: itertools.count, errors: list[BaseException]) -> None:
        job = io.job
        plan = io.plan
        bs, n, nk, total, dl = plan.size, len(plan), len(plan.kinds), io.total, io.deadline
        fd, offs, kinds = io.fd, plan.offs, plan.kinds
        nxt = counter.__next__
        now = time.perf_counter_ns
        preadv, pwritev = os.preadv, os.pwritev
        npool = io.npool
        iovs = [w.bufs.iov(bs, j * bs) for j in range(npool)]
        read_iov = w.bufs.iov(bs, npool * bs)
        views = [iov[0] for iov in iovs] + read_iov
        written = io.written
        crcs = w.crcs
        run_id = io.run_id
        base = io.base
        stamp = SEQ_STAMP.pack_into
        flush = io.flush
        off = 0
        left = FLUSH_EVERY

        def appends() -> tuple[Any, Any, Any, Any]:
            return w.lat["read"].append, w.ends["read"].append, w.lat["write"].append, w.ends["write"].append
        r_lat, r_end, w_lat, w_end = appends()
        try:
            # the common cases get their own loops: fewer branches and lookups per I/O
            if job.rw in ("read", "randread"):
                while not errors:
                    k = nxt()
                    if k >= total:
                        break
                    off = offs[k % n]
                    t0 = now()
                    got = preadv(fd, read_iov, off)
                    t1 = now()
                    if got != bs:
                        raise BlockDeviceError(f"short read at byte {off} ({got} of {bs} B)")
                    r_lat(t1 - t0)
                    r_end(t1)
                    if t1 >= dl[0]:
                        break
                    left -= 1
                    if not left:
                        flush(w)
                        r_lat, r_end, w_lat, w_end = appends()
                        left = FLUSH_EVERY
                return
            if job.rw in ("write", "randwrite") and crcs is None:
                while not errors:
                    k = nxt()
                    if k >= total:
                        break
                    off = offs[k % n]
                    j = k % npool
                    stamp(views[j], 0, run_id, k)
                    t0 = now()
                    got = pwritev(fd, iovs[j], off)
                    t1 = now()
                    if got != bs:
                        raise BlockDeviceError(f"short write at byte {off} ({got} of {bs} B)")
                    w_lat(t1 - t0)
                    w_end(t1)
                    if t1 >= dl[0]:
                        break
                    left -= 1
                    if not left:
                        flush(w)
                        r_lat, r_end, w_lat, w_end = appends()
                        left = FLUSH_EVERY
                return
            while not errors:
                k = nxt()
                if k >= total:
                    break
                i = k % n
                off = offs[i]
                if kinds[k % nk]:
                    t0 = now()
                    got = preadv(fd, read_iov, off)
                    t1 = now()
                    if got != bs:
                        raise BlockDeviceError(f"short read at byte {off} ({got} of {bs} B)")
                    r_lat(t1 - t0)
                    r_end(t1)
                else:
                    j = k % npool
                    if crcs is not None:
                        stamp_block(views[j], crcs[j][0], off - base, k, run_id)
                    else:
                        stamp(views[j], 0, run_id, k)
                    t0 = now()
                    got = pwritev(fd, iovs[j], off)
                    t1 = now()
                    if got != bs:
                        raise BlockDeviceError(f"short write at byte {off} ({got} of {bs} B)")
                    w_lat(t1 - t0)
                    w_end(t1)
                    if written is not None:
                        written[(off - base) // bs] = 1
                if t1 >= dl[0]:
                    break
                left -= 1
                if not left:
                    flush(w)
                    r_lat, r_end, w_lat, w_end = appends()
                    left = FLUSH_EVERY
        except OSError as e:
            errors.append(BlockDeviceError(f"job {job.name}: I/O at byte {off} failed: {e.strerror}"))
        except BaseException as e:  # noqa: BLE001 - reported by the watching thread
            errors.append(e)
        finally:
            flush(w)
            for v in views:
                v.release()

    @staticmethod
    def _general(io: LoopIO, w: Slot, counter: itertools.count, errors: list[BaseException]) -> None:
        """One thread's I/O with everything a job may ask for (see the module docstring)."""
        try:
            run_sync(io, w, counter.__next__, errors, DescriptorIO(io, w))
        except BaseException as e:  # noqa: BLE001 - reported by the watching thread
            errors.append(e)
        finally:
            io.flush(w)


class DescriptorIO:
    """Synchronous I/O on the job's descriptor(s) for :func:`run_sync`: preadv2/pwritev2 (with the job's RWF
    flags), trims by BLKDISCARD or punched holes."""

    def __init__(self, io: LoopIO, slot: Slot) -> None:
        self.io = io
        self.slot = slot
        self.now = time.perf_counter_ns
        big = io.block
        self.read_view = slot.bufs.view[io.npool * big:(io.npool + 1) * big]
        self.flags = io.rw_flags
        self.block_fd = {fd: is_block_fd(fd) for fd in (io.fds or (io.fd,))}
        self.preadv = os.preadv
        self.pwritev = os.pwritev

    def write_view(self, j: int, size: int) -> memoryview:
        big = self.io.block
        return self.slot.bufs.view[j * big: j * big + size]

    def read(self, fd: int, off: int, size: int) -> int:
        if self.flags:
            return self.preadv(fd, [self.read_view[:size]], off, self.flags)
        return self.preadv(fd, [self.read_view[:size]], off)

    def write(self, fd: int, view: memoryview, off: int) -> int:
        if self.flags:
            return self.pwritev(fd, [view], off, self.flags)
        return self.pwritev(fd, [view], off)

    def trim(self, fd: int, off: int, size: int) -> int:
        trim_range(fd, off, size, self.block_fd.get(fd, False))
        return size

    def sync(self, fd: int, data_only: bool) -> None:
        (os.fdatasync if data_only else os.fsync)(fd)

    def wait_until(self, t: int) -> None:
        from .pacing import sleep_wall

        sleep_wall(t)


def run_sync(io: LoopIO, w: Slot, nxt: Callable[[], int], errors: list[BaseException], dev: Any) -> None:
    """The general synchronous loop, one I/O at a time, for a psync thread or a generic block device (``dev``
    does the I/O and reads the clock)."""
    job = io.job
    plan = io.plan
    n, nk, total, dl = len(plan), len(plan.kinds), io.total, io.deadline
    offs, kinds, sizes, files = plan.offs, plan.kinds, plan.sizes, plan.files
    fixed = plan.size
    fds = io.fds or (io.fd,)
    now = dev.now
    written = io.written
    crcs = w.crcs
    buffers = io.buffers
    pacer = io.pacer
    stats = io.stats
    base, run_id, npool = io.base, io.run_id, io.npool
    bs_written = fixed or job.bs_for("write")
    fsync_every, fdatasync_every = job.fsync_every, job.fdatasync_every
    writes_since = 0
    max_lat = [x * 1000 for x in job.max_latency_us]
    mon = io.monitor
    rcheck = io.read_check
    backlog = io.backlog
    lat_a = {KIND_NAMES[c]: (w.lat[KIND_NAMES[c]].append, w.ends[KIND_NAMES[c]].append,
                             w.ks[KIND_NAMES[c]].append) for c in (READ, WRITE, TRIM)}
    left = FLUSH_EVERY
    while not errors:
        k = nxt()
        if k >= total:
            break
        i = k % n
        off = offs[i]
        size = fixed or sizes[i]  # type: ignore[index]
        kind = kinds[k % nk]
        fd = fds[files[i]] if files is not None else fds[0]
        if pacer is not None:
            pacer.before(FIO_DIR[kind], size)
        t0 = now()
        if t0 >= dl[0]:
            break
        try:
            if kind == READ:
                got = dev.read(fd, off, size)
            elif kind == WRITE:
                j = k % npool
                view = dev.write_view(j, size)
                if buffers is not None:
                    buffers.prepare(view, crcs[j] if crcs is not None else None, off - base, k)
                elif crcs is not None:
                    stamp_block(view, crcs[j][0], off - base, k, run_id)
                else:
                    SEQ_STAMP.pack_into(view, 0, run_id, k)
                got = dev.write(fd, view, off)
            else:
                got = dev.trim(fd, off, size)
            t1 = now()
        except OSError as e:
            t1 = now()
            err = e.errno or errno_mod.EIO
            if not tolerated(job, kind, err):
                raise BlockDeviceError(f"job {job.name}: {KIND_NAMES[kind]} at byte {off - base} failed: "
                                       f"{e.strerror}") from None
            if stats is not None:
                stats.error(err)
            if job.error_dump:
                import sys
                print(f"warning: job {job.name}: {KIND_NAMES[kind]} at byte {off - base} failed: {e.strerror}; "
                      f"going on (continue_on_error)", file=sys.stderr)
            continue
        if got != size:
            if kind == READ and 0 <= got < size and job.continue_on_error in ("read", "io", "all"):
                continue
            raise BlockDeviceError(f"job {job.name}: short {KIND_NAMES[kind]} at byte {off - base} ({got} of "
                                   f"{size} B)")
        if kind == READ and rcheck is not None:
            rcheck.check(dev.read_view[:size], off)
        lat = t1 - t0
        name = KIND_NAMES[kind]
        la, ea, ka = lat_a[name]
        la(lat)
        ea(t1)
        ka(k)
        if kind == WRITE:
            if written is not None:
                written[(off - base) // bs_written] = 1
            if backlog is not None:
                backlog.wrote((off - base) // bs_written)
            writes_since += 1
            if fsync_every and writes_since % fsync_every == 0:
                dev.sync(fd, False)
            elif fdatasync_every and writes_since % fdatasync_every == 0:
                dev.sync(fd, True)
        limit = max_lat[FIO_DIR[kind]]
        if limit and lat > limit:
            raise BlockDeviceError(f"job {job.name}: a {name} took {lat / 1000:.0f} µs, over max_latency "
                                   f"{limit / 1000:.0f} µs")
        if pacer is not None:
            pacer.after(FIO_DIR[kind], size, t1)
        if mon is not None:
            mon.record(size, lat)
            if mon.check(t1):
                dl[0] = 0
            if mon.lt is not None and mon.lt.reset_stats:
                mon.lt.reset_stats = False
                io.flush(w)
                if stats is not None:
                    stats.reset(t1)
        if t1 >= dl[0]:
            break
        left -= 1
        if not left:
            io.flush(w)
            lat_a = {KIND_NAMES[c]: (w.lat[KIND_NAMES[c]].append, w.ends[KIND_NAMES[c]].append,
                                     w.ks[KIND_NAMES[c]].append) for c in (READ, WRITE, TRIM)}
            left = FLUSH_EVERY


def rw_flags(job: JobConfig) -> int:
    return ((RWF_HIPRI if job.hipri else 0) | (RWF_NOWAIT if job.nowait else 0) | (RWF_ATOMIC if job.atomic else 0)
            | (RWF_DONTCACHE if job.uncached else 0))
