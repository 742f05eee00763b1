"""How long the simulator takes (wall clock) to simulate 100 runs of ESP-IDF's SPI flash raw test.

The stack is NOR chip + esp_flash driver + wear levelling on a 2 MiB partition of a 4 MB chip:
100 x wl_write(0, 64 KiB) then 100 x wl_read(0, 64 KiB).  Target: at most 10 s.
"""
from __future__ import annotations

import time

from sdbench.media.sim.esp_flash_raw import run_spiflash_raw

RUNS = 100
TARGET_S = 10.0


def run() -> str:
    t0 = time.perf_counter()
    r = run_spiflash_raw(None, RUNS)
    wall_s = time.perf_counter() - t0
    write_ms = sum(r.write_ms) / RUNS
    read_ms = sum(r.read_ms) / RUNS
    sim_s = (sum(r.write_ms) + sum(r.read_ms)) / 1e3
    cmds = {k: r.write_commands.get(k, 0) + r.read_commands.get(k, 0)
            for k in {*r.write_commands, *r.read_commands}}
    lines = [
        "## Flash simulation speed (SPI flash raw, 100 runs)",
        "",
        "| what | value |",
        "|---|---|",
        f"| wall clock to simulate | {wall_s:.2f} s (target <= {TARGET_S:.0f} s: "
        f"{'ok' if wall_s <= TARGET_S else 'SLOW'}) |",
        f"| simulated time of the timed calls | {sim_s:.2f} s |",
        f"| simulated 'SPI Flash raw write' mean | {write_ms:.3f} ms |",
        f"| simulated 'SPI Flash raw read' mean | {read_ms:.3f} ms |",
        f"| page programs / read commands / status reads | {cmds.get('PP', 0)} / {cmds.get('READ', 0)} / "
        f"{cmds.get('RDSR', 0)} |",
        f"| flash commands simulated per wall second | "
        f"{sum(cmds.values()) / wall_s:,.0f} |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
