"""The logger protocol: the sessions timed call by call, each long call attributed, and the run's figures."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ...fs.base import FileSystem
from ...records import Row, make_row
from ...runner import Context, RowTimer
from .attribution import CAUSES, Probe, attribute
from .config import KIB, OP_NAMES, ROTATE, SYNC, WRITE, LoggerConfig, config_of
from .figures import (HIST_EDGES_MS, buffer_distribution, coverage, figure_rows, histogram, percentiles_ms,
                      sync_timeline, timeline)
from .session import MAX_STALLS_LISTED, Op, Schedule, Session, Stalls, pattern_of, replay, write_log
from .wear import WearMeter


class Writer:
    """Runs the sessions: the producer's schedule, the timed calls, the counters around them."""

    def __init__(self, cfg: LoggerConfig, ctx: Context, fs: FileSystem, seed: int) -> None:
        self.cfg, self.fs, self.seed = cfg, fs, seed
        self.clock = ctx.clock
        self.virtual = self.clock.simulated and hasattr(self.clock, "advance_ns")
        self.probe = Probe(self.clock, fs)
        self.wear = WearMeter(self.probe.fs_dev)
        devs = self.probe.devices
        r = cfg.record_bytes
        self.rows: dict[int, RowTimer] = {
            WRITE: ctx.row("logger write", "write", r, devs),
            SYNC: ctx.row("logger sync", "sync", 0, devs),
            ROTATE: ctx.row("logger rotate", "rotate", 0, devs),
        }
        self.stalls = Stalls(cfg.period_ns)
        self.pattern = pattern_of(cfg, seed)
        self.sessions: list[Session] = []
        self.lat: dict[int, list[int]] = {WRITE: [], SYNC: [], ROTATE: []}

    def _call(self, s: Session, t0: list[int]) -> Callable[[int, Callable[[], Any], int, int], None]:
        def call(kind: int, fn: Callable[[], Any], written: int, offset: int) -> None:
            probe = self.probe
            m = probe.mark()
            start = self.clock.now_ns()
            rt = self.rows[kind]
            rt.time(fn)
            dur = rt.samples_ns[-1]
            s.ops.append(Op(kind, start - t0[0], dur, written, offset))
            self.lat[kind].append(dur)
            longest = dur > self.stalls.longest_ns
            if dur > self.stalls.threshold or longest:
                detail = self._detail(s, kind, probe.delta(m), dur, start - t0[0], written, offset)
                if dur > self.stalls.threshold:
                    self.stalls.note(detail, dur)
                if longest:
                    self.stalls.longest, self.stalls.longest_ns = detail, dur
        return call

    def _detail(self, s: Session, kind: int, d: dict[str, Any], dur: int, at_ns: int, written: int,
                offset: int) -> dict[str, Any]:
        probe = self.probe
        cause, shares = attribute(d, dur, op=kind, offset=offset, nbytes=self.cfg.record_bytes,
                                  fs_kind=probe.fs_kind, profile=probe.profile)
        detail = {"op": OP_NAMES[kind], "session": s.index, "at_s": round(at_ns / 1e9, 6),
                  "record": written - (1 if kind == WRITE else 0), "ms": dur / 1e6, "cause": cause,
                  "shares_ms": {c: round(v / 1e6, 6) for c, v in shares.items() if v > 0},
                  "breakdown_ms": {c: v / 1e6 for c, v in sorted(d["breakdown_ns"].items())},
                  "commands": dict(sorted(d["commands"].items())), "fs_ops": _ops(d["fs_ops"]),
                  "device_ops": _ops(d["device_ops"])}
        if "card" in d:
            detail["card"] = {"pauses": d["card"]["pauses"], "pause_ms": d["card"]["pause_ns"] / 1e6,
                              "merges": d["card"]["merges"]}
        return detail

    def session(self, index: int) -> Session:
        cfg, fs = self.cfg, self.fs
        s = Session(index, cfg, Schedule(cfg, self.seed, index))
        self.sessions.append(s)
        card = self.probe.card
        t0 = [0]
        card0: list[tuple[int, int, int]] = []

        def start(t: int) -> None:
            t0[0] = t
            self.wear.start()
            if card is not None:  # what the card does during the log (the set-up's pauses and merges are not)
                card0.append((card.pauses, card.pause_ns_total, card.merges))

        def end() -> None:
            self.wear.stop(cfg.records * cfg.record_bytes)
            if card is not None and card0:
                c0 = card0[0]
                s.card = {"pauses": card.pauses - c0[0], "pause_ms": (card.pause_ns_total - c0[1]) / 1e6,
                          "merges": card.merges - c0[2]}

        try:
            s.end_ns, s.files = write_log(cfg, fs, self.clock, s.schedule, self.pattern, self._call(s, t0),
                                          fresh=cfg.part != "dir", on_start=start, on_end=end)
        finally:
            if cfg.part == "dir":
                for name in cfg.file_names(cfg.files_per_session()):
                    if fs.exists(name):
                        fs.remove(name)
            fs.unmount()
        return s


def _ops(d: dict[str, int]) -> dict[str, int]:
    return {k: d[k] for k in ("reads", "writes", "erases", "trims", "syncs") if d.get(k)}


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = config_of(sc)
    fs = built.target.make_fs(cfg.part)
    w = Writer(cfg, ctx, fs, sc.seed)
    for i in range(cfg.runs):
        w.session(i)
    yield from _finish(cfg, w, built)


def _finish(cfg: LoggerConfig, w: Writer, built: Any) -> Iterator[Row]:
    r = cfg.record_bytes
    for kind in (WRITE, SYNC, ROTATE):
        if w.rows[kind].samples_ns:
            yield w.rows[kind].finish()
    total = [s.end_ns for s in w.sessions]
    nbytes = cfg.records * r
    yield make_row("logger run", "write", nbytes, total, unit="KiB/s",
                   value_fn=lambda row: (nbytes / KIB) / (row.time_ms / 1000.0) if row.time_ms > 0 else 0.0)
    meta = _metadata(cfg, w)
    profile = w.probe.card.p if w.probe.card is not None else None
    meta["coverage"], short = coverage(meta, profile, cfg.rate_hz * r)
    built.metadata["logger"] = meta
    yield from figure_rows(meta)
    buf = meta["buffer"]
    if buf["records_lost"]:
        built.warnings.append(f"logger: {buf['records_lost']} of {meta['records']} records lost with buffer_bytes = "
                              f"{cfg.buffer_bytes} B ({buf['capacity_records']} records); a buffer of "
                              f"{buf['needed_bytes']} B loses none")
    built.warnings.extend(short)
    if not w.virtual:
        built.warnings.append("logger: the wall clock has no time breakdown; stall causes are 'other'")


def _metadata(cfg: LoggerConfig, w: Writer) -> dict[str, Any]:
    r = cfg.record_bytes
    cap = cfg.buffer_bytes // r
    needed, needed_at, session_of = 0, 0, 0
    lost, first_lost = 0, None
    per_session = []
    for s in w.sessions:
        most, when = s.backlog()
        if most > needed:
            needed, needed_at, session_of = most, when, s.index
        got = replay([(op.kind, op.dur_ns) for op in s.ops], s.n, s.t, cap)
        lost += got["records_lost"]
        if got["first_lost_ns"] is not None and first_lost is None:
            first_lost = (s.index, got["first_lost_ns"] / 1e9)
        per_session.append({"session": s.index, "buffer_needed_bytes": most * r, "records_lost": got["records_lost"],
                            "duration_s": s.end_ns / 1e9, "writer_busy_pct": 100.0 * s.busy_ns() / max(s.end_ns, 1),
                            "files": s.files, **({"card": s.card} if s.card else {})})
    records = cfg.records * len(w.sessions)
    stalls = w.stalls
    stalls.trim()
    busy = sum(s.busy_ns() for s in w.sessions)
    log_ns = sum(s.end_ns for s in w.sessions)
    all_calls = [op.dur_ns for s in w.sessions for op in s.ops]
    meta: dict[str, Any] = {
        "part": cfg.part, "filesystem": w.probe.fs_kind, "clock": w.clock.kind, "record_bytes": r,
        "rate_hz": cfg.rate_hz, "duration_s": cfg.duration_s, "records": records, "sessions": len(w.sessions),
        "sync": {"every_records": cfg.sync_every_records, "every_ms": cfg.sync_every_ms,
                 "count": len(w.lat[SYNC])},
        "files": sum(s.files for s in w.sessions), "bytes_written": records * r,
        "writer_busy_pct": 100.0 * busy / max(log_ns, 1),
        # records the writer could write per second of its busy time, over the rate they come at
        "throughput_margin_x": records / (busy / 1e9) / cfg.rate_hz if busy else 0.0,
        "lag_s": max(0.0, max((s.end_ns for s in w.sessions), default=0) / 1e9 - cfg.duration_s),
        "write_latency_ms": percentiles_ms(w.lat[WRITE]), "sync_latency_ms": percentiles_ms(w.lat[SYNC]),
        "call_latency_ms": percentiles_ms(all_calls),
        "buffer": {"needed_bytes": needed * r, "needed_records": needed, "needed_at_s": needed_at / 1e9,
                   "needed_in_session": session_of, "buffer_bytes": cfg.buffer_bytes, "capacity_records": cap,
                   "records_lost": lost, "lost_pct": 100.0 * lost / max(records, 1),
                   **({"first_lost": {"session": first_lost[0], "at_s": first_lost[1]}} if first_lost else {}),
                   "distribution": buffer_distribution(w.sessions, r)},
        "longest_stall": stalls.longest,
        "stalls": {"threshold_ms": cfg.period_ns / 1e6, "count": sum(int(c["count"]) for c in
                                                                        stalls.by_cause.values()),
                   "by_cause": {c: stalls.by_cause[c] for c in CAUSES if c in stalls.by_cause},
                   "longest": stalls.listed[:MAX_STALLS_LISTED]},
        "histogram": {"edges_ms": list(HIST_EDGES_MS), "write": histogram(w.lat[WRITE]),
                      "sync": histogram(w.lat[SYNC]), **({"rotate": histogram(w.lat[ROTATE])}
                                                          if w.lat[ROTATE] else {})},
        "sessions_detail": per_session,
        "timeline": timeline(w.sessions),
        "sync_timeline": sync_timeline(w.sessions),
    }
    if w.lat[ROTATE]:
        meta["rotate_latency_ms"] = percentiles_ms(w.lat[ROTATE])
    if cfg.keep_files:
        meta["keep_files"] = cfg.keep_files
    wear = w.wear.summary(log_ns / 1e9)
    if wear:
        meta["wear"] = wear
    return meta


def summary_lines(rec: Any) -> list[tuple[str, str]]:
    """What a logger user asks first: the buffer that loses nothing, records lost, the longest stall and why."""
    m = rec.metadata.get("logger") or {}
    buf, stall = m.get("buffer") or {}, m.get("longest_stall") or {}
    out = []
    if buf:
        out.append(("RAM buffer that loses no record", f"{buf.get('needed_bytes', 0):,} B "
                                                       f"({buf.get('needed_records', 0):,} records)"))
        if buf.get("buffer_bytes"):
            out.append((f"records lost with a {buf['buffer_bytes']:,} B buffer", f"{buf.get('records_lost', 0):,}"))
    if stall:
        out.append(("longest stall", f"{stall.get('ms', 0):.1f} ms ({stall.get('op', '?')} at "
                                     f"{stall.get('at_s', 0):.2f} s): {stall.get('cause', 'other')}"))
    for name in ("write_latency_ms", "sync_latency_ms"):
        lat = m.get(name)
        if lat:
            out.append((name.split("_")[0] + " p50 / p99 / p99.9 / max",
                        f"{lat['p50_ms']:.3f} / {lat['p99_ms']:.3f} / {lat['p99_9_ms']:.3f} / {lat['max_ms']:.3f} ms"))
    if "writer_busy_pct" in m:
        out.append(("writer busy (keeps up below 100 %)", f"{m['writer_busy_pct']:.1f} %"))
    wear = m.get("wear") or {}
    if wear.get("logged_bytes"):
        out.append((f"{'NAND' if wear['medium'] == 'sd card' else 'NOR'} bytes programmed per byte logged",
                    f"{wear['write_amplification']:.2f}"))
    cov = m.get("coverage") or {}
    if cov.get("au_bytes"):
        out.append(("allocation units the log filled (per session)", f"{cov['aus_filled']:.2f} of "
                                                                      f"{cov['au_bytes']:,} B"))
    return out
