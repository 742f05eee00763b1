"""SdFat ``bench`` example output (Arduino serial monitor).

Per pass the sketch prints ``speed,max,min,avg`` under the header
``KB/Sec,usec,usec,usec``: speed = file size / elapsed whole milliseconds, i.e.
KB/s with KB = 1000 bytes (the write pass includes the final sync), then the
max/min/avg latency in µs of the single ``BUF_SIZE`` write()/read() calls.

Rows follow sdbench's own SdFat workload (sdbench.workloads.fio), so imported
and measured runs compare label by label: ``sdfat write`` and ``sdfat read``,
``bytes`` = file size, one sample per pass = the pass time in ms (recovered
from the printed speed; the sketch times whole milliseconds), ``unit`` "KB/s".
The printed per-pass figures are kept in ``metadata["rows"][label]["passes"]``.
Card CID lines become the run's device.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import SdbenchError
from ..records import RunRecord, make_row

FORMAT = "sdfat"
DEFAULT_SCENARIO = "sdfat-import"
_HEADER = "KB/Sec,usec,usec,usec"
_DATA = re.compile(r"^\s*(\d+(?:\.\d+)?),(\d+),(\d+),(\d+)\s*$")
_SECTION = re.compile(r"^\s*(write|read) speed and latency\s*$")
_FACTS: tuple[tuple[re.Pattern[str], str, Any], ...] = (
    (re.compile(r"^FILE_SIZE_MB = (\d+)"), "file_size_mb", int),
    (re.compile(r"^File size (\d+) MB"), "file_size_mb", int),
    (re.compile(r"^BUF_SIZE = (\d+) bytes"), "buf_size_bytes", int),
    (re.compile(r"^Buffer size (\d+) bytes"), "buf_size_bytes", int),
    (re.compile(r"^Type is (FAT\d+|exFAT)"), "fs_type", str),
)
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
    passes: dict[str, list[tuple[int, tuple[float, int, int, int]]]] = {"write": [], "read": []}
    section: str | None = None
    expect_header = 0
    done = False
    for i, line in enumerate(lines, start=1):
        s = line.strip()
        if _ERROR.match(s):
            raise SdbenchError(f"{name}:{i}: the bench reported an error: {s[:70]}")
        m = _SECTION.match(s)
        if m:
            section, expect_header = m.group(1), 2
            continue
        if expect_header:
            if s not in ("speed,max,min,avg", _HEADER):
                raise SdbenchError(f"{name}:{i}: expected the '{_HEADER}' header, got {s[:40]!r}")
            expect_header -= 1
            continue
        d = _DATA.match(s)
        if d and section:
            passes[section].append((i, (float(d.group(1)), int(d.group(2)), int(d.group(3)), int(d.group(4)))))
            continue
        if section and s and s[0].isdigit():
            raise SdbenchError(f"{name}:{i}: result line is cut off or garbled: {s[:40]!r}")
        if s.startswith("Starting") or s == "Done":
            section = None
            done = done or s == "Done"
        for pat, key, conv in _FACTS:
            fm = pat.match(s)
            if fm:
                facts.setdefault(key, conv(fm.group(1)))
        for pat, key in _CARD:
            cm = pat.match(s)
            if cm:
                card.setdefault(key, cm.group(1).strip())
    if not passes["write"] and not passes["read"]:
        raise SdbenchError(f"{name}: no SdFat bench result lines (speed,max,min,avg) found")
    if not done:
        raise SdbenchError(f"{name}: no final 'Done' line: the output looks truncated")
    if not passes["write"] or not passes["read"]:
        missing = "read" if passes["write"] else "write"
        raise SdbenchError(f"{name}: no {missing} passes: the output looks truncated")
    buf = int(facts.get("buf_size_bytes", 512))
    file_bytes = int(facts.get("file_size_mb", 5)) * 1_000_000  # the sketch's MB is 1,000,000 bytes
    rows, meta_rows = [], {}
    for op in ("write", "read"):
        label = f"sdfat {op}"
        if any(kb_s <= 0 for _, (kb_s, *_) in passes[op]):
            raise SdbenchError(f"{name}: a {op} pass printed speed 0")
        # speed = bytes / whole ms, so the pass time comes back exactly by rounding
        pass_ns = [round(file_bytes / kb_s) * 1_000_000 for _, (kb_s, *_) in passes[op]]
        rows.append(make_row(label, op, file_bytes, pass_ns, unit="KB/s",
                             value_fn=lambda r: r.bytes / r.time_ms if r.time_ms else 0.0))
        meta_rows[label] = {"passes": [{"kb_s": kb_s, "max_us": mx, "min_us": mn, "avg_us": avg}
                                       for _, (kb_s, mx, mn, avg) in passes[op]],
                            "calls_per_pass": file_bytes // buf, "call_bytes": buf}
    stack = {"importer": FORMAT, "buf_size_bytes": buf, "file_size_bytes": file_bytes, **{
        k: v for k, v in facts.items() if k not in ("buf_size_bytes", "file_size_mb")}}
    meta: dict[str, Any] = {"imported_from": name, "import_format": FORMAT, "preset": "sdfat",
                            "file_bytes": file_bytes, "buf_bytes": buf, "write_passes": len(passes["write"]),
                            "read_passes": len(passes["read"]), "rows": meta_rows}
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
