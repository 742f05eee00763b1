"""Sweep throughput: the same grid of simulated runs with 1 worker and with 2 worker processes.

112 configurations of the MicroPython cached-driver test (mpy-esp32s3-sdspi, mixed workload):
filesystem x cache size x eviction policy x read-ahead.  Each is a full simulated run (format, 28 files
written and read through littlefs or FatFs, the Python driver's cache, the SPI card model), about 0.1-0.3 s
of wall clock, so process start-up and result transfer are small next to the work.  Target: a speed-up of at
least 1.7x with 2 workers on a 2-core machine.  The records of both runs must be identical.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

from sdbench.sweep import SweepSpec, run_sweep

TARGET = 1.7
REPEATS = 2
SPEC = SweepSpec(
    name="bench-mpy-grid", base="mpy-esp32s3-sdspi",
    grid=(("fs_tests.filesystems", ("fat", "littlefs")),
          ("fs_tests.cache_blocks", (1, 2, 4, 8, 16, 32, 64)),
          ("fs_tests.policies", ("lru", "lruc", "arc", "2q")),
          ("fs_tests.read_ahead", (1, 2))),
    fixed=(("fs_tests.workloads", ("mixed",)),),
    text="bench-mpy-grid")


def _strip(rec) -> dict:
    d = rec.to_dict()
    d["metadata"].pop("sweep", None)
    return d


def run() -> str:
    n = len(SPEC.configurations())
    load0 = os.getloadavg()[0]
    run_sweep(replace(SPEC, grid=(("fs_tests.filesystems", ("fat", "littlefs")),)), workers=1)  # warm-up
    times: dict[int, list[float]] = {1: [], 2: []}
    recs = {}
    for _ in range(REPEATS):  # interleaved, best of each: other processes on the machine come and go
        for w in (1, 2):
            t0 = time.perf_counter()
            recs[w] = run_sweep(SPEC, workers=w)
            times[w].append(time.perf_counter() - t0)
    t1, t2 = min(times[1]), min(times[2])
    same = [_strip(r) for r in recs[1].records] == [_strip(r) for r in recs[2].records]
    speedup = t1 / t2
    ok = speedup >= TARGET and same
    lines = [
        f"## Sweep speed-up ({n} configurations, 1 vs 2 workers)",
        "",
        f"Grid: {' x '.join(f'{k} ({len(v)})' for k, v in SPEC.grid)} over `{SPEC.base}`, "
        f"{os.cpu_count()} CPUs, load average {load0:.2f} at the start.",
        "",
        "| workers | best wall clock | per configuration | all runs |",
        "|---:|---:|---:|---|",
        f"| 1 | {t1:.2f} s | {1e3 * t1 / n:.0f} ms | {', '.join(f'{t:.2f}' for t in times[1])} s |",
        f"| 2 | {t2:.2f} s | {1e3 * t2 / n:.0f} ms | {', '.join(f'{t:.2f}' for t in times[2])} s |",
        "",
        f"Speed-up: **{speedup:.2f}x** (target >= {TARGET}x: {'ok' if speedup >= TARGET else 'MISSED'}); "
        f"records identical with 1 and 2 workers: {'yes' if same else 'NO'}.",
        "",
    ]
    if not ok and same:
        lines.append("Missed on this run: the wall clock depends on what else the machine runs "
                     "(load average above).\n")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
