"""A pass-through wrapper that records every operation (and timer markers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import BlockDevice, BlockDeviceWrapper


@dataclass(frozen=True)
class TraceEntry:
    seq: int
    op: str             # read, write, erase, trim, sync, or "mark"
    lba: int
    count: int          # sectors (0 for sync and marks)
    buf_addr: int
    t_start_ns: int
    t_end_ns: int
    note: str = ""      # marker text


class TraceDevice(BlockDeviceWrapper):
    """Records each op with its start/end time on the stack's clock.

    It is also a timer listener: the runner calls :meth:`timer_start` and
    :meth:`timer_stop` around every timed call, which lands in the trace as
    ``mark`` entries, so tests and users can see exactly what a timer covered.
    """

    kind = "trace"

    def __init__(self, inner: BlockDevice, *, keep_data: bool = False) -> None:
        super().__init__(inner)
        self.entries: list[TraceEntry] = []
        self.keep_data = keep_data
        self.data: dict[int, bytes] = {}

    def _log(self, op: str, lba: int, count: int, buf_addr: int, t0: int, note: str = "", data: bytes | None = None) -> None:
        seq = len(self.entries)
        self.entries.append(TraceEntry(seq, op, lba, count, buf_addr, t0, self.clock.now_ns(), note))
        if self.keep_data and data is not None:
            self.data[seq] = data

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        t0 = self.clock.now_ns()
        d = self.inner.read(lba, count, buf_addr=buf_addr)
        self._log("read", lba, count, buf_addr, t0, data=d)
        return d

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        t0 = self.clock.now_ns()
        self.inner.write(lba, data, buf_addr=buf_addr)
        self._log("write", lba, len(data) // self.geometry.sector_size, buf_addr, t0, data=data)

    def _erase(self, lba: int, count: int) -> None:
        t0 = self.clock.now_ns()
        self.inner.erase(lba, count)
        self._log("erase", lba, count, 0, t0)

    def _trim(self, lba: int, count: int) -> None:
        t0 = self.clock.now_ns()
        self.inner.trim(lba, count)
        self._log("trim", lba, count, 0, t0)

    def _sync(self) -> None:
        t0 = self.clock.now_ns()
        self.inner.sync()
        self._log("sync", 0, 0, 0, t0)

    def mark(self, note: str) -> None:
        t = self.clock.now_ns()
        self._log("mark", 0, 0, 0, t, note)

    # timer listener protocol (see sdbench.runner)
    def timer_start(self, label: str) -> None:
        self.mark(f"start {label}")

    def timer_stop(self, label: str) -> None:
        self.mark(f"stop {label}")

    def ops(self) -> list[TraceEntry]:
        return [e for e in self.entries if e.op != "mark"]

    def clear(self) -> None:
        self.entries.clear()
        self.data.clear()

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()  # tracing does not change the stack's behaviour
