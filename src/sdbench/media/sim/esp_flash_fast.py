"""The ESP32 flash driver's fast paths: its lock sections worked out arithmetically and given to the clock in one
step (a mixin of :class:`sdbench.media.sim.esp_flash.Esp32FlashDriver`).

A read of one size always costs the same while the chip is idle (_read_cost, _read_fast, the fused read); a
write section's programs and their status polls, an erase's commands and its wait, a copy in pieces are
replayed from the chip's busy draws with the integer clock steps the command-by-command path takes, and fall
back to that path (the reference) whenever the replay could not be exact.  tests/test_esp_flash_paths.py,
tests/test_fused_read.py and tests/test_flash_copy.py hold every fast path to the reference.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ...clock import ClockDelta, VirtualClock
from .nor import ADDR_BITS, BLOCK64_BYTES, CMD_CLOCKS, READ_MODES, RDSR_CLOCKS, SECTOR_BYTES, NorFlashChip
from .program_runs import WINDOW as RUN_WINDOW, ProgramRuns, exact_limit_ns

#: ledger keys (sdbench.clock.VirtualClock.ledger_ns) of the flash driver's time
CMD_KEY = "flash.host.cmd_overhead_cycles"
OP_KEY = "flash.host.op_overhead_cycles"
BUS_KEY = "flash.host.flash_clock_hz"
YIELD_KEY = "flash.host.rtos_tick_hz"
PROGRAM_KEY = "flash.chip.program"
ERASE_KEY = "flash.chip.erase"

#: a write section of at least this many programs of one size is summed from prefix sums (program_runs), not
#: program by program (below it the loop costs less than the sums' lookups)
RUN_PROGRAMS = 8
#: ... unless a wait after one of its programs could take more poll intervals than this (a table per interval)
RUN_MAX_INTERVALS = 4096


def _charged(parts: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """A fast path's (table key, ns) pairs without those of no time: the steps the command-by-command path takes
    one by one never enter a key for a step of 0 ns (VirtualClock.advance_ns)."""
    for _, v in parts:
        if not v:
            return tuple(kv for kv in parts if kv[1])
    return parts


class FastPaths:
    """The fast paths of :class:`~sdbench.media.sim.esp_flash.Esp32FlashDriver`, a mixin: lock sections replayed
    in one clock step.

    Relies on the driver's attributes annotated below and on its command-by-command steps (``_wait_idle``,
    ``_yield_check``), which the fast paths stand for."""

    chip: NorFlashChip
    vclock: VirtualClock
    profile: Any
    counters: Any
    stats: Any
    offset_bytes: int
    reference_path: bool
    read_only: bool
    geometry: Any
    _os: Any
    _rec: Any
    _time_only: bool
    _cmd_ns: float
    _op_ns: float
    _poll_ns: float
    _tick_ns: float
    _mode: str
    _page: int
    _fast_npc: float
    _fast: tuple[Any, ...]
    _read_costs: dict[int, ClockDelta]
    _program_shapes: dict[tuple[int, int], tuple[int, ...]]
    _runs: dict[int, ProgramRuns | None]
    _exact_limit: int
    _run_spans: dict[int, int]
    _write_primed: bool
    _write_sums: list[int] | None
    _read_primed: bool
    _erase_primed: set[str]
    _yield_check: Callable[[], None]  # the driver's spi_flash_os_check_yield

    # A lock section (and a whole esp_flash_read) is atomic for everything above the driver: nothing else
    # reads the clock or the chip between its commands.  The fast paths therefore replay a section (a write's,
    # an erase's) arithmetically and move the clock once (VirtualClock.apply_parts, or a write section's sums
    # with VirtualClock.summer; a read's cost, the same for every read of its size, with VirtualClock.charge),
    # with exactly the integer steps the command-by-command path takes (advance_ns rounds every step on its own;
    # those rounded steps are summed here), the same random busy draws in the same order, and the same counters
    # and chip state.  They are used only when
    #  * the driver is not set to the reference path (reference_path / REFERENCE_PATH),
    #  * the clock already has every time category, command name and ledger key the section can add, so a
    #    one-step apply_parts() cannot change the insertion order of the tables (an erase: but its wait's flash
    #    time, which comes last on both paths), and no key of a zero step enters them (_charged),
    #  * the section does not wrap at the chip end, and (writes) strict mode has nothing to refuse.
    # Replaying another run (sdbench.ledger.replay: a clock that keeps the time alone, zeros programmed), the
    # sections keep the time and the chip's timing state only (_time_only).
    # Otherwise the command-by-command path (the reference) runs.  Since the fast paths never call the
    # driver's per-command steps or the chip's command methods, anything that hooks those (a spy, a trace)
    # needs reference_path=True.  tests/test_esp_flash_paths.py holds the two paths to identical results.

    def _fast_consts(self) -> tuple[Any, ...]:
        chip = self.chip
        npc = chip._ns_per_clock
        if npc != self._fast_npc:
            h = self._cmd_ns
            b = RDSR_CLOCKS * npc          # chip.rdsr_ns
            poll = self._poll_ns
            f = READ_MODES[self._mode]
            read_hdr = f.header_clocks + self.profile.extra_dummy_clocks
            H1, B1, W = int(h + 0.5), int(b + 0.5), int(CMD_CLOCKS * npc + 0.5)
            P = [int((CMD_CLOCKS + ADDR_BITS + 8 * k) * npc + 0.5) for k in range(self._page + 1)]
            # a program of k bytes from the end of the previous one's wait up to its own busy: the idle wait
            # before WREN (one RDSR), WREN, RDSR (WEL check), the idle wait after it (one RDSR), PP
            program = [H1 + B1 + 4 * H1 + W + 2 * B1 + P[k] for k in range(self._page + 1)]
            self._fast = (
                h, b, poll, h + b + poll,
                H1,                                             # one cmd_overhead step (host)
                B1,                                             # one RDSR (bus)
                int(self._op_ns + 0.5),                         # one lock section (host)
                W,                                              # WREN (bus)
                P,                                              # PP (bus), by its bytes
                read_hdr, f.data_lanes, npc,
                {},                                             # _wait_step by number of waits
                {},                                             # _wait_parts by number of waits
                program,                                        # see above, by the program's bytes
            )
            self._fast_npc = npc
            self._read_costs.clear()
            self._runs = {}
            self._run_spans = {}
            self._exact_limit = exact_limit_ns(h, b)
        return self._fast

    def _host_keys(self) -> tuple[str, ...]:
        """The host's ledger keys a fast section charges (but the chip's busy, which comes last on both paths):
        the lock's when it takes time, the commands' when they do (a command overhead below half a ns still adds
        up over a wait's polls, after a program's busy: its key must be there first), the bus's."""
        return tuple(k for k, v in ((OP_KEY, int(self._op_ns + 0.5)), (CMD_KEY, self._cmd_ns), (BUS_KEY, 1)) if v)

    def _primed(self, spent: tuple[str, ...], commands: tuple[str, ...], params: tuple[str, ...] = ()) -> bool:
        """Whether the clock's tables hold these categories, commands and ledger keys (a replay's clock keeps no
        tables: nothing to keep in order)."""
        if self._time_only:
            return True
        bd = self.vclock.breakdown_ns()
        cmds = self.vclock.commands_snapshot()
        ledger = self.vclock.ledger_ns() if params else {}
        return all(k in bd for k in spent) and all(k in cmds for k in commands) and all(k in ledger for k in params)

    def _write_section_fast(self, start: int, smv: memoryview) -> bool:
        """One write lock section (lock, then per program: wait idle, WREN, RDSR, wait idle, PP, wait idle)
        replayed in one clock step.  Returns False (nothing done) when the exact path must run instead.

        The chip draws the programs' busy times as it would one by one (NorFlashChip.program_busy_ns); one pass
        over them moves the section's time forward (the polls of a busy wait depend on where in the ns grid it
        starts); the busy waits are kept by their number of waits, whose integer steps are the same each time
        (_wait_step)."""
        chip = self.chip
        if not self._write_primed:
            if not self._primed(("host", "bus", "flash"), ("RDSR", "WREN", "PP"), self._host_keys()):
                return False
            self._write_primed = True
        size = len(smv)
        if start < 0 or start + size > chip.profile.capacity_bytes or smv.format != "B" or not smv.contiguous:
            return False
        time_only = self._time_only
        up = None if time_only else chip.span_zero_to_one(start, smv)
        if up is not None and chip.config.strict:
            return False  # the exact path raises at the right program, with the right state
        now0 = self.vclock.now_ns()
        if chip._busy_until_ns > now0 and chip.busy_key != PROGRAM_KEY and not time_only:
            return False  # still busy with an erase (a chip command sent directly): the exact path says so
        if chip._ns_per_clock != self._fast_npc:
            self._fast_consts()
        h, b, _, period, H1, B1, OP1, _, _, _, _, _, wait_steps, wait_parts, program = self._fast
        HB = H1 + B1                 # an idle _wait_idle: one RDSR
        ks = self._program_shapes.get((start % self._page, size)) or self._programs(start, size)
        nprog = len(ks)
        k = ks[0]
        run = None
        if nprog >= RUN_PROGRAMS and ks.count(k) == nprog:
            run = self._program_run(k, nprog, now0)
        busies = chip.program_busy_ns(ks) if run is None else ()  # drawn in program order as the chip does

        now = now0 + OP1
        waited: list[int] = []       # the waits of each busy _wait_idle (the others poll once: 2 nprog - len)
        wait = waited.append
        late = 0                     # waits past the last poll (rounding of the steps to whole ns)
        # _wait_idle before the first WREN: the chip may still be busy when the section starts
        bu = chip._busy_until_ns
        first = now + h + b
        if bu > first:
            waits = -int((first - bu) // period)
            now += wait_steps.get(waits) or self._wait_step(waits)
            wait(waits)
        else:
            now += HB
        if bu > now:
            late += bu - now
            now = bu
        now -= HB  # the first program has no idle wait before its WREN but that one
        if run is not None:
            # the programs' sums (ProgramRuns): each adds its step up to the PP and the longer of its wait and busy
            now += nprog * program[k] + run[1]
            bu = now - run[7] + run[6]
            late += run[2]
        for k, busy in zip(ks, busies):
            now += program[k]
            bu = now + busy
            # _wait_idle after PP
            first = now + h + b
            if bu > first:
                waits = -int((first - bu) // period)  # ceil((bu - first) / period)
                now += wait_steps.get(waits) or self._wait_step(waits)
                wait(waits)
            else:
                now += HB
            if bu > now:
                late += bu - now
                now = bu
        chip.polled_idle(bu, PROGRAM_KEY)
        if time_only:
            self.vclock.move_ns(now - now0)
            return True
        # the waits not in `waited` poll once (the run's waits after a PP are in its sums, idle ones included)
        n_idle = (2 * nprog if run is None else nprog) - len(waited)
        polls_total = n_idle
        waits_total = host = 0
        flash = late
        for waits in set(waited):
            n = waited.count(waits)
            hs, _, fs = wait_parts[waits]
            host += n * hs
            flash += n * fs
            polls_total += n * (waits + 1)
            waits_total += n * waits
        host += OP1 + n_idle * H1 + nprog * 4 * H1  # before WREN, before RDSR, the idle wait's RDSR, before PP
        if run is not None:
            host += run[3]
            flash += run[4]
            polls_total += run[5] + nprog
            waits_total += run[5]
        chip.and_span(start, smv, up is None)
        st = chip.stats
        st.page_programs += nprog
        st.bytes_programmed += size
        st.busy_ns += sum(busies) if run is None else run[0]
        if up is not None:
            self._count_zero_to_one(ks, up)
        self._sections_done(1, nprog, now - now0, host, flash, polls_total, waits_total)
        return True

    def _sections_done(self, sections: int, programs: int, total: int, host: int, flash: int, polls: int,
                       waits: int) -> None:
        """Write sections worked out (_write_section_fast, _copy_fast) to the clock, the chip's status reads and
        the counters: ``sections`` lock sections of ``programs`` programs in all, ``total`` ns (``host`` and
        ``flash`` of it, the rest bus), ``polls`` status polls in their waits and ``waits`` poll intervals.  The
        clock sums the parts when its tables are read (VirtualClock.summer), or, until every key is in its
        tables, takes them at once (_apply_section)."""
        rdsr = polls + 2 * programs
        self.chip.stats.status_reads += rdsr
        c = self.counters
        c.lock_sections += sections
        c.transactions += polls + 4 * programs
        c.poll_waits += waits
        op = sections * self._fast[6]
        sums = self._write_sums or self._summer()
        if sums is None:
            self._apply_section(total, op, host, flash, PROGRAM_KEY, (("RDSR", rdsr), ("WREN", programs),
                                                                      ("PP", programs)))
            return
        self.vclock.advance_summed(total)
        bus = total - host - flash
        sums[0] += host  # (written out: a million sections a run)
        sums[1] += bus
        sums[2] += flash
        sums[3] += rdsr
        sums[4] += programs
        sums[5] += programs
        sums[6] += op
        sums[7] += host - op
        sums[8] += bus
        sums[9] += flash

    def _summer(self) -> list[int] | None:
        """The clock's sums of the write sections' parts (VirtualClock.summer), once every key is in its table."""
        self._write_sums = self.vclock.summer(("host", "bus", "flash"), ("RDSR", "WREN", "PP"),
                                              (OP_KEY, CMD_KEY, BUS_KEY, PROGRAM_KEY))
        return self._write_sums

    def _apply_section(self, total: int, op: int, host: int, flash: int, flash_key: str,
                       commands: tuple[tuple[str, int], ...]) -> None:
        """A fast section's one step on the clock: ``total`` ns, of which ``op`` the lock, ``host`` all host time
        (the lock's included), ``flash`` the waits past the chip's busy (to ``flash_key``), the rest bus time
        (every step of a section is one of the three)."""
        bus = total - host - flash
        self.vclock.apply_parts(
            total, _charged((("host", host), ("bus", bus), ("flash", flash))), commands,
            _charged(((OP_KEY, op), (CMD_KEY, host - op), (BUS_KEY, bus), (flash_key, flash))))

    def _program_run(self, k: int, n: int, now0: int) -> list[int] | None:
        """The sums of the ``n`` programs of ``k`` bytes of a section starting at ``now0`` (ProgramRuns.sums), their
        busy times drawn; None (nothing drawn) when the chip does not draw them, the waits would need too many
        thresholds, or the section could end where the clock's sums are not exact (exact_limit_ns)."""
        runs = self._runs.get(k)
        f = self._fast
        if runs is None:
            if k in self._runs:
                return None
            typ, mx = self.chip.program_times_ns(k)
            hb, period = f[0] + f[1], f[3]  # the loop's h + b and poll period
            if (mx - hb) / period > RUN_MAX_INTERVALS:
                self._runs[k] = None
                return None
            runs = self._runs[k] = ProgramRuns(typ, mx, hb, period, self._wait_parts)
            # the longest a program can take, from the end of the last one's wait to the end of its own (a wait
            # ends at most a poll period and 3 ns of rounding past the busy)
            self._run_spans[k] = f[14][k] + math.ceil(mx + period) + 4
        # the section's latest end: the lock, a first wait for a busy chip, the programs (and h + b past it)
        pre = max(0, self.chip._busy_until_ns - now0) + math.ceil(f[3]) + 2 * (f[4] + f[5]) + 4
        if now0 + f[6] + pre + n * self._run_spans[k] >= self._exact_limit:
            return None
        drawn = self.chip.program_run_draws(k, n, RUN_WINDOW)
        if drawn is None:
            self._runs[k] = None
            return None
        values, i = drawn
        if not runs.covers(values, i, n):
            runs.take(values, i, i + max(n, RUN_WINDOW))
        return runs.sums(i, n)

    def _programs(self, start: int, size: int) -> tuple[int, ...]:
        """The byte counts of the page programs of a write at ``start``: at most max_write_bytes, never across a
        page (kept per page offset and size: a run writes few shapes)."""
        key = (start % self._page, size)
        ks = self._program_shapes.get(key)
        if ks is None:
            page, step = self._page, self.profile.max_write_bytes
            out = []
            a, end = start, start + size
            while a < end:
                k = min(page - a % page, step, end - a)
                out.append(k)
                a += k
            if len(self._program_shapes) >= 256:
                self._program_shapes.clear()
            ks = self._program_shapes[key] = tuple(out)
        return ks

    def _wait_step(self, waits: int) -> int:
        """The time of a _wait_idle that waited ``waits`` poll intervals, kept in _fast_consts' tables with its
        integer host, bus and flash steps (_wait_parts)."""
        parts = self._fast[13][waits] = self._wait_parts(waits)
        step = self._fast[12][waits] = sum(parts)
        return step

    def _wait_parts(self, waits: int) -> tuple[int, int, int]:
        """The integer host, bus and flash steps of a _wait_idle that waited ``waits`` poll intervals: its polls'
        commands, their RDSRs, the intervals (each rounded as advance_ns rounds it)."""
        h, b, poll = self._fast[0], self._fast[1], self._fast[2]
        polls = waits + 1
        return int(polls * h + 0.5), int(polls * b + 0.5), int(waits * poll + 0.5)

    def _count_zero_to_one(self, ks: tuple[int, ...], up: Any) -> None:
        """The chip's counts of programs that tried to set bits 0->1 (``up``: span_zero_to_one of the section)."""
        st = self.chip.stats
        o = 0
        for k in ks:
            u = up[o:o + k]
            if u.any():
                st.zero_to_one_programs += 1
                st.zero_to_one_bytes += int(np.count_nonzero(u))
                st.zero_to_one_bits += int(np.unpackbits(u).sum())
            o += k

    def _read_cost(self, size: int) -> ClockDelta:
        """The time of an esp_flash_read of ``size`` bytes while the chip is idle: lock sections of
        read_chunk_bytes, READ commands of max_read_bytes (it does not depend on the address)."""
        c = self._fast_consts()  # before the cache: a new SCLK empties it
        cost = self._read_costs.get(size)
        if cost is not None:
            return cost
        H1, OP1, hdr, lanes, npc = c[4], c[6], c[9], c[10], c[11]
        prof = self.profile
        step = prof.max_read_bytes
        chunk_max = prof.read_chunk_bytes
        full_bus = int((hdr + -(-step * 8 // lanes)) * npc + 0.5)  # one READ of `step` bytes (bus)
        host = bus = ncmd = 0
        left = size
        while left > 0:
            chunk = chunk_max if chunk_max < left else left
            nfull, rem = divmod(chunk, step)
            host += OP1 + nfull * H1
            bus += nfull * full_bus
            ncmd += nfull
            if rem:
                host += H1
                bus += int((hdr + -(-rem * 8 // lanes)) * npc + 0.5)
                ncmd += 1
            left -= chunk
        spent = tuple((cat, v) for cat, v in (("host", host), ("bus", bus)) if v)
        nsec = -(-size // chunk_max)
        cost = self._read_costs[size] = ClockDelta(host + bus, spent, (("READ", ncmd),),
                                                   _charged(((OP_KEY, nsec * OP1), (CMD_KEY, host - nsec * OP1),
                                                             (BUS_KEY, bus))))
        return cost

    def _read_fast(self, addr: int, size: int) -> bytes | None:
        """flash_read replayed in one clock step (see the fast-path notes above); None: use the exact path."""
        chip = self.chip
        if not self._read_primed:
            if not self._primed(("host", "bus"), ("READ",)):
                return None
            self._read_primed = True
        if size <= 0 or addr < 0 or addr + size > chip.profile.capacity_bytes:
            return None
        if chip._busy:
            chip._settle()  # what the first READ does
            if chip._busy:
                return None  # the exact path raises (after the host time it charges first)
        cost = self._read_cost(size)
        data = chip.mem_view(addr, size)
        ncmd = cost.commands[0][1]
        chip.stats.read_commands += ncmd
        cnt = self.counters
        cnt.lock_sections += -(-size // self.profile.read_chunk_bytes)
        cnt.transactions += ncmd
        self.vclock.charge(cost)  # the same cost object per size: summed into the tables when they are read
        self._os.released_since_ns = self.vclock.now_ns()  # _release after the last chunk
        return data

    def _erase_fast(self, addr: int, block: bool) -> bool:
        """One erase lock section (lock, wait idle, WREN, RDSR, wait idle, SE or BE64 (``block``), wait idle) in one
        clock step, as _write_section_fast replays a write's; False (nothing done) when the exact path must run:
        the reference path's tables not primed yet, or the chip busy when the section starts."""
        chip = self.chip
        name = "BE64" if block else "SE"
        if chip._ns_per_clock != self._fast_npc:
            self._fast_consts()
        h, b, _, period, H1, B1, OP1, W = self._fast[:8]
        if name not in self._erase_primed:
            # the tables' keys as the exact path leaves them, so the one step enters none in another order; the
            # flash time of the erase's wait may still be new (none so far): it comes last in both
            if not self._primed(("host", "bus"), ("RDSR", "WREN", name), self._host_keys()):
                return False
            self._erase_primed.add(name)
        now0 = self.vclock.now_ns()
        if chip._busy_until_ns > now0 or not period > 0:
            return False
        # OP1, the idle wait (one RDSR), WREN, RDSR (WEL check), the idle wait again, the command's header
        now = now0 + OP1 + (H1 + B1) + (H1 + W) + (H1 + B1) + (H1 + B1) + H1
        cmd_bus = int((CMD_CLOCKS + ADDR_BITS) * chip._ns_per_clock + 0.5)
        now += cmd_bus
        p = chip.profile
        if block:
            typ_ms, max_ms, size = p.block64_erase_typ_ms, p.block64_erase_max_ms, BLOCK64_BYTES
        else:
            typ_ms, max_ms, size = p.sector_erase_typ_ms, p.sector_erase_max_ms, SECTOR_BYTES
        busy = int(round(chip._draw_ns(typ_ms * 1e6, max_ms * 1e6)))  # NorFlashChip._set_busy
        bu = now + busy
        # the wait for the erase (_wait_idle)
        first = now + h + b
        waits = -int((first - bu) // period) if bu > first else 0
        polls = waits + 1
        host_w, bus_w, flash_w = self._wait_parts(waits)  # (not kept: an erase's waits seldom repeat)
        now += host_w + bus_w + flash_w
        late = bu - now if bu > now else 0
        now += late
        chip.polled_idle(bu, ERASE_KEY)
        if self._time_only:
            self.vclock.move_ns(now - now0)
            return True
        chip.erase_cells(addr, size)
        st = chip.stats
        st.busy_ns += busy
        st.status_reads += 3 + polls
        if block:
            st.block64_erases += 1
        else:
            st.sector_erases += 1
        c = self.counters
        c.lock_sections += 1
        c.transactions += 5 + polls
        c.poll_waits += waits
        self._apply_section(now - now0, OP1, OP1 + 5 * H1 + host_w, flash_w + late, ERASE_KEY,
                            (("RDSR", 3 + polls), ("WREN", 1), (name, 1)))
        return True

    def _copy_fast(self, src_lba: int, dst_lba: int, count: int, piece: int) -> bool:
        """copy_pieces in one step; False (nothing done) unless each piece is a read that takes its size's recorded
        cost and a write of one program into erased cells of a page, nothing is recorded or hooked, the chip is
        idle and its busy times are drawn.  Each piece's write section takes the steps of _write_section_fast
        for one program (the time is the loop's, from the absolute time); a yield check that yields gives the
        clock what went before and takes the exact path's _yield_check."""
        chip = self.chip
        clock = self.vclock
        end = self.geometry.sector_count
        if (self.reference_path or self._rec is not None or self._time_only
                or self.read_only or piece <= 0 or count <= 0 or count % piece or not self._write_primed
                or not self._read_primed or chip._ns_per_clock != self._fast_npc or not chip._drawn
                or min(src_lba, dst_lba) < 0 or max(src_lba, dst_lba) + count > end
                or src_lba < dst_lba + count and dst_lba < src_lba + count):
            return False
        src, dst = self.offset_bytes + src_lba, self.offset_bytes + dst_lba
        page, prof = self._page, self.profile
        if (piece > prof.max_write_bytes or piece > prof.write_chunk_bytes or dst % piece or page % piece
                or count > len(chip._erased) or not chip._erased.startswith(chip._mv[dst:dst + count])):
            return False
        summed = (self._write_sums or self._summer()) is not None  # the sections' parts go to the clock's sums
        read_cost = self._read_costs.get(piece)
        typ, mx = chip.program_times_ns(piece)
        now = clock.now_ns()
        if not summed or read_cost is None or typ <= 0.0 or chip._busy or chip._busy_until_ns > now:
            return False
        h, b, _, period, H1, B1, OP1, _, _, _, _, _, wait_steps, wait_parts, program = self._fast
        HB = H1 + B1
        step_k = program[piece]
        R = read_cost.total_ns
        n = count // piece
        values, i0 = chip.program_run_draws(piece, n, n)
        os_ = self._os
        yields = prof.yield_during_erase
        released_long = prof.erase_yield_ticks * self._tick_ns
        held_long = prof.erase_yield_duration_ms * 1e6
        ncmd = read_cost.commands[0][1]
        reads = writes = total = host = flash = polls = waits_all = busy_all = 0
        bu = 0
        for i in range(i0, i0 + n):
            now += R                 # the piece's read (its size's recorded cost), then its lock released
            reads += 1
            os_.released_since_ns = now
            if yields:               # _yield_check before the write's section
                if now - os_.released_since_ns >= released_long:
                    os_.acquired_since_ns = now
                elif now - os_.acquired_since_ns >= held_long:
                    self._apply_copied(reads, writes, total, host, flash, polls, waits_all, read_cost)
                    reads = writes = total = host = flash = polls = waits_all = 0
                    self._yield_check()
                    now = clock.now_ns()
            now0 = now
            # the section (_write_section_fast, one program): lock, an idle wait (the chip finished the last
            # program), WREN, RDSR, PP, then its wait
            now += OP1 + step_k
            ns = typ * values[i]
            busy = round(mx if mx < ns else ns)
            busy_all += busy
            bu = now + busy
            first = now + h + b
            if bu > first:
                w = -int((first - bu) // period)
                now += wait_steps.get(w) or self._wait_step(w)
                hs, _, fs = wait_parts[w]
                host += OP1 + 5 * H1 + hs
                flash += fs
                polls += w + 2
                waits_all += w
            else:
                now += HB
                host += OP1 + 6 * H1
                polls += 2
            if bu > now:
                flash += bu - now
                now = bu
            writes += 1
            total += now - now0
            os_.released_since_ns = now  # _release after the write
        self._apply_copied(reads, writes, total, host, flash, polls, waits_all, read_cost)
        chip.polled_idle(bu, PROGRAM_KEY)
        chip._mv[dst:dst + count] = chip._mv[src:src + count]
        st = chip.stats
        st.read_commands += n * ncmd
        st.page_programs += n
        st.bytes_programmed += count
        st.busy_ns += busy_all
        c = self.counters
        c.lock_sections += n * -(-piece // prof.read_chunk_bytes)
        c.transactions += n * ncmd
        ds = self.stats
        ds.reads += n
        ds.bytes_read += count
        ds.writes += n
        ds.bytes_written += count
        return True

    def _apply_copied(self, reads: int, writes: int, total: int, host: int, flash: int, polls: int, waits: int,
                      read_cost: ClockDelta) -> None:
        """_copy_fast's pieces so far: ``reads`` reads of ``read_cost``, ``writes`` one-program sections
        (_sections_done)."""
        if reads:
            self.vclock.charge(read_cost, reads)
        if writes:
            self._sections_done(writes, writes, total, host, flash, polls, waits)


def fused_reader(drv: Any) -> Callable[..., bytes]:
    """Esp32FlashDriver.reader's fused path: BlockDevice.read, _read, flash_read and _read_fast in one function.
    Its table holds, per size, the clock's charger of the size's recorded cost (_read_cost), its READ commands
    and lock sections, and the SCLK it was made for; a size enters it after a read of it took _read_fast."""
    end = drv.geometry.sector_count  # bytes (sector_size 1)
    base = drv.offset_bytes
    chip = drv.chip
    mem = chip._mem
    stats, chip_stats, cnt, os_ = drv.stats, chip.stats, drv.counters, drv._os
    clock = drv.vclock
    rec, rec_id = drv._rec, drv._rec_id
    chunk = drv.profile.read_chunk_bytes
    # per size: the charger, READ commands, lock sections, SCLK, and the recording's spans list for the size with
    # the epoch it is good for (Recording.read_slot)
    known: dict[int, tuple[Callable[[], None], int, int, float, list[Any]]] = {}

    def read(lba: int, count: int, *, buf_addr: int = 0) -> bytes:
        e = known.get(count)
        if (e is None or lba < 0 or lba + count > end or chip._busy or e[3] != chip._ns_per_clock
                or drv.reference_path):
            data = drv.read(lba, count, buf_addr=buf_addr)
            # the size's cost as _read_fast takes it now (the costs kept are those of the SCLK _fast_npc says)
            npc = chip._ns_per_clock
            cost = drv._read_costs.get(count) if drv._fast_npc == npc else None
            if drv._read_primed and not drv.reference_path and cost is not None:
                known[count] = (clock.charger(cost), cost.commands[0][1], -(-count // chunk), npc, [-1, None])
            return data
        charge, ncmd, nsec, _, spans = e
        addr = base + lba
        data = mem[addr:addr + count].tobytes()
        chip_stats.read_commands += ncmd
        cnt.lock_sections += nsec
        cnt.transactions += ncmd
        charge()
        os_.released_since_ns = clock.now_ns()  # _release after the last chunk
        if rec is not None:
            if spans[0] == rec.epoch:
                spans[1] += (lba, count)
            else:
                rec.read_slot(spans, rec_id, count, lba, count)
        stats.reads += 1
        stats.bytes_read += count
        return data
    return read
