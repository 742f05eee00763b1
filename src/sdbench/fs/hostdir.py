"""File-level protocols on a mounted directory (ext4, vfat, exfat, ... through the OS).

:class:`DirTarget` is a :class:`~sdbench.fs.base.FileSystem` whose files live
in a real directory, so the same protocols that run on simulated FAT or
LittleFS run on a mounted card.  The OS page cache would otherwise turn a
card benchmark into a RAM benchmark (the classic pitfall with dd on a
mounted card), so several cache-defeat methods are used and reported in
:attr:`DirTarget.defeat_methods`:

``o_direct``          transfers whose file offset is aligned (and whole aligned
                      blocks of longer writes) use a second descriptor opened
                      with O_DIRECT, when a probe shows the filesystem accepts it;
                      the unaligned rest goes through the page cache.
``fsync``             a file written through the cache is fsync'ed on close and
                      :meth:`DirTarget.sync` fsyncs open files and the directory.
``fadvise_dontneed``  posix_fadvise(DONTNEED) drops a file's cached pages after
                      it is synced and before it is read (and before each
                      buffered read), so reads come from the medium.
``drop_caches``       with ``drop_caches=True`` and root: ``sync`` and
                      ``/proc/sys/vm/drop_caches`` before files are opened for
                      reading (also drops cached directory entries and inodes).

A mounted directory is never formatted: :meth:`format` raises.  ``mount`` and
``unmount`` only sync and drop caches; the OS keeps the filesystem mounted.
"""
from __future__ import annotations

import errno
import os
import stat as stat_mod
from pathlib import Path
from typing import Any

from ..errors import FileSystemError, SdbenchError
from ..media.linux import AlignedBuffer
from ..media.safety import read_mounts
from .base import SEEK_CUR, SEEK_END, SEEK_SET, File, FileStat, FileSystem

PROBE_PREFIX = ".sdbench-probe-"
DROP_CACHES = "/proc/sys/vm/drop_caches"


class DirFile(File):
    def __init__(self, fs: "DirTarget", path: str, mode: str, host: str) -> None:
        super().__init__(fs, path, mode)
        self._fs = fs
        self._host = host
        self.writable = mode != "r"
        flags = {"r": os.O_RDONLY, "r+": os.O_RDWR, "w": os.O_RDWR | os.O_CREAT | os.O_TRUNC,
                 "a": os.O_RDWR | os.O_CREAT}[mode] | os.O_CLOEXEC
        try:
            self._fd = os.open(host, flags, 0o644)
        except FileNotFoundError:
            raise FileSystemError(f"no such file: {path}") from None
        except IsADirectoryError:
            raise FileSystemError(f"{path} is a directory") from None
        except PermissionError:
            raise FileSystemError(f"no permission to open {path} in {fs.root}") from None
        except OSError as e:
            raise FileSystemError(f"cannot open {path}: {e.strerror}") from None
        self._dfd = -1
        self.align = fs.direct_align_bytes
        if self.align:
            try:
                self._dfd = os.open(host, (os.O_RDWR if self.writable else os.O_RDONLY) | os.O_DIRECT | os.O_CLOEXEC)
            except OSError:
                self.align = 0
        self._bounce: AlignedBuffer | None = None
        self._pos = 0
        self.dirty = False
        if mode in ("r", "r+"):
            fs._drop_file(self._fd)

    def _buf(self, n: int) -> AlignedBuffer:
        if self._bounce is None or self._bounce.size < n:
            if self._bounce is not None:
                self._bounce.close()
            self._bounce = AlignedBuffer(max(n, 64 * 1024))
        return self._bounce

    def _no_direct(self, why: str) -> None:
        self._fs.warnings.append(f"{self.path}: O_DIRECT transfer failed ({why}); using the page cache for this file")
        if self._dfd >= 0:
            os.close(self._dfd)
        self._dfd, self.align = -1, 0

    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        if self.closed:
            raise FileSystemError(f"{self.path}: file is closed")
        if size is None or size < 0:
            size = max(os.fstat(self._fd).st_size - self._pos, 0)
        if size == 0:
            return b""
        a = self.align
        if a and self._pos % a == 0:
            span = -(-size // a) * a
            b = self._buf(span)
            try:
                got = os.preadv(self._dfd, [b.view[:span]], self._pos)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise FileSystemError(f"read of {self.path} failed: {e.strerror}") from None
                self._no_direct(e.strerror)
            else:
                got = min(got, size)
                self._pos += got
                self._fs.counters["direct_ops"] += 1
                return bytes(b.view[:got])
        self._fs._drop_range(self._fd, self._pos, size)
        out = bytearray()
        while len(out) < size:
            try:
                chunk = os.pread(self._fd, size - len(out), self._pos + len(out))
            except OSError as e:
                raise FileSystemError(f"read of {self.path} failed: {e.strerror}") from None
            if not chunk:
                break
            out += chunk
        self._pos += len(out)
        self._fs.counters["buffered_ops"] += 1
        return bytes(out)

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        if self.closed:
            raise FileSystemError(f"{self.path}: file is closed")
        if not self.writable:
            raise FileSystemError(f"{self.path} is open read-only")
        n = len(data)
        if self.mode == "a":
            self._pos = os.fstat(self._fd).st_size
        view = memoryview(data)
        done = 0
        a = self.align
        if a and self._pos % a == 0 and n >= a:
            k = n // a * a
            b = self._buf(k)
            b.view[:k] = view[:k]
            try:
                w = 0
                while w < k:
                    w += os.pwritev(self._dfd, [b.view[w:k]], self._pos + w)
                done = k
                self._fs.counters["direct_ops"] += 1
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise FileSystemError(f"write of {self.path} failed: no space left") from None
                if e.errno != errno.EINVAL:
                    raise FileSystemError(f"write of {self.path} failed: {e.strerror}") from None
                self._no_direct(e.strerror)
        if done < n:
            try:
                off = self._pos + done
                while done < n:
                    w = os.pwrite(self._fd, view[done:], off)
                    done += w
                    off += w
            except OSError as e:
                raise FileSystemError(f"write of {self.path} failed: "
                                      f"{'no space left' if e.errno == errno.ENOSPC else e.strerror}") from None
            self.dirty = True
            self._fs.counters["buffered_ops"] += 1
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = SEEK_SET) -> int:
        if whence == SEEK_SET:
            pos = offset
        elif whence == SEEK_CUR:
            pos = self._pos + offset
        elif whence == SEEK_END:
            pos = os.fstat(self._fd).st_size + offset
        else:
            raise FileSystemError(f"bad whence {whence}")
        if pos < 0:
            raise FileSystemError(f"{self.path}: seek to negative offset {pos}")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def fsync(self) -> None:
        os.fsync(self._fd)
        self._fs.counters["fsyncs"] += 1
        self.dirty = False

    def _file_size(self) -> int:
        return os.fstat(self._fd).st_size

    def _truncate(self, size: int) -> None:
        """ftruncate(2); the position moves back to ``size`` if it was beyond."""
        try:
            os.ftruncate(self._fd, size)
        except OSError as e:
            raise FileSystemError(f"truncate {self.path}: {e.strerror}") from None
        self._pos = min(self._pos, size)

    def _sync(self) -> None:
        """fsync(2) of the file (data and metadata)."""
        self.fsync()

    def _close(self) -> None:
        try:
            if self.writable and self._fs.fsync_on_close:
                self.fsync()
            self._fs._drop_file(self._fd)
        finally:
            os.close(self._fd)
            if self._dfd >= 0:
                os.close(self._dfd)
            if self._bounce is not None:
                self._bounce.close()
            self._fs._open_files.discard(self)


class DirTarget(FileSystem):
    """A mounted directory seen through the FileSystem interface."""

    kind = "dir"
    file_class = DirFile

    def __init__(self, path: str | os.PathLike[str], *, direct: bool = True, drop_caches: bool = False,
                 fsync_on_close: bool = True) -> None:
        root = Path(path)
        if not root.exists():
            raise SdbenchError(f"no such directory: {root}")
        if not root.is_dir():
            raise SdbenchError(f"{root} is not a directory (raw devices and image files go to --device)")
        if not os.access(root, os.W_OK | os.X_OK):
            raise SdbenchError(f"no permission to create files in {root}")
        super().__init__(None)  # type: ignore[arg-type]  # the OS owns the device below
        self.root = root.resolve()
        self.mounted = True
        self.fsync_on_close = fsync_on_close
        self.warnings: list[str] = []
        self.counters = {"direct_ops": 0, "buffered_ops": 0, "fsyncs": 0, "fadvise": 0, "drop_caches": 0}
        self.created: set[str] = set()
        self._open_files: set[DirFile] = set()
        self.direct_align_bytes = self._probe_direct() if direct else 0
        if direct and not self.direct_align_bytes:
            self.warnings.append(f"{self.root}: the filesystem refuses O_DIRECT; every transfer goes through the "
                                 f"page cache (fsync and posix_fadvise still apply)")
        self.drop_caches = False
        if drop_caches:
            if os.geteuid() == 0 and os.access(DROP_CACHES, os.W_OK):
                self.drop_caches = True
            else:
                self.warnings.append("dropping the kernel caches needs root; not done")
        methods = []
        if self.direct_align_bytes:
            methods.append("o_direct")
        if fsync_on_close:
            methods.append("fsync")
        methods.append("fadvise_dontneed")
        if self.drop_caches:
            methods.append("drop_caches")
        #: cache-defeat methods in effect (see the module docstring)
        self.defeat_methods: tuple[str, ...] = tuple(methods)
        self.mount_info = self._find_mount()

    # ---- probing --------------------------------------------------------------------
    def _probe_direct(self) -> int:
        """Smallest alignment at which an O_DIRECT write works here (0: none)."""
        probe = self.root / f"{PROBE_PREFIX}{os.getpid()}"
        buf = AlignedBuffer(4096)
        try:
            try:
                fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                if e.errno == errno.EINVAL:
                    return 0
                raise SdbenchError(f"cannot create files in {self.root}: {e.strerror}") from None
            try:
                for align in (512, 4096):
                    try:
                        os.pwritev(fd, [buf.view[:align]], 0)
                        os.preadv(fd, [buf.view[:align]], 0)
                        return align
                    except OSError as e:
                        if e.errno != errno.EINVAL:
                            raise SdbenchError(f"cannot write in {self.root}: {e.strerror}") from None
                return 0
            finally:
                os.close(fd)
        finally:
            buf.close()
            try:
                probe.unlink()
            except OSError:
                pass

    def _find_mount(self) -> dict[str, str]:
        st = os.stat(self.root)
        dev = (os.major(st.st_dev), os.minor(st.st_dev))
        best = None
        for m in read_mounts():
            if m.devno == dev and (str(self.root) + "/").startswith(m.mount_point.rstrip("/") + "/"):
                if best is None or len(m.mount_point) > len(best.mount_point):
                    best = m
        if best is None:
            return {}
        return {"mount_point": best.mount_point, "fstype": best.fstype, "source": best.source}

    # ---- cache control -------------------------------------------------------------------
    def _drop_range(self, fd: int, offset: int, length: int) -> None:
        try:
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
            self.counters["fadvise"] += 1
        except OSError:
            pass

    def _drop_file(self, fd: int) -> None:
        self._drop_range(fd, 0, 0)  # length 0: to the end of the file

    def drop_caches_now(self) -> None:
        """sync + drop the kernel's page, dentry and inode caches (root, when asked for)."""
        if not self.drop_caches:
            return
        os.sync()
        try:
            with open(DROP_CACHES, "w") as f:
                f.write("3\n")
            self.counters["drop_caches"] += 1
        except OSError as e:
            self.warnings.append(f"drop_caches failed: {e.strerror}")
            self.drop_caches = False

    # ---- raw descriptors for benchmark loops ---------------------------------------------
    def host_path(self, path: str) -> str:
        """The real path of a file of this target (``/a/b`` -> ``<root>/a/b``)."""
        parts = [p for p in path.split("/") if p and p != "."]
        if ".." in parts:
            raise FileSystemError(f"{path}: '..' is not allowed (files stay inside {self.root})")
        return str(self.root.joinpath(*parts)) if parts else str(self.root)

    def open_fd(self, path: str, *, write: bool, direct: bool, create: bool = False,
                extra_flags: int = 0) -> tuple[int, bool]:
        """Open a descriptor for a benchmark loop; returns (fd, O_DIRECT in effect).  ``extra_flags``: more open
        flags (O_SYNC, O_DSYNC)."""
        host = self.host_path(path)
        flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_CLOEXEC | (os.O_CREAT if create else 0) | extra_flags
        if create and not os.path.exists(host):
            self.created.add(host)
        use_direct = direct and bool(self.direct_align_bytes)
        try:
            return os.open(host, flags | (os.O_DIRECT if use_direct else 0), 0o644), use_direct
        except FileNotFoundError:
            raise FileSystemError(f"no such file: {path}") from None
        except OSError as e:
            raise FileSystemError(f"cannot open {path}: {e.strerror}") from None

    # ---- FileSystem primitives ---------------------------------------------------------------
    def _format(self) -> None:
        raise FileSystemError(f"refusing to format {self.root}: a mounted directory is used as it is "
                              f"(format the card yourself, e.g. with mkfs, if a protocol needs an empty volume)")

    def _mount(self) -> None:
        self.drop_caches_now()

    def _unmount(self) -> None:
        self.sync()

    def _open(self, path: str, mode: str) -> File:
        host = self.host_path(path)
        existed = os.path.exists(host)
        if mode == "r" and self.drop_caches:
            self.drop_caches_now()
        f = DirFile(self, path, mode, host)
        if not existed:
            self.created.add(host)
        self._open_files.add(f)
        return f

    def _stat(self, path: str) -> FileStat:
        try:
            st = os.stat(self.host_path(path))
        except FileNotFoundError:
            raise FileSystemError(f"no such file: {path}") from None
        return FileStat(path, st.st_size, stat_mod.S_ISDIR(st.st_mode))

    def _remove(self, path: str) -> None:
        host = self.host_path(path)
        try:
            if os.path.isdir(host) and not os.path.islink(host):
                os.rmdir(host)
            else:
                os.unlink(host)
        except FileNotFoundError:
            raise FileSystemError(f"no such file: {path}") from None
        except OSError as e:
            raise FileSystemError(f"cannot remove {path}: {e.strerror}") from None
        self.created.discard(host)

    def _listdir(self, path: str) -> list[str]:
        try:
            names = os.listdir(self.host_path(path))
        except FileNotFoundError:
            raise FileSystemError(f"no such directory: {path}") from None
        except NotADirectoryError:
            raise FileSystemError(f"{path} is not a directory") from None
        return [n for n in names if not n.startswith(PROBE_PREFIX)]

    def _mkdir(self, path: str) -> None:
        host = self.host_path(path)
        try:
            os.mkdir(host)
        except FileExistsError:
            raise FileSystemError(f"mkdir {path}: {path} exists already") from None
        except FileNotFoundError:
            raise FileSystemError(f"mkdir {path}: no such directory: {path.rsplit('/', 1)[0] or '/'}") from None
        except OSError as e:
            raise FileSystemError(f"mkdir {path}: {e.strerror}") from None
        self.created.add(host)

    def _rename(self, old: str, new: str) -> None:
        """rename(2); it replaces only what sdbench created here (a user's file at ``new`` is refused)."""
        src, dst = self.host_path(old), self.host_path(new)
        if os.path.lexists(dst):
            if dst not in self.created:
                raise FileSystemError(f"rename {old} to {new}: {new} exists and sdbench did not create it "
                                      f"(only its own files are replaced)")
            if os.path.isdir(dst) != os.path.isdir(src):
                raise FileSystemError(f"rename {old} to {new}: {new} exists (a directory is never replaced, nor "
                                      f"replaces a file)")
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            raise FileSystemError(f"rename {old} to {new}: no such file: {old}") from None
        except OSError as e:
            raise FileSystemError(f"rename {old} to {new}: {e.strerror}") from None
        # what sdbench created moves along (a directory with everything below it); what it replaced is gone
        moved = [h for h in self.created if h == src or h.startswith(src + os.sep)]
        self.created.discard(dst)
        for host in moved:
            self.created.discard(host)
            self.created.add(dst + host[len(src):])

    # ---- extras ------------------------------------------------------------------------------
    def sync(self) -> None:
        """fsync every open file written through the cache, then the directory itself."""
        for f in list(self._open_files):
            if f.dirty:
                f.fsync()
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
            self.counters["fsyncs"] += 1
        finally:
            os.close(fd)

    def cleanup(self) -> None:
        """Remove the files and directories this target created (deepest first)."""
        for host in sorted(self.created, key=len, reverse=True):
            try:
                if os.path.isdir(host):
                    os.rmdir(host)
                else:
                    os.unlink(host)
            except OSError:
                pass
        self.created.clear()

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "path": str(self.root), "defeat_methods": list(self.defeat_methods),
                             "direct_align_bytes": self.direct_align_bytes, "counters": dict(self.counters)}
        d.update(self.mount_info)
        if self.warnings:
            d["warnings"] = list(self.warnings)
        return d


def open_directory(path: str, *, direct: bool | None = None, drop_caches: bool = False) -> DirTarget:
    """A directory on a mounted filesystem; only files sdbench creates in it are written.

    ``direct``: True = O_DIRECT required (error if refused), False = page cache, None = O_DIRECT where possible."""
    target = DirTarget(path, direct=direct is not False, drop_caches=drop_caches)
    if direct is True and not target.direct_align_bytes:
        raise SdbenchError(f"O_DIRECT is not supported in {path} (the filesystem refuses it); "
                           f"use --buffered to accept page-cache I/O with fsync and fadvise")
    return target
