"""Simulated SD targets for scenarios: ``[sd] media = "sim"``.

A target is host profile + bus + card profile on a virtual clock.  Profiles
are TOML data (``sdbench/data/hosts``, ``sdbench/data/cards``); a scenario
names them and may override single fields in ``[sd.host_params]`` /
``[sd.card_params]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..clock import VirtualClock
from ..errors import ConfigError, InternalError
from .. import profiles
from ..options import from_mapping, opt, to_mapping
from ..media.sim import busclock
from ..media.sim.bus import BusConfig, SdBus
from ..media.sim.card import INERT_WITHOUT, CardProfile
from ..media.sim.host import HostProfile, host_metadata
from ..media.sim.linux_mmc import LinuxMmcDriver
from ..media.sim.sdhost import SdHostDriver
from .cardpop import card_population, forget

#: host driver kinds modelled by a class of their own; every other kind is SdHostDriver's
DRIVER_MODELS: dict[str, type[SdHostDriver]] = {"linux-mmc": LinuxMmcDriver}


def sd_driver(host: HostProfile, bus: SdBus, card: CardProfile, clock: VirtualClock, *, seed: int = 1,
              log_commands: bool = False) -> SdHostDriver:
    """A simulated card behind the model of ``host``'s driver kind."""
    cls = DRIVER_MODELS.get(host.driver, SdHostDriver)
    return cls(host, bus, card, clock, seed=seed, log_commands=log_commands)

@dataclass(frozen=True)
class SimSdConfig:
    host: str = opt("esp32-sdmmc", help="host profile (file in sdbench/data/hosts, or a path to a TOML file)")
    card: str = opt("generic-sdhc", help="card profile (file in sdbench/data/cards, or a path to a TOML file)")
    bus: BusConfig = opt(factory=BusConfig, help="bus kind and clock")
    host_params: dict[str, Any] = opt(factory=dict, help="overrides of host profile fields")
    card_params: dict[str, Any] = opt(factory=dict, help="overrides of card profile fields")
    capacity_bytes: int = opt(0, unit="B", min=0, help="card capacity; 0 = the card profile's")
    log_commands: bool = opt(False, help="record every command (for sdbench trace)")
    initialise: bool = opt(False, help="initialise the card when the stack is built (boot, card detection): its "
                                       "commands lead the trace")


def load_host(name: str, overrides: dict[str, Any] | None = None, base_dir: Path | None = None) -> HostProfile:
    return profiles.load(HostProfile, "hosts", name, overrides, base_dir, what="host profile")


def load_card(name: str, overrides: dict[str, Any] | None = None, base_dir: Path | None = None) -> CardProfile:
    """A card profile; one with ``timing_from = "population"`` takes each field it holds
    (:func:`population_held`) from the card population's medians (:mod:`sdbench.stack.cardpop`)."""
    table = profiles.load_table("cards", name, base_dir, what="card profile")
    held = population_held(table)
    if held:
        medians = card_population().medians
        table = {**{f: medians[f] for f in held if f in medians}, **table}
    if overrides is not None and not isinstance(overrides, dict):
        raise ConfigError(f"card profile {name}: overrides must be a table, got {overrides!r:.60}")
    return from_mapping(CardProfile, {**table, **(overrides or {})}, f"card profile {name}")


def population_held(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The timing fields a card profile's TOML table leaves to the population: with ``timing_from =
    "population"``, each field some shipped fitted card fitted that neither the table nor ``overrides`` (a
    scenario's [sd.card_params]) sets.  A field no fitted card fitted keeps its default, as in any profile.
    Ranges span a held field when at least two cards fitted it (:meth:`CardPopulation.spread`)."""
    if table.get("timing_from") != "population":
        return ()
    pop = card_population()
    fitted = pop.values
    given = {**table, **(overrides or {})}

    def inert(name: str) -> bool:  # a field that does nothing on this card (INERT_WITHOUT)
        owner = INERT_WITHOUT.get(name)
        return owner is not None and not given.get(owner, pop.medians.get(owner, getattr(CardProfile(), owner)))

    return tuple(f.name for f in fields(CardProfile)
                 if f.name in fitted and f.name not in given and not inert(f.name))


def spread_values() -> dict[str, tuple[float, ...]]:
    """Timing field -> its values over the shipped fitted cards that fitted it, for each field at least two of
    them fitted: a held field whose spread ranges span (one card's value is no spread)."""
    return card_population().spread()


def fitted_values() -> dict[str, tuple[float, ...]]:
    """Timing field -> its values over the shipped fitted cards that fitted it (named in their ``fit_rel_sd``),
    in ascending order: what a field held at the population's value may be (ranges span them)."""
    return card_population().values


def forget_population() -> None:
    """Drop the cached population: after a fit wrote the shipped profiles, the next fit reads what it wrote."""
    forget()


@dataclass(frozen=True)
class SimSdParts:
    """A simulated card's pieces as the scenario describes them: a protocol that drives the card through a
    driver of its own (MicroPython's sdcard.py) or needs a fresh card on a clock of its own (the USB bridge)
    makes it from these, never from the scenario's tables."""

    host: HostProfile
    card: CardProfile
    bus: BusConfig
    seed: int
    log_commands: bool = False
    initialise: bool = False
    #: the bus clock asked for and made (sdbench.media.sim.busclock.resolve), and what the run says about it
    clock: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def driver(self, clock: VirtualClock) -> SdHostDriver:
        """A fresh card behind the host profile's driver model, on ``clock`` (initialised, where the scenario
        says so)."""
        if not isinstance(clock, VirtualClock):
            raise InternalError("simulated media need the virtual clock (the stack builder makes one)")
        dev = sd_driver(self.host, SdBus(self.bus), self.card, clock, seed=self.seed, log_commands=self.log_commands)
        if self.initialise:
            dev.initialise()
        return dev


def sim_sd_parts(cfg: SimSdConfig, scenario: Any, loaded: Any = None) -> SimSdParts:
    """The card, host and bus of a simulated SD target; ``loaded``: the card and host the stack builder loaded
    (:func:`sdbench.stack.loaded.sd_profiles`), else they are loaded here."""
    if loaded is not None:
        card, host = loaded[0].value, loaded[1].value
    else:
        base = getattr(scenario, "source_dir", None)
        host = load_host(cfg.host, cfg.host_params, base)
        card_over = dict(cfg.card_params)
        if cfg.capacity_bytes:
            card_over["capacity_bytes"] = cfg.capacity_bytes
        card = load_card(cfg.card, card_over, base)
    bus, clock, warnings = busclock.resolve(host, cfg.bus, card)
    return SimSdParts(host, card, bus, scenario.seed, cfg.log_commands, cfg.initialise, clock, tuple(warnings))


def build_sim_sd(cfg: SimSdConfig, scenario: Any, clock: Any, loaded: Any = None) -> tuple[SdHostDriver,
                                                                                           dict[str, Any]]:
    parts = sim_sd_parts(cfg, scenario, loaded)
    dev = parts.driver(clock)
    meta = {"media": "sim", "host": host_metadata(parts.host), "bus": to_mapping(parts.bus),
            "card": to_mapping(parts.card), "parts": parts, "warnings": list(parts.warnings)}
    if parts.clock.get("divisor") or parts.clock.get("above_card_rating"):
        # only where it tells more than bus.clock_hz (a divider, a card run above its rating): runs that differ
        # in their clock are then told apart by one field
        meta["bus_clock"] = parts.clock
    return dev, meta
