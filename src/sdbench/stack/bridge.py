"""``[sd.bridge]``: a USB mass-storage bridge between the stack's user and a simulated card.

The user of the stack (a protocol, a filesystem) is then a PC: every block
request becomes a SCSI command over USB bulk-only transport
(:class:`~sdbench.media.usbmsc.UsbMscBridge`), and the card runs behind the
bridge's firmware on a clock of its own. A USB card reader on a Linux PC is
the same picture with a high-speed link (512-byte packets, 13 per 125 µs
microframe) in ``[sd.bridge.link]``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..clock import VirtualClock
from ..errors import ConfigError
from ..media.base import BlockDevice
from ..media.usbmsc import MODES, UsbMscBridge, UsbMscConfig
from ..options import opt, to_mapping
from .sd import SimSdParts


@dataclass(frozen=True)
class SdBridgeConfig:
    """The bridge in front of the card (table ``[sd.bridge]``)."""

    mode: str = opt("multi-sector", choices=MODES,
                    help="firmware callback: a driver call per sector, per chunk, or writes acked at once "
                         "(background)")
    link: UsbMscConfig = opt(factory=UsbMscConfig,
                             help="USB link and bridge firmware (default: full speed, an MCU)")


def build_bridge(cfg: SdBridgeConfig, parts: SimSdParts | None, clock: Any,
                 medium_wrap: Callable[[BlockDevice], BlockDevice] | None = None
                 ) -> tuple[UsbMscBridge, dict[str, Any]]:
    """A fresh card from ``parts`` on its own clock (inside ``medium_wrap``, if given), behind the bridge on the
    stack's ``clock``."""
    if parts is None or not isinstance(clock, VirtualClock):
        raise ConfigError("sd.bridge: a bridge goes in front of a simulated card ([sd] media = \"sim\")")
    card: BlockDevice = parts.driver(VirtualClock())
    if medium_wrap is not None:
        card = medium_wrap(card)
    return UsbMscBridge(card, clock, cfg.link, cfg.mode), to_mapping(cfg)
