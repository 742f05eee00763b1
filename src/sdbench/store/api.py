"""The results store: runs and their rows in a SQLite file.

A run is written either in one go (:meth:`Store.save`) or row by row while it
is measured (:meth:`Store.begin_run`, :meth:`Store.add_row` per finished row,
:meth:`Store.finish_run`).  Each call commits its own transaction, so a process
killed part-way leaves every earlier run intact and its own run stored with
the rows it finished, marked ``incomplete``.

:meth:`Store.load` gives back the :class:`~sdbench.records.RunRecord` exactly as
it was stored; what the store knows about a run beyond the record (id, time,
status, host) is a :class:`StoredRun` from :meth:`Store.info` or
:meth:`Store.list_runs`.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import SdbenchError
from ..records import Row, RunRecord
from . import db

ENV_VAR = "SDBENCH_DB"
SOURCES = ("measured", "simulated", "imported")
CLOCKS = ("wall", "virtual")


def default_db_path() -> Path:
    """``$SDBENCH_DB`` if set, else ``results.sqlite`` in the per-user data directory."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("sdbench")) / "results.sqlite"


def open_store(db_path: str | os.PathLike[str] | None = None, *, create: bool = True) -> "Store":
    """Open the store at ``db_path`` (default: :func:`default_db_path`), creating it if allowed."""
    path = Path(db_path).expanduser() if db_path else default_db_path()
    return Store(db.connect(path, create=create), path)


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
    return json.dumps(obj, sort_keys=False, separators=(",", ":"))


@dataclass(frozen=True)
class StoredRun:
    """What the store knows about a run besides its record."""

    id: int
    created_utc: str
    finished_utc: str | None
    status: str                   # complete, incomplete
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

    @property
    def device_name(self) -> str:
        d = self.device or {}
        return str(d.get("name") or d.get("product") or d.get("model") or d.get("summary") or "")


_INFO_SQL = """
    SELECT r.id, r.created_utc, r.finished_utc, r.status, r.scenario, r.protocol, r.source, r.clock, r.seed,
           r.sweep_id, r.host_json, r.device_json, r.sdbench_version,
           (SELECT count(*) FROM rows w WHERE w.run_id = r.id)
    FROM runs r
"""


def _info(row: tuple[Any, ...]) -> StoredRun:
    return StoredRun(id=row[0], created_utc=row[1], finished_utc=row[2], status=row[3], scenario=row[4],
                     protocol=row[5], source=row[6], clock=row[7], seed=row[8], sweep_id=row[9],
                     host=json.loads(row[10]), device=json.loads(row[11]) if row[11] else None,
                     sdbench_version=row[12], rows=row[13])


class Store:
    """A results store; use :func:`open_store` to get one.  Not shared between threads."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path

    # -- life cycle -------------------------------------------------------------------------
    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tx(self) -> "_Transaction":
        return _Transaction(self._conn, self.path)

    # -- writing ----------------------------------------------------------------------------
    def begin_run(self, *, scenario: str, clock: str, stack: dict[str, Any] | None = None, protocol: str = "",
                  source: str = "measured", seed: int | None = None, metadata: dict[str, Any] | None = None,
                  warnings: Sequence[str] = (), device: dict[str, Any] | None = None,
                  sweep_id: str | None = None) -> int:
        """Store a new run with no rows, marked incomplete; returns its id."""
        rec = RunRecord(scenario=scenario, stack=dict(stack or {}), clock=clock, rows=(), seed=seed,
                        protocol=protocol, source=source, metadata=dict(metadata or {}), warnings=tuple(warnings))
        with self._tx() as cur:
            return self._insert_run(cur, rec, device=device, sweep_id=sweep_id, status="incomplete")

    def add_row(self, run_id: int, row: Row) -> None:
        """Append a finished row to an incomplete run (committed at once)."""
        with self._tx() as cur:
            self._incomplete(cur, run_id)
            seq = cur.execute("SELECT count(*) FROM rows WHERE run_id = ?", (run_id,)).fetchone()[0]
            self._insert_row(cur, run_id, seq, row)

    def finish_run(self, run_id: int, record: RunRecord | None = None, *, warnings: Sequence[str] = (),
                   metadata: dict[str, Any] | None = None) -> None:
        """Mark a run complete.

        ``record``, when given, is the finished run: its scenario, stack, metadata,
        warnings etc. replace what :meth:`begin_run` stored, and its rows must be
        the rows added.  Otherwise ``warnings`` are appended to the stored ones and
        ``metadata`` keys merged into them.
        """
        with self._tx() as cur:
            doc = json.loads(self._incomplete(cur, run_id))
            if record is not None:
                stored = [json.loads(r[0]) for r in cur.execute(
                    "SELECT row_json FROM rows WHERE run_id = ? ORDER BY seq", (run_id,))]
                if stored != [r.to_dict() for r in record.rows]:
                    raise SdbenchError(f"run {run_id}: the finished record's {len(record.rows)} rows are not the "
                                       f"{len(stored)} rows stored")
                old_meta = doc.get("metadata", {})
                doc = replace(record, rows=()).to_dict()
                del doc["rows"]
                for key in ("device", "sweep_id"):  # recorded at begin_run, keep unless the record says otherwise
                    if key in old_meta and key not in doc["metadata"]:
                        doc["metadata"][key] = old_meta[key]
                self._check(record)
            doc["warnings"] = list(doc.get("warnings", [])) + list(warnings)
            if metadata:
                doc["metadata"] = {**doc.get("metadata", {}), **metadata}
            device = device_of(doc["metadata"])
            try:
                text = _dumps(doc)
            except (TypeError, ValueError) as e:
                raise SdbenchError(f"run {run_id} cannot be stored: {e}") from None
            cur.execute("UPDATE runs SET status = 'complete', finished_utc = ?, record_json = ?, device_json = ?, "
                        "sweep_id = ?, scenario = ?, protocol = ?, source = ?, clock = ?, seed = ? WHERE id = ?",
                        (_now_utc(), text, _dumps(device) if isinstance(device, dict) else None,
                         doc["metadata"].get("sweep_id"), doc["scenario"], doc.get("protocol", ""),
                         doc.get("source", "measured"), doc["clock"], doc.get("seed"), run_id))

    def _incomplete(self, cur: sqlite3.Cursor, run_id: int) -> str:
        """The stored record JSON of a run that may still change."""
        got = cur.execute("SELECT status, record_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        if got is None:
            raise SdbenchError(f"no run {run_id} in {self.path}")
        if got[0] != "incomplete":
            raise SdbenchError(f"run {run_id} is already finished")
        return str(got[1])

    def save(self, run: RunRecord, *, source: str | None = None, device: dict[str, Any] | None = None,
             sweep_id: str | None = None) -> int:
        """Store a whole run in one transaction (complete); returns its id.

        ``source`` overrides ``run.source``; ``device`` and ``sweep_id``, when
        given, are recorded in the run's metadata (keys ``device``, ``sweep_id``).
        """
        return self.save_many([run], source=source, device=device, sweep_id=sweep_id)[0]

    def save_many(self, runs: Iterable[RunRecord], *, source: str | None = None,
                  device: dict[str, Any] | None = None, sweep_id: str | None = None) -> list[int]:
        """Store several runs in one transaction: all of them or, on error, none."""
        ids = []
        with self._tx() as cur:
            for run in runs:
                if source is not None:
                    run = replace(run, source=source)
                rid = self._insert_run(cur, replace(run, rows=()), device=device, sweep_id=sweep_id,
                                       status="complete")
                for seq, row in enumerate(run.rows):
                    self._insert_row(cur, rid, seq, row)
                ids.append(rid)
        return ids

    def delete_run(self, run_id: int) -> None:
        with self._tx() as cur:
            if cur.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount == 0:
                raise SdbenchError(f"no run {run_id} in {self.path}")

    @staticmethod
    def _check(rec: RunRecord) -> None:
        if rec.source not in SOURCES:
            raise SdbenchError(f"run source {rec.source!r} is not one of {', '.join(SOURCES)}")
        if rec.clock not in CLOCKS:
            raise SdbenchError(f"run clock {rec.clock!r} is not one of {', '.join(CLOCKS)}")

    def _insert_run(self, cur: sqlite3.Cursor, rec: RunRecord, *, device: dict[str, Any] | None,
                    sweep_id: str | None, status: str) -> int:
        self._check(rec)
        meta = dict(rec.metadata)
        if device is not None:
            meta["device"] = device
        if sweep_id is not None:
            meta["sweep_id"] = sweep_id
        dev = device_of(meta)
        doc = replace(rec, metadata=meta).to_dict()
        del doc["rows"]
        now = _now_utc()
        try:
            cur.execute(
                "INSERT INTO runs (created_utc, finished_utc, status, scenario, protocol, source, clock, seed, "
                "sweep_id, host_json, device_json, sdbench_version, record_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (now, now if status == "complete" else None, status, rec.scenario, rec.protocol, rec.source,
                 rec.clock, rec.seed, meta.get("sweep_id"), _dumps(host_identity()),
                 _dumps(dev) if isinstance(dev, dict) else None, __version__, _dumps(doc)))
        except (TypeError, ValueError) as e:
            raise SdbenchError(f"run {rec.scenario!r} cannot be stored: {e}") from None
        return int(cur.lastrowid)  # type: ignore[arg-type]

    @staticmethod
    def _insert_row(cur: sqlite3.Cursor, run_id: int, seq: int, row: Row) -> None:
        try:
            cur.execute("INSERT INTO rows (run_id, seq, label, op, bytes, runs, time_ms, mib_s, row_json) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (run_id, seq, row.label, row.op, row.bytes, row.runs, row.time_ms, row.mib_s,
                         _dumps(row.to_dict())))
        except (TypeError, ValueError) as e:
            raise SdbenchError(f"row {row.label!r} cannot be stored: {e}") from None

    # -- reading ----------------------------------------------------------------------------
    def load(self, run_id: int) -> RunRecord:
        """The stored record, rows in the order they were added."""
        got = self._conn.execute("SELECT record_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        if got is None:
            raise SdbenchError(f"no run {run_id} in {self.path} (see `sdbench runs`)")
        doc = json.loads(got[0])
        doc["rows"] = [json.loads(r[0]) for r in self._conn.execute(
            "SELECT row_json FROM rows WHERE run_id = ? ORDER BY seq", (run_id,))]
        return RunRecord.from_dict(doc)

    def info(self, run_id: int) -> StoredRun:
        got = self._conn.execute(_INFO_SQL + " WHERE r.id = ?", (run_id,)).fetchone()
        if got is None:
            raise SdbenchError(f"no run {run_id} in {self.path} (see `sdbench runs`)")
        return _info(got)

    def list_runs(self, *, scenario: str | None = None, source: str | None = None,
                  since: dt.datetime | str | None = None, status: str | None = None, sweep_id: str | None = None,
                  limit: int | None = None) -> list[StoredRun]:
        """Runs, oldest first.  ``scenario`` matches as a case-insensitive substring;
        ``since`` is a datetime (naive = local time) or anything :func:`parse_since` accepts."""
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
            if status not in ("complete", "incomplete"):
                raise SdbenchError(f"status {status!r} is not complete or incomplete")
            where.append("r.status = ?")
            args.append(status)
        if sweep_id:
            where.append("r.sweep_id = ?")
            args.append(sweep_id)
        sql = _INFO_SQL + (" WHERE " + " AND ".join(where) if where else "")
        if limit is None:
            sql += " ORDER BY r.id"
        else:
            # the newest `limit` runs, still listed oldest first
            sql = f"SELECT * FROM ({sql} ORDER BY r.id DESC LIMIT {int(limit)}) ORDER BY 1"
        return [_info(r) for r in self._conn.execute(sql, args)]

    def resolve(self, ref: str | int) -> int:
        """A run id from what a user typed: ``12``, ``#12`` or ``latest``."""
        text = str(ref).strip().lstrip("#")
        if text.lower() in ("latest", "last"):
            got = self._conn.execute("SELECT max(id) FROM runs").fetchone()[0]
            if got is None:
                raise SdbenchError(f"no runs in {self.path} yet")
            return int(got)
        if not text.isdigit():
            raise SdbenchError(f"run {ref!r}: expected a run id (a number, see `sdbench runs`) or 'latest'")
        rid = int(text)
        if self._conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone() is None:
            raise SdbenchError(f"no run {rid} in {self.path} (see `sdbench runs`)")
        return rid

    def integrity_check(self) -> str:
        return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any error)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path = conn, path

    def __enter__(self) -> sqlite3.Cursor:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise SdbenchError(f"results store {self.path} is not writable: {e}") from None
        return self.conn.cursor()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
                return
            except sqlite3.Error as e:
                self.conn.execute("ROLLBACK")
                raise SdbenchError(f"cannot write results store {self.path}: {e}") from None
        self.conn.execute("ROLLBACK")
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
        return now - dt.timedelta(seconds=float(m.group(1)) * _AGE_UNITS_S[m.group(2)])
    if t.lower() == "today":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        when = dt.datetime.fromisoformat(t)
    except ValueError:
        raise SdbenchError(f"--since {text!r}: expected a date (2024-05-01), a date and time "
                           "(2024-05-01T10:30) or an age (90m, 12h, 3d, 2w)") from None
    return when if when.tzinfo else when.astimezone()
