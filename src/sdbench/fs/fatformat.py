"""Lay out an empty FAT16/FAT32 volume the way FatFs' f_mkfs (with f_fdisk
for an MBR) does, so the FatFs code in fatfs-ng can mount it.

fatfs-ng's own mkfs only makes FAT12/16 volumes without partition table; the
ESP-IDF setups need FAT32, an MBR partition starting at LBA 63 and a chosen
allocation unit, hence this formatter.  Only structures are written here; all
file operations run in FatFs itself.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import ConfigError
from ..media.base import BlockDevice

MAX_FAT12_CLUSTERS = 0xFF5
MAX_FAT16_CLUSTERS = 0xFFF5
MAX_FAT32_CLUSTERS = 0x0FFFFFF5
#: largest cluster FatFs handles: BPB_SecPerClus is a power of two up to 128 of its 512-byte sectors
MAX_CLUSTER_BYTES = 128 * 512
#: sector numbers in the MBR and BPB (and FatFs' LBA_t without FF_LBA64) are 32-bit
MAX_LBA32 = 0xFFFFFFFF
MAX_U16 = 0xFFFF


@dataclass(frozen=True)
class FatLayout:
    """Where things are, in sectors of ``sector_size`` bytes, from LBA 0 of the device."""

    fat_type: int            # 12, 16 or 32
    sector_size: int
    volume_start: int        # LBA of the VBR (0 without MBR)
    volume_sectors: int
    reserved_sectors: int
    n_fats: int
    fat_sectors: int         # per FAT
    root_dir_sectors: int    # FAT16 fixed root directory; 0 on FAT32
    sectors_per_cluster: int
    cluster_count: int

    @property
    def fat_start(self) -> int:
        return self.volume_start + self.reserved_sectors

    @property
    def data_start(self) -> int:
        return self.fat_start + self.n_fats * self.fat_sectors + self.root_dir_sectors

    @property
    def cluster_bytes(self) -> int:
        return self.sectors_per_cluster * self.sector_size


def plan(total_sectors: int, *, sector_size: int = 512, fat_type: str = "auto", au_bytes: int = 0,
         n_fats: int = 2, partition_start_lba: int | None = None, root_entries: int = 512,
         align_sectors: int = 1, where: str = "fat") -> FatLayout:
    """Compute a layout; raises ConfigError, naming the option (``<where>.<field>``), when the parameters
    cannot make a volume FatFs mounts."""
    if sector_size not in (512, 1024, 2048, 4096):
        raise ConfigError(f"{where}.sector_size_bytes = {sector_size} B is not one of 512, 1024, 2048, 4096")
    if n_fats not in (1, 2):
        raise ConfigError(f"{where}.n_fats = {n_fats}: the number of FATs must be 1 or 2")
    vol_start = partition_start_lba or 0
    if vol_start > MAX_LBA32:
        raise ConfigError(f"{where}.partition_start_lba = {vol_start} sectors does not fit the MBR's 32-bit LBA")
    vol = total_sectors - vol_start
    if vol < 128:
        if vol_start:
            raise ConfigError(f"{where}.partition_start_lba = {vol_start} sectors leaves {max(vol, 0)} sectors of "
                              f"the {total_sectors}-sector device: too small for FAT (at least 128)")
        raise ConfigError(f"FAT: the device's {total_sectors} sectors of {sector_size} B are too small for FAT "
                          f"(at least 128)")
    if vol > MAX_LBA32:
        raise ConfigError(f"FAT: a volume of {vol} sectors of {sector_size} B ({vol * sector_size} B) exceeds the "
                          f"{MAX_LBA32} sectors the boot sector can count; use a smaller card or capacity_bytes")
    if fat_type == "auto":
        ftype = 0  # decided below from the cluster count
    elif fat_type in ("fat12", "12"):
        ftype = 12
    elif fat_type in ("fat16", "16"):
        ftype = 16
    elif fat_type in ("fat32", "32"):
        ftype = 32
    else:
        raise ConfigError(f"{where}.fat_type = {fat_type!r} is not auto, fat12, fat16 or fat32")
    if au_bytes:
        if au_bytes % sector_size or au_bytes // sector_size & (au_bytes // sector_size - 1):
            raise ConfigError(f"{where}.allocation_unit_bytes = {au_bytes} B must be a power-of-two multiple of "
                              f"{sector_size} B")
        spc = au_bytes // sector_size
        if spc > 128:
            raise ConfigError(f"{where}.allocation_unit_bytes = {au_bytes} B exceeds 128 sectors of {sector_size} B")
    else:
        spc = _default_spc(vol, ftype or 16, sector_size)
    if align_sectors < 1 or align_sectors & (align_sectors - 1):
        raise ConfigError(f"{where}.align_sectors = {align_sectors} sectors is not a power of two")
    if ftype == 0:
        # FatFs (FM_ANY) tries FAT12/16 first and switches to FAT32 when the clusters do not fit
        ftype = 32 if vol // spc > MAX_FAT16_CLUSTERS else 16
    if ftype == 32:
        rsv, dir_secs = 32, 0
        n_clst = vol // spc
        fat_secs = -(-(n_clst * 4 + 8) // sector_size)
    else:
        rsv, dir_secs = 1, -(-root_entries * 32 // sector_size)
        n_clst = vol // spc
        if fat_type == "auto" and n_clst <= MAX_FAT12_CLUSTERS:
            ftype = 12  # FatFs falls back to FAT12 on small volumes
        fat_bytes = (n_clst * 3 + 1) // 2 + 3 if ftype == 12 else n_clst * 2 + 4
        fat_secs = -(-fat_bytes // sector_size)
    # align the data area start, as FatFs does with the device's block size
    b_data = vol_start + rsv + fat_secs * n_fats + dir_secs
    pad = (-b_data) % align_sectors
    if ftype == 32:
        rsv += pad
    else:
        if pad % n_fats:
            pad -= 1
            rsv += 1
        fat_secs += pad // n_fats
    n_clst = (vol - rsv - fat_secs * n_fats - dir_secs) // spc
    au = f"{spc * sector_size} B clusters ({where}.allocation_unit_bytes)"
    if n_clst < 1:
        raise ConfigError(f"FAT{ftype}: the {vol}-sector volume has no room for data after its FATs and "
                          f"{'alignment' if pad else 'directory'} ({where}.align_sectors = {align_sectors}, "
                          f"{where}.root_entries = {root_entries})")
    if ftype == 32 and not MAX_FAT16_CLUSTERS < n_clst <= MAX_FAT32_CLUSTERS:
        raise ConfigError(f"{where}.fat_type: FAT32 needs {MAX_FAT16_CLUSTERS + 1}..{MAX_FAT32_CLUSTERS} "
                          f"clusters; this {vol * sector_size} B volume with {au} gives {n_clst} (use fat16 or a "
                          f"smaller allocation unit)")
    if ftype == 12 and not 0 < n_clst <= MAX_FAT12_CLUSTERS:
        raise ConfigError(f"{where}.fat_type: FAT12 allows at most {MAX_FAT12_CLUSTERS} clusters; this "
                          f"{vol * sector_size} B volume with {au} gives {n_clst}")
    if ftype == 16 and not MAX_FAT12_CLUSTERS < n_clst <= MAX_FAT16_CLUSTERS:
        raise ConfigError(f"{where}.fat_type: FAT16 needs {MAX_FAT12_CLUSTERS + 1}..{MAX_FAT16_CLUSTERS} clusters; "
                          f"this {vol * sector_size} B volume with {au} gives {n_clst} (use fat32 or another "
                          f"allocation unit)")
    lay = FatLayout(ftype, sector_size, vol_start, vol, rsv, n_fats, fat_secs, dir_secs, spc, n_clst)
    check_bpb(lay, where=where)
    return lay


def check_bpb(lay: FatLayout, *, where: str = "fat") -> None:
    """Refuse a layout whose numbers do not fit the boot sector's fields (FatFs reads them back at mount)."""
    if lay.sectors_per_cluster > 128:   # BPB_SecPerClus, a power of two (FatFs: 1..128)
        raise ConfigError(f"{where}.allocation_unit_bytes: {lay.cluster_bytes} B clusters are "
                          f"{lay.sectors_per_cluster} sectors of {lay.sector_size} B; FAT allows at most 128")
    if lay.reserved_sectors > MAX_U16:   # BPB_RsvdSecCnt
        raise ConfigError(f"{where}.align_sectors: aligning the data area needs {lay.reserved_sectors} reserved "
                          f"sectors; the boot sector holds at most {MAX_U16}")
    if lay.fat_type != 32 and lay.fat_sectors > MAX_U16:   # BPB_FATSz16
        raise ConfigError(f"{where}.align_sectors: aligning the data area makes each FAT {lay.fat_sectors} "
                          f"sectors; FAT12/16 boot sectors hold at most {MAX_U16}")
    if lay.root_dir_sectors * lay.sector_size // 32 > MAX_U16:   # BPB_RootEntCnt
        raise ConfigError(f"{where}.root_entries: {lay.root_dir_sectors * lay.sector_size // 32} entries do not "
                          f"fit the boot sector's 16-bit count")
    if lay.volume_start + lay.volume_sectors - 1 > MAX_LBA32:   # MBR entry, BPB_TotSec32, FatFs' LBA_t
        raise ConfigError(f"FAT: the volume ends at sector {lay.volume_start + lay.volume_sectors - 1} of "
                          f"{lay.sector_size} B; FatFs addresses sectors with 32 bits (at most {MAX_LBA32}): "
                          f"use a smaller card or capacity_bytes")


def _default_spc(vol: int, ftype: int, ss: int) -> int:
    # FatFs' default cluster size tables (by volume size), expressed in bytes
    size = vol * ss
    if ftype == 32:
        table = ((64 << 20, 512), (128 << 20, 1024), (256 << 20, 2048), (8 << 30, 4096), (16 << 30, 8192),
                 (32 << 30, 16384), (1 << 62, 32768))
    else:
        table = ((4 << 20, 512), (16 << 20, 1024), (32 << 20, 2048), (64 << 20, 4096), (128 << 20, 8192),
                 (256 << 20, 16384), (512 << 20, 32768), (1 << 62, 65536))
    for limit, au in table:
        if size < limit:
            return max(1, au // ss)
    return 64


def write_volume(device: BlockDevice, layout: FatLayout, *, volume_id: int = 0x5DB3_0001) -> None:
    """Write MBR (if any), boot sector(s), FSInfo, empty FATs and root directory."""
    ss = layout.sector_size
    if device.geometry.sector_size != ss:
        raise ConfigError(f"device sector size {device.geometry.sector_size} B differs from FAT sector size {ss} B")
    zero_run = 256  # sectors per zeroing write
    if layout.volume_start:
        device.write(0, _mbr(layout))
        # FatFs' fdisk clears the gap before the partition: leave it as it is, only LBA 0 matters.
    # clear reserved area, FATs and root directory (FAT32: the first cluster)
    clear_end = layout.data_start + (layout.sectors_per_cluster if layout.fat_type == 32 else 0)
    lba = layout.volume_start
    while lba < clear_end:
        n = min(zero_run, clear_end - lba)
        device.write(lba, bytes(n * ss))
        lba += n
    device.write(layout.volume_start, _vbr(layout, volume_id))
    if layout.fat_type == 32:
        fsinfo = _fsinfo(layout)
        device.write(layout.volume_start + 1, fsinfo)
        device.write(layout.volume_start + 6, _vbr(layout, volume_id))
        device.write(layout.volume_start + 7, fsinfo)
        head = struct.pack("<III", 0x0FFFFFF8, 0x0FFFFFFF, 0x0FFFFFFF)  # media, reserved, root dir EOC
    elif layout.fat_type == 16:
        head = struct.pack("<HH", 0xFFF8, 0xFFFF)
    else:
        head = b"\xf8\xff\xff"
    first = head + bytes(ss - len(head))
    for i in range(layout.n_fats):
        device.write(layout.fat_start + i * layout.fat_sectors, first)
    device.sync()


def _mbr(layout: FatLayout) -> bytes:
    mbr = bytearray(layout.sector_size)
    ptype = {32: 0x0C, 16: 0x06 if layout.volume_sectors >= 65536 else 0x04, 12: 0x01}[layout.fat_type]
    entry = struct.pack("<B3sB3sII", 0x00, b"\xfe\xff\xff", ptype, b"\xfe\xff\xff",
                        layout.volume_start, layout.volume_sectors)
    mbr[446:446 + 16] = entry
    mbr[510:512] = b"\x55\xaa"
    return bytes(mbr)


def _vbr(layout: FatLayout, volume_id: int) -> bytes:
    ss = layout.sector_size
    b = bytearray(ss)
    b[0:3] = b"\xeb\xfe\x90"
    b[3:11] = b"MSDOS5.0"
    total = layout.volume_sectors
    struct.pack_into("<HBHBHHBHHHII", b, 11,
                     ss, layout.sectors_per_cluster, layout.reserved_sectors, layout.n_fats,
                     0 if layout.fat_type == 32 else layout.root_dir_sectors * ss // 32,
                     total if total < 0x10000 and layout.fat_type != 32 else 0,
                     0xF8, 0 if layout.fat_type == 32 else layout.fat_sectors,
                     63, 255, layout.volume_start, total if (total >= 0x10000 or layout.fat_type == 32) else 0)
    if layout.fat_type == 32:
        struct.pack_into("<IHHIHH12xBxBI11s8s", b, 36, layout.fat_sectors, 0, 0, 2, 1, 6,
                         0x80, 0x29, volume_id, b"NO NAME    ", b"FAT32   ")
    else:
        struct.pack_into("<BxBI11s8s", b, 36, 0x80, 0x29, volume_id, b"NO NAME    ",
                         b"FAT12   " if layout.fat_type == 12 else b"FAT16   ")
    b[510:512] = b"\x55\xaa"
    return bytes(b)


def _fsinfo(layout: FatLayout) -> bytes:
    b = bytearray(layout.sector_size)
    struct.pack_into("<I", b, 0, 0x41615252)
    struct.pack_into("<III", b, 484, 0x61417272, layout.cluster_count - 1, 2)
    b[510:512] = b"\x55\xaa"
    return bytes(b)


def read_layout(device: BlockDevice) -> FatLayout:
    """Find the FAT volume (SFD or first MBR partition) and parse its BPB."""
    from ..errors import FileSystemError

    ss = device.geometry.sector_size
    s0 = device.read(0, 1)
    start = 0
    if not _is_vbr(s0):
        if s0[510:512] != b"\x55\xaa":
            raise FileSystemError("no FAT volume: sector 0 is neither a FAT boot sector nor an MBR")
        start = struct.unpack_from("<I", s0, 446 + 8)[0]
        if not 0 < start < device.geometry.sector_count:
            raise FileSystemError("no FAT volume: the MBR's first partition is empty or out of range")
        s0 = device.read(start, 1)
        if not _is_vbr(s0):
            raise FileSystemError(f"no FAT volume: partition at LBA {start} has no FAT boot sector")
    (bps, spc, rsv, nfat, nroot, tot16, _media, fat16, _spt, _heads, _hidden, tot32) = struct.unpack_from(
        "<HBHBHHBHHHII", s0, 11)
    if bps != ss or spc == 0 or nfat == 0:
        raise FileSystemError("corrupt FAT boot sector (bad bytes/sector, cluster size or FAT count)")
    fat_secs = fat16 or struct.unpack_from("<I", s0, 36)[0]
    total = tot16 or tot32
    dir_secs = (nroot * 32 + bps - 1) // bps
    n_clst = (total - rsv - nfat * fat_secs - dir_secs) // spc
    ftype = 32 if n_clst > MAX_FAT16_CLUSTERS else (16 if n_clst > MAX_FAT12_CLUSTERS else 12)
    return FatLayout(ftype, bps, start, total, rsv, nfat, fat_secs, dir_secs, spc, n_clst)


def _is_vbr(s: bytes) -> bool:
    return s[510:512] == b"\x55\xaa" and s[0] in (0xEB, 0xE9, 0xE8) and (
        s[54:57] == b"FAT" or s[82:87] == b"FAT32")
