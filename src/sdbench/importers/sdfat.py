"""SdFat ``bench`` example output (Arduino serial monitor).

Per pass the sketch prints ``speed,max,min,avg`` under the header
``KB/Sec,usec,usec,usec``: speed = file size / elapsed whole milliseconds, i.e.
KB/s with KB = 1000 bytes (the write pass includes the final sync), then the
max/min/avg latency in µs of the single ``BUF_SIZE`` write()/read() calls.

Rows follow sdbench's own SdFat protocol (``sdfat-bench``, sdbench.workloads.sdfatbench), so imported
and simulated runs compare label by label: ``sdfat write`` and ``sdfat read``,
``bytes`` = file size (FILE_SIZE), one sample per pass = the pass time in ms
(recovered from the printed speed; the sketch times whole milliseconds),
``unit`` "KB/s".  The sketch divides by the file's size at the end of the pass:
n * BUF_SIZE bytes (n = FILE_SIZE / BUF_SIZE calls) since it truncates the
pre-allocated file to what it wrote, FILE_SIZE in older versions; the pass time
is the whole number of ms for which one of the two gives the printed speed.
``FILE_SIZE_MB`` may be a decimal (sdbench's own output for a file size that
is not a whole number of MB).  The printed per-pass figures are kept in
``metadata["rows"][label]["passes"]``, the number of bench runs (key presses)
in ``metadata["runs"]``.  Card CID lines become the run's device.

Output is refused (nothing imported) when it is cut off (no ``Done`` after the
last pass), a bench run in it lacks its write or read passes, a line is
garbled, the sketch reported an error, a figure is out of range (a speed of 0
or a pass shorter than the sketch's 1 ms resolution, a file or buffer size of
0, a buffer larger than the file), or it holds several bench runs whose
settings or card differ.  Several runs of the same settings and card (the
sketch restarts on a key press) become one row per direction with every pass.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import SdbenchError
from ..records import RunRecord, make_row
from .validate import MAX_ROW_BYTES, MAX_TIME_MS, to_float, to_int

FORMAT = "sdfat"
DEFAULT_SCENARIO = "sdfat-import"
_HEADER = "KB/Sec,usec,usec,usec"
_DATA = re.compile(r"^\s*(\d+(?:\.\d+)?),(\d+),(\d+),(\d+)\s*$")
# what else a pass line may look like: a sign, a digit, or a first field and a comma (Arduino prints
# "inf", "nan" or "ovf" for a float it cannot show)
_PASS_LIKE = re.compile(r"^(?:[-+.\d]|[\w.+-]{1,12},)")
_SECTION = re.compile(r"^\s*(write|read) speed and latency\s*$")
_FACTS: tuple[tuple[re.Pattern[str], str, Any], ...] = (
    (re.compile(r"^FILE_SIZE_MB = (\S+)"), "file_size_mb", "mb"),
    (re.compile(r"^File size (\d+) MB"), "file_size_mb", "mb"),
    (re.compile(r"^BUF_SIZE = (\d+) bytes"), "buf_size_bytes", int),
    (re.compile(r"^Buffer size (\d+) bytes"), "buf_size_bytes", int),
    (re.compile(r"^Type is (FAT\d+|exFAT)"), "fs_type", str),
)
_SHOWN = {"file_size_mb": "file size (bytes)", "buf_size_bytes": "buffer size (bytes)", "fs_type": "file system"}
_CARD: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^Card size: ([\d.]+) GB"), "size_gb"),
    (re.compile(r"^Manufacturer ID: (\S+)"), "manufacturer_id"),
    (re.compile(r"^OEM ID: (.+)$"), "oem_id"),
    (re.compile(r"^Product: (.+)$"), "product"),
    (re.compile(r"^(?:Revision|Version): (\S+)"), "revision"),
    (re.compile(r"^Serial number: (\S+)"), "serial"),
    (re.compile(r"^Manufacturing date: (\S+)"), "manufactured"),
    (re.compile(r"^Card type: (\S+)"), "type"),
)
_ERROR = re.compile(r"^(error: .*|.*errorCode: .*|.*initialization failed.*)$", re.I)


def looks_like(text: str) -> bool:
    return _HEADER in text and re.search(r"(write|read) speed and latency", text) is not None


def parse(text: str, *, name: str = "sdfat.txt", scenario: str | None = None) -> list[RunRecord]:
    lines = [ln.replace("\r", "").rstrip() for ln in text.splitlines()]
    facts: dict[str, Any] = {}
    card: dict[str, Any] = {}
    seen_at: dict[str, int] = {}   # line each fact or card field was first read from
    passes: dict[str, list[tuple[int, tuple[float, int, int, int]]]] = {"write": [], "read": []}
    session = {"write": 0, "read": 0}  # passes since the last "Done"
    runs = 0                           # bench runs ended by "Done"
    sections: dict[str, int] = {}      # line of each section header since the last "Done"
    section: str | None = None
    expect_header = 0
    done = False
    for i, line in enumerate(lines, start=1):
        at = f"{name}:{i}"
        s = line.strip()
        if _ERROR.match(s):
            raise SdbenchError(f"{at}: the bench reported an error: {s[:70]}")
        m = _SECTION.match(s)
        if m:
            section, expect_header = m.group(1), 2
            if section in sections:
                raise SdbenchError(f"{at}: a second {section} section without a 'Done' line after the first "
                                   f"(line {sections[section]}): the output is garbled")
            sections[section] = i
            continue
        if expect_header:
            if s not in ("speed,max,min,avg", _HEADER):
                raise SdbenchError(f"{at}: expected the '{_HEADER}' header, got {s[:40]!r}")
            expect_header -= 1
            continue
        d = _DATA.match(s)
        if d and section:
            kb_s = to_float(d.group(1), "speed (KB/s)", at, hi=MAX_ROW_BYTES / 1000, above=True)
            mx, mn, avg = (to_int(d.group(k), f"{what} latency (µs)", at)
                           for k, what in ((2, "max"), (3, "min"), (4, "avg")))
            passes[section].append((i, (kb_s, mx, mn, avg)))
            session[section] += 1
            continue
        if section and _PASS_LIKE.match(s):
            raise SdbenchError(f"{at}: result line is cut off or garbled: {s[:40]!r}")
        if s.startswith("Starting") or s == "Done":
            section = None
        if s == "Done":
            done = True
            if session["write"] or session["read"]:
                missing = [op for op in ("write", "read") if not session[op]]
                if missing:
                    raise SdbenchError(f"{at}: the bench run ending here has no {missing[0]} passes: "
                                       "the output is incomplete or garbled")
                runs += 1
            session = {"write": 0, "read": 0}
            sections = {}
        for pat, key, conv in _FACTS:
            fm = pat.match(s)
            if fm:
                v = (_mb_bytes(fm.group(1), at) if conv == "mb" else
                     to_int(fm.group(1), _SHOWN[key], at, lo=1) if conv is int else conv(fm.group(1)))
                _same(facts, seen_at, _SHOWN[key], v, name, i, key=key)
        for pat, key in _CARD:
            cm = pat.match(s)
            if cm:
                _same(card, seen_at, f"card {key}", cm.group(1).strip(), name, i, key=key)
    if not passes["write"] and not passes["read"]:
        raise SdbenchError(f"{name}: no SdFat bench result lines (speed,max,min,avg) found")
    if session["write"] or session["read"]:
        last = max(n for op in ("write", "read") for n, _ in passes[op])
        raise SdbenchError(f"{name}: no final 'Done' line after line {last}: the output looks truncated")
    if not done:
        raise SdbenchError(f"{name}: no final 'Done' line: the output looks truncated")
    buf = facts.get("buf_size_bytes", 512)
    file_bytes = facts.get("file_size_mb", 5_000_000)  # the sketch's MB is 1,000,000 bytes
    if file_bytes > MAX_ROW_BYTES:
        raise SdbenchError(f"{name}:{seen_at[_SHOWN['file_size_mb']]}: a file size of {file_bytes} bytes is out "
                           "of range")
    if buf > file_bytes:
        raise SdbenchError(f"{name}:{seen_at.get(_SHOWN['buf_size_bytes'], 0)}: the buffer ({buf} bytes) is larger than "
                           f"the file ({file_bytes} bytes): the sketch would not move any data")
    rows, meta_rows = [], {}
    for op in ("write", "read"):
        label = f"sdfat {op}"
        # speed = bytes / whole ms, so the pass time comes back exactly by rounding
        pass_ms = []
        for lineno, (kb_s, *_) in passes[op]:
            ms = _pass_ms(kb_s, (file_bytes // buf * buf, file_bytes))
            if not 1 <= ms <= MAX_TIME_MS:
                raise SdbenchError(f"{name}:{lineno}: a speed of {kb_s:g} KB/s means a {op} pass of {ms} ms "
                                   f"for {file_bytes} bytes (must be between 1 ms and a year)")
            pass_ms.append(ms)
        rows.append(make_row(label, op, file_bytes, [ms * 1_000_000 for ms in pass_ms], unit="KB/s",
                             value_fn=lambda r: r.bytes / r.time_ms if r.time_ms else 0.0))
        meta_rows[label] = {"passes": [{"kb_s": kb_s, "max_us": mx, "min_us": mn, "avg_us": avg}
                                       for _, (kb_s, mx, mn, avg) in passes[op]],
                            "calls_per_pass": file_bytes // buf, "call_bytes": buf}
    stack = {"importer": FORMAT, "buf_size_bytes": buf, "file_size_bytes": file_bytes, **{
        k: v for k, v in facts.items() if k not in ("buf_size_bytes", "file_size_mb")}}
    meta: dict[str, Any] = {"imported_from": name, "import_format": FORMAT, "preset": "sdfat",
                            "file_bytes": file_bytes, "buf_bytes": buf, "write_passes": len(passes["write"]),
                            "read_passes": len(passes["read"]), "runs": max(runs, 1), "rows": meta_rows}
    if card:
        if "product" in card:
            card["name"] = card["product"]
        meta["device"] = card
    warnings = []
    if "buf_size_bytes" not in facts or "file_size_mb" not in facts:
        warnings.append("buffer or file size not in the output; assumed the sketch defaults "
                        f"(BUF_SIZE {buf} bytes, {file_bytes} bytes per pass)")
    return [RunRecord(scenario=scenario or DEFAULT_SCENARIO, stack=stack, clock="wall", rows=tuple(rows),
                      protocol="sdfat", source="imported", metadata=meta, warnings=tuple(warnings))]


def _mb_bytes(text: str, at: str) -> int:
    """FILE_SIZE_MB as bytes (MB = 1,000,000 bytes; up to six decimals), at least one byte."""
    if not re.fullmatch(r"\d+(?:\.\d{1,6})?", text):
        raise SdbenchError(f"{at}: bad file size (MB) {text[:40]!r} (a whole number, or at most six decimals)")
    whole, _, frac = text.partition(".")
    v = to_int(whole, "file size (MB)", at, lo=0 if frac else 1) * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)
    if v < 1:
        raise SdbenchError(f"{at}: file size (MB) {text} is out of range (at least 0.000001)")
    return v


def _pass_ms(kb_s: float, sizes: tuple[int, ...]) -> int:
    """The whole ms of a pass whose printed speed is ``kb_s`` = size / ms (two decimals), for the first of
    ``sizes`` that gives that speed; else the nearest for the last (FILE_SIZE)."""
    for size in sizes:
        ms = round(size / kb_s)
        if ms >= 1 and abs(size / ms - kb_s) <= 0.0051 + kb_s * 2e-7:  # the printing's rounding, float32
            return ms
    return round(sizes[-1] / kb_s)


def _same(into: dict[str, Any], seen_at: dict[str, int], what: str, value: Any, name: str, lineno: int, *,
          key: str | None = None) -> None:
    """Keep the first value of a fact; a different one later means the output mixes bench runs."""
    key = key or what
    if key not in into:
        into[key] = value
        seen_at[what] = lineno
    elif into[key] != value:
        raise SdbenchError(f"{name}:{lineno}: {what} is {value!r} here but {into[key]!r} at line {seen_at[what]}: "
                           "the output mixes bench runs of different settings or cards; cut it into one file "
                           "per run")
