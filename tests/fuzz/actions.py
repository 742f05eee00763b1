"""Steps of a fuzz case that are not sdbench commands: corrupting a results store.

Each action works on paths relative to the case directory (the cwd).  The
worker calls :func:`run`; a reproducer script calls this file directly::

    python tests/fuzz/actions.py ACTION 'JSON_ARGS'     # cwd = the case directory
"""
from __future__ import annotations

import base64
import json
import os
import sqlite3
import sys

#: placeholder for the case directory in argv, environment values and text files
CASE_TOKEN = "@CASE@"


def _path(args: dict, case_dir: str) -> str:
    p = args["path"]
    if os.path.isabs(p) or ".." in p.split("/"):
        raise ValueError(f"action path must stay inside the case directory: {p!r}")
    return os.path.join(case_dir, p)


def corrupt_bytes(args: dict, case_dir: str) -> None:
    """Overwrite bytes at offsets (fractions of the size, or absolute when >= 1)."""
    p = _path(args, case_dir)
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        for where, data_b64 in args["edits"]:
            data = base64.b64decode(data_b64)
            off = int(where * size) if isinstance(where, float) and where < 1 else int(where)
            f.seek(max(0, min(off, max(size - 1, 0))))
            f.write(data)


def truncate(args: dict, case_dir: str) -> None:
    p = _path(args, case_dir)
    size = os.path.getsize(p)
    n = args.get("size")
    if n is None:
        n = int(size * float(args.get("frac", 0.5)))
    os.truncate(p, int(n))


def write(args: dict, case_dir: str) -> None:
    """Replace a file's contents (text or base64 bytes)."""
    p = _path(args, case_dir)
    for suffix in ("-wal", "-shm"):
        if args.get("drop_wal") and os.path.exists(p + suffix):
            os.remove(p + suffix)
    data = base64.b64decode(args["b64"]) if "b64" in args else args.get("text", "").encode("utf-8", "surrogateescape")
    with open(p, "wb") as f:
        f.write(data)


def foreign_sqlite(args: dict, case_dir: str) -> None:
    """Replace the file with another application's SQLite database."""
    p = _path(args, case_dir)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(p + suffix):
            os.remove(p + suffix)
    conn = sqlite3.connect(p)
    try:
        for stmt in args.get("statements") or ["CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
                                               "INSERT INTO notes (body) VALUES ('hello')"]:
            conn.execute(stmt)
        conn.commit()
    finally:
        conn.close()


def sql(args: dict, case_dir: str) -> None:
    """Run statements on the store directly (check constraints and foreign keys off)."""
    p = _path(args, case_dir)
    conn = sqlite3.connect(p, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("PRAGMA foreign_keys = OFF")
        for stmt in args["statements"]:
            params = stmt[1] if isinstance(stmt, list) else ()
            conn.execute(stmt[0] if isinstance(stmt, list) else stmt, params)
        if args.get("checkpoint", True):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def remove(args: dict, case_dir: str) -> None:
    p = _path(args, case_dir)
    if os.path.isdir(p) and not os.path.islink(p):
        os.rmdir(p)
    elif os.path.lexists(p):
        os.remove(p)


def replace_with(args: dict, case_dir: str) -> None:
    """Replace the file with a directory, a FIFO or an empty file (its -wal/-shm removed)."""
    p = _path(args, case_dir)
    for suffix in ("", "-wal", "-shm"):
        if os.path.lexists(p + suffix):
            os.remove(p + suffix)
    what = args["what"]
    if what == "dir":
        os.mkdir(p)
    elif what == "fifo":
        os.mkfifo(p)
    elif what == "empty":
        open(p, "wb").close()
    else:
        raise ValueError(f"unknown replacement {what!r}")


def chmod(args: dict, case_dir: str) -> None:
    """Set a file's mode bits (e.g. 0o444: a store made read-only on purpose)."""
    os.chmod(_path(args, case_dir), int(args["mode"]))


ACTIONS = {"corrupt_bytes": corrupt_bytes, "truncate": truncate, "write": write, "foreign_sqlite": foreign_sqlite,
           "sql": sql, "remove": remove, "replace_with": replace_with, "chmod": chmod}


def run(name: str, args: dict, case_dir: str) -> str:
    """Run an action; "" when done, else why it did nothing (an earlier step broke the file it edits)."""
    try:
        ACTIONS[name](args, case_dir)
    except (sqlite3.Error, OSError) as e:
        return f"{name} skipped: {type(e).__name__}: {e}"
    return ""


if __name__ == "__main__":
    run(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}, os.getcwd())
