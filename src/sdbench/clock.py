"""Clocks: every measurement in a stack reads time from the stack's clock.

Real media use :class:`WallClock` (monotonic, nanoseconds).  Simulated media use
:class:`VirtualClock`, which only moves when a model advances it, so simulated
results are deterministic.  A virtual clock also keeps a running account of
where simulated time went (host software, bus transfer, card busy, ...), so a
row can be explained and not only shown.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from .errors import InternalError

# Categories the models charge time to.  Reports sum them per row.
TIME_CATEGORIES = ("host", "bus", "card", "rtos", "flash", "usb", "other")
#: largest single step of a virtual clock (about 3000 years): anything beyond is a model's arithmetic gone wrong
MAX_STEP_NS = 1e20


class Clock(ABC):
    """What every layer reads time from; the whole interface, so callers never probe which clock they have."""

    kind: str  # "wall" or "virtual"

    @property
    def simulated(self) -> bool:
        """True when models move this clock (results are deterministic), False for real time."""
        return self.kind == "virtual"

    @abstractmethod
    def now_ns(self) -> int: ...

    @abstractmethod
    def breakdown_ns(self) -> dict[str, int]:
        """Time so far by category (TIME_CATEGORIES); empty where nothing accounts for it."""

    @abstractmethod
    def commands_snapshot(self) -> dict[str, int]:
        """Bus commands counted so far, by name; empty where nothing counts them."""

    def ledger_ns(self) -> dict[str, float]:
        """Time so far by the profile parameter it comes from (VirtualClock); empty where nothing accounts for it."""
        return {}


class WallClock(Clock):
    """Monotonic wall clock (time.perf_counter_ns)."""

    kind = "wall"

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def breakdown_ns(self) -> dict[str, int]:
        return {}

    def commands_snapshot(self) -> dict[str, int]:
        return {}


#: the ledger's key of time a model charged without naming the parameter it comes from, by category
UNATTRIBUTED = "unattributed."


@dataclass(frozen=True)
class ClockDelta:
    total_ns: int
    spent: tuple[tuple[str, int], ...]
    commands: tuple[tuple[str, int], ...]
    #: the same time by the profile parameter it comes from (the cost ledger; see VirtualClock.ledger_ns)
    params: tuple[tuple[str, float], ...] = ()


def _refuse_step(ns: float | int) -> NoReturn:
    # a model bug (inputs are bounded before any model runs), never a user's error
    raise InternalError(f"cannot advance a clock by {ns!r} ns (negative, not finite or beyond {MAX_STEP_NS:g} ns)")


class VirtualClock(Clock):
    """Simulated time in integer nanoseconds; advanced only by models.

    Besides the categories (host, bus, card, ...) the clock keeps the **cost ledger**: the same time by the
    profile parameter it comes from, e.g. ``sd.card.write_busy_end_us`` or ``sd.host.block_cycles`` (keys are
    ``section.field``, the sections those of :class:`sdbench.ledger.Price`; ``sd.bus.clock_hz`` is time on the
    bus at its clock; a few keys name a mechanism rather than a field: ``sd.wait.polling`` is the time a
    busy wait ran past the busy it waited for).  A charge that names no parameter goes to
    ``unattributed.<category>``.  Waits charge their time unattributed-free (``param=""``) and say where it
    came from with :meth:`attribute`.
    """

    kind = "virtual"
    #: a :class:`sdbench.ledger.Recording` of what the run charged, for re-pricing (None: not recorded)
    recording: Any = None

    def __init__(self) -> None:
        self._now_ns = 0
        self._spent: dict[str, int] = {}
        self._commands: dict[str, int] = {}
        self._params: dict[str, float] = {}
        # charge(): recorded costs applied but not yet summed into the tables, by id -> [cost, times]
        self._pending: dict[int, list] = {}
        # summer(): the lists callers add their parts to, each with the (table, key) of each place and zeros
        self._sums: list[tuple[list[int], tuple[tuple[dict, str], ...], list[int]]] = []

    def now_ns(self) -> int:
        return self._now_ns

    def advance_ns(self, ns: float | int, category: str = "other", param: str | None = None) -> None:
        """Move time forward by ``ns`` nanoseconds, charged to ``category`` and in the ledger to ``param`` (None:
        unattributed; "": the caller attributes it with :meth:`attribute`)."""
        if not 0 <= ns < MAX_STEP_NS:  # also false for NaN
            _refuse_step(ns)
        step = int(ns + 0.5)
        if step == 0:
            return
        self._now_ns += step
        self._spent[category] = self._spent.get(category, 0) + step
        if param is None:
            param = UNATTRIBUTED + category
        if param:
            self._params[param] = self._params.get(param, 0.0) + step
        rec = self.recording
        if rec is not None and not rec.depth:
            rec.unpriced(f"a charge to {category} above the driver models that names no parameter")

    def attribute(self, parts: Any) -> None:
        """Ledger entries for time already charged with ``param=""``: (parameter, ns) pairs."""
        params = self._params
        for k, v in parts:
            if v:
                params[k] = params.get(k, 0.0) + v

    def advance_priced(self, ns: float, category: str, price: Any, param: str | None = None) -> None:
        """:meth:`advance_ns` for a charge above the driver models that one profile field sets (a
        :class:`sdbench.ledger.Price`; None: a time no profile field sets), so a recording can re-price it.
        ``param``: its ledger key (default: the price's field, or ``unattributed.<category>``)."""
        if param is None and price is not None:
            param = price.key
        rec = self.recording
        if rec is None or rec.depth:
            self.advance_ns(ns, category, param)
            return
        rec.depth += 1
        try:
            self.advance_ns(ns, category, param)
        finally:
            rec.depth -= 1
        rec.charge(ns, category, price)

    def pricer(self, ns: float, category: str, price: Any) -> Callable[..., None]:
        """``advance_priced(ns, category, price)`` as a function, for a charge made very often (a file call's
        cost: millions in a run of small calls); ``f(times)`` makes that many in a row.  The step and the ledger
        key are worked out once; a recording the clock carries gets each charge as from advance_priced."""
        if not 0 <= ns < MAX_STEP_NS:
            return lambda times=1: self.advance_priced(ns, category, price)  # raises as advance_ns does
        step = int(ns + 0.5)
        param = price.key if price is not None else UNATTRIBUTED + category
        spent, params = self._spent, self._params
        keyed: list[Any] = [None, None]  # the recording last charged and its key for this charge

        def advance(times: int = 1) -> None:
            if times <= 0:
                return
            if step:
                total = step * times  # ``times`` charges in a row: nothing reads the clock between them
                self._now_ns += total
                spent[category] = spent.get(category, 0) + total
                params[param] = params.get(param, 0.0) + total
            rec = self.recording
            if rec is not None and not rec.depth:
                if keyed[0] is not rec:
                    keyed[0], keyed[1] = rec, rec.charge_key(category, price)
                rec.charge_keyed(keyed[1], ns, times)
        return advance

    def advance_us(self, us: float, category: str = "other") -> None:
        self.advance_ns(us * 1000.0, category)

    def apply(self, delta: "ClockDelta") -> None:
        """Add a recorded cost (see :meth:`delta_since`) in one step: the fast path of models whose
        cost for an operation does not depend on the absolute time."""
        self.apply_parts(delta.total_ns, delta.spent, delta.commands, delta.params)

    def apply_parts(self, total_ns: int, spent: tuple[tuple[str, int], ...], commands: tuple[tuple[str, int], ...],
                    params: tuple[tuple[str, float], ...] = ()) -> None:
        """:meth:`apply` of the ClockDelta these fields make, without making it (a model that works out a new
        cost each time: a flash driver's write section)."""
        rec = self.recording
        if rec is not None and not rec.depth and total_ns:
            rec.unpriced("a recorded cost applied above the driver models")
        self._now_ns += total_ns
        table = self._spent
        for k, v in spent:
            table[k] = table.get(k, 0) + v
        cmds = self._commands
        for k, v in commands:
            cmds[k] = cmds.get(k, 0) + v
        by_param = self._params
        if params:
            for k, v in params:
                by_param[k] = by_param.get(k, 0.0) + v
        else:  # a cost that names no parameter: unattributed, by category
            for k, v in spent:
                key = UNATTRIBUTED + k
                by_param[key] = by_param.get(key, 0.0) + v

    def summer(self, spent: tuple[str, ...], commands: tuple[str, ...], params: tuple[str, ...]) -> list[int] | None:
        """For a model that works out a new cost each time, very often (a flash driver's write section): a list to
        add each cost's whole-ns parts to, in place of :meth:`apply_parts`, one place per key given (categories,
        then commands, then ledger keys), while :meth:`advance_summed` moves the time.  The tables take the sums
        when they are read, as they take :meth:`charge`'s costs.  None while a key is not in its table yet: a
        key enters it where the first charge of it puts it (apply_parts, then)."""
        places = (*((self._spent, k) for k in spent), *((self._commands, k) for k in commands),
                  *((self._params, k) for k in params))
        if not all(k in table for table, k in places):
            return None
        sums = [0] * len(places)
        self._sums.append((sums, places, [0] * len(places)))
        return sums

    def advance_summed(self, total_ns: int) -> None:
        """The time of a cost whose parts went to a :meth:`summer` list."""
        rec = self.recording
        if rec is not None and not rec.depth and total_ns:
            rec.unpriced("a recorded cost applied above the driver models")
        self._now_ns += total_ns

    def move_ns(self, ns: int) -> None:
        """Time moves by ``ns`` whole ns, and nothing else: no table, no recording.  For a driver model replaying
        another run's requests (sdbench.ledger.replay), which reads the clock's time alone."""
        self._now_ns += ns

    def charge(self, cost: "ClockDelta", times: int = 1) -> None:
        """:meth:`apply` for a cost object applied again and again (a model's recorded per-size cost), ``times``
        times: time moves now, the tables are summed when read.  Its keys enter the tables at the first charge,
        where apply() would put them, so the tables come out identical, order included.  For the driver models
        only (a recording takes their requests, not their charges)."""
        self._now_ns += cost.total_ns * times
        entry = self._pending.get(id(cost))
        if entry is None:
            for k, _ in cost.spent:
                self._spent.setdefault(k, 0)
            for k, _ in cost.commands:
                self._commands.setdefault(k, 0)
            for k, _ in cost.params or ((UNATTRIBUTED + c, v) for c, v in cost.spent):
                self._params.setdefault(k, 0.0)
            entry = self._pending[id(cost)] = [cost, 0]
        entry[1] += times

    def charger(self, cost: "ClockDelta") -> Callable[[], None]:
        """``charge(cost)`` as a function of no arguments, for a caller that charges one recorded cost very often
        (a driver's fused read path): the same time and tables, without the lookup per call.  The cost must have
        been charged once already (its keys are in the tables then); otherwise this is plain ``charge``."""
        entry = self._pending.get(id(cost))
        if entry is None or entry[0] is not cost:
            return lambda: self.charge(cost)
        step = cost.total_ns

        def charge_once() -> None:
            self._now_ns += step
            entry[1] += 1
        return charge_once

    def _fold(self) -> None:
        spent, cmds, params = self._spent, self._commands, self._params
        for entry in self._pending.values():
            cost, n = entry
            if n:
                for k, v in cost.spent:
                    spent[k] += n * v
                for k, v in cost.commands:
                    cmds[k] += n * v
                for k, v in cost.params or ((UNATTRIBUTED + c, v) for c, v in cost.spent):
                    params[k] += n * v
                entry[1] = 0
        for sums, places, zeros in self._sums:
            if any(sums):
                for (table, k), v in zip(places, sums):
                    table[k] += v
                sums[:] = zeros

    def mark(self) -> tuple[int, dict[str, int], dict[str, int], dict[str, float]]:
        self._fold()
        return self._now_ns, dict(self._spent), dict(self._commands), dict(self._params)

    def delta_since(self, mark: tuple[int, dict[str, int], dict[str, int], dict[str, float]]) -> "ClockDelta":
        self._fold()
        t, spent, cmds, params = mark
        # (a bridge takes a delta per card operation: one lookup per key)
        return ClockDelta(self._now_ns - t,
                          tuple([(k, v - o) for k, v in self._spent.items() if (o := spent.get(k, 0)) != v]),
                          tuple([(k, v - o) for k, v in self._commands.items() if (o := cmds.get(k, 0)) != v]),
                          tuple([(k, v - o) for k, v in self._params.items() if (o := params.get(k, 0.0)) != v]))

    @property
    def commands(self) -> dict[str, int]:
        """Bus commands counted so far, by name (the live table; :meth:`commands_snapshot` for a copy)."""
        self._fold()
        return self._commands

    def count_command(self, name: str, n: int = 1) -> None:
        """Count a bus command (e.g. ``CMD25``) for the per-row command table."""
        self._commands[name] = self._commands.get(name, 0) + n

    def breakdown_ns(self) -> dict[str, int]:
        self._fold()
        return dict(self._spent)

    def ledger_ns(self) -> dict[str, float]:
        """The cost ledger so far: time by the parameter it comes from (see the class's docstring)."""
        self._fold()
        return dict(self._params)

    def commands_snapshot(self) -> dict[str, int]:
        self._fold()
        return dict(self._commands)


class TimeOnlyClock(VirtualClock):
    """A :class:`VirtualClock` that keeps the time alone: its category, command and ledger tables stay empty.
    For a replay of a recorded run into other profiles (sdbench.ledger.replay), which reads the time and nothing
    else; every step rounds to whole ns as VirtualClock's does, so the time is the same to the ns."""

    def advance_ns(self, ns: float | int, category: str = "other", param: str | None = None) -> None:
        if not 0 <= ns < MAX_STEP_NS:
            _refuse_step(ns)
        self._now_ns += int(ns + 0.5)

    def attribute(self, parts: Any) -> None:
        pass

    def count_command(self, name: str, n: int = 1) -> None:
        pass

    def apply_parts(self, total_ns: int, spent: tuple[tuple[str, int], ...], commands: tuple[tuple[str, int], ...],
                    params: tuple[tuple[str, float], ...] = ()) -> None:
        self._now_ns += total_ns

    def charge(self, cost: "ClockDelta", times: int = 1) -> None:
        self._now_ns += cost.total_ns * times

    def summer(self, spent: tuple[str, ...], commands: tuple[str, ...], params: tuple[str, ...]) -> list[int] | None:
        return None  # no tables to sum into: apply_parts keeps the time

    def charger(self, cost: "ClockDelta") -> Callable[[], None]:
        step = cost.total_ns

        def charge_once() -> None:
            self._now_ns += step
        return charge_once

    def pricer(self, ns: float, category: str, price: Any) -> Callable[..., None]:
        if not 0 <= ns < MAX_STEP_NS:
            return lambda times=1: self.advance_ns(ns, category)  # raises as advance_ns does
        step = int(ns + 0.5)

        def advance(times: int = 1) -> None:
            if times > 0:
                self._now_ns += step * times
        return advance
