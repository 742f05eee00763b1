"""The one place where command-line flags become permission to write real media."""
from __future__ import annotations

import sys

from ..media.realtarget import WriteGrant


def _ask(question: str) -> bool:
    """A yes/no question on stderr (stdout carries results only); anything but y/yes is no."""
    sys.stderr.write(f"{question} [y/N]: ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except (EOFError, OSError):
        answer = ""
    if not answer.endswith("\n"):
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def write_grant(allow_write: bool, yes: bool) -> WriteGrant:
    """``--allow-write`` and ``--yes`` as a grant; the user is asked only on a terminal."""
    return WriteGrant(allow_write=allow_write, assume_yes=yes, ask=_ask if sys.stdin.isatty() else None)
