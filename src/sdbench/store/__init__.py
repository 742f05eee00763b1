"""Results store (SQLite): see :mod:`sdbench.store.api` and docs/results-store.md."""
from __future__ import annotations

from .api import (ENV_VAR, RepairResult, Store, StoredRun, check_writable, default_db_path, open_store, parse_since,
                  repair_store)

__all__ = ["ENV_VAR", "RepairResult", "Store", "StoredRun", "check_writable", "default_db_path", "open_store",
           "parse_since", "repair_store"]
