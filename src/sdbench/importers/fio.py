"""fio ``--output-format=json`` (or ``json+``) results.

Rows follow sdbench's own fio-like workload (sdbench.workloads.fio), so an
imported fio run and a measured one compare label by label: one row per job
and direction that moved data, labelled ``<job> <read|write|trim>``, with
``bytes`` = bytes the job moved in that direction, ``runs`` = 1 and one sample =
fio's runtime in ms, so ``mib_s`` is fio's bandwidth.  The reported figure
(``unit``/``value``) is fio's IOPS for random patterns, MiB/s otherwise.  Per
row, ``metadata["rows"][label]`` keeps I/O count, block size, IOPS, bandwidth
and the completion-latency (clat) summary and percentiles in µs.

Every field the importer reads must have the type fio writes (a number, text,
a table or a list) and a sane value; anything else is refused with one line
naming the field (``jobs[1].read.runtime``), and so is a document nested
deeper than fio's output ever is.  Two jobs of the same name (``numjobs``
without ``group_reporting``) are refused too, as their rows could not be told
apart.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..errors import SdbenchError
from ..records import Row, RunRecord, make_row
from .validate import MAX_FIGURE, MAX_ROW_BYTES, MAX_TIME_MS, json_number, loads, show

FORMAT = "fio"
DEFAULT_SCENARIO = "fio-import"
DIRECTIONS = ("read", "write", "trim")
MAX_DEPTH = 16  # fio's json+ output nests 6 levels deep (jobs, job, direction, clat_ns, bins)
_SIZE = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*([kmgtp]?)(i?)(b?)\s*$", re.I)
# a line that opens the document (any line ending; a byte order mark allowed)
_DOC_START = re.compile(r"(?:\A|(?<=[\r\n]))\ufeff?\{")
# fio's latency tables, newest first, and their unit in ms
_LATENCY = (("clat_ns", 1e-6), ("clat", 1e-3), ("lat_ns", 1e-6), ("lat", 1e-3))


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and ("fio version" in doc or (
        isinstance(doc.get("jobs"), list) and any(isinstance(j, dict) and "jobname" in j for j in doc["jobs"])))


def load_json(text: str, name: str) -> Any:
    """fio may print notes before the JSON document; start at the first line that opens it."""
    start = next((m.start() for m in _DOC_START.finditer(text)), None)
    if start is None:
        raise SdbenchError(f"{name}: no JSON document found: not fio JSON output")
    try:
        return loads(text[start:].lstrip("\ufeff"), name, max_depth=MAX_DEPTH, what="fio JSON")
    except json.JSONDecodeError as e:
        raise SdbenchError(f"{name}: truncated or invalid fio JSON ({e.msg} at line {e.lineno})") from None


def parse_size(text: str, kb_base: int = 1024) -> int | None:
    """fio sizes: ``4k``, ``1M``, ``4KiB``, ``512``; k = 1024 unless kb_base=1000."""
    m = _SIZE.match(str(text))
    if not m:
        return None
    mult = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}[m.group(2).lower()]
    base = 1024 if (m.group(3) or kb_base == 1024) else 1000
    whole, _, frac = m.group(1).partition(".")
    # exact: float would turn a long digit string into inf
    return (int(whole + frac) * base ** mult) // 10 ** len(frac)


class _Layout:
    """Typed access to the document; every refusal names the field."""

    def __init__(self, name: str) -> None:
        self.where = f"{name}: unexpected fio JSON"

    def fail(self, path: str, v: Any, expected: str) -> SdbenchError:
        kind = f"text {show(v)}" if isinstance(v, str) else show(v) if isinstance(v, (dict, list, bool)) or \
            v is None else f"the number {show(v)}"
        return SdbenchError(f"{self.where}: {path} is {kind}, not {expected}")

    def table(self, d: dict[str, Any], key: str, path: str) -> dict[str, Any] | None:
        if key not in d:
            return None
        v = d[key]
        if not isinstance(v, dict):
            raise self.fail(path, v, "a table")
        return v

    def text(self, d: dict[str, Any], key: str, path: str, default: str | None = None) -> str | None:
        if key not in d:
            return default
        v = d[key]
        if not isinstance(v, str):
            raise self.fail(path, v, "text")
        return v

    def number(self, d: dict[str, Any], key: str, path: str, *, integer: bool = False,
               hi: float = MAX_FIGURE) -> Any:
        """A number >= 0, or None when the field is absent."""
        if key not in d:
            return None
        return json_number(d[key], path, self.where, integer=integer, hi=hi)

    def options(self, d: dict[str, Any], key: str, path: str) -> dict[str, Any]:
        """fio's option tables: names to (text) values."""
        opts = self.table(d, key, path)
        for k, v in (opts or {}).items():
            if isinstance(v, (dict, list)) or v is None:
                raise self.fail(f"{path}.{k}", v, "an option value")
            if not isinstance(v, (str, bool)):
                json_number(v, f"{path}.{k}", self.where, lo=-float("inf"), integer=isinstance(v, int))
        return dict(opts or {})


def parse(text: str, *, name: str = "fio.json", scenario: str | None = None) -> list[RunRecord]:
    doc = load_json(text, name)
    if not looks_like(doc):
        raise SdbenchError(f"{name}: JSON but not fio output (no 'fio version' or jobs)")
    lay = _Layout(name)
    version = lay.text(doc, "fio version", "'fio version'", "")
    gopts = lay.options(doc, "global options", "'global options'")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise lay.fail("jobs", jobs, "a list") if "jobs" in doc else SdbenchError(f"{lay.where}: no jobs list")
    rows: list[Row] = []
    meta_rows: dict[str, Any] = {}
    warnings: list[str] = []
    job_opts: dict[str, Any] = {}
    for i, job in enumerate(jobs):
        at = f"jobs[{i}]"
        if not isinstance(job, dict):
            raise lay.fail(at, job, "a table")
        jname = lay.text(job, "jobname", f"{at}.jobname", "job") or ""
        if not jname.strip():
            raise SdbenchError(f"{lay.where}: {at}.jobname is empty")
        if jname in job_opts:
            raise SdbenchError(f"{name}: two jobs are named {show(jname, 40)} (numjobs without group_reporting?): "
                               "their rows could not be told apart; give the jobs distinct names or rerun fio "
                               "with --group_reporting")
        own = lay.options(job, "job options", f"{at}.'job options'")
        job_opts[jname] = own
        opts = {**gopts, **own}
        error = lay.number(job, "error", f"{at}.error", integer=True) or 0
        if error:
            warnings.append(f"{jname}: fio reported error {error}")
        kb_base = 1000 if str(opts.get("kb_base", "1024")) == "1000" else 1024
        bss = _block_sizes(opts, kb_base)
        bs_given = _block_size_options(opts)
        rw = str(opts.get("rw") or opts.get("readwrite") or "read")
        stats = {d: lay.table(job, d, f"{at}.{d}") for d in DIRECTIONS}
        if all(st is None for st in stats.values()):
            raise SdbenchError(f"{lay.where}: {at} ({show(jname, 40)}) has no read, write or trim statistics")
        moved = False
        for d, st in stats.items():
            if st is None:
                continue
            ios = lay.number(st, "total_ios", f"{at}.{d}.total_ios", integer=True) or 0
            io_bytes = lay.number(st, "io_bytes", f"{at}.{d}.io_bytes", integer=True, hi=MAX_ROW_BYTES) or 0
            if not ios and not io_bytes:
                continue
            moved = True
            label = f"{jname} {d}"
            if bss[d] is None and d in bs_given:
                warnings.append(f"{label}: block size option {show(bs_given[d])} not understood")
            row, summary = _row(lay, f"{at}.{d}", label, d, st, ios, io_bytes, bss[d], rw, warnings)
            rows.append(row)
            meta_rows[label] = {**summary, "rw": rw, "iodepth": opts.get("iodepth"), "direct": opts.get("direct")}
        if not moved and not error:
            warnings.append(f"{jname}: the job moved no data")
    if not rows:
        raise SdbenchError(f"{name}: fio JSON has no job that moved data")
    meta: dict[str, Any] = {"imported_from": name, "import_format": FORMAT, "rows": meta_rows}
    disks = _disks(lay, doc)
    if disks:
        meta["device"] = {"name": disks[0], "disks": disks}
    stack = {"importer": FORMAT, "fio_version": version, "global_options": gopts, "jobs": job_opts}
    return [RunRecord(scenario=scenario or DEFAULT_SCENARIO, stack=stack, clock="wall", rows=tuple(rows),
                      protocol="fio", source="imported", metadata=meta, warnings=tuple(warnings))]


def _disks(lay: _Layout, doc: dict[str, Any]) -> list[str]:
    if "disk_util" not in doc:
        return []
    util = doc["disk_util"]
    if not isinstance(util, list):
        raise lay.fail("disk_util", util, "a list")
    names = []
    for i, d in enumerate(util):
        if not isinstance(d, dict):
            raise lay.fail(f"disk_util[{i}]", d, "a table")
        n = lay.text(d, "name", f"disk_util[{i}].name")
        if n:
            names.append(n)
    return names


def _block_size_options(opts: dict[str, Any]) -> dict[str, str]:
    """Per-direction block size option text from ``bs`` (``4k`` or ``64k,4k[,4k]``), or read_bs/write_bs/trim_bs."""
    given: dict[str, str] = {}
    bs = str(opts.get("bs") or opts.get("blocksize") or "")
    if bs:
        parts = bs.split(",")
        for i, d in enumerate(DIRECTIONS):
            given[d] = parts[min(i, len(parts) - 1)] or parts[0]
    for d in DIRECTIONS:
        if opts.get(f"{d}_bs"):
            given[d] = str(opts[f"{d}_bs"])
    return given


def _block_sizes(opts: dict[str, Any], kb_base: int) -> dict[str, int | None]:
    """Per-direction block size in bytes; None where not given or not usable (a range, 0, absurdly large)."""
    out: dict[str, int | None] = dict.fromkeys(DIRECTIONS)
    for d, s in _block_size_options(opts).items():
        size = parse_size(s, kb_base)
        out[d] = size if size is not None and 1 <= size <= MAX_ROW_BYTES else None
    return out


def _latency(lay: _Layout, st: dict[str, Any], at: str) -> tuple[dict[str, Any], float, str] | None:
    """clat (or lat) statistics and their scale to ms: fio 3 in ns (clat_ns), fio 2 in µs (clat)."""
    for key, scale in _LATENCY:
        v = lay.table(st, key, f"{at}.{key}")
        if v is not None and "mean" in v:
            return v, scale, f"{at}.{key}"
    return None


def _latency_us(lay: _Layout, st: dict[str, Any], at: str, ios: int) -> dict[str, Any]:
    """clat summary in µs, in the shape of sdbench's latency summaries (plus every percentile fio printed)."""
    lat = _latency(lay, st, at)
    if not lat:
        return {"count": 0}
    s, k, at = lat
    us = k * 1000  # fio unit -> µs
    n = lay.number(s, "N", f"{at}.N", integer=True)
    out: dict[str, Any] = {"count": n or ios, "kind": "clat"}
    for key in ("min", "max", "mean"):
        v = lay.number(s, key, f"{at}.{key}")
        if v is not None:
            out[f"{key}_us"] = float(v) * us
    sd = lay.number(s, "stddev", f"{at}.stddev")
    if sd is not None:
        out["stdev_us"] = float(sd) * us
    pct = lay.table(s, "percentile", f"{at}.percentile") or {}
    for p, v in pct.items():
        try:
            pf = float(p) if len(p) < 40 else -1.0
        except ValueError:
            pf = -1.0
        if not 0.0 < pf <= 100.0:
            raise SdbenchError(f"{lay.where}: {at}.percentile has the key {show(p)}, not a percentage")
        out[f"p{pf:g}_us".replace(".", "_")] = float(json_number(v, f"{at}.percentile.{p}", lay.where,
                                                                hi=MAX_FIGURE)) * us
    return out


def _row(lay: _Layout, at: str, label: str, op: str, st: dict[str, Any], ios: int, io_bytes: int,
         bs: int | None, rw: str, warnings: list[str]) -> tuple[Row, dict[str, Any]]:
    if io_bytes < 1:
        raise SdbenchError(f"{lay.where}: {at}.io_bytes is 0 for {ios} I/Os")
    if bs is None:
        bs = io_bytes // ios if ios else 0
        warnings.append(f"{label}: block size not in the job options; using io_bytes / I/Os = {bs} bytes")
    bw_bytes = lay.number(st, "bw_bytes", f"{at}.bw_bytes")
    bw_kib = lay.number(st, "bw", f"{at}.bw")
    bw = float(bw_bytes) if bw_bytes is not None else float(bw_kib or 0) * 1024  # fio 2: KiB/s
    runtime_ms = float(lay.number(st, "runtime", f"{at}.runtime", hi=MAX_TIME_MS) or 0)
    if runtime_ms <= 0:
        if bw <= 0:
            raise SdbenchError(f"{label}: neither runtime nor bandwidth in the fio JSON")
        runtime_ms = io_bytes / bw * 1000.0
        if runtime_ms > MAX_TIME_MS:
            raise SdbenchError(f"{lay.where}: {at}: {io_bytes} bytes at {bw:g} bytes/s would take more than a year")
        warnings.append(f"{label}: no runtime in the JSON; derived from bytes and bandwidth")
    runtime_ns = round(runtime_ms * 1e6)
    if runtime_ns < 1:
        raise SdbenchError(f"{lay.where}: {at}: a runtime of {runtime_ms:g} ms is below fio's resolution")
    iops = float(lay.number(st, "iops", f"{at}.iops") or 0.0)
    if iops <= 0 and ios:
        iops = ios / (runtime_ms / 1000.0)
        warnings.append(f"{label}: no IOPS in the JSON; derived from I/Os and runtime")
    random = rw.startswith("rand") or rw == "trimwrite"
    unit = "IOPS" if random else "MiB/s"
    row = make_row(label, op, io_bytes, [runtime_ns], unit=unit,
                   value_fn=(lambda r: iops) if random else (lambda r: r.mib_s))
    summary = {"ops": ios, "bytes": io_bytes, "bs_bytes": bs, "runtime_s": runtime_ms / 1000.0, "iops": iops,
               "bw_bytes_s": bw, "lat": _latency_us(lay, st, at, ios)}
    return row, summary
