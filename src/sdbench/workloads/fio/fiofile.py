"""fio's job files and command line, read into jobs (:class:`FioRun`).

A job file is fio's INI format as fio reads it: ``[section]`` lines open a
job, a section whose name starts with ``global`` holds defaults for the jobs
after it, ``;`` and ``#`` start comments (also after an option), ``include
FILE`` pulls in options, ``${VAR}`` is replaced by the environment variable
and ``$ncpus``, ``$mb_memory``, ``$pagesize`` by the machine's values.  The
jobs of a second job file start after those of the first (fio puts a
stonewall between files).

The command line takes fio's spellings: ``--name=NAME`` starts a job, the
options after it are that job's, those before the first ``--name`` (or after
``--name=global``) are defaults for every job.  With a job file, options on
the command line override the file's (fio does the opposite; docs/fio.md),
and a note says when one replaced a different value.

Each job's options go through fio's option table (:mod:`.fiooptions`) onto
:class:`~.jobs.JobConfig`, whose declared ranges check them: any error is
one line naming the file, the job and the option.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...options import from_mapping, read_text_file
from .fiooptions import BY_NAME, SYNC_ENGINES, lookup, translate
from .jobs import JobConfig, load_toml_jobs

#: fio's own command-line options (not job options) that sdbench takes, and whether each needs a value
RUN_OPTIONS = {
    "output": True, "output-format": True, "minimal": False, "terse-version": True, "append-terse": False,
    "section": True, "readonly": False, "parse-only": False, "showcmd": False, "eta": True, "eta-newline": True,
    "eta-interval": True, "warnings-fatal": False, "max-jobs": True, "alloc-size": True, "version": False,
    "cmdhelp": False, "enghelp": False, "help": False,
}
#: fio's command-line options sdbench refuses, and why
RUN_REFUSED = {
    "server": "fio's client/server mode is not supported", "client": "fio's client/server mode is not supported",
    "daemonize": "fio's client/server mode is not supported", "remote-config": "fio's client/server mode is not "
                                                                                 "supported",
    "idle-prof": "idle profiling is not supported", "inflate-log": "compressed logs are not supported",
    "trigger-file": "triggers are not supported", "trigger-timeout": "triggers are not supported",
    "trigger": "triggers are not supported", "trigger-remote": "triggers are not supported",
    "aux-path": "files go where the job names them", "crctest": "a checksum self-test; sdbench has its own tests",
    "cpuclock-test": "a clock self-test", "merge-blktrace-only": "I/O log replay is not supported",
    "status-interval": "periodic full reports are not supported (a progress line is shown)",
    "bandwidth-log": "aggregate bandwidth logs are not supported (write_bw_log per job is)",
    "debug": "fio's debug tracing is not supported",
}
_BOOL_WORDS = ("0", "1", "true", "false", "yes", "no", "on", "off")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MAX_INCLUDE_DEPTH = 8
_MAX_JOBS = 1024


@dataclass(frozen=True)
class FioJob:
    """One job of a run, as fio names it: its configuration and the options it was given (section and command
    line; fio's "job options")."""
    config: JobConfig
    options: tuple[tuple[str, str], ...] = ()
    #: where the job came from: "FILE:[section]" or "command line"
    where: str = ""


@dataclass(frozen=True)
class FioRun:
    """What one invocation runs: the jobs in order, the global options (fio's "global options"), and notes."""
    jobs: tuple[FioJob, ...]
    global_options: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()


@dataclass
class Section:
    name: str
    options: list[tuple[str, str | None]] = field(default_factory=list)
    where: str = ""

    @property
    def is_global(self) -> bool:
        return self.name.lower().startswith("global")


@dataclass
class CommandLine:
    """fio's command line split up: job files, default options, command-line jobs and run options."""
    job_files: list[str] = field(default_factory=list)
    defaults: list[tuple[str, str | None]] = field(default_factory=list)
    jobs: list[Section] = field(default_factory=list)
    run: dict[str, str | None] = field(default_factory=dict)

    @property
    def sections(self) -> list[str]:
        s = self.run.get("section")
        return [x for x in (s or "").split(",") if x] if s else []


# ---- job files ----------------------------------------------------------------------------------------------
def _expand_env(value: str, where: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        return env.get(m.group(1), "")
    return _ENV.sub(sub, value)


def _option_line(line: str, where: str, env: dict[str, str]) -> tuple[str, str | None]:
    key, sep, value = line.partition("=")
    key = key.strip()
    if not key:
        raise ConfigError(f"{where}: {line!r:.40} is not an option")
    try:
        lookup(key)  # an unknown name is refused where it was written
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    if not sep:
        return key, None
    raw = value.strip()
    expanded = _expand_env(raw, where, env).strip()
    if not expanded and _ENV.search(raw):
        names = ", ".join(sorted(set(_ENV.findall(raw))))
        raise ConfigError(f"{where}: {key} = {raw}: the environment variable {names} is not set")
    return key, expanded


def _strip(line: str) -> str:
    """A line without its comment (``;`` or ``#`` anywhere, as fio) and surrounding blanks."""
    for mark in (";", "#"):
        i = line.find(mark)
        if i >= 0:
            line = line[:i]
    return line.strip()


def parse_ini(text: str, name: str, *, base: Path | None = None, env: dict[str, str] | None = None,
              sections: list[str] | None = None, _depth: int = 0) -> list[Section]:
    """The sections of a fio job file, each with its options in order (``include`` resolved).  ``sections``:
    only these jobs (fio's --section), with every global section."""
    env = dict(os.environ) if env is None else env
    out: list[Section] = []
    current: Section | None = None
    skip = False
    for n, raw in enumerate(text.splitlines(), start=1):
        line = _strip(raw)
        if not line:
            continue
        where = f"{name}:{n}"
        if line.startswith("["):
            if _depth:
                raise ConfigError(f"{where}: an included file holds options only, not [sections]")
            if not line.endswith("]") or len(line) < 3:
                raise ConfigError(f"{where}: {line!r:.40} is not a [section]")
            current = Section(line[1:-1].strip(), [], f"{name}:[{line[1:-1].strip()}]")
            skip = bool(sections) and not current.is_global and current.name not in sections
            if not skip:
                out.append(current)
            continue
        if line.startswith("include ") or line == "include":
            inc = line[len("include"):].strip()
            if not inc:
                raise ConfigError(f"{where}: include needs a file name")
            if current is None and not _depth:
                raise ConfigError(f"{where}: include before the first [section]")
            if skip:
                continue
            if _depth >= _MAX_INCLUDE_DEPTH:
                raise ConfigError(f"{where}: includes nested more than {_MAX_INCLUDE_DEPTH} deep")
            path = Path(inc)
            if not path.exists() and base is not None:
                path = base / inc
            inc_text = read_text_file(path, "included job file")
            inner = parse_ini(inc_text, str(path), base=path.parent, env=env, _depth=_depth + 1)
            target = current if current is not None else Section("", [], where)
            target.options.extend(inner[0].options if inner else [])
            if current is None:
                out.append(target)
            continue
        if _depth:
            if not out:
                out.append(Section("", [], name))
            out[0].options.append(_option_line(line, where, env))
            continue
        if current is None:
            raise ConfigError(f"{where}: option {line!r:.40} outside of a [section]")
        if skip:
            continue
        current.options.append(_option_line(line, where, env))
    return out


def load_fio_file(path: str | os.PathLike[str], *, sections: list[str] | None = None,
                  overrides: list[tuple[str, str | None]] | None = None) -> FioRun:
    """The jobs of one fio job file (command-line ``overrides`` applied to each)."""
    p = Path(path)
    text = read_text_file(p, "job file")
    return build_run([(p.name, parse_ini(text, p.name, base=p.parent, sections=sections))], overrides or [])


def load_job_file(path: str | os.PathLike[str]) -> list[JobConfig]:
    """Jobs from a job file: fio's INI format (files named ``*.fio``, ``*.ini``, ``*.job``), or TOML
    (:func:`~.jobs.load_toml_jobs`)."""
    p = Path(path)
    if p.suffix.lower() in (".fio", ".ini", ".job"):
        return [j.config for j in load_fio_file(p).jobs]
    return load_toml_jobs(p)


def parse_fio_ini(text: str, name: str) -> list[JobConfig]:
    """The jobs of fio job file text, as configurations (fio's defaults where the text says nothing)."""
    return [j.config for j in build_run([(name, parse_ini(text, name))], []).jobs]


# ---- the command line ---------------------------------------------------------------------------------------
def parse_argv(args: list[str]) -> CommandLine:
    """fio's command line (what is left after sdbench's own options): job files, options, ``--name`` jobs.
    ``--opt=value`` and ``--opt value`` both work; a bare ``--flag`` is true for fio's flags and booleans."""
    cl = CommandLine()
    current: list[tuple[str, str | None]] = cl.defaults
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            cl.job_files.append(tok)
            continue
        body = tok.lstrip("-")
        key, sep, value = body.partition("=")
        val: str | None = value if sep else None
        if key in RUN_REFUSED:
            raise ConfigError(f"--{key}: {RUN_REFUSED[key]}")
        if key in RUN_OPTIONS:
            if RUN_OPTIONS[key] and val is None:
                if i >= len(args) or args[i].startswith("--"):
                    raise ConfigError(f"--{key} needs a value (--{key}=...)")
                val = args[i]
                i += 1
            cl.run[key] = val
            continue
        opt = lookup(key)
        if val is None and opt.flag and i < len(args) and args[i].lower() in _BOOL_WORDS:
            val = args[i]  # --direct 1
            i += 1
        if val is None and not opt.flag:
            if i >= len(args) or (args[i].startswith("--") and len(args[i]) > 2):
                raise ConfigError(f"--{key} needs a value (--{key}=...)")
            val = args[i]
            i += 1
        if opt.name == "name":
            assert val is not None
            if val.lower().startswith("global"):
                current = cl.defaults
            else:
                cl.jobs.append(Section(val, [("name", val)], "command line"))
                current = cl.jobs[-1].options
            continue
        current.append((key, val))
    return cl


# ---- building the run ---------------------------------------------------------------------------------------
def _canonical(options: list[tuple[str, str | None]]) -> dict[str, tuple[str, str | None]]:
    return {lookup(k).name: (k, v) for k, v in options}


def build_run(files: list[tuple[str, list[Section]]], overrides: list[tuple[str, str | None]],
              cmdline_jobs: list[Section] | None = None,
              cmdline_defaults: list[tuple[str, str | None]] | None = None) -> FioRun:
    """Jobs from the sections of each job file (``overrides``: command-line options that replace the files'
    values) and from the command line (``cmdline_defaults`` apply to those as fio's defaults)."""
    notes: list[str] = []
    jobs: list[FioJob] = []
    globals_out: list[tuple[str, str]] = []
    for k, v in (cmdline_defaults or []) + overrides:
        if v is not None:
            globals_out.append((k, v))
    for sec in cmdline_jobs or []:
        opts = list(cmdline_defaults or []) + sec.options
        jobs.append(_job(sec.name, opts, sec.options, "command line", notes, stonewall=False))
    over = _canonical(overrides)
    if "filename" in over and (over["filename"][1] or "").startswith("/") and "directory" not in over:
        # an absolute --filename names the target outright: the files' directory= no longer applies
        overrides = overrides + [("directory", "")]
        over = _canonical(overrides)
    for fi, (fname, sections) in enumerate(files):
        glob: list[tuple[str, str | None]] = []
        first = True
        for sec in sections:
            if sec.is_global:
                glob.extend(sec.options)
                globals_out.extend((k, v) for k, v in sec.options if v is not None)
                continue
            file_opts = glob + sec.options
            given = _canonical(file_opts)
            for canon, (k, v) in over.items():
                if canon in given and given[canon][1] != v and canon != "name":
                    shown = f"={v}" if v is not None else ""
                    notes.append(f"job {sec.name}: --{k}{shown} on the command line replaces {given[canon][0]}"
                                 f"={given[canon][1]} of {sec.where}")
            jobs.append(_job(sec.name, file_opts + overrides, sec.options, sec.where, notes,
                             stonewall=fi > 0 and first))
            first = False
        if not any(not s.is_global for s in sections):
            raise ConfigError(f"{fname}: no job section (only [global])")
    if len(jobs) > _MAX_JOBS:
        raise ConfigError(f"{len(jobs)} jobs: at most {_MAX_JOBS}")
    _check_wait_for(jobs)
    seen: dict[str, str] = {}
    for k, v in globals_out:
        seen[k] = v
    return FioRun(tuple(jobs), tuple(seen.items()), tuple(dict.fromkeys(notes)))


def _job(section: str, options: list[tuple[str, str | None]], own: list[tuple[str, str | None]], where: str,
         notes: list[str], *, stonewall: bool) -> FioJob:
    name = section
    for k, v in options:
        if lookup(k).name == "name" and v:
            name = v
    # a job's own name= wins over the section's name; a global name= does not (as fio)
    own_name = [v for k, v in own if lookup(k).name == "name" and v]
    name = own_name[-1] if own_name else section
    loc = where if where != "command line" else f"job {name}"
    try:
        fields = translate([(k, v) for k, v in options if lookup(k).name != "name"], name, notes)
    except ConfigError as e:
        raise ConfigError(f"{loc}: {e}") from None
    fields["name"] = name
    if stonewall:
        fields["stonewall"] = True
    config = _config(fields, loc)
    if config.ioengine in SYNC_ENGINES and config.iodepth > 1:
        notes.append(f"job {name}: iodepth {config.iodepth} with the synchronous engine {config.ioengine}: queue "
                     f"depth capped at 1, as fio does (ioengine=io_uring or libaio queues)")
        config = replace(config, iodepth=1)
    shown = tuple((k, v) for k, v in own if v is not None)
    return FioJob(config, shown, where)


#: JobConfig fields by the fio option that sets them, for error lines that name what the user wrote
def _fio_name_of(fieldname: str) -> str:
    for o in BY_NAME.values():
        if o.apply is not None and o.name.replace("-", "_") == fieldname:
            return o.name
    return {"bs_bytes": "bs", "size_bytes": "size", "offset_bytes": "offset", "runtime_s": "runtime",
            "ramp_time_s": "ramp_time", "startdelay_s": "startdelay", "seed": "randseed", "io_size_bytes": "io_size",
            "thinktime_us": "thinktime", "rate_bytes_s": "rate", "rate_iops": "rate_iops",
            "latency_target_us": "latency_target", "ss_dur_s": "ss_dur", "fsync_on_end": "end_fsync",
            "iodepth": "iodepth", "numjobs": "numjobs", "loops": "loops"}.get(fieldname, fieldname)


def _config(fields: dict[str, Any], where: str) -> JobConfig:
    try:
        return from_mapping(JobConfig, fields, "job")
    except ConfigError as e:
        msg = str(e)
        m = re.match(r"(?:unknown option )?job\.(\w+)(.*)", msg)
        if m:
            msg = _fio_name_of(m.group(1)) + m.group(2)
        elif msg.startswith("job: "):
            msg = msg[5:]
        raise ConfigError(f"{where}: {msg}") from None


def _check_wait_for(jobs: list[FioJob]) -> None:
    names: list[str] = []
    for j in jobs:
        w = j.config.wait_for
        if w and w not in names:
            raise ConfigError(f"{j.where}: wait_for = {w}: no job of that name before this one (fio allows no "
                              f"forward references)")
        names.append(j.config.name)


def read_run(cl: CommandLine, extra_files: list[str] | None = None, env: dict[str, str] | None = None) -> FioRun:
    """The run a command line asks for: its job files (and ``extra_files``, sdbench's --job) with the options
    before them as overrides, and its ``--name`` jobs."""
    files = []
    for f in (extra_files or []) + cl.job_files:
        p = Path(f)
        if p.suffix.lower() == ".toml":
            raise ConfigError(f"{f}: TOML job files go to --job (fio's job files are INI)")
        text = read_text_file(p, "job file")
        files.append((p.name, parse_ini(text, p.name, base=p.parent, env=env, sections=cl.sections or None)))
    if not files and not cl.jobs:
        # options without --name (or none at all): one job, as fio's defaults make it (sequential 4 KiB reads)
        return build_run([], [], [Section("job", [], "command line")], cl.defaults)
    if files:
        return build_run(files, cl.defaults, cl.jobs, cl.defaults)
    return build_run([], [], cl.jobs, cl.defaults)


def with_overrides(run: FioRun, **changes: Any) -> FioRun:
    """Every job of ``run`` with ``changes`` to its configuration (checked again)."""
    jobs = []
    for j in run.jobs:
        fields = {**{f: getattr(j.config, f) for f in j.config.__dataclass_fields__}, **changes}
        jobs.append(replace(j, config=_config(fields, j.where)))
    return replace(run, jobs=tuple(jobs))
