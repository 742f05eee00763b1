"""When a job may issue its next I/O: rates, think time, flow between jobs, latency targets, steady state.

Each is fio's option of the same name; all of them read and wait on the
job's clock (the wall clock, or a simulated device's virtual clock, which a
wait advances), so a paced job on a simulated card stays deterministic.

* **rate** (``rate``, ``rate_iops``, per direction): I/Os are issued on a
  schedule, evenly spaced (``rate_process=linear``) or as a Poisson process;
  after a think-time pause the schedule catches up unless
  ``rate_ignore_thinktime``.  ``rate_min``/``rate_iops_min`` fail the job when
  a ``rate_cycle`` of its I/O falls below them.
* **think time**: after ``thinktime_blocks`` I/Os (issued or completed) or
  ``thinktime_iotime`` of I/O, a pause of ``thinktime`` (the first
  ``thinktime_spin`` of it spinning the CPU).
* **flow**: jobs sharing a ``flow_id`` keep their I/O counts in the ratio of
  their ``flow`` weights: a job ahead of its share waits ``flow_sleep``.  The
  counters live in memory shared by the jobs' processes (:class:`FlowTable`).
* **latency target**: the queue depth is searched (doubling, then bisecting)
  for the deepest one whose ``latency_percentile`` of I/Os in a
  ``latency_window`` stays at or below ``latency_target``; the job then runs one
  more window at that depth (measured afresh) and ends, or keeps adjusting
  (``latency_run``).
* **steady state**: once per ``ss_interval`` after ``ss_ramp`` the job's IOPS,
  bandwidth or mean latency in that interval is kept; when the last
  ``ss_dur`` of them meet the criterion (all within a limit of their mean, or
  a least-squares slope below a limit) the job ends.
"""
from __future__ import annotations

import mmap
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import SdbenchError
from .jobs import JobConfig

class RateTooLow(SdbenchError):
    """A job fell below its rate_min or rate_iops_min."""


class FlowTable:
    """Flow counters shared by the jobs' processes, in an anonymous shared mapping made before they fork: one
    cell per job (its flow id, its weight, its I/Os), written only by that job, so no count is lost when two
    processes update at once; a flow's count and weight are the sums over its jobs' cells."""

    CELLS = 1024
    _REC = struct.Struct("<qqq")

    def __init__(self) -> None:
        self.map = mmap.mmap(-1, self.CELLS * self._REC.size)
        self.used = 0

    def join(self, flow_id: int, weight: int) -> "FlowCell":
        """A job's cell (before the jobs start)."""
        if self.used >= self.CELLS:
            raise SdbenchError(f"at most {self.CELLS} jobs with flow in one run")
        cell = FlowCell(self, self.used, flow_id)
        self.used += 1
        self._REC.pack_into(self.map, cell.index * self._REC.size, flow_id, weight, 0)
        return cell

    def totals(self, flow_id: int) -> tuple[int, int]:
        """I/Os and weight of the flow's jobs."""
        count = weight = 0
        for i in range(self.used):
            fid, w, n = self._REC.unpack_from(self.map, i * self._REC.size)
            if fid == flow_id:
                count += n
                weight += w
        return count, weight


@dataclass
class FlowCell:
    """One job's cell of a :class:`FlowTable`."""
    table: FlowTable
    index: int
    flow_id: int

    def state(self) -> tuple[int, int, int]:
        """This job's I/Os, the flow's I/Os and the flow's weight."""
        t = self.table
        mine = t._REC.unpack_from(t.map, self.index * t._REC.size)[2]
        return (mine, *t.totals(self.flow_id))

    def bump(self) -> None:
        t, at = self.table, self.index * self.table._REC.size
        fid, w, n = t._REC.unpack_from(t.map, at)
        t._REC.pack_into(t.map, at, fid, w, n + 1)

    def leave(self) -> None:
        """The job ended: the others no longer wait for its share."""
        t, at = self.table, self.index * self.table._REC.size
        fid, w, n = t._REC.unpack_from(t.map, at)
        t._REC.pack_into(t.map, at, fid, 0, n)


@dataclass
class _Rate:
    interval_ns: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])   # per I/O (iops cap)
    ns_per_byte: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # per byte (bandwidth cap)
    next_ns: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])


class Pacer:
    """The gates of one job (or of one thread of it; a lock-free design: each thread has its own share of the
    rates).  ``now`` reads the job's clock; ``wait_until`` sleeps on it (or advances a virtual clock)."""

    def __init__(self, job: JobConfig, now: Callable[[], int], wait_until: Callable[[int], None], *,
                 share: float = 1.0, flow: FlowCell | None = None, seed: int = 0) -> None:
        self.job, self.now, self.wait_until = job, now, wait_until
        self.rate = _Rate()
        self.active = False
        for d in range(3):
            iops = job.rate_iops[d] * share
            bw = job.rate_bytes_s[d] * share
            if iops:
                self.rate.interval_ns[d] = 1e9 / iops
                self.active = True
            if bw:
                self.rate.ns_per_byte[d] = 1e9 / bw
                self.active = True
        self.poisson = job.rate_process == "poisson"
        self.rng = np.random.default_rng([seed, 0x7A7E])
        self.think = job.thinktime_us > 0
        self.think_every = job.thinktime_blocks
        self.think_on_issue = job.thinktime_blocks_type == "issue"
        self.think_count = 0
        self.iotime_ns = int(job.thinktime_iotime_s * 1e9)
        self.io_since: int | None = None
        self.flow = flow if job.flow else None
        self.flow_sleep_ns = (job.flow_sleep_us or 1000) * 1000
        self.min_cycle_ns = job.rate_cycle_ms * 1_000_000
        self.mins = [(job.rate_min_bytes_s[d] * share, job.rate_iops_min[d] * share) for d in range(3)]
        self.check_min = any(b or i for b, i in self.mins)
        self.cycle_start = 0
        self.cycle = [[0, 0], [0, 0], [0, 0]]  # bytes, ios per direction in the current cycle
        self.enabled = self.active or self.think or self.flow is not None or self.check_min
        #: the job's deadline (a list the engine shares): no wait goes past it
        self.deadline = [1 << 63]

    def _wait(self, t: int) -> bool:
        """Wait until ``t`` or the deadline, whichever is first; False when the deadline came first."""
        if t >= self.deadline[0]:
            self.wait_until(self.deadline[0])
            return False
        self.wait_until(t)
        return True

    def start(self, t: int) -> None:
        self.rate.next_ns = [float(t)] * 3
        self.cycle_start = t
        self.io_since = t

    # ---- before an I/O -------------------------------------------------------------------------------------
    def before(self, kind: int, size: int) -> None:
        """Wait until the I/O may be issued (``kind``: 0 read, 1 write, 2 trim, fio's numbering)."""
        if self.flow is not None:
            self._flow()
        if self.active:
            r = self.rate
            gap = max(r.interval_ns[kind], r.ns_per_byte[kind] * size)
            if gap:
                if self.poisson:
                    gap = float(self.rng.exponential(gap))
                due = r.next_ns[kind]
                now = self.now()
                if due > now:
                    if not self._wait(int(due)):
                        return
                    now = int(due)
                # the schedule runs from the job's start: a job that fell behind catches up, as fio's does
                r.next_ns[kind] = due + gap
        if self.think and self.think_on_issue:
            self._count_think()

    def _flow(self) -> None:
        assert self.flow is not None
        w = self.job.flow
        while True:
            mine, count, total = self.flow.state()
            if count == 0 or total == 0 or mine / count <= w / total:
                self.flow.bump()
                return
            if not self._wait(self.now() + self.flow_sleep_ns):
                return

    # ---- after an I/O --------------------------------------------------------------------------------------
    def after(self, kind: int, size: int, t_done: int) -> None:
        if self.think and not self.think_on_issue:
            self._count_think()
        if self.iotime_ns and self.io_since is not None and t_done - self.io_since >= self.iotime_ns:
            self._pause()
        if self.check_min:
            c = self.cycle[kind]
            c[0] += size
            c[1] += 1
            if t_done - self.cycle_start >= self.min_cycle_ns:
                self._check_min(t_done)

    def _count_think(self) -> None:
        self.think_count += 1
        if self.think_count >= self.think_every:
            self.think_count = 0
            self._pause()

    def _pause(self) -> None:
        job = self.job
        start = self.now()
        spin_end = start + job.thinktime_spin_us * 1000
        if job.thinktime_spin_us:
            if self.now is time.perf_counter_ns:
                while time.perf_counter_ns() < min(spin_end, self.deadline[0]):
                    pass
            else:
                self._wait(spin_end)
        end = start + job.thinktime_us * 1000
        if end > self.now():
            self._wait(end)
        if job.rate_ignore_thinktime:
            self.rate.next_ns = [float(self.now())] * 3
        self.io_since = self.now()

    def _check_min(self, t: int) -> None:
        secs = (t - self.cycle_start) / 1e9
        for d, (min_bw, min_iops) in enumerate(self.mins):
            if not (min_bw or min_iops):
                continue
            nbytes, ios = self.cycle[d]
            if min_bw and nbytes / secs < min_bw:
                raise RateTooLow(f"job {self.job.name}: {['read', 'write', 'trim'][d]} rate {nbytes / secs / 1024:.0f} "
                                 f"KiB/s is below rate_min {min_bw / 1024:.0f} KiB/s")
            if min_iops and ios / secs < min_iops:
                raise RateTooLow(f"job {self.job.name}: {['read', 'write', 'trim'][d]} rate {ios / secs:.0f} IOPS is "
                                 f"below rate_iops_min {min_iops:.0f} IOPS")
        self.cycle_start = t
        self.cycle = [[0, 0], [0, 0], [0, 0]]


class LatencyTarget:
    """fio's latency_target search over the queue depth (see the module docstring)."""

    def __init__(self, job: JobConfig, start_ns: int) -> None:
        self.job = job
        self.target = job.latency_target_us * 1000
        self.window = job.latency_window_us * 1000
        self.qd, self.low, self.high = 1, 1, job.iodepth
        self.stable = 0
        self.window_start = start_ns
        self.ios = 0
        self.failed = 0
        self.final = False
        self.done = False
        self.reset_stats = False

    def record(self, lat: np.ndarray) -> None:
        self.ios += int(lat.size)
        self.failed += int((lat > self.target).sum())

    def check(self, now: int) -> None:
        """At most once per window: ramp up on success, down on failure."""
        if self.done or now - self.window_start < self.window or not self.ios:
            return
        ok = 100.0 * (self.ios - self.failed) / self.ios
        if ok >= self.job.latency_percentile:
            self._success()
        elif self.qd == 1:
            self.done = True   # even one I/O at a time misses the target
        else:
            self.high = self.qd
            if self.qd == self.low:
                self.low -= 1
            self.qd = max(1, (self.qd + self.low) // 2)
            self.stable = 0
            self.final = False
        self.window_start, self.ios, self.failed = now, 0, 0

    def _success(self) -> None:
        qd = self.qd
        self.low = qd
        if qd + 1 == self.high:
            self.stable += 1
            if self.stable >= 3:
                self.high += 1
                self.stable = 0
        if self.high != self.job.iodepth:
            self.qd = (self.qd + self.high) // 2
        else:
            self.qd *= 2
        self.qd = min(self.qd, self.job.iodepth)
        if not self.job.latency_run and self.qd == qd:
            if self.final:
                self.done = True
            else:
                self.final = True
                self.reset_stats = True

    def report(self) -> dict[str, Any]:
        return {"latency_depth": self.qd, "latency_target": self.target, "latency_percentile":
                self.job.latency_percentile, "latency_window": self.window}


class SteadyState:
    """fio's steady-state detection (see the module docstring)."""

    def __init__(self, job: JobConfig, start_ns: int) -> None:
        self.job = job
        self.metric = job.steadystate
        self.interval = int(job.ss_interval_s * 1e9)
        self.ramp_end = start_ns + int(job.ss_ramp_s * 1e9)
        self.n = max(2, round(job.ss_dur_s / job.ss_interval_s))
        self.next = self.ramp_end + self.interval
        self.last_ios = self.last_bytes = 0
        self.last_lat_sum = 0.0
        self.iops: list[float] = []
        self.bw: list[float] = []
        self.lat: list[float] = []
        self.attained = False
        self.criterion = 0.0
        self.started = False

    def sample(self, now: int, ios: int, nbytes: int, lat_sum_ns: float) -> None:
        """Called with running totals; takes a measurement each interval after the ramp."""
        if now < self.ramp_end or self.attained:
            self.last_ios, self.last_bytes, self.last_lat_sum = ios, nbytes, lat_sum_ns
            self.next = max(self.next, self.ramp_end + self.interval)
            return
        if not self.started:
            self.started = True
            self.last_ios, self.last_bytes, self.last_lat_sum = ios, nbytes, lat_sum_ns
            self.next = now + self.interval
            return
        while now >= self.next:
            secs = self.interval / 1e9
            d_ios = ios - self.last_ios
            self.iops.append(d_ios / secs)
            self.bw.append((nbytes - self.last_bytes) / secs / 1024)
            self.lat.append((lat_sum_ns - self.last_lat_sum) / d_ios if d_ios else 0.0)
            self.last_ios, self.last_bytes, self.last_lat_sum = ios, nbytes, lat_sum_ns
            self.next += self.interval
            for series in (self.iops, self.bw, self.lat):
                del series[:-self.n]
            if len(self.iops) >= self.n:
                self._judge()

    def _judge(self) -> None:
        base = self.metric.split("_")[0]
        data = np.array({"iops": self.iops, "bw": self.bw, "lat": self.lat}[base], dtype=np.float64)
        mean = float(data.mean())
        limit = self.job.ss_limit * (mean / 100.0 if self.job.ss_limit_pct else 1.0)
        if self.metric.endswith("_slope"):
            x = np.arange(data.size, dtype=np.float64) * (self.interval / 1e9)
            slope = float(np.polyfit(x, data, 1)[0]) if data.size > 1 else 0.0
            self.criterion = abs(slope) / mean * 100 if self.job.ss_limit_pct and mean else abs(slope)
            self.attained = abs(slope) <= limit
        else:
            dev = float(np.abs(data - mean).max())
            self.criterion = dev / mean * 100 if self.job.ss_limit_pct and mean else dev
            self.attained = dev <= limit

    def report(self) -> dict[str, Any]:
        """fio's "steadystate" object of the JSON output."""
        limit = self.job.ss_limit
        spec = f"{self.metric}:{limit:g}{'%' if self.job.ss_limit_pct else ''}"
        return {"ss": spec, "duration": int(self.job.ss_dur_s), "attained": int(self.attained),
                "criterion": f"{self.criterion:.2f}{'%' if self.job.ss_limit_pct else ''}",
                "max_deviation" if not self.metric.endswith("_slope") else "slope": self.criterion,
                "data": {"bw_mean": float(np.mean(self.bw)) if self.bw else 0.0,
                         "iops_mean": float(np.mean(self.iops)) if self.iops else 0.0,
                         "iops": [round(x) for x in self.iops], "bw": [round(x) for x in self.bw]}}


class Monitor:
    """A job's latency target and steady state, fed with every completion and checked every
    ``PROGRESS_EVERY_S``: :meth:`check` says when the job should end."""

    def __init__(self, job: JobConfig, start_ns: int) -> None:
        self.lt = LatencyTarget(job, start_ns) if job.latency_target_us else None
        self.ss = SteadyState(job, start_ns) if job.steadystate != "none" else None
        self.ios = 0
        self.bytes = 0
        self.lat_sum = 0.0
        self.next_ns = start_ns + 100_000_000

    @property
    def active(self) -> bool:
        return self.lt is not None or self.ss is not None

    def record(self, size: int, lat: int) -> None:
        self.ios += 1
        self.bytes += size
        self.lat_sum += lat
        if self.lt is not None:
            self.lt.ios += 1
            if lat > self.lt.target:
                self.lt.failed += 1

    def check(self, now: int) -> bool:
        """True when the job is done (steady, or its latency target found)."""
        if now < self.next_ns:
            return False
        self.next_ns = now + 100_000_000
        done = False
        if self.lt is not None:
            self.lt.check(now)
            done = self.lt.done
        if self.ss is not None:
            self.ss.sample(now, self.ios, self.bytes, self.lat_sum)
            done = done or self.ss.attained
        return done

    @property
    def ended(self) -> bool:
        """The job is done: steady, or its latency target found."""
        return bool((self.lt is not None and self.lt.done) or (self.ss is not None and self.ss.attained))

    @property
    def depth(self) -> int | None:
        return self.lt.qd if self.lt is not None else None

    def report_into(self, stats: Any) -> None:
        if self.lt is not None:
            stats.latency_target = self.lt.report()
            stats.ended = stats.ended or self.lt.done
        if self.ss is not None:
            stats.steadystate = self.ss.report()
            stats.ended = stats.ended or self.ss.attained


def sleep_wall(until_ns: int) -> None:
    """Sleep on the wall clock (perf_counter_ns) until ``until_ns``."""
    while True:
        left = until_ns - time.perf_counter_ns()
        if left <= 0:
            return
        time.sleep(min(left / 1e9, 0.1))


__all__ = ["FlowCell", "FlowTable", "LatencyTarget", "Monitor", "Pacer", "RateTooLow", "SteadyState", "sleep_wall"]
