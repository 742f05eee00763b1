"""A card profile from a probe: the card fields the probe's figures tell, the rest from the population.

What the probe finds directly (page, AU, open units, a merge's cost, the extra time of reads across
boundaries) goes into the profile as measured.  Its latencies time the card *and* the path to it (host, bus,
USB reader), so the card's share is fitted through a model of that path, the *setup* (a scenario whose
``[sd]`` describes host, bus and bridge; for a real card the USB 2.0 reader scenario
``usb2-reader-generic-sdhc`` unless the user names another): the same tests run on the setup's simulated
stack, and the card fields are solved so that its times match the measured ones.  The profile says which
setup it assumed; a group of fields the setup cannot match within 10 % (the path is faster than the setup
assumes) is left to the population, and named.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..media.sim.card import NOT_TIMING, CardProfile
from ..options import from_mapping
from ..scenarios import load as load_scenario
from .measure import KiB, MULTI_LARGE_BYTES, MULTI_SMALL_BYTES, STREAM_CHUNK_BYTES, Prober, ProbeResult

#: the setup a real card is probed through, unless the user names another
DEFAULT_SETUP = "usb2-reader-generic-sdhc"

#: card timings the path model holds at zero while fitting: the probe's fits do not depend on them
QUIET_CARD = {"first_write_ms": 0, "merge_base_ms": 0, "switch_merge_ms": 0, "merge_copy_us_per_kib": 0,
              "pause_probability": 0}


#: a group's fit is kept when every test's simulated time is within this of the measured one
FIT_TOLERANCE = 0.1


@dataclass(frozen=True)
class FitGroup:
    """Card fields fitted together to the probe's times of some tests (latency keys, or ("erase", spacings))."""

    fields: tuple[str, ...]
    tests: tuple[tuple[str, str, int], ...]
    how: str


def _groups(res: ProbeResult) -> tuple[FitGroup, ...]:
    ss, s = res.sector_bytes, res.stream_spacing_bytes
    reads = tuple(("read", "random", n) for n in (ss, MULTI_SMALL_BYTES, MULTI_LARGE_BYTES))
    writes = tuple(("write", "sequential", n) for n in (ss, MULTI_SMALL_BYTES, MULTI_LARGE_BYTES))
    sizes = f"{ss} B, {MULTI_SMALL_BYTES // KiB} and {MULTI_LARGE_BYTES // KiB} KiB"
    crossings = tuple(("cross", "", b) for b in (res.page_bytes, res.au_bytes_read) if b is not None)
    cross_fields = tuple(f for f, b in (("read_page_cross_us", res.page_bytes),
                                        ("read_au_cross_us", res.au_bytes_read)) if b is not None)
    return (FitGroup(cross_fields, crossings, "the extra time of reads across page and AU boundaries"),
            FitGroup(("read_access_us", "read_block_gap_us"), reads, f"random reads of {sizes}"),
            FitGroup(("write_busy_single_us", "write_busy_block_us", "write_busy_end_us"), writes,
                     f"sequential writes of {sizes}"),
            FitGroup(("erase_busy_us", "erase_busy_per_sector_us"), (("erase", "", s), ("erase", "", 4 * s)),
                     "ERASE of two sizes"))


def _times(res: ProbeResult) -> dict[tuple[str, str, int], float]:
    out = {(x.op, x.pattern, x.size_bytes): x.median_us for x in res.latency}
    out.update({("erase", "", e["bytes"]): e["us"] for e in res.erase if e["kind"] == "erase"})
    out.update({("cross", "", int(a["boundary_bytes"])): a["extra_us"] for a in res.alignment})
    return out


class PathModel:
    """The setup with a card whose fields are given: the probe's latency and erase tests on it."""

    def __init__(self, setup: str, sets: list[str], res: ProbeResult, capacity_bytes: int) -> None:
        self.setup, self.sets, self.res = setup, list(sets), res
        self.fixed = {**QUIET_CARD, "capacity_bytes": capacity_bytes}

    def times(self, card: dict[str, Any], kinds: set[str]) -> dict[tuple[str, str, int], float]:
        """The probe's tests of ``kinds`` (read, write, erase, cross: the first item of a test key) on the
        setup with ``card``."""
        over = {**self.fixed, **card}
        sc = load_scenario(self.setup, [*self.sets, *(f"sd.card_params.{k}={_literal(v)}" for k, v in over.items())])
        built = sc.build()
        try:
            dev = built.target.sd_device
            if dev is None:
                raise ConfigError(f"setup {self.setup} has no SD card ([sd]) to model the path to the card")
            p = Prober(dev, writes=self.res.writes)
            if "read" in kinds:
                p.read_latency()
            if "cross" in kinds:
                p.alignment(only=tuple(b for b in (self.res.page_bytes, self.res.au_bytes_read) if b is not None))
            if self.res.writes and kinds & {"write", "erase"}:
                p.res.stream_spacing_bytes = self.res.stream_spacing_bytes
                if "write" in kinds:
                    p.write_latency()
                if "erase" in kinds:
                    p.erase()
            return _times(p.res)
        finally:
            built.close()


def _literal(v: Any) -> str:
    """A --set value of a number (numpy's floats print as their type's name)."""
    return str(int(v)) if isinstance(v, (int, np.integer)) else repr(float(v))


def fit_fields(model: PathModel, res: ProbeResult, start: dict[str, Any], found: dict[str, Any],
               iterations: int = 3) -> tuple[dict[str, float], dict[str, str]]:
    """Least squares, group by group: the card fields whose simulated times on the setup match the measured
    ones (Gauss-Newton from the population values; the times are close to linear in these fields).
    ``found``: fields the probe measured directly, held fixed.  Returns (fitted fields, why others were not)."""
    measured = _times(res)
    fitted: dict[str, float] = {}
    why: dict[str, str] = {}
    for g in _groups(res):
        tests = [k for k in g.tests if k in measured]
        if not g.fields:
            continue
        if len(tests) < len(g.fields):
            for f in g.fields:
                why[f] = "its tests did not run (" + (res.not_measured.get(g.tests[0][0]) or
                                                      "write tests need --allow-write") + ")"
            continue
        kinds = {k[0] for k in tests}
        x = np.array([float(start[f]) for f in g.fields])
        y = np.array([measured[k] for k in tests])
        for it in range(iterations + 1):
            card = {**start, **found, **fitted, **dict(zip(g.fields, x))}
            base = model.times(card, kinds)
            f0 = np.array([base[k] for k in tests])
            if it == iterations:
                break
            jac = np.empty((len(tests), len(g.fields)))
            for j, name in enumerate(g.fields):
                # a path may be quantised (USB packet slots of 9.6 µs, RTOS ticks of 10 ms): the step grows
                # until it moves some time
                step = max(abs(x[j]) * 0.1, 0.01 if name.endswith("per_sector_us") else 10.0)
                for _grow in range(6):
                    t = model.times({**card, name: x[j] + step}, kinds)
                    jac[:, j] = [(t[k] - base[k]) / step for k in tests]
                    if jac[:, j].any():
                        break
                    step *= 4
            dx, *_ = np.linalg.lstsq(jac, y - f0, rcond=None)
            x = np.maximum(x + dx, 0.0)  # no card field is negative; the model refuses one
        worst = float(np.max(np.abs(f0 - y) / y))
        if worst > FIT_TOLERANCE:
            for name in g.fields:
                why[name] = (f"{g.how}: the setup {model.setup} cannot match them with any card (off by up to "
                             f"{worst:.0%}; the path to this card is faster than the setup assumes)")
            continue
        fitted.update({name: float(v) for name, v in zip(g.fields, x)})
    return fitted, why


@dataclass
class ProbedCard:
    """The card table a probe gives, what each field came from, and what stayed at the population."""

    name: str
    setup: str
    table: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    left: dict[str, str] = field(default_factory=dict)

    def text(self, target: str) -> str:
        from ..calibrate import profile_text

        header = [f"Card profile measured by `sdbench probe` on {target}; latencies fitted through the setup",
                  f"{self.setup} (a model of the host, bus and reader the card was probed through). Fields not",
                  "listed below are the medians of the shipped fitted cards (timing_from = \"population\")."]
        if self.sources:
            header += [""] + [f"{k}: {v}" for k, v in self.sources.items()]
        if self.left:
            header += ["", "Left at the population:"] + [f"{k}: {v}" for k, v in self.left.items()]
        return profile_text("card", self.table, header)


def card_from_probe(res: ProbeResult, *, name: str, setup: str, sets: list[str],
                    capacity_bytes: int) -> ProbedCard:
    """The card table of a probe: what it measured directly, the latency fields fitted through the setup."""
    from ..stack.cardpop import card_population

    card = ProbedCard(name, setup, {"name": name, "timing_from": "population",
                                    "description": f"measured by sdbench probe on {res.target}",
                                    "capacity_bytes": capacity_bytes // 512 * 512})
    t, src, left = card.table, card.sources, card.left

    def put(key: str, value: int | float, how: str) -> None:
        t[key] = round(value, 6) if isinstance(value, float) else value
        src[key] = how

    if res.page_bytes is not None:
        put("page_bytes", res.page_bytes, "reads across page boundaries (alignment test)")
    else:
        left["page_bytes"] = res.not_measured.get("page_bytes", "not measured")
    au = res.au_bytes
    if au is not None:
        how = "the smallest stream spacing that was slow" if res.au_bytes_write else \
            "reads across AU boundaries (alignment test)"
        put("au_bytes", au, how)
        put("update_block_bytes", au, how)
    else:
        left["au_bytes"] = res.not_measured.get("au_bytes_write", "not measured")
    if res.open_aus is not None:
        put("open_aus", res.open_aus, "the most streams written without a merge per write")
        if au is not None and res.merge_us is not None:
            copy_kib = (au - STREAM_CHUNK_BYTES) / KiB
            t["merge_base_ms"] = 0.0
            put("merge_copy_us_per_kib", res.merge_us / copy_kib,
                f"a merge per write beyond the open units ({res.merge_us / 1e3:.1f} ms), all taken as copying "
                f"the AU's {copy_kib:.0f} KiB (its split into a fixed and a per-KiB part is not measured)")
    else:
        left["open_aus"] = res.not_measured.get("open_aus", "not measured")
    population = card_population().medians
    start = {k: v for k, v in vars(from_mapping(CardProfile, population, "the population card")).items()
             if k not in NOT_TIMING and isinstance(v, (int, float)) and not isinstance(v, bool)}
    found = {k: v for k, v in t.items() if k in start}
    model = PathModel(setup, sets, res, capacity_bytes)
    fitted, why = fit_fields(model, res, start, found)
    for g in _groups(res):
        for f in g.fields:
            if f in fitted:
                put(f, fitted[f], f"fitted to {g.how} through the setup")
    left.update(why)
    # the profile must load: every field through the one declaration of card fields
    from_mapping(CardProfile, {**population, **t}, f"probed card {name}")
    return card


__all__ = ["DEFAULT_SETUP", "FitGroup", "PathModel", "ProbedCard", "card_from_probe", "fit_fields"]
