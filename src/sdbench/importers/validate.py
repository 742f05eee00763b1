"""Bounds every imported figure must meet, and the checks the importers share.

Every number an importer takes from a file goes through :func:`to_int` or
:func:`to_float` (printed text) or :func:`json_number` (a JSON value), which
refuse anything that is not finite, out of range or of the wrong sign with one
line naming the place.  :func:`check_runs` then checks the finished runs once
more, so that nothing a parser let through by mistake reaches the store:
SQLite keeps integers in 64 bits and the records are stored as strict JSON.
"""
from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

from ..errors import SdbenchError
# the results format's own bounds (records.py); an import is stricter only where a tool's output must be
from ..records import INT64_MAX, INT64_MIN, MAX_FIGURE, RecordError, Row, RunRecord, check_run

MAX_ROW_BYTES = 1 << 60            # bytes moved by one timed call: 1 EiB
MAX_TIME_MS = 366 * 86_400_000.0   # one timed call (or fio job): a year
MAX_JSON_CONTAINERS = 1_000_000    # arrays + objects in one JSON document: far more than any tool writes
_DIGITS_MAX = 19                   # an int64 has at most 19 digits


def show(v: Any, limit: int = 24) -> str:
    """A value as it can be quoted in a one-line message."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, int) and v.bit_length() > 64:
        return f"(a {int(v.bit_length() * 0.30103) + 1}-digit integer)"
    s = v if isinstance(v, str) else repr(v)
    if len(s) > limit:
        s = f"{s[:limit // 2]}...({len(s)} characters)"
    return repr(s) if isinstance(v, str) else s


def printable(s: str) -> str:
    """``s`` with control characters escaped, so a file name cannot break a message into lines."""
    if all(c.isprintable() for c in s):
        return s
    return s.encode("unicode_escape", errors="backslashreplace").decode("ascii")


def _range(lo: int, hi: int) -> str:
    if hi >= INT64_MAX:
        if lo <= INT64_MIN:
            return "it must fit in 64 bits"
        return f"must be {lo} or more and fit in 64 bits"
    return f"must be between {lo} and {hi}"


def to_int(text: str, what: str, where: str, *, lo: int = 0, hi: int = INT64_MAX) -> int:
    """A decimal integer printed by a tool, within ``lo..hi``."""
    t = text.strip()
    body = t[1:] if t[:1] in ("+", "-") else t
    if not body or not body.isascii() or not body.isdigit():
        raise SdbenchError(f"{where}: bad {what} {show(t)}")
    if len(body.lstrip("0")) > _DIGITS_MAX:
        raise SdbenchError(f"{where}: {what} {show(t)} is out of range ({_range(lo, hi)})")
    v = int(t)
    if not lo <= v <= hi:
        raise SdbenchError(f"{where}: {what} {v} is out of range ({_range(lo, hi)})")
    return v


def check_float(v: float, what: str, where: str, *, lo: float = 0.0, hi: float = math.inf,
                above: bool = False, shown: str | None = None) -> float:
    """``v`` finite and within ``lo..hi`` (``above``: strictly greater than ``lo``); -0.0 becomes 0.0."""
    shown = shown if shown is not None else show(v)
    if not math.isfinite(v):
        raise SdbenchError(f"{where}: {what} {shown} is not a finite number")
    if v < lo or (above and v <= lo) or v > hi:
        if above:
            bound = f"above {lo:g}" + (f" and at most {hi:g}" if math.isfinite(hi) else "")
        else:
            bound = f"between {lo:g} and {hi:g}" if math.isfinite(hi) else f"{lo:g} or more"
        raise SdbenchError(f"{where}: {what} {shown} is out of range (must be {bound})")
    return v + 0.0  # -0.0 -> 0.0


_FLOAT_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def to_float(text: str, what: str, where: str, *, lo: float = 0.0, hi: float = math.inf,
             above: bool = False) -> float:
    """A decimal number printed by a tool (no nan/inf spelled out), finite and within bounds."""
    t = text.strip()
    if len(t) > 400 or not _FLOAT_TEXT.fullmatch(t):
        raise SdbenchError(f"{where}: bad {what} {show(t)}")
    return check_float(float(t), what, where, lo=lo, hi=hi, above=above, shown=show(t))


def json_number(v: Any, what: str, where: str, *, lo: float = 0.0, hi: float = math.inf, above: bool = False,
                integer: bool = False) -> Any:
    """A JSON number (not text, not a boolean); ``integer`` also takes 12.0 as 12 and bounds it to int64."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        kind = "text" if isinstance(v, str) else show(v)
        raise SdbenchError(f"{where}: {what} is {kind}{' ' + show(v) if isinstance(v, str) else ''}, "
                           "not a number")
    if integer:
        if isinstance(v, float):
            if not math.isfinite(v) or not v.is_integer():
                raise SdbenchError(f"{where}: {what} {show(v)} is not a whole number")
            v = int(v)
        hi = INT64_MAX if hi >= INT64_MAX else math.floor(hi)
        lo = INT64_MIN if lo <= INT64_MIN else math.ceil(lo)
        if not lo <= v <= hi or (above and v <= lo):
            raise SdbenchError(f"{where}: {what} {show(v)} is out of range "
                               f"({_range(lo + 1 if above else lo, hi)})")
        return v
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float
        f = math.inf
    return check_float(f, what, where, lo=lo, hi=hi, above=above, shown=show(v))


# -- JSON nesting ------------------------------------------------------------------------------

# a JSON string, or an unterminated one up to the end: always matches at a quote, so scanning is linear
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str, max_containers: int = MAX_JSON_CONTAINERS) -> int:
    """How deep the arrays and objects in a JSON text nest (brackets inside strings do not count).

    Refuses (:class:`SdbenchError`) a text opening more than ``max_containers``
    of them, which would take a lot of memory to parse for no plausible reason.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    opened = brackets.count("[") + brackets.count("{")
    if opened > max_containers:
        raise SdbenchError(f"{opened} arrays and objects (at most {max_containers} expected)")
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads(text: str, where: str, *, max_depth: int, what: str = "JSON") -> Any:
    """``json.loads`` that refuses nesting deeper than ``max_depth`` before parsing.

    Decoding errors are left to the caller (``json.JSONDecodeError``); numbers
    json cannot convert and runaway recursion become :class:`SdbenchError`.
    """
    try:
        depth = json_depth(text)
    except SdbenchError as e:
        raise SdbenchError(f"{where}: {what} with {e}") from None
    if depth > max_depth:
        raise SdbenchError(f"{where}: {what} nested {depth} levels deep (at most {max_depth} expected)")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise SdbenchError(f"{where}: {what} nested too deeply") from None
    except ValueError:  # an integer with more digits than Python converts
        raise SdbenchError(f"{where}: {what} holds a number that cannot be read (thousands of digits)") from None


# -- the finished runs ---------------------------------------------------------------------------

def _figure(v: float | None, what: str, at: str, hi: float) -> None:
    if v is not None and v > hi:
        raise SdbenchError(f"{at}: {what} {show(v)} is out of range (must be at most {hi:g})")


def _row_ok(r: Row, where: str) -> None:
    """What an imported row must meet beyond the results format (records.check_row): a label to show,
    and figures a real tool can print."""
    if not r.label.strip():
        raise SdbenchError(f"{where}: a row without a label")
    at = f"{where}: row {show(r.label, 60)}"
    if any(unicodedata.category(c) == "Cc" for c in r.label):
        raise SdbenchError(f"{at}: the label holds a control character")
    for key, v in (("bytes", r.bytes), ("reported size", r.reported_bytes)):
        if v is not None and v > MAX_ROW_BYTES:
            raise SdbenchError(f"{at}: {key} {show(v)} is out of range ({_range(0, MAX_ROW_BYTES)})")
    for key in ("time_ms", "time_ms_median", "time_ms_min", "time_ms_max", "time_ms_stdev"):
        _figure(getattr(r, key), key, at, MAX_TIME_MS)
    for s in r.samples_ms:
        _figure(s, "sample (ms)", at, MAX_TIME_MS)
    _figure(r.value, "reported figure", at, MAX_FIGURE)
    _figure(r.mib_s, "MiB/s", at, MAX_FIGURE)


def check_runs(runs: Iterable[RunRecord], name: str, *, imported: bool = True) -> list[RunRecord]:
    """Every run well formed (:func:`sdbench.records.check_run`, what the store requires), and for a
    foreign tool's output (``imported``) every row within the bounds above with a unique label; else
    :class:`SdbenchError`."""
    out = list(runs)
    for n, run in enumerate(out, start=1):
        where = f"{name} (run {n})" if len(out) > 1 else name
        try:
            check_run(run, "run")
        except RecordError as e:
            raise SdbenchError(f"{where}: {e}") from None
        if not imported:
            continue
        seen: set[str] = set()
        for r in run.rows:
            _row_ok(r, where)
            if r.label in seen:
                raise SdbenchError(f"{where}: two rows are labelled {show(r.label, 60)}")
            seen.add(r.label)
    return out
