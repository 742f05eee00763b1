"""The one stack builder: a scenario's description becomes devices, wrappers and filesystems on one clock.

Real media and simulated cards come from :data:`sdbench.stack.media.MEDIA`;
then the optional USB bridge ([sd.bridge]) or block cache ([sd.cache]); then the filesystem factories the
protocols call (FAT and LittleFS on the SD device, the flash target's parts, a
mounted directory). Protocols receive the :class:`Built` stack and never build
their own.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cache import BlockCache, CacheConfig
from ..clock import Clock, TimeOnlyClock, VirtualClock, WallClock
from ..errors import ConfigError
from ..fs.costed import CostedFileSystem
from ..fs.fat import FatFileSystem
from ..fs.hostdir import open_directory
from ..fs.littlefs import LittleFsFileSystem
from ..fs.stdio import StdioHost
from ..ledger import Price
from ..media.base import BlockDevice, bottom
from ..media.faults import FaultDevice
from ..options import to_mapping
from .bridge import build_bridge
from .media import MEDIA
from .sd import SimSdParts
from .target import Target


@dataclass
class Built:
    """A built stack: the target for the protocol, its clock and metadata."""

    target: Target
    clock: Clock
    stack: dict[str, Any]
    devices: list[BlockDevice] = field(default_factory=list)
    #: what a protocol reports beyond its rows; run_scenario puts it into the run's metadata
    metadata: dict[str, Any] = field(default_factory=dict)
    #: what a protocol could not do on this stack and says so (run_scenario adds them to the run's warnings)
    warnings: list[str] = field(default_factory=list)
    #: a simulated card's pieces ([sd] media = "sim"), for protocols that make cards of their own from them
    sd_parts: SimSdParts | None = None
    #: the [sd.cache] configuration (None: no cache)
    sd_cache: CacheConfig | None = None
    #: the fault wrappers on the media ([sd.faults], [flash.faults]) by section: a power-loss run cuts, powers
    #: on and remounts through them
    faults: dict[str, FaultDevice] = field(default_factory=dict)
    #: the simulated media's profiles, loaded once for the run (sdbench.stack.loaded): the range code takes
    #: them from here
    profiles: tuple[Any, ...] = ()

    def close(self) -> None:
        for d in self.devices:
            d.close()

    def discard(self) -> None:
        """Close a stack whose run was refused before it began, and remove image files it created: a refusal
        leaves nothing behind."""
        self.close()
        for d in self.devices:
            image = bottom(d)
            if getattr(image, "created", False):
                try:
                    os.unlink(image.path)
                except OSError:
                    pass

    def new_sd_card(self, clock: VirtualClock) -> BlockDevice:
        """A fresh simulated card as the scenario describes it (driver model, card, [sd.cache]) on ``clock``."""
        if self.sd_parts is None:
            raise ConfigError("this stack has no simulated card ([sd] media = \"sim\")")
        dev: BlockDevice = self.sd_parts.driver(clock)
        return BlockCache(dev, self.sd_cache) if self.sd_cache is not None else dev


def build(sc: Any, recording: Any = None) -> Built:
    """Build the stack scenario ``sc`` describes: devices, wrappers, filesystem factories, one clock.
    ``recording``: a :class:`sdbench.ledger.Recording` the virtual clock carries (its driver models register
    with it as they are built)."""
    devices: list[BlockDevice] = []
    try:
        built = _build(sc, devices, recording)
    except BaseException:
        Built(Target(), WallClock(), {}, list(reversed(devices))).discard()  # what was made before the refusal
        raise
    if recording is not None:
        recording.start()
        if recording.replaying:  # its drivers are registered; the replay moves the clock by itself
            built.clock.recording = None  # type: ignore[attr-defined]
    return built


def _build(sc: Any, devices: list[BlockDevice], recording: Any) -> Built:
    clock: Clock = WallClock()
    if sc.clock_kind() == "virtual":
        # a replay reads the time alone (sdbench.ledger.replay): its clock keeps no tables
        clock = TimeOnlyClock() if recording is not None and recording.replaying else VirtualClock()
    if recording is not None and isinstance(clock, VirtualClock):
        clock.recording = recording
    stack: dict[str, Any] = {"scenario": sc.name, "protocol": sc.protocol}
    sd_dev = None
    factories: dict[str, Callable[[], Any]] = {}
    counters: dict[str, tuple[BlockDevice, ...]] = {}
    hosts: dict[str, StdioHost] = {}
    faults: dict[str, FaultDevice] = {}
    loaded: tuple[Any, ...] = ()

    def fault_wrap(section: str) -> Callable[[BlockDevice], BlockDevice] | None:
        """The medium of ``section`` inside its fault wrapper, when the scenario has one."""
        cfg = sc.faults_config(section)
        if cfg is None:
            return None

        def wrap(medium: BlockDevice) -> BlockDevice:
            faults[section] = FaultDevice(medium, cfg)
            return faults[section]
        return wrap

    if sc.sd:
        kind, cfg = sc.media_config("sd")
        sd_wrap = fault_wrap("sd")
        loaded_sd = MEDIA[kind].profiles(cfg, sc.source_dir) if MEDIA[kind].profiles else ()
        loaded += loaded_sd
        sd_dev, meta = MEDIA[kind].build(cfg, sc, clock, **({"loaded": loaded_sd} if loaded_sd else {}))
        devices.append(sd_dev)
        sd_parts = meta.pop("parts", None)
        sd_warnings = meta.pop("warnings", [])
        host = getattr(sd_dev, "host", None)
        cache_cfg = sc.cache_config(host)
        bridge_cfg = sc.bridge_config()
        if bridge_cfg is not None:
            if cache_cfg is not None:
                raise ConfigError("sd.cache with sd.bridge: a block cache behind a USB bridge is not modelled")
            devices.pop().close()
            sd_dev, meta["bridge"] = build_bridge(bridge_cfg, sd_parts, clock, sd_wrap)
            devices.append(sd_dev)
            host = None  # the filesystem runs on the PC, not on the bridge's MCU
        elif sd_wrap is not None:
            sd_dev = devices[-1] = sd_wrap(sd_dev)
        if cache_cfg is not None:
            sd_dev = devices[-1] = BlockCache(sd_dev, cache_cfg)
        stack["sd"] = {**meta, "device": sd_dev.describe()}
        stack["sd_fat"] = to_mapping(sc.sd_fat)
        stack["sd_littlefs"] = to_mapping(sc.sd_littlefs)
        fat_cfg, lfs_cfg = sc.sd_fat, sc.sd_littlefs
        dev = sd_dev
        factories["sd_fatfs"] = lambda: FatFileSystem(dev, fat_cfg)
        factories["sd_littlefs"] = lambda: LittleFsFileSystem(dev, lfs_cfg)
        if host is not None and isinstance(clock, VirtualClock):
            hosts.update({part: StdioHost("sd.host", host) for part in ("sd_fatfs", "sd_littlefs")})
            # the host's VFS/filesystem software time per read()/write() call
            call_ns = host.cycles_ns(host.fs_call_cycles)
            open_ns = host.cycles_ns(host.fs_open_cycles)
            for part in ("sd_fatfs", "sd_littlefs"):
                make = factories[part]
                factories[part] = (lambda make=make: CostedFileSystem(
                    make(), clock, call_ns, open_ns, call_price=Price("sd.host", "fs_call_cycles"),
                    open_price=Price("sd.host", "fs_open_cycles")))
    flash_raw = None
    if sc.flash:
        kind, cfg = sc.media_config("flash")
        flash_wrap = fault_wrap("flash")
        if flash_wrap is not None and not MEDIA[kind].wraps_medium:
            raise ConfigError(f"flash.faults: media {kind} has no medium to wrap")
        more: dict[str, Any] = {"medium_wrap": flash_wrap} if flash_wrap is not None else {}
        if MEDIA[kind].profiles:
            more["loaded"] = MEDIA[kind].profiles(cfg, sc.source_dir)
            loaded += more["loaded"]
        flash_target, meta = MEDIA[kind].build(cfg, sc, clock, **more)
        # flash builders return a FlashTarget-like object with the parts' devices and factories
        devices.append(flash_target)  # type: ignore[arg-type]
        stack["flash"] = meta
        flash_raw = getattr(flash_target, "raw_device", None)
        factories.update(getattr(flash_target, "fs_factories", {}))
        flash_host = getattr(flash_target, "host", None)
        if flash_host is not None:
            hosts.update({part: StdioHost("flash.host", flash_host) for part in flash_target.fs_factories})
        counters.update(getattr(flash_target, "counter_devices", {}))
    if sc.directory:
        dir_fs = open_directory(sc.directory, drop_caches=sc.directory_drop_caches)
        stack["dir"] = dir_fs.describe()
        factories["dir"] = lambda: dir_fs
    target = Target(sd_device=sd_dev, flash_raw_device=flash_raw, fs_factories=factories,
                    counter_devices=counters, hosts=hosts, clock=clock)
    built = Built(target, clock, stack, devices, faults=faults, profiles=loaded)
    if sc.sd:
        built.warnings.extend(sd_warnings)
    for section, fault_dev in faults.items():
        stack.setdefault(section, {})["faults"] = to_mapping(fault_dev.config)
    if sc.sd:
        built.sd_parts, built.sd_cache = sd_parts, cache_cfg
    return built
