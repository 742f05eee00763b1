"""fs_tests: the MicroPython cached SD driver test (knowledge/protocols.md §3).

For each (filesystem, cache size, read-ahead, policy) of the grid in
``[fs_tests]``: a fresh card, format, mount, write every file of the workload
in ``chunk_bytes`` calls (files in an order shuffled once with the scenario
seed), read them back in the same order and compare; one row per direction
with KB/s (KB = 1024) = workload bytes / summed open-to-close time.

The stack is MicroPython's: the filesystem (FatFs or littlefs, C code) calls
the Python block device, whose cache (``BlockCache`` with the driver's
policies) sits on ``sdcard.py`` (:class:`MicroPythonSdCard`).

* The block device protocol: FAT uses ``readblocks(n, buf)`` /
  ``writeblocks(n, buf)`` of whole 512-byte blocks; littlefs uses the
  extended interface with byte offsets: reads and programs of
  ``read_size``/``prog_size`` granules inside a block (MicroPython's VfsLfs2
  defaults: 32-byte reads and programs, a 128-byte littlefs cache).  The
  driver serves a part of a block by getting the whole block from its cache
  (or the card) and copying the part out; a partial write gets the block,
  patches it and puts it back.  Multi-block requests are handled one block at
  a time.  ``ioctl(6)`` (erase) does nothing; ``ioctl(3)`` (sync) flushes the
  cache, and both filesystems sync on every file close.
* Cache size 0 means no cache: every block request goes to the card.
* ``read_ahead`` counts blocks as the driver does: 1 = no read-ahead, N = a
  miss reads N blocks in one CMD18.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any


from ..cache import BlockCache, CacheConfig
from ..clock import VirtualClock
from ..errors import ConfigError, SdbenchError
from ..fs.costed import CostedFileSystem
from ..fs.fat import FatConfig, FatFileSystem, plan_volume
from ..fs.littlefs import LittleFsConfig, LittleFsFileSystem, _Context, check_geometry
from ..ledger import Price
from ..media.base import BlockDevice, BlockDeviceWrapper
from ..media.memory import MemoryDevice
from ..media.sim.bus import SdBus
from ..media.sim.mpy_sdcard import MicroPythonSdCard, MpySdDriverConfig
from ..options import from_mapping, opt, to_mapping
from ..records import Row
from ..runner import Context

KIB = 1024
#: (file count, file size in bytes) per workload, as the original test defines them
WORKLOADS: dict[str, tuple[tuple[int, int], ...]] = {
    "big_file": ((1, 512 * KIB),),
    "small_files": ((32, 1 * KIB),),
    "mixed": ((2, 128 * KIB), (2, 64 * KIB), (4, 16 * KIB), (4, 4 * KIB), (8, 1 * KIB), (8, 256)),
}
FILESYSTEMS = ("fat", "littlefs")
#: the driver's cache is Python too: a hit (dict look-up, LRU reordering in an OrderedDict subclass, a
#: 512-byte memoryview copy) costs about 40 µs; evicting a dirty block under LRU writes that block alone
CACHE_DEFAULTS: dict[str, Any] = {"lookup_cycles": 9_600, "copy_cycles_per_byte": 0.0, "evict_flush": "block"}
POLICIES = ("lru", "lruc", "arc", "2q")
_GRID_FIELDS = ("filesystems", "workloads", "cache_blocks", "read_ahead", "policies")


@dataclass(frozen=True)
class FsTestsConfig:
    """Options of the fs_tests protocol (table ``[fs_tests]``).  Grid fields take a list or one value."""

    filesystems: tuple[str, ...] = opt(factory=lambda: FILESYSTEMS, help="fat and/or littlefs")
    workloads: tuple[str, ...] = opt(factory=lambda: ("mixed",), help=f"any of {', '.join(WORKLOADS)}")
    cache_blocks: tuple[int, ...] = opt(factory=lambda: (0, 16), unit="blocks",
                                        help="cache sizes in 512-byte blocks; 0 = no cache")
    read_ahead: tuple[int, ...] = opt(factory=lambda: (1,), unit="blocks",
                                      help="blocks read per cache miss (1 = no read-ahead); at most the cache size")
    policies: tuple[str, ...] = opt(factory=lambda: ("lruc",), help=f"eviction policies: {', '.join(POLICIES)}")
    chunk_bytes: int = opt(512, unit="B", min=1, max=1 << 20, help="bytes per write()/readinto() call")
    repeats: int = opt(1, min=1, max=1000, help="write+read cycles per configuration, each on a fresh card "
                                                "(timed calls per row)")
    blockdev_call_cycles: int = opt(9_600, unit="cycles", min=0,
                                    help="one call from the filesystem into the Python block device "
                                         "(readblocks/writeblocks/ioctl with its offset handling), excluding "
                                         "the cache and the card")
    cache: dict[str, Any] = opt(factory=dict,
                                help="options of the driver's cache (CacheConfig fields lookup_cycles, "
                                     "copy_cycles_per_byte, evict_flush, ...; defaults: the Python driver's "
                                     f"{CACHE_DEFAULTS}); blocks/policy/read-ahead come from the grid")
    driver: MpySdDriverConfig = opt(factory=MpySdDriverConfig, help="sdcard.py waiting behaviour")

    def __post_init__(self) -> None:
        for name, allowed in (("filesystems", FILESYSTEMS), ("workloads", tuple(WORKLOADS)),
                              ("policies", POLICIES)):
            for v in getattr(self, name):
                if v not in allowed:
                    raise ConfigError(f"fs_tests.{name}: unknown value {v!r} (known: {', '.join(allowed)})")
        for name in _GRID_FIELDS:
            if not getattr(self, name):
                raise ConfigError(f"fs_tests.{name} must not be empty")
        if any(c < 0 for c in self.cache_blocks):
            raise ConfigError("fs_tests.cache_blocks: sizes must be >= 0 blocks")
        if any(r < 1 for r in self.read_ahead):
            raise ConfigError("fs_tests.read_ahead: values must be >= 1 block (1 = no read-ahead)")
        reserved = {"blocks", "policy", "read_ahead_blocks", "write_mode", "cpu_hz"} & set(self.cache)
        if reserved:
            raise ConfigError(f"fs_tests.cache.{sorted(reserved)[0]} is set by the protocol (use the grid fields)")
        known = {f.name for f in fields(CacheConfig)}
        bad = sorted(set(self.cache) - known)
        if bad:
            raise ConfigError(f"unknown option fs_tests.cache.{bad[0]} (known: {', '.join(sorted(known))})")


def load_config(table: dict[str, Any]) -> FsTestsConfig:
    """``[fs_tests]`` -> config; a single value for a grid field means a one-point grid."""
    t = dict(table)
    for name in _GRID_FIELDS:
        if name in t and not isinstance(t[name], (list, tuple)):
            t[name] = [t[name]]
    return from_mapping(FsTestsConfig, t, "fs_tests")


def config_of(sc: Any) -> FsTestsConfig:
    cfg = sc.options.get("fs_tests")  # checked when the scenario was loaded
    return cfg if cfg is not None else load_config({})


@dataclass(frozen=True)
class Combo:
    fs: str
    workload: str
    cache_blocks: int
    read_ahead: int
    policy: str


def combos(cfg: FsTestsConfig) -> list[Combo]:
    """The grid in the original's loop order; cache size 0 runs once (policy and read-ahead do not apply)."""
    out: list[Combo] = []
    for fs in cfg.filesystems:
        for wl in cfg.workloads:
            for cb in cfg.cache_blocks:
                if cb == 0:
                    out.append(Combo(fs, wl, 0, 1, cfg.policies[0]))
                    continue
                for ra in cfg.read_ahead:
                    if ra > cb:
                        continue  # the driver refuses read-ahead beyond its cache size
                    for pol in cfg.policies:
                        out.append(Combo(fs, wl, cb, ra, pol))
    return out


def label(cfg: FsTestsConfig, c: Combo, direction: str) -> str:
    """Only the grid dimensions with several values go into labels, so sweeps keep stable labels."""
    parts = [c.fs, c.workload]
    if len(cfg.cache_blocks) > 1:
        parts.append(f"cache={c.cache_blocks}")
    if c.cache_blocks:
        if len(cfg.read_ahead) > 1:
            parts.append(f"ra={c.read_ahead}")
        if len(cfg.policies) > 1:
            parts.append(c.policy)
    parts.append(direction)
    return " ".join(parts)


# ---- the MicroPython block device ----------------------------------------------------------------

class MpyBlockDevice(BlockDeviceWrapper):
    """The driver's block device protocol over its cache (or the card).

    As a BlockDevice it is the simple interface (whole 512-byte blocks, FAT);
    :meth:`read_ext` / :meth:`write_ext` are the extended interface with byte
    offsets (littlefs).  Every call costs ``call_cycles`` of Python on the
    virtual clock; block requests go down one block at a time.
    """

    kind = "mpy-blockdev"

    def __init__(self, inner: BlockDevice, call_ns: float) -> None:
        super().__init__(inner)
        self.call_ns = call_ns
        self._vclock = self.clock if isinstance(self.clock, VirtualClock) else None
        self.ext_reads = self.ext_writes = self.erases_ignored = 0

    def _call(self) -> None:
        if self._vclock is not None:
            self._vclock.advance_ns(self.call_ns, "host", "fs_tests.blockdev_call_cycles")

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        self._call()
        return b"".join(self.inner.read(lba + i, 1) for i in range(count))

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        self._call()
        ss = self.geometry.sector_size
        for i in range(len(data) // ss):
            self.inner.write(lba + i, data[i * ss:(i + 1) * ss])

    def _erase(self, lba: int, count: int) -> None:
        self._call()  # ioctl(6): SD cards need no erase; the driver returns 0
        self.erases_ignored += 1

    def _trim(self, lba: int, count: int) -> None:
        self._call()

    def _sync(self) -> None:
        self._call()  # ioctl(3): the cache writes its dirty blocks
        self.inner.sync()

    # ---- extended interface (byte offsets) ----------------------------------------------------
    def read_ext(self, addr: int, size: int) -> bytes:
        self._call()
        self.ext_reads += 1
        self.stats.reads += 1
        self.stats.bytes_read += size
        ss = self.geometry.sector_size
        out = []
        while size > 0:
            lba, off = divmod(addr, ss)
            n = min(size, ss - off)
            block = self.inner.read(lba, 1)
            out.append(block if n == ss else block[off:off + n])
            addr += n
            size -= n
        return b"".join(out)

    def write_ext(self, addr: int, data: bytes) -> None:
        self._call()
        self.ext_writes += 1
        ss = self.geometry.sector_size
        pos = 0
        while pos < len(data):
            lba, off = divmod(addr + pos, ss)
            n = min(len(data) - pos, ss - off)
            if n == ss:
                self.inner.write(lba, data[pos:pos + n])
            else:  # partial block: get it, patch it, put it back
                old = self.inner.read(lba, 1)
                self.inner.write(lba, old[:off] + data[pos:pos + n] + old[off + n:])
            pos += n
        self.stats.writes += 1
        self.stats.bytes_written += len(data)


class _ExtContext(_Context):
    """littlefs callbacks -> the extended block interface (byte offsets within blocks)."""

    def read_bytes(self, addr: int, size: int) -> bytes:
        return self.dev.read_ext(addr, size)  # type: ignore[attr-defined]

    def prog_bytes(self, addr: int, data: bytes) -> None:
        self.dev.write_ext(addr, data)  # type: ignore[attr-defined]


class MpyLittleFs(LittleFsFileSystem):
    """VfsLfs2 over the extended block interface: read/prog sizes below the 512-byte block are allowed."""

    context_class = _ExtContext
    sector_fields = ("block_size",)


# ---- the protocol ------------------------------------------------------------------------------

def _cache_config(cfg: FsTestsConfig, c: Combo, cpu_hz: int) -> CacheConfig:
    table = {**CACHE_DEFAULTS, **cfg.cache, "blocks": c.cache_blocks, "policy": c.policy,
             "read_ahead_blocks": c.read_ahead - 1, "write_mode": "write-back", "cpu_hz": cpu_hz}
    return from_mapping(CacheConfig, table, "fs_tests.cache")


def preflight(sc: Any, built: Any) -> None:
    """Refuse, before any I/O, what a configuration of the grid cannot do on the scenario's card: filesystem
    settings the card cannot hold, workloads larger than the filesystem, cache settings.  ConfigError naming
    the option."""
    cfg = config_of(sc)
    dev = built.target.sd_device
    if dev is None:
        raise ConfigError(f"scenario {sc.name}: protocol fs_tests needs an [sd] device")
    g = dev.geometry  # each configuration's fresh card has the scenario card's geometry
    host = getattr(dev, "host", None)
    cpu_hz = host.cpu_hz if host is not None else 240_000_000
    for wl in cfg.workloads:
        sizes = [size for n, size in WORKLOADS[wl] for _ in range(n)]
        for fs in cfg.filesystems:
            if fs == "fat":
                lay = plan_volume(g, sc.sd_fat, where="sd_fat")
                clusters = lay.cluster_count - (1 if lay.fat_type == 32 else 0)
                need = sum(-(-n // lay.cluster_bytes) for n in sizes)
                unit, have = lay.cluster_bytes, clusters
            else:
                lfs: LittleFsConfig = sc.sd_littlefs
                blocks = check_geometry(lfs, g, sector_fields=MpyLittleFs.sector_fields, where="sd_littlefs")
                # small files may live inline in metadata: count bytes, not blocks
                need, unit, have = sum(sizes), 1, (blocks - 2) * lfs.block_size
            if need > have:
                what = f"{need} clusters of {unit} B" if unit > 1 else f"{need} B"
                room = f"{have} clusters" if unit > 1 else f"{have} B"
                raise ConfigError(f"fs_tests.workloads: {wl} needs {what} on {fs}; the {g.size_bytes} B card's "
                                  f"filesystem has {room}")
    for c in combos(cfg):
        if c.cache_blocks:
            # the cache wraps each configuration's card; a sparse stand-in of its geometry checks the ranges
            BlockCache(MemoryDevice(g), _cache_config(cfg, c, cpu_hz))


def _kib_s(nbytes: int):
    return lambda row: (nbytes / KIB) / (row.time_ms / 1000.0) if row.time_ms > 0 else 0.0


def _card_factory(sc: Any, built: Any, cfg: FsTestsConfig, clock: Any):
    """A fresh card per configuration: sdcard.py on the scenario's simulated card, or its plain device."""
    parts = built.sd_parts
    if parts is None:
        dev = built.target.sd_device
        if dev is None:
            raise ConfigError(f"scenario {sc.name}: protocol fs_tests needs an [sd] device")
        return (lambda: dev), None
    host, card, bus = parts.host, parts.card, SdBus(parts.bus)
    log: list[Any] | None = [] if parts.log_commands else None

    def make() -> MicroPythonSdCard:
        dev = MicroPythonSdCard(host, bus, card, clock, seed=sc.seed, driver=cfg.driver)
        dev.log = log  # one command log over every configuration's card (sdbench trace)
        built.target.sd_device = dev
        return dev

    return make, host


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = config_of(sc)
    clock = ctx.clock
    make_card, host = _card_factory(sc, built, cfg, clock)
    cpu_hz = host.cpu_hz if host is not None else 240_000_000
    ns = lambda cycles: cycles * 1e9 / cpu_hz  # noqa: E731
    simulated = isinstance(clock, VirtualClock)
    fat_cfg: FatConfig = sc.sd_fat
    lfs_cfg: LittleFsConfig = sc.sd_littlefs
    rng = random.Random(sc.seed)
    orders: dict[str, list[int]] = {}
    for wl in cfg.workloads:
        sizes = [size for n, size in WORKLOADS[wl] for _ in range(n)]
        rng.shuffle(sizes)
        orders[wl] = sizes
    data = random.Random(f"fs_tests-data:{sc.seed}").randbytes(max(max(o) for o in orders.values()))
    results: list[dict[str, Any]] = []
    built.metadata.setdefault("fs_tests", {
        "files": {wl: orders[wl] for wl in cfg.workloads}, "configurations": results,
        "note": "per configuration: card and cache counters of its last repeat, format included (the rows' "
                "counters cover the timed calls only)"})
    for c in combos(cfg):
        sizes = orders[c.workload]
        total = sum(sizes)
        names = [f"/test_{i + 1:03d}.bin" for i in range(len(sizes))]
        w = r = None
        for _ in range(cfg.repeats):
            card = make_card()
            dev: BlockDevice = card
            cache = None
            if c.cache_blocks:
                cache = dev = BlockCache(card, _cache_config(cfg, c, cpu_hz))
            bdev = MpyBlockDevice(dev, ns(cfg.blockdev_call_cycles))
            inner_fs = FatFileSystem(bdev, fat_cfg) if c.fs == "fat" else MpyLittleFs(bdev, lfs_cfg)
            fs = (CostedFileSystem(inner_fs, clock, ns(host.fs_call_cycles), ns(host.fs_open_cycles),
                                   call_price=Price("sd.host", "fs_call_cycles"),
                                   open_price=Price("sd.host", "fs_open_cycles"))
                  if simulated and host is not None else inner_fs)
            devices = (bdev, card)
            if w is None or r is None:
                w = ctx.row(label(cfg, c, "write"), "write", total, devices, unit="KiB/s", value_fn=_kib_s(total))
                r = ctx.row(label(cfg, c, "read"), "read", total, devices, unit="KiB/s", value_fn=_kib_s(total))
            else:
                w.devices = r.devices = devices
            bad: list[str] = []

            def write_all() -> None:
                for name, size in zip(names, sizes):
                    with fs.open(name, "w") as f:
                        for off in range(0, size, cfg.chunk_bytes):
                            f.write(data[off:min(size, off + cfg.chunk_bytes)])

            def read_all() -> None:
                for name, size in zip(names, sizes):
                    got = []
                    with fs.open(name, "r") as f:
                        for off in range(0, size, cfg.chunk_bytes):
                            got.append(f.read(min(cfg.chunk_bytes, size - off)))
                    if b"".join(got) != data[:size]:
                        bad.append(name)

            fs.format()
            fs.mount()
            try:
                w.time(write_all)
                r.time(read_all)
            finally:
                fs.unmount()
                if host is not None:
                    dev.close()  # a fresh card per configuration
                elif cache is not None:
                    cache.flush()  # the scenario's own device stays open for the next configuration
            if bad:
                raise SdbenchError(f"fs_tests: {c.fs} read back wrong data from {bad[0]} (a model bug)")
        assert w is not None and r is not None
        wrow, rrow = w.finish(), r.finish()
        info: dict[str, Any] = {**to_mapping(c), "write_kib_s": wrow.value, "read_kib_s": rrow.value,
                                "card_reads": card.stats.reads, "card_writes": card.stats.writes,
                                "blockdev_ext_reads": bdev.ext_reads, "blockdev_ext_writes": bdev.ext_writes}
        if cache is not None:
            info["cache"] = cache.cache_stats.snapshot()
        results.append(info)
        yield wrow
        yield rrow


def timed_calls(sc: Any) -> int:
    cfg = config_of(sc)
    return 2 * cfg.repeats * len(combos(cfg))
