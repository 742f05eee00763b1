"""``sdbench logger``: the data-logger question answered in one decision table (docs/logger.md)."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from ..errors import SdbenchError
from .formats import format_enum, format_option


LoggerFormat = format_enum("logger")


def _list(values: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item.strip() for v in values for item in v.split(",") if item.strip()))


def register(app: typer.Typer) -> None:
    @app.command("logger")
    def logger_cmd(
        scenario: Optional[str] = typer.Argument(None, help="Scenario of the board and medium (default: "
                                                            "logger-esp32s3-sdspi, or logger-esp32-spiflash with "
                                                            "--flash); any scenario with [sd] or [flash]."),
        flash: bool = typer.Option(False, "--flash", help="Log to the scenario's SPI flash ([flash]) rather than "
                                                          "its SD card."),
        host: Optional[str] = typer.Option(None, "--host", help="Host profile (sdbench list hosts), e.g. "
                                                                "esp32s3-sdspi."),
        bus: Optional[str] = typer.Option(None, "--bus", help="SD bus: spi, sd1 or sd4."),
        clock: Optional[str] = typer.Option(None, "--clock", help="SD bus clock in Hz (20000000, 20e6)."),
        card: Optional[str] = typer.Option(None, "--card", help="Card profile (sdbench list cards); an uncalibrated "
                                                                "card such as generic-sdhc ranges over the "
                                                                "population."),
        capacity: Optional[str] = typer.Option(None, "--capacity", help="Card capacity (32G, 64GiB)."),
        record: str = typer.Option("512", "--record", help="Bytes per record: one write() each (512, 4k)."),
        rate: float = typer.Option(100.0, "--rate", help="Records per second, Hz."),
        jitter: float = typer.Option(0.0, "--jitter", help="Each record comes up to this many ms late (uniform)."),
        sync: list[str] = typer.Option([], "--sync", help="Sync policies to consider: a time (500ms, 1s), a record "
                                                          "count (100) or none; comma-separated or repeated "
                                                          "(default: 1s)."),
        fs: list[str] = typer.Option([], "--fs", help="Filesystems: fat, littlefs, spiffs (flash only); default: "
                                                      "every one the medium has."),
        cache: list[str] = typer.Option([], "--cache", help="Block caches (SD only): none, write-through, "
                                                            "write-back; default: all three."),
        ram: str = typer.Option("16k", "--ram", help="RAM the board can spare for the record buffer (16k, 64KiB)."),
        duration: float = typer.Option(0.0, "--duration", help="Seconds of log per configuration; default: long "
                                                               "enough for the medium (three allocation units of a "
                                                               "card). A shorter one is said to be too short."),
        cuts: int = typer.Option(200, "--cuts", help="Power cuts per configuration (0: none)."),
        members: int = typer.Option(0, "--members", help="Range members per configuration (0: as the time budget "
                                                         "allows, as sdbench run)."),
        pe_cycles: float = typer.Option(0.0, "--pe-cycles", help="Rated P/E cycles of the medium (default: the "
                                                                 "chip profile's, or an estimate for an SD card)."),
        tbw: Optional[str] = typer.Option(None, "--tbw", help="Rated bytes written instead of P/E cycles (40T = "
                                                              "40 TiB)."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field, e.g. "
                                                         "--set sd.card_params.open_aus=4 (repeatable)."),
        seed: int = typer.Option(1, "--seed", help="Seed of the card's pauses, the data and the cuts."),
        workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, max=4096,
                                              help="Processes (default: the number of CPUs). Figures do not depend "
                                                   "on it."),
        fmt: LoggerFormat = format_option("logger", "md", md="the decision table on stdout",  # type: ignore[valid-type]
                                          json="the decision document on stdout"),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the decision as JSON to FILE."),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write an HTML page: the table, then a stall "
                                                                 "timeline and the buffer distribution per "
                                                                 "configuration."),
        db: Optional[Path] = typer.Option(None, "--db", help="Results database (default: $SDBENCH_DB or the "
                                                              "per-user data directory)."),
        save: bool = typer.Option(True, "--save/--no-save", help="Save each configuration's run in the results "
                                                                 "database (show, compare, export, report)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress or notes on stderr."),
    ) -> None:
        """Which filesystem, cache and sync policy for a data logger, how much RAM to buffer, what a power cut
        loses, how long the medium lasts: one decision table.

        Every configuration (filesystem x cache x sync policy) logs long enough for the medium, over the card
        population (or the fit) for ranges, and is cut at --cuts points. Simulated and deterministic.
        """
        from .. import logger_advisor as adv
        from ..options import from_mapping
        from ..output_files import check_writable_output, write_atomically
        from ..workloads.fio.jobs import parse_size

        values: dict[str, object] = {"record_bytes": parse_size(record, "--record"), "rate_hz": rate,
                                     "jitter_ms": jitter, "ram_bytes": parse_size(ram, "--ram"),
                                     "filesystems": list(_list(fs)), "caches": list(_list(cache)),
                                     "duration_s": duration, "cuts": cuts, "members": members,
                                     "pe_cycles": pe_cycles, "seed": seed}
        if _list(sync):
            values["syncs"] = list(_list(sync))
        if tbw is not None:
            values["tbw_bytes"] = float(parse_size(tbw, "--tbw"))
        q = from_mapping(adv.Question, values, "logger")
        medium = "flash" if flash else "sd"
        base = scenario or adv.DEFAULT_SCENARIO[medium]
        over = []
        for flag, key, v in (("--host", "sd.host", host), ("--bus", "sd.bus.kind", bus), ("--card", "sd.card", card)):
            if v is not None:
                over.append(f"{key}={json.dumps(v)}")
        if clock is not None:
            try:
                hz = float(clock)
            except ValueError:
                raise SdbenchError(f"--clock {clock!r:.40}: a frequency in Hz (20000000, 20e6)") from None
            if not hz.is_integer():
                raise SdbenchError(f"--clock {clock!r:.40}: a whole number of Hz")
            over.append(f"sd.bus.clock_hz={int(hz)}")
        if capacity is not None:
            over.append(f"sd.capacity_bytes={parse_size(capacity, '--capacity')}")
        over += list(set_)
        from ..scenarios import load

        sc = load(base, over)
        stack = adv.Stack(base, tuple(over), adv.medium_of(sc, flash))
        if over and stack.medium == "flash" and any(o.startswith("sd.") for o in over[:len(over) - len(set_)]):
            raise SdbenchError("--host/--bus/--clock/--card/--capacity describe an SD card; the question is about "
                               "the SPI flash")
        for p in (json_path, html):
            if p is not None:
                check_writable_output(p)
        n_workers = workers or os.cpu_count() or 1

        def progress(msg: str) -> None:
            if not quiet:
                print(msg, file=sys.stderr, flush=True)

        began = time.perf_counter()
        doc, outcomes = adv.advise(q, stack, workers=n_workers, progress=progress)
        wall_s = time.perf_counter() - began  # said on the page, not in the document: the same question, the same JSON
        if save:
            ids = _save(outcomes, doc, db)
            for d, rid in zip(doc["configurations"], ids):
                if rid is not None:
                    d["run_id"] = rid
            if not quiet and any(i is not None for i in ids):
                typer.echo(f"saved runs {', '.join(str(i) for i in ids if i is not None)} (sdbench show / compare "
                           f"RUN)", err=True)
        if fmt.value == "json":
            typer.echo(json.dumps(doc))
        else:
            typer.echo(f"### sdbench logger: {q.record_bytes} B records at {q.rate_hz:g} Hz on "
                       f"{_stack_text(doc['stack'])}; {wall_s:.1f} s on {n_workers} processes\n")
            typer.echo(adv.markdown(doc), nl=False)
        if json_path is not None:
            write_atomically(json_path, json.dumps(doc, indent=1) + "\n")
        if html is not None:
            from ..report.logger_page import render

            head, cells = adv.table(doc)
            write_atomically(html, render(doc, head, cells, title=f"sdbench logger: {doc['stack']['scenario']}",
                                          wall_s=wall_s, workers=n_workers))
            if not quiet:
                typer.echo(f"wrote {html}", err=True)
        if doc["run"]["too_short"] and not quiet:
            typer.echo(f"warning: {doc['run']['too_short']}", err=True)


def _stack_text(stack: dict) -> str:
    s = stack["stack"]
    if "card" in s:
        cap = f", {s['capacity_bytes'] / 1e9:g} GB" if s.get("capacity_bytes") else ""
        return (f"{stack['scenario']} (host {s['host']}, {s['bus'].upper()} at {s['clock_hz'] / 1e6:g} MHz, card "
                f"{s['card']}{cap})")
    return f"{stack['scenario']} (host {s['host']}, flash {s['chip']}, partition {s['partition_bytes'] // 1024} KiB)"


def _save(outcomes: list, doc: dict, db: Optional[Path]) -> list[Optional[int]]:
    """Each configuration's run in the results store, with the decision it belongs to in its metadata."""
    from ..store import open_store

    store = open_store(str(db) if db is not None else None)
    ids: list[Optional[int]] = []
    try:
        for o, d in zip(outcomes, doc["configurations"]):
            if o.record is None:
                ids.append(None)
                continue
            meta = {**o.record.metadata, "logger_decision": {"configuration": d["name"],
                                                              "question": doc["question"]}}
            ids.append(store.save(replace(o.record, metadata=meta)))
    finally:
        store.close()
    return ids
