"""Who is the card?  SD register decoding (CID, CSD, SCR, SSR) and sysfs facts.

Bit positions follow the SD Physical Layer Simplified Specification (register
bit 0 is the least significant bit of the last byte).  Linux exposes the raw
registers of an SD card as hex under ``/sys/block/mmcblkN/device/`` (``cid``,
``csd``, ``scr`` and on newer kernels ``ssr``); many host controllers strip the
CRC byte, so a CID/CSD ending in ``00`` reports ``crc_ok: None``.

Manufacturer names behind the MID numbers are assigned privately by the SD
card association's licensing body and not published; the table below is the
community-maintained mapping, good for labelling, not for decisions.

:func:`identify` returns a JSON-ready dict that can be stored with runs
(``RunRecord.metadata["identity"]``).
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SdbenchError
from .safety import stat_target

SD_MANUFACTURERS = {
    0x01: "Panasonic", 0x02: "Toshiba/Kioxia", 0x03: "SanDisk", 0x06: "Ritek", 0x08: "Silicon Power",
    0x09: "ATP", 0x13: "Kingmax", 0x18: "Infineon", 0x19: "Dynacard", 0x1A: "PQI", 0x1B: "Samsung",
    0x1C: "Transcend", 0x1D: "ADATA", 0x1E: "Transcend", 0x1F: "Kingston", 0x27: "Phison",
    0x28: "Lexar", 0x30: "SanDisk", 0x31: "Silicon Power", 0x33: "STMicroelectronics", 0x41: "Kingston",
    0x45: "Team Group", 0x51: "STEC", 0x5D: "Swissbit", 0x6F: "STMicroelectronics", 0x74: "Transcend",
    0x76: "Patriot", 0x82: "Sony", 0x88: "Foresee/Longsys", 0x9C: "Angelbird/Hoodman", 0x9F: "Taishin (shared OEM)",
    0xAD: "SK hynix", 0xE8: "GoodRAM",
}
MMC_MANUFACTURERS = {
    0x02: "Kingston/SanDisk", 0x03: "Toshiba", 0x11: "Toshiba/Kioxia", 0x13: "Micron", 0x15: "Samsung",
    0x2C: "Kingston", 0x44: "ATP", 0x45: "SanDisk", 0x70: "Kingston", 0x88: "Foresee/Longsys", 0x90: "SK hynix",
    0x9B: "YMTC", 0xF4: "Biwin", 0xFE: "Micron",
}

# TRAN_SPEED / TAAC: bits 6:3 a multiplier code, bits 2:0 a unit code
_TIME_VALUES = (0.0, 1.0, 1.2, 1.3, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 7.0, 8.0)
_RATE_UNITS_KBIT = (100, 1_000, 10_000, 100_000)           # 100 kbit/s .. 100 Mbit/s
_TAAC_UNITS_NS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)
_SPEED_CLASS = {0: "Class 0", 1: "C2", 2: "C4", 3: "C6", 4: "C10"}
_UHS_GRADE = {0: "none", 1: "U1", 3: "U3"}
_APP_CLASS = {0: "none", 1: "A1", 2: "A2"}
_KIB = 1024
# AU_SIZE / UHS_AU_SIZE code -> bytes
_AU_BYTES = {1: 16 * _KIB, 2: 32 * _KIB, 3: 64 * _KIB, 4: 128 * _KIB, 5: 256 * _KIB, 6: 512 * _KIB,
             7: 1024 * _KIB, 8: 2048 * _KIB, 9: 4096 * _KIB, 0xA: 8192 * _KIB, 0xB: 12288 * _KIB,
             0xC: 16384 * _KIB, 0xD: 24576 * _KIB, 0xE: 32768 * _KIB, 0xF: 65536 * _KIB}
_SECURITY = {0: "none", 1: "not used", 2: "SDSC security 1.01", 3: "SDHC security 2.00", 4: "SDXC security 3.xx"}


class _Bits:
    """A register as one big integer; ``bits(hi, lo)`` is the field [hi:lo]."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.nbits = len(raw) * 8
        self.value = int.from_bytes(raw, "big")

    def __call__(self, hi: int, lo: int | None = None) -> int:
        lo = hi if lo is None else lo
        return (self.value >> lo) & ((1 << (hi - lo + 1)) - 1)


def parse_hex(text: str | bytes, nbits: int, what: str) -> bytes:
    """'03 50 54...', '0x0350...', '$03 $50', '03:50:..' -> bytes of exactly nbits/8."""
    if isinstance(text, (bytes, bytearray)):
        raw = bytes(text)
    else:
        s = re.sub(r"0x|\$|[\s:_-]", "", str(text).strip(), flags=re.IGNORECASE)
        if not re.fullmatch(r"[0-9a-fA-F]*", s):
            raise ConfigError(f"{what}: not hexadecimal: {text!r}")
        if len(s) != nbits // 4:
            raise ConfigError(f"{what}: expected {nbits // 4} hex digits ({nbits} bits), got {len(s)}")
        raw = bytes.fromhex(s)
    if len(raw) * 8 != nbits:
        raise ConfigError(f"{what}: expected {nbits} bits, got {len(raw) * 8}")
    return raw


def crc7(data: bytes) -> int:
    """CRC7 (x^7 + x^3 + 1) as the card computes it over CID/CSD bytes 0..14."""
    crc = 0
    for byte in data:
        for i in range(7, -1, -1):
            top = (crc >> 6) & 1
            crc = (crc << 1) & 0x7F
            if ((byte >> i) & 1) ^ top:
                crc ^= 0x09
    return crc


def _crc_fields(raw: bytes) -> dict[str, Any]:
    last = raw[-1]
    if last == 0:  # the host controller dropped the CRC byte
        return {"crc7": None, "crc_ok": None}
    stored = last >> 1
    return {"crc7": stored, "crc_ok": stored == crc7(raw[:15]) and bool(last & 1)}


def _ascii(b: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 else "." for c in b)


def _made(year: int, month: int) -> str:
    """YYYY-MM; a month field outside 1..12 (the 4-bit field holds up to 15) is said, not printed as a date: a
    genuine card does not carry one."""
    return f"{year:04d}-{month:02d}" if 1 <= month <= 12 else f"{year:04d}, month field {month} (not a month)"


def decode_cid(cid: str | bytes, card_type: str = "SD") -> dict[str, Any]:
    """Decode a 128-bit CID (SD layout, or eMMC with ``card_type="MMC"``)."""
    raw = parse_hex(cid, 128, "CID")
    b = _Bits(raw)
    if card_type.upper() == "MMC":
        year = b(11, 8) + 1997
        mid = b(127, 120)
        out = {
            "mid": mid, "manufacturer": MMC_MANUFACTURERS.get(mid, f"unknown (0x{mid:02X})"),
            "device_type": {0: "removable", 1: "BGA", 2: "POP"}.get(b(113, 112), "reserved"),
            "oem_id": f"0x{b(111, 104):02X}", "product_name": _ascii(raw[3:9]).strip(),
            "revision": f"{b(55, 52)}.{b(51, 48)}", "serial": b(47, 16), "serial_hex": f"0x{b(47, 16):08x}",
            "month": b(15, 12), "year": year,
            # eMMC 4.41+ (EXT_CSD_REV >= 5) moves the year window by 16 years
            "year_if_emmc_4_41": year + 16 if year < 2010 else year,
            "manufacture_date": _made(year, b(15, 12)),
        }
    else:
        mid = b(127, 120)
        out = {
            "mid": mid, "manufacturer": SD_MANUFACTURERS.get(mid, f"unknown (0x{mid:02X})"),
            "oem_id": _ascii(raw[1:3]), "product_name": _ascii(raw[3:8]),
            "revision": f"{b(63, 60)}.{b(59, 56)}", "serial": b(55, 24), "serial_hex": f"0x{b(55, 24):08x}",
            "year": 2000 + b(19, 12), "month": b(11, 8),
            "manufacture_date": _made(2000 + b(19, 12), b(11, 8)),
        }
    out.update(_crc_fields(raw))
    out["raw"] = raw.hex()
    return out


def _rate(code: int) -> float:
    """TRAN_SPEED -> Mbit/s."""
    unit = code & 0x7
    return _TIME_VALUES[(code >> 3) & 0xF] * _RATE_UNITS_KBIT[unit] / 1000.0 if unit < 4 else 0.0


def decode_csd(csd: str | bytes, card_type: str = "SD") -> dict[str, Any]:
    raw = parse_hex(csd, 128, "CSD")
    b = _Bits(raw)
    structure = b(127, 126)
    taac_code = b(119, 112)
    tran = b(103, 96)
    ccc = b(95, 84)
    out: dict[str, Any] = {
        "csd_structure": structure,
        "taac_ns": _TIME_VALUES[(taac_code >> 3) & 0xF] * _TAAC_UNITS_NS[taac_code & 0x7],
        "nsac_clocks": b(111, 104) * 100,
        "tran_speed": f"0x{tran:02X}",
        "max_transfer_rate_mbit_s": _rate(tran),
        "command_classes": [i for i in range(12) if ccc >> i & 1],
        "read_bl_len_bytes": 1 << b(83, 80),
        "write_bl_len_bytes": 1 << b(25, 22),
        "r2w_factor": 1 << b(28, 26),
        "copy": bool(b(14)), "perm_write_protect": bool(b(13)), "tmp_write_protect": bool(b(12)),
    }
    if card_type.upper() == "MMC":
        out["csd_version"] = f"1.{structure}"
        out["spec_version"] = b(125, 122)
        out.update(_crc_fields(raw))
        out["raw"] = raw.hex()
        return out
    if structure == 0:
        c_size, mult = b(73, 62), b(49, 47)
        capacity = (c_size + 1) * (1 << (mult + 2)) * (1 << b(83, 80))
        out.update(csd_version="1.0", capacity_class="SDSC", c_size=c_size, c_size_mult=mult)
    elif structure in (1, 2):
        c_size = b(69, 48) if structure == 1 else b(75, 48)
        capacity = (c_size + 1) * 512 * _KIB
        # SDHC ends at C_SIZE 0xFF5F (32 GB); above it the same CSD 2.0 describes SDXC
        cls = ("SDHC" if c_size <= 0xFF5F else "SDXC") if structure == 1 else "SDUC"
        out.update(csd_version="2.0" if structure == 1 else "3.0", c_size=c_size, capacity_class=cls)
    else:
        raise ConfigError(f"CSD: reserved CSD_STRUCTURE value {structure}")
    out["capacity_bytes"] = capacity
    out["erase_blk_en"] = bool(b(46))
    out["erase_sector_blocks"] = b(45, 39) + 1
    out["write_protect_group_sectors"] = b(38, 32) + 1
    out["write_protect_group_enable"] = bool(b(31))
    out["file_format"] = {0: "hard disk with partition table", 1: "DOS FAT (floppy) without partition table",
                          2: "universal file format", 3: "others"}[b(11, 10)] if not b(15) else "reserved"
    out.update(_crc_fields(raw))
    out["raw"] = raw.hex()
    return out


def decode_scr(scr: str | bytes) -> dict[str, Any]:
    raw = parse_hex(scr, 64, "SCR")
    b = _Bits(raw)
    sd_spec, spec3, spec4, specx = b(59, 56), b(47), b(42), b(41, 38)
    if sd_spec == 0:
        version = "1.0/1.01"
    elif sd_spec == 1:
        version = "1.10"
    elif sd_spec == 2 and not spec3:
        version = "2.00"
    elif sd_spec == 2 and specx:
        version = f"{4 + specx}.xx"
    elif sd_spec == 2 and spec4:
        version = "4.xx"
    elif sd_spec == 2:
        version = "3.0x"
    else:
        version = f"reserved ({sd_spec})"
    widths = b(51, 48)
    cmds = b(35, 32)
    return {
        "scr_structure": b(63, 60), "physical_layer_version": version,
        "sd_spec": sd_spec, "sd_spec3": spec3, "sd_spec4": spec4, "sd_specx": specx,
        "data_after_erase": "0xFF" if b(55) else "0x00",
        "security": _SECURITY.get(b(54, 52), f"reserved ({b(54, 52)})"),
        "bus_widths": [w for w, bit in (("1-bit", 0), ("4-bit", 2)) if widths >> bit & 1],
        "extended_security": b(46, 43),
        "commands": [c for c, bit in (("CMD20 speed class control", 0), ("CMD23 set block count", 1),
                                      ("CMD48/49 extension register single block", 2),
                                      ("CMD58/59 extension register multi-block", 3)) if cmds >> bit & 1],
        "raw": raw.hex(),
    }


def decode_ssr(ssr: str | bytes) -> dict[str, Any]:
    """The 512-bit SD Status (ACMD13): speed, UHS, video and application performance classes, AU."""
    raw = parse_hex(ssr, 512, "SSR")
    b = _Bits(raw)
    au, uhs_au = b(431, 428), b(395, 392)
    vsc = b(391, 384)
    erase_size, erase_timeout = b(423, 408), b(407, 402)
    return {
        "bus_width": {0: "1-bit", 2: "4-bit"}.get(b(511, 510), "reserved"),
        "secured_mode": bool(b(509)),
        "card_type": {0: "regular SD RD/WR", 1: "SD ROM", 2: "OTP"}.get(b(495, 480), f"0x{b(495, 480):04X}"),
        "protected_area_bytes_field": b(479, 448),
        "speed_class": _SPEED_CLASS.get(b(447, 440), f"reserved ({b(447, 440)})"),
        "performance_move_mb_s": b(439, 432),
        "au_size_bytes": _AU_BYTES.get(au),
        "erase_size_aus": erase_size,
        "erase_timeout_s": erase_timeout,
        "erase_offset_s": b(401, 400),
        "uhs_speed_grade": _UHS_GRADE.get(b(399, 396), f"reserved ({b(399, 396)})"),
        "uhs_au_size_bytes": _AU_BYTES.get(uhs_au),
        "video_speed_class": f"V{vsc}" if vsc in (6, 10, 30, 60, 90) else ("none" if vsc == 0 else f"reserved ({vsc})"),
        "vsc_au_size_mib": b(377, 368),
        "suspension_address": b(367, 346),
        "app_perf_class": _APP_CLASS.get(b(339, 336), f"reserved ({b(339, 336)})"),
        "performance_enhance": b(335, 328),
        "discard_support": bool(b(313)),
        "fule_support": bool(b(312)),
        "raw": raw.hex(),
    }


def decode_registers(cid: str | None = None, csd: str | None = None, scr: str | None = None,
                     ssr: str | None = None, card_type: str = "SD") -> dict[str, Any]:
    """Decode whichever registers are given (hex strings) into one dict with a summary line."""
    out: dict[str, Any] = {"kind": "registers", "card_type": card_type}
    if cid:
        out["cid"] = decode_cid(cid, card_type)
    if csd:
        out["csd"] = decode_csd(csd, card_type)
    if scr:
        out["scr"] = decode_scr(scr)
    if ssr:
        out["ssr"] = decode_ssr(ssr)
    out["summary"] = summary_line(out)
    return out


def capacity_text(n: float) -> str:
    """A capacity as cards are sold (decimal units, three figures) and in binary units: ``33.6 MB (32 MiB)``,
    ``15.9 GB (14.8 GiB)``; a 32 MiB device is not "0.0 GB"."""
    def three(v: float) -> str:
        return f"{v:.3g}" if v < 1000 else f"{v:.0f}"

    dec = next((f"{three(n / d)} {u}" for u, d in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)) if n >= d),
               f"{n:g} B")
    binary = next((f"{three(n / d)} {u}" for u, d in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20),
                                                     ("KiB", 1 << 10)) if n >= d), None)
    return f"{dec} ({binary})" if binary else dec


def summary_line(ident: dict[str, Any]) -> str:
    parts = []
    cid, csd, scr, ssr = (ident.get(k) or {} for k in ("cid", "csd", "scr", "ssr"))
    if cid:
        parts.append(f"{cid['manufacturer']} {cid['product_name'].strip()} rev {cid['revision']}")
    cap = csd.get("capacity_bytes") or ident.get("size_bytes")
    if cap:
        parts.append(capacity_text(cap))
    if csd.get("capacity_class"):
        parts.append(csd["capacity_class"])
    if scr:
        parts.append(f"SD {scr['physical_layer_version']}")
    classes = [ssr.get("speed_class"), ssr.get("uhs_speed_grade"), ssr.get("video_speed_class"),
               ssr.get("app_perf_class")]
    classes = [c for c in classes if c and c not in ("none", "Class 0")]
    if classes:
        parts.append(" ".join(classes))
    if cid:
        parts.append(f"made {cid['manufacture_date']}")
    if not parts and ident.get("model"):
        parts.append(str(ident["model"]))
    return ", ".join(parts)


# ---- sysfs --------------------------------------------------------------------------------
def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    v = _read(path)
    try:
        return int(v, 0) if v is not None else None
    except ValueError:
        return None


def identify(path: str | os.PathLike[str], *, sys_root: str = "/sys") -> dict[str, Any]:
    """Facts about a block device (or image file) for display and for storing with runs."""
    p = os.fspath(path)
    st = stat_target(p)
    if stat.S_ISREG(st.st_mode):
        return {"path": p, "kind": "image file", "size_bytes": st.st_size,
                "summary": f"image file, {capacity_text(st.st_size)}"}
    if not stat.S_ISBLK(st.st_mode):
        raise SdbenchError(f"{p} is neither a block device nor an image file")
    link = Path(sys_root, "dev", "block", f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
    if not link.exists():
        raise SdbenchError(f"cannot find {p} in {sys_root}")
    node = Path(os.path.realpath(link))
    out: dict[str, Any] = {"path": p, "device": node.name}
    disk = node
    if (node / "partition").exists():
        disk = node.parent
        out["partition"] = {"number": _int(node / "partition"), "start_sectors": _int(node / "start")}
        out["disk"] = disk.name
    size = _int(node / "size")
    q = disk / "queue"
    out.update({
        "kind": "mmc" if disk.name.startswith("mmcblk") else "block",
        "size_bytes": size * 512 if size is not None else None,   # sysfs counts 512-byte units
        "logical_block_bytes": _int(q / "logical_block_size"),
        "physical_block_bytes": _int(q / "physical_block_size"),
        "rotational": _int(q / "rotational") == 1 if _int(q / "rotational") is not None else None,
        "removable": _int(disk / "removable") == 1 if _int(disk / "removable") is not None else None,
        "read_only": _int(node / "ro") == 1 if _int(node / "ro") is not None else None,
    })
    sched = _read(q / "scheduler")
    m = re.search(r"\[([^\]]+)\]", sched or "")
    out["queue"] = {k: v for k, v in {
        "max_sectors_kb": _int(q / "max_sectors_kb"), "max_hw_sectors_kb": _int(q / "max_hw_sectors_kb"),
        "nr_requests": _int(q / "nr_requests"), "scheduler": m.group(1) if m else sched,
        "minimum_io_bytes": _int(q / "minimum_io_size"), "optimal_io_bytes": _int(q / "optimal_io_size"),
        "discard_granularity_bytes": _int(q / "discard_granularity"),
        "discard_max_bytes": _int(q / "discard_max_bytes"),
    }.items() if v is not None}
    dev = disk / "device"
    for key in ("model", "vendor", "serial", "rev"):
        v = _read(dev / key)
        if v:
            out[key] = v
    if out["kind"] == "mmc":
        card_type = _read(dev / "type") or "SD"
        out["card_type"] = card_type
        for key in ("name", "manfid", "oemid", "date", "serial", "hwrev", "fwrev"):
            v = _read(dev / key)
            if v:
                out.setdefault("sysfs", {})[key] = v
        for key in ("preferred_erase_size", "erase_size"):
            v = _int(dev / key)
            if v is not None:
                out.setdefault("sysfs", {})[key + "_bytes"] = v
        regs = {k: _read(dev / k) for k in ("cid", "csd", "scr", "ssr")}
        decoders = {"cid": lambda h: decode_cid(h, card_type), "csd": lambda h: decode_csd(h, card_type),
                    "scr": decode_scr, "ssr": decode_ssr}
        for k, h in regs.items():
            if not h:
                continue
            if k in ("scr", "ssr") and card_type.upper() != "SD":
                continue
            try:
                out[k] = decoders[k](h)
            except ConfigError as e:
                out.setdefault("decode_errors", []).append(str(e))
    out["summary"] = summary_line(out)
    return out
