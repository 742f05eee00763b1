"""The bus clock a host really makes, the clocks it refuses, and a clock above the card's rating.

A scenario's ``[sd.bus] clock_hz`` is the clock asked for, as a sketch asks for ``SD_SCK_MHZ(30)``.  A host
whose profile names the clock its divider works from (``bus_clock_source_hz``) runs the bus at the fastest
divided clock not above the request, as the SPI libraries compute it:

* ``integer``: any whole divisor (Arduino-ESP32 ``spiFrequencyToClockDiv``: APB / ((pre + 1)(n + 1)); the
  Due's ``SPISettings``: SCBR = F_CPU / (clock + 1) + 1; Teensy 4's LPSPI ``SCKDIV + 2``);
* ``even``: 2, 4, 6 ... (pico-sdk ``spi_set_baudrate``: an even prescale of at least 2 times a post-divider);
* ``power-of-two``: 2, 4 ... 256 (STM32 SPI_CR1 BR, STM32duino ``spi_getClkFreq`` / ``spi_init``).

The run uses the divided clock and says so in its warnings and metadata.  Above the host's own limit the
request is refused (:func:`check_bus_clock`, which the SD host driver also calls when it is built).  A host that
leaves the card in Default Speed (no CMD6, ``high_speed = false``: SdFat in SPI mode and over PIO SDIO) may clock
it above the card's rating: the card's timing is modelled as at any clock, and the run carries a warning and
metadata, since the card is run outside its specification (cards usually tolerate it).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import ConfigError
from .bus import BUS_MODES, BusConfig, SdBus
from .card import CardProfile
from .host import HostProfile, mhz_text

#: the largest power-of-two divisor (STM32 SPI_CR1 BR = 7: f_PCLK / 256)
MAX_POWER_OF_TWO = 256
#: the warning's words for a clock above the card's rating
ABOVE_RATING = "above the card's rated clock; cards usually tolerate it"


def divided_clock(host: HostProfile, requested_hz: int) -> tuple[int, int]:
    """(the bus clock ``host`` makes when ``requested_hz`` is asked for, the divisor; 0 = no divider modelled)."""
    src = host.bus_clock_source_hz
    if not src:
        return requested_hz, 0
    d = max(1, -(-src // requested_hz))  # the smallest divisor that is not above the request
    if host.bus_clock_divisors == "even":
        d = max(2, d + d % 2)
    elif host.bus_clock_divisors == "power-of-two":
        d = min(MAX_POWER_OF_TWO, max(2, 1 << (d - 1).bit_length()))
    return src // d, d


def resolve(host: HostProfile, bus: BusConfig, card: CardProfile, *,
            where: str = "sd.bus") -> tuple[BusConfig, dict[str, Any], list[str]]:
    """The bus a run uses for the clock asked for in ``bus``: (its configuration at the clock the host makes,
    metadata about the clock, warnings).  ConfigError (naming ``where``) for a request above the host's limit
    or above a card limit the host keeps to."""
    check_bus_clock(host, SdBus(bus), card, where=where)
    asked = bus.clock_hz
    real, divisor = divided_clock(host, asked)
    meta: dict[str, Any] = {"requested_hz": asked, "clock_hz": real}
    warnings: list[str] = []
    if divisor:
        meta.update(source_hz=host.bus_clock_source_hz, divisor=divisor)
    if real != asked:
        warnings.append(f"{where}.clock_hz: {asked} Hz asked for; host {host.name}'s divider makes {real} Hz "
                        f"({mhz_text(host.bus_clock_source_hz)} / {divisor}), and the run uses that")
    rated = card.max_clock_hz(host.high_speed)
    meta["card_rated_hz"] = rated
    meta["above_card_rating"] = real > rated
    if real > rated:
        mode = "SPI" if bus.kind == "spi" else "SD"
        warnings.append(f"{where}: {mhz_text(real)} is {ABOVE_RATING} (card {card.name} is rated {mhz_text(rated)} "
                        f"in {mode} mode Default Speed, and host {host.name} sends no CMD6 to switch it)")
    return (replace(bus, clock_hz=real) if real != asked else bus), meta, warnings


def check_bus_clock(host: HostProfile, bus: SdBus, card: CardProfile, *, where: str = "sd.bus") -> None:
    """Refuse a bus clock the host cannot generate or, for a host that switches cards to High Speed, the card
    does not take in that mode (ConfigError naming the option and the limit).  A host that leaves the card in
    Default Speed may clock it faster: a warning, not a refusal (:func:`resolve`)."""
    clk = bus.cfg.clock_hz
    if bus.uhs:
        _check_uhs_clock(host, bus, card, where)
        return
    if bus.cfg.mode == "hs" and not (host.high_speed and card.high_speed_max_clock_hz):
        whose = f"host {host.name}'s driver does not switch cards to it" if not host.high_speed else \
            f"card {card.name} has none"
        raise ConfigError(f"{where}.mode = \"hs\": no High Speed mode here ({whose})")
    if host.max_bus_clock_hz and clk > host.max_bus_clock_hz:
        raise ConfigError(f"{where}.clock_hz = {clk} Hz is above host {host.name}'s limit {host.max_bus_clock_hz} Hz "
                          f"(max_bus_clock_hz)")
    _check_cpu_tied_clock(host, clk, where)
    limit = card.max_clock_hz(host.high_speed and bus.cfg.mode != "ds")
    if clk > limit and host.high_speed:  # a host that sends no CMD6 may overclock: busclock warns
        mode = "SPI mode" if bus.is_spi else "SD mode"
        if limit == card.high_speed_max_clock_hz:
            why = "High Speed"
        elif bus.cfg.mode == "ds":
            why = f"Default Speed: {where}.mode = \"ds\""
        else:
            why = "Default Speed: the card has no High Speed mode"
        raise ConfigError(f"{where}.clock_hz = {clk} Hz is above card {card.name}'s limit {limit} Hz in {mode} "
                          f"({why})")


def _check_uhs_clock(host: HostProfile, bus: SdBus, card: CardProfile, where: str) -> None:
    """A UHS-I mode: the 4-bit bus, a mode both the host and the card support, a clock the host makes in it."""
    mode, clk = bus.cfg.mode, bus.cfg.clock_hz
    name = mode.upper()
    if bus.cfg.kind != "sd4":
        raise ConfigError(f"{where}.mode = {mode!r}: UHS-I modes run on the 4-bit SD bus (kind = \"sd4\"), not "
                          f"{bus.cfg.kind!r}")
    limit = host.uhs_max_clock_hz.get(mode)
    if limit is None:
        have = ", ".join(host.uhs_max_clock_hz) or "none"
        raise ConfigError(f"{where}.mode = {mode!r}: host {host.name} does not drive {name} (its UHS-I modes: {have}; "
                          f"uhs_max_clock_hz)")
    if not card.supports_mode(mode):
        have = ", ".join(card.uhs_modes.split()) or "none, a 3.3 V card"
        raise ConfigError(f"{where}.mode = {mode!r}: card {card.name} does not support {name} (its UHS-I modes: "
                          f"{have}; uhs_modes)")
    if clk > limit:
        raise ConfigError(f"{where}.clock_hz = {clk} Hz is above host {host.name}'s limit {limit} Hz in {name} "
                          f"(uhs_max_clock_hz; the mode's own limit is {BUS_MODES[mode].max_clock_hz} Hz)")
    _check_cpu_tied_clock(host, clk, where)


def _check_cpu_tied_clock(host: HostProfile, clk: int, where: str) -> None:
    """Refuse a bus clock above cpu_hz / min_clock_divider (a clock the CPU's own pins make)."""
    if host.min_clock_divider and clk * host.min_clock_divider > host.cpu_hz:
        raise ConfigError(f"{where}.clock_hz = {clk} Hz is above host {host.name}'s limit "
                          f"{host.cpu_hz // host.min_clock_divider} Hz (cpu_hz {host.cpu_hz} Hz / min_clock_divider "
                          f"{host.min_clock_divider})")
