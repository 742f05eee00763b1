"""The data-logger question as `sdbench logger` takes it: the record, the sync policies, filesystems and caches to
consider, the RAM the board can spare, the endurance; and the configurations and run length that follow."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..options import opt
from ..scenarios import Scenario, load
from ..workloads.logger import LoggerConfig

FILESYSTEMS = ("fat", "littlefs", "spiffs")
CACHES = ("none", "write-through", "write-back")
#: the logger's part for a filesystem, per medium
PARTS = {"sd": {"fat": "sd_fatfs", "littlefs": "sd_littlefs"},
         "flash": {"fat": "flash_fatfs", "littlefs": "flash_littlefs", "spiffs": "flash_spiffs"}}
DEFAULT_SCENARIO = {"sd": "logger-esp32s3-sdspi", "flash": "logger-esp32-spiflash"}
#: allocation units a log must fill on an SD card: the card merges an update block as the log moves into the
#: next unit, so each fill shows the stall (and the buffer) that merge costs
AUS = 3
#: background pauses a log should see, when the card pauses
PAUSES = 10
#: on SPI flash, the log writes this many times the filesystem's capacity (through a ring of files), so that
#: blocks are reused: SPIFFS garbage collection, LittleFS block allocation over used blocks, wear levelling
FLASH_FILLS = 1.0
#: a ring of files on a medium the log does not fit: each file this share of the capacity, this many kept
RING_SHARE, RING_FILES = 8, 4
#: the pilot run that tells whether the writer keeps up, s of log (at most the full run)
PILOT_S = 10.0
#: consumer SD cards' NAND endurance when the card states none (an estimate): TLC NAND is rated below 1,500
#: P/E cycles and MLC up to 3,000 (Transcend, "Types of NAND flash"), QLC lower
SD_PE_CYCLES = (1000.0, 1500.0, 3000.0)
SD_PE_SOURCE = ("estimate for a consumer card that states no endurance: 1,000-3,000 P/E cycles, 1,500 central (TLC "
                "NAND is rated below 1,500 cycles and MLC up to 3,000: Transcend, 'Types of NAND flash'; QLC lower)")


@dataclass(frozen=True)
class Question:
    """What the user asks (the command's options, declared once)."""

    record_bytes: int = opt(512, unit="B", min=1, max=1 << 20, help="bytes per record (one write() each)")
    rate_hz: float = opt(100.0, unit="Hz", min=0.01, max=100_000.0, help="records per second")
    jitter_ms: float = opt(0.0, unit="ms", min=0.0, max=3_600_000.0,
                           help="each record comes up to this much late (uniform); below the record period")
    ram_bytes: int = opt(16384, unit="B", min=1, max=1 << 30, help="RAM the board can spare for the record buffer")
    syncs: tuple[str, ...] = opt(("1s",), help="sync policies: a time (500ms, 1s), a record count (100), or none")
    filesystems: tuple[str, ...] = opt((), choices=FILESYSTEMS,
                                       help="filesystems to consider (default: every one the medium has)")
    caches: tuple[str, ...] = opt((), choices=CACHES,
                                  help="block caches to consider, SD only (default: none, write-through, write-back)")
    duration_s: float = opt(0.0, unit="s", min=0.0, max=86_400.0,
                            help="log length per configuration; 0 = long enough for the card (docs/logger.md)")
    cuts: int = opt(200, unit="cuts", min=0, max=100_000, help="power cuts per configuration; 0 = no power-loss runs")
    members: int = opt(0, unit="members", min=0, max=64,
                       help="range members per configuration; 0 = as many as the time budget allows (as run)")
    pe_cycles: float = opt(0.0, unit="cycles", min=0.0, max=1e7,
                           help="rated P/E cycles of the medium; 0 = the profile's (NOR) or an estimate (SD)")
    tbw_bytes: float = opt(0.0, unit="B", min=0.0, max=1e18, help="rated terabytes written instead of P/E cycles")
    seed: int = opt(1, min=0, max=(1 << 63) - 1, help="seed of the card's pauses, the data, the cuts")

    def __post_init__(self) -> None:
        if self.record_bytes > self.ram_bytes:
            raise ConfigError(f"--record {self.record_bytes} B is larger than --ram {self.ram_bytes} B: the buffer "
                              f"holds no record")
        if not self.syncs:
            raise ConfigError("--sync: give at least one policy (a time such as 1s, a record count, or none)")
        for s in self.syncs:
            sync_fields(s)
        if self.pe_cycles and self.tbw_bytes:
            raise ConfigError("give --pe-cycles or --tbw, not both")


def sync_fields(policy: str) -> dict[str, float | int]:
    """A sync policy as the logger's options: ``none`` (only the final sync), a time (``250ms``, ``1s``,
    ``1.5s``) or a record count (``100``)."""
    text = policy.strip().lower()
    if text == "none":
        return {"sync_every_ms": 0.0, "sync_every_records": 0}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s)", text)
    if m:
        ms = float(m.group(1)) * (1000.0 if m.group(2) == "s" else 1.0)
        if not 0 < ms <= 3_600_000:
            raise ConfigError(f"--sync {policy!r:.40}: a time from 1 ms to 3600 s")
        return {"sync_every_ms": ms, "sync_every_records": 0}
    if re.fullmatch(r"\d+", text) and 0 < int(text) <= 10_000_000:
        return {"sync_every_ms": 0.0, "sync_every_records": int(text)}
    raise ConfigError(f"--sync {policy!r:.40}: a time (500ms, 1s), a record count (100) or none")


def sync_name(policy: str) -> str:
    f = sync_fields(policy)
    if f["sync_every_ms"]:
        ms = float(f["sync_every_ms"])
        return f"sync {ms / 1000:g} s" if ms >= 1000 else f"sync {ms:g} ms"
    if f["sync_every_records"]:
        return f"sync {f['sync_every_records']} records"
    return "sync at end only"


@dataclass(frozen=True)
class Config:
    """One configuration of the decision table: a filesystem, a cache and a sync policy on the stack."""

    fs: str
    cache: str
    sync: str
    overrides: tuple[str, ...]   # the base scenario's overrides that make it

    @property
    def name(self) -> str:
        return f"{self.fs} / cache {self.cache} / {sync_name(self.sync)}"


@dataclass(frozen=True)
class Stack:
    """The stack the question is asked about: a scenario, its medium and overrides."""

    base: str
    overrides: tuple[str, ...]
    medium: str          # "sd" or "flash"

    def load(self, more: tuple[str, ...] = ()) -> Scenario:
        return load(self.base, [*self.overrides, *more])


def medium_of(sc: Scenario, want_flash: bool) -> str:
    if (sc.sd or sc.flash) and sc.clock_kind() != "virtual":  # e.g. a RAM-backed card on the wall clock
        raise ConfigError(f"scenario {sc.name}: the logger question needs a simulated medium ([sd] media = \"sim\" "
                          f"or [flash] media = \"sim-nor\"), timed on the virtual clock")
    if want_flash:
        if not sc.flash:
            raise ConfigError(f"--flash: scenario {sc.name} has no [flash] medium")
        return "flash"
    if sc.sd:
        return "sd"
    if sc.flash:
        return "flash"
    raise ConfigError(f"scenario {sc.name} has no simulated medium ([sd] or [flash])")


def configurations(q: Question, stack: Stack) -> list[Config]:
    """Every filesystem x cache x sync policy asked (or every one the medium offers), as scenario overrides."""
    parts = PARTS[stack.medium]
    fs_list = list(q.filesystems) or list(parts)
    for fs in fs_list:
        if fs not in parts:
            raise ConfigError(f"--fs {fs}: the {stack.medium} medium has {', '.join(parts)} (SPIFFS runs on SPI "
                              f"flash only)")
    caches = list(q.caches) or (list(CACHES) if stack.medium == "sd" else ["none"])
    if stack.medium == "flash" and caches != ["none"]:
        raise ConfigError("--cache: block caches are modelled in front of SD cards only (the flash medium takes "
                          "--cache none)")
    out = []
    for fs in dict.fromkeys(fs_list):
        for cache in dict.fromkeys(caches):
            for sync in dict.fromkeys(q.syncs):
                over = ['protocol="logger"', f'logger.part="{parts[fs]}"', f"logger.record_bytes={q.record_bytes}",
                        f"logger.rate_hz={q.rate_hz!r}", f"logger.jitter_ms={q.jitter_ms!r}",
                        f"logger.buffer_bytes={q.ram_bytes}", "logger.runs=1", f"seed={q.seed}"]
                over += [f"logger.{k}={v!r}" for k, v in sync_fields(sync).items()]
                if stack.medium == "sd":
                    over += ["sd.cache.blocks=0"] if cache == "none" else [f'sd.cache.write_mode="{cache}"']
                out.append(Config(fs, cache, sync, tuple(over)))
    return out


@dataclass(frozen=True)
class RunLength:
    duration_s: float
    why: str
    rotate_bytes: int = 0
    keep_files: int = 0
    short: str = ""       # why a length the user gave is too short ("" when long enough)


def run_length(q: Question, stack: Stack, sc: Scenario, capacity: int | None) -> RunLength:
    """How long each configuration logs: on an SD card long enough to fill :data:`AUS` allocation units (and to
    see :data:`PAUSES` background pauses when the card pauses); on SPI flash :data:`FLASH_FILLS` times the
    filesystem's capacity.  A log that does not fit the medium goes through a ring of files.  A length the user
    gave is kept, and said to be too short when it is."""
    rate = q.record_bytes * q.rate_hz
    built = sc.build()
    try:
        card = built.sd_parts.card if stack.medium == "sd" and built.sd_parts is not None else None
    finally:
        built.close()
    if card is not None:
        need = AUS * card.au_bytes / rate
        why = (f"{AUS} allocation units of {card.au_bytes // 1024} KiB at {rate / 1000:.3g} kB/s: the card merges an "
               f"update block each time the log moves into the next unit")
        p = card.pause_probability
        if p > 0:
            commands_s = max(1.0, q.rate_hz * q.record_bytes / 512.0)
            pauses = PAUSES / (p * commands_s)
            if pauses > need:
                need, why = pauses, f"{PAUSES} of the card's background pauses (chance {p:g} per write command)"
    else:
        need = FLASH_FILLS * (capacity or 0) / rate
        why = (f"{FLASH_FILLS:g} x the filesystem's {(capacity or 0) // 1024} KiB at {rate / 1000:.3g} kB/s, so "
               f"that its blocks are used again")
    need = max(need, 1.0)
    duration = q.duration_s or need
    max_records = 5_000_000
    if duration * q.rate_hz > max_records:
        duration = max_records / q.rate_hz
    short = ""
    if q.duration_s and q.duration_s < need * 0.999:
        short = (f"--duration {q.duration_s:g} s is shorter than the {need:.0f} s the medium needs ({why}): the "
                 f"stall, buffer and wear figures can miss what the card does")
    rotate = keep = 0
    if capacity is not None and duration * rate > capacity * 0.9:
        rotate = max(q.record_bytes, capacity // RING_SHARE // q.record_bytes * q.record_bytes)
        keep = RING_FILES
    return RunLength(duration, why, rotate, keep, short)


def endurance_of(q: Question, medium: str, chip_cycles: int | None) -> dict[str, Any]:
    """The endurance the life column uses: given, the chip profile's (NOR), or the SD estimate, with its
    source."""
    if q.tbw_bytes:
        return {"tbw_bytes": q.tbw_bytes, "source": "given (--tbw)"}
    if q.pe_cycles:
        return {"cycles": q.pe_cycles, "source": "given (--pe-cycles)"}
    if medium == "flash":
        return {"cycles": float(chip_cycles or 0), "source": "the flash chip profile's endurance_cycles "
                                                              "(datasheet)"}
    lo, mid, hi = SD_PE_CYCLES
    return {"cycles": mid, "cycles_range": [lo, hi], "source": SD_PE_SOURCE, "estimate": True}


def logger_config(sc: Scenario) -> LoggerConfig:
    return sc.options["logger"]
