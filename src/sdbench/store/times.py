"""Time as the store keeps it (fixed-width UTC text) and :func:`parse_since`, which reads the ``--since`` filters."""
from __future__ import annotations

import datetime as dt
import re

from ..errors import SdbenchError


def _utc_text(when: dt.datetime) -> str:
    # fixed width, so that text order is time order in SQL; naive times are local
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now_utc() -> str:
    return _utc_text(dt.datetime.now(dt.timezone.utc))


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_AGE_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """``2024-05-01``, ``2024-05-01T10:30`` (local time unless it says otherwise), ``today``,
    or an age such as ``90m``, ``12h``, ``3d``, ``2w``; returns an aware datetime."""
    now = now or dt.datetime.now().astimezone()
    t = text.strip()
    m = _AGE.match(t)
    if m:
        try:
            return now - dt.timedelta(seconds=float(m.group(1)) * _AGE_UNITS_S[m.group(2)])
        except OverflowError:
            raise SdbenchError(f"--since {text!r}: that age reaches before the year 1") from None
    if t.lower() == "today":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        when = dt.datetime.fromisoformat(t)
    except ValueError:
        raise SdbenchError(f"--since {text!r}: expected a date (2024-05-01), a date and time "
                           "(2024-05-01T10:30) or an age (90m, 12h, 3d, 2w)") from None
    try:
        when = when if when.tzinfo else when.astimezone()
        when.astimezone(dt.timezone.utc)  # the store compares in UTC: the first and last days of the calendar
    except (OverflowError, ValueError):
        raise SdbenchError(f"--since {text!r}: too close to the ends of the calendar") from None
    return when
