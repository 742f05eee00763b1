"""Simulated SPI NOR flash targets for scenarios: ``[flash] media = "sim-nor"``.

One chip + the ESP32 esp_flash driver model on a virtual clock; the
benchmark's 'storage' data partition is a window of it.  The parts of the
ESP-IDF protocol use the partition as the example does:

* raw: wear levelling's ``wl_read``/``wl_write`` (wl_write only programs);
* FAT: FatFs over wear levelling (4096-byte sectors; each sector write is
  erase + program, as ``ff_wl_write`` does);
* SPIFFS and LittleFS: straight on the partition (no wear levelling).

Every part mounts afresh, as the example does (each mount formats). ``[flash.cache]`` puts a block cache
(sdbench.cache) under FAT (in front of wear levelling, 4096-byte blocks) and under LittleFS (in its program
units); SPIFFS keeps its own page cache.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ..cache import BlockCache, CacheConfig
from ..clock import VirtualClock
from ..errors import ConfigError, InternalError
from ..fs.costed import CostedFileSystem
from ..ledger import Price
from ..fs.fat import FatConfig, FatFileSystem, plan_volume, volume_capacity_bytes
from ..fs.littlefs import LittleFsConfig, LittleFsFileSystem, data_capacity_bytes
from ..options import from_mapping, opt, to_mapping
from ..media.base import BlockDevice, BlockDeviceWrapper, Geometry
from ..media.units import UnitView
from ..media.wl import WearLevelling, WlConfig, WlLayout
from ..media.sim.esp_flash import Esp32FlashDriver, load_esp_flash_host
from ..media.sim.host import host_metadata
from ..media.sim.nor import NorChipConfig, NorFlashChip, load_chip_profile


@dataclass(frozen=True)
class SimFlashConfig:
    chip: str = opt("gd25q32c", help="flash chip profile (sdbench/data/flash) or a TOML path")
    host: str = opt("esp32-flash", help="esp_flash host profile (sdbench/data/hosts) or a TOML path")
    chip_params: dict[str, Any] = opt(factory=dict, help="overrides of chip profile fields")
    host_params: dict[str, Any] = opt(factory=dict, help="overrides of host profile fields")
    partition_offset_bytes: int = opt(0x110000, unit="B", min=0, help="start of the data partition on the chip")
    partition_size_bytes: int = opt(2 << 20, unit="B", min=64 << 10, help="size of the data partition")
    timing: str = opt("random", choices=("random", "typ", "max"),
                      help="program/erase times: seeded spread around typical, or always typical/maximum")
    fat: FatConfig = opt(factory=lambda: FatConfig(sector_size_bytes=4096, allocation_unit_bytes=65536, n_fats=2),
                         help="FAT on wear levelling (ESP-IDF: SFD, 4096-byte sectors, AU = target size)")
    wl: WlConfig = opt(factory=WlConfig,
                       help="wear levelling under FAT (ESP-IDF WL_Flash); its device id seed is the scenario's seed")
    littlefs: LittleFsConfig = opt(factory=lambda: LittleFsConfig(read_size=128, prog_size=128, block_size=4096,
                                                                  cache_size=512, lookahead_size=128,
                                                                  block_cycles=512),
                                   help="LittleFS on the partition (esp_littlefs flash configuration)")
    spiffs: dict[str, Any] = opt(factory=dict,
                                 help="SPIFFS configuration: SpiffsConfig fields (docs/spiffs.md); default: ESP-IDF's")
    fs_call_cycles: int = opt(6000, unit="cycles", min=0,
                              help="host cost of one file read()/write() through the VFS and filesystem, excluding "
                                   "flash I/O, at the host's cpu_hz")


class WlRawView(BlockDeviceWrapper):
    """The raw test's view of wear levelling: write = ``wl_write`` (program only), read = ``wl_read``."""

    kind = "wl-raw"

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        self.inner.wl_write(lba * self.geometry.sector_size, data, buf_addr=buf_addr)  # type: ignore[attr-defined]

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        ss = self.geometry.sector_size
        return self.inner.wl_read(lba * ss, count * ss, buf_addr=buf_addr)  # type: ignore[attr-defined]


class FlashTarget:
    """Devices and filesystem factories of a simulated flash target (closed with the stack)."""

    kind = "sim-nor-target"

    def __init__(self, cfg: SimFlashConfig, clock: VirtualClock, seed: int, base_dir: Any = None,
                 medium_wrap: Callable[[BlockDevice], BlockDevice] | None = None, loaded: Any = None,
                 cache: dict[str, Any] | None = None) -> None:
        if loaded is not None:  # the chip and host the stack builder loaded (sdbench.stack.loaded)
            chip_prof, host = loaded[0].value, loaded[1].value
        else:
            chip_prof = load_chip_profile(_path(cfg.chip, base_dir), cfg.chip_params or None)
            host = load_esp_flash_host(_path(cfg.host, base_dir), cfg.host_params or None)
        #: the esp_flash host profile: the MCU that runs the filesystems (their stdio costs too)
        self.host = host
        self.chip = NorFlashChip(chip_prof, clock, NorChipConfig(seed=seed, timing=cfg.timing))
        whole = Esp32FlashDriver(self.chip, host)
        if cfg.partition_offset_bytes + cfg.partition_size_bytes > chip_prof.capacity_bytes:
            raise ConfigError(f"flash partition 0x{cfg.partition_offset_bytes:X}+{cfg.partition_size_bytes} B does "
                              f"not fit the {chip_prof.capacity_bytes // 1024} KiB chip")
        self.partition: BlockDevice = whole.partition(cfg.partition_offset_bytes, cfg.partition_size_bytes)
        if medium_wrap is not None:  # e.g. faults: every filesystem and wear levelling sit above it
            self.partition = medium_wrap(self.partition)
        self.cfg = cfg
        wl_cfg = replace(cfg.wl, device_id_seed=seed)
        self._wl_cfg = wl_cfg
        self.raw_device = self.fresh_raw_device()
        #: [flash.cache]: a block cache under FAT and LittleFS (a fresh one with every filesystem: RAM)
        cache_cfg = None if cache is None else from_mapping(CacheConfig, {"cpu_hz": host.cpu_hz, **cache},
                                                            "flash.cache")
        self.cache_cfg = cache_cfg if cache_cfg is not None and cache_cfg.blocks else None  # 0 blocks: none
        lfs_unit = cfg.littlefs.prog_size
        self.fs_factories: dict[str, Callable[[], Any]] = {
            "flash_fatfs": lambda: FatFileSystem(self._cached(WearLevelling(self.partition, wl_cfg)),
                                                 cfg.fat, where="flash.fat"),
            "flash_littlefs": lambda: LittleFsFileSystem(
                self._cached(UnitView(self.partition, lfs_unit)) if self.cache_cfg else self.partition,
                cfg.littlefs, where="flash.littlefs"),
        }
        spiffs = _spiffs_factory(self.partition, cfg.spiffs)
        if spiffs is not None:
            self.fs_factories["flash_spiffs"] = spiffs
        self._spiffs = spiffs
        self._seed = seed
        call_ns = cfg.fs_call_cycles * 1e9 / host.cpu_hz
        for part, make in list(self.fs_factories.items()):
            self.fs_factories[part] = lambda make=make: CostedFileSystem(
                make(), clock, call_ns,
                call_price=Price("flash.host", "cpu_hz", cfg.fs_call_cycles, name="flash.fs_call_cycles"))
        # block-op counters per row: the filesystem's device and the flash partition below it
        self.counter_devices: dict[str, tuple[BlockDevice, ...]] = {
            "flash_raw": (self.raw_device, self.partition)}
        self.meta = {"media": "sim-nor", "chip": to_mapping(chip_prof), "host": host_metadata(host),
                     "partition_offset_bytes": cfg.partition_offset_bytes,
                     "partition_size_bytes": cfg.partition_size_bytes, "wl": to_mapping(wl_cfg), "fat": to_mapping(cfg.fat),
                     "littlefs": to_mapping(cfg.littlefs), "spiffs": cfg.spiffs}
        if self.cache_cfg is not None:
            self.meta["cache"] = to_mapping(self.cache_cfg)

    def _cached(self, dev: BlockDevice) -> BlockDevice:
        return BlockCache(dev, self.cache_cfg) if self.cache_cfg is not None else dev

    def fresh_raw_device(self) -> WlRawView:
        """The raw test's device with wear levelling started afresh from what the partition holds (as after a
        reboot)."""
        return WlRawView(WearLevelling(self.partition, self._wl_cfg))

    def check_part(self, part: str) -> int | None:
        """Check a part's filesystem against the partition without touching the chip (no clock time passes);
        returns the bytes of file data it can hold at most, or None for a part this target has not.
        Raises ConfigError naming the option."""
        g = self.partition.geometry
        if part == "flash_raw":
            return self.raw_device.geometry.size_bytes
        if part == "flash_fatfs":
            wl_cfg = self._wl_cfg  # as the flash_fatfs factory builds it
            wl = WlLayout.of(g.size_bytes, g.erase_size, wl_cfg)
            sec = wl_cfg.sector_size_bytes
            lay = plan_volume(Geometry(sector_size=sec, sector_count=wl.flash_size // sec), self.cfg.fat,
                              where="flash.fat")
            return volume_capacity_bytes(lay)
        if part == "flash_littlefs":
            return data_capacity_bytes(self.cfg.littlefs, g, where="flash.littlefs")
        if part == "flash_spiffs" and self._spiffs is not None:
            return self._spiffs().size_bytes  # constructing SPIFFS checks its geometry; it reads nothing
        return None

    def close(self) -> None:
        """Nothing to release: the chip lives in memory."""


def _path(name: str, base_dir: Any) -> str:
    if name.endswith(".toml") and base_dir is not None:
        from pathlib import Path

        p = Path(name)
        return str(p if p.is_absolute() else base_dir / p)
    return name


def _spiffs_factory(partition: BlockDevice, table: dict[str, Any]) -> Callable[[], Any] | None:
    try:
        from ..fs.spiffs import SpiffsConfig, SpiffsFileSystem
    except ImportError:
        return None
    cfg = from_mapping(SpiffsConfig, table, "flash.spiffs")
    return lambda: SpiffsFileSystem(partition, cfg)


def build_sim_flash(cfg: SimFlashConfig, scenario: Any, clock: Any,
                    medium_wrap: Callable[[BlockDevice], BlockDevice] | None = None,
                    loaded: Any = None) -> tuple[FlashTarget, dict[str, Any]]:
    if not isinstance(clock, VirtualClock):
        raise InternalError("simulated media need the virtual clock (the stack builder makes one)")
    cache = scenario.flash.get("cache") if isinstance(getattr(scenario, "flash", None), dict) else None
    t = FlashTarget(cfg, clock, scenario.seed, getattr(scenario, "source_dir", None), medium_wrap, loaded, cache)
    return t, t.meta
