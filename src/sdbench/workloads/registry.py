"""The protocol registry: every protocol sdbench can run, with what it needs and where it runs.

Like fio's engine ops table: one :class:`ProtocolSpec` per protocol holds its
option table, the field ``--runs`` sets, its capability flags and the
functions that check and run it. The CLI, sweeps, validation and ``sdbench
list protocols`` read this registry; no other module keeps a list of
protocol names.

A third-party package adds a protocol through the ``sdbench.protocols`` entry
point group: the entry point names a ProtocolSpec (docs/plugins.md).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError
from ..fs.fat import plan_volume, volume_capacity_bytes
from ..fs.littlefs import data_capacity_bytes
from ..options import from_mapping
from ..records import Row
from ..registry import Registry
from ..runner import Context
from ..stack.media import MEDIA
from . import espidf, fioprotocol, fstests, p2, rawseq, usbmsc
from .espidf import EspIdfConfig
from .fstests import FsTestsConfig
from .p2 import P2Config
from .rawseq import RawSeqConfig
from . import sdfatbench
from .usbmsc import UsbMscProtocolConfig
from . import logger
from . import fileworkload

#: media kinds: the ``media`` key of a scenario's [sd] or [flash] table, and "dir" for a mounted directory
MEDIA_KINDS = (*MEDIA, "dir")


def _no_check(sc: Any, built: Any) -> None:
    """A protocol with nothing to check before it runs."""


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol: its options, capabilities and entry points (all a plugin has to provide)."""

    name: str
    summary: str                                   # one line for `sdbench list protocols`
    table: str                                     # the scenario table holding its options
    config: type                                   # the option declarations of that table
    runs_field: str                                # the field of that table `--runs` sets
    #: media kinds it runs on (see MEDIA_KINDS)
    media: frozenset[str]
    #: what it takes from the stack: "block" (a block device), "filesystem" (filesystems made over it),
    #: "sim-sd" (a simulated card it drives through its own host driver)
    needs: frozenset[str]
    #: (scenario, built stack, context) -> rows, one per measurement, as they finish
    run: Callable[[Any, Any, Context], Iterator[Row]]
    #: scenario -> timed calls (for progress)
    timed_calls: Callable[[Any], int]
    #: (scenario, built stack): refuse with ConfigError what cannot run on this stack, before the run begins
    preflight: Callable[[Any, Any], None] = _no_check
    #: (rows, built stack) -> extra run metadata (e.g. the P2 summary), or None
    summarise: Callable[[list[Row], Any], dict[str, Any]] | None = None
    #: table -> options, where reading the table takes more than the declarations (None: from_mapping)
    load_options: Callable[[dict[str, Any]], Any] | None = None
    #: (options, media kind) -> options, when `sdbench run --device/--dir` moves a scenario onto other media
    #: (e.g. ESP-IDF keeps only the parts that exist there); None: the options stay
    retarget: Callable[[Any, str], Any] | None = None
    #: the output `sdbench run` prints without -f: "md" (Markdown tables), or the name of this protocol's own
    #: text format (e.g. "espidf": the example's printf lines), which ``render`` makes
    default_format: str = "md"
    #: record -> the text the mirrored tool prints (pastes next to a board's output), or None
    render: Callable[[Any], str] | None = None
    #: record -> (figure, value with unit) lines printed under the rows' table (e.g. the P2 summary), or None
    summary_lines: Callable[[Any], list[tuple[str, str]]] | None = None
    #: scenario -> why its requests to the media follow the simulated clock (a logger paced by its record rate,
    #: a job that runs for a time), "" when they do not; such runs are never re-priced (sdbench.ledger), only
    #: run.  None: they never do
    paced: Callable[[Any], str] | None = None

    @property
    def runs_option(self) -> str:
        """The scenario key `--runs` sets, e.g. ``espidf.runs``."""
        return f"{self.table}.{self.runs_field}"

    def options(self, table: dict[str, Any]) -> Any:
        """The protocol's options from its scenario table (ConfigError naming the field)."""
        if self.load_options is not None:
            return self.load_options(table)
        return from_mapping(self.config, table, self.table)

    def config_of(self, sc: Any) -> Any:
        """The protocol's options in scenario ``sc`` (defaults where it has no table)."""
        cfg = sc.options.get(self.table)
        return cfg if cfg is not None else self.options({})

    def on_media(self, cfg: Any, kind: str) -> Any:
        """The protocol's options when the command line moves the scenario onto media ``kind``."""
        return self.retarget(cfg, kind) if self.retarget is not None else cfg


# ---- the built-in protocols ----------------------------------------------------------------------

def _sd(sc: Any, b: Any) -> Any:
    if b.target.sd_device is None:
        raise ConfigError(f"scenario {sc.name}: protocol {sc.protocol} needs an [sd] device")
    return b.target.sd_device


def fs_capacity(sc: Any, b: Any) -> Callable[[str], int | None]:
    """part -> bytes of file data its filesystem holds at most, after checking its configuration against its
    device (ConfigError naming the option); None for a part whose filesystem cannot be sized (a directory)."""
    flash = next((d for d in b.devices if hasattr(d, "check_part")), None)

    def capacity(part: str) -> int | None:
        dev = b.target.sd_device
        if part == "sd_fatfs" and dev is not None:
            return volume_capacity_bytes(plan_volume(dev.geometry, sc.sd_fat, where="sd_fat"))
        if part == "sd_littlefs" and dev is not None:
            return data_capacity_bytes(sc.sd_littlefs, dev.geometry, where="sd_littlefs")
        if flash is not None:
            return flash.check_part(part)
        return None

    return capacity


def _opts(sc: Any, table: str, cls: type) -> Any:
    """Scenario ``sc``'s options of protocol table ``table`` (defaults where it has none)."""
    cfg = sc.options.get(table)
    return cfg if cfg is not None else cls()


def _espidf_parts(cfg: EspIdfConfig, kind: str) -> EspIdfConfig:
    """On a device the SD parts stay (raw alone if there were none); in a directory the 'dir' part runs."""
    if kind == "dir":
        return replace(cfg, parts=("dir",))
    return replace(cfg, parts=tuple(p for p in cfg.parts if p.startswith("sd_")) or ("sd_raw",))


def _preflight_p2(sc: Any, b: Any) -> None:
    cfg = _opts(sc, "p2", P2Config)
    if b.target.sd_device is None:
        if "dir" in b.target.fs_factories:
            p2.preflight_dir(cfg)
            return
        raise ConfigError(f"scenario {sc.name}: protocol p2 needs an [sd] device or a directory")
    dev = b.target.sd_device
    lay = plan_volume(dev.geometry, sc.sd_fat, where="sd_fat")
    p2.preflight(dev, cfg, lay.cluster_bytes, lay.cluster_count - (1 if lay.fat_type == 32 else 0))


def _run_p2(sc: Any, b: Any, ctx: Context) -> Iterator[Row]:
    cfg = _opts(sc, "p2", P2Config)
    if b.target.sd_device is None:
        return p2.run_dir(b.target.make_fs("dir"), cfg, ctx, b.warnings, seed=sc.seed)
    return p2.run(b.target.sd_device, lambda: b.target.make_fs("sd_fatfs"), cfg, ctx, b.warnings, seed=sc.seed)


def _p2_summary(rows: list[Row], b: Any) -> dict[str, Any]:
    bus = b.stack.get("sd", {}).get("bus", {})
    return {"p2_summary": p2.summary(rows, float(bus.get("clock_hz", 25_000_000)))}


def _raw_calls(sc: Any) -> int:
    cfg = _opts(sc, "raw", RawSeqConfig)
    return 2 * cfg.passes * (cfg.total_bytes // cfg.chunk_bytes)


_BUILTIN = (
    ProtocolSpec(
        "espidf", "ESP-IDF storage perf_benchmark: raw, FAT, LittleFS, SPIFFS on SD and SPI flash",
        "espidf", EspIdfConfig, "runs", frozenset(MEDIA_KINDS), frozenset({"block", "filesystem"}),
        run=lambda sc, b, ctx: espidf.run(b.target, _opts(sc, "espidf", EspIdfConfig), ctx, seed=sc.seed),
        timed_calls=lambda sc: _opts(sc, "espidf", EspIdfConfig).timed_calls(),
        preflight=lambda sc, b: espidf.preflight(b.target, _opts(sc, "espidf", EspIdfConfig), fs_capacity(sc, b)),
        retarget=_espidf_parts, default_format="espidf",
        render=lambda rec: "".join(espidf.espidf_line(r) + "\n" for r in rec.rows)),
    ProtocolSpec(
        "p2", "Propeller 2 SD benchmark: mount, open, raw and file reads and writes through a P2 SPI driver",
        "p2", P2Config, "runs", frozenset(MEDIA_KINDS) - {"sim-nor"}, frozenset({"block", "filesystem"}),
        run=_run_p2, timed_calls=lambda sc: 8 * _opts(sc, "p2", P2Config).runs, preflight=_preflight_p2,
        summary_lines=p2.summary_lines,
        summarise=_p2_summary),
    ProtocolSpec(
        "raw", "sequential raw sectors: write then read a region in fixed-size requests",
        "raw", RawSeqConfig, "passes", frozenset({"sim", "memory", "image", "device"}), frozenset({"block"}),
        run=lambda sc, b, ctx: rawseq.run(_sd(sc, b), _opts(sc, "raw", RawSeqConfig), ctx, seed=sc.seed),
        timed_calls=_raw_calls,
        preflight=lambda sc, b: rawseq.preflight(_sd(sc, b), _opts(sc, "raw", RawSeqConfig))),
    ProtocolSpec(
        "fs_tests", "MicroPython fs_tests: FAT and LittleFS over sdcard.py with block caches",
        "fs_tests", FsTestsConfig, "repeats", frozenset({"sim", "memory", "image", "device"}),
        frozenset({"block", "filesystem"}),
        run=fstests.run, timed_calls=fstests.timed_calls, preflight=fstests.preflight,
        load_options=fstests.load_config),
    ProtocolSpec(
        "usbmsc", "USB mass-storage bridge: a PC's sector reads and writes through a board to its card",
        "usbmsc", UsbMscProtocolConfig, "passes", frozenset({"sim"}), frozenset({"block", "sim-sd"}),
        run=usbmsc.run, timed_calls=usbmsc.timed_calls, preflight=usbmsc.preflight),
    ProtocolSpec(
        "fio", "fio-like jobs and presets (CrystalDiskMark-style, A1 sniff test, SdFat bench): MB/s, IOPS, "
               "latency percentiles", "fio", fioprotocol.FioProtocolConfig, "loops",
        frozenset({"sim", "memory", "image", "device", "dir"}), frozenset({"block"}),
        run=fioprotocol.run, timed_calls=fioprotocol.timed_calls, preflight=fioprotocol.preflight,
        load_options=fioprotocol.load_options,
        paced=fioprotocol.paced),
    ProtocolSpec(
        "sdfat-bench", "SdFat bench example: write and read passes of a FAT file in BUF_SIZE calls "
                       "(KB/s, max/min/avg latency per call)", sdfatbench.TABLE, sdfatbench.SdFatBenchConfig,
        "runs", frozenset({"sim", "memory", "image", "device", "dir"}), frozenset({"block", "filesystem"}),
        run=sdfatbench.run, timed_calls=sdfatbench.timed_calls, preflight=sdfatbench.preflight,
        default_format="sdfat", render=sdfatbench.sdfat_output),
    ProtocolSpec(
        "logger", "data logger: fixed-size records at a fixed rate appended to a file with periodic syncs; write "
                  "and sync latency, stall causes, RAM buffer needed", "logger", logger.LoggerConfig, "runs",
        frozenset(MEDIA_KINDS), frozenset({"filesystem"}), run=logger.run, timed_calls=logger.timed_calls,
        preflight=lambda sc, b: logger.preflight(sc, b, fs_capacity(sc, b)), retarget=logger.retarget,
        summary_lines=logger.summary_lines,
        paced=lambda sc: "the logger's records arrive at their rate on the simulated clock"),
    ProtocolSpec(
        "workload", "file workloads written in TOML: format, mount, write, read, seek, sync, truncate, rename, "
                    "delete, list steps; per-file latency percentiles", "workload", fileworkload.WorkloadConfig,
        "repeat", frozenset(MEDIA_KINDS), frozenset({"filesystem"}), run=fileworkload.run,
        timed_calls=fileworkload.timed_calls, preflight=lambda sc, b: fileworkload.preflight(sc, b, fs_capacity(sc, b)),
        load_options=fileworkload.load_options, retarget=fileworkload.retarget),
)

#: built-in protocols, then those of the ``sdbench.protocols`` entry point group
PROTOCOLS: Registry[ProtocolSpec] = Registry("protocol", "sdbench.protocols", ProtocolSpec, _BUILTIN)


def protocols() -> dict[str, ProtocolSpec]:
    """Every protocol, built-in first, then plugins."""
    return PROTOCOLS.all()


def text_formats() -> dict[str, Callable[[Any], str]]:
    """Format name -> renderer: the protocols' own text formats (``sdbench run -f NAME``)."""
    return {p.default_format: p.render for p in protocols().values() if p.render is not None}


def protocol(name: str) -> ProtocolSpec:
    """The protocol ``name``; ConfigError naming the known ones otherwise."""
    return PROTOCOLS.get(name)
