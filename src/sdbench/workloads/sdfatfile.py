"""SdFat's file calls over FatFs, where SdFat's own FAT code moves sectors differently: its one-sector data cache.

The SdFat bench protocol runs FAT through FatFs (fatfs-ng).  For calls of whole, aligned sectors both libraries
move the same sectors the same way: one sector or a run of them up to the end of a cluster, straight from or to
the caller's buffer.  They differ on a call that starts or ends inside a sector (a 511-byte or 64-byte
``BUF_SIZE``), and that difference is SdFat's (SdFat 2.x ``FatLib/FatFile.cpp``, ``ExFatLib/ExFatFileWrite.cpp``):

* ``FatFile::write`` copies a partial sector into the volume's one-sector cache.  At the start of a sector past the
  end of the file, or of a pre-allocated file (``FILE_FLAG_PREALLOCATE``; exFAT: past ``validLength``), it
  reserves the cache without reading the sector (``CACHE_RESERVE_FOR_WRITE``); elsewhere it reads the sector first
  (``CACHE_FOR_WRITE``).  When the copy fills the sector, the sector is written at once ("Force write if sector
  is full").  FatFs instead reads every sector a partial write starts in while the file pointer is inside the
  file, pre-allocated or not (``f_write``: ``fp->fptr < fp->obj.objsize``), and writes it back only when the
  next call moves on.
* ``FatFile::readPrivate`` reads a partial sector (or one that is the cached sector) through the same cache.
* ``cacheSafeWrite`` / ``cacheSafeRead`` move whole sectors straight, dropping a cached sector the write replaces
  and writing back a dirty one a read covers.

:class:`SdFatFile` follows those rules above a FatFs file and hands FatFs only whole, aligned sectors, which
FatFs moves straight (no sector of its own buffer, no read before a write).  Cluster allocation, the FAT and the
directory stay FatFs' work.  One file call is one charge of the host's per-call cost (``fs_call_cycles``, as
any file call), and a copy into or out of the cache ``copy_cycles_per_byte`` per byte.
"""
from __future__ import annotations

from typing import Any, Callable

SECTOR = 512
#: simulated address of SdFat's cache buffer (a member of the volume object: word aligned, internal RAM)
CACHE_ADDR = 0x3FFC_0000


class SdFatFile:
    """SdFat's read()/write() over a FatFs file (its cache, its direct transfers), at a position of its own.

    ``costed``: the file as the stack's filesystem opened it (a CostedFile on a simulated host: its
    ``charge_call`` charges one call, ``charge_call(k)`` k in a row); ``copy``: ``copy(n)`` charges the copy of n
    bytes into or out of the cache, ``copy(n, k)`` k such copies in a row;
    ``preallocated``: the file was pre-allocated (SdFat's FILE_FLAG_PREALLOCATE)."""

    #: True: a call inside the cached sector (most calls of a small BUF_SIZE) takes a short path of the same
    #: charges and copy; False: every call takes the general one (the reference tests hold the short path to)
    small_call_path = True

    def __init__(self, costed: Any, copy: Callable[..., None], *, preallocated: bool) -> None:
        self._costed = costed
        self._f = getattr(costed, "inner", costed)     # FatFs itself: no per-call charge of its own
        self._copy = copy
        self._prealloc = preallocated
        self._pos = self._f.tell()
        self._cache = bytearray(SECTOR)
        self._cached = -1          # file-relative sector index in the cache, -1 = none
        self._dirty = False
        self._charge_call: Callable[..., None] | None = getattr(costed, "charge_call", None)

    # ---- the file calls -----------------------------------------------------------------------------
    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        if self.short_writes(data, 1):  # within the cached sector without filling it: the copy alone
            return len(data)
        self._charge()
        view = memoryview(data)
        done, n = 0, len(data)
        while done < n:
            off = self._pos % SECTOR
            left = n - done
            if off or left < SECTOR:
                k = min(SECTOR - off, left)
                self._prepare(self._pos // SECTOR, read=not (off == 0 and (self._prealloc or self._pos >= self._size())))
                self._cache[off:off + k] = view[done:done + k]
                self._copy(k)
                self._dirty = True
                if off + k == SECTOR:
                    self._write_back()
            else:
                k = left - left % SECTOR
                self._drop(self._pos // SECTOR, k // SECTOR)
                self._seek(self._pos)
                self._f.write(view[done:done + k], buf_addr=buf_addr + done if buf_addr else 0)
            self._pos += k
            done += k
        return n

    def read(self, size: int, *, buf_addr: int = 0) -> bytes:
        off = self._pos % SECTOR
        if self.short_reads(size, 1):  # within the cached sector and the file: the copy alone
            return bytes(self._cache[off:off + size])
        self._charge()
        size = max(0, min(size, self._size() - self._pos))
        out = bytearray(size)
        done = 0
        while done < size:
            off = self._pos % SECTOR
            left = size - done
            idx = self._pos // SECTOR
            if off or left < SECTOR or idx == self._cached:
                k = min(SECTOR - off, left)
                self._prepare(idx, read=True)
                out[done:done + k] = self._cache[off:off + k]
                self._copy(k)
            else:
                k = left - left % SECTOR
                if self._dirty and idx <= self._cached < idx + k // SECTOR:
                    self._write_back()
                self._seek(self._pos)
                out[done:done + k] = self._f.read(k, buf_addr=buf_addr + done if buf_addr else 0)
            self._pos += k
            done += k
        return bytes(out)

    def short_writes(self, data: bytes, limit: int) -> int:
        """Up to ``limit`` calls of ``write(data)`` in a row, as many as take the short path (inside the cached
        sector without filling it), done at once: the same cache, position and charges, the charges of each kind
        summed (VirtualClock.pricer), for a caller on a virtual clock that reads it only before and after.
        Returns how many (0: the next call takes the general path)."""
        n, pos = len(data), self._pos
        if not self.small_call_path or n <= 0 or pos // SECTOR != self._cached:
            return 0
        off = pos % SECTOR
        k = min(limit, (SECTOR - 1 - off) // n)
        if k <= 0:
            return 0
        if self._charge_call is not None:
            self._charge_call(k)
        self._cache[off:off + k * n] = bytes(data) * k
        self._copy(n, k)
        self._dirty = True
        self._pos = pos + k * n
        return k

    def short_reads(self, size: int, limit: int, ok: Callable[[int], bool] | None = None) -> int:
        """Up to ``limit`` calls of ``read(size)`` in a row that take the short path (inside the cached sector and
        the file) and whose data pass ``ok(last byte)`` (None: no check), done at once as :meth:`short_writes`;
        returns how many (0: the next call takes the general path, which also tells a failed check)."""
        pos = self._pos
        if not self.small_call_path or size <= 0 or pos // SECTOR != self._cached:
            return 0
        off = pos % SECTOR
        k = min(limit, (SECTOR - off) // size, (self._size() - pos) // size)
        if ok is not None:
            cache = self._cache
            for j in range(max(k, 0)):
                if not ok(cache[off + (j + 1) * size - 1]):
                    k = j
                    break
        if k <= 0:
            return 0
        if self._charge_call is not None:
            self._charge_call(k)
        self._copy(size, k)
        self._pos = pos + k * size
        return k

    def seek(self, offset: int) -> int:
        self._pos = offset
        return offset

    def tell(self) -> int:
        return self._pos

    def sync(self) -> None:
        """What SdFat's sync() adds to FatFs': the dirty cache sector written back first."""
        if self._dirty:
            self._write_back()

    # ---- the cache -----------------------------------------------------------------------------------
    def _charge(self) -> None:
        if self._charge_call is not None:
            self._charge_call()

    def _size(self) -> int:
        return self._f._file_size()

    def _seek(self, pos: int) -> None:
        if self._f.tell() != pos:
            self._f.seek(pos)

    def _prepare(self, idx: int, *, read: bool) -> None:
        """FsCache::prepare: sector ``idx`` in the cache, written back first if another dirty one is there; read
        from the card unless reserved for a write that fills it."""
        if idx == self._cached:
            return
        if self._dirty:
            self._write_back()
        if read:
            self._seek(idx * SECTOR)
            self._cache[:] = self._f.read(SECTOR, buf_addr=CACHE_ADDR).ljust(SECTOR, b"\0")
        self._cached = idx

    def _write_back(self) -> None:
        self._seek(self._cached * SECTOR)
        self._f.write(bytes(self._cache), buf_addr=CACHE_ADDR)
        self._dirty = False

    def _drop(self, idx: int, count: int) -> None:
        """cacheSafeWrite: a cached sector in the range the write replaces is no longer the card's."""
        if idx <= self._cached < idx + count:
            self._cached, self._dirty = -1, False
