"""The FileSystem interface: real filesystem code (FatFs, littlefs, SPIFFS)
running over a BlockDevice.

Open modes follow POSIX ``open`` flags as the benchmarks use them:

``"r"``   read an existing file                       (O_RDONLY)
``"r+"``  read/write an existing file                 (O_RDWR)
``"w"``   create or truncate, read/write              (O_CREAT|O_TRUNC|O_RDWR)
``"a"``   create if missing, every write appends      (O_CREAT|O_APPEND|O_RDWR)

``buf_addr`` on File.read/write is the simulated host address of the user's
buffer; filesystems that hand whole sectors straight from/to the user buffer
(FatFs) pass the matching address down to the device so driver alignment rules
apply, as on the real target.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ..errors import FileSystemError
from ..media.base import BlockDevice

MODES = ("r", "r+", "w", "a")
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2


@dataclass(frozen=True)
class FileStat:
    path: str
    size: int     # bytes
    is_dir: bool = False


class File(ABC):
    """An open file.  Use as a context manager or call close()."""

    def __init__(self, fs: "FileSystem", path: str, mode: str) -> None:
        self.fs = fs
        self.path = path
        self.mode = mode
        self.closed = False

    @abstractmethod
    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes: ...

    @abstractmethod
    def write(self, data: bytes, *, buf_addr: int = 0) -> int: ...

    @abstractmethod
    def seek(self, offset: int, whence: int = SEEK_SET) -> int: ...

    @abstractmethod
    def tell(self) -> int: ...

    @abstractmethod
    def _close(self) -> None: ...

    def close(self) -> None:
        if not self.closed:
            self._close()
            self.closed = True

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileSystem(ABC):
    """A filesystem over a block device.  Implementations override the
    underscore methods; the public ones check state and arguments."""

    kind = "filesystem"

    def __init__(self, device: BlockDevice) -> None:
        self.device = device
        self.mounted = False

    # ---- to override --------------------------------------------------------------
    @abstractmethod
    def _format(self) -> None: ...

    @abstractmethod
    def _mount(self) -> None: ...

    @abstractmethod
    def _unmount(self) -> None: ...

    @abstractmethod
    def _open(self, path: str, mode: str) -> File: ...

    @abstractmethod
    def _stat(self, path: str) -> FileStat: ...

    @abstractmethod
    def _remove(self, path: str) -> None: ...

    @abstractmethod
    def _listdir(self, path: str) -> list[str]: ...

    # ---- public API ---------------------------------------------------------------
    def format(self) -> None:
        """Create an empty filesystem (unmounted afterwards)."""
        if self.mounted:
            self.unmount()
        self._format()

    def mount(self) -> None:
        if self.mounted:
            return
        self._mount()
        self.mounted = True

    def unmount(self) -> None:
        if not self.mounted:
            return
        self._unmount()
        self.mounted = False

    def open(self, path: str, mode: str = "r") -> File:
        self._need_mount()
        if mode not in MODES:
            raise FileSystemError(f"open mode {mode!r} not one of {', '.join(MODES)}")
        return self._open(normpath(path), mode)

    def stat(self, path: str) -> FileStat:
        self._need_mount()
        return self._stat(normpath(path))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except FileSystemError:
            return False

    def remove(self, path: str) -> None:
        self._need_mount()
        self._remove(normpath(path))

    def listdir(self, path: str = "/") -> list[str]:
        self._need_mount()
        return sorted(self._listdir(normpath(path)))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def _need_mount(self) -> None:
        if not self.mounted:
            raise FileSystemError(f"{self.kind}: not mounted")


def normpath(path: str) -> str:
    """'/a//b/' -> '/a/b'; the root is '/'."""
    parts = [p for p in path.split("/") if p and p != "."]
    return "/" + "/".join(parts)
