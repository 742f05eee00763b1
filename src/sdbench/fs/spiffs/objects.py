"""SPIFFS objects and descriptors: creating, appending to, modifying, truncating and reading an object (a file:
an index header, index pages and data pages), finding one by name, and the file descriptors with their
temporal cache (the upper half of the C library's spiffs_nucleus.c).
"""
from __future__ import annotations

from ...media.base import BlockDevice
from .cache import C_READ, C_UPDT, T_DA, T_IX, T_LU, T_LU2, CacheSlot
from .config import SpiffsConfig
from .errors import SpiffsError
from .gc import Gc
from .layout import (EV_IX_DEL, EV_IX_NEW, EV_IX_UPD, EV_IX_UPD_HDR, PH_FLAG_DELET, PH_FLAG_FINAL, PH_FLAG_INDEX,
                     PH_FLAG_IXDELE, PH_FLAG_USED, TYPE_FILE, UNDEFINED_LEN, Codec)
from .pages import CONT, PH, STOP, U32, Fd, PageStore, Visitor

# open flags (SPIFFS_O_*)
O_APPEND = 1 << 0
O_TRUNC = 1 << 1
O_CREAT = 1 << 2
O_RDONLY = 1 << 3
O_WRONLY = 1 << 4
O_RDWR = O_RDONLY | O_WRONLY
O_DIRECT = 1 << 5
O_EXCL = 1 << 6

TEMPORAL_HIT_SCORE = 4


class ObjectStore(PageStore):
    """Objects and descriptors over the pages."""

    def __init__(self, device: BlockDevice, cfg: SpiffsConfig, base_bytes: int, size_bytes: int) -> None:
        super().__init__(device, cfg, base_bytes, size_bytes)
        self.gc = Gc(self)   # moves pages and rewrites object indexes: it needs this layer (gc.GcHost)

    # =====================================================================================
    # objects
    # =====================================================================================
    def object_create(self, obj_id: int, name: bytes, meta: bytes | None, obj_type: int = TYPE_FILE) -> int:
        lay = self.lay
        self.gc.check(lay.data_page_size)
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
        self.check_work_objix(obj_id, 0)
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
        fd.size = U32.unpack_from(hdr, lay.size_off)[0]
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
        self.gc.check(length + dps)
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
                    self.check_work_objix(fd.obj_id, 0)
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
                        self.check_work_objix(fd.obj_id, cur_objix_spix)
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
            self.ix_set(cur_objix_spix, data_spix, data_page)
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
        self.gc.check(length + dps)
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
                    self.check_work_objix(fd.obj_id, 0)
                else:
                    if fd.cursor_objix_spix == cur_objix_spix:
                        pix = fd.cursor_objix_pix
                    else:
                        pix = self.find_id_and_span(fd.obj_id | ix, cur_objix_spix)
                    self._load_work(pix)
                    self.check_work_objix(fd.obj_id, cur_objix_spix)
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
            self.ix_set(cur_objix_spix, data_spix, data_pix)
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
            self.gc.check(dps * 2)
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
                self.check_work_objix(fd.obj_id, cur_objix_spix)
                fd.cursor_objix_pix = objix_pix
                fd.cursor_objix_spix = cur_objix_spix
                fd.offset = cur_size
                prev_objix_spix = cur_objix_spix
            data_pix = self._ix_get(cur_objix_spix, data_spix)
            self.ix_set(cur_objix_spix, data_spix, self.free_id)
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
                self.ix_set(cur_objix_spix, data_spix, new_data_pix)
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
                self.check_work_objix(fd.obj_id, cur_objix_spix)
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
