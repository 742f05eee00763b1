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


class WallClock(Clock):
    """Monotonic wall clock (time.perf_counter_ns)."""

    kind = "wall"

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def breakdown_ns(self) -> dict[str, int]:
        return {}

    def commands_snapshot(self) -> dict[str, int]:
        return {}


@dataclass(frozen=True)
class ClockDelta:
    total_ns: int
    spent: tuple[tuple[str, int], ...]
    commands: tuple[tuple[str, int], ...]


class VirtualClock(Clock):
    """Simulated time in integer nanoseconds; advanced only by models."""

    kind = "virtual"

    def __init__(self) -> None:
        self._now_ns = 0
        self._spent: dict[str, int] = {}
        self._commands: dict[str, int] = {}
        # charge(): recorded costs applied but not yet summed into the tables, by id -> [cost, times]
        self._pending: dict[int, list] = {}

    def now_ns(self) -> int:
        return self._now_ns

    def advance_ns(self, ns: float | int, category: str = "other") -> None:
        """Move time forward by ``ns`` nanoseconds, charged to ``category``."""
        if not 0 <= ns < MAX_STEP_NS:  # also false for NaN
            # a model bug (inputs are bounded before any model runs), never a user's error
            raise InternalError(f"cannot advance a clock by {ns!r} ns (negative, not finite or beyond "
                             f"{MAX_STEP_NS:g} ns)")
        step = int(ns + 0.5)
        if step == 0:
            return
        self._now_ns += step
        self._spent[category] = self._spent.get(category, 0) + step

    def advance_us(self, us: float, category: str = "other") -> None:
        self.advance_ns(us * 1000.0, category)

    def apply(self, delta: "ClockDelta") -> None:
        """Add a recorded cost (see :meth:`delta_since`) in one step: the fast path of models whose
        cost for an operation does not depend on the absolute time."""
        self._now_ns += delta.total_ns
        spent = self._spent
        for k, v in delta.spent:
            spent[k] = spent.get(k, 0) + v
        cmds = self._commands
        for k, v in delta.commands:
            cmds[k] = cmds.get(k, 0) + v

    def charge(self, cost: "ClockDelta") -> None:
        """:meth:`apply` for a cost object applied again and again (a model's recorded per-size cost): time
        moves now, the tables are summed when read.  Its keys enter the tables at the first charge, where
        apply() would put them, so the tables come out identical, order included."""
        self._now_ns += cost.total_ns
        entry = self._pending.get(id(cost))
        if entry is None:
            for k, _ in cost.spent:
                self._spent.setdefault(k, 0)
            for k, _ in cost.commands:
                self._commands.setdefault(k, 0)
            entry = self._pending[id(cost)] = [cost, 0]
        entry[1] += 1

    def _fold(self) -> None:
        spent, cmds = self._spent, self._commands
        for entry in self._pending.values():
            cost, n = entry
            if n:
                for k, v in cost.spent:
                    spent[k] += n * v
                for k, v in cost.commands:
                    cmds[k] += n * v
                entry[1] = 0

    def mark(self) -> tuple[int, dict[str, int], dict[str, int]]:
        self._fold()
        return self._now_ns, dict(self._spent), dict(self._commands)

    def delta_since(self, mark: tuple[int, dict[str, int], dict[str, int]]) -> "ClockDelta":
        self._fold()
        t, spent, cmds = mark
        return ClockDelta(self._now_ns - t,
                          tuple((k, v - spent.get(k, 0)) for k, v in self._spent.items() if v != spent.get(k, 0)),
                          tuple((k, v - cmds.get(k, 0)) for k, v in self._commands.items() if v != cmds.get(k, 0)))

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

    def commands_snapshot(self) -> dict[str, int]:
        self._fold()
        return dict(self._commands)
