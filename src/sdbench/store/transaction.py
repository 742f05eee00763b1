"""The write transaction of the results store: ``BEGIN IMMEDIATE`` ... ``COMMIT``, errors turned into one line."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import SdbenchError
from . import db


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
