"""SPI NOR flash chip model (W25Q32 / GD25Q32 class) on a virtual clock.

The chip is driven by *commands*, as a host driver drives a real part:

* ``cmd_read``: READ (03h), FAST READ (0Bh), dual/quad output (3Bh/6Bh) and
  dual/quad I/O (BBh/EBh).  A command costs opcode + address (+ mode bits) +
  dummy clocks, then ``8 * n / lanes`` data clocks.
* ``cmd_write_enable`` (WREN), ``cmd_read_status`` (RDSR: bit 0 WIP, bit 1 WEL).
* ``cmd_page_program`` (PP, 02h): one page buffer of ``page_size_bytes``; data
  that runs past the end of the page wraps to the page start, as on real parts
  (drivers must split at page boundaries).  Programming is a bitwise AND: a 1
  written over a 0 leaves the 0.  Such 0->1 attempts are counted; in strict
  mode they raise :class:`NorProgramError` naming the address.
* ``cmd_sector_erase`` (SE 4 KiB), ``cmd_block_erase_32k`` / ``_64k`` (BE32/BE64).

Program and erase start an internal busy period (WIP set) drawn from the
profile's datasheet typical/max times with a seeded lognormal spread, clipped
to the max.  Commands other than RDSR while busy, and program/erase without
WREN, raise errors: a real chip ignores them silently, which would hide a
driver bug in a simulator.

Bus time is charged to the clock's ``bus`` category at ``bus_clock_hz``;
the chip never charges host time.  Waiting for the busy period is the
caller's business (a driver polls RDSR; :meth:`wait_ready` just waits), so
the flash time lands in whichever category the caller chooses.

The chip is also a byte-addressed :class:`BlockDevice` (a simple programmer:
page programs split at page boundaries, erases by the largest aligned unit,
each waited for), so it passes the shared conformance suite.
"""
from __future__ import annotations

import math
import random
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...clock import VirtualClock
from ...errors import ConfigError, InternalError
from ... import profiles
from ...profiles import FIT_REL_SD_HELP, UNFITTED_HELP, check_fit_rel_sd
from ...options import opt, to_mapping
from ..base import BlockDevice, BlockDeviceError, DeviceStats, Geometry

SECTOR_BYTES = 4096
BLOCK32_BYTES = 32 * 1024
BLOCK64_BYTES = 64 * 1024

STATUS_WIP = 0x01
STATUS_WEL = 0x02

CMD_CLOCKS = 8          # every command starts with an 8-bit opcode on one lane
ADDR_BITS = 24          # 3-byte addressing (parts up to 16 MiB)
RDSR_CLOCKS = 16        # opcode + one status byte
#: bounds of datasheet times: far beyond any NOR part's program (ms) and block erase (seconds) maxima
MAX_PROGRAM_US = 1_000_000.0
MAX_ERASE_MS = 100_000.0


@dataclass(frozen=True)
class ReadFrame:
    """Framing of one read command: what precedes the data, and its data width."""

    opcode: int
    addr_lanes: int       # lanes carrying the 24 address bits
    mode_clocks: int      # continuous-read mode bits M7-0 (I/O commands only)
    dummy_clocks: int
    data_lanes: int

    @property
    def header_clocks(self) -> int:
        return CMD_CLOCKS + ADDR_BITS // self.addr_lanes + self.mode_clocks + self.dummy_clocks


# Names follow ESP-IDF's esp_flash_io_mode_t; framings are the W25Q/GD25Q datasheet ones.
READ_MODES: dict[str, ReadFrame] = {
    "slowrd": ReadFrame(0x03, 1, 0, 0, 1),   # READ: no dummy, limited clock
    "fastrd": ReadFrame(0x0B, 1, 0, 8, 1),   # FAST READ
    "dout": ReadFrame(0x3B, 1, 0, 8, 2),     # dual output
    "qout": ReadFrame(0x6B, 1, 0, 8, 4),     # quad output
    "dio": ReadFrame(0xBB, 2, 4, 0, 2),      # dual I/O: 8 mode bits on 2 lanes = 4 clocks
    "qio": ReadFrame(0xEB, 4, 2, 4, 4),      # quad I/O: 8 mode bits on 4 lanes + 4 dummy
}

TIMING_MODES = ("random", "typ", "max")


class NorProgramError(BlockDeviceError):
    """Strict mode: a program would have to turn a 0 bit into a 1."""


class NorCommandError(BlockDeviceError):
    """A command the chip would ignore (busy, write not enabled) or cannot accept."""


@dataclass(frozen=True)
class FlashChipProfile:
    """Datasheet figures of a NOR flash part.  Times are typical and maximum (AC table)."""

    name: str = opt("generic-32mbit", help="part name")
    description: str = opt("", help="what part this is and where its figures come from")
    capacity_bytes: int = opt(4 << 20, unit="B", min=64 * 1024,
                              help="array size: a multiple of 64 KiB, at most 16 MiB (3-byte addressing)")
    page_size_bytes: int = opt(256, unit="B", choices=(64, 128, 256, 512), help="page program buffer")
    max_clock_hz: int = opt(104_000_000, unit="Hz", min=1_000_000, help="highest SCLK for all but READ (03h)")
    max_read_clock_hz: int = opt(50_000_000, unit="Hz", min=1_000_000, help="highest SCLK for READ (03h)")
    dual_io: bool = opt(True, help="supports dual output / dual I/O reads (3Bh, BBh)")
    quad_io: bool = opt(True, help="supports quad output / quad I/O reads (6Bh, EBh)")
    byte_program_first_typ_us: float = opt(30.0, unit="µs", min=0, max=MAX_PROGRAM_US,
                                           help="tBP1: program time of the first byte")
    byte_program_first_max_us: float = opt(50.0, unit="µs", min=0, max=MAX_PROGRAM_US, help="tBP1 maximum")
    byte_program_next_typ_us: float = opt(2.5, unit="µs", min=0, max=MAX_PROGRAM_US,
                                          help="tBP2: each further byte of a program")
    byte_program_next_max_us: float = opt(12.0, unit="µs", min=0, max=MAX_PROGRAM_US, help="tBP2 maximum")
    page_program_typ_us: float = opt(400.0, unit="µs", min=0, max=MAX_PROGRAM_US, help="tPP: full page program")
    page_program_max_us: float = opt(3000.0, unit="µs", min=0, max=MAX_PROGRAM_US, help="tPP maximum")
    sector_erase_typ_ms: float = opt(45.0, unit="ms", min=0, max=MAX_ERASE_MS, help="tSE: 4 KiB sector erase")
    sector_erase_max_ms: float = opt(400.0, unit="ms", min=0, max=MAX_ERASE_MS, help="tSE maximum")
    block32_erase_typ_ms: float = opt(120.0, unit="ms", min=0, max=MAX_ERASE_MS, help="tBE1: 32 KiB block erase")
    block32_erase_max_ms: float = opt(1600.0, unit="ms", min=0, max=MAX_ERASE_MS, help="tBE1 maximum")
    block64_erase_typ_ms: float = opt(150.0, unit="ms", min=0, max=MAX_ERASE_MS, help="tBE2: 64 KiB block erase")
    block64_erase_max_ms: float = opt(2000.0, unit="ms", min=0, max=MAX_ERASE_MS, help="tBE2 maximum")
    busy_time_sigma: float = opt(0.1, min=0.0, max=2.0,
                                 help="log-space spread of busy times around typical (not a datasheet figure; "
                                      "clipped to maximum); 0 = always typical")
    endurance_cycles: int = opt(100_000, unit="erase cycles", min=1,
                                help="rated erase cycles per sector, for the wear summary")
    fit_rel_sd: dict[str, float] = opt(factory=dict, help=FIT_REL_SD_HELP)
    unfitted: dict[str, float] = opt(factory=dict, help=UNFITTED_HELP)

    def __post_init__(self) -> None:
        try:
            check_fit_rel_sd(self)
        except ValueError as e:
            raise ConfigError(f"flash chip {self.name}: {e}") from None
        if self.capacity_bytes % BLOCK64_BYTES:
            raise ConfigError(f"flash chip {self.name}: capacity_bytes ({self.capacity_bytes}) is not a multiple "
                              f"of 64 KiB")
        if self.capacity_bytes > 1 << ADDR_BITS:
            raise ConfigError(f"flash chip {self.name}: capacity_bytes above 16 MiB needs 4-byte addressing, "
                              f"which is not modelled")
        for what in ("byte_program_first", "byte_program_next", "page_program", "sector_erase",
                     "block32_erase", "block64_erase"):
            unit = "us" if "program" in what else "ms"
            typ, mx = getattr(self, f"{what}_typ_{unit}"), getattr(self, f"{what}_max_{unit}")
            if mx < typ:
                raise ConfigError(f"flash chip {self.name}: {what}_max_{unit} ({mx}) is below "
                                  f"{what}_typ_{unit} ({typ})")

    def program_time_us(self, nbytes: int, which: str = "typ") -> float:
        """Program time of ``nbytes`` (1..page) in one command, from the datasheet's three figures.

        ``tBP1 + (n-1)*tBP2`` (the per-byte rule), but never more than the straight
        line from tBP1 at one byte to tPP at a full page: many parts' tBP2 would
        put a full page above their own tPP, so both figures bound the time.
        """
        first = getattr(self, f"byte_program_first_{which}_us")
        nxt = getattr(self, f"byte_program_next_{which}_us")
        page = getattr(self, f"page_program_{which}_us")
        extra = max(nbytes - 1, 0)
        per_byte_rule = first + nxt * extra
        line_to_page = first + (page - first) * extra / max(self.page_size_bytes - 1, 1)
        return max(min(per_byte_rule, line_to_page), 0.0)




def list_chip_profiles() -> list[str]:
    """Names of the chip profiles shipped in ``sdbench/data/flash``."""
    return profiles.shipped("flash")


#: how many busy factors a shared stream keeps (8 bytes each, 8 MiB; the ESP-IDF protocol's flash half draws
#: about a million); a chip that draws more goes on with its own
FACTOR_STREAM_CAP = 1 << 20
TWO_PI = 2.0 * math.pi


class BusyFactors:
    """The lognormal busy factors exp(σ z) of one seed, z the standard normal draws of ``random.Random`` seeded
    as a chip seeds it, in draw order.  Every chip of one seed and σ in a process draws the same sequence, and a
    protocol builds many (its runs, the range members' replays, validate's scenarios), so one list serves them
    all (:func:`shared_busy_factors`); each chip keeps its own position.  The values are those a chip calling
    ``gauss(0.0, 1.0)`` on its own generator would get, in the same order."""

    __slots__ = ("values", "sigma", "cap", "_rng", "_lock")

    def __init__(self, rng: random.Random, sigma: float, cap: int | None) -> None:
        self.values = array("d")  # C doubles: the floats exactly, a quarter of a list's memory
        self.sigma = sigma
        self._rng = rng
        #: how many values it keeps at most (None: a chip's own stream, past a shared one's end, unbounded)
        self.cap = cap
        self._lock = threading.Lock()

    def grow(self, n: int) -> None:
        """At least ``n`` values (a shared stream: up to its cap)."""
        with self._lock:  # two threads extending at once would interleave their draws
            have = len(self.values)
            if have >= n or (self.cap is not None and have >= self.cap):
                return
            want = max(n, have + 4096)
            if self.cap is not None:
                want = min(want, self.cap)
            self._draw(want - have)

    def _draw(self, n: int) -> None:
        # random.Random.gauss(0.0, 1.0) n times, its Box-Muller pairs written out (a call per value costs more
        # than the value): two uniforms give z = cos(2πx)·r, then sin(2πx)·r, r = sqrt(-2 ln(1 - y)); the
        # generator keeps an unused second half in gauss_next, as gauss does
        rng, out, s = self._rng, self.values, self.sigma
        uniform, log, sqrt, cos, sin, exp = rng.random, math.log, math.sqrt, math.cos, math.sin, math.exp
        z = rng.gauss_next  # type: ignore[attr-defined]
        if z is not None and n:
            rng.gauss_next = None  # type: ignore[attr-defined]
            out.append(exp(s * z))
            n -= 1
        for _ in range(n // 2):
            x2pi = uniform() * TWO_PI
            r = sqrt(-2.0 * log(1.0 - uniform()))
            out.append(exp(s * (cos(x2pi) * r)))
            out.append(exp(s * (sin(x2pi) * r)))
        if n % 2:
            x2pi = uniform() * TWO_PI
            r = sqrt(-2.0 * log(1.0 - uniform()))
            out.append(exp(s * (cos(x2pi) * r)))
            rng.gauss_next = sin(x2pi) * r  # type: ignore[attr-defined]

    def full(self) -> bool:
        return self.cap is not None and len(self.values) >= self.cap

    def continued(self, ahead: array) -> "BusyFactors":
        """A chip's own stream from a full shared one's end: ``ahead`` (the shared values the chip has not used
        yet), then the draws that follow."""
        rng = random.Random()
        rng.setstate(self._rng.getstate())
        own = BusyFactors(rng, self.sigma, None)
        own.values = ahead
        return own


_shared_factors: dict[tuple[int, float], BusyFactors] = {}
_shared_lock = threading.Lock()


def forget_busy_factors() -> None:
    """Drop the shared streams (a benchmark that times a first run in a process)."""
    with _shared_lock:
        _shared_factors.clear()


def shared_busy_factors(seed: int, sigma: float) -> BusyFactors:
    """The process's busy factor stream of ``seed`` and ``sigma`` (NorChipConfig.seed, busy_time_sigma)."""
    with _shared_lock:
        s = _shared_factors.get((seed, sigma))
        if s is None:
            s = _shared_factors[(seed, sigma)] = BusyFactors(random.Random(f"nor-busy:{seed}"), sigma,
                                                            FACTOR_STREAM_CAP)
        return s


def load_chip_profile(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> FlashChipProfile:
    """Load a chip profile by shipped name (``w25q32jv``) or from a TOML file path."""
    return profiles.load(FlashChipProfile, "flash", str(name_or_path), overrides, what="flash chip profile")


@dataclass(frozen=True)
class NorChipConfig:
    """How a chip instance behaves (not datasheet figures)."""

    seed: int = opt(1, help="seed of the program/erase time spread")
    strict: bool = opt(False, help="raise on a program that would set a bit 0->1 (layers that always erase first)")
    timing: str = opt("random", choices=TIMING_MODES,
                      help="random = seeded spread around typical; typ = always typical; max = always maximum")
    bus_clock_hz: int = opt(40_000_000, unit="Hz", min=1_000_000,
                            help="SCLK for direct block-device access (a host driver sets its own)")
    read_mode: str = opt("fastrd", choices=tuple(READ_MODES), help="read command for direct block-device access")


@dataclass
class NorStats(DeviceStats):
    """Block-device counters plus what the chip itself saw (commands, 0->1 attempts, erases).

    ``stats.erase_counts`` (set by the chip, not a counter field) is the per-sector
    wear array; ``reset()`` leaves it alone, as wear does not reset.
    """

    read_commands: int = 0
    status_reads: int = 0
    page_programs: int = 0
    bytes_programmed: int = 0
    zero_to_one_programs: int = 0   # PP commands that tried to set at least one bit 0->1
    zero_to_one_bytes: int = 0
    zero_to_one_bits: int = 0
    sector_erases: int = 0
    block32_erases: int = 0
    block64_erases: int = 0
    busy_ns: int = 0                # sum of program/erase busy periods


class NorFlashChip(BlockDevice):
    """A SPI NOR flash chip: byte-addressed, AND programming, timed commands."""

    kind = "nor-flash"

    def __init__(self, profile: FlashChipProfile | None = None, clock: VirtualClock | None = None,
                 config: NorChipConfig | None = None) -> None:
        self.profile = profile or FlashChipProfile()
        self.config = config or NorChipConfig()
        p = self.profile
        geometry = Geometry(sector_size=1, sector_count=p.capacity_bytes, read_size=1, prog_size=1,
                            erase_size=SECTOR_BYTES, erase_value=0xFF)
        super().__init__(geometry, clock if clock is not None else VirtualClock())
        if not isinstance(self.clock, VirtualClock):
            raise InternalError("a simulated flash chip needs a virtual clock (the stack builder makes one)")
        self.vclock: VirtualClock = self.clock
        self.stats: NorStats = NorStats()
        self._mem = np.full(p.capacity_bytes, 0xFF, dtype=np.uint8)
        self._mv = memoryview(self._mem)  # the same bytes, for byte-string speed on small spans
        self._erased = b"\xff" * BLOCK64_BYTES  # erased cells, to compare spans with
        #: erase cycles per 4 KiB sector (wear); never reset by stats.reset()
        self.erase_counts = np.zeros(p.capacity_bytes // SECTOR_BYTES, dtype=np.int64)
        self.stats.erase_counts = self.erase_counts  # type: ignore[attr-defined]
        #: the busy factors (BusyFactors), from the first draw; the index of its values[0] among the chip's draws;
        #: how many draws the chip has made
        self._factors: BusyFactors | None = None
        self._factors_base = 0
        self._draws = 0
        self._busy_until_ns = 0
        self._busy = False
        #: the ledger key of what the chip is busy with (a wait for it is charged there)
        self.busy_key = "flash.chip.program"
        self._wel = False
        self._page = p.page_size_bytes
        self._clock_hz = 0
        self._ns_per_clock = 0.0
        self.set_bus_clock(self.config.bus_clock_hz)
        # per-n program times in ns, computed once (n = 1..page)
        self._prog_typ_ns = [p.program_time_us(n, "typ") * 1e3 for n in range(self._page + 1)]
        self._prog_max_ns = [p.program_time_us(n, "max") * 1e3 for n in range(self._page + 1)]
        #: program and erase times are drawn (timing "random" with a spread), not typical or maximum
        self._drawn = self.config.timing == "random" and p.busy_time_sigma > 0.0

    # ---- bus ------------------------------------------------------------------------
    def set_bus_clock(self, clock_hz: int) -> None:
        """Set SCLK (the host's flash clock).  READ (03h) has its own, lower limit."""
        if clock_hz <= 0:
            raise ConfigError(f"flash bus clock must be positive, got {clock_hz} Hz")
        if clock_hz > self.profile.max_clock_hz:
            raise ConfigError(f"flash clock {clock_hz / 1e6:g} MHz is above {self.profile.name}'s maximum "
                              f"{self.profile.max_clock_hz / 1e6:g} MHz")
        self._clock_hz = clock_hz
        self._ns_per_clock = 1e9 / clock_hz

    @property
    def bus_clock_hz(self) -> int:
        return self._clock_hz

    def clocks_ns(self, clocks: int) -> float:
        return clocks * self._ns_per_clock

    @staticmethod
    def read_clocks(nbytes: int, mode: str = "fastrd", extra_dummy_clocks: int = 0) -> int:
        """Bus clocks of one read command of ``nbytes`` (header + data)."""
        f = READ_MODES[mode]
        return f.header_clocks + extra_dummy_clocks + -(-nbytes * 8 // f.data_lanes)

    @staticmethod
    def program_clocks(nbytes: int) -> int:
        return CMD_CLOCKS + ADDR_BITS + 8 * nbytes

    @property
    def rdsr_ns(self) -> float:
        return RDSR_CLOCKS * self._ns_per_clock

    def check_read_mode(self, mode: str) -> None:
        if mode not in READ_MODES:
            raise ConfigError(f"unknown flash read mode {mode!r} (known: {', '.join(READ_MODES)})")
        f = READ_MODES[mode]
        if f.data_lanes == 2 and not self.profile.dual_io:
            raise ConfigError(f"{self.profile.name} does not support dual reads ({mode})")
        if f.data_lanes == 4 and not self.profile.quad_io:
            raise ConfigError(f"{self.profile.name} does not support quad reads ({mode})")
        if mode == "slowrd" and self._clock_hz > self.profile.max_read_clock_hz:
            raise ConfigError(f"READ (03h) at {self._clock_hz / 1e6:g} MHz is above {self.profile.name}'s "
                              f"{self.profile.max_read_clock_hz / 1e6:g} MHz limit; use fast read")

    # ---- state ----------------------------------------------------------------------
    @property
    def busy_until_ns(self) -> int:
        """Virtual time at which the running program/erase ends (past if idle)."""
        return self._busy_until_ns

    def is_busy(self) -> bool:
        self._settle()
        return self._busy

    def _settle(self) -> None:
        if self._busy and self.vclock.now_ns() >= self._busy_until_ns:
            self._busy = False
            self._wel = False  # WEL clears when a program/erase completes

    def _bus(self, clocks: int) -> None:
        self.vclock.advance_ns(clocks * self._ns_per_clock, "bus", "flash.host.flash_clock_hz")

    def _start_write_op(self, name: str) -> None:
        self._settle()
        if self._busy:
            raise NorCommandError(f"{name} sent while the chip is busy (poll RDSR until WIP clears)")
        if not self._wel:
            raise NorCommandError(f"{name} sent without WREN: the chip would ignore it")

    def _set_busy(self, ns: float) -> None:
        step = int(round(ns))
        self._busy = True
        self._busy_until_ns = self.vclock.now_ns() + step
        self.stats.busy_ns += step

    def _draw_ns(self, typ_ns: float, max_ns: float) -> float:
        mode = self.config.timing
        if mode == "typ":
            return typ_ns
        if mode == "max":
            return max_ns
        sigma = self.profile.busy_time_sigma
        if sigma <= 0.0 or typ_ns <= 0.0:
            return typ_ns
        values, i = self.busy_factors(1)
        self._draws += 1
        return min(typ_ns * values[i], max_ns)

    def program_busy_ns(self, ks: tuple[int, ...]) -> list[int]:
        """The busy times (whole ns, as :meth:`_set_busy` keeps them) of page programs of ``ks`` bytes each, drawn
        in order as :meth:`cmd_page_program` draws them one by one (for a driver that replays a run of programs
        in one step)."""
        typs, maxs = self._prog_typ_ns, self._prog_max_ns
        if not self._drawn:
            if self.config.timing == "max":
                return [round(maxs[k]) for k in ks]
            return [round(typs[k]) for k in ks]
        k = ks[0]
        typ, mx = typs[k], maxs[k]
        if len(ks) == 1 and typ > 0.0:  # one program (a small write): no list of factors, no call if it is there
            s, i = self._factors, self._draws - self._factors_base
            values = s.values if s is not None and i < len(s.values) else self.busy_factors(1)[0]
            i = self._draws - self._factors_base  # (busy_factors may have moved the stream's base)
            self._draws += 1
            ns = typ * values[i]
            return [round(mx if mx < ns else ns)]
        values, i = self.busy_factors(len(ks))
        if typ > 0.0 and ks.count(k) == len(ks):  # all of one size (the usual run): no lookups per program
            self._draws += len(ks)
            factors = values[i:i + len(ks)]
            if typ * max(factors) <= mx:  # none clipped (a product grows with its factor)
                return list(map(round, map(typ.__mul__, factors)))
            return [round(mx if mx < (ns := typ * f) else ns) for f in factors]
        out = []
        for k in ks:
            typ = typs[k]
            if typ <= 0.0:
                out.append(round(typ))  # _draw_ns: no draw
                continue
            ns = typ * values[i]
            i += 1
            self._draws += 1
            mx = maxs[k]
            out.append(round(mx if mx < ns else ns))
        return out

    def program_run_draws(self, k: int, n: int, ahead: int) -> tuple[array, int] | None:
        """The factors of the busy times of ``n`` page programs of ``k`` bytes, drawn at once: ``(values, i)``,
        the draws ``values[i:i + n]`` (``values[i:i + ahead]`` are there too, still to draw), for a driver that
        works out a run's busy times itself (sdbench.media.sim.program_runs); None when they are not drawn
        (timing typ or max, no spread, a program of no time): then :meth:`program_busy_ns`."""
        if not self._drawn or self._prog_typ_ns[k] <= 0.0:
            return None
        values, i = self.busy_factors(max(n, ahead))
        self._draws += n
        return values, i

    def program_times_ns(self, k: int) -> tuple[float, float]:
        """The typical and maximum busy time of a page program of ``k`` bytes (ns)."""
        return self._prog_typ_ns[k], self._prog_max_ns[k]

    def polled_idle(self, busy_until_ns: int, busy_key: str) -> None:
        """The state a program or erase ending at ``busy_until_ns`` leaves once a status poll has seen WIP clear (WEL
        cleared with it), for a driver that replays the commands and the polls in one step."""
        self._busy_until_ns = busy_until_ns
        self._busy = False
        self._wel = False
        self.busy_key = busy_key

    def busy_factors(self, n: int) -> tuple[array, int]:
        """``(values, i)``: ``values[i:i + n]`` are the factors exp(σ z) of the chip's next ``n`` busy draws
        (a busy time is typical x factor, clipped to the maximum).  The caller adds the number it used to
        ``_draws``."""
        s = self._factors
        if s is None:
            s = self._factors = shared_busy_factors(self.config.seed, self.profile.busy_time_sigma)
        i = self._draws - self._factors_base
        if i + n > len(s.values):
            if s.full():
                # past the shared stream's end: the chip's own, from where the shared one stopped
                s = self._factors = s.continued(s.values[i:])
                self._factors_base, i = self._draws, 0
            elif s.cap is None:
                # the chip's own stream: drop what it used
                s.values = s.values[i:]
                self._factors_base, i = self._draws, 0
            s.grow(i + n)
            if i + n > len(s.values):  # reached the shared cap just now
                return self.busy_factors(n)
        return s.values, i

    # ---- commands -------------------------------------------------------------------
    def cmd_read(self, addr: int, nbytes: int, mode: str = "fastrd", extra_dummy_clocks: int = 0) -> bytes:
        """One read command; the address wraps at the end of the array as on real parts."""
        self._settle()
        if self._busy:
            raise NorCommandError("read sent while the chip is busy (poll RDSR until WIP clears)")
        f = READ_MODES[mode]
        self._bus(f.header_clocks + extra_dummy_clocks + -(-nbytes * 8 // f.data_lanes))
        self.vclock.count_command("READ")
        self.stats.read_commands += 1
        cap = self.profile.capacity_bytes
        addr %= cap
        end = addr + nbytes
        if end <= cap:
            return self._mem[addr:end].tobytes()
        out = bytearray()
        while nbytes > 0:
            n = min(nbytes, cap - addr)
            out += self._mem[addr:addr + n].tobytes()
            nbytes -= n
            addr = 0
        return bytes(out)

    def cmd_write_enable(self) -> None:
        self._settle()
        if self._busy:
            raise NorCommandError("WREN sent while the chip is busy")
        self._bus(CMD_CLOCKS)
        self.vclock.count_command("WREN")
        self._wel = True

    def cmd_read_status(self) -> int:
        """RDSR: allowed while busy (that is how a host polls)."""
        self._bus(RDSR_CLOCKS)
        self.vclock.count_command("RDSR")
        self.stats.status_reads += 1
        self._settle()
        return (STATUS_WIP if self._busy else 0) | (STATUS_WEL if self._wel else 0)

    def note_status_reads(self, count: int) -> None:
        """Account ``count`` RDSR commands whose time the caller already charged (batched polling)."""
        self.vclock.count_command("RDSR", count)
        self.stats.status_reads += count
        self._settle()

    # ---- fast-path support (for a host driver that keeps time itself) ----------------
    # A driver may replay a whole command sequence arithmetically (:meth:`span_zero_to_one`, :meth:`and_span`,
    # :meth:`mem_view`) with exactly the time, counters and state the command-by-command path gives; such a
    # replay calls none of the command methods above, so a driver that offers one also offers a switch back
    # to sending commands one by one (Esp32FlashDriver's reference_path).
    _SMALL_SPAN = 512  # below this, int arithmetic beats numpy for the 0->1 check

    def mem_view(self, addr: int, nbytes: int) -> bytes:
        """Array contents ``addr..addr+nbytes`` (no wrap, no time, no stats): the data of batched reads."""
        return self._mem[addr:addr + nbytes].tobytes()

    def span_zero_to_one(self, addr: int, data: bytes | memoryview) -> np.ndarray | None:
        """Per byte, the bits ``data`` would have to set 0->1 at ``addr..`` (no wrap); None when there are none."""
        n = len(data)
        if n <= len(self._erased) and self._erased.startswith(self._mv[addr:addr + n]):
            return None  # erased cells (the usual case: a byte compare, far cheaper than the bitwise test)
        if n <= self._SMALL_SPAN and not (int.from_bytes(data, "little")
                                          & ~int.from_bytes(self._mv[addr:addr + n], "little")):
            return None
        up = np.frombuffer(data, dtype=np.uint8) & ~self._mem[addr:addr + n]
        return up if up.any() else None

    def and_span(self, addr: int, data: bytes | memoryview, clean: bool) -> None:
        """AND ``data`` into the array at ``addr..`` (no wrap): the cell side of a run of page programs.
        ``clean``: :meth:`span_zero_to_one` found nothing, so the AND is the data itself."""
        if clean:
            self._mv[addr:addr + len(data)] = data
        else:
            self._mem[addr:addr + len(data)] &= np.frombuffer(data, dtype=np.uint8)

    def cmd_page_program(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        """PP: AND ``data`` into one page; bytes past the page end wrap to its start."""
        self._start_write_op("PP")
        n = len(data)
        self._bus(CMD_CLOCKS + ADDR_BITS + 8 * n)
        self.vclock.count_command("PP")
        page = self._page
        addr %= self.profile.capacity_bytes
        base = addr - addr % page
        off = addr - base
        d = np.frombuffer(bytes(data), dtype=np.uint8)
        if n > page:  # the page buffer keeps the last `page` bytes clocked in
            off = (off + n - page) % page
            d = d[n - page:]
        k = len(d)
        if off + k <= page:
            segs = [(base + off, d)]
        else:
            first = page - off
            segs = [(base + off, d[:first]), (base, d[first:])]
        bad_bytes = 0
        bad_bits = 0
        for start, seg in segs:
            old = self._mem[start:start + len(seg)]
            up = seg & ~old
            if up.any():
                if self.config.strict:
                    i = int(np.flatnonzero(up)[0])
                    raise NorProgramError(
                        f"strict NOR: program at 0x{start + i:06X} would set bits 0->1 (cell 0x{int(old[i]):02X}, "
                        f"data 0x{int(seg[i]):02X}); erase the sector first")
                bad_bytes += int(np.count_nonzero(up))
                bad_bits += int(np.unpackbits(up).sum())
        for start, seg in segs:
            self._mem[start:start + len(seg)] &= seg
        st = self.stats
        st.page_programs += 1
        st.bytes_programmed += k
        if bad_bytes:
            st.zero_to_one_programs += 1
            st.zero_to_one_bytes += bad_bytes
            st.zero_to_one_bits += bad_bits
        self._set_busy(self._draw_ns(self._prog_typ_ns[k], self._prog_max_ns[k]))
        self.busy_key = "flash.chip.program"

    def _erase_cmd(self, name: str, addr: int, size: int, typ_ms: float, max_ms: float) -> None:
        self._start_write_op(name)
        self._bus(CMD_CLOCKS + ADDR_BITS)
        self.vclock.count_command(name)
        self.erase_cells(addr, size)
        self._set_busy(self._draw_ns(typ_ms * 1e6, max_ms * 1e6))
        self.busy_key = "flash.chip.erase"

    def erase_cells(self, addr: int, size: int) -> None:
        """The cell side of an erase of the ``size``-byte unit holding ``addr`` (no time, no checks): its cells to
        0xFF and one erase cycle more on each of its sectors; for :meth:`_erase_cmd` and a driver's fast path."""
        addr %= self.profile.capacity_bytes
        start = addr - addr % size  # the chip ignores the low address bits
        if size <= len(self._erased):  # a byte copy and one counter: far cheaper than numpy's slice operations
            self._mv[start:start + size] = self._erased[:size]
        else:
            self._mem[start:start + size] = 0xFF
        if size == SECTOR_BYTES:
            self.erase_counts[start // SECTOR_BYTES] += 1
        else:
            self.erase_counts[start // SECTOR_BYTES:(start + size) // SECTOR_BYTES] += 1

    def cmd_sector_erase(self, addr: int) -> None:
        p = self.profile
        self._erase_cmd("SE", addr, SECTOR_BYTES, p.sector_erase_typ_ms, p.sector_erase_max_ms)
        self.stats.sector_erases += 1

    def cmd_block_erase_32k(self, addr: int) -> None:
        p = self.profile
        self._erase_cmd("BE32", addr, BLOCK32_BYTES, p.block32_erase_typ_ms, p.block32_erase_max_ms)
        self.stats.block32_erases += 1

    def cmd_block_erase_64k(self, addr: int) -> None:
        p = self.profile
        self._erase_cmd("BE64", addr, BLOCK64_BYTES, p.block64_erase_typ_ms, p.block64_erase_max_ms)
        self.stats.block64_erases += 1

    def wait_ready(self, category: str = "flash") -> None:
        """Let virtual time pass until the running program/erase has finished."""
        now = self.vclock.now_ns()
        if self._busy and self._busy_until_ns > now:
            self.vclock.advance_ns(self._busy_until_ns - now, category, self.busy_key)
        self._settle()

    # ---- inspection -----------------------------------------------------------------
    def peek(self, addr: int, nbytes: int) -> bytes:
        """Array contents without a command (no time, no stats): for tests and tools."""
        return self._mem[addr:addr + nbytes].tobytes()

    def wear(self) -> dict[str, float]:
        """Erase-cycle summary over all 4 KiB sectors."""
        c = self.erase_counts
        return {"sectors": int(c.size), "total_erases": int(c.sum()), "max_erases": int(c.max()),
                "min_erases": int(c.min()), "mean_erases": float(c.mean()),
                "max_wear_fraction": float(c.max()) / self.profile.endurance_cycles}

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["profile"] = to_mapping(self.profile)
        d["config"] = to_mapping(self.config)
        return d

    # ---- BlockDevice primitives (a simple programmer, no host overhead) -------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        self.wait_ready()
        self.check_read_mode(self.config.read_mode)
        return self.cmd_read(lba, count, self.config.read_mode)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        page = self._page
        pos = 0
        n = len(data)
        while pos < n:
            addr = lba + pos
            k = min(page - addr % page, n - pos)
            self.wait_ready()
            self.cmd_write_enable()
            self.cmd_page_program(addr, data[pos:pos + k])
            pos += k
        self.wait_ready()

    def _erase(self, lba: int, count: int) -> None:
        addr, end = lba, lba + count
        while addr < end:
            self.wait_ready()
            self.cmd_write_enable()
            left = end - addr
            if addr % BLOCK64_BYTES == 0 and left >= BLOCK64_BYTES:
                self.cmd_block_erase_64k(addr)
                addr += BLOCK64_BYTES
            elif addr % BLOCK32_BYTES == 0 and left >= BLOCK32_BYTES:
                self.cmd_block_erase_32k(addr)
                addr += BLOCK32_BYTES
            else:
                self.cmd_sector_erase(addr)
                addr += SECTOR_BYTES
        self.wait_ready()
