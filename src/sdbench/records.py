"""Immutable result records (format documented in docs/results-format.md).

A :class:`Results` holds one or more :class:`RunRecord`; a run holds one
:class:`Row` per measurement.  Units are in the field names.  Rows carry their
per-call samples so later comparisons can test significance.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from . import RESULTS_FORMAT_VERSION, __version__
from .errors import SdbenchError

MIB = 1024 * 1024


@dataclass(frozen=True)
class Row:
    label: str
    op: str                       # read, write, mount, open, ...
    bytes: int                    # bytes moved per timed call
    runs: int
    samples_ms: tuple[float, ...]  # one per timed call
    time_ms: float                # mean per timed call
    time_ms_median: float | None  # None when a source printed only the mean (imported logs)
    time_ms_min: float | None
    time_ms_max: float | None
    time_ms_stdev: float | None
    mib_s: float                  # bytes / mean time, MiB/s (0 when bytes == 0)
    counters: dict[str, int] = field(default_factory=dict)       # block-op counters over the timed calls
    breakdown_ms: dict[str, float] = field(default_factory=dict)  # simulated time by category, per call
    commands: dict[str, float] = field(default_factory=dict)      # bus commands per call, by type
    reported_bytes: int | None = None  # size a protocol prints (ESP-IDF's SD raw rows), if not `bytes`
    unit: str = "ms"              # figure a protocol reports: ms, us, KiB/s, KB/s (10^3), MB/s (10^6), MiB/s, IOPS
    value: float | None = None    # that figure (None: time_ms)

    @property
    def kib_s(self) -> float:
        return self.mib_s * 1024.0

    @property
    def reported_value(self) -> float:
        return self.time_ms if self.value is None else self.value

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_ms"] = list(self.samples_ms)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Row":
        d = dict(d)
        d["samples_ms"] = tuple(d.get("samples_ms", ()))
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


def make_row(label: str, op: str, nbytes: int, samples_ns: list[int], *, counters: dict[str, int] | None = None,
             breakdown_ns: dict[str, int] | None = None, commands: dict[str, int] | None = None,
             reported_bytes: int | None = None, unit: str = "ms", value_fn=None) -> Row:
    """Build a row from per-call samples in nanoseconds."""
    if not samples_ns:
        raise ValueError(f"row {label!r} has no samples")
    ms = [s / 1e6 for s in samples_ns]
    n = len(ms)
    mean = math.fsum(ms) / n
    stdev = statistics.stdev(ms) if n > 1 else 0.0
    mib_s = (nbytes / MIB) / (mean / 1000.0) if nbytes and mean > 0 else 0.0
    per_call = lambda d: {k: v / 1e6 / n for k, v in sorted(d.items())} if d else {}  # noqa: E731
    row = Row(
        label=label, op=op, bytes=nbytes, runs=n, samples_ms=tuple(ms), time_ms=mean,
        time_ms_median=statistics.median(ms), time_ms_min=min(ms), time_ms_max=max(ms), time_ms_stdev=stdev,
        mib_s=mib_s, counters=dict(sorted((counters or {}).items())), breakdown_ms=per_call(breakdown_ns or {}),
        commands={k: v / n for k, v in sorted((commands or {}).items())}, reported_bytes=reported_bytes, unit=unit,
    )
    if value_fn is not None:
        row = Row(**{**row.__dict__, "value": value_fn(row)})
    return row


@dataclass(frozen=True)
class RunRecord:
    scenario: str
    stack: dict[str, Any]
    clock: str                    # "wall" or "virtual"
    rows: tuple[Row, ...]
    seed: int | None = None
    protocol: str = ""
    source: str = "measured"      # measured, simulated, imported
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def row(self, label: str) -> Row:
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "protocol": self.protocol, "source": self.source, "clock": self.clock,
            "seed": self.seed, "stack": self.stack, "metadata": self.metadata, "warnings": list(self.warnings),
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunRecord":
        return cls(
            scenario=d["scenario"], stack=d.get("stack", {}), clock=d["clock"],
            rows=tuple(Row.from_dict(r) for r in d["rows"]), seed=d.get("seed"), protocol=d.get("protocol", ""),
            source=d.get("source", "measured"), metadata=d.get("metadata", {}),
            warnings=tuple(d.get("warnings", ())),
        )


@dataclass(frozen=True)
class Results:
    runs: tuple[RunRecord, ...]
    sdbench_version: str = __version__
    format_version: int = RESULTS_FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {"sdbench_version": self.sdbench_version, "format_version": self.format_version,
                "runs": [r.to_dict() for r in self.runs]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Results":
        try:
            fv = int(d.get("format_version", 1))
            if fv > RESULTS_FORMAT_VERSION:
                raise SdbenchError(f"results format version {fv} is newer than this sdbench understands")
            return cls(runs=tuple(RunRecord.from_dict(r) for r in d["runs"]),
                       sdbench_version=d.get("sdbench_version", "?"), format_version=fv)
        except (KeyError, TypeError) as e:
            raise SdbenchError(f"not an sdbench results document (missing or bad field: {e})") from None

    @classmethod
    def from_json(cls, text: str) -> "Results":
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise SdbenchError(f"not valid JSON: {e}") from None
