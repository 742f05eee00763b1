"""Immutable result records (format documented in docs/results-format.md).

A :class:`Results` holds one or more :class:`RunRecord`; a run holds one
:class:`Row` per measurement.  Units are in the field names.  Rows carry their
per-call samples so later comparisons can test significance.

The JSON reader is a validating parser: :meth:`Results.from_json`,
:meth:`Results.from_dict`, :meth:`RunRecord.from_dict` and :meth:`Row.from_dict`
give back only records that pass :func:`check_run` / :func:`check_row`, or
raise :class:`RecordError` (an :class:`~sdbench.errors.SdbenchError`) naming the
field, e.g. ``runs[0].rows[2].time_ms: expected a number ...``.  The results
store runs the same checks before it saves a run, so a record that is stored
or parsed is safe for every command that shows, exports, compares or reports it.
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from . import RESULTS_FORMAT_VERSION, __version__
from .errors import SdbenchError

MIB = 1024 * 1024

SOURCES = ("measured", "simulated", "imported")
CLOCKS = ("wall", "virtual")
#: complete: finished normally; incomplete: ended part-way without a word (killed); failed: stopped part-way
#: by an error or an interruption, with a reason
STATUSES = ("complete", "incomplete", "failed")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: longest time a row may claim, ms (about 31 years): anything above is not a measurement
MAX_TIME_MS = 1e12
#: largest rate, count or other figure a row may hold
MAX_FIGURE = 1e30
#: deepest nesting of lists and objects in ``stack`` and ``metadata``
MAX_DEPTH = 32
#: relative slack of the min <= mean/median <= max checks (means are rounded sums)
_REL_TOL = 1e-9


class RecordError(SdbenchError):
    """A record or results document that is not well formed; ``path`` names the field."""

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}" if path else problem)


# -- checks of single values --------------------------------------------------------------------

def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _shown(v: Any) -> str:
    """A short one-line picture of a bad value for an error message."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, int) and v.bit_length() > 64:
        return f"an integer of about {int(v.bit_length() * 0.30103) + 1} digits"
    if isinstance(v, (str, int, float)):
        text = ascii(v)  # ascii: escapes keep the message on one line
    else:
        text = f"a {type(v).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _text(v: Any, path: str, *, empty: bool = True) -> str:
    if not isinstance(v, str):
        raise RecordError(path, f"expected a string, got {_shown(v)}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(path, "the string holds a lone surrogate (not valid Unicode)") from None
    if not empty and not v:
        raise RecordError(path, "must not be empty")
    return v


def _integer(v: Any, path: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if not _is_int(v):
        raise RecordError(path, f"expected an integer, got {_shown(v)}")
    if not lo <= v <= hi:
        if (lo, hi) == (INT64_MIN, INT64_MAX):
            what = "that fits in 64 bits (-2^63 to 2^63-1)"
        else:
            what = f"from {lo} to {'2^63-1' if hi == INT64_MAX else hi}"
        raise RecordError(path, f"expected an integer {what}, got {_shown(v)}")
    return v


def _number(v: Any, path: str, hi: float = MAX_FIGURE) -> float:
    """A finite number from 0 to ``hi`` (integers allowed, booleans not)."""
    if not _is_num(v):
        raise RecordError(path, f"expected a number, got {_shown(v)}")
    if isinstance(v, float) and not math.isfinite(v):
        raise RecordError(path, f"expected a finite number, got {_shown(v)}")
    if not 0 <= v <= hi:
        raise RecordError(path, f"expected a number from 0 to {hi:g}, got {_shown(v)}")
    return v


def _optional_number(v: Any, path: str, hi: float = MAX_FIGURE) -> float | None:
    return None if v is None else _number(v, path, hi)


def _json_value(v: Any, path: str, depth: int = 0) -> None:
    """Anything JSON can hold (objects with string keys), finite, int64, at most MAX_DEPTH deep."""
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, str):
        _text(v, path)
    elif isinstance(v, int):
        _integer(v, path)
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise RecordError(path, f"expected a finite number, got {_shown(v)}")
    elif isinstance(v, (dict, list, tuple)):
        if depth >= MAX_DEPTH:
            raise RecordError(path, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise RecordError(path, f"keys must be strings, got {_shown(k)}")
                _text(k, path)
                _json_value(item, _join(path, k), depth + 1)
        else:
            for i, item in enumerate(v):
                _json_value(item, _join(path, i), depth + 1)
    else:
        raise RecordError(path, f"expected a JSON value (string, number, boolean, null, list or object), "
                                f"got a {type(v).__name__}")


def _object(v: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise RecordError(path, f"expected an object, got {_shown(v)}")
    return v


def _sequence(v: Any, path: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(v, (list, tuple)):
        raise RecordError(path, f"expected a list, got {_shown(v)}")
    return v


def _one_of(v: Any, path: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(v, str) or v not in allowed:
        raise RecordError(path, f"expected one of {', '.join(allowed)}, got {_shown(v)}")
    return v


def _le(a: float, b: float) -> bool:
    """a <= b up to rounding of means and medians."""
    return a <= b + _REL_TOL * max(abs(a), abs(b))


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
    #: (low, high) of time_ms over the model's uncertainty, 10th-90th percentile (simulated rows; None: no range,
    #: e.g. measured rows); see sdbench.population
    time_ms_range: tuple[float, float] | None = None

    @property
    def kib_s(self) -> float:
        return self.mib_s * 1024.0

    @property
    def reported_value(self) -> float:
        return self.time_ms if self.value is None else self.value

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_ms"] = list(self.samples_ms)
        d["time_ms_range"] = None if self.time_ms_range is None else list(self.time_ms_range)
        return d

    def with_range(self, low: float, high: float) -> "Row":
        """This row with ``time_ms_range`` = (low, high)."""
        return Row(**{**self.__dict__, "time_ms_range": (float(low), float(high))})

    #: fields a row document must have (the others have defaults)
    REQUIRED = ("label", "op", "bytes", "runs", "time_ms", "time_ms_median", "time_ms_min", "time_ms_max",
                "time_ms_stdev", "mib_s")

    @classmethod
    def from_dict(cls, d: Any, path: str = "row") -> "Row":
        """A checked row from its JSON form (unknown keys are ignored)."""
        d = _object(d, path)
        for key in cls.REQUIRED:
            if key not in d:
                raise RecordError(_join(path, key), "missing")
        known = {f for f in cls.__dataclass_fields__}
        args = {k: v for k, v in d.items() if k in known}
        samples = args.get("samples_ms", ())
        args["samples_ms"] = tuple(samples) if isinstance(samples, list) else samples
        for key in ("counters", "breakdown_ms", "commands"):
            if isinstance(args.get(key), dict):
                args[key] = dict(args[key])
        if isinstance(args.get("time_ms_range"), list):
            args["time_ms_range"] = tuple(args["time_ms_range"])
        row = cls(**args)
        check_row(row, path)
        return row


def check_row(row: Row, path: str = "row") -> None:
    """Raise :class:`RecordError` unless ``row`` holds what the format allows (see docs/results-format.md)."""
    if not isinstance(row, Row):
        raise RecordError(path, f"expected a row, got {_shown(row)}")
    _text(row.label, _join(path, "label"))
    _text(row.op, _join(path, "op"))
    _text(row.unit, _join(path, "unit"))
    nbytes = _integer(row.bytes, _join(path, "bytes"), 0)
    runs = _integer(row.runs, _join(path, "runs"), 1)
    if row.reported_bytes is not None:
        _integer(row.reported_bytes, _join(path, "reported_bytes"), 0)
    if not isinstance(row.samples_ms, (tuple, list)):
        raise RecordError(_join(path, "samples_ms"), f"expected a list of numbers, got {_shown(row.samples_ms)}")
    for i, s in enumerate(row.samples_ms):
        _number(s, f"{_join(path, 'samples_ms')}[{i}]", MAX_TIME_MS)
    if row.samples_ms and len(row.samples_ms) != runs:
        raise RecordError(_join(path, "samples_ms"), f"{len(row.samples_ms)} samples for {runs} runs "
                                                     "(one per timed call, or none)")
    mean = _number(row.time_ms, _join(path, "time_ms"), MAX_TIME_MS)
    stats = {k: _optional_number(getattr(row, k), _join(path, k), MAX_TIME_MS)
             for k in ("time_ms_median", "time_ms_min", "time_ms_max", "time_ms_stdev")}
    lo, med, hi = stats["time_ms_min"], stats["time_ms_median"], stats["time_ms_max"]
    for name, v in (("time_ms", mean), ("time_ms_median", med)):
        if v is not None and ((lo is not None and not _le(lo, v)) or (hi is not None and not _le(v, hi))):
            raise RecordError(_join(path, name), f"{v!r} is outside time_ms_min..time_ms_max ({lo!r}..{hi!r})")
    if lo is not None and hi is not None and not _le(lo, hi):
        raise RecordError(_join(path, "time_ms_min"), f"{lo!r} is above time_ms_max {hi!r}")
    _check_range(row.time_ms_range, mean, _join(path, "time_ms_range"))
    mib_s = _number(row.mib_s, _join(path, "mib_s"))
    if mib_s and (nbytes == 0 or mean == 0):
        raise RecordError(_join(path, "mib_s"), f"must be 0 when bytes or time_ms is 0, got {mib_s!r}")
    if row.value is not None:
        _number(row.value, _join(path, "value"))
    for key, hi_v in (("counters", None), ("breakdown_ms", MAX_TIME_MS), ("commands", MAX_FIGURE)):
        d = getattr(row, key)
        if not isinstance(d, dict):
            raise RecordError(_join(path, key), f"expected an object, got {_shown(d)}")
        for k, v in d.items():
            _text(k, _join(path, key))
            if hi_v is None:
                _integer(v, _join(_join(path, key), k), 0)
            else:
                _number(v, _join(_join(path, key), k), hi_v)


def _check_range(rng: Any, mean: float, path: str) -> None:
    """``time_ms_range``: null, or [low, high] with 0 <= low <= time_ms <= high <= MAX_TIME_MS."""
    if rng is None:
        return
    if not isinstance(rng, (tuple, list)) or len(rng) != 2:
        raise RecordError(path, f"expected null or [low, high] (two numbers), got {_shown(rng)}")
    lo = _number(rng[0], f"{path}[0]", MAX_TIME_MS)
    hi = _number(rng[1], f"{path}[1]", MAX_TIME_MS)
    if not _le(lo, hi):
        raise RecordError(path, f"low {lo!r} is above high {hi!r}")
    if not (_le(lo, mean) and _le(mean, hi)):
        raise RecordError(path, f"[{lo!r}, {hi!r}] does not include time_ms {mean!r}")


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
    status: str = "complete"      # complete, incomplete (ended part-way, killed), failed (stopped, with a reason)
    status_reason: str = ""       # why a run failed (empty otherwise)

    def row(self, label: str) -> Row:
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "protocol": self.protocol, "source": self.source, "clock": self.clock,
            "seed": self.seed, "status": self.status, "status_reason": self.status_reason, "stack": self.stack,
            "metadata": self.metadata, "warnings": list(self.warnings), "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, d: Any, path: str = "run") -> "RunRecord":
        """A checked run from its JSON form (unknown keys are ignored)."""
        d = _object(d, path)
        for key in ("scenario", "clock", "rows"):
            if key not in d:
                raise RecordError(_join(path, key), "missing")
        rows_path = _join(path, "rows")
        rows = tuple(Row.from_dict(r, _join(rows_path, i)) for i, r in enumerate(_sequence(d["rows"], rows_path)))
        warnings = d.get("warnings", ())
        rec = cls(scenario=d["scenario"], stack=d.get("stack", {}), clock=d["clock"], rows=rows, seed=d.get("seed"),
                  protocol=d.get("protocol", ""), source=d.get("source", "measured"),
                  metadata=d.get("metadata", {}),
                  warnings=tuple(warnings) if isinstance(warnings, list) else warnings,
                  status=d.get("status", "complete"), status_reason=d.get("status_reason", ""))
        check_run(rec, path, rows=False)
        return rec


def check_run(rec: RunRecord, path: str = "run", *, rows: bool = True) -> None:
    """Raise :class:`RecordError` unless ``rec`` is a well-formed run (``rows=False``: rows already checked)."""
    if not isinstance(rec, RunRecord):
        raise RecordError(path, f"expected a run, got {_shown(rec)}")
    _text(rec.scenario, _join(path, "scenario"), empty=False)
    _text(rec.protocol, _join(path, "protocol"))
    _one_of(rec.clock, _join(path, "clock"), CLOCKS)
    _one_of(rec.source, _join(path, "source"), SOURCES)
    _one_of(rec.status, _join(path, "status"), STATUSES)
    _text(rec.status_reason, _join(path, "status_reason"))
    if rec.seed is not None:
        _integer(rec.seed, _join(path, "seed"))
    for key in ("stack", "metadata"):
        _object(getattr(rec, key), _join(path, key))
        _json_value(getattr(rec, key), _join(path, key))
    meta = rec.metadata
    if meta.get("sweep_id") is not None:
        _text(meta["sweep_id"], _join(path, "metadata.sweep_id"))
    for key in ("device", "identity"):
        if meta.get(key) is not None:
            _object(meta[key], _join(path, f"metadata.{key}"))
    if not isinstance(rec.warnings, (tuple, list)):
        raise RecordError(_join(path, "warnings"), f"expected a list of strings, got {_shown(rec.warnings)}")
    for i, w in enumerate(rec.warnings):
        _text(w, f"{_join(path, 'warnings')}[{i}]")
    if not isinstance(rec.rows, (tuple, list)):
        raise RecordError(_join(path, "rows"), f"expected a list of rows, got {_shown(rec.rows)}")
    if rows:
        for i, r in enumerate(rec.rows):
            check_row(r, f"{_join(path, 'rows')}[{i}]")


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
    def from_dict(cls, d: Any) -> "Results":
        """A checked results document; raises :class:`RecordError` naming the first bad field."""
        if not isinstance(d, Mapping):
            raise RecordError("", f"not an sdbench results document (expected a JSON object, got {_shown(d)})")
        fv = d.get("format_version", 1)
        if not _is_int(fv) or fv < 1:
            raise RecordError("format_version", f"expected a positive integer, got {_shown(fv)}")
        if fv > RESULTS_FORMAT_VERSION:
            raise SdbenchError(f"results format version {fv} is newer than this sdbench understands "
                               f"({RESULTS_FORMAT_VERSION}); upgrade sdbench")
        version = _text(d.get("sdbench_version", "?"), "sdbench_version")
        if "runs" not in d:
            raise RecordError("runs", "missing (not an sdbench results document)")
        runs = tuple(RunRecord.from_dict(r, f"runs[{i}]") for i, r in enumerate(_sequence(d["runs"], "runs")))
        return cls(runs=runs, sdbench_version=version, format_version=fv)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Results":
        try:
            doc = json.loads(text)
        except RecursionError:
            raise SdbenchError("not an sdbench results document: JSON nested too deeply") from None
        except UnicodeDecodeError as e:
            raise SdbenchError(f"not valid JSON: not UTF-8 text ({e.reason})") from None
        except json.JSONDecodeError as e:
            raise SdbenchError(f"not valid JSON: {e}") from None
        except ValueError:  # an integer literal longer than Python converts
            raise SdbenchError("not valid JSON for sdbench: a number with thousands of digits") from None
        return cls.from_dict(doc)
