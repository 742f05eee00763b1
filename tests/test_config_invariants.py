"""Every input is checked before any work starts, and the C libraries never get a configuration they assert on.

* littlefs (lfs_init's LFS_ASSERTs abort the whole process), FatFs and our FAT formatter, wear levelling,
  the USB bridge, caches: refused with the option's name, as a ConfigError.
* Simulated hosts, buses and cards: a bus clock beyond the host's or the card's limit is refused; absurd
  profile values (from a user's TOML, ``--set``) are refused before a model divides by them or loops on them.
* Sizes beyond the card, partition or filesystem are refused after the stack is built and before the first
  timed call (the protocols' pre-flight checks).

Property tests draw configurations and check "refused, or it works": the part that calls into C runs in a
worker subprocess, so an abort fails the example instead of killing the test run.
"""
from __future__ import annotations

import json
import math
import select
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError, InternalError
from sdbench.fs import littlefs as lfs_mod
from sdbench.fs.fat import FatConfig, plan_volume
from sdbench.fs.littlefs import LittleFsConfig, check_geometry
from sdbench.media.base import Geometry
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.stack.sd import load_card, load_host
from sdbench.media.usbmsc import UsbMscConfig
from sdbench.media.wl import WlConfig
from sdbench.options import from_mapping
from sdbench.protocols import run_scenario

# ---- a worker process for everything that calls into C ------------------------------------------------

_WORKER = r'''
import json, sys
from sdbench.fs.fat import FatConfig, FatFileSystem
from sdbench.fs.littlefs import LittleFsConfig, LittleFsFileSystem
from sdbench.media.base import Geometry
from sdbench.media.memory import MemoryDevice

for line in sys.stdin:
    req = json.loads(line)
    try:
        dev = MemoryDevice(Geometry(**req["geometry"]))
        if req["fs"] == "littlefs":
            fs = LittleFsFileSystem(dev, LittleFsConfig(**req["config"]))
        else:
            fs = FatFileSystem(dev, FatConfig(**req["config"]))
        fs.format()
        fs.mount()
        names = fs.listdir("/")
        info = {}
        if req["fs"] == "fat":
            info = {"fat_type": fs.layout.fat_type, "clusters": fs.layout.cluster_count}
        fs.unmount()
        out = {"ok": names == [], "info": info, "error": "" if names == [] else f"not empty: {names}"}
    except Exception as e:
        out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out), flush=True)
'''


class Worker:
    """One request at a time to a Python subprocess; an abort (or a hang) in C is reported, not suffered."""

    TIMEOUT_S = 60.0

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.stderr = tempfile.TemporaryFile(mode="w+")

    def ask(self, request: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([self.proc.stdout], [], [], self.TIMEOUT_S)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return {"ok": False, "error": f"no answer within {self.TIMEOUT_S} s"}
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            self.proc = None
            self.stderr.seek(0)
            return {"ok": False, "error": f"worker died (exit {rc}): {self.stderr.read()[-500:]}"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait()
        self.stderr.close()


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


@pytest.fixture
def no_littlefs_c(monkeypatch):
    """Any call into the littlefs C library fails the test (instead of possibly aborting it)."""
    def reached(*a, **k):
        raise AssertionError("the littlefs C library was called")

    for name in ("LFSConfig", "LFSFilesystem", "format", "mount"):
        monkeypatch.setattr(lfs_mod._lfs, name, reached)


def _refused(sc_name: str, overrides: list[str]) -> str:
    """Load and run a scenario that must be refused before any work; return the message."""
    with pytest.raises(ConfigError) as e:
        run_scenario(scen.load(sc_name, overrides))
    return str(e.value)


# ---- littlefs: each lfs_init assert, refused in Python --------------------------------------------------

LFS_ASSERTS = [
    # (overrides, text the message must contain); the comment names the LFS_ASSERT it replaces
    (["sd_littlefs.disk_version=1"], "disk_version"),                       # disk major == 2 && minor <= 1
    (["sd_littlefs.disk_version=0x00030000"], "disk_version"),
    (["sd_littlefs.disk_version=0x00020002"], "disk_version"),
    (["sd_littlefs.inline_max=600"], "inline_max = 600 B is above cache_size"),      # inline_max <= cache_size
    (["sd_littlefs.inline_max=100"], "inline_max = 100 B is above block_size / 8"),  # <= (metadata_max|block)/8
    (["sd_littlefs.attr_max=32", "sd_littlefs.inline_max=48"], "above attr_max"),     # inline_max <= attr_max
    (["sd_littlefs.metadata_max=1024"], "metadata_max = 1024 B is above block_size"),  # metadata_max <= block
    (["sd_littlefs.metadata_max=300"], "not a multiple of read_size"),         # metadata_max % read_size == 0
    (["sd_littlefs.read_size=32", "sd_littlefs.prog_size=64", "sd_littlefs.metadata_max=96"],
     "not a multiple of prog_size"),                                            # metadata_max % prog_size == 0
    (["sd_littlefs.read_size=64", "sd_littlefs.prog_size=64", "sd_littlefs.metadata_max=192"],
     "does not divide block_size"),                                             # block_size % metadata_max == 0
    (["sd_littlefs.block_cycles=0"], "block_cycles = 0"),                      # block_cycles != 0
    (["sd_littlefs.file_max=3000000000"], "file_max"),                         # file_max <= LFS_FILE_MAX
    (["sd_littlefs.attr_max=2000"], "attr_max"),                               # attr_max <= LFS_ATTR_MAX
    (["sd_littlefs.name_max=1023"], "name_max"),                               # name_max <= LFS_NAME_MAX
    (["sd_littlefs.cache_size=256"], "cache_size = 256 B is not a multiple of read_size = 512 B"),
    (["sd_littlefs.read_size=256", "sd_littlefs.cache_size=768", "sd_littlefs.block_size=1536"],
     "cache_size = 768 B is not a multiple of prog_size = 512 B"),             # cache_size % prog_size == 0
    (["sd_littlefs.read_size=256", "sd_littlefs.prog_size=256", "sd_littlefs.cache_size=768"],
     "block_size = 512 B is not a multiple of cache_size = 768 B"),            # block_size % cache_size == 0
    (["sd_littlefs.read_size=384", "sd_littlefs.prog_size=128", "sd_littlefs.cache_size=256"],
     "cache_size = 256 B is not a multiple of read_size = 384 B"),             # cache_size % read_size == 0
    (["sd_littlefs.block_size=64"], "block_size"),                             # block_size >= 128
    (["sd_littlefs.lookahead_size=0"], "lookahead_size"),                      # lookahead_size > 0
    (["sd_littlefs.block_cycles=3000000000"], "block_cycles"),                 # int32_t in the binding
    (["sd_littlefs.inline_max=-2"], "inline_max"),                             # lfs_size_t in the binding
    (["sd_littlefs.metadata_max=32", "sd_littlefs.read_size=32", "sd_littlefs.prog_size=32",
      "sd_littlefs.cache_size=32"], "too small for the superblock commit"),     # lfs_format: no space
]


@pytest.mark.parametrize("overrides,text", LFS_ASSERTS, ids=lambda v: v if isinstance(v, str) else None)
def test_littlefs_asserts_are_refused_before_c(no_littlefs_c, overrides, text):
    msg = _refused("espidf-memory", overrides + ['espidf.parts=["sd_littlefs"]'])
    assert msg.startswith("sd_littlefs") and text in msg, msg


LFS_GEOMETRY = [
    # the device's granularities, capacity and littlefs' 32-bit block numbers
    (["sd.sector_size_bytes=4096"], "sd_littlefs.read_size = 512 B is not a multiple of the device's 4096 B"),
    (["sd_littlefs.block_count=1000000000"], "sd_littlefs.block_count = 1000000000 blocks"),
    (["sd.capacity_bytes=1048576", "sd_littlefs.block_size=1048576"], "at least 2 blocks"),
    (["sd.capacity_bytes=4398046511104"], "32-bit block numbers"),
]


@pytest.mark.parametrize("overrides,text", LFS_GEOMETRY, ids=lambda v: v if isinstance(v, str) else None)
def test_littlefs_geometry_is_checked_before_c(no_littlefs_c, overrides, text):
    msg = _refused("espidf-memory", overrides + ['espidf.parts=["sd_littlefs"]'])
    assert text in msg, msg


def test_flash_littlefs_block_must_be_whole_erase_sectors(no_littlefs_c):
    msg = _refused("espidf-esp32-spiflash", ["flash.littlefs.block_size=512", "flash.littlefs.cache_size=512",
                                             'espidf.parts=["flash_littlefs"]'])
    assert "flash.littlefs.block_size = 512 B" in msg and "4096 B erase size" in msg, msg
    msg = _refused("espidf-esp32-spiflash", ["flash.littlefs.inline_max=4000"])
    assert msg.startswith("flash.littlefs") and "inline_max" in msg, msg


def test_micropython_littlefs_is_checked_too(no_littlefs_c):
    msg = _refused("mpy-esp32s3-sdspi", ["sd_littlefs.cache_size=100"])
    assert msg.startswith("sd_littlefs") and "cache_size = 100 B" in msg, msg


def test_littlefs_refusal_is_one_line_on_the_cli(capsys):
    rc = main(["run", "espidf-memory", "--set", "sd_littlefs.disk_version=1", "--no-save"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().splitlines()[-1].startswith("error: sd_littlefs: disk_version"), err
    assert "Traceback" not in err


def test_inline_files_off_reaches_littlefs_as_unsigned(worker):
    # -1 ("inline files off") is (lfs_size_t)-1 in C; the binding used to raise OverflowError on it
    cfg = {"inline_max": -1}
    assert worker.ask({"fs": "littlefs", "config": cfg,
                       "geometry": {"sector_size": 512, "sector_count": 2048}}) == {"ok": True, "info": {},
                                                                                     "error": ""}


def _pow2ish(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Values around powers of two: 0, 2^k, 2^k - 1, 2^k + 1, 3 * 2^k."""
    k = st.integers(lo, hi)
    return st.one_of(st.just(0), k.map(lambda k: 1 << k), k.map(lambda k: (1 << k) - 1),
                     k.map(lambda k: (1 << k) + 1), k.map(lambda k: 3 << k))


@st.composite
def _lfs_case(draw):
    """A littlefs config near a consistent one (each field may be knocked off), and a device."""
    ss = draw(st.sampled_from([1, 512, 512, 4096]))
    erase = ss * draw(st.sampled_from([1, 1, 8]))
    base = max(ss, 1)
    rs = base * (1 << draw(st.integers(0, 3))) if ss > 1 else 1 << draw(st.integers(0, 9))
    ps = base * (1 << draw(st.integers(0, 3))) if ss > 1 else 1 << draw(st.integers(0, 9))
    cs = max(rs, ps) << draw(st.integers(0, 3))
    bs = max(cs, erase, 128) << draw(st.integers(0, 3))
    cfg = {"read_size": rs, "prog_size": ps, "cache_size": cs, "block_size": bs, "lookahead_size": 16}
    for name, values in (("read_size", _pow2ish(0, 12)), ("prog_size", _pow2ish(0, 12)),
                         ("cache_size", _pow2ish(0, 13)), ("block_size", _pow2ish(6, 15)),
                         ("lookahead_size", _pow2ish(0, 9)), ("metadata_max", _pow2ish(4, 13)),
                         ("block_count", _pow2ish(0, 8)),
                         ("inline_max", st.sampled_from([-2, -1, 0, 1, 8, 64, 100, 512, 1023])),
                         ("attr_max", st.sampled_from([0, 1, 8, 100, 1022, 1023])),
                         ("name_max", st.sampled_from([0, 1, 8, 255, 1022, 1023])),
                         ("file_max", st.sampled_from([0, 1, 700, 2**31 - 1, 2**31])),
                         ("block_cycles", st.sampled_from([-2, -1, 0, 1, 100, 2**31 - 1, 2**31])),
                         ("disk_version", st.sampled_from([0, 1, 0x20000, 0x20001, 0x20002, 0x30000]))):
        if draw(st.integers(0, 7)) == 0:
            cfg[name] = draw(values)
    blocks = draw(st.sampled_from([1, 2, 3, 8, 64, 512]))
    total = max(ss, blocks * max(bs, 1))
    geometry = {"sector_size": ss, "sector_count": max(1, total // ss), "erase_size": erase, "erase_value": 0xFF}
    return cfg, geometry


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_lfs_case())
def test_littlefs_config_is_refused_or_formats_and_mounts(worker, case):
    cfg_table, geo = case
    try:
        cfg = from_mapping(LittleFsConfig, cfg_table, "sd_littlefs")
        check_geometry(cfg, Geometry(**geo), where="sd_littlefs")
    except ConfigError as e:
        assert str(e).startswith("sd_littlefs"), e
        event("refused")
        return
    event("formatted")
    got = worker.ask({"fs": "littlefs", "config": cfg_table, "geometry": geo})
    assert got["ok"], (cfg_table, geo, got["error"])


# ---- FatFs and our formatter -------------------------------------------------------------------------------

FAT_CRASHES = [
    # each of these ended in struct.error while packing the boot sector, or in an unmountable volume
    ("espidf-esp32-spiflash", ["flash.fat.allocation_unit_bytes=131072"], "flash.fat: allocation_unit_bytes"),
    ("espidf-memory", ["sd_fat.root_entries=100000"], "sd_fat.root_entries"),
    ("espidf-memory", ["sd_fat.root_entries=100"], "root_entries = 100 is not a multiple of 16"),
    ("espidf-memory", ["sd_fat.align_sectors=1048576"], "sd_fat.align_sectors"),
    ("espidf-memory", ["sd_fat.align_sectors=3"], "align_sectors = 3 sectors is not a power of two"),
    ("espidf-memory", ["sd_fat.partition_start_lba=40000000"], "sd_fat.partition_start_lba = 40000000"),
    ("espidf-memory", ["sd.capacity_bytes=4398046511104"], "4294967295 sectors"),
    ("espidf-memory", ["sd_fat.allocation_unit_bytes=1536"], "power-of-two multiple"),
    ("espidf-memory", ["sd_fat.fat_type=\"fat16\""], "sd_fat.fat_type: FAT16 needs"),
    ("espidf-memory", ["sd.sector_size_bytes=4096"], "sd_fat.sector_size_bytes = 512 B"),
]


@pytest.mark.parametrize("name,overrides,text", FAT_CRASHES, ids=lambda v: v if isinstance(v, str) else None)
def test_fat_configs_are_refused_with_the_field(name, overrides, text):
    parts = 'espidf.parts=["flash_fatfs"]' if "flash" in name else 'espidf.parts=["sd_fatfs"]'
    msg = _refused(name, overrides + [parts])
    assert text in msg, msg


def test_fat_aligned_4096_byte_sectors_overflowing_the_boot_sector():
    g = Geometry(sector_size=4096, sector_count=1 << 20)
    with pytest.raises(ConfigError, match="flash.fat.align_sectors"):
        plan_volume(g, FatConfig(sector_size_bytes=4096, fat_type="fat32", allocation_unit_bytes=4096,
                                 align_sectors=32768), where="flash.fat")


def _mostly(valid: st.SearchStrategy, wild: st.SearchStrategy) -> st.SearchStrategy:
    """Usually a valid value, about one time in eight one from around the edges."""
    return st.sampled_from([False] * 7 + [True]).flatmap(lambda edge: wild if edge else valid)


@st.composite
def _fat_case(draw):
    ss = draw(st.sampled_from([512, 512, 4096]))
    cfg = {
        "fat_type": draw(st.sampled_from(["auto", "auto", "fat12", "fat16", "fat32"])),
        "allocation_unit_bytes": draw(_mostly(st.sampled_from([0, 0, ss, 4096, 16384, 65536]),
                                              st.one_of(_pow2ish(9, 17), st.just(ss * 3)))),
        "n_fats": draw(_mostly(st.sampled_from([1, 2]), st.sampled_from([0, 3]))),
        "partition_start_lba": draw(_mostly(st.sampled_from([0, 0, 63, 2048]),
                                            st.sampled_from([1, 8192, 1 << 20, 1 << 32]))),
        "root_entries": draw(_mostly(st.sampled_from([128, 512, 4096]),
                                     st.sampled_from([16, 100, 32768, 32784, 65536]))),
        "sector_size_bytes": draw(_mostly(st.just(ss), st.just(4608 - ss))),
        "align_sectors": draw(_mostly(st.sampled_from([1, 1, 8, 128]), _pow2ish(0, 16))),
        "trim_on_format": False,
    }
    size = draw(st.sampled_from([64 << 10, 1 << 20, 4 << 20, 16 << 20, 40 << 20, 64 << 20]))
    return cfg, {"sector_size": ss, "sector_count": size // ss}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_fat_case())
def test_fat_config_is_refused_or_formats_and_mounts(worker, case):
    cfg_table, geo = case
    try:
        cfg = from_mapping(FatConfig, cfg_table, "sd_fat")
        lay = plan_volume(Geometry(**geo), cfg, where="sd_fat")
    except ConfigError as e:
        assert str(e).startswith(("sd_fat", "FAT")), e
        event("refused")
        return
    event(f"formatted FAT{lay.fat_type}")
    got = worker.ask({"fs": "fat", "config": cfg_table, "geometry": geo})
    assert got["ok"], (cfg_table, geo, got["error"])
    # FatFs read back the volume we planned
    assert got["info"] == {"fat_type": lay.fat_type, "clusters": lay.cluster_count}, (cfg_table, geo, got)


# ---- wear levelling, USB bridge, caches: cross-field invariants --------------------------------------------

def test_wear_levelling_config_fields_fit_their_records():
    with pytest.raises(ValueError, match="version"):
        WlConfig(version=1 << 32)  # packed as uint32: struct.error before
    with pytest.raises(ValueError, match="temp_buff_bytes"):
        WlConfig(temp_buff_bytes=48)
    with pytest.raises(ValueError, match="page_size_bytes"):
        WlConfig(page_size_bytes=6144)


def test_usb_bridge_packets():
    with pytest.raises(ConfigError, match="usbmsc.bridge: packet_bytes = 100 B is not a power of two"):
        from_mapping(UsbMscConfig, {"packet_bytes": 100}, "usbmsc.bridge")
    with pytest.raises(ConfigError, match="whole number of packet_bytes"):
        from_mapping(UsbMscConfig, {"packet_bytes": 1024, "device_buffer_bytes": 1536}, "usbmsc.bridge")


def test_cache_copy_cost_is_bounded():
    msg = _refused("mpy-esp32s3-sdspi", ["fs_tests.cache.copy_cycles_per_byte=1e300"])
    assert msg.startswith("fs_tests.cache.copy_cycles_per_byte"), msg


# ---- bus clocks: the host's and the card's limits ----------------------------------------------------------

def test_bus_clock_above_the_host_limit_names_it():
    msg = _refused("esp32s3-sdmmc4-40mhz", ["sd.bus.clock_hz=208000000"])
    assert msg == "sd.bus.clock_hz = 208000000 Hz is above host esp32s3-sdmmc's limit 40000000 Hz (max_bus_clock_hz)"
    msg = _refused("p2-spi25-350mhz-pny-16gb", ["sd.bus.clock_hz=50000000", "sd.host_params.cpu_hz=80000000"])
    assert "limit 40000000 Hz (cpu_hz 80000000 Hz / min_clock_divider 2)" in msg, msg
    msg = _refused("esp32s3-sdmmc4-40mhz", ["sd.bus.clock_hz=30000000", "sd.card_params.high_speed_max_clock_hz=0"])
    assert "the card has no High Speed mode" in msg, msg


SD_HOSTS = ["esp32-sdmmc", "esp32s3-sdmmc", "esp32s3-sdspi", "esp32s3-micropython", "p2-350mhz"]
CLOCKS = st.one_of(st.sampled_from([400_000, 1_311_475, 20_000_000, 25_000_000, 25_000_001, 40_000_000,
                                    40_000_001, 50_000_000, 50_000_001, 80_000_000, 175_000_001, 208_000_000]),
                   st.integers(100_000, 208_000_000))


#: bus kinds each shipped host's driver drives
KINDS = {"sdmmc": ["sd4", "sd1"], "sdspi": ["spi"], "p2spi": ["spi"], "generic": ["sd4", "sd1", "spi"]}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SD_HOSTS), st.sampled_from(["generic-sdhc", "pny-16gb"]), st.data(), CLOCKS,
       st.sampled_from([None, 0, 30_000_000]))
def test_bus_clock_is_refused_exactly_above_the_limits(host_name, card_name, data, clock_hz, hs_limit):
    host = load_host(host_name)
    card = load_card(card_name, {} if hs_limit is None else {"high_speed_max_clock_hz": hs_limit})
    kind = data.draw(st.sampled_from(KINDS[host.driver]))
    bus = SdBus(from_mapping(BusConfig, {"kind": kind, "clock_hz": clock_hz}, "sd.bus"))
    # the card's rating limits a host that switches it to High Speed; one that leaves it in Default Speed may clock it
    # faster (a warning: sdbench.media.sim.busclock)
    limits = [card.high_speed_max_clock_hz if card.high_speed_max_clock_hz else card.default_speed_max_clock_hz] \
        if host.high_speed else []
    if host.max_bus_clock_hz:
        limits.append(host.max_bus_clock_hz)
    if host.min_clock_divider:
        limits.append(host.cpu_hz // host.min_clock_divider)
    clock = VirtualClock()
    try:
        dev = SdHostDriver(host, bus, card, clock)
    except ConfigError as e:
        assert limits and clock_hz > min(limits), (host_name, kind, clock_hz, limits)
        assert str(e).startswith(f"sd.bus.clock_hz = {clock_hz} Hz is above ") and "limit" in str(e)
        event("refused")
        return
    event("accepted")
    assert not limits or clock_hz <= min(limits)
    dev.initialise()
    dev.write(2048, bytes(512 * 8))
    assert dev.read(2048, 8) == bytes(512 * 8)
    assert 0 < clock.now_ns() < 10**12


# ---- absurd or non-finite profile values ---------------------------------------------------------------

PROFILE_VALUES = [
    # a division by zero in the card model (pages per AU)
    (["sd.card_params.page_bytes=8388608"], "au_bytes = 4194304 B is not a whole number of page_bytes"),
    # polling that never yields: a near-endless loop over a long busy
    (["sd.host_params.poll_yield_after_us=0"], "poll_yield_after_us = 0.0 µs is below the minimum"),
    # a tick shorter than the clock's resolution made negative waits
    (["sd.host_params.rtos_tick_hz=1000000000000"], "rtos_tick_hz"),
    (["sd.card_params.write_busy_end_us=inf"], "write_busy_end_us"),
    (["sd.card_params.read_access_us=nan"], "read_access_us"),
    (["sd.card_params.pause_median_ms=1e300"], "pause_median_ms"),
    (["sd.host_params.copy_cycles_per_byte=1e300"], "copy_cycles_per_byte"),
    (["sd.card_params.capacity_bytes=1000000001"], "capacity_bytes = 1000000001 B is not a whole number"),
    (["sd.capacity_bytes=1000000000000000000"], "capacity_bytes"),
]


@pytest.mark.parametrize("overrides,text", PROFILE_VALUES, ids=lambda v: v if isinstance(v, str) else None)
def test_absurd_profile_values_are_refused(overrides, text):
    msg = _refused("esp32s3-sdmmc4-40mhz", overrides)
    assert text in msg, msg


def test_user_profile_files_are_checked(tmp_path):
    bad = tmp_path / "card.toml"
    bad.write_text('name = "mine"\nread_access_us = nan\n')
    msg = _refused("esp32s3-sdmmc4-40mhz", [f'sd.card="{bad}"'])
    assert "read_access_us" in msg, msg
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00name")
    assert "not UTF-8" in _refused("esp32s3-sdmmc4-40mhz", [f'sd.card="{binary}"'])
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    assert "is a directory" in _refused("esp32s3-sdmmc4-40mhz", [f'sd.host="{folder}"'])
    assert "unknown card profile" in _refused("esp32s3-sdmmc4-40mhz", ['sd.card="../hosts/esp32-sdmmc"'])


def test_the_virtual_clock_refuses_non_finite_steps():
    c = VirtualClock()
    for bad in (math.inf, math.nan, -1.0, 1e300):
        with pytest.raises(InternalError, match="cannot advance"):
            c.advance_ns(bad)
    assert c.now_ns() == 0


# ---- sizes within capacity, before the first timed call --------------------------------------------------

SIZES = [
    # raw: this hung (writing far past the card, no capacity check)
    ("esp32s3-sdmmc4-40mhz", ["raw.total_bytes=64000000000"], "raw.total_bytes = 64000000000 B does not fit"),
    ("esp32s3-sdmmc4-40mhz", ["raw.start_lba=62500000"], "raw.start_lba = 62500000 is past the end"),
    ("esp32s3-sdmmc4-40mhz", ["raw.chunk_bytes=1000", "raw.total_bytes=1000000"], "raw.chunk_bytes = 1000 B"),
    ("esp32s3-sdmmc4-40mhz", ["raw.chunk_bytes=1073741824"], "raw.chunk_bytes"),
    # ESP-IDF: target sizes against the partition and the filesystems
    ("espidf-esp32-spiflash", ["espidf.target_size_bytes=16777216"], "part flash_raw's device of 2064384 B"),
    ("espidf-esp32-spiflash", ["espidf.target_size_bytes=2097152", 'espidf.parts=["flash_littlefs"]'],
     "part flash_littlefs writes a file of 2516582 B"),
    ("espidf-esp32-spiflash", ['espidf.parts=["flash_raw"]', "flash.partition_size_bytes=65536"],
     "part flash_raw's device of 49152 B"),
    ("espidf-memory", ["espidf.target_size_bytes=16777216", "espidf.runs=100000", "sd.capacity_bytes=1073741824"],
     "espidf.runs = 100000 appends"),
    # P2: raw tests past the card, files larger than the volume
    ("p2-spi25-350mhz-pny-16gb", ["p2.raw_lba=40000000"], "p2.raw_lba = 40000000"),
    ("p2-spi25-350mhz-pny-16gb", ["p2.file_read_bytes=68719476736"], "p2.file_read_bytes"),
    # fs_tests and usbmsc
    ("mpy-esp32s3-sdspi", ["sd.capacity_bytes=1048576"], "sd_fat.fat_type: FAT32 needs"),
    ("mpy-esp32s3-sdspi", ["sd.capacity_bytes=1048576", 'fs_tests.filesystems=["littlefs"]',
                           'fs_tests.workloads=["big_file"]', "sd_littlefs.block_count=1000"],
     "fs_tests.workloads: big_file needs 524288 B on littlefs"),
    ("esp32s3-usbmsc-sdmmc4-40mhz", ["usbmsc.total_bytes=16000000000"], "past the card's 32000000000 B"),
]


@pytest.mark.parametrize("name,overrides,text", SIZES, ids=lambda v: v if isinstance(v, str) else None)
def test_sizes_are_checked_before_the_first_timed_call(name, overrides, text):
    msg = _refused(name, overrides)
    assert text in msg, msg


def test_a_refused_run_is_never_begun():
    began = []
    with pytest.raises(ConfigError):
        run_scenario(scen.load("esp32s3-sdmmc4-40mhz", ["raw.total_bytes=64000000000"]), on_built=began.append)
    assert began == []
