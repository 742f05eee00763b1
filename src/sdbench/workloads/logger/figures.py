"""The logger's figures: latency percentiles and histograms, timelines, the buffer's distribution, whether the log
was long enough to see what the card does, and the figure rows every results view shows."""
from __future__ import annotations

import bisect
import math
from typing import Any

from ...compare import FIGURE_OP
from ...records import Row
from .config import SYNC, WRITE
from .session import Session

#: upper edges of the latency histogram's buckets, ms (the last bucket is everything above)
HIST_EDGES_MS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
#: most points of a timeline in the metadata
TIMELINE_POINTS = 2000
#: fewest allocation units a log should fill: the card merges an update block when the log moves into the next
#: AU, and the longest stalls (and the buffer they need) come from those merges
MIN_AUS = 1.0
#: fewest background pauses a log should see when the card pauses (pause_probability > 0)
MIN_PAUSES = 3


def percentiles_ms(samples_ns: list[int]) -> dict[str, float]:
    """p50, p99, p99.9 (nearest rank), max and mean of samples in ns, as ms."""
    if not samples_ns:
        return {}
    xs = sorted(samples_ns)
    n = len(xs)

    def rank(p: float) -> float:
        return xs[max(0, math.ceil(p / 100.0 * n) - 1)] / 1e6

    return {"p50_ms": rank(50), "p99_ms": rank(99), "p99_9_ms": rank(99.9), "max_ms": xs[-1] / 1e6,
            "mean_ms": sum(xs) / n / 1e6, "count": n}


def nearest_rank(xs: list[int], p: float) -> int:
    """The ``p``-th percentile of sorted ``xs`` by nearest rank (0 for none)."""
    return xs[max(0, math.ceil(p / 100.0 * len(xs)) - 1)] if xs else 0


def histogram(samples_ns: list[int]) -> list[int]:
    """Counts per bucket of HIST_EDGES_MS (the last bucket: above the last edge)."""
    counts = [0] * (len(HIST_EDGES_MS) + 1)
    edges = [e * 1e6 for e in HIST_EDGES_MS]
    for v in samples_ns:
        counts[bisect.bisect_left(edges, v)] += 1
    return counts


def buffer_distribution(sessions: list[Session], record_bytes: int) -> dict[str, Any]:
    """The RAM the backlog takes just before each write() returns, over all sessions: p50, p99, p99.9 and max
    (bytes, nearest rank), and a histogram over powers of two of records held (``edges_records``: upper edges)."""
    held = sorted(h for s in sessions for (h, _), op in zip(s.held(), s.ops) if op.kind == WRITE)
    if not held:
        return {}
    edges = [1 << i for i in range(max(1, held[-1].bit_length()) + 1)]
    counts = [0] * len(edges)
    for h in held:
        counts[bisect.bisect_left(edges, h)] += 1
    while len(counts) > 1 and counts[-1] == 0:
        counts.pop()
        edges.pop()
    return {"p50_bytes": nearest_rank(held, 50) * record_bytes, "p99_bytes": nearest_rank(held, 99) * record_bytes,
            "p99_9_bytes": nearest_rank(held, 99.9) * record_bytes, "max_bytes": held[-1] * record_bytes,
            "edges_records": edges, "counts": counts}


def timeline(sessions: list[Session]) -> dict[str, Any]:
    """Per record (the worst of each group when there are more than TIMELINE_POINTS): when it was produced
    (s after its session's start), its write() latency, its age once written, the records held."""
    rows: list[tuple[int, float, float, float, int]] = []
    for s in sessions:
        for (held, end), op in zip(s.held(), s.ops):
            if op.kind == WRITE:
                k = op.written - 1
                rows.append((s.index, s.t(k) / 1e9, op.dur_ns / 1e6, (end - s.t(k)) / 1e6, held))
    group = max(1, -(-len(rows) // TIMELINE_POINTS))
    out: dict[str, list[Any]] = {"session": [], "t_s": [], "write_ms": [], "age_ms": [], "held_records": []}
    for i in range(0, len(rows), group):
        chunk = rows[i:i + group]
        out["session"].append(chunk[0][0])
        out["t_s"].append(round(chunk[0][1], 6))
        out["write_ms"].append(round(max(c[2] for c in chunk), 6))
        out["age_ms"].append(round(max(c[3] for c in chunk), 6))
        out["held_records"].append(max(c[4] for c in chunk))
    return {"records_per_point": group, **out}


def sync_timeline(sessions: list[Session]) -> dict[str, Any]:
    pts = [(s.index, op.start_ns / 1e9, op.dur_ns / 1e6) for s in sessions for op in s.ops if op.kind == SYNC]
    group = max(1, -(-len(pts) // TIMELINE_POINTS))
    out: dict[str, list[Any]] = {"session": [], "t_s": [], "sync_ms": []}
    for i in range(0, len(pts), group):
        chunk = pts[i:i + group]
        out["session"].append(chunk[0][0])
        out["t_s"].append(round(chunk[0][1], 6))
        out["sync_ms"].append(round(max(c[2] for c in chunk), 6))
    return {"syncs_per_point": group, **out}


def coverage(meta: dict[str, Any], card_profile: Any, rate_bytes_s: float) -> tuple[dict[str, Any], list[str]]:
    """Did the log see what the card does?  On a simulated SD card: how many allocation units one session's log
    filled (fewer than :data:`MIN_AUS`: it may have seen no merge) and, when the card pauses in the background,
    how many pauses it saw.  Returns the metadata and the warnings (empty when long enough or not an SD card)."""
    if card_profile is None:
        return {}, []
    au = int(card_profile.au_bytes)
    per_session = meta["bytes_written"] / max(meta["sessions"], 1)
    filled = per_session / au
    need_s = MIN_AUS * au / rate_bytes_s if rate_bytes_s > 0 else 0.0
    out: dict[str, Any] = {"au_bytes": au, "aus_filled": filled, "seconds_per_au": au / rate_bytes_s
                           if rate_bytes_s > 0 else None}
    warnings = []
    if filled < MIN_AUS:
        warnings.append(f"logger: the log (per session) fills {filled:.2f} of one allocation unit ({au} B, one "
                        f"every {au / rate_bytes_s:.0f} s at {rate_bytes_s / 1000:.3g} kB/s): the card may "
                        f"merge no update block in it, so the buffer and stall figures can miss its longest "
                        f"stalls; log at least {need_s:.0f} s (logger.duration_s), or use `sdbench logger`, "
                        f"which picks the length")
    p = float(card_profile.pause_probability)
    if p > 0:
        seen = sum(s.get("card", {}).get("pauses", 0) for s in meta.get("sessions_detail", []))
        out.update(pause_probability=p, pauses_seen=seen)
        if seen < MIN_PAUSES:
            warnings.append(f"logger: the log saw {seen} of the card's background pauses (chance {p:g} per write "
                            f"command); fewer than {MIN_PAUSES}, so the stall figures may miss them: log longer")
    out["short"] = bool(warnings)
    return out, warnings


def _figure(label: str, unit: str, value: float, *, time: bool = False, op: str = FIGURE_OP) -> Row:
    """A row that holds one figure of the run: a time (``time_ms`` = the figure) or another quantity (``time_ms``
    0, the figure in ``value``); no per-call samples."""
    t = float(value) if time else 0.0
    return Row(label=label, op=op, bytes=0, runs=1, samples_ms=(), time_ms=t, time_ms_median=None,
               time_ms_min=None, time_ms_max=None, time_ms_stdev=None, mib_s=0.0, unit=unit,
               value=float(value))


def figure_rows(meta: dict[str, Any]) -> list[Row]:
    """The logger's answers as rows, so that sweeps, show, compare, export, the store and the HTML report carry
    them with their units: the buffer that loses no record, records lost with the buffer given, the longest
    call, write() p99 and p99.9, the writer's busy share, and the medium's bytes programmed per byte logged."""
    buf = meta["buffer"]
    out = [_figure("logger buffer needed", "B", buf["needed_bytes"]),
           _figure("logger records lost", "records", buf["records_lost"])]
    if meta.get("longest_stall"):
        out.append(_figure("logger longest stall", "ms", meta["longest_stall"]["ms"], time=True, op="write"))
    lat = meta.get("write_latency_ms") or {}
    if lat:
        out.append(_figure("logger write p99", "ms", lat["p99_ms"], time=True, op="write"))
        out.append(_figure("logger write p99.9", "ms", lat["p99_9_ms"], time=True, op="write"))
    out.append(_figure("logger writer busy", "%", meta["writer_busy_pct"]))
    wear = meta.get("wear") or {}
    if wear.get("logged_bytes"):
        out.append(_figure("logger write amplification", "B/B", wear["write_amplification"]))
    return out
