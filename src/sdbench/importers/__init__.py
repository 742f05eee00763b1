"""Importers: results of other tools (and sdbench's own JSON) as RunRecords.

``parse_text(text, fmt, name=..., scenario=...)`` returns the runs in a file, or
raises :class:`~sdbench.errors.SdbenchError` with one clear line; it never
returns part of a file it could not read completely.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..errors import SdbenchError
from ..records import Results, RunRecord
from . import espidf, fio, sdfat
from .detect import detect

MAX_BYTES = 64 << 20  # larger inputs are not logs of these tools


def _sdbench_json(text: str, *, name: str, scenario: str | None = None) -> list[RunRecord]:
    try:
        runs = list(Results.from_json(text).runs)
    except SdbenchError as e:
        raise SdbenchError(f"{name}: {e}") from None
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


def read_text(path: Path) -> str:
    try:
        if path.is_dir():
            raise SdbenchError(f"{path} is a directory")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SdbenchError(f"{path} is {size >> 20} MiB: too large for a results log")
        data = path.read_bytes()
    except FileNotFoundError:
        raise SdbenchError(f"{path}: no such file") from None
    except PermissionError:
        raise SdbenchError(f"{path}: permission denied") from None
    except OSError as e:
        raise SdbenchError(f"cannot read {path}: {e.strerror}") from None
    if b"\x00" in data[:65536]:
        raise SdbenchError(f"{path} is a binary file, not a results log")
    # serial captures may hold stray non-UTF-8 bytes from resets; they only hit noise lines
    return data.decode("utf-8", errors="replace")


def parse_text(text: str, fmt: str | None = None, *, name: str = "input",
               scenario: str | None = None) -> tuple[str, list[RunRecord]]:
    """(format, runs) of ``text``; ``fmt`` None means detect it."""
    fmt = fmt or detect(text, name)
    if fmt not in PARSERS:
        raise SdbenchError(f"unknown import format {fmt!r} (known: {', '.join(FORMATS)})")
    if not text.strip():
        raise SdbenchError(f"{name} is empty")
    runs = PARSERS[fmt](text, name=name, scenario=scenario)
    if scenario and fmt == "json":
        runs = [replace(r, scenario=scenario) for r in runs]
    return fmt, runs


def parse_file(path: Path, fmt: str | None = None, *, scenario: str | None = None) -> tuple[str, list[RunRecord]]:
    return parse_text(read_text(path), fmt, name=path.name, scenario=scenario)


__all__ = ["FORMATS", "PARSERS", "detect", "parse_file", "parse_text", "read_text"]
