"""Importers: results of other tools (and sdbench's own JSON) as RunRecords.

``parse_text(text, fmt, name=..., scenario=...)`` returns the runs in a file, or
raises :class:`~sdbench.errors.SdbenchError` with one clear line; it never
returns part of a file it could not read completely.  Every figure it returns
is finite, of the right sign and within bounds the store can hold (see
:mod:`.validate`).

``read_text(path)`` reads only regular files: directories, named pipes,
sockets and device nodes are refused before they are opened (opening a FIFO
would wait for a writer; opening a serial port may reset the board on it),
and the opened file is checked again, so a path swapped between the two
cannot slip through.
"""
from __future__ import annotations

import codecs
import json
import os
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..errors import SdbenchError
from ..records import Results, RunRecord
from . import espidf, fio, sdfat
from .detect import MAX_DEPTH as JSON_MAX_DEPTH
from .detect import UnknownFormat, detect
from .validate import check_runs, loads, printable

MAX_BYTES = 64 << 20  # larger inputs are not logs of these tools
_SNIFF = 65536        # bytes looked at to tell text from binary
# control bytes that text logs do hold: tab, newlines, form feed, backspace, bell, escape (colours)
_TEXT_CONTROLS = frozenset(b"\t\n\r\f\b\a\x1b")


def _sdbench_json(text: str, *, name: str, scenario: str | None = None) -> list[RunRecord]:
    # nesting is bounded before the document is parsed (json recurses once per level)
    try:
        doc = loads(text, name, max_depth=JSON_MAX_DEPTH, what="results JSON")
    except json.JSONDecodeError as e:
        raise SdbenchError(f"{name}: not valid JSON: {e}") from None
    try:
        runs = list(Results.from_dict(doc).runs)
    except SdbenchError as e:
        raise SdbenchError(f"{name}: {e}") from None
    except (RecursionError, ValueError, TypeError, AttributeError, KeyError) as e:
        raise SdbenchError(f"{name}: not an sdbench results document ({type(e).__name__})") from None
    if not runs:
        raise SdbenchError(f"{name}: the results document holds no runs")
    return runs


PARSERS: dict[str, Callable[..., list[RunRecord]]] = {
    "espidf": espidf.parse,
    "fio": fio.parse,
    "sdfat": sdfat.parse,
    "json": _sdbench_json,
}
FORMATS = tuple(PARSERS)


def _not_regular(mode: int) -> str | None:
    """What a file that is not a regular file is, or None."""
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return None if stat.S_ISREG(mode) else "not a regular file"


def _too_large(shown: str, size: int) -> SdbenchError:
    return SdbenchError(f"{shown} is {size / (1 << 20):.0f} MiB or more: too large for a results log "
                        f"(at most {MAX_BYTES >> 20} MiB)")


def _os_error(shown: str, e: OSError) -> SdbenchError:
    if isinstance(e, FileNotFoundError):
        return SdbenchError(f"{shown}: no such file")
    if isinstance(e, PermissionError):
        return SdbenchError(f"{shown}: permission denied")
    return SdbenchError(f"cannot read {shown}: {e.strerror or type(e).__name__}")


def _read_bytes(path: Path, shown: str) -> bytes:
    try:
        st = os.stat(path)  # a symbolic link to a log is fine
    except OSError as e:
        raise _os_error(shown, e) from None
    except ValueError:  # a NUL byte in the name
        raise SdbenchError(f"{shown}: not a usable file name") from None
    what = _not_regular(st.st_mode)
    if what:
        raise SdbenchError(f"{shown} is {what}, not a results file")
    if st.st_size > MAX_BYTES:
        raise _too_large(shown, st.st_size)
    # O_NONBLOCK: should the path have become a FIFO since, opening it must not wait for a writer;
    # O_NOFOLLOW on the resolved path: nor may its last part have become a link elsewhere
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.path.realpath(path), flags)
    except OSError as e:
        if isinstance(e, (FileNotFoundError, PermissionError)):
            raise _os_error(shown, e) from None
        raise SdbenchError(f"{shown} changed while it was being opened ({e.strerror}); try again") from None
    try:
        fst = os.fstat(fd)
        what = _not_regular(fst.st_mode)
        if what:
            raise SdbenchError(f"{shown} changed while it was being opened: it is now {what}")
        if fst.st_size > MAX_BYTES:
            raise _too_large(shown, fst.st_size)
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while True:  # never more than MAX_BYTES + 1, however much the file grows meanwhile
            chunk = os.read(fd, min(1 << 20, MAX_BYTES + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_BYTES:
                raise _too_large(shown, total)
        return b"".join(chunks)
    except OSError as e:
        raise _os_error(shown, e) from None
    finally:
        os.close(fd)


def _decode(data: bytes, shown: str) -> str:
    for bom, codec in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):  # e.g. PowerShell's '>' redirection
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                raise SdbenchError(f"{shown} is a binary file, not a results log (invalid UTF-16)") from None
    head = data[:_SNIFF]
    controls = sum(1 for b in head if b < 32 and b not in _TEXT_CONTROLS)
    if b"\x00" in head or controls > len(head) // 10:
        raise SdbenchError(f"{shown} is a binary file, not a results log")
    # serial captures may hold stray non-UTF-8 bytes from resets; they only hit noise lines
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def read_text(path: Path) -> str:
    shown = printable(str(path))
    return _decode(_read_bytes(Path(path), shown), shown)


def parse_text(text: str, fmt: str | None = None, *, name: str = "input",
               scenario: str | None = None) -> tuple[str, list[RunRecord]]:
    """(format, runs) of ``text``; ``fmt`` None means detect it."""
    try:
        return _parse_text(text, fmt, printable(name), scenario)
    except SdbenchError as e:
        msg = str(e)
        if not msg.isprintable():  # a key or label quoted from the input held a line break
            # the one subclass callers tell apart keeps its type; others (RecordError: two arguments) do not
            raise (UnknownFormat if isinstance(e, UnknownFormat) else SdbenchError)(printable(msg)) from None
        raise


def _parse_text(text: str, fmt: str | None, name: str, scenario: str | None) -> tuple[str, list[RunRecord]]:
    text = text.removeprefix("\ufeff")
    fmt = fmt or detect(text, name)
    if fmt not in PARSERS:
        raise SdbenchError(f"unknown import format {fmt!r} (known: {', '.join(FORMATS)})")
    if not text.strip():
        raise SdbenchError(f"{name} is empty")
    runs = PARSERS[fmt](text, name=name, scenario=scenario)
    if scenario and fmt == "json":
        runs = [replace(r, scenario=scenario) for r in runs]
    return fmt, check_runs(runs, name, imported=fmt != "json")


def parse_file(path: Path, fmt: str | None = None, *, scenario: str | None = None) -> tuple[str, list[RunRecord]]:
    return parse_text(read_text(path), fmt, name=Path(path).name, scenario=scenario)


__all__ = ["FORMATS", "MAX_BYTES", "PARSERS", "detect", "parse_file", "parse_text", "read_text"]
