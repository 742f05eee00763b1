"""From the runs to the decision table: each configuration's figures with their ranges, a recommendation with its
reason in one line, Markdown and the JSON document."""
from __future__ import annotations

from typing import Any

from ..workloads.logger import Endurance, life_s
from ..workloads.logger.wear import YEAR_S
from .runs import Members, Outcome, band_of, figures

#: the figures that carry a range over the members
RANGED = ("stall_p99_ms", "stall_p99_9_ms", "stall_max_ms", "buffer_p99_bytes", "buffer_p99_9_bytes",
          "buffer_max_bytes", "records_lost", "busy_pct")
UNSAFE = ("lost_acknowledged", "corrupted", "unmountable")


def config_result(o: Outcome, members: Members, endurance: dict[str, Any], ram: int) -> dict[str, Any]:
    """One configuration's row of the table, as a JSON object."""
    c = o.config
    d: dict[str, Any] = {"name": c.name, "fs": c.fs, "cache": c.cache, "sync": c.sync}
    if o.record is None:
        d["error"] = o.error or "no run"
        return d
    meta = o.record.metadata["logger"]
    f = figures(meta)
    period_s = 1.0 / meta["rate_hz"]
    margin = meta["throughput_margin_x"]
    keeps = margin >= 1.0 and f["lag_s"] <= max(1.0, 10 * period_s) and not o.pilot_only
    rate_b = meta["record_bytes"] * meta["rate_hz"]
    d.update({"keeps_up": keeps, "margin_x": margin, "busy_pct": f["busy_pct"], "lag_s": f["lag_s"],
              "log_s": meta["duration_s"], "pilot_only": o.pilot_only, "records": meta["records"],
              "ram_bytes": ram, "cache_bytes": cache_bytes(o.record.stack)})
    if not keeps:
        # the backlog grows as long as the log runs: the buffer it needs is the rate it grows at
        d["backlog_growth_bytes_s"] = rate_b * max(0.0, 1.0 - margin)
    ranged = {}
    for name in RANGED:
        ranged[name] = {"value": f[name], "range": band_of(f[name], [m[name] for m in o.members], members.band)}
    d["figures"] = ranged
    d["lost_pct"] = 100.0 * f["records_lost"] / max(meta["records"], 1)
    d["members"] = o.member_names
    if o.failed_members:
        d["failed_members"] = o.failed_members
    d["longest_stall"] = meta.get("longest_stall")
    wear = meta.get("wear") or {}
    if wear:
        d["wear"] = wear
        d["life"] = _life(wear, endurance, rate_b)
    if o.powerloss is not None:
        d["powerloss"] = o.powerloss
    cov = meta.get("coverage") or {}
    if cov:
        d["coverage"] = cov
    d["timeline"] = meta.get("timeline")
    d["buffer_distribution"] = meta["buffer"].get("distribution")
    d["stalls_by_cause"] = meta.get("stalls", {}).get("by_cause", {})
    return d


def cache_bytes(stack: dict[str, Any]) -> int:
    """RAM the block cache of a run's stack takes (0 without one)."""
    dev = (stack.get("sd") or {}).get("device") or {}
    cache = dev.get("cache") if isinstance(dev, dict) else None
    if not isinstance(cache, dict):
        return 0
    return int(cache.get("blocks", 0)) * int(cache.get("block_bytes", 512))


def _life(wear: dict[str, Any], endurance: dict[str, Any], rate_b: float) -> dict[str, Any]:
    def years(e: Endurance) -> float | None:
        s = life_s(wear, e, rate_b)
        return None if s is None else s / YEAR_S

    central = years(Endurance(cycles=endurance.get("cycles"), tbw_bytes=endurance.get("tbw_bytes")))
    out: dict[str, Any] = {"years": central}
    if "cycles_range" in endurance:
        out["years_range"] = [years(Endurance(cycles=c)) for c in endurance["cycles_range"]]
    return out


def _unsafe(d: dict[str, Any]) -> int:
    pl = d.get("powerloss") or {}
    return sum(pl.get(k, 0) for k in UNSAFE)


def _hi(d: dict[str, Any], name: str) -> float:
    fig = d["figures"][name]
    return fig["range"][1] if fig["range"] else fig["value"]


def recommend(rows: list[dict[str, Any]], ram: int) -> dict[str, Any]:
    """The configuration to use and why, in one line: it keeps up, loses no record with the RAM given over the
    whole range, loses nothing a sync promised at a power cut; among those, fewest cuts that need a repair, the
    longest life, the smallest buffer.  When none qualifies, the closest, and what it lacks."""
    ok = [d for d in rows if "figures" in d]
    if not ok:
        return {"index": None, "name": "", "reason": "no configuration ran"}

    def key(d: dict[str, Any]) -> tuple[Any, ...]:
        life = (d.get("life") or {}).get("years") or 0.0
        pl = d.get("powerloss") or {}
        need = _hi(d, "buffer_max_bytes") + d["cache_bytes"]
        # decades of life either way are not a reason to choose: it counts after RAM and stalls
        return (not d["keeps_up"], need > ram, _unsafe(d), pl.get("needs_repair", 0), need,
                round(d["figures"]["stall_max_ms"]["value"], -1), -min(life, 10.0), -life)

    best = min(ok, key=key)
    i = rows.index(best)
    buf = _hi(best, "buffer_max_bytes") + best["cache_bytes"]
    parts = []
    if best["keeps_up"]:
        parts.append(f"keeps up ({best['margin_x']:.1f}x)")
    else:
        parts.append("does not keep up (none of the configurations does)")
    cache = f" (its cache {_bytes(best['cache_bytes'])} included)" if best["cache_bytes"] else ""
    if buf <= ram:
        parts.append(f"needs at most {_bytes(buf)}{cache} of the {_bytes(ram)} RAM given over the whole range")
    else:
        parts.append(f"needs up to {_bytes(buf)}{cache} over the range, more than the {_bytes(ram)} RAM given "
                     f"(no configuration fits it)")
    pl = best.get("powerloss")
    if pl:
        bad = _unsafe(best)
        parts.append(f"{'lost nothing a sync promised' if not bad else f'{bad} unsafe'} in {pl['cuts']} power cuts"
                     + (f" ({pl['needs_repair']} left FAT needing repair)" if pl.get("needs_repair") else ""))
    life = (best.get("life") or {}).get("years")
    if life is not None:
        parts.append(f"medium life ~{_years(life)}")
    return {"index": i, "name": best["name"], "reason": "; ".join(parts)}


def _bytes(n: float) -> str:
    n = float(n)
    if n >= 1 << 20:
        return f"{n / (1 << 20):.3g} MiB"
    if n >= 1024:
        return f"{n / 1024:.3g} KiB"
    return f"{n:.0f} B"


def _years(y: float) -> str:
    if y >= 1000:
        return f"{y:,.0f} years"
    if y >= 1:
        return f"{y:.3g} years"
    d = y * 365.25
    return f"{d:.3g} days" if d >= 1 else f"{d * 24:.3g} hours"


def _ms(x: float) -> str:
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def _cell(fig: dict[str, Any], fmt: Any) -> str:
    r = fig["range"]
    return fmt(fig["value"]) + (f" ({fmt(r[0])}–{fmt(r[1])})" if r else "")


def table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The decision table's header and cells: one row per configuration."""
    rows = doc["configurations"]
    head = ["#", "Configuration", "Keeps up", "Stall p99 ms", "Stall p99.9 ms", "Stall max ms", "Buffer p99",
            "Buffer p99.9", "Buffer max", "Cache RAM", f"Lost with {_bytes(doc['question']['ram_bytes'])}",
            "Power cut: records lost (worst cut)", "Power cut: acked lost / corrupted / unmountable / needs repair",
            "Wear (B/B)", "Life"]
    cells: list[list[str]] = []
    for i, d in enumerate(rows):
        if "figures" not in d:
            cells.append([str(i + 1), d["name"], f"failed: {d.get('error', '')}"] + [""] * (len(head) - 3))
            continue
        fg = d["figures"]
        keeps = f"yes ({d['margin_x']:.1f}x)" if d["keeps_up"] else \
            (f"no ({d['margin_x']:.2f}x)" if d.get("margin_x") else "no")
        if not d["keeps_up"]:
            buf_max = f"unbounded (+{_bytes(d['backlog_growth_bytes_s'])}/s)"
        else:
            buf_max = _cell(fg["buffer_max_bytes"], _bytes)
        lost = _cell(fg["records_lost"], lambda x: f"{x:,.0f}") + f" ({d['lost_pct']:.2g} %)"
        pl = d.get("powerloss")
        if pl and "cuts" in pl:
            rec_b = d["wear"]["logged_bytes"] / max(d["records"], 1) if d.get("wear") else 0
            per = pl["lost_bytes_max"] / rec_b if rec_b else 0
            cut1 = f"{per:,.0f}"
            cut2 = (f"{_bytes(pl['lost_acknowledged_bytes_max'])} / {pl['corrupted']} / {pl['unmountable']} / "
                    f"{pl['needs_repair']} of {pl['cuts']} cuts")
        else:
            cut1 = cut2 = "not run"
        wear = f"{d['wear']['write_amplification']:.2f}" if d.get("wear") else "-"
        life = d.get("life") or {}
        life_txt = "-" if life.get("years") is None else f"~{_years(life['years'])}"
        if life.get("years_range") and None not in life["years_range"]:
            life_txt += f" ({_years(life['years_range'][0])}–{_years(life['years_range'][1])})"
        cells.append([str(i + 1), d["name"], keeps, _cell(fg["stall_p99_ms"], _ms), _cell(fg["stall_p99_9_ms"], _ms),
                      _cell(fg["stall_max_ms"], _ms), _cell(fg["buffer_p99_bytes"], _bytes),
                      _cell(fg["buffer_p99_9_bytes"], _bytes), buf_max,
                      _bytes(d["cache_bytes"]) if d["cache_bytes"] else "-", lost, cut1, cut2, wear, life_txt])
    return head, cells


def markdown(doc: dict[str, Any]) -> str:
    """The decision table, then the recommendation and the notes."""
    head, cells = table(doc)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---:", "---"] + ["---:"] * (len(head) - 2)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    rec = doc["recommendation"]
    out = "\n".join(lines) + "\n\n"
    if rec.get("index") is not None:
        out += f"**Recommended: #{rec['index'] + 1} {rec['name']}**: {rec['reason']}.\n\n"
    out += "\n".join(f"- {n}" for n in doc["notes"]) + "\n"
    return out
