"""What a protocol receives from a built stack: its devices and the filesystems it can make."""
from __future__ import annotations

from collections.abc import Callable

from typing import Any

from ..errors import ConfigError
from ..fs.base import FileSystem
from ..fs.stdio import StdioHost, StdioOptions, with_api
from ..media.base import BlockDevice


class Target:
    """What the protocol needs from a stack: devices and filesystems per part.

    The stack builder makes one (sdbench.stack.builder); tests can make one by hand.
    ``sd_device`` / ``flash_raw_device`` are the devices the raw tests use;
    ``make_fs(part)`` returns a fresh (unformatted-state-agnostic) FileSystem; ``make_fs(part, api="stdio")``
    the same behind newlib's FILE layer, on the simulated host that runs that part's filesystem (``hosts``).
    """

    def __init__(self, *, sd_device: BlockDevice | None = None, flash_raw_device: BlockDevice | None = None,
                 fs_factories: dict[str, Callable[[], FileSystem]] | None = None,
                 counter_devices: dict[str, tuple[BlockDevice, ...]] | None = None,
                 hosts: dict[str, StdioHost] | None = None, clock: Any = None) -> None:
        self.sd_device = sd_device
        self.flash_raw_device = flash_raw_device
        self.fs_factories = fs_factories or {}
        self.counter_devices = counter_devices or {}
        #: part -> the simulated host its filesystem runs on (parts on real media or a PC have none)
        self.hosts = hosts or {}
        self.clock = clock

    def make_fs(self, part: str, api: str = "posix", stdio: StdioOptions = StdioOptions(), *,
                where: str = "api") -> FileSystem:
        """A fresh filesystem of ``part`` as calls through ``api`` reach it (``where`` names the option in a
        refusal)."""
        try:
            fs = self.fs_factories[part]()
        except KeyError:
            raise ConfigError(f"this target has no filesystem for part {part!r}") from None
        return with_api(fs, api, self.clock, self.hosts.get(part), stdio, where=where)

    def devices_for(self, part: str, fallback: BlockDevice | None = None) -> tuple[BlockDevice, ...]:
        if part in self.counter_devices:
            return self.counter_devices[part]
        return (fallback,) if fallback is not None else ()
