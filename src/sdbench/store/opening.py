"""Where the results store lives (``$SDBENCH_DB`` or the per-user data directory) and opening it."""
from __future__ import annotations

import os
from pathlib import Path

from . import db
from .runs import Store

ENV_VAR = "SDBENCH_DB"


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
