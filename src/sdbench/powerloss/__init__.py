"""Is it safe?  Cut the power at many points of a workload and check what survives (``sdbench powerloss``).

One *cell* is a stack: a scenario's medium with a filesystem (FAT, LittleFS, SPIFFS or none: raw sectors), a
block cache (none, write-through, write-back) and a USB bridge (none, single-sector, multi-sector,
background).  Its workload is a data logger's: files written in chunks, synced every few chunks and closed
(raw: consecutive sectors per file, one device write per chunk).  An *acknowledgement* is a promise that data
is safe: a returned sync or close for a filesystem; for raw sectors a returned write (the layer below said
it was done, as a USB WRITE completion does).

A clean run counts the medium's writes, erases and trims after format and mount (the cut points) and times
the workload (the cost column of the matrix).  Each cut run builds the cell again with ``[sd.faults]`` or
``[flash.faults]`` cutting the power during one of them (seeded torn length), drops the filesystem as the
cut left it, powers on, mounts a fresh one on the medium (the filesystem's own recovery: FatFs mount, lfs
mount, SPIFFS mount) and reads every file back.  Each cut is classified by its worst finding:

``clean`` < ``lost_unacknowledged`` (acceptable) < ``lost_acknowledged`` < ``corrupted`` (bytes that were
never written at that place) < ``needs_repair`` (FAT: clusters allocated that no file holds, or files
holding more than allocated) < ``unmountable``.

The *logger* workload (:class:`LogReplay`, ``sdbench powerloss --workload logger``) is the logger protocol's
own log instead: the scenario's record size, rate (the writer waits for each record on the virtual clock),
sync policy (by records or by time) and rotation, through the same calls (``write_log``); a returned sync
acknowledges the file's data so far, a rotation's returned close the whole file.  It starts at three sync
intervals and doubles until it has the cut points asked for.

The modules, each importing only those above it:

* :mod:`~sdbench.powerloss.results`: the cells (filesystem, cache, bridge), the classes of a cut, and the records of
  a cut and of a cell;
* :mod:`~sdbench.powerloss.workload`: the two workloads (the data logger's files, the logger protocol's log), their
  configuration, and the writers that keep what was written and acknowledged;
* :mod:`~sdbench.powerloss.checks`: the files read back after a cut and classified, and a FAT volume's allocation
  checked against its files;
* :mod:`~sdbench.powerloss.medium`: what reached the medium in a clean run, the formatted medium's image, what
  recovery reads, and the built stack's block cache;
* :mod:`~sdbench.powerloss.cell`: one cell: its clean run, the workload sized to the cuts, each cut run and its
  recovery;
* :mod:`~sdbench.powerloss.matrix`: every cell of a run, in worker processes or on a Dask cluster.

This package re-exports the public names of these modules.
"""
from __future__ import annotations

from .cell import CellRunner, cells, cut_points, cut_seed, replay, run_cell, sized_workload
from .checks import fat_entries_used, fat_problems
from .matrix import run_matrix
from .medium import MediumLog, Recording, cache_detail
from .results import BRIDGES, CACHES, CLASSES, FILESYSTEMS, PARTS, Cell, CellResult, CutResult
from .workload import (MAX_FILES, MAX_LOG_RECORDS, Logger, LogReplay, LogReplayConfig, Workload, WorkloadConfig,
                       log_replay, logger_workload)

__all__ = [
    "CellRunner", "cells", "cut_points", "cut_seed", "replay", "run_cell", "sized_workload",
    "fat_entries_used", "fat_problems",
    "run_matrix",
    "MediumLog", "Recording", "cache_detail",
    "BRIDGES", "CACHES", "CLASSES", "FILESYSTEMS", "PARTS", "Cell", "CellResult", "CutResult",
    "MAX_FILES", "MAX_LOG_RECORDS", "Logger", "LogReplay", "LogReplayConfig", "Workload", "WorkloadConfig",
    "log_replay", "logger_workload",
]
