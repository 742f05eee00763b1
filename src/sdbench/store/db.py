"""SQLite schema of the results store, its migrations and the connection set-up.

The schema version lives in ``PRAGMA user_version``; :data:`MIGRATIONS` lists
the steps from version 0 (an empty file) upwards, and opening a store applies
the missing ones, each in its own transaction.  ``PRAGMA application_id``
marks the file as an sdbench store so that ``--db`` pointed at some other
SQLite database is refused instead of altered.

Before SQLite touches a file, :func:`connect` reads its 100-byte header itself:
a file that is not SQLite, another application's database or a store of a
newer schema is refused without being opened for writing.  Each run and row
carries a checksum (:func:`digest`) of what was stored, so damage that SQLite
cannot see (bytes changed inside a page) is found when the run is read.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sqlite3
from pathlib import Path
from typing import Any

from ..errors import SdbenchError

#: "SDBN": marks a SQLite file as an sdbench results store
APPLICATION_ID = 0x5344424E
SQLITE_MAGIC = b"SQLite format 3\x00"

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
    # SQLite cannot change a CHECK constraint in place: both tables are rebuilt (ids, and the
    # AUTOINCREMENT high-water mark, are kept), and every run and row gets its checksum.
    ("failed runs with a reason; checksums", (
        """
        CREATE TABLE runs_v2 (
            id              INTEGER PRIMARY KEY AUTOINCREMENT,
            created_utc     TEXT NOT NULL,
            finished_utc    TEXT,                   -- NULL while the run is incomplete
            status          TEXT NOT NULL CHECK (status IN ('incomplete', 'complete', 'failed')),
            status_reason   TEXT NOT NULL DEFAULT '',  -- why a run failed
            scenario        TEXT NOT NULL,
            protocol        TEXT NOT NULL,
            source          TEXT NOT NULL CHECK (source IN ('measured', 'simulated', 'imported')),
            clock           TEXT NOT NULL CHECK (clock IN ('wall', 'virtual')),
            seed            INTEGER,
            sweep_id        TEXT,
            host_json       TEXT NOT NULL,
            device_json     TEXT,
            sdbench_version TEXT NOT NULL,
            record_json     TEXT NOT NULL,          -- RunRecord.to_dict() without rows, status and reason
            digest          TEXT                    -- sdbench_digest(the columns above, number of rows)
        )
        """,
        """
        INSERT INTO runs_v2 (id, created_utc, finished_utc, status, scenario, protocol, source, clock, seed,
                             sweep_id, host_json, device_json, sdbench_version, record_json)
        SELECT id, created_utc, finished_utc, status, scenario, protocol, source, clock, seed,
               sweep_id, host_json, device_json, sdbench_version, record_json FROM runs
        """,
        """
        CREATE TABLE rows_v2 (
            run_id   INTEGER NOT NULL REFERENCES runs_v2(id) ON DELETE CASCADE,
            seq      INTEGER NOT NULL,
            label    TEXT NOT NULL,
            op       TEXT NOT NULL,
            bytes    INTEGER NOT NULL,
            runs     INTEGER NOT NULL,
            time_ms  REAL NOT NULL,
            mib_s    REAL NOT NULL,
            row_json TEXT NOT NULL,
            digest   TEXT,                          -- sdbench_digest(run_id, seq, row_json)
            PRIMARY KEY (run_id, seq)
        )
        """,
        """
        INSERT INTO rows_v2 (run_id, seq, label, op, bytes, runs, time_ms, mib_s, row_json, digest)
        SELECT run_id, seq, label, op, bytes, runs, time_ms, mib_s, row_json, sdbench_digest(run_id, seq, row_json)
        FROM rows WHERE run_id IN (SELECT id FROM runs)    -- rows of no run (deleted by hand) are left behind
        """,
        """
        UPDATE runs_v2 SET digest = sdbench_digest(
            id, created_utc, finished_utc, status, status_reason, scenario, protocol, source, clock, seed, sweep_id,
            host_json, device_json, sdbench_version, record_json,
            (SELECT count(*) FROM rows_v2 WHERE rows_v2.run_id = runs_v2.id))
        """,
        """
        INSERT INTO sqlite_sequence (name, seq)
        SELECT 'runs_v2', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'runs_v2')
        """,
        """
        UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'runs'), 0))
        WHERE name = 'runs_v2'
        """,
        "DROP TABLE rows",
        "DROP TABLE runs",
        "ALTER TABLE runs_v2 RENAME TO runs",
        "ALTER TABLE rows_v2 RENAME TO rows",
        "CREATE INDEX runs_by_scenario ON runs(scenario, created_utc)",
        "CREATE INDEX runs_by_created ON runs(created_utc)",
        "CREATE INDEX runs_by_sweep ON runs(sweep_id) WHERE sweep_id IS NOT NULL",
        "CREATE INDEX rows_by_label ON rows(label)",
    )),
    # a simulated row's range (records.Row.time_ms_range); rows stored before have none (NULL)
    ("row ranges", (
        "ALTER TABLE rows ADD COLUMN time_ms_low REAL",  # low end of the row's range, ms; NULL: no range
        "ALTER TABLE rows ADD COLUMN time_ms_high REAL",  # high end, ms
    )),
]

SCHEMA_VERSION = len(MIGRATIONS)

#: the columns of ``runs`` at each schema version: a store whose tables do not match its
#: version number (a damaged header) is refused rather than migrated
RUNS_COLUMNS = {
    1: frozenset({"id", "created_utc", "finished_utc", "status", "scenario", "protocol", "source", "clock", "seed",
                  "sweep_id", "host_json", "device_json", "sdbench_version", "record_json"}),
}
RUNS_COLUMNS[2] = RUNS_COLUMNS[1] | {"status_reason", "digest"}
RUNS_COLUMNS[3] = RUNS_COLUMNS[2]
#: the ``rows`` columns a schema version adds (a store of that version without them is refused as damaged)
ROWS_RANGE_COLUMNS = frozenset({"time_ms_low", "time_ms_high"})

#: the ``runs`` columns a run's checksum covers, in order (then the number of its rows)
RUN_DIGEST_COLUMNS = ("id", "created_utc", "finished_utc", "status", "status_reason", "scenario", "protocol",
                      "source", "clock", "seed", "sweep_id", "host_json", "device_json", "sdbench_version",
                      "record_json")


def digest(*values: Any) -> str:
    """Checksum of stored values (text, integers, NULL): finds damage, not tampering."""
    text = json.dumps(values, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


#: what reading a damaged file can raise: SQLite's errors, and a message of SQLite quoting
#: bytes that are not UTF-8 (a damaged schema), which Python cannot decode
DB_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)


class StoreDamaged(SdbenchError):
    """The file is an sdbench results store, but SQLite cannot read it as one; ``detail`` says why."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


def recovery_hint(path: Path) -> str:
    return f"see `sdbench db check --db {path}`, and `sdbench db repair --db {path}` to rebuild it"


def damaged(path: Path, detail: str, *, written: bool = True) -> StoreDamaged:
    detail = " ".join(str(detail).split()) or "unreadable"
    if len(detail) > 200:
        detail = detail[:197] + "..."
    nothing = "" if written else "nothing was written; "
    return StoreDamaged(f"results store {path} is damaged ({detail}); {nothing}{recovery_hint(path)}", detail)


def _header(path: Path) -> tuple[int, int, int] | None:
    """(application id, user version, page count) from a SQLite header; None for an empty file."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except PermissionError:
        raise SdbenchError(f"cannot read results store {path}: permission denied") from None
    except OSError as e:
        raise SdbenchError(f"cannot read results store {path}: {e.strerror}") from None
    if not head:
        return None
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise SdbenchError(f"{path} is not an sdbench results store (not a SQLite database)")
    app_id = int.from_bytes(head[68:72], "big")
    version = int.from_bytes(head[60:64], "big", signed=True)
    pages = int.from_bytes(head[28:32], "big")
    return app_id, version, pages


def _shown_path(path: Path, limit: int = 120) -> str:
    text = str(path)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_read_only(st: os.stat_result) -> bool:
    """Root may write any file; a store nobody may write was made read-only on purpose: read, never written."""
    return stat.S_ISREG(st.st_mode) and not st.st_mode & 0o222


def refuse_read_only(path: Path, st: os.stat_result | None = None) -> None:
    """SdbenchError when the store at ``path`` is read-only (``st``: its stat, when the caller has it)."""
    if st is None:
        try:
            st = path.stat()
        except OSError:
            return  # nothing there (yet), or nothing this check can tell: opening it says what is wrong
    if is_read_only(st):
        raise SdbenchError(f"results store {path} is read-only (mode {stat.S_IMODE(st.st_mode):04o}): nothing is "
                           f"written to it; give another --db, or make it writable (chmod u+w)")


def connect(path: Path, *, create: bool = True, write: bool | None = None, upgrade: bool = True) -> sqlite3.Connection:
    """Open (and if needed create and migrate) the store at ``path``.

    ``write`` (default: ``create``) opens it for writing: an existing store must
    pass ``PRAGMA quick_check`` first.  ``upgrade=False`` leaves an older schema
    as it is (``sdbench db check`` and ``db repair`` read stores without changing them).
    """
    write = create if write is None else write
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:  # a name too long, a path through a file, no permission to look
        raise SdbenchError(f"cannot use {_shown_path(path)} as the results store: {e.strerror}") from None
    new = st is None
    if not create and st is not None and stat.S_ISREG(st.st_mode) and st.st_size == 0:
        # SQLite would make an empty file a store: a command that only reads never changes the file it is given
        raise SdbenchError(f"no results store at {path} (the file is empty; nothing stored yet)")
    if new:
        if not create:
            raise SdbenchError(f"no results store at {path} (nothing stored yet; see `sdbench run` or "
                               "`sdbench import`)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SdbenchError(f"cannot create the results store directory {path.parent}: {e.strerror}") from None
    elif stat.S_ISDIR(st.st_mode):
        raise SdbenchError(f"results store {path} is a directory, not a file")
    elif not stat.S_ISREG(st.st_mode):
        raise SdbenchError(f"results store {path} is not a regular file")
    read_only = st is not None and is_read_only(st)
    if write:
        refuse_read_only(path, st)
    header = None if new else _header(path)
    if header is not None:
        app_id, version, _ = header
        if app_id != APPLICATION_ID and (app_id or version):
            raise SdbenchError(f"{path} is a SQLite database but not an sdbench results store")
        if app_id == APPLICATION_ID and version > SCHEMA_VERSION:
            raise SdbenchError(f"results store {path} has schema version {version}, newer than this sdbench "
                               f"understands ({SCHEMA_VERSION}); upgrade sdbench")
        if read_only and app_id == APPLICATION_ID and 1 <= version < SCHEMA_VERSION and upgrade:
            raise SdbenchError(f"results store {path} has schema version {version}, older than this sdbench reads "
                               f"({SCHEMA_VERSION}), and is read-only, so it cannot be upgraded (chmod u+w)")
    try:
        # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT); a read-only store is opened
        # so that SQLite refuses any write too
        target = f"{Path(os.path.abspath(path)).as_uri()}?mode=ro" if read_only else os.fspath(path)
        conn = sqlite3.connect(target, timeout=10.0, isolation_level=None, uri=read_only)
    except sqlite3.Error as e:
        raise SdbenchError(f"cannot open results store {path}: {e}") from None
    # text that is not UTF-8 (damage) must not stop a whole listing: it reads with U+FFFD, and the
    # checksum of the run it belongs to then reports it
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        _check_and_migrate(conn, path, ours=header is not None and header[0] == APPLICATION_ID, write=write,
                           upgrade=upgrade)
    except BaseException:
        conn.close()
        raise
    return conn


def _check_and_migrate(conn: sqlite3.Connection, path: Path, *, ours: bool, write: bool, upgrade: bool) -> None:
    register_functions(conn)
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    except DB_ERRORS as e:
        if ours:
            raise damaged(path, str(e)) from None
        raise SdbenchError(f"{path} is not an sdbench results store ({e})") from None
    if app_id != APPLICATION_ID and (tables or version or app_id):
        raise SdbenchError(f"{path} is a SQLite database but not an sdbench results store")
    if version > SCHEMA_VERSION:
        raise SdbenchError(f"results store {path} has schema version {version}, newer than this sdbench "
                           f"understands ({SCHEMA_VERSION}); upgrade sdbench")
    existing = version >= 1
    try:
        if version == 0 and tables:
            raise damaged(path, "tables without a schema version")
        if existing and (columns(conn, "runs") != RUNS_COLUMNS.get(version)
                         or (version >= 3 and not ROWS_RANGE_COLUMNS <= columns(conn, "rows"))):
            raise damaged(path, f"its tables do not match schema version {version}")
        if existing and (write or (upgrade and version < SCHEMA_VERSION)):
            # cheap structural check before anything is written to a store that holds runs
            problems = quick_check(conn)
            if problems:
                more = f" and {len(problems) - 1} more problems" if len(problems) > 1 else ""
                raise damaged(path, f"quick_check: {problems[0]}{more}", written=False)
        if write or not existing:
            # WAL: readers never block the writer, and a killed writer leaves the file consistent
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        if version < SCHEMA_VERSION and (upgrade or not existing):
            migrate(conn)
    except DB_ERRORS as e:
        if existing:
            raise damaged(path, str(e)) from None
        raise SdbenchError(f"cannot use results store {path}: {e}") from None


def quick_check(conn: sqlite3.Connection, *, full: bool = False, limit: int = 20) -> list[str]:
    """SQLite's quick_check (``full``: integrity_check); [] when the file is sound, else its complaints."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        got = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}({int(limit)})")]
    except DB_ERRORS as e:
        return [str(e)]
    if got == ["ok"]:
        return []
    # one complaint a line (SQLite puts several in one result row at times)
    lines = [ln.strip() for text in got for ln in text.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("*** in database")][:limit] or ["unknown damage"]


def register_functions(conn: sqlite3.Connection) -> None:
    """SQL functions the migrations use."""
    conn.create_function("sdbench_digest", -1, digest, deterministic=True)


def migrate(conn: sqlite3.Connection, migrations: list[tuple[str, tuple[str, ...]]] | None = None) -> int:
    """Apply the missing migrations; returns the resulting schema version."""
    steps = MIGRATIONS if migrations is None else migrations
    register_functions(conn)
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-read inside the lock: another process may have migrated meanwhile
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < 0:  # no sdbench writes one: the header was overwritten
                raise SdbenchError(f"the results store's schema version {version} is not one sdbench writes: the "
                                   "file is damaged (`sdbench db repair` rebuilds what can be read)")
            if version >= len(steps):
                conn.execute("COMMIT")
                return version
            for stmt in steps[version][1]:
                conn.execute(stmt)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}
