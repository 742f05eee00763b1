"""SPIFFS pages: the HAL and the page cache, lookup scans, and the allocation, moves and deletion of pages
(the lower half of the C library's spiffs_nucleus.c), with the file system's state.

Part of an independent Python implementation of the algorithms of the SPIFFS C library (pellepl/spiffs as
ESP-IDF builds it), written so that it issues the same kind and number of flash operations: the same
lookup-page scans (each through the page cache), the same header checks, the same page moves when an index
header is rewritten, and the same bit-clearing flag updates (one-byte programs that rely on NOR flash AND
semantics).  Addresses here are relative to the start of the partition; the HAL adds the partition offset.
Objects and descriptors build on these pages (objects.py), the file API on them (core.py); the garbage
collector (gc.py) is a collaborator of the file system.
"""
from __future__ import annotations

import struct
from collections.abc import Callable

from ...media.base import BlockDevice
from .cache import (C_DELE, C_MOVD, C_MOVS, C_READ, C_UPDT, C_WRTHRU, COM_MASK, F_WRTHRU, T_DA, T_IX, T_LU, T_LU2,
                    TYPE_MASK, CacheSlot, PageCache)
from .config import SpiffsConfig
from .errors import SpiffsError
from .gc import Gc
from .layout import (PH_FLAG_DELET, PH_FLAG_FINAL, PH_FLAG_INDEX, PH_FLAG_IXDELE, PH_FLAG_USED, Codec, Layout)

# lookup visitor flags and results
VIS_CHECK_ID = 1 << 0
VIS_CHECK_PH = 1 << 1
VIS_NO_WRAP = 1 << 2
CONT, RELOAD, STOP = 0, 1, 2

COPY_CHUNK = 256          # SPIFFS_COPY_BUFFER_STACK in ESP-IDF

U32 = struct.Struct("<I")

Visitor = Callable[[int, int, int], int]


class PH:
    """A page header being built (flags are cleared as the write progresses)."""

    __slots__ = ("obj_id", "span_ix", "flags")

    def __init__(self, obj_id: int, span_ix: int, flags: int) -> None:
        self.obj_id = obj_id
        self.span_ix = span_ix
        self.flags = flags


class Fd:
    """A file descriptor slot (closed ones keep their temporal-cache fields)."""

    __slots__ = ("file_nbr", "obj_id", "size", "objix_hdr_pix", "cursor_objix_pix", "cursor_objix_spix",
                 "offset", "fdoffset", "flags", "cache_page", "name_hash", "score", "serial")

    def __init__(self) -> None:
        self.serial = 0           # Python side only: which open() handed this slot out
        self.file_nbr = 0
        self.obj_id = 0
        self.size = 0
        self.objix_hdr_pix = 0
        self.cursor_objix_pix = 0
        self.cursor_objix_spix = 0
        self.offset = 0
        self.fdoffset = 0
        self.flags = 0
        self.cache_page: CacheSlot | None = None
        self.name_hash = 0
        self.score = 0


class PageStore:
    """A SPIFFS file system's state and its page-level operations."""

    #: the garbage collector (gc.py), made by the object layer, which provides all it works with
    gc: Gc

    def __init__(self, device: BlockDevice, cfg: SpiffsConfig, base_bytes: int, size_bytes: int) -> None:
        self.dev = device
        self.cfg = cfg
        self.base = base_bytes
        self.block_count = size_bytes // cfg.block_size_bytes
        self.lay = lay = Layout.build(cfg, self.block_count)
        self.codec = Codec(lay)
        self.phys_erase = device.geometry.erase_size
        self.ps = lay.page_size
        self.bs = lay.block_size
        self.cache: PageCache | None = PageCache(cfg.cache_pages, lay.page_size) if cfg.cache_pages else None
        self.write_cache = bool(self.cache is not None and cfg.write_cache)
        self.free_id = lay.obj_id_free
        self.ix_flag = lay.obj_id_ix_flag
        self.work = bytearray(lay.page_size)
        self.fds = [Fd() for _ in range(cfg.max_open_files)]
        self._serial = 0
        self.mounted = False
        self.last_error = ""     # code of the last error SPIFFS swallowed (its err_code)
        self._reset_state()

    def _reset_state(self) -> None:
        self.free_cursor_bix = 0
        self.free_cursor_entry = 0
        self.cursor_bix = 0
        self.cursor_entry = 0
        self.free_blocks = 0
        self.stats_p_allocated = 0
        self.stats_p_deleted = 0
        self.max_erase_count = 0


    # =====================================================================================
    # HAL and cache
    # =====================================================================================
    def hal_read(self, addr: int, n: int) -> bytes:
        return self.dev.read(self.base + addr, n)

    def hal_write(self, addr: int, data: bytes | bytearray) -> None:
        self.dev.write(self.base + addr, bytes(data))

    def hal_erase(self, addr: int, n: int) -> None:
        self.dev.erase(self.base + addr, n)

    def rd(self, op: int, addr: int, n: int) -> bytes:
        """Read through the page cache (spiffs_phys_rd)."""
        cache = self.cache
        if cache is None:
            return self.hal_read(addr, n)
        ps = self.ps
        pix = addr // ps
        cp = cache.get(pix)
        cache.last_access += 1
        o = addr - pix * ps
        if cp is not None:
            cp.last_access = cache.last_access
            return bytes(cp.data[o:o + n])
        if op & TYPE_MASK == T_LU2:
            return self.hal_read(addr, n)
        cache.remove_oldest(0x80, 0)
        cp = cache.allocate()
        if cp is None:
            return self.hal_read(addr, n)
        cache.set_read_page(cp, pix)
        cp.data[:] = self.hal_read(pix * ps, ps)
        return bytes(cp.data[o:o + n])

    def wr(self, op: int, addr: int, data: bytes | bytearray) -> None:
        """Program through the page cache (spiffs_phys_wr)."""
        cache = self.cache
        if cache is not None:
            ps = self.ps
            pix = addr // ps
            cp = cache.get(pix)
            if cp is not None and op & COM_MASK != C_WRTHRU:
                if op & COM_MASK == C_DELE and op & TYPE_MASK != T_LU:
                    cache.free(cp)
                    self.hal_write(addr, data)
                    return
                o = addr - pix * ps
                if o + len(data) > ps:
                    raise SpiffsError("CORRUPT", "cached program crosses a page boundary")
                cp.data[o:o + len(data)] = data
                cache.last_access += 1
                cp.last_access = cache.last_access
                if cp.flags & F_WRTHRU:
                    self.hal_write(addr, data)
                return
        self.hal_write(addr, data)

    def phys_cpy(self, dst: int, src: int, n: int) -> None:
        while n > 0:
            chunk = min(COPY_CHUNK, n)
            b = self.rd(T_DA | C_MOVS, src, chunk)
            self.wr(T_DA | C_MOVD, dst, b)
            n -= chunk
            src += chunk
            dst += chunk

    def read_lu(self, addr: int) -> tuple[int, ...]:
        return self.codec.lu_page.unpack(self.rd(T_LU | C_READ, addr, self.ps))

    def read_ph(self, op: int, pix: int) -> tuple[int, int, int]:
        return self.codec.ph.unpack(self.rd(op, pix * self.ps, self.lay.ph_size))

    # =====================================================================================
    # lookup scanning
    # =====================================================================================
    def lu_visit(self, start_bix: int, start_entry: int, flags: int, obj_id: int,
                 visitor: Visitor | None = None) -> tuple[int, int] | None:
        """Walk lookup entries from (block, entry), wrapping, until found; None = end.

        With VIS_CHECK_ID only entries equal to ``obj_id`` are considered.  Without
        a visitor the first considered entry is the result; a visitor returns CONT,
        RELOAD (re-read the lookup page first) or STOP (this entry is the result).
        """
        lay = self.lay
        max_e = lay.lu_entries
        epp = lay.entries_per_lu_page
        nblocks = self.block_count
        entry_count = nblocks * max_e
        cur_block = start_bix
        cur_entry = start_entry
        check_id = flags & VIS_CHECK_ID
        report_arg = flags & VIS_CHECK_PH
        if cur_entry > max_e - 1:
            cur_entry = 0
            cur_block += 1
            if cur_block >= nblocks:
                if flags & VIS_NO_WRAP:
                    return None
                cur_block = 0
        ps, bs = self.ps, self.bs
        while entry_count > 0:
            lu_page = cur_entry // epp if cur_entry >= 0 else 0   # C division truncates toward zero
            while lu_page < lay.lu_pages:
                entry_offset = lu_page * epp
                page_addr = cur_block * bs + lu_page * ps
                ids = self.read_lu(page_addr)
                end = min(entry_offset + epp, max_e)
                while cur_entry < 0:
                    # A search cursor taken from a descriptor that never held a file points
                    # before the first entry; the C code then reads the entries in front of
                    # its lookup buffer, i.e. the tail of the work buffer.  Do the same.
                    oid = self.codec.obj_id.unpack_from(self.work, ps + cur_entry * lay.obj_id_len)[0]
                    if not check_id or oid == obj_id:
                        if visitor is None:
                            return cur_block, cur_entry
                        r = visitor(obj_id if report_arg else oid, cur_block, cur_entry)
                        if r == STOP:
                            return cur_block, cur_entry
                        if r == RELOAD:
                            ids = self.read_lu(page_addr)
                    cur_entry += 1
                    entry_count -= 1
                while cur_entry < end:
                    if check_id:
                        try:
                            k = ids.index(obj_id, cur_entry - entry_offset, end - entry_offset) + entry_offset
                        except ValueError:
                            entry_count -= end - cur_entry
                            cur_entry = end
                            break
                        entry_count -= k - cur_entry
                        cur_entry = k
                    if visitor is None:
                        return cur_block, cur_entry
                    r = visitor(obj_id if report_arg else ids[cur_entry - entry_offset], cur_block, cur_entry)
                    if r == STOP:
                        return cur_block, cur_entry
                    if r == RELOAD:
                        ids = self.read_lu(page_addr)
                    cur_entry += 1
                    entry_count -= 1
                lu_page += 1
            cur_entry = 0
            cur_block += 1
            if cur_block >= nblocks:
                if flags & VIS_NO_WRAP:
                    return None
                cur_block = 0
        return None

    def find_free(self) -> tuple[int, int]:
        """Find a free page from the free cursor (spiffs_obj_lu_find_free)."""
        if not self.gc.cleaning and self.free_blocks < 2:
            try:
                self.gc.quick(0)
            except SpiffsError as e:
                if e.code != "NO_DELETED_BLOCKS":
                    raise
            if self.free_blocks < 2:
                raise SpiffsError("FULL")
        r = self.lu_visit(self.free_cursor_bix, self.free_cursor_entry, VIS_CHECK_ID, self.free_id)
        if r is None:
            raise SpiffsError("FULL", "no free page")
        bix, entry = r
        self.free_cursor_bix = bix
        self.free_cursor_entry = entry + 1
        if entry == 0:
            self.free_blocks -= 1
        return bix, entry

    def find_id_and_span(self, obj_id: int, spix: int, exclusion_pix: int = 0) -> int:
        lay, ps = self.lay, self.ps
        unpack = self.codec.ph.unpack
        hsize = lay.ph_size
        ix_flag = self.ix_flag

        def v(_id: int, bix: int, entry: int) -> int:
            pix = lay.entry_to_pix(bix, entry)
            # the C library passes its op/fh arguments swapped here, so this read is cached
            pid, sp, fl = unpack(self.rd(T_LU, pix * ps, hsize))
            if (pid == obj_id and sp == spix
                    and fl & (PH_FLAG_FINAL | PH_FLAG_DELET | PH_FLAG_USED) == PH_FLAG_DELET
                    and not (obj_id & ix_flag and not fl & PH_FLAG_IXDELE and sp == 0)
                    and (exclusion_pix == 0 or exclusion_pix != pix)):
                return STOP
            return CONT

        r = self.lu_visit(self.cursor_bix, self.cursor_entry, VIS_CHECK_ID, obj_id, v)
        if r is None:
            raise SpiffsError("NOT_FOUND", f"object {obj_id & ~ix_flag:#x} span {spix}")
        self.cursor_bix, self.cursor_entry = r
        return lay.entry_to_pix(*r)

    # =====================================================================================
    # blocks and pages
    # =====================================================================================
    def erase_block(self, bix: int) -> None:
        lay = self.lay
        addr = bix * self.bs
        size = self.bs
        while size > 0:
            self.hal_erase(addr, self.phys_erase)
            addr += self.phys_erase
            size -= self.phys_erase
        self.free_blocks += 1
        pk = self.codec.obj_id.pack
        self.wr(C_WRTHRU | T_LU2, lay.erase_count_addr(bix), pk(self.max_erase_count & self.free_id))
        if self.cfg.use_magic:
            self.wr(C_WRTHRU | T_LU2, lay.magic_addr(bix), pk(lay.magic(bix, self.cfg.use_magic_len)))
        self.max_erase_count += 1
        if self.max_erase_count == self.ix_flag:
            self.max_erase_count = 0

    def page_allocate_data(self, obj_id: int, ph: PH, data: bytes | None, page_offs: int, finalize: bool) -> int:
        lay = self.lay
        bix, entry = self.find_free()
        self.wr(T_LU | C_UPDT, bix * self.bs + entry * lay.obj_id_len, self.codec.obj_id.pack(obj_id))
        self.stats_p_allocated += 1
        addr = (bix * lay.pages_per_block + lay.lu_pages + entry) * self.ps
        ph.flags &= ~PH_FLAG_USED & 0xFF
        self.wr(T_DA | C_UPDT, addr, self.codec.ph.pack(ph.obj_id, ph.span_ix & lay.span_ix_mask, ph.flags))
        if data is not None:
            self.wr(T_DA | C_UPDT, addr + lay.ph_size + page_offs, data)
        if finalize and ph.flags & PH_FLAG_FINAL:
            ph.flags &= ~PH_FLAG_FINAL & 0xFF
            self.wr(T_DA | C_UPDT, addr + self.codec.flags_off, bytes((ph.flags,)))
        return lay.entry_to_pix(bix, entry)

    def page_move(self, page_data: bytearray | None, obj_id: int, src_pix: int) -> int:
        """Copy a page (or write ``page_data``) to a free page, finalize it, delete the source."""
        lay, ps = self.lay, self.ps
        bix, entry = self.find_free()
        free_pix = lay.entry_to_pix(bix, entry)
        fo = self.codec.flags_off
        was_final = False
        if page_data is not None:
            flags = page_data[fo]
            was_final = not flags & PH_FLAG_FINAL
            flags = (flags | PH_FLAG_FINAL) & ~PH_FLAG_USED & 0xFF
            page_data[fo] = flags
            self.wr(T_DA | C_UPDT, free_pix * ps, page_data)
        else:
            self.phys_cpy(free_pix * ps, src_pix * ps, ps)
        self.wr(T_LU | C_UPDT, lay.lu_entry_addr(free_pix), self.codec.obj_id.pack(obj_id))
        self.stats_p_allocated += 1
        if was_final and page_data is not None:
            flags = page_data[fo] & ~(PH_FLAG_FINAL | PH_FLAG_USED) & 0xFF
            page_data[fo] = flags
            self.wr(T_DA | C_UPDT, free_pix * ps + fo, bytes((flags,)))
        self.page_delete(src_pix)
        return free_pix

    def page_delete(self, pix: int) -> None:
        self.wr(T_LU | C_DELE, self.lay.lu_entry_addr(pix), bytes(self.lay.obj_id_len))
        self.stats_p_deleted += 1
        self.stats_p_allocated -= 1
        flags = 0xFF & ~(PH_FLAG_DELET | PH_FLAG_USED)
        self.wr(T_DA | C_DELE, pix * self.ps + self.codec.flags_off, bytes((flags,)))

    # ---- page validation (page checks) ------------------------------------------------
    def _check_pix(self, pix: int, free_code: str, lu_code: str, invalid_code: str) -> str | None:
        lay = self.lay
        if pix == lay.page_ix_free:
            return free_code
        if pix % lay.pages_per_block < lay.lu_pages:
            return lu_code
        if pix > self.block_count * lay.pages_per_block:
            return invalid_code
        return None

    def validate_objix(self, obj_id: int, spix: int, flags: int, want_spix: int) -> str | None:
        """SPIFFS_VALIDATE_OBJIX: ``obj_id`` is the caller's (lookup) id, not the header's."""
        if flags & PH_FLAG_USED:
            return "IS_FREE"
        if not flags & PH_FLAG_DELET:
            return "DELETED"
        if flags & PH_FLAG_FINAL:
            return "NOT_FINALIZED"
        if flags & PH_FLAG_INDEX:
            return "NOT_INDEX"
        if not obj_id & self.ix_flag:
            return "NOT_INDEX"
        if spix != want_spix:
            return "INDEX_SPAN_MISMATCH"
        return None

    def validate_data(self, obj_id: int, spix: int, flags: int, want_spix: int) -> str | None:
        if flags & PH_FLAG_USED:
            return "IS_FREE"
        if not flags & PH_FLAG_DELET:
            return "DELETED"
        if flags & PH_FLAG_FINAL:
            return "NOT_FINALIZED"
        if not flags & PH_FLAG_INDEX:
            return "IS_INDEX"
        if obj_id & self.ix_flag:
            return "IS_INDEX"
        if spix != want_spix:
            return "DATA_SPAN_MISMATCH"
        return None

    def page_data_check(self, fd: Fd, pix: int, spix: int) -> str | None:
        err = self._check_pix(pix, "INDEX_REF_FREE", "INDEX_REF_LU", "INDEX_REF_INVALID")
        if err or not self.cfg.page_checks:
            return err
        _pid, sp, fl = self.read_ph(T_DA | C_READ, pix)
        return self.validate_data(fd.obj_id & ~self.ix_flag, sp, fl, spix & self.lay.span_ix_mask)

    def page_index_check(self, fd: Fd, pix: int, spix: int) -> None:
        err = self._check_pix(pix, "INDEX_FREE", "INDEX_LU", "INDEX_INVALID")
        if err is None and self.cfg.page_checks:
            _pid, sp, fl = self.read_ph(T_IX | C_READ, pix)
            err = self.validate_objix(fd.obj_id, sp, fl, spix & self.lay.span_ix_mask)
        if err:
            raise SpiffsError(err, f"index page {pix}")

    def check_work_objix(self, obj_id: int, want_spix: int) -> None:
        _pid, sp, fl = self.codec.ph.unpack_from(self.work, 0)
        err = self.validate_objix(obj_id, sp, fl, want_spix & self.lay.span_ix_mask)
        if err:
            raise SpiffsError(err, "object index")

    # ---- object index table in the work buffer ----------------------------------------
    def _ix_get(self, objix_spix: int, data_spix: int) -> int:
        return self.codec.pix.unpack_from(self.work, self.lay.entry_offset(objix_spix, data_spix))[0]

    def ix_set(self, objix_spix: int, data_spix: int, pix: int) -> None:
        self.codec.pix.pack_into(self.work, self.lay.entry_offset(objix_spix, data_spix), pix & self.lay.page_ix_free)

    def _work_size(self) -> int:
        return U32.unpack_from(self.work, self.lay.size_off)[0]

    def _set_work_size(self, size: int) -> None:
        U32.pack_into(self.work, self.lay.size_off, size & 0xFFFFFFFF)

    def _load_work(self, pix: int) -> None:
        self.work[:] = self.rd(T_IX | C_READ, pix * self.ps, self.ps)
