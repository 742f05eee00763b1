"""``sdbench capacity TARGET``: is this card what it claims?  (f3probe / h2testw style, docs/capacity.md)"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Optional

import typer

from ..capacity import CLASSES, CapacityResult, RestoreLog, full_probe, quick_probe, restore
from ..errors import SdbenchError
from ..media.realtarget import open_device
from ..output_files import check_writable_output
from .cmd_real import _Progress
from .formats import format_enum, format_option
from .formats import is_json as _is_json, md_table as _md_table
from .grant import write_grant


CapacityFormat = format_enum("capacity")


def _default_restore_path(target: str, nonce: bytes) -> Path:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(os.path.normpath(target))) or "target"
    return Path(f"sdbench-capacity-{name}-{nonce.hex()}.restore")


def _same_file(a: Path, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _decimal_size(n: int) -> str:
    """Bytes in the decimal unit card makers print (GB, MB, kB), to one decimal."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{n} B"


def _print_text(res: CapacityResult) -> None:
    rows = [["Verdict", res.verdict],
            ["Announced", f"{res.announced_bytes:,} B ({_decimal_size(res.announced_bytes)})"],
            ["Usable", f"{res.usable_bytes:,} B ({_decimal_size(res.usable_bytes)})"],
            ["First bad LBA", "-" if res.first_bad_lba is None else str(res.first_bad_lba)],
            ["Mode", res.mode], ["Sectors probed", f"{sum(res.counts.values()):,}"]]
    rows += [[f"Sectors {c}", f"{res.counts[c]:,}"] for c in CLASSES]
    if res.aliases:
        a, b = res.aliases[0]
        rows.append(["Example alias", f"LBA {a} holds the data of LBA {b}"])
    _md_table(None, ["Capacity", "Value"], rows, numbers=False)


def register(app: typer.Typer) -> None:
    @app.command("capacity")
    def capacity_cmd(
        target: str = typer.Argument(..., help="Block device (e.g. /dev/sdb) or image file."),
        allow_write: bool = typer.Option(False, "--allow-write", help="Allow writing test records to TARGET "
                                                                      "(quick mode puts the originals back)."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation before writing."),
        fmt: CapacityFormat = format_option("capacity", "md", md="the verdict and the sector counts",
                                            json="the result document"),
        full: bool = typer.Option(False, "--full", help="Write and verify every sector (destroys all data, "
                                                        "like f3write/f3read)."),
        restore_file: Optional[Path] = typer.Option(None, "--restore-file", help="Where quick mode saves the "
                                                    "original sectors: a new file, removed once they are back "
                                                    "(default ./sdbench-capacity-<name>-<nonce>.restore)."),
        restore_from: Optional[Path] = typer.Option(None, "--restore", help="Put back the sectors saved in FILE by "
                                                    "an interrupted run, then exit."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or notes on stderr."),
    ) -> None:
        """Check that a card really holds its announced capacity (fake/wrap-around/damaged), like f3probe."""
        if restore_from is not None and (full or restore_file is not None):
            raise SdbenchError("--restore cannot be combined with --full or --restore-file")
        if full and restore_file is not None:
            raise SdbenchError("--full destroys the data and saves nothing: --restore-file does not apply")
        grant = write_grant(allow_write, yes)

        if restore_from is not None:
            log = RestoreLog.load(restore_from)
            dev = open_device(target, writes=True, grant=grant,
                              consequence=f"The sectors saved in {restore_from} are written back")
            try:
                rr = restore(dev, log, only_ours=True)
            finally:
                dev.close()
            doc = {"restored": rr.restored, "verified": rr.verified, "mismatched": rr.mismatched,
                   "skipped_foreign": rr.skipped_foreign, "unreadable": rr.unreadable}
            if _is_json(fmt):
                typer.echo(json.dumps(doc))
            else:
                _md_table(None, ["Restore", "Sectors"], [[k, v] for k, v in doc.items()])
            if rr.mismatched or rr.unreadable:
                raise typer.Exit(1)
            return

        nonce = os.urandom(8)
        rpath: Path | None = None
        if not full:
            rpath = restore_file if restore_file is not None else _default_restore_path(target, nonce)
            if _same_file(rpath, target):
                raise SdbenchError(f"the restore file {rpath} cannot be the target itself")
            check_writable_output(rpath)
            if rpath.exists() or rpath.is_symlink():
                # the run replaces the file and deletes it once the originals are back: never someone else's
                raise SdbenchError(f"the restore file {rpath} exists: name a new file (a restore file of an "
                                   f"interrupted run is put back with --restore {rpath})")
        dev = open_device(target, writes=True, grant=grant, consequence=(
            "Everything stored there is destroyed" if full else
            f"A few hundred sectors are overwritten and then restored from a copy saved first in {rpath}"))
        prog = _Progress(not quiet)
        try:
            if not quiet:
                for w in dev.warnings:
                    typer.echo(f"warning: {w}", err=True)
            if full:
                res = full_probe(dev, nonce=nonce, progress=prog)
            else:
                assert rpath is not None
                if not quiet:
                    typer.echo(f"saving the original sectors to {rpath}", err=True)
                res = quick_probe(dev, rpath, nonce=nonce, target=target, progress=prog)
        finally:
            prog.close()
            dev.close()
        if rpath is not None and res.restore is not None:
            rr = res.restore
            if not rr.mismatched and not rr.unreadable:
                rpath.unlink(missing_ok=True)
                res.restore_file = None
                if not quiet:
                    typer.echo(f"original data restored and verified ({rr.verified} sector"
                               f"{'' if rr.verified == 1 else 's'}); {rpath} removed",
                               err=True)
            elif not quiet:
                typer.echo(f"warning: {rr.mismatched + rr.unreadable} sector(s) did not read back as saved "
                           f"(expected on a fake card: its addresses share storage); {rpath} is kept", err=True)
        if _is_json(fmt):
            typer.echo(json.dumps(res.to_dict()))
        else:
            _print_text(res)
        if res.verdict != "genuine":
            raise typer.Exit(1)
