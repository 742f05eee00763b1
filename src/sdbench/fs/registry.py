"""The filesystem registry: every FileSystem sdbench can put on a block device.

A :class:`FileSystemSpec` names a filesystem, its option declarations and the
function that makes it over a device. ``sdbench list filesystems`` and the
protocols that choose a filesystem by name read this registry. A third-party
package adds one through the ``sdbench.filesystems`` entry point group, naming
a FileSystemSpec (docs/plugins.md); its FileSystem must pass the shared
conformance suite (:class:`sdbench.testing.FileSystemSuite`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..media.base import BlockDevice
from ..options import from_mapping
from ..registry import Registry
from .base import FileSystem
from .fat import FatConfig, FatFileSystem
from .littlefs import LittleFsConfig, LittleFsFileSystem
from .spiffs.config import SpiffsConfig
from .spiffs.fs import SpiffsFileSystem


@dataclass(frozen=True)
class FileSystemSpec:
    """One filesystem: its options and how to make it over a device (all a plugin has to provide)."""

    name: str
    summary: str                                    # one line for `sdbench list filesystems`
    config: type                                    # option declarations
    #: (device, options) -> an unmounted FileSystem on that device
    make: Callable[[BlockDevice, Any], FileSystem]
    #: "block" (any block device: SD cards, images) or "flash" (needs erase-before-write NOR semantics)
    medium: str = "block"

    def options(self, table: dict[str, Any], where: str) -> Any:
        return from_mapping(self.config, table, where)


_BUILTIN = (
    FileSystemSpec("fat", "FAT12/16/32 through FatFs (fatfs-ng), formatted as f_mkfs does", FatConfig,
                   lambda dev, cfg: FatFileSystem(dev, cfg)),
    FileSystemSpec("littlefs", "LittleFS through littlefs (littlefs-python), power-loss resilient", LittleFsConfig,
                   lambda dev, cfg: LittleFsFileSystem(dev, cfg)),
    FileSystemSpec("spiffs", "SPIFFS on NOR flash, on-flash format compatible with ESP-IDF's", SpiffsConfig,
                   lambda dev, cfg: SpiffsFileSystem(dev, cfg), medium="flash"),
)

#: built-in filesystems, then those of the ``sdbench.filesystems`` entry point group
FILESYSTEMS: Registry[FileSystemSpec] = Registry("filesystem", "sdbench.filesystems", FileSystemSpec, _BUILTIN)


def filesystems() -> dict[str, FileSystemSpec]:
    """Every filesystem, built-in first, then plugins."""
    return FILESYSTEMS.all()


def filesystem(name: str) -> FileSystemSpec:
    return FILESYSTEMS.get(name)
