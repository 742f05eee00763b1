"""fio's option table: every fio option name, and what it becomes here.

Each option is one of:

* **supported** -- translated onto the declared options of
  :class:`~.jobs.JobConfig` (whose ranges then check the value, so the
  limits live in one place);
* **accepted** -- taken with no effect, because it only describes the job
  (``description``), or because what it asks for is what sdbench does anyway
  (the note says which);
* **refused** -- one line naming the option and why (zoned and NVMe
  features, other engines, replaying logs, changing users or cgroups...).

A name fio does not have is refused as such.  The same table reads fio's job
files and command line (:mod:`.fiofile`) and writes docs/fio.md's list
(:func:`option_rows`).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from . import fiosyntax as fs
from .jobs import IOENGINES, MAX_AMOUNT_BYTES, JobConfig

_FIELDS = {f.name for f in dataclasses.fields(JobConfig)}

SUPPORTED, ACCEPTED, REFUSED = "supported", "accepted", "refused"

#: what a supported option's value becomes: (value or None when given bare, context) -> JobConfig fields
Apply = Callable[[str | None, "OptionContext"], dict[str, Any]]


@dataclass
class OptionContext:
    """What translating one job's options needs to know: the job's name, fio's kb_base, every option the job
    was given (name -> value), and the notes gathered for the user."""
    job: str
    kb_base: int
    given: dict[str, str | None]
    notes: list[str]

    def where(self, option: str) -> str:
        return f"{option}"


@dataclass(frozen=True)
class FioOption:
    name: str
    status: str
    note: str
    apply: Apply | None = None
    aliases: tuple[str, ...] = ()
    #: a bare ``--option`` (no value) means true: fio's set-options and booleans
    flag: bool = False


def _need(value: str | None, name: str) -> str:
    if value is None:
        raise ConfigError(f"{name} needs a value ({name}=...)")
    return value


# ---- appliers -----------------------------------------------------------------------------------------------
def _size(field: str) -> Apply:
    return lambda v, c: {field: fs.fio_size(_need(v, field), field, c.kb_base)}


def _int(field: str, *, suffixes: bool = False) -> Apply:
    return lambda v, c: {field: fs.fio_int(_need(v, field), field, suffixes=suffixes, kb_base=c.kb_base)}


def _float(field: str) -> Apply:
    return lambda v, c: {field: fs.fio_float(_need(v, field), field)}


def _bool(field: str, invert: bool = False) -> Apply:
    return lambda v, c: {field: fs.fio_bool(v, field) != invert}


def _str(field: str) -> Apply:
    return lambda v, c: {field: _need(v, field).strip()}


def _time_s(field: str, unit_s: float = 1.0) -> Apply:
    return lambda v, c: {field: fs.fio_time(_need(v, field), field, unit_s)}


def _time_us(field: str) -> Apply:
    """A duration whose bare number is in microseconds, kept in whole microseconds."""
    return lambda v, c: {field: round(fs.fio_time(_need(v, field), field, 1e-6) * 1e6)}


def _time_ms(field: str) -> Apply:
    return lambda v, c: {field: round(fs.fio_time(_need(v, field), field, 1e-3) * 1e3)}


def _choice(field: str, choices: dict[str, Any]) -> Apply:
    return lambda v, c: {field: fs.fio_choice(_need(v, field), field, choices)}


def _per_dir(field: str, parse: Callable[[str, OptionContext], Any], default: Any, n: int = 3) -> Apply:
    return lambda v, c: {field: fs.per_direction(_need(v, field), field, lambda t: parse(t, c), default, n)}


def _rw(v: str | None, c: OptionContext) -> dict[str, Any]:
    text = _need(v, "rw").strip()
    mode, sep, suffix = text.partition(":")
    mode = {"readwrite": "rw", "randreadwrite": "randrw"}.get(mode.lower(), mode.lower())
    out: dict[str, Any] = {"rw": mode}
    if sep and suffix.strip():
        if mode.startswith("rand"):
            out["rw_random_run"] = fs.fio_int(suffix, "rw")
        else:
            neg = suffix.strip().startswith("-")
            n = fs.fio_size(suffix.strip().lstrip("-"), "rw", c.kb_base)
            out["rw_skip_bytes"] = -n if neg else n
    return out


def _bs(v: str | None, c: OptionContext) -> dict[str, Any]:
    r, w, t = fs.per_direction(_need(v, "bs"), "bs", lambda x: fs.fio_size(x, "bs", c.kb_base), 4096)
    return {"bs_bytes": r, "write_bs_bytes": w, "trim_bs_bytes": t}


def _shares(split: list[tuple[int, float]]) -> list[dict[str, Any]]:
    return [{"size_bytes": s, "percent": p} for s, p in split]


def _bssplit(v: str | None, c: OptionContext) -> dict[str, Any]:
    r, w, t = fs.per_direction(_need(v, "bssplit"), "bssplit",
                               lambda x: _shares(fs.bssplit(x, "bssplit", c.kb_base)), [])
    return {"bssplit": r, "write_bssplit": w, "trim_bssplit": t}


def _bsrange(v: str | None, c: OptionContext) -> dict[str, Any]:
    unaligned = fs.fio_bool(c.given.get("bs_unaligned", "0"), "bs_unaligned") if "bs_unaligned" in c.given else False
    r, w, t = fs.per_direction(_need(v, "bsrange"), "bsrange",
                               lambda x: _shares(fs.bsrange(x, "bsrange", c.kb_base, unaligned)), [])
    return {"bssplit": r, "write_bssplit": w, "trim_bssplit": t}


def _blockalign(v: str | None, c: OptionContext) -> dict[str, Any]:
    vals = set(fs.per_direction(_need(v, "blockalign"), "blockalign",
                                lambda x: fs.fio_size(x, "blockalign", c.kb_base), 0))
    vals.discard(0)
    if len(vals) > 1:
        raise ConfigError("blockalign: one alignment for every direction (not a different one per direction)")
    return {"blockalign_bytes": vals.pop() if vals else 0}


def _size_or_pct(field: str, pct_field: str) -> Apply:
    def apply(v: str | None, c: OptionContext) -> dict[str, Any]:
        n, pct = fs.fio_size_or_pct(_need(v, field), field, c.kb_base)
        return {field: n, pct_field: pct}
    return apply


def _filesize(v: str | None, c: OptionContext) -> dict[str, Any]:
    text = _need(v, "filesize").strip()
    parts = text.replace(":", "-").split("-")
    if len(parts) == 2 and parts[0] and parts[1]:
        lo, hi = sorted(fs.fio_size(p, "filesize", c.kb_base) for p in parts)
        return {"filesize_bytes": lo, "filesize_max_bytes": hi}
    return {"filesize_bytes": fs.fio_size(text, "filesize", c.kb_base), "filesize_max_bytes": 0}


def _startdelay(v: str | None, c: OptionContext) -> dict[str, Any]:
    text = _need(v, "startdelay").strip()
    parts = text.replace(":", "-").split("-")
    if len(parts) == 2 and parts[0] and parts[1]:
        lo, hi = sorted(fs.fio_time(p, "startdelay") for p in parts)
        return {"startdelay_s": lo, "startdelay_max_s": hi}
    return {"startdelay_s": fs.fio_time(text, "startdelay"), "startdelay_max_s": 0.0}


def _rwmixwrite(v: str | None, c: OptionContext) -> dict[str, Any]:
    w = fs.fio_int(_need(v, "rwmixwrite"), "rwmixwrite")
    if not 0 <= w <= 100:
        raise ConfigError(f"rwmixwrite = {w} % is not between 0 and 100")
    return {"rwmixread": 100 - w}


def _percentage_random(v: str | None, c: OptionContext) -> dict[str, Any]:
    vals = set(fs.per_direction(_need(v, "percentage_random"), "percentage_random",
                                lambda x: fs.fio_int(x, "percentage_random"), 100))
    if len(vals) > 1:
        raise ConfigError("percentage_random: one share for every direction (not a different one per direction)")
    return {"percentage_random": vals.pop()}


def _distribution(v: str | None, c: OptionContext) -> dict[str, Any]:
    parts = [p for p in _need(v, "random_distribution").split(",")]
    found = [fs.distribution(p, "random_distribution", c.kb_base) for p in parts if p.strip()]
    if not found:
        raise ConfigError("random_distribution needs a value")
    if any(f != found[0] for f in found[1:]):
        raise ConfigError("random_distribution: one distribution for every direction (not one per direction)")
    return found[0]


def _ioengine(v: str | None, c: OptionContext) -> dict[str, Any]:
    name = _need(v, "ioengine").strip().split(":", 1)[0]
    if name.startswith("external"):
        raise ConfigError("ioengine = external: sdbench loads no engines from shared libraries")
    if name not in IOENGINES:
        raise ConfigError(f"ioengine = {name!r:.30} is not one sdbench has (it runs the local engines: "
                          f"{', '.join(n for n in IOENGINES if n != 'auto')}; docs/fio.md)")
    return {"ioengine": name}


def _verify(v: str | None, c: OptionContext) -> dict[str, Any]:
    name = _need(v, "verify").strip().lower()
    if name in ("0", "none", "null"):
        return {"verify": "none"}
    if name in ("meta", "pattern"):
        return {"verify": name}
    if name in ("crc32c", "crc32c-intel", "1", "md5", "crc64", "crc32", "crc16", "crc7", "xxhash", "sha1",
                "sha256", "sha512", "sha3-224", "sha3-256", "sha3-384", "sha3-512"):
        if name not in ("crc32c", "crc32c-intel", "1"):
            c.notes.append(f"job {c.job}: verify={name}: every block is checked with CRC-32C in sdbench's own "
                           f"trailer (fio's {name} header is not written)")
        return {"verify": "crc32c"}
    raise ConfigError(f"verify = {name!r:.30} is not a verify method (crc32c, md5, crc64, meta, pattern...)")


def _verify_pattern(v: str | None, c: OptionContext) -> dict[str, Any]:
    out: dict[str, Any] = {"verify_pattern_hex": fs.pattern_hex(_need(v, "verify_pattern"), "verify_pattern")}
    if "verify" not in c.given:
        out["verify"] = "pattern"  # as in fio: a pattern without a verify method is verify=pattern
    return out


def _buffer_pattern(v: str | None, c: OptionContext) -> dict[str, Any]:
    return {"buffer_pattern_hex": fs.pattern_hex(_need(v, "buffer_pattern"), "buffer_pattern"),
            "scramble_buffers": False, "zero_buffers": False}


def _log_prefix(field: str) -> Apply:
    return lambda v, c: {field: (v.strip() if v and v.strip() and v.strip() != "1" else c.job)}


def _steadystate(v: str | None, c: OptionContext) -> dict[str, Any]:
    text = _need(v, "steadystate").strip()
    metric, _, limit = text.partition(":")
    metric = metric.lower()
    if metric not in ("iops", "iops_slope", "bw", "bw_slope", "lat", "lat_slope"):
        raise ConfigError(f"steadystate: {metric!r:.30} is not iops, iops_slope, bw, bw_slope, lat or lat_slope")
    pct = limit.strip().endswith("%")
    lim = fs.fio_float(limit.strip().rstrip("%") or "0", "steadystate")
    return {"steadystate": metric, "ss_limit": lim, "ss_limit_pct": pct}


def _continue_on_error(v: str | None, c: OptionContext) -> dict[str, Any]:
    choices = {"none": "none", "0": "none", "read": "read", "write": "write", "io": "io", "verify": "verify",
               "all": "all", "1": "all"}
    return {"continue_on_error": fs.fio_choice(_need(v, "continue_on_error"), "continue_on_error", choices)}


def _ignore_error(v: str | None, c: OptionContext) -> dict[str, Any]:
    r, w, ver = fs.per_direction(_need(v, "ignore_error"), "ignore_error",
                                 lambda x: fs.errno_list(x, "ignore_error"), (), 3)
    return {"ignore_read_errors": r, "ignore_write_errors": w, "ignore_verify_errors": ver}


def _cpus_allowed(v: str | None, c: OptionContext) -> dict[str, Any]:
    cpus = fs.cpu_list(_need(v, "cpus_allowed"), "cpus_allowed")
    return {"cpus_allowed": ",".join(map(str, cpus))}


def _cpumask(v: str | None, c: OptionContext) -> dict[str, Any]:
    mask = fs.fio_int(_need(v, "cpumask"), "cpumask")
    cpus = [i for i in range(min(mask.bit_length(), 8192)) if mask >> i & 1]
    if not cpus:
        raise ConfigError("cpumask: no CPU in the mask")
    return {"cpus_allowed": ",".join(map(str, cpus))}


def _numa_nodes(v: str | None, c: OptionContext) -> dict[str, Any]:
    text = _need(v, "numa_cpu_nodes").strip()
    if text != "all":
        fs.cpu_list(text, "numa_cpu_nodes")
    return {"numa_cpu_nodes": text}


def _numa_mem(v: str | None, c: OptionContext) -> dict[str, Any]:
    text = _need(v, "numa_mem_policy").strip()
    mode, _, nodes = text.partition(":")
    if mode not in ("default", "prefer", "bind", "interleave", "local"):
        raise ConfigError(f"numa_mem_policy: {mode!r:.30} is not default, prefer, bind, interleave or local")
    if mode in ("prefer", "bind", "interleave") and not nodes:
        raise ConfigError(f"numa_mem_policy = {mode} needs nodes ({mode}:0)")
    if nodes and nodes != "all":
        fs.cpu_list(nodes, "numa_mem_policy")
    return {"numa_mem_policy": text}


def _cmdprio_bssplit(v: str | None, c: OptionContext) -> dict[str, Any]:
    r, w = fs.per_direction(_need(v, "cmdprio_bssplit"), "cmdprio_bssplit",
                            lambda x: fs.cmdprio_bssplit(x, "cmdprio_bssplit", c.kb_base), [], 2)
    out = []
    for direction, entries in (("read", r), ("write", w)):
        for size, pct, cls, level, hint in entries:
            e: dict[str, Any] = {"direction": direction, "size_bytes": size, "percent": pct}
            for key, val in (("prio_class", cls), ("level", level), ("hint", hint)):
                if val is not None:
                    e[key] = val
            out.append(e)
    return {"cmdprio_bssplit": out}


def _sync(v: str | None, c: OptionContext) -> dict[str, Any]:
    return {"sync_mode": fs.fio_choice(_need(v, "sync"), "sync", {"0": "none", "none": "none", "1": "sync",
                                                                  "sync": "sync", "dsync": "dsync"})}


def _fadvise(v: str | None, c: OptionContext) -> dict[str, Any]:
    return {"fadvise_hint": fs.fio_choice(_need(v, "fadvise_hint"), "fadvise_hint",
                                          {"0": "off", "1": "auto", "sequential": "sequential", "random": "random"})}


def _gtod_reduce(v: str | None, c: OptionContext) -> dict[str, Any]:
    on = fs.fio_bool(v, "gtod_reduce")
    return {"disable_clat": on, "disable_slat": on, "disable_bw": on, "disable_lat": on} if on else {}


def _unified(v: str | None, c: OptionContext) -> dict[str, Any]:
    return {"unified_rw_reporting": fs.fio_choice(
        _need(v, "unified_rw_reporting"), "unified_rw_reporting",
        {"none": "none", "0": "none", "mixed": "mixed", "1": "mixed", "both": "both", "2": "both"})}


def _log_window(v: str | None, c: OptionContext) -> dict[str, Any]:
    return {"log_window_value": fs.fio_choice(_need(v, "log_window_value"), "log_window_value",
                                              {"avg": "avg", "0": "avg", "max": "max", "1": "max", "both": "both"})}


def _zonemode(v: str | None, c: OptionContext) -> dict[str, Any]:
    mode = _need(v, "zonemode").strip().lower()
    if mode == "zbd":
        raise ConfigError("zonemode = zbd: zoned block devices only (host-managed SMR, ZNS); a loop device, image "
                          "file or SD card is not zoned")
    return {"zonemode": fs.fio_choice(mode, "zonemode", {"none": "none", "strided": "strided"})}


def _write_hint(v: str | None, c: OptionContext) -> dict[str, Any]:
    return {"write_hint": fs.fio_choice(_need(v, "write_hint"), "write_hint",
                                        {"none": "none", "short": "short", "medium": "medium", "long": "long",
                                         "extreme": "extreme"})}


def _file_service(v: str | None, c: OptionContext) -> dict[str, Any]:
    kind, _, n = _need(v, "file_service_type").partition(":")
    kind = kind.strip().lower()
    if kind in ("zipf", "pareto", "normal", "gauss"):
        raise ConfigError(f"file_service_type = {kind}: files are chosen in turn, at random or one after another "
                          f"(roundrobin, random, sequential)")
    out: dict[str, Any] = {"file_service_type": fs.fio_choice(kind, "file_service_type",
                                                              {"roundrobin": "roundrobin", "random": "random",
                                                               "sequential": "sequential"})}
    if n.strip():
        out["file_service_ios"] = fs.fio_int(n, "file_service_type")
    return out


def _lockfile(v: str | None, c: OptionContext) -> dict[str, Any]:
    mode = _need(v, "lockfile").strip().lower()
    if mode != "none":
        raise ConfigError(f"lockfile = {mode!r:.20}: jobs lock no files here (only lockfile=none)")
    return {}


def _mem(v: str | None, c: OptionContext) -> dict[str, Any]:
    kind = _need(v, "mem").split(":", 1)[0].strip().lower()
    if kind not in ("malloc", "shm", "shmhuge", "mmap", "mmaphuge", "mmapshared", "cudamalloc"):
        raise ConfigError(f"mem = {kind!r:.20} is not a memory type")
    if kind == "cudamalloc":
        raise ConfigError("mem = cudamalloc: GPU memory is not available")
    return {}


def _hipri_pct(v: str | None, c: OptionContext) -> dict[str, Any]:
    pct = fs.fio_int(_need(v, "hipri_percentage"), "hipri_percentage")
    if pct not in (0, 100):
        raise ConfigError("hipri_percentage: all or none of the I/Os polled (0 or 100), not a share")
    return {"hipri": pct == 100}


def _force_async(v: str | None, c: OptionContext) -> dict[str, Any]:
    if fs.fio_int(_need(v, "force_async"), "force_async"):
        raise ConfigError("force_async: sdbench's ring submits without IOSQE_ASYNC (force_async=0 only)")
    return {}


def _numjobs(v: str | None, c: OptionContext) -> dict[str, Any]:
    return {"numjobs": fs.fio_int(_need(v, "numjobs"), "numjobs")}


def _checked(name: str, values: tuple[str, ...]) -> Apply:
    """An accepted option's value checked against fio's choices (and nothing set)."""
    def apply(v: str | None, c: OptionContext) -> dict[str, Any]:
        fs.fio_choice(_need(v, name), name, {x: x for x in values})
        return {}
    return apply


def _refuse(why: str) -> Apply:
    def apply(v: str | None, c: OptionContext) -> dict[str, Any]:
        raise ConfigError(why)
    return apply


def _only(value: str, field: str | None = None) -> Apply:
    """Accepted at one value only (fio's default), refused at any other."""
    def apply(v: str | None, c: OptionContext) -> dict[str, Any]:
        if (v or "").strip().lower() not in (value, ""):
            raise ConfigError(f"only {value} is supported")
        return {}
    return apply


# ---- the table ----------------------------------------------------------------------------------------------
_ZONED = "zoned block devices only (zonemode=zbd); a loop device, image file or SD card is not zoned"
_NVME = "NVMe-only (passthrough commands, data placement, protection information); not on SD cards or loop devices"
_REPLAY = "replays a recorded I/O log; sdbench generates its jobs' I/O itself"
_TRIMVERIFY = "trim verification is not supported"
_CRED = "sdbench does not change the user, group or control group a job runs in"
_EXEC = "sdbench runs no commands from job files"
_INFO = "describes the job; shown in the reports"
_SAME = "no effect here"


def _o(name: str, status: str, note: str, apply: Apply | None = None, aliases: tuple[str, ...] = (),
       flag: bool = False) -> FioOption:
    return FioOption(name, status, note, apply, aliases, flag)


def _s(name: str, note: str, apply: Apply, aliases: tuple[str, ...] = (), flag: bool = False) -> FioOption:
    return _o(name, SUPPORTED, note, apply, aliases, flag)


def _a(name: str, note: str, aliases: tuple[str, ...] = (), flag: bool = False,
       apply: Apply | None = None) -> FioOption:
    return _o(name, ACCEPTED, note, apply or (lambda v, c: {}), aliases, flag)


def _r(name: str, note: str, aliases: tuple[str, ...] = (), flag: bool = False) -> FioOption:
    return _o(name, REFUSED, note, None, aliases, flag)


OPTIONS: tuple[FioOption, ...] = (
    # ---- description and files
    _s("name", "the job's name (a new job on the command line)", _str("name")),
    _s("description", "free text; shown in the reports", _str("description")),
    _s("wait_for", "starts once every clone of the named (earlier) job has ended", _str("wait_for")),
    _s("filename", "the target: on --device it must name that device (or be left out); on --dir a file in it; "
                   "alone, the device, image file or new file it names", _str("filename")),
    _s("directory", "the target directory: on --dir it must name it; alone, the directory the jobs' files go in",
       _str("directory")),
    _r("filename_format", "files are named jobname.jobnum.filenum as fio's default names them"),
    _a("unique_filename", "file names are unique per job here anyway", flag=True),
    _s("lockfile", "only none: jobs lock no files", _lockfile),
    _r("opendir", "a job works on files it names or creates, not on every file of a directory tree"),
    _r("filetype", "the target's type is what --device or --dir says"),
    # ---- I/O pattern
    _s("rw", "read, write, trim, randread, randwrite, randtrim, rw, randrw, trimwrite, randtrimwrite; :N and "
             ":size suffixes", _rw, aliases=("readwrite",)),
    _s("rw_sequencer", "sequential or identical", _choice("rw_sequencer", {"sequential": "sequential",
                                                                           "identical": "identical"})),
    _s("ioengine", "psync, sync, pvsync, pvsync2, vsync (synchronous: one I/O at a time, as fio caps their "
                   "iodepth at 1), io_uring, libaio, posixaio (sdbench's io_uring engine); others refused",
       _ioengine),
    _s("iodepth", "I/Os in flight (1..256)", _int("iodepth")),
    _s("iodepth_batch_submit", "io_uring: I/Os prepared per submission", _int("iodepth_batch_submit"),
       aliases=("iodepth_batch",)),
    _s("iodepth_batch_complete_min", "io_uring: completions waited for at a time",
       _int("iodepth_batch_complete_min"), aliases=("iodepth_batch_complete",)),
    _a("iodepth_batch_complete_max", "every completion there is reaped at once anyway"),
    _s("iodepth_low", "io_uring: the queue is refilled when it has drained to this", _int("iodepth_low")),
    _r("serialize_overlap", "overlapping I/Os in flight are not serialized"),
    _a("io_submit_mode", "inline and offload: the job issues its own I/O, and rates hold by issue time either way",
       apply=_checked("io_submit_mode", ("inline", "offload"))),
    _s("size", "the region (bytes or a share of the target: 20%)", _size_or_pct("size_bytes", "size_pct")),
    _s("io_size", "bytes to move", _size("io_size_bytes"), aliases=("io_limit",)),
    _s("fill_device", "write until the target is full", _bool("fill_device"), aliases=("fill_fs",), flag=True),
    _s("filesize", "size (or lo-hi range) of each file on a directory", _filesize),
    _s("file_append", "the region starts at the end of the file", _bool("file_append"), flag=True),
    _s("offset", "start of the region (bytes or a share of the target)", _size_or_pct("offset_bytes", "offset_pct"),
       aliases=("fileoffset",)),
    _s("offset_align", "alignment of a share-of-target offset", _size("offset_align_bytes")),
    _s("offset_increment", "each clone starts this much further", _size_or_pct("offset_increment_bytes",
                                                                               "offset_increment_pct")),
    _s("number_ios", "stop after this many I/Os", _int("number_ios", suffixes=True)),
    _r("num_range", "multi-range trims are an NVMe passthrough feature"),
    _s("bs", "bytes per I/O, per direction (read,write,trim)", _bs, aliases=("blocksize",)),
    _s("blockalign", "alignment of random offsets", _blockalign, aliases=("ba",)),
    _s("bsrange", "a range of block sizes, per direction", _bsrange, aliases=("blocksize_range",)),
    _s("bssplit", "block sizes with their shares, per direction", _bssplit),
    _s("bs_unaligned", "a bsrange's sizes in steps of 512 B rather than of its low end", _bool("bs_is_seq_rand")
       and (lambda v, c: {}), aliases=("blocksize_unaligned",), flag=True),
    _s("bs_is_seq_rand", "the read sizes go to sequential I/O, the write sizes to random I/O",
       _bool("bs_is_seq_rand"), flag=True),
    _s("randrepeat", "the same random sequence each run", _bool("randrepeat"), aliases=("allrandrepeat",), flag=True),
    _s("randseed", "seed of the random sequences", _int("seed"), aliases=("seed",)),
    _s("norandommap", "random offsets with replacement", _bool("norandommap"), flag=True),
    _a("softrandommap", "the random map is never exhausted here (it is a permutation)", flag=True),
    _s("sprandom", "SSD preconditioning to steady state", _bool("sprandom"), flag=True),
    _s("spr_num_regions", "sprandom: regions", _int("spr_num_regions")),
    _s("spr_op", "sprandom: over-provisioning", _float("spr_op")),
    _s("spr_cs", "sprandom: the device's cache", _size("spr_cs_bytes")),
    _s("random_generator", "tausworthe, lfsr (never repeats), tausworthe64",
       _choice("random_generator", {"tausworthe": "tausworthe", "lfsr": "lfsr", "tausworthe64": "tausworthe64"})),
    _s("random_distribution", "random, zipf, pareto, normal/gauss, zoned, zoned_abs", _distribution),
    _r("random_sequence_stride", "the sequence distribution is not supported"),
    _s("percentage_random", "share of random I/Os", _percentage_random),
    _r("percentage_sequential", "deprecated in fio; use percentage_random"),
    _s("nrfiles", "files per job on a directory", _int("nrfiles"), aliases=("nr_files",)),
    _a("openfiles", "a job keeps all its files open"),
    _s("file_service_type", "roundrobin, random, sequential (:N)", _file_service),
    _a("fallocate", "a new file is laid out by writing it (a preallocated one would read back as holes), or grows "
                    "as it is written (fill_device)",
       apply=_checked("fallocate", ("none", "native", "posix", "keep", "truncate", "0", "1"))),
    _s("fadvise_hint", "0, 1 (by rw), sequential, random", _fadvise),
    _s("fsync", "fsync after this many writes", _int("fsync_every")),
    _s("fdatasync", "fdatasync after this many writes", _int("fdatasync_every")),
    _r("write_barrier", "barrier writes cannot be issued from user space"),
    _r("sync_file_range", "sync_file_range is not supported; fsync and fdatasync are"),
    _s("direct", "O_DIRECT", _bool("direct"), flag=True),
    _s("atomic", "atomic writes (RWF_ATOMIC); refused where the target cannot", _bool("atomic"), flag=True),
    _s("buffered", "the page cache (buffered=1 is direct=0)", _bool("direct", invert=True), flag=True),
    _a("overwrite", "a job's files are written whole before the jobs start anyway", flag=True),
    _s("loops", "runs of the job", _int("loops")),
    _s("numjobs", "clones running side by side, reported apart unless group_reporting", _numjobs),
    _s("startdelay", "a delay (or random delay in a range) before the job", _startdelay),
    _s("runtime", "time limit of the job", _time_s("runtime_s"), aliases=("timeout", "runtime_s")),
    _s("time_based", "run for runtime, going round the region", _bool("time_based"), flag=True),
    _r("verify_only", "sdbench verifies what the same job wrote in the same run"),
    _s("ramp_time", "run this long before measuring", _time_s("ramp_time_s")),
    _s("ramp_size", "move this much before measuring", _size("ramp_size_bytes")),
    _a("clocksource", "times come from the kernel's monotonic clock (clock_gettime)",
       apply=_checked("clocksource", ("gettimeofday", "clock_gettime", "cpu"))),
    _s("mem", "buffers are page-aligned anonymous mappings whatever the type", _mem, aliases=("iomem",)),
    _a("iomem_align", "buffers are page aligned", aliases=("mem_align",)),
    # ---- verify
    _s("verify", "crc32c and fio's other checksums (checked with CRC-32C), meta, pattern", _verify),
    _s("do_verify", "check what was written after the job", _bool("do_verify"), flag=True),
    _a("verify_policy", "blocks are checked as they completed"),
    _a("verifysort", "deprecated in fio"),
    _a("verifysort_nr", "deprecated in fio"),
    _s("verify_interval", "a trailer per this many bytes", _size("verify_interval_bytes")),
    _a("verify_offset", "sdbench's trailer sits at the end of each block (or interval)"),
    _s("verify_pattern", "the pattern written and checked", _verify_pattern),
    _r("verify_pattern_interval", "the pattern is one per block here"),
    _s("verify_fatal", "stop at the first bad block", _bool("verify_fatal"), flag=True),
    _s("verify_dump", "write bad blocks to files", _bool("verify_dump"), flag=True),
    _a("verify_async", "the check runs in the job's process"),
    _s("verify_backlog", "check written blocks every this many writes", _int("verify_backlog", suffixes=True)),
    _a("verify_backlog_batch", "the whole backlog is checked at once"),
    _a("verify_async_cpus", "the check runs on the job's CPUs"),
    _r("experimental_verify", "experimental in fio"),
    _r("verify_state_load", "sdbench keeps no verify state between runs"),
    _a("verify_state_save", "sdbench keeps no verify state between runs (nothing is saved)"),
    _a("verify_write_sequence", "each trailer carries its write's sequence number"),
    _a("verify_header_seed", "each trailer carries the run's id"),
    _r("trim_percentage", _TRIMVERIFY),
    _r("trim_verify_zero", _TRIMVERIFY),
    _r("trim_backlog", _TRIMVERIFY),
    _r("trim_backlog_batch", _TRIMVERIFY),
    # ---- I/O logs replay
    _r("write_iolog", "recording an I/O log for replay is not supported (the lat logs record every I/O)"),
    _r("read_iolog", _REPLAY),
    _r("read_iolog_chunked", _REPLAY),
    _r("replay_no_stall", _REPLAY),
    _r("replay_redirect", _REPLAY),
    _r("replay_scale", _REPLAY),
    _r("replay_align", _REPLAY),
    _r("replay_time_scale", _REPLAY),
    _r("replay_skip", _REPLAY),
    _r("merge_blktrace_file", _REPLAY),
    _r("merge_blktrace_scalars", _REPLAY),
    _r("merge_blktrace_iters", _REPLAY),
    _r("exec_prerun", _EXEC),
    _r("exec_postrun", _EXEC),
    _r("ioscheduler", "sdbench does not change the device's I/O scheduler (a system-wide setting)"),
    # ---- zones
    _s("zonemode", "none, strided; zbd refused (zoned block devices only)", _zonemode),
    _s("zonesize", "strided: bytes per zone", _size("zonesize_bytes")),
    _r("zonecapacity", _ZONED),
    _s("zonerange", "strided: size of a zone", _size("zonerange_bytes")),
    _s("zoneskip", "strided: bytes skipped after a zone", _size("zoneskip_bytes")),
    _r("read_beyond_wp", _ZONED),
    _r("max_open_zones", _ZONED),
    _r("job_max_open_zones", _ZONED),
    _r("ignore_zone_limits", _ZONED),
    _r("zone_reset_threshold", _ZONED),
    _r("zone_reset_frequency", _ZONED),
    _r("recover_zbd_write_error", _ZONED),
    _r("write_zone_remainder", _ZONED),
    _r("fdp", _NVME),
    _r("dataplacement", _NVME, aliases=("data_placement",)),
    _r("plid_select", _NVME, aliases=("fdp_pli_select",)),
    _r("plids", _NVME, aliases=("fdp_pli",)),
    _r("dp_scheme", _NVME),
    _r("lockmem", "sdbench does not pin memory away from the system"),
    # ---- mixes, priorities, pacing
    _s("rwmixread", "share of reads in rw and randrw: exact in each pass of the region, at random places "
       "(fio draws each I/O)", _int("rwmixread")),
    _s("rwmixwrite", "share of writes in rw and randrw", _rwmixwrite),
    _r("rwmixcycle", "deprecated in fio"),
    _s("comm", "name of the job's process", _str("comm")),
    _s("nice", "nice value of the job's process", _int("nice")),
    _s("prio", "I/O priority level", _int("prio")),
    _s("prioclass", "I/O priority class", _int("prioclass")),
    _s("priohint", "I/O priority hint", _int("priohint")),
    _s("thinktime", "pause between I/Os (µs)", _time_us("thinktime_us")),
    _s("thinktime_spin", "of the pause, CPU spin (µs)", _time_us("thinktime_spin_us")),
    _r("thinkcycles", "busy loops of CPU cycles are not supported (thinktime_spin is)"),
    _s("thinktime_blocks", "I/Os between pauses", _int("thinktime_blocks")),
    _s("thinktime_blocks_type", "complete or issue", _choice("thinktime_blocks_type", {"complete": "complete",
                                                                                         "issue": "issue"})),
    _s("thinktime_iotime", "pause after this long of I/O", _time_s("thinktime_iotime_s")),
    _s("rate", "bandwidth cap per direction", _per_dir("rate_bytes_s",
                                                        lambda t, c: fs.fio_size(t, "rate", c.kb_base), 0)),
    _s("rate_min", "minimum bandwidth per direction (the job fails below it)",
       _per_dir("rate_min_bytes_s", lambda t, c: fs.fio_size(t, "rate_min", c.kb_base), 0), aliases=("ratemin",)),
    _s("rate_iops", "IOPS cap per direction", _per_dir("rate_iops", lambda t, c: fs.fio_int(t, "rate_iops",
                                                                                         suffixes=True), 0)),
    _s("rate_iops_min", "minimum IOPS per direction", _per_dir("rate_iops_min",
                                                               lambda t, c: fs.fio_int(t, "rate_iops_min",
                                                                                       suffixes=True), 0)),
    _s("rate_process", "linear or poisson", _choice("rate_process", {"linear": "linear", "poisson": "poisson"})),
    _s("rate_cycle", "averaging period of rate_min (ms)", _int("rate_cycle_ms"), aliases=("ratecycle",)),
    _s("rate_ignore_thinktime", "keep the rate after a pause", _bool("rate_ignore_thinktime"), flag=True),
    _s("max_latency", "fail the job when an I/O takes longer (µs), per direction",
       _per_dir("max_latency_us", lambda t, c: round(fs.fio_time(t, "max_latency", 1e-6) * 1e6), 0)),
    _s("latency_target", "find the deepest queue meeting this latency (µs)", _time_us("latency_target_us")),
    _s("latency_window", "time at each depth (µs)", _time_us("latency_window_us")),
    _s("latency_percentile", "share of I/Os that must meet the target", _float("latency_percentile")),
    _s("latency_run", "keep adjusting instead of stopping", _bool("latency_run"), flag=True),
    _s("invalidate", "drop the region's cached pages first", _bool("invalidate"), flag=True),
    _s("sync", "O_SYNC (1, sync) or O_DSYNC (dsync)", _sync),
    _s("write_hint", "write-life hint on the file", _write_hint),
    _a("create_serialize", "files are laid out one after another before the jobs start"),
    _a("create_fsync", "a laid-out file is fsynced"),
    _s("create_on_open", "create files when the job opens them", _bool("create_on_open"), flag=True),
    _s("create_only", "lay out the files, no I/O", _bool("create_only"), flag=True),
    _s("allow_file_create", "a file may be created", _bool("allow_file_create"), flag=True),
    _r("allow_mounted_write", "sdbench never writes to a mounted device; no option overrides that"),
    _s("pre_read", "read the region into the cache first", _bool("pre_read"), flag=True),
    _s("cpumask", "CPUs the job may run on (bit mask)", _cpumask),
    _s("cpus_allowed", "CPUs the job may run on", _cpus_allowed),
    _s("cpus_allowed_policy", "shared or split", _choice("cpus_allowed_policy", {"shared": "shared",
                                                                                   "split": "split"})),
    _s("numa_cpu_nodes", "run on these NUMA nodes' CPUs", _numa_nodes),
    _s("numa_mem_policy", "memory policy of the job", _numa_mem),
    _r("gpu_dev_id", "GPU memory is not available"),
    _s("end_fsync", "fsync at the end of the job, inside its time", _bool("fsync_on_end"), flag=True),
    _s("fsync_on_close", "fsync when the file is closed", _bool("fsync_on_close"), flag=True),
    _r("end_syncfs", "syncfs of the whole filesystem is not supported (end_fsync is)"),
    _s("unlink", "remove the job's files when it ends", _bool("unlink"), flag=True),
    _r("unlink_each_loop", "files stay between loops"),
    _s("exitall", "when one job ends, stop the others", _bool("exitall"), flag=True),
    _s("exit_what", "group, stonewall or all", _choice("exit_what", {"group": "group", "stonewall": "stonewall",
                                                                      "all": "all"})),
    _s("exitall_on_error", "when a job fails, stop the others", _bool("exitall_on_error"), flag=True),
    _s("stonewall", "wait for the jobs before this one", _bool("stonewall"), aliases=("wait_for_previous",),
       flag=True),
    _s("new_group", "start a new reporting group", _bool("new_group"), flag=True),
    _a("thread", "each job runs in a process of its own here either way (the I/O and its timing are the same)",
       flag=True),
    _s("per_job_logs", "one log file per job", _bool("per_job_logs"), flag=True),
    _s("write_bw_log", "bandwidth log (name prefix)", _log_prefix("write_bw_log"), flag=True),
    _s("write_lat_log", "slat, clat and lat logs (name prefix)", _log_prefix("write_lat_log"), flag=True),
    _s("write_iops_log", "IOPS log (name prefix)", _log_prefix("write_iops_log"), flag=True),
    _a("log_entries", "logs grow as needed"),
    _s("log_avg_msec", "log one entry per this long", _int("log_avg_msec")),
    _s("log_hist_msec", "one histogram log entry per this long", _int("log_hist_msec")),
    _a("log_hist_coarseness", "histogram logs carry fio's full set of bins"),
    _s("write_hist_log", "completion latency histogram log (name prefix)", _log_prefix("write_hist_log"),
       flag=True),
    _s("log_window_value", "avg, max or both", _log_window, aliases=("log_max_value",)),
    _s("log_offset", "logs carry offsets", _bool("log_offset"), flag=True),
    _s("log_prio", "logs carry priorities", _bool("log_prio"), flag=True),
    _s("log_issue_time", "latency logs carry issue times", _bool("log_issue_time"), flag=True),
    _r("log_compression", "logs are written uncompressed"),
    _r("log_compression_cpus", "logs are written uncompressed"),
    _r("log_store_compressed", "logs are written uncompressed"),
    _s("log_alternate_epoch", "log times as Unix epoch ms", _bool("log_unix_epoch"), aliases=("log_unix_epoch",),
       flag=True),
    _r("log_alternate_epoch_clock_id", "log times use the realtime clock's epoch"),
    _r("block_error_percentiles", _TRIMVERIFY),
    _s("bwavgtime", "bandwidth sample period (ms)", _int("bwavgtime_ms")),
    _s("iopsavgtime", "IOPS sample period (ms)", _int("iopsavgtime_ms")),
    _s("group_reporting", "report a group's jobs as one", _bool("group_reporting"), flag=True),
    _s("stats", "include the job in the reports", _bool("stats"), flag=True),
    _s("zero_buffers", "write zeros", _bool("zero_buffers"), flag=True),
    _s("refill_buffers", "fresh data for every write", _bool("refill_buffers"), flag=True),
    _s("scramble_buffers", "stamp every write so no two are alike", _bool("scramble_buffers"), flag=True),
    _s("buffer_pattern", "write this pattern", _buffer_pattern),
    _s("buffer_compress_percentage", "make writes compressible", _int("buffer_compress_percentage")),
    _s("buffer_compress_chunk", "granularity of the compressible part", _size("buffer_compress_chunk_bytes")),
    _s("dedupe_percentage", "share of writes repeating an earlier one", _int("dedupe_percentage")),
    _s("dedupe_global", "dedupe across jobs", _bool("dedupe_global"), flag=True),
    _s("dedupe_mode", "repeat or working_set", _choice("dedupe_mode", {"repeat": "repeat",
                                                                       "working_set": "working_set"})),
    _s("dedupe_working_set_percentage", "working set size", _int("dedupe_working_set_percentage")),
    _s("clat_percentiles", "completion latency percentiles", _bool("clat_percentiles"), flag=True),
    _s("lat_percentiles", "total latency percentiles", _bool("lat_percentiles"), flag=True),
    _s("slat_percentiles", "submission latency percentiles", _bool("slat_percentiles"), flag=True),
    _s("percentile_list", "the percentiles reported", lambda v, c: {"percentile_list": fs.float_list(
        _need(v, "percentile_list"), "percentile_list")}),
    _s("significant_figures", "digits of the normal report", _int("significant_figures")),
    _s("disk_util", "the disk's utilisation", _bool("disk_util"), flag=True),
    _s("gtod_reduce", "no latency or bandwidth samples", _gtod_reduce),
    _s("disable_lat", "no total latency", _bool("disable_lat"), flag=True),
    _s("disable_clat", "no completion latency", _bool("disable_clat"), flag=True),
    _s("disable_slat", "no submission latency", _bool("disable_slat"), flag=True),
    _s("disable_bw_measurement", "no bandwidth samples", _bool("disable_bw"), aliases=("disable_bw",), flag=True),
    _a("gtod_cpu", "time stamps are taken where the I/O is"),
    _r("job_start_clock_id", "job start times use the realtime clock"),
    _s("unified_rw_reporting", "none, mixed, both", _unified),
    _s("continue_on_error", "none, read, write, io, verify, all", _continue_on_error),
    _s("ignore_error", "errno lists of reads, writes, verify", _ignore_error),
    _s("error_dump", "print every error", _bool("error_dump"), flag=True),
    _r("profile", "fio's built-in profiles (tiobench, act) are not supported; write their jobs out"),
    _r("cgroup", _CRED),
    _r("cgroup_nodelete", _CRED),
    _r("cgroup_weight", _CRED),
    _r("uid", _CRED),
    _r("gid", _CRED),
    _s("kb_base", "1024 or 1000", lambda v, c: {"kb_base": fs.fio_int(_need(v, "kb_base"), "kb_base")}),
    _s("unit_base", "0, 8 (bytes) or 1 (bits)", lambda v, c: {"unit_base": fs.fio_int(_need(v, "unit_base"),
                                                                                       "unit_base")}),
    _a("hugepage-size", "buffers use normal pages"),
    _s("flow_id", "the flow the job shares", _int("flow_id")),
    _s("flow", "weight in the flow", _int("flow")),
    _a("flow_watermark", "deprecated in fio"),
    _s("flow_sleep", "pause when ahead of the flow (µs)", _int("flow_sleep_us")),
    _s("steadystate", "iops, iops_slope, bw, bw_slope, lat, lat_slope with a limit", _steadystate,
       aliases=("ss",)),
    _s("steadystate_duration", "steady-state window", _time_s("ss_dur_s"), aliases=("ss_dur",)),
    _s("steadystate_ramp_time", "time before the window", _time_s("ss_ramp_s"), aliases=("ss_ramp",)),
    _s("steadystate_check_interval", "one measurement per this long", _time_s("ss_interval_s"),
       aliases=("ss_interval",)),
    # ---- engine options of the local engines
    _s("hipri", "polled completions; refused where the device cannot poll", _bool("hipri"), flag=True),
    _s("hipri_percentage", "pvsync2: 0 or 100 % polled", _hipri_pct),
    _a("fixedbufs", "the ring's buffers are registered wherever the kernel can (READV_FIXED, Linux 6.15)", flag=True),
    _a("registerfiles", "the ring uses the job's descriptor as it is (registering it saves only a reference count "
                        "per I/O)", flag=True),
    _s("sqthread_poll", "io_uring: kernel submission polling", _bool("sqthread_poll"), flag=True),
    _a("sqthread_poll_cpu", "the kernel's polling thread runs where the kernel puts it"),
    _a("nonvectored", "the ring's reads and writes are vectored; the kernel moves the data alike"),
    _s("uncached", "buffered I/O that drops its pages (RWF_DONTCACHE)", lambda v, c: {
        "uncached": fs.fio_int(_need(v, "uncached"), "uncached") != 0}),
    _s("nowait", "RWF_NOWAIT", _bool("nowait"), flag=True),
    _s("force_async", "only 0", _force_async),
    _a("userspace_reap", "libaio's reaping option; libaio jobs run on io_uring, which reaps in user space",
       flag=True),
    _a("libaio_vectored", "the ring's I/O is vectored"),
    _r("readfua", _NVME),
    _r("writefua", _NVME),
    _r("write_mode", _NVME),
    _r("verify_mode", _NVME),
    _r("read_mode", _NVME),
    _r("cmd_type", _NVME),
    _r("cdb_len", "SCSI passthrough (sg) only"),
    _r("verify_bytchk", "SCSI passthrough (sg) only"),
    _r("md_per_io_size", _NVME),
    _r("pi_act", _NVME),
    _r("pi_chk", _NVME),
    _r("apptag", _NVME),
    _r("apptag_mask", _NVME),
    _r("deac", _NVME),
    _r("thp", "the mmap engine is not supported"),
    _s("cmdprio_percentage", "io_uring: share of I/Os with cmdprio's priority", _per_dir(
        "cmdprio_percentage", lambda t, c: fs.fio_int(t, "cmdprio_percentage"), 0, 2)),
    _s("cmdprio_class", "their priority class", _per_dir("cmdprio_class",
                                                         lambda t, c: fs.fio_int(t, "cmdprio_class"), 1, 2)),
    _s("cmdprio", "their priority level", _per_dir("cmdprio", lambda t, c: fs.fio_int(t, "cmdprio"), 0, 2)),
    _s("cmdprio_hint", "their priority hint", _per_dir("cmdprio_hint", lambda t, c: fs.fio_int(t, "cmdprio_hint"),
                                                       0, 2)),
    _s("cmdprio_bssplit", "priorities by block size", _cmdprio_bssplit),
    # ---- options of fio's built-in profiles (global in fio; no effect without profile=)
    _a("threads", "an option of fio's tiobench profile: no effect without profile=tiobench, as in fio"),
    _a("block", "an option of fio's tiobench profile: no effect without profile=tiobench, as in fio"),
    _a("numruns", "an option of fio's tiobench profile: no effect without profile=tiobench, as in fio"),
    _a("dir", "an option of fio's tiobench profile: no effect without profile=tiobench, as in fio"),
    _a("device-names", "an option of fio's act profile: no effect without profile=act, as in fio"),
    _a("load", "an option of fio's act profile: no effect without profile=act, as in fio"),
    _a("test-duration", "an option of fio's act profile: no effect without profile=act, as in fio"),
    _a("threads-per-queue", "an option of fio's act profile: no effect without profile=act, as in fio"),
    _a("read-req-num-512-blocks", "an option of fio's act profile: no effect without profile=act, as in fio"),
    _a("large-block-op-kbytes", "an option of fio's act profile: no effect without profile=act, as in fio"),
    _a("prep", "an option of fio's act profile: no effect without profile=act, as in fio"),
)

#: options by every name they answer to
BY_NAME: dict[str, FioOption] = {}
for _opt in OPTIONS:
    for _n in (_opt.name, *_opt.aliases):
        assert _n not in BY_NAME, _n
        BY_NAME[_n] = _opt

#: fio's defaults where they differ from JobConfig's declared ones: a job in fio's syntax starts from these
FIO_DEFAULTS: dict[str, Any] = {
    "direct": False,            # fio reads and writes through the page cache unless told direct=1
    "fsync_on_end": False,      # end_fsync=0
    "ioengine": "psync",
    "size_bytes": 0,            # the whole file or device
    "stonewall": False,         # jobs start together
    "fadvise_hint": "auto",     # fadvise_hint=1
    "error_dump": False,
}

#: the synchronous engines: fio caps their queue depth at 1
SYNC_ENGINES = ("psync", "sync", "pvsync", "pvsync2", "vsync")


def lookup(name: str) -> FioOption:
    """The option ``name`` names (any of its spellings), or ConfigError saying it is none of fio's."""
    opt = BY_NAME.get(name) or BY_NAME.get(name.replace("-", "_"))
    if opt is None:
        close = _closest(name)
        raise ConfigError(f"{name!r:.40} is not a fio option" + (f" (did you mean {close}?)" if close else ""))
    return opt


def _closest(name: str) -> str | None:
    import difflib

    found = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.8)
    return found[0] if found else None


def translate(options: list[tuple[str, str | None]], job: str, notes: list[str],
              base: dict[str, Any] | None = None) -> dict[str, Any]:
    """fio options of one job, in the order given (later ones win) -> JobConfig fields, over ``base`` (fio's
    defaults unless given).  A refused or unknown option raises ConfigError naming it."""
    given: dict[str, str | None] = {}
    for name, value in options:
        given[lookup(name).name] = value
    kb = given.get("kb_base")
    ctx = OptionContext(job, fs.fio_int(kb, "kb_base") if kb else 1024, given, notes)
    if ctx.kb_base not in (1000, 1024):
        raise ConfigError(f"kb_base = {ctx.kb_base}: 1024 or 1000")
    fields: dict[str, Any] = dict(FIO_DEFAULTS if base is None else base)
    engine = given.get("ioengine")
    if engine is not None:  # the engine first: its own options are refused with it
        fields.update(_apply(lookup("ioengine"), engine, ctx))
    for name, value in options:
        opt = lookup(name)
        if opt.name == "ioengine":
            continue
        fields.update(_apply(opt, value, ctx))
    if fields.get("steadystate", "none") == "none" and fields.get("ss_dur_s") and "steadystate" not in given:
        fields.update({"steadystate": "iops_slope", "ss_limit": 0.01, "ss_limit_pct": True})  # fio's default
    return fields


def _apply(opt: FioOption, value: str | None, ctx: OptionContext) -> dict[str, Any]:
    if opt.status == REFUSED:
        raise ConfigError(f"fio option {opt.name} is not supported: {opt.note}")
    if value is None and not opt.flag:
        raise ConfigError(f"fio option {opt.name} needs a value ({opt.name}=...)")
    assert opt.apply is not None
    try:
        return opt.apply(value, ctx)
    except ConfigError as e:
        msg = str(e)
        lead = re.match(r"^(\w+)(?=[: ])", msg)
        if lead and lead.group(1) != opt.name and lead.group(1) in _FIELDS:
            msg = opt.name + msg[lead.end():]  # the field a value was for -> the option the user wrote
        if not msg.startswith(opt.name) and not msg.startswith("fio option"):
            msg = f"{opt.name}: {msg}"
        raise ConfigError(msg) from None


def option_rows() -> list[tuple[str, str, str]]:
    """(names, status, note) of every option, for docs/fio.md."""
    return [(", ".join((o.name, *o.aliases)), o.status, o.note) for o in sorted(OPTIONS, key=lambda o: o.name)]


DOC_BEGIN, DOC_END = "<!-- fio-options -->", "<!-- end fio-options -->"


def markdown_table() -> str:
    """docs/fio.md's table of every option: name (and other spellings), status, what it does here or why not."""
    lines = ["| option | status | here |", "|---|---|---|"]
    for o in sorted(OPTIONS, key=lambda o: o.name):
        names = f"`{o.name}`" + "".join(f", `{a}`" for a in o.aliases)
        lines.append(f"| {names} | {o.status} | {o.note.replace('|', '/')} |")
    return "\n".join(lines)


def write_docs(path: str) -> bool:
    """Rewrite the table between the markers in ``path``; True when it changed."""
    from pathlib import Path

    p = Path(path)
    text = p.read_text()
    i, j = text.index(DOC_BEGIN) + len(DOC_BEGIN), text.index(DOC_END)
    new = text[:i] + "\n" + markdown_table() + "\n" + text[j:]
    if new != text:
        p.write_text(new)
    return new != text


if __name__ == "__main__":  # python -m sdbench.workloads.fio.fiooptions [docs/fio.md]
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "docs/fio.md"
    print(f"{'rewrote' if write_docs(target) else 'unchanged'} {target}")


__all__ = ["ACCEPTED", "BY_NAME", "FIO_DEFAULTS", "FioOption", "MAX_AMOUNT_BYTES", "OPTIONS", "REFUSED",
           "SUPPORTED", "SYNC_ENGINES", "lookup", "option_rows", "translate"]
