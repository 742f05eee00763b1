"""Checking after the cut: the files read back against what was written and acknowledged (a cut's class), and a
FAT volume's allocation against its files (``needs_repair``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .results import CLASSES, CutResult
from .workload import Workload


def _check_files(logger: Workload, read: Callable[[int], bytes | None]) -> CutResult:
    res = CutResult(0, "clean")
    worst = 0
    for i, want, acked, written in logger.checks():
        got = read(i) or b""
        n = min(len(got), len(want))
        res.lost_bytes += max(0, written - _common_prefix(got, want[:written]))
        if got[:n] != want[:n] or len(got) > len(want):
            res.corrupted_files += 1
            worst = max(worst, CLASSES.index("corrupted"))
            res.detail = res.detail or f"file {i}: bytes that were never written at that place"
        elif len(got) < acked:
            res.lost_acknowledged_bytes += acked - len(got)
            worst = max(worst, CLASSES.index("lost_acknowledged"))
            res.detail = res.detail or f"file {i}: {len(got)} of {acked} acknowledged bytes"
        elif len(got) < written:
            worst = max(worst, CLASSES.index("lost_unacknowledged"))
    res.cls = CLASSES[worst]
    return res


def fat_entries_used(raw: bytes, fat_type: int, cluster_count: int) -> int:
    """Clusters 2..cluster_count+1 whose FAT entry is not 0 (free), from the FAT's bytes."""
    import numpy as np

    end = cluster_count + 2
    if fat_type == 12:  # 12-bit entries, two in three bytes
        b = np.frombuffer(raw[:(end * 3 + 1) // 2 + 1], dtype=np.uint8).astype(np.uint16)
        c = np.arange(2, end)
        lo = (c * 3) // 2
        v = b[lo] | (b[lo + 1] << 8)
        v = np.where(c & 1, v >> 4, v & 0xFFF)
        return int(np.count_nonzero(v))
    if fat_type == 16:
        return int(np.count_nonzero(np.frombuffer(raw[:end * 2], dtype="<u2")[2:end]))
    return int(np.count_nonzero(np.frombuffer(raw[:end * 4], dtype="<u4")[2:end] & 0x0FFFFFFF))


def fat_problems(fs: Any) -> str:
    """FAT: clusters allocated that no file holds (lost), or files holding more than is allocated: what a
    chkdsk/fsck would repair.  Empty when consistent."""
    inner = getattr(fs, "inner", fs)
    lay = inner.layout
    dev = inner.volume_device
    if lay is None:
        return ""
    raw = dev.read(lay.fat_start, lay.fat_sectors)
    used = fat_entries_used(raw, lay.fat_type, lay.cluster_count)
    held = 0
    for name in fs.listdir("/"):
        st = fs.stat("/" + name)
        held += -(-st.size // lay.cluster_bytes) if not st.is_dir else 1
    if lay.fat_type == 32:
        held += 1  # the root directory's cluster
    if used > held:
        return f"{used - held} lost cluster(s)"
    if used < held:
        return f"files hold {held - used} cluster(s) more than the FAT allocates"
    return ""


def _common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    i = 0
    while i < n:
        j = min(i + 4096, n)
        if a[i:j] != b[i:j]:
            while a[i] == b[i]:
                i += 1
            return i
        i = j
    return n


def _agreeing(data: bytes, want: bytes) -> int:
    """Length of the prefix of ``data`` that equals ``want``."""
    n = 0
    step = 512
    while n < len(data) and data[n:n + step] == want[n:n + step]:
        n += step
    return min(n, len(data))
