"""A reference Python loop timed beside each measurement, so that figures do not depend on the machine's load.

A benchmark times its work and this loop right before and right after it; the work's *normalised* time is its
wall-clock time times :data:`REFERENCE_S` over the loop's time in the same run: what the work would take on the
machine the reference was taken on, idle.  On a loaded machine both slow down alike, so the normalised figure
stays; a target stated in normalised seconds is a ratio measured in the same run.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: the loop's time on the reference machine, idle: a 2-CPU x86-64 machine of this project's CI kind, Python 3.11,
#: the median of nine passes at a load average of 0.5 (0.17-0.21 s)
REFERENCE_S = 0.19


def reference_loop() -> float:
    """Seconds of a fixed pure-Python workload: dict updates and integer arithmetic, as the simulator's hot
    loops are."""
    t0 = time.perf_counter()
    d: dict[int, int] = {}
    for i in range(2_000_000):
        k = i & 1023
        d[k] = d.get(k, 0) + i
    return time.perf_counter() - t0


def timed(fn: Callable[[], Any], repeats: int = 2) -> tuple[float, float, Any]:
    """(best wall s, its normalised s, the last result) over ``repeats`` runs of ``fn``, each between two
    reference loops."""
    best = (float("inf"), float("inf"))
    out = None
    for _ in range(repeats):
        before = reference_loop()
        t0 = time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t0
        ref = (before + reference_loop()) / 2
        norm = wall * REFERENCE_S / ref
        if norm < best[1]:
            best = (wall, norm)
    return best[0], best[1], out
