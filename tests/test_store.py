"""The results store: schema, round trips, row-by-row writing, filters and bad files."""
from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdbench.errors import SdbenchError
from sdbench.records import Results, Row, RunRecord, make_row
from sdbench.store import ENV_VAR, default_db_path, open_store, parse_since
from sdbench.store import db as storedb


def _row(label: str, ms: list[float], op: str = "write", nbytes: int = 65536, **kw) -> Row:
    return make_row(label, op, nbytes, [round(m * 1e6) for m in ms], **kw)


def _run(scenario: str = "espidf-memory", n_rows: int = 3, source: str = "measured", clock: str = "wall") -> RunRecord:
    rows = tuple(_row(f"row {i}", [1.0 + i, 1.1 + i, 0.9 + i], counters={"writes": 3},
                      breakdown_ns={"bus": 1_000_000, "card": 2_500_000} if clock == "virtual" else None)
                 for i in range(n_rows))
    return RunRecord(scenario=scenario, stack={"sd": {"media": "memory", "capacity_bytes": 1 << 30}}, clock=clock,
                     rows=rows, seed=7, protocol="espidf", source=source, metadata={"note": "x"},
                     warnings=("w1",))


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "r.sqlite")
    yield s
    s.close()


def test_new_store_is_versioned_and_in_wal_mode(tmp_path):
    path = tmp_path / "sub" / "r.sqlite"
    open_store(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == storedb.SCHEMA_VERSION >= 1
    assert conn.execute("PRAGMA application_id").fetchone()[0] == storedb.APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_save_load_round_trip_is_exact(store):
    run = _run(clock="virtual", source="simulated")
    rid = store.save(run)
    assert store.load(rid) == run
    info = store.info(rid)
    assert info.status == "complete" and info.rows == 3 and info.source == "simulated"
    assert info.host["hostname"] and info.host["sdbench_version"]


def test_save_overrides_source_and_records_device_and_sweep(store):
    rid = store.save(_run(), source="imported", device={"name": "SD64G"}, sweep_id="sw1")
    rec = store.load(rid)
    assert rec.source == "imported" and rec.metadata["device"] == {"name": "SD64G"}
    info = store.info(rid)
    assert info.device_name == "SD64G" and info.sweep_id == "sw1"
    assert [r.id for r in store.list_runs(sweep_id="sw1")] == [rid]


def test_device_identity_from_real_media_metadata(store):
    run = RunRecord(scenario="s", stack={}, clock="wall", rows=(),
                    metadata={"identity": {"summary": "SanDisk SC64G, 63.9 GB", "kind": "mmc"}})
    rid = store.save(run)
    assert store.info(rid).device_name == "SanDisk SC64G, 63.9 GB" and store.load(rid) == run


def test_rows_without_samples_round_trip(store):
    row = Row(label="SD raw write [16 kB label]", op="write", bytes=65536, runs=100, samples_ms=(), time_ms=6.757,
              time_ms_median=None, time_ms_min=None, time_ms_max=None, time_ms_stdev=None,  # type: ignore[arg-type]
              mib_s=9.25, reported_bytes=16384)
    run = RunRecord(scenario="s", stack={}, clock="wall", rows=(row,), source="imported")
    assert store.load(store.save(run)) == run


def test_begin_add_finish(store):
    rid = store.begin_run(scenario="sc", stack={"a": 1}, clock="wall", protocol="espidf", seed=3,
                          metadata={"m": 1}, device={"name": "card"})
    assert store.info(rid).status == "incomplete"
    rows = [_row(f"r{i}", [1.0, 2.0]) for i in range(3)]
    for r in rows:
        store.add_row(rid, r)
    assert store.info(rid).status == "incomplete" and store.info(rid).finished_utc is None
    store.finish_run(rid, warnings=["unstable"], metadata={"created_utc": "t"})
    info = store.info(rid)
    assert info.status == "complete" and info.finished_utc and info.device_name == "card"
    rec = store.load(rid)
    assert rec.rows == tuple(rows) and rec.warnings == ("unstable",)
    assert rec.metadata == {"m": 1, "device": {"name": "card"}, "created_utc": "t"}
    with pytest.raises(SdbenchError, match="already finished"):
        store.add_row(rid, rows[0])
    with pytest.raises(SdbenchError, match="already finished"):
        store.finish_run(rid)
    with pytest.raises(SdbenchError, match="no run 999"):
        store.add_row(999, rows[0])


def test_bad_values_are_refused_and_nothing_is_written(store):
    with pytest.raises(SdbenchError, match="source"):
        store.save(_run(source="guessed"))
    with pytest.raises(SdbenchError, match="clock"):
        store.begin_run(scenario="s", stack={}, clock="sundial")
    good = _run()
    bad = RunRecord(scenario="s", stack={"x": object()}, clock="wall", rows=())
    with pytest.raises(SdbenchError, match="cannot be stored"):
        store.save_many([good, bad])
    assert store.list_runs() == []  # the good one was rolled back with the bad one


def test_list_filters_limit_and_resolve(store):
    a = store.save(_run("espidf-esp32-sdmmc4-40mhz", source="simulated", clock="virtual"))
    b = store.save(_run("p2-spi25-350mhz-pny-16gb"))
    c = store.begin_run(scenario="espidf-memory", stack={}, clock="wall")
    assert [r.id for r in store.list_runs()] == [a, b, c]
    assert [r.id for r in store.list_runs(scenario="ESPIDF")] == [a, c]
    assert [r.id for r in store.list_runs(source="simulated")] == [a]
    assert [r.id for r in store.list_runs(status="incomplete")] == [c]
    assert [r.id for r in store.list_runs(limit=2)] == [b, c]
    assert [r.id for r in store.list_runs(since="1h")] == [a, b, c]
    assert store.list_runs(since=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)) == []
    # 'latest' is the latest complete run: c is still incomplete
    assert store.resolve("latest") == b and store.resolve(f"#{b}") == b and store.resolve(a) == a
    assert store.resolve(c) == c
    for bad, msg in (("x", "expected a run id"), ("77", "no run 77")):
        with pytest.raises(SdbenchError, match=msg):
            store.resolve(bad)
    with pytest.raises(SdbenchError, match="source"):
        store.list_runs(source="nope")


def test_delete_run_cascades(store):
    rid = store.save(_run())
    store.delete_run(rid)
    assert store.list_runs() == []
    assert store._conn.execute("SELECT count(*) FROM rows").fetchone()[0] == 0


def test_parse_since():
    now = dt.datetime(2024, 5, 10, 12, 0, tzinfo=dt.timezone.utc)
    assert parse_since("3d", now=now) == now - dt.timedelta(days=3)
    assert parse_since("90m", now=now) == now - dt.timedelta(minutes=90)
    assert parse_since("today", now=now) == now.replace(hour=0)
    assert parse_since("2024-05-01T10:30+00:00") == dt.datetime(2024, 5, 1, 10, 30, tzinfo=dt.timezone.utc)
    assert parse_since("2024-05-01").tzinfo is not None
    with pytest.raises(SdbenchError, match="--since"):
        parse_since("last tuesday")


def test_db_path_from_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env.sqlite"))
    assert default_db_path() == tmp_path / "env.sqlite"
    open_store().close()
    assert (tmp_path / "env.sqlite").exists()
    monkeypatch.delenv(ENV_VAR)
    assert default_db_path().name == "results.sqlite" and "sdbench" in str(default_db_path())


@pytest.mark.parametrize("content,msg", [
    (b"hello, this is not a database at all" * 40, "not an sdbench results store"),
    (None, "not an sdbench results store"),  # another application's SQLite database
])
def test_foreign_files_are_refused_untouched(tmp_path, content, msg):
    path = tmp_path / "other.db"
    if content is None:
        c = sqlite3.connect(path)
        c.execute("CREATE TABLE t (x)")
        c.commit()
        c.close()
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(SdbenchError, match=msg):
        open_store(path)
    assert path.read_bytes() == before


def test_missing_store_for_reading_and_directory(tmp_path):
    with pytest.raises(SdbenchError, match="no results store"):
        open_store(tmp_path / "none.sqlite", create=False)
    assert not (tmp_path / "none.sqlite").exists()
    with pytest.raises(SdbenchError, match="is a directory"):
        open_store(tmp_path)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "r.sqlite"
    open_store(path).close()
    c = sqlite3.connect(path)
    c.execute(f"PRAGMA user_version = {storedb.SCHEMA_VERSION + 1}")
    c.commit()
    c.close()
    with pytest.raises(SdbenchError, match="newer than this sdbench"):
        open_store(path)


def test_migrations_apply_in_order_and_keep_data(tmp_path):
    path = tmp_path / "r.sqlite"
    with open_store(path) as s:
        rid = s.save(_run())
    extra = storedb.MIGRATIONS + [("notes", ("ALTER TABLE runs ADD COLUMN note TEXT",))]
    conn = sqlite3.connect(path, isolation_level=None)
    assert storedb.migrate(conn, extra) == len(extra)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(extra)
    assert conn.execute("SELECT note FROM runs WHERE id = ?", (rid,)).fetchone() == (None,)
    conn.close()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=30),
                          st.lists(st.floats(min_value=1e-4, max_value=1e4), min_size=1, max_size=12)),
                min_size=0, max_size=5),
       st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)))
def test_round_trip_property(tmp_path_factory, rows, seed):
    recs = tuple(make_row(label, "read", 512, [max(1, int(x * 1e6)) for x in ms]) for label, ms in rows)
    run = RunRecord(scenario="p", stack={"k": [1, 2.5, "x"]}, clock="virtual", rows=recs, seed=seed,
                    source="simulated")
    path = tmp_path_factory.mktemp("prop") / "r.sqlite"
    with open_store(path) as s:
        assert s.load(s.save(run)) == run
        # and through the JSON results document
        assert Results.from_json(Results(runs=(s.load(1),)).to_json()).runs[0] == run


WRITER = textwrap.dedent("""
    import sys, time
    from sdbench.records import make_row
    from sdbench.store import open_store
    s = open_store(sys.argv[1])
    rid = s.begin_run(scenario="killed", stack={}, clock="wall", protocol="espidf")
    print(rid, flush=True)
    i = 0
    while True:
        s.add_row(rid, make_row(f"row {i}", "write", 65536, [1_000_000 + i, 1_100_000, 900_000]))
        print(f"row {i}", flush=True)
        i += 1
        time.sleep(float(sys.argv[2]))
""")


@pytest.mark.parametrize("pause_s", [0.02, 0.0])  # 0: killed at a random point, often inside a transaction
def test_killed_writer_leaves_store_consistent(tmp_path, pause_s):
    path = tmp_path / "r.sqlite"
    with open_store(path) as s:
        earlier = [_run("before-1"), _run("before-2", n_rows=5)]
        ids = s.save_many(earlier)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(path), str(pause_s)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        killed_id = int(proc.stdout.readline())
        deadline = time.monotonic() + 20
        seen = 0
        while seen < 5 and time.monotonic() < deadline:
            if proc.stdout.readline().startswith("row "):
                seen += 1
        proc.kill()  # SIGKILL: no cleanup, no finish_run
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert seen == 5
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with open_store(path) as s:
        assert s.integrity_check() == "ok"
        assert [s.load(i) for i in ids] == earlier
        info = s.info(killed_id)
        assert info.status == "incomplete" and info.finished_utc is None
        rows = s.load(killed_id).rows
        assert len(rows) >= 5 and [r.label for r in rows[:5]] == [f"row {i}" for i in range(5)]
        assert [r.id for r in s.list_runs(status="incomplete")] == [killed_id]


def test_concurrent_reader_sees_committed_rows(tmp_path):
    path = tmp_path / "r.sqlite"
    w = open_store(path)
    r = open_store(path)
    rid = w.begin_run(scenario="s", stack={}, clock="wall")
    w.add_row(rid, _row("a", [1.0]))
    assert len(r.load(rid).rows) == 1
    w.add_row(rid, _row("b", [1.0]))
    assert [x.label for x in r.load(rid).rows] == ["a", "b"]
    w.close()
    r.close()


def test_store_json_columns_are_plain_json(store):
    rid = store.save(_run())
    raw = store._conn.execute("SELECT record_json FROM runs WHERE id = ?", (rid,)).fetchone()[0]
    assert "rows" not in json.loads(raw)


def test_sdbench_run_path_row_by_row_then_the_finished_record(store):
    """What `sdbench run` does: begin, store each row as the protocol yields it, finish with the record."""
    from sdbench import scenarios
    from sdbench.protocols import run_scenario

    sc = scenarios.load("espidf-memory", ["espidf.runs=2", "espidf.parts=['sd_raw']"])
    rid = store.begin_run(scenario=sc.name, clock="wall", protocol=sc.protocol, seed=sc.seed)
    rec = run_scenario(sc, on_row=lambda row: store.add_row(rid, row))
    assert store.info(rid).status == "incomplete" and store.info(rid).rows == 8
    store.finish_run(rid, rec)
    assert store.load(rid) == rec and store.info(rid).status == "complete"


def test_finish_with_a_record_whose_rows_differ_is_refused(store):
    rid = store.begin_run(scenario="s", clock="wall", device={"name": "card"})
    store.add_row(rid, _row("a", [1.0]))
    with pytest.raises(SdbenchError, match="1 rows are not the 1 rows stored"):
        store.finish_run(rid, RunRecord(scenario="s", stack={}, clock="wall", rows=(_row("b", [1.0]),)))
    assert store.info(rid).status == "incomplete"
    store.finish_run(rid, RunRecord(scenario="s2", stack={"k": 1}, clock="wall", rows=(_row("a", [1.0]),)))
    info = store.info(rid)
    assert (info.scenario, info.device_name) == ("s2", "card")
    assert store.load(rid).metadata == {"device": {"name": "card"}}
