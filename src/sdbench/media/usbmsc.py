"""A USB mass-storage bridge: a PC reaches a card through an MCU over USB full speed.

:class:`UsbMscBridge` is a BlockDevice whose ``read``/``write`` are the PC's
SCSI READ(10)/WRITE(10) requests.  Each request is a bulk-only-transport
command: a 31-byte CBW (OUT), the data, a 13-byte CSW (IN).  The bus carries
64-byte packets in 1 ms frames, at most 19 bulk packets per frame, so one
packet slot is 1/19 ms and the payload ceiling is 19 x 64 B/ms = 1.216 MB/s.
A short packet (CBW, CSW) takes a whole slot.

Time on the PC side (the stack's clock) runs along the request's critical
path: the PC issues each phase ``host_turnaround_us`` after the previous one
completed; packets go in the first free slot once both ends are ready (while
the device is not ready, its endpoint NAKs and the PC retries in later
slots); the device (MCU) decodes the CBW, runs its read/write callback per
``device_buffer_bytes`` chunk (TinyUSB's MSC endpoint buffer) and queues the
CSW, all on one task.

Bridge modes (the firmware's callback):

``single-sector``  one 512-byte driver call per sector (Arduino's
                   ``SD.readRAW``/``writeRAW``);
``multi-sector``   one driver call per chunk (``sdmmc_read_sectors`` /
                   ``sdmmc_write_sectors``);
``background``     writes are copied into a request, queued (``queue_depth``)
                   to a worker task and acknowledged at once; the worker
                   writes the card while the USB transfers go on.  The
                   firmware holds one mutex around each card operation and
                   around the enqueue (``lock_during_card_write``), so the USB
                   task waits for the card write in progress before it can
                   queue the next one.  Reads take the mutex; if writes are
                   still queued, the read is queued behind them and waited
                   for.  A card write error is never reported to the PC.

The card below runs on its own virtual clock (the worker's time line); its
operations are placed on the PC's time line by start time, so card and USB
time overlap exactly where the firmware lets them.  For the background mode
the bridge keeps, for every write, the interval between its acknowledgement
(CSW) and the end of its card write: the bytes a power cut at that moment
would lose.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..clock import VirtualClock
from ..errors import ConfigError
from ..options import opt, to_mapping
from .base import BlockDevice

MODES = ("single-sector", "multi-sector", "background")
#: bounds of time-like and per-byte figures: far beyond any USB or firmware figure, far inside the floats
MAX_TIME_US = 10_000_000.0
MAX_CYCLES_PER_BYTE = 1_000_000.0


@dataclass(frozen=True)
class UsbMscConfig:
    """The USB link and the bridge firmware (table ``[usbmsc.bridge]``)."""

    packet_bytes: int = opt(64, unit="B", min=8, max=1024, help="bulk max packet size (full speed: 64)")
    packets_per_frame: int = opt(19, unit="packets", min=1, max=100,
                                 help="bulk packets per frame at most (full speed, 64-byte packets: 19)")
    frame_us: float = opt(1000.0, unit="µs", min=1.0, max=MAX_TIME_US, help="frame length (full speed: 1 ms)")
    cbw_bytes: int = opt(31, unit="B", min=1, help="command block wrapper")
    csw_bytes: int = opt(13, unit="B", min=1, help="command status wrapper")
    host_turnaround_us: float = opt(125.0, unit="µs", min=0.0, max=MAX_TIME_US,
                                    help="PC: from one transfer's completion to the next one's first transaction "
                                         "(interrupt, mass-storage driver, submission)")
    device_buffer_bytes: int = opt(4096, unit="B", min=512,
                                   help="MSC endpoint buffer: the device moves data and calls its callback in "
                                        "chunks of this size (multiple of 512)")
    command_cycles: int = opt(4_800, unit="cycles", min=0,
                              help="device: CBW decode and SCSI dispatch up to the callback (interrupt, USB task "
                                   "wake-up)")
    chunk_cycles: int = opt(2_400, unit="cycles", min=0,
                            help="device: per data chunk, transfer completion to callback (or callback to "
                                 "arming the endpoint)")
    status_cycles: int = opt(1_200, unit="cycles", min=0, help="device: building and queueing the CSW")
    request_cycles: int = opt(2_400, unit="cycles", min=0,
                              help="background: allocating a request and queueing it (mutex, malloc, queue send)")
    copy_cycles_per_byte: float = opt(0.25, unit="cycles/B", min=0.0, max=MAX_CYCLES_PER_BYTE,
                                      help="background: copying the request data")
    worker_wake_cycles: int = opt(1_200, unit="cycles", min=0,
                                  help="background: the worker task waking up for a queued request")
    queue_depth: int = opt(10, unit="requests", min=1, max=10_000, help="background: requests the queue holds")
    lock_during_card_write: bool = opt(True, help="background: the enqueue takes the mutex the worker holds "
                                                  "during each card operation (the write-up's firmware)")
    cpu_hz: int = opt(0, unit="Hz", min=0, help="device CPU clock for the cycle counts; 0 = the card driver's host "
                                                "profile (240 MHz if none)")

    def __post_init__(self) -> None:
        if self.device_buffer_bytes % 512:
            raise ConfigError(f"usbmsc.bridge.device_buffer_bytes = {self.device_buffer_bytes} B must be a "
                              "multiple of 512 B")
        # cross-field rules (ValueError: the option loader names the table)
        p = self.packet_bytes
        if p & (p - 1):  # USB 2.0 5.8.3: bulk max packet sizes are 8, 16, 32, 64 (full speed), 512 (high speed)
            raise ValueError(f"packet_bytes = {p} B is not a power of two (USB bulk max packet sizes: 8, 16, 32, "
                             f"64; 512 at high speed)")
        if self.device_buffer_bytes % p:  # the endpoint buffer holds whole packets
            raise ValueError(f"device_buffer_bytes = {self.device_buffer_bytes} B is not a whole number of "
                             f"packet_bytes = {p} B packets")


@dataclass
class _Op:
    """A queued background request."""

    kind: str            # "write" or "read"
    lba: int
    data: bytes | int    # write data, or sector count of a read
    enqueued_ns: int
    acked_ns: int = -1   # write: CSW sent to the PC
    end_ns: int = -1     # card operation finished


class UsbMscBridge(BlockDevice):
    """PC requests over USB full-speed bulk-only transport to a card behind an MCU."""

    kind = "usb-msc"

    def __init__(self, inner: BlockDevice, clock: VirtualClock, config: UsbMscConfig | None = None,
                 mode: str = "multi-sector") -> None:
        if mode not in MODES:
            raise ConfigError(f"USB MSC bridge mode {mode!r} is not one of {', '.join(MODES)}")
        if not isinstance(clock, VirtualClock) or not isinstance(inner.clock, VirtualClock):
            raise ConfigError("the USB MSC bridge needs a simulated card (virtual clocks)")
        if inner.clock is clock:
            raise ConfigError("the USB MSC bridge needs the card on its own clock (the worker's time line)")
        super().__init__(inner.geometry, clock, read_only=inner.read_only)
        self.inner = inner
        self.cfg = cfg = config or UsbMscConfig()
        self.mode = mode
        self.vclock = clock
        self.card_clock: VirtualClock = inner.clock  # type: ignore[assignment]
        host = getattr(inner, "host", None) or getattr(getattr(inner, "inner", None), "host", None)
        self.cpu_hz = cfg.cpu_hz or (host.cpu_hz if host is not None else 240_000_000)
        self._slot_ns = cfg.frame_us * 1e3 / cfg.packets_per_frame
        # worker state (background mode)
        self._queue: deque[_Op] = deque()
        self._worker_free_ns = 0
        self._written: list[_Op] = []
        # counters
        self.packets = 0
        self.frames = 0
        self._last_frame = -1
        self.commands = 0
        self.driver_calls = 0

    # ---- time helpers ---------------------------------------------------------------------
    def _now(self) -> int:
        return self.vclock.now_ns()

    def _wait_until(self, t_ns: float, category: str) -> None:
        now = self._now()
        if t_ns > now:
            # the ledger: waiting for USB slots, or for the card behind the bridge
            self.vclock.advance_ns(t_ns - now, category, f"sd.bridge.{category}")

    def _cpu(self, cycles: float) -> None:
        if cycles:
            self.vclock.advance_ns(cycles * 1e9 / self.cpu_hz, "host", "sd.bridge.cpu")

    def _transfer(self, nbytes: int, not_before_ns: float) -> None:
        """One bulk transfer: its packets in consecutive slots from the first slot both ends are ready for."""
        self._wait_until(not_before_ns, "usb")
        n = max(1, -(-nbytes // self.cfg.packet_bytes))
        # slot k starts at round(k * slot) ns on the integer-ns clock
        first = math.ceil((self._now() - 0.5) / self._slot_ns)
        self._wait_until(round((first + n) * self._slot_ns), "usb")
        self.packets += n
        ppf = self.cfg.packets_per_frame
        f0, f1 = first // ppf, (first + n - 1) // ppf
        self.frames += f1 - max(f0, self._last_frame + 1) + 1 if f1 > self._last_frame else 0
        self._last_frame = max(self._last_frame, f1)

    def _turnaround(self) -> int:
        return self._now() + int(self.cfg.host_turnaround_us * 1e3)

    # ---- the card on its own time line -----------------------------------------------------
    def _card_op(self, start_ns: int, fn) -> tuple[Any, Any]:
        """Run ``fn`` on the card clock from ``start_ns``; returns (result, the time it took as a ClockDelta)."""
        cc = self.card_clock
        if start_ns > cc.now_ns():
            cc.advance_ns(start_ns - cc.now_ns(), "idle")
        elif start_ns < cc.now_ns():
            raise AssertionError("card operations must start in time order")
        m = cc.mark()
        out = fn()
        return out, cc.delta_since(m)

    def _card_now(self, fn) -> Any:
        """A card operation on the PC's critical path (the device's USB task waits for it)."""
        out, delta = self._card_op(self._now(), fn)
        self.vclock.apply(delta)
        return out

    def _run_worker(self, until_ns: float) -> None:
        """Start every queued operation whose start falls before ``until_ns`` (the worker is FIFO)."""
        wake = int(self.cfg.worker_wake_cycles * 1e9 / self.cpu_hz)
        while self._queue:
            op = self._queue[0]
            start = max(op.enqueued_ns, self._worker_free_ns) + wake
            if start >= until_ns:
                return
            self._queue.popleft()
            if op.kind == "write":
                _, delta = self._card_op(start, lambda op=op: self.inner.write(op.lba, op.data))  # type: ignore
                self._written.append(op)
            else:
                out, delta = self._card_op(start, lambda op=op: self.inner.read(op.lba, op.data))  # type: ignore
                op.data = out
            for k, v in delta.commands:
                self.vclock.count_command(k, v)
            op.end_ns = start + delta.total_ns
            self._worker_free_ns = op.end_ns

    def _take_lock(self) -> None:
        """The USB task takes the firmware mutex: wait for the card operation in progress."""
        self._run_worker(self._now() + 1)
        if self._worker_free_ns > self._now():
            self._wait_until(self._worker_free_ns, "card")

    def _release_lock(self) -> None:
        # the worker could not start anything while the USB task held the mutex
        self._worker_free_ns = max(self._worker_free_ns, self._now())

    def drain(self) -> None:
        """Wait until every queued operation has reached the card (SYNCHRONIZE CACHE, eject)."""
        self._run_worker(math.inf)
        self._wait_until(self._worker_free_ns, "card")

    # ---- callbacks (the firmware) ------------------------------------------------------------
    def _cb_read(self, lba: int, count: int) -> bytes:
        ss = self.geometry.sector_size
        if self.mode == "single-sector":
            self.driver_calls += count
            return b"".join(self._card_now(lambda i=i: self.inner.read(lba + i, 1)) for i in range(count))
        self.driver_calls += 1
        if self.mode == "multi-sector":
            return self._card_now(lambda: self.inner.read(lba, count))
        # background: reads wait for pending writes
        self._take_lock()
        if self._queue:
            op = _Op("read", lba, count, self._now())
            self._queue.append(op)
            self._release_lock()
            self._run_worker(math.inf)
            self._wait_until(op.end_ns, "card")
            assert isinstance(op.data, bytes) and len(op.data) == count * ss
            return op.data
        data = self._card_now(lambda: self.inner.read(lba, count))
        self._release_lock()
        return data

    def _cb_write(self, lba: int, data: bytes) -> _Op | None:
        ss = self.geometry.sector_size
        count = len(data) // ss
        if self.mode == "single-sector":
            self.driver_calls += count
            for i in range(count):
                self._card_now(lambda i=i: self.inner.write(lba + i, data[i * ss:(i + 1) * ss]))
            return None
        self.driver_calls += 1
        if self.mode == "multi-sector":
            self._card_now(lambda: self.inner.write(lba, data))
            return None
        cfg = self.cfg
        if cfg.lock_during_card_write:
            self._take_lock()
        # queue full: xQueueSend blocks until the worker takes the oldest request
        self._run_worker(self._now() + 1)
        while len(self._queue) >= cfg.queue_depth:
            op0 = self._queue[0]
            wake = int(cfg.worker_wake_cycles * 1e9 / self.cpu_hz)
            self._wait_until(max(op0.enqueued_ns, self._worker_free_ns) + wake, "card")
            self._run_worker(self._now() + 1)
        self._cpu(cfg.request_cycles + cfg.copy_cycles_per_byte * len(data))
        op = _Op("write", lba, bytes(data), self._now())
        self._queue.append(op)
        if cfg.lock_during_card_write:
            self._release_lock()
        return op

    # ---- BlockDevice primitives: one SCSI command each ---------------------------------------
    def _chunks(self, count: int) -> list[tuple[int, int]]:
        per = self.cfg.device_buffer_bytes // self.geometry.sector_size
        return [(i, min(per, count - i)) for i in range(0, count, per)]

    def _command_phase(self) -> int:
        """Turnaround, CBW, CBW decode; returns when the PC may issue the data phase."""
        self.commands += 1
        self._wait_until(self._turnaround(), "usb")
        self._transfer(self.cfg.cbw_bytes, self._now())
        pc_ready = self._turnaround()
        self._cpu(self.cfg.command_cycles)
        return pc_ready

    def _status_phase(self, pc_ready: int) -> None:
        """``pc_ready``: the PC asks for the CSW a turnaround after its data phase completed."""
        self._cpu(self.cfg.status_cycles)
        self._transfer(self.cfg.csw_bytes, pc_ready)

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        ss = self.geometry.sector_size
        pc_ready = self._command_phase()
        parts = []
        for i, n in self._chunks(count):
            self._cpu(self.cfg.chunk_cycles)
            parts.append(self._cb_read(lba + i, n))
            self._transfer(n * ss, pc_ready)
        self._status_phase(self._turnaround())
        return b"".join(parts)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        ss = self.geometry.sector_size
        pc_ready = self._command_phase()
        ops = []
        csw_ready = pc_ready
        for i, n in self._chunks(len(data) // ss):
            self._cpu(self.cfg.chunk_cycles)  # arm the OUT endpoint
            self._transfer(n * ss, pc_ready)
            csw_ready = self._turnaround()
            op = self._cb_write(lba + i, data[i * ss:(i + n) * ss])
            if op is not None:
                ops.append(op)
        self._status_phase(csw_ready)
        for op in ops:
            op.acked_ns = self._now()

    def _sync(self) -> None:
        if self.mode == "background":
            self.drain()
        # on the PC's time line: a driver whose sync ends an open transfer (SdFat's SDIO, CMD12 and busy) takes
        # card time, and the card's next operation cannot start before it
        self._card_now(self.inner.sync)

    def _close(self) -> None:
        if self.mode == "background":
            self.drain()
        self.inner.close()

    # ---- power-cut exposure ------------------------------------------------------------------
    def unwritten_exposure(self, t0_ns: int, t1_ns: int) -> dict[str, float]:
        """Acknowledged-but-unwritten bytes over [t0, t1]: their maximum and time-weighted mean.

        A power cut at a uniformly random moment of the window loses the mean on average."""
        self._run_worker(math.inf)
        events: list[tuple[int, int]] = []
        for op in self._written:
            if op.acked_ns < 0 or op.end_ns <= op.acked_ns:
                continue
            a, b = max(op.acked_ns, t0_ns), min(op.end_ns, t1_ns)
            if b > a:
                n = len(op.data)  # type: ignore[arg-type]
                events += [(a, n), (b, -n)]
        events.sort()
        level = peak = 0
        area = 0.0
        t_prev = t0_ns
        for t, d in events:
            area += level * (t - t_prev)
            level += d
            peak = max(peak, level)
            t_prev = t
        span = max(1, t1_ns - t0_ns)
        return {"unwritten_bytes_max": float(peak), "unwritten_bytes_mean": area / span,
                "window_ms": (t1_ns - t0_ns) / 1e6}

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(mode=self.mode, usb=to_mapping(self.cfg), cpu_hz=self.cpu_hz, below=self.inner.describe())
        return d
