"""Importing fio JSON output."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdbench.errors import SdbenchError
from sdbench.importers import fio, parse_text
from sdbench.records import MIB

TEXT = (Path(__file__).parent / "data" / "fio_sdcard.json").read_text()


def test_jobs_become_rows():
    fmt, [run] = parse_text(TEXT, name="fio.json")
    assert fmt == "fio" and run.protocol == "fio" and run.source == "imported"
    assert [r.label for r in run.rows] == ["seq-write write", "rand-read-4k read"]
    w, r = run.rows
    # as sdbench's own fio rows: all bytes of the job, one sample = the runtime
    assert (w.op, w.bytes, w.runs, w.samples_ms) == ("write", 64 << 20, 1, (5404.0,))
    assert w.time_ms == 5404.0 and w.mib_s == pytest.approx(64 / 5.404)
    assert w.mib_s == pytest.approx(12418560 / MIB, rel=1e-3) and (w.unit, w.value) == ("MiB/s", w.mib_s)
    assert (r.op, r.bytes, r.runs, r.unit) == ("read", 209326080, 1, "IOPS")
    assert r.value == pytest.approx(1703.327889)
    m = run.metadata["rows"]["rand-read-4k read"]
    assert (m["ops"], m["bs_bytes"], m["iodepth"], m["rw"]) == (51105, 4096, "4", "randread")
    assert m["bw_bytes_s"] == 6976830 and m["iops"] == pytest.approx(1703.327889)
    lat = m["lat"]
    assert lat["mean_us"] == pytest.approx(2338.510214166) and lat["p99_us"] == pytest.approx(3653.632)
    assert lat["p50_us"] == pytest.approx(2244.608) and lat["p99_9_us"] == pytest.approx(8454.144)
    assert lat["count"] == 51105 and lat["min_us"] == pytest.approx(801.233)
    assert run.metadata["device"]["name"] == "mmcblk0"
    assert run.stack["fio_version"] == "fio-3.33" and run.stack["global_options"]["direct"] == "1"


def test_fio2_latency_in_microseconds_and_no_bs():
    doc = {"fio version": "fio-2.2.10", "jobs": [{"jobname": "j", "job options": {"rw": "read"}, "read": {
        "io_bytes": 8192 * 10, "bw": 4000, "iops": 500.0, "runtime": 20, "total_ios": 10,
        "clat": {"min": 1500, "max": 2500, "mean": 2000.0, "stddev": 100.0,
                 "percentile": {"50.000000": 1984}}}}]}
    [run] = fio.parse(json.dumps(doc), name="old.json")
    [row] = run.rows
    assert row.bytes == 81920 and row.time_ms == 20.0
    m = run.metadata["rows"]["j read"]
    assert m["bs_bytes"] == 8192 and m["lat"]["mean_us"] == pytest.approx(2000.0)
    assert m["lat"]["p50_us"] == pytest.approx(1984.0)
    assert any("block size" in w for w in run.warnings)


@pytest.mark.parametrize("text,msg", [
    (TEXT[: len(TEXT) // 2], "truncated or invalid fio JSON"),
    ('{"fio version": "fio-3.33", "jobs": []}', "no job that moved data"),
    ('{"fio version": "fio-3.33", "jobs": [{"jobname": "x", "read": {"total_ios": "many"}}]}', "unexpected fio"),
    ('{"hello": 1}', "not fio output"),
    ("no json here", "no JSON document"),
])
def test_bad_fio_input(text, msg):
    with pytest.raises(SdbenchError, match=msg):
        fio.parse(text, name="x.json")


@pytest.mark.parametrize("text,size", [("4k", 4096), ("1M", 1 << 20), ("4KiB", 4096), ("512", 512), ("1m", 1 << 20)])
def test_parse_size(text, size):
    assert fio.parse_size(text) == size


def test_split_block_sizes():
    bss = fio._block_sizes({"bs": "64k,4k"}, 1024)
    assert bss == {"read": 65536, "write": 4096, "trim": 4096}
