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

Operations a filesystem may lack (:data:`OPTIONAL_OPS`): ``mkdir``, ``rename``,
``File.truncate`` and ``File.sync``.  Their primitives default to raising
:class:`UnsupportedOperation` ("rename is not supported by flatfs");
:meth:`FileSystem.supports` says beforehand which ones work.  A filesystem
without directories sets ``has_directories = False``: its mkdir is refused.

* ``mkdir(path)``: make one directory; the parent must exist, ``path`` must not
  (FileSystemError).
* ``rename(old, new)``: move a file or directory to a new path.  A file
  ``old`` replaces an existing file ``new``, as POSIX rename(2) does (FatFs and
  SPIFFS refuse the name, so theirs remove ``new`` first, as MicroPython's VFS
  does for FAT); a file never replaces a directory nor a directory a file.
  ``old == new`` does nothing (``old`` must exist).
* ``File.truncate(size)``: shorten an open, writable file to ``size`` bytes.
  Shrink only: a size beyond the end is a FileSystemError (FatFs' f_truncate
  and SPIFFS cut at a point, they do not extend).  The position moves back to
  ``size`` if it was beyond.
* ``File.sync()``: commit the file's data and metadata to the medium (FatFs
  f_sync, lfs_file_sync, SPIFFS_fflush, fsync(2)); the file stays open.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ..errors import FileSystemError
from ..media.base import BlockDevice

MODES = ("r", "r+", "w", "a")
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2
#: operations a filesystem may lack (FileSystem.supports)
OPTIONAL_OPS = ("mkdir", "rename", "truncate", "sync")


class UnsupportedOperation(FileSystemError):
    """The filesystem cannot do this operation at all (``<op> is not supported by <kind>``)."""

    def __init__(self, op: str, kind: str, why: str = "") -> None:
        self.op, self.kind = op, kind
        super().__init__(f"{op} is not supported by {kind}" + (f": {why}" if why else ""))


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

    # ---- optional primitives (default: not supported) ------------------------------------------
    def _truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (at most its size, checked); the position must end at most ``size``."""
        raise UnsupportedOperation("truncate", self.fs.kind)

    def _sync(self) -> None:
        """Commit the file's data and metadata to the medium."""
        raise UnsupportedOperation("sync", self.fs.kind)

    def _file_size(self) -> int:
        """The open file's size in bytes, writes so far included (default: stat of its path)."""
        return self.fs.stat(self.path).size

    # ---- public API -----------------------------------------------------------------------------
    def truncate(self, size: int) -> None:
        """Shorten the file to ``size`` bytes (shrink only; the module docstring has the rules)."""
        self._need_open("truncate")
        if self.mode == "r":
            raise FileSystemError(f"truncate {self.path}: opened read-only")
        if size < 0:
            raise FileSystemError(f"truncate {self.path}: negative size {size}")
        have = self._file_size()
        if size > have:
            raise FileSystemError(f"truncate {self.path} to {size} B: it holds {have} B (truncate only shortens "
                                  f"a file)")
        self._truncate(size)

    def sync(self) -> None:
        """Commit the file's data and metadata to the medium; the file stays open."""
        self._need_open("sync")
        self._sync()

    def close(self) -> None:
        if not self.closed:
            self._close()
            self.closed = True

    def _need_open(self, what: str) -> None:
        if self.closed:
            raise FileSystemError(f"{what} {self.path}: file is closed")

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileSystem(ABC):
    """A filesystem over a block device.  Implementations override the
    underscore methods; the public ones check state and arguments."""

    kind = "filesystem"
    #: False for flat filesystems (SPIFFS): mkdir is refused, names may hold "/"
    has_directories = True
    #: the File subclass ``_open`` returns: :meth:`supports` looks there for truncate and sync
    file_class: type[File] = File

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

    # ---- optional primitives (default: not supported) ------------------------------------------
    def _mkdir(self, path: str) -> None:
        """Make directory ``path`` (not "/"); an existing ``path`` or a missing parent is a FileSystemError."""
        raise UnsupportedOperation("mkdir", self.kind)

    def _rename(self, old: str, new: str) -> None:
        """Move ``old`` to ``new`` (different paths, ``new`` not inside ``old``), replacing a file ``new``."""
        raise UnsupportedOperation("rename", self.kind)

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

    def crash(self) -> None:
        """Forget the mounted state without a write, as a power cut leaves it; the device is not touched."""
        self._crash()
        self.mounted = False

    def _crash(self) -> None:
        """Release what the filesystem holds in this process (the default holds nothing beyond the object)."""

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

    def mkdir(self, path: str) -> None:
        """Make one directory (its parent must exist, it must not)."""
        self._need_mount()
        path = normpath(path)
        if not self.has_directories:
            raise UnsupportedOperation("mkdir", self.kind, "it has no directories")
        if path == "/":
            raise FileSystemError(f"mkdir /: {self.kind}: / exists already")
        self._mkdir(path)

    def rename(self, old: str, new: str) -> None:
        """Move a file or directory to a new path, replacing an existing file there (POSIX rename)."""
        self._need_mount()
        old, new = normpath(old), normpath(new)
        if "/" in (old, new):
            raise FileSystemError(f"rename {old} to {new}: the root cannot be renamed or replaced")
        if old == new:
            self.stat(old)  # POSIX: nothing to do, but it must exist
            return
        if new.startswith(old + "/"):
            raise FileSystemError(f"rename {old} to {new}: cannot move a directory into itself")
        self._rename(old, new)

    def supports(self, op: str) -> bool:
        """Whether optional operation ``op`` (one of :data:`OPTIONAL_OPS`) works here: its primitive is
        overridden (truncate and sync: in :attr:`file_class`) and, for mkdir, the filesystem has directories."""
        if op == "mkdir":
            return self.has_directories and _overrides(type(self), FileSystem, "_mkdir")
        if op == "rename":
            return _overrides(type(self), FileSystem, "_rename")
        if op in ("truncate", "sync"):
            return _overrides(self.file_class, File, "_" + op)
        raise ValueError(f"unknown operation {op!r} (one of {', '.join(OPTIONAL_OPS)})")

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def _need_mount(self) -> None:
        if not self.mounted:
            raise FileSystemError(f"{self.kind}: not mounted")


class FileSystemWrapper(FileSystem):
    """A FileSystem around another (``inner``): every call passes through; subclasses change ``_open`` (and
    what they charge)."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner.device)
        self.inner = inner
        self.kind = inner.kind
        self.has_directories = inner.has_directories

    def _format(self) -> None:
        self.inner.format()

    def _mount(self) -> None:
        self.inner.mount()

    def _crash(self) -> None:
        self.inner.crash()

    def _unmount(self) -> None:
        self.inner.unmount()

    def _open(self, path: str, mode: str) -> File:
        return self.inner.open(path, mode)

    def _stat(self, path: str) -> FileStat:
        return self.inner.stat(path)

    def _remove(self, path: str) -> None:
        self.inner.remove(path)

    def _listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def _mkdir(self, path: str) -> None:
        self.inner.mkdir(path)

    def _rename(self, old: str, new: str) -> None:
        self.inner.rename(old, new)

    def supports(self, op: str) -> bool:
        return self.inner.supports(op)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def bare(fs: FileSystem) -> FileSystem:
    """The filesystem inside its wrappers (CostedFileSystem, StdioFileSystem: each holds the one it wraps as
    ``inner``)."""
    while isinstance(getattr(fs, "inner", None), FileSystem):
        fs = fs.inner  # type: ignore[attr-defined]
    return fs


def _overrides(cls: type, base: type, name: str) -> bool:
    return getattr(cls, name) is not getattr(base, name)


def normpath(path: str) -> str:
    """'/a//b/' -> '/a/b'; the root is '/'."""
    parts = [p for p in path.split("/") if p and p != "."]
    return "/" + "/".join(parts)
