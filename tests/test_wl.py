"""ESP-IDF wear levelling model: layout, mapping, relocation every `updaterate` erases, persistence."""
from __future__ import annotations

import random

import pytest

from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.base import Geometry
from sdbench.media.memory import MemoryDevice
from sdbench.media.sim.esp_flash import Esp32FlashDriver, EspFlashHostProfile
from sdbench.media.sim.nor import FlashChipProfile, NorChipConfig, NorFlashChip
from sdbench.media.wl import STATE_RECORD_BYTES, WearLevelling, WlConfig, WlState, crc32_le
from sdbench.testing import BlockDeviceSuite

CHIP_1M = FlashChipProfile(name="chip-1m", capacity_bytes=1 << 20)


def stack(size: int = 256 * 1024, *, strict: bool = False, wl: WlConfig | None = None, chip_profile=CHIP_1M,
          offset: int = 0x10000):
    chip = NorFlashChip(chip_profile, VirtualClock(), NorChipConfig(strict=strict))
    drv = Esp32FlashDriver(chip, EspFlashHostProfile(), offset_bytes=offset, size_bytes=size)
    return chip, drv, WearLevelling(drv, wl)


class TestWearLevellingConformance(BlockDeviceSuite):
    def make_device(self):
        return stack(strict=True)[2]


class TestWearLevellingOnMemoryConformance(BlockDeviceSuite):
    def make_device(self):
        mem = MemoryDevice(Geometry(sector_size=1, sector_count=128 * 1024, erase_size=4096, erase_value=0xFF),
                           program_and=True)
        return WearLevelling(mem, WlConfig(updaterate=2))


def test_layout_of_a_2mib_partition_matches_esp_idf():
    big = FlashChipProfile(name="chip-4m", capacity_bytes=4 << 20)
    _, _, wl = stack(2 << 20, chip_profile=big, offset=0x110000)
    # 64 B state + 512 sectors x 16 B records = 8256 B -> 3 sectors per copy; config 1 sector; 1 dummy
    assert wl.state_size == 3 * 4096 and wl.cfg_size == 4096
    assert wl.addr_cfg == (2 << 20) - 4096
    assert wl.addr_state2 == wl.addr_cfg - 3 * 4096 and wl.addr_state1 == wl.addr_state2 - 3 * 4096
    assert wl.flash_size == (512 - 7 - 1) * 4096 == wl.wl_size()
    assert wl.geometry.sector_size == 4096 and wl.geometry.sector_count == 504
    assert wl.state.max_pos == 505 and wl.state.max_count == 16


def test_state_record_is_esp_idf_shaped_with_crc():
    chip, drv, wl = stack()
    raw = drv.read(wl.addr_state1, STATE_RECORD_BYTES)
    st, ok = WlState.unpack(raw)
    assert ok and st.max_pos == wl.state.max_pos and st.version == 2
    assert int.from_bytes(raw[60:64], "little") == crc32_le(raw[:60])
    # ROM crc32_le(0, ...) is the standard CRC-32 (check value 0xCBF43926); WL seeds it with 0xFFFFFFFF
    assert crc32_le(b"123456789", 0) == 0xCBF43926
    assert drv.read(wl.addr_state2, STATE_RECORD_BYTES) == raw


def test_dummy_moves_every_16_erases_and_costs_a_copy_and_two_records():
    chip, drv, wl = stack()
    assert wl.state.pos == 0
    for i in range(15):
        wl.wl_erase_range(0, 4096)
    assert wl.state.pos == 0 and wl.moves == 0
    pp_before = chip.vclock.commands.get("PP", 0)
    se_before = chip.vclock.commands.get("SE", 0)
    wl.wl_erase_range(0, 4096)  # the 16th erase moves the dummy first
    assert wl.state.pos == 1 and wl.moves == 1
    # dummy sector erased + the sector's own erase; 4096/32 = 128 copy programs + 2 position records
    assert chip.vclock.commands["SE"] - se_before == 2
    assert chip.vclock.commands["PP"] - pp_before == 128 + 2
    for _ in range(16):
        wl.wl_erase_range(4096, 4096)
    assert wl.state.pos == 2


def test_mapping_skips_the_dummy_and_rotates():
    _, _, wl = stack(wl=WlConfig(updaterate=1))
    page = 4096
    assert [wl.calc_addr(i * page) // page for i in range(3)] == [1, 2, 3]  # dummy at 0
    wl.wl_erase_range(0, page)  # one move: dummy now at 1
    assert [wl.calc_addr(i * page) // page for i in range(3)] == [0, 2, 3]


def test_data_stays_intact_across_many_writes_and_full_rotations():
    chip, drv, wl = stack(wl=WlConfig(updaterate=2))
    n = wl.geometry.sector_count
    rng = random.Random(5)
    model: dict[int, bytes] = {}
    for i in range(3 * wl.state.max_pos * 2 + 17):  # more than three full turns of the dummy
        lba = rng.randrange(n)
        data = rng.randbytes(4096)
        wl.write(lba, data)
        model[lba] = data
        if i % 97 == 0:
            probe = rng.choice(list(model))
            assert wl.read(probe, 1) == model[probe]
    assert wl.state.move_count >= 3
    for lba, data in model.items():
        assert wl.read(lba, 1) == data
    # wear is spread: every physical sector of the data area was erased
    first = drv.offset_bytes // 4096
    counts = chip.erase_counts[first:first + wl.state.max_pos]
    assert counts.min() > 0


def test_default_updaterate_full_rotation_keeps_data():
    """With updaterate 16 the dummy walks all the way round (max_pos moves) and data survive."""
    chip, drv, wl = stack(128 * 1024)
    n = wl.geometry.sector_count
    model = {lba: bytes([lba]) * 4096 for lba in range(n)}
    for lba, data in model.items():
        wl.write(lba, data)
    erases = n
    rng = random.Random(3)
    while wl.state.move_count == 0:
        lba = rng.randrange(n)
        model[lba] = rng.randbytes(4096)
        wl.write(lba, model[lba])
        erases += 1
    assert wl.moves == erases // 16 == wl.state.max_pos
    for lba, data in model.items():
        assert wl.read(lba, 1) == data


def test_state_survives_a_remount():
    chip, drv, wl = stack(wl=WlConfig(updaterate=2))
    rng = random.Random(9)
    model = {}
    for _ in range(200):
        lba = rng.randrange(wl.geometry.sector_count)
        model[lba] = rng.randbytes(4096)
        wl.write(lba, model[lba])
    pos, moves = wl.state.pos, wl.state.move_count
    assert moves >= 1
    again = WearLevelling(drv, WlConfig(updaterate=2))
    assert (again.state.pos, again.state.move_count) == (pos, moves)
    for lba, data in model.items():
        assert again.read(lba, 1) == data


def test_close_flushes_one_move_like_wl_unmount():
    _, _, wl = stack()
    wl.close()
    assert wl.moves == 1 and wl.state.pos == 1


def test_wl_write_only_programs_and_blockdevice_write_erases_first():
    chip, drv, wl = stack()
    se = chip.vclock.commands.get("SE", 0)
    wl.wl_write(0, b"\xf0" * 4096)
    wl.wl_write(0, b"\x3c" * 4096)  # raw API: no erase, NOR AND
    assert chip.vclock.commands.get("SE", 0) == se
    assert wl.wl_read(0, 4096) == b"\x30" * 4096
    assert chip.stats.zero_to_one_programs > 0
    wl.write(0, b"\x3c" * 4096)  # diskio view: erase + program
    assert chip.vclock.commands["SE"] == se + 1
    assert wl.read(0, 1) == b"\x3c" * 4096


def test_raw_64k_wl_write_is_16_partition_writes_of_64_programs():
    chip, drv, wl = stack()
    lock0 = drv.counters.lock_sections
    pp0 = chip.vclock.commands.get("PP", 0)
    wl.wl_write(0, bytes(65536))
    assert drv.counters.lock_sections - lock0 == 16
    assert chip.vclock.commands["PP"] - pp0 == 16 * 64


def test_strict_chip_refuses_raw_overwrite_but_not_diskio_writes():
    from sdbench.media.sim.nor import NorProgramError
    _, _, wl = stack(strict=True)
    wl.write(3, b"\x00" * 4096)
    with pytest.raises(NorProgramError, match="0x"):
        wl.wl_write(3 * 4096, b"\xff" * 4096)
    wl.write(3, b"\xff" * 4096)
    assert wl.read(3, 1) == b"\xff" * 4096


def test_bad_wl_configs_are_config_errors():
    mem512 = MemoryDevice(Geometry(sector_size=512, sector_count=1024))
    with pytest.raises(ConfigError, match="byte-addressed"):
        WearLevelling(mem512)
    tiny = MemoryDevice(Geometry(sector_size=1, sector_count=12 * 1024, erase_size=4096, erase_value=0xFF))
    with pytest.raises(ConfigError, match="too small"):
        WearLevelling(tiny)
    from sdbench.options import from_mapping
    with pytest.raises(ConfigError, match="512, 4096"):
        from_mapping(WlConfig, {"sector_size_bytes": 1024})


# ---- 512-byte sectors (WL_Ext_Perf) ----------------------------------------------------------------------

WL512 = WlConfig(sector_size_bytes=512)


class TestWearLevelling512Conformance(BlockDeviceSuite):
    def make_device(self):
        return stack(strict=True, wl=WL512)[2]


def test_512_byte_mode_keeps_the_4096_byte_layout_and_shows_512_byte_sectors():
    _, _, w4 = stack()
    _, _, w5 = stack(wl=WL512)
    assert (w5.state_size, w5.cfg_size, w5.flash_size) == (w4.state_size, w4.cfg_size, w4.flash_size)
    assert w5.geometry.sector_size == 512 and w5.geometry.sector_count == w4.flash_size // 512
    assert w5.wl_sector == 4096 and w5.geometry.erase_size == 512


def test_512_byte_write_reads_keeps_and_programs_back_the_rest_of_the_flash_sector():
    _, drv, wl = stack(strict=True, wl=WL512)
    rng = random.Random(5)
    whole = rng.randbytes(4096)
    e0, r0 = drv.stats.erases, drv.stats.reads
    wl.write(8, whole)                     # flash sector 1, whole: one erase, nothing read back
    assert (drv.stats.erases - e0, drv.stats.reads - r0) == (1, 0)
    new = rng.randbytes(1024)
    e0, r0, w0 = drv.stats.erases, drv.stats.reads, drv.stats.writes
    wl.write(11, new)                      # sectors 11-12 inside flash sector 1: 6 pieces kept
    assert (drv.stats.erases - e0, drv.stats.reads - r0) == (1, 6)
    assert drv.stats.writes - w0 == 6 + 1  # the kept pieces, then the new data in one program call
    assert wl.read(8, 8) == whole[:1536] + new + whole[2560:]


def test_512_byte_mode_counts_one_wl_access_per_flash_sector_erased():
    _, _, wl = stack(wl=WlConfig(sector_size_bytes=512, updaterate=4))
    for lba in range(0, 8 * 8, 2):         # 32 writes of 2 sectors: 4 per flash sector, 8 flash sectors
        wl.write(lba, bytes([lba]) * 1024)
    assert wl.moves == 32 // 4
    for lba in range(0, 64, 2):
        assert wl.read(lba, 2) == bytes([lba]) * 1024


def test_512_byte_reads_that_cross_a_page_stay_right_while_the_dummy_moves():
    _, _, wl = stack(wl=WlConfig(sector_size_bytes=512, updaterate=1))
    n = wl.geometry.sector_count
    rng = random.Random(9)
    shadow = bytearray(rng.randbytes(n * 512))
    wl.write(0, bytes(shadow))
    for _ in range(300):                   # every erase moves the dummy: reads keep crossing it
        lba = rng.randrange(n - 8)
        data = rng.randbytes(512 * rng.randint(1, 8))
        wl.write(lba, data)
        shadow[lba * 512:lba * 512 + len(data)] = data
        at = rng.randrange(n - 9)
        assert wl.read(at, 9) == bytes(shadow[at * 512:(at + 9) * 512])
