"""``sdbench trace``: the SD commands a simulated scenario issues, or (``--ledger``) where each row's time went,
by the profile parameter it comes from."""
from __future__ import annotations

from typing import Any, Optional

import typer

from .. import scenarios as scen
from ..errors import SdbenchError
from ..protocols import run_scenario


def register(app: typer.Typer) -> None:
    @app.command("trace")
    def trace_cmd(
        scenario: str = typer.Argument(..., help="A simulated scenario (name or TOML file)."),
        limit: int = typer.Option(60, "--limit", "-n", min=1, help="Commands to list."),
        skip: int = typer.Option(0, "--skip", min=0, help="Commands to skip first."),
        row: Optional[str] = typer.Option(None, "--row", help="Only commands issued inside this row's timed calls."),
        runs: int = typer.Option(3, "--runs", min=1, help="Timed calls per row while tracing (the first call "
                                                          "may differ: cards load tables, filesystems allocate)."),
        call: Optional[int] = typer.Option(None, "--call", min=0, help="With --row: which timed call to list, "
                                                                      "1..--runs (default: the last, the steady "
                                                                      "state; 0 = all)."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field (repeatable)."),
        ledger: bool = typer.Option(False, "--ledger", help="Instead of the commands: where each row's time went, "
                                                            "by the profile parameter it comes from (the cost "
                                                            "ledger), per timed call."),
    ) -> None:
        """List the SD commands a simulated scenario issues, like a logic analyser.

        Columns: time since start (µs), command, argument, data bytes, duration (µs),
        cumulative time (ms).  ``CMD13 ×n`` is status polling repeated n times.

        With ``--ledger`` (SD cards and SPI flash): for each row (or ``--row``), a Markdown table of the
        parameters its time comes from: the parameter (``sd.card.write_busy_end_us``, ``sd.host.block_cycles``,
        ``sd.bus.clock_hz`` for time on the bus, or a mechanism such as ``sd.wait.polling``), its value, how many
        of it one call took, ms per call and share of the row, over the ``--runs`` timed calls.
        """
        from ..workloads.registry import protocol

        if call is not None and row is None:
            raise SdbenchError("--call picks one of a row's timed calls: it needs --row")
        if ledger:
            _print_ledger(scenario, list(set_), row, runs)
            return
        base = scen.load(scenario, list(set_))
        if base.sd.get("media") != "sim":
            raise SdbenchError(f"scenario {scenario} has no simulated SD card to trace")
        sc = scen.load(scenario, list(set_) + ["sd.log_commands=true", f"{protocol(base.protocol).runs_option}={runs}"])
        windows: list[tuple[int, int, str]] = []
        listener = _Windows(windows)
        built_dev: list[Any] = []
        def on_built(b: Any) -> None:
            built_dev.append(b)
            listener.clock = b.clock

        rec = run_scenario(sc, listeners=(listener,), on_built=on_built)
        from ..media.base import bottom

        dev = bottom(built_dev[0].target.sd_device)  # below any cache or bridge
        log = dev.log or []
        if row is not None:
            spans = [(a, b) for a, b, lab in windows if lab == row]
            if not spans:
                raise SdbenchError(f"row {row!r} not in {sc.name} (rows: {', '.join(r.label for r in rec.rows)})")
            if call is not None and call > len(spans):
                raise SdbenchError(f"--call {call}: row {row!r} has {len(spans)} timed call(s) (--runs)")
            if call != 0:
                spans = [spans[-1] if call is None else spans[call - 1]]
            log = [e for e in log if any(a <= e.t_ns < b for a, b in spans)]
        typer.echo("| # | t µs | command | arg | bytes | µs | cum ms |")
        typer.echo("|---:|---:|---|---:|---:|---:|---:|")
        t_origin = log[0].t_ns if log else 0
        cum = 0
        for i, e in enumerate(log):
            cum += e.dur_ns
            if i < skip:
                continue
            if i >= skip + limit:
                typer.echo(f"... {len(log) - skip - limit} more (use --limit/--skip)")
                break
            name = e.name if e.repeat == 1 else f"{e.name} ×{e.repeat}"
            typer.echo(f"| {i} | {(e.t_ns - t_origin) / 1e3:.1f} | {name} | {e.arg} | {e.nbytes} | {e.dur_ns / 1e3:.1f} | "
                       f"{cum / 1e6:.3f} |")


def _print_ledger(scenario: str, sets: list[str], row: Optional[str], runs: int) -> None:
    """``trace --ledger``: each row's cost ledger as Markdown tables."""
    from ..ledger import MECHANISMS, per_call, profile_sections
    from ..workloads.registry import protocol

    base = scen.load(scenario, sets)
    if base.clock_kind() != "virtual":
        raise SdbenchError(f"scenario {scenario} has no simulated card or flash chip: nothing keeps a ledger")
    sc = scen.load(scenario, sets + [f"{protocol(base.protocol).runs_option}={runs}"])
    rec = run_scenario(sc)
    ledgers = rec.metadata.get("ledger", {})
    rows = [r for r in rec.rows if row is None or r.label == row]
    if not rows:
        raise SdbenchError(f"row {row!r} not in {sc.name} (rows: {', '.join(r.label for r in rec.rows)})")
    sections = profile_sections(rec.stack)
    for r in rows:
        entries = ledgers.get(r.label, {})
        typer.echo(f"\n### {r.label}: {r.time_ms:.4g} ms per call ({r.runs} calls)\n")
        if not entries:
            typer.echo("(no simulated time in this row's calls)")
            continue
        typer.echo("| parameter | value | per call | ms per call | share |")
        typer.echo("|---|---:|---:|---:|---:|")
        for key, ms in entries.items():
            value, mult = per_call(key, ms * 1e6, sections)
            if not value and key in MECHANISMS:
                value = MECHANISMS[key]
            share = ms / r.time_ms if r.time_ms > 0 else 0.0
            typer.echo(f"| {key} | {value or '—'} | {mult or '—'} | {ms:.4g} | {share:.1%} |")


class _Windows:
    """Timer listener recording (start, stop, label) on the virtual clock."""

    def __init__(self, out: list[tuple[int, int, str]]) -> None:
        self.out = out
        self._start = 0
        self.clock: Any = None

    def timer_start(self, label: str) -> None:
        self._label = label
        self._start = self._now()

    def timer_stop(self, label: str) -> None:
        self.out.append((self._start, self._now(), label))

    def _now(self) -> int:
        return self.clock.now_ns() if self.clock is not None else 0
