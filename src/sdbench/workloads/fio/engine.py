"""The I/O engine: ``iodepth`` threads each doing synchronous ``preadv``/``pwritev``; :func:`run_job`.

The syscalls release the GIL, so the device sees that many concurrent
requests; from ``PROCESS_MIN_IODEPTH`` on, the threads are spread over forked
processes (one per CPU) so the interpreter lock between I/Os is not shared.  The hot loop uses preallocated page-aligned buffers and
preallocated iovec lists: no allocation per I/O.
"""
from __future__ import annotations

import array
import itertools
import os
import pickle
import select
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import SdbenchError
from ...media.base import BlockDeviceError
from ...media.linux import AlignedBuffer
from ...options import to_mapping
from ...records import MIB, Row, RunRecord
from .blockengine import BlockEngine, block_run_id
from .blockport import BlockPort, clock_fields
from .jobs import JobConfig
from .plan import SEQ_STAMP, block_order, op_kinds, pool_count, pool_seed
from .results import JobResult, LoopResult, job_rows
from .target import ProgressFn, Target, _fill_random, _open_port, _Port
from .verify import TRAILER_BYTES, check_blocks, crc32c_rows, stamp_block


#: queues at least this deep run in several processes (see _Engine.processes)
PROCESS_MIN_IODEPTH = 8


@dataclass
class _Worker:
    lat: dict[str, array.array]
    ends: dict[str, array.array]
    bufs: AlignedBuffer | None = None


class _Engine:
    def __init__(self, port: _Port, job: JobConfig, run_id: int) -> None:
        self.port, self.job, self.run_id = port, job, run_id
        bs = job.bs_bytes
        self.nblocks = port.length // bs
        # write buffers (several, so consecutive writes differ) + one read buffer, per thread
        self.npool = pool_count(bs) if job.writes else 0
        self.workers: list[_Worker] = []
        self.payload_crc: list[list[int]] = []
        self.written = bytearray(self.nblocks) if job.verify != "none" else None
        for t in range(job.iodepth):
            buf = AlignedBuffer(bs * (self.npool + 1))
            if job.writes:
                _fill_random(buf, pool_seed(job, t))
            if job.verify != "none":
                mat = np.frombuffer(buf.view, dtype=np.uint8)[: self.npool * bs].reshape(self.npool, bs)
                self.payload_crc.append([int(c) for c in crc32c_rows(mat[:, : bs - TRAILER_BYTES])])
            self.workers.append(_Worker({"read": array.array("q"), "write": array.array("q")},
                                        {"read": array.array("q"), "write": array.array("q")}, buf))

    def close(self) -> None:
        for w in self.workers:
            if w.bufs is not None:
                w.bufs.close()

    def _order(self, loop: int) -> Sequence[int]:
        return block_order(self.job, self.nblocks, loop)

    def _kinds(self, loop: int) -> bytes:
        return op_kinds(self.job, self.nblocks, loop)

    def processes(self) -> int:
        """Processes to spread the I/O threads over.  One process's threads share the interpreter lock between
        their I/Os, which caps deep queues at about 0.75x of fio; forked processes do not share it.  Only deep
        queues (>= PROCESS_MIN_IODEPTH) without verify (its bookkeeping lives in one process), where fork is."""
        job = self.job
        if job.iodepth < PROCESS_MIN_IODEPTH or job.verify != "none" or not hasattr(os, "fork"):
            return 1
        return max(1, min(os.cpu_count() or 1, job.iodepth // (PROCESS_MIN_IODEPTH // 2)))

    def run_loop(self, loop: int, progress: ProgressFn | None, label: str) -> LoopResult:
        job, port = self.job, self.port
        nblocks = self.nblocks
        order = self._order(loop)
        kinds = self._kinds(loop)
        total = sys.maxsize if job.time_based else nblocks
        for w in self.workers:
            for d in (w.lat, w.ends):
                for k in d:
                    d[k] = array.array("q")
        if job.reads and not port.direct:
            port.drop()
        nproc = self.processes()
        if nproc > 1:
            return self._run_loop_forked(nproc, order, kinds, total, progress, label)
        counter = itertools.count()
        errors: list[BaseException] = []
        start = time.perf_counter_ns()
        deadline = start + int(job.runtime_s * 1e9) if job.runtime_s > 0 else sys.maxsize
        threads = [threading.Thread(target=self._work, name=f"sdbench-io-{i}",
                                    args=(w, i, counter, order, kinds, total, deadline, errors), daemon=True)
                   for i, w in enumerate(self.workers)]
        for t in threads:
            t.start()
        # the main thread only watches: wakes ten times a second for the progress bar
        while True:
            alive = [t for t in threads if t.is_alive()]
            if not alive:
                break
            alive[0].join(0.1)
            if progress is not None:
                frac_t = (time.perf_counter_ns() - start) / 1e9 / job.runtime_s if job.runtime_s > 0 else 0.0
                done = sum(len(w.lat["read"]) + len(w.lat["write"]) for w in self.workers)
                frac = frac_t if job.time_based else max(done / max(total, 1), frac_t)
                progress(label, min(frac, 1.0))
        if errors:
            e = errors[0]
            if isinstance(e, SdbenchError):
                raise e
            raise BlockDeviceError(f"job {job.name}: I/O failed: {getattr(e, 'strerror', None) or e}")
        return self._end_loop(start, [w.lat for w in self.workers], [w.ends for w in self.workers])

    def _end_loop(self, start: int, lats: Sequence[Any], ends_: Sequence[Any]) -> LoopResult:
        """fdatasync a job that wrote (inside its time), then the loop's result from each thread's latencies and
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

    def _run_loop_forked(self, nproc: int, order: Sequence[int], kinds: bytes, total: int,
                         progress: ProgressFn | None, label: str) -> LoopResult:
        """The loop's threads spread over ``nproc`` forked processes: process p takes I/O numbers p, p + nproc,
        ... (the same sequence of blocks, interleaved), and sends its latencies back through a pipe."""
        job = self.job
        start = time.perf_counter_ns()
        deadline = start + int(job.runtime_s * 1e9) if job.runtime_s > 0 else sys.maxsize
        children: list[tuple[int, int]] = []
        for p in range(nproc):
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: its share of the threads, then its results, then out (no cleanup)
                code = 0
                try:
                    os.close(rfd)
                    errors: list[BaseException] = []
                    counter = itertools.count(p, nproc)
                    mine = self.workers[p::nproc]
                    threads = [threading.Thread(target=self._work, args=(w, p + i * nproc, counter, order, kinds,
                                                                          total, deadline, errors), daemon=True)
                               for i, w in enumerate(mine)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    err = str(errors[0]) if errors else ""
                    payload = pickle.dumps((err, {d: {k: b"".join(bytes(getattr(w, d)[k]) for w in mine)
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
        if failed or errors:
            raise BlockDeviceError(f"job {job.name}: I/O failed: {errors[0] if errors else failed}")
        return self._end_loop(start, [r[1]["lat"] for r in results], [r[1]["ends"] for r in results])

    # One thread per in-flight I/O.  Keep this loop lean: locals only, no allocation per op.
    def _work(self, w: _Worker, tid: int, counter: Any, order: Sequence[int], kinds: bytes, total: int,
              deadline: int, errors: list[BaseException]) -> None:
        job, port = self.job, self.port
        bs, nblocks, nk = job.bs_bytes, self.nblocks, len(kinds)
        fd, base = port.fd, port.base
        nxt = counter.__next__
        now = time.perf_counter_ns
        preadv, pwritev = os.preadv, os.pwritev
        npool = self.npool
        assert w.bufs is not None
        iovs = [w.bufs.iov(bs, j * bs) for j in range(npool)]
        read_iov = w.bufs.iov(bs, npool * bs)
        views = [iov[0] for iov in iovs] + read_iov
        r_lat, r_end = w.lat["read"].append, w.ends["read"].append
        w_lat, w_end = w.lat["write"].append, w.ends["write"].append
        written = self.written
        crcs = self.payload_crc[tid] if self.payload_crc else None
        run_id = self.run_id
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
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            for v in views:
                v.release()

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

    A LinuxBlockDevice or DirTarget runs on the threaded descriptor engine, any other BlockDevice on
    :class:`~.blockengine.BlockEngine` (one request at a time, timed on the device's clock)."""
    port = _open_port(target, job)
    engine: _Engine | BlockEngine
    if isinstance(port, BlockPort):
        engine = BlockEngine(port, job, block_run_id(port.dev, job))
    else:
        run_id = int.from_bytes(os.urandom(8), "little") >> 1  # tells this run's blocks from stale ones
        engine = _Engine(port, job, run_id)
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
    return JobResult(job, loops, verify, list(port.warnings))


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
