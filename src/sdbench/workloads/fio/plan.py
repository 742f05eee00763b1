"""What a job does in each loop, whichever engine runs it: block order, read/write mix, write buffers.

Both engines draw from the same seeds, so a job visits the same blocks in the
same order with the same data on a descriptor and on a generic block device.
"""
from __future__ import annotations

import array
import struct
from collections.abc import Sequence

import numpy as np

from ...records import MIB
from .jobs import JobConfig

#: run id, sequence: stamped at the start of every written block so no two are identical (dedupe)
SEQ_STAMP = struct.Struct("<QQ")


def pool_count(bs: int) -> int:
    """Write buffers per thread: a few distinct ones, at most 1 MiB together so they stay in the CPU cache
    (fio also reuses one buffer); writes are made unique by a stamp."""
    return max(1, min(8, MIB // bs))


def pool_seed(job: JobConfig, thread: int) -> int:
    """Seed of the random data in a thread's write buffers."""
    return (job.seed * 1_000_003 + thread) & 0xFFFFFFFF


def block_order(job: JobConfig, nblocks: int, loop: int) -> Sequence[int]:
    """Blocks in the order a loop visits them: in turn, or a random permutation (each block once)."""
    if not job.random:
        return range(nblocks)
    perm = np.random.default_rng([job.seed, loop, 0x0F10]).permutation(nblocks).astype(np.int64)
    a = array.array("q")
    a.frombytes(perm.tobytes())
    return a


def op_kinds(job: JobConfig, nblocks: int, loop: int) -> bytes:
    """Per op 1 = read, 0 = write (one byte for a job that only reads or only writes)."""
    if job.rw not in ("rw", "randrw"):
        return b"\x01" if job.reads else b"\x00"
    rng = np.random.default_rng([job.seed, loop, 0x0F11])
    return (rng.random(nblocks) * 100 < job.rwmixread).astype(np.uint8).tobytes()
