"""The bus clock a host really makes, and a clock above the card's rating.

A scenario's ``[sd.bus] clock_hz`` is the clock asked for, as a sketch asks for ``SD_SCK_MHZ(30)``.  A host
whose profile names the clock its divider works from (``bus_clock_source_hz``) runs the bus at the fastest
divided clock not above the request, as the SPI libraries compute it:

* ``integer``: any whole divisor (Arduino-ESP32 ``spiFrequencyToClockDiv``: APB / ((pre + 1)(n + 1)); the
  Due's ``SPISettings``: SCBR = F_CPU / (clock + 1) + 1; Teensy 4's LPSPI ``SCKDIV + 2``);
* ``even``: 2, 4, 6 ... (pico-sdk ``spi_set_baudrate``: an even prescale of at least 2 times a post-divider);
* ``power-of-two``: 2, 4 ... 256 (STM32 SPI_CR1 BR, STM32duino ``spi_getClkFreq`` / ``spi_init``).

The run uses the divided clock and says so in its warnings and metadata.  Above the host's own limit the
request is refused (:func:`sdbench.media.sim.sdhost.check_bus_clock`).  A host that leaves the card in Default
Speed (no CMD6, ``high_speed = false``: SdFat in SPI mode and over PIO SDIO) may clock it above the card's
rating: the card's timing is modelled as at any clock, and the run carries a warning and metadata, since the
card is run outside its specification (cards usually tolerate it).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .bus import BusConfig, SdBus
from .card import CardProfile
from .host import HostProfile, mhz_text
from .sdhost import check_bus_clock

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
