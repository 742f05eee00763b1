"""fio ``--output-format=json`` (or ``json+``) results.

Rows follow sdbench's own fio-like workload (sdbench.workloads.fio), so an
imported fio run and a measured one compare label by label: one row per job
and direction that moved data, labelled ``<job> <read|write|trim>``, with
``bytes`` = bytes the job moved in that direction, ``runs`` = 1 and one sample =
fio's runtime in ms, so ``mib_s`` is fio's bandwidth.  The reported figure
(``unit``/``value``) is fio's IOPS for random patterns, MiB/s otherwise.  Per
row, ``metadata["rows"][label]`` keeps I/O count, block size, IOPS, bandwidth
and the completion-latency (clat) summary and percentiles in µs.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..errors import SdbenchError
from ..records import Row, RunRecord, make_row

FORMAT = "fio"
DEFAULT_SCENARIO = "fio-import"
DIRECTIONS = ("read", "write", "trim")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.I)


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and ("fio version" in doc or (
        isinstance(doc.get("jobs"), list) and any(isinstance(j, dict) and "jobname" in j for j in doc["jobs"])))


def load_json(text: str, name: str) -> Any:
    """fio may print notes before the JSON document; start at the first line that opens it."""
    start = next((m.start() for m in re.finditer(r"(?m)^\{", text)), None)
    if start is None:
        raise SdbenchError(f"{name}: no JSON document found: not fio JSON output")
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as e:
        raise SdbenchError(f"{name}: truncated or invalid fio JSON ({e.msg} at line {e.lineno})") from None


def parse_size(text: str, kb_base: int = 1024) -> int | None:
    """fio sizes: ``4k``, ``1M``, ``4KiB``, ``512``; k = 1024 unless kb_base=1000."""
    m = _SIZE.match(str(text))
    if not m:
        return None
    mult = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}[m.group(2).lower()]
    base = 1024 if (m.group(3) or kb_base == 1024) else 1000
    return int(float(m.group(1)) * base ** mult)


def _block_sizes(opts: dict[str, Any], kb_base: int) -> dict[str, int | None]:
    """Per-direction block size from ``bs`` (``4k`` or ``64k,4k[,4k]``), or read_bs/write_bs/trim_bs."""
    out: dict[str, int | None] = dict.fromkeys(DIRECTIONS)
    bs = str(opts.get("bs") or opts.get("blocksize") or "")
    if bs:
        parts = [p for p in bs.split(",")]
        for i, d in enumerate(DIRECTIONS):
            p = parts[min(i, len(parts) - 1)] or parts[0]
            out[d] = parse_size(p, kb_base)
    for d in DIRECTIONS:
        if opts.get(f"{d}_bs"):
            out[d] = parse_size(opts[f"{d}_bs"], kb_base)
    return out


def _latency_ms(d: dict[str, Any]) -> tuple[dict[str, Any], float] | None:
    """clat (or lat) statistics and their scale to ms: fio 3 in ns (clat_ns), fio 2 in µs (clat)."""
    for key, scale in (("clat_ns", 1e-6), ("clat", 1e-3), ("lat_ns", 1e-6), ("lat", 1e-3)):
        v = d.get(key)
        if isinstance(v, dict) and v.get("mean") is not None:
            return v, scale
    return None


def parse(text: str, *, name: str = "fio.json", scenario: str | None = None) -> list[RunRecord]:
    doc = load_json(text, name)
    if not looks_like(doc):
        raise SdbenchError(f"{name}: JSON but not fio output (no 'fio version' or jobs)")
    gopts = doc.get("global options") or {}
    rows: list[Row] = []
    meta_rows: dict[str, Any] = {}
    warnings: list[str] = []
    try:
        for job in doc["jobs"]:
            jname = str(job.get("jobname", "job"))
            opts = {**gopts, **(job.get("job options") or {})}
            if job.get("error"):
                warnings.append(f"{jname}: fio reported error {job['error']}")
            kb_base = 1000 if str(opts.get("kb_base", "1024")) == "1000" else 1024
            bss = _block_sizes(opts, kb_base)
            rw = str(opts.get("rw") or opts.get("readwrite") or "read")
            for d in DIRECTIONS:
                st = job.get(d)
                if not isinstance(st, dict) or not (st.get("total_ios") or st.get("io_bytes")):
                    continue
                label = f"{jname} {d}"
                row, summary = _row(label, d, st, bss[d], rw, warnings)
                rows.append(row)
                meta_rows[label] = {**summary, "rw": rw, "iodepth": opts.get("iodepth"),
                                    "direct": opts.get("direct")}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SdbenchError(f"{name}: unexpected fio JSON layout ({type(e).__name__}: {e})") from None
    if not rows:
        raise SdbenchError(f"{name}: fio JSON has no job that moved data")
    disks = [d.get("name") for d in doc.get("disk_util") or [] if isinstance(d, dict) and d.get("name")]
    meta: dict[str, Any] = {"imported_from": name, "import_format": FORMAT, "rows": meta_rows}
    if disks:
        meta["device"] = {"name": disks[0], "disks": disks}
    stack = {"importer": FORMAT, "fio_version": doc.get("fio version", ""), "global_options": gopts,
             "jobs": {str(j.get("jobname")): j.get("job options") or {} for j in doc["jobs"]}}
    return [RunRecord(scenario=scenario or DEFAULT_SCENARIO, stack=stack, clock="wall", rows=tuple(rows),
                      protocol="fio", source="imported", metadata=meta, warnings=tuple(warnings))]


def _bw_bytes(st: dict[str, Any]) -> float:
    if st.get("bw_bytes") is not None:
        return float(st["bw_bytes"])
    return float(st.get("bw", 0)) * 1024  # fio 2: KiB/s


def _latency_us(st: dict[str, Any]) -> dict[str, Any]:
    """clat summary in µs, in the shape of sdbench's latency summaries (plus every percentile fio printed)."""
    lat = _latency_ms(st)
    if not lat:
        return {"count": 0}
    s, k = lat
    us = k * 1000  # fio unit -> µs
    out: dict[str, Any] = {"count": int(s.get("N") or st.get("total_ios") or 0), "kind": "clat"}
    for key in ("min", "max", "mean"):
        if s.get(key) is not None:
            out[f"{key}_us"] = float(s[key]) * us
    if s.get("stddev") is not None:
        out["stdev_us"] = float(s["stddev"]) * us
    for p, v in (s.get("percentile") or {}).items():
        out[f"p{float(p):g}_us".replace(".", "_")] = float(v) * us
    return out


def _row(label: str, op: str, st: dict[str, Any], bs: int | None, rw: str,
         warnings: list[str]) -> tuple[Row, dict[str, Any]]:
    ios = int(st.get("total_ios") or 0)
    io_bytes = int(st.get("io_bytes") or 0)
    if bs is None:
        bs = io_bytes // ios if ios else 0
        warnings.append(f"{label}: block size not in the job options; using io_bytes / I/Os = {bs} bytes")
    bw = _bw_bytes(st)
    runtime_ms = float(st.get("runtime") or 0)
    if runtime_ms <= 0:
        if bw <= 0:
            raise SdbenchError(f"{label}: neither runtime nor bandwidth in the fio JSON")
        runtime_ms = io_bytes / bw * 1000.0
        warnings.append(f"{label}: no runtime in the JSON; derived from bytes and bandwidth")
    iops = float(st.get("iops") or 0.0)
    random = rw.startswith("rand") or rw == "trimwrite"
    unit = "IOPS" if random else "MiB/s"
    row = make_row(label, op, io_bytes, [round(runtime_ms * 1e6)], unit=unit,
                   value_fn=(lambda r: iops) if random else (lambda r: r.mib_s))
    summary = {"ops": ios, "bytes": io_bytes, "bs_bytes": bs, "runtime_s": runtime_ms / 1000.0, "iops": iops,
               "bw_bytes_s": bw, "lat": _latency_us(st)}
    return row, summary
