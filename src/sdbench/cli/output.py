"""Output files: checked before any work, written atomically, readable like any other file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import SdbenchError


def check_writable_output(path: Path) -> None:
    """Fail before any work if ``path`` cannot be written (nothing is created here)."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise SdbenchError(f"cannot write {path}: it is a directory")
    if not parent.is_dir():
        raise SdbenchError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SdbenchError(f"cannot write {path}: permission denied")


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory, then rename: never half-written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the rename must not expose an empty file after a crash
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are for sharing
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
