"""``sdbench probe``: what a card does, flashbench-style, and a card profile of it (docs/probe.md)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import SdbenchError
from ..report.text import size_text
from ..output_files import check_profile_output, check_writable_output, write_atomically
from .cmd_real import _Progress
from .formats import format_enum, format_option
from .formats import is_json as _is_json, md_table as _md_table
from .grant import write_grant
from .params import size_option


ProbeFormat = format_enum("probe")


def _size(n: int | None) -> str:
    return "-" if n is None else size_text(n)


def _range(res: Any) -> str:
    """How much was probed, and from where when not from the start."""
    text = f"{res.range_bytes:,} B ({_size(res.range_bytes)})"
    return f"{text} from byte {res.offset_bytes:,} ({_size(res.offset_bytes)})" if res.offset_bytes else text


def findings(res: Any) -> list[tuple[str, str]]:
    """The probe's answers, one line each, for the text table and the HTML page."""
    def us(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f} µs"

    rows = [("Target", res.target), *([("Card", res.identity)] if res.identity else []), ("Range probed", _range(res)),
            ("Clock", "virtual (simulated card)" if res.clock == "virtual" else "wall"),
            ("Page size (reads)", f"{_size(res.page_bytes)}, +{us(res.page_cross_us)} across"
             if res.page_bytes else "-"),
            ("AU size (reads)", f"{_size(res.au_bytes_read)}, +{us(res.au_cross_us)} across"
             if res.au_bytes_read else "-"),
            ("AU size (writes)", _size(res.au_bytes_write)),
            ("Open units", "-" if res.open_aus is None else str(res.open_aus)),
            ("Merge per write beyond them", "-" if res.merge_us is None else f"{res.merge_us / 1e3:,.2f} ms")]
    rows += [(f"{e['kind'].upper()} {_size(e['bytes'])}", f"{e['us'] / 1e3:,.2f} ms") for e in res.erase]
    return rows


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe_cmd(
        target: Optional[str] = typer.Argument(None, help="Block device (e.g. /dev/sdb) or image file to probe."),
        scenario: Optional[str] = typer.Option(None, "--scenario", help="Probe the simulated card of this scenario "
                                                                      "(name or TOML file) instead of TARGET."),
        set_: list[str] = typer.Option([], "--set", help="Override a field of --scenario and of --setup, e.g. "
                                                         "--set sd.card_params.open_aus=6 (repeatable)."),
        allow_write: bool = typer.Option(False, "--allow-write", help="Run the write tests (open units, AU size, "
                                                                      "write latency, erase): destroys the data "
                                                                      "in the range. Only this flag allows it."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before writing to a device or image file."),
        offset: int = size_option(0, "--offset", help="TARGET: first byte of the range probed"),
        size: int = size_option(0, "--size", help="TARGET: bytes of the range probed (0 = to the end)"),
        max_streams: int = typer.Option(16, "--max-streams", min=2, max=64,
                                        help="Most streams the open-unit test writes round-robin."),
        seed: int = typer.Option(1, "--seed", help="Seed of the random offsets."),
        fmt: ProbeFormat = format_option("probe", "md", json="the probe document (and the profile written)"),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write an HTML page with plots to FILE."),
        profile: Optional[Path] = typer.Option(None, "--profile", help="Write a card profile (TOML) of what was "
                                                                      "measured, for --set sd.card=FILE.toml."),
        name: str = typer.Option("probed-card", "--name", help="The card profile's name."),
        setup: Optional[str] = typer.Option(None, "--setup", help="--profile: the scenario modelling the path to "
                                                                  "the card (default: --scenario, or "
                                                                  "usb2-reader-generic-sdhc for TARGET)."),
        force: bool = typer.Option(False, "--force", help="Replace an existing --profile file."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or notes on stderr."),
    ) -> None:
        """Measure how a card behaves, like flashbench: page and allocation unit (AU) from reads across
        boundaries, the AUs it keeps open for writing, the cost of a merge, read/write latency, erase time.

        Read-only unless --allow-write. Writes stay inside --offset/--size; the data there is destroyed.
        --profile writes what was measured as a card profile; latencies are fitted through --setup's model of
        the host, bus and reader, and every field not measured takes the population value.
        """
        from ..probe import Prober
        from ..probe.profile import DEFAULT_SETUP, card_from_probe

        if (target is None) == (scenario is None):
            raise SdbenchError("give a TARGET (device or image) or --scenario, not both or neither")
        if scenario is not None and (offset or size):
            raise SdbenchError("--offset/--size apply to a TARGET; a scenario's card is probed whole")
        if profile is not None:
            check_profile_output(profile, force, "--profile")
        if html is not None:
            check_writable_output(html)
        if target is not None and set_ and setup is None:
            raise SdbenchError("--set applies to --scenario or --setup; with a TARGET name the --setup it changes")
        setup_name = setup or scenario or DEFAULT_SETUP
        built = None
        if scenario is not None:
            from .. import scenarios as scen

            sc = scen.load(scenario, list(set_))
            if not sc.sd or sc.media_config("sd")[0] != "sim":
                raise SdbenchError(f"scenario {scenario} has no simulated SD card ([sd] media = \"sim\") to probe")
            if setup is not None:
                scen.load(setup, list(set_))  # a bad setup is refused before the probe runs
            built = sc.build()
            dev = built.target.sd_device
            label = f"scenario {sc.name}"
            identity = f"simulated {sc.sd.get('card', '')} card" if sc.sd.get("card") else ""
            capacity = dev.geometry.size_bytes
        else:
            from .. import scenarios as scen
            from ..media.realtarget import open_device

            scen.load(setup_name, list(set_))
            dev = open_device(target, writes=allow_write, grant=write_grant(allow_write, yes), offset_bytes=offset,
                              size_bytes=size or None, consequence="Everything stored in that range is destroyed")
            label = target
            capacity = getattr(dev, "device_size_bytes", 0) or dev.geometry.size_bytes
            from ..media.identity import identify

            try:
                identity = str(identify(target).get("summary", ""))
            except SdbenchError:
                identity = ""  # what the card is stays unsaid; the probe does not need it
        prog = _Progress(not quiet)
        try:
            if not quiet:
                for w in getattr(dev, "warnings", []):
                    typer.echo(f"warning: {w}", err=True)
            res = Prober(dev, target=label, writes=allow_write, seed=seed, max_streams=max_streams,
                         progress=prog).run()
            res.identity = identity
            res.offset_bytes = offset
        finally:
            prog.close()
            if built is not None:
                built.close()
            else:
                dev.close()
        doc = res.to_dict()
        card = None
        if profile is not None:
            card = card_from_probe(res, name=name, setup=setup_name, sets=list(set_), capacity_bytes=capacity)
            write_atomically(profile, card.text(label))
            doc["profile"] = {"path": str(profile), "setup": setup_name, "fields": dict(card.sources),
                              "population": dict(card.left)}
            if not quiet:
                typer.echo(f"card profile written to {profile} (use --set sd.card={profile})"
                           + ("" if card.sources else "; it holds no measured field, only the population's"),
                           err=True)
        if html is not None:
            from ..report.probe_page import render

            write_atomically(html, render(doc, findings(res), title=f"sdbench probe: {label}"))
        if _is_json(fmt):
            typer.echo(json.dumps(doc))
            return
        _md_table(None, ["Probe", "Value"], [list(r) for r in findings(res)], numbers=False)
        typer.echo("")
        _md_table(None, ["Operation", "Pattern", "Size", "Samples", "Median µs", "90th pct µs"],
                  [[x.op, x.pattern, _size(x.size_bytes), x.samples, x.median_us, x.p90_us] for x in res.latency])
        if res.not_measured:
            typer.echo("")
            _md_table(None, ["Not measured", "Why"], [[k, v] for k, v in res.not_measured.items()], numbers=False)
        if card is not None and card.sources:
            typer.echo("")
            _md_table(None, ["Profile field", "Value", "From"],
                      [[k, card.table[k], v] for k, v in card.sources.items()], numbers=False)
