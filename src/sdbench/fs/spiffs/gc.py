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
from typing import Any, Protocol

from .cache import C_READ, T_LU2, PageCache
from .config import SpiffsConfig
from .errors import SpiffsError
from .layout import EV_IX_DEL, EV_IX_MOV, EV_IX_UPD, PH_FLAG_DELET, Codec, Layout

FIND_OBJ_DATA, MOVE_OBJ_DATA, MOVE_OBJ_IX, FINISHED = range(4)


class GcHost(Protocol):
    """What the garbage collector needs of the file system it cleans (SpiffsCore): its layout and state, page
    reads, moves and deletions, and the object-index updates a move makes."""

    lay: Layout
    cfg: SpiffsConfig
    codec: Codec
    cache: PageCache | None
    block_count: int
    ps: int
    bs: int
    free_id: int
    ix_flag: int
    work: bytearray
    free_blocks: int
    free_cursor_bix: int
    free_cursor_entry: int
    max_erase_count: int
    stats_p_allocated: int
    stats_p_deleted: int

    def rd(self, op: int, addr: int, n: int) -> bytes: ...

    def read_lu(self, addr: int) -> tuple[int, ...]: ...

    def erase_block(self, bix: int) -> None: ...

    def page_move(self, page_data: bytearray | None, obj_id: int, src_pix: int) -> int: ...

    def page_delete(self, pix: int) -> None: ...

    def find_id_and_span(self, obj_id: int, spix: int, exclusion_pix: int = 0) -> int: ...

    def ix_set(self, objix_spix: int, data_spix: int, pix: int) -> None: ...

    def check_work_objix(self, obj_id: int, want_spix: int) -> None: ...

    def update_index_hdr(self, fd: Any, obj_id: int, objix_hdr_pix: int, have_data: bool,
                         name: bytes | None = None, meta: bytes | None = None, size: int = 0) -> int: ...

    def cb_object_event(self, ev: int, obj_id_raw: int, spix: int, new_pix: int, new_size: int) -> None: ...


class Gc:
    """The garbage collector of one file system (``host``); ``runs`` and ``erases`` count its work."""

    def __init__(self, host: GcHost) -> None:
        self.host = host
        self.runs = 0
        self.erases = 0
        self.cleaning = False   # a clean is moving pages: the allocator must not collect again meanwhile

    def erase_block(self, bix: int) -> None:
        h = self.host
        h.erase_block(bix)
        self.erases += 1
        if h.cache is not None:
            first = bix * h.lay.pages_per_block
            for pix in range(first, first + h.lay.pages_per_block):
                h.cache.drop_page(pix)

    def _lu_pages(self, bix: int):
        """Yield the lookup entries of a block page by page, each page read through the cache
        when the caller asks for it (callers stop early as the C loops do)."""
        h = self.host
        lay = h.lay
        epp = lay.entries_per_lu_page
        for lu_page in range(lay.lu_pages):
            ids = h.read_lu(bix * h.bs + lu_page * h.ps)
            yield ids[:min(epp, lay.lu_entries - lu_page * epp)]

    def quick(self, max_free_pages: int) -> None:
        """Erase the first block whose pages are all deleted (at most ``max_free_pages`` free)."""
        h = self.host
        lay = h.lay
        free = h.free_id
        self.runs += 1
        dead = {0, free}
        for bix in range(h.block_count):
            deleted = free_pages = 0
            killed = False
            for ids in self._lu_pages(bix):
                nfree = ids.count(free)
                if not dead.issuperset(ids) or free_pages + nfree > max_free_pages:
                    killed = True    # a live page, or too many free ones: next block
                    break
                free_pages += nfree
                deleted += len(ids) - nfree
            if not killed and deleted + free_pages == lay.lu_entries:
                h.stats_p_deleted -= deleted
                self.erase_block(bix)
                return
        raise SpiffsError("NO_DELETED_BLOCKS")

    def free_pages(self) -> int:
        h = self.host
        return h.lay.lu_entries * (h.block_count - 2) - h.stats_p_allocated - h.stats_p_deleted

    def check(self, length: int) -> None:
        """Make room for ``length`` bytes, collecting garbage if needed; raises FULL."""
        h = self.host
        dps = h.lay.data_page_size
        free_pages = self.free_pages()
        if h.free_blocks > 3 and length < free_pages * dps:
            return
        needed = (length + dps - 1) // dps
        if needed > free_pages + h.stats_p_deleted:
            raise SpiffsError("FULL", f"{length} B requested")
        tries = 0
        while True:
            prev_free = free_pages
            cands = self.find_candidates(free_pages <= 0)
            if not cands:
                if needed < free_pages:
                    return
                raise SpiffsError("FULL", "no block to collect")
            self.runs += 1
            cand = cands[0]
            self.cleaning = True
            try:
                self.clean(cand)
            finally:
                self.cleaning = False
            self.erase_page_stats(cand)
            self.erase_block(cand)
            free_pages = self.free_pages()
            if prev_free <= 0 and prev_free == free_pages:
                break  # crammed and nothing gained: stop to spare the flash
            tries += 1
            if not (tries < h.cfg.gc_max_runs and (h.free_blocks <= 2 or length > free_pages * dps)):
                break
        if length > self.free_pages() * dps:
            raise SpiffsError("FULL", f"{length} B requested")

    def erase_page_stats(self, bix: int) -> None:
        h = self.host
        dele = allo = 0
        free = h.free_id
        for ids in self._lu_pages(bix):
            d = ids.count(0)
            dele += d
            allo += len(ids) - d - ids.count(free)
        h.stats_p_allocated -= allo
        h.stats_p_deleted -= dele

    def find_candidates(self, crammed: bool) -> list[int]:
        """Blocks ordered by garbage-collection score, best first (at most one work page of them)."""
        h = self.host
        lay, cfg = h.lay, h.cfg
        free = h.free_id
        max_cands = min(h.block_count, (lay.page_size - 8) // (cfg.block_ix_len + 4))
        keys: list[int] = []     # -score, ascending
        blocks: list[int] = []
        unpack = h.codec.obj_id.unpack
        w_age = 0 if crammed else cfg.gc_weight_erase_age
        for bix in range(h.block_count):
            deleted = used = 0
            for ids in self._lu_pages(bix):
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
            ec = unpack(h.rd(C_READ | T_LU2, lay.erase_count_addr(bix), lay.obj_id_len))[0]
            if h.max_erase_count > ec:
                age = h.max_erase_count - ec
            else:
                age = (free - (ec - h.max_erase_count)) & free
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
        w = h.work
        w[:] = b"\xff" * lay.page_size
        bl = cfg.block_ix_len
        score_off = (max_cands * bl + 3) & ~3
        for i, (k, b) in enumerate(zip(keys, blocks)):
            w[i * bl:(i + 1) * bl] = b.to_bytes(bl, "little")
            w[score_off + 4 * i:score_off + 4 * i + 4] = (-k & 0xFFFFFFFF).to_bytes(4, "little")
        return blocks

    def clean(self, bix: int) -> None:
        """Evacuate every live page of block ``bix`` (data pages first, then index pages)."""
        h = self.host
        lay, codec, ps = h.lay, h.codec, h.ps
        ix, free = h.ix_flag, h.free_id
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
        if h.free_cursor_bix == bix:
            # do not allocate from the block being emptied
            h.free_cursor_bix = (bix + 1) % h.block_count
            h.free_cursor_entry = 0
        while state != FINISHED:
            found = False
            lu_page = cur_entry // epp
            scan = True
            while scan and lu_page < lay.lu_pages:
                entry_offset = lu_page * epp
                page_addr = bix * h.bs + lu_page * ps
                ids = h.read_lu(page_addr)
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
                            _pid, spix, fl = codec.ph.unpack(h.rd(T_LU2 | C_READ, cur_pix * ps, lay.ph_size))
                            if lay.objix_spix_for(spix) == cur_objix_spix:
                                if fl & PH_FLAG_DELET:
                                    new_pix = h.page_move(None, oid, cur_pix)
                                    ids = h.read_lu(page_addr)
                                else:
                                    # deleted in the header but not in the lookup: just mark it
                                    h.page_delete(cur_pix)
                                    new_pix = h.lay.page_ix_free
                                h.ix_set(cur_objix_spix, spix, new_pix)
                    elif state == MOVE_OBJ_IX:
                        if oid != 0 and oid != free and oid & ix:
                            _pid, spix, fl = codec.ph.unpack(h.rd(T_LU2 | C_READ, cur_pix * ps, lay.ph_size))
                            if fl & PH_FLAG_DELET:
                                new_pix = h.page_move(None, oid, cur_pix)
                                h.cb_object_event(EV_IX_MOV, oid, spix, new_pix, 0)
                                ids = h.read_lu(page_addr)
                            else:
                                h.page_delete(cur_pix)
                                h.cb_object_event(EV_IX_DEL, oid, spix, cur_pix, 0)
                    cur_entry += 1
                lu_page += 1
            if state == FIND_OBJ_DATA:
                if found:
                    stored_entry = cur_entry
                    cur_entry = 0
                    state = MOVE_OBJ_DATA
                    _pid, spix, _fl = codec.ph.unpack(h.rd(T_LU2 | C_READ, cur_pix * ps, lay.ph_size))
                    cur_objix_spix = lay.objix_spix_for(spix)
                    try:
                        objix_pix = h.find_id_and_span(cur_obj_id | ix, cur_objix_spix)
                    except SpiffsError as e:
                        if e.code != "NOT_FOUND":
                            raise
                        # an orphaned data page: nothing refers to it
                        h.page_delete(cur_data_pix)
                        cur_entry = stored_entry
                        state = FIND_OBJ_DATA
                        continue
                    h.work[:] = h.rd(T_LU2 | C_READ, objix_pix * ps, ps)
                    h.check_work_objix(cur_obj_id | ix, cur_objix_spix)
                    cur_objix_pix = objix_pix
                else:
                    state = MOVE_OBJ_IX
                    cur_entry = 0
            elif state == MOVE_OBJ_DATA:
                state = FIND_OBJ_DATA
                cur_entry = stored_entry
                if cur_objix_spix == 0:
                    h.update_index_hdr(None, cur_obj_id | ix, cur_objix_pix, True)
                else:
                    new_objix_pix = h.page_move(h.work, cur_obj_id | ix, cur_objix_pix)
                    spx = codec.ph.unpack_from(h.work, 0)[1]
                    h.cb_object_event(EV_IX_UPD, cur_obj_id, spx, new_objix_pix, 0)
            elif state == MOVE_OBJ_IX:
                state = FINISHED
