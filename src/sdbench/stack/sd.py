"""Simulated SD targets for scenarios: ``[sd] media = "sim"``.

A target is host profile + bus + card profile on a virtual clock.  Profiles
are TOML data (``sdbench/data/hosts``, ``sdbench/data/cards``); a scenario
names them and may override single fields in ``[sd.host_params]`` /
``[sd.card_params]``.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..clock import VirtualClock
from ..errors import ConfigError, InternalError
from .. import profiles
from ..options import from_mapping, opt, to_mapping
from ..media.sim import busclock
from ..media.sim.bus import BusConfig, SdBus
from ..media.sim.card import NOT_TIMING, CardProfile
from ..media.sim.host import HostProfile, host_metadata
from ..media.sim.sdhost import SdHostDriver

@dataclass(frozen=True)
class SimSdConfig:
    host: str = opt("esp32-sdmmc", help="host profile (file in sdbench/data/hosts, or a path to a TOML file)")
    card: str = opt("generic-sdhc", help="card profile (file in sdbench/data/cards, or a path to a TOML file)")
    bus: BusConfig = opt(factory=BusConfig, help="bus kind and clock")
    host_params: dict[str, Any] = opt(factory=dict, help="overrides of host profile fields")
    card_params: dict[str, Any] = opt(factory=dict, help="overrides of card profile fields")
    capacity_bytes: int = opt(0, unit="B", min=0, help="card capacity; 0 = the card profile's")
    log_commands: bool = opt(False, help="record every command (for sdbench trace)")


def load_host(name: str, overrides: dict[str, Any] | None = None, base_dir: Path | None = None) -> HostProfile:
    return profiles.load(HostProfile, "hosts", name, overrides, base_dir, what="host profile")


def load_card(name: str, overrides: dict[str, Any] | None = None, base_dir: Path | None = None) -> CardProfile:
    """A card profile; one with ``timing_from = "population"`` takes each field it holds
    (:func:`population_held`) from :func:`card_population` (the median of the cards that fitted it)."""
    table = profiles.load_table("cards", name, base_dir, what="card profile")
    held = population_held(table)
    if held:
        medians = card_population(fitted_only=True)[0]
        table = {**{f: medians[f] for f in held if f in medians}, **table}
    if overrides is not None and not isinstance(overrides, dict):
        raise ConfigError(f"card profile {name}: overrides must be a table, got {overrides!r:.60}")
    return from_mapping(CardProfile, {**table, **(overrides or {})}, f"card profile {name}")


def population_held(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The timing fields a card profile's TOML table leaves to the population: with ``timing_from =
    "population"``, each field some shipped fitted card fitted (:func:`fitted_values`) that neither the table
    nor ``overrides`` (a scenario's [sd.card_params]) sets.  A field no fitted card fitted keeps its default,
    as in any profile.  Ranges span a held field when at least two cards fitted it (:func:`spread_values`)."""
    if table.get("timing_from") != "population":
        return ()
    fitted = fitted_values()
    if not fitted:
        raise ConfigError("no fitted card profile is shipped to take population values from")
    return tuple(f.name for f in fields(CardProfile)
                 if f.name in fitted and f.name not in table and f.name not in (overrides or {}))


def spread_values() -> dict[str, tuple[float, ...]]:
    """Timing field -> its values over the shipped fitted cards that fitted it (:func:`fitted_values`), for each
    field at least two of them fitted: a held field whose spread ranges span (one card's value is no spread)."""
    return {f: v for f, v in fitted_values().items() if len(v) >= 2}


@functools.lru_cache(maxsize=1)
def fitted_values() -> dict[str, tuple[float, ...]]:
    """Timing field -> its values over the shipped fitted cards that fitted it (named in their ``fit_rel_sd``),
    in ascending order: what a field held at the population's value may be (ranges span them)."""
    out: dict[str, list[float]] = {}
    for n in _fitted_names():
        card = profiles.load(CardProfile, "cards", n, what="card profile")
        for f in card.fit_rel_sd:
            out.setdefault(f, []).append(float(getattr(card, f)))
    return {f: tuple(sorted(v)) for f, v in out.items()}


def _fitted_names() -> tuple[str, ...]:
    """The shipped card profiles whose first comment says `sdbench calibrate` fitted them."""
    def first_comment(text: str) -> str:
        return next((ln for ln in text.splitlines() if ln.strip().startswith("#")), "")

    return tuple(n for n in profiles.shipped("cards")
                 if profiles.FITTED_MARK in first_comment((profiles.DATA / "cards" / f"{n}.toml").read_text()))


@functools.lru_cache(maxsize=2)
def card_population(fitted_only: bool = False) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(timing field -> median over the shipped fitted card profiles, their names): the profiles whose first
    comment says they were fitted by `sdbench calibrate`, each without the fields it takes from the population
    itself (:func:`population_held`); integer fields take the lower median (a value a card has).
    ``fitted_only``: each field's median over the cards that fitted it (named in their ``fit_rel_sd``), and no
    value for a field no card fitted.  ConfigError when no fitted card is shipped."""
    names = _fitted_names()
    if not names:
        raise ConfigError("no fitted card profile is shipped to take population values from")
    cards = [profiles.load(CardProfile, "cards", n, what="card profile") for n in names]
    # a field a fitted card itself takes from the population is not one of the population's values
    held = [set(population_held(profiles.load_table("cards", n, what="card profile"))) for n in names]
    med: dict[str, Any] = {}
    for f in fields(CardProfile):
        vals = [getattr(c, f.name) for c, h in zip(cards, held)
                if f.name not in h and (not fitted_only or f.name in c.fit_rel_sd)]
        if f.name in NOT_TIMING or not vals or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                       for v in vals):
            continue
        med[f.name] = statistics.median_low(vals) if all(isinstance(v, int) for v in vals) \
            else float(statistics.median(vals))
    return med, names


def forget_population() -> None:
    """Drop the cached population (:func:`fitted_values`, :func:`card_population`): after a fit wrote the
    shipped profiles, the next fit reads what it wrote."""
    fitted_values.cache_clear()
    card_population.cache_clear()


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
    #: the bus clock asked for and made (sdbench.media.sim.busclock.resolve), and what the run says about it
    clock: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def driver(self, clock: VirtualClock) -> SdHostDriver:
        """A fresh card behind the host profile's driver model, on ``clock``."""
        if not isinstance(clock, VirtualClock):
            raise InternalError("simulated media need the virtual clock (the stack builder makes one)")
        return SdHostDriver(self.host, SdBus(self.bus), self.card, clock, seed=self.seed,
                            log_commands=self.log_commands)


def sim_sd_parts(cfg: SimSdConfig, scenario: Any) -> SimSdParts:
    base = getattr(scenario, "source_dir", None)
    host = load_host(cfg.host, cfg.host_params, base)
    card_over = dict(cfg.card_params)
    if cfg.capacity_bytes:
        card_over["capacity_bytes"] = cfg.capacity_bytes
    card = load_card(cfg.card, card_over, base)
    bus, clock, warnings = busclock.resolve(host, cfg.bus, card)
    return SimSdParts(host, card, bus, scenario.seed, cfg.log_commands, clock, tuple(warnings))


def build_sim_sd(cfg: SimSdConfig, scenario: Any, clock: Any) -> tuple[SdHostDriver, dict[str, Any]]:
    parts = sim_sd_parts(cfg, scenario)
    dev = parts.driver(clock)
    meta = {"media": "sim", "host": host_metadata(parts.host), "bus": to_mapping(parts.bus),
            "bus_clock": parts.clock, "card": to_mapping(parts.card), "parts": parts,
            "warnings": list(parts.warnings)}
    return dev, meta
