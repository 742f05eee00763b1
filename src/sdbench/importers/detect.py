"""Tell an input file's format from its content."""
from __future__ import annotations

import json
from typing import Any

from ..errors import SdbenchError
from . import espidf, fio, sdfat
from .validate import loads

# sdbench's own results nest 7 levels deep; stack and metadata tables leave room for more
MAX_DEPTH = 64


def _json(text: str, name: str) -> Any:
    t = text.lstrip().lstrip("\ufeff")
    if not t.startswith("{"):
        return None
    try:
        return loads(t, name, max_depth=MAX_DEPTH)
    except json.JSONDecodeError:
        return None


class UnknownFormat(SdbenchError):
    """The input is none of the formats detect() knows (a command with a format option says to pass it)."""


def detect(text: str, name: str = "input") -> str:
    """``json`` (sdbench results), ``fio``, ``sdfat`` or ``espidf``."""
    if not text.strip():
        raise SdbenchError(f"{name} is empty")
    doc = _json(text, name)
    if isinstance(doc, dict) and isinstance(doc.get("runs"), list) and "format_version" in doc:
        return "json"
    if fio.looks_like(doc) or '"fio version"' in text[:4096]:
        return "fio"
    if sdfat.looks_like(text):
        return "sdfat"
    if espidf.looks_like(text):
        return "espidf"
    if text.lstrip().startswith("{"):
        raise UnknownFormat(f"{name}: JSON, but neither sdbench results nor fio output (or it is truncated)")
    raise UnknownFormat(f"cannot tell the format of {name}: not an ESP-IDF perf_benchmark log, fio JSON, "
                        "SdFat bench output or sdbench results JSON")
