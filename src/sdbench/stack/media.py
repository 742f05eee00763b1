"""Media kinds a scenario's [sd] / [flash] table can name, each a config class and a builder.

``MEDIA`` maps the ``media`` key to (option declarations, builder, clock kind). A
builder gets the checked config, the scenario (its seed, source folder and the
command line's write grant) and the stack's clock, and returns the device (or
the flash target) with its stack metadata.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..clock import Clock
from ..errors import ConfigError
from ..media.base import BlockDevice, Geometry
from ..media.memory import MemoryDevice
from ..media.realtarget import open_device, open_image
from .flash import SimFlashConfig, build_sim_flash
from .loaded import flash_profiles, sd_profiles
from .sd import SimSdConfig, build_sim_sd
from ..options import opt, to_mapping


@dataclass(frozen=True)
class MemoryMediaConfig:
    """A RAM-backed card on the wall clock (measures sdbench's own code path)."""

    capacity_bytes: int = opt(16 * 10**9, unit="B", min=1 << 20, help="card capacity")
    sector_size_bytes: int = opt(512, unit="B", choices=(512, 4096), help="sector size")


def _build_memory(cfg: MemoryMediaConfig, scenario: Any, clock: Clock) -> tuple[BlockDevice, dict[str, Any]]:
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


def _build_image(cfg: ImageMediaConfig, scenario: Any, clock: Clock) -> tuple[BlockDevice, dict[str, Any]]:
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


def _build_device(cfg: DeviceMediaConfig, scenario: Any, clock: Clock) -> tuple[BlockDevice, dict[str, Any]]:
    from ..media.identity import identify

    if not cfg.path:
        raise ConfigError("sd.path: a device or image file is required for media = \"device\"")
    dev = open_device(cfg.path, writes=True, grant=scenario.write_grant, offset_bytes=cfg.offset_bytes,
                      size_bytes=cfg.size_bytes or None, direct={"auto": None, "on": True, "off": False}[cfg.direct])
    try:
        ident = identify(cfg.path)
    except Exception:  # identity is informative only
        ident = {}
    return dev, {"media": "device", **to_mapping(cfg), "identity": ident}  # type: ignore[return-value]


@dataclass(frozen=True)
class MediaKind:
    """One value of a scenario's ``media`` key."""

    config: type                                             # its option declarations
    build: Callable[..., tuple[Any, dict[str, Any]]]         # (config, scenario, clock) -> (device, metadata)
    clock: str                                               # "wall" or "virtual"
    section: str                                             # the table it belongs in: "sd" (a block device) or "flash"
    #: its builder takes ``medium_wrap`` and puts it around the medium inside (a flash target's partition);
    #: otherwise the device it returns is the medium
    wraps_medium: bool = False
    #: simulated media: (config, scenario folder) -> the profiles it is built from, loaded once
    #: (sdbench.stack.loaded); its builder takes them as ``loaded``
    profiles: Callable[[Any, Path | None], tuple[Any, ...]] | None = None


#: media kinds: the ``media`` key of [sd] or [flash]
MEDIA: dict[str, MediaKind] = {
    "memory": MediaKind(MemoryMediaConfig, _build_memory, "wall", "sd"),
    "image": MediaKind(ImageMediaConfig, _build_image, "wall", "sd"),
    "sim": MediaKind(SimSdConfig, build_sim_sd, "virtual", "sd", profiles=sd_profiles),
    "sim-nor": MediaKind(SimFlashConfig, build_sim_flash, "virtual", "flash", wraps_medium=True,
                         profiles=flash_profiles),
    "device": MediaKind(DeviceMediaConfig, _build_device, "wall", "sd"),
}
