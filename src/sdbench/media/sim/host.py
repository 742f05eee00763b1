"""Host profiles: the MCU and its driver's software costs, in CPU cycles.

Costs are in cycles at ``cpu_hz`` so a change of system clock is expressible
(the P2 benchmark ran the same code at 350 and 250 MHz).  Profiles are data in
``sdbench/data/hosts/*.toml``; docs/hosts.md lists the shipped hosts and where
their figures come from.

A profile's one-line description is composed (:attr:`HostProfile.description`)
from its text fields ``mcu`` and ``software``, which may hold no clock figure,
and from its parameters, so an overridden clock shows in it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ...errors import ConfigError
from ...options import opt, to_mapping
from ...profiles import FIT_REL_SD_HELP, UNFITTED_HELP, check_fit_rel_sd
from .newlib import NewlibStdio
from .bus import BUS_MODES, UHS_MODES

DRIVERS = ("sdmmc", "sdspi", "p2spi", "generic", "sdfat-spi", "sdio", "linux-mmc")
#: linux-mmc: the multi-block transfers the host driver sends with CMD23 SET_BLOCK_COUNT (when the card takes it)
CMD23_USE = ("none", "reads", "all")
#: sdfat-spi, sdio: which multi-block transfers stay open for the next request at the following LBA
KEEP_OPEN = ("none", "writes", "all")
#: sdio: how the host waits for the card's programming (and erase) busy
BUSY_WAITS = ("cmd13", "dat0")
#: what the host's disk glue does with a filesystem's trim request
TRIM_COMMANDS = ("none", "discard", "erase")
#: the divisors a host's bus clock divider has (HostProfile.bus_clock_divisors)
BUS_CLOCK_DIVISORS = ("integer", "even", "power-of-two")
#: an SD data block
SECTOR_BYTES = 512
#: bound of time-like profile values: longer than any SD or driver timeout by far, and well inside the floats
MAX_TIME_US = 10_000_000.0
#: bound of per-byte software costs (a millisecond per byte even at 1 GHz)
MAX_CYCLES_PER_BYTE = 1_000_000.0
#: a figure with a clock unit ("80 MHz", "240MHz", "32.768 kHz"): in a profile's text it would go stale
#: when the parameter it repeats is overridden, so clocks come from the parameters only
CLOCK_FIGURE = re.compile(r"\d(?:[\d_.,]*\d)?\s*[kmg]?hz\b", re.IGNORECASE)
#: what a host profile's old free-text ``description`` became (options.from_mapping names it on refusal)
#: help of the ``stdio`` block host profiles embed
STDIO_HELP = "newlib stdio (fopen/fprintf/fgetc) here: per-call CPU costs, FILE buffer size (docs/stdio.md)"
DESCRIPTION_RETIRED = ("write the MCU or board in mcu and the driver and its build in software, without clock "
                       "figures; the description is composed from them and the profile's clock parameters")


def mhz_text(hz: float) -> str:
    """A clock as a description shows it: "240 MHz", "49.5 MHz"."""
    return f"{hz / 1e6:g} MHz"


def host_metadata(profile: Any) -> dict[str, Any]:
    """A host profile as a run's stack records it: its fields, with the composed description after the name."""
    fields_ = to_mapping(profile)
    return {"name": fields_.pop("name"), "description": profile.description, **fields_}


def check_text_fields(profile: Any, names: tuple[str, ...], clocks: str) -> None:
    """Refuse a clock figure in the text fields ``names`` of ``profile`` (ConfigError naming the field);
    ``clocks`` names the parameters that hold the clocks instead."""
    for name in names:
        m = CLOCK_FIGURE.search(getattr(profile, name))
        if m:
            raise ConfigError(f"host {profile.name!r:.60}: {name} holds a clock figure ({m.group(0)!r:.30}); "
                              f"clocks come from the parameters ({clocks}), which the description shows")


@dataclass(frozen=True)
class HostProfile:
    RETIRED_OPTIONS: ClassVar[dict[str, str]] = {"description": DESCRIPTION_RETIRED}

    name: str = opt("generic", help="host name")
    mcu: str = opt("", help="MCU or board, e.g. \"ESP32-S3\"; no clock figures (the description adds cpu_hz)")
    software: str = opt("", help="driver and its build, e.g. \"ESP-IDF v5 SDMMC host driver\"; no clock figures "
                                 "(the description adds the clocks)")
    driver: str = opt("generic", choices=DRIVERS,
                      help="ESP-IDF sdmmc/sdspi; p2spi: P2 SPI; sdfat-spi: SdFat; sdio: MCU SD host; linux-mmc: "
                           "Linux; generic: 1 command/request")
    cpu_hz: int = opt(240_000_000, unit="Hz", min=1_000_000, help="CPU clock the cycle counts run at")
    transaction_cycles: int = opt(6000, unit="cycles", min=0,
                                  help="software cost of one command transaction (set up, interrupt, wake-up)")
    block_cycles: int = opt(0, unit="cycles", min=0,
                            help="software cost per 512-byte data block (per-block transactions, DMA refill)")
    byte_cycles: float = opt(0.0, unit="cycles/B", min=0, max=MAX_CYCLES_PER_BYTE,
                             help="software cost per data byte moved by the CPU (bit-banging, smart-pin FIFO)")
    crc_cycles_per_byte: float = opt(0.0, unit="cycles/B", min=0, max=MAX_CYCLES_PER_BYTE,
                                     help="software CRC16 over data blocks")
    copy_cycles_per_byte: float = opt(0.25, unit="cycles/B", min=0, max=MAX_CYCLES_PER_BYTE,
                                      help="memcpy cost (bounce buffers, copies)")
    call_cycles: int = opt(0, unit="cycles", min=0,
                           help="cost of one block-device call above the driver (VFS, diskio glue)")
    fs_call_cycles: int = opt(0, unit="cycles", min=0,
                              help="cost of one file read()/write() call through the VFS and filesystem, "
                                   "excluding device I/O")
    fs_open_cycles: int = opt(0, unit="cycles", min=0,
                              help="cost of one file open() through the VFS and filesystem, excluding device I/O")
    dma_align_bytes: int = opt(4, unit="B", min=1, help="buffer address alignment the DMA needs; 1 = none")
    rtos_tick_hz: int = opt(100, unit="Hz", min=1, max=1000,
                            help="RTOS tick (vTaskDelay(1) waits for the next tick); FreeRTOS in ESP-IDF allows "
                                 "1..1000 Hz (CONFIG_FREERTOS_HZ)")
    poll_yield_after_us: float = opt(100_000.0, unit="µs", min=1.0, max=MAX_TIME_US,
                                     help="sdmmc: busy polling with CMD13 yields one tick after this long, "
                                          "then after doubling intervals")
    max_bus_clock_hz: int = opt(0, unit="Hz", min=0,
                                help="highest bus clock the host driver makes (ESP-IDF SDMMC: 160 MHz / 4 = 40 MHz); "
                                     "faster is refused; 0 = no limit")
    min_clock_divider: int = opt(0, min=0,
                                 help="the bus clock is at most cpu_hz / this (a clock made by the CPU's own pins, "
                                      "e.g. P2 smart pins); 0 = not tied to cpu_hz")
    high_speed: bool = opt(True, help="the driver switches the card to High Speed (CMD6) for clocks above its "
                                      "Default Speed limit (ESP-IDF's SDSPI does not)")
    # UHS-I bus modes (SD-mode driver kinds): what the host makes, and what switching to 1.8 V and tuning cost
    uhs_max_clock_hz: dict[str, int] = opt(factory=dict, unit="Hz",
                                           help="UHS-I modes the host drives at 1.8 V and its highest clock in each, "
                                                "e.g. { sdr50 = 100_000_000 }; {} = none")
    voltage_switch_us: float = opt(0.0, unit="µs", min=0, max=MAX_TIME_US,
                                   help="host time of the switch to 1.8 V after CMD11 (clock stopped, regulator "
                                        "settled, card releasing DAT)")
    tuning_modes: tuple[str, ...] = opt((), choices=UHS_MODES,
                                        help="UHS-I modes in which the driver tunes its sampling point with CMD19 "
                                             "(SDR104 needs it)")
    tuning_commands: int = opt(0, min=0, max=1000, help="CMD19 (64-byte tuning block) one tuning sends")
    tuning_gap_us: float = opt(0.0, unit="µs", min=0, max=MAX_TIME_US,
                               help="host time after each CMD19 before the next (a delay, or a CMD13 poll)")
    # read only by the driver kind linux-mmc
    max_request_bytes: int = opt(524288, unit="B", min=512, max=1 << 30,
                                 help="linux-mmc: the largest request the block layer sends (max_req_size, "
                                      "max_sectors); larger ones are split")
    cmd23: str = opt("all", choices=CMD23_USE,
                     help="linux-mmc: multi-block transfers sent with CMD23 SET_BLOCK_COUNT when the card takes it "
                          "(else CMD12 stops them)")
    cmdq: bool = opt(False, help="linux-mmc: command queueing on (CQHCI): with a card that has a queue, each "
                                 "request is a CMD44/45/46/47 task")

    trim_command: str = opt("discard", choices=TRIM_COMMANDS,
                            help="a filesystem trim becomes: none (refused), discard (DISCARD, else ERASE if the card "
                                 "lacks it), erase")
    # read only by the driver kinds sdfat-spi and sdio (their defaults leave every other kind as it was)
    spi_byte_cycles: float = opt(0.0, unit="cycles", min=0, max=MAX_CYCLES_PER_BYTE,
                                 help="sdfat-spi: CPU cost of one single-byte SPI transfer (command bytes, 0xFF polls, "
                                      "tokens, CRC) beyond its 8 clocks")
    keep_open: str = opt("none", choices=KEEP_OPEN,
                         help="sdfat-spi, sdio: CMD18/CMD25 left open for the next request at the following LBA: none, "
                              "writes (multi-block only), all")
    busy_wait: str = opt("cmd13", choices=BUSY_WAITS,
                         help="sdio: write and erase busy waited by CMD13 polled back to back (no RTOS ticks) or by "
                              "watching DAT0")
    status_before_transfer: bool = opt(False, help="sdio: one CMD13 before each CMD17/CMD18/CMD24/CMD25 (SdFat's Teensy "
                                                   "SDIO driver)")
    # newlib's FILE layer above the VFS (fopen/fprintf/fgetc): one block of its own, see media/sim/newlib.py
    stdio: NewlibStdio = opt(factory=NewlibStdio, help=STDIO_HELP)
    # how a block's data moves (sdfat-spi, sdio), the clock the host's divider makes, and SdFat's polling: every
    # default leaves a profile as it was (docs/hosts.md, "Data phase and bus clock")
    spi_frame_gap_clocks: float = opt(0.0, unit="clocks", min=0, max=64,
                                      help="sdfat-spi: idle clocks between the bytes of a block on the bus (e.g. "
                                           "the PL022's frame pulse in SPI mode 0)")
    spi_chunk_bytes: int = opt(0, unit="B", min=0, max=SECTOR_BYTES,
                               help="sdfat-spi: a block moves in chunks of this many bytes, the bus idle between "
                                    "them; 0 = no chunks")
    spi_chunk_cycles: float = opt(0.0, unit="cycles", min=0, max=MAX_CYCLES_PER_BYTE,
                                  help="sdfat-spi: CPU cost of one chunk (spi_chunk_bytes), the bus idle "
                                       "meanwhile")
    fifo_cycles_per_byte: float = opt(0.0, unit="cycles/B", min=0, max=MAX_CYCLES_PER_BYTE,
                                      help="sdfat-spi, sdio: CPU cost per byte of a FIFO the CPU feeds while the bus "
                                           "runs; a block takes the longer of the two")
    poll_cycles: float = opt(0.0, unit="cycles", min=0, max=MAX_CYCLES_PER_BYTE,
                             help="sdfat-spi: CPU cost of one pass of a polling loop beyond its byte (SdFat's timeout "
                                  "check calls millis())")
    read_clock_ratio: float = opt(1.0, min=0.05, max=1.0,
                                  help="sdio: the clock of read data as a fraction of the bus clock (PIO SDIO at 5 "
                                       "cycles against 4: 0.8)")
    auto_stop: bool = opt(False, help="sdio: the controller sends CMD12 after a multi-block transfer by itself (no "
                                      "command transaction of the CPU)")
    bus_clock_source_hz: int = opt(0, unit="Hz", min=0, max=10_000_000_000,
                                   help="the clock the host's divider divides: the bus runs at the fastest divided "
                                        "clock not above the one asked for; 0 = none")
    bus_clock_divisors: str = opt("integer", choices=BUS_CLOCK_DIVISORS,
                                  help="the divider's divisors: integer (1, 2, 3 ...), even (2, 4, 6 ...), "
                                       "power-of-two (2, 4 ... 256)")
    fit_rel_sd: dict[str, float] = opt(factory=dict, help=FIT_REL_SD_HELP)
    unfitted: dict[str, float] = opt(factory=dict, help=UNFITTED_HELP)

    def __post_init__(self) -> None:
        check_fit_rel_sd(self)
        check_text_fields(self, ("mcu", "software"),
                          "cpu_hz, rtos_tick_hz, max_bus_clock_hz, min_clock_divider, bus_clock_source_hz")
        for mode, hz in self.uhs_max_clock_hz.items():
            if mode not in UHS_MODES:
                raise ValueError(f"uhs_max_clock_hz: {str(mode)[:20]!r} is not a UHS-I mode ({', '.join(UHS_MODES)})")
            limit = BUS_MODES[mode].max_clock_hz
            if isinstance(hz, bool) or not isinstance(hz, int) or not 0 < hz <= limit:
                raise ValueError(f"uhs_max_clock_hz.{mode} = {hz!r:.20} is not a clock in Hz of 1..{limit} "
                                 f"(the mode's limit)")

    @property
    def bus_clock_limit(self) -> tuple[int, str]:
        """The highest bus clock this host makes, in Hz, and where it comes from; (0, "") = no limit."""
        limits = []
        if self.max_bus_clock_hz:
            limits.append((self.max_bus_clock_hz, "max_bus_clock_hz"))
        if self.min_clock_divider:
            limits.append((self.cpu_hz // self.min_clock_divider, f"CPU clock / {self.min_clock_divider}"))
        return min(limits) if limits else (0, "")

    @property
    def description(self) -> str:
        """One line for readers: mcu and software, then the figures from the parameters, so an override
        of cpu_hz, the tick or a clock limit shows here too."""
        head = f"{self.mcu or 'host'} at {mhz_text(self.cpu_hz)}"
        if self.software:
            head += f", {self.software}"
        facts = [f"driver kind {self.driver}"]
        if self.driver == "sdmmc":  # the only kind that waits in RTOS ticks (CMD13 yields, erase busy)
            facts.append(f"RTOS tick {self.rtos_tick_hz} Hz")
        limit, source = self.bus_clock_limit
        if limit:
            facts.append(f"bus clock at most {mhz_text(limit)}"
                         + (f" ({source})" if source != "max_bus_clock_hz" else ""))
        if self.bus_clock_source_hz:
            facts.append(f"bus clock {mhz_text(self.bus_clock_source_hz)} / {self.bus_clock_divisors} divisor")
        facts.append("High Speed switching (CMD6)" if self.high_speed else "no High Speed switching (Default Speed)")
        if self.uhs_max_clock_hz:
            facts.append("UHS-I " + ", ".join(f"{m.upper()} at most {mhz_text(hz)}"
                                              for m, hz in self.uhs_max_clock_hz.items()))
        if self.driver == "linux-mmc":
            facts.append(f"requests up to {self.max_request_bytes // 1024} KiB"
                         + (", command queueing" if self.cmdq else ""))
        if self.driver in ("sdmmc", "sdio") and self.dma_align_bytes > 1:  # the only kinds with an aligned path
            facts.append(f"DMA buffers {self.dma_align_bytes}-byte aligned")
        return f"{head}; {', '.join(facts)}"

    def cycles_ns(self, cycles: float) -> float:
        return cycles * 1e9 / self.cpu_hz
