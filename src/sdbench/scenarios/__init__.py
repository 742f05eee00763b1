"""Scenarios: a board + bus + card (or flash) + filesystem configs + protocol,
as data (TOML).  Built-in scenarios live in ``sdbench/data/scenarios``; a user
passes their own file to ``sdbench run my.toml``.

A scenario file may say ``extends = "other-scenario"`` to start from another
one; tables are merged key by key.  Media are chosen by ``media = ...`` in the
``[sd]`` / ``[flash]`` tables and built through :data:`MEDIA`, a registry of
(config class, builder) pairs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..cache import BlockCache, CacheConfig
from ..clock import Clock, VirtualClock, WallClock
from ..errors import ConfigError
from ..fs.fat import FatConfig, FatFileSystem
from ..fs.littlefs import LittleFsConfig, LittleFsFileSystem
from ..media.base import BlockDevice, Geometry
from ..media.memory import MemoryDevice
from ..media.realtarget import NO_WRITES, WriteGrant, open_device, open_directory, open_image
from ..media.sim.flashtarget import SimFlashConfig, build_sim_flash
from ..media.sim.sdtarget import SimSdConfig, build_sim_sd
from ..fs.costed import CostedFileSystem
from ..options import apply_overrides, from_mapping, opt, parse_toml, read_toml_file, to_mapping
from ..workloads.espidf import EspIdfConfig, Target
from ..workloads.p2 import P2Config
from ..workloads.rawseq import RawSeqConfig

DATA = resources.files("sdbench") / "data"
DEFAULT_SCENARIO = "espidf-esp32-sdmmc4-40mhz"
PROTOCOLS = ("espidf", "p2", "raw", "fs_tests", "usbmsc")


@dataclass(frozen=True)
class MemoryMediaConfig:
    """A RAM-backed card on the wall clock (measures sdbench's own code path)."""

    capacity_bytes: int = opt(16 * 10**9, unit="B", min=1 << 20, help="card capacity")
    sector_size_bytes: int = opt(512, unit="B", choices=(512, 4096), help="sector size")


@dataclass
class Built:
    """A built stack: the target for the protocol, its clock and metadata."""

    target: Target
    clock: Clock
    stack: dict[str, Any]
    devices: list[BlockDevice] = field(default_factory=list)
    #: what a protocol reports beyond its rows; run_scenario puts it into the run's metadata
    metadata: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        for d in self.devices:
            d.close()


def _build_memory(cfg: MemoryMediaConfig, scenario: "Scenario", clock: Clock) -> tuple[BlockDevice, dict[str, Any]]:
    ss = cfg.sector_size_bytes
    dev = MemoryDevice(Geometry(sector_size=ss, sector_count=cfg.capacity_bytes // ss), clock)
    return dev, {"media": "memory", **to_mapping(cfg)}


@dataclass(frozen=True)
class ImageMediaConfig:
    """An image file, used read/write through the page cache (wall clock).

    An existing image is written only with ``--allow-write`` on the command line;
    a new one (``size_bytes`` > 0 and no file at ``path``) is created sparse."""

    path: str = opt("", help="image file path (relative paths are relative to the scenario file)")
    sector_size_bytes: int = opt(512, unit="B", choices=(512, 4096), help="sector size")
    size_bytes: int = opt(0, unit="B", min=0, max=1 << 40,
                          help="size of the image to create when none exists at path (0 = it must exist)")


def _build_image(cfg: ImageMediaConfig, scenario: "Scenario", clock: Clock) -> tuple[BlockDevice, dict[str, Any]]:
    if not cfg.path:
        raise ConfigError("sd.path: an image file is required for media = \"image\"")
    if cfg.size_bytes % cfg.sector_size_bytes:
        raise ConfigError(f"sd.size_bytes = {cfg.size_bytes} B is not a multiple of the "
                          f"{cfg.sector_size_bytes}-byte sector")
    p = Path(cfg.path)
    if not p.is_absolute() and scenario.source_dir is not None:
        p = scenario.source_dir / p
    dev = open_image(p, grant=scenario.write_grant, sector_size=cfg.sector_size_bytes, create_bytes=cfg.size_bytes,
                     clock=clock)
    return dev, {"media": "image", **to_mapping(cfg)}


@dataclass(frozen=True)
class DeviceMediaConfig:
    """A Linux block device or image file, measured on the wall clock (sdbench run --device).

    Writing it needs ``--allow-write`` (and a confirmation, or ``--yes``) on the command line."""

    path: str = opt("", help="block device or image file")
    offset_bytes: int = opt(0, unit="B", min=0, help="start of the range used")
    size_bytes: int = opt(0, unit="B", min=0, help="size of the range used; 0 = to the end")
    direct: str = opt("auto", choices=("auto", "on", "off"), help="O_DIRECT: auto = where the OS allows it")


def _build_device(cfg: DeviceMediaConfig, scenario: "Scenario", clock: Clock) -> tuple[BlockDevice, dict[str, Any]]:
    from ..identity import identify

    if not cfg.path:
        raise ConfigError("sd.path: a device or image file is required for media = \"device\"")
    dev = open_device(cfg.path, writes=True, grant=scenario.write_grant, offset_bytes=cfg.offset_bytes,
                      size_bytes=cfg.size_bytes or None, direct={"auto": None, "on": True, "off": False}[cfg.direct])
    try:
        ident = identify(cfg.path)
    except Exception:  # identity is informative only
        ident = {}
    return dev, {"media": "device", **to_mapping(cfg), "identity": ident}  # type: ignore[return-value]


#: keys that would grant writing; a file may not say them (docs/safety.md)
_GRANT_KEYS = ("allow_write", "yes")


#: media kind -> (config class, builder(config, scenario, clock) -> (device, metadata), clock kind)
MEDIA: dict[str, tuple[type, Callable[..., tuple[BlockDevice, dict[str, Any]]], str]] = {
    "memory": (MemoryMediaConfig, _build_memory, "wall"),
    "image": (ImageMediaConfig, _build_image, "wall"),
    "sim": (SimSdConfig, build_sim_sd, "virtual"),
    "sim-nor": (SimFlashConfig, build_sim_flash, "virtual"),
    "device": (DeviceMediaConfig, _build_device, "wall"),
}


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    protocol: str = "espidf"
    seed: int = 1
    espidf: EspIdfConfig = field(default_factory=EspIdfConfig)
    p2: P2Config = field(default_factory=P2Config)
    raw_seq: RawSeqConfig = field(default_factory=RawSeqConfig)
    sd: dict[str, Any] = field(default_factory=dict)
    flash: dict[str, Any] = field(default_factory=dict)
    sd_fat: FatConfig = field(default_factory=lambda: FatConfig(allocation_unit_bytes=65536, partition_start_lba=63))
    sd_littlefs: LittleFsConfig = field(default_factory=LittleFsConfig)
    extra: dict[str, Any] = field(default_factory=dict)   # protocol/media tables handled by their modules
    directory: str = ""   # a mounted directory for the 'dir' part (sdbench run --dir)
    directory_drop_caches: bool = False
    source_dir: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)      # the merged TOML, for --set and metadata
    #: permission to write real media: set by the command line only, never from the scenario's data
    write_grant: WriteGrant = field(default=NO_WRITES, compare=False, repr=False)

    def media_config(self, section: str) -> tuple[str, Any]:
        table = dict(getattr(self, section))
        kind = table.pop("media", None)
        table.pop("cache", None)  # [sd.cache]: a BlockCache around the device, see build()
        for key in _GRANT_KEYS:
            if key in table:
                raise ConfigError(f"{section}.{key}: permission to write real media comes from the command line "
                                  f"only (--allow-write, --yes), never from a scenario file or --set")
        if kind is None:
            raise ConfigError(f"scenario {self.name}: [{section}] needs media = one of {', '.join(MEDIA)}")
        if not isinstance(kind, str) or kind not in MEDIA:
            raise ConfigError(f"scenario {self.name}: unknown {section}.media {kind!r:.60} (known: {', '.join(MEDIA)})")
        cls = MEDIA[kind][0]
        return kind, from_mapping(cls, table, section)

    def cache_config(self, host: Any = None) -> CacheConfig | None:
        """``[sd.cache]`` as a CacheConfig (cpu_hz defaults to the host profile's), or None."""
        table = self.sd.get("cache") if self.sd else None
        if table is None:
            return None
        if not isinstance(table, dict):
            raise ConfigError("[sd.cache] must be a table")
        if host is not None and "cpu_hz" not in table:
            table = {**table, "cpu_hz": host.cpu_hz}
        return from_mapping(CacheConfig, table, "sd.cache")

    def clock_kind(self) -> str:
        kinds = {MEDIA[t.get("media", "memory")][2] for t in (self.sd, self.flash) if t and t.get("media") in MEDIA}
        return "virtual" if "virtual" in kinds else "wall"

    def build(self) -> Built:
        devices: list[BlockDevice] = []
        try:
            return self._build(devices)
        except BaseException:
            for d in reversed(devices):  # what was opened before a later part was refused
                d.close()
            raise

    def _build(self, devices: list[BlockDevice]) -> Built:
        clock: Clock = VirtualClock() if self.clock_kind() == "virtual" else WallClock()
        stack: dict[str, Any] = {"scenario": self.name, "protocol": self.protocol}
        sd_dev = None
        factories: dict[str, Callable[[], Any]] = {}
        counters: dict[str, tuple[BlockDevice, ...]] = {}
        if self.sd:
            kind, cfg = self.media_config("sd")
            sd_dev, meta = MEDIA[kind][1](cfg, self, clock)
            devices.append(sd_dev)
            host = getattr(sd_dev, "host", None)
            cache_cfg = self.cache_config(host)
            if cache_cfg is not None:
                sd_dev = devices[-1] = BlockCache(sd_dev, cache_cfg)
            stack["sd"] = {**meta, "device": sd_dev.describe()}
            stack["sd_fat"] = to_mapping(self.sd_fat)
            stack["sd_littlefs"] = to_mapping(self.sd_littlefs)
            fat_cfg, lfs_cfg = self.sd_fat, self.sd_littlefs
            dev = sd_dev
            factories["sd_fatfs"] = lambda: FatFileSystem(dev, fat_cfg)
            factories["sd_littlefs"] = lambda: LittleFsFileSystem(dev, lfs_cfg)
            if host is not None and isinstance(clock, VirtualClock):
                # the host's VFS/filesystem software time per read()/write() call
                call_ns = host.cycles_ns(host.fs_call_cycles)
                open_ns = host.cycles_ns(host.fs_open_cycles)
                for part in ("sd_fatfs", "sd_littlefs"):
                    make = factories[part]
                    factories[part] = (lambda make=make: CostedFileSystem(make(), clock, call_ns, open_ns))
        flash_raw = None
        if self.flash:
            kind, cfg = self.media_config("flash")
            flash_target, meta = MEDIA[kind][1](cfg, self, clock)
            # flash builders return a FlashTarget-like object with the parts' devices and factories
            devices.append(flash_target)  # type: ignore[arg-type]
            stack["flash"] = meta
            flash_raw = getattr(flash_target, "raw_device", None)
            factories.update(getattr(flash_target, "fs_factories", {}))
            counters.update(getattr(flash_target, "counter_devices", {}))
        if self.directory:
            dir_fs = open_directory(self.directory, drop_caches=self.directory_drop_caches)
            stack["dir"] = dir_fs.describe()
            factories["dir"] = lambda: dir_fs
        target = Target(sd_device=sd_dev, flash_raw_device=flash_raw, fs_factories=factories,
                        counter_devices=counters)
        return Built(target, clock, stack, devices)


_SCENARIO_KEYS = {"name", "description", "protocol", "seed", "espidf", "p2", "raw", "sd", "flash", "sd_fat", "sd_littlefs",
                  "extends"}


def builtin_names() -> list[str]:
    """Built-in scenarios; files starting with '_' are bases for ``extends`` and not listed."""
    return sorted(p.name[:-5] for p in (DATA / "scenarios").iterdir()
                  if p.name.endswith(".toml") and not p.name.startswith("_"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _load_raw(name_or_path: str, seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], Path | None]:
    if not isinstance(name_or_path, str) or not name_or_path:
        where = f"scenario {seen[-1]}: " if seen else ""
        raise ConfigError(f"{where}extends must name a scenario or a .toml file, not {name_or_path!r:.60}")
    if name_or_path in seen:
        raise ConfigError(f"scenario {name_or_path}: 'extends' loops ({' -> '.join(seen + (name_or_path,))})")
    if len(seen) > 16:
        raise ConfigError(f"scenario {seen[0]}: 'extends' goes more than 16 levels deep")
    p = Path(name_or_path)
    if name_or_path.endswith(".toml"):
        data, src = read_toml_file(p, "scenario file"), p.resolve().parent
        data.setdefault("name", p.stem)
    else:
        res = DATA / "scenarios" / f"{name_or_path}.toml"
        if "/" in name_or_path or not res.is_file():
            import difflib

            close = difflib.get_close_matches(name_or_path, builtin_names(), n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (see `sdbench scenarios`)"
            raise ConfigError(f"unknown scenario {name_or_path!r:.80}{hint}")
        data, src = parse_toml(res.read_text(), f"scenario {name_or_path}"), None
        data.setdefault("name", name_or_path)
    parent = data.pop("extends", None)
    if parent is not None:
        base, base_src = _load_raw(parent, seen + (name_or_path,))
        base.pop("name", None)
        data = _merge(base, data)
        src = src or base_src
    return data, src


def load(name_or_path: str, overrides: list[str] | None = None) -> Scenario:
    """Load a built-in scenario by name or a user's TOML file, with ``a.b=value`` overrides.

    The file must be valid as written: an override (``--set``, ``--runs``) never hides a bad value in it."""
    data, src = _load_raw(name_or_path)
    sc = _from_data(data, src)
    if overrides:
        sc = _from_data(apply_overrides(data, overrides), src)
    return sc


def _scalar(data: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """A top-level scalar of a scenario (name, protocol, seed, description), of exactly ``kind``."""
    v = data.get(key, default)
    if not isinstance(v, kind) or isinstance(v, bool):
        what = "an integer" if kind is int else "a string"
        raise ConfigError(f"scenario {str(data.get('name'))[:60]}: {key} must be {what}, not {v!r:.60}")
    return v


def _from_data(data: dict[str, Any], src: Path | None) -> Scenario:
    name = _scalar(data, "name", str, "")
    unknown = sorted(k for k in data if k not in _SCENARIO_KEYS and k not in _EXTRA_TABLES)
    if unknown:
        raise ConfigError(f"scenario {name}: unknown key {unknown[0]!r:.60}")
    protocol = _scalar(data, "protocol", str, "espidf")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"scenario {name}: unknown protocol {protocol!r:.60} (known: {', '.join(PROTOCOLS)})")
    seed = _scalar(data, "seed", int, 1)
    if not 0 <= seed < 1 << 63:
        raise ConfigError(f"scenario {name}: seed = {seed!r:.60} is outside 0..2^63-1")
    description = _scalar(data, "description", str, "")
    for section in ("sd", "flash", "sd_fat", *_EXTRA_TABLES):
        if section in data and not isinstance(data[section], dict):
            raise ConfigError(f"scenario {name}: [{section}] must be a table, not {data[section]!r:.60}")
    kw: dict[str, Any] = {}
    if "espidf" in data:
        kw["espidf"] = from_mapping(EspIdfConfig, data["espidf"], "espidf")
    if "p2" in data:
        kw["p2"] = from_mapping(P2Config, data["p2"], "p2")
    if "raw" in data:
        kw["raw_seq"] = from_mapping(RawSeqConfig, data["raw"], "raw")
    if "sd_fat" in data:
        kw["sd_fat"] = from_mapping(FatConfig, _merge(to_mapping(Scenario("x").sd_fat), data["sd_fat"]), "sd_fat")
    if "sd_littlefs" in data:
        kw["sd_littlefs"] = from_mapping(LittleFsConfig, data["sd_littlefs"], "sd_littlefs")
    sc = Scenario(name=name, description=description, protocol=protocol, seed=seed, sd=data.get("sd", {}),
                  flash=data.get("flash", {}), extra={k: data[k] for k in _EXTRA_TABLES if k in data},
                  source_dir=src, raw=data, **kw)
    # validate media tables and the protocols' own tables now, so errors come before any work
    for section in ("sd", "flash"):
        if getattr(sc, section):
            sc.media_config(section)
    sc.cache_config()
    from ..workloads import fstests, usbmsc

    if "fs_tests" in sc.extra:
        fstests.config_of(sc)
    if "usbmsc" in sc.extra:
        usbmsc.config_of(sc)
    return sc


#: extra top-level tables that other modules read from Scenario.extra (e.g. the P2 protocol's config)
_EXTRA_TABLES: set[str] = {"fs_tests", "usbmsc"}


def describe_all() -> list[tuple[str, str]]:
    out = []
    for n in builtin_names():
        data, _ = _load_raw(n)
        out.append((n, str(data.get("description", ""))))
    return out
