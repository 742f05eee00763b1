"""SD bus models: the price of every command, response, token and data block
in bus clocks (framing per the SD Physical Layer Simplified Specification).

Native SD mode (1-bit or 4-bit): a command is 48 bits on CMD; the response
comes N_CR clocks later (48 bits, R2 136).  Each data block on DAT carries a
start bit, the payload spread over the lines, a CRC16 per line and an end
bit; blocks are separated by at least two clocks.  After a written block the
card returns a CRC status token on DAT0 and then holds DAT0 low while busy.

SPI mode: everything is bytes, 8 clocks each: a 6-byte command, N_CR filler
bytes, an R1 byte; data blocks are a start token + 512 B + CRC16; a written
block is answered by a data-response byte and busy (0x00) bytes.

Bus speed modes (``mode``): Default Speed and High Speed at 3.3 V, and the
UHS-I modes at 1.8 V signalling (SDR12, SDR25, SDR50, SDR104, DDR50), each
with its clock limit.  In DDR50 the DAT lines carry data on both clock
edges: a 512-byte block is 512 clocks of data per line on the 4-bit bus, and
each line's CRC is two interleaved CRC16 (one per edge), 16 clocks; the
start and end bits, the CMD line, the CRC status token and busy stay
single-edge.  ``auto`` is Default or High Speed by the clock, as before UHS.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ...options import opt

BUS_KINDS = ("sd4", "sd1", "spi")


@dataclass(frozen=True)
class BusMode:
    """One bus speed mode of the SD Physical Layer spec."""

    max_clock_hz: int      # the spec's clock limit (Linux include/linux/mmc/card.h UHS_*_MAX_DTR)
    uhs: bool              # UHS-I: 1.8 V signalling after CMD11, 4-bit bus only
    ddr: bool = False      # data on both clock edges


#: bus speed modes; CMD6 function group 1 selects them (SDR12 0, SDR25/High Speed 1, SDR50 2, SDR104 3, DDR50 4)
BUS_MODES = {
    "ds": BusMode(25_000_000, False), "hs": BusMode(50_000_000, False),
    "sdr12": BusMode(25_000_000, True), "sdr25": BusMode(50_000_000, True), "sdr50": BusMode(100_000_000, True),
    "sdr104": BusMode(208_000_000, True), "ddr50": BusMode(50_000_000, True, ddr=True),
}
#: the UHS-I modes (1.8 V signalling), in the order Linux prefers them (sd_update_bus_speed_mode)
UHS_MODES = ("sdr104", "ddr50", "sdr50", "sdr25", "sdr12")


@dataclass(frozen=True)
class BusConfig:
    kind: str = opt("sd4", choices=BUS_KINDS, help="sd4 = SD 4-bit, sd1 = SD 1-bit, spi = SPI mode")
    clock_hz: int = opt(40_000_000, unit="Hz", min=100_000, max=208_000_000, help="bus clock")
    ncr_clocks: int = opt(8, unit="clocks", min=2, max=64,
                          help="command-to-response gap N_CR (native: 2..64 clocks; SPI: rounded up to bytes, "
                               "the spec allows 1..8 bytes)")
    block_gap_clocks: int = opt(2, unit="clocks", min=0, max=1000,
                                help="minimum gap between data blocks / after a response (N_RC, N_WR)")
    mode: str = opt("auto", choices=("auto", *BUS_MODES),
                    help="bus speed mode: auto = Default or High Speed by the clock (3.3 V); ds, hs; UHS-I at "
                         "1.8 V: sdr12..sdr104, ddr50")


@dataclass(frozen=True)
class SdBus:
    """Arithmetic of one bus configuration; all results in nanoseconds."""

    cfg: BusConfig

    def __post_init__(self) -> None:
        if self.cfg.kind not in BUS_KINDS:
            raise ConfigError(f"bus.kind {self.cfg.kind!r} is not one of {', '.join(BUS_KINDS)}")

    @property
    def is_spi(self) -> bool:
        return self.cfg.kind == "spi"

    @property
    def lanes(self) -> int:
        return {"sd4": 4, "sd1": 1, "spi": 1}[self.cfg.kind]

    @property
    def uhs(self) -> bool:
        """A UHS-I mode: the card was switched to 1.8 V signalling (CMD11)."""
        m = BUS_MODES.get(self.cfg.mode)
        return m is not None and m.uhs

    @property
    def ddr(self) -> bool:
        return self.cfg.mode == "ddr50"

    def _data_clocks(self, nbytes: int) -> int:
        """A block's payload and CRC on each DAT line: one bit per clock, or two in DDR (CRC16 per edge)."""
        bits = nbytes * 8 // self.lanes
        return bits // 2 + 16 if self.ddr else bits + 16

    def ns(self, clocks: float) -> float:
        return clocks * 1e9 / self.cfg.clock_hz

    # ---- commands -------------------------------------------------------------------
    def command_clocks(self, response: str = "R1") -> int:
        """Command + N_CR + response (+ gap)."""
        c = self.cfg
        if self.is_spi:
            ncr_bytes = max(1, -(-c.ncr_clocks // 8))
            resp_bytes = {"R1": 1, "R1b": 1, "R2": 2, "R3": 5, "R7": 5, "none": 0}[response]
            return (6 + ncr_bytes + resp_bytes) * 8
        resp_bits = {"R1": 48, "R1b": 48, "R2": 136, "R3": 48, "R6": 48, "R7": 48, "none": 0}[response]
        return 48 + (c.ncr_clocks if resp_bits else 0) + resp_bits + c.block_gap_clocks

    def command_ns(self, response: str = "R1") -> float:
        return self.ns(self.command_clocks(response))

    # ---- data blocks ----------------------------------------------------------------
    def read_block_clocks(self, nbytes: int = 512) -> int:
        if self.is_spi:
            return (1 + nbytes + 2) * 8  # start token, data, CRC16
        return 1 + self._data_clocks(nbytes) + 1 + self.cfg.block_gap_clocks

    def write_block_clocks(self, nbytes: int = 512) -> int:
        if self.is_spi:
            return (1 + nbytes + 2 + 1) * 8  # token, data, CRC16, data-response byte
        # block + CRC status token on DAT0 (start, 3 bits, end) + N_WR
        return 1 + self._data_clocks(nbytes) + 1 + 5 + 2 * self.cfg.block_gap_clocks

    def read_block_ns(self, nbytes: int = 512) -> float:
        return self.ns(self.read_block_clocks(nbytes))

    def write_block_ns(self, nbytes: int = 512) -> float:
        return self.ns(self.write_block_clocks(nbytes))

    def stop_tran_ns(self) -> float:
        """SPI multi-block write end: the stop-tran token plus one byte before busy starts."""
        return self.ns(2 * 8) if self.is_spi else 0.0

    def poll_byte_ns(self) -> float:
        """SPI: one byte clocked while waiting for a token or for busy to end."""
        return self.ns(8)

    # ---- ceilings (for docs and tests) -------------------------------------------------
    def payload_ceiling_bytes_s(self, write: bool = False) -> float:
        clocks = self.write_block_clocks() if write else self.read_block_clocks()
        return 512 * self.cfg.clock_hz / clocks

    def raw_byte_rate_bytes_s(self) -> float:
        """Theoretical byte rate of the lines alone (SPI: clock/8; SD: clock*lanes/8, twice that in DDR)."""
        return self.cfg.clock_hz * self.lanes / 8 * (2 if self.ddr else 1)
