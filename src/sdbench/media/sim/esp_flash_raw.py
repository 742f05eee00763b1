"""ESP-IDF perf_benchmark's "SPI flash raw" test on a simulated ESP32 (NOR chip + esp_flash + wear levelling),
with overrides of any profile field: the hook calibration and the flash benchmarks call directly."""
from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any

from ...clock import VirtualClock
from ...errors import ConfigError
from ...options import from_mapping, to_mapping
from ..wl import WearLevelling, WlConfig
from .esp_flash import EspFlashCounters, Esp32FlashDriver, EspFlashHostProfile, load_esp_flash_host
from .nor import FlashChipProfile, NorChipConfig, NorFlashChip, load_chip_profile

RAW_WRITE_LABEL = "SPI Flash raw write"
RAW_READ_LABEL = "SPI Flash raw read"
#: perf_benchmark's partitions_example.csv: nvs 0x9000, phy_init 0xf000, factory 0x10000 (1M), storage 2M
STORAGE_OFFSET_BYTES = 0x110000
STORAGE_SIZE_BYTES = 2 * 1024 * 1024
RAW_SIZE_BYTES = 65536


def _split_overrides(overrides: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``chip.x`` / ``host.x`` / ``wl.x`` / ``nor.x`` keys, or bare field names if unambiguous."""
    sections: dict[str, type] = {"chip": FlashChipProfile, "host": EspFlashHostProfile, "wl": WlConfig,
                                 "nor": NorChipConfig}
    names = {sec: {f.name for f in fields(cls)} for sec, cls in sections.items()}
    out: dict[str, dict[str, Any]] = {sec: {} for sec in sections}
    for key, value in (overrides or {}).items():
        if "." in key:
            sec, name = key.split(".", 1)
            if sec not in sections:
                raise ConfigError(f"override {key!r}: section must be one of {', '.join(sections)}")
            if name not in names[sec]:
                raise ConfigError(f"override {key!r}: {sections[sec].__name__} has no field {name!r}")
        else:
            owners = [sec for sec in sections if key in names[sec] and key != "name"]
            if len(owners) != 1:
                where = "no section" if not owners else f"sections {', '.join(owners)}"
                raise ConfigError(f"override {key!r} matches {where}; write it as section.field "
                                  f"(sections: {', '.join(sections)})")
            sec, name = owners[0], key
        out[sec][name] = value
    return out


@dataclass
class RawRunResult:
    """Per-call times of the two rows, and where the simulated time went (per row, summed over runs)."""

    write_ms: list[float]
    read_ms: list[float]
    mount_ms: float
    write_breakdown_ns: dict[str, int]
    read_breakdown_ns: dict[str, int]
    write_commands: dict[str, int]
    read_commands: dict[str, int]
    counters: EspFlashCounters
    wl_moves: int


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def run_spiflash_raw(profile_overrides: dict[str, Any] | None = None, runs: int = 100, *, chip: str = "gd25q32c",
                     host: str = "esp32-flash", seed: int = 1) -> RawRunResult:
    """The perf_benchmark 'SPI flash raw' test on chip + esp_flash + WL (2 MiB 'storage' partition of a 4 MB chip).

    wl_mount on the fresh partition (untimed), then ``runs`` x wl_write(0, 64 KiB) (no erase: wl_write only
    programs), then ``runs`` x wl_read(0, 64 KiB); each call timed on its own.
    """
    if runs < 1:
        raise ConfigError(f"runs must be at least 1, got {runs}")
    ov = _split_overrides(profile_overrides)
    chip_prof = load_chip_profile(chip, ov["chip"])
    host_prof = load_esp_flash_host(host, ov["host"])
    nor_cfg = from_mapping(NorChipConfig, {**to_mapping(NorChipConfig(seed=seed)), **ov["nor"]}, "nor")
    wl_cfg = from_mapping(WlConfig, {**to_mapping(WlConfig(device_id_seed=seed)), **ov["wl"]}, "wl")
    clock = VirtualClock()
    nor = NorFlashChip(chip_prof, clock, nor_cfg)
    drv = Esp32FlashDriver(nor, host_prof, offset_bytes=STORAGE_OFFSET_BYTES, size_bytes=STORAGE_SIZE_BYTES)
    t0 = clock.now_ns()
    wl = WearLevelling(drv, wl_cfg)
    mount_ms = (clock.now_ns() - t0) / 1e6
    buf = random.Random(f"raw-buffer:{seed}").randbytes(RAW_SIZE_BYTES)  # esp_fill_random once
    bd0, cmd0 = clock.breakdown_ns(), clock.commands_snapshot()
    writes = []
    for _ in range(runs):
        t = clock.now_ns()
        wl.wl_write(0, buf)
        writes.append((clock.now_ns() - t) / 1e6)
    bd1, cmd1 = clock.breakdown_ns(), clock.commands_snapshot()
    reads = []
    for _ in range(runs):
        t = clock.now_ns()
        wl.wl_read(0, RAW_SIZE_BYTES)
        reads.append((clock.now_ns() - t) / 1e6)
    bd2, cmd2 = clock.breakdown_ns(), clock.commands_snapshot()
    return RawRunResult(writes, reads, mount_ms, _delta(bd1, bd0), _delta(bd2, bd1), _delta(cmd1, cmd0),
                        _delta(cmd2, cmd1), drv.counters, wl.moves)


def simulate_spiflash_raw(profile_overrides: dict[str, Any] | None = None, runs: int = 100) -> dict[str, float]:
    """Mean ms per call of ESP-IDF perf_benchmark's 'SPI Flash raw write' and 'SPI Flash raw read'.

    ``profile_overrides`` keys: ``chip.<FlashChipProfile field>``, ``host.<EspFlashHostProfile field>``,
    ``wl.<WlConfig field>``, ``nor.<NorChipConfig field>`` (or a bare field name when only one section has
    it), e.g. ``{"chip.byte_program_next_typ_us": 1.5, "host.cmd_overhead_cycles": 500}``; and
    ``chip_profile`` / ``host_profile`` to pick other shipped profiles (``{"chip_profile": "w25q32jv"}``).
    Defaults: GD25Q32C profile, ``hosts/esp32-flash.toml`` (the example's build: QIO, 80 MHz flash,
    160 MHz CPU), seed 1.
    """
    ov = dict(profile_overrides or {})
    chip = str(ov.pop("chip_profile", "gd25q32c"))
    host = str(ov.pop("host_profile", "esp32-flash"))
    r = run_spiflash_raw(ov, runs, chip=chip, host=host)
    return {RAW_WRITE_LABEL: sum(r.write_ms) / runs, RAW_READ_LABEL: sum(r.read_ms) / runs}
