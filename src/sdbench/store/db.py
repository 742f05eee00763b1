"""SQLite schema of the results store, its migrations and the connection set-up.

The schema version lives in ``PRAGMA user_version``; :data:`MIGRATIONS` lists
the steps from version 0 (an empty file) upwards, and opening a store applies
the missing ones, each in its own transaction.  ``PRAGMA application_id``
marks the file as an sdbench store so that ``--db`` pointed at some other
SQLite database is refused instead of altered.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ..errors import SdbenchError

#: "SDBN": marks a SQLite file as an sdbench results store
APPLICATION_ID = 0x5344424E

#: each entry moves the schema one version up; never edit a released entry, append a new one
MIGRATIONS: list[tuple[str, tuple[str, ...]]] = [
    ("runs and rows", (
        """
        CREATE TABLE runs (
            id              INTEGER PRIMARY KEY AUTOINCREMENT,
            created_utc     TEXT NOT NULL,          -- ISO 8601, UTC, when the run was stored or begun
            finished_utc    TEXT,                   -- NULL while (or because) the run is incomplete
            status          TEXT NOT NULL CHECK (status IN ('incomplete', 'complete')),
            scenario        TEXT NOT NULL,
            protocol        TEXT NOT NULL,
            source          TEXT NOT NULL CHECK (source IN ('measured', 'simulated', 'imported')),
            clock           TEXT NOT NULL CHECK (clock IN ('wall', 'virtual')),
            seed            INTEGER,
            sweep_id        TEXT,
            host_json       TEXT NOT NULL,          -- machine that stored the run
            device_json     TEXT,                   -- metadata["device"], indexed here
            sdbench_version TEXT NOT NULL,
            record_json     TEXT NOT NULL           -- RunRecord.to_dict() without its rows
        )
        """,
        """
        CREATE TABLE rows (
            run_id   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            seq      INTEGER NOT NULL,              -- position in the run, from 0
            label    TEXT NOT NULL,
            op       TEXT NOT NULL,
            bytes    INTEGER NOT NULL,
            runs     INTEGER NOT NULL,
            time_ms  REAL NOT NULL,
            mib_s    REAL NOT NULL,
            row_json TEXT NOT NULL,                 -- Row.to_dict(), samples included
            PRIMARY KEY (run_id, seq)
        )
        """,
        "CREATE INDEX runs_by_scenario ON runs(scenario, created_utc)",
        "CREATE INDEX runs_by_created ON runs(created_utc)",
        "CREATE INDEX runs_by_sweep ON runs(sweep_id) WHERE sweep_id IS NOT NULL",
        "CREATE INDEX rows_by_label ON rows(label)",
    )),
]

SCHEMA_VERSION = len(MIGRATIONS)


def connect(path: Path, *, create: bool = True) -> sqlite3.Connection:
    """Open (and if needed create and migrate) the store at ``path``."""
    if not path.exists():
        if not create:
            raise SdbenchError(f"no results store at {path} (nothing stored yet; see `sdbench run` or "
                               "`sdbench import`)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SdbenchError(f"cannot create the results store directory {path.parent}: {e.strerror}") from None
    elif path.is_dir():
        raise SdbenchError(f"results store {path} is a directory, not a file")
    try:
        # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
        conn = sqlite3.connect(os.fspath(path), timeout=10.0, isolation_level=None)
    except sqlite3.Error as e:
        raise SdbenchError(f"cannot open results store {path}: {e}") from None
    try:
        _check_and_migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _check_and_migrate(conn: sqlite3.Connection, path: Path) -> None:
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise SdbenchError(f"{path} is not an sdbench results store ({e})") from None
    if app_id != APPLICATION_ID and (tables or version or app_id):
        raise SdbenchError(f"{path} is a SQLite database but not an sdbench results store")
    if version > SCHEMA_VERSION:
        raise SdbenchError(f"results store {path} has schema version {version}, newer than this sdbench "
                           f"understands ({SCHEMA_VERSION}); upgrade sdbench")
    try:
        # WAL: readers never block the writer, and a killed writer leaves the file consistent
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)
    except sqlite3.OperationalError as e:
        raise SdbenchError(f"cannot use results store {path}: {e}") from None


def migrate(conn: sqlite3.Connection, migrations: list[tuple[str, tuple[str, ...]]] | None = None) -> int:
    """Apply the missing migrations; returns the resulting schema version."""
    steps = MIGRATIONS if migrations is None else migrations
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-read inside the lock: another process may have migrated meanwhile
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version >= len(steps):
                conn.execute("COMMIT")
                return version
            for stmt in steps[version][1]:
                conn.execute(stmt)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
