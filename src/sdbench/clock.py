"""Clocks: every measurement in a stack reads time from the stack's clock.

Real media use :class:`WallClock` (monotonic, nanoseconds).  Simulated media use
:class:`VirtualClock`, which only moves when a model advances it, so simulated
results are deterministic.  A virtual clock also keeps a running account of
where simulated time went (host software, bus transfer, card busy, ...), so a
row can be explained and not only shown.
"""
from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

# Categories the models charge time to.  Reports sum them per row.
TIME_CATEGORIES = ("host", "bus", "card", "rtos", "flash", "usb", "other")


@runtime_checkable
class Clock(Protocol):
    kind: str  # "wall" or "virtual"

    def now_ns(self) -> int: ...

    def breakdown_ns(self) -> dict[str, int]: ...


class WallClock:
    """Monotonic wall clock (time.perf_counter_ns)."""

    kind = "wall"

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def breakdown_ns(self) -> dict[str, int]:
        return {}


class VirtualClock:
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
        if ns < 0:
            raise ValueError(f"cannot advance a clock by a negative time ({ns} ns)")
        step = int(round(ns))
        if step == 0:
            return
        self._now_ns += step
        self._spent[category] = self._spent.get(category, 0) + step

    def advance_us(self, us: float, category: str = "other") -> None:
        self.advance_ns(us * 1000.0, category)

    def count_command(self, name: str, n: int = 1) -> None:
        """Count a bus command (e.g. ``CMD25``) for the per-row command table."""
        self.commands[name] = self.commands.get(name, 0) + n

    def breakdown_ns(self) -> dict[str, int]:
        return dict(self._spent)

    def commands_snapshot(self) -> dict[str, int]:
        return dict(self.commands)
