"""Output files: checked before any work, written atomically, and only ever regular files.

Rules (docs/safety.md):

* an output replaces only a regular file, or creates a new one; a device node,
  FIFO, socket or directory at that path is refused with one line, so that
  ``--json /dev/sda`` can never turn into a write to a disk;
* an existing file that is in use as a disk (a loop device's backing file, a
  swap file, a mounted image) or is read-only (no write bit) is refused too;
* a symbolic link is followed when it points to a regular file (the file it
  points to is replaced and the link stays); a dangling link, or one pointing
  to anything else, is refused;
* the new content goes to a temporary file beside the target, is fsynced and
  then renamed over it: a reader sees the old file or the whole new one.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import SdbenchError
from .media.safety import check_writable_target

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def output_target(path: Path) -> Path:
    """The regular file that writing ``path`` replaces or creates; SdbenchError when that is not allowed."""
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        raise SdbenchError(f"cannot write {path}: {e.strerror}") from None
    target = path
    if stat.S_ISLNK(lst.st_mode):
        target = Path(os.path.realpath(path))
        try:
            st = os.stat(target)
        except FileNotFoundError:
            raise SdbenchError(f"cannot write {path}: it is a symbolic link to {target}, which does not exist") \
                from None
        except OSError as e:
            raise SdbenchError(f"cannot write {path}: {e.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise SdbenchError(f"cannot write {path}: it is a symbolic link to {_kind(st.st_mode)} ({target}); "
                               "outputs replace regular files only")
    elif not stat.S_ISREG(lst.st_mode):
        raise SdbenchError(f"cannot write {path}: it is {_kind(lst.st_mode)}; outputs replace regular files only")
    # a file in use as a disk (loop backing file, swap file, mounted image) or made read-only is not replaced
    check_writable_target(target)
    return target


def check_writable_output(path: Path) -> None:
    """Fail before any work if ``path`` cannot be written (nothing is created here)."""
    target = output_target(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise SdbenchError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise SdbenchError(f"cannot write {path}: permission denied")


def check_profile_output(out: Path, force: bool, flag: str) -> None:
    """Refuse, before any work, a card profile output (``flag``: the option that named it) that is not a .toml
    file, exists (without --force) or cannot be written."""
    shown = str(out).encode("unicode_escape", errors="backslashreplace").decode("ascii")[:80]
    if out.suffix != ".toml":
        raise SdbenchError(f"{flag} {shown}: a card profile is a .toml file (sdbench run reads it with "
                           f"--set sd.card=FILE.toml)")
    if not force and (out.exists() or out.is_symlink()):
        raise SdbenchError(f"{shown} exists; pass --force to replace it")
    check_writable_output(out)


def check_output_dir(path: Path, flag: str, subdirs: tuple[str, ...] = ()) -> None:
    """Refuse, before any work, a directory output (``flag``: the option that named it) that is something else
    (a file, a device, a FIFO, a link to one), or that cannot be created or written; ``subdirs``: the folders the
    command makes inside it."""
    for p in (path, *(path / s for s in subdirs)):
        try:
            st = os.stat(p)
        except FileNotFoundError:
            if os.path.lexists(p):
                raise SdbenchError(f"{flag} {path}: {p} is a symbolic link to nothing; a directory is needed") \
                    from None
            _check_creatable(p, flag, path)
            return  # what is missing below it is created too
        except OSError as e:
            raise SdbenchError(f"{flag} {path}: {e.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            what = "a symbolic link to " if os.path.islink(p) else ""
            raise SdbenchError(f"{flag} {path}: {p} is {what}{_kind(st.st_mode)}; a directory is needed")
        if not os.access(p, os.W_OK | os.X_OK):
            raise SdbenchError(f"{flag} {path}: cannot write into {p}: permission denied")


def _check_creatable(p: Path, flag: str, shown: Path) -> None:
    """``p`` does not exist: its nearest existing ancestor must be a writable directory."""
    parent = Path(os.path.abspath(p)).parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise SdbenchError(f"{flag} {shown}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SdbenchError(f"{flag} {shown}: cannot create {p}: permission denied")


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write via a temporary file in the same directory, then rename: never half-written, never a non-file."""
    target = output_target(path)  # again: the path may have changed since check_writable_output
    parent = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=parent)
    except OSError as e:
        raise SdbenchError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())  # the rename must not expose an empty file after a crash
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are for sharing
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise SdbenchError(f"cannot write {path}: {e.strerror or e}") from None
        raise
