"""Run a scenario's protocol over its built stack and make a RunRecord."""
from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Callable, Iterator

from . import __version__
from .records import Row, RunRecord
from .runner import Context, WallProgress
from .scenarios import Built, Scenario
from .errors import ConfigError
from .fs.fat import plan_volume, volume_capacity_bytes
from .fs.littlefs import check_geometry
from .workloads import espidf, fstests, p2, rawseq, usbmsc

def _run_p2(sc: Scenario, b: Built, ctx: Context) -> Iterator[Row]:
    return p2.run(_sd(sc, b), lambda: b.target.make_fs("sd_fatfs"), sc.p2, ctx, seed=sc.seed)


#: protocol name -> (rows generator, number of timed calls)
PROTOCOL_RUNNERS: dict[str, tuple[Callable[[Scenario, Built, Context], Iterator[Row]], Callable[[Scenario], int]]] = {
    "espidf": (lambda sc, b, ctx: espidf.run(b.target, sc.espidf, ctx, seed=sc.seed),
               lambda sc: sc.espidf.timed_calls()),
    "p2": (_run_p2, lambda sc: 8 * sc.p2.runs),
    "raw": (lambda sc, b, ctx: rawseq.run(_sd(sc, b), sc.raw_seq, ctx, seed=sc.seed),
            lambda sc: 2 * sc.raw_seq.passes * (sc.raw_seq.total_bytes // sc.raw_seq.chunk_bytes)),
    "fs_tests": (fstests.run, fstests.timed_calls),
    "usbmsc": (usbmsc.run, usbmsc.timed_calls),
}


def _sd(sc: Scenario, b: Built):
    if b.target.sd_device is None:
        raise ConfigError(f"scenario {sc.name}: protocol {sc.protocol} needs an [sd] device")
    return b.target.sd_device


# ---- pre-flight: after the stack is built, before the first timed call ------------------------------------
# Each check refuses (ConfigError naming the option, the value and the capacity) what the protocol could not
# do on this stack: sizes beyond the device, filesystem configurations its device cannot hold.  Checks read
# configurations and geometries only: no device I/O, so no simulated time passes.

def fs_capacity(sc: Scenario, b: Built) -> Callable[[str], int | None]:
    """part -> bytes of file data its filesystem holds at most, after checking its configuration against its
    device (ConfigError naming the option); None for a part whose filesystem cannot be sized (a directory)."""
    flash = next((d for d in b.devices if hasattr(d, "check_part")), None)

    def capacity(part: str) -> int | None:
        dev = b.target.sd_device
        if part == "sd_fatfs" and dev is not None:
            return volume_capacity_bytes(plan_volume(dev.geometry, sc.sd_fat, where="sd_fat"))
        if part == "sd_littlefs" and dev is not None:
            cfg = sc.sd_littlefs
            blocks = check_geometry(cfg, dev.geometry, where="sd_littlefs")
            return (blocks - 2) * cfg.block_size  # the superblock pair holds no file data
        if flash is not None:
            return flash.check_part(part)  # type: ignore[attr-defined]
        return None

    return capacity


def _preflight_p2(sc: Scenario, b: Built) -> None:
    dev = _sd(sc, b)
    if not hasattr(dev, "initialise"):
        raise ConfigError("the P2 protocol needs a simulated SD card (media = \"sim\")")
    lay = plan_volume(dev.geometry, sc.sd_fat, where="sd_fat")
    p2.preflight(dev, sc.p2, lay.cluster_bytes, lay.cluster_count - (1 if lay.fat_type == 32 else 0))


#: protocol name -> pre-flight check(scenario, built stack)
PREFLIGHT: dict[str, Callable[[Scenario, Built], None]] = {
    "espidf": lambda sc, b: espidf.preflight(b.target, sc.espidf, fs_capacity(sc, b)),
    "p2": _preflight_p2,
    "raw": lambda sc, b: rawseq.preflight(_sd(sc, b), sc.raw_seq),
    "fs_tests": fstests.preflight,
    "usbmsc": usbmsc.preflight,
}


#: the field ``--runs`` sets, per protocol
RUNS_OVERRIDE = {"espidf": "espidf.runs", "p2": "p2.runs", "raw": "raw.passes", "fs_tests": "fs_tests.repeats",
                 "usbmsc": "usbmsc.passes"}

UNSTABLE_CV = 0.10  # coefficient of variation above which a wall-clock row is flagged


def stability_warnings(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        if r.runs >= 2 and r.time_ms > 0 and r.time_ms_stdev / r.time_ms > UNSTABLE_CV:
            out.append(f"{r.label}: unstable (stdev {r.time_ms_stdev / r.time_ms:.0%} of the mean over {r.runs} "
                       "runs); use more runs or a quieter machine")
    return out


def run_scenario(sc: Scenario, *, progress: bool = False, listeners: tuple = (),
                 on_row: Callable[[Row], None] | None = None,
                 on_built: Callable[[Built], None] | None = None) -> RunRecord:
    built = sc.build()
    try:
        # refuse what cannot fit before the run begins (before on_built, so a refused run is never stored)
        PREFLIGHT[sc.protocol](sc, built)
    except BaseException:
        built.close()
        raise
    if on_built is not None:
        on_built(built)
    try:
        gen, count = PROTOCOL_RUNNERS[sc.protocol]
        bar = WallProgress(count(sc), sc.name, enabled=progress)
        ctx = Context(built.clock, tuple(listeners), bar)
        rows: list[Row] = []
        try:
            for row in gen(sc, built, ctx):
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        finally:
            bar.close()
    finally:
        built.close()
    simulated = built.clock.kind == "virtual"
    warnings = [] if simulated else stability_warnings(rows)
    extra = {}
    if sc.protocol == "p2":
        bus = built.stack.get("sd", {}).get("bus", {})
        extra["p2_summary"] = p2.summary(rows, float(bus.get("clock_hz", 25_000_000)))
    extra.update(built.metadata)
    meta = {"sdbench_version": __version__, "host": platform.node(), "python": platform.python_version(),
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **extra}
    if simulated:
        meta.pop("created_utc")  # simulated records are byte-identical for the same scenario and seed
        meta.pop("host")
        meta.pop("python")
    return RunRecord(scenario=sc.name, stack=built.stack, clock=built.clock.kind, rows=tuple(rows), seed=sc.seed,
                     protocol=sc.protocol, source="simulated" if simulated else "measured", metadata=meta,
                     warnings=tuple(warnings))
