"""File workloads written in TOML: ``protocol = "workload"``, table ``[workload]``.

A workload is a list of steps (``[[workload.steps]]``) run in order on one
filesystem of the stack (``part``), the whole list ``repeat`` times. Each step
is one row. A step runs ``count`` times (``{i}`` in its paths is the index,
0..count-1); **each repetition is one timed call, one sample**: for the file
steps that is the whole file operation, open ... close (a write step's sample
is open + every write() of the file + close), so a row's percentiles are
per-file latencies and its MiB/s is file throughput including open and close.
The samples of all runs of the list go to the same row.

Steps (docs/protocols.md has the exact calls):

========== ==================================================================
format     format the volume (in a directory: skipped with a warning)
mount      mount it; unmount: unmount it (writes back what it caches)
mkdir      make a directory (SPIFFS has none: skipped with a warning)
create     open with ``w`` (create or empty) and close
open       open with ``mode`` and close
write      open ``w``, write ``size_bytes`` in ``chunk_bytes`` calls, close
append     open ``a``, write ``size_bytes`` in ``chunk_bytes`` calls, close
read       open ``r``, read to the end in ``chunk_bytes`` calls, close; check
seek       open ``r``, seek to ``offset_bytes``, read ``size_bytes``, close; check
sync       open ``a``, write ``size_bytes`` (default 0), sync the file, close
truncate   open ``r+``, cut the file to ``size_bytes``, close
rename     rename ``path`` to ``to``
delete     remove a file (or an empty directory)
list       list a directory; check that it holds what the workload made
========== ==================================================================

The data are deterministic from the scenario's seed; every read checks what it
got against what was written (a mismatch is an SdbenchError naming the file).
The step list is checked before any work against a model of the volume: a read
of a file no earlier step wrote, a rename onto an existing file, a step on an
unmounted volume, a truncate that would grow a file are ConfigErrors naming
the step's field (``workload.steps[3].path``); :func:`preflight` adds what
needs the stack (the part exists, the files fit the filesystem, names fit
SPIFFS, a directory run only creates new names).

Every step goes through the FileSystem interface (mkdir, rename,
File.truncate and File.sync included); a filesystem that does not support a
step's operation is refused before the run, except mkdir where the kind has
no directories (SPIFFS): skipped with a warning.

The modules: :mod:`.steps` (the options and path templates), :mod:`.loading`
(reading ``[workload]``, the command line), :mod:`.model` (the volume model
that checks the list), :mod:`.pattern` (the data and its check),
:mod:`.preflight`, :mod:`.runner` and :mod:`.stats` (rows and the summary).
"""
from __future__ import annotations

from .loading import load_options, retarget, timed_calls
from .model import Plan, check
from .pattern import DataMismatch, Pattern, compare
from .preflight import preflight
from .runner import run
from .steps import OPS, PARTS, StepConfig, WorkloadConfig

__all__ = ["OPS", "PARTS", "DataMismatch", "Pattern", "Plan", "StepConfig", "WorkloadConfig", "check", "compare",
           "load_options", "preflight", "retarget", "run", "timed_calls"]
