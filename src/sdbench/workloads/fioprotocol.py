"""fio-like jobs and the presets (CrystalDiskMark-style, A1, SdFat bench) as a protocol of `sdbench run`.

The jobs run on whatever the stack is: a real device or image, a mounted
directory, or a simulated card (on its virtual clock, e.g. behind a USB card
reader: ``[sd.bridge]``). A real device with nothing in front of it gets the
threaded descriptor engine of :mod:`sdbench.workloads.fio`; every other block
device the one-request-at-a-time engine on the stack's clock.

Scenario table ``[fio]``: ``preset`` picks jobs (``[[fio.jobs]]``, fio's
option names accepted) or a preset with ``size_bytes``, ``loops``,
``runtime_s`` and ``mode``.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError
from ..options import from_mapping, opt
from ..records import MIB, Row
from ..runner import Context
from . import fio as fiomod

PRESETS = ("jobs", "cdm", "a1", "sdfat")


def _default_jobs() -> tuple[fiomod.JobConfig, ...]:
    return (fiomod.JobConfig(name="seq-write", rw="write", bs_bytes=MIB, size_bytes=16 * MIB),
            fiomod.JobConfig(name="seq-read", rw="read", bs_bytes=MIB, size_bytes=16 * MIB),
            fiomod.JobConfig(name="rand-4k-read", rw="randread", bs_bytes=4096, size_bytes=16 * MIB,
                             runtime_s=2.0))


@dataclass(frozen=True)
class FioProtocolConfig:
    """Options of the fio protocol (table ``[fio]``; jobs in ``[[fio.jobs]]``)."""

    preset: str = opt("jobs", choices=PRESETS,
                      help="jobs: the [[fio.jobs]] list in turn; cdm: CrystalDiskMark-style; a1: the A1 sniff "
                           "test; sdfat: SdFat's bench")
    jobs: tuple[fiomod.JobConfig, ...] = opt(factory=_default_jobs,
                                             help="preset = jobs: the jobs (fio names bs, size, offset, runtime "
                                                  "accepted)")
    size_bytes: int = opt(16 * MIB, unit="B", min=4096, max=1 << 40,
                          help="cdm, a1: the test region; sdfat: the file (in 512-byte buffers)")
    loops: int = opt(1, min=1, max=1000,
                     help="cdm: loops per test (best reported); jobs: loops of a job without its own")
    runtime_s: float = opt(0.0, unit="s", min=0.0, max=3600.0,
                           help="cdm: limit per loop; a1: each random job (0 = 10 s); on the stack's clock")
    mode: str = opt("all", choices=("all", "read", "write"), help="cdm: the tests to run")


def load_options(table: dict[str, Any]) -> FioProtocolConfig:
    """``[fio]`` with its ``[[fio.jobs]]`` list (ConfigError naming the key)."""
    if not isinstance(table, dict):
        raise ConfigError(f"[fio] must be a table, not {table!r:.60}")
    rest = {k: v for k, v in table.items() if k != "jobs"}
    cfg = from_mapping(FioProtocolConfig, rest, "fio")
    if "jobs" not in table:
        return cfg
    items = table["jobs"]
    if not isinstance(items, list) or not items:
        raise ConfigError("fio.jobs must be a non-empty list of tables ([[fio.jobs]])")
    jobs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(f"fio.jobs[{i}] must be a table, not {item!r:.60}")
        jobs.append(fiomod.job_from_mapping({"name": f"job{i + 1}", "loops": cfg.loops, **item}, f"fio.jobs[{i}]"))
    return replace(cfg, jobs=tuple(jobs))


def _cfg(sc: Any) -> FioProtocolConfig:
    cfg = sc.options.get("fio")
    return cfg if cfg is not None else FioProtocolConfig()


def _target(sc: Any, built: Any) -> Any:
    """What the jobs run on: the stack's device (the fio package picks the engine: a bare Linux device keeps
    its threaded descriptor engine) or the mounted directory."""
    dev = built.target.sd_device
    if dev is not None:
        return dev
    if "dir" in built.target.fs_factories:
        return built.target.make_fs("dir")
    raise ConfigError(f"scenario {sc.name}: protocol fio needs an [sd] device or a directory")


def _sdfat_bytes(cfg: FioProtocolConfig) -> int:
    return cfg.size_bytes // fiomod.SDFAT_BUF_BYTES * fiomod.SDFAT_BUF_BYTES


def preflight(sc: Any, built: Any) -> None:
    """Refuse, before any I/O, a region past the end of the device (ConfigError naming the option)."""
    cfg = _cfg(sc)
    dev = built.target.sd_device
    if dev is None:
        _target(sc, built)
        return
    size = dev.geometry.size_bytes
    if cfg.preset == "jobs":
        for i, j in enumerate(cfg.jobs):
            end = j.offset_bytes + (j.size_bytes or 0)
            if end > size or j.offset_bytes >= size:
                raise ConfigError(f"fio.jobs[{i}] ({j.name}): region [{j.offset_bytes}, {end}) B ends past the "
                                  f"device's {size} B")
    elif cfg.size_bytes > size:
        raise ConfigError(f"fio.size_bytes = {cfg.size_bytes} B is more than the device's {size} B")


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = _cfg(sc)
    target = _target(sc, built)
    done: set[str] = set()

    def progress(label: str, fraction: float) -> None:
        if label not in done:  # one step per job or test, as timed_calls counts them
            done.add(label)
            ctx.progress.advance(label)

    if cfg.preset == "jobs":
        rec = fiomod.run_jobs(target, list(cfg.jobs), scenario=sc.name, progress=progress)
    elif cfg.preset == "cdm":
        rec = fiomod.run_cdm(target, size_bytes=cfg.size_bytes, loops=cfg.loops, runtime_s=cfg.runtime_s,
                             mode=cfg.mode, progress=progress)
    elif cfg.preset == "a1":
        rec = fiomod.run_a1(target, size_bytes=cfg.size_bytes, runtime_s=cfg.runtime_s or 10.0, progress=progress)
    else:
        rec = fiomod.run_sdfat(target, file_bytes=_sdfat_bytes(cfg), progress=progress)
    built.metadata["fio"] = {"preset": cfg.preset, **{k: v for k, v in rec.metadata.items() if k != "identity"}}
    built.warnings.extend(w for w in rec.warnings if w not in built.warnings)
    bad = fiomod.verify_failures(rec)
    if bad:
        raise fiomod.VerifyError("verify failed: " + "; ".join(bad))
    yield from rec.rows


def paced(sc: Any) -> str:
    """Why the scenario's requests could follow the clock ("" when they cannot): then a recorded run cannot be
    re-priced (sdbench.ledger) and the members of a range run again.  A job of the jobs preset that moves a
    set amount (no runtime, ramp, rate, think time, flow, latency target or steady state), once (one loop,
    no clones, reported alone) issues the same requests whatever the profiles, and its row's one sample is
    the time from its first I/O to its last (marked by the block engine)."""
    cfg = _cfg(sc)
    if cfg.preset != "jobs":
        return f"fio preset {cfg.preset!r}: its tests may run for a time"
    for j in cfg.jobs:
        why = fiomod.timing_dependent(j)
        if why:
            return f"fio job {j.name}: {why}"
    if len({j.name for j in cfg.jobs}) < len(cfg.jobs):
        return "fio jobs share a name: their rows cannot be told apart in a recording"
    return ""


def timed_calls(sc: Any) -> int:
    """Steps of the progress bar: one per job or preset test."""
    cfg = _cfg(sc)
    return {"jobs": len(cfg.jobs), "cdm": 4 * (1 if cfg.mode != "all" else 2) + 1, "a1": 4, "sdfat": 4}[cfg.preset]
