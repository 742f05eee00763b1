"""newlib's stdio (FILE) layer as ESP-IDF builds it: a block every host profile embeds as ``stdio``.

A C program that writes with fopen/fprintf/fwrite and reads with fgetc/fread goes through newlib's FILE layer
before the VFS: each call takes and gives the FILE's lock, copies through the FILE buffer, and only a full (or
flushed) buffer becomes one write() and an empty one one read() of the buffer's size.  This block holds what
that layer costs the host CPU per call, in cycles at the profile's ``cpu_hz``, and how it sizes its buffer.
:mod:`sdbench.fs.stdio` charges it; docs/stdio.md gives each figure's derivation.

Sources (newlib: espressif/newlib-esp32 branch esp-4.3.0, ``newlib/libc/stdio``; ESP-IDF: espressif/esp-idf):

* buffer: ``__smakebuf_r`` / ``__swhatbuf_r`` (makebuf.c) take ``st_blksize`` from ``_fstat_r`` when newlib is
  built with HAVE_BLKSIZE (configure.host, ``*-esp-*``) and it is > 0, else ``BUFSIZ``, 128 on Espressif
  targets (sys/config.h, "Espressif-specific" ``__BUFSIZ__ 128``).  On the ESP32 the ROM copies of
  ``__smakebuf_r``, ``__srefill_r``, ``__sfvwrite_r`` and ``__swsetup_r`` are linked instead
  (components/esp_rom/esp32/ld/esp32.rom.newlib-funcs.ld) and were built without HAVE_BLKSIZE
  (components/newlib/test_apps/newlib/main/test_file.c says so): BUFSIZ whatever the filesystem reports.
* locking: every stdio call brackets its work with ``_newlib_flockfile_start/end`` (local.h) ->
  ``__lock_acquire_recursive`` / ``__lock_release_recursive`` (sys/stdio.h), which ESP-IDF maps to FreeRTOS
  recursive mutexes (components/newlib/locks.c ``lock_acquire_generic``: ``xSemaphoreTakeRecursive``; release:
  ``xSemaphoreGiveRecursive``).  The lock is free between calls, so each call runs the full take
  (``xQueueTakeMutexRecursive`` -> ``xQueueGenericReceive``) and give (``xQueueGiveMutexRecursive`` ->
  ``xQueueGenericSend``), each inside a critical section on the queue's spinlock
  (components/freertos/queue.c ``taskENTER_CRITICAL(&pxQueue->mux)``).
* per call: ``fgetc`` (fgetc.c: ``_REENT``, ``CHECK_INIT``, lock, the ``__sgetc_r`` macro of stdio.h), refill
  (refill.c ``__srefill_r``: one ``fp->_read`` of ``_bf._size`` bytes), ``fwrite`` (fwrite.c -> fvwrite.c
  ``__sfvwrite_r``: copy into the buffer, ``_fflush_r`` when full, a direct write of whole buffers only from an
  empty buffer), ``fprintf`` (vfprintf.c ``_vfprintf_r``: scan the format for '%', gather literals into iovecs,
  ``__sprint_r`` -> ``__sfvwrite_r``; the toolchain builds newlib without ``--enable-newlib-mb``
  (espressif/crosstool-NG samples/xtensa-esp32-elf/crosstool.config), so the scan is the byte loop, not
  ``__mbtowc``), ``fflush`` (fflush.c ``__sflush_r``: writes, no fsync), ``fclose`` (fclose.c).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...options import opt

#: bound of the per-call cycle counts (a millisecond of CPU per call even at 1 GHz)
MAX_CALL_CYCLES = 1_000_000
#: bound of a FILE buffer / st_blksize (newlib's _bf._size is an int; 1 MiB is far beyond any MCU's buffer)
MAX_BUFFER_BYTES = 1 << 20


def _cycles(default: int, what: str) -> int:
    return opt(default, unit="cycles", min=0, max=MAX_CALL_CYCLES, help=what)


@dataclass(frozen=True)
class NewlibStdio:
    """newlib stdio on the host: per-call CPU costs (cycles at the profile's cpu_hz) and FILE buffer sizing.

    The cycle counts are estimates from the call paths in the sources named in the module docstring
    (docs/stdio.md: the count behind each); none is fitted to a measurement yet."""

    lock_cycles: int = _cycles(700, "one take and give of the FILE lock (every stdio call): a FreeRTOS recursive mutex")
    getc_cycles: int = _cycles(60, "fgetc's work per character besides the lock (__getreent, CHECK_INIT, __sgetc_r)")
    fwrite_cycles: int = _cycles(150, "fwrite's work per call besides the lock and the copy (_fwrite_r, __sfvwrite_r)")
    fread_cycles: int = _cycles(120, "fread's work per call besides the lock and the copy (_fread_r)")
    fprintf_cycles: int = _cycles(350, "fprintf's work per call besides the lock, the format scan and the copy (_vfprintf_r, __sprint_r)")
    format_cycles_per_byte: float = opt(5.0, unit="cycles/B", min=0, max=10_000.0,
                                        help="vfprintf's scan of literal format characters, per character")
    copy_cycles_per_byte: float = opt(0.5, unit="cycles/B", min=0, max=10_000.0,
                                      help="memcpy into or out of the FILE buffer, per byte")
    io_cycles: int = _cycles(150, "newlib's side of one buffer refill or flush (__srefill_r, __sflush_r, __sread, _read_r...)")
    fopen_cycles: int = _cycles(5000, "fopen and the buffer set-up at the first I/O, besides the filesystem's open")
    fclose_cycles: int = _cycles(2200, "fclose besides the flush and the filesystem's close (free the buffer, delete the lock)")
    bufsiz_bytes: int = opt(128, unit="B", min=1, max=MAX_BUFFER_BYTES,
                            help="BUFSIZ: the FILE buffer when st_blksize is not used (128 on Espressif targets)")
    honour_blksize: bool = opt(True, help="the FILE buffer is st_blksize when the filesystem reports one (HAVE_BLKSIZE); not with "
                                          "ESP32 ROM stdio")
    fat_fstat_blksize_bytes: int = opt(0, unit="B", min=0, max=MAX_BUFFER_BYTES,
                                       help="st_blksize of ESP-IDF's FAT VFS (CONFIG_FATFS_VFS_FSTAT_BLKSIZE; 0 = not set)")
