"""SPIFFS garbage collection.

Before an operation that needs space, ``gc_check`` compares the request with
the free pages (all pages minus two spare blocks, minus allocated and deleted
ones).  Unless there are more than three free blocks and room enough, it
scores every block (deleted pages x5, used pages x-1, erase age x50; age
ignored when the file system is crammed), cleans the best one -- moves its
live data pages (rewriting the index pages that point at them) and then its
live index pages to free pages elsewhere -- and erases it, writing the new
erase count and the magic.  It repeats up to ``gc_max_runs`` times while free
blocks are two or fewer or the request still does not fit.  ``gc_quick``
(used when the allocator runs short of free blocks) only erases blocks whose
pages are all deleted.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from .cache import C_READ, T_LU2
from .errors import SpiffsError
from .layout import EV_IX_DEL, EV_IX_MOV, EV_IX_UPD, PH_FLAG_DELET

if TYPE_CHECKING:
    from .core import SpiffsCore

FIND_OBJ_DATA, MOVE_OBJ_DATA, MOVE_OBJ_IX, FINISHED = range(4)


class GcMixin:
    def gc_erase_block(self: "SpiffsCore", bix: int) -> None:
        self.erase_block(bix)
        self.gc_erases += 1
        if self.cache is not None:
            first = bix * self.lay.pages_per_block
            for pix in range(first, first + self.lay.pages_per_block):
                self.cache.drop_page(pix)

    def _block_lu_pages(self: "SpiffsCore", bix: int):
        """Yield the lookup entries of a block page by page, each page read through the cache
        when the caller asks for it (callers stop early as the C loops do)."""
        lay = self.lay
        epp = lay.entries_per_lu_page
        for lu_page in range(lay.lu_pages):
            ids = self.read_lu(bix * self.bs + lu_page * self.ps)
            yield ids[:min(epp, lay.lu_entries - lu_page * epp)]

    def gc_quick(self: "SpiffsCore", max_free_pages: int) -> None:
        """Erase the first block whose pages are all deleted (at most ``max_free_pages`` free)."""
        lay = self.lay
        free = self.free_id
        self.gc_runs += 1
        dead = {0, free}
        for bix in range(self.block_count):
            deleted = free_pages = 0
            killed = False
            for ids in self._block_lu_pages(bix):
                nfree = ids.count(free)
                if not dead.issuperset(ids) or free_pages + nfree > max_free_pages:
                    killed = True    # a live page, or too many free ones: next block
                    break
                free_pages += nfree
                deleted += len(ids) - nfree
            if not killed and deleted + free_pages == lay.lu_entries:
                self.stats_p_deleted -= deleted
                self.gc_erase_block(bix)
                return
        raise SpiffsError("NO_DELETED_BLOCKS")

    def _free_pages(self: "SpiffsCore") -> int:
        return self.lay.lu_entries * (self.block_count - 2) - self.stats_p_allocated - self.stats_p_deleted

    def gc_check(self: "SpiffsCore", length: int) -> None:
        """Make room for ``length`` bytes, collecting garbage if needed; raises FULL."""
        dps = self.lay.data_page_size
        free_pages = self._free_pages()
        if self.free_blocks > 3 and length < free_pages * dps:
            return
        needed = (length + dps - 1) // dps
        if needed > free_pages + self.stats_p_deleted:
            raise SpiffsError("FULL", f"{length} B requested")
        tries = 0
        while True:
            prev_free = free_pages
            cands = self.gc_find_candidates(free_pages <= 0)
            if not cands:
                if needed < free_pages:
                    return
                raise SpiffsError("FULL", "no block to collect")
            self.gc_runs += 1
            cand = cands[0]
            self.cleaning = True
            try:
                self.gc_clean(cand)
            finally:
                self.cleaning = False
            self.gc_erase_page_stats(cand)
            self.gc_erase_block(cand)
            free_pages = self._free_pages()
            if prev_free <= 0 and prev_free == free_pages:
                break  # crammed and nothing gained: stop to spare the flash
            tries += 1
            if not (tries < self.cfg.gc_max_runs and (self.free_blocks <= 2 or length > free_pages * dps)):
                break
        if length > self._free_pages() * dps:
            raise SpiffsError("FULL", f"{length} B requested")

    def gc_erase_page_stats(self: "SpiffsCore", bix: int) -> None:
        dele = allo = 0
        free = self.free_id
        for ids in self._block_lu_pages(bix):
            d = ids.count(0)
            dele += d
            allo += len(ids) - d - ids.count(free)
        self.stats_p_allocated -= allo
        self.stats_p_deleted -= dele

    def gc_find_candidates(self: "SpiffsCore", crammed: bool) -> list[int]:
        """Blocks ordered by garbage-collection score, best first (at most one work page of them)."""
        lay, cfg = self.lay, self.cfg
        free = self.free_id
        max_cands = min(self.block_count, (lay.page_size - 8) // (cfg.block_ix_len + 4))
        keys: list[int] = []     # -score, ascending
        blocks: list[int] = []
        unpack = self.codec.obj_id.unpack
        w_age = 0 if crammed else cfg.gc_weight_erase_age
        for bix in range(self.block_count):
            deleted = used = 0
            for ids in self._block_lu_pages(bix):
                try:
                    k = ids.index(free)     # free pages only follow: count up to the first one
                except ValueError:
                    k = -1
                part = ids if k < 0 else ids[:k]
                d = part.count(0)
                deleted += d
                used += len(part) - d
                if k >= 0:
                    break
            ec = unpack(self.rd(C_READ | T_LU2, lay.erase_count_addr(bix), lay.obj_id_len))[0]
            if self.max_erase_count > ec:
                age = self.max_erase_count - ec
            else:
                age = (free - (ec - self.max_erase_count)) & free
            score = deleted * cfg.gc_weight_deleted + used * cfg.gc_weight_used + age * w_age
            # insert before the first lower score (ties keep scan order); the table has a fixed size
            i = bisect_right(keys, -score)
            if i < max_cands:
                keys.insert(i, -score)
                blocks.insert(i, bix)
                if len(keys) > max_cands:
                    keys.pop()
                    blocks.pop()
        # the C code builds this table in its work buffer: block numbers, then (4-aligned) scores
        w = self.work
        w[:] = b"\xff" * lay.page_size
        bl = cfg.block_ix_len
        score_off = (max_cands * bl + 3) & ~3
        for i, (k, b) in enumerate(zip(keys, blocks)):
            w[i * bl:(i + 1) * bl] = b.to_bytes(bl, "little")
            w[score_off + 4 * i:score_off + 4 * i + 4] = (-k & 0xFFFFFFFF).to_bytes(4, "little")
        return blocks

    def gc_clean(self: "SpiffsCore", bix: int) -> None:
        """Evacuate every live page of block ``bix`` (data pages first, then index pages)."""
        lay, codec, ps = self.lay, self.codec, self.ps
        ix, free = self.ix_flag, self.free_id
        epp = lay.entries_per_lu_page
        max_e = lay.lu_entries
        state = FIND_OBJ_DATA
        cur_entry = 0
        cur_obj_id = 0
        cur_objix_spix = 0
        cur_objix_pix = 0
        cur_data_pix = 0
        stored_entry = 0
        cur_pix = 0
        if self.free_cursor_bix == bix:
            # do not allocate from the block being emptied
            self.free_cursor_bix = (bix + 1) % self.block_count
            self.free_cursor_entry = 0
        while state != FINISHED:
            found = False
            lu_page = cur_entry // epp
            scan = True
            while scan and lu_page < lay.lu_pages:
                entry_offset = lu_page * epp
                page_addr = bix * self.bs + lu_page * ps
                ids = self.read_lu(page_addr)
                while scan and cur_entry - entry_offset < epp and cur_entry < max_e:
                    oid = ids[cur_entry - entry_offset]
                    cur_pix = lay.entry_to_pix(bix, cur_entry)
                    if state == FIND_OBJ_DATA:
                        if oid != 0 and oid != free and not oid & ix:
                            found = True
                            cur_obj_id = oid
                            cur_data_pix = cur_pix
                            scan = False
                    elif state == MOVE_OBJ_DATA:
                        if oid == cur_obj_id:
                            _pid, spix, fl = codec.ph.unpack(self.rd(T_LU2 | C_READ, cur_pix * ps, lay.ph_size))
                            if lay.objix_spix_for(spix) == cur_objix_spix:
                                if fl & PH_FLAG_DELET:
                                    new_pix = self.page_move(None, oid, cur_pix)
                                    ids = self.read_lu(page_addr)
                                else:
                                    # deleted in the header but not in the lookup: just mark it
                                    self.page_delete(cur_pix)
                                    new_pix = self.lay.page_ix_free
                                self._ix_set(cur_objix_spix, spix, new_pix)
                    elif state == MOVE_OBJ_IX:
                        if oid != 0 and oid != free and oid & ix:
                            _pid, spix, fl = codec.ph.unpack(self.rd(T_LU2 | C_READ, cur_pix * ps, lay.ph_size))
                            if fl & PH_FLAG_DELET:
                                new_pix = self.page_move(None, oid, cur_pix)
                                self.cb_object_event(EV_IX_MOV, oid, spix, new_pix, 0)
                                ids = self.read_lu(page_addr)
                            else:
                                self.page_delete(cur_pix)
                                self.cb_object_event(EV_IX_DEL, oid, spix, cur_pix, 0)
                    cur_entry += 1
                lu_page += 1
            if state == FIND_OBJ_DATA:
                if found:
                    stored_entry = cur_entry
                    cur_entry = 0
                    state = MOVE_OBJ_DATA
                    _pid, spix, _fl = codec.ph.unpack(self.rd(T_LU2 | C_READ, cur_pix * ps, lay.ph_size))
                    cur_objix_spix = lay.objix_spix_for(spix)
                    try:
                        objix_pix = self.find_id_and_span(cur_obj_id | ix, cur_objix_spix)
                    except SpiffsError as e:
                        if e.code != "NOT_FOUND":
                            raise
                        # an orphaned data page: nothing refers to it
                        self.page_delete(cur_data_pix)
                        cur_entry = stored_entry
                        state = FIND_OBJ_DATA
                        continue
                    self.work[:] = self.rd(T_LU2 | C_READ, objix_pix * ps, ps)
                    self._validate_work_objix(cur_obj_id | ix, cur_objix_spix)
                    cur_objix_pix = objix_pix
                else:
                    state = MOVE_OBJ_IX
                    cur_entry = 0
            elif state == MOVE_OBJ_DATA:
                state = FIND_OBJ_DATA
                cur_entry = stored_entry
                if cur_objix_spix == 0:
                    self.update_index_hdr(None, cur_obj_id | ix, cur_objix_pix, True)
                else:
                    new_objix_pix = self.page_move(self.work, cur_obj_id | ix, cur_objix_pix)
                    spx = codec.ph.unpack_from(self.work, 0)[1]
                    self.cb_object_event(EV_IX_UPD, cur_obj_id, spx, new_objix_pix, 0)
            elif state == MOVE_OBJ_IX:
                state = FINISHED
