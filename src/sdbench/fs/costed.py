"""Host CPU cost of file calls above the device (VFS, filesystem code).

On a simulated target, a read()/write() call costs software time before and
after any device I/O: the VFS dispatch, the filesystem's bookkeeping, and
copies of partial sectors.  :class:`CostedFileSystem` charges that time on the
stack's virtual clock (category ``host``) and otherwise passes every call
through to the real filesystem code.  ``File.sync`` is charged one call like
read/write (a VFS fsync); the other calls (stat, remove, listdir, mkdir,
rename, truncate) are not charged.
"""
from __future__ import annotations

from typing import Any, Callable

from ..clock import VirtualClock
from ..ledger import Price
from .base import File, FileSystem, FileSystemWrapper


class CostedFile(File):
    """A file of a :class:`CostedFileSystem`.  ``charge_call()`` charges one read()/write() call without passing
    it on: for a layer above that serves the call itself and moves sectors through ``inner`` (SdFat's sector
    cache in the SdFat bench)."""

    def __init__(self, fs: "CostedFileSystem", inner: File) -> None:
        super().__init__(fs, inner.path, inner.mode)
        self.inner = inner
        self._fs = fs
        self.charge_call = fs.charge

    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        self._fs.charge()
        return self.inner.read(size, buf_addr=buf_addr)

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        self._fs.charge()
        return self.inner.write(data, buf_addr=buf_addr)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def _file_size(self) -> int:
        return self.inner._file_size()

    def _truncate(self, size: int) -> None:
        self.inner.truncate(size)

    def _sync(self) -> None:
        self._fs.charge()
        self.inner.sync()

    def _close(self) -> None:
        self.inner.close()


class CostedFileSystem(FileSystemWrapper):
    file_class = CostedFile

    def __init__(self, inner: FileSystem, clock: VirtualClock, call_ns: float, open_ns: float = 0.0, *,
                 call_price: Price | None = None, open_price: Price | None = None) -> None:
        """``call_price``/``open_price``: the profile fields ``call_ns``/``open_ns`` come from (for re-pricing;
        None: a time no profile field sets)."""
        super().__init__(inner)
        self.clock, self.call_ns, self.open_ns = clock, call_ns, open_ns
        self.call_price, self.open_price = call_price, open_price
        #: charges one call, or ``charge(n)`` n calls in a row (VirtualClock.pricer: made once, a run of small calls
        #: makes millions)
        self.charge: Callable[..., None] = clock.pricer(call_ns, "host", call_price)

    def _open(self, path: str, mode: str) -> File:
        self.clock.advance_priced(self.open_ns, "host", self.open_price)
        return CostedFile(self, self.inner.open(path, mode))

    def describe(self) -> dict[str, Any]:
        d = self.inner.describe()
        d["call_cost_us"] = self.call_ns / 1e3
        d["open_cost_us"] = self.open_ns / 1e3
        return d
