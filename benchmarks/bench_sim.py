"""Simulation speed of the ESP-IDF protocol on the simulated targets, 100 runs per row.

Targets: each half (the SD half: raw, FAT and LittleFS in both modes on the simulated ESP32 SDMMC target;
the flash half: raw, FAT, SPIFFS, LittleFS on the simulated ESP32 SPI flash target) in at most 10 s wall,
and the whole protocol (both halves) in at most 5 s: >= 500x faster than the board, whose run takes about
49 minutes.  Each half is timed three times; the best counts (the machine's other load only slows down).
"""
from __future__ import annotations

import time

from sdbench.protocols import run_scenario
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


def run() -> str:
    lines = ["## Simulation speed: ESP-IDF perf_benchmark at 100 runs", "",
             "| scenario | rows | wall s | target | simulated s (timed calls) | commands in timed calls |",
             "|---|---:|---:|---|---:|---:|"]
    total = 0.0
    for name in ("espidf-esp32-sdmmc4-40mhz", "espidf-esp32-spiflash"):
        wall, sim_s, rows, cmds = _time(name)
        total += wall
        verdict = "ok" if wall <= TARGET_S else "SLOW"
        lines.append(f"| {name} | {rows} | {wall:.2f} | <= {TARGET_S:.0f} s: {verdict} | {sim_s:.1f} | {cmds:,} |")
    verdict = "ok" if total <= TOTAL_TARGET_S else "SLOW"
    lines += ["", f"Whole protocol (both halves): **{total:.2f} s** wall, {BOARD_S / total:,.0f}x faster than the "
                  f"board's run of about 49 minutes (target <= {TOTAL_TARGET_S:.0f} s: {verdict}).", ""]
    return "\n".join(lines)
