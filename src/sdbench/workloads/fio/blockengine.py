"""The I/O engine for a generic BlockDevice: one request at a time, timed on the device's clock.

A simulated SD bus takes one command at a time, and a BlockDevice's
``read``/``write`` return when the request is done, so requests are served in
order whatever the job's ``iodepth`` (:func:`~.blockport.open_block_port`
warns once per job).  Every op is timed with ``clock.now_ns()`` before and
after it: virtual time on a simulated card, wall time otherwise; ``runtime_s``
and ``time_based`` compare against that clock too.  Block order, read/write
mix and data come from the same seeds as the descriptor engine
(:mod:`~.plan`).  On a virtual clock the run id stamped into blocks is derived
from the job's seed and the virtual time, so a simulated run is repeatable.
"""
from __future__ import annotations

import array
import hashlib
import os
import random
import sys
import time
from typing import Any

import numpy as np

from ...media.base import BlockDevice
from ...records import MIB
from .blockport import BlockPort
from .jobs import JobConfig
from .plan import SEQ_STAMP, block_order, op_kinds, pool_count, pool_seed
from .results import LoopResult
from .target import ProgressFn
from .verify import TRAILER_BYTES, check_blocks, crc32c_rows, stamp_block

#: wall seconds between progress reports (the loop itself never waits)
_PROGRESS_EVERY_S = 0.1


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


class BlockEngine:
    def __init__(self, port: BlockPort, job: JobConfig, run_id: int) -> None:
        self.port, self.job, self.run_id = port, job, run_id
        bs = job.bs_bytes
        self.dev = port.dev
        self.nblocks = port.length // bs
        self.spb = bs // self.dev.geometry.sector_size   # sectors per block
        self.npool = pool_count(bs) if job.writes else 0
        pool = random_pool(bs * self.npool, pool_seed(job, 0)) if job.writes else bytearray()
        self.bufs = [memoryview(pool)[j * bs:(j + 1) * bs] for j in range(self.npool)]
        self.payload_crc: list[int] | None = None
        self.written = bytearray(self.nblocks) if job.verify != "none" else None
        if self.written is not None:
            mat = np.frombuffer(pool, dtype=np.uint8).reshape(self.npool, bs)
            self.payload_crc = [int(c) for c in crc32c_rows(mat[:, : bs - TRAILER_BYTES])]

    def close(self) -> None:
        for v in self.bufs:
            v.release()
        self.bufs = []

    def run_loop(self, loop: int, progress: ProgressFn | None, label: str) -> LoopResult:
        job, dev = self.job, self.dev
        bs, nblocks, spb, npool = job.bs_bytes, self.nblocks, self.spb, self.npool
        first, bufs, crcs, written, run_id = self.port.first_lba, self.bufs, self.payload_crc, self.written, self.run_id
        order, kinds = block_order(job, nblocks, loop), op_kinds(job, nblocks, loop)
        nk = len(kinds)
        total = sys.maxsize if job.time_based else nblocks
        lat = {"read": array.array("q"), "write": array.array("q")}
        ends = {"read": array.array("q"), "write": array.array("q")}
        r_lat, r_end, w_lat, w_end = lat["read"].append, ends["read"].append, lat["write"].append, ends["write"].append
        now, read, write, stamp = dev.clock.now_ns, dev.read, dev.write, SEQ_STAMP.pack_into
        start = now()
        deadline = start + int(job.runtime_s * 1e9) if job.runtime_s > 0 else sys.maxsize
        report_at = time.monotonic() + _PROGRESS_EVERY_S
        k = 0
        while k < total:
            blk = order[k % nblocks]
            lba = first + blk * spb
            if kinds[k % nk]:
                t0 = now()
                read(lba, spb)
                t1 = now()
                r_lat(t1 - t0)
                r_end(t1)
            else:
                j = k % npool
                if crcs is not None:
                    stamp_block(bufs[j], crcs[j], blk * bs, k, run_id)
                else:
                    stamp(bufs[j], 0, run_id, k)
                t0 = now()
                write(lba, bufs[j])
                t1 = now()
                w_lat(t1 - t0)
                w_end(t1)
                if written is not None:
                    written[blk] = 1
            k += 1
            if t1 >= deadline:
                break
            if job.time_based and k == nblocks and t1 == start:
                self.port.warnings.append(f"job {job.name}: the clock of {dev.kind} did not move over the "
                                          f"region; time_based stopped after one pass")
                break
            if progress is not None and not k & 63 and time.monotonic() >= report_at:
                report_at = time.monotonic() + _PROGRESS_EVERY_S
                frac_t = (t1 - start) / 1e9 / job.runtime_s if job.runtime_s > 0 else 0.0
                progress(label, min(frac_t if job.time_based else max(k / nblocks, frac_t), 1.0))
        if job.writes and job.fsync_on_end:
            dev.sync()   # the device's fdatasync: a cache writes its dirty blocks, a bridge drains
        stop = now()
        if progress is not None:
            progress(label, 1.0)
        lat_np = {kd: np.frombuffer(v, dtype=np.int64).copy() for kd, v in lat.items()}
        ends_np = {kd: np.frombuffer(v, dtype=np.int64).copy() for kd, v in ends.items()}
        return LoopResult(start, stop, {kd: int(v.size) for kd, v in lat_np.items()}, lat_np, ends_np)

    def verify(self, progress: ProgressFn | None) -> dict[str, Any]:
        """Read back every written block through the device and check its trailer (outside the job time)."""
        assert self.written is not None
        job, dev = self.job, self.dev
        bs, spb = job.bs_bytes, self.spb
        chunk_blocks = max(1, (8 * MIB) // bs)
        idx = np.nonzero(np.frombuffer(bytes(self.written), dtype=np.uint8))[0]
        bad: list[int] = []
        checked = 0
        if idx.size:
            # runs of consecutive written blocks, read in chunks
            for run in np.split(idx, np.nonzero(np.diff(idx) != 1)[0] + 1):
                first, count = int(run[0]), int(run.size)
                for pos in range(0, count, chunk_blocks):
                    n = min(chunk_blocks, count - pos)
                    data = dev.read(self.port.first_lba + (first + pos) * spb, n * spb)
                    bad += check_blocks(data, bs, (first + pos) * bs, self.run_id)
                    checked += n
                    if progress is not None:
                        progress(f"{job.name} verify", checked / idx.size)
        return {"method": "crc32c", "checked_blocks": checked, "bad_blocks": len(bad),
                "first_bad_offset_bytes": bad[0] if bad else None, "ok": not bad,
                "bad_offsets_bytes": bad[:32]}
