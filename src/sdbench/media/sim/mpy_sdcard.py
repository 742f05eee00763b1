"""MicroPython's ``sdcard.py`` driver (SPI mode) on the simulated card.

The driver is interpreted Python over ``machine.SPI``; its costs are the host
profile's cycle counts (``call_cycles`` per driver request, ``transaction_cycles``
per command, ``block_cycles`` per data block; see
``sdbench/data/hosts/esp32s3-micropython.toml``).  What differs from the ESP-IDF
SDSPI model is *how it waits*:

* After CMD17/CMD18 the driver polls one byte for the 0xFE start token and,
  if the card is not ready yet, calls ``time.sleep_ms(1)`` before the next
  poll.  A card whose read access is longer than one poll therefore costs a
  whole millisecond per single-block read; blocks after the first of a CMD18
  are usually ready at once.
* Write busy is polled one byte per Python loop iteration
  (``while spi.read(1, 0xFF)[0] == 0``), so the wait ends at the first poll
  after the card is ready.
* One command per request: CMD17/CMD24 for one block, CMD18 (+CMD12) or
  CMD25 (+stop-tran token) for several; no CRC (0xFFFF is sent), no CMD13
  after writes.

The SPI clock is the bus clock of the scenario.  ``SDCard(spi, cs)`` without a
``baudrate`` argument re-initialises the bus at its default of 1,320,000 Hz
after card initialisation, whatever the SPI object was created with; the
ESP32-S3 SPI peripheral divides 80 MHz by an integer, giving 1.311 MHz.
"""
from __future__ import annotations

import math
from typing import Any
from dataclasses import dataclass

from ...errors import ConfigError
from ...options import opt
from .bus import SdBus
from .card import MAX_TIME_US, CardProfile
from .host import HostProfile
from .sdhost import SECTOR, SdHostDriver


@dataclass(frozen=True)
class MpySdDriverConfig:
    """Waiting behaviour of MicroPython's sdcard.py (table ``[fs_tests.driver]``)."""

    poll_cycles: int = opt(6000, unit="cycles", min=0,
                           help="host cycles of one polling iteration beyond its SPI byte (a Python loop turn, "
                                "a 1-byte machine.SPI call, the ESP-IDF transaction set-up)")
    token_retry_sleep_us: float = opt(1000.0, unit="µs", min=0, max=MAX_TIME_US,
                                      help="sleep between start-token polls while the card is not ready "
                                           "(time.sleep_ms(1) in readinto)")


class MicroPythonSdCard(SdHostDriver):
    """The simulated card behind MicroPython's sdcard.py."""

    kind = "sim-sd-micropython"

    def __init__(self, host: HostProfile, bus: SdBus, card: CardProfile, clock, *, seed: int = 1,
                 driver: MpySdDriverConfig | None = None, log_commands: bool = False) -> None:
        if not bus.is_spi:
            raise ConfigError(f"MicroPython's sdcard.py drives the card in SPI mode: bus.kind must be \"spi\", "
                              f"not {bus.cfg.kind!r}")
        super().__init__(host, bus, card, clock, seed=seed, log_commands=log_commands)
        self.mpy = driver or MpySdDriverConfig()

    def _poll_ns(self) -> tuple[float, float]:
        """(CPU, bus) time of one polling iteration."""
        return self.host.cycles_ns(self.mpy.poll_cycles), self.bus.poll_byte_ns()

    def _spi_wait(self, ns: float, parts: Any = ()) -> None:
        # busy: one byte per Python loop turn, until a poll sees the card ready
        if ns <= 0:
            return
        t0 = self.vclock.now_ns()
        cpu, byte = self._poll_ns()
        n = max(1, math.ceil(ns / (cpu + byte)))
        self._spend(n * (cpu + byte), "card", "")  # waiting for the card, though the CPU spins meanwhile
        self._waited(t0, ns, parts)

    def _token_wait(self, ready_ns: float, parts: Any) -> None:
        """readinto(): poll for the start token, sleeping between polls; the token byte is the last poll."""
        t0 = self.vclock.now_ns()
        cpu, byte = self._poll_ns()
        period = cpu + byte
        sleep = self.mpy.token_retry_sleep_us * 1e3
        misses = 0 if ready_ns <= period else math.ceil((ready_ns - period) / (sleep + period))
        self._spend((misses + 1) * cpu, "host", "")
        self._spend((misses + 1) * byte, "bus", "")
        if misses:
            self._spend(misses * sleep, "rtos", "")
        # the card's access or gap, then polling (and the driver's sleeps) past it
        self._waited(t0, min(ready_ns, self.vclock.now_ns() - t0), parts, ticked=bool(misses))

    def _spi_read(self, lba: int, count: int) -> None:
        multi = count > 1
        name = "CMD18" if multi else "CMD17"
        t0 = self._command(name, lba)
        data_ns = self.bus.read_block_ns() - self.bus.poll_byte_ns()  # the token byte is the last poll
        for i in range(count):
            if i == 0:
                self._token_wait(self.card.read_access_ns(), "sd.card.read_access_us")
            else:
                self._token_wait(self.card.read_block_gap_ns(), "sd.card.read_block_gap_us")
            self._spend(data_ns, "bus", "sd.bus.clock_hz")
            self._data_cpu(SECTOR)
        self._event(t0, name, lba, count * SECTOR)
        if multi:
            t1 = self._command("CMD12", 0, "R1b")
            self._spend(self.bus.poll_byte_ns(), "bus", "sd.bus.clock_hz")  # cmd(12, skip1=True): one byte first
            self._event(t1, "CMD12", 0)
