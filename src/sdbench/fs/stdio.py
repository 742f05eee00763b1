"""newlib's stdio (FILE) layer over any FileSystem: ``api = "stdio"``.

Most ESP-IDF and Arduino code writes with fopen/fprintf/fwrite and reads with fgetc/fread, not with
write()/read().  :class:`StdioFileSystem` wraps a FileSystem (usually the CostedFileSystem of a simulated
host, whose per-call cost is then the VFS call each buffer flush or refill makes) and opens
:class:`StdioFile`\\ s that behave as newlib's FILE does (newlib/libc/stdio, espressif/newlib-esp32 esp-4.3.0):

* the buffer: ``setvbuf`` size when the caller gives one (:attr:`StdioOptions.buffer_bytes`), else the
  filesystem's ``st_blksize`` where the host's newlib honours it and it is > 0, else ``BUFSIZ``
  (``__swhatbuf_r``, makebuf.c); what each filesystem's VFS reports is :func:`st_blksize`;
* fwrite/fprintf (``__sfvwrite_r``, fvwrite.c): copy into the buffer and write() it when full; only from an
  empty buffer does a request of at least a buffer go down directly, in whole buffers;
* fgetc (fgetc.c, ``__srget_r`` -> ``__srefill_r``): one character from the buffer, a read() of the buffer's
  size when it is empty; a read() that returns 0 sets EOF, which then sticks (no further read());
* fread (``_fread_r``, fread.c): copy what the buffer holds, refill while more is wanted;
* fflush (``__sflush_r``): write() what is buffered, no fsync; fclose: flush, close; File.sync: fflush +
  fsync, as Arduino's ``File::flush`` does.

Each C call charges the host's :class:`~sdbench.media.sim.newlib.NewlibStdio` costs on the virtual clock
(category ``host``) through ``VirtualClock.advance_priced`` with a :class:`~sdbench.ledger.Price` per field
(``<section>.stdio.<field>`` in the cost ledger), so recorded runs re-price with other profile values.
What one ``File.write``/``File.read`` of the caller is follows :class:`StdioOptions`: ``fwrite`` or
``fprintf`` of the bytes as a literal format; ``fread`` or one ``fgetc`` per byte (plus the call that
returns EOF when the file ends first).  A read/write switch, which C requires an fseek for, is done without
one here (the position is kept), so the wrapper passes the FileSystem conformance suite.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clock import VirtualClock
from ..errors import ConfigError
from ..ledger import Price
from ..media.sim.newlib import MAX_BUFFER_BYTES, NewlibStdio
from ..options import opt
from .base import SEEK_CUR, SEEK_SET, File, FileSystem, FileSystemWrapper, bare

#: the file APIs a protocol may write and read through (``api``)
APIS = ("posix", "stdio")
#: what one write() of a protocol becomes under api = "stdio"
WRITE_CALLS = ("fwrite", "fprintf")
#: what one read(n) of a protocol becomes under api = "stdio"
READ_CALLS = ("fread", "fgetc")
API_HELP = ("posix: open/read/write, one VFS call each; stdio: newlib's buffered FILE calls and their CPU costs "
            "(docs/stdio.md)")


@dataclass(frozen=True)
class StdioOptions:
    """How a protocol's calls go through stdio (used when its ``api`` is "stdio")."""

    buffer_bytes: int = opt(0, unit="B", min=0, max=MAX_BUFFER_BYTES,
                            help="setvbuf(f, NULL, _IOFBF, n) after fopen; 0: newlib's choice (st_blksize where "
                                 "honoured, else BUFSIZ)")
    write_call: str = opt("fwrite", choices=WRITE_CALLS,
                          help="a write of n bytes is fwrite(buf, 1, n, f) or fprintf(f, fmt) with an n-byte literal")
    read_call: str = opt("fread", choices=READ_CALLS,
                         help="a read of n bytes is fread(buf, 1, n, f) or n fgetc(f) calls (+1 at EOF: the one "
                              "that returns EOF)")


@dataclass(frozen=True)
class StdioHost:
    """The host the C library runs on: its profile (``cpu_hz`` and a ``stdio`` block) and the profile's ledger
    section ("sd.host", "flash.host")."""

    section: str
    profile: Any


def st_blksize(fs: FileSystem, newlib: NewlibStdio) -> int:
    """What the VFS of ``fs``'s filesystem reports as st_blksize (0: not set): esp_littlefs
    ``vfs_littlefs_fstat`` its block size; ESP-IDF's FAT VFS ``CONFIG_FATFS_VFS_FSTAT_BLKSIZE`` (default 0);
    SPIFFS' ``vfs_spiffs_fstat`` sets none."""
    inner = bare(fs)
    if inner.kind == "littlefs":
        return int(inner.config.block_size)  # type: ignore[attr-defined]
    if inner.kind == "fat":
        return newlib.fat_fstat_blksize_bytes
    return 0


def buffer_bytes(fs: FileSystem, newlib: NewlibStdio, options: StdioOptions) -> int:
    """The FILE buffer size newlib gives a file of ``fs``: setvbuf's, else st_blksize where honoured, else BUFSIZ."""
    if options.buffer_bytes:
        return options.buffer_bytes
    blk = st_blksize(fs, newlib) if newlib.honour_blksize else 0
    return blk if blk > 0 else newlib.bufsiz_bytes


class StdioFile(File):
    """An open FILE over an open File of the wrapped filesystem (see the module's docstring)."""

    def __init__(self, fs: "StdioFileSystem", inner: File, size: int) -> None:
        super().__init__(fs, inner.path, inner.mode)
        self.inner = inner
        self._fs = fs
        self.buffer_bytes = size
        self._out = bytearray()   # written, not yet flushed
        self._in = b""            # the last refill
        self._at = 0              # next character of it
        self._eof = False         # a refill read 0 bytes (__SEOF): fgetc and fread return at once

    # ---- the C calls --------------------------------------------------------------------------
    def fwrite(self, data: bytes) -> int:
        charge = self._fs.charge
        charge("lock_cycles")
        charge("fwrite_cycles")
        self._put(data)
        return len(data)

    def fprintf(self, literal: bytes) -> int:
        """fprintf(f, fmt) with ``literal`` as a format without conversions: scanned, then written as fwrite."""
        charge = self._fs.charge
        charge("lock_cycles")
        charge("fprintf_cycles")
        charge("format_cycles_per_byte", len(literal))
        self._put(literal)
        return len(literal)

    def fgetc(self, calls: int = -1) -> bytes:
        """``calls`` fgetc calls in a row (-1: until EOF); stops after the call that returns EOF. Returns the
        characters they returned."""
        charge = self._fs.charge
        out: list[bytes] = []
        done = 0
        while calls < 0 or done < calls:
            have = len(self._in) - self._at
            if have == 0:
                charge("lock_cycles")   # this call takes the lock, then refills
                charge("getc_cycles")
                done += 1
                if not self._refill():
                    break
                out.append(self._in[:1])
                self._at = 1
                continue
            k = have if calls < 0 else min(have, calls - done)
            charge("lock_cycles", k)
            charge("getc_cycles", k)
            out.append(self._in[self._at:self._at + k])
            self._at += k
            done += k
        return b"".join(out)

    def fread(self, n: int = -1) -> bytes:
        """fread(buf, 1, n, f) (-1: until EOF)."""
        charge = self._fs.charge
        charge("lock_cycles")
        charge("fread_cycles")
        out: list[bytes] = []
        want = n
        while True:
            have = len(self._in) - self._at
            if 0 <= want <= have:  # newlib: while (resid > fp->_r) { copy, refill }; then copy resid
                out.append(self._in[self._at:self._at + want])
                self._at += want
                break
            out.append(self._in[self._at:])
            self._at = len(self._in)
            if want > 0:
                want -= have
            if not self._refill():
                break
        data = b"".join(out)
        charge("copy_cycles_per_byte", len(data))
        return data

    def fflush(self) -> None:
        self._fs.charge("lock_cycles")
        self._flush_out()

    # ---- the File interface: the protocol's calls as the options say -----------------------------
    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        if self._fs.options.read_call == "fgetc":
            return self.fgetc(size)
        return self.fread(size)

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        if self._fs.options.write_call == "fprintf":
            return self.fprintf(data)
        return self.fwrite(data)

    def seek(self, offset: int, whence: int = SEEK_SET) -> int:
        """fseek: flush, drop the read buffer, clear EOF, lseek."""
        self._fs.charge("lock_cycles")
        if whence == SEEK_CUR:
            offset, whence = self.tell() + offset, SEEK_SET
        self._flush_out()
        self._drop_input()
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        if self._out:
            return self.inner.tell() + len(self._out)
        return self.inner.tell() - (len(self._in) - self._at)

    def _file_size(self) -> int:
        self._flush_out()
        return self.inner._file_size()

    def _truncate(self, size: int) -> None:
        """fflush, then ftruncate(fileno(f)) (File.truncate has flushed through _file_size)."""
        self._fs.charge("lock_cycles")
        self._drop_input()
        self.inner.truncate(size)

    def _sync(self) -> None:
        """fflush + fsync(fileno(f))."""
        self.fflush()
        self.inner.sync()

    def _close(self) -> None:
        """fclose: flush, close the file, free the buffer and the FILE's lock."""
        charge = self._fs.charge
        charge("lock_cycles")
        try:
            self._flush_out()
        finally:
            self.inner.close()
            charge("fclose_cycles")

    # ---- the buffer -----------------------------------------------------------------------------
    def _put(self, data: bytes) -> None:
        """__sfvwrite_r, fully buffered."""
        self._drop_input()
        size = self.buffer_bytes
        view = memoryview(data)
        off, n, copied = 0, len(view), 0
        while off < n:
            left = n - off
            if self._out or left < size:  # pass through the buffer
                k = min(left, size - len(self._out))
                self._out += view[off:off + k]
                copied += k
                off += k
                if len(self._out) == size:
                    self._fs.charge("copy_cycles_per_byte", copied)
                    copied = 0
                    self._flush_out()
            else:  # an empty buffer and at least a buffer to write: whole buffers go down directly
                k = left // size * size
                self._fs.charge("io_cycles")
                self.inner.write(view[off:off + k].tobytes())
                off += k
        if copied:
            self._fs.charge("copy_cycles_per_byte", copied)

    def _flush_out(self) -> None:
        """__sflush_r: one write() of what the buffer holds."""
        if self._out:
            self._fs.charge("io_cycles")
            self.inner.write(bytes(self._out))
            self._out.clear()

    def _refill(self) -> bool:
        """__srefill_r: a read() of the buffer's size; False at EOF (sticky) or when it returns nothing."""
        self._flush_out()
        if self._eof:
            return False
        self._fs.charge("io_cycles")
        got = self.inner.read(self.buffer_bytes)
        if not got:
            self._eof = True
            self._in, self._at = b"", 0
            return False
        self._in, self._at = got, 0
        return True

    def _drop_input(self) -> None:
        """Give back what the read buffer holds beyond the position (the switch to writing, fseek)."""
        left = len(self._in) - self._at
        if left:
            self.inner.seek(-left, SEEK_CUR)
        self._in, self._at, self._eof = b"", 0, False


class StdioFileSystem(FileSystemWrapper):
    """A FileSystem whose files are newlib FILEs over the wrapped filesystem's files; every other call passes
    through uncharged (stat, remove, listdir... are not stdio calls)."""

    file_class = StdioFile

    def __init__(self, inner: FileSystem, clock: VirtualClock, host: StdioHost,
                 options: StdioOptions = StdioOptions()) -> None:
        super().__init__(inner)
        self.clock, self.host, self.options = clock, host, options
        self.newlib: NewlibStdio = host.profile.stdio
        self._prices: dict[tuple[str, int], tuple[float, Price]] = {}

    def charge(self, field: str, mult: int = 1) -> None:
        """``mult`` units of the host's ``stdio.<field>`` on the clock, priced for re-pricing."""
        if mult <= 0:
            return
        key = (field, mult)
        hit = self._prices.get(key)
        if hit is None:
            price = Price(self.host.section, f"stdio.{field}", mult)
            hit = self._prices[key] = (price.ns(self.host.profile), price)
        self.clock.advance_priced(hit[0], "host", hit[1])

    def buffer_bytes(self) -> int:
        """The FILE buffer size of files opened here."""
        return buffer_bytes(self.inner, self.newlib, self.options)

    def _open(self, path: str, mode: str) -> File:
        self.charge("fopen_cycles")
        return StdioFile(self, self.inner.open(path, mode), self.buffer_bytes())

    def describe(self) -> dict[str, Any]:
        d = self.inner.describe()
        d["api"] = "stdio"
        d["stdio_buffer_bytes"] = self.buffer_bytes()
        d["stdio_write_call"] = self.options.write_call
        d["stdio_read_call"] = self.options.read_call
        return d


def with_api(fs: FileSystem, api: str, clock: Any, host: StdioHost | None,
             options: StdioOptions = StdioOptions(), *, where: str = "api") -> FileSystem:
    """``fs`` as a protocol with option ``api`` reaches it: itself for "posix", wrapped in
    :class:`StdioFileSystem` for "stdio" (ConfigError naming ``where`` when the part has no simulated host to
    run the C library on)."""
    if api == "posix":
        return fs
    if api != "stdio":
        raise ConfigError(f"{where} = {api!r:.40} is not one of {', '.join(APIS)}")
    if host is None or not isinstance(clock, VirtualClock):
        raise ConfigError(f"{where} = stdio models newlib on a simulated host; this part's filesystem runs on "
                          f"no simulated MCU (real media, a directory, or behind a USB bridge): use api = posix")
    return StdioFileSystem(fs, clock, host, options)
