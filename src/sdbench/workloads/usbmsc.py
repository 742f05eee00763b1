"""USB mass-storage throughput through a bridge MCU (knowledge/protocols.md §4).

The PC writes ``total_bytes`` sequentially in ``request_bytes`` SCSI commands,
then reads them back, through :class:`~sdbench.media.usbmsc.UsbMscBridge` in
each bridge mode named by the rows (``"<mode> write"`` / ``"<mode> read"``,
modes ``single-sector``, ``multi-sector``, ``background``).  Each request is
one timed call; figures are MB/s with MB = 10^6 bytes.  Every mode works on
its own region of the card (AU-aligned, from the middle of the card), so the
modes do not rewrite each other's data.

The card runs on its own virtual clock under the bridge (see the bridge's
module documentation).  For ``background write`` the run's metadata reports
what a power cut at a random moment of the row would lose
(``metadata["usbmsc"]["power_cut"]``).
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..clock import VirtualClock
from ..errors import ConfigError, SdbenchError
from ..media.base import BlockDevice, bottom
from ..media.usbmsc import MODES, UsbMscBridge, UsbMscConfig
from ..options import opt, to_mapping
from ..records import Row
from ..runner import Context

ROWS = tuple(f"{m} {op}" for m in MODES for op in ("write", "read"))
REGION_ALIGN_BYTES = 4 << 20


@dataclass(frozen=True)
class UsbMscProtocolConfig:
    """Options of the usbmsc protocol (table ``[usbmsc]``)."""

    rows: tuple[str, ...] = opt(factory=lambda: ("multi-sector write", "multi-sector read", "background write"),
                                help=f"rows to run, any of: {', '.join(ROWS)}")
    request_bytes: int = opt(4096, unit="B", min=512, max=1 << 24,
                             help="bytes per PC request (one SCSI READ/WRITE command); multiple of 512")
    total_bytes: int = opt(1 << 20, unit="B", min=512, help="bytes written and read per row and pass")
    passes: int = opt(1, min=1, max=1000, help="write+read passes per mode")
    start_lba: int = opt(0, unit="sector", min=0, help="first sector of the first mode's region; 0 = mid-card")
    label_prefix: str = opt("USB MSC", help="row labels: '<prefix> <mode> <op>'")
    bridge: UsbMscConfig = opt(factory=UsbMscConfig, help="USB link and bridge firmware")

    def __post_init__(self) -> None:
        bad = [r for r in self.rows if r not in ROWS]
        if bad:
            raise ConfigError(f"usbmsc.rows: unknown row {bad[0]!r} (known: {', '.join(ROWS)})")
        if not self.rows:
            raise ConfigError("usbmsc.rows must not be empty")
        if self.request_bytes % 512 or self.total_bytes % self.request_bytes:
            raise ConfigError("usbmsc.request_bytes must be a multiple of 512 B and divide usbmsc.total_bytes")


def config_of(sc: Any) -> UsbMscProtocolConfig:
    cfg = sc.options.get("usbmsc")  # checked when the scenario was loaded
    return cfg if cfg is not None else UsbMscProtocolConfig()


def _modes(cfg: UsbMscProtocolConfig) -> list[str]:
    return [m for m in MODES if any(r.startswith(m + " ") for r in cfg.rows)]


def _mb_s(nbytes: int):
    return lambda row: (nbytes / 1e6) / (row.time_ms / 1000.0) if row.time_ms > 0 else 0.0


def _card(sc: Any, built: Any, clock: VirtualClock) -> BlockDevice:
    """The scenario's simulated card (and [sd.cache], if any) on the card's own clock."""
    if built.sd_parts is None:
        raise ConfigError(f"scenario {sc.name}: protocol usbmsc needs a simulated card ([sd] media = \"sim\")")
    return built.new_sd_card(clock)


def _regions(cfg: UsbMscProtocolConfig, sector_count: int, ss: int) -> tuple[int, int]:
    """(first sector, bytes per mode's region): regions are AU-aligned, from ``start_lba`` or mid-card."""
    region = -(-cfg.total_bytes // REGION_ALIGN_BYTES) * REGION_ALIGN_BYTES
    au = REGION_ALIGN_BYTES // ss
    return cfg.start_lba or (sector_count // 2) // au * au, region


def preflight(sc: Any, built: Any) -> None:
    """Refuse, before any I/O, regions that do not fit the card: ConfigError naming the option."""
    cfg = config_of(sc)
    dev = built.target.sd_device
    if built.sd_parts is None or dev is None:
        raise ConfigError(f"scenario {sc.name}: protocol usbmsc needs a simulated card ([sd] media = \"sim\")")
    if "bridge" in built.stack.get("sd", {}):
        raise ConfigError(f"scenario {sc.name}: protocol usbmsc puts a bridge of each mode in front of the card "
                          f"itself; remove [sd.bridge]")
    g = dev.geometry  # the run's card is built from the same profile
    first, region = _regions(cfg, g.sector_count, g.sector_size)
    n = len(_modes(cfg))
    need = first * g.sector_size + n * region
    if need > g.size_bytes:
        start = "usbmsc.start_lba" if cfg.start_lba else "the middle of the card"
        raise ConfigError(f"usbmsc.total_bytes = {cfg.total_bytes} B: {n} mode region(s) of {region} B from sector "
                          f"{first} ({start}) end at {need} B, past the card's {g.size_bytes} B")


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = config_of(sc)
    clock = ctx.clock
    if not isinstance(clock, VirtualClock):
        raise ConfigError(f"scenario {sc.name}: protocol usbmsc needs a simulated card (virtual clock)")
    card_clock = VirtualClock()
    card = _card(sc, built, card_clock)
    built.target.sd_device = bottom(card)  # the card this run used (sdbench trace reads its command log)
    card_clock.advance_ns(clock.now_ns(), "idle")
    ss = card.geometry.sector_size
    first, region = _regions(cfg, card.geometry.sector_count, ss)
    modes = _modes(cfg)
    if first * ss + len(modes) * region > card.geometry.size_bytes:
        raise ConfigError(f"usbmsc.total_bytes = {cfg.total_bytes} B: the regions of the modes do not fit the "
                          f"{card.geometry.size_bytes} B card (lower usbmsc.start_lba or usbmsc.total_bytes)")
    calls = cfg.total_bytes // cfg.request_bytes
    data = random.Random(sc.seed).randbytes(cfg.request_bytes)
    meta: dict[str, Any] = {"bridge": to_mapping(cfg.bridge), "request_bytes": cfg.request_bytes,
                            "total_bytes": cfg.total_bytes}
    built.metadata["usbmsc"] = meta
    try:
        for mi, mode in enumerate(modes):
            base = first + mi * region // ss
            bridge = UsbMscBridge(card, clock, cfg.bridge, mode)
            devices = (bridge, card)
            label = f"{cfg.label_prefix} {mode}"
            w = ctx.row(f"{label} write", "write", cfg.request_bytes, devices, unit="MB/s",
                        value_fn=_mb_s(cfg.request_bytes))
            r = ctx.row(f"{label} read", "read", cfg.request_bytes, devices, unit="MB/s",
                        value_fn=_mb_s(cfg.request_bytes))
            want_w, want_r = f"{mode} write" in cfg.rows, f"{mode} read" in cfg.rows
            exposure = None
            for _ in range(cfg.passes):
                if want_w:
                    t0 = clock.now_ns()
                    for i in range(calls):
                        lba = base + i * cfg.request_bytes // ss
                        w.time(lambda lba=lba: bridge.write(lba, data))
                    if mode == "background":
                        exposure = bridge.unwritten_exposure(t0, clock.now_ns())
                    bridge.drain()  # untimed: the next row starts with the queue empty
                else:
                    # reads need the data: write it untimed, straight to the card
                    for i in range(calls):
                        card.write(base + i * cfg.request_bytes // ss, data)
                    clock.advance_ns(max(0, card_clock.now_ns() - clock.now_ns()), "other", "sd.bridge.card")
                if want_r:
                    for i in range(calls):
                        lba = base + i * cfg.request_bytes // ss
                        got = r.time(lambda lba=lba: bridge.read(lba, cfg.request_bytes // ss))
                        if got != data:
                            raise SdbenchError(f"usbmsc: {mode} read back wrong data at LBA {lba} (a model bug)")
            info = {"usb_packets": bridge.packets, "usb_frames": bridge.frames, "scsi_commands": bridge.commands,
                    "driver_calls": bridge.driver_calls}
            meta[mode] = info
            if exposure is not None:
                meta["power_cut"] = {**exposure, "row": f"{label} write",
                                     "note": "acknowledged-but-unwritten bytes over the row (time-weighted): a "
                                             "power cut at a random moment loses the mean on average, the max "
                                             "at worst"}
            if want_w:
                yield w.finish()
            if want_r:
                yield r.finish()
    finally:
        card.close()


def timed_calls(sc: Any) -> int:
    cfg = config_of(sc)
    return len(cfg.rows) * cfg.passes * (cfg.total_bytes // cfg.request_bytes)
