"""Simulation speed of the ESP-IDF protocol on the simulated targets, 100 runs per row.

Targets: each half (the SD half: raw, FAT and LittleFS in both modes on the simulated ESP32 SDMMC target;
the flash half: raw, FAT, SPIFFS, LittleFS on the simulated ESP32 SPI flash target) in at most 10 s wall in
one process, and the whole protocol (both halves, as `sdbench run SD FLASH` runs them: side by side in one
process per CPU) in at most 5 s: >= 500x faster than the board, whose run takes about 49 minutes.  Each is
timed three times; the best counts (the machine's other load only slows down).  The halves one after the
other in one process are shown too.
"""
from __future__ import annotations

import time

import os

from sdbench.protocols import run_scenario, run_scenarios
from sdbench.scenarios import load

TARGET_S = 10.0
TOTAL_TARGET_S = 5.0
BOARD_S = 49 * 60.0
REPEATS = 3


def _time(name: str) -> tuple[float, float, int, int]:
    sc = load(name, ["espidf.runs=100"])
    walls = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        rec = run_scenario(sc, ranges=False)
        walls.append(time.perf_counter() - t0)
    wall = min(walls)
    sim_s = sum(sum(r.samples_ms) for r in rec.rows) / 1e3
    commands = sum(int(round(v * r.runs)) for r in rec.rows for v in r.commands.values())
    return wall, sim_s, len(rec.rows), commands


def _time_both(names: tuple[str, ...]) -> tuple[float, int]:
    scs = [load(n, ["espidf.runs=100"]) for n in names]
    workers = os.cpu_count() or 1
    walls = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        recs = run_scenarios(scs, workers=workers)
        walls.append(time.perf_counter() - t0)
    for r in recs:
        if not hasattr(r, "rows"):
            raise r
    return min(walls), workers


def run() -> str:
    lines = ["## Simulation speed: ESP-IDF perf_benchmark at 100 runs", "",
             "| scenario | rows | wall s | target | simulated s (timed calls) | commands in timed calls |",
             "|---|---:|---:|---|---:|---:|"]
    serial = 0.0
    names = ("espidf-esp32-sdmmc4-40mhz", "espidf-esp32-spiflash")
    for name in names:
        wall, sim_s, rows, cmds = _time(name)
        serial += wall
        verdict = "ok" if wall <= TARGET_S else "SLOW"
        lines.append(f"| {name} | {rows} | {wall:.2f} | <= {TARGET_S:.0f} s: {verdict} | {sim_s:.1f} | {cmds:,} |")
    total, workers = _time_both(names)
    verdict = "ok" if total <= TOTAL_TARGET_S else "SLOW"
    lines += ["", f"Whole protocol (both halves side by side, {workers} processes, as `sdbench run` runs two "
                  f"scenarios): **{total:.2f} s** wall, {BOARD_S / total:,.0f}x faster than the board's run of about "
                  f"49 minutes (target <= {TOTAL_TARGET_S:.0f} s: {verdict}).  One after the other in one process: "
                  f"{serial:.2f} s ({BOARD_S / serial:,.0f}x).", ""]
    return "\n".join(lines)
