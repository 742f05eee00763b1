"""The results store: runs and their rows in a SQLite file.

A run is written either in one go (:meth:`Store.save`) or row by row while it
is measured (:meth:`Store.begin_run`, :meth:`Store.add_row` per finished row,
then :meth:`Store.finish_run`, or :meth:`Store.fail_run` when the run stops on
an error).  Each call commits its own transaction, so a process killed
part-way leaves every earlier run intact and its own run stored with the rows
it finished, marked ``incomplete``.

Every record is checked (:func:`sdbench.records.check_run`) before it is
stored, and checked again, with the checksums the store keeps, when it is read:
:meth:`Store.load` gives back the :class:`~sdbench.records.RunRecord` exactly
as it was stored, or raises one :class:`~sdbench.errors.SdbenchError` line
saying the run is damaged.  What the store knows about a run beyond the record
(id, time, status, host) is a :class:`StoredRun` from :meth:`Store.info` or
:meth:`Store.list_runs`.  :meth:`Store.check`, :func:`repair_store` and
:meth:`Store.vacuum` are ``sdbench db check/repair/vacuum``.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import SdbenchError
from ..records import CLOCKS, SOURCES, STATUSES, RecordError, Row, RunRecord, check_row, check_run
from . import db

ENV_VAR = "SDBENCH_DB"
#: longest failure reason kept, characters
MAX_REASON = 500

__all__ = ["CLOCKS", "ENV_VAR", "SOURCES", "STATUSES", "RepairResult", "Store", "StoredRun", "default_db_path",
           "open_store", "parse_since", "repair_store"]


def default_db_path() -> Path:
    """``$SDBENCH_DB`` if set, else ``results.sqlite`` in the per-user data directory."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("sdbench")) / "results.sqlite"


def open_store(db_path: str | os.PathLike[str] | None = None, *, create: bool = True, write: bool | None = None,
               upgrade: bool = True) -> "Store":
    """Open the store at ``db_path`` (default: :func:`default_db_path`).

    ``create``: make a new store if there is none.  ``write`` (default: ``create``):
    the caller will write, so an existing store must first pass SQLite's quick
    check.  ``upgrade=False``: leave an older schema unmigrated (read-only use).
    """
    path = Path(db_path).expanduser() if db_path else default_db_path()
    conn = db.connect(path, create=create, write=write, upgrade=upgrade)
    try:
        return Store(conn, path)
    except BaseException:
        conn.close()
        raise


def check_writable(db_path: str | os.PathLike[str] | None = None) -> None:
    """Before work whose result is stored at the end (a sweep, a measured run): refuse a read-only store now."""
    db.refuse_read_only(Path(db_path).expanduser() if db_path else default_db_path())


def host_identity() -> dict[str, str]:
    return {"hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "sdbench_version": __version__}


def _utc_text(when: dt.datetime) -> str:
    # fixed width, so that text order is time order in SQL; naive times are local
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now_utc() -> str:
    return _utc_text(dt.datetime.now(dt.timezone.utc))


def device_of(meta: dict[str, Any]) -> Any:
    """The device a run measured: ``metadata["device"]`` (importers, callers) or ``["identity"]`` (real media)."""
    return meta.get("device") if meta.get("device") is not None else meta.get("identity")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=False, separators=(",", ":"), allow_nan=False)


def _one_line(text: object, limit: int = MAX_REASON) -> str:
    s = " ".join(str(text).split())
    s = s.encode("utf-8", "replace").decode("utf-8")  # lone surrogates (odd file names) become '?'
    return s if len(s) <= limit else s[: limit - 3] + "..."


@dataclass(frozen=True)
class StoredRun:
    """What the store knows about a run besides its record."""

    id: int
    created_utc: str
    finished_utc: str | None
    status: str                   # complete, incomplete, failed
    scenario: str
    protocol: str
    source: str                   # measured, simulated, imported
    clock: str                    # wall, virtual
    seed: int | None
    sweep_id: str | None
    host: dict[str, Any]
    device: dict[str, Any] | None
    sdbench_version: str
    rows: int                     # number of stored rows
    status_reason: str = ""       # why a failed run failed
    problem: str | None = None    # why the run is damaged in the store (None: it reads back intact)

    @property
    def device_name(self) -> str:
        d = self.device or {}
        return str(d.get("name") or d.get("product") or d.get("model") or d.get("summary") or "")

    @property
    def status_text(self) -> str:
        """``complete``, ``incomplete``, ``failed: <reason>`` or ``damaged``."""
        if self.problem:
            return "damaged"
        if self.status == "failed" and self.status_reason:
            return f"failed: {self.status_reason}"
        return self.status


@dataclass(frozen=True)
class RepairResult:
    path: Path
    backup: Path | None           # where the damaged file was kept (None: nothing was done)
    recovered: list[int]          # run ids in the rebuilt store
    lost: list[int]               # run ids that could not be read back intact
    problems: list[str] = field(default_factory=list)  # what the check found before the repair


class _Damage(Exception):
    """A stored run that does not read back intact (internal; users see an SdbenchError)."""

    def __init__(self, detail: str) -> None:
        super().__init__(_one_line(detail, 300))


def _text_col(v: Any) -> bool:
    return isinstance(v, str)


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


def _range_columns(row: Row) -> tuple[float | None, float | None]:
    rng = row.time_ms_range
    return (None, None) if rng is None else (float(rng[0]), float(rng[1]))


def _without_range(doc: Any) -> Any:
    """A stored row's JSON without its range (rows from before ranges have no such key)."""
    if not isinstance(doc, dict):
        return doc
    return {k: v for k, v in doc.items() if k != "time_ms_range"}


def _label(v: Any) -> str:
    text = repr(v) if isinstance(v, str) else "?"
    return text if len(text) <= 60 else text[:57] + "..."


def _record_json_doc(rec: RunRecord) -> dict[str, Any]:
    """What ``runs.record_json`` holds: the record without rows, status and reason (those are columns)."""
    doc = rec.to_dict()
    for key in ("rows", "status", "status_reason"):
        del doc[key]
    return doc


def _loads_or(text: Any, fallback: Any) -> Any:
    """``json.loads(text)``; on failure ``fallback``, or raise it when it is :class:`_Damage`."""
    try:
        if not isinstance(text, str):
            raise ValueError("not text")
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        if fallback is _Damage:
            raise _Damage(f"stored JSON is unreadable: {_one_line(e, 120)}") from None
        return fallback


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size + sum(p.stat().st_size for p in (Path(f"{path}-wal"),) if p.exists())
    except OSError:
        return 0


def _sidecars(path: Path) -> list[Path]:
    return [Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal")]


def repair_store(path: str | os.PathLike[str], *, force: bool = False) -> RepairResult:
    """Rebuild a damaged store from the runs that still read back intact.

    The new store takes the old one's place; the damaged file is kept next to
    it as ``<name>.damaged-<UTC time>`` (``<name>.old-<UTC time>`` when forced).  Without ``force`` a store that passes
    :meth:`Store.check` is left alone (``backup`` None).
    """
    path = Path(path).expanduser()
    db.refuse_read_only(path)
    good: list[tuple[StoredRun, RunRecord]] = []
    lost: list[int] = []
    ids: list[int] = []
    try:
        src = open_store(path, create=False, write=False, upgrade=False)
    except db.StoreDamaged as e:
        problems = [str(e)]
    else:
        try:
            _, problems = src.check()
            if not problems and not force:
                return RepairResult(path, None, [], [], [])
            ids, _ = src.run_ids()
            for rid in ids:
                try:
                    good.append(src._read(rid))
                except (_Damage, SdbenchError):
                    lost.append(rid)
        finally:
            src.close()
    tmp = path.with_name(f".{path.name}.repair-{os.getpid()}")
    for p in (tmp, *_sidecars(tmp)):
        p.unlink(missing_ok=True)
    try:
        with open_store(tmp) as dst:
            dst._restore(good, max(ids, default=0))
            dst._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        kind = "damaged" if problems else "old"
        backup = path.with_name(f"{path.name}.{kind}-{stamp}")
        n = 1
        while backup.exists():
            n += 1
            backup = path.with_name(f"{path.name}.{kind}-{stamp}-{n}")
        os.replace(path, backup)
        for side, moved in zip(_sidecars(path), _sidecars(backup)):
            if side.exists():
                os.replace(side, moved)
        os.replace(tmp, path)
    except OSError as e:
        raise SdbenchError(f"cannot repair results store {path}: {e.strerror or e}") from None
    finally:
        for p in (tmp, *_sidecars(tmp)):
            try:
                p.unlink(missing_ok=True)
            except OSError:
                pass
    return RepairResult(path, backup, [info.id for info, _ in good], lost, problems)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any error)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path = conn, path

    def __enter__(self) -> sqlite3.Cursor:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise SdbenchError(f"results store {self.path} is not writable: {e}") from None
        except db.DB_ERRORS as e:
            raise db.damaged(self.path, str(e)) from None
        return self.conn.cursor()

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
                return
            except sqlite3.Error as e:
                self._rollback()
                raise SdbenchError(f"cannot write results store {self.path}: {e}") from None
        self._rollback()
        if isinstance(exc, sqlite3.OperationalError):
            raise SdbenchError(f"cannot write results store {self.path}: {exc}") from None
        if isinstance(exc, db.DB_ERRORS):
            raise db.damaged(self.path, str(exc)) from None
        if isinstance(exc, sqlite3.Error):
            raise SdbenchError(f"cannot write results store {self.path}: {exc}") from None


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_AGE_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """``2024-05-01``, ``2024-05-01T10:30`` (local time unless it says otherwise), ``today``,
    or an age such as ``90m``, ``12h``, ``3d``, ``2w``; returns an aware datetime."""
    now = now or dt.datetime.now().astimezone()
    t = text.strip()
    m = _AGE.match(t)
    if m:
        try:
            return now - dt.timedelta(seconds=float(m.group(1)) * _AGE_UNITS_S[m.group(2)])
        except OverflowError:
            raise SdbenchError(f"--since {text!r}: that age reaches before the year 1") from None
    if t.lower() == "today":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        when = dt.datetime.fromisoformat(t)
    except ValueError:
        raise SdbenchError(f"--since {text!r}: expected a date (2024-05-01), a date and time "
                           "(2024-05-01T10:30) or an age (90m, 12h, 3d, 2w)") from None
    try:
        when = when if when.tzinfo else when.astimezone()
        when.astimezone(dt.timezone.utc)  # the store compares in UTC: the first and last days of the calendar
    except (OverflowError, ValueError):
        raise SdbenchError(f"--since {text!r}: too close to the ends of the calendar") from None
    return when
