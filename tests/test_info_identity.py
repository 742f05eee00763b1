"""CID/CSD/SCR/SSR decoding (registers built bit by bit from known fields, and real ones) and sysfs facts."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sdbench.cli import main
from sdbench.errors import ConfigError, SdbenchError
from sdbench.media.identity import (crc7, decode_cid, decode_csd, decode_registers, decode_scr, decode_ssr, identify,
                              parse_hex)


def build(nbits: int, fields: dict[tuple[int, int], int], with_crc: bool = False) -> str:
    """A register with each field [hi:lo] set to a value; optionally CRC7 + end bit in the last byte."""
    v = 0
    for (hi, lo), val in fields.items():
        assert 0 <= val < 1 << (hi - lo + 1), (hi, lo, val)
        v |= val << lo
    raw = bytearray(v.to_bytes(nbits // 8, "big"))
    if with_crc:
        raw[-1] = crc7(bytes(raw[:15])) << 1 | 1
    return raw.hex()


def ascii_field(s: str) -> int:
    return int.from_bytes(s.encode(), "big")


# ---- hand-built registers ---------------------------------------------------------------------
def test_cid_from_known_fields():
    cid = build(128, {(127, 120): 0x1B, (119, 104): ascii_field("SM"), (103, 64): ascii_field("EB1QT"),
                      (63, 56): 0x30, (55, 24): 0x12345678, (19, 12): 21, (11, 8): 7}, with_crc=True)
    d = decode_cid(cid)
    assert d["mid"] == 0x1B and d["manufacturer"] == "Samsung"
    assert d["oem_id"] == "SM" and d["product_name"] == "EB1QT" and d["revision"] == "3.0"
    assert d["serial"] == 0x12345678 and d["serial_hex"] == "0x12345678"
    assert (d["year"], d["month"], d["manufacture_date"]) == (2021, 7, "2021-07")
    assert d["crc_ok"] is True
    bad = bytearray(bytes.fromhex(cid))
    bad[5] ^= 1
    assert decode_cid(bad.hex())["crc_ok"] is False
    stripped = cid[:-2] + "00"  # hosts that drop the CRC byte
    assert decode_cid(stripped)["crc_ok"] is None and decode_cid(stripped)["product_name"] == "EB1QT"


def test_cid_month_field_outside_the_calendar_is_said():
    """The 4-bit month field holds 0..15; 0 and 13..15 are no month (a damaged or counterfeit CID)."""
    for month in (0, 13, 15):
        cid = build(128, {(127, 120): 0x03, (19, 12): 19, (11, 8): month}, with_crc=True)
        d = decode_cid(cid)
        assert d["month"] == month and d["manufacture_date"] == f"2019, month field {month} (not a month)"


def test_unknown_manufacturer_is_shown_in_hex():
    cid = build(128, {(127, 120): 0xF0, (103, 64): ascii_field("ABCDE")})
    assert decode_cid(cid)["manufacturer"] == "unknown (0xF0)"


def test_csd_v1_capacity_and_timing():
    csd = build(128, {(127, 126): 0, (119, 112): 0x26, (111, 104): 0x01, (103, 96): 0x32, (95, 84): 0x5F5,
                      (83, 80): 10, (73, 62): 3839, (49, 47): 7, (46, 46): 1, (45, 39): 31, (28, 26): 2,
                      (25, 22): 10, (14, 14): 1}, with_crc=True)
    d = decode_csd(csd)
    assert d["csd_version"] == "1.0" and d["capacity_class"] == "SDSC"
    assert d["capacity_bytes"] == 3840 * 512 * 1024          # (C_SIZE+1) * 2^(MULT+2) * 2^READ_BL_LEN
    assert d["taac_ns"] == pytest.approx(1.5e6)               # 0x26: 1.5 x 1 ms
    assert d["nsac_clocks"] == 100
    assert d["max_transfer_rate_mbit_s"] == 25.0
    assert d["command_classes"] == [0, 2, 4, 5, 6, 7, 8, 10]
    assert d["read_bl_len_bytes"] == 1024 and d["write_bl_len_bytes"] == 1024 and d["r2w_factor"] == 4
    assert d["erase_blk_en"] and d["erase_sector_blocks"] == 32 and d["copy"] and d["crc_ok"]


@pytest.mark.parametrize("c_size, tran, cls, rate", [
    (0x00EDC7, 0x32, "SDHC", 25.0),
    (0x00FF5F, 0x5A, "SDHC", 50.0),
    (0x01DA3F, 0x0B, "SDXC", 100.0),
    (0x3B9F3F, 0x2B, "SDXC", 200.0),
])
def test_csd_v2_capacity_class_and_speed(c_size, tran, cls, rate):
    csd = build(128, {(127, 126): 1, (119, 112): 0x0E, (103, 96): tran, (95, 84): 0x5B5, (83, 80): 9,
                      (69, 48): c_size, (46, 46): 1, (45, 39): 0x7F, (25, 22): 9}, with_crc=True)
    d = decode_csd(csd)
    assert d["csd_version"] == "2.0" and d["capacity_class"] == cls
    assert d["capacity_bytes"] == (c_size + 1) * 512 * 1024
    assert d["max_transfer_rate_mbit_s"] == rate and d["taac_ns"] == 1e6


def test_csd_v3_sduc():
    csd = build(128, {(127, 126): 2, (75, 48): 0x0FFFFFF, (103, 96): 0x32})
    d = decode_csd(csd)
    assert d["csd_version"] == "3.0" and d["capacity_class"] == "SDUC"
    assert d["capacity_bytes"] == 0x1000000 * 512 * 1024


@pytest.mark.parametrize("spec, s3, s4, sx, version", [
    (0, 0, 0, 0, "1.0/1.01"), (1, 0, 0, 0, "1.10"), (2, 0, 0, 0, "2.00"), (2, 1, 0, 0, "3.0x"),
    (2, 1, 1, 0, "4.xx"), (2, 1, 0, 1, "5.xx"), (2, 1, 1, 2, "6.xx"), (2, 1, 0, 3, "7.xx"), (2, 1, 1, 4, "8.xx"),
])
def test_scr_versions(spec, s3, s4, sx, version):
    scr = build(64, {(59, 56): spec, (47, 47): s3, (42, 42): s4, (41, 38): sx, (51, 48): 0b0101,
                     (54, 52): 4, (55, 55): 1, (35, 32): 0b1011})
    d = decode_scr(scr)
    assert d["physical_layer_version"] == version
    assert d["bus_widths"] == ["1-bit", "4-bit"] and d["data_after_erase"] == "0xFF"
    assert d["security"] == "SDXC security 3.xx"
    assert d["commands"] == ["CMD20 speed class control", "CMD23 set block count",
                             "CMD58/59 extension register multi-block"]


def test_ssr_classes_from_known_fields():
    ssr = build(512, {(511, 510): 2, (447, 440): 4, (439, 432): 0, (431, 428): 9, (423, 408): 0x10,
                      (407, 402): 0x0A, (401, 400): 1, (399, 396): 3, (395, 392): 9, (391, 384): 30,
                      (377, 368): 8, (339, 336): 2, (313, 313): 1})
    d = decode_ssr(ssr)
    assert d["bus_width"] == "4-bit" and d["speed_class"] == "C10" and d["uhs_speed_grade"] == "U3"
    assert d["video_speed_class"] == "V30" and d["app_perf_class"] == "A2"
    assert d["au_size_bytes"] == 4 << 20 and d["uhs_au_size_bytes"] == 4 << 20
    assert (d["erase_size_aus"], d["erase_timeout_s"], d["erase_offset_s"]) == (16, 10, 1)
    assert d["vsc_au_size_mib"] == 8 and d["discard_support"] and not d["fule_support"]
    plain = decode_ssr(build(512, {(447, 440): 2, (339, 336): 1}))
    assert plain["speed_class"] == "C4" and plain["app_perf_class"] == "A1" and plain["uhs_speed_grade"] == "none"
    assert plain["video_speed_class"] == "none" and plain["au_size_bytes"] is None


def test_emmc_cid_layout():
    cid = build(128, {(127, 120): 0x15, (113, 112): 1, (111, 104): 0x01, (103, 56): ascii_field("8GTF4R"),
                      (55, 48): 0x12, (47, 16): 0xCAFEBABE, (15, 12): 3, (11, 8): 14}, with_crc=True)
    d = decode_cid(cid, "MMC")
    assert d["manufacturer"] == "Samsung" and d["product_name"] == "8GTF4R" and d["device_type"] == "BGA"
    assert d["revision"] == "1.2" and d["serial"] == 0xCAFEBABE and (d["year"], d["month"]) == (2011, 3)


# ---- real registers -----------------------------------------------------------------------------
# A SanDisk 8 GB microSDHC ("SS08G") as read over SPI and published with the P2 SD driver's card catalog.
SANDISK_CID = "03 50 54 53 53 30 38 47 30 DA AE E8 AD 00 F9 BB"
SANDISK_CSD = "40 0E 00 32 5B 59 00 00 39 B7 7F 80 0A 40 00 3B"
SANDISK_SCR = "02 35 80 02 01 00 00 00"


def test_real_world_sandisk_registers():
    d = decode_registers(cid=SANDISK_CID, csd=SANDISK_CSD, scr=SANDISK_SCR)
    cid, csd, scr = d["cid"], d["csd"], d["scr"]
    assert (cid["manufacturer"], cid["oem_id"], cid["product_name"], cid["revision"]) == ("SanDisk", "PT",
                                                                                          "SS08G", "3.0")
    assert cid["serial_hex"] == "0xdaaee8ad" and cid["manufacture_date"] == "2015-09"
    assert cid["crc7"] == 0x5D and cid["crc_ok"] is True          # the card's own CRC7 checks out
    assert csd["csd_version"] == "2.0" and csd["c_size"] == 0x39B7 and csd["capacity_class"] == "SDHC"
    assert csd["capacity_bytes"] == (0x39B7 + 1) * 512 * 1024 == 7_746_879_488
    assert csd["max_transfer_rate_mbit_s"] == 25.0 and csd["taac_ns"] == 1e6 and csd["crc_ok"] is True
    assert csd["command_classes"] == [0, 2, 4, 5, 7, 8, 10] and csd["erase_sector_blocks"] == 128
    assert scr["physical_layer_version"] == "3.0x" and scr["bus_widths"] == ["1-bit", "4-bit"]
    assert scr["commands"] == ["CMD23 set block count"] and scr["data_after_erase"] == "0x00"
    assert d["summary"] == "SanDisk SS08G rev 3.0, 7.75 GB (7.21 GiB), SDHC, SD 3.0x, made 2015-09"


def test_small_devices_show_their_size():
    """Issue 32: `info` showed a 32 MiB device as "0.0 GB"."""
    from sdbench.media.identity import capacity_text, summary_line

    assert capacity_text(32 << 20) == "33.6 MB (32 MiB)"
    assert summary_line({"size_bytes": 32 << 20}) == "33.6 MB (32 MiB)"
    assert capacity_text(64 * 10 ** 9) == "64 GB (59.6 GiB)" and capacity_text(512) == "512 B"


def test_hex_parsing_accepts_common_spellings():
    ref = bytes.fromhex("035054535330384730daaee8ad00f9bb")
    for s in (SANDISK_CID, "0x035054535330384730DAAEE8AD00F9BB", "$03 $50 $54 $53 $53 $30 $38 $47 $30 $DA $AE "
              "$E8 $AD $00 $F9 $BB", "03:50:54:53:53:30:38:47:30:da:ae:e8:ad:00:f9:bb"):
        assert parse_hex(s, 128, "CID") == ref
    with pytest.raises(ConfigError, match="expected 32 hex digits"):
        parse_hex("0350", 128, "CID")
    with pytest.raises(ConfigError, match="not hexadecimal"):
        parse_hex("zz" * 16, 128, "CID")


# ---- sysfs ------------------------------------------------------------------------------------
def _device_node(tmp_path: Path) -> tuple[str, tuple[int, int]]:
    if os.geteuid() == 0:
        node = tmp_path / "mmcblk9"
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(179, 72))
        return str(node), (179, 72)
    for e in sorted(os.scandir("/dev"), key=lambda e: e.name):
        try:
            st = os.stat(e.path)
        except OSError:
            continue
        if stat.S_ISBLK(st.st_mode):
            return e.path, (os.major(st.st_rdev), os.minor(st.st_rdev))
    pytest.skip("no block device node available")


def _fake_mmc_sysfs(tmp_path: Path, devno: tuple[int, int], partition: bool) -> Path:
    root = tmp_path / "sys"
    card = root / "devices" / "platform" / "mmc_host" / "mmc0" / "mmc0:aaaa"
    disk = card / "block" / "mmcblk0"
    (disk / "queue").mkdir(parents=True)
    for f, v in {"size": "15130624", "ro": "0", "removable": "0"}.items():
        (disk / f).write_text(v + "\n")
    for f, v in {"logical_block_size": "512", "physical_block_size": "512", "rotational": "0",
                 "max_sectors_kb": "1024", "max_hw_sectors_kb": "65535", "nr_requests": "64",
                 "scheduler": "none [mq-deadline]", "discard_granularity": "4194304"}.items():
        (disk / "queue" / f).write_text(v + "\n")
    for f, v in {"cid": SANDISK_CID.replace(" ", "").lower(), "csd": SANDISK_CSD.replace(" ", "").lower(),
                 "scr": SANDISK_SCR.replace(" ", "").lower(), "type": "SD", "name": "SS08G", "manfid": "0x000003",
                 "oemid": "0x5054", "date": "09/2015", "serial": "0xdaaee8ad", "preferred_erase_size": "4194304",
                 "erase_size": "512"}.items():
        (card / f).write_text(v + "\n")
    os.symlink(card, disk / "device")
    target = disk
    if partition:
        target = disk / "mmcblk0p1"
        target.mkdir()
        for f, v in {"size": "15126528", "partition": "1", "start": "4096", "ro": "0"}.items():
            (target / f).write_text(v + "\n")
    (root / "dev" / "block").mkdir(parents=True)
    os.symlink(target, root / "dev" / "block" / f"{devno[0]}:{devno[1]}")
    return root


@pytest.mark.parametrize("partition", [False, True])
def test_identify_an_mmc_card_from_sysfs(tmp_path, partition):
    node, devno = _device_node(tmp_path)
    sysr = _fake_mmc_sysfs(tmp_path, devno, partition)
    d = identify(node, sys_root=str(sysr))
    assert d["kind"] == "mmc" and d["card_type"] == "SD"
    assert d["device"] == ("mmcblk0p1" if partition else "mmcblk0")
    assert d["size_bytes"] == (15126528 if partition else 15130624) * 512
    assert d["logical_block_bytes"] == 512 and d["rotational"] is False
    assert d["queue"]["scheduler"] == "mq-deadline" and d["queue"]["max_sectors_kb"] == 1024
    assert d["cid"]["product_name"] == "SS08G" and d["csd"]["capacity_bytes"] == 7_746_879_488
    assert d["scr"]["physical_layer_version"] == "3.0x" and "ssr" not in d
    assert d["sysfs"]["preferred_erase_size_bytes"] == 4194304
    assert d["summary"].startswith("SanDisk SS08G")
    json.dumps(d)  # storable with runs
    if partition:
        assert d["partition"] == {"number": 1, "start_sectors": 4096} and d["disk"] == "mmcblk0"


def test_identify_image_file_and_missing(tmp_path):
    img = tmp_path / "x.img"
    img.write_bytes(bytes(4096))
    assert identify(img)["kind"] == "image file" and identify(img)["size_bytes"] == 4096
    with pytest.raises(SdbenchError, match="no such device or file"):
        identify(tmp_path / "missing")


# ---- CLI --------------------------------------------------------------------------------------
def test_info_cli_decodes_pasted_registers(tmp_path, capsys):
    out = tmp_path / "id.json"
    rc = main(["info", "--cid", SANDISK_CID, "--csd", SANDISK_CSD, "--scr", SANDISK_SCR, "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "| Field" in text and "| cid.manufacturer" in text and "SanDisk" in text and "SS08G" in text
    assert json.loads(out.read_text())["csd"]["capacity_bytes"] == 7_746_879_488


def test_info_cli_on_an_image_and_errors(tmp_path, capsys):
    img = tmp_path / "card.img"
    img.write_bytes(bytes(8192))
    assert main(["info", str(img)]) == 0
    assert "image file" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no such device or file") and err.count("\n") == 1
    assert main(["info", "--csd", "40" * 15]) == 2
    assert "CSD: expected 32 hex digits" in capsys.readouterr().err
