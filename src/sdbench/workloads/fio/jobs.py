"""Job configuration: :class:`JobConfig` (every option a job takes, declared once), sizes, TOML job files.

fio's job files and command line (:mod:`.fiofile`) are translated onto these
fields by fio's option table (:mod:`.fiooptions`); a TOML job file or a
scenario's ``[[fio.jobs]]`` names the fields directly (with a few of fio's names
as aliases).  Defaults are sdbench's own: O_DIRECT, an fdatasync at the end of a
writing job, ``ioengine = "auto"``, jobs one after another (``stonewall``).  fio's
syntax brings fio's defaults with it (:data:`.fiooptions.FIO_DEFAULTS`).

Every duration and count has an upper bound as well as a lower one, so a job
file with ``runtime = 1e300`` is refused in one line before any job runs.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...options import from_mapping, opt, read_toml_file
from ...records import MIB

RW_MODES = ("read", "write", "randread", "randwrite", "rw", "randrw", "trim", "randtrim", "trimwrite",
            "randtrimwrite")
#: fio's other spellings of rw values
_RW_VALUES = {"readwrite": "rw", "randreadwrite": "randrw"}
#: the directions a job's I/O can take, in fio's order (its logs number them 0, 1, 2)
DIRECTIONS = ("read", "write", "trim")

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_ALIASES = {"bs": "bs_bytes", "size": "size_bytes", "offset": "offset_bytes", "runtime": "runtime_s",
            "blocksize": "bs_bytes", "readwrite": "rw"}
_BYTE_FIELDS = ("bs_bytes", "size_bytes", "offset_bytes")
#: ``ioengine`` names (fio's) and the engine that runs each on a real device or file: the synchronous family as a
#: thread per I/O in flight (psync), the asynchronous family on io_uring rings; auto: see auto_queues
IOENGINES = {"auto": "auto", "psync": "psync", "sync": "psync", "pvsync": "psync", "pvsync2": "psync",
             "vsync": "psync", "io_uring": "io_uring", "libaio": "io_uring", "posixaio": "io_uring"}
#: ``ioengine = "auto"`` queues on a ring at iodepth 1 and from this depth, psync's threads between: 4 KiB random
#: reads on a RAM-backed loop device ran about 1.5x as fast at depth 1 on a ring (each I/O submitted, then waited
#: for in a second call) as with preadv, as fast or faster on 2 or 4 threads of psync than on a ring, and from 8
#: on the ring wins, by more the deeper the queue
AUTO_QUEUED_MIN_IODEPTH = 8


def auto_queues(iodepth: int) -> bool:
    """Whether ``ioengine = "auto"`` runs a job of this depth on a ring (see AUTO_QUEUED_MIN_IODEPTH)."""
    return iodepth == 1 or iodepth >= AUTO_QUEUED_MIN_IODEPTH

#: the longest any duration may be: 30 days (a month-long soak test is the longest anyone plans)
MAX_DURATION_S = 30 * 86400
MAX_DURATION_US = MAX_DURATION_S * 1_000_000
#: the largest region or amount a job names: 1 PiB of region, 64 PiB of I/O
MAX_REGION_BYTES = 1 << 50
MAX_AMOUNT_BYTES = 1 << 56
MAX_BS_BYTES = 64 * MIB
#: fio's default latency percentiles (its percentile_list)
FIO_PERCENTILES = (1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
                   99.99)


def parse_size(value: int | str, what: str = "size") -> int:
    """``4096``, ``"4k"``, ``"1M"``, ``"64MiB"``, ``"1g"``, ``"1e6"``, ``"0x100000"`` -> bytes (k, M, G, T, P are
    binary; an exponent is decimal).  fio's job files and command line follow fio's own rules instead
    (:func:`.fiosyntax.fio_size`, where ``kb_base`` decides)."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    if re.fullmatch(r"0[xX][0-9a-fA-F]{1,16}", text):  # an address as a disk tool prints it
        n = int(text, 16)
        if n >= 1 << 63:
            raise ConfigError(f"{what}: {value!r} is out of range (at most 2^63 B)")
        return n
    m = _SIZE_RE.match(str(value))
    if not m:
        shown = str(value) if len(str(value)) <= 40 else str(value)[:37] + "..."
        raise ConfigError(f"{what}: {shown!r} is not a size (e.g. 4096, 4k, 1M, 64MiB, 1e6, 0x100000)")
    mult = 1024 ** " kmgtp".index(m.group(2).lower() or " ")
    n = float(m.group(1)) * mult
    if n != n or n >= 1 << 63:
        raise ConfigError(f"{what}: {value!r} is out of range (at most 2^63 B)")
    if not n.is_integer():
        raise ConfigError(f"{what}: {value!r} is not a whole number of bytes")
    return int(n)


@dataclass(frozen=True)
class BlockSizeShare:
    """One block size of a split (fio's ``bssplit=4k/60:64k/40``) and the share of I/Os that use it."""

    size_bytes: int = opt(4096, unit="B", min=512, max=MAX_BS_BYTES, help="bytes per I/O")
    percent: float = opt(100.0, unit="%", min=0.0, max=100.0, help="share of the direction's I/Os")


@dataclass(frozen=True)
class AccessZone:
    """One zone of a zoned access distribution (fio's ``random_distribution=zoned:60/10:...``): ``access_pct`` of
    the random I/Os go to the next ``size_pct`` % of the region (zoned) or ``size_bytes`` of it (zoned_abs)."""

    access_pct: float = opt(100.0, unit="%", min=0.0, max=100.0, help="share of the random I/Os")
    size_pct: float = opt(0.0, unit="%", min=0.0, max=100.0, help="zoned: share of the region")
    size_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES, help="zoned_abs: bytes of the region")


@dataclass(frozen=True)
class CmdPrioShare:
    """fio's ``cmdprio_bssplit`` entry: ``percent`` of the I/Os of ``size_bytes`` in ``direction`` go with I/O
    priority class ``prio_class``, level ``level`` and hint ``hint``."""

    direction: str = opt("read", choices=("read", "write"), help="the direction the entry applies to")
    size_bytes: int = opt(4096, unit="B", min=512, max=MAX_BS_BYTES, help="the block size it applies to")
    percent: float = opt(0.0, unit="%", min=0.0, max=100.0, help="share of those I/Os with the priority")
    prio_class: int = opt(1, min=0, max=3, help="I/O priority class (1 real time, 2 best effort, 3 idle)")
    level: int = opt(0, min=0, max=7, help="priority level within the class (0 highest)")
    hint: int = opt(0, min=0, max=7, help="priority hint (command duration limit index)")


_PER_DIRECTION = dict(min=0, max=MAX_AMOUNT_BYTES)


@dataclass(frozen=True)
class JobConfig:
    # ---- identity and target -----------------------------------------------------------------------------
    name: str = opt("job", help="job name; rows are labelled '<name> read' / '<name> write'")
    description: str = opt("", help="free text describing the job (shown in the reports)")
    filename: str = opt("", help="fio's filename: on --device the device itself; on --dir a file in it ('' : one "
                                 "named after the job)")
    directory: str = opt("", help="fio's directory: on --dir it must name that directory")
    # ---- what the I/O does ---------------------------------------------------------------------------------
    rw: str = opt("read", choices=RW_MODES,
                  help="read, write, trim; randread, randwrite, randtrim; rw, randrw: mixed; trimwrite, "
                       "randtrimwrite: trim, then write")
    rwmixread: int = opt(50, unit="%", min=0, max=100, help="share of reads in rw and randrw")
    rw_skip_bytes: int = opt(0, unit="B", min=-MAX_REGION_BYTES, max=MAX_REGION_BYTES,
                             help="sequential: bytes skipped after each I/O (fio's rw=write:4k); negative: backwards")
    rw_random_run: int = opt(0, min=0, max=1_000_000,
                             help="random: I/Os per random offset (fio's rw=randread:8); the others follow it "
                                  "(rw_sequencer)")
    rw_sequencer: str = opt("sequential", choices=("sequential", "identical"),
                            help="with rw_random_run: the I/Os after a random offset follow it or repeat it")
    bs_bytes: int = opt(4096, unit="B", min=512, max=MAX_BS_BYTES, help="bytes per I/O (reads; writes and trims "
                                                                        "unless they have their own)")
    write_bs_bytes: int = opt(0, unit="B", min=0, max=MAX_BS_BYTES, help="bytes per write (0: bs_bytes)")
    trim_bs_bytes: int = opt(0, unit="B", min=0, max=MAX_BS_BYTES, help="bytes per trim (0: as writes)")
    bssplit: tuple[BlockSizeShare, ...] = opt((), help="reads (and writes, trims without their own): several "
                                                       "block sizes, each with its share of the I/Os")
    write_bssplit: tuple[BlockSizeShare, ...] = opt((), help="writes: several block sizes with their shares")
    trim_bssplit: tuple[BlockSizeShare, ...] = opt((), help="trims: several block sizes with their shares")
    bs_is_seq_rand: bool = opt(False, help="the read sizes go to sequential I/O, the write sizes to random I/O")
    blockalign_bytes: int = opt(0, unit="B", min=0, max=MAX_BS_BYTES,
                                help="random offsets are multiples of this (0: the smallest block size)")
    size_bytes: int = opt(64 * MIB, unit="B", min=0, max=MAX_REGION_BYTES,
                          help="region size (0: to the end of the target)")
    size_pct: float = opt(0.0, unit="%", min=0.0, max=100.0, help="region size as a share of the target (0: "
                                                                  "size_bytes)")
    offset_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES, help="start of the region in the target")
    offset_pct: float = opt(0.0, unit="%", min=0.0, max=100.0, help="start of the region as a share of the "
                                                                    "target (0: offset_bytes)")
    offset_align_bytes: int = opt(0, unit="B", min=0, max=MAX_BS_BYTES,
                                  help="a share-of-target offset is rounded down to this (0: the block size)")
    offset_increment_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES,
                                      help="each clone of numjobs starts this much further (clone n: offset + n x "
                                           "increment)")
    offset_increment_pct: float = opt(0.0, unit="%", min=0.0, max=100.0,
                                      help="the clones' increment as a share of the target")
    io_size_bytes: int = opt(0, unit="B", min=0, max=MAX_AMOUNT_BYTES,
                             help="bytes to move, going round the region as often as needed (0: the region once)")
    number_ios: int = opt(0, min=0, max=1 << 48, help="stop after this many I/Os (0: no limit)")
    filesize_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES,
                              help="directory targets: size of each file (0: the region divided by nrfiles)")
    filesize_max_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES,
                                  help="directory targets: files get a random size up to this (0: filesize_bytes)")
    nrfiles: int = opt(1, min=1, max=1024, help="directory targets: files per job")
    file_service_type: str = opt("roundrobin", choices=("roundrobin", "random", "sequential"),
                                 help="with several files: the next file in turn, a random one, or each to the end")
    file_service_ios: int = opt(1, min=1, max=1_000_000, help="I/Os to a file before the next is chosen")
    fill_device: bool = opt(False, help="write until the target is full (a directory: until it has no space)")
    zonemode: str = opt("none", choices=("none", "strided"),
                        help="strided: zonesize bytes of each zonerange, then zoneskip bytes skipped")
    zonesize_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES, help="strided: bytes of I/O per zone")
    zonerange_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES, help="strided: size of a zone (0: "
                                                                             "zonesize)")
    zoneskip_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES, help="strided: bytes skipped after a zone")
    # ---- random offsets --------------------------------------------------------------------------------------
    norandommap: bool = opt(False, help="random offsets with replacement (some blocks twice, some never)")
    randrepeat: bool = opt(True, help="the same random sequence every run (false: a new seed each run)")
    random_generator: str = opt("tausworthe", choices=("tausworthe", "lfsr", "tausworthe64"),
                                help="lfsr never repeats an offset, even with norandommap; the others are "
                                     "pseudo-random draws")
    random_distribution: str = opt("random", choices=("random", "zipf", "pareto", "normal", "zoned", "zoned_abs"),
                                   help="how random offsets spread over the region (uniform, or skewed)")
    distribution_param: float = opt(0.0, min=0.0, max=1e6,
                                    help="zipf: theta; pareto: power (0..1); normal: deviation in % of the region")
    distribution_center: float = opt(-1.0, min=-1.0, max=1.0,
                                     help="zipf, pareto, normal: where the hot spot sits (0..1; -1: fio's default)")
    zones: tuple[AccessZone, ...] = opt((), help="zoned, zoned_abs: the zones in region order")
    percentage_random: int = opt(100, unit="%", min=0, max=100, help="random jobs: share of random I/Os (the "
                                                                     "others sequential)")
    sprandom: bool = opt(False, help="SSD preconditioning (fio's sprandom): the physical capacity written once, "
                                     "invalid blocks spread as at steady state")
    spr_op: float = opt(0.15, min=0.001, max=0.999, help="sprandom: over-provisioning (0..1)")
    spr_num_regions: int = opt(100, min=1, max=100_000, help="sprandom: regions of the device")
    spr_cs_bytes: int = opt(0, unit="B", min=0, max=MAX_REGION_BYTES, help="sprandom: the device's write cache "
                                                                          "(0: none)")
    seed: int = opt(0, min=0, max=(1 << 63) - 1, help="seed for the random order and the data")
    # ---- queue and engine --------------------------------------------------------------------------------------
    iodepth: int = opt(1, min=1, max=256, help="I/Os in flight (psync: a thread each; io_uring: queued on rings)")
    iodepth_batch_submit: int = opt(0, min=0, max=256, help="io_uring: I/Os prepared per submission (0: sdbench's "
                                                           "default)")
    iodepth_batch_complete_min: int = opt(1, min=0, max=256, help="io_uring: completions waited for at a time")
    iodepth_low: int = opt(0, min=0, max=256, help="io_uring: refill the queue when it has drained to this (0: "
                                                   "refill at once)")
    ioengine: str = opt("auto", choices=tuple(IOENGINES),
                        help=f"psync (sync, pvsync...), io_uring (libaio, posixaio); auto: io_uring at iodepth 1 and "
                             f"from {AUTO_QUEUED_MIN_IODEPTH}, psync between")
    hipri: bool = opt(False, help="polled completions (io_uring IOPOLL, pvsync2 RWF_HIPRI)")
    sqthread_poll: bool = opt(False, help="io_uring: a kernel thread polls the submission queue")
    nowait: bool = opt(False, help="RWF_NOWAIT: fail instead of blocking (the failures count as errors)")
    uncached: bool = opt(False, help="buffered I/O that drops its pages after use (RWF_DONTCACHE, Linux 6.14)")
    # ---- I/O type and syncing --------------------------------------------------------------------------------
    direct: bool = opt(True, help="O_DIRECT: bypass the page cache")
    atomic: bool = opt(False, help="atomic writes (RWF_ATOMIC): a write lands whole or not at all")
    sync_mode: str = opt("none", choices=("none", "sync", "dsync"), help="open with O_SYNC or O_DSYNC")
    fsync_every: int = opt(0, min=0, max=1 << 40, help="fsync after this many writes (0: never)")
    fdatasync_every: int = opt(0, min=0, max=1 << 40, help="fdatasync after this many writes (0: never)")
    fsync_on_end: bool = opt(True, help="fdatasync at the end of a job that writes (inside its time)")
    fsync_on_close: bool = opt(False, help="fsync when the job closes its file (outside its time)")
    invalidate: bool = opt(True, help="drop the region's cached pages before the job")
    pre_read: bool = opt(False, help="read the region into the page cache before the job (buffered I/O)")
    fadvise_hint: str = opt("off", choices=("off", "auto", "sequential", "random"),
                            help="posix_fadvise at the start: auto picks sequential or random by rw")
    write_hint: str = opt("none", choices=("none", "short", "medium", "long", "extreme"),
                          help="write-life hint on the file (F_SET_RW_HINT)")
    # ---- time --------------------------------------------------------------------------------------------------
    runtime_s: float = opt(0.0, unit="s", min=0.0, max=MAX_DURATION_S,
                           help="stop the job after this long, all loops together (0: no limit)")
    time_based: bool = opt(False, help="repeat the region until runtime_s has passed")
    ramp_time_s: float = opt(0.0, unit="s", min=0.0, max=MAX_DURATION_S,
                             help="run this long before measuring (added to runtime_s)")
    ramp_size_bytes: int = opt(0, unit="B", min=0, max=MAX_AMOUNT_BYTES, help="move this many bytes before "
                                                                              "measuring")
    startdelay_s: float = opt(0.0, unit="s", min=0.0, max=MAX_DURATION_S, help="wait this long before the "
                                                                                      "job starts")
    startdelay_max_s: float = opt(0.0, unit="s", min=0.0, max=MAX_DURATION_S,
                                  help="a random delay between startdelay_s and this (0: startdelay_s)")
    loops: int = opt(1, min=1, max=1_000_000, help="run the job this many times")
    thinktime_us: int = opt(0, unit="µs", min=0, max=MAX_DURATION_US, help="pause after I/Os (thinktime_blocks "
                                                                           "of them)")
    thinktime_spin_us: int = opt(0, unit="µs", min=0, max=MAX_DURATION_US,
                                 help="of the pause, spin the CPU this long, sleep the rest")
    thinktime_blocks: int = opt(1, min=1, max=1 << 40, help="I/Os between pauses")
    thinktime_blocks_type: str = opt("complete", choices=("complete", "issue"),
                                     help="count completed or issued I/Os between pauses")
    thinktime_iotime_s: float = opt(0.0, unit="s", min=0.0, max=MAX_DURATION_S,
                                    help="pause after this long of I/O as well (0: by count only)")
    rate_bytes_s: tuple[int, ...] = opt((0, 0, 0), unit="B/s", **_PER_DIRECTION,
                                        help="bandwidth cap of reads, writes, trims (0: none)")
    rate_min_bytes_s: tuple[int, ...] = opt((0, 0, 0), unit="B/s", **_PER_DIRECTION,
                                            help="the job fails when reads, writes, trims fall below this")
    rate_iops: tuple[int, ...] = opt((0, 0, 0), unit="IOPS", min=0, max=1 << 40,
                                     help="IOPS cap of reads, writes, trims (0: none)")
    rate_iops_min: tuple[int, ...] = opt((0, 0, 0), unit="IOPS", min=0, max=1 << 40,
                                         help="the job fails when reads, writes, trims fall below this")
    rate_process: str = opt("linear", choices=("linear", "poisson"),
                            help="capped I/O is issued at even intervals or as a Poisson process")
    rate_cycle_ms: int = opt(1000, unit="ms", min=1, max=MAX_DURATION_S * 1000,
                             help="rate_min and rate_iops_min average over this long")
    rate_ignore_thinktime: bool = opt(False, help="after a pause, keep the rate instead of catching up")
    max_latency_us: tuple[int, ...] = opt((0, 0, 0), unit="µs", min=0, max=MAX_DURATION_US,
                                          help="the job fails when a read, write, trim takes longer (0: no limit)")
    latency_target_us: int = opt(0, unit="µs", min=0, max=MAX_DURATION_US,
                                 help="find the deepest queue whose latency stays below this (0: off)")
    latency_window_us: int = opt(0, unit="µs", min=0, max=MAX_DURATION_US, help="latency_target: time at each depth")
    latency_percentile: float = opt(100.0, unit="%", min=0.001, max=100.0,
                                    help="latency_target: share of I/Os that must meet it")
    latency_run: bool = opt(False, help="latency_target: keep running and adjusting instead of stopping")
    steadystate: str = opt("none", choices=("none", "iops", "iops_slope", "bw", "bw_slope", "lat", "lat_slope"),
                           help="stop once this measure is steady over ss_dur_s")
    ss_limit: float = opt(0.0, min=0.0, max=1e18, help="steadystate: the allowed spread or slope")
    ss_limit_pct: bool = opt(False, help="steadystate: ss_limit is a % of the window's mean")
    ss_dur_s: float = opt(0.0, unit="s", min=0.0, max=MAX_DURATION_S, help="steadystate: the window")
    ss_ramp_s: float = opt(0.0, unit="s", min=0.0, max=MAX_DURATION_S, help="steadystate: time before "
                                                                                   "the window starts")
    ss_interval_s: float = opt(1.0, unit="s", min=0.001, max=MAX_DURATION_S,
                               help="steadystate: one measurement per this long")
    flow_id: int = opt(0, min=0, max=1 << 31, help="jobs with the same flow_id share their flow")
    flow: int = opt(0, min=-(1 << 20), max=1 << 20, help="weight of the job in its flow (0: no flow control)")
    flow_sleep_us: int = opt(0, unit="µs", min=0, max=MAX_DURATION_US,
                             help="pause when the job is ahead of its share of the flow (0: 1 ms)")
    # ---- jobs side by side -------------------------------------------------------------------------------------
    numjobs: int = opt(1, min=1, max=256, help="clones of the job, running side by side")
    stonewall: bool = opt(True, help="wait for the jobs before this one to end (false: start with them)")
    new_group: bool = opt(False, help="start a new reporting group")
    wait_for: str = opt("", help="start once the job of this name (every clone) has ended")
    group_reporting: bool = opt(False, help="report the jobs of a reporting group as one")
    exitall: bool = opt(False, help="when one job ends, stop the others (exit_what)")
    exit_what: str = opt("group", choices=("group", "stonewall", "all"), help="exitall: which jobs stop")
    exitall_on_error: bool = opt(False, help="when a job fails, stop the others")
    stats: bool = opt(True, help="include the job in the reports")
    cpus_allowed: str = opt("", help="CPUs the job may run on, e.g. 0,2-3 ('' : any)")
    cpus_allowed_policy: str = opt("shared", choices=("shared", "split"),
                                   help="split: each job one CPU of the set, in turn")
    numa_cpu_nodes: str = opt("", help="run on the CPUs of these NUMA nodes")
    numa_mem_policy: str = opt("", help="memory policy: default, local, prefer:N, bind:LIST, interleave:LIST")
    nice: int = opt(0, min=-20, max=19, help="nice value of the job's process")
    prio: int = opt(-1, min=-1, max=7, help="I/O priority level (0 highest; -1: unchanged)")
    prioclass: int = opt(-1, min=-1, max=3, help="I/O priority class: 1 real time, 2 best effort, 3 idle (-1: "
                                                 "unchanged)")
    priohint: int = opt(0, min=0, max=7, help="I/O priority hint (command duration limit index)")
    cmdprio_percentage: tuple[int, ...] = opt((0, 0), unit="%", min=0, max=100,
                                              help="io_uring: share of reads, writes sent with cmdprio's priority")
    cmdprio_class: tuple[int, ...] = opt((1, 1), min=0, max=3, help="priority class of those reads, writes")
    cmdprio: tuple[int, ...] = opt((0, 0), min=0, max=7, help="priority level of those reads, writes")
    cmdprio_hint: tuple[int, ...] = opt((0, 0), min=0, max=7, help="priority hint of those reads, writes")
    cmdprio_bssplit: tuple[CmdPrioShare, ...] = opt((), help="io_uring: priorities by block size")
    comm: str = opt("", help="name of the job's process")
    # ---- verify ------------------------------------------------------------------------------------------------
    verify: str = opt("none", choices=("none", "crc32c", "meta", "pattern"),
                      help="crc32c: a trailer (offset, sequence, run id, CRC) on every written block; meta: no CRC; "
                           "pattern: verify_pattern")
    verify_pattern_hex: str = opt("", help="bytes of verify=pattern (and of meta's payload), as hex digits")
    do_verify: bool = opt(True, help="read back and check what was written after the job")
    verify_interval_bytes: int = opt(0, unit="B", min=0, max=MAX_BS_BYTES,
                                     help="one trailer per this many bytes of a block (0: one per block)")
    verify_fatal: bool = opt(False, help="stop at the first bad block")
    verify_dump: bool = opt(False, help="write each bad block, as read and as expected, to files")
    verify_backlog: int = opt(0, min=0, max=1 << 40, help="check written blocks every this many writes (0: at the "
                                                          "end)")
    # ---- buffers -----------------------------------------------------------------------------------------------
    zero_buffers: bool = opt(False, help="write zeros")
    refill_buffers: bool = opt(False, help="fresh random data for every write")
    scramble_buffers: bool = opt(True, help="stamp every write so that no two are alike (defeats dedupe)")
    buffer_pattern_hex: str = opt("", help="write this pattern, as hex digits")
    buffer_compress_percentage: int = opt(0, unit="%", min=0, max=100, help="make writes this compressible")
    buffer_compress_chunk_bytes: int = opt(512, unit="B", min=1, max=MAX_BS_BYTES,
                                           help="granularity of the compressible part")
    dedupe_percentage: int = opt(0, unit="%", min=0, max=100, help="share of writes that repeat an earlier one")
    dedupe_mode: str = opt("repeat", choices=("repeat", "working_set"),
                           help="repeat the last buffers, or draw from a working set of them")
    dedupe_working_set_percentage: int = opt(5, unit="%", min=0, max=100,
                                             help="working_set: the set as a share of the region")
    dedupe_global: bool = opt(False, help="dedupe across the jobs, not only within one")
    # ---- logs and reports --------------------------------------------------------------------------------------
    write_bw_log: str = opt("", help="bandwidth log: file name prefix ('' : none)")
    write_lat_log: str = opt("", help="latency logs (slat, clat, lat): file name prefix")
    write_iops_log: str = opt("", help="IOPS log: file name prefix")
    write_hist_log: str = opt("", help="completion latency histogram log: file name prefix")
    log_avg_msec: int = opt(0, unit="ms", min=0, max=MAX_DURATION_S * 1000,
                            help="one log entry per this long (0: one per I/O)")
    log_hist_msec: int = opt(0, unit="ms", min=0, max=MAX_DURATION_S * 1000, help="one histogram entry per this "
                                                                                 "long")
    log_window_value: str = opt("avg", choices=("avg", "max", "both"), help="log_avg_msec: the mean, maximum or "
                                                                           "both")
    log_offset: bool = opt(False, help="logs carry each I/O's offset")
    log_prio: bool = opt(False, help="logs carry each I/O's priority")
    log_issue_time: bool = opt(False, help="latency logs carry each I/O's issue time")
    log_unix_epoch: bool = opt(False, help="log times are Unix epoch ms, not ms since the job started")
    per_job_logs: bool = opt(True, help="one log per job (false: jobs of one name share the file)")
    clat_percentiles: bool = opt(True, help="report completion latency percentiles")
    lat_percentiles: bool = opt(False, help="report total latency percentiles")
    slat_percentiles: bool = opt(False, help="report submission latency percentiles")
    percentile_list: tuple[float, ...] = opt(FIO_PERCENTILES, unit="%", min=0.0001, max=100.0,
                                             help="the latency percentiles reported")
    significant_figures: int = opt(4, min=1, max=10, help="digits of fio's normal report")
    unified_rw_reporting: str = opt("none", choices=("none", "mixed", "both"),
                                    help="report directions apart, summed as one, or both")
    disk_util: bool = opt(True, help="report the disk's utilisation (Linux block devices)")
    disable_lat: bool = opt(False, help="no total latency figures")
    disable_clat: bool = opt(False, help="no completion latency figures")
    disable_slat: bool = opt(False, help="no submission latency figures")
    disable_bw: bool = opt(False, help="no bandwidth and IOPS samples")
    kb_base: int = opt(1024, choices=(1000, 1024), help="1024: k, M, G are binary (fio's default); 1000: decimal")
    unit_base: int = opt(0, choices=(0, 1, 8), help="reports in bytes (0, 8) or bits (1)")
    bwavgtime_ms: int = opt(500, unit="ms", min=1, max=MAX_DURATION_S * 1000, help="one bandwidth sample per "
                                                                                   "this long")
    iopsavgtime_ms: int = opt(500, unit="ms", min=1, max=MAX_DURATION_S * 1000, help="one IOPS sample per this "
                                                                                     "long")
    # ---- errors ------------------------------------------------------------------------------------------------
    continue_on_error: str = opt("none", choices=("none", "read", "write", "io", "verify", "all"),
                                 help="errors a job counts and goes on after (EIO, EILSEQ; ignore_* for others)")
    ignore_read_errors: tuple[int, ...] = opt((), min=1, max=4095, help="errno values a read may fail with and "
                                                                         "the job go on")
    ignore_write_errors: tuple[int, ...] = opt((), min=1, max=4095, help="errno values a write may fail with")
    ignore_verify_errors: tuple[int, ...] = opt((), min=1, max=4095, help="errno values verify may fail with")
    error_dump: bool = opt(True, help="print every error, also those the job goes on after")
    # ---- files -------------------------------------------------------------------------------------------------
    create_on_open: bool = opt(False, help="directory targets: create files when the job opens them")
    create_only: bool = opt(False, help="directory targets: lay out the files and do no I/O")
    allow_file_create: bool = opt(True, help="directory targets: a file may be created (false: it must exist)")
    unlink: bool = opt(False, help="directory targets: remove the job's files when it ends")
    file_append: bool = opt(False, help="directory targets: the region starts at the end of the file")

    def __post_init__(self) -> None:
        if self.rw not in RW_MODES:
            raise ConfigError(f"rw = {self.rw!r} is not one of {', '.join(RW_MODES)}")
        for what, bs in (("bs", self.bs_bytes), ("write bs", self.write_bs_bytes), ("trim bs", self.trim_bs_bytes)):
            if bs % 512 or (what == "bs" and bs < 512):
                raise ConfigError(f"{what} = {bs} B must be a multiple of 512 B")
        for what, split in (("bssplit", self.bssplit), ("write bssplit", self.write_bssplit),
                            ("trim bssplit", self.trim_bssplit)):
            _check_split(what, [(s.size_bytes, s.percent) for s in split])
        if self.size_bytes and self.size_bytes < self.min_bs and not self.size_pct:
            raise ConfigError(f"size = {self.size_bytes} B is smaller than one block (bs = {self.min_bs} B)")
        if self.offset_bytes % 512:
            raise ConfigError(f"offset = {self.offset_bytes} B must be a multiple of 512 B")
        for what, v in (("offset_increment", self.offset_increment_bytes), ("blockalign", self.blockalign_bytes),
                        ("offset_align", self.offset_align_bytes), ("verify_interval", self.verify_interval_bytes)):
            if v % 512:
                raise ConfigError(f"{what} = {v} B must be a multiple of 512 B")
        if self.time_based and self.runtime_s <= 0:
            raise ConfigError("time_based needs a runtime above 0 s (fio: runtime; a TOML job: runtime_s)")
        if self.verify != "none" and not (self.writes or self.reads):
            raise ConfigError(f"job {self.name}: verify needs a job that writes or reads")
        if self.verify == "pattern" and not self.verify_pattern_hex:
            raise ConfigError(f"job {self.name}: verify = pattern needs verify_pattern")
        if self.verify != "none" and self.rw_skip_bytes % self.bs_for("write"):
            raise ConfigError(f"job {self.name}: verify with rw's skip of {self.rw_skip_bytes} B needs a skip that is "
                              f"a multiple of the block size {self.bs_for('write')} B")
        if self.verify != "none" and self.has_split:
            raise ConfigError(f"job {self.name}: verify needs one block size per direction (not bssplit)")
        if self.verify_interval_bytes and self.bs_for("write") % self.verify_interval_bytes:
            raise ConfigError(f"job {self.name}: verify_interval = {self.verify_interval_bytes} B does not divide "
                              f"the block size {self.bs_for('write')} B")
        for hexes, what in ((self.verify_pattern_hex, "verify_pattern"), (self.buffer_pattern_hex, "buffer_pattern")):
            if hexes and (len(hexes) % 2 or not re.fullmatch(r"[0-9a-fA-F]*", hexes) or len(hexes) > 2 * 4096):
                raise ConfigError(f"job {self.name}: {what} must be 1..4096 bytes as hex digits")
        for what, t in (("rate", self.rate_bytes_s), ("rate_min", self.rate_min_bytes_s), ("rate_iops", self.rate_iops),
                        ("rate_iops_min", self.rate_iops_min), ("max_latency", self.max_latency_us)):
            if len(t) != 3:
                raise ConfigError(f"job {self.name}: {what} takes reads, writes and trims (3 values), not {len(t)}")
        for what, t in (("cmdprio_percentage", self.cmdprio_percentage), ("cmdprio_class", self.cmdprio_class),
                        ("cmdprio", self.cmdprio), ("cmdprio_hint", self.cmdprio_hint)):
            if len(t) != 2:
                raise ConfigError(f"job {self.name}: {what} takes reads and writes (2 values), not {len(t)}")
        if any(self.cmdprio_percentage) and self.cmdprio_bssplit:
            raise ConfigError(f"job {self.name}: cmdprio_percentage and cmdprio_bssplit exclude each other")
        if self.random_distribution in ("zoned", "zoned_abs"):
            if not self.zones:
                raise ConfigError(f"job {self.name}: random_distribution = {self.random_distribution} needs zones")
            total = sum(z.access_pct for z in self.zones)
            if abs(total - 100.0) > 1e-6:
                raise ConfigError(f"job {self.name}: the zones' access shares add up to {total:g} %, not 100 %")
            if self.random_distribution == "zoned" and sum(z.size_pct for z in self.zones) > 100.0 + 1e-6:
                raise ConfigError(f"job {self.name}: the zones cover more than 100 % of the region")
        if self.random_distribution == "zipf" and (self.distribution_param <= 0 or self.distribution_param == 1.0):
            raise ConfigError(f"job {self.name}: zipf needs a theta > 0 other than 1")
        if self.random_distribution == "pareto" and not 0 < self.distribution_param < 1:
            raise ConfigError(f"job {self.name}: pareto needs a power between 0 and 1")
        if self.random_distribution == "normal" and not 0 < self.distribution_param <= 100:
            raise ConfigError(f"job {self.name}: normal needs a deviation between 0 and 100 %")
        if self.startdelay_max_s and self.startdelay_max_s < self.startdelay_s:
            raise ConfigError(f"job {self.name}: startdelay range {self.startdelay_s:g}-{self.startdelay_max_s:g} s "
                              f"runs backwards")
        if self.filesize_max_bytes and self.filesize_max_bytes < self.filesize_bytes:
            raise ConfigError(f"job {self.name}: filesize range runs backwards")
        if self.latency_target_us and not self.latency_window_us:
            raise ConfigError(f"job {self.name}: latency_target needs latency_window")
        if self.steadystate != "none" and not self.ss_dur_s:
            raise ConfigError(f"job {self.name}: steadystate needs ss_dur (the window it judges)")
        if self.zonemode == "strided" and not self.zonesize_bytes:
            raise ConfigError(f"job {self.name}: zonemode = strided needs zonesize")
        if self.sprandom and self.rw != "randwrite":
            raise ConfigError(f"job {self.name}: sprandom needs rw = randwrite")
        if self.sprandom and self.random_generator not in ("tausworthe", "lfsr"):
            raise ConfigError(f"job {self.name}: sprandom needs random_generator = lfsr")
        if self.numjobs > 1 and self.wait_for == self.name:
            raise ConfigError(f"job {self.name}: wait_for names the job itself")

    # ---- derived views ---------------------------------------------------------------------------------------
    @property
    def writes(self) -> bool:
        return self.rw in ("write", "randwrite", "rw", "randrw", "trimwrite", "randtrimwrite")

    @property
    def reads(self) -> bool:
        return self.rw in ("read", "randread", "rw", "randrw")

    @property
    def trims(self) -> bool:
        return self.rw in ("trim", "randtrim", "trimwrite", "randtrimwrite")

    @property
    def random(self) -> bool:
        return self.rw.startswith("rand")

    @property
    def directions(self) -> tuple[str, ...]:
        """The directions the job's I/O takes, in fio's order."""
        return tuple(d for d, on in zip(DIRECTIONS, (self.reads, self.writes, self.trims)) if on)

    def bs_for(self, direction: str) -> int:
        """The fixed block size of a direction (fio's bs=read,write,trim: a missing one is the one before)."""
        if direction == "read":
            return self.bs_bytes
        w = self.write_bs_bytes or self.bs_bytes
        return w if direction == "write" else (self.trim_bs_bytes or w)

    def split_for(self, direction: str) -> tuple[tuple[int, float], ...]:
        """(size, percent) of a direction's block sizes: its split, the one before it, or its fixed size."""
        order = {"read": (self.bssplit,), "write": (self.write_bssplit, self.bssplit),
                 "trim": (self.trim_bssplit, self.write_bssplit, self.bssplit)}[direction]
        for split in order:
            if split:
                return tuple((s.size_bytes, s.percent) for s in split)
        return ((self.bs_for(direction), 100.0),)

    @property
    def has_split(self) -> bool:
        return any(len(self.split_for(d)) > 1 for d in DIRECTIONS)

    @property
    def min_bs(self) -> int:
        """The smallest block size of the directions the job moves (fio's min_bs)."""
        return min(s for d in (self.directions or ("read",)) for s, _ in self.split_for(d))

    @property
    def max_bs(self) -> int:
        return max(s for d in (self.directions or ("read",)) for s, _ in self.split_for(d))


def _check_split(what: str, split: list[tuple[int, float]]) -> None:
    if not split:
        return
    if len(split) > 64:
        raise ConfigError(f"{what}: at most 64 block sizes, not {len(split)}")
    total = sum(p for _, p in split)
    if abs(total - 100.0) > 1e-6:
        raise ConfigError(f"{what}: the shares add up to {total:g} %, not 100 %")
    for size, _ in split:
        if size % 512:
            raise ConfigError(f"{what}: block size {size} B must be a multiple of 512 B")


def job_from_mapping(data: dict[str, Any], where: str = "job") -> JobConfig:
    """A JobConfig from a TOML table or CLI values, accepting fio names (bs, size, offset, runtime)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = _ALIASES.get(k, k)
        if key in out:
            raise ConfigError(f"{where}: {k} given twice")
        if key in _BYTE_FIELDS and isinstance(v, str):
            v = parse_size(v, f"{where}.{k}")
        if key == "rw" and isinstance(v, str):
            v = _RW_VALUES.get(v, v)
        out[key] = v
    return from_mapping(JobConfig, out, where)


def load_toml_jobs(path: str | os.PathLike[str]) -> list[JobConfig]:
    """Jobs from a TOML job file: top-level keys (or a [global] table) are defaults, each other table a job."""
    p = Path(path)
    data = read_toml_file(p, "job file")
    glob = {k: v for k, v in data.items() if not isinstance(v, dict)}
    if isinstance(data.get("global"), dict):
        glob.update(data["global"])
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict) and k != "global"]
    if not tables:
        tables = [(p.stem, {})]
    jobs = []
    for name, table in tables:
        merged = {"name": name, **glob, **table}
        jobs.append(job_from_mapping(merged, f"{p.name}:{name}"))
    return jobs
