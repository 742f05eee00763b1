"""A data logger: fixed-size records from a real-time producer, appended to a file by one writer task.

Record ``k`` (``record_bytes`` R each) is produced at ``t_k = k / rate_hz`` for ``duration_s``; the writer
writes the records in order, one ``write()`` call per record, as soon as it can: it waits for record k when it
is ahead, and when a call takes longer than the record period the records produced meanwhile queue in a RAM
buffer.  After a write the writer syncs the file (FatFs ``f_sync``, ``lfs_file_sync``, ``fsync``) every
``sync_every_records`` records and/or after the first write at or past each multiple of ``sync_every_ms``
since the log began, and once after the last record; with
``rotate_bytes`` a full file is closed and the next one created (``log-0001.bin``, ...), and with
``keep_files`` the oldest is deleted so that at most that many remain (a ring of files).  ``jitter_ms`` delays
each record's production by a seeded uniform amount below the record period.  On simulated stacks
time is the virtual clock (the writer's waits advance it); on real media and directories the wall clock (the
writer sleeps until the next record is due).

Every ``write()``, sync and rotation is one timed call (rows ``logger write``, ``logger sync``, ``logger
rotate``); ``logger run`` is the whole log: the bytes written over the log's duration.  The run's metadata
``logger`` holds the rest:

* ``write_latency_ms`` / ``sync_latency_ms``: p50, p99, p99.9 (nearest rank), max, mean;
* ``buffer``: ``needed_bytes``, the RAM buffer that would have lost no record = max over time of (records
  produced - records written) x R (the record being written is still in the buffer); and ``records_lost`` for
  ``buffer_bytes``: the run's calls replayed, in order and with their measured durations, against the producer
  with room for ``buffer_bytes // record_bytes`` records (a record produced when the buffer is full is dropped
  and never written, so the writer catches up sooner).  The replay is exact while the i-th call costs the same
  whichever records were dropped (each write appends R bytes at the same offset either way);
* ``longest_stall``: the largest write/sync/rotate time and its cause; ``stalls``: every call longer than the
  record period (the writer falls behind), counted by cause;
* ``histogram`` (latency buckets), ``timeline`` (per record or, past ``TIMELINE_POINTS``, the worst of each
  group of consecutive records: time, write latency, record age when written, backlog) and ``sync_timeline``.

Stall causes are attributed from what the stack counts during the call (nothing is added to the models): the
clock's time breakdown (card, rtos, flash, host, bus), the card model's pauses (exact time) and merges, the
driver's commands (CMD38 = erase) and the block-op counters of the filesystem's device.  The call's time is
split into shares and the largest names the stall:

* ``card background pause``: the card model's pause time in the call (card busy plus the tick waits of a long
  busy);
* ``erase wait``: erase commands' busy plus the RTOS tick waits of the driver's erase wait (SD), or the
  esp_flash yields during an erase (NOR);
* ``card merge (garbage collection)``: when the card merged in the call, the card busy beyond what the profile
  predicts for the commands sent (program, read access, erase);
* ``FAT allocation`` / ``LittleFS compaction``: the rest of the call times the share of the filesystem's own
  I/O: on FAT the sector reads and writes beyond the record's data sector (FAT entries, directory entry,
  FSInfo), on LittleFS the reads and erases (allocation scans, compaction of metadata pairs, new blocks);
* ``flash program/erase busy``: the card's ordinary program busy, NOR program/erase waits;
* ``other``: host software and bus transfer (and everything on the wall clock, where no breakdown exists).

``runs`` (``--runs``) is the number of logging sessions, one after the other on the same stack: each formats
the filesystem (a directory: a new file), logs ``duration_s`` and closes; the card keeps its state and its
pause draws continue, so sessions differ.  Latencies pool all sessions; the buffer needed is the largest of
any session, records lost add up.

The run also yields *figure rows* (op ``figure``, or ``write`` for a time): the buffer needed (B), records lost
(records), the longest stall and write() p99 / p99.9 (ms), the writer's busy share (%: below 100 it keeps up)
and the medium's bytes programmed per byte logged (B/B, simulated media: NAND bytes of the card's FTL, or bytes
a NOR chip programs; ``wear`` in the metadata).  On a simulated SD card a log that fills less than one
allocation unit per session is never silent: its merges may be missed (``coverage`` and a warning).

The package: :mod:`.config` (options, preflight), :mod:`.session` (the producer's schedule and the writer's
calls, shared with power-loss runs), :mod:`.attribution` (stall causes), :mod:`.figures` (percentiles,
timelines, figure rows), :mod:`.wear` (bytes programmed, life), :mod:`.protocol` (the timed run).
"""

from __future__ import annotations

from .attribution import CAUSES, attribute
from .config import (KIB, MAX_RECORDS, OP_NAMES, PARTS, ROTATE, SYNC, WRITE, LoggerConfig, config_of, preflight,
                     retarget, timed_calls)
from .figures import FIGURE_OP, HIST_EDGES_MS, TIMELINE_POINTS, figure_rows, histogram, percentiles_ms
from .protocol import run, summary_lines
from .session import Schedule, record_bytes, replay, sync_file, write_log
from .wear import Endurance, WearMeter, life_s

__all__ = ["CAUSES", "Endurance", "FIGURE_OP", "HIST_EDGES_MS", "KIB", "MAX_RECORDS", "OP_NAMES", "PARTS", "ROTATE",
           "SYNC", "Schedule", "TIMELINE_POINTS", "WRITE", "LoggerConfig", "WearMeter", "attribute", "config_of",
           "figure_rows", "histogram", "life_s", "percentiles_ms", "preflight", "record_bytes", "replay", "retarget",
           "run", "summary_lines", "sync_file", "timed_calls", "write_log"]
