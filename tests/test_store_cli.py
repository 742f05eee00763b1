"""`sdbench runs/show/export/compare/import` from the user's side."""
from __future__ import annotations

import csv
import io
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from sdbench import RESULTS_FORMAT_VERSION
from sdbench.cli import main
from sdbench.records import Results, RunRecord, make_row
from sdbench.store import ENV_VAR, open_store

DATA = Path(__file__).parent / "data"
ESPIDF_LINE = re.compile(r"^\[.{55}\] \(\d+x\) [ \d.]{8} ms [ \d.]{8} kB [ \d.]{10} MB/s$")


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv(ENV_VAR, str(path))  # every command below uses it unless --db is given
    return path


def _measured(scenario: str, scale: float, seed: int, n: int = 20, noise: float = 0.02) -> RunRecord:
    rng = random.Random(seed)
    rows = []
    for label, nbytes, ms in (("write 64k", 65536, 6.0), ("read 64k", 65536, 4.0), ("mount", 0, 12.0)):
        # abs: a time is never negative (a document or record with one is refused)
        samples = [abs(round(ms * scale * (1 + rng.gauss(0, noise)) * 1e6)) for _ in range(n)]
        rows.append(make_row(label, "write" if "write" in label else "read", nbytes, samples))
    return RunRecord(scenario=scenario, stack={"sd": {"bus": "sdmmc", "clock_hz": 40_000_000}}, clock="wall",
                     rows=tuple(rows), protocol="espidf", metadata={"host": "bench-pc"})


def test_import_prints_run_id_last_and_runs_lists_it(capsys, db):
    code, out, err = run(capsys, "import", DATA / "espidf_esp32_sdmmc.log")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[-1] == "1" and "66 rows" in lines[0] and "device SD64G" in lines[0]
    code, out, _ = run(capsys, "import", DATA / "fio_sdcard.json", "--scenario", "rpi4-fio")
    assert code == 0 and out.splitlines()[-1] == "2"
    code, out, _ = run(capsys, "import", DATA / "sdfat_bench_esp32.txt", "--format", "sdfat")
    assert code == 0 and out.splitlines()[-1] == "3"
    code, out, _ = run(capsys, "runs", "--format", "md")
    assert code == 0
    assert "| 1 |" in out and "espidf-import" in out and "rpi4-fio" in out and "sdfat-import" in out
    code, out, _ = run(capsys, "runs", "--scenario", "fio", "--format", "md")
    assert "rpi4-fio" in out and "espidf-import" not in out
    code, out, _ = run(capsys, "runs", "--source", "measured")
    assert code == 0 and "no matching runs" in out
    code, out, _ = run(capsys, "runs", "--since", "1d", "-n", "1", "-f", "md")
    assert "sdfat-import" in out and "rpi4-fio" not in out


@pytest.mark.parametrize("name,content,fmt,msg", [
    ("garbage.log", "lorem ipsum\n" * 50, None, "cannot tell the format.*; pass --format to say which"),
    ("empty.log", "", None, "is empty"),
    ("binary.bin", b"\x00\x01\x02\xff" * 100, None, "binary file"),
    ("truncated.log", None, None, "truncated"),
    ("fio.json", (DATA / "fio_sdcard.json").read_text(), "espidf", "not an ESP-IDF perf_benchmark log"),
    ("log.txt", (DATA / "espidf_esp32_sdmmc.log").read_text(), "fio", "no JSON document"),
    ("bad.json", '{"format_version": 1, "runs": [{"scenario": "x"}]}', None, r"bad\.json: runs\[0\]\.clock: missing"),
])
def test_bad_imports_fail_in_one_line_and_store_nothing(capsys, db, tmp_path, name, content, fmt, msg):
    path = tmp_path / name
    if content is None:
        full = (DATA / "espidf_esp32_sdmmc.log").read_text()
        content = full[: full.index("[SD LittleFS: write tiny")]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    args = ["import", path] + (["--format", fmt] if fmt else [])
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and re.search(msg, err), err
    assert not db.exists() or open_store(db).list_runs() == []


def test_import_missing_file(capsys, db, tmp_path):
    code, _, err = run(capsys, "import", tmp_path / "nope.log")
    assert code == 2 and "no such file" in err


@pytest.mark.parametrize("args", [["runs"], ["show", "latest"], ["db", "check"], ["export", "latest"]])
def test_commands_that_only_read_leave_an_empty_file_alone(capsys, tmp_path, args):
    """SQLite makes a 0-byte file a database: a mistyped --db naming someone's empty file stayed a store.  An
    empty file is no store, as a missing one is (runs lists nothing; the others have nothing to read)."""
    empty = tmp_path / "notes.txt"
    empty.touch()
    code, out, err = run(capsys, *args, "--db", empty)
    if args == ["runs"]:
        assert code == 0 and "no runs stored yet" in out
    else:
        assert code == 2 and "no results store" in err and len(err.strip().splitlines()) == 1
    assert empty.stat().st_size == 0


def test_show_of_a_run_stopped_before_its_stack_was_built(capsys, db):
    with open_store(db) as s:
        rid = s.begin_run(scenario="broken", clock="virtual", protocol="espidf", seed=0, source="simulated")
        s.fail_run(rid, "interrupted")
    code, out, err = run(capsys, "show", rid)
    assert code == 0, err
    assert "interrupted" in out and "| stack." not in out  # no row for a stack that was never built


def test_export_json_then_import_gives_identical_runs(capsys, db, tmp_path):
    with open_store(db) as s:
        a = s.save(_measured("espidf-memory", 1.0, 1))
        s.save(_measured("other", 1.0, 2))
    run(capsys, "import", DATA / "espidf_esp32_sdmmc.log")
    for rid in (a, 3):
        out_file = tmp_path / f"run{rid}.json"
        code, out, err = run(capsys, "export", rid, "--format", "json", "--output", out_file)
        assert code == 0, err
        doc = json.loads(out_file.read_text())
        assert doc["format_version"] == RESULTS_FORMAT_VERSION == 2 and len(doc["runs"]) == 1
        assert (doc["runs"][0]["status"], doc["runs"][0]["status_reason"]) == ("complete", "")
        code, out, err = run(capsys, "import", out_file)
        assert code == 0, err
        new = int(out.splitlines()[-1])
        with open_store(db) as s:
            assert s.load(new) == s.load(rid)
            assert s.info(new).source == s.info(rid).source
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")]  # no temp files left


def test_export_stdout_formats(capsys, db):
    run(capsys, "import", DATA / "espidf_esp32_sdmmc.log")
    code, out, _ = run(capsys, "export", "latest")
    assert code == 0 and Results.from_json(out).runs[0].scenario == "espidf-import"
    code, out, _ = run(capsys, "export", "1", "-f", "espidf")
    lines = out.splitlines()
    assert len(lines) == 66 and all(ESPIDF_LINE.match(ln) for ln in lines)
    assert lines[26].startswith("[SD raw write [16 kB label]") and "   16.00 kB " in lines[26]
    code, out, _ = run(capsys, "export", "1", "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 66 and rows[26]["bytes"] == "65536" and rows[26]["reported_bytes"] == "16384"
    assert rows[0]["time_ms"] == "712.402" and rows[0]["time_ms_median"] == "" and rows[0]["samples"] == "0"
    code, out, _ = run(capsys, "export", "1", "-f", "md")
    assert "### Run 1: espidf-import" in out and "| SD raw write [16 kB label] | write |" in out


def test_export_errors(capsys, db, tmp_path):
    code, _, err = run(capsys, "export", "1")
    assert code == 2 and "no results store" in err
    run(capsys, "import", DATA / "sdfat_bench_esp32.txt")
    code, _, err = run(capsys, "export", "9")
    assert code == 2 and err.strip() == f"error: no run 9 in {db} (see `sdbench runs`)"
    code, _, err = run(capsys, "export", "1", "-o", tmp_path / "missing-dir" / "x.json")
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, "export", "1", "-f", "xml")
    assert code == 2


def test_show(capsys, db):
    run(capsys, "import", DATA / "espidf_esp32_sdmmc.log")
    code, out, _ = run(capsys, "show", "1", "--format", "md")
    assert code == 0
    assert "| device | name=SD64G" in out and "| stack.target_size_bytes | 65536 |" in out
    assert "| SD raw write [16 kB label] | write | 65536 (16384 printed) | 10 | 7.114 | – |" in out
    code, out, _ = run(capsys, "show", "1")
    assert code == 0 and "SD64G" in out and "SD raw write [16 kB label]" in out


def test_compare_verdicts_and_warnings(capsys, db):
    with open_store(db) as s:
        s.save(_measured("card-a", 1.0, 1))
        s.save(_measured("card-b", 1.25, 2))      # 25 % slower
        s.save(_measured("card-a", 1.0, 3))       # the same card again
    run(capsys, "import", DATA / "espidf_esp32_sdmmc.log")
    code, out, err = run(capsys, "compare", "1", "2", "3", "4", "--format", "md")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("| write 64k |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[5].startswith("0.8") and cells[6].startswith("slower (p<0.001")
    assert cells[10].startswith("not significant") or cells[10].startswith("unclear")
    assert "#4: 66 of 66 rows have no per-call samples (imported)" in out
    assert "| SD raw write [16 kB label] | – | – | – | – | – | – | – | – | – | – | 7.114 |" in out


def test_compare_flags_unstable_runs(capsys, db):
    with open_store(db) as s:
        s.save(_measured("quiet", 1.0, 1))
        s.save(_measured("noisy", 1.0, 2, noise=0.3))
    code, out, _ = run(capsys, "compare", "1", "2", "-f", "md")
    assert code == 0 and "#2: unstable rows (CV > 10%)" in out


def test_compare_table_marks_best(capsys, db):
    with open_store(db) as s:
        s.save(_measured("card-a", 1.0, 1))
        s.save(_measured("card-b", 0.5, 2))
    code, out, _ = run(capsys, "compare", "1", "2", "--table", "-f", "md")
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("| write 64k |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "ms" and not cells[2].startswith("**") and cells[3].startswith("**")
    code, out, _ = run(capsys, "compare", "1", "2", "--table", "--metric", "mib_s", "-f", "md")
    line = next(ln for ln in out.splitlines() if ln.startswith("| read 64k |"))
    assert "MiB/s" in line and line.count("**") == 2
    code, out, _ = run(capsys, "compare", "1", "2", "--table")
    assert code == 0 and "write 64k" in out


def test_compare_needs_two_runs_and_no_duplicates(capsys, db):
    with open_store(db) as s:
        s.save(_measured("card-a", 1.0, 1))
    code, _, err = run(capsys, "compare", "1")
    assert code == 2 and "at least two runs" in err
    code, _, err = run(capsys, "compare", "1", "latest")
    assert code == 2 and "given twice" in err


def test_runs_without_store_and_explicit_db(capsys, db, tmp_path):
    code, out, _ = run(capsys, "runs")
    assert code == 0 and "no runs stored yet" in out
    other = tmp_path / "other.sqlite"
    code, out, _ = run(capsys, "import", DATA / "sdfat_bench_esp32.txt", "--db", other)
    assert code == 0 and other.exists() and not db.exists()
    code, out, _ = run(capsys, "runs", "--db", other, "-f", "md")
    assert "sdfat-import" in out


def test_bad_since_is_one_line(capsys, db):
    run(capsys, "import", DATA / "sdfat_bench_esp32.txt")
    code, _, err = run(capsys, "runs", "--since", "yesterday-ish")
    assert code == 2 and err.startswith("error: --since") and len(err.splitlines()) == 1


def test_exporting_an_incomplete_run_warns(capsys, db):
    with open_store(db) as s:
        rid = s.begin_run(scenario="cut", clock="wall")
        s.add_row(rid, make_row("a", "read", 512, [1000, 1100]))
    code, out, err = run(capsys, "export", rid, "-f", "csv")
    assert code == 0 and len(out.splitlines()) == 2
    assert "run 1 is incomplete (interrupted): exported the 1 rows" in err
    code, out, _ = run(capsys, "runs", "--status", "incomplete", "-f", "md")
    assert "| 1 |" in out and "incomplete" in out



def test_an_import_error_quoting_a_line_break_is_escaped_whatever_its_type(monkeypatch):
    from sdbench import importers
    from sdbench.errors import SdbenchError
    from sdbench.importers.detect import UnknownFormat
    from sdbench.records import RecordError

    def bad(text, name, scenario):
        raise RecordError("runs[0].metadata.a\nb", "bad")   # a two-argument error type

    monkeypatch.setitem(importers.PARSERS, "json", bad)
    with pytest.raises(SdbenchError) as e:
        importers.parse_text("{}", "json", name="x.json")
    assert "\n" not in str(e.value) and "a\\nb" in str(e.value)
    with pytest.raises(UnknownFormat) as u:                  # the type callers tell apart is kept
        importers.parse_text("lorem\nipsum\n", name="x\ny.log")
    assert "\n" not in str(u.value)


def test_compare_says_how_many_of_the_shared_rows_the_ranking_is_over(capsys, db):
    """Issue 32: compare said "over the 4 rows every run has" where the table showed 20 shared rows (rows that
    move different bytes per call are not ranked)."""
    a = _measured("card-a", 1.0, 1)
    b = _measured("card-b", 0.5, 2)
    b = replace(b, rows=(replace(b.rows[0], bytes=32768), *b.rows[1:]))   # same label, other size
    with open_store(db) as s:
        s.save(a)
        s.save(b)
    code, out, _ = run(capsys, "compare", "1", "2")
    assert code == 0
    assert "over the 2 of the 3 rows every run has that move the same bytes per call" in out, out


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_runs_show_compare_speak_json_and_csv(capsys, db, fmt):
    with open_store(db) as s:
        s.save(_measured("card-a", 1.0, 1))
        s.save(_measured("card-b", 0.5, 2))
    for argv in (["runs"], ["show", "1"], ["compare", "1", "2"]):
        code, out, err = run(capsys, *argv, "-f", fmt)
        assert code == 0, err
        if fmt == "json":
            doc = json.loads(out)
            if argv == ["runs"]:  # whole numbers as numbers, an unknown value as null
                assert [r["id"] for r in doc] == [1, 2] and all(isinstance(r["rows"], int) for r in doc)
        else:
            rows = list(csv.reader(io.StringIO(out)))
            assert len(rows) >= 3 and len({len(r) for r in rows}) == 1, argv


@pytest.mark.parametrize("fmt, empty", [("json", "[]\n"), ("csv", "id,created (UTC),status,source,scenario,protocol,"
                                                                 "clock,rows,device,host\n")])
def test_runs_with_nothing_to_list_give_an_empty_document(capsys, db, fmt, empty):
    """A program reading -f json/csv got a sentence on stdout; the sentence is for a person, on stderr."""
    for argv in (["runs"], ["runs", "-s", "no-such-scenario"]):  # no store yet, then a store with no match
        code, out, err = run(capsys, *argv, "-f", fmt)
        assert code == 0 and out == empty and ("no runs stored yet" in err or "no matching runs" in err)
        with open_store(db) as s:
            s.save(_measured("card-a", 1.0, 1))


def test_runs_delete_removes_runs_and_vacuum_gives_the_space_back(capsys, db):
    with open_store(db) as s:
        s.save(_measured("keep", 1.0, 1, n=2000))
        s.save(_measured("drop", 1.0, 2, n=2000))
        failed = s.begin_run(scenario="broken", clock="wall", protocol="espidf", seed=0, source="measured")
        s.fail_run(failed, "I/O error")
    code, _, err = run(capsys, "runs", "delete", "2")       # no terminal to ask on: --yes is needed
    assert code == 2 and "--yes" in err
    code, out, err = run(capsys, "runs", "delete", "2", "--yes")
    assert code == 0 and out.startswith("deleted 1 run from") and "vacuum" in out, err
    code, out, _ = run(capsys, "runs", "delete", "--status", "failed", "--yes")
    assert code == 0 and "(3)" in out
    with open_store(db, create=False) as s:
        assert [r.id for r in s.list_runs()] == [1]
    code, out, _ = run(capsys, "db", "vacuum")
    before, after = re.search(r": ([\d.]+) \w+ -> ([\d.]+) \w+", out).groups()
    assert code == 0 and float(after) < float(before)
    code, _, err = run(capsys, "runs", "delete", "7", "--yes")
    assert code == 2 and "no run 7" in err
    code, _, err = run(capsys, "runs", "delete", "--yes")
    assert code == 2 and "give run ids" in err


def test_table_json_turns_only_figures_into_numbers():
    """Whole numbers became numbers in every column: a label "0512" came out as 512 and "--5" crashed."""
    from sdbench.cli.formats import table_text
    from sdbench.report.text import DASH, Table

    t = Table(["id", "label", "host", "rows"], right={0, 3})
    t.add(["7", "0512", "123456789012", "40"])
    t.add(["8", "--5", DASH, "007"])
    doc = json.loads(table_text(t, "json"))
    assert doc == [{"id": 7, "label": "0512", "host": "123456789012", "rows": 40},
                   {"id": 8, "label": "--5", "host": None, "rows": "007"}]
