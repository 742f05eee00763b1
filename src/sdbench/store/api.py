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

The code is split by concern: :mod:`sdbench.store.opening` (where the store
lives, :func:`open_store`), :mod:`sdbench.store.runs` (the :class:`Store`
class), :mod:`sdbench.store.run_info` (:class:`StoredRun`, the host and device
recorded with a run), :mod:`sdbench.store.repair` (:func:`repair_store`),
:mod:`sdbench.store.times` (:func:`parse_since`), :mod:`sdbench.store.encoding`
(column text and JSON), :mod:`sdbench.store.transaction` and
:mod:`sdbench.store.db` (schema, migrations, connection).  This module gathers
the names other code imports.
"""
from __future__ import annotations

from ..records import CLOCKS, SOURCES, STATUSES
from .opening import ENV_VAR, check_writable, default_db_path, open_store
from .repair import RepairResult, repair_store
from .run_info import StoredRun, device_of, host_identity
from .runs import Store
from .times import parse_since

__all__ = ["CLOCKS", "ENV_VAR", "SOURCES", "STATUSES", "RepairResult", "Store", "StoredRun", "check_writable",
           "default_db_path", "device_of", "host_identity", "open_store", "parse_since", "repair_store"]
