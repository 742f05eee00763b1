"""``sdbench fio``: fio's job files and command line on a device, image file or directory.

sdbench's own options pick the target and what happens to the results
(``--device``/``--dir``, ``--allow-write``, ``--yes``, ``--json``, ``--db``...);
everything else is fio's: job files (``sdbench fio job.fio``, or ``--job``),
job options in fio's spellings (``--name=t --rw=randread --bs=4k
--iodepth=16 --runtime=3 --time_based --size=32M --filename=IMG``), and fio's
run options (``--output-format=normal|json|json+|terse``, ``--output=FILE``,
``--section``, ``--minimal``, ``--readonly``, ``--parse-only``...).  A fio
option sdbench cannot honour is refused by name (docs/fio.md lists them all).

Without ``--device`` or ``--dir`` the target is what the jobs name, as in fio:
``filename=`` a device or an existing file (an image; writing needs
``--allow-write``), or a new file in ``directory=``; with them, a job's
``filename``/``directory`` must name that target -- a different one is an
error, never ignored.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import ConfigError, RunFailedError, SdbenchError
from ..fs.hostdir import DirTarget, open_directory
from ..media.linux import LinuxBlockDevice
from ..media.realtarget import open_device
from ..options import from_mapping, to_mapping
from ..output_files import check_writable_output, write_atomically
from ..records import RunRecord
from ..workloads import fio as fiomod
from ..workloads.fio import fioout
from ..workloads.fio.blockport import job_region
from ..workloads.fio.fiofile import CommandLine, FioJob, FioRun, parse_argv, read_run
from ..workloads.fio.fiooptions import ACCEPTED, BY_NAME, REFUSED, lookup, translate
from ..workloads.fio.jobs import IOENGINES, JobConfig
from ..workloads.fio.logs import check_log_paths, wants_logs, write_logs
from .cmd_real import _check_store, _close, _identity, _md_table, _Progress
from .grant import write_grant

#: fio's output formats
FORMATS = ("normal", "json", "json+", "terse")


def print_fio_table(rec: RunRecord) -> str:
    rows = []
    for r in rec.rows:
        m = rec.metadata.get("rows", {}).get(r.label, {})
        lat = m.get("lat", {})
        rows.append([r.label, r.op, r.mib_s, m.get("iops"), lat.get("mean_us"), lat.get("p50_us"), lat.get("p99_us"),
                     lat.get("p99_9_us"), lat.get("max_us"), m.get("ops")])
    return _md_table(None, ["Row", "Op", "MiB/s", "IOPS", "Mean µs", "p50 µs", "p99 µs", "p99.9 µs", "Max µs",
                            "Ops"], rows, echo=False)


# ---- jobs ---------------------------------------------------------------------------------------------------
def _toml_run(path: Path, cl: CommandLine) -> FioRun:
    """A TOML job file (sdbench's defaults) with the command line's options over every job."""
    notes: list[str] = []
    over = translate(cl.defaults, "command line", notes, base={}) if cl.defaults else {}
    jobs = []
    for j in fiomod.load_job_file(path):
        fields = {**to_mapping(j), **over}
        try:
            jobs.append(FioJob(from_mapping(JobConfig, fields, "job"), (), f"{path.name}:{j.name}"))
        except ConfigError as e:
            raise ConfigError(f"{path.name}:{j.name}: {str(e).replace('job.', '')}") from None
    return FioRun(tuple(jobs), tuple((k, v) for k, v in cl.defaults if v is not None), tuple(notes))


def _formats(cl: CommandLine) -> list[str]:
    if "minimal" in cl.run:
        return ["terse"]
    text = cl.run.get("output-format")
    if text is None:
        return ["normal", "terse"] if "append-terse" in cl.run else []
    out = [f.strip() for f in text.split(",") if f.strip()]
    for f in out:
        if f not in FORMATS:
            raise ConfigError(f"--output-format: {f!r:.20} is not one of {', '.join(FORMATS)}")
    if "append-terse" in cl.run and "terse" not in out:
        out.append("terse")
    return out


# ---- the target ---------------------------------------------------------------------------------------------
def _job_path(job: JobConfig) -> str | None:
    """Where a job's filename and directory point, as fio joins them (directory/filename)."""
    if job.filename and ":" in job.filename and not os.path.exists(job.filename):
        return None  # several files: only a directory can hold them
    if job.directory and job.filename:
        return os.path.join(job.directory, job.filename.lstrip("/")) if job.filename.startswith("/") \
            else os.path.join(job.directory, job.filename)
    return job.filename or None


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _check_device_jobs(device: str, jobs: list[JobConfig]) -> None:
    for j in jobs:
        if j.directory:
            raise ConfigError(f"job {j.name}: directory = {j.directory} names a directory, but the target is "
                              f"--device {device} (give --dir, or leave directory= out)")
        if j.filename and not _same(_job_path(j) or j.filename, device):
            raise ConfigError(f"job {j.name}: filename = {j.filename} is not the --device {device} this run uses "
                              f"(sdbench runs every job on the one target given; remove filename= or name it)")
        if j.nrfiles > 1:
            raise ConfigError(f"job {j.name}: nrfiles = {j.nrfiles} needs a directory target (--dir)")


def _check_dir_jobs(directory: str, jobs: list[JobConfig]) -> list[JobConfig]:
    out = []
    for j in jobs:
        if j.directory and not _same(j.directory, directory):
            raise ConfigError(f"job {j.name}: directory = {j.directory} is not the --dir {directory} this run uses")
        if j.filename and os.path.isabs(j.filename):
            full = _job_path(j) or j.filename
            if not os.path.abspath(full).startswith(os.path.abspath(directory) + os.sep):
                raise ConfigError(f"job {j.name}: filename = {j.filename} is not in --dir {directory}")
        out.append(replace(j, directory=""))
    return out


def _implied_target(jobs: list[JobConfig]) -> tuple[str | None, str | None, list[JobConfig]]:
    """(device, directory, jobs) from the jobs' own filename and directory, as fio finds its files."""
    found: list[tuple[str, str]] = []
    out = []
    for j in jobs:
        path = _job_path(j)
        if j.directory and path is not None:  # a file in a directory: that directory's (as fio's)
            found.append(("dir", os.path.dirname(path) or "."))
            out.append(replace(j, filename=os.path.relpath(path, os.path.dirname(path) or "."), directory=""))
        elif path is not None and (os.path.exists(path) and _is_device_or_file(path)):
            found.append(("device", path))
            out.append(replace(j, filename="", directory=""))
        elif path is not None:
            parent = os.path.dirname(path) or "."
            found.append(("dir", parent))
            out.append(replace(j, filename=os.path.basename(path), directory=""))
        elif j.directory:
            found.append(("dir", j.directory))
            out.append(replace(j, directory=""))
        elif j.filename:  # several files
            found.append(("dir", j.directory or "."))
            out.append(replace(j, directory=""))
        else:
            raise ConfigError(f"job {j.name} has no target: give --device or --dir (fio's --filename= or "
                              f"--directory=), or filename= in the job")
    kinds = {k for k, _ in found}
    places = list(dict.fromkeys(p for _, p in found))
    if len(kinds) > 1 or (kinds == {"device"} and any(not _same(p, places[0]) for p in places)) or \
            (kinds == {"dir"} and any(not _same(p, places[0]) for p in places)):
        a, b = places[0], next(p for p in places if not _same(p, places[0])) if len(places) > 1 else places[0]
        raise ConfigError(f"the jobs name different targets ({a} and {b}); sdbench runs one target at a time")
    kind, place = found[0]
    return (place, None, out) if kind == "device" else (None, place, out)


def _is_device_or_file(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    if stat.S_ISCHR(st.st_mode):
        raise ConfigError(f"{path} is a character device; sdbench measures block devices, image files and "
                          f"directories")
    return stat.S_ISBLK(st.st_mode) or stat.S_ISREG(st.st_mode)


def _device_size(path: str) -> int:
    probe = LinuxBlockDevice(path, allow_write=False)
    try:
        return probe.device_size_bytes
    finally:
        probe.close()


def _fit_jobs(path: str, jobs: list[JobConfig], notes: list[str]) -> tuple[int, int, list[JobConfig]]:
    """The jobs' regions on a device of this size, resolved as fio resolves them (shares of the target, sizes cut
    at its end), and the window (offset, size) that covers every clone's region."""
    size = _device_size(path)
    lo, hi, out = None, 0, []
    for j in jobs:
        regions = [job_region(j, size, c) for c in range(j.numjobs)]
        room = size
        for c, (off, n) in enumerate(regions):
            if off >= size:
                raise SdbenchError(f"{path} is too small for job {j.name}: it starts at byte {off}, past the "
                                   f"end ({size} B)")
            room = min(room, size - off)
            lo = off if lo is None else min(lo, off)
            hi = max(hi, off + min(n, size - off))
        explicit = bool(j.size_bytes or j.size_pct) and not j.fill_device
        want = regions[0][1]
        if explicit and want > room:
            notes.append(f"job {j.name}: size {want} B goes past the end of {path} ({size} B): the region ends "
                         f"there, as fio's does ({room // j.min_bs * j.min_bs} B)")
        base_off = regions[0][0]
        inc = regions[1][0] - base_off if j.numjobs > 1 else j.offset_increment_bytes
        out.append(replace(j, offset_bytes=base_off, offset_pct=0.0,
                           size_bytes=min(want, room) // j.min_bs * j.min_bs if explicit else 0, size_pct=0.0,
                           offset_increment_bytes=inc, offset_increment_pct=0.0))
    assert lo is not None
    out = [replace(j, offset_bytes=j.offset_bytes - lo) for j in out]
    return lo, hi - lo, out


def open_fio_target(device: Optional[str], directory: Optional[str], jobs: list[JobConfig], *, allow_write: bool,
                    yes: bool, drop_caches: bool, readonly: bool,
                    notes: list[str]) -> tuple[LinuxBlockDevice | DirTarget, list[JobConfig]]:
    """The run's target under the rules of the module docstring, and the jobs as they run on it."""
    if device is not None and directory is not None:
        raise SdbenchError("give exactly one target: --device PATH or --dir PATH")
    writes = any(j.writes or j.trims for j in jobs)
    if readonly and writes:
        raise ConfigError(f"--readonly: job {next(j.name for j in jobs if j.writes or j.trims)} writes")
    if device is not None:
        _check_device_jobs(device, jobs)
        jobs = [replace(j, filename="", directory="") for j in jobs]
    elif directory is not None:
        jobs = _check_dir_jobs(directory, jobs)
    else:
        device, directory, jobs = _implied_target(jobs)
    # a job that asks for direct=1 gets O_DIRECT or an error, as in fio; the others the page cache
    direct = any(j.direct for j in jobs)
    if device is not None:
        if writes:  # an unsafe target is refused as such, before it is opened to read its size
            from ..media.safety import check_writable_target

            check_writable_target(device)
        lo, window, jobs = _fit_jobs(device, jobs, notes)
        target: LinuxBlockDevice | DirTarget = open_device(device, writes=writes,
                                                           grant=write_grant(allow_write, yes), offset_bytes=lo,
                                                           size_bytes=window, direct=direct)
    else:
        assert directory is not None
        target = open_directory(directory, direct=direct, drop_caches=drop_caches)
    return target, jobs


# ---- the command --------------------------------------------------------------------------------------------
_HELP = """fio's job files and command line: MiB/s, IOPS and latency per job and direction.

Give a job file (fio's INI format, or TOML with --job) or fio's job options, e.g.
--name=t --rw=randread --bs=4k --iodepth=16 --runtime=3 --time_based --size=32M
--filename=card.img --output-format=json.  fio's options keep fio's meaning and
defaults (buffered I/O unless --direct=1, ioengine psync, the whole target);
command-line options override a job file's.  Outputs: a Markdown table, or
fio's --output-format=normal|json|json+|terse (--output=FILE), --fio-json FILE;
logs with write_lat_log/write_bw_log/write_iops_log.  Options sdbench cannot
honour are refused by name (--cmdhelp=OPTION says what one does here; every
option: docs/fio.md)."""


def register(app: typer.Typer) -> None:
    @app.command("fio", help=_HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def fio_cmd(
        ctx: typer.Context,
        device: Optional[str] = typer.Option(None, "--device", help="Block device or image file (a job's filename= "
                                                                    "must name it)."),
        directory: Optional[str] = typer.Option(None, "--dir", help="Directory on a mounted filesystem (ext4, vfat, "
                                                                    "exfat...)."),
        job_file: Optional[Path] = typer.Option(None, "--job", help="Job file: fio's INI format or TOML "
                                                                    "(docs/real-media.md); fio's own way, a job file "
                                                                    "as an argument, works too."),
        fio_json_path: Optional[Path] = typer.Option(None, "--fio-json", help="Also write fio's JSON "
                                                                             "(--output-format=json) to FILE."),
        allow_write: bool = typer.Option(False, "--allow-write", help="Allow writing to the device or image (its "
                                                                      "tested range is destroyed)."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation before writing to a "
                                                            "device or image."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results (sdbench results JSON) to "
                                                                      "FILE."),
        db: Optional[Path] = typer.Option(None, "--db", help="Results database (default: $SDBENCH_DB or the per-user "
                                                             "data directory)."),
        save: bool = typer.Option(True, "--save/--no-save", help="Save the run in the results database."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar, notes or warnings on stderr."),
        keep: bool = typer.Option(False, "--keep", help="Keep the test files created in a directory."),
        drop_caches: bool = typer.Option(False, "--drop-caches", help="With a directory and root: sync and drop the "
                                                                      "kernel caches before reads."),
    ) -> None:
        cl = parse_argv(list(ctx.args))
        if _informational(cl):
            return
        formats = _formats(cl)
        output = Path(cl.run["output"]) if cl.run.get("output") else None
        for out in (json_path, fio_json_path, output):
            if out is not None:
                check_writable_output(out)
        _check_store(db, save)
        if cl.run.get("terse-version") not in (None, "3"):
            raise ConfigError(f"--terse-version={cl.run['terse-version']}: sdbench writes terse version 3")
        if job_file is not None and job_file.suffix.lower() == ".toml":
            if cl.job_files or cl.jobs:
                raise ConfigError("a TOML job file (--job) runs alone: no fio job files or --name jobs beside it")
            run = _toml_run(job_file, cl)
        else:
            run = read_run(cl, [str(job_file)] if job_file is not None else [])
        notes = list(run.notes)
        if cl.run.get("max-jobs") and sum(j.config.numjobs for j in run.jobs) > int(cl.run["max-jobs"] or 0):
            raise ConfigError(f"--max-jobs={cl.run['max-jobs']}: the run has more jobs")
        if "showcmd" in cl.run:
            typer.echo(_showcmd(run))
            return
        if "parse-only" in cl.run:
            for j in run.jobs:
                typer.echo(f"{j.config.name}: rw={j.config.rw}, bs={j.config.bs_bytes}, ioengine={j.config.ioengine}, "
                           f"iodepth={j.config.iodepth}")
            return
        jobs = [j.config for j in run.jobs]
        check_log_paths(jobs)
        target, jobs = open_fio_target(device, directory, jobs, allow_write=allow_write, yes=yes,
                                       drop_caches=drop_caches, readonly="readonly" in cl.run, notes=notes)
        for j in jobs:
            if not j.direct and isinstance(target, LinuxBlockDevice) and target.is_block and j.reads:
                notes.append(f"job {j.name}: reads through the page cache (fio's default direct=0; --direct=1 "
                             f"bypasses it)")
                break
        if "warnings-fatal" in cl.run and notes:
            raise ConfigError(f"--warnings-fatal: {notes[0]}")
        if not quiet:
            for n in dict.fromkeys(notes):
                typer.echo(f"note: {n}", err=True)
        prog = _Progress(not quiet)
        path = device or directory or getattr(target, "path", None) or str(getattr(target, "root", ""))
        disks = fioout.disks_of(str(path)) if any(j.disk_util for j in jobs) else []
        import time as _time
        started = _time.time()
        t0 = _time.perf_counter()
        stop = fiomod.StopRequest()
        try:
            with _first_ctrl_c_stops(stop, quiet):
                outcome = fiomod.run_fio(target, jobs, progress=prog, identity=_identity(device),
                                         keep_logs=any(wants_logs(j) for j in jobs),
                                         extra_meta={"fio": {"global_options": dict(run.global_options),
                                                             "job_options": [dict(j.options) for j in run.jobs]}},
                                         stop=stop)
        finally:
            prog.close()
            _close(target, keep)
        fioout.finish_disks(disks, (_time.perf_counter() - t0) * 1000)
        from ..workloads.fio.schedule import raise_internal

        raise_internal(outcome)
        rec = outcome.record
        if stop.requested:  # stored as a Ctrl-C'd run is (failed: interrupted), with what it measured
            rec = replace(rec, status="failed", status_reason="interrupted")
        if not rec.rows and any(e.error for e in outcome.entries):
            raise SdbenchError(next(e.error for e in outcome.entries if e.error))
        reports = _reports(outcome, run)
        from .. import __version__

        texts = []
        for f in formats or ["table"]:
            if f == "table":
                texts.append(print_fio_table(rec))
            elif f == "normal":
                texts.append(fioout.normal_report(reports, disks=disks))
            elif f in ("json", "json+"):
                doc = fioout.fio_document(reports, version=__version__, global_options=run.global_options,
                                          disks=disks, started_s=started, plus=f == "json+")
                texts.append(json.dumps(doc, indent=2))
            else:
                texts.append("\n".join(fioout.terse_lines(reports, disks=disks)))
        text = "\n".join(t.rstrip("\n") for t in texts) + "\n"
        if output is not None:
            write_atomically(output, text)
        else:
            sys.stdout.write(text)
        if fio_json_path is not None:
            doc = fioout.fio_document(reports, version=__version__, global_options=run.global_options, disks=disks,
                                      started_s=started)
            write_atomically(fio_json_path, json.dumps(doc, indent=2) + "\n")
        for i, e in enumerate(outcome.entries, 1):
            if e.result is not None and e.result.stats is not None:
                write_logs(e.job, i, e.result.stats)
        from .cmd_real import _finish

        try:
            _finish(rec, json_path, quiet, db if save else False)
        finally:
            if rec.status == "failed" and not stop.requested:
                raise RunFailedError(rec.status_reason)
        if stop.requested:  # the results so far are out; the exit code still says the run was cut short
            from . import INTERRUPTED

            raise typer.Exit(INTERRUPTED)


@contextlib.contextmanager
def _first_ctrl_c_stops(stop: Any, quiet: bool) -> Iterator[None]:
    """fio's Ctrl-C: the first stops the jobs, which then report what they measured; a second stops at once
    (the usual interruption).  Processes the run forks (jobs, I/O processes) inherit the handler and leave the
    stop to this one, which sets their shared flags."""
    owner = os.getpid()

    def on_ctrl_c(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            return
        if stop.requested or not stop.started:  # a second Ctrl-C, or one while the jobs are being set up
            raise KeyboardInterrupt
        stop.stop()
        if not quiet:  # os.write: a signal may arrive while stderr's buffer is being written
            try:
                os.write(2, b"stopping: Ctrl-C; the jobs end and report what they measured (Ctrl-C again: "
                            b"at once)\n")
            except OSError:  # stderr gone (a closed pipe): the stop goes on all the same
                pass
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a background job of a script: Ctrl-C stays ignored
        yield
        return
    try:
        previous = signal.signal(signal.SIGINT, on_ctrl_c)
    except ValueError:  # not the main thread: Ctrl-C stays an interruption
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _reports(outcome: Any, run: FioRun) -> list[fioout.Report]:
    """Per job (or reporting group) what fio's outputs show."""
    opts = {id(j.config): j.options for j in run.jobs}
    by_name = {j.config.name: j.options for j in run.jobs}
    reports: list[fioout.Report] = []
    done_groups: set[int] = set()
    for e in outcome.entries:
        if e.result is None or e.result.stats is None or not e.job.stats:
            continue
        members = [x for x in outcome.entries if x.group == e.group and x.result is not None]
        options = opts.get(id(e.job), by_name.get(e.job.name, ()))
        err = 5 if e.error else 0
        if e.job.group_reporting and len(members) > 1:
            if e.group in done_groups:
                continue
            done_groups.add(e.group)
            reports.append(fioout.Report(e.job.name, e.group, e.job, outcome.groups[e.group], options, err,
                                         len(members), e.job.description))
        else:
            reports.append(fioout.Report(e.job.name, e.group, e.job, e.result.stats, options, err, 1,
                                         e.job.description))
    return reports


def _showcmd(run: FioRun) -> str:
    """The jobs as one fio command line (fio's --showcmd)."""
    parts = ["fio"]
    for k, v in run.global_options:
        parts.append(f"--{k}={v}")
    for j in run.jobs:
        parts.append(f"--name={j.config.name}")
        parts += [f"--{k}={v}" for k, v in j.options if k != "name"]
    return " ".join(parts)


def _informational(cl: CommandLine) -> bool:
    """fio's --version, --cmdhelp and --enghelp: print and stop."""
    if "version" in cl.run:
        from .. import __version__

        typer.echo(f"sdbench {__version__} (fio's job files and command line)")
        return True
    if "cmdhelp" in cl.run or "help" in cl.run:
        name = cl.run.get("cmdhelp") or ""
        if not name or name == "all":
            for n, o in sorted(BY_NAME.items()):
                if n == o.name:
                    typer.echo(f"{n:<32} {o.status:<9} {o.note}")
            return True
        o = lookup(name)
        aliases = f" (also {', '.join(o.aliases)})" if o.aliases else ""
        typer.echo(f"{o.name}{aliases}: {o.status}: {o.note}")
        return True
    if "enghelp" in cl.run:
        for n, e in IOENGINES.items():
            typer.echo(f"{n:<10} runs as {e}")
        return True
    return False


__all__ = ["ACCEPTED", "REFUSED", "open_fio_target", "print_fio_table", "register"]
