"""Real media: ``sdbench stream``, ``sdbench preset cdm|a1|sdfat``, ``sdbench info`` (``sdbench fio``:
:mod:`.cmd_fio`).

Targets: ``--device PATH`` (a block device or an image file, O_DIRECT) or
``--dir PATH`` (a directory on a mounted filesystem).  Writing to a device
needs ``--allow-write`` and a confirmation naming the device (or ``--yes``);
mounted, root and swap devices are refused whatever the flags say.
Directory targets only create (and afterwards remove) their own test files.

Tables are Markdown, units in the headers.  ``--json FILE`` writes the
results document atomically (temporary file + rename).
"""
from __future__ import annotations

import dataclasses
import shutil
import json
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import ConfigError, SdbenchError
from ..output_files import check_writable_output, write_atomically
from ..media.identity import decode_registers, identify
from ..fs.hostdir import DirTarget, open_directory
from ..media.linux import LinuxBlockDevice
from ..media.realtarget import open_device
from .formats import md_table as _md_table
from .grant import write_grant
from .params import size_option
from ..options import from_mapping
from ..progress import Progress
from ..records import MIB, Results, RunRecord
from ..report.text import size_text
from ..workloads import fio as fiomod
from ..workloads.fio.presets import CDM_PROFILES, CdmConfig
from ..workloads.fioprotocol import FioProtocolConfig
from ..workloads.stream import run_stream


def open_target(device: Optional[str], directory: Optional[str], *, writes: bool, allow_write: bool = False,
                yes: bool = False, offset_bytes: int = 0, size_bytes: int | None = None,
                direct: Optional[bool] = None, drop_caches: bool = False) -> LinuxBlockDevice | DirTarget:
    """``--device`` or ``--dir`` opened under the rules of :mod:`sdbench.media.realtarget`."""
    if (device is None) == (directory is None):
        raise SdbenchError("give exactly one target: --device PATH or --dir PATH")
    if directory is not None:
        return open_directory(directory, direct=direct, drop_caches=drop_caches)
    assert device is not None
    return open_device(device, writes=writes, grant=write_grant(allow_write, yes), offset_bytes=offset_bytes,
                       size_bytes=size_bytes, direct=direct)


def _parse_size_opt(v: Optional[str], what: str) -> Optional[int]:
    return None if v is None else fiomod.parse_size(v, what)


class _Progress(Progress):
    """Fraction-measured progress on stderr: a bar on a terminal, a line every few seconds elsewhere
    (sdbench.progress)."""

    def __init__(self, enabled: bool, description: str = "") -> None:
        super().__init__(None, description, enabled=enabled, fraction=True)


def print_cdm_table(rec: RunRecord) -> None:
    rows = []
    mixed = "mix" in rec.metadata
    for r in rec.rows:
        m = rec.metadata["rows"].get(r.label, {})
        lat = m.get("lat", {})
        best = max(m.get("loops", [{}]), key=lambda x: x.get("mib_s", 0))
        row = [r.label, r.reported_value, best.get("iops"), m.get("mean_loop_mib_s", 0) * MIB / 1e6,
               lat.get("mean_us"), lat.get("p99_us")]
        # a mix row shows the read share its ops had, to set against the one asked for
        rows.append(row + [m.get("read_share_pct")] if mixed else row)
    _md_table(None, ["Test", "MB/s (best loop)", "IOPS (best loop)", "MB/s (mean)", "Mean µs", "p99 µs"]
              + (["Reads %"] if mixed else []), rows)


def print_a1_table(rec: RunRecord) -> None:
    rows = []
    for r in rec.rows:
        m = rec.metadata["rows"].get(r.label, {})
        rows.append([r.label, r.bytes / 1e6 / (r.time_ms / 1e3) if r.time_ms else 0.0, m.get("iops"),
                     m.get("lat", {}).get("mean_us"), m.get("lat", {}).get("p99_us")])
    _md_table(None, ["Job", "MB/s", "IOPS", "Mean µs", "p99 µs"], rows)
    typer.echo("")  # two tables: pasted into Markdown, without a blank line the second joins the first
    crit = rec.metadata["a1"]["criteria"]
    _md_table(None, ["A1 criterion", "Measured", "Target", "Result"],
              [[c["name"], f"{c['value']:,.0f} {c['unit']}", f">= {c['threshold']:,} {c['unit']}",
                "PASS" if c["pass"] else "FAIL"] for c in crit])


def print_sdfat_table(rec: RunRecord) -> None:
    rows = []
    for r in rec.rows:
        m = rec.metadata["rows"][r.label]
        for i, p in enumerate(m["passes"], 1):
            rows.append([r.op, i, p["kb_s"], p["max_us"], p["min_us"], p["avg_us"]])
    _md_table(None, ["Op", "Pass", "KB/s", "Max µs", "Min µs", "Avg µs"], rows)


def print_stream_table(rec: RunRecord) -> None:
    rows = []
    for r in rec.rows:
        lat = rec.metadata["rows"][r.label]["lat"]
        rows.append([r.label, r.reported_value, r.mib_s, r.runs, lat.get("mean_us", 0) / 1e3,
                     lat.get("max_us", 0) / 1e3])
    _md_table(None, ["Row", "MB/s", "MiB/s", "Passes", "Mean ms/call", "Max ms/call"], rows)


def _finish(rec: RunRecord, json_path: Optional[Path], quiet: bool, db: Path | None | bool = False) -> None:
    """Warnings, the JSON file, and the run saved in the results store (``db``: its path, None for the default
    one, False for --no-save), like every other run."""
    if not quiet:
        for w in rec.warnings:
            typer.echo(f"warning: {w}", err=True)
    if json_path is not None:
        write_atomically(json_path, Results(runs=(rec,)).to_json())
    if db is not False:
        from ..store import open_store

        with open_store(str(db) if db is not None else None) as store:
            rid = store.save(rec)
        if not quiet:
            typer.echo(f"saved as run {rid}", err=True)
    bad = fiomod.verify_failures(rec)
    if bad:
        raise fiomod.VerifyError("verify failed: " + "; ".join(bad))


def _check_store(db: Path | None, save: bool) -> None:
    """Before a run that is saved at the end: a store it cannot go into (read-only) is refused now."""
    if save:
        from ..store import check_writable

        check_writable(db)


def _fitting_size(default: int, device: Optional[str], directory: Optional[str], offset: int) -> int:
    """The default test size, or the largest of CrystalDiskMark's sizes (16 MiB, 32 MiB, ... doubling) below it
    that fits what the target holds past ``offset`` (a device or image; a directory's free space, with a tenth
    to spare).  Unknown room, or less than 16 MiB: the default (the run then says why it does not fit)."""
    try:
        if device is not None:
            probe = LinuxBlockDevice(device, allow_write=False)
            try:
                room = probe.device_size_bytes - offset
            finally:
                probe.close()
        elif directory is not None:
            room = shutil.disk_usage(directory).free * 9 // 10
        else:
            return default
    except (OSError, SdbenchError):
        return default
    size = default
    while size > 16 * MIB and size > room:
        size //= 2
    return size if size <= room else default


def _identity(device: Optional[str]) -> Optional[dict[str, Any]]:
    if device is None:
        return None
    try:
        return identify(device)
    except SdbenchError:
        return None


#: the cdm options as the command line names them
_CDM_FLAGS = {"profile": "--profile", "mode": "--mode", "mix": "--mix", "mix_read_pct": "--mix-read-pct"}
#: the options every preset shares, as the command line names them (declared in FioProtocolConfig)
_PRESET_FLAGS = {"size_bytes": "--size", "loops": "--loops", "runtime_s": "--runtime-s"}


def _declared(cls: Any, values: dict[str, Any], flags: dict[str, str]) -> Any:
    """``values`` checked against their declaration in ``cls`` (types, finite numbers, ranges) before any work;
    an error names the command-line flag."""
    try:
        return from_mapping(cls, values)
    except ConfigError as e:
        msg = str(e)
        for name, flag in flags.items():
            if msg.startswith((f"{name} ", f"{name}:")):
                raise ConfigError(flag + msg[len(name):]) from None
        raise


def _cdm_config(values: dict[str, Any]) -> CdmConfig:
    """The cdm options checked against their declaration (CdmConfig)."""
    return _declared(CdmConfig, values, _CDM_FLAGS)


def _cdm_field(name: str) -> dataclasses.Field[Any]:
    return {f.name: f for f in dataclasses.fields(CdmConfig)}[name]


def _cdm_help(name: str) -> str:
    """An option's help as CdmConfig declares it, with its unit, range and default where it has them."""
    f = _cdm_field(name)
    m, unit = f.metadata, f" {f.metadata['unit']}" if f.metadata["unit"] else ""
    bounds = f"; {m['min']}..{m['max']}{unit}, default {f.default}{unit}" if m["min"] is not None else ""
    return f"{m['help']}{bounds}"


class PresetName(str, Enum):
    cdm = "cdm"
    a1 = "a1"
    sdfat = "sdfat"


# ---- commands ------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    dev_opt = typer.Option(None, "--device", help="Block device or image file (O_DIRECT).")
    dir_opt = typer.Option(None, "--dir", help="Directory on a mounted filesystem (ext4, vfat, exfat...).")
    aw_opt = typer.Option(False, "--allow-write", help="Allow writing to --device (its tested range is destroyed).")
    yes_opt = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation before writing to --device.")
    json_opt = typer.Option(None, "--json", help="Write the results (sdbench results JSON) to FILE.")
    quiet_opt = typer.Option(False, "--quiet", "-q", help="No progress bar or warnings on stderr.")
    keep_opt = typer.Option(False, "--keep", help="Keep the test files created in --dir.")
    db_opt = typer.Option(None, "--db", help="Results database (default: $SDBENCH_DB or the per-user data "
                                             "directory).")
    save_opt = typer.Option(True, "--save/--no-save", help="Save the run in the results database.")
    drop_opt = typer.Option(False, "--drop-caches", help="With --dir and root: sync and drop the kernel caches "
                                                         "before reads.")

    @app.command("stream")
    def stream_cmd(
        device: Optional[str] = dev_opt, directory: Optional[str] = dir_opt,
        size: int = size_option(40 * MIB, "--size", help="Bytes written and read back per pass, whole MiB "
                                                         "(default 40M)", minimum=MIB),
        chunk: int = size_option(MIB, "--chunk", help="Bytes per write/read call (default 1M)", minimum=1),
        passes: int = typer.Option(1, "--passes", min=1, max=1000, help="Write+read passes."),
        offset: int = size_option(0, "--offset", help="Start on --device"),
        no_verify: bool = typer.Option(False, "--no-verify", help="Skip the data check."),
        direct: Optional[bool] = typer.Option(None, "--direct/--buffered", help="O_DIRECT required / page cache."),
        seed: int = typer.Option(0, "--seed", help="Seed for the data."),
        allow_write: bool = aw_opt, yes: bool = yes_opt, json_path: Optional[Path] = json_opt,
        db: Optional[Path] = db_opt, save: bool = save_opt,
        quiet: bool = quiet_opt, keep: bool = keep_opt, drop_caches: bool = drop_opt,
    ) -> None:
        """Stream N MiB of random data from RAM with sync, read back, verify (MB/s = 10^6 B/s)."""
        _check_store(db, save)
        if json_path is not None:
            check_writable_output(json_path)
        chunk_bytes, size_bytes, off = chunk, size, offset
        if size_bytes % MIB:
            raise ConfigError(f"--size {size_bytes} B: the stream moves whole MiB (e.g. 40M)")
        size_mib = size_bytes // MIB
        target = open_target(device, directory, writes=True, allow_write=allow_write, yes=yes, offset_bytes=off,
                             size_bytes=size_mib * MIB if device is not None else None, direct=direct,
                             drop_caches=drop_caches)
        prog = _Progress(not quiet)
        try:
            rec = run_stream(target, size_mib=size_mib, chunk_bytes=chunk_bytes, passes=passes,
                             verify=not no_verify, seed=seed, direct=direct is not False, progress=prog,
                             identity=_identity(device))
        finally:
            prog.close()
            _close(target, keep)
        print_stream_table(rec)
        _finish(rec, json_path, quiet, db if save else False)

    @app.command("preset")
    def preset_cmd(
        preset: PresetName = typer.Argument(..., help="cdm (CrystalDiskMark-style), a1 (agnostics A1 sniff "
                                                      "test) or sdfat (SdFat bench)."),
        device: Optional[str] = dev_opt, directory: Optional[str] = dir_opt,
        size: int = size_option(0, "--size", help="Test size, at most 1T (0 or none: cdm 1G, a1 64M, sdfat "
                                                  "5000000, cdm and a1 smaller to fit the target)"),
        loops: int = typer.Option(5, "--loops", help="cdm: loops per test (best loop reported), 1..1000."),
        runtime_s: Optional[float] = typer.Option(None, "--runtime-s", help="cdm: limit per loop (default 5 s); "
                                                                            "a1: each random job (default 10 s); "
                                                                            "0..3600 s."),
        mode: str = typer.Option("all", "--mode", help=f"cdm: {_cdm_help('mode')}."),
        profile: Optional[str] = typer.Option(None, "--profile", help=f"cdm: CrystalDiskMark's profile; "
                                                                      f"{_cdm_help('profile')} (default: default)."),
        mix: bool = typer.Option(False, "--mix", help=f"cdm: {_cdm_help('mix')}; the SEQ tests get none."),
        mix_read_pct: Optional[int] = typer.Option(None, "--mix-read-pct", metavar="PCT",
                                                   help=f"cdm: {_cdm_help('mix_read_pct')}; implies --mix."),
        offset: int = size_option(0, "--offset", help="Start of the test region on --device"),
        direct: Optional[bool] = typer.Option(None, "--direct/--buffered", help="O_DIRECT required / page cache."),
        allow_write: bool = aw_opt, yes: bool = yes_opt, json_path: Optional[Path] = json_opt,
        db: Optional[Path] = db_opt, save: bool = save_opt,
        quiet: bool = quiet_opt, keep: bool = keep_opt, drop_caches: bool = drop_opt,
    ) -> None:
        """Presets: cdm (CrystalDiskMark-style, MB/s = 10^6 B/s; --profile default: SEQ1M Q8T1, SEQ1M Q1T1,
        RND4K Q32T1, RND4K Q1T1; peak: SEQ1M Q8T1, RND4K Q32T16; real: SEQ1M Q1T1, RND4K Q1T1; --mix adds a
        read/write mix row per test, e.g. "RND4K Q32T16 mix 70/30"), a1 (pass/fail per criterion, exit
        code 1 on FAIL), sdfat (5 MB in 512-byte writes, 2 write + 2 read passes, latency µs)."""
        _check_store(db, save)
        if json_path is not None:
            check_writable_output(json_path)
        shared = {"loops": loops, "runtime_s": runtime_s, "size_bytes": size or None}
        _declared(FioProtocolConfig, {k: v for k, v in shared.items() if v is not None}, _PRESET_FLAGS)
        cdm = CdmConfig()
        if preset is PresetName.cdm:
            values: dict[str, Any] = {"mode": mode, "mix": mix or mix_read_pct is not None}
            if profile is not None:
                values["profile"] = profile
            if mix_read_pct is not None:
                values["mix_read_pct"] = mix_read_pct
            cdm = _cdm_config(values)
        else:
            given = [flag for flag, v in (("--profile", profile), ("--mix", mix or None),
                                          ("--mix-read-pct", mix_read_pct)) if v is not None]
            if given:
                raise ConfigError(f"{', '.join(given)}: options of preset cdm only")
        off = offset
        default_size = {"cdm": 1024 * MIB, "a1": 64 * MIB, "sdfat": fiomod.SDFAT_FILE_BYTES}[preset.value]
        size_bytes = size
        size_note = ""
        if not size_bytes:
            size_bytes = default_size
            if preset is not PresetName.sdfat:
                size_bytes = _fitting_size(default_size, device, directory, off)
                if size_bytes != default_size:
                    size_note = (f"note: test size {size_bytes // MIB} MiB, the largest of the size steps 16 MiB.."
                                 f"{default_size // MIB} MiB that fits the target; --size sets another")
        if preset is PresetName.cdm:
            largest = max(CDM_PROFILES[cdm.profile], key=lambda t: t.bs_bytes)
            if size_bytes < largest.bs_bytes:
                raise ConfigError(f"--size = {size_text(size_bytes)} is smaller than one block of the "
                                  f"{largest.label} test ({size_text(largest.bs_bytes)})")
            # read-only runs on a device still need data; only a writable target is prefilled
            writes = cdm.mode != "read" or cdm.mix
            window = size_bytes
        elif preset is PresetName.a1:
            writes, window = True, size_bytes
        else:
            writes = True
            window = size_bytes // fiomod.SDFAT_BUF_BYTES * fiomod.SDFAT_BUF_BYTES
        target = open_target(device, directory, writes=writes, allow_write=allow_write, yes=yes,
                             offset_bytes=off, size_bytes=window if device is not None else None, direct=direct,
                             drop_caches=drop_caches)
        if size_note and not quiet:  # once the target is accepted: a refusal stays one line
            typer.echo(size_note, err=True)
        prog = _Progress(not quiet)
        ident = _identity(device)
        try:
            if preset is PresetName.cdm:
                rec = fiomod.run_cdm(target, size_bytes=size_bytes, loops=loops,
                                     runtime_s=5.0 if runtime_s is None else runtime_s, mode=cdm.mode,
                                     profile=cdm.profile, mix=cdm.mix, mix_read_pct=cdm.mix_read_pct,
                                     progress=prog, identity=ident)
            elif preset is PresetName.a1:
                rec = fiomod.run_a1(target, size_bytes=size_bytes, runtime_s=10.0 if runtime_s is None else runtime_s,
                                    progress=prog, identity=ident)
            else:
                rec = fiomod.run_sdfat(target, file_bytes=size_bytes, progress=prog, identity=ident)
        finally:
            prog.close()
            _close(target, keep)
        {"cdm": print_cdm_table, "a1": print_a1_table, "sdfat": print_sdfat_table}[preset.value](rec)
        _finish(rec, json_path, quiet, db if save else False)
        if preset is PresetName.a1 and not rec.metadata["a1"]["pass"]:
            raise typer.Exit(1)

    @app.command("info")
    def info_cmd(
        device: Optional[str] = typer.Argument(None, help="Block device (e.g. /dev/mmcblk0) or image file."),
        cid: Optional[str] = typer.Option(None, "--cid", help="CID register as hex (32 digits)."),
        csd: Optional[str] = typer.Option(None, "--csd", help="CSD register as hex (32 digits)."),
        scr: Optional[str] = typer.Option(None, "--scr", help="SCR register as hex (16 digits)."),
        ssr: Optional[str] = typer.Option(None, "--ssr", help="SD Status as hex (128 digits)."),
        mmc: bool = typer.Option(False, "--mmc", help="Registers are from an eMMC (MMC layout)."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Write the identity as JSON to FILE."),
    ) -> None:
        """Identify a card: decode CID/CSD/SCR/SSR (from sysfs or pasted) and block-device facts."""
        if json_path is not None:
            check_writable_output(json_path)
        regs = {"cid": cid, "csd": csd, "scr": scr, "ssr": ssr}
        if device is None and not any(regs.values()):
            raise SdbenchError("give a DEVICE or registers (--cid HEX --csd HEX [--scr HEX --ssr HEX])")
        if device is not None:
            ident = identify(device)
            if any(regs.values()):
                ident["pasted"] = decode_registers(**regs, card_type="MMC" if mmc else "SD")
        else:
            ident = decode_registers(**regs, card_type="MMC" if mmc else "SD")
        print_identity(ident)
        if json_path is not None:
            write_atomically(json_path, json.dumps(ident, indent=2) + "\n")


def print_identity(ident: dict[str, Any]) -> None:
    rows: list[list[Any]] = []

    def walk(prefix: str, d: dict[str, Any]) -> None:
        for k, v in d.items():
            if k == "raw":
                rows.append([f"{prefix}raw", v])
            elif isinstance(v, dict):
                walk(f"{prefix}{k}.", v)
            elif isinstance(v, list):
                rows.append([prefix + k, ", ".join(map(str, v)) or "-"])
            else:  # as the register says it: no thousands separators in years or serials
                rows.append([prefix + k, "-" if v is None else ("yes" if v is True else "no" if v is False else str(v))])

    summary = ident.get("summary")
    if summary:
        typer.echo(f"**{summary}**\n")
    walk("", {k: v for k, v in ident.items() if k != "summary"})
    _md_table(None, ["Field", "Value"], rows, numbers=False)


def _close(target: LinuxBlockDevice | DirTarget, keep: bool) -> None:
    if isinstance(target, DirTarget):
        if not keep:
            target.cleanup()
    else:
        target.close()
