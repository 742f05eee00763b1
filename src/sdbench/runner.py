"""Timing of protocol steps: every timed call reads the stack's clock.

A :class:`RowTimer` collects per-call samples for one row, together with the
block-op counters, simulated time breakdown and bus command counts that
accrued *inside* the timed calls only.  Listeners (e.g. a TraceDevice) are told
when each timer starts and stops, so a trace shows what a timer covered.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .clock import Clock
from .media.base import BlockDevice
from .records import Row, make_row

T = TypeVar("T")


class TimerListener(Protocol):
    def timer_start(self, label: str) -> None: ...

    def timer_stop(self, label: str) -> None: ...


class Progress(Protocol):
    def advance(self, label: str, n: int = 1) -> None: ...


class _NoProgress:
    def advance(self, label: str, n: int = 1) -> None:
        pass


@dataclass
class Context:
    """What a protocol needs to time calls: the clock, listeners and progress."""

    clock: Clock
    listeners: tuple[TimerListener, ...] = ()
    progress: Progress = _NoProgress()
    #: row label -> the row's cost ledger, ns per timed call by the parameter it comes from (simulated clocks;
    #: sdbench.clock.VirtualClock.ledger_ns), filled as rows finish
    ledger: dict[str, dict[str, float]] = field(default_factory=dict)

    def row(self, label: str, op: str, nbytes: int, devices: Iterable[BlockDevice] = (), **kw: Any) -> "RowTimer":
        return RowTimer(self, label, op, nbytes, tuple(devices), kw)


class RowTimer:
    def __init__(self, ctx: Context, label: str, op: str, nbytes: int, devices: tuple[BlockDevice, ...],
                 row_kw: dict[str, Any]) -> None:
        self.ctx, self.label, self.op, self.nbytes = ctx, label, op, nbytes
        self.devices = devices
        self.row_kw = row_kw
        self.samples_ns: list[int] = []
        self.counters: dict[str, int] = {}
        self.breakdown_ns: dict[str, int] = {}
        self.commands: dict[str, int] = {}
        self.ledger_ns: dict[str, float] = {}

    def time(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` as one timed call and record its sample."""
        clock = self.ctx.clock
        stats_before = [d.stats.snapshot() for d in self.devices]
        bd_before = clock.breakdown_ns()
        cmd_before = clock.commands_snapshot()
        led_before = clock.ledger_ns()
        for lst in self.ctx.listeners:
            lst.timer_start(self.label)
        rec = getattr(clock, "recording", None)  # a recording for re-pricing (sdbench.ledger) marks the call
        if rec is not None:
            rec.mark(self.label)
        t0 = clock.now_ns()
        result = fn()
        t1 = clock.now_ns()
        if rec is not None:
            rec.mark(self.label)
        for lst in self.ctx.listeners:
            lst.timer_stop(self.label)
        self.samples_ns.append(t1 - t0)
        for i, d in enumerate(self.devices):
            prefix = "" if i == 0 else f"{d.kind}."
            after = d.stats.snapshot()
            for k, v in after.items():
                delta = v - stats_before[i][k]
                if delta:
                    self.counters[prefix + k] = self.counters.get(prefix + k, 0) + delta
        for k, v in clock.breakdown_ns().items():
            delta = v - bd_before.get(k, 0)
            if delta:
                self.breakdown_ns[k] = self.breakdown_ns.get(k, 0) + delta
        for k, v in clock.commands_snapshot().items():
            delta = v - cmd_before.get(k, 0)
            if delta:
                self.commands[k] = self.commands.get(k, 0) + delta
        for k, v in clock.ledger_ns().items():
            delta = v - led_before.get(k, 0.0)
            if delta:
                self.ledger_ns[k] = self.ledger_ns.get(k, 0.0) + delta
        self.ctx.progress.advance(self.label)
        return result

    def finish(self) -> Row:
        n = len(self.samples_ns)
        if self.ledger_ns and n:
            self.ctx.ledger[self.label] = {k: v / n for k, v in self.ledger_ns.items()}
        return make_row(self.label, self.op, self.nbytes, self.samples_ns, counters=self.counters,
                        breakdown_ns=self.breakdown_ns, commands=self.commands, **self.row_kw)
