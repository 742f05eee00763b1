"""``sdbench trace``: the SD commands a simulated scenario issues."""
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
    ) -> None:
        """List the SD commands a simulated scenario issues, like a logic analyser.

        Columns: time since start (µs), command, argument, data bytes, duration (µs),
        cumulative time (ms).  ``CMD13 ×n`` is status polling repeated n times.
        """
        from ..workloads.registry import protocol

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
