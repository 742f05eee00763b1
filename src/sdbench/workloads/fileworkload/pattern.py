"""The data a workload writes and checks: deterministic from the scenario's seed, different for every write,
block and 256-byte piece, so a read of the wrong data never passes :func:`compare`."""
from __future__ import annotations

import random
import struct

from ...errors import SdbenchError

_BLOCK = 4096
_STAMP = 256


class Pattern:
    """File data from the scenario's seed: 4 KiB blocks of seeded random bytes, each 256-byte piece stamped
    with (generation, block, piece), so data from another write, block or file never passes the check."""

    def __init__(self, seed: int) -> None:
        self.base = random.Random(f"sdbench-workload:{seed}").randbytes(_BLOCK)

    def block(self, gen: int, k: int) -> bytes:
        b = bytearray(self.base)
        for j in range(0, _BLOCK, _STAMP):
            b[j:j + 12] = struct.pack("<QI", gen ^ (j << 48), k)
        return bytes(b)

    def data(self, gen: int, offset: int, n: int) -> bytes:
        """Bytes ``offset`` .. ``offset + n`` of generation ``gen``'s stream."""
        if n <= 0:
            return b""
        first, last = offset // _BLOCK, (offset + n - 1) // _BLOCK
        buf = b"".join(self.block(gen, k) for k in range(first, last + 1))
        start = offset - first * _BLOCK
        return buf[start:start + n]

    def content(self, segs: list[tuple[int, int]], offset: int = 0, n: int | None = None) -> bytes:
        """What a file of ``segs`` holds from ``offset`` (``n`` bytes, or to its end)."""
        out, pos = [], 0
        end = sum(m for _, m in segs) if n is None else offset + n
        for gen, m in segs:
            a, b = max(offset, pos), min(end, pos + m)
            if a < b:
                out.append(self.data(gen, a - pos, b - a))
            pos += m
        return b"".join(out)


class DataMismatch(SdbenchError):
    """A read gave back other data than the workload wrote."""


def compare(got: bytes, want: bytes, path: str, offset: int, where: str) -> None:
    """DataMismatch naming the step (``where``), the file and the first differing byte, unless ``got == want``."""
    if got == want:
        return
    n = min(len(got), len(want))
    first = next((j for j in range(n) if got[j] != want[j]), n)
    if first == n:
        raise DataMismatch(f"{where}: {path}: read {len(got)} B from byte {offset}, expected {len(want)} B")
    raise DataMismatch(f"{where}: {path}: data differ from what was written at byte {offset + first} "
                       f"(got {got[first:first + 8].hex()}, expected {want[first:first + 8].hex()})")
