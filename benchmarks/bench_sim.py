"""Simulation speed of the ESP-IDF protocol on the simulated targets, 100 runs per row.

Targets: the SD half (raw, FAT and LittleFS in both modes) on the simulated ESP32
SDMMC target in at most 10 s wall; the flash half (raw, FAT, SPIFFS, LittleFS)
on the simulated ESP32 SPI flash target in at most 10 s wall.
"""
from __future__ import annotations

import time

from sdbench.protocols import run_scenario
from sdbench.scenarios import load

TARGET_S = 10.0


def _time(name: str) -> tuple[float, float, int, int]:
    sc = load(name, ["espidf.runs=100"])
    t0 = time.perf_counter()
    rec = run_scenario(sc)
    wall = time.perf_counter() - t0
    sim_s = sum(sum(r.samples_ms) for r in rec.rows) / 1e3
    commands = sum(int(round(v * r.runs)) for r in rec.rows for v in r.commands.values())
    return wall, sim_s, len(rec.rows), commands


def run() -> str:
    lines = ["## Simulation speed: ESP-IDF perf_benchmark at 100 runs", "",
             "| scenario | rows | wall s | target | simulated s (timed calls) | commands in timed calls |",
             "|---|---:|---:|---|---:|---:|"]
    for name in ("espidf-esp32-sdmmc4-40mhz", "espidf-esp32-spiflash"):
        wall, sim_s, rows, cmds = _time(name)
        verdict = "ok" if wall <= TARGET_S else "SLOW"
        lines.append(f"| {name} | {rows} | {wall:.2f} | <= {TARGET_S:.0f} s: {verdict} | {sim_s:.1f} | {cmds:,} |")
    lines.append("")
    return "\n".join(lines)
