"""``sdbench powerloss``: cut the power at many points of a workload and say what was lost (docs/powerloss.md)."""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Optional

import typer

from ..errors import SdbenchError
from ..output_files import check_writable_output, write_atomically
from ..progress import Progress
from .formats import format_enum, format_option
from .formats import is_json as _is_json, md_table as _md_table
from .params import size_parser


PowerlossFormat = format_enum("powerloss")


def _choices(values: list[str], known: tuple[str, ...], flag: str) -> list[str]:
    out = []
    for v in values:
        for item in v.split(","):
            if item not in known:
                raise SdbenchError(f"{flag} {item!r:.40}: one of {', '.join(known)}")
            out.append(item)
    return list(dict.fromkeys(out))


def register(app: typer.Typer) -> None:
    @app.command("powerloss")
    def powerloss_cmd(
        scenario: str = typer.Argument(..., help="Scenario whose simulated medium is cut (SD card or SPI flash)."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field, e.g. "
                                                         "--set sd.faults.volatile_sectors=64 (repeatable)."),
        fs: list[str] = typer.Option([], "--fs", help="fat, littlefs, spiffs, raw (comma-separated or repeated; "
                                                      "default: a logger scenario's, else fat; all with --matrix)."),
        cache: list[str] = typer.Option([], "--cache", help="none, write-through, write-back (default none, or "
                                                            "all with --matrix)."),
        bridge: list[str] = typer.Option([], "--bridge", help="none, single-sector, multi-sector, background "
                                                              "(default none, or all with --matrix)."),
        matrix: bool = typer.Option(False, "--matrix", help="Every filesystem x cache x bridge the flags leave "
                                                            "open."),
        cuts: int = typer.Option(200, "--cuts", min=1, max=100_000, help="Cut points per cell."),
        workload: list[str] = typer.Option([], "--workload", help="A workload field, e.g. --workload "
                                                                  "file_bytes=16384 (files, file_bytes, chunk_bytes, "
                                                                  "sync_every; a logger scenario sets the last two); "
                                                                  "or 'logger': replay a logger scenario's own log "
                                                                  "(record size, rate, sync policy, rotation)."),
        seed: int = typer.Option(1, "--seed", help="Seed of the cut points, torn lengths and data."),
        replay: Optional[int] = typer.Option(None, "--replay", min=1, metavar="OP",
                                             help="Run one cut again: the cut at medium operation OP of the cell "
                                                  "--fs/--cache/--bridge name, with --seed."),
        workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, max=4096,
                                              help="Parallel workers for the cells (default: the number of CPUs)."),
        dask: Optional[str] = typer.Option(None, "--dask", metavar="ADDRESS",
                                           help="Run the cells on Dask: a scheduler address, or 'local'."),
        fmt: PowerlossFormat = format_option("powerloss", "md", md="a Markdown table, a row per cell",
                                             json="the matrix document"),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write an HTML heat map to FILE."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress or notes on stderr."),
    ) -> None:
        """Is it safe? Cut the power at many points of a data-logger workload on a simulated stack, remount, and
        classify each cut: clean, lost unacknowledged data only, lost acknowledged data, corrupted, needs repair,
        unmountable. A loss names the cut point and seed; --replay reproduces it.
        """
        from .. import powerloss as pl
        from .. import scenarios as scen
        from ..options import from_mapping

        sc = scen.load(scenario, list(set_))
        if sc.clock_kind() != "virtual" or not (sc.sd or sc.flash):
            raise SdbenchError(f"scenario {scenario}: power-loss runs need a simulated medium ([sd] media = "
                               f"\"sim\" or [flash] media = \"sim-nor\")")
        from_logger, logger_fs = pl.logger_workload(sc)
        from_mapping(pl.WorkloadConfig, {"seed": seed}, "powerloss")  # the seed's range, for either workload
        cfg: pl.WorkloadConfig | pl.LogReplayConfig
        if "logger" in workload:
            if len(workload) > 1:
                raise SdbenchError("--workload logger replays the scenario's log: it takes no other --workload "
                                   "field (change the log with --set logger.KEY=VALUE)")
            cfg = pl.log_replay(sc, cuts, seed)
        else:
            fields: dict[str, object] = {**from_logger, "cuts": cuts, "seed": seed}
            for w in workload:
                key, sep, value = w.partition("=")
                if not sep or key not in ("files", "file_bytes", "chunk_bytes", "sync_every"):
                    raise SdbenchError(f"--workload {w!r:.60}: KEY=VALUE with KEY one of files, file_bytes, "
                                       f"chunk_bytes, sync_every, or logger")
                if key.endswith("_bytes"):
                    fields[key] = size_parser(f"--workload {key}")(value)
                    continue
                try:
                    fields[key] = int(value)
                except ValueError:
                    raise SdbenchError(f"--workload {key}: {value!r:.40} is not a whole number") from None
            cfg = from_mapping(pl.WorkloadConfig, fields, "powerloss")
        every = replay is None and matrix
        fs_l = _choices(fs, pl.FILESYSTEMS, "--fs") or (list(pl.FILESYSTEMS) if every else [logger_fs or "fat"])
        cache_l = _choices(cache, pl.CACHES, "--cache") or (list(pl.CACHES) if every else ["none"])
        bridge_l = _choices(bridge, pl.BRIDGES, "--bridge") or (list(pl.BRIDGES) if every else ["none"])
        if html is not None:
            check_writable_output(html)
        if replay is not None:
            if len(fs_l) * len(cache_l) * len(bridge_l) != 1:
                raise SdbenchError("--replay runs one cell: give one --fs, --cache and --bridge")
            cut = pl.replay(sc, pl.Cell(fs_l[0], cache_l[0], bridge_l[0]), cfg, replay)
            doc = {"op": cut.op, "seed": seed, "class": cut.cls, "lost_acknowledged_bytes":
                   cut.lost_acknowledged_bytes, "corrupted_files": cut.corrupted_files, "layer": cut.layer,
                   "detail": cut.detail}
            if _is_json(fmt):
                typer.echo(json.dumps(doc))
            else:
                _md_table(None, ["Cut", "Value"], [[k, v] for k, v in doc.items()], numbers=False)
            return
        cell_list = pl.cells(fs_l, cache_l, bridge_l)
        n = len(cell_list)
        # counted from the start, so that a log shows the matrix moving from its first cell on
        with Progress(n, f"powerloss {sc.name}", enabled=not quiet, unit="cells") as prog:
            results = pl.run_matrix(scenario, list(set_), cell_list, cfg,
                                    workers=min(workers or os.cpu_count() or 1, n), dask=dask,
                                    done=lambda i: prog.advance(f"{cell_list[i].name} done"))
        docs = [r.to_dict(seed) for r in results]
        if all("skipped" in d for d in docs):  # nothing was cut: a refusal, not a result
            raise SdbenchError(f"no cell can run: {'; '.join(sorted({d['skipped'] for d in docs}))}")
        head = {"scenario": sc.name, "section": results[0].section, "seed": seed, "cuts_per_cell": cuts,
                "workload": {"kind": "logger" if isinstance(cfg, pl.LogReplayConfig) else "files",
                             **cfg.describe()}}
        if html is not None:
            from ..report.powerloss_page import render

            write_atomically(html, render(head, docs, title=f"sdbench powerloss: {sc.name}"))
        if _is_json(fmt):
            typer.echo(json.dumps({**head, "cells": docs}))
        else:
            _print_table(docs)
        for d, r in zip(docs, results):
            first = d.get("first_loss")
            if first and not quiet:
                typer.echo(f"{r.cell.name}: cut {first['op']} {first['class'].replace('_', ' ')} "
                           f"({first['layer']}: {first['detail']}); replay: sdbench powerloss "
                           f"{shlex.quote(scenario)} --fs {r.cell.fs} --cache {r.cell.cache} --bridge {r.cell.bridge}"
                           f" --replay {first['op']} --seed {seed}", err=True)


def cache_text(d: dict) -> str:
    """A cell's cache as the table shows it: its mode, and its size and policy as built."""
    c = d.get("cache_config")
    if not c:
        return d["cache"]
    return f"{c['write_mode']} ({c['blocks']} x {c['block_bytes']} B, {c['policy']})"


def _print_table(docs: list[dict]) -> None:
    rows = []
    skipped: dict[str, int] = {}
    for d in docs:
        cell = [d["fs"], d["cache"], d["bridge"]]
        if "skipped" in d:
            skipped[d["skipped"]] = skipped.get(d["skipped"], 0) + 1
            continue
        first = d["first_loss"]
        cell[1] = cache_text(d)
        rows.append(cell + [d["cuts"], d["clean"], d["lost_unacknowledged"], d["lost_acknowledged"], d["corrupted"],
                            d["needs_repair"], d["unmountable"], d["throughput_kib_s"],
                            "-" if first is None else f"cut {first['op']}: {first['class']}"])
    if rows:
        _md_table(None, ["FS", "Cache", "Bridge", "Cuts", "Clean", "Lost unacked", "Lost acked", "Corrupted",
                         "Needs repair", "Unmountable", "KiB/s", "First loss"], rows)
    for why, n in skipped.items():
        typer.echo(f"\n{n} cell(s) not run: {why}")
