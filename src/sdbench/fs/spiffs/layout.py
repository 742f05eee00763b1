"""The SPIFFS on-flash format: sizes, offsets and (de)serialisation, little endian.

Every block starts with object lookup page(s): one ``obj_id`` per page of the
block that is not itself a lookup page (0xFF..FF free, 0 deleted, MSB set for
index pages).  The last entry of the last lookup page holds the block's erase
count and the one before it the magic.  Every other page starts with a page
header ``obj_id, span_ix, flags``; flag bits are *cleared* to record progress
(used, final, index, ix-delete, delete), so a page is updated in place by
programming a single byte.  An object index header page (span 0 of an index)
adds size, type, name and metadata before its table of data page numbers;
further index pages hold only the table.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .config import SpiffsConfig

# page header flag bits (a cleared bit means the state is reached)
PH_FLAG_USED = 1 << 0     # 0: page written
PH_FLAG_FINAL = 1 << 1    # 0: page complete
PH_FLAG_INDEX = 1 << 2    # 0: index page, 1: data page
PH_FLAG_IXDELE = 1 << 6   # 0: index header being deleted
PH_FLAG_DELET = 1 << 7    # 0: page deleted

TYPE_FILE = 1
TYPE_DIR = 2

UNDEFINED_LEN = 0xFFFFFFFF
MAGIC_BASE = 0x20140529

_FMT = {1: "B", 2: "H", 4: "I"}


@dataclass(frozen=True)
class Layout:
    """Derived sizes for a configuration and a partition of ``block_count`` blocks."""

    page_size: int
    block_size: int
    block_count: int
    pages_per_block: int
    lu_pages: int               # object lookup pages per block
    lu_entries: int             # lookup entries per block (= data pages per block)
    entries_per_lu_page: int
    obj_id_len: int
    span_ix_len: int
    page_ix_len: int
    ph_size: int                # page header bytes
    objix_size: int             # index page header incl. alignment padding
    ixhdr_size: int             # index header page fields incl. name and meta (and table alignment)
    ixhdr_struct_len: int       # bytes written when an object is created (sizeof the header struct)
    hdr_ix_len: int             # data page numbers in an index header page
    ix_len: int                 # data page numbers in an index page
    data_page_size: int         # payload bytes per data page
    name_len: int
    meta_len: int
    obj_id_ix_flag: int
    obj_id_free: int
    page_ix_free: int
    span_ix_mask: int
    size_off: int               # offset of the size field in an index header page
    name_off: int
    meta_off: int

    @classmethod
    def build(cls, cfg: SpiffsConfig, block_count: int) -> "Layout":
        ps, bs = cfg.page_size_bytes, cfg.block_size_bytes
        ppb = bs // ps
        lu_pages = max(1, ppb * cfg.obj_id_len // ps)
        ph = cfg.obj_id_len + cfg.span_ix_len + 1
        pad = (4 - ph % 4) % 4
        objix = ph + pad
        size_off = objix
        name_off = objix + 4 + 1
        meta_off = name_off + cfg.obj_name_len
        hdr = meta_off + cfg.meta_len
        struct_len = hdr
        if cfg.aligned_obj_ix_tables:
            a = cfg.page_ix_len
            hdr = (hdr + a - 1) // a * a
            struct_len = hdr
        return cls(
            page_size=ps, block_size=bs, block_count=block_count, pages_per_block=ppb,
            lu_pages=lu_pages, lu_entries=ppb - lu_pages, entries_per_lu_page=ps // cfg.obj_id_len,
            obj_id_len=cfg.obj_id_len, span_ix_len=cfg.span_ix_len, page_ix_len=cfg.page_ix_len,
            ph_size=ph, objix_size=objix, ixhdr_size=hdr, ixhdr_struct_len=struct_len,
            hdr_ix_len=(ps - hdr) // cfg.page_ix_len, ix_len=(ps - objix) // cfg.page_ix_len,
            data_page_size=ps - ph, name_len=cfg.obj_name_len, meta_len=cfg.meta_len,
            obj_id_ix_flag=1 << (8 * cfg.obj_id_len - 1), obj_id_free=(1 << (8 * cfg.obj_id_len)) - 1,
            page_ix_free=(1 << (8 * cfg.page_ix_len)) - 1, span_ix_mask=(1 << (8 * cfg.span_ix_len)) - 1,
            size_off=size_off, name_off=name_off, meta_off=meta_off,
        )

    # ---- addresses (relative to the partition start) ---------------------------------
    def erase_count_addr(self, bix: int) -> int:
        return bix * self.block_size + self.lu_pages * self.page_size - self.obj_id_len

    def magic_addr(self, bix: int) -> int:
        return bix * self.block_size + self.lu_pages * self.page_size - 2 * self.obj_id_len

    def magic(self, bix: int, use_len: bool) -> int:
        m = MAGIC_BASE ^ self.page_size
        if use_len:
            m ^= self.block_count - bix
        return m & self.obj_id_free

    def magic_possible(self) -> bool:
        per = self.entries_per_lu_page
        return (self.lu_entries % per) * self.obj_id_len <= self.page_size - 2 * self.obj_id_len

    def entry_to_pix(self, bix: int, entry: int) -> int:
        return bix * self.pages_per_block + self.lu_pages + entry

    def pix_block(self, pix: int) -> int:
        return pix // self.pages_per_block

    def pix_entry(self, pix: int) -> int:
        return pix % self.pages_per_block - self.lu_pages

    def lu_entry_addr(self, pix: int) -> int:
        """Address of the lookup entry describing page ``pix``."""
        return (pix // self.pages_per_block) * self.block_size + (pix % self.pages_per_block - self.lu_pages) \
            * self.obj_id_len

    def is_lookup_page(self, pix: int) -> bool:
        return pix % self.pages_per_block < self.lu_pages

    # ---- span index arithmetic -------------------------------------------------------
    def objix_spix_for(self, data_spix: int) -> int:
        """Index page span index holding the entry of data span ``data_spix``."""
        h = self.hdr_ix_len
        return 0 if data_spix < h else 1 + (data_spix - h) // self.ix_len

    def objix_entry_for(self, data_spix: int) -> int:
        h = self.hdr_ix_len
        return data_spix if data_spix < h else (data_spix - h) % self.ix_len

    def first_data_spix(self, objix_spix: int) -> int:
        return 0 if objix_spix == 0 else self.hdr_ix_len + (objix_spix - 1) * self.ix_len

    def entry_offset(self, objix_spix: int, data_spix: int) -> int:
        """Byte offset, inside the index page, of the entry for ``data_spix``."""
        if objix_spix == 0:
            return self.ixhdr_size + data_spix * self.page_ix_len
        return self.objix_size + self.objix_entry_for(data_spix) * self.page_ix_len


class Codec:
    """Struct packers for one layout."""

    def __init__(self, lay: Layout) -> None:
        i, s, p = _FMT[lay.obj_id_len], _FMT[lay.span_ix_len], _FMT[lay.page_ix_len]
        self.ph = struct.Struct("<" + i + s + "B")
        self.obj_id = struct.Struct("<" + i)
        self.pix = struct.Struct("<" + p)
        self.size = struct.Struct("<I")
        self.lu_page = struct.Struct("<" + str(lay.entries_per_lu_page) + i)
        self.lay = lay
        self.flags_off = lay.obj_id_len + lay.span_ix_len
        self.spix_off = lay.obj_id_len

    def page_header(self, obj_id: int, span_ix: int, flags: int) -> bytes:
        return self.ph.pack(obj_id, span_ix, flags)

    def index_header(self, obj_id: int, flags: int, size: int, obj_type: int, name: bytes,
                     meta: bytes | None) -> bytearray:
        """The object index header structure written at creation (table excluded)."""
        lay = self.lay
        buf = bytearray(b"\xff" * lay.ixhdr_struct_len)
        self.ph.pack_into(buf, 0, obj_id, 0, flags)
        self.size.pack_into(buf, lay.size_off, size)
        buf[lay.size_off + 4] = obj_type
        n = name[: lay.name_len - 1]
        buf[lay.name_off:lay.name_off + lay.name_len] = n + bytes(lay.name_len - len(n))
        if lay.meta_len:
            buf[lay.meta_off:lay.meta_off + lay.meta_len] = (meta if meta is not None else b"\xff" * lay.meta_len)
        return buf

    @staticmethod
    def cstr(raw: bytes | bytearray) -> bytes:
        z = raw.find(0)
        return bytes(raw if z < 0 else raw[:z])

# object index events (cb_object_event): what happened to an object's index page
EV_IX_UPD, EV_IX_NEW, EV_IX_DEL, EV_IX_MOV, EV_IX_UPD_HDR = range(5)
