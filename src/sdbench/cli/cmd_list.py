"""``sdbench list``: what this sdbench can run, one Markdown table per kind, read from the registries."""
from __future__ import annotations

from enum import Enum

import typer

from ..errors import ConfigError
from ..media.sim.card import CardProfile
from ..media.sim.esp_flash import EspFlashHostProfile
from ..media.sim.host import HostProfile
from ..media.sim.nor import FlashChipProfile


class Kind(str, Enum):
    protocols = "protocols"
    filesystems = "filesystems"
    hosts = "hosts"
    cards = "cards"
    flash = "flash"
    scenarios = "scenarios"
    sweeps = "sweeps"


def _table(headers: list[str], rows: list[list[str]]) -> None:
    typer.echo("| " + " | ".join(headers) + " |")
    typer.echo("|" + "|".join("---" for _ in headers) + "|")
    for r in rows:  # one line per row: a line break inside a cell would end the table
        typer.echo("| " + " | ".join(" ".join(c.split()).replace("|", "\\|") for c in r) + " |")


def _mhz(hz: float) -> str:
    return f"{hz / 1e6:g} MHz"


def _fitted(folder: str, name: str) -> str:
    """Whether `sdbench calibrate` wrote the profile (its header says so), as a table cell."""
    from .. import profiles

    text = (profiles.DATA / folder / f"{name}.toml").read_text()
    return "fitted" if "fitted by `sdbench calibrate" in text else "uncalibrated"


def _protocols() -> None:
    from ..workloads.registry import protocols

    _table(["protocol", "runs on", "needs", "--runs sets", "what it measures"],
           [[p.name, ", ".join(sorted(p.media)), ", ".join(sorted(p.needs)), p.runs_option, p.summary]
            for p in protocols().values()])


def _filesystems() -> None:
    from ..fs.registry import filesystems

    _table(["filesystem", "medium", "options", "what it is"],
           [[f.name, f.medium, f.config.__name__, f.summary] for f in filesystems().values()])


def _hosts() -> None:
    from .. import profiles

    rows = []
    for name in profiles.shipped("hosts"):
        try:
            h = profiles.load(HostProfile, "hosts", name, what="host profile")
        except ConfigError:  # the hosts folder holds SD hosts and ESP32 flash hosts
            f = profiles.load(EspFlashHostProfile, "hosts", name, what="host profile")
            limit = _mhz(f.max_flash_clock_hz) if f.max_flash_clock_hz else "-"
            rows.append([name, "esp_flash (SPI NOR)", _mhz(f.cpu_hz), limit, "-", _fitted("hosts", name),
                         f.description])
            continue
        limit_hz, _ = h.bus_clock_limit
        limit = _mhz(limit_hz) if limit_hz else "-"
        # the card's own limit follows from the mode the driver leaves it in (Default Speed: 25 MHz)
        mode = "High Speed (CMD6)" if h.high_speed else "Default Speed"
        rows.append([name, h.driver, _mhz(h.cpu_hz), limit, mode, _fitted("hosts", name), h.description])
    _table(["host", "driver", "CPU", "bus clock limit", "card mode", "parameters", "description"], rows)


def _capacity(nbytes: int) -> str:
    """Capacity as printed on cards (decimal GB) with its SD capacity family, e.g. "64 GB (SDXC)"."""
    if nbytes >= 10**9:
        size = f"{nbytes / 1e9:.1f}".removesuffix(".0") + " GB"
    else:
        size = f"{nbytes / 1e6:.1f}".removesuffix(".0") + " MB"
    # SD Physical Layer spec: SDSC up to 2 GB, SDHC up to 32 GB, SDXC up to 2 TB, SDUC up to 128 TB (CSD limits)
    family = next(f for limit, f in ((2 << 30, "SDSC"), (32 << 30, "SDHC"), (2 << 40, "SDXC"), (None, "SDUC"))
                  if limit is None or nbytes <= limit)
    return f"{size} ({family})"


def _markings(c: CardProfile) -> str:
    """The speed class symbols and UHS bus printed on the card, as a table cell."""
    marks = " ".join(c.speed_class.split())
    if marks and c.uhs_bus:
        return f"{marks}, {c.uhs_bus}"
    if c.uhs_bus:
        return f"{c.uhs_bus} (speed class not recorded)"
    return marks or "not recorded"


def _held(name: str) -> str:
    """The timing fields a card takes from the population (timing_from), for its parameters cell."""
    from .. import profiles
    from ..stack.sd import population_held

    held = population_held(profiles.load_table("cards", name, what="card profile"))
    if not held:
        return ""
    return f"; from the population: {', '.join(held) if len(held) <= 4 else f'{len(held)} timing fields'}"


def _cards() -> None:
    from .. import profiles
    from ..stack.sd import load_card

    rows = []
    for name in profiles.shipped("cards"):
        c = load_card(name)
        hs = _mhz(c.high_speed_max_clock_hz) if c.high_speed_max_clock_hz else "-"
        rows.append([name, _capacity(c.capacity_bytes), _markings(c), f"{c.au_bytes >> 20} MiB",
                     _mhz(c.default_speed_max_clock_hz), hs, _fitted("cards", name) + _held(name), c.description])
    _table(["card", "capacity", "speed class", "allocation unit", "default speed", "high speed", "parameters",
            "description"], rows)


def _flash() -> None:
    from .. import profiles

    rows = []
    for name in profiles.shipped("flash"):
        c = profiles.load(FlashChipProfile, "flash", name, what="flash chip profile")
        rows.append([name, f"{c.capacity_bytes >> 20} MiB", f"{c.page_size_bytes} B", _fitted("flash", name),
                     c.description])
    _table(["flash chip", "capacity", "page", "parameters", "description"], rows)


def print_scenarios() -> None:
    """The built-in scenarios, one line each (also `sdbench scenarios`)."""
    from .. import scenarios as scen

    _table(["scenario", "description"],
           [[n + (" (default)" if n == scen.DEFAULT_SCENARIO else ""), d] for n, d in scen.describe_all()])


def _sweeps() -> None:
    from .. import sweep

    rows = []
    for name in sweep.builtin_specs():
        spec = sweep.load_spec(name)
        rows.append([name, spec.base, ", ".join(spec.keys), spec.description])
    _table(["sweep", "base scenario", "grid keys", "description"], rows)


_LISTERS = {Kind.protocols: _protocols, Kind.filesystems: _filesystems, Kind.hosts: _hosts, Kind.cards: _cards,
            Kind.flash: _flash, Kind.scenarios: print_scenarios, Kind.sweeps: _sweeps}


def register(app: typer.Typer) -> None:
    @app.command("list")
    def list_cmd(kind: Kind = typer.Argument(..., help="What to list: protocols, filesystems, hosts, cards, "
                                                       "flash (chips), scenarios or sweeps.")) -> None:
        """List what sdbench can run, one line each (Markdown): protocols with where they run and what they
        need, filesystems, host profiles with their bus clock limits, card profiles with capacity, speed
        class markings and clock limits, flash chips, built-in scenarios and sweeps. Plugins appear here too."""
        _LISTERS[kind]()
