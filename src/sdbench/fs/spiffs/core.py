"""The SPIFFS engine: lookup scans, page allocation, objects, descriptors and the file API.

This is an independent Python implementation of the algorithms of the SPIFFS
C library (pellepl/spiffs as ESP-IDF builds it), written so that it issues the same
kind and number of flash operations: the same lookup-page scans (each through
the page cache), the same header checks, the same page moves when an index
header is rewritten, and the same bit-clearing flag updates (one-byte
programs that rely on NOR flash AND semantics).  Addresses here are relative
to the start of the partition; the HAL adds the partition offset.
"""
from __future__ import annotations

import struct
from typing import Callable

from ...media.base import BlockDevice
from .cache import (C_DELE, C_MOVD, C_MOVS, C_READ, C_UPDT, C_WRTHRU, COM_MASK, F_WRTHRU, T_DA, T_IX, T_LU, T_LU2,
                    TYPE_MASK, CacheSlot, PageCache)
from .config import SpiffsConfig
from .errors import SpiffsError
from .gc import GcMixin
from .layout import (EV_IX_DEL, EV_IX_NEW, EV_IX_UPD, EV_IX_UPD_HDR, PH_FLAG_DELET, PH_FLAG_FINAL, PH_FLAG_INDEX,
                     PH_FLAG_IXDELE, PH_FLAG_USED, TYPE_FILE, UNDEFINED_LEN, Codec, Layout)

# open flags (SPIFFS_O_*)
O_APPEND = 1 << 0
O_TRUNC = 1 << 1
O_CREAT = 1 << 2
O_RDONLY = 1 << 3
O_WRONLY = 1 << 4
O_RDWR = O_RDONLY | O_WRONLY
O_DIRECT = 1 << 5
O_EXCL = 1 << 6

SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2

# lookup visitor flags and results
VIS_CHECK_ID = 1 << 0
VIS_CHECK_PH = 1 << 1
VIS_NO_WRAP = 1 << 2
CONT, RELOAD, STOP = 0, 1, 2

COPY_CHUNK = 256          # SPIFFS_COPY_BUFFER_STACK in ESP-IDF
TEMPORAL_HIT_SCORE = 4

_U32 = struct.Struct("<I")

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


class SpiffsCore(GcMixin):
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
        # counters for reports and tests
        self.gc_runs = 0
        self.gc_erases = 0

    def _reset_state(self) -> None:
        self.free_cursor_bix = 0
        self.free_cursor_entry = 0
        self.cursor_bix = 0
        self.cursor_entry = 0
        self.free_blocks = 0
        self.stats_p_allocated = 0
        self.stats_p_deleted = 0
        self.max_erase_count = 0
        self.cleaning = False

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
        if not self.cleaning and self.free_blocks < 2:
            try:
                self.gc_quick(0)
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

    def _validate_work_objix(self, obj_id: int, want_spix: int) -> None:
        _pid, sp, fl = self.codec.ph.unpack_from(self.work, 0)
        err = self.validate_objix(obj_id, sp, fl, want_spix & self.lay.span_ix_mask)
        if err:
            raise SpiffsError(err, "object index")

    # ---- object index table in the work buffer ----------------------------------------
    def _ix_get(self, objix_spix: int, data_spix: int) -> int:
        return self.codec.pix.unpack_from(self.work, self.lay.entry_offset(objix_spix, data_spix))[0]

    def _ix_set(self, objix_spix: int, data_spix: int, pix: int) -> None:
        self.codec.pix.pack_into(self.work, self.lay.entry_offset(objix_spix, data_spix), pix & self.lay.page_ix_free)

    def _work_size(self) -> int:
        return _U32.unpack_from(self.work, self.lay.size_off)[0]

    def _set_work_size(self, size: int) -> None:
        _U32.pack_into(self.work, self.lay.size_off, size & 0xFFFFFFFF)

    def _load_work(self, pix: int) -> None:
        self.work[:] = self.rd(T_IX | C_READ, pix * self.ps, self.ps)

    # =====================================================================================
    # objects
    # =====================================================================================
    def object_create(self, obj_id: int, name: bytes, meta: bytes | None, obj_type: int = TYPE_FILE) -> int:
        lay = self.lay
        self.gc_check(lay.data_page_size)
        obj_id |= self.ix_flag
        bix, entry = self.find_free()
        self.wr(T_LU | C_UPDT, bix * self.bs + entry * lay.obj_id_len, self.codec.obj_id.pack(obj_id))
        self.stats_p_allocated += 1
        flags = 0xFF & ~(PH_FLAG_FINAL | PH_FLAG_INDEX | PH_FLAG_USED)
        hdr = self.codec.index_header(obj_id, flags, UNDEFINED_LEN, obj_type, name, meta)
        pix = lay.entry_to_pix(bix, entry)
        self.wr(T_DA | C_UPDT, pix * self.ps, hdr)
        self.cb_object_event(EV_IX_NEW, obj_id, 0, pix, UNDEFINED_LEN)
        return pix

    def update_index_hdr(self, fd: Fd | None, obj_id: int, objix_hdr_pix: int, have_data: bool,
                         name: bytes | None = None, meta: bytes | None = None, size: int = 0) -> int:
        """Rewrite an index header page (in self.work, or loaded) to a new page."""
        lay = self.lay
        obj_id |= self.ix_flag
        if not have_data:
            self._load_work(objix_hdr_pix)
        self._validate_work_objix(obj_id, 0)
        w = self.work
        if name is not None:
            n = name[: lay.name_len - 1]
            w[lay.name_off:lay.name_off + lay.name_len] = n + bytes(lay.name_len - len(n))
        if meta is not None and lay.meta_len:
            w[lay.meta_off:lay.meta_off + lay.meta_len] = meta[: lay.meta_len].ljust(lay.meta_len, b"\xff")
        if size:
            self._set_work_size(size)
        new_pix = self.page_move(w, obj_id, objix_hdr_pix)
        _pid, spix, _fl = self.codec.ph.unpack_from(w, 0)
        self.cb_object_event(EV_IX_UPD if have_data else EV_IX_UPD_HDR, obj_id, spix, new_pix, self._work_size())
        if fd is not None:
            fd.objix_hdr_pix = new_pix
        return new_pix

    def cb_object_event(self, ev: int, obj_id_raw: int, spix: int, new_pix: int, new_size: int) -> None:
        """Keep every descriptor (open, and closed ones of the temporal cache) in step."""
        ix = self.ix_flag
        obj_id = obj_id_raw & ~ix
        temporal = self.cfg.temporal_fd_cache
        for fd in self.fds:
            if fd.obj_id & ~ix != obj_id:
                continue
            if not temporal and fd.file_nbr == 0:
                continue
            if spix == 0:
                if ev != EV_IX_DEL:
                    if temporal and fd.score == 0:
                        continue
                    fd.objix_hdr_pix = new_pix
                    if new_size != 0:
                        fd.size = new_size
                        act = 0 if new_size == UNDEFINED_LEN else new_size
                        cp = fd.cache_page
                        if self.write_cache and act > 0 and cp is not None:
                            act = max(act, cp.offset + cp.size)
                        if fd.offset > act:
                            fd.offset = act
                        if fd.fdoffset > act:
                            fd.fdoffset = act
                        if self.write_cache and cp is not None and cp.offset > act + 1:
                            self.cache_fd_release(cp)
                else:
                    if self.write_cache and fd.file_nbr and fd.cache_page is not None:
                        self.cache_fd_release(fd.cache_page)
                    fd.file_nbr = 0
                    fd.obj_id = 0
            if fd.cursor_objix_spix == spix:
                fd.cursor_objix_pix = new_pix if ev != EV_IX_DEL else 0

    def open_by_page(self, pix: int, fd: Fd, flags: int) -> None:
        lay = self.lay
        hdr = self.rd(T_IX | C_READ, pix * self.ps, lay.ixhdr_struct_len)
        obj_id = self.codec.obj_id.unpack(self.rd(T_LU | C_READ, lay.lu_entry_addr(pix), lay.obj_id_len))[0]
        _pid, sp, fl = self.codec.ph.unpack_from(hdr, 0)
        fd.objix_hdr_pix = pix
        fd.size = _U32.unpack_from(hdr, lay.size_off)[0]
        fd.offset = 0
        fd.cursor_objix_pix = pix
        fd.cursor_objix_spix = 0
        fd.obj_id = obj_id
        fd.flags = flags
        err = self.validate_objix(obj_id, sp, fl, 0)
        if err:
            raise SpiffsError(err, f"object header page {pix}")

    # ---- append ---------------------------------------------------------------------------
    def object_append(self, fd: Fd, offset: int, data: bytes) -> None:
        lay = self.lay
        dps = lay.data_page_size
        ix = self.ix_flag
        length = len(data)
        if offset > fd.size:
            offset = fd.size
        self.gc_check(length + dps)
        written = 0
        cur_objix_spix = 0
        prev_objix_spix = -1
        cur_objix_pix = fd.objix_hdr_pix
        data_spix = offset // dps
        page_offs = offset % dps
        failed: SpiffsError | None = None
        while written < length:
            cur_objix_spix = lay.objix_spix_for(data_spix)
            if cur_objix_spix != prev_objix_spix:
                if written > 0:
                    # store the index page filled so far
                    if prev_objix_spix == 0:
                        self._set_work_size(offset + written)
                        if offset == 0:
                            self.page_index_check(fd, cur_objix_pix, 0)
                            self.wr(T_IX | C_UPDT, cur_objix_pix * self.ps, self.work)
                        else:
                            self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, True, size=offset + written)
                    else:
                        self.page_index_check(fd, cur_objix_pix, prev_objix_spix)
                        self.wr(T_IX | C_UPDT, cur_objix_pix * self.ps, self.work)
                        spx = self.codec.ph.unpack_from(self.work, 0)[1]
                        self.cb_object_event(EV_IX_UPD, fd.obj_id, spx, cur_objix_pix, 0)
                        self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, False, size=offset + written)
                    fd.size = offset + written
                    fd.offset = offset + written
                # load or create the next index page
                if cur_objix_spix == 0:
                    self._load_work(cur_objix_pix)
                    self._validate_work_objix(fd.obj_id, 0)
                else:
                    len_objix_spix = lay.objix_spix_for(((fd.size - 1) & 0xFFFFFFFF) // dps) & lay.span_ix_mask
                    if written > 0 or cur_objix_spix > len_objix_spix:
                        ph = PH(fd.obj_id | ix, cur_objix_spix, 0xFF & ~(PH_FLAG_FINAL | PH_FLAG_INDEX))
                        cur_objix_pix = self.page_allocate_data(fd.obj_id | ix, ph, None, 0, True)
                        self.work[:] = b"\xff" * self.ps
                        self.codec.ph.pack_into(self.work, 0, ph.obj_id, ph.span_ix & lay.span_ix_mask, ph.flags)
                        self.cb_object_event(EV_IX_NEW, fd.obj_id, cur_objix_spix, cur_objix_pix, 0)
                    else:
                        if fd.cursor_objix_spix == cur_objix_spix:
                            pix = fd.cursor_objix_pix
                        else:
                            pix = self.find_id_and_span(fd.obj_id | ix, cur_objix_spix)
                        self._load_work(pix)
                        self._validate_work_objix(fd.obj_id, cur_objix_spix)
                        cur_objix_pix = pix
                    fd.cursor_objix_pix = cur_objix_pix
                    fd.cursor_objix_spix = cur_objix_spix
                    fd.offset = offset + written
                    fd.size = offset + written
                prev_objix_spix = cur_objix_spix
            # write data
            to_write = min(length - written, dps - page_offs)
            chunk = data[written:written + to_write]
            if page_offs == 0:
                ph = PH(fd.obj_id & ~ix, data_spix, 0xFF & ~PH_FLAG_FINAL)
                try:
                    data_page = self.page_allocate_data(fd.obj_id & ~ix, ph, chunk, 0, True)
                except SpiffsError as e:
                    # as the C code: stop, but still store the index written so far
                    failed = e
                    break
            else:
                data_page = self._ix_get(cur_objix_spix, data_spix)
                err = self.page_data_check(fd, data_page, data_spix)
                if err:
                    raise SpiffsError(err, f"data page {data_page}")
                self.wr(T_DA | C_UPDT, data_page * self.ps + lay.ph_size + page_offs, chunk)
            self._ix_set(cur_objix_spix, data_spix, data_page)
            if cur_objix_spix == 0:
                self._set_work_size(offset + written)
            page_offs = 0
            data_spix += 1
            written += to_write
        fd.size = offset + written
        fd.offset = offset + written
        fd.cursor_objix_pix = cur_objix_pix
        fd.cursor_objix_spix = cur_objix_spix
        # finalize the index page in the work buffer
        if cur_objix_spix != 0:
            self.page_index_check(fd, cur_objix_pix, cur_objix_spix)
            self.wr(T_IX | C_UPDT, cur_objix_pix * self.ps, self.work)
            spx = self.codec.ph.unpack_from(self.work, 0)[1]
            self.cb_object_event(EV_IX_UPD, fd.obj_id, spx, cur_objix_pix, 0)
            self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, False, size=offset + written)
        elif offset == 0:
            self._set_work_size(offset + written)
            self.page_index_check(fd, cur_objix_pix, cur_objix_spix)
            self.wr(T_IX | C_UPDT, cur_objix_pix * self.ps, self.work)
            spx = self.codec.ph.unpack_from(self.work, 0)[1]
            self.cb_object_event(EV_IX_UPD_HDR, fd.obj_id, spx, cur_objix_pix, self._work_size())
        else:
            self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, True, size=offset + written)
        if failed is not None:
            raise failed

    # ---- modify (overwrite inside the file) -------------------------------------------------
    def object_modify(self, fd: Fd, offset: int, data: bytes) -> None:
        lay = self.lay
        dps = lay.data_page_size
        ix = self.ix_flag
        ps = self.ps
        length = len(data)
        self.gc_check(length + dps)
        written = 0
        cur_objix_spix = 0
        prev_objix_spix = -1
        cur_objix_pix = fd.objix_hdr_pix
        data_spix = offset // dps
        page_offs = offset % dps
        failed: SpiffsError | None = None
        data_pix = lay.page_ix_free   # kept across iterations, as the C local
        while written < length:
            cur_objix_spix = lay.objix_spix_for(data_spix)
            if cur_objix_spix != prev_objix_spix:
                if written > 0:
                    if prev_objix_spix == 0:
                        self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, True)
                    else:
                        self.page_index_check(fd, cur_objix_pix, prev_objix_spix)
                        new_objix_pix = self.page_move(self.work, fd.obj_id, cur_objix_pix)
                        spx = self.codec.ph.unpack_from(self.work, 0)[1]
                        self.cb_object_event(EV_IX_UPD, fd.obj_id, spx, new_objix_pix, 0)
                if cur_objix_spix == 0:
                    self._load_work(cur_objix_pix)
                    self._validate_work_objix(fd.obj_id, 0)
                else:
                    if fd.cursor_objix_spix == cur_objix_spix:
                        pix = fd.cursor_objix_pix
                    else:
                        pix = self.find_id_and_span(fd.obj_id | ix, cur_objix_spix)
                    self._load_work(pix)
                    self._validate_work_objix(fd.obj_id, cur_objix_spix)
                    cur_objix_pix = pix
                fd.cursor_objix_pix = cur_objix_pix
                fd.cursor_objix_spix = cur_objix_spix
                fd.offset = offset + written
                prev_objix_spix = cur_objix_spix
            to_write = min(length - written, dps - page_offs)
            chunk = data[written:written + to_write]
            orig_data_pix = self._ix_get(cur_objix_spix, data_spix)
            ph = PH(fd.obj_id & ~ix, data_spix, 0xFF)
            if page_offs == 0 and to_write == dps:
                try:
                    data_pix = self.page_allocate_data(fd.obj_id & ~ix, ph, chunk, 0, True)
                except SpiffsError:
                    # The C code overwrites this result with that of deleting the original
                    # page below, so a full file system loses the page here.  Same.
                    pass
            else:
                err = self.page_data_check(fd, orig_data_pix, data_spix)
                if err:
                    raise SpiffsError(err, f"data page {orig_data_pix}")
                try:
                    data_pix = self.page_allocate_data(fd.obj_id & ~ix, ph, None, 0, False)
                except SpiffsError as e:
                    failed = e
                    break
                if page_offs > 0:
                    self.phys_cpy(data_pix * ps + lay.ph_size, orig_data_pix * ps + lay.ph_size, page_offs)
                if page_offs + to_write < dps:
                    o = lay.ph_size + page_offs + to_write
                    self.phys_cpy(data_pix * ps + o, orig_data_pix * ps + o, dps - (page_offs + to_write))
                self.wr(T_DA | C_UPDT, data_pix * ps + lay.ph_size + page_offs, chunk)
                ph.flags &= ~PH_FLAG_FINAL & 0xFF
                self.wr(T_DA | C_UPDT, data_pix * ps + self.codec.flags_off, bytes((ph.flags,)))
            self.page_delete(orig_data_pix)
            self._ix_set(cur_objix_spix, data_spix, data_pix)
            page_offs = 0
            data_spix += 1
            written += to_write
        fd.offset = offset + written
        fd.cursor_objix_pix = cur_objix_pix
        fd.cursor_objix_spix = cur_objix_spix
        if cur_objix_spix != 0:
            self.page_index_check(fd, cur_objix_pix, cur_objix_spix)
            new_objix_pix = self.page_move(self.work, fd.obj_id, cur_objix_pix)
            fd.cursor_objix_pix = new_objix_pix
            fd.cursor_objix_spix = cur_objix_spix
            spx = self.codec.ph.unpack_from(self.work, 0)[1]
            self.cb_object_event(EV_IX_UPD, fd.obj_id, spx, new_objix_pix, 0)
        else:
            self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, True)
        if failed is not None:
            raise failed

    # ---- truncate / remove ----------------------------------------------------------------------
    def object_truncate(self, fd: Fd, new_size: int, remove_full: bool) -> None:
        lay = self.lay
        dps = lay.data_page_size
        ix = self.ix_flag
        ps = self.ps
        if (fd.size == UNDEFINED_LEN or fd.size == 0) and not remove_full:
            return
        if not remove_full:
            self.gc_check(dps * 2)
        objix_pix = fd.objix_hdr_pix
        data_spix = (fd.size - 1 if fd.size > 0 else 0) // dps
        cur_size = 0 if fd.size == UNDEFINED_LEN else fd.size
        cur_objix_spix = 0
        prev_objix_spix = -1
        if remove_full and new_size == 0:
            flags = 0xFF & ~(PH_FLAG_USED | PH_FLAG_INDEX | PH_FLAG_FINAL | PH_FLAG_IXDELE)
            self.wr(T_IX | C_UPDT, fd.objix_hdr_pix * ps + self.codec.flags_off, bytes((flags,)))
        while cur_size > new_size:
            cur_objix_spix = lay.objix_spix_for(data_spix)
            if prev_objix_spix != cur_objix_spix:
                if prev_objix_spix != -1:
                    # the previous index page is empty now
                    self.page_index_check(fd, objix_pix, prev_objix_spix)
                    self.page_delete(objix_pix)
                    spx = self.codec.ph.unpack_from(self.work, 0)[1]
                    self.cb_object_event(EV_IX_DEL, fd.obj_id, spx, objix_pix, 0)
                    if prev_objix_spix > 0:
                        if not remove_full:
                            self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, False, size=cur_size)
                        fd.size = cur_size
                if cur_objix_spix == 0:
                    objix_pix = fd.objix_hdr_pix
                else:
                    objix_pix = self.find_id_and_span(fd.obj_id | ix, cur_objix_spix)
                self._load_work(objix_pix)
                self._validate_work_objix(fd.obj_id, cur_objix_spix)
                fd.cursor_objix_pix = objix_pix
                fd.cursor_objix_spix = cur_objix_spix
                fd.offset = cur_size
                prev_objix_spix = cur_objix_spix
            data_pix = self._ix_get(cur_objix_spix, data_spix)
            self._ix_set(cur_objix_spix, data_spix, self.free_id)
            if new_size == 0 or remove_full or cur_size - new_size >= dps:
                err = self.page_data_check(fd, data_pix, data_spix)
                if err is None:
                    self.page_delete(data_pix)
                elif err not in ("DELETED", "INDEX_REF_FREE"):
                    break
                if cur_size % dps == 0:
                    cur_size -= dps
                else:
                    cur_size -= cur_size % dps
                fd.size = cur_size
                fd.offset = cur_size
            else:
                # keep the head of the last page: copy it to a new page
                bytes_to_remove = dps - new_size % dps
                err = self.page_data_check(fd, data_pix, data_spix)
                if err:
                    break
                ph = PH(fd.obj_id & ~ix, data_spix, 0xFF)
                try:
                    new_data_pix = self.page_allocate_data(fd.obj_id & ~ix, ph, None, 0, False)
                except SpiffsError:
                    break   # the C code goes on to store the index; its result replaces this one
                self.phys_cpy(new_data_pix * ps + lay.ph_size, data_pix * ps + lay.ph_size, dps - bytes_to_remove)
                self.page_delete(data_pix)
                ph.flags &= ~PH_FLAG_FINAL & 0xFF
                self.wr(T_DA | C_UPDT, new_data_pix * ps + self.codec.flags_off, bytes((ph.flags,)))
                self._ix_set(cur_objix_spix, data_spix, new_data_pix)
                cur_size = new_size
                fd.size = new_size
                fd.offset = cur_size
                break
            data_spix -= 1
        # store the index
        if cur_objix_spix == 0:
            if cur_size == 0:
                if remove_full:
                    self.page_index_check(fd, objix_pix, 0)
                    self.page_delete(objix_pix)
                    self.cb_object_event(EV_IX_DEL, fd.obj_id, 0, objix_pix, 0)
                else:
                    self.work[lay.ixhdr_size:] = b"\xff" * (ps - lay.ixhdr_size)
                    self.update_index_hdr(fd, fd.obj_id, objix_pix, True, size=UNDEFINED_LEN)
            else:
                self.update_index_hdr(fd, fd.obj_id, objix_pix, True, size=cur_size)
        else:
            self.page_index_check(fd, objix_pix, cur_objix_spix)
            new_objix_pix = self.page_move(self.work, fd.obj_id, objix_pix)
            spx = self.codec.ph.unpack_from(self.work, 0)[1]
            self.cb_object_event(EV_IX_UPD, fd.obj_id, spx, new_objix_pix, 0)
            fd.cursor_objix_pix = new_objix_pix
            fd.cursor_objix_spix = cur_objix_spix
            fd.offset = cur_size
            self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, False, size=cur_size)
        fd.size = cur_size

    # ---- read ------------------------------------------------------------------------------------
    def object_read(self, fd: Fd, offset: int, length: int) -> bytes:
        lay = self.lay
        dps = lay.data_page_size
        ps = self.ps
        out = bytearray()
        data_spix = offset // dps
        cur_offset = offset
        end = offset + length
        prev_objix_spix = -1
        while cur_offset < end:
            cur_objix_spix = lay.objix_spix_for(data_spix)
            if prev_objix_spix != cur_objix_spix:
                if cur_objix_spix == 0:
                    objix_pix = fd.objix_hdr_pix
                elif fd.cursor_objix_spix == cur_objix_spix:
                    objix_pix = fd.cursor_objix_pix
                else:
                    objix_pix = self.find_id_and_span(fd.obj_id | self.ix_flag, cur_objix_spix)
                self._load_work(objix_pix)
                self._validate_work_objix(fd.obj_id, cur_objix_spix)
                fd.offset = cur_offset
                fd.cursor_objix_pix = objix_pix
                fd.cursor_objix_spix = cur_objix_spix
                prev_objix_spix = cur_objix_spix
            data_pix = self._ix_get(cur_objix_spix, data_spix)
            in_page = cur_offset % dps
            n = min(end - cur_offset, dps - in_page, fd.size - cur_offset)
            if n <= 0:
                break
            err = self.page_data_check(fd, data_pix, data_spix)
            if err:
                raise SpiffsError(err, f"data page {data_pix}")
            out += self.rd(T_DA | C_READ, data_pix * ps + lay.ph_size + in_page, n)
            cur_offset += n
            fd.offset = cur_offset
            data_spix += 1
        return bytes(out)

    # ---- names and ids ---------------------------------------------------------------------------
    def _hdr_visitor(self, name: bytes | None, sink: list | None) -> Visitor:
        """Visitor matching live index header pages (by name, or collecting all)."""
        lay, ps = self.lay, self.ps
        ix, free = self.ix_flag, self.free_id
        unpack = self.codec.ph.unpack_from
        n_off, n_len, slen = lay.name_off, lay.name_len, lay.ixhdr_struct_len
        want = PH_FLAG_DELET | PH_FLAG_IXDELE
        mask = PH_FLAG_DELET | PH_FLAG_FINAL | PH_FLAG_IXDELE

        def v(oid: int, bix: int, entry: int) -> int:
            if oid == free or oid == 0 or not oid & ix:
                return CONT
            pix = lay.entry_to_pix(bix, entry)
            raw = self.rd(T_LU2 | C_READ, pix * ps, slen)
            _pid, sp, fl = unpack(raw, 0)
            if sp == 0 and fl & mask == want:
                nm = Codec.cstr(raw[n_off:n_off + n_len])
                if name is not None and nm == name:
                    return STOP
                if sink is not None:
                    sink.append((oid, pix, raw))
                    return STOP
            return CONT

        return v

    def find_by_name(self, name: bytes) -> int:
        r = self.lu_visit(self.cursor_bix, self.cursor_entry, 0, 0, self._hdr_visitor(name, None))
        if r is None:
            raise SpiffsError("NOT_FOUND", name.decode("utf-8", "replace"))
        self.cursor_bix, self.cursor_entry = r
        return self.lay.entry_to_pix(*r)

    def find_free_obj_id(self, conflicting_name: bytes | None) -> int:
        lay, ps = self.lay, self.ps
        ix, free = self.ix_flag, self.free_id
        max_objects = self.block_count * lay.lu_entries // 2
        min_id = 1
        max_id = max_objects + 1
        if max_id & ix:
            max_id = free & ~ix
        compaction = 0
        slen = lay.ixhdr_struct_len
        unpack = self.codec.ph.unpack_from
        n_off, n_len = lay.name_off, lay.name_len
        live = PH_FLAG_DELET | PH_FLAG_IXDELE
        live_mask = PH_FLAG_DELET | PH_FLAG_FINAL | PH_FLAG_IXDELE
        bits = ps * 8
        limit = bits & free  # the C code compares against (spiffs_obj_id)(page_size * 8)
        while True:
            if max_id - min_id <= limit:
                # the C code keeps this bitmap (and the compaction counts below) in its work buffer
                bitmap = self.work
                bitmap[:] = bytes(ps)
                base = min_id
                cname = conflicting_name

                def vb(oid: int, bix: int, entry: int) -> int:
                    if oid != free and oid != 0:
                        if cname is not None and oid & ix:
                            raw = self.rd(T_LU2 | C_READ, lay.entry_to_pix(bix, entry) * ps, slen)
                            _p, sp, fl = unpack(raw, 0)
                            if sp == 0 and fl & live_mask == live and \
                                    Codec.cstr(raw[n_off:n_off + n_len]) == cname:
                                raise SpiffsError("CONFLICTING_NAME")
                        k = (oid & ~ix) - base
                        if 0 <= k < bits:
                            bitmap[k >> 3] |= 1 << (k & 7)
                    return CONT

                self.lu_visit(0, 0, 0, 0, vb)
                for i, m in enumerate(bitmap):
                    if m != 0xFF:
                        for j in range(8):
                            if not m & (1 << j):
                                return (i << 3) + j + min_id
                raise SpiffsError("FULL", "no free object id")
            if compaction:
                cmap = self.work
                min_count = 0xFF
                min_i = 0
                for i in range(ps):
                    if cmap[i] < min_count:
                        min_count = cmap[i]
                        min_i = i
                        if min_count == 0:
                            break
                if min_count == compaction:
                    raise SpiffsError("FULL", "no free object id")
                if min_count == 0:
                    return min_i * compaction + min_id
                min_id += min_i * compaction
                max_id = min_id + compaction
                if max_id - min_id <= limit:
                    continue
            compaction = (max_id - min_id) // ps
            cmap = self.work
            cmap[:] = bytes(ps)
            lo, hi, comp, cname = min_id, max_id, compaction, conflicting_name

            def vc(oid: int, bix: int, entry: int) -> int:
                if oid != free and oid != 0 and oid & ix:
                    raw = self.rd(T_LU2 | C_READ, lay.entry_to_pix(bix, entry) * ps, slen)
                    _p, sp, fl = unpack(raw, 0)
                    if sp == 0 and fl & (PH_FLAG_INDEX | PH_FLAG_FINAL | PH_FLAG_DELET) == PH_FLAG_DELET:
                        if cname is not None and Codec.cstr(raw[n_off:n_off + n_len]) == cname:
                            raise SpiffsError("CONFLICTING_NAME")
                        i = oid & ~ix
                        if lo <= i <= hi:
                            k = (i - lo) // comp
                            if k < ps:
                                cmap[k] = (cmap[k] + 1) & 0xFF
                return CONT

            self.lu_visit(0, 0, 0, 0, vc)
            conflicting_name = None

    # =====================================================================================
    # descriptors
    # =====================================================================================
    def _hash(self, name: bytes) -> int:
        h = 5381
        limit = self.lay.name_len
        i = 0
        n = len(name)
        while True:
            c = name[i] if i < n else 0
            i += 1
            if not c or i >= limit:
                break
            h = ((h * 33) ^ c) & 0xFFFFFFFF
        return h

    def fd_find_new(self, name: bytes | None) -> Fd:
        fds = self.fds
        if not self.cfg.temporal_fd_cache:
            for i, fd in enumerate(fds):
                if fd.file_nbr == 0:
                    fd.file_nbr = i + 1
                    self._serial += 1
                    fd.serial = self._serial
                    return fd
            raise SpiffsError("OUT_OF_FILE_DESCS")
        name_hash = self._hash(name) if name is not None else 0
        if name is not None:
            for fd in fds:
                if fd.file_nbr == 0 and fd.score > 1:
                    fd.score -= 1
        cand = -1
        min_score = 0xFFFF
        for i, fd in enumerate(fds):
            if fd.file_nbr == 0:
                if name is not None and fd.name_hash == name_hash:
                    cand = i
                    break
                if fd.score < min_score:
                    min_score = fd.score
                    cand = i
        if cand < 0:
            raise SpiffsError("OUT_OF_FILE_DESCS")
        fd = fds[cand]
        if name is not None:
            if fd.name_hash == name_hash and fd.score > 0:
                # probably the same file again: start the name search where it was
                self.cursor_bix = self.lay.pix_block(fd.objix_hdr_pix)
                self.cursor_entry = self.lay.pix_entry(fd.objix_hdr_pix)
                fd.score = min(fd.score + TEMPORAL_HIT_SCORE, 0xFFFF)
            else:
                fd.score = TEMPORAL_HIT_SCORE
                fd.name_hash = name_hash
        fd.file_nbr = cand + 1
        self._serial += 1
        fd.serial = self._serial
        return fd

    def fd_return(self, fh: int) -> None:
        if fh <= 0 or fh > len(self.fds):
            raise SpiffsError("BAD_DESCRIPTOR")
        fd = self.fds[fh - 1]
        if fd.file_nbr == 0:
            raise SpiffsError("FILE_CLOSED")
        fd.file_nbr = 0

    def fd_get(self, fh: int) -> Fd:
        if fh <= 0 or fh > len(self.fds):
            raise SpiffsError("BAD_DESCRIPTOR")
        fd = self.fds[fh - 1]
        if fd.file_nbr == 0:
            raise SpiffsError("FILE_CLOSED")
        return fd

    def cache_fd_release(self, cp: CacheSlot | None) -> None:
        if cp is None or self.cache is None:
            return
        for fd in self.fds:
            if fd.file_nbr != 0 and fd.cache_page is cp:
                fd.cache_page = None
        self.cache.free(cp)
        cp.obj_id = 0

    # =====================================================================================
    # file system API (the SPIFFS_* calls)
    # =====================================================================================
    def format(self) -> None:
        for bix in range(self.block_count):
            self.max_erase_count = 0
            self.erase_block(bix)

    def mount(self) -> None:
        self._reset_state()
        self.fds = [Fd() for _ in range(self.cfg.max_open_files)]
        if self.cache is not None:
            self.cache.clear()
        if self.cfg.use_magic and not self.lay.magic_possible():
            raise SpiffsError("MAGIC_NOT_POSSIBLE")
        self.lu_scan()
        self.mounted = True

    def lu_scan(self) -> None:
        lay = self.lay
        free = self.free_id
        unpack = self.codec.obj_id.unpack
        unerased = -1
        ec_min, ec_max = free, 0
        for bix in range(self.block_count):
            if self.cfg.use_magic:
                magic = unpack(self.rd(T_LU2 | C_READ, lay.magic_addr(bix), lay.obj_id_len))[0]
                if magic != lay.magic(bix, self.cfg.use_magic_len):
                    if unerased < 0:
                        unerased = bix
                    else:
                        raise SpiffsError("NOT_A_FS")
            ec = unpack(self.rd(T_LU2 | C_READ, lay.erase_count_addr(bix), lay.obj_id_len))[0]
            if ec != free:
                ec_min = min(ec_min, ec)
                ec_max = max(ec_max, ec)
        if ec_min == 0 and ec_max == free:
            final = 0
        elif ec_max - ec_min > free // 2:
            final = ec_min + 1
        else:
            final = ec_max + 1
        self.max_erase_count = final & free
        if unerased >= 0:
            self.erase_block(unerased)
        self.free_blocks = 0
        self.stats_p_allocated = 0
        self.stats_p_deleted = 0

        def v(oid: int, bix: int, entry: int) -> int:
            if oid == free:
                if entry == 0:
                    self.free_blocks += 1
            elif oid == 0:
                self.stats_p_deleted += 1
            else:
                self.stats_p_allocated += 1
            return CONT

        self.lu_visit(0, 0, 0, 0, v)

    def unmount(self) -> None:
        for fd in self.fds:
            if fd.file_nbr != 0:
                try:
                    self.fflush_cache(fd.file_nbr)
                except SpiffsError:
                    pass  # as SPIFFS_unmount: the result of the flush is ignored
                fd.file_nbr = 0
        self.mounted = False

    def _check_name(self, path: bytes) -> None:
        if len(path) > self.lay.name_len - 1:
            raise SpiffsError("NAME_TOO_LONG", f"{len(path)} B, at most {self.lay.name_len - 1}")

    def open(self, path: bytes, flags: int) -> int:
        self._check_name(path)
        fd = self.fd_find_new(path)
        try:
            try:
                pix = self.find_by_name(path)
                found = True
            except SpiffsError as e:
                if e.code != "NOT_FOUND" or not flags & O_CREAT:
                    raise
                found = False
            if found and flags & (O_CREAT | O_EXCL) == O_CREAT | O_EXCL:
                raise SpiffsError("FILE_EXISTS")
            if not found:
                obj_id = self.find_free_obj_id(None)
                pix = self.object_create(obj_id, path, None, TYPE_FILE)
                flags &= ~O_TRUNC
            self.open_by_page(pix, fd, flags)
            if flags & O_TRUNC:
                self.object_truncate(fd, 0, False)
        except BaseException:
            if fd.file_nbr:
                fd.file_nbr = 0
            raise
        fd.fdoffset = 0
        return fd.file_nbr

    def read(self, fh: int, length: int) -> bytes:
        fd = self.fd_get(fh)
        if not fd.flags & O_RDONLY:
            raise SpiffsError("NOT_READABLE")
        if fd.size == UNDEFINED_LEN and length > 0:
            return b""
        self._flush_unchecked(fh)
        if fd.fdoffset + length >= fd.size:
            avail = fd.size - fd.fdoffset
            if avail <= 0:
                return b""
            data = self.object_read(fd, fd.fdoffset, avail)
            fd.fdoffset += avail
            return data
        data = self.object_read(fd, fd.fdoffset, length)
        fd.fdoffset += length
        return data

    def _hydro_write(self, fd: Fd, data: bytes, offset: int) -> None:
        length = len(data)
        pos = 0
        if fd.size != UNDEFINED_LEN and offset < fd.size:
            m_len = min(fd.size - offset, length)
            self.object_modify(fd, offset, data[:m_len])
            pos = m_len
            offset += m_len
        if pos < length:
            self.object_append(fd, offset, data[pos:] if pos else data)

    def write(self, fh: int, data: bytes) -> int:
        fd = self.fd_get(fh)
        if not fd.flags & O_WRONLY:
            raise SpiffsError("NOT_WRITABLE")
        length = len(data)
        if fd.flags & O_APPEND and fd.size != UNDEFINED_LEN and fd.size > fd.fdoffset:
            fd.fdoffset = fd.size
        offset = fd.fdoffset
        cache = self.cache
        if self.write_cache and fd.cache_page is None:
            fd.cache_page = cache.get_by_obj(fd.obj_id)
        if fd.flags & O_APPEND:
            offset = 0 if fd.size == UNDEFINED_LEN else fd.size
            if self.write_cache and fd.cache_page is not None:
                offset = max(offset, fd.cache_page.offset + fd.cache_page.size)
        if self.write_cache and not fd.flags & O_DIRECT:
            ps = self.ps
            if length < ps:
                alloc = True
                cp = fd.cache_page
                if cp is not None:
                    if offset < cp.offset or offset > cp.offset + cp.size or offset + length > cp.offset + ps:
                        try:
                            self._hydro_write(fd, bytes(cp.data[:cp.size]), cp.offset)
                        finally:
                            self.cache_fd_release(cp)
                    else:
                        alloc = False
                if alloc:
                    cp = cache.allocate_for_obj(fd.obj_id)
                    fd.cache_page = cp
                    if cp is not None:
                        cp.offset = offset
                        cp.size = 0
                cp = fd.cache_page
                if cp is not None:
                    o = offset - cp.offset
                    cp.data[o:o + length] = data
                    cp.size = max(cp.size, o + length)
                    fd.fdoffset += length
                    return length
                self._hydro_write(fd, data, offset)
                fd.fdoffset += length
                return length
            if fd.cache_page is not None:
                cp = fd.cache_page
                try:
                    self._hydro_write(fd, bytes(cp.data[:cp.size]), cp.offset)
                finally:
                    self.cache_fd_release(cp)
        self._hydro_write(fd, data, offset)
        fd.fdoffset += length
        return length

    def _flush_unchecked(self, fh: int) -> None:
        """SPIFFS_read/lseek/fstat flush the write cache but ignore the result (it lands in err_code)."""
        try:
            self.fflush_cache(fh)
        except SpiffsError as e:
            self.last_error = e.code

    def fflush_cache(self, fh: int) -> None:
        if not self.write_cache:
            return
        fd = self.fd_get(fh)
        if fd.flags & O_DIRECT:
            return
        if fd.cache_page is None:
            fd.cache_page = self.cache.get_by_obj(fd.obj_id)  # type: ignore[union-attr]
        cp = fd.cache_page
        if cp is not None:
            try:
                self._hydro_write(fd, bytes(cp.data[:cp.size]), cp.offset)
            finally:
                self.cache_fd_release(cp)

    def lseek(self, fh: int, offs: int, whence: int) -> int:
        fd = self.fd_get(fh)
        self._flush_unchecked(fh)
        file_size = 0 if fd.size == UNDEFINED_LEN else fd.size
        if whence == SEEK_CUR:
            offs = fd.fdoffset + offs
        elif whence == SEEK_END:
            offs = file_size + offs
        if offs < 0:
            raise SpiffsError("SEEK_BOUNDS")
        if offs > file_size:
            fd.fdoffset = file_size
            raise SpiffsError("END_OF_OBJECT", f"seek to {offs} beyond the file size {file_size}")
        lay = self.lay
        data_spix = (offs - 1 if offs > 0 else 0) // lay.data_page_size
        objix_spix = lay.objix_spix_for(data_spix)
        if fd.cursor_objix_spix != objix_spix:
            pix = self.find_id_and_span(fd.obj_id | self.ix_flag, objix_spix)
            fd.cursor_objix_spix = objix_spix
            fd.cursor_objix_pix = pix
        fd.fdoffset = offs
        return offs

    def tell(self, fh: int) -> int:
        fd = self.fd_get(fh)
        self.fflush_cache(fh)
        return fd.fdoffset

    def close(self, fh: int) -> None:
        self.fflush_cache(fh)
        self.fd_return(fh)

    def remove(self, path: bytes) -> None:
        self._check_name(path)
        fd = self.fd_find_new(None)
        try:
            pix = self.find_by_name(path)
            self.open_by_page(pix, fd, 0)
            self.object_truncate(fd, 0, True)
        except BaseException:
            if fd.file_nbr:
                fd.file_nbr = 0
            raise
        # The delete event closed the descriptor.  (If truncation stopped early on a corrupt
        # file, SPIFFS_remove still reports success and the descriptor stays taken until
        # unmount; so it does here.)

    def rename(self, old: bytes, new: bytes) -> None:
        """SPIFFS_rename: find the old name's index header and make sure the new name is free (both searches
        from the cursor), open the object by page on a spare descriptor and rewrite its index header with the
        new name (a page move); then the temporal descriptor cache follows the name."""
        self._check_name(new)
        self._check_name(old)
        pix_old = self.find_by_name(old)
        try:
            self.find_by_name(new)
        except SpiffsError as e:
            if e.code != "NOT_FOUND":
                raise
        else:
            raise SpiffsError("CONFLICTING_NAME", new.decode("utf-8", "replace"))
        fd = self.fd_find_new(None)
        try:
            self.open_by_page(pix_old, fd, 0)
            self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, False, name=new)
            if self.cfg.temporal_fd_cache:   # spiffs_fd_temporal_cache_rehash
                h_old, h_new = self._hash(old), self._hash(new)
                for other in self.fds:
                    if other.score > 0 and other.name_hash == h_old:
                        other.name_hash = h_new
        finally:
            if fd.file_nbr:
                fd.file_nbr = 0   # spiffs_fd_return

    def ftruncate(self, fh: int, new_size: int) -> None:
        """SPIFFS_ftruncate (as ESP-IDF's SPIFFS builds it for truncate/ftruncate): flush the descriptor's write
        cache, then spiffs_object_truncate down to ``new_size``; SPIFFS only shortens a file (a bigger size is
        END_OF_OBJECT).  Data pages past the new end are deleted, the page holding it is copied without its
        tail, emptied index pages are deleted and the index header gets the new size."""
        fd = self.fd_get(fh)
        if not fd.flags & O_WRONLY:
            raise SpiffsError("NOT_WRITABLE")
        self.fflush_cache(fh)
        size = 0 if fd.size == UNDEFINED_LEN else fd.size
        if new_size < 0 or new_size > size:
            raise SpiffsError("END_OF_OBJECT", f"truncate to {new_size} B, the file holds {size} B (SPIFFS only "
                                               f"shortens a file)")
        self.object_truncate(fd, new_size, False)

    def stat_pix(self, pix: int) -> tuple[int, int, bytes, int, bytes]:
        """(size, type, name, obj_id, meta) of the object whose header is at ``pix``."""
        lay = self.lay
        raw = self.rd(T_IX | C_READ, pix * self.ps, lay.ixhdr_struct_len)
        oid = self.codec.obj_id.unpack(self.rd(T_LU | C_READ, lay.lu_entry_addr(pix), lay.obj_id_len))[0]
        size = _U32.unpack_from(raw, lay.size_off)[0]
        return ((0 if size == UNDEFINED_LEN else size), raw[lay.size_off + 4],
                Codec.cstr(raw[lay.name_off:lay.name_off + lay.name_len]), oid & ~self.ix_flag,
                bytes(raw[lay.meta_off:lay.meta_off + lay.meta_len]))

    def stat(self, path: bytes) -> tuple[int, int, bytes, int, bytes]:
        self._check_name(path)
        return self.stat_pix(self.find_by_name(path))

    def fstat(self, fh: int) -> tuple[int, int, bytes, int, bytes]:
        fd = self.fd_get(fh)
        self._flush_unchecked(fh)
        return self.stat_pix(fd.objix_hdr_pix)

    def fupdate_meta(self, fh: int, meta: bytes) -> None:
        fd = self.fd_get(fh)
        if not fd.flags & O_WRONLY:
            raise SpiffsError("NOT_WRITABLE")
        self.update_index_hdr(fd, fd.obj_id, fd.objix_hdr_pix, False, meta=meta)

    def readdir(self) -> list[tuple[bytes, int, int]]:
        """All live objects as (name, size, type), in lookup order (SPIFFS_readdir loop)."""
        lay = self.lay
        out = []
        bix, entry = 0, 0
        while True:
            sink: list = []
            r = self.lu_visit(bix, entry, VIS_NO_WRAP, 0, self._hdr_visitor(None, sink))
            if r is None:
                break
            bix, entry = r[0], r[1] + 1
            _oid, _pix, raw = sink[-1]
            size = _U32.unpack_from(raw, lay.size_off)[0]
            out.append((Codec.cstr(raw[lay.name_off:lay.name_off + lay.name_len]),
                        0 if size == UNDEFINED_LEN else size, raw[lay.size_off + 4]))
        return out

    def info(self) -> tuple[int, int]:
        """(total, used) bytes as SPIFFS_info reports them."""
        lay = self.lay
        total_pages = (self.block_count - 2) * lay.lu_entries + 1
        return total_pages * lay.data_page_size, self.stats_p_allocated * lay.data_page_size
