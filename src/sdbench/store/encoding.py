"""How values are written to the store's columns and read back: compact JSON, one-line text, the rows' range
columns, a record's ``record_json``; and :class:`_Damage`, raised for a stored value that does not read back."""
from __future__ import annotations

import json
from typing import Any

from ..records import Row, RunRecord

#: longest failure reason kept, characters
MAX_REASON = 500


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=False, separators=(",", ":"), allow_nan=False)


def _one_line(text: object, limit: int = MAX_REASON) -> str:
    s = " ".join(str(text).split())
    s = s.encode("utf-8", "replace").decode("utf-8")  # lone surrogates (odd file names) become '?'
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _label(v: Any) -> str:
    text = repr(v) if isinstance(v, str) else "?"
    return text if len(text) <= 60 else text[:57] + "..."


def _text_col(v: Any) -> bool:
    return isinstance(v, str)


def _range_columns(row: Row) -> tuple[float | None, float | None]:
    rng = row.time_ms_range
    return (None, None) if rng is None else (float(rng[0]), float(rng[1]))


def _without_range(doc: Any) -> Any:
    """A stored row's JSON without its range (rows from before ranges have no such key)."""
    if not isinstance(doc, dict):
        return doc
    return {k: v for k, v in doc.items() if k != "time_ms_range"}


def _record_json_doc(rec: RunRecord) -> dict[str, Any]:
    """What ``runs.record_json`` holds: the record without rows, status and reason (those are columns)."""
    doc = rec.to_dict()
    for key in ("rows", "status", "status_reason"):
        del doc[key]
    return doc


class _Damage(Exception):
    """A stored run that does not read back intact (internal; users see an SdbenchError)."""

    def __init__(self, detail: str) -> None:
        super().__init__(_one_line(detail, 300))


def _loads_or(text: Any, fallback: Any) -> Any:
    """``json.loads(text)``; on failure ``fallback``, or raise it when it is :class:`_Damage`."""
    try:
        if not isinstance(text, str):
            raise ValueError("not text")
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        if fallback is _Damage:
            raise _Damage(f"stored JSON is unreadable: {_one_line(e, 120)}") from None
        return fallback
