"""SD card model: what the card adds on top of the bus.

* Read access: time from the read command to the first data block
  (``read_access_us``), and between blocks of a multi-block read
  (``read_block_gap_us``).  A read that continues past a flash page or an
  AU boundary pays extra (``read_page_cross_us``, ``read_au_cross_us``):
  what flashbench's alignment test and ``sdbench probe`` find boundaries by.
* Writes: busy after a single-block write, per block inside a multi-block write
  (visible when programming is slower than the bus), and at the end of a
  multi-block write (flushing its buffer).
* Random-write area: a small write (shorter than ``random_max_bytes``) into an
  AU that is not open, unless it continues the stream of the open AU before it
  across their boundary, goes to a page-mapped log of
  ``random_area_bytes`` (pSLC blocks in real cards, the hybrid log-block FTLs of
  the BAST/FAST family) instead of opening the AU: each ``random_unit_bytes``
  unit it covers costs ``random_write_us`` of program and map update, which is
  then the write's whole busy (no flush of the sequential path's).  When the
  log is full, the AU whose entries came first is folded: its valid data is
  copied into a new AU with the merge's costs (``merge_base_ms``,
  ``merge_copy_us_per_kib``), freeing its entries.  An AU that opens an update
  block (a stream into it) takes its entries along: its merge copies those the
  stream did not rewrite, with the data block's other pages.  An update block
  with no room left for a write is merged at once, and the write goes where a
  write into an AU that is not open goes.  Scattered writes over a span
  much larger than the log therefore run fast until the log fills, then slow to
  a fold per few writes: the collapse real cards show after tens of MB.  An area
  of 0 B (the default) is a card without one: every such write opens its AU.
* Allocation units (AU): writes land in an *update block* per open AU, as
  in hybrid-mapping FTLs (cf. flashbench).  When an update block is full, or a
  write needs an AU that is not open and all ``open_aus`` slots are taken, the
  card merges: erase plus copying the valid pages that are not in the update
  block.  An AU written front to back in one update block merges by switching
  blocks (no copy).  A stream that runs past the end of its update block is
  merged with it: the new block takes the stream's pages of the AU and the AU
  closes (no second update block for the AU's last pages).  Merges are
  deterministic given the write sequence.
* Random pauses: background work the host cannot predict, drawn per write
  command from a seeded distribution (probability and lognormal length).
  A different seed changes only these.
* Erase: busy per erase command plus per erased sector.
* Initialisation: the ACMD41 power-up loop until the card reports ready.

All times are physical (µs or ms in the field names).  Card profiles are
data (``sdbench/data/cards/*.toml``), fitted by ``sdbench calibrate``.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from ...options import opt
from ...profiles import FIT_REL_SD_HELP, UNFITTED_HELP, check_fit_rel_sd

#: bound of time-like card figures: far beyond any SD timeout (write busy 250 ms SDHC / 500 ms SDXC), and far
#: inside what the virtual clock's arithmetic holds
MAX_TIME_US = 10_000_000.0
MAX_TIME_MS = MAX_TIME_US / 1000.0
#: SDUC, the largest SD capacity class: up to 128 TiB
MAX_CAPACITY_BYTES = 128 << 40
#: the speed class symbols an SD card may carry, by family: SD Speed Class (C), UHS Speed Class (U), Video Speed
#: Class (V), Application Performance Class (A); informational only, no timing reads them
SPEED_CLASS_MARKINGS = {"C": ("C2", "C4", "C6", "C10"), "U": ("U1", "U3"), "V": ("V6", "V10", "V30", "V60", "V90"),
                        "A": ("A1", "A2")}
#: the UHS bus interfaces a card may be marked with ("" = none or not recorded)
UHS_BUSES = ("", "UHS-I", "UHS-II", "UHS-III")
#: CMD38 (ERASE) argument per kind of erase (SD Physical Layer spec 4.3.5)
ERASE_ARGS = {"erase": 0, "discard": 1, "fule": 2}
#: the UHS-I bus modes a card may support (media/sim/bus.py BUS_MODES has their clocks)
CARD_UHS_MODES = ("sdr12", "sdr25", "sdr50", "ddr50", "sdr104")


#: card fields that do nothing while another field of the card is 0: the random-write area's unit, limit and
#: program time without an area (a card holds no such field from the population)
INERT_WITHOUT = {"random_write_us": "random_area_bytes", "random_unit_bytes": "random_area_bytes",
                 "random_max_bytes": "random_area_bytes"}
#: card fields that say what the card is, how big and what its bus allows, not how long it takes: a population
#: value (the median of the shipped fitted cards) or a population member never carries them
NOT_TIMING = frozenset({"name", "description", "timing_from", "speed_class", "uhs_bus", "capacity_bytes",
                        "erased_byte", "rca", "default_speed_max_clock_hz", "high_speed_max_clock_hz", "fit_rel_sd",
                        "unfitted", "uhs_modes", "cmd23", "cmdq"})


@dataclass(frozen=True)
class CardProfile:
    name: str = opt("generic", help="card name")
    timing_from: str = opt("", choices=("", "population"),
                           help="population: each timing field the file does not set is the median of the fitted "
                                "cards that fitted it")
    description: str = opt("", help="what card this is and where its figures come from")
    speed_class: str = opt("", help="speed class symbols printed on the card (C2..C10, U1, U3, V6..V90, A1, A2), e.g. "
                                    "\"C10 U3 V30 A2\"; \"\" = not recorded")
    uhs_bus: str = opt("", help="UHS bus interface printed on the card as a Roman numeral: UHS-I, UHS-II or UHS-III; "
                                "\"\" = none or not recorded")
    capacity_bytes: int = opt(16_000_000_000, unit="B", min=1 << 20, max=MAX_CAPACITY_BYTES,
                               help="user capacity, whole 512-byte sectors (SDUC cards reach 128 TiB)")
    read_access_us: float = opt(250.0, unit="µs", min=0, max=MAX_TIME_US, help="read command to first data block")
    read_block_gap_us: float = opt(2.0, unit="µs", min=0, max=MAX_TIME_US,
                                   help="extra time per further block of a multi-block read")
    read_page_cross_us: float = opt(0.0, unit="µs", min=0, max=MAX_TIME_US,
                                    help="extra time of a read that continues past a flash page boundary (the card "
                                         "fetches the next page)")
    read_au_cross_us: float = opt(0.0, unit="µs", min=0, max=MAX_TIME_US,
                                  help="extra time of a read that continues into the next allocation unit (the card "
                                       "looks up its mapping)")
    write_busy_single_us: float = opt(400.0, unit="µs", min=0, max=MAX_TIME_US,
                                      help="busy after a single-block write (CMD24)")
    write_busy_block_us: float = opt(10.0, unit="µs", min=0, max=MAX_TIME_US,
                                     help="busy after each block inside a multi-block write (CMD25)")
    write_busy_end_us: float = opt(1200.0, unit="µs", min=0, max=MAX_TIME_US,
                                   help="busy after the last block of a multi-block write (buffer flush)")
    page_bytes: int = opt(16384, unit="B", min=512, help="flash page: smallest unit the card programs")
    small_write_unit_bytes: int = opt(512, unit="B", min=512,
                                      help="update-block space a scattered write shorter than a page takes (small "
                                           "FAT/directory writes go to a sector-mapped buffer)")
    au_bytes: int = opt(4 << 20, unit="B", min=16384, help="allocation unit (erase block group)")
    update_block_bytes: int = opt(4 << 20, unit="B", min=16384,
                                  help="space of one AU's update block before it must be merged")
    open_aus: int = opt(2, unit="AUs", min=1, max=64, help="AUs the card keeps open for writing at once")
    preconditioned: bool = opt(True, help="every page holds data from earlier use, so merges copy what the update "
                                          "block did not rewrite")
    first_write_ms: float = opt(0.0, unit="ms", min=0, max=MAX_TIME_MS,
                                help="extra busy of the first write after power-up (loading the mapping tables)")
    initial_update_fill_bytes: int = opt(0, unit="B", min=0,
                                         help="bytes already in AU 0's update block when the run starts "
                                              "(state left by earlier use)")
    merge_base_ms: float = opt(0.0, unit="ms", min=0, max=MAX_TIME_MS,
                               help="fixed cost of a merge that copies (erase, bookkeeping)")
    switch_merge_ms: float = opt(2.0, unit="ms", min=0, max=MAX_TIME_MS,
                                 help="cost of a switch merge: an AU written front to back becomes the data block, "
                                      "only the old block is erased")
    merge_copy_us_per_kib: float = opt(0.0, unit="µs/KiB", min=0, max=MAX_TIME_US,
                                       help="cost of copying one KiB of valid data during a merge")
    random_area_bytes: int = opt(0, unit="B", min=0, max=1 << 34,
                                 help="page-mapped log that takes small scattered writes; 0 = none (every one opens "
                                      "its AU)")
    random_unit_bytes: int = opt(4096, unit="B", min=512, max=1 << 20,
                                 help="mapping and program unit of the random-write area")
    random_max_bytes: int = opt(16384, unit="B", min=512, max=1 << 24,
                                help="writes shorter than this into an AU that is not open go to the random-write area")
    random_write_us: float = opt(0.0, unit="µs", min=0, max=MAX_TIME_US,
                                 help="program and map update of one random_unit_bytes unit in the random-write area")
    pause_probability: float = opt(0.0, min=0.0, max=1.0,
                                   help="chance per write command of a background pause (seeded)")
    pause_median_ms: float = opt(50.0, unit="ms", min=0, max=MAX_TIME_MS, help="median length of a background pause")
    pause_sigma: float = opt(0.8, min=0.0, max=5.0, help="lognormal shape of pause lengths")
    erase_busy_us: float = opt(250.0, unit="µs", min=0, max=MAX_TIME_US,
                               help="busy of an ERASE (CMD38 argument 0): the range is erased")
    erase_busy_per_sector_us: float = opt(0.05, unit="µs", min=0, max=MAX_TIME_US,
                                          help="additional ERASE busy per sector")
    discard_busy_us: float = opt(250.0, unit="µs", min=0, max=MAX_TIME_US,
                                 help="busy of a DISCARD (CMD38 argument 1): the range is only marked unused")
    fule_busy_us: float = opt(250.0, unit="µs", min=0, max=MAX_TIME_US,
                              help="busy of a FULE (CMD38 argument 2, full user area logical erase)")
    discard_support: bool = opt(True, help="SD Status DISCARD_SUPPORT: the card takes DISCARD (else a driver "
                                           "that prefers it sends ERASE)")
    init_ms: float = opt(250.0, unit="ms", min=0, max=MAX_TIME_MS,
                         help="power-up initialisation: ACMD41 loop until ready")
    erased_byte: int = opt(0, min=0, max=255, help="value read back after an erase (DATA_STAT_AFTER_ERASE)")
    rca: int = opt(0x0001, min=0x0001, max=0xFFFF,
                   help="relative card address the card gives in CMD3's response; SD-mode commands carry it in "
                        "bits 31:16")
    default_speed_max_clock_hz: int = opt(25_000_000, unit="Hz", min=100_000,
                                          help="highest bus clock in Default Speed, SD or SPI mode (SD Physical "
                                               "Layer spec: 25 MHz, CSD TRAN_SPEED 0x32)")
    high_speed_max_clock_hz: int = opt(50_000_000, unit="Hz", min=0,
                                       help="highest bus clock in High Speed mode, after CMD6 (SD spec: 50 MHz, "
                                            "TRAN_SPEED 0x5A); 0 = the card has no High Speed mode")
    # what the card's registers say it supports (not timing): the bus modes and commands a host may use
    uhs_modes: str = opt("", help="UHS-I bus modes (1.8 V) the card supports, e.g. \"sdr12 sdr25 sdr50 ddr50\" (a "
                                  "UHS-I microSD card); \"\" = none")
    cmd23: bool = opt(False, help="SCR CMD_SUPPORT: the card takes CMD23 SET_BLOCK_COUNT (mandatory for UHS104 "
                                  "cards)")
    cmdq: bool = opt(False, help="the card has a command queue (CMD44 to CMD47; mandatory for A2 cards)")

    fit_rel_sd: dict[str, float] = opt(factory=dict, help=FIT_REL_SD_HELP)
    unfitted: dict[str, float] = opt(factory=dict, help=UNFITTED_HELP)

    def __post_init__(self) -> None:
        check_fit_rel_sd(self)
        # informational fields (what is printed on the card): checked here, read by no timing model
        _check_speed_class(self.speed_class)
        if self.uhs_bus not in UHS_BUSES:
            raise ValueError(f"uhs_bus = {_shown(self.uhs_bus)} is not one of {', '.join(UHS_BUSES[1:])} "
                             f"(\"\" when none or not recorded)")
        # what the FTL model divides by or sizes with; ValueError so the option loader names the table
        if self.capacity_bytes % 512:
            raise ValueError(f"capacity_bytes = {self.capacity_bytes} B is not a whole number of 512-byte sectors")
        if self.au_bytes % self.page_bytes:
            raise ValueError(f"au_bytes = {self.au_bytes} B is not a whole number of page_bytes = "
                             f"{self.page_bytes} B pages")
        if self.update_block_bytes < self.page_bytes:
            raise ValueError(f"update_block_bytes = {self.update_block_bytes} B cannot hold one page of "
                             f"page_bytes = {self.page_bytes} B")
        if self.random_area_bytes and self.random_area_bytes < self.random_unit_bytes:
            raise ValueError(f"random_area_bytes = {self.random_area_bytes} B cannot hold one random_unit_bytes = "
                             f"{self.random_unit_bytes} B unit (0 = no random-write area)")
        if self.small_write_unit_bytes > self.page_bytes:
            raise ValueError(f"small_write_unit_bytes = {self.small_write_unit_bytes} B is above page_bytes = "
                             f"{self.page_bytes} B (it is the space a write shorter than a page takes)")
        modes = self.uhs_modes.split()
        for m in modes:
            if m not in CARD_UHS_MODES:
                raise ValueError(f"uhs_modes: {_shown(m)} is not a UHS-I mode ({' '.join(CARD_UHS_MODES)})")
        if len(set(modes)) != len(modes):
            raise ValueError(f"uhs_modes = {_shown(self.uhs_modes)} names a mode twice")
        if "sdr104" in modes and not self.cmd23:
            raise ValueError("uhs_modes has sdr104 but cmd23 is false: a UHS104 card supports CMD23 (SD Physical "
                             "Layer spec 4.15)")
        hs, ds = self.high_speed_max_clock_hz, self.default_speed_max_clock_hz
        if hs and hs < ds:
            raise ValueError(f"high_speed_max_clock_hz = {hs} Hz is below default_speed_max_clock_hz = {ds} Hz")

    def supports_mode(self, mode: str) -> bool:
        """Whether the card supports UHS-I bus mode ``mode`` (``uhs_modes``)."""
        return mode in self.uhs_modes.split()

    def max_clock_hz(self, high_speed: bool) -> int:
        """The card's bus clock limit: in High Speed when the host switches to it and the card has it."""
        return self.high_speed_max_clock_hz if high_speed and self.high_speed_max_clock_hz else \
            self.default_speed_max_clock_hz


def _shown(text: str) -> str:
    """A user's text as an error line shows it: quoted, cut to a few characters."""
    return repr(text) if len(text) <= 20 else repr(text[:17] + "...")


def _check_speed_class(text: str) -> None:
    """Each token of ``speed_class`` is a known marking, at most one per family (C, U, V, A)."""
    known = [m for family in SPEED_CLASS_MARKINGS.values() for m in family]
    seen: dict[str, str] = {}
    for token in text.split():
        family = next((f for f, marks in SPEED_CLASS_MARKINGS.items() if token in marks), None)
        shown = _shown(token)
        if family is None:
            raise ValueError(f"speed_class: {shown} is not a speed class marking (known: {' '.join(known)})")
        if family in seen:
            raise ValueError(f"speed_class: {shown} and {seen[family]!r} are both {family} markings (a card carries "
                             f"at most one of each family)")
        seen[family] = token


@dataclass
class _AuState:
    used_bytes: int = 0            # update block fill
    end_offset: int = -1           # byte just after the last write (a write starting here fills the open page)
    next_sequential: int = 0       # next page index if the AU is being written front to back
    sequential: bool = True
    pages: set[int] | None = None  # distinct pages written since the last merge


class CardModel:
    """Card timing state.  Durations are returned in nanoseconds; the driver
    decides how the host experiences them (polling, ticks, bus tokens)."""

    def __init__(self, profile: CardProfile, seed: int = 1) -> None:
        self.p = profile
        self._rng = random.Random(f"card-pauses:{seed}")
        self._open: dict[int, _AuState] = {}   # insertion order = LRU order
        # valid pages of each AU outside its update block (absent: every page, if preconditioned, else none)
        self._valid: dict[int, set[int]] = {}
        self._first_write_done = False
        #: where the last busy this model returned (write_done_busy_ns, erase_busy_ns) comes from: (ledger key,
        #: ns) pairs that sum to it (sdbench.clock.VirtualClock.ledger_ns)
        self.busy_parts: tuple[tuple[str, float], ...] = ()
        self._merge_parts: list[tuple[str, float]] = []
        # the random-write area: AU -> [units it holds there, the pages they cover], in the order the AUs first
        # entered (the fold order)
        self._log: dict[int, list[Any]] = {}
        self._log_units = 0
        self._log_capacity = profile.random_area_bytes // profile.random_unit_bytes
        #: bytes programmed into the card's flash: the host's data plus what merges and folds copy
        self.nand_programmed_bytes = 0
        #: writes the random-write area took, and folds it made room with
        self.random_writes = 0
        self.folds = 0
        self._log_bypassed = False
        self.merges = 0
        self.pauses = 0
        self.pause_ns_total = 0
        if profile.initial_update_fill_bytes:
            st = self._open.setdefault(0, _AuState(pages=set()))
            st.used_bytes = profile.initial_update_fill_bytes
            st.sequential = False

    # ---- reads ----------------------------------------------------------------------
    def read_access_ns(self) -> float:
        return self.p.read_access_us * 1e3

    def read_block_gap_ns(self) -> float:
        return self.p.read_block_gap_us * 1e3

    def read_boundary_ns(self, lba: int, count: int, sector_bytes: int) -> float:
        """Extra time of one read for the page and AU boundaries strictly inside it."""
        return sum(ns for _, ns in self.read_boundary_parts(lba, count, sector_bytes))

    def read_boundary_parts(self, lba: int, count: int, sector_bytes: int) -> tuple[tuple[str, float], ...]:
        """:meth:`read_boundary_ns` by ledger key: the page crossings, the AU crossings."""
        p = self.p
        if not (p.read_page_cross_us or p.read_au_cross_us):
            return ()
        first, last = lba * sector_bytes, (lba + count) * sector_bytes - 1
        pages = last // p.page_bytes - first // p.page_bytes
        aus = last // p.au_bytes - first // p.au_bytes
        return (("sd.card.read_page_cross_us", pages * p.read_page_cross_us * 1e3),
                ("sd.card.read_au_cross_us", aus * p.read_au_cross_us * 1e3))

    # ---- writes ---------------------------------------------------------------------
    def write_block_busy_ns(self, multi: bool) -> float:
        return (self.p.write_busy_block_us if multi else 0.0) * 1e3

    def write_done_busy_ns(self, lba: int, count: int, sector_bytes: int, multi: bool) -> float:
        """Busy after a write command's data (CMD24 block, or end of CMD25)."""
        base = self.p.write_busy_end_us if multi else self.p.write_busy_single_us
        merges = self._merge_parts
        merges.clear()
        logged = self.random_writes
        ftl = self._ftl_write(lba * sector_bytes, count * sector_bytes)
        if self.random_writes > logged and not self._log_bypassed:
            base = 0.0  # the write went to the random-write area: its program there is the busy (in ftl)
        busy = base * 1e3 + ftl
        parts = [("sd.card.write_busy_end_us" if multi else "sd.card.write_busy_single_us", base * 1e3), *merges]
        if not self._first_write_done:
            self._first_write_done = True
            busy += self.p.first_write_ms * 1e6
            parts.append(("sd.card.first_write_ms", self.p.first_write_ms * 1e6))
        if self.p.pause_probability > 0 and self._rng.random() < self.p.pause_probability:
            pause = self.p.pause_median_ms * 1e6 * math.exp(self.p.pause_sigma * self._rng.gauss(0.0, 1.0))
            self.pauses += 1
            self.pause_ns_total += int(pause)
            busy += pause
            parts.append(("sd.card.pause_median_ms", pause))
        self.busy_parts = tuple(parts)
        return busy

    def _ftl_write(self, offset: int, nbytes: int) -> float:
        """Account a write in the update blocks or the random-write area; returns merge time in ns."""
        p = self.p
        page = p.page_bytes
        end = offset + nbytes
        au = offset // p.au_bytes
        st = self._open.get(au)
        if st is not None and offset == st.end_offset and 0 < nbytes and (end - 1) // p.au_bytes == au:
            used = st.used_bytes + nbytes
            if -(-used // page) * page <= p.update_block_bytes:
                # the usual write of a stream (a file written front to back): it continues its AU's update block
                # and fits there; the loop below takes the same steps for it, one by one
                self.nand_programmed_bytes += nbytes
                self._log_bypassed = True
                hi = (end - 1) // page
                st.next_sequential = hi - au * (p.au_bytes // page) + 1
                st.end_offset = end
                st.used_bytes = used
                st.pages.update(range(offset // page, hi + 1))  # type: ignore[union-attr]
                del self._open[au]
                self._open[au] = st  # most recently used last
                return 0.0
        elif st is None and self._log_capacity and 0 < nbytes < p.random_max_bytes \
                and (end - 1) // p.au_bytes == au and not self._crosses_into(au, offset):
            entry = self._log.get(au)
            if entry is None or entry[3] != offset or entry[4] != entry[0]:
                # a small write into an AU that is not open, which does not continue the AU's run in the
                # random-write area (_promote would decline): a random write, into that area (the loop below
                # takes the same steps for it)
                self.nand_programmed_bytes += nbytes
                self._log_bypassed = False
                return self._log_write(au, offset, end)
        cost = 0.0
        first_page, last_page = offset // page, (offset + nbytes - 1) // page
        pages_per_au = p.au_bytes // page
        self.nand_programmed_bytes += nbytes
        # set when part of the write took the update-block path: its flush busy then applies as before
        self._log_bypassed = False
        for au in range(first_page // pages_per_au, last_page // pages_per_au + 1):
            lo = max(first_page, au * pages_per_au)
            hi = min(last_page, (au + 1) * pages_per_au - 1)
            w_start = max(offset, au * p.au_bytes)
            w_end = min(offset + nbytes, (au + 1) * p.au_bytes)
            st = self._open.pop(au, None)
            if st is not None and not self._fits(self._used_after(st, w_start, w_end)):
                if w_start == st.end_offset:
                    # a stream runs past the end of the AU's update block: the merge programs the AU's new block
                    # with the stream's pages, and the AU closes
                    assert st.pages is not None
                    st.pages.update(range(lo, hi + 1))
                    self._log_bypassed = True
                    cost += self._merge(au, st)
                    continue
                if self._log_capacity:
                    # no room left: the card merges the block now, and the write goes where a write into an AU
                    # that is not open goes (a small one into the random-write area)
                    cost += self._merge(au, st)
                    st = None
            if st is None and self._log_capacity and w_end - w_start < p.random_max_bytes \
                    and not self._crosses_into(au, w_start):
                promoted = self._promote(au, w_start)
                if promoted is None:
                    cost += self._log_write(au, w_start, w_end)
                    continue
                st, copy_ns = promoted
                cost += copy_ns
            self._log_bypassed = True
            if st is None:
                if au in self._log:
                    # the AU opens for a stream: its entries in the log go with it, and its merge copies those the
                    # stream does not rewrite (as it copies the data block's pages)
                    self._adopt(au)
                if len(self._open) >= p.open_aus:
                    victim, vst = next(iter(self._open.items()))
                    del self._open[victim]
                    cost += self._merge(victim, vst)
                st = _AuState(pages=set())
            new_used = self._used_after(st, w_start, w_end)
            if not self._fits(new_used):
                cost += self._merge(au, st)
                st = _AuState(pages=set())
                new_used = w_end - w_start
            # in order = starts on the next page, or continues the previous write inside its last page
            if w_start != st.end_offset and lo != au * pages_per_au + st.next_sequential:
                st.sequential = False
            st.next_sequential = hi - au * pages_per_au + 1
            st.end_offset = w_end
            st.used_bytes = new_used
            assert st.pages is not None
            st.pages.update(range(lo, hi + 1))
            self._open[au] = st  # most recently used last
        return cost

    def _used_after(self, st: _AuState, w_start: int, w_end: int) -> int:
        """The update block's fill after a write of [w_start, w_end) into it (:meth:`_fits` says whether it fits)."""
        page = self.p.page_bytes
        if w_start == st.end_offset:
            # continues the previous write: the card's buffer fills the partly written page first
            return st.used_bytes + (w_end - w_start)
        if w_end - w_start < page:
            return st.used_bytes + max(w_end - w_start, self.p.small_write_unit_bytes)
        return -(-st.used_bytes // page) * page + (w_end - w_start)

    def _fits(self, used: int) -> bool:
        """Whether an update block filled to ``used`` bytes, counted in whole pages, has room."""
        page = self.p.page_bytes
        return -(-used // page) * page <= self.p.update_block_bytes

    def _crosses_into(self, au: int, w_start: int) -> bool:
        """Whether a write at ``w_start`` continues the stream of the open AU before ``au`` across the boundary
        (a file written front to back): it opens ``au`` as a stream, however small it is."""
        prev = self._open.get(au - 1)
        return prev is not None and w_start == au * self.p.au_bytes and prev.end_offset == w_start

    def _promote(self, au: int, w_start: int) -> tuple[_AuState, float] | None:
        """A small write that continues the AU's run of writes in the random-write area, when that run is all the
        area holds of the AU: the card sees a stream, moves the run into a new update block (copying it) and
        opens the AU; returns its state and the copy's time (ns), else None."""
        entry = self._log.get(au)
        if entry is None or entry[3] != w_start or entry[4] != entry[0]:
            return None
        units, pages, run_start, last_end, _ = self._log.pop(au)
        self._log_units -= units
        p = self.p
        ppa = p.au_bytes // p.page_bytes
        st = _AuState(used_bytes=last_end - run_start, end_offset=last_end, pages=set(pages),
                      next_sequential=(last_end - 1) // p.page_bytes - au * ppa + 1,
                      sequential=run_start == au * p.au_bytes)
        copy_ns = (last_end - run_start) / 1024 * p.merge_copy_us_per_kib * 1e3
        self.nand_programmed_bytes += last_end - run_start
        self._merge_parts.append(("sd.card.merge_copy_us_per_kib", copy_ns))
        return st, copy_ns

    def _log_write(self, au: int, w_start: int, w_end: int) -> float:
        """A small scattered write into the random-write area: its units' program time, and the folds that
        make room for them (ns)."""
        p = self.p
        g = p.random_unit_bytes
        units = (w_end - 1) // g - w_start // g + 1
        cost = 0.0
        while self._log_units + units > self._log_capacity and self._log:
            cost += self._fold(next(iter(self._log)))
        # [units, pages, start of the current run of contiguous writes, where it ends, the run's units]
        entry = self._log.get(au)
        if entry is None:
            entry = self._log[au] = [0, set(), w_start, w_start, 0]
        entry[0] += units
        entry[1].update(range(w_start // p.page_bytes, (w_end - 1) // p.page_bytes + 1))
        if entry[3] != w_start:  # a new run
            entry[2], entry[4] = w_start, 0
        entry[3] = w_end
        entry[4] += units
        self._log_units += units
        self.random_writes += 1
        program = units * p.random_write_us * 1e3
        self._merge_parts.append(("sd.card.random_write_us", program))
        return cost + program

    def _adopt(self, au: int) -> None:
        """An AU that opens an update block takes its entries out of the random-write area: their pages are the
        AU's valid data from then on (its merge copies those the update block does not rewrite)."""
        units, pages = self._log.pop(au)[:2]
        self._log_units -= units
        self._valid_pages(au).update(pages)

    def _fold(self, au: int) -> float:
        """Fold an AU's entries out of the random-write area: its valid data and the entries are written to a
        new block (a merge that copies the whole AU's valid pages), the old one is erased (ns)."""
        p = self.p
        units, pages = self._log.pop(au)[:2]
        self._log_units -= units
        self.folds += 1
        valid = self._valid_pages(au)
        valid |= pages
        copy_pages = len(valid)
        self.nand_programmed_bytes += copy_pages * p.page_bytes
        copy_ns = copy_pages * p.page_bytes / 1024 * p.merge_copy_us_per_kib * 1e3
        self._merge_parts += (("sd.card.merge_base_ms", p.merge_base_ms * 1e6),
                              ("sd.card.merge_copy_us_per_kib", copy_ns))
        return p.merge_base_ms * 1e6 + copy_ns

    def _valid_pages(self, au: int) -> set[int]:
        v = self._valid.get(au)
        if v is None:
            ppa = self.p.au_bytes // self.p.page_bytes
            v = set(range(au * ppa, (au + 1) * ppa)) if self.p.preconditioned else set()
            self._valid[au] = v
        return v

    def _merge(self, au: int, st: _AuState) -> float:
        """Close an update block: copy the AU's valid pages the update block did not rewrite."""
        p = self.p
        self.merges += 1
        pages_per_au = p.au_bytes // p.page_bytes
        written = st.pages or set()
        valid = self._valid_pages(au)
        copy_pages = len(valid - written)
        valid |= written
        self.nand_programmed_bytes += copy_pages * p.page_bytes
        if st.sequential and len(written) == pages_per_au:
            self._merge_parts.append(("sd.card.switch_merge_ms", p.switch_merge_ms * 1e6))
            return p.switch_merge_ms * 1e6  # switch merge: the update block becomes the data block
        copy_ns = copy_pages * p.page_bytes / 1024 * p.merge_copy_us_per_kib * 1e3
        self._merge_parts += (("sd.card.merge_base_ms", p.merge_base_ms * 1e6),
                              ("sd.card.merge_copy_us_per_kib", copy_ns))
        return (p.merge_base_ms * 1e3 + copy_pages * p.page_bytes / 1024 * p.merge_copy_us_per_kib) * 1e3

    # ---- erase and init ---------------------------------------------------------------
    def discard(self, lba: int, count: int, sector_bytes: int) -> None:
        """Erase/discard: pages wholly inside the range hold no valid data any more.  An AU wholly
        inside also loses its update block (dropped, no merge)."""
        p = self.p
        start, end = lba * sector_bytes, (lba + count) * sector_bytes
        first_page, end_page = -(-start // p.page_bytes), end // p.page_bytes
        if end_page <= first_page:
            return  # no page wholly inside (a filesystem's one-sector erase): nothing changes
        ppa = p.au_bytes // p.page_bytes
        for au in range(start // p.au_bytes, -(-end // p.au_bytes)):
            lo, hi = max(first_page, au * ppa), min(end_page, (au + 1) * ppa)
            if hi <= lo:
                continue
            gone = range(lo, hi)
            if hi - lo == ppa:
                # a whole AU discarded: no valid page left (without filling a preconditioned AU's set to empty
                # it: a trim of a whole card passes thousands of AUs), and its log entries are dropped
                self._valid[au] = set()
                if au in self._log:
                    self._log_units -= self._log.pop(au)[0]
            else:
                self._valid_pages(au).difference_update(gone)
            st = self._open.get(au)
            if st is not None:
                if hi - lo == ppa:
                    del self._open[au]
                elif st.pages:
                    st.pages.difference_update(gone)

    def erase_busy_ns(self, count: int, kind: str = "erase") -> float:
        """Busy after CMD38 of ``kind`` (ERASE_KINDS) over ``count`` sectors."""
        p = self.p
        if kind == "erase":
            self.busy_parts = (("sd.card.erase_busy_us", p.erase_busy_us * 1e3),
                               ("sd.card.erase_busy_per_sector_us", p.erase_busy_per_sector_us * count * 1e3))
            return (p.erase_busy_us + p.erase_busy_per_sector_us * count) * 1e3
        field = "discard_busy_us" if kind == "discard" else "fule_busy_us"
        self.busy_parts = (("sd.card." + field, getattr(p, field) * 1e3),)
        return getattr(p, field) * 1e3

    def init_ns(self) -> float:
        return self.p.init_ms * 1e6
