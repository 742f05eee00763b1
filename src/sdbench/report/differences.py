"""What tells runs apart: the stack fields, sweep parameters, seeds and scenarios that differ between them, and
a short name per run made of them (``#2 clock_hz=20 MHz``) for legends and headings."""
from __future__ import annotations

from collections.abc import Sequence

from ..records import RunRecord
from ..store.api import device_of
from .tables import stack_fields
from .text import size_text

#: the facts a run's legend name shows at most; the rest are counted ("+2 more")
MAX_FACTS = 3
#: longest value text in a name
MAX_VALUE = 24


def _text(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(_text(x) for x in v)
    return str(v)


def _sweep_params(rec: RunRecord) -> dict[str, str]:
    sweep = rec.metadata.get("sweep")
    params = sweep.get("params") if isinstance(sweep, dict) else None
    return {str(k): _text(v) for k, v in params.items()} if isinstance(params, dict) else {}


def _device(rec: RunRecord) -> str:
    dev = device_of(rec.metadata)
    if isinstance(dev, dict):
        return str(dev.get("name") or dev.get("model") or "")
    return "" if dev is None else str(dev)


def _differing(facts: Sequence[dict[str, str]]) -> list[str]:
    """The keys (in first-seen order) whose values are not the same in every run."""
    keys = list(dict.fromkeys(k for f in facts for k in f))
    return [k for k in keys if len({f.get(k) for f in facts}) > 1]


def differences(records: Sequence[RunRecord]) -> list[list[tuple[str, str]]]:
    """Per run, the (field, value) pairs that tell it from the others: its scenario when the scenarios differ;
    among runs of one scenario, the sweep parameters that differ, else the stack fields (``--set`` values end up
    there), then seed, source, clock and device.  Empty for a run nothing tells apart (or a run alone)."""
    out: list[list[tuple[str, str]]] = [[] for _ in records]
    if len(records) < 2:
        return out
    if len({r.scenario for r in records}) > 1:
        for i, r in enumerate(records):
            out[i].append(("scenario", r.scenario))
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r.scenario, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        recs = [records[i] for i in members]
        sweep = [_sweep_params(r) for r in recs]
        varied = _differing(sweep)
        if varied:
            facts = [{k: s.get(k, "–") for k in varied} for s in sweep]
        else:
            fields = stack_fields([r.stack for r in recs])
            facts = [{k: f.get(k, "–") for k in _differing(fields)} for f in fields]
        other = [{"seed": str(r.seed), "source": r.source, "clock": r.clock, "device": _device(r)} for r in recs]
        for k in _differing(other):
            for f, o in zip(facts, other):
                f[k] = o[k]
        for i, f in zip(members, facts):
            out[i] += list(f.items())
    return out


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key by its shortest tail that no other key ends with: ``sd.bus.clock_hz`` -> ``clock_hz``."""
    out = {}
    for k in keys:
        parts = k.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != k and (o == tail or o.endswith("." + tail)) for o in keys):
                break
        out[k] = tail
    return out


#: a key's unit suffix and the unit its values are shown in; rates before the times their names end with
_SUFFIX_UNITS = {"_bytes_s": "B/s", "_kib_s": "KiB/s", "_mib_s": "MiB/s", "_kb_s": "kB/s", "_mb_s": "MB/s",
                 "_per_s": "/s", "_us": "µs", "_ns": "ns", "_ms": "ms", "_s": "s", "_pct": "%"}


def _with_unit(key: str, value: str) -> str:
    """A number in the unit its key names (``clock_hz`` 40000000 -> ``40 MHz``, ``..._bytes`` 4096 -> ``4 KiB``),
    anything else as it is."""
    try:
        v = float(value)
    except ValueError:
        return value
    if key.endswith("_hz"):
        div, unit = next(((d, u) for d, u in ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz")) if abs(v) >= d), (1, "Hz"))
        return f"{v / div:g} {unit}"
    if key.endswith("_bytes") and v >= 0:
        return size_text(v) if v == int(v) else value
    unit = next((u for suffix, u in _SUFFIX_UNITS.items() if key.endswith(suffix)), None)
    return f"{v:g} {unit}" if unit else value


def fact_text(key: str, value: str, *, unit: bool = True) -> str:
    if key == "scenario":
        return value
    if unit:
        value = _with_unit(key, value)
    v = value if len(value) <= MAX_VALUE else value[:MAX_VALUE - 1] + "…"
    return f"{key} {v}" if key in ("seed", "source", "clock", "device") else f"{key}={v}"


def fact_texts(diffs: Sequence[Sequence[tuple[str, str]]], keys: dict[str, str] | None = None) -> list[list[str]]:
    """Each run's facts as :func:`fact_text` shows them (``keys``: the name to show a key by); a key whose
    values a unit would round together (4.66 and 4.67 GiB both "4.7 GiB") keeps them as they are."""
    keys = keys or {}
    raw: dict[str, set[str]] = {}
    shown: dict[str, set[str]] = {}
    for d in diffs:
        for k, v in d:
            raw.setdefault(k, set()).add(v)
            shown.setdefault(k, set()).add(_with_unit(k, v))
    plain = {k for k in raw if len(shown[k]) < len(raw[k])}
    return [[fact_text(keys.get(k, k), v, unit=k not in plain) for k, v in d] for d in diffs]


def run_labels(names: Sequence[str], records: Sequence[RunRecord]) -> list[str]:
    """A legend name per run: its name (``#12``) and what differs (:func:`differences`), at most
    :data:`MAX_FACTS` facts."""
    diffs = differences(records)
    short = short_keys(list(dict.fromkeys(k for d in diffs for k, _ in d if k != "scenario")))
    texts = fact_texts(diffs, short)
    out = []
    for name, d, t in zip(names, diffs, texts):
        shown = t[:MAX_FACTS]
        more = f" +{len(d) - MAX_FACTS} more" if len(d) > MAX_FACTS else ""
        out.append(f"{name} {', '.join(shown)}{more}" if shown else name)
    return out
