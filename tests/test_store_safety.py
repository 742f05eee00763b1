"""Bad input to the results JSON and the results store: one clear line, never a traceback, nothing altered.

The JSON reader is a validating parser; the store checks every record before it
saves it and, with its checksums, every run it reads back; runs keep their
status (complete, incomplete, failed) through export and import; files that
are not stores, stores of a newer schema and damaged stores are refused in one
line, and ``sdbench db check/repair/vacuum`` deal with damage.
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdbench import RESULTS_FORMAT_VERSION
from sdbench.cli import main
from sdbench.errors import SdbenchError
from sdbench.records import MAX_DEPTH, RecordError, Results, Row, RunRecord, check_run, make_row
from sdbench.store import ENV_VAR, open_store, repair_store
from sdbench.store import db as storedb
from sdbench.report.export import FORMATS, export

DATA = Path(__file__).parent / "data"
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# -- helpers ------------------------------------------------------------------------------------

def cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error(code, err, *needles, exit_code=2):
    assert code == exit_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def _stored(path: Path) -> list[int]:
    if not path.exists():
        return []
    with open_store(path, create=False) as s:
        return [r.id for r in s.list_runs()]


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _rows(scale: float = 1.0) -> tuple[Row, ...]:
    return (
        make_row("write 64k", "write", 65536, [round(6e6 * scale), round(6.2e6 * scale), round(5.9e6 * scale)],
                 counters={"writes": 3}, breakdown_ns={"bus": 2_000_000, "card": 1_000_000},
                 commands={"CMD25": 3}),
        make_row("read 64k", "read", 65536, [round(4e6 * scale), round(4.1e6 * scale)],
                 unit="MiB/s", value_fn=lambda r: r.mib_s),
        make_row("mount", "mount", 0, [round(12e6 * scale)]),
        Row(label="SD raw write [16 kB label]", op="write", bytes=65536, runs=10, samples_ms=(), time_ms=7.114,
            time_ms_median=None, time_ms_min=None, time_ms_max=None, time_ms_stdev=None,
            mib_s=(65536 / 2**20) / 0.007114, reported_bytes=16384),
    )


def _record(scenario: str = "card-a", scale: float = 1.0, **kw) -> RunRecord:
    return RunRecord(scenario=scenario, stack={"sd": {"bus": "sdmmc", "clock_hz": 40_000_000}, "parts": ["a"]},
                     clock="wall", rows=_rows(scale), seed=3, protocol="espidf", metadata={"device": {"name": "SD64G"}},
                     warnings=("w",), **kw)


def _document() -> dict:
    return Results(runs=(_record(), _record("card-b", 1.3, status="failed", status_reason="I/O error"))).to_dict()


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv(ENV_VAR, str(path))
    return path


def _exercise(results: Results) -> None:
    """What show, export, compare and report do with parsed records: none may raise."""
    from rich.console import Console

    from sdbench.compare import card_table, compare_runs
    from sdbench.report.html import ReportRun, render
    from sdbench.report.tables import card_table_view, comparison_table, flatten, rows_table, run_summary

    recs = list(results.runs)
    pairs = [(f"#{i + 1}", r) for i, r in enumerate(recs)]
    console = Console(file=io.StringIO(), width=200)
    for i, rec in pairs:
        run_summary(1, None, rec)
        flatten(rec.stack)
        flatten(rec.metadata)
        t = rows_table(rec)
        t.markdown()
        console.print(t.rich())
    numbered = [(i + 1, r) for i, r in enumerate(recs)]
    for fmt in FORMATS:
        out = export(numbered, fmt)
        if fmt == "json":
            assert Results.from_json(out).runs == results.runs
    if recs:
        cmp = compare_runs(pairs)
        comparison_table(cmp).markdown()
        for metric in ("reported", "ms", "mib_s"):
            card_table_view([n for n, _ in pairs], card_table(recs, metric)).markdown()
        if sum(len(r.rows) for r in recs) <= 40:
            render([ReportRun(n, r) for n, r in pairs])


# -- 1. the results JSON is a validating parser -------------------------------------------------

def _set(doc, path, value):
    *head, last = path
    for k in head:
        doc = doc[k]
    if value is _DELETE:
        del doc[last]
    else:
        doc[last] = value


_DELETE = object()


@pytest.mark.parametrize("path,value,where", [
    (("runs", 0, "rows", 2, "time_ms"), "12.0", "runs[0].rows[2].time_ms: expected a number"),
    (("runs", 0, "rows", 2, "time_ms"), float("nan"), "runs[0].rows[2].time_ms: expected a finite number"),
    (("runs", 0, "rows", 2, "time_ms"), float("inf"), "runs[0].rows[2].time_ms: expected a finite number"),
    (("runs", 0, "rows", 2, "time_ms"), -1.0, "runs[0].rows[2].time_ms: expected a number from 0"),
    (("runs", 0, "rows", 2, "time_ms"), 1e300, "runs[0].rows[2].time_ms: expected a number from 0"),
    (("runs", 0, "rows", 0, "bytes"), True, "runs[0].rows[0].bytes: expected an integer, got true"),
    (("runs", 0, "rows", 0, "bytes"), -5, "runs[0].rows[0].bytes: expected an integer from 0"),
    (("runs", 0, "rows", 0, "bytes"), 2**70, "runs[0].rows[0].bytes: expected an integer"),
    (("runs", 0, "rows", 0, "bytes"), 65536.0, "runs[0].rows[0].bytes: expected an integer"),
    (("runs", 0, "rows", 0, "runs"), 0, "runs[0].rows[0].runs: expected an integer from 1"),
    (("runs", 0, "rows", 0, "runs"), 7, "runs[0].rows[0].samples_ms: 3 samples for 7 runs"),
    (("runs", 0, "rows", 0, "samples_ms"), {"a": 1}, "runs[0].rows[0].samples_ms: expected a list"),
    (("runs", 0, "rows", 0, "samples_ms", 1), None, "runs[0].rows[0].samples_ms[1]: expected a number, got null"),
    (("runs", 0, "rows", 0, "counters"), [1, 2], "runs[0].rows[0].counters: expected an object, got a list"),
    (("runs", 0, "rows", 0, "counters", "writes"), 1.5, "runs[0].rows[0].counters.writes: expected an integer"),
    (("runs", 0, "rows", 0, "breakdown_ms", "bus"), "x", "runs[0].rows[0].breakdown_ms.bus: expected a number"),
    (("runs", 0, "rows", 0, "time_ms_min"), 100.0, "runs[0].rows[0].time_ms: "),
    (("runs", 0, "rows", 2, "mib_s"), 5.0, "runs[0].rows[2].mib_s: must be 0 when bytes or time_ms is 0"),
    (("runs", 0, "rows", 1, "label"), 12, "runs[0].rows[1].label: expected a string, got 12"),
    (("runs", 0, "rows", 1, "label"), "\ud800", "runs[0].rows[1].label: the string holds a lone surrogate"),
    (("runs", 0, "rows", 1, "op"), _DELETE, "runs[0].rows[1].op: missing"),
    (("runs", 0, "rows", 1), [], "runs[0].rows[1]: expected an object, got a list"),
    (("runs", 0, "rows"), {}, "runs[0].rows: expected a list, got an object"),
    (("runs", 0, "clock"), "sundial", "runs[0].clock: expected one of wall, virtual, got 'sundial'"),
    (("runs", 0, "source"), "guessed", "runs[0].source: expected one of measured, simulated, imported"),
    (("runs", 0, "status"), "done", "runs[0].status: expected one of complete, incomplete, failed"),
    (("runs", 0, "status_reason"), None, "runs[0].status_reason: expected a string, got null"),
    (("runs", 0, "seed"), 2**63, "runs[0].seed: expected an integer that fits in 64 bits"),
    (("runs", 0, "seed"), "7", "runs[0].seed: expected an integer"),
    (("runs", 0, "scenario"), "", "runs[0].scenario: must not be empty"),
    (("runs", 0, "stack"), [], "runs[0].stack: expected an object, got a list"),
    (("runs", 0, "stack", "sd", "clock_hz"), float("nan"), "runs[0].stack.sd.clock_hz: expected a finite number"),
    (("runs", 0, "metadata", "big"), 2**64, "runs[0].metadata.big: expected an integer that fits in 64 bits"),
    (("runs", 0, "metadata", "device"), "SD64G", "runs[0].metadata.device: expected an object"),
    (("runs", 0, "metadata", "sweep_id"), {"a": 1}, "runs[0].metadata.sweep_id: expected a string"),
    (("runs", 0, "warnings"), "careful", "runs[0].warnings: expected a list"),
    (("runs", 0, "warnings", 0), 3, "runs[0].warnings[0]: expected a string"),
    (("runs",), {"0": {}}, "runs: expected a list, got an object"),
    (("runs",), _DELETE, "runs: missing"),
    (("format_version",), "2", "format_version: expected a positive integer, got '2'"),
    (("format_version",), 1.0, "format_version: expected a positive integer"),
    (("format_version",), 0, "format_version: expected a positive integer"),
    (("format_version",), RESULTS_FORMAT_VERSION + 1,
     f"results format version {RESULTS_FORMAT_VERSION + 1} is newer than this sdbench understands"),
    (("sdbench_version",), 3, "sdbench_version: expected a string"),
])
def test_bad_documents_are_refused_naming_the_field(capsys, db, tmp_path, path, value, where):
    doc = _document()
    _set(doc, path, value)
    text = json.dumps(doc)
    with pytest.raises(SdbenchError) as e:
        Results.from_json(text)
    assert where in str(e.value) and "\n" not in str(e.value)
    f = tmp_path / "bad.json"
    f.write_text(text)
    code, out, err = cli(capsys, "import", f, "--format", "json")
    assert_one_error(code, err, f"bad.json: {where}")
    assert out == "" and _stored(db) == []


def test_deep_nesting_and_huge_numbers_are_one_line(capsys, db, tmp_path):
    for name, text, needle in (
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested"),
        ("deep-run.json", json.dumps({"format_version": 1, "runs": [[[[[]]]]]}), "runs[0]: expected an object"),
        ("digits.json", '{"format_version": 1, "runs": [], "x": ' + "9" * 5000 + "}", "thousands of digits"),
        ("list.json", "[1, 2]", "not an sdbench results document"),
    ):
        f = tmp_path / name
        f.write_text(text)
        code, _, err = cli(capsys, "import", f, "--format", "json")
        assert_one_error(code, err, needle)
    with pytest.raises(SdbenchError, match="nested too deeply"):
        Results.from_json("[" * 100_000 + "]" * 100_000)
    doc = _document()
    deep: dict = {}
    node = deep
    for _ in range(MAX_DEPTH + 5):
        node["k"] = {}
        node = node["k"]
    doc["runs"][0]["metadata"]["deep"] = deep
    with pytest.raises(RecordError, match=f"runs\\[0\\].metadata.deep(.k)+: nested more than {MAX_DEPTH} levels"):
        Results.from_dict(doc)
    ok = _document()
    ok["runs"][0]["stack"]["deep"] = json.loads('{"k":' * (MAX_DEPTH - 2) + "1" + "}" * (MAX_DEPTH - 2))
    assert Results.from_dict(ok).runs[0].stack["deep"]


def test_documented_zeros_and_version_1_documents_are_accepted():
    doc = _document()
    doc["format_version"] = 1
    for run in doc["runs"]:
        del run["status"], run["status_reason"]
    row = doc["runs"][0]["rows"][3]
    row.update(time_ms=0.0, mib_s=0.0)  # ESP-IDF prints 0.000 ms for calls below its resolution
    res = Results.from_dict(doc)
    assert [r.status for r in res.runs] == ["complete", "complete"]
    assert res.runs[0].rows[3].time_ms == 0 and res.runs[0].rows[2].bytes == 0
    _exercise(res)


def test_store_applies_the_same_check_to_records_from_code(db):
    with open_store(db) as s:
        bad_row = Row(**{**_rows()[0].__dict__, "time_ms": float("nan")})
        for rec, needle in (
            (replace_status(_record(), seed=2**63), "seed: expected an integer"),
            (RunRecord("s", {}, "wall", (bad_row,)), "rows[0].time_ms: expected a finite number"),
            (RunRecord("s", {"n": 2**64}, "wall", ()), "stack.n: expected an integer"),
            (RunRecord("s", {}, "wall", (), status="finished"), "status: expected one of"),
        ):
            with pytest.raises(SdbenchError, match="cannot be stored") as e:
                s.save(rec)
            assert needle in str(e.value)
        rid = s.begin_run(scenario="s", clock="wall")
        with pytest.raises(SdbenchError, match=r"row 'write 64k' cannot be stored: rows\[0\].time_ms"):
            s.add_row(rid, bad_row)
        assert s.list_runs()[0].rows == 0 and len(s.list_runs()) == 1


# -- 2./3. run status survives export and re-import; failed runs; latest = latest complete ------

def test_failed_and_incomplete_runs_keep_their_status_through_export_and_import(capsys, db, tmp_path):
    rows = _rows()
    with open_store(db) as s:
        done = s.save(_record())
        failed = s.begin_run(scenario="cut", clock="wall", protocol="espidf")
        s.add_row(failed, rows[0])
        s.fail_run(failed, "I/O error on /dev/sdz:\n  sector 123\n")
        cut = s.begin_run(scenario="killed", clock="wall")
        s.add_row(cut, rows[1])
        with pytest.raises(SdbenchError, match="already finished"):
            s.fail_run(done, "x")
        with pytest.raises(SdbenchError, match=r"already finished \(failed: I/O error"):
            s.add_row(failed, rows[1])
        with pytest.raises(SdbenchError, match="no run 99"):
            s.fail_run(99, "x")
        info = s.info(failed)
        assert (info.status, info.status_reason) == ("failed", "I/O error on /dev/sdz: sector 123")
        assert info.finished_utc and s.load(failed).status == "failed"
    code, out, err = cli(capsys, "runs", "-f", "md")
    assert code == 0 and "| failed: I/O error on /dev/sdz: sector 123 |" in out and "| incomplete |" in out
    code, out, _ = cli(capsys, "runs", "--status", "failed", "-f", "md")
    assert code == 0 and f"| {failed} |" in out and f"| {cut} |" not in out
    code, out, _ = cli(capsys, "show", failed, "-f", "md")
    assert code == 0 and "| status | failed |" in out and "| status reason | I/O error on /dev/sdz: sector 123 |" in out
    f = tmp_path / "all.json"
    code, _, err = cli(capsys, "export", done, failed, cut, "-o", f)
    assert code == 0
    assert f"run {failed} failed (I/O error on /dev/sdz: sector 123): exported the 1 rows" in err
    assert f"run {cut} is incomplete (interrupted): exported the 1 rows" in err
    doc = json.loads(f.read_text())
    assert doc["format_version"] == RESULTS_FORMAT_VERSION
    assert [(r["status"], r["status_reason"]) for r in doc["runs"]] == [
        ("complete", ""), ("failed", "I/O error on /dev/sdz: sector 123"), ("incomplete", "")]
    code, out, err = cli(capsys, "import", f)
    assert code == 0, err
    new = [int(x) for x in out.splitlines()[-3:]]
    with open_store(db) as s:
        for old, nid in zip((done, failed, cut), new):
            assert s.load(nid) == s.load(old)
            assert (s.info(nid).status, s.info(nid).status_reason) == (s.info(old).status, s.info(old).status_reason)
        assert s.info(new[2]).finished_utc is None
        # 'latest' is the latest complete run, not the incomplete one imported last
        assert s.resolve("latest") == new[0]
    code, out, _ = cli(capsys, "compare", done, failed, "-f", "md")
    assert code == 0 and f"#{failed} failed (I/O error on /dev/sdz: sector 123)" in out


def test_latest_without_a_complete_run(capsys, db):
    with open_store(db) as s:
        rid = s.begin_run(scenario="cut", clock="wall")
        s.fail_run(rid, "boom")
    code, _, err = cli(capsys, "show", "latest")
    assert_one_error(code, err, "no complete run", "latest")
    code, out, _ = cli(capsys, "show", rid)
    assert code == 0


def _v1_store(path: Path, n: int = 3) -> None:
    """A store as the first schema wrote it (status complete/incomplete only, no checksums)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    storedb.migrate(conn, storedb.MIGRATIONS[:1])
    for i in range(1, n + 1):
        rec = _record(f"old-{i}")
        doc = rec.to_dict()
        for k in ("rows", "status", "status_reason"):
            del doc[k]
        conn.execute("INSERT INTO runs (created_utc, finished_utc, status, scenario, protocol, source, clock, seed, "
                     "sweep_id, host_json, device_json, sdbench_version, record_json) VALUES "
                     "('2024-01-01T00:00:00.000000Z', NULL, ?, ?, 'espidf', 'measured', 'wall', 3, NULL, "
                     "'{\"hostname\":\"h\"}', NULL, '0.1.0', ?)",
                     ("complete" if i < n else "incomplete", rec.scenario, json.dumps(doc)))
        for seq, row in enumerate(rec.rows):
            conn.execute("INSERT INTO rows VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (i, seq, row.label, row.op, row.bytes, row.runs, row.time_ms, row.mib_s,
                          json.dumps(row.to_dict())))
    # deleted by hand, foreign keys off: the AUTOINCREMENT mark stays at n and the run's rows stay behind
    conn.execute("DELETE FROM runs WHERE id = ?", (n,))
    conn.close()


def test_schema_1_store_migrates_in_place(capsys, db):
    _v1_store(db)
    code, out, err = cli(capsys, "runs", "-f", "md")
    assert code == 0 and "| 1 |" in out and "| 2 |" in out and err == ""
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == storedb.SCHEMA_VERSION
    assert conn.execute("SELECT DISTINCT run_id FROM rows ORDER BY 1").fetchall() == [(1,), (2,)]
    conn.close()
    with open_store(db) as s:
        assert s.load(1) == replace_status(_record("old-1"))
        rid = s.begin_run(scenario="new", clock="wall")
        assert rid == 4  # ids of deleted runs are not handed out again
        s.fail_run(rid, "boom")
        assert s.info(rid).status == "failed"
        assert s.check() == (3, [])
    code, out, _ = cli(capsys, "db", "check")
    assert code == 0 and "ok (3 runs)" in out


def replace_status(rec: RunRecord, status: str = "complete", **kw) -> RunRecord:
    from dataclasses import replace

    return replace(rec, status=status, **kw)


# -- 4. store files a user can get wrong --------------------------------------------------------

def _good_store(path: Path) -> None:
    with open_store(path) as s:
        s.save(_record())
        s.save_many([_record(f"run-{i}", 1 + i / 10) for i in range(6)])
    assert not Path(f"{path}-wal").exists()


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = tmp_path / "good.sqlite"
    _good_store(good)
    data = good.read_bytes()
    out = {}

    def put(name: str, content: bytes, needle: str) -> None:
        p = tmp_path / f"{name}.sqlite"
        p.write_bytes(content)
        out[name] = (p, needle)

    put("text", b"just some notes\n" * 50, "is not an sdbench results store (not a SQLite database)")
    put("random", random.Random(1).randbytes(8192), "is not an sdbench results store")
    put("truncated-header", data[:60], "is not an sdbench results store")
    put("truncated", data[: len(data) // 2], "is damaged")
    other = tmp_path / "other.sqlite"
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE notes (x)")
    c.commit()
    c.close()
    out["other"] = (other, "is a SQLite database but not an sdbench results store")
    newer = bytearray(data)
    newer[60:64] = (storedb.SCHEMA_VERSION + 1).to_bytes(4, "big")
    put("newer", bytes(newer), f"has schema version {storedb.SCHEMA_VERSION + 1}, newer than this sdbench")
    return out


@pytest.mark.parametrize("command", [["runs"], ["show", "1"], ["export", "1"], ["compare", "1", "2"],
                                     ["import", DATA / "sdfat_bench_esp32.txt"], ["db", "check"], ["db", "repair"],
                                     ["db", "vacuum"]])
def test_files_that_are_not_usable_stores_give_one_line_and_stay_unchanged(capsys, tmp_path, command):
    for name, (path, needle) in _bad_files(tmp_path).items():
        before = md5(path)
        code, out, err = cli(capsys, *command, "--db", path)
        if command[:2] in (["db", "check"], ["db", "repair"]) and name == "truncated":
            continue  # damaged stores: see the db tests below
        assert_one_error(code, err, needle)
        assert md5(path) == before, name


def test_empty_file_becomes_a_new_store(capsys, tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    code, out, err = cli(capsys, "import", DATA / "sdfat_bench_esp32.txt", "--db", path)
    assert code == 0 and out.splitlines()[-1] == "1", err


def _garble_pages(path: Path, first_page: int = 3) -> None:
    data = bytearray(path.read_bytes())
    rng = random.Random(7)
    for start in range(4096 * first_page, len(data), 4096):
        for i in range(start + 100, start + 700):
            data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))


def test_writing_to_a_damaged_store_is_refused_with_the_recovery_command(capsys, tmp_path):
    path = tmp_path / "r.sqlite"
    _good_store(path)
    _garble_pages(path)
    before = md5(path)
    code, out, err = cli(capsys, "import", DATA / "sdfat_bench_esp32.txt", "--db", path)
    assert_one_error(code, err, "is damaged (quick_check:", "nothing was written", f"sdbench db repair --db {path}")
    assert md5(path) == before
    with pytest.raises(SdbenchError, match="quick_check"):
        open_store(path)


def _poke(path: Path, sql: str, *args) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql, args)
    conn.commit()
    conn.close()


def test_garbage_in_stored_json_is_one_line_for_readers_and_found_by_check_and_repair(capsys, db, tmp_path):
    _good_store(db)
    _poke(db, "UPDATE runs SET record_json = '{not json' WHERE id = 2")
    _poke(db, "UPDATE rows SET row_json = '[1, 2]' WHERE run_id = 3 AND seq = 1")
    _poke(db, "UPDATE rows SET row_json = ? WHERE run_id = 4 AND seq = 0",
          json.dumps({**_rows()[0].to_dict(), "time_ms": "fast"}))
    for rid in (2, 3, 4):
        for command in (["show", rid], ["export", rid], ["export", 1, rid, "-f", "csv"], ["compare", 1, rid],
                        ["report", rid, "--html", tmp_path / "r.html"]):
            code, out, err = cli(capsys, *command)
            assert_one_error(code, err, f"run {rid} in {db} is damaged", f"sdbench db check --db {db}")
    assert not (tmp_path / "r.html").exists()
    # the listing reads no rows: it flags run 2, whose run record is damaged; db check finds the rest
    code, out, err = cli(capsys, "runs", "-f", "md")
    assert code == 0 and "| 2 |" in out and "| damaged |" in out and "| 1 |" in out
    assert err.splitlines() == [f"warning: run 2 is damaged (checksum mismatch: the stored run was changed or "
                                f"damaged); see `sdbench db check --db {db}`"]
    code, out, err = cli(capsys, "db", "check")
    assert code == 1 and "3 problems (7 runs)" in err and "sdbench db repair" in err
    assert [ln.split(":")[0] for ln in out.splitlines()] == ["problem"] * 3
    assert "run 2: damaged (checksum mismatch" in out and "run 3: damaged (rows[1]: checksum mismatch" in out
    # a row changed together with its checksum is still caught by the format check
    _poke(db, "UPDATE rows SET digest = ? WHERE run_id = 4 AND seq = 0",
          storedb.digest(4, 0, json.dumps({**_rows()[0].to_dict(), "time_ms": "fast"})))
    code, out, _ = cli(capsys, "db", "check")
    assert "run 4: damaged (rows[0].time_ms: expected a number, got 'fast')" in out
    with open_store(db, create=False) as s:
        expected = {rid: s.load(rid) for rid in (1, 5, 6, 7)}
    code, out, err = cli(capsys, "db", "repair")
    assert code == 0, err
    assert "recovered 4 of 7 runs, lost 3; lost runs: 2, 3, 4" in out
    backups = list(tmp_path.glob("results.sqlite.damaged-*"))
    assert len(backups) == 1 and f"the damaged file is kept as {backups[0]}" in out
    with open_store(db) as s:
        assert {r.id: s.load(r.id) for r in s.list_runs()} == expected
        assert s.check() == (4, [])
        assert s.save(_record()) == 8  # ids of lost runs are not handed out again
    code, out, _ = cli(capsys, "db", "repair")
    assert code == 0 and "nothing to repair" in out


def test_repair_of_damaged_pages_keeps_what_can_be_read(capsys, tmp_path):
    path = tmp_path / "r.sqlite"
    _good_store(path)
    _garble_pages(path, first_page=5)
    code, out, err = cli(capsys, "db", "check", "--db", path)
    assert code == 1 and "problem: file structure:" in out and "Traceback" not in err
    code, out, err = cli(capsys, "db", "repair", "--db", path)
    assert code == 0 and "recovered" in out and "Traceback" not in err
    code, out, err = cli(capsys, "db", "check", "--db", path)
    assert code == 0 and "ok" in out
    # a store SQLite cannot open at all is rebuilt empty, the damaged file kept
    trunc = tmp_path / "t.sqlite"
    _good_store(trunc)
    trunc.write_bytes(trunc.read_bytes()[:20000])
    code, out, err = cli(capsys, "db", "check", "--db", trunc)
    assert_one_error(code, err, "cannot be read as a results store", exit_code=1)
    code, out, err = cli(capsys, "db", "repair", "--db", trunc)
    assert code == 0 and "recovered 0 of 0 runs" in out
    assert len(list(tmp_path.glob("t.sqlite.damaged-*"))) == 1


def test_db_help_and_vacuum(capsys, db):
    code, out, _ = cli(capsys, "db", "--help")
    assert code == 0 and all(c in " ".join(out.split()) for c in ("check", "repair", "vacuum", "exit status 0"))
    code, out, _ = cli(capsys, "db")
    assert code == 0 and "repair" in out
    code, _, err = cli(capsys, "db", "check")
    assert_one_error(code, err, "no results store")
    _good_store(db)
    assert repair_store(db).backup is None and list(db.parent.glob("*.old-*")) == []
    with open_store(db) as s:
        for r in s.list_runs()[1:]:
            s.delete_run(r.id)
    code, out, err = cli(capsys, "db", "vacuum")
    assert code == 0 and out.startswith(f"vacuumed {db}:"), err
    with open_store(db, create=False) as s:
        assert s.load(1) == _record()


def test_a_store_without_a_write_bit_is_read_but_never_written(capsys, db, tmp_path):
    """Issue 32, defect 6: a store of mode 444 is read-only on purpose, yet as root `import` and `run` appended
    to it. Read commands work; every command that would write is refused in one line before any work, and the
    file stays as it was."""
    _good_store(db)
    db.chmod(0o444)
    before, runs = md5(db), _stored(db)
    spec = tmp_path / "spec.toml"
    spec.write_text('base = "espidf-memory"\n[grid]\n"espidf.runs" = [1, 2]\n')
    writers = [["import", DATA / "espidf_esp32_sdmmc.log"], ["run", "espidf-memory", "--runs", "1"],
               ["sweep", spec, "-q"], ["stream", "--dir", tmp_path, "--size", "1M", "-q"],
               ["db", "vacuum"], ["db", "repair", "--force"], ["runs", "delete", "2", "--yes"]]
    for argv in writers:
        code, out, err = cli(capsys, *argv)
        assert_one_error(code, err, "read-only (mode 0444)")
    for argv in (["runs"], ["show", "1"], ["export", "1", "-f", "csv"], ["compare", "1", "2"], ["db", "check"]):
        code, out, err = cli(capsys, *argv)
        assert code == 0 and out and not err, (argv, err)
    assert md5(db) == before and _stored(db) == runs
    # nothing else was made (the stream wrote no test file); reading may leave SQLite's -shm/-wal beside the store
    assert {p.name for p in tmp_path.iterdir()} <= {db.name, spec.name, f"{db.name}-wal", f"{db.name}-shm"}


# -- 5. all-or-nothing import ---------------------------------------------------------------------

def test_import_of_several_runs_is_all_or_nothing(capsys, db, tmp_path, monkeypatch):
    from sdbench.store.api import Store

    doc = _document()
    doc["runs"].append(copy.deepcopy(doc["runs"][0]))
    doc["runs"][2]["rows"][0]["bytes"] = -1
    f = tmp_path / "three.json"
    f.write_text(json.dumps(doc))
    code, _, err = cli(capsys, "import", f)
    assert_one_error(code, err, "runs[2].rows[0].bytes")
    # a failure inside the store's transaction, after the first run was written, rolls everything back
    doc["runs"][2]["rows"][0]["bytes"] = 65536
    f.write_text(json.dumps(doc))
    real = Store._insert_row
    calls = []

    def failing(self, cur, run_id, seq, row):
        calls.append(run_id)
        if len(set(calls)) == 3:
            raise sqlite3.OperationalError("disk I/O error")
        real(self, cur, run_id, seq, row)

    monkeypatch.setattr(Store, "_insert_row", failing)
    code, out, err = cli(capsys, "import", f)
    assert_one_error(code, err, "cannot write results store", "disk I/O error")
    assert _stored(db) == []
    monkeypatch.setattr(Store, "_insert_row", real)
    code, out, err = cli(capsys, "import", f)
    assert code == 0 and out.splitlines()[-3:] == ["1", "2", "3"], err


# -- 6. properties ------------------------------------------------------------------------------

_LEAVES = (st.none() | st.booleans()
           | st.integers(min_value=-(2**70), max_value=2**70)
           | st.sampled_from([2**63, -(2**63) - 1, 0, 1, -1])
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=8))


def _containers(kids):
    return st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)


_JSON = st.recursive(_LEAVES, _containers, max_leaves=16)


def _row_like():
    def maybe(good):
        return st.one_of(good, _JSON)

    num = st.floats(min_value=0, max_value=1e4)
    return st.fixed_dictionaries({
        "label": maybe(st.text(min_size=1, max_size=10)), "op": maybe(st.sampled_from(["read", "write"])),
        "bytes": maybe(st.integers(0, 2**20)), "runs": maybe(st.integers(1, 3)),
        "samples_ms": maybe(st.lists(num, max_size=3)), "time_ms": maybe(num), "time_ms_median": maybe(st.none()),
        "time_ms_min": maybe(st.none()), "time_ms_max": maybe(st.none()), "time_ms_stdev": maybe(st.none()),
        "mib_s": maybe(num), "unit": maybe(st.sampled_from(["ms", "MiB/s", "KB/s", "IOPS"])),
        "value": maybe(st.none() | num), "counters": maybe(st.dictionaries(st.text(max_size=4), st.integers(0, 9))),
    })


_DOCS = st.fixed_dictionaries({
    "format_version": st.one_of(st.just(RESULTS_FORMAT_VERSION), _JSON),
    "runs": st.lists(st.fixed_dictionaries({
        "scenario": st.one_of(st.text(min_size=1, max_size=8), _JSON),
        "clock": st.one_of(st.sampled_from(["wall", "virtual"]), _JSON),
        "source": st.one_of(st.sampled_from(["measured", "simulated", "imported"]), _JSON),
        "stack": st.one_of(st.dictionaries(st.text(max_size=4), _JSON, max_size=3), _JSON),
        "rows": st.one_of(st.lists(_row_like(), max_size=3), _JSON),
    }), max_size=2),
})


def _parse_or_refuse(text: str) -> None:
    try:
        res = Results.from_json(text)
    except SdbenchError as e:
        assert "\n" not in str(e)
        return
    for rec in res.runs:
        check_run(rec)
    _exercise(res)


@SETTINGS
@given(st.one_of(_JSON, _DOCS))
def test_any_json_value_parses_into_safe_records_or_is_refused(value):
    _parse_or_refuse(json.dumps(value))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


_BASE = _document()
_MUTANTS = [_DELETE, None, "x", "\ud800", [], {}, True, False, float("nan"), float("inf"), -1, 0, -1.5, 2**70,
            -(2**70), 2**63, 1e308, 1e-300, [1, "a"], {"k": [None]}]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([p for p in _paths(_BASE) if p]), st.sampled_from(_MUTANTS)),
                min_size=1, max_size=3))
def test_mutated_exported_documents_parse_into_safe_records_or_are_refused(mutations):
    doc = copy.deepcopy(_BASE)
    for path, value in mutations:
        try:
            _set(doc, path, value if value is _DELETE else copy.deepcopy(value))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced the parent
    _parse_or_refuse(json.dumps(doc))


_STATUS = st.sampled_from([("complete", ""), ("incomplete", ""), ("failed", "I/O error"), ("failed", "läuft nicht")])


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(st.lists(st.integers(0, 10**9), min_size=1, max_size=4), max_size=3), _STATUS),
                min_size=1, max_size=3))
def test_store_export_import_round_trip_keeps_rows_and_status(tmp_path_factory, runs):
    path = tmp_path_factory.mktemp("rt") / "r.sqlite"
    records = [RunRecord(scenario=f"s{i}", stack={"i": i}, clock="virtual", source="simulated",
                         rows=tuple(make_row(f"row {j}", "read", 512 * j, ns) for j, ns in enumerate(rows)),
                         status=status, status_reason=reason)
               for i, (rows, (status, reason)) in enumerate(runs)]
    with open_store(path) as s:
        ids = s.save_many(records)
        text = export([(rid, s.load(rid)) for rid in ids], "json")
        again = s.save_many(Results.from_json(text).runs)
        for rec, old, new in zip(records, ids, again):
            assert s.load(new) == s.load(old) == rec
            a, b = s.info(old), s.info(new)
            assert (a.status, a.status_reason, a.rows) == (b.status, b.status_reason, b.rows)
            assert (b.finished_utc is None) == (rec.status == "incomplete")


_PRISTINE: dict[str, bytes] = {}


def _pristine(tmp: Path) -> tuple[bytes, dict[int, RunRecord], dict[int, tuple[str, str]]]:
    if "data" not in _PRISTINE:
        path = tmp / "pristine.sqlite"
        with open_store(path) as s:
            s.save(_record())
            rid = s.begin_run(scenario="cut", clock="wall")
            s.add_row(rid, _rows()[0])
            s.fail_run(rid, "boom")
            s.save_many([_record(f"r{i}", 1 + i / 7) for i in range(3)])
        _PRISTINE["data"] = path.read_bytes()
    path = tmp / "p.sqlite"
    path.write_bytes(_PRISTINE["data"])
    with open_store(path, create=False) as s:
        recs = {r.id: s.load(r.id) for r in s.list_runs()}
        status = {r.id: (r.status, r.status_reason) for r in s.list_runs()}
    return _PRISTINE["data"], recs, status


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_random_corruption_gives_correct_data_or_one_clear_error(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("corrupt")
    pristine, expected, status = _pristine(tmp)
    buf = bytearray(pristine)
    mode = data.draw(st.sampled_from(["bytes", "run", "truncate"]))
    if mode == "bytes":
        for _ in range(data.draw(st.integers(1, 8))):
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    elif mode == "run":
        start = data.draw(st.integers(0, len(buf) - 1))
        for i in range(start, min(len(buf), start + data.draw(st.integers(1, 300)))):
            buf[i] = data.draw(st.integers(0, 255)) if i == start else (buf[i] ^ 0x5A)
    else:
        buf = buf[: data.draw(st.integers(0, len(buf) - 1))]
    path = tmp / "c.sqlite"
    path.write_bytes(bytes(buf))
    try:
        with open_store(path, create=False) as s:
            listed = s.list_runs()
            for info in listed:
                try:
                    rec = s.load(info.id)
                    full = s.info(info.id)
                except SdbenchError as e:
                    assert "\n" not in str(e)
                    continue
                assert info.problem is None and info.id in expected
                assert rec == expected[info.id]
                assert (full.status, full.status_reason) == status[info.id] == (rec.status, rec.status_reason)
    except SdbenchError as e:
        assert "\n" not in str(e)
    try:
        with open_store(path, create=False, upgrade=False) as s:
            n, problems = s.check()
            assert all("\n" not in p for p in problems)
    except SdbenchError as e:
        assert "\n" not in str(e)
    shutil.rmtree(tmp, ignore_errors=True)
