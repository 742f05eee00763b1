"""Simulation speed: the ESP-IDF protocol with ranges, validate, calibrate and the power-loss matrices.

Every figure is wall-clock seconds and the same normalised to the reference loop timed beside it
(benchmarks/reference.py), with its target and the baseline the project had before its cost ledger and
re-pricing (the same measurement, normalised the same way).  Targets:

* the whole ESP-IDF perf_benchmark protocol (SD and flash halves, 100 runs) with the ranges every simulated
  row carries: <= 5 s normalised, both halves one after the other in one process (baseline 14.3 s); side by
  side in two processes, as `sdbench run SD FLASH` runs them, is shown too;
* `sdbench validate` (every scenario of the measurement data, with ranges), the scenarios in one process per
  CPU as the command runs them: <= 8 s (shown in one process too, against the baseline's 23.5 s);
* `sdbench calibrate` of every fit group, the groups in one process per CPU as the command runs them: <= 30 s
  (shown in one process too, against 504.5 s, what it took before replays folded repeated requests);
* both halves' power-loss matrices (>= 200 cuts per cell): <= 30 s together (baseline 96 s).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from reference import REFERENCE_S, reference_loop, timed

from sdbench.media.sim.nor import forget_busy_factors
from sdbench.protocols import run_scenario, run_scenarios
from sdbench.scenarios import load

HALVES = ("espidf-esp32-sdmmc4-40mhz", "espidf-esp32-spiflash")
BOARD_S = 49 * 60.0


def _first_in_process(fn):
    """``fn`` as a command's first run in its process: the NOR chips' shared busy-time streams dropped before it
    (a later run in one process finds them drawn; a command starts without them)."""
    def first() -> object:
        forget_busy_factors()
        return fn()
    return first


def _halves_serial() -> list:
    return [run_scenario(load(n, ["espidf.runs=100"]), ranges=True) for n in HALVES]


def _halves_side_by_side() -> list:
    recs = run_scenarios([load(n, ["espidf.runs=100"]) for n in HALVES], workers=os.cpu_count() or 1, ranges=True)
    for r in recs:
        if not hasattr(r, "rows"):
            raise r
    return recs


def _validate(seed_only: bool = False, workers: int = 1) -> int:
    """Rows ``sdbench validate`` gives: of every shipped measurement, or of the seed's file alone (the rows the
    baseline was measured on, before the published setups were added); the scenarios in ``workers`` processes
    (the command's default: one per CPU)."""
    from sdbench import calibrate
    from sdbench.calibrate import load_measurements
    from sdbench.calibrate.measurements import _read_measurements
    from sdbench.validation import validate_rows

    meas = load_measurements()
    if seed_only:
        seed = _read_measurements((calibrate.DATA / "measurements.csv").read_text(), "measurements.csv")
        keys = {(m.scenario, m.row) for m in seed}
        meas = [m for m in meas if (m.scenario, m.row) in keys]
    rows, _ = validate_rows(meas, workers=workers)
    return len(rows)


def _calibrate(workers: int) -> int:
    """`sdbench calibrate -o DIR` of every fit group, the groups in ``workers`` processes (the command's default:
    one per CPU)."""
    from sdbench.calibrate import fit_all, groups, load_measurements, write_results

    meas = load_measurements()
    names = list(groups())
    with tempfile.TemporaryDirectory() as tmp:
        for res in fit_all(names, meas, workers):
            write_results(res, Path(tmp))
    return len(names)


def _powerloss() -> int:
    from sdbench import powerloss as pl

    cfg = pl.WorkloadConfig(cuts=200)
    n = 0
    for scenario, fs in (("espidf-esp32-sdmmc4-40mhz", ["fat", "littlefs", "raw"]),
                         ("espidf-esp32-spiflash", ["fat", "littlefs", "spiffs", "raw"])):
        cells = pl.cells(fs, list(pl.CACHES), ["none"])
        results = pl.run_matrix(scenario, [], cells, cfg, workers=os.cpu_count() or 1)
        n += len(results)
    return n


def _row(what: str, wall: float, norm: float, target: float | None, baseline: float | None) -> str:
    verdict = "" if target is None else (f"<= {target:g} s: {'ok' if norm <= target else 'MISSED'}")
    base = "" if baseline is None else f"{baseline:g} s ({baseline / norm:.1f}x faster)"
    return f"| {what} | {wall:.2f} | {norm:.2f} | {verdict} | {base} |"


def run() -> str:
    ref = min(reference_loop() for _ in range(3))
    lines = ["## Simulation speed: protocol with ranges, validate, calibrate, power-loss", "",
             f"Reference loop: {ref:.3f} s now, {REFERENCE_S:.3f} s on the reference machine idle (normalised = "
             f"wall x {REFERENCE_S:.3f} / the loop's time beside it). Each figure is timed as a command's first "
             f"run in its process: the NOR chips' busy-time streams, which later runs in one process share, are "
             f"dropped before it.", "",
             "| measurement | wall s | normalised s | target | baseline (before) |", "|---|---:|---:|---|---|"]
    wall, norm, recs = timed(_first_in_process(_halves_serial))
    lines.append(_row("ESP-IDF protocol, both halves with ranges, one after the other", wall, norm, 5.0, 14.3))
    cmds = sum(int(round(v * r.runs)) for rec in recs for r in rec.rows for v in r.commands.values())
    wall2, norm2, _ = timed(_first_in_process(_halves_side_by_side))
    lines.append(_row(f"the same side by side ({os.cpu_count()} processes)", wall2, norm2, None, None))
    for name in HALVES:
        w, n, _ = timed(_first_in_process(lambda name=name: run_scenario(load(name, ["espidf.runs=100"]))))
        lines.append(_row(f"{name}, central run only (no ranges)", w, n, None, None))
    cpus = os.cpu_count() or 1
    w, n, rows = timed(_first_in_process(lambda: _validate(seed_only=True, workers=cpus)), repeats=1)
    lines.append(_row(f"sdbench validate, the seed's rows ({rows}, with ranges; {cpus} processes, as the command "
                      f"runs them)", w, n, 8.0, None))
    if cpus > 1:
        w, n, _ = timed(_first_in_process(lambda: _validate(seed_only=True)), repeats=1)
        lines.append(_row("the same in one process", w, n, None, 23.5))
    w, n, rows = timed(_first_in_process(lambda: _validate(workers=cpus)), repeats=1)
    lines.append(_row(f"sdbench validate, every shipped row ({rows}, with ranges; the SdFat setups replay "
                      f"5 MB files in 512-byte calls; {cpus} processes)", w, n, None, None))
    w, n, groups = timed(_first_in_process(lambda: _calibrate(cpus)), repeats=1)
    lines.append(_row(f"sdbench calibrate, every fit group ({groups}; {cpus} processes, as the command runs "
                      f"them)", w, n, 30.0, None))
    if cpus > 1:
        w, n, _ = timed(_first_in_process(lambda: _calibrate(1)), repeats=1)
        lines.append(_row("the same in one process", w, n, None, 504.5))
    w, n, cells = timed(_first_in_process(_powerloss), repeats=1)
    lines.append(_row(f"power-loss matrices, both halves ({cells} cells, 200 cuts each)", w, n, 30.0, 96.0))
    lines += ["", f"The protocol's {cmds:,} simulated commands take {BOARD_S / 60:.0f} minutes on the board; "
                  f"simulated with ranges they take {norm:.1f} s normalised ({BOARD_S / norm:,.0f}x faster).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    t = time.perf_counter()
    print(run())
    print(f"({time.perf_counter() - t:.0f} s)")
