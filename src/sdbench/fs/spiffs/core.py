"""The SPIFFS engine's file API (the SPIFFS_* calls, the C library's spiffs_hydrogen.c): format, mount and the
lookup scan, open, read, write, seek, close, remove, rename, truncate, stat and readdir.

An independent Python implementation of the algorithms of the SPIFFS C library (pellepl/spiffs as ESP-IDF
builds it); the layers below: objects and descriptors (objects.py), pages and lookup scans (pages.py), the
garbage collector (gc.py), the page cache (cache.py), the on-flash layout (layout.py).
"""
from __future__ import annotations

from .cache import C_READ, T_IX, T_LU, T_LU2
from .errors import SpiffsError
from .layout import TYPE_FILE, UNDEFINED_LEN, Codec
from .objects import (O_APPEND, O_CREAT, O_DIRECT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY,  # fs.py
                      ObjectStore)
from .pages import CONT, U32, VIS_NO_WRAP, Fd

SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2


class SpiffsCore(ObjectStore):
    """A SPIFFS file system on a partition of a device: the calls ESP-IDF's VFS makes."""

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
        size = U32.unpack_from(raw, lay.size_off)[0]
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
            size = U32.unpack_from(raw, lay.size_off)[0]
            out.append((Codec.cstr(raw[lay.name_off:lay.name_off + lay.name_len]),
                        0 if size == UNDEFINED_LEN else size, raw[lay.size_off + 4]))
        return out

    def info(self) -> tuple[int, int]:
        """(total, used) bytes as SPIFFS_info reports them."""
        lay = self.lay
        total_pages = (self.block_count - 2) * lay.lu_entries + 1
        return total_pages * lay.data_page_size, self.stats_p_allocated * lay.data_page_size
