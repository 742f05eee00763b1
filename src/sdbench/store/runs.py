"""The :class:`Store` class: runs written in one go or row by row, read back checked against their checksums,
listed and looked up; and the checks and vacuum of ``sdbench db``."""
from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import SdbenchError
from ..records import CLOCKS, SOURCES, STATUSES, RecordError, Row, RunRecord, check_row, check_run
from . import db
from .encoding import (_Damage, _dumps, _label, _loads_or, _one_line, _range_columns, _record_json_doc, _text_col,
                       _without_range)
from .run_info import StoredRun, device_of, host_identity
from .times import _now_utc, _utc_text, parse_since
from .transaction import _Transaction


class Store:
    """A results store; use :func:`open_store` to get one.  Not shared between threads."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        with self._reading():
            cols = db.columns(conn, "runs")
            row_cols = db.columns(conn, "rows")
        self._checked = "digest" in cols      # schema 2 on: checksums and failure reasons
        self._ranged = db.ROWS_RANGE_COLUMNS <= row_cols  # schema 3 on: row ranges in columns of their own
        reason = "r.status_reason" if self._checked else "''"
        digest = "r.digest" if self._checked else "NULL"
        self._info_sql = (
            "SELECT r.id, r.created_utc, r.finished_utc, r.status, " + reason + ", r.scenario, r.protocol, "
            "r.source, r.clock, r.seed, r.sweep_id, r.host_json, r.device_json, r.sdbench_version, r.record_json, "
            + digest + ", (SELECT count(*) FROM rows w WHERE w.run_id = r.id) FROM runs r")

    # -- life cycle -------------------------------------------------------------------------
    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tx(self) -> "_Transaction":
        return _Transaction(self._conn, self.path)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except db.DB_ERRORS as e:
            msg = str(e)
            if isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg
                                                            or "unable to open" in msg):
                raise SdbenchError(f"cannot read results store {self.path}: {msg}") from None
            raise db.damaged(self.path, msg) from None

    def _damaged(self, run_id: int, detail: str) -> SdbenchError:
        return SdbenchError(f"run {run_id} in {self.path} is damaged ({_one_line(detail, 300)}); see "
                            f"`sdbench db check --db {self.path}`")

    # -- writing ----------------------------------------------------------------------------
    def begin_run(self, *, scenario: str, clock: str, stack: dict[str, Any] | None = None, protocol: str = "",
                  source: str = "measured", seed: int | None = None, metadata: dict[str, Any] | None = None,
                  warnings: Sequence[str] = (), device: dict[str, Any] | None = None,
                  sweep_id: str | None = None) -> int:
        """Store a new run with no rows, marked incomplete; returns its id."""
        rec = RunRecord(scenario=scenario, stack=dict(stack or {}), clock=clock, rows=(), seed=seed,
                        protocol=protocol, source=source, metadata=dict(metadata or {}), warnings=tuple(warnings),
                        status="incomplete")
        rec = self._prepared(rec, device=device, sweep_id=sweep_id)
        with self._tx() as cur:
            rid = self._insert_run(cur, rec)
            self._seal(cur, rid)
            return rid

    def add_row(self, run_id: int, row: Row) -> None:
        """Append a finished row to an incomplete run (committed at once)."""
        with self._tx() as cur:
            info, _ = self._incomplete(cur, run_id)
            try:
                check_row(row, f"rows[{info.rows}]")
            except RecordError as e:
                raise SdbenchError(f"row {_label(getattr(row, 'label', None))} cannot be stored: {e}") from None
            self._insert_row(cur, run_id, info.rows, row)
            self._seal(cur, run_id)

    def finish_run(self, run_id: int, record: RunRecord | None = None, *, warnings: Sequence[str] = (),
                   metadata: dict[str, Any] | None = None) -> None:
        """Mark a run complete.

        ``record``, when given, is the finished run: its scenario, stack, metadata,
        warnings etc. replace what :meth:`begin_run` stored, and its rows must be
        the rows added (its ``status`` is not used: the run becomes complete),
        except for their ``time_ms_range``: a simulated run's ranges come only
        once the whole run is done, and the stored rows take them from here.
        Otherwise ``warnings`` are appended to the stored ones and ``metadata``
        keys merged into them.
        """
        with self._tx() as cur:
            _, text = self._incomplete(cur, run_id)
            doc = self._record_doc(run_id, text)
            if record is not None:
                stored = [_loads_or(r[0], None) for r in cur.execute(
                    "SELECT row_json FROM rows WHERE run_id = ? ORDER BY seq", (run_id,))]
                given = [r.to_dict() for r in record.rows] if isinstance(record, RunRecord) else None
                # the rows were stored as they finished; their ranges come with the finished record
                if given is None or [_without_range(d) for d in stored] != [_without_range(d) for d in given]:
                    n = len(record.rows) if isinstance(record, RunRecord) else 0
                    raise SdbenchError(f"run {run_id}: the finished record's {n} rows are not the "
                                       f"{len(stored)} rows stored")
                for seq, (old_doc, row) in enumerate(zip(stored, record.rows)):
                    if old_doc != given[seq]:
                        self._update_row_range(cur, run_id, seq, row)
                old_meta = doc.get("metadata", {})
                doc = _record_json_doc(replace(record, rows=()))
                if isinstance(doc["metadata"], dict) and isinstance(old_meta, dict):
                    doc["metadata"] = dict(doc["metadata"])
                    for key in ("device", "sweep_id"):  # recorded at begin_run, keep unless the record says otherwise
                        if key in old_meta and key not in doc["metadata"]:
                            doc["metadata"][key] = old_meta[key]
            doc["warnings"] = list(doc.get("warnings", [])) + list(warnings)
            if metadata:
                doc["metadata"] = {**doc.get("metadata", {}), **metadata}
            try:
                rec = RunRecord.from_dict({**doc, "rows": [], "status": "complete"}, path="")
            except RecordError as e:
                raise SdbenchError(f"run {run_id} cannot be stored: {e}") from None
            device = device_of(rec.metadata)
            text = self._json(_record_json_doc(rec), f"run {run_id}")
            cur.execute("UPDATE runs SET status = 'complete', status_reason = '', finished_utc = ?, record_json = ?, "
                        "device_json = ?, sweep_id = ?, scenario = ?, protocol = ?, source = ?, clock = ?, seed = ? "
                        "WHERE id = ?",
                        (_now_utc(), text, _dumps(device) if isinstance(device, dict) else None,
                         rec.metadata.get("sweep_id"), rec.scenario, rec.protocol, rec.source, rec.clock, rec.seed,
                         run_id))
            self._seal(cur, run_id)

    def fail_run(self, run_id: int, reason: str) -> None:
        """Mark a begun run failed: it keeps the rows it stored, ``reason`` (one line) says why.

        Only an incomplete run (from :meth:`begin_run`) can fail; a finished or
        unknown run raises :class:`~sdbench.errors.SdbenchError`.
        """
        text = _one_line(reason) or "failed"
        with self._tx() as cur:
            self._incomplete(cur, run_id)
            cur.execute("UPDATE runs SET status = 'failed', status_reason = ?, finished_utc = ? WHERE id = ?",
                        (text, _now_utc(), run_id))
            self._seal(cur, run_id)

    def _incomplete(self, cur: sqlite3.Cursor, run_id: int) -> tuple[StoredRun, str]:
        """A run that may still change, and its stored record JSON."""
        got = cur.execute(self._info_sql + " WHERE r.id = ?", (run_id,)).fetchone()
        if got is None:
            raise SdbenchError(f"no run {run_id} in {self.path}")
        info = self._stored_run(got)
        if info.problem:
            raise self._damaged(run_id, info.problem)
        if info.status != "incomplete":
            raise SdbenchError(f"run {run_id} is already finished ({info.status_text})")
        return info, str(got[14])

    def save(self, run: RunRecord, *, source: str | None = None, device: dict[str, Any] | None = None,
             sweep_id: str | None = None) -> int:
        """Store a whole run in one transaction, with its status; returns its id.

        ``source`` overrides ``run.source``; ``device`` and ``sweep_id``, when
        given, are recorded in the run's metadata (keys ``device``, ``sweep_id``).
        """
        return self.save_many([run], source=source, device=device, sweep_id=sweep_id)[0]

    def save_many(self, runs: Iterable[RunRecord], *, source: str | None = None,
                  device: dict[str, Any] | None = None, sweep_id: str | None = None) -> list[int]:
        """Store several runs in one transaction: all of them or, on any error, none.

        Each run is checked first (:func:`~sdbench.records.check_run`) and keeps its
        ``status`` and ``status_reason``, so a re-imported incomplete or failed run
        stays so.
        """
        prepared = []
        for run in runs:
            if source is not None and isinstance(run, RunRecord):
                run = replace(run, source=source)
            prepared.append(self._prepared(run, device=device, sweep_id=sweep_id))
        ids = []
        with self._tx() as cur:
            for run in prepared:
                rid = self._insert_run(cur, run)
                for seq, row in enumerate(run.rows):
                    self._insert_row(cur, rid, seq, row)
                self._seal(cur, rid)
                ids.append(rid)
        return ids

    def delete_run(self, run_id: int) -> None:
        self.delete_runs([run_id])

    def delete_runs(self, run_ids: list[int]) -> None:
        """Delete runs and their rows, all or none (their ids are not used again)."""
        with self._tx() as cur:
            for rid in run_ids:
                if cur.execute("DELETE FROM runs WHERE id = ?", (rid,)).rowcount == 0:
                    raise SdbenchError(f"no run {rid} in {self.path}")

    @staticmethod
    def _prepared(rec: RunRecord, *, device: dict[str, Any] | None = None, sweep_id: str | None = None) -> RunRecord:
        """``rec`` with ``device``/``sweep_id`` in its metadata, checked; SdbenchError if it cannot be stored."""
        name = _label(getattr(rec, "scenario", None))
        if not isinstance(rec, RunRecord):
            raise SdbenchError(f"run {name} cannot be stored: not a run record")
        if device is not None or sweep_id is not None:
            meta = dict(rec.metadata) if isinstance(rec.metadata, dict) else rec.metadata
            if isinstance(meta, dict):
                if device is not None:
                    meta["device"] = device
                if sweep_id is not None:
                    meta["sweep_id"] = sweep_id
            rec = replace(rec, metadata=meta)
        try:
            check_run(rec, "")
        except RecordError as e:
            raise SdbenchError(f"run {name} cannot be stored: {e}") from None
        return rec

    @staticmethod
    def _json(doc: Any, what: str) -> str:
        try:
            return _dumps(doc)
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            raise SdbenchError(f"{what} cannot be stored: {_one_line(e, 200)}") from None

    def _insert_run(self, cur: sqlite3.Cursor, rec: RunRecord, *, run_id: int | None = None,
                    created_utc: str | None = None, finished_utc: str | None = None,
                    host: dict[str, Any] | None = None, sdbench_version: str | None = None) -> int:
        """Insert a checked run without its rows (see :meth:`_prepared`)."""
        dev = device_of(rec.metadata)
        now = _now_utc()
        if created_utc is None:  # a new run: finished now unless it is still incomplete
            created, finished = now, (None if rec.status == "incomplete" else now)
        else:                    # a run copied from another store keeps its times
            created, finished = created_utc, finished_utc
        values = (run_id, created, finished, rec.status, rec.status_reason, rec.scenario, rec.protocol, rec.source,
                  rec.clock, rec.seed, rec.metadata.get("sweep_id"), self._json(host or host_identity(), "host"),
                  _dumps(dev) if isinstance(dev, dict) else None, sdbench_version or __version__,
                  self._json(_record_json_doc(rec), f"run {_label(rec.scenario)}"))
        try:
            cur.execute(
                "INSERT INTO runs (id, created_utc, finished_utc, status, status_reason, scenario, protocol, source, "
                "clock, seed, sweep_id, host_json, device_json, sdbench_version, record_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        except (TypeError, ValueError, OverflowError) as e:
            raise SdbenchError(f"run {_label(rec.scenario)} cannot be stored: {_one_line(e, 200)}") from None
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def _insert_row(self, cur: sqlite3.Cursor, run_id: int, seq: int, row: Row) -> None:
        text = self._json(row.to_dict(), f"row {_label(row.label)}")
        cols, values = "", ()
        if self._ranged:
            cols, values = ", time_ms_low, time_ms_high", _range_columns(row)
        elif row.time_ms_range is not None:
            raise SdbenchError(f"row {_label(row.label)} cannot be stored: the store's schema is older than row "
                               "ranges (open it for writing to upgrade it)")
        try:
            cur.execute("INSERT INTO rows (run_id, seq, label, op, bytes, runs, time_ms, mib_s, row_json, digest"
                        + cols + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?" + ", ?" * len(values) + ")",
                        (run_id, seq, row.label, row.op, row.bytes, row.runs, row.time_ms, row.mib_s, text,
                         db.digest(run_id, seq, text), *values))
        except (TypeError, ValueError, OverflowError) as e:
            raise SdbenchError(f"row {_label(row.label)} cannot be stored: {_one_line(e, 200)}") from None

    def _update_row_range(self, cur: sqlite3.Cursor, run_id: int, seq: int, row: Row) -> None:
        """Give a stored row the range its finished record has (all else in the row is the same)."""
        try:
            check_row(row, f"rows[{seq}]")
        except RecordError as e:
            raise SdbenchError(f"row {_label(getattr(row, 'label', None))} cannot be stored: {e}") from None
        if not self._ranged:
            raise SdbenchError(f"row {_label(row.label)} cannot be stored: the store's schema is older than row "
                               "ranges (open it for writing to upgrade it)")
        text = self._json(row.to_dict(), f"row {_label(row.label)}")
        cur.execute("UPDATE rows SET row_json = ?, digest = ?, time_ms_low = ?, time_ms_high = ? "
                    "WHERE run_id = ? AND seq = ?",
                    (text, db.digest(run_id, seq, text), *_range_columns(row), run_id, seq))

    def _seal(self, cur: sqlite3.Cursor, run_id: int) -> None:
        """Store the checksum of the run as it now is (its columns and number of rows)."""
        got = cur.execute(self._info_sql + " WHERE r.id = ?", (run_id,)).fetchone()
        cur.execute("UPDATE runs SET digest = ? WHERE id = ?", (db.digest(*got[:15], got[16]), run_id))

    # -- reading ----------------------------------------------------------------------------
    def _stored_run(self, got: Sequence[Any]) -> StoredRun:
        """A StoredRun from an info query row; ``problem`` says what is wrong with it, if anything."""
        problems: list[str] = []
        (rid, created, finished, status, reason, scenario, protocol, source, clock, seed, sweep_id, host_json,
         device_json, version, _record, digest, nrows) = got

        def col(v: Any, ok: bool, name: str, default: Any) -> Any:
            if ok:
                return v
            problems.append(f"bad {name} column")
            return default

        if self._checked and digest != db.digest(*got[:15], nrows):
            problems.append("checksum mismatch: the stored run was changed or damaged")
        host: Any = _loads_or(host_json, None)
        device: Any = _loads_or(device_json, None) if device_json is not None else None
        info = StoredRun(
            id=col(rid, isinstance(rid, int), "id", 0),
            created_utc=col(created, _text_col(created), "created_utc", "?"),
            finished_utc=col(finished, finished is None or _text_col(finished), "finished_utc", None),
            status=col(status, status in STATUSES, "status", "incomplete"),
            scenario=col(scenario, _text_col(scenario), "scenario", "?"),
            protocol=col(protocol, _text_col(protocol), "protocol", "?"),
            source=col(source, source in SOURCES, "source", "?"),
            clock=col(clock, clock in CLOCKS, "clock", "?"),
            seed=col(seed, seed is None or isinstance(seed, int), "seed", None),
            sweep_id=col(sweep_id, sweep_id is None or _text_col(sweep_id), "sweep_id", None),
            host=col(host, isinstance(host, dict), "host_json", {}),
            device=col(device, device is None or isinstance(device, dict), "device_json", None),
            sdbench_version=col(version, _text_col(version), "sdbench_version", "?"),
            rows=col(nrows, isinstance(nrows, int), "row count", 0),
            status_reason=col(reason, _text_col(reason), "status_reason", ""),
        )
        return replace(info, problem=problems[0]) if problems else info

    def _record_doc(self, run_id: int, text: Any) -> dict[str, Any]:
        try:
            doc = _loads_or(text, _Damage)
        except _Damage as e:
            raise self._damaged(run_id, str(e)) from None
        if not isinstance(doc, dict):
            raise self._damaged(run_id, "record_json is not a JSON object")
        return doc

    def _fetch(self, run_id: int) -> tuple[StoredRun, Any]:
        """(info, record_json) of a run; _Damage if the run is damaged, SdbenchError if there is none."""
        with self._reading():
            got = self._conn.execute(self._info_sql + " WHERE r.id = ?", (run_id,)).fetchone()
        if got is None:
            raise SdbenchError(f"no run {run_id} in {self.path} (see `sdbench runs`)")
        info = self._stored_run(got)
        if info.problem:
            raise _Damage(info.problem)
        return info, got[14]

    def _read(self, run_id: int) -> tuple[StoredRun, RunRecord]:
        """The run and its record, checked against the checksums and the format; _Damage if not intact."""
        info, text = self._fetch(run_id)
        with self._reading():
            rows = self._conn.execute("SELECT seq, row_json, digest FROM rows WHERE run_id = ? ORDER BY seq",
                                      (run_id,)).fetchall()
        if len(rows) != info.rows:
            raise _Damage(f"{len(rows)} rows where {info.rows} are counted")
        docs = []
        for i, (seq, row_json, digest) in enumerate(rows):
            if seq != i:
                raise _Damage(f"row {i} is stored as row {seq!r}")
            if self._checked and digest != db.digest(run_id, seq, row_json):
                raise _Damage(f"rows[{i}]: checksum mismatch: the stored row was changed or damaged")
            d = _loads_or(row_json, _Damage)
            docs.append(d)
        doc = _loads_or(text, _Damage)
        if not isinstance(doc, dict):
            raise _Damage("record_json is not a JSON object")
        doc = {**doc, "rows": docs, "status": info.status, "status_reason": info.status_reason}
        try:
            return info, RunRecord.from_dict(doc, path="")
        except RecordError as e:
            raise _Damage(str(e)) from None

    def load(self, run_id: int) -> RunRecord:
        """The stored record (status and reason included), rows in the order they were added."""
        try:
            return self._read(run_id)[1]
        except _Damage as e:
            raise self._damaged(run_id, str(e)) from None

    def info(self, run_id: int) -> StoredRun:
        """What the store knows about a run; a damaged run raises SdbenchError (see :meth:`list_runs`)."""
        try:
            return self._fetch(run_id)[0]
        except _Damage as e:
            raise self._damaged(run_id, str(e)) from None

    def list_runs(self, *, scenario: str | None = None, source: str | None = None,
                  since: dt.datetime | str | None = None, status: str | None = None, sweep_id: str | None = None,
                  limit: int | None = None) -> list[StoredRun]:
        """Runs, oldest first; damaged runs are listed too, with ``problem`` set.

        ``scenario`` matches as a case-insensitive substring; ``since`` is a
        datetime (naive = local time) or anything :func:`parse_since` accepts;
        ``status`` is complete, incomplete or failed.
        """
        where, args = [], []
        if scenario:
            where.append("instr(lower(r.scenario), lower(?)) > 0")
            args.append(scenario)
        if source:
            if source not in SOURCES:
                raise SdbenchError(f"source {source!r} is not one of {', '.join(SOURCES)}")
            where.append("r.source = ?")
            args.append(source)
        if since is not None:
            when = parse_since(since) if isinstance(since, str) else since
            where.append("r.created_utc >= ?")
            args.append(_utc_text(when))
        if status:
            if status not in STATUSES:
                raise SdbenchError(f"status {status!r} is not one of {', '.join(STATUSES)}")
            where.append("r.status = ?")
            args.append(status)
        if sweep_id:
            where.append("r.sweep_id = ?")
            args.append(sweep_id)
        sql = self._info_sql + (" WHERE " + " AND ".join(where) if where else "")
        if limit is None:
            sql += " ORDER BY r.id"
        else:
            # the newest `limit` runs, still listed oldest first
            sql = f"SELECT * FROM ({sql} ORDER BY r.id DESC LIMIT {int(limit)}) ORDER BY 1"
        with self._reading():
            got = self._conn.execute(sql, args).fetchall()
        return [self._stored_run(r) for r in got]

    def resolve(self, ref: str | int) -> int:
        """A run id from what a user typed: ``12``, ``#12`` or ``latest`` (the latest complete run)."""
        text = str(ref).strip().lstrip("#")
        with self._reading():
            if text.lower() in ("latest", "last"):
                got = self._conn.execute("SELECT max(id) FROM runs WHERE status = 'complete'").fetchone()[0]
                if got is None:
                    if self._conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is None:
                        raise SdbenchError(f"no runs in {self.path} yet")
                    raise SdbenchError(f"no complete run in {self.path} ('latest' is the latest complete run; "
                                       "give the id of an incomplete or failed one, see `sdbench runs`)")
                return int(got)
            if not (text.isascii() and text.isdigit()) or len(text) > 18:
                raise SdbenchError(f"run {ref!r}: expected a run id (a number, see `sdbench runs`) or 'latest'")
            rid = int(text)
            if self._conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone() is None:
                raise SdbenchError(f"no run {rid} in {self.path} (see `sdbench runs`)")
        return rid

    def integrity_check(self) -> str:
        with self._reading():
            return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    # -- maintenance: sdbench db check / repair / vacuum -------------------------------------
    def run_ids(self) -> tuple[list[int], list[str]]:
        """Every run id found in either table, even past damaged pages; and what stopped a scan."""
        ids: set[int] = set()
        problems: list[str] = []
        for sql in ("SELECT id FROM runs ORDER BY id", "SELECT id FROM runs ORDER BY id DESC",
                    "SELECT DISTINCT run_id FROM rows ORDER BY run_id",
                    "SELECT DISTINCT run_id FROM rows ORDER BY run_id DESC"):
            try:
                for (v,) in self._conn.execute(sql):
                    if isinstance(v, int):
                        ids.add(v)
            except db.DB_ERRORS as e:
                msg = f"cannot read every run id: {e}"
                if msg not in problems:
                    problems.append(msg)
        return sorted(ids), problems

    def check(self) -> tuple[int, list[str]]:
        """(runs checked, problems): SQLite's integrity check, then every run read back and validated."""
        problems = [f"file structure: {p}" for p in db.quick_check(self._conn, full=True)]
        try:
            orphans = self._conn.execute("PRAGMA foreign_key_check(rows)").fetchall()
            if orphans:
                problems.append(f"{len(orphans)} rows belong to no run")
        except db.DB_ERRORS as e:
            problems.append(f"cannot check the rows' runs: {e}")
        ids, scan = self.run_ids()
        problems += scan
        for rid in ids:
            try:
                self._read(rid)
            except _Damage as e:
                problems.append(f"run {rid}: damaged ({e})")
            except db.StoreDamaged as e:
                problems.append(f"run {rid}: cannot be read ({e.detail})")
            except SdbenchError as e:
                problems.append(f"run {rid}: {_one_line(e, 300)}")
        return len(ids), problems

    def vacuum(self) -> tuple[int, int]:
        """Rebuild the file without free pages; (bytes before, bytes after)."""
        before = _file_size(self.path)
        try:
            self._conn.execute("VACUUM")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except db.DB_ERRORS as e:
            raise SdbenchError(f"cannot vacuum results store {self.path}: {e}") from None
        return before, _file_size(self.path)

    def _restore(self, runs: Sequence[tuple[StoredRun, RunRecord]], high_water: int) -> None:
        """Store runs read from another store under their ids, times and hosts (sdbench db repair)."""
        with self._tx() as cur:
            for info, rec in runs:
                rec = self._prepared(rec)
                rid = self._insert_run(cur, rec, run_id=info.id, created_utc=info.created_utc,
                                       finished_utc=info.finished_utc, host=info.host,
                                       sdbench_version=info.sdbench_version)
                for seq, row in enumerate(rec.rows):
                    self._insert_row(cur, rid, seq, row)
                self._seal(cur, rid)
            # ids of lost runs are not handed out again
            cur.execute("INSERT INTO sqlite_sequence (name, seq) SELECT 'runs', 0 "
                        "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'runs')")
            cur.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'runs'", (high_water,))


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size + sum(p.stat().st_size for p in (Path(f"{path}-wal"),) if p.exists())
    except OSError:
        return 0
