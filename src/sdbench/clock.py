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
        self.commands: dict[str, int] = {}

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
        cmds = self.commands
        for k, v in delta.commands:
            cmds[k] = cmds.get(k, 0) + v

    def mark(self) -> tuple[int, dict[str, int], dict[str, int]]:
        return self._now_ns, dict(self._spent), dict(self.commands)

    def delta_since(self, mark: tuple[int, dict[str, int], dict[str, int]]) -> "ClockDelta":
        t, spent, cmds = mark
        return ClockDelta(self._now_ns - t,
                          tuple((k, v - spent.get(k, 0)) for k, v in self._spent.items() if v != spent.get(k, 0)),
                          tuple((k, v - cmds.get(k, 0)) for k, v in self.commands.items() if v != cmds.get(k, 0)))

    def count_command(self, name: str, n: int = 1) -> None:
        """Count a bus command (e.g. ``CMD25``) for the per-row command table."""
        self.commands[name] = self.commands.get(name, 0) + n

    def breakdown_ns(self) -> dict[str, int]:
        return dict(self._spent)

    def commands_snapshot(self) -> dict[str, int]:
        return dict(self.commands)
