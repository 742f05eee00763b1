"""An example sdbench plugin: a filesystem ("flatfs") and a protocol ("file-roundtrip").

sdbench finds both through the entry points in this package's pyproject.toml::

    [project.entry-points."sdbench.protocols"]
    file-roundtrip = "sdbench_example_plugin:PROTOCOL"

    [project.entry-points."sdbench.filesystems"]
    flatfs = "sdbench_example_plugin:FILESYSTEM"

Each names one registry entry: a ProtocolSpec and a FileSystemSpec (docs/plugins.md in sdbench).
"""
from __future__ import annotations

from sdbench.fs.registry import FileSystemSpec

from .flatfs import FlatFs, FlatFsConfig
from .roundtrip import PROTOCOL, RoundTripConfig

FILESYSTEM = FileSystemSpec(
    "flatfs", "example plugin: a flat file table and contiguous files, first-fit allocation", FlatFsConfig,
    lambda device, cfg: FlatFs(device, cfg))

__all__ = ["FILESYSTEM", "PROTOCOL", "FlatFs", "FlatFsConfig", "RoundTripConfig"]
