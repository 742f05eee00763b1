"""Jobs side by side, as fio runs them: clones, stonewalls, wait_for, start delays, exitall.

fio starts every job of a job file at once; ``stonewall`` makes a job (and
those after it) wait until every job before it has ended, ``wait_for`` waits
for one named job, ``startdelay`` delays a start, and ``numjobs`` clones a
job.  Each job (each clone) runs in a process of its own (:func:`os.fork`),
with its CPU, NUMA and priority settings applied there, and sends what it
measured back through a pipe; the jobs' stop flags and flow counters are
shared memory.  Before any job starts, every job's region, files and
settings are checked, so bad input is refused in one line with nothing done.

On a generic block device (a simulated card on its virtual clock, a memory
device) requests are served one at a time, so jobs that fio would run side by
side run one after another there, and the run says so.

Reporting groups (fio's ``groupid``): a ``stonewall`` or ``new_group`` starts a
new one; with ``group_reporting`` a group's jobs become one row per direction.
"""
from __future__ import annotations

import os
import pickle
import random
import select
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import ConfigError, RunFailedError, SdbenchError
from ...fs.hostdir import DirTarget
from ...media.linux import LinuxBlockDevice
from ...options import to_mapping
from ...records import Row, RunRecord
from .blockport import clock_fields
from .engine import JobContext, die_with_parent, preflight, run_job
from .ioengine import Control
from .jobs import JobConfig
from .pacing import FlowCell, FlowTable
from .procsetup import apply_process_settings, check_process_settings, needs_process
from .results import JobResult, job_rows
from .stats import JobStats
from .target import ProgressFn, Target

_MSG = struct.Struct("<I")


class StopRequest:
    """An early end asked for from outside (``sdbench fio``'s first Ctrl-C): the running jobs stop as their time
    limit would stop them and the rest do not start, so what was measured so far is reported, as fio does."""

    def __init__(self) -> None:
        self.requested = False
        #: the jobs have begun (set-up and checks are over): before that an early end is a plain interruption
        self.started = False
        self._controls: list[Control] = []

    def watch(self, control: Control) -> Control:
        """A job's stop flag, stopped with the others (at once when the end was already asked for)."""
        self._controls.append(control)
        if self.requested:
            control.stop()
        return control

    def stop(self) -> None:
        self.requested = True
        for c in self._controls:
            c.stop()


@dataclass
class Entry:
    """One job of the run, or one clone of it: where it stands in the run and what came of it."""
    job: JobConfig
    clone: int
    index: int        # in the run, from 0 (fio's job number - 1)
    phase: int        # jobs of one phase start together
    group: int        # reporting group
    label: str        # row label prefix: the job's name, with .clone when numjobs > 1
    result: JobResult | None = None
    error: str = ""
    control: Control | None = None
    flow: FlowCell | None = None    # its cell of the run's flow table
    pid: int = 0
    rfd: int = -1
    buf: bytearray = field(default_factory=bytearray)
    fraction: float = 0.0
    done: bool = False
    internal: bool = False   # the job failed on a bug in sdbench, not on its input or the device
    is_ready: bool = False   # set up, waiting for the others it starts with
    released: bool = False
    alone: bool = False      # starts on its own (a start delay): no waiting for others
    batch: list["Entry"] = field(default_factory=list)


@dataclass
class FioOutcome:
    """A finished run: its record and every job's (and group's) measurements, for fio's outputs."""
    record: RunRecord
    entries: list[Entry]
    groups: dict[int, JobStats]


def expand(jobs: Sequence[JobConfig]) -> list[Entry]:
    """Clones of every job, with their phases and reporting groups."""
    out: list[Entry] = []
    phase = group = 0
    for i, job in enumerate(jobs):
        if i and job.stonewall:
            phase += 1
            group += 1
        elif i and job.new_group:
            group += 1
        base = job.name
        for c in range(job.numjobs):
            label = base if job.numjobs == 1 else f"{base}.{c}"
            out.append(Entry(job, c, len(out), phase, group, label))
    if len(out) > 1024:
        raise ConfigError(f"{len(out)} jobs with their clones: at most 1024")
    return out


def _concurrent(target: Target) -> bool:
    return isinstance(target, (LinuxBlockDevice, DirTarget)) and hasattr(os, "fork")


def run_fio(target: Target, jobs: Sequence[JobConfig], *, scenario: str = "fio", progress: ProgressFn | None = None,
            before_verify: Callable[[], None] | None = None, identity: dict[str, Any] | None = None,
            keep_logs: bool = False, extra_meta: dict[str, Any] | None = None,
            stop: StopRequest | None = None) -> FioOutcome:
    """Run the jobs (side by side unless stonewalled) and gather what they measured; ``stop``: an early end
    asked for from outside, after which the record says how the run ended."""
    entries = expand(jobs)
    warnings: list[str] = list(getattr(target, "warnings", []))
    concurrent = _concurrent(target)
    for e in entries:
        check_process_settings(e.job, concurrent)
        preflight(target, e.job, e.clone)
    flow = FlowTable() if any(e.job.flow for e in entries) else None
    if flow is not None:
        for e in entries:
            if e.job.flow:
                e.flow = flow.join(e.job.flow_id, e.job.flow)
    run_seed = random.SystemRandom().getrandbits(62)
    phases: dict[int, int] = {}
    for e in entries:
        phases[e.phase] = phases.get(e.phase, 0) + 1
    fork = concurrent and (max(phases.values(), default=0) > 1
                           or any(needs_process(e.job) or e.job.startdelay_s for e in entries))
    if not concurrent:
        _note_serial(entries, target, warnings)
    start_ns = time.perf_counter_ns()
    if stop is not None:
        stop.started = True
    if fork:
        _run_forked(target, entries, run_seed, progress, before_verify, keep_logs, stop)
    else:
        for e in entries:
            if stop is not None and stop.requested:
                break
            ctx = JobContext(e.clone, stop.watch(Control()) if stop is not None else None, e.flow, run_seed,
                             keep_logs)
            if e.job.startdelay_s:
                _delay(e, target, run_seed)
            try:
                e.result = run_job(target, e.job, progress=_relabel(progress, e) if progress else None,
                                   before_verify=before_verify, ctx=ctx)
            except SdbenchError as err:
                if e.index == 0 and not any(x.result for x in entries):
                    raise  # nothing ran yet: as refused (a failed first I/O is still this job's failure)
                e.error = str(err)
                if e.job.exitall_on_error:
                    break
            e.done = True
    if stop is not None and stop.requested:
        if not any(e.result for e in entries):
            raise KeyboardInterrupt  # stopped before any job measured anything: nothing to report
        left = sum(1 for e in entries if e.result is None and not e.error)
        warnings.append("stopped early from outside (Ctrl-C): each job's figures cover the time it ran"
                        + (f"; {left} job{'s' if left > 1 else ''} did not start" if left else ""))
    rec, groups = _record(target, entries, scenario, warnings, identity, start_ns, extra_meta)
    return FioOutcome(rec, entries, groups)


def run_jobs(target: Target, jobs: Sequence[JobConfig], *, scenario: str = "fio", progress: ProgressFn | None = None,
             before_verify: Callable[[], None] | None = None, identity: dict[str, Any] | None = None) -> RunRecord:
    """The jobs into one RunRecord; a job that failed part-way fails the run (RunFailedError) unless it was the
    first and nothing ran."""
    out = run_fio(target, jobs, scenario=scenario, progress=progress, before_verify=before_verify,
                  identity=identity)
    failed = [e for e in out.entries if e.error]
    raise_internal(out)
    if failed and not any(e.result for e in out.entries):
        raise SdbenchError(failed[0].error)
    if failed:
        raise RunFailedError(failed[0].error)
    return out.record


def raise_internal(out: FioOutcome) -> None:
    """A job that failed on a bug in sdbench fails the command as one (exit 3), not as the user's input."""
    for e in out.entries:
        if e.internal:
            raise RuntimeError(e.error)


def _note_serial(entries: list[Entry], target: Target, warnings: list[str]) -> None:
    phases: dict[int, list[Entry]] = {}
    for e in entries:
        phases.setdefault(e.phase, []).append(e)
    for group in phases.values():
        if len(group) > 1:
            names = ", ".join(dict.fromkeys(e.label for e in group))
            kind = getattr(target, "kind", type(target).__name__)
            warnings.append(f"jobs {names} would run side by side; on {kind} requests are served one at a "
                            f"time, so they run one after another")
        for e in group:
            if needs_process(e.job):
                warnings.append(f"job {e.job.name}: CPU, NUMA and priority settings have no effect on {kind}")
                break


def _relabel(progress: ProgressFn, e: Entry) -> ProgressFn:
    return lambda label, frac: progress(label if label != e.job.name else e.label, frac)


def _delay(e: Entry, target: Any, run_seed: int) -> None:
    job = e.job
    delay = job.startdelay_s
    if job.startdelay_max_s:
        delay = random.Random(run_seed + e.index).uniform(job.startdelay_s, job.startdelay_max_s)
    clock = getattr(target, "clock", None)
    if clock is not None and clock.simulated:
        clock.advance_ns(delay * 1e9, "other")
    else:
        time.sleep(delay)


# ---- side by side -------------------------------------------------------------------------------------------
def _send(fd: int, msg: tuple[Any, ...]) -> None:
    data = pickle.dumps(msg)
    view = memoryview(_MSG.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _child(target: Target, e: Entry, wfd: int, run_seed: int,
           before_verify: Callable[[], None] | None, keep_logs: bool) -> None:
    code = 0
    try:
        die_with_parent()
        apply_process_settings(e.job, e.index)
        last = [0.0]

        def progress(label: str, frac: float) -> None:
            now = time.monotonic()
            if now - last[0] >= 0.2 or frac >= 1.0:
                last[0] = now
                _send(wfd, ("p", frac))
        if e.job.startdelay_s:
            _delay(e, target, run_seed)
        control = e.control
        assert control is not None

        def ready() -> None:
            _send(wfd, ("s",))
            control.wait_go()
        if control.stopped:
            _send(wfd, ("r", None))
        else:
            res = run_job(target, e.job, progress=progress, before_verify=before_verify,
                          ctx=JobContext(e.clone, control, e.flow, run_seed, keep_logs, ready))
            _send(wfd, ("r", res))
    except SdbenchError as err:
        _send(wfd, ("e", str(err)))
    except KeyboardInterrupt:
        code = 130
    except BaseException as err:  # noqa: BLE001 - a bug: the parent reports it
        try:
            _send(wfd, ("x", f"{type(err).__name__}: {err}"))
        except BaseException:  # noqa: BLE001
            code = 3
    finally:
        os._exit(code)


def _run_forked(target: Target, entries: list[Entry], run_seed: int, progress: ProgressFn | None,
                before_verify: Callable[[], None] | None, keep_logs: bool, stop: StopRequest | None) -> None:
    pending = list(entries)
    running: list[Entry] = []
    finished_names: dict[str, int] = {}
    total_clones: dict[str, int] = {}
    for e in entries:
        total_clones[e.job.name] = total_clones.get(e.job.name, 0) + 1
        e.control = stop.watch(Control()) if stop is not None else Control()
    phase = 0
    cancel = False
    try:
        while pending or running:
            if stop is not None and stop.requested:
                cancel = True  # nothing more starts; the running jobs' flags are set
            # start what may start: the current phase's jobs whose wait_for has ended; those started together
            # (without a start delay) begin their I/O together, once all are set up
            if not cancel:
                batch = []
                for e in list(pending):
                    if e.phase != phase:
                        continue
                    w = e.job.wait_for
                    if w and finished_names.get(w, 0) < total_clones.get(w, 0):
                        continue
                    pending.remove(e)
                    _start(target, e, run_seed, before_verify, keep_logs)
                    running.append(e)
                    if e.job.startdelay_s:
                        e.alone = True
                    else:
                        batch.append(e)
                for e in batch:
                    e.batch = batch
            if not running:
                if cancel or not pending:
                    break
                phase = min(e.phase for e in pending)
                continue
            fds = {e.rfd: e for e in running}
            ready, _, _ = select.select(list(fds), [], [], 0.1)
            for fd in ready:
                e = fds[fd]
                _read(e)
                if e.done:
                    running.remove(e)
                    os.close(e.rfd)
                    os.waitpid(e.pid, 0)
                    finished_names[e.job.name] = finished_names.get(e.job.name, 0) + 1
                    cancel = _exitall(e, running, pending) or cancel
            for x in running:
                _release(x)
            if progress is not None and running:
                frac = (sum(1 for x in entries if x.done) + sum(x.fraction for x in running)) / len(entries)
                names = ", ".join(dict.fromkeys(x.label for x in running))
                progress(names if len(names) <= 28 else f"{len(running)} jobs", frac)
            if not running and pending and not any(x.phase == phase for x in pending):
                phase = min(x.phase for x in pending)
    except BaseException:
        for e in running:
            try:
                os.kill(e.pid, 9)
                os.waitpid(e.pid, 0)
            except OSError:
                pass
        raise


def _release(e: Entry) -> None:
    """Let a set-up job begin: alone at once, in a batch when every job of the batch is set up (or over)."""
    if not e.is_ready or e.released:
        return
    group = e.batch if not e.alone and e.batch else [e]
    if all(x.is_ready or x.done for x in group):
        at = time.perf_counter_ns()
        for x in group:
            if not x.released and x.control is not None:
                x.control.go(at)
                x.released = True


def _start(target: Target, e: Entry, run_seed: int,
           before_verify: Callable[[], None] | None, keep_logs: bool) -> None:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(target, e, wfd, run_seed, before_verify, keep_logs)
    os.close(wfd)
    e.pid, e.rfd = pid, rfd


def _read(e: Entry) -> None:
    try:
        data = os.read(e.rfd, 1 << 20)
    except OSError:
        data = b""
    if not data:
        if not e.done:
            e.done = True
            e.error = e.error or f"job {e.label} ended without a result"
        return
    e.buf += data
    while len(e.buf) >= _MSG.size:
        (n,) = _MSG.unpack_from(e.buf)
        if len(e.buf) < _MSG.size + n:
            break
        msg = pickle.loads(bytes(e.buf[_MSG.size:_MSG.size + n]))
        del e.buf[:_MSG.size + n]
        if msg[0] == "p":
            e.fraction = msg[1]
        elif msg[0] == "s":
            e.is_ready = True
        elif msg[0] == "r":
            e.result, e.done = msg[1], True
        elif msg[0] == "e":
            e.error, e.done = msg[1], True
        else:
            e.error, e.done, e.internal = f"job {e.label}: {msg[1]}", True, True


def _exitall(e: Entry, running: list[Entry], pending: list[Entry]) -> bool:
    """fio's exitall and exitall_on_error when ``e`` has ended: stop the jobs it takes with it; True when nothing
    more may start."""
    job = e.job
    stop_all = bool(e.error and job.exitall_on_error)
    if not (job.exitall or stop_all):
        return False
    what = "all" if stop_all else job.exit_what
    for x in running:
        if what in ("all", "stonewall") or x.group == e.group:
            assert x.control is not None
            x.control.stop()
    if what == "all":
        pending.clear()
        return True
    return False


# ---- the record ---------------------------------------------------------------------------------------------
def _record(target: Target, entries: list[Entry], scenario: str, warnings: list[str],
            identity: dict[str, Any] | None, start_ns: int, extra: dict[str, Any] | None
            ) -> tuple[RunRecord, dict[int, JobStats]]:
    rows: list[Row] = []
    meta_rows: dict[str, Any] = {}
    verify: dict[str, Any] = {}
    groups: dict[int, JobStats] = {}
    reported: dict[int, list[Entry]] = {}
    for e in entries:
        res = e.result
        if res is None:
            continue
        warnings += [w for w in res.warnings if w not in warnings]
        if res.verify is not None:
            verify[e.label] = res.verify
        if res.stats is not None and e.job.stats:
            g = groups.get(e.group)
            if g is None:
                g = groups[e.group] = JobStats(res.stats.start_ns, bw_ms=e.job.bwavgtime_ms,
                                               iops_ms=e.job.iopsavgtime_ms)
                g.measure_from = res.stats.measure_from
            g.merge(res.stats)
        if e.job.stats:  # stats=0: the job runs, fio leaves it out of the report
            reported.setdefault(e.group, []).append(e)
    for gid, members in reported.items():
        grouped = any(m.job.group_reporting for m in members) and len(members) > 1
        if grouped:
            first = members[0]
            assert first.result is not None
            res = replace(first.result, stats=groups.get(gid), loops=[lp for m in members if m.result
                                                                         for lp in m.result.loops])
            r, m = job_rows(res, label=first.job.name)
            for summ in m.values():
                summ["jobs"] = len(members)
                summ["group"] = gid
        else:
            r, m = [], {}
            for x in members:
                assert x.result is not None
                rr, mm = job_rows(x.result, label=x.label)
                r += rr
                m.update(mm)
        for summ_label, summ in m.items():
            src = next((x for x in members if summ_label.startswith(x.label + " ")), members[0])
            if src.result is not None and src.result.ioengine:
                summ["ioengine"] = src.result.ioengine
        for row in r:
            label = row.label
            n = 2
            while label in meta_rows:  # two jobs of one name moving the same way: the second is name#2
                head, _, kind = row.label.rpartition(" ")
                label = f"{head}#{n} {kind}"
                n += 1
            if label != row.label:
                m[label] = m.pop(row.label)
                row = replace(row, label=label)
            rows.append(row)
            meta_rows[label] = m[label]
    for e in entries:
        if e.error:
            warnings.append(f"job {e.label} failed: {e.error}")
    failed = [e for e in entries if e.error]
    meta: dict[str, Any] = {"jobs": [to_mapping(j) for j in dict.fromkeys(e.job for e in entries)],
                            "rows": meta_rows}
    if verify:
        meta["verify"] = verify
    if identity:
        meta["identity"] = identity
    if extra:
        meta.update(extra)
    first_job = entries[0].job if entries else None
    status = {"status": "failed", "status_reason": failed[0].error} if failed and any(e.result for e in entries) \
        else {}
    rec = RunRecord(scenario=scenario, stack=target.describe(), rows=tuple(rows),
                    seed=first_job.seed if first_job else None, protocol="fio", metadata=meta,
                    warnings=tuple(warnings), **clock_fields(target), **status)
    return rec, groups
