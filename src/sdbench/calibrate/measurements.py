"""Measurements: the published rows a fit or a validation compares with (Measurement, load_measurements),
their level and value in a unit, and how well each published figure is known (its relative σ)."""
from __future__ import annotations

import csv
import decimal
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import SdbenchError
from ..options import read_text_file
from ..records import Row
from .fit_groups import DATA, _levels


@dataclass(frozen=True)
class Measurement:
    scenario: str
    row: str
    op: str
    size_bytes: int
    runs: int
    value: float | None
    unit: str
    split: str
    source: str
    note: str
    #: the figure as the source printed it (its last digit says how it was rounded); "" = unknown
    value_text: str = ""
    #: raw, bridge or file (see :func:`row_level`); "" = as sdbench/data/fits/levels.toml declares it
    level: str = ""


#: levels a measurement row may declare in its ``level`` column
LEVELS = ("raw", "bridge", "file")
#: the shipped measurement data: the seed's file, then every file of the published folder (same columns, and
#: a ``level`` column), in name order
PUBLISHED = "published"


def load_measurements(path: str | Path | None = None) -> list[Measurement]:
    """Read a measurements CSV (default: the data shipped with sdbench: ``measurements.csv`` and every CSV in
    ``published/``)."""
    if path:
        return _read_measurements(read_text_file(path, "measurements file"), str(path))
    out = _read_measurements((DATA / "measurements.csv").read_text(), "measurements.csv")
    folder = DATA / PUBLISHED
    if folder.is_dir():
        for f in sorted(folder.iterdir(), key=lambda p: p.name):
            if f.name.endswith(".csv"):
                out += _read_measurements(f.read_text(), f"{PUBLISHED}/{f.name}")
    return out


def _read_measurements(text: str, where: str) -> list[Measurement]:
    text = text.removeprefix("\ufeff")  # a spreadsheet's UTF-8 byte-order mark
    out = []
    reader = csv.DictReader(text.splitlines())
    need = {"scenario", "row", "op", "size_bytes", "runs", "value", "unit", "split"}
    i = 1
    try:
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise SdbenchError(f"{where}: not a measurements file (needs columns {', '.join(sorted(need))})")
        for i, r in enumerate(reader, start=2):
            try:
                level = (r.get("level") or "").strip()
                if level and level not in LEVELS:
                    raise ValueError(f"level {level!r:.20} is not one of {', '.join(LEVELS)}")
                out.append(Measurement(r["scenario"], r["row"], r["op"], int(r["size_bytes"] or 0),
                                       int(r["runs"] or 0), float(r["value"]) if r["value"] else None, r["unit"],
                                       r["split"], r.get("source", ""), r.get("note", ""),
                                       (r["value"] or "").strip(), level))
            except (ValueError, TypeError, AttributeError) as e:  # a short line leaves cells None
                raise SdbenchError(f"{where} line {i}: {e}") from None
    except csv.Error as e:  # e.g. a cell beyond the csv module's field limit
        raise SdbenchError(f"{where} line {i + 1}: not CSV this reads ({e})") from None
    return out


def row_level(m: Measurement) -> str:
    """'raw' for sector I/O and card init, 'bridge' for sector I/O through a USB bridge, 'file' for rows
    through a filesystem, as the row's ``level`` column or else sdbench/data/fits/levels.toml declares per
    scenario and row (rows it does not name are file-level).  Calibration uses raw and bridge rows only."""
    return m.level or _levels().get((m.scenario, m.row), "file")


def row_value(row: Row, unit: str) -> float:
    """A row's figure in a measurement's unit."""
    t = row.time_ms
    if unit == "ms":
        return t
    if unit in ("us", "µs"):
        return t * 1000.0
    if t <= 0:
        return 0.0
    if unit == "KiB/s":
        return row.bytes / 1024 / (t / 1000.0)
    if unit == "KB/s":  # SdFat's: 1000 bytes per second
        return row.bytes / 1000 / (t / 1000.0)
    if unit == "MB/s":
        return row.bytes / 1e6 / (t / 1000.0)
    if unit == "MiB/s":
        return row.bytes / 1048576 / (t / 1000.0)
    raise SdbenchError(f"unknown unit {unit!r} in measurements")


# ---- how well a published figure is known (docs/calibration.md) ---------------------------------------------

#: stated relative standard deviation of a published figure: the sources print means without a spread, so this
#: is a declared assumption, not a measurement; a fit never claims a field more precisely than its rows allow
MEASUREMENT_REL_SD = 0.01


def rounding_rel_sd(m: Measurement) -> float:
    """Relative standard deviation of the rounding of a figure as printed: half a unit of its last digit,
    spread evenly (σ = unit / √12), over the figure ("13.380" -> 0.001 / √12 / 13.38)."""
    if not m.value:
        return 0.0
    text = m.value_text or repr(float(m.value))
    try:
        exponent = decimal.Decimal(text).as_tuple().exponent
    except decimal.InvalidOperation:
        return 0.0
    if not isinstance(exponent, int):  # NaN or infinity: no digits
        return 0.0
    return 10.0 ** exponent / math.sqrt(12.0) / abs(m.value)


def measurement_rel_sd(m: Measurement) -> float:
    """The relative standard deviation a fit assumes for a measured figure: the stated
    :data:`MEASUREMENT_REL_SD`, or the figure's rounding where that is coarser."""
    return max(MEASUREMENT_REL_SD, rounding_rel_sd(m))
