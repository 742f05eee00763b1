"""The BlockDevice contract every layer of the stack builds on.

A BlockDevice addresses its medium in *sectors* (``geometry.sector_size``
bytes each, numbered by LBA).  Reads, programs and erases must respect the
read/prog/erase granularities in the geometry; the base class checks bounds
and alignment once, so implementations only override the ``_read``,
``_write`` (and optionally ``_erase``, ``_trim``, ``_sync``) primitives, as
fsspec's base classes do.

Wrappers (trace, faults, caches, bridges, wear levelling) are BlockDevices
around a BlockDevice (see :class:`BlockDeviceWrapper`), the way SQLite's test
VFS wraps a VFS.

``buf_addr``: the simulated host address of the caller's buffer.  Host
drivers with DMA alignment rules (ESP-IDF sdmmc needs 4-byte aligned buffers)
take a slow path when it is unaligned.  ``0`` means a driver-owned, aligned
buffer.  Wrappers pass it through unchanged; real media ignore it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from ..clock import Clock, WallClock
from ..errors import SdbenchError


class BlockDeviceError(SdbenchError):
    """Base for errors raised by block devices."""


class OutOfRangeError(BlockDeviceError):
    """An operation touches sectors outside the device (or its allowed range)."""


class AlignmentError(BlockDeviceError):
    """An operation is not aligned to the device's read/prog/erase granularity."""


class ReadOnlyError(BlockDeviceError):
    """A write, erase or trim was attempted on a read-only device."""


@dataclass(frozen=True)
class Geometry:
    """Device geometry.  All sizes in bytes.

    sector_size   bytes per LBA; every op addresses whole sectors (> 0).
    sector_count  number of sectors (> 0).
    read_size     smallest readable unit; multiple of sector_size.
    prog_size     smallest programmable unit; multiple of sector_size.
    erase_size    smallest erasable unit; multiple of prog_size.
    erase_value   byte value read back after an erase, or None when the medium
                  does not define it (then erase leaves 0x00, like most SD
                  cards' DATA_STAT_AFTER_ERASE=0).
    """

    sector_size: int
    sector_count: int
    read_size: int = 0
    prog_size: int = 0
    erase_size: int = 0
    erase_value: int | None = None

    def __post_init__(self) -> None:
        ss = self.sector_size
        if ss <= 0 or self.sector_count <= 0:
            raise ValueError("sector_size and sector_count must be positive")
        # 0 means "same as sector_size"
        if self.read_size == 0:
            object.__setattr__(self, "read_size", ss)
        if self.prog_size == 0:
            object.__setattr__(self, "prog_size", ss)
        if self.erase_size == 0:
            object.__setattr__(self, "erase_size", self.prog_size)
        for name in ("read_size", "prog_size", "erase_size"):
            v = getattr(self, name)
            if v <= 0 or v % ss:
                raise ValueError(f"{name} ({v} B) must be a positive multiple of sector_size ({ss} B)")
        if self.erase_size % self.prog_size:
            raise ValueError("erase_size must be a multiple of prog_size")
        if self.erase_value is not None and not 0 <= self.erase_value <= 255:
            raise ValueError("erase_value must be a byte value or None")

    @property
    def size_bytes(self) -> int:
        return self.sector_size * self.sector_count

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DeviceStats:
    """Operation counters, as littlefs's emulated block device keeps them."""

    reads: int = 0
    writes: int = 0
    erases: int = 0
    trims: int = 0
    syncs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_erased: int = 0
    bytes_trimmed: int = 0

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    @staticmethod
    def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
        return {k: after[k] - before.get(k, 0) for k in after}


class BlockDevice(ABC):
    """Base class: validates every request, counts it, then calls a primitive."""

    #: registry name of the implementation (set by subclasses)
    kind = "blockdevice"

    def __init__(self, geometry: Geometry, clock: Clock | None = None, *, read_only: bool = False) -> None:
        self.geometry = geometry
        self.clock: Clock = clock if clock is not None else WallClock()
        self.read_only = read_only
        self.stats = DeviceStats()
        self.closed = False

    # ---- primitives to override -------------------------------------------------
    @abstractmethod
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes: ...

    @abstractmethod
    def _write(self, lba: int, data: bytes, buf_addr: int) -> None: ...

    def _erase(self, lba: int, count: int) -> None:
        fill = self.geometry.erase_value
        self._write(lba, bytes([0 if fill is None else fill]) * (count * self.geometry.sector_size), 0)

    def _trim(self, lba: int, count: int) -> None:
        """Default: a trim is only a hint; contents stay readable."""

    def _sync(self) -> None:
        """Default: nothing is cached below."""

    def _close(self) -> None:
        """Default: nothing to release."""

    # ---- public API -------------------------------------------------------------
    def read(self, lba: int, count: int, *, buf_addr: int = 0) -> bytes:
        g = self.geometry
        ss = g.sector_size
        # the checks inline (the simulated stacks call this millions of times); the helpers raise the errors
        if lba < 0 or count < 0 or lba + count > g.sector_count:
            self._check_range(lba, count)
        if g.read_size != ss and ((lba * ss) % g.read_size or (count * ss) % g.read_size):
            self._check_align("read", lba, count, g.read_size)
        data = self._read(lba, count, buf_addr)
        n = len(data)
        if n != count * ss:
            raise BlockDeviceError(f"{self.kind}: short read at LBA {lba} ({n} of {count * ss} B)")
        st = self.stats
        st.reads += 1
        st.bytes_read += n
        return data

    def reader(self) -> Callable[..., bytes]:
        """A function ``(lba, count, *, buf_addr=0) -> bytes`` that is :meth:`read` in every effect (checks, errors,
        stats, time), for a caller that reads this device very often and directly, nothing between (a
        filesystem's block callbacks, wear levelling).  A device may give a path specialised for that (the
        simulated SD and flash drivers' fused reads); by default it is :meth:`read` itself."""
        return self.read

    def copy_pieces(self, src_lba: int, dst_lba: int, count: int, piece: int) -> None:
        """Copy ``count`` sectors from ``src_lba`` to ``dst_lba``, ``piece`` sectors at a time: a read of each
        piece, then its write (what wear levelling's move of a page through a small buffer does), with every
        effect of those calls (checks, errors, stats, time).  A device may do it in fewer steps (the simulated
        ESP32 flash driver); by default it is those reads and writes."""
        read = self.reader()
        for i in range(0, count, piece):
            n = min(piece, count - i)
            self.write(dst_lba + i, read(src_lba + i, n))

    def write(self, lba: int, data: bytes | bytearray | memoryview, *, buf_addr: int = 0) -> None:
        g = self.geometry
        ss = g.sector_size
        if self.read_only:
            self._check_writable()
        n = len(data)
        if n % ss:
            raise AlignmentError(f"write of {n} B is not a whole number of {ss}-byte sectors")
        count = n // ss
        # the checks inline, as in read(); the helpers raise the errors
        if lba < 0 or lba + count > g.sector_count:
            self._check_range(lba, count)
        if g.prog_size != ss and ((lba * ss) % g.prog_size or n % g.prog_size):
            self._check_align("write", lba, count, g.prog_size)
        self._write(lba, bytes(data), buf_addr)
        st = self.stats
        st.writes += 1
        st.bytes_written += n

    def erase(self, lba: int, count: int) -> None:
        g = self.geometry
        ss = g.sector_size
        if self.read_only:
            self._check_writable()
        if lba < 0 or count < 0 or lba + count > g.sector_count:
            self._check_range(lba, count)
        if (lba * ss) % g.erase_size or (count * ss) % g.erase_size:
            self._check_align("erase", lba, count, g.erase_size)
        self._erase(lba, count)
        st = self.stats
        st.erases += 1
        st.bytes_erased += count * ss

    def trim(self, lba: int, count: int) -> None:
        self._check_writable()
        self._check_range(lba, count)
        self._trim(lba, count)
        self.stats.trims += 1
        self.stats.bytes_trimmed += count * self.geometry.sector_size

    def sync(self) -> None:
        self._sync()
        self.stats.syncs += 1

    def close(self) -> None:
        if not self.closed:
            self._close()
            self.closed = True

    def describe(self) -> dict[str, Any]:
        """Stack metadata for result records (no secrets, JSON-safe)."""
        return {"kind": self.kind, "geometry": self.geometry.to_dict(), "read_only": self.read_only}

    def __enter__(self) -> "BlockDevice":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- checks -----------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{self.kind}: device is read-only")

    def _check_range(self, lba: int, count: int) -> None:
        if lba < 0 or count < 0 or lba + count > self.geometry.sector_count:
            raise OutOfRangeError(
                f"{self.kind}: sectors {lba}..{lba + count - 1} outside 0..{self.geometry.sector_count - 1}"
            )

    def _check_align(self, what: str, lba: int, count: int, unit: int) -> None:
        ss = self.geometry.sector_size
        if (lba * ss) % unit or (count * ss) % unit:
            raise AlignmentError(f"{self.kind}: {what} of {count} sector(s) at LBA {lba} not aligned to {unit} B")


class BlockDeviceWrapper(BlockDevice):
    """A BlockDevice around another; by default every call passes straight through."""

    kind = "wrapper"

    def __init__(self, inner: BlockDevice, geometry: Geometry | None = None) -> None:
        super().__init__(geometry or inner.geometry, inner.clock, read_only=inner.read_only)
        self.inner = inner

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        return self.inner.read(lba, count, buf_addr=buf_addr)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        self.inner.write(lba, data, buf_addr=buf_addr)

    def _erase(self, lba: int, count: int) -> None:
        self.inner.erase(lba, count)

    def _trim(self, lba: int, count: int) -> None:
        self.inner.trim(lba, count)

    def _sync(self) -> None:
        self.inner.sync()

    def _close(self) -> None:
        self.inner.close()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["below"] = self.inner.describe()
        return d


def bottom(device: BlockDevice) -> BlockDevice:
    """The innermost device of a stack of wrappers."""
    while isinstance(device, BlockDeviceWrapper):
        device = device.inner
    return device
