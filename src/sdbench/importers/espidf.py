"""ESP-IDF ``examples/storage/perf_benchmark`` monitor logs.

One line per measurement, ``[%-55s] (%dx) %8.3f ms %8.2f kB %10.3f MB/s``:
label, runs, mean ms per call, size/1024 and size/mean in MiB/s (with
CONFIG_EXAMPLE_USE_BYTES=n the size is printed in kb, i.e. size*8/1024).
sdbench's own simulated lines may end in `` [lo–hi ms]``, the row's range,
which becomes the row's ``time_ms_range``.  Around
them: boot and ``I (ms) tag: ...`` log lines, which are ignored except for a
few facts (target size, SD interface, FAT cluster size, IDF version), and the
card information that ``sdmmc_card_print_info`` prints (Name, Type, Speed,
Size, CSD, SSR/SCR), kept as the run's device.

The example prints all four SD raw rows as ``SD raw write`` / ``SD raw read``
with 16/32/48/64 kB, although every call moves the whole target size; they
become ``SD raw write [16 kB label]`` etc. with ``bytes`` = target size and
``reported_bytes`` = the printed size.  Only means are printed: rows carry no
per-call samples and no median/min/max/stdev.

A log is refused (nothing imported) when a test group it contains is
incomplete, a line is cut off, the firmware crashed, a label repeats without
a new "Starting benchmark" line between, the log ends right after such a line,
or a figure is not a plain number of the right sign and size: a row needs at
least one run and a mean time of 0 or more (0.000 ms, below the example's
1 µs resolution, is kept with a "speed unknown" warning), and sizes are never
negative.  Sizes of 0 kB are kept only
for rows whose label this importer does not know (sdbench's own mount/open
rows move no data).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import SdbenchError
from ..records import MIB, Row, RunRecord
from .validate import INT64_MAX, INT64_MIN, MAX_ROW_BYTES, MAX_TIME_MS, to_float, to_int

FORMAT = "espidf"
PROTOCOL = "espidf"
DEFAULT_SCENARIO = "espidf-import"
DEFAULT_TARGET_BYTES = 65536
TINY_BYTES = 255
MIN_TARGET_BYTES = 512      # one sector: the SD raw test moves whole sectors
MAX_TARGET_BYTES = 1 << 40  # the example buffers the target size in RAM; anything near this is garbage

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# the label's trailing padding stays in the group (stripped later): with possessive quantifiers no
# character is tried twice, so a long line without a row costs linear time
ROW_RE = re.compile(
    r"\[(?P<label>[^\[\]]*+(?:\[\d++ kB label\][^\[\]]*+)?)\]\s*+\((?P<runs>\d++)x\)\s++"
    r"(?P<ms>-?[\d.]++|inf|nan)\s++ms\s++(?P<size>-?[\d.]++)\s++k(?P<unit>[Bb])\s++"
    r"(?P<speed>-?[\d.]++|inf|-?nan)\s++M[Bb]/s"
    # sdbench's own lines may end in the row's range, " [lo–hi ms]" (an en dash, or '-' once re-typed)
    r"(?:\s++\[(?P<lo>-?[\d.]++|inf|nan)\s*+[\u2013-]\s*+(?P<hi>-?[\d.]++|inf|nan)\s++ms\])?+\s*+$")
# a line with a row's head ("[label] (Nx)") whose figures do not parse: garbled or cut off
# (the label bound keeps a long line of '[' without ']' from costing quadratic time)
_ROW_HEAD = re.compile(r"\[[A-Za-z][^\]]{0,300}+\]\s*+\(\d++x\)")
_RAW_LABEL = re.compile(r"^SD raw (write|read)(?: \[(\d+) kB label\])?$")
_FS_LABEL = re.compile(r"^(?P<family>.+?): (?P<op>write|read) (?P<size>target|more than target|less than target|tiny)"
                       r" size$")
_START = re.compile(r"Starting benchmark test with target size (\d+) bytes")
_CRASH = re.compile(r"Guru Meditation Error|abort\(\) was called|ESP_ERROR_CHECK failed|assert failed:|"
                    r"Backtrace: 0x|CORRUPT HEAP|Stack canary watchpoint triggered")
# the example logs each part's mount and unmount with its "example" tag
_PART_OPEN = re.compile(r"\bexample: Mounti?n?g")
_PART_TAG = re.compile(r"\bexample: ")
_SHORT_IO = re.compile(r"Could not (write|read) full buffer size\. Actually (?:wrote|read) bytes: (-?\d+)")
FS_FAMILIES = ("SPI FATFS (new file)", "SPI SPIFFS (new file)", "SPI LittleFS (new file)", "SD FATFS (new file)",
               "SD FATFS", "SD LittleFS (new file)", "SD LittleFS")
SIZE_WORDS = ("target", "more than target", "less than target", "tiny")
# facts picked from the log noise: (pattern, stack key, converter; "size": a whole number >= 1)
_FACTS: tuple[tuple[re.Pattern[str], str, Any], ...] = (
    (re.compile(r"Using (SDMMC|SPI) peripheral"), "sd_interface", lambda s: "SDMMC" if s == "SDMMC" else "SDSPI"),
    (re.compile(r"Mounting FATFS partition, with cluster size (\d+) bytes"), "spiflash_fat_cluster_bytes", "size"),
    (re.compile(r"Mounting SD card - FATFS, with cluster size (\d+) bytes"), "sd_fat_cluster_bytes", "size"),
    (re.compile(r"ESP-IDF:?\s+(v[0-9][\w.\-]*)"), "idf_version", str),
    (re.compile(r"^ESP-ROM:(\w+?)-\d"), "chip", str),
    (re.compile(r"cpu freq: (\d+) Hz"), "cpu_freq_hz", "size"),
    (re.compile(r"Project name:\s+(\S+)"), "project", str),
)
# sdmmc_card_print_info, old and new layouts
_CARD_KEYS = ("Name", "Type", "Speed", "Size", "CSD", "SSR", "SCR", "EXT CSD")
_CARD_LINE = re.compile(r"^(Name|Type|Speed|Size|CSD|SSR|SCR|EXT CSD): ?(.*)$")


def sizes(target: int) -> dict[str, int]:
    # the example computes these as size_t from a double: truncation, as int() does
    return {"target": target, "more than target": int(target * 1.2), "less than target": int(target / 1.2),
            "tiny": TINY_BYTES}


def raw_label_kib(target: int, sector_bytes: int = 512) -> list[int]:
    """The sizes (KiB, rounded down) the SD raw rows are labelled with: quarters of the target."""
    quarter = target // sector_bytes // 4
    return [quarter * (i + 1) * sector_bytes // 1024 for i in range(4)]


def expected_labels(family: str, target: int = DEFAULT_TARGET_BYTES) -> list[str]:
    """Labels a complete group prints, in order."""
    if family == "SPI Flash raw":
        return ["SPI Flash raw write", "SPI Flash raw read"]
    if family == "SD raw":
        return [f"SD raw {op} [{k} kB label]" for k in raw_label_kib(target) for op in ("write", "read")]
    return [f"{family}: {op} {w} size" for w in SIZE_WORDS for op in ("write", "read")]


def looks_like(text: str) -> bool:
    return any(ROW_RE.search(_clean(line)) for line in text.splitlines()[:5000])


def _clean(line: str) -> str:
    return _ANSI.sub("", line).replace("\r", "").rstrip()


@dataclass
class _Printed:
    lineno: int
    label: str            # as printed
    runs: int
    time_ms: float
    size_kib: float       # printed size converted to KiB
    warnings: list[str] = field(default_factory=list)
    time_ms_range: tuple[float, float] | None = None  # sdbench's " [lo–hi ms]" suffix, when the line has one


@dataclass
class _Segment:
    target: int | None = None
    rows: list[_Printed] = field(default_factory=list)
    cards: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    units: str = "bytes"
    start_line: int = 0
    last_row_line: int = 0
    last_open_line: int = 0
    last_close_line: int = 0


def parse(text: str, *, name: str = "log", scenario: str | None = None) -> list[RunRecord]:
    """Runs in a monitor log (usually one; several when the benchmark started more than once)."""
    segments = _scan(text, name)
    runs = [_to_run(seg, name, scenario) for seg in segments if seg.rows]
    if not runs:
        raise SdbenchError(f"{name}: no perf_benchmark result lines "
                           "(`[label] (Nx) ms kB MB/s`) found: not an ESP-IDF perf_benchmark log")
    last = segments[-1]
    if not last.rows and last.start_line:
        raise SdbenchError(f"{name}:{last.start_line}: the benchmark started again but the log ends before its "
                           "first result: the log is truncated")
    return runs


def _scan(text: str, name: str) -> list[_Segment]:
    segs = [_Segment()]
    lines = [_clean(raw) for raw in text.splitlines()]
    pending: list[str] = []   # warnings for the next row (short reads/writes are logged before the row)
    i = 0
    while i < len(lines):
        line = lines[i]
        lineno = i + 1
        seg = segs[-1]
        m = _START.search(line)
        if m:
            if seg.rows or seg.target is not None:
                seg = _Segment()
                segs.append(seg)
            seg.target = to_int(m.group(1), "target size (bytes)", f"{name}:{lineno}", lo=MIN_TARGET_BYTES,
                                hi=MAX_TARGET_BYTES)
            seg.start_line = lineno
        if _CRASH.search(line):
            raise SdbenchError(f"{name}:{lineno}: the firmware crashed ({line.strip()[:60]}): "
                               "import the log of a run that finished")
        short = _SHORT_IO.search(line)
        if short:
            pending.append(f"short {short.group(1)}: the call moved only {short.group(2)} bytes")
        if _PART_OPEN.search(line):
            seg.last_open_line = lineno
        else:
            tag = _PART_TAG.search(line)
            if tag and "unmounted" in line[tag.end():]:
                seg.last_close_line = lineno
        row = ROW_RE.search(line)
        if row:
            seg.last_row_line = lineno
            seg.rows.append(_row_from_match(row, lineno, name, pending))
            if row.group("unit") == "b":
                seg.units = "bits"
            pending = []
        elif _ROW_HEAD.search(line):
            raise SdbenchError(f"{name}:{lineno}: result line is cut off or garbled: {line[:70]!r}")
        cm = _CARD_LINE.match(line.strip())
        if cm and cm.group(1) == "Name" and i + 1 < len(lines) and lines[i + 1].strip().startswith("Type:"):
            card, i = _card(lines, i, name)
            seg.cards.append(card)
            continue
        for pat, key, conv in _FACTS:
            fm = pat.search(line)
            if fm and key not in seg.facts:
                if conv == "size":
                    seg.facts[key] = to_int(fm.group(1), key, f"{name}:{lineno}", lo=1)
                else:
                    seg.facts[key] = conv(fm.group(1))
        i += 1
    # a last line that is a prefix of a result line: the capture stopped mid-line
    tail = next((ln for ln in reversed(lines) if ln.strip()), "")
    if tail.startswith("[") and not ROW_RE.search(tail):
        raise SdbenchError(f"{name}: the last line is a cut-off result line ({tail[:60]!r}): the log is truncated")
    return segs


def _row_from_match(m: re.Match[str], lineno: int, name: str, pending: list[str]) -> _Printed:
    at = f"{name}:{lineno}"
    label = m.group("label").strip()
    if not label:
        raise SdbenchError(f"{at}: a result line without a label")
    runs = to_int(m.group("runs"), "run count", at, lo=1)
    bits = m.group("unit") == "b"
    # CONFIG_EXAMPLE_USE_BYTES=n prints size*8/1024 as "kb"
    size = to_float(m.group("size"), f"size (k{m.group('unit')})", at, hi=MAX_ROW_BYTES / 1024 * (8 if bits else 1))
    if bits:
        size /= 8
    ms = m.group("ms")
    # 0.000 ms is what the example prints below its 1 µs resolution: a real value, kept with a warning;
    # -0.000 is not something it prints
    t = to_float(ms, "mean time (ms)", at, hi=MAX_TIME_MS)
    rng = None
    if m.group("lo") is not None:
        lo = to_float(m.group("lo"), "range low (ms)", at, hi=MAX_TIME_MS)
        hi = to_float(m.group("hi"), "range high (ms)", at, hi=MAX_TIME_MS)
        if not lo <= t <= hi:
            raise SdbenchError(f"{at}: the range [{m.group('lo')}–{m.group('hi')} ms] does not hold the mean time "
                               f"{ms} ms")
        rng = (lo, hi)
    return _Printed(lineno, label, runs, t, size, list(pending), rng)


def _card(lines: list[str], i: int, name: str) -> tuple[dict[str, Any], int]:
    raw: dict[str, str] = {}
    at: dict[str, str] = {}
    while i < len(lines):
        m = _CARD_LINE.match(lines[i].strip())
        if not m or m.group(1) in raw:
            break
        raw[m.group(1)] = m.group(2).strip()
        at[m.group(1)] = f"{name}:{i + 1}"
        i += 1
    card: dict[str, Any] = {"name": raw.get("Name", ""), "type": raw.get("Type", "")}
    if "Speed" in raw:
        card["speed"] = raw["Speed"]
        fm = re.match(r"([\d.]+)\s*(kHz|MHz)", raw["Speed"])
        if fm:
            f = to_float(fm.group(1), "card clock", at["Speed"], hi=1e9)
            card["freq_khz"] = round(f * (1000 if fm.group(2) == "MHz" else 1))
    if "Size" in raw:
        sm = re.match(r"(\d+)\s*MB", raw["Size"])
        if sm:
            card["size_mib"] = to_int(sm.group(1), "card size (MB)", at["Size"])  # the driver divides by 1024*1024
    for key in ("CSD", "SSR", "SCR", "EXT CSD"):
        if key in raw:
            # \b: a match starts only at a word's start, so a long word costs linear time
            fields = dict(re.findall(r"\b(\w+)=(-?\d+)", raw[key]))
            card[key.lower().replace(" ", "_")] = {
                k: to_int(v, f"card {key} field {k}", at[key], lo=INT64_MIN, hi=INT64_MAX) for k, v in fields.items()}
    return card, i


def _family(label: str) -> str:
    if label.startswith("SPI Flash raw"):
        return "SPI Flash raw"
    if _RAW_LABEL.match(label):
        return "SD raw"
    m = _FS_LABEL.match(label)
    return m.group("family") if m else label


def _target(seg: _Segment, name: str) -> int:
    if seg.target is not None:
        return seg.target
    # no "Starting benchmark" line (capture began late, or an sdbench export): infer from the rows
    for p in seg.rows:
        m = _FS_LABEL.match(p.label)
        if p.label.startswith("SPI Flash raw") or (m and m.group("size") == "target"):
            return _inferred_target(round(p.size_kib * 1024), p, name)
    raws = [p for p in seg.rows if _RAW_LABEL.match(p.label)]
    if not raws:
        return DEFAULT_TARGET_BYTES
    biggest = max(raws, key=lambda p: p.size_kib)
    return _inferred_target(round(biggest.size_kib * 1024), biggest, name)


def _inferred_target(target: int, p: _Printed, name: str) -> int:
    if not MIN_TARGET_BYTES <= target <= MAX_TARGET_BYTES:
        raise SdbenchError(f"{name}:{p.lineno}: the target size read from this row, {target} bytes, is out of range "
                           f"(must be between {MIN_TARGET_BYTES} and {MAX_TARGET_BYTES})")
    return target


def _to_run(seg: _Segment, name: str, scenario: str | None) -> RunRecord:
    target = _target(seg, name)
    size_of = sizes(target)
    rows: list[Row] = []
    warnings: list[str] = []
    first_line: dict[str, int] = {}
    for p in seg.rows:
        label, op, nbytes, reported = _mapped(p, target, size_of, name)
        if label in first_line:
            raise SdbenchError(f"{name}:{p.lineno}: '{label}' appears again (first at line {first_line[label]}): "
                               "the log holds more than one benchmark run; cut it into one file per run")
        first_line[label] = p.lineno
        printed = reported if reported is not None else nbytes
        if abs(printed / 1024 - p.size_kib) > 0.0051 + 1e-9:
            warnings.append(f"{label}: printed size {p.size_kib:.2f} kB does not match {printed} bytes "
                            f"expected for target size {target} bytes")
        warnings += [f"{label}: {w}" for w in p.warnings]
        if p.time_ms == 0:
            warnings.append(f"{label}: mean time printed as 0.000 ms; speed unknown")
        mib_s = (nbytes / MIB) / (p.time_ms / 1000.0) if nbytes and p.time_ms > 0 else 0.0
        rows.append(Row(label=label, op=op, bytes=nbytes, runs=p.runs, samples_ms=(), time_ms=p.time_ms,
                        time_ms_median=None, time_ms_min=None, time_ms_max=None,  # type: ignore[arg-type]
                        time_ms_stdev=None, mib_s=mib_s, reported_bytes=reported,  # type: ignore[arg-type]
                        time_ms_range=p.time_ms_range))
    _check_complete(rows, name, target)
    # with the example's own log lines present, every part must close after its results
    last = max(seg.last_row_line, seg.last_open_line)
    if (seg.last_open_line or seg.last_close_line) and seg.last_close_line < last:
        raise SdbenchError(f"{name}: the log ends inside a test part (no 'unmounted' line after line {last}): "
                           "the log is truncated")
    stack: dict[str, Any] = {"importer": FORMAT, "target_size_bytes": target, "size_units": seg.units}
    stack.update(seg.facts)
    meta: dict[str, Any] = {"imported_from": name, "import_format": FORMAT}
    if seg.cards:
        meta["device"] = seg.cards[0]
        if any(c != seg.cards[0] for c in seg.cards[1:]):
            warnings.append("the card information changed during the log (card swapped?); the first is kept")
    return RunRecord(scenario=scenario or DEFAULT_SCENARIO, stack=stack, clock="wall", rows=tuple(rows),
                     seed=None, protocol=PROTOCOL, source="imported", metadata=meta, warnings=tuple(warnings))


def _mapped(p: _Printed, target: int, size_of: dict[str, int], name: str) -> tuple[str, str, int, int | None]:
    """(label, op, bytes moved per call, size the example printed if it differs)."""
    raw = _RAW_LABEL.match(p.label)
    if raw:
        # every SD raw call moves the whole target; the label only names the printed size
        reported = round(p.size_kib * 1024)
        kib = to_int(raw.group(2), "label size (kB)", f"{name}:{p.lineno}") if raw.group(2) else reported // 1024
        return f"SD raw {raw.group(1)} [{kib} kB label]", raw.group(1), target, reported
    if p.label.startswith("SPI Flash raw"):
        return p.label, "write" if p.label.endswith("write") else "read", target, None
    m = _FS_LABEL.match(p.label)
    if m:
        return p.label, m.group("op"), size_of[m.group("size")], None
    op = "write" if " write" in f" {p.label}" else "read" if " read" in f" {p.label}" else "other"
    return p.label, op, round(p.size_kib * 1024), None


def _check_complete(rows: list[Row], name: str, target: int) -> None:
    present: dict[str, set[str]] = {}
    for r in rows:
        present.setdefault(_family(r.label), set()).add(r.label)
    # SD FATFS and SD LittleFS always run new-file mode and then normal mode
    for fs in ("SD FATFS", "SD LittleFS"):
        if (fs in present) != (f"{fs} (new file)" in present):
            present.setdefault(fs, set())
            present.setdefault(f"{fs} (new file)", set())
    for family, labels in present.items():
        if family not in FS_FAMILIES and family not in ("SD raw", "SPI Flash raw"):
            continue  # a row this importer does not know the group of
        expected = expected_labels(family, target)
        missing = [lbl for lbl in expected if lbl not in labels]
        if missing:
            raise SdbenchError(f"{name}: {family} has {len(expected) - len(missing)} of {len(expected)} rows "
                               f"(missing '{missing[0]}'): the log is truncated or incomplete")
