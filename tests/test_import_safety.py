"""`sdbench import` as a validating parser: bad files, bad figures, garbled or hostile input.

Each importer either returns runs whose every figure is finite, of the right
sign and within what SQLite stores, or raises SdbenchError with one line; never
another exception, never part of a file.
"""
from __future__ import annotations

import codecs
import json
import math
import os
import re
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sdbench.importers as importers
from sdbench.cli import main
from sdbench.errors import SdbenchError
from sdbench.importers import parse_file, parse_text, read_text
from sdbench.store import open_store

DATA = Path(__file__).parent / "data"
ESPIDF = (DATA / "espidf_esp32_sdmmc.log").read_text()
FIO = (DATA / "fio_sdcard.json").read_text()
SDFAT = (DATA / "sdfat_bench_esp32.txt").read_text()
FIO_DOC = json.loads(FIO[FIO.index("{"):])
INT64 = 2**63 - 1
# one ESP-IDF result line of the sample, to garble
ESP_ROW = next(ln for ln in ESPIDF.splitlines() if ln.startswith("[SD FATFS: write tiny size"))
PROPS = settings(max_examples=120, derandomize=True, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- what every accepted run must satisfy ---------------------------------------------------------

def _fits(v: Any, path: str = "") -> None:
    """Every number in a record as SQLite and strict JSON hold it."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        if isinstance(v, str):
            v.encode("utf-8")
        return
    if isinstance(v, int):
        assert -(2**63) <= v <= INT64, path
    elif isinstance(v, float):
        assert math.isfinite(v), path
    elif isinstance(v, dict):
        for k, x in v.items():
            assert isinstance(k, str), path
            _fits(x, f"{path}.{k}")
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _fits(x, f"{path}[{i}]")
    else:
        raise AssertionError(f"{path}: {type(v).__name__}")


def assert_sane(runs: list) -> None:
    assert runs
    for run in runs:
        doc = run.to_dict()
        json.dumps(doc, allow_nan=False)
        _fits(doc)
        labels = [r.label for r in run.rows]
        assert run.rows and len(set(labels)) == len(labels)
        for r in run.rows:
            assert isinstance(r.label, str) and r.label.strip()
            assert type(r.bytes) is int and 0 <= r.bytes <= INT64
            assert type(r.runs) is int and 1 <= r.runs <= INT64
            assert math.isfinite(r.time_ms) and r.time_ms > 0
            assert all(math.isfinite(s) and s > 0 for s in r.samples_ms)
            assert not r.samples_ms or len(r.samples_ms) == r.runs
            assert math.isfinite(r.mib_s) and r.mib_s >= 0
            assert r.value is None or (math.isfinite(r.value) and r.value >= 0)
            assert r.reported_bytes is None or (type(r.reported_bytes) is int and 0 <= r.reported_bytes <= INT64)


def parse_or_refuse(text: str, fmt: str | None) -> None:
    """The property: runs that are sane, or SdbenchError with one line; nothing else."""
    try:
        _, runs = parse_text(text, fmt, name="mutated")
    except SdbenchError as e:
        msg = str(e)
        assert msg and "\n" not in msg and "\r" not in msg, msg
        return
    assert_sane(runs)


def refused(text: str, fmt: str | None, match: str) -> str:
    with pytest.raises(SdbenchError, match=match) as ei:
        parse_text(text, fmt, name="x.log")
    assert "\n" not in str(ei.value)
    return str(ei.value)


# -- regressions: each of these crashed or was stored as a valid row ------------------------------

def _esp_row(ms: str = "0.118", size: str = "0.25", runs: str = "10") -> str:
    """The sample log with its 'SD FATFS: write tiny size' row printed with other figures."""
    line = re.sub(r"\(10x\)\s+0\.118 ms\s+0\.25 kB", f"({runs}x) {ms:>8} ms {size:>8} kB", ESP_ROW)
    return ESPIDF.replace(ESP_ROW, line)


def _fio(mutate) -> str:
    doc = json.loads(json.dumps(FIO_DOC))
    mutate(doc)
    return json.dumps(doc)


def _set(path: str, value: Any):
    """A mutation setting ``a.b[0].c`` in the fio document."""
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", path)]

    def mutate(doc: dict) -> None:
        for k in keys[:-1]:
            doc = doc[k]
        doc[keys[-1]] = value
    return mutate


@pytest.mark.parametrize("text,fmt,match", [
    # SdFat: BUF_SIZE 0 was a ZeroDivisionError; FILE_SIZE_MB 0 stored rows of 0 bytes in 0 ms
    (SDFAT.replace("BUF_SIZE = 512", "BUF_SIZE = 0"), None, r"x.log:16: buffer size \(bytes\) 0 is out of range"),
    (SDFAT.replace("FILE_SIZE_MB = 5", "FILE_SIZE_MB = 0"), None, r":15: file size \(MB\) 0 is out of range"),
    # a 20-digit FILE_SIZE_MB was an OverflowError in the store
    (SDFAT.replace("FILE_SIZE_MB = 5", "FILE_SIZE_MB = 99999999999999999999"), None, "out of range"),
    (SDFAT.replace("BUF_SIZE = 512", "BUF_SIZE = 6000000"), None, "larger than the file"),
    # a speed so high or so low that the pass takes 0 ms or centuries
    (SDFAT.replace("2850.63,", "99999999999999,"), None, "write pass of 0 ms"),
    (SDFAT.replace("2850.63,", "0.0000001,"), None, "must be between 1 ms and a year"),
    (SDFAT.replace("2850.63,", "9" * 400 + ","), None, "not a finite number"),
    (SDFAT.replace(",9120,", "," + "9" * 30 + ","), None, r"max latency .* out of range"),
    (SDFAT.replace(",9120,", "," + "9" * 5000 + ","), None, "out of range"),
    # a second bench run whose card or settings differ was merged into the first
    (SDFAT + SDFAT.replace("SC32G", "SD64G"), None, "mixes bench runs"),
    (SDFAT.replace("FILE_SIZE_MB = 5", "FILE_SIZE_MB = 5\nFILE_SIZE_MB = 8"), None, "mixes bench runs"),
    # a second run cut off after its write passes was merged into the first (a partial import)
    (SDFAT + SDFAT.split("Starting read test")[0], None, "no final 'Done' line after line"),
    (SDFAT.replace("\nStarting read test", "\nwrite speed and latency\nspeed,max,min,avg\nKB/Sec,usec,usec,usec\n"
                   "1.0,2,3,4\nStarting read test"), None, "a second write section"),
    (SDFAT.split("Starting read test")[0] + "Done\n" + SDFAT, None, "has no read passes"),
    # pass lines that start with a sign or a word were skipped, importing the other passes only
    # (Arduino prints "inf"/"ovf" for a speed it cannot show: a pass of 0 ms)
    (SDFAT.replace("2850.63,9120", "-2850.63,9120"), None, r":22: result line is cut off or garbled"),
    (SDFAT.replace("2850.63,9120", "inf,9120"), None, r":22: result line is cut off or garbled: 'inf,"),
    (SDFAT.replace("2850.63,9120", "ovf,9120"), None, "cut off or garbled"),
    (SDFAT.replace("2850.63,9120", "2850.63,-9120"), None, "cut off or garbled"),
    (_esp_row(ms="nan"), None, r"bad mean time \(ms\) 'nan'"),
    (_esp_row(ms="inf"), None, "bad mean time"),
    (_esp_row(ms="9" * 400), None, "not a finite number"),
    # negative printed sizes were accepted
    (_esp_row(size="-0.25"), None, r"size \(kB\) '-0.25' is out of range"),
    # a run count beyond int64 was an OverflowError in the store; 5000 digits a ValueError
    (_esp_row(runs="99999999999999999999999"), None, "run count .* out of range"),
    (_esp_row(runs="9" * 5000), None, "run count .* out of range"),
    (_esp_row(runs="0"), None, "run count 0 is out of range"),
    # a target size of 0 was reported as a truncated log, a huge one as missing rows
    (ESPIDF.replace("target size 65536 bytes", "target size 0 bytes"), None, r"target size \(bytes\) 0"),
    (ESPIDF.replace("target size 65536 bytes", "target size 99999999999999999999999 bytes"), None,
     "target size .* out of range"),
    # numbers in the card information and log facts: stored beyond int64, or crashed
    (ESPIDF.replace("capacity=124735488", "capacity=" + "9" * 30), None, "card CSD field capacity"),
    (ESPIDF.replace("capacity=124735488", "capacity=" + "9" * 5000), None, "card CSD field capacity"),
    (ESPIDF.replace("60906MB", "9" * 30 + "MB"), None, r"card size \(MB\)"),
    (ESPIDF.replace("40.00 MHz (limit", "40.0.0 MHz (limit"), None, "bad card clock"),
    (ESPIDF.replace("40.00 MHz (limit", "9" * 400 + " MHz (limit"), None, "card clock"),
    (ESPIDF.replace("cluster size 65536 bytes", "cluster size 99999999999999999999999 bytes"), None,
     "cluster_bytes .* out of range"),
    (ESPIDF.replace("cluster size 65536 bytes", "cluster size 0 bytes"), None, "cluster_bytes 0 is out of range"),
    # rows of labels the importer does not know: a negative size was stored, a huge one overflowed
    ("[foo write] (10x)    1.000 ms    -1.00 kB   1.000 MB/s\n", "espidf", r"size \(kB\) '-1.00' is out of range"),
    ("[foo write] (10x)    1.000 ms    " + "9" * 30 + ".00 kB   1.000 MB/s\n", "espidf", "out of range"),
    ("[     ] (10x)    1.000 ms    1.00 kB   1.000 MB/s\n", "espidf", "without a label"),
    ("[foo\x07write] (10x)    1.000 ms    1.00 kB   1.000 MB/s\n", "espidf", "control character"),
    # the capture ended right after the benchmark started again: the second run was silently dropped
    (ESPIDF + ESPIDF[:ESPIDF.index("\n", ESPIDF.index("Starting benchmark")) + 1], None,
     "started again but the log ends before its first result"),
    # fio: nesting made json recurse until RecursionError
    ('{"fio version": "fio-3.33", "jobs": ' + "[" * 100_000 + "]" * 100_000 + "}", None, "nested 100001 levels deep"),
    ('{"fio version": "fio-3.33", "jobs": [{"jobname": "a", "x": ' + "[" * 5000 + "]" * 5000 + "}]}", "fio",
     "nested 5003 levels deep"),
    ('{"fio version": "fio-3.33", "jobs": [{"jobname": "a", "x": ' + "[" * 20 + "]" * 20 + "}]}", "fio",
     r"nested 23 levels deep \(at most 16"),
    # a 5000-digit integer literal made json raise ValueError
    (FIO.replace('"io_bytes" : 67108864', '"io_bytes" : ' + "9" * 5000), None, "number that cannot be read"),
    # negative and huge figures were stored; 1e400 (inf) and NaN crashed or were stored
    (_fio(_set("jobs[0].write.io_bytes", -5)), None, r"jobs\[0\]\.write\.io_bytes -5 is out of range"),
    (_fio(_set("jobs[0].write.io_bytes", 10**30)), None, r"io_bytes \(a 31-digit integer\) is out of range"),
    (_fio(_set("jobs[0].write.total_ios", 10**30)), None, "total_ios .* out of range"),
    (_fio(_set("jobs[0].write.runtime", -5)), None, r"jobs\[0\]\.write\.runtime -5 is out of range"),
    (_fio(_set("jobs[0].write.runtime", 1e-300)), None, "below fio's resolution"),
    (_fio(_set("jobs[0].write.runtime", 1e300)), None, "runtime .* out of range"),
    (FIO.replace('"runtime" : 5404', '"runtime" : 1e400'), None, "runtime inf is not a finite number"),
    (FIO.replace('"runtime" : 5404', '"runtime" : NaN'), None, "runtime nan is not a finite number"),
    (FIO.replace('"iops" : 11.843262', '"iops" : NaN'), None, r"write\.iops nan is not a finite number"),
    (FIO.replace('"iops" : 11.843262', '"iops" : -Infinity'), None, "iops -inf is not a finite number"),
    (_fio(_set("jobs[0].write.io_bytes", 0)), None, "io_bytes is 0 for 64 I/Os"),
    # garbage types: one line naming the field, not a Python exception text (or a silent skip)
    (_fio(_set("jobs[0].write.runtime", "abc")), None, r"jobs\[0\]\.write\.runtime is text 'abc', not a number"),
    (_fio(_set("jobs[0].write.runtime", None)), None, r"jobs\[0\]\.write\.runtime is null, not a number"),
    (_fio(_set("jobs[0].write.io_bytes", True)), None, "io_bytes is true, not a number"),
    (_fio(_set("jobs[0].write", [1, 2])), None, r"jobs\[0\]\.write is a list, not a table"),
    (_fio(_set("jobs", {"a": 1})), None, "jobs is a table, not a list"),
    (_fio(lambda d: d["jobs"].append("x")), None, r"jobs\[2\] is text 'x', not a table"),
    (_fio(_set("jobs[0].job options", [1])), None, r"jobs\[0\]\.'job options' is a list, not a table"),
    (_fio(_set("jobs[0].job options.bs", {"x": 1})), None, r"'job options'\.bs is a table"),
    (_fio(_set("global options", [1])), None, "'global options' is a list, not a table"),
    (_fio(_set("fio version", ["x"])), None, "'fio version' is a list, not text"),
    (_fio(_set("jobs[0].jobname", 10**30)), None, r"jobname is the number \(a 31-digit integer\), not text"),
    (_fio(_set("jobs[0].jobname", " ")), None, "jobname is empty"),
    (_fio(_set("jobs[0].write.clat_ns.mean", "x")), None, r"clat_ns\.mean is text 'x', not a number"),
    (_fio(_set("jobs[0].write.clat_ns", "x")), None, r"write\.clat_ns is text 'x', not a table"),
    (_fio(_set("jobs[0].write.clat_ns.percentile", [1])), None, "percentile is a list, not a table"),
    (_fio(_set("jobs[0].write.clat_ns.percentile", {"abc": 1})), None, "the key 'abc', not a percentage"),
    (_fio(_set("jobs[0].write.clat_ns.percentile", {"150": 1})), None, "the key '150', not a percentage"),
    (_fio(_set("disk_util", {"name": "x"})), None, "disk_util is a table, not a list"),
    (_fio(_set("disk_util", [7])), None, r"disk_util\[0\] is the number 7, not a table"),
    # a job without statistics was skipped, importing the other jobs only
    (_fio(lambda d: [d["jobs"][1].pop(k) for k in ("read", "write", "trim")]), None,
     r"jobs\[1\] \('rand-read-4k'\) has no read, write or trim statistics"),
    # the same job name twice gave two rows of one label
    (_fio(lambda d: d["jobs"].append(d["jobs"][0])), None, "two jobs are named 'seq-write'"),
    ('{"fio version": "fio-3.33"}', "fio", "no jobs list"),
    # text from the input in a message must not break it into lines; labels must be storable text
    (FIO.replace('"direct" : "1"', '"dir\\nect" : NaN'), None, r"'global options'\.dir\\nect nan is not a finite"),
    (FIO.replace('"jobname" : "seq-write"', '"jobname" : "seq\\nwrite"'), None, "the label holds a control character"),
    (FIO.replace('"jobname" : "seq-write"', '"jobname" : "seq\\ud800"'), None, "not valid Unicode"),
])
def test_bad_figures_and_layouts_are_refused(text, fmt, match):
    refused(text, fmt, match)


def _row(**kw: Any) -> Any:
    from sdbench.records import Row

    base = dict(label="w", op="write", bytes=4096, runs=1, samples_ms=(1.0,), time_ms=1.0, time_ms_median=1.0,
                time_ms_min=1.0, time_ms_max=1.0, time_ms_stdev=0.0, mib_s=3.9)
    return Row(**{**base, **kw})


@pytest.mark.parametrize("row,meta,match", [
    (_row(time_ms=float("nan")), {}, r"time_ms: expected a finite number, got nan"),
    (_row(time_ms=0.0), {}, r"time_ms: 0.0 is outside time_ms_min..time_ms_max"),
    (_row(samples_ms=(-1.0,)), {}, r"samples_ms\[0\]: expected a number from 0"),
    (_row(samples_ms=(1.0, 1.0)), {}, "2 samples for 1 runs"),
    (_row(bytes=2**64), {}, r"bytes: expected an integer from 0 to 2\^63-1"),
    (_row(bytes=2**61), {}, r"row 'w': bytes .* is out of range"),
    (_row(bytes=-1), {}, "bytes: expected an integer from 0 .* got -1"),
    (_row(runs=0), {}, "runs: expected an integer from 1 .* got 0"),
    (_row(reported_bytes=-5), {}, "reported_bytes: .* got -5"),
    (_row(value=float("inf")), {}, "value: expected a finite number, got inf"),
    (_row(mib_s="fast"), {}, "mib_s: expected a number, got 'fast'"),
    (_row(time_ms=4e10, time_ms_max=4e10, time_ms_min=4e10, time_ms_median=4e10, samples_ms=(4e10,)), {},
     "time_ms .* out of range"),
    (_row(label=" "), {}, "a row without a label"),
    (_row(counters={"ops": 2**70}), {}, "counters.ops: expected an integer"),
    (_row(), {"x": float("nan")}, "metadata.x: expected a finite number"),
    (_row(), {"x": {1: 2}}, "keys must be strings"),
    (_row(), {"x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}, "nested more than 32 levels"),
])
def test_the_last_check_catches_what_a_parser_let_through(row, meta, match):
    from sdbench.importers.validate import check_runs
    from sdbench.records import RunRecord

    run = RunRecord(scenario="s", stack={}, clock="wall", rows=(row,), metadata=meta)
    with pytest.raises(SdbenchError, match=match):
        check_runs([run], "x")
    with pytest.raises(SdbenchError, match="two rows are labelled 'w'"):
        check_runs([RunRecord(scenario="s", stack={}, clock="wall", rows=(_row(), _row()))], "x")


def test_unusable_block_size_falls_back_with_a_warning():
    # a bs fio would not accept (0, a range, absurdly large) is only metadata: the row stands
    for bs in ("0", "4k-64k", "9" * 400, "99999999999p"):
        _, [run] = parse_text(_fio(_set("jobs[0].job options.bs", bs)), name="x.json")
        assert any("block size option" in w for w in run.warnings), bs
        assert run.metadata["rows"]["seq-write write"]["bs_bytes"] == (64 << 20) // 64
    assert importers.fio.parse_size("9" * 30 + "p") == int("9" * 30) * 1024**5  # exact, not via float


def test_missing_runtime_and_iops_are_derived():
    def strip(d: dict) -> None:
        d["jobs"][1]["read"]["runtime"] = 0
        del d["jobs"][1]["read"]["iops"]
    _, [run] = parse_text(_fio(strip), name="x.json")
    row = run.row("rand-read-4k read")
    assert row.time_ms == pytest.approx(209326080 / 6976830 * 1000)
    assert row.value == pytest.approx(51105 / (row.time_ms / 1000))
    assert any("derived from I/Os" in w for w in run.warnings)


def test_a_job_that_moved_nothing_is_a_warning():
    def idle(d: dict) -> None:
        for k in ("io_bytes", "total_ios"):
            d["jobs"][1]["read"][k] = 0
    _, [run] = parse_text(_fio(idle), name="x.json")
    assert [r.label for r in run.rows] == ["seq-write write"]
    assert "rand-read-4k: the job moved no data" in run.warnings


def test_two_sdfat_runs_of_one_card_and_setting_are_kept():
    _, [run] = parse_text(SDFAT + SDFAT, name="b.txt")
    assert [r.runs for r in run.rows] == [4, 4]
    assert_sane([run])


@pytest.mark.parametrize("text", [ESPIDF, FIO, SDFAT])
def test_line_endings_unicode_and_byte_order_marks(text):
    _, base = parse_text(text, name="x")
    for variant in (text.replace("\n", "\r\n"), text.replace("\n", "\r"), "\ufeff" + text):
        _, runs = parse_text(variant, name="x")
        assert [r.rows for r in runs] == [r.rows for r in base]


def test_unicode_labels_and_zero_size_rows_of_unknown_labels():
    # sdbench's own mount/open rows print 0.00 kB: no data moved, which is not an error
    text = ("[Ünïcødé ✓ write] (3x)    1.500 ms     4.00 kB      2.604 MB/s\n"
            "[mount] (1x)   12.000 ms     0.00 kB      0.000 MB/s\n"
            "[weird] (1x)    1.000 ms    -0.00 kB      0.000 MB/s\n")
    _, [run] = parse_text(text, "espidf", name="x")
    assert [(r.label, r.bytes, r.mib_s) for r in run.rows] == [
        ("Ünïcødé ✓ write", 4096, pytest.approx(4096 / 2**20 / 0.0015)), ("mount", 0, 0.0), ("weird", 0, 0.0)]
    assert_sane([run])


@pytest.mark.parametrize("line", [
    "x" * (10 << 20),                        # a 10 MB line of noise
    "[a" * (1 << 20),                        # many row heads without ']': was quadratic (minutes)
    "[foo" + " " * (1 << 20) + "x",          # label padding that never closes: was quadratic
    "[A (1x)" * (1 << 18),
    "I (1) example: " * (1 << 16),           # the 'unmounted' search: was quadratic
    "CSD: " + "a" * (1 << 20),               # card fields: was quadratic
])
def test_long_lines_cost_linear_time(line):
    t = time.monotonic()
    for fmt in (None, "espidf", "sdfat"):
        try:
            parse_text(ESPIDF + line + "\n", fmt, name="x")
        except SdbenchError:
            pass
    assert time.monotonic() - t < 8


def test_json_nesting_is_measured_outside_strings_in_linear_time():
    from sdbench.importers.validate import json_depth

    assert json_depth('{"a": "[[[{{", "b": [1, {"c": "\\"]]"}]}') == 3
    assert json_depth('{"unterminated": "\\"\\"[[[') == 1
    t = time.monotonic()
    assert json_depth('{"a": "' + '\\"' * (4 << 20)) == 1   # a regex that backtracks would take hours
    with pytest.raises(SdbenchError, match="arrays and objects"):
        json_depth("[]," * 2_000_000)
    assert time.monotonic() - t < 8


def test_sdbench_json_nesting_is_bounded_before_parsing():
    doc = '{"format_version": 1, "runs": [{"stack": ' + "[" * 50_000 + "]" * 50_000 + "}]}"
    refused(doc, None, "nested 50003 levels deep")
    refused(doc, "json", "nested 50003 levels deep")


# -- files -----------------------------------------------------------------------------------------

def _cli(capsys, *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _guarded(fn, timeout: float = 10.0):
    """Run ``fn`` in a thread: a call that blocks fails the test instead of hanging the suite."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    return th, box


def _release(fifo: Path) -> None:
    """Let a reader blocked on ``fifo`` go (it sees end of file)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def test_cli_refuses_a_fifo_promptly(capsys, tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    th, box = _guarded(lambda: _cli(capsys, "import", fifo, "--db", tmp_path / "r.sqlite"))
    if th.is_alive():
        _release(fifo)
        th.join(5)
        pytest.fail("importing a FIFO blocked")
    code, out, err = box["result"]
    assert code == 2 and out == "" and err == f"error: {fifo} is a named pipe (FIFO), not a results file\n"


def test_a_path_swapped_for_a_fifo_after_stat_does_not_hang(tmp_path, monkeypatch):
    fifo, decoy = tmp_path / "log.txt", tmp_path / "decoy.txt"
    os.mkfifo(fifo)
    decoy.write_text(SDFAT)

    class Swapped:  # os as importers sees it: stat answers for the regular file that was there before
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def stat(path, *a, **kw):
            return os.stat(decoy)
    monkeypatch.setattr(importers, "os", Swapped())
    th, box = _guarded(lambda: read_text(fifo))
    if th.is_alive():
        _release(fifo)
        th.join(5)
        pytest.fail("opening a FIFO blocked")
    assert isinstance(box.get("error"), SdbenchError)
    assert "changed while it was being opened: it is now a named pipe (FIFO)" in str(box["error"])


def test_a_file_that_grows_past_the_limit_is_refused(monkeypatch):
    # /proc files are regular files of size 0 that hold more: like a log still growing
    proc = Path("/proc/self/maps")
    if not proc.exists():
        pytest.skip("no /proc")
    assert os.stat(proc).st_size == 0
    monkeypatch.setattr(importers, "MAX_BYTES", 64)
    with pytest.raises(SdbenchError, match="too large for a results log"):
        read_text(proc)


def test_permission_and_vanishing_files(tmp_path, monkeypatch):
    f = tmp_path / "log.txt"
    f.write_text(SDFAT)

    class Denied:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def open(path, *a, **kw):
            raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(importers, "os", Denied())
    with pytest.raises(SdbenchError, match="log.txt: permission denied$"):
        read_text(f)
    monkeypatch.undo()
    with pytest.raises(SdbenchError, match="no such file"):
        read_text(tmp_path / "nope.txt")
    with pytest.raises(SdbenchError, match="not a usable file name"):
        read_text(Path("a\x00b"))


def test_utf16_and_bom_files_are_read(tmp_path):
    for text in (FIO, SDFAT, ESPIDF):
        base = parse_text(text, name="x")[1]
        for i, data in enumerate((codecs.BOM_UTF16_LE + text.encode("utf-16-le"),
                                  codecs.BOM_UTF16_BE + text.encode("utf-16-be"), codecs.BOM_UTF8 + text.encode())):
            f = tmp_path / f"log{i}"
            f.write_bytes(data)
            assert [r.rows for r in parse_file(f)[1]] == [r.rows for r in base]


def _socket_path(tmp_path: Path) -> Path:
    p = tmp_path / "s"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(p))
    except OSError:
        pytest.skip("cannot bind a unix socket here")
    finally:
        s.close()
    return p


@pytest.mark.parametrize("kind", ["dir", "socket", "chardev", "large", "binary", "controls", "utf16",
                                  "deep", "sdfat-buf0", "fio-huge", "newline-name"])
def test_cli_refuses_with_one_line_and_stores_nothing(capsys, tmp_path, kind):
    db = tmp_path / "r.sqlite"
    path = tmp_path / "in.txt"
    expect = {
        "dir": "is a directory, not a results file", "socket": "is a socket, not a results file",
        "chardev": "is a character device, not a results file", "large": "too large for a results log",
        "binary": "is a binary file", "controls": "is a binary file", "utf16": "is a binary file",
        "deep": "nested", "sdfat-buf0": "buffer size", "fio-huge": "out of range",
        "newline-name": r"bad\\nname.log is a binary file",
    }[kind]
    if kind == "dir":
        path = tmp_path
    elif kind == "socket":
        path = _socket_path(tmp_path)
    elif kind == "chardev":
        path = Path("/dev/zero")  # would never end if it were read
        if not stat.S_ISCHR(os.stat(path).st_mode):
            pytest.skip("no /dev/zero")
    elif kind == "large":
        with open(path, "wb") as f:
            f.truncate(importers.MAX_BYTES + 1)  # sparse: refused from its size, before any read
    elif kind == "binary":
        path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    elif kind == "controls":
        path.write_bytes(bytes(range(1, 32)) * 200)
    elif kind == "utf16":
        path.write_bytes(codecs.BOM_UTF16_LE + b"\x00\xd8")  # a lone surrogate
    elif kind == "deep":
        path.write_text('{"fio version": "3", "jobs": ' + "[" * 3000 + "]" * 3000 + "}")
    elif kind == "sdfat-buf0":
        path.write_text(SDFAT.replace("BUF_SIZE = 512", "BUF_SIZE = 0"))
    elif kind == "fio-huge":
        path.write_text(_fio(_set("jobs[1].read.io_bytes", 10**19)))
    elif kind == "newline-name":
        path = tmp_path / "bad\nname.log"
        path.write_bytes(b"\x00\x01")
    code, out, err = _cli(capsys, "import", path, "--db", db)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and re.search(expect, err), err
    with open_store(db) as s:
        assert s.list_runs() == []


def test_cli_all_or_nothing_on_a_partly_valid_log(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    two = tmp_path / "two.log"
    # two runs, the second with a garbled figure: neither is stored
    two.write_text(ESPIDF + "\n" + _esp_row(runs="0"))
    code, out, err = _cli(capsys, "import", two, "--db", db)
    assert code == 2 and err.count("\n") == 1 and "run count 0" in err
    with open_store(db) as s:
        assert s.list_runs() == []
    two.write_text(ESPIDF + "\n" + ESPIDF)
    code, out, err = _cli(capsys, "import", two, "--db", db)
    assert code == 0 and len(out.splitlines()) == 4


# -- properties: mutated samples are imported sanely or refused ------------------------------------

BAD_NUMBERS = ["0", "-0", "-0.000", "-1", "-5.5", "nan", "-nan", "inf", "1e400", "1e-400", "9" * 25, "9" * 400,
               "0.0000001", "", "x", "1.0.0", "+5", "0x10", "١٢", "1e5", ".5", "5.", "00000000000000000000001"]
_NUM = re.compile(r"\d+(?:\.\d+)?")


def _replace_number(line: str, k: int, token: str) -> str:
    found = list(_NUM.finditer(line))
    if not found:
        return line
    m = found[k % len(found)]
    return line[:m.start()] + token + line[m.end():]


mutation = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("dup"), st.integers(0, 10**6)),
    st.tuples(st.just("swap"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("number"), st.integers(0, 10**6), st.integers(0, 50),
              st.one_of(st.sampled_from(BAD_NUMBERS), st.text(max_size=12),
                        st.integers(-(10**30), 10**30).map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(repr))),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.text(max_size=40)),
    st.tuples(st.just("truncate"), st.floats(0.02, 1)),
    st.tuples(st.just("bytes"), st.integers(0, 10**6), st.binary(max_size=30)),
)


def mutate_lines(text: str, ops: list, result_lines_only: bool) -> str:
    lines = text.split("\n")
    rows = [i for i, ln in enumerate(lines) if _NUM.search(ln)] if result_lines_only else list(range(len(lines)))
    for op in ops:
        if not lines:
            break
        pick = (lambda n: rows[n % len(rows)] if rows and rows[-1] < len(lines) else n % len(lines))
        kind = op[0]
        if kind == "delete":
            del lines[pick(op[1])]
        elif kind == "dup":
            i = pick(op[1])
            lines.insert(i, lines[i])
        elif kind == "swap":
            i, j = pick(op[1]), pick(op[2])
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "number":
            i = pick(op[1])
            lines[i] = _replace_number(lines[i], op[2], op[3])
        elif kind == "insert":
            lines.insert(pick(op[1]), op[2])
        elif kind == "bytes":
            i = pick(op[1])
            lines[i] = lines[i][: len(lines[i]) // 2] + op[2].decode("utf-8", "replace") + lines[i][len(lines[i]) // 2:]
        elif kind == "truncate":
            joined = "\n".join(lines)
            lines = joined[: int(len(joined) * op[1])].split("\n")
    return "\n".join(lines)


@PROPS
@given(st.lists(mutation, min_size=1, max_size=4), st.booleans(), st.sampled_from([None, "espidf"]))
def test_mutated_espidf_logs(ops, rows_only, fmt):
    parse_or_refuse(mutate_lines(ESPIDF, ops, rows_only), fmt)


@PROPS
@given(st.lists(mutation, min_size=1, max_size=4), st.booleans(), st.sampled_from([None, "sdfat"]))
def test_mutated_sdfat_output(ops, rows_only, fmt):
    parse_or_refuse(mutate_lines(SDFAT, ops, rows_only), fmt)


# only the rows of the ESP-IDF format, so that mutations hit figures rather than the boot noise
ESP_ROWS = "".join(ln + "\n" for ln in ESPIDF.splitlines() if ln.startswith("["))


@PROPS
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_espidf_rows(ops):
    parse_or_refuse(mutate_lines(ESP_ROWS, ops, True), "espidf")


def _paths(doc: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, at + (i,))
    return out


FIO_PATHS = _paths(FIO_DOC)[1:]
json_leaf = st.one_of(
    st.none(), st.booleans(), st.sampled_from([0, -1, -0.0, 1e-300, 1e300, 2**63, 2**64, -(2**63) - 1, 10**40]),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10),
    st.sampled_from(["4k", "0", "-1", "nan", "1e400", "randread", "1000", "64k,4k", ""]))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=6)
_set_value = st.tuples(st.just("set"), st.integers(0, 10**6), json_value)
json_mutation = st.one_of(
    _set_value, _set_value, _set_value,   # mostly wrong values and types
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("deep"), st.integers(0, 10**6), st.sampled_from([1, 2, 5, 10, 12, 20, 3000])),
)


def mutate_fio(ops: list) -> str:
    doc = json.loads(json.dumps(FIO_DOC))
    deep: list[int] = []
    for op in ops:
        paths = _paths(doc)[1:]
        if op[0] == "dupjob":
            if isinstance(doc.get("jobs"), list) and doc["jobs"]:
                job = json.loads(json.dumps(doc["jobs"][op[1] % len(doc["jobs"])]))
                if isinstance(job, dict):
                    job["jobname"] = f"{job.get('jobname')}-again"
                doc["jobs"].append(job)
            continue
        if not paths:
            break
        path = paths[op[1] % len(paths)]
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if op[0] == "set":
            parent[path[-1]] = op[2]
        elif op[0] == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = f"__deep{len(deep)}__"
            deep.append(op[2])
    text = json.dumps(doc, indent=1)
    for i, k in enumerate(deep):
        text = text.replace(f'"__deep{i}__"', "[" * k + "]" * k)
    return text


@PROPS
@given(st.lists(json_mutation, min_size=1, max_size=4), st.sampled_from([None, "fio"]), st.booleans())
def test_mutated_fio_documents(ops, fmt, more_jobs):
    if more_jobs:  # a third job (a copy under another name) for the mutations to hit
        ops = [("dupjob", 0)] + ops
    parse_or_refuse(mutate_fio(ops), fmt)


@PROPS
@given(st.lists(mutation, min_size=1, max_size=3), st.sampled_from([None, "fio"]))
def test_mutated_fio_text(ops, fmt):
    parse_or_refuse(mutate_lines(FIO, ops, True), fmt)


@settings(max_examples=150, derandomize=True, deadline=None, database=None)
@given(st.binary(max_size=300), st.sampled_from([None, *importers.FORMATS]))
def test_random_bytes(data, fmt):
    parse_or_refuse(data.decode("utf-8", "replace"), fmt)


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(st.binary(min_size=1, max_size=2000))
def test_random_files_are_read_or_refused(tmp_path_factory, data):
    f = tmp_path_factory.mktemp("rnd") / "in.bin"
    f.write_bytes(data)
    try:
        text = read_text(f)
    except SdbenchError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(text, str)
    parse_or_refuse(text, None)


def test_zero_ms_in_an_espidf_log_is_kept_with_a_warning():
    # below the example's 1 µs resolution it prints 0.000 (or -0.000): a real, if unknown, speed
    for ms in ("0.000", "-0.000"):
        _, [run] = parse_text(_esp_row(ms=ms), name="log.txt")
        row = run.row("SD FATFS: write tiny size")
        assert row.time_ms == 0.0 and str(row.time_ms) == "0.0" and row.mib_s == 0.0
        assert any("0.000 ms; speed unknown" in w for w in run.warnings)
