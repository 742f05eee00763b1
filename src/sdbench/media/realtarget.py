"""Opening real media: the one place where permission to write is checked.

Permission is a :class:`WriteGrant`, and only the command line makes one
(``--allow-write``, ``--yes``). Scenario files, sweep specs, job files and
``--set`` can describe a device or an image, but nothing they say reaches a
grant, so a file can never make sdbench write real media (docs/safety.md).

* A block device, or an image file named as ``--device``, is written only with
  ``--allow-write`` and after the user confirms the device and byte range
  (``--yes`` answers for them). With nobody to ask (standard input is not a
  terminal), there is no confirmation, so nothing is written.
* An existing image file given as scenario media (``media = "image"``) is
  written only with ``--allow-write``; an image sdbench creates itself (a new
  path) needs no flag, since nothing can be lost.
* Either way the target must pass :func:`~sdbench.media.safety.check_writable_target`:
  not mounted, not the root filesystem or swap, not a loop device's backing
  file, not read-only.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..clock import Clock
from ..errors import SdbenchError
from .image import ImageFileDevice
from .linux import LinuxBlockDevice


class NotConfirmedError(SdbenchError):
    """The user did not confirm a write (or could not be asked)."""


@dataclass(frozen=True)
class WriteGrant:
    """Permission to write real media, made from command-line flags only."""

    allow_write: bool = False                 # --allow-write
    assume_yes: bool = False                  # --yes: the confirmation is given in advance
    #: asks the user a yes/no question (None: nobody to ask, e.g. no terminal)
    ask: Callable[[str], bool] | None = None

    def confirm(self, question: str, what: str) -> None:
        """Raise NotConfirmedError unless the user agrees to ``question``."""
        if self.assume_yes:
            return
        if self.ask is None:
            raise NotConfirmedError(f"not writing to {what}: confirmation needed and nobody to ask "
                                    f"(standard input is not a terminal); pass --yes to confirm in advance")
        if not self.ask(question):
            raise NotConfirmedError(f"not confirmed: nothing was written to {what}")


#: what every caller gets unless the command line says otherwise
NO_WRITES = WriteGrant()


#: what a write does to the data in the range, as the confirmation says it
DESTROYS = "Everything stored there is destroyed"


def open_device(path: str, *, writes: bool, grant: WriteGrant, offset_bytes: int = 0,
                size_bytes: int | None = None, direct: bool | None = None,
                consequence: str = DESTROYS) -> LinuxBlockDevice:
    """A block device or image file on the wall clock, confined to ``[offset, offset + size)``.

    ``direct``: True = O_DIRECT required (error if refused), False = buffered,
    None = O_DIRECT where possible (a warning otherwise). ``consequence``: what the confirmation says the
    writes do to the data there (a command that saves and restores what it overwrites says so).
    """
    if writes and not grant.allow_write:
        what = "data in the tested range is destroyed" if consequence == DESTROYS else consequence[:1].lower() + \
            consequence[1:]
        raise SdbenchError(f"refusing to write to {path} without --allow-write on the command line ({what})")
    dev = LinuxBlockDevice(path, allow_write=writes, offset_bytes=offset_bytes, size_bytes=size_bytes,
                           direct=direct is not False)
    try:
        if direct is True and not dev.direct:
            raise SdbenchError(f"O_DIRECT is not supported on {path} (the filesystem refuses it); "
                               f"use --buffered to accept page-cache I/O")
        if writes:
            from .identity import identify

            try:
                desc = identify(path).get("summary", "")
            except SdbenchError:
                desc = ""
            start, end = dev.offset_bytes, dev.offset_bytes + dev.window_bytes
            what = "device" if dev.is_block else "image file"
            grant.confirm(f"Write test data to {what} {path}{f' ({desc})' if desc else ''}, bytes {start:,}..{end:,} "
                          f"({(end - start) / 2**20:,.1f} MiB)? "
                          f"{consequence}", path)
    except BaseException:
        dev.close()
        raise
    return dev


def open_image(path: Path, *, grant: WriteGrant, sector_size: int, create_bytes: int = 0,
               clock: Clock | None = None) -> ImageFileDevice:
    """An image file as scenario media: an existing one needs ``--allow-write``; a new one is created sparse
    when ``create_bytes`` says how large."""
    try:
        os.lstat(path)
        exists = True
    except FileNotFoundError:
        exists = False
    except OSError as e:
        raise SdbenchError(f"cannot use image {str(path)[:120]}: {e.strerror}") from None
    if exists:
        if not grant.allow_write:
            raise SdbenchError(f"refusing to write to the existing image {path} without --allow-write on the "
                               f"command line (a scenario file or --set cannot allow it)")
        return ImageFileDevice(path, sector_size=sector_size, clock=clock)
    if not create_bytes:
        raise SdbenchError(f"image file not found: {path} (give its size as size_bytes to create it)")
    return ImageFileDevice.create(path, create_bytes, sector_size=sector_size, clock=clock)
