"""fio's outputs from a finished run: ``--output-format=json``, ``json+``, ``normal`` and ``terse`` (v3).

The JSON document has fio's layout and field names, as fio 3.x writes them:
per job (or per reporting group with ``group_reporting``) ``read``, ``write``,
``trim`` and ``sync`` with bytes, bandwidth (B/s and KiB/s), IOPS, runtime (ms),
``slat_ns``/``clat_ns``/``lat_ns`` (min, max, mean, stddev, N, percentiles;
json+ adds fio's histogram ``bins``), bandwidth and IOPS samples (min, max,
mean, deviation, count) and the share of the group's bandwidth; CPU use,
I/O depth tables, latency tables, the latency target and steady state; then
the global options and the disks' utilisation.  Tools that read fio's JSON
(fio-plot, fio's own fio_jsonplus_clat2csv) read these.  The normal report
and terse lines follow fio's text layouts.
"""
from __future__ import annotations

import datetime
import math
import os
import stat as stat_mod
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .jobs import DIRECTIONS, JobConfig
from .stats import DEPTH_LEVELS, LAT_LABELS, DirStats, FioHist, JobStats, sample_stats, window_rates

FIO_VERSION = "fio-3.33"     # the layout followed (the version field says sdbench's)
#: fio's "eta" field once a run is over
_ETA_DONE = 2147483647


@dataclass
class Report:
    """One job (or group) as fio reports it."""
    name: str
    groupid: int
    job: JobConfig
    stats: JobStats
    options: tuple[tuple[str, str], ...] = ()
    error: int = 0
    jobs: int = 1
    description: str = ""


@dataclass
class Disk:
    name: str
    before: list[int]
    after: list[int] = field(default_factory=list)
    elapsed_ms: float = 0.0


# ---- disk utilisation ---------------------------------------------------------------------------------------
def _sys_block(devno: int) -> Path | None:
    p = Path(f"/sys/dev/block/{os.major(devno)}:{os.minor(devno)}")
    return p if p.exists() else None


def disks_of(path: str) -> list[Disk]:
    """The block device under ``path`` (the device itself, or the filesystem's for a file), with its counters."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    devno = st.st_rdev if stat_mod.S_ISBLK(st.st_mode) else st.st_dev
    sysp = _sys_block(devno)
    if sysp is None:
        return []
    try:
        counters = [int(x) for x in sysp.joinpath("stat").read_text().split()]
    except (OSError, ValueError):
        return []
    return [Disk(sysp.resolve().name, counters)]


def finish_disks(disks: list[Disk], elapsed_ms: float) -> None:
    for d in disks:
        try:
            d.after = [int(x) for x in Path(f"/sys/class/block/{d.name}/stat").read_text().split()]
        except (OSError, ValueError):
            d.after = list(d.before)
        d.elapsed_ms = elapsed_ms


def disk_json(d: Disk) -> dict[str, Any]:
    delta = [a - b for a, b in zip(d.after, d.before)] if d.after else [0] * len(d.before)
    delta += [0] * (11 - len(delta))
    util = min(100.0, 100.0 * delta[9] / d.elapsed_ms) if d.elapsed_ms else 0.0
    return {"name": d.name, "read_ios": delta[0], "write_ios": delta[4], "read_merges": delta[1],
            "write_merges": delta[5], "read_ticks": delta[3], "write_ticks": delta[7], "in_queue": delta[10],
            "util": util}


# ---- numbers ------------------------------------------------------------------------------------------------
def _runtime_ms(st: JobStats, d: DirStats | None) -> int:
    return round(st.runtime_ns / 1e6) if d is not None and d.ios else 0


def _lat(h: FioHist, percentiles: bool, plist: tuple[float, ...], plus: bool) -> dict[str, Any]:
    out: dict[str, Any] = h.summary()
    if percentiles and h.n:
        out["percentile"] = h.percentiles(plist)
        if plus:
            out["bins"] = h.bins()
    return out


def _empty_lat() -> dict[str, Any]:
    return {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}


def direction_json(r: Report, kind: str, agg_bytes_s: float, plus: bool) -> dict[str, Any]:
    st, job = r.stats, r.job
    d = st.dirs.get(kind)
    runt = _runtime_ms(st, d)
    nbytes = d.bytes if d else 0
    ios = d.ios if d else 0
    bw_bytes = 1000 * nbytes // runt if runt else 0
    out: dict[str, Any] = {
        "io_bytes": nbytes, "io_kbytes": nbytes >> 10, "bw_bytes": bw_bytes, "bw": bw_bytes // 1024,
        "iops": 1000.0 * ios / runt if runt else 0.0, "runtime": runt, "total_ios": ios,
        "short_ios": d.short_ios if d else 0, "drop_ios": 0}
    if d is None:
        out.update({"slat_ns": _empty_lat(), "clat_ns": _empty_lat(), "lat_ns": _empty_lat()})
    else:
        plist = job.percentile_list
        out["slat_ns"] = _lat(d.slat, job.slat_percentiles and not job.disable_slat, plist, plus) \
            if not job.disable_slat else _empty_lat()
        out["clat_ns"] = _lat(d.clat, job.clat_percentiles, plist, plus) if not job.disable_clat else _empty_lat()
        out["lat_ns"] = _lat(d.lat, job.lat_percentiles, plist, plus) if not job.disable_lat else _empty_lat()
    stop = st.stop_ns
    bw = sample_stats(window_rates(d.bw, stop, per_bytes=True) / 1024) if d is not None and not job.disable_bw \
        else sample_stats(np.zeros(0))
    iops = sample_stats(window_rates(d.iops, stop, per_bytes=False)) if d is not None and not job.disable_bw \
        else sample_stats(np.zeros(0))
    agg = 100.0 * bw["mean"] * 1024 / agg_bytes_s if agg_bytes_s and bw["samples"] else 0.0
    out.update({"bw_min": int(bw["min"]), "bw_max": int(bw["max"]), "bw_agg": min(agg, 100.0),
                "bw_mean": bw["mean"], "bw_dev": bw["dev"], "bw_samples": bw["samples"],
                "iops_min": int(iops["min"]), "iops_max": int(iops["max"]), "iops_mean": iops["mean"],
                "iops_stddev": iops["dev"], "iops_samples": iops["samples"]})
    return out


def _dist(counts: np.ndarray) -> list[float]:
    total = int(counts.sum())
    return [100.0 * int(c) / total if total else 0.0 for c in counts]


def mixed(r: Report) -> Report:
    """The report with every direction summed as one, fio's unified_rw_reporting ("mixed")."""
    st = r.stats
    m = JobStats(st.start_ns, bw_ms=st.bw_ms, iops_ms=st.iops_ms)
    m.measure_from, m.stop_ns = st.measure_from, st.stop_ns
    both = DirStats()
    for d in st.dirs.values():
        both.merge(d)
    if both.ios:
        m.dirs["mixed"] = both
    return Report(r.name, r.groupid, r.job, m, r.options, r.error, r.jobs, r.description)


def job_json(r: Report, group_agg: dict[str, float], elapsed_s: int, plus: bool) -> dict[str, Any]:
    st, job = r.stats, r.job
    out: dict[str, Any] = {"jobname": r.name, "groupid": r.groupid, "error": r.error, "eta": _ETA_DONE,
                           "elapsed": elapsed_s}
    if r.options:
        out["job options"] = dict(r.options)
    if job.unified_rw_reporting == "mixed":
        out["mixed"] = direction_json(mixed(r), "mixed", sum(group_agg.values()), plus)
    else:
        for kind in DIRECTIONS:
            out[kind] = direction_json(r, kind, group_agg.get(kind, 0.0), plus)
    out["sync"] = {"total_ios": 0, "lat_ns": _empty_lat()}
    if job.unified_rw_reporting == "both":
        out["mixed"] = direction_json(mixed(r), "mixed", sum(group_agg.values()), plus)
    wall_ms = max(1, round((st.stop_ns - st.start_ns) / 1e6))
    out["job_runtime"] = wall_ms
    out["usr_cpu"] = 100.0 * st.cpu["usr_s"] * 1000 / wall_ms
    out["sys_cpu"] = 100.0 * st.cpu["sys_s"] * 1000 / wall_ms
    out.update({"ctx": int(st.cpu["ctx"]), "majf": int(st.cpu["majf"]), "minf": int(st.cpu["minf"])})
    depth = _depth_dist(st)
    out["iodepth_level"] = {(str(lv) if lv < 64 else ">=64"): v for lv, v in zip(DEPTH_LEVELS, depth)}
    out["iodepth_submit"] = _submit_table(st.submit)
    out["iodepth_complete"] = _submit_table(st.complete)
    out.update(st.latency_tables())
    if job.continue_on_error != "none":
        out["total_err"] = st.errors
        out["first_error"] = st.first_error
    lt = st.latency_target
    out["latency_depth"] = lt["latency_depth"] if lt else job.iodepth
    out["latency_target"] = lt["latency_target"] if lt else 0
    out["latency_percentile"] = lt["latency_percentile"] if lt else job.latency_percentile
    out["latency_window"] = lt["latency_window"] if lt else 0
    if r.description:
        out["desc"] = r.description
    if st.steadystate is not None:
        out["steadystate"] = st.steadystate
    return out


def _depth_dist(st: JobStats) -> list[float]:
    if int(st.depth.sum()):
        return _dist(st.depth)
    # a synchronous engine: one I/O in flight each time
    return [100.0 if i == 0 else 0.0 for i in range(len(DEPTH_LEVELS))] if any(d.ios for d in st.dirs.values()) \
        else [0.0] * len(DEPTH_LEVELS)


def _submit_table(counts: np.ndarray) -> dict[str, float]:
    labels = ["0", "4", "8", "16", "32", "64", ">=64"]
    if not int(counts.sum()):
        return {lab: (100.0 if lab == "4" else 0.0) for lab in labels}
    return dict(zip(labels, _dist(counts)))


def group_aggregates(reports: list[Report]) -> dict[int, dict[str, float]]:
    """Per group and direction the aggregate bandwidth (B/s): its bytes over its longest runtime."""
    out: dict[int, dict[str, float]] = {}
    for gid in {r.groupid for r in reports}:
        members = [r for r in reports if r.groupid == gid]
        agg = {}
        for kind in DIRECTIONS:
            nbytes = sum(r.stats.dirs[kind].bytes for r in members if kind in r.stats.dirs)
            runt = max((_runtime_ms(r.stats, r.stats.dirs.get(kind)) for r in members), default=0)
            agg[kind] = 1000.0 * nbytes / runt if runt else 0.0
        out[gid] = agg
    return out


def fio_document(reports: list[Report], *, version: str, global_options: tuple[tuple[str, str], ...] = (),
                 disks: list[Disk] | None = None, started_s: float | None = None, plus: bool = False
                 ) -> dict[str, Any]:
    """fio's ``--output-format=json`` (``plus``: json+) document of a run."""
    now = time.time() if started_s is None else started_s
    aggs = group_aggregates(reports)
    elapsed = max(1, math.ceil(max((r.stats.stop_ns - r.stats.start_ns for r in reports), default=0) / 1e9))
    doc: dict[str, Any] = {"fio version": f"sdbench-{version}", "timestamp": int(now), "timestamp_ms": int(now * 1000),
                           "time": time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))}
    if global_options:
        doc["global options"] = dict(global_options)
    doc["jobs"] = [job_json(r, aggs.get(r.groupid, {}), elapsed, plus) for r in reports]
    if disks:
        doc["disk_util"] = [disk_json(d) for d in disks]
    return doc


# ---- terse --------------------------------------------------------------------------------------------------
def _terse_dir(r: Report, kind: str, agg_bytes_s: float) -> list[str]:
    st, job = r.stats, r.job
    d = st.dirs.get(kind)
    runt = _runtime_ms(st, d)
    nbytes, ios = (d.bytes, d.ios) if d else (0, 0)
    bw = (1000 * nbytes // runt) // 1024 if runt else 0
    iops = 1000 * ios // runt if runt else 0
    out = [str(nbytes >> 10), str(bw), str(iops), str(runt)]

    def lat(h: FioHist | None) -> list[str]:
        if h is None or not h.n:
            return ["0", "0", "0.000000", "0.000000"]
        return [str((h.h.min_ns or 0) // 1000), str((h.h.max_ns or 0) // 1000), f"{h.mean / 1000:f}",
                f"{h.stddev / 1000:f}"]
    out += lat(d.slat if d else None)
    out += lat(d.clat if d else None)
    hist = (d.lat if job.lat_percentiles else d.clat) if d else None
    pct = hist.percentiles(job.percentile_list) if hist is not None and hist.n and \
        (job.lat_percentiles or job.clat_percentiles) else {}
    items = list(pct.items())
    for i in range(20):
        out.append(f"{float(items[i][0]):f}%={items[i][1] // 1000}" if i < len(items) else "0%=0")
    out += lat(d.lat if d else None)
    if d is not None and not job.disable_bw:
        b = sample_stats(window_rates(d.bw, st.stop_ns, per_bytes=True) / 1024)
    else:
        b = sample_stats(np.zeros(0))
    if b["samples"]:
        agg = min(100.0, 100.0 * b["mean"] * 1024 / agg_bytes_s) if agg_bytes_s else 100.0
        out += [str(int(b["min"])), str(int(b["max"])), f"{agg:f}%", f"{b['mean']:f}", f"{b['dev']:f}"]
    else:
        out += ["0", "0", "0.000000%", "0.000000", "0.000000"]
    return out


def terse_lines(reports: list[Report], *, disks: list[Disk] | None = None, version: int = 3) -> list[str]:
    """fio's terse (``--minimal``) lines, version 3: one per job or group."""
    aggs = group_aggregates(reports)
    lines = []
    for r in reports:
        st = r.stats
        fields = [str(version), f"sdbench-{_version()}", r.name, str(r.groupid), str(r.error)]
        agg = aggs.get(r.groupid, {})
        if r.job.unified_rw_reporting == "mixed":
            fields += _terse_dir(mixed(r), "mixed", sum(agg.values()))
        else:
            for kind in ("read", "write"):
                fields += _terse_dir(r, kind, agg.get(kind, 0.0))
        if r.job.unified_rw_reporting == "both":
            fields += _terse_dir(mixed(r), "mixed", sum(agg.values()))
        wall_ms = max(1, round((st.stop_ns - st.start_ns) / 1e6))
        fields += [f"{100.0 * st.cpu['usr_s'] * 1000 / wall_ms:f}%", f"{100.0 * st.cpu['sys_s'] * 1000 / wall_ms:f}%",
                   str(int(st.cpu["ctx"])), str(int(st.cpu["majf"])), str(int(st.cpu["minf"]))]
        fields += [f"{v:3.1f}%" for v in _depth_dist(st)]
        tables = st.latency_tables()
        us = list(tables["latency_us"].values())
        us[0] += sum(tables["latency_ns"].values())  # terse folds the sub-microsecond ones into <=2 us
        fields += [f"{v:3.2f}%" for v in us]
        fields += [f"{v:3.2f}%" for v in tables["latency_ms"].values()]
        for dk in disks or []:
            j = disk_json(dk)
            fields += [j["name"], str(j["read_ios"]), str(j["write_ios"]), str(j["read_merges"]),
                       str(j["write_merges"]), str(j["read_ticks"]), str(j["write_ticks"]), str(j["in_queue"]),
                       f"{j['util']:3.2f}%"]
        if r.job.continue_on_error != "none":
            fields += [str(st.errors), str(st.first_error)]
        if r.description:
            fields.append(r.description)
        lines.append(";".join(fields))
    return lines


def _version() -> str:
    from ... import __version__

    return __version__


# ---- normal -------------------------------------------------------------------------------------------------
def _num(v: float, sig: int = 4) -> str:
    """fio's short numbers: 4 significant figures with k, M, G, T (powers of 1000)."""
    for unit in ("", "k", "M", "G", "T"):
        if abs(v) < 10000 or unit == "T":
            if unit == "" and float(v).is_integer():
                return f"{int(v)}"
            digits = max(0, sig - len(str(int(abs(v)))))
            return f"{v:.{digits}f}".rstrip("0").rstrip(".") + unit
        v /= 1000.0
    return str(v)


def _bytes_iec(n: float) -> str:
    """1984KiB, 58.7MiB ... (fio's IEC byte counts)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 10000 or unit == "TiB":
            return _num(n).rstrip("kMGT") + unit if n < 10000 else f"{n:.0f}{unit}"
        n /= 1024.0
    return f"{n}"


def _rate(bytes_s: float, unit_base: int = 0) -> str:
    """``58.7MiB/s (61.6MB/s)`` (``unit_base=1``: bits, ``62.3Mbit/s``)."""
    if unit_base == 1:
        v = bytes_s * 8
        for u in ("bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"):
            if v < 1000 or u == "Tbit/s":
                return f"{v:.3g}{u}" if v < 100 else f"{v:.0f}{u}"
            v /= 1000
        return f"{v}"
    def scale(v: float, base: int, units: tuple[str, ...]) -> str:
        for u in units:
            if v < 1000 or u == units[-1]:
                return f"{v:.3g}{u}" if v < 100 else f"{v:.0f}{u}"
            v /= base
        return f"{v}"
    return (f"{scale(bytes_s, 1024, ('B/s', 'KiB/s', 'MiB/s', 'GiB/s', 'TiB/s'))} "
            f"({scale(bytes_s, 1000, ('B/s', 'kB/s', 'MB/s', 'GB/s', 'TB/s'))})")


def _lat_unit(h: FioHist) -> tuple[str, float]:
    m = max(h.h.max_ns or 0, 1)
    if m >= 10_000_000_000:
        return "msec", 1e6
    if m >= 10_000_000:
        return "usec", 1e3
    return "nsec", 1.0


def normal_report(reports: list[Report], *, disks: list[Disk] | None = None) -> str:
    """fio's normal (human) report: per job the directions' figures, percentiles and tables, then each group's
    run status and the disks."""
    lines: list[str] = []
    aggs = group_aggregates(reports)
    for r in reports:
        st, job = r.stats, r.job
        when = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y")
        lines.append(f"{r.name}: (groupid={r.groupid}, jobs={r.jobs}): err={r.error:2d}: pid={os.getpid()}: {when}")
        if r.description:
            lines.append(f"  Description  : [{r.description}]")
        sig = job.significant_figures
        kinds: list[tuple[str, JobStats]] = []
        if job.unified_rw_reporting != "mixed":
            kinds += [(k, st) for k in DIRECTIONS]
        if job.unified_rw_reporting != "none":
            kinds.append(("mixed", mixed(r).stats))
        for kind, kst in kinds:
            d = kst.dirs.get(kind)
            if d is None or not d.ios:
                continue
            runt = _runtime_ms(kst, d)
            bps = 1000.0 * d.bytes / runt if runt else 0.0
            iops = 1000.0 * d.ios / runt if runt else 0.0
            lines.append(f"  {kind}: IOPS={_num(iops, sig)}, BW={_rate(bps, job.unit_base)}"
                         f"({_bytes_iec(d.bytes)}/{runt}msec)")
            for name, h in (("slat", d.slat), ("clat", d.clat), (" lat", d.lat)):
                if not h.n or (name == "slat" and job.disable_slat):
                    continue
                unit, div = _lat_unit(h)
                lines.append(f"    {name} ({unit}): min={_num((h.h.min_ns or 0) / div, sig)}, "
                             f"max={_num((h.h.max_ns or 0) / div, sig)}, avg={h.mean / div:.2f}, "
                             f"stdev={h.stddev / div:.2f}")
            h = d.lat if job.lat_percentiles else d.clat
            if h.n and (job.clat_percentiles or job.lat_percentiles):
                unit, div = _lat_unit(h)
                lines.append(f"    {'lat' if job.lat_percentiles else 'clat'} percentiles ({unit}):")
                pct = list(h.percentiles(job.percentile_list).items())
                for i in range(0, len(pct), 3):
                    cells = [f"{float(p):5.2f}th=[{int(v / div):7d}]" for p, v in pct[i:i + 3]]
                    lines.append("     | " + ", ".join(cells) + ("," if i + 3 < len(pct) else ""))
            b = sample_stats(window_rates(d.bw, kst.stop_ns, per_bytes=True) / 1024)
            if b["samples"]:
                agg = aggs.get(r.groupid, {}).get(kind, 0.0)
                share = min(100.0, 100.0 * b["mean"] * 1024 / agg) if agg else 100.0
                lines.append(f"   bw (  KiB/s): min={int(b['min'])}, max={int(b['max'])}, per={share:.2f}%, "
                             f"avg={b['mean']:.2f}, stdev={b['dev']:.2f}, samples={b['samples']}")
                io = sample_stats(window_rates(d.iops, kst.stop_ns, per_bytes=False))
                lines.append(f"   iops        : min={int(io['min'])}, max={int(io['max'])}, avg={io['mean']:.2f}, "
                             f"stdev={io['dev']:.2f}, samples={io['samples']}")
        tables = st.latency_tables()
        for key, unit in (("latency_ns", "nsec"), ("latency_us", "usec"), ("latency_ms", "msec")):
            cells = [f"{lab}={v:.2f}%" for lab, v in tables[key].items() if v >= 0.01]
            for i in range(0, len(cells), 5):
                lines.append(f"  lat ({unit})   : " + ", ".join(cells[i:i + 5]))
        wall_ms = max(1, round((st.stop_ns - st.start_ns) / 1e6))
        lines.append(f"  cpu          : usr={100.0 * st.cpu['usr_s'] * 1000 / wall_ms:.2f}%, "
                     f"sys={100.0 * st.cpu['sys_s'] * 1000 / wall_ms:.2f}%, ctx={int(st.cpu['ctx'])}, "
                     f"majf={int(st.cpu['majf'])}, minf={int(st.cpu['minf'])}")
        depth = _depth_dist(st)
        lines.append("  IO depths    : " + ", ".join(f"{lv if lv < 64 else '>=64'}={v:.1f}%"
                                                     for lv, v in zip(DEPTH_LEVELS, depth)))
        for label, counts in (("submit", st.submit), ("complete", st.complete)):
            table = _submit_table(counts)
            lines.append(f"     {label:<9}: " + ", ".join(f"{k}={v:.1f}%" for k, v in table.items()))
        totals = ",".join(str(st.dirs[k].ios if k in st.dirs else 0) for k in DIRECTIONS) + ",0"
        shorts = ",".join(str(st.dirs[k].short_ios if k in st.dirs else 0) for k in DIRECTIONS) + ",0"
        lines.append(f"     issued rwts: total={totals} short={shorts} dropped=0,0,0,0")
        lt = st.latency_target
        lines.append(f"     latency   : target={lt['latency_target'] if lt else 0}, "
                     f"window={lt['latency_window'] if lt else 0}, percentile="
                     f"{(lt['latency_percentile'] if lt else job.latency_percentile):.2f}%, "
                     f"depth={lt['latency_depth'] if lt else job.iodepth}")
        lines.append("")
    for gid in sorted({r.groupid for r in reports}):
        members = [r for r in reports if r.groupid == gid]
        lines.append(f"Run status group {gid} (all jobs):")
        for kind in DIRECTIONS:
            with_io = [r for r in members if kind in r.stats.dirs and r.stats.dirs[kind].ios]
            if not with_io:
                continue
            rates = []
            runs = []
            nbytes = 0
            for r in with_io:
                d = r.stats.dirs[kind]
                runt = _runtime_ms(r.stats, d)
                runs.append(runt)
                rates.append(1000.0 * d.bytes / runt if runt else 0.0)
                nbytes += d.bytes
            agg = aggs[gid][kind]
            lines.append(f"  {kind.upper():>5}: bw={_rate(agg)}, {_rate(min(rates)).split(' ')[0]}-"
                         f"{_rate(max(rates)).split(' ')[0]}, io={_bytes_iec(nbytes)}, "
                         f"run={min(runs)}-{max(runs)}msec")
        lines.append("")
    if disks:
        lines.append("Disk stats (read/write):")
        for dk in disks:
            j = disk_json(dk)
            lines.append(f"  {j['name']}: ios={j['read_ios']}/{j['write_ios']}, merge={j['read_merges']}/"
                         f"{j['write_merges']}, ticks={j['read_ticks']}/{j['write_ticks']}, in_queue={j['in_queue']}, "
                         f"util={j['util']:.2f}%")
    return "\n".join(lines) + "\n"


__all__ = ["Disk", "FIO_VERSION", "LAT_LABELS", "Report", "disks_of", "finish_disks", "fio_document",
           "normal_report", "terse_lines"]
