"""The cost ledger: what a simulated run charged to its clock, kept so that other parameters can re-price it.

A simulated stack spends time in two kinds of place:

* **the driver models** (``media/sim``: the SD host driver over its bus and card, the ESP32 flash driver over
  its NOR chip).  Their time depends on the profiles' parameters through busy polling, RTOS ticks, the card's
  update blocks and merges and its seeded pauses, so it is not a sum of parameters; but it depends only on the
  sequence of requests the driver receives, their arguments and the driver's own state.
* **everything above them** (filesystem software time per call, a block cache's CPU time): each such charge is
  one profile field times a count (:class:`Price`), or a time no profile field sets.

A :class:`Recording` on a :class:`~sdbench.clock.VirtualClock` keeps, in order, every request a driver model
received (state-free reads folded into counts per kind of read), every charge made above the drivers with its
:class:`Price`, and the start and end of every timed call.  :func:`replay` feeds that record to drivers built
from other profiles (timing only: no data moves) and re-prices the charges above them: the times of every timed
call come out as a run with those profiles would give them, without running the filesystems again.  This holds
while the requests do not depend on time: a charge above the drivers that names no parameter, or a protocol
whose requests follow the clock (a data logger paced by its record rate), makes the recording
:attr:`Recording.repriceable` False, with the reason, and such runs are run again instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from .errors import InternalError

#: kinds of item in :attr:`Recording.items`
OP, READS, CHARGES, MARK = "op", "reads", "charges", "mark"
#: an item of :meth:`Recording.runs` only: ``n`` reads or writes of one size at consecutive addresses, each
#: followed by the same charges (a file read or written a call at a time)
RUN = "run"
#: the fewest such requests :meth:`Recording.runs` puts into one RUN
MIN_RUN = 4
#: the run metadata's ledger keeps a row's entries down to this share of its time; the rest is one entry
COMPACT_SHARE = 0.001
#: the entry the smaller ones are summed into
REST = "rest"


#: ledger keys that name a mechanism, not a profile field: what each stands for
MECHANISMS = {
    "sd.wait.polling": "a busy wait past the card's busy: polls that found it ready, SPI polling in whole bytes",
    "flash.chip.program": "waiting for the NOR chip's page programs (tBP1, tBP2, tPP)",
    "flash.chip.erase": "waiting for the NOR chip's sector and block erases (tSE, tBE)",
    REST: "the entries under 0.1 % of the row's time",
}


def profile_sections(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A run's profiles by ledger section, from its stack metadata: sd.card, sd.host, sd.bus, flash.chip,
    flash.host (those the stack has)."""
    out: dict[str, dict[str, Any]] = {}
    sd, flash = stack.get("sd") or {}, stack.get("flash") or {}
    for section, table in (("sd.card", sd.get("card")), ("sd.host", sd.get("host")), ("sd.bus", sd.get("bus")),
                           ("flash.chip", flash.get("chip")), ("flash.host", flash.get("host"))):
        if isinstance(table, dict):
            out[section] = table
            for name, block in table.items():  # a block the profile embeds (stdio): its cycles at the same clock
                if isinstance(block, dict) and name not in ("fit_rel_sd", "unfitted"):
                    out[f"{section}.{name}"] = {"cpu_hz": table.get("cpu_hz"), **block}
    return out


def per_call(key: str, ns: float, sections: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """A ledger entry's parameter value with its unit and how many of it one call took (the multiplier), as
    text; ("", "") for a mechanism or a field the run's profiles do not hold."""
    section, _, field = key.rpartition(".")
    table = sections.get(section, {})
    value = table.get(field)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value:
        return "", ""
    if field.endswith("_hz"):
        unit_hz = value
        if field == "clock_hz" or field == "flash_clock_hz":
            return f"{value / 1e6:g} MHz", f"{ns * unit_hz / 1e9:,.0f} clocks"
        return f"{value:g} Hz", f"{ns * unit_hz / 1e9:.2f} ticks"
    cpu = table.get("cpu_hz")
    if field.endswith("_cycles") or field.endswith("_per_byte"):
        if not cpu:
            return "", ""
        cycles = ns * cpu / 1e9
        unit = "cycles/B" if field.endswith("_per_byte") else "cycles"
        what = "B" if field.endswith("_per_byte") else "x"
        return f"{value:g} {unit}", f"{cycles / value:,.2f} {what}"
    for suffix, ns_per_unit, unit in (("_us_per_kib", 1e3, "µs/KiB"), ("_us", 1e3, "µs"), ("_ms", 1e6, "ms")):
        if field.endswith(suffix):
            what = "KiB" if suffix == "_us_per_kib" else "x"
            return f"{value:g} {unit}", f"{ns / (value * ns_per_unit):,.2f} {what}"
    return "", ""


def compact(ledger_ns: dict[str, float]) -> dict[str, float]:
    """A row's ledger (ns per call by parameter) as the run's metadata keeps it: ms per call, largest first, to
    four significant digits, entries under :data:`COMPACT_SHARE` of the row's time summed into :data:`REST`."""
    total = sum(ledger_ns.values())
    out: dict[str, float] = {}
    rest = 0.0
    for k, v in sorted(ledger_ns.items(), key=lambda kv: -abs(kv[1])):
        if total > 0 and abs(v) >= COMPACT_SHARE * total:
            out[k] = float(f"{v / 1e6:.4g}")
        else:
            rest += v
    if rest:
        out[REST] = float(f"{rest / 1e6:.4g}")
    return out


@dataclass(frozen=True)
class Price:
    """A charge above the drivers: ``mult`` units of field ``field`` of the profile in role ``section``.

    ``section``: "sd.host", "sd.card", "flash.host" or "flash.chip".  The field's unit is its name's suffix
    (``_cycles`` at the profile's ``cpu_hz``, ``_per_byte`` cycles per byte with ``mult`` in bytes, ``_us``,
    ``_ms``); a dotted field names a field of a block the profile embeds (``stdio.lock_cycles``); ``field = "cpu_hz"`` prices ``mult`` cycles of a
    figure that is not a profile field (a scenario's own cycle count) at the profile's CPU clock."""

    section: str
    field: str
    mult: float = 1.0
    #: its entry in the clock's cost ledger when that is not ``section.field`` (a scenario's own cycle count)
    name: str = ""

    def __hash__(self) -> int:
        # kept: a recording looks its charges up by price, millions of times in a run of small file calls
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.section, self.field, self.mult, self.name))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, Any]:
        # not the kept hash: a string's hash differs from one process to the next
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @cached_property
    def key(self) -> str:
        """Its entry in the clock's cost ledger (VirtualClock.ledger_ns; kept: a charge above the drivers asks
        for it every time)."""
        return self.name or f"{self.section}.{self.field}"

    def ns(self, profile: Any) -> float:
        """The charge in ns with ``profile``'s values (``field`` may name a field of a block the profile embeds,
        "stdio.lock_cycles"; cycles run at the profile's own ``cpu_hz``)."""
        name = self.field
        if name == "cpu_hz":
            return self.mult * 1e9 / profile.cpu_hz
        value = profile
        for part in name.split("."):
            value = getattr(value, part)
        if name.endswith("_cycles") or name.endswith("_per_byte"):  # _per_byte: cycles per byte, mult in bytes
            return self.mult * value * 1e9 / profile.cpu_hz
        if name.endswith("_us"):
            return self.mult * value * 1e3
        if name.endswith("_ms"):
            return self.mult * value * 1e6
        raise InternalError(f"price of {self.section}.{name}: no unit to price it in")


class Recording:
    """A run's requests to its driver models and the charges above them, in order (see the module's docstring).

    Driver models register when they are built on a clock that carries a recording (``clock.recording``) and
    report each request; while one runs (``depth`` > 0) its own charges are its business.  A recording made
    with ``replaying=True`` only registers the drivers of a stack built to replay another recording into."""

    def __init__(self, *, replaying: bool = False) -> None:
        self.replaying = replaying
        #: False while the stack is being built: what its drivers do then (wear levelling reading its state),
        #: a replaying stack's build does again itself
        self.live = False
        self.items: list[tuple[Any, ...]] = []
        self.drivers: list[Any] = []
        #: > 0 while a driver model runs a request
        self.depth = 0
        #: changes whenever a state-free read could no longer go straight into the spans list :meth:`read_slot`
        #: gave (a new segment, a charge waiting to be put before the next read, the stack built)
        self.epoch = 0
        #: why the requests cannot be re-priced (empty: they can)
        self.reasons: list[str] = []
        # the current segment: state-free reads and priced charges since the last request or mark, the charges
        # made before the segment's last read apart from those after it (a read may leave state that depends on
        # when it ended: the flash driver's lock-release time)
        self._pre: dict[tuple[str, Price | None], list[float]] = {}
        self._reads: dict[tuple[int, Any], list[int]] = {}
        self._charges: dict[tuple[str, Price | None], list[float]] = {}
        #: each price charged, the first object of its value (charge() keeps that one)
        self._prices: dict[Price, Price] = {}
        # runs() and end_of(): (the number of items they were made for, the items with runs folded, row label ->
        # the index after its last mark)
        self._runs: tuple[int, list[tuple[Any, ...]], dict[str, int] | None] | None = None

    # ---- what drivers and the layers above them report ---------------------------------
    def register(self, driver: Any) -> int:
        """A driver model on this recording's clock; returns its index (the same in a replayed stack, which is
        built in the same order)."""
        if self.live:
            # a replay builds the stack's drivers afresh; one made part-way (a fresh card per configuration)
            # would not be there
            self.unpriced("a driver model made during the run")
        self.drivers.append(driver)
        return len(self.drivers) - 1

    def _flush(self) -> None:
        self.epoch += 1
        if self._pre:
            self.items.append((CHARGES, self._pre))
            self._pre = {}
        if self._reads:
            self.items.append((READS, self._reads))
            self._reads = {}
        if self._charges:
            self.items.append((CHARGES, self._charges))
            self._charges = {}

    def start(self) -> None:
        """The stack is built: from now on requests, charges and timed calls are recorded."""
        self.live = True
        self.epoch += 1

    def op(self, driver: int, name: str, args: tuple[Any, ...]) -> None:
        """A request whose time depends on the driver's state or the clock: replayed one by one."""
        if not self.live:
            return
        self._flush()
        self.items.append((OP, driver, name, args))

    def read(self, driver: int, key: Any, lba: int, count: int) -> None:
        """A read whose time depends only on ``key`` (its size and path) and where it lies (page and AU
        boundaries): folded into the segment's count of such reads."""
        if not self.live:
            return
        if self._charges:  # they came before this read
            for k, (ns, n) in self._charges.items():
                self._add(self._pre, k, ns, n)
            self._charges = {}
        spans = self._reads.get((driver, key))
        if spans is None:
            self._reads[(driver, key)] = [lba, count]
        else:
            spans.append(lba)
            spans.append(count)

    def read_slot(self, slot: list[Any], driver: int, key: Any, lba: int, count: int) -> None:
        """:meth:`read`, for a driver's fused read (a million a run), which keeps ``slot`` per key: ``[epoch,
        spans]``.  While ``slot[0]`` is this recording's :attr:`epoch`, the next reads of ``key`` may append
        themselves (``slot[1] += (lba, count)``) in place of this call; -1: not while nothing is recorded."""
        self.read(driver, key, lba, count)
        if self.live:
            slot[0], slot[1] = self.epoch, self._reads[(driver, key)]
        else:
            slot[0] = -1

    def charge(self, ns: float, category: str, price: Price | None) -> None:
        """A charge above the drivers: ``price`` says which field sets it (None: no profile field, e.g. a cache's
        CPU time at its own clock), ``ns`` what it was in this run."""
        if not self.live:
            return
        self.epoch += 1
        self._add(self._charges, self.charge_key(category, price), ns, 1)

    def charge_key(self, category: str, price: Price | None) -> tuple[str, Price | None]:
        """The key :meth:`charge` files a charge of ``price`` to ``category`` under, for :meth:`charge_keyed`."""
        if price is not None:  # one object per price: a replay prices each once, by the object
            price = self._prices.setdefault(price, price)
        return (category, price)

    def charge_keyed(self, key: tuple[str, Price | None], ns: float, times: int = 1) -> None:
        """``times`` :meth:`charge` calls with their key (:meth:`charge_key`) worked out once, for a charge made
        very often."""
        if not self.live:
            return
        self.epoch += 1
        entry = self._charges.get(key)
        if entry is not None and entry[0] == ns:
            entry[1] += times
        elif times == 1 or key[1] is not None:
            self._add(self._charges, key, ns, times)
        else:  # a charge no price sets keeps a sum: added charge by charge, as the calls would round it
            for _ in range(times):
                self._add(self._charges, key, ns, 1)

    @staticmethod
    def _add(table: dict[tuple[str, Price | None], list[float]], key: tuple[str, Price | None], ns: float,
             n: int) -> None:
        """``n`` charges of ``ns`` each into ``table``: a count per price, the sum of the fixed ones."""
        entry = table.get(key)
        if entry is None:
            table[key] = [ns, n]
        elif entry[0] == ns:
            entry[1] += n
        else:  # the same price cannot cost differently in one run; a fixed charge may vary: keep the sum
            if key[1] is not None:
                raise InternalError(f"price {key[1]} charged as {entry[0]} and {ns} ns in one run")
            entry[0] = entry[0] * entry[1] + ns * n
            entry[1] = 1

    def unpriced(self, what: str) -> None:
        """A charge above the drivers that names no parameter: the run cannot be re-priced."""
        if self.live and what not in self.reasons:
            self.reasons.append(what)

    def mark(self, label: str) -> None:
        """A timed call of row ``label`` starts or ends (they alternate per label)."""
        if not self.live:
            return
        self._flush()
        self.items.append((MARK, label))

    @property
    def repriceable(self) -> bool:
        return not self.reasons

    def runs(self) -> list[tuple[Any, ...]]:
        """:attr:`items` with each run of at least :data:`MIN_RUN` reads or writes of one driver and size at
        consecutive addresses, each followed by the same charges, as one RUN item ``(RUN, driver, name, first
        request's args, n, charges)`` (what a replay gets through; made once)."""
        if self._runs is None or self._runs[0] != len(self.items):
            self._runs = (len(self.items), _fold_runs(self.items), None)
        return self._runs[1]

    def end_of(self, labels: Any) -> int:
        """How many items of :meth:`runs` a replay needs for the timed calls of rows ``labels``: up to the last
        mark of any of them (a row's times depend on nothing recorded after its last call)."""
        items = self.runs()
        assert self._runs is not None
        ends = self._runs[2]
        if ends is None:
            ends = {item[1]: i + 1 for i, item in enumerate(items) if item[0] == MARK}
            self._runs = (self._runs[0], items, ends)
        return max((ends.get(label, 0) for label in labels), default=0)


def _fold_runs(items: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``items`` with runs of like requests folded (see :meth:`Recording.runs`)."""
    out: list[tuple[Any, ...]] = []
    i, end = 0, len(items)
    while i < end:
        item = items[i]
        if item[0] == OP and item[2] in ("read", "write") and i + 1 < end and items[i + 1][0] == CHARGES:
            d, name, args, charges = item[1], item[2], item[3], items[i + 1][1]
            lba, count, rest = args[0], args[1], args[2:]
            n, j = 1, i + 2
            while j + 1 < end:
                nxt, after = items[j], items[j + 1]
                if nxt[0] != OP or nxt[1] != d or nxt[2] != name or nxt[3][0] != lba + n * count \
                        or nxt[3][1:] != args[1:] or after[0] != CHARGES or after[1] != charges:
                    break
                n, j = n + 1, j + 2
            if n >= MIN_RUN:
                out.append((RUN, d, name, (lba, count, *rest), n, charges))
                i = j
                continue
        out.append(item)
        i += 1
    return out


def replay(rec: Recording, drivers: list[Any], clock: Any, price_ns: Callable[[Price], float],
           until: int | None = None) -> dict[str, list[int]]:
    """Feed ``rec`` to ``drivers`` (a stack built from other profiles with a replaying recording, in the same
    order) on ``clock`` and re-price its charges with ``price_ns``; returns each row label's per-call times (ns),
    in order.  ``until``: replay only the first so many items of :meth:`Recording.runs` (:meth:`Recording.end_of`
    the rows wanted).

    A RUN item goes to its driver's ``replay_run(name, args, n, between)`` where it has one (``between``: the
    charges after each request, in whole ns), else request by request."""
    if not rec.repriceable:
        raise InternalError(f"replay of a recording that cannot be re-priced ({rec.reasons[0]})")
    if len(drivers) != len(rec.drivers):
        raise InternalError(f"replay into {len(drivers)} drivers of a recording of {len(rec.drivers)}")
    samples: dict[str, list[int]] = {}
    started: dict[str, int] = {}
    advance = clock.advance_ns
    # a price's charge in whole ns, priced once per replay; by the object (Recording.charge keeps one per price,
    # and a Price's hash would take all its fields each time)
    steps: dict[int, int] = {}

    def step_of(ns: float, price: Price | None) -> int:
        if price is None:
            return int(ns + 0.5)
        step = steps.get(id(price), -1)
        if step < 0:
            step = steps[id(price)] = int(price_ns(price) + 0.5)
        return step

    items = rec.runs()
    for item in items if until is None else items[:until]:
        kind = item[0]
        if kind == OP:
            drivers[item[1]].replay_op(item[2], item[3])
        elif kind == READS:
            for (d, key), spans in item[1].items():
                drivers[d].replay_reads(key, spans)
        elif kind == CHARGES:
            for (category, price), (ns, n) in item[1].items():
                # n charges of one price in one step: the clock rounds each charge to whole ns, so the same
                # rounded step n times (nothing reads the clock between them)
                step = step_of(ns, price)
                if step:
                    advance(step * int(n), category)
        elif kind == RUN:
            _, d, name, args, n, charges = item
            between = sum(step_of(ns, price) * int(k) for (_, price), (ns, k) in charges.items())
            drv = drivers[d]
            run = getattr(drv, "replay_run", None)
            if run is not None:
                run(name, args, n, between)
            else:
                lba, count, rest = args[0], args[1], args[2:]
                for k in range(n):
                    drv.replay_op(name, (lba + k * count, count, *rest))
                    if between:
                        advance(between, "other")
        else:
            label = item[1]
            t0 = started.pop(label, None)
            if t0 is None:
                started[label] = clock.now_ns()
            else:
                samples.setdefault(label, []).append(clock.now_ns() - t0)
    return samples
