"""What a job writes: the contents of its write buffers, and the stamps that make each write what it is.

Each I/O slot owns a few page-aligned write buffers (:func:`~.plan.pool_count`)
filled once before the job; a write stamps its buffer in place, never copies:

* by default random data, and (fio's ``scramble_buffers``) the run id and the
  write's number in its first 16 bytes, so no two writes are alike and a
  deduplicating device cannot skip any;
* ``verify``: instead a 32-byte trailer at the end of each block (or of each
  ``verify_interval``) -- offset, sequence, run id, CRC-32C, magic
  (:mod:`.verify`); ``verify=meta`` leaves the CRC out, ``verify=pattern``
  writes ``verify_pattern`` and no trailer;
* ``zero_buffers``, ``buffer_pattern``: zeros or the pattern, unstamped;
  ``buffer_compress_percentage``: that share of every ``buffer_compress_chunk``
  is zeros; ``dedupe_percentage``: that share of writes repeats an earlier
  write exactly (the last unique one, or one of a working set);
  ``refill_buffers``: fresh random data for every write.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from .jobs import JobConfig
from .plan import SEQ_STAMP
from .verify import TRAILER_BYTES, crc32c_rows, stamp_block

#: stamp kinds
STAMP_NONE, STAMP_SEQ, STAMP_TRAILER = 0, 1, 2


def fill_random(view: memoryview, seed: int) -> None:
    """``view`` filled with the pseudo-random bytes of ``seed`` (the same bytes for the same seed)."""
    rng = random.Random(seed)
    step = 1 << 20
    for i in range(0, len(view), step):
        n = min(step, len(view) - i)
        view[i:i + n] = rng.randbytes(n)


def pattern_bytes(hexes: str, n: int) -> bytes:
    """``hexes`` repeated over ``n`` bytes."""
    pat = bytes.fromhex(hexes)
    return (pat * (n // len(pat) + 1))[:n]


class WriteBuffers:
    """How a job's write buffers are filled and stamped (see the module docstring)."""

    def __init__(self, job: JobConfig, block: int, run_id: int, region_bytes: int) -> None:
        self.job, self.block, self.run_id = job, block, run_id
        self.interval = job.verify_interval_bytes or block
        if job.verify in ("crc32c", "meta"):
            self.stamp = STAMP_TRAILER
        elif job.verify == "pattern" or job.zero_buffers or job.buffer_pattern_hex:
            self.stamp = STAMP_NONE
        elif job.scramble_buffers or job.refill_buffers:
            self.stamp = STAMP_SEQ
        else:
            self.stamp = STAMP_NONE
        self.with_crc = job.verify == "crc32c"
        self.dedupe = job.dedupe_percentage / 100.0
        self.rng = np.random.default_rng([job.seed, 0xDED0])
        self.last_unique = 0
        self.working_set = max(1, region_bytes * job.dedupe_working_set_percentage // 100 // block)

    @property
    def plain(self) -> bool:
        """Random data with fio's stamp, or verify's CRC trailer: what the engines' fast loops write."""
        j = self.job
        return (not (j.zero_buffers or j.buffer_pattern_hex or j.refill_buffers or j.dedupe_percentage
                     or j.buffer_compress_percentage or j.verify_interval_bytes)
                and j.verify in ("none", "crc32c") and (self.stamp == STAMP_SEQ or j.verify == "crc32c"))

    def fill(self, view: memoryview, npool: int, seed: int) -> list[list[int]] | None:
        """Fill a slot's ``npool`` buffers of ``block`` bytes; returns per buffer the CRC-32C register of each
        interval's payload (verify=crc32c), else None."""
        j, b = self.job, self.block
        data = view[: npool * b]
        if j.verify == "pattern" or (j.verify == "meta" and j.verify_pattern_hex):
            data[:] = pattern_bytes(j.verify_pattern_hex, len(data))
        elif j.zero_buffers:
            data[:] = bytes(len(data))
        elif j.buffer_pattern_hex:
            data[:] = pattern_bytes(j.buffer_pattern_hex, len(data))
        else:
            fill_random(data, seed)
            if j.buffer_compress_percentage:
                chunk = j.buffer_compress_chunk_bytes
                zeros = chunk * j.buffer_compress_percentage // 100
                arr = np.frombuffer(data, dtype=np.uint8)
                for start in range(0, len(data), chunk):
                    arr[start: start + zeros] = 0
                del arr
        if not self.with_crc:
            return None
        step = self.interval
        mat = np.frombuffer(data, dtype=np.uint8).reshape(npool * (b // step), step)
        crcs = [int(c) for c in crc32c_rows(mat[:, : step - TRAILER_BYTES])]
        del mat
        per = b // step
        return [crcs[i * per:(i + 1) * per] for i in range(npool)]

    def prepare(self, view: memoryview, crcs: Sequence[int] | None, rel_off: int, seq: int) -> None:
        """Stamp one write: ``view`` is its buffer (its length the write's size), ``rel_off`` its offset in the
        region, ``seq`` its number."""
        j = self.job
        if j.refill_buffers:
            view[:] = self.rng.bytes(len(view))
        if self.stamp == STAMP_SEQ:
            if self.dedupe and self.rng.random() < self.dedupe:
                if j.dedupe_mode == "working_set":
                    key = int(self.rng.integers(0, self.working_set))
                    SEQ_STAMP.pack_into(view, 0, self.run_id ^ 0xDD, key)
                else:
                    SEQ_STAMP.pack_into(view, 0, self.run_id, self.last_unique)
                return
            SEQ_STAMP.pack_into(view, 0, self.run_id, seq)
            self.last_unique = seq
        elif self.stamp == STAMP_TRAILER:
            step = self.interval
            for i in range(len(view) // step):
                part = view[i * step:(i + 1) * step]
                crc = crcs[i] if crcs is not None else 0
                stamp_block(part, crc, rel_off + i * step, seq, self.run_id, with_crc=self.with_crc)
