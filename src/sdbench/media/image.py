"""A block device backed by an image file (sparse when created here)."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ..clock import Clock
from ..errors import SdbenchError
from .base import BlockDevice, Geometry
from .safety import check_opened, check_writable_target, stat_target


class ImageFileDevice(BlockDevice):
    kind = "image"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sector_size: int = 512,
        read_only: bool = False,
        erase_value: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.path = Path(path)
        st = stat_target(str(self.path))
        if not stat.S_ISREG(st.st_mode):
            raise SdbenchError(f"{self.path} is not a regular file (an image must be one)")
        size = st.st_size
        if size < sector_size or size % sector_size:
            raise SdbenchError(f"{self.path}: size {size} B is not a positive multiple of {sector_size}-byte sectors")
        # writing: the same refusals as for a device (loop backing file, mounted, swap, read-only mode)
        checked = None if read_only else check_writable_target(self.path)
        try:
            self._fd = os.open(self.path, (os.O_RDONLY if read_only else os.O_RDWR) | os.O_CLOEXEC)
        except PermissionError:
            raise SdbenchError(f"no permission to open {self.path}") from None
        except OSError as e:
            raise SdbenchError(f"cannot open {self.path}: {e.strerror}") from None
        if checked is not None:
            try:
                check_opened(self._fd, checked)
            except BaseException:
                os.close(self._fd)
                raise
        geometry = Geometry(sector_size=sector_size, sector_count=size // sector_size, erase_value=erase_value)
        super().__init__(geometry, clock, read_only=read_only)

    @classmethod
    def create(cls, path: str | os.PathLike[str], size_bytes: int, *, sector_size: int = 512,
               overwrite: bool = False, **kw: Any) -> "ImageFileDevice":
        """Create a sparse image of ``size_bytes`` (no data blocks are allocated)."""
        p = Path(path)
        if size_bytes <= 0 or size_bytes % sector_size:
            raise SdbenchError(f"image size {size_bytes} B must be a positive multiple of {sector_size} B")
        if p.exists() and not overwrite:
            raise SdbenchError(f"{p} exists already (refusing to overwrite it)")
        if overwrite and p.exists():
            check_writable_target(p)
        try:
            # O_EXCL for a new image: a file that appeared meanwhile is never truncated
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                         | (os.O_TRUNC if overwrite else os.O_EXCL), 0o666)
        except FileExistsError:
            raise SdbenchError(f"{p} exists already (refusing to overwrite it)") from None
        except OSError as e:
            raise SdbenchError(f"cannot create image {p}: {e.strerror}") from None
        try:
            try:
                os.ftruncate(fd, size_bytes)
            except OSError as e:
                raise SdbenchError(f"cannot create image {p}: {e.strerror}") from None
            finally:
                os.close(fd)
            dev = cls(p, sector_size=sector_size, **kw)
        except BaseException:
            p.unlink(missing_ok=True)  # the file this call made, and nothing else (O_EXCL, or overwrite asked)
            raise
        dev.created = True
        return dev

    #: True when this object created the image file (a refused run removes it again, see stack.Built.discard)
    created = False

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        ss = self.geometry.sector_size
        return os.pread(self._fd, count * ss, lba * ss)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        off = lba * self.geometry.sector_size
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, off)
            view = view[n:]
            off += n

    def _sync(self) -> None:
        os.fsync(self._fd)

    def _close(self) -> None:
        os.close(self._fd)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["path"] = str(self.path)
        return d
