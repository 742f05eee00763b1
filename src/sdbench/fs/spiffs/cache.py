"""SPIFFS page cache: a few page buffers shared by read caching and per-file write caching.

Read slots hold a copy of a flash page and are write-through: a program that
hits a cached page updates the copy and goes to flash as well (a program that
deletes a non-lookup page drops the copy).  A miss loads the *whole* page, so
reading a 5-byte page header costs one page read.  "Second level" lookup
reads (``T_LU2``) bypass the cache to avoid shredding it.  When all slots are
busy, the read slot unused for longest is evicted; write slots are never
evicted by reads.  A write slot collects small sequential writes of one file
(``offset``/``size`` in the file) until that file is flushed.
"""
from __future__ import annotations

# operation types and commands (the SPIFFS_OP_* flags)
T_LU, T_LU2, T_IX, T_DA = 0, 1, 2, 3
C_DELE, C_UPDT, C_MOVS, C_MOVD, C_FLSH, C_READ, C_WRTHRU = (i << 2 for i in range(7))
TYPE_MASK = 3
COM_MASK = 7 << 2

# cache slot flags
F_WRTHRU = 1 << 1
F_TYPE_WR = 1 << 7


class CacheSlot:
    __slots__ = ("ix", "used", "flags", "last_access", "pix", "obj_id", "offset", "size", "data")

    def __init__(self, ix: int, page_size: int) -> None:
        self.ix = ix
        self.used = False
        self.flags = 0
        self.last_access = 0
        self.pix = 0          # read slot: cached page
        self.obj_id = 0       # write slot: owning object
        self.offset = 0       # write slot: file offset of data[0]
        self.size = 0         # write slot: valid bytes
        self.data = bytearray(page_size)


class PageCache:
    def __init__(self, pages: int, page_size: int) -> None:
        self.slots = [CacheSlot(i, page_size) for i in range(pages)]
        self.last_access = 0
        self.page_size = page_size
        self.n_used = 0
        self.by_pix: dict[int, CacheSlot] = {}   # read slots by cached page

    def get(self, pix: int) -> CacheSlot | None:
        """The read slot caching page ``pix`` (touches its access stamp)."""
        s = self.by_pix.get(pix)
        if s is not None:
            s.last_access = self.last_access
        return s

    def set_read_page(self, s: CacheSlot, pix: int) -> None:
        s.flags = F_WRTHRU
        s.pix = pix
        self.by_pix[pix] = s

    def free(self, s: CacheSlot) -> None:
        # slots are never dirty (read slots write through), so nothing to write back
        if s.used:
            if not s.flags & F_TYPE_WR and self.by_pix.get(s.pix) is s:
                del self.by_pix[s.pix]
            s.used = False
            s.flags = 0
            self.n_used -= 1

    def remove_oldest(self, mask: int, flags: int) -> None:
        """If every slot is busy, free the least recently used one whose ``flags & mask == flags``."""
        if self.n_used < len(self.slots):
            return
        cand = None
        oldest = 0
        now = self.last_access
        for s in self.slots:
            age = (now - s.last_access) & 0xFFFFFFFF
            if age > oldest and (s.flags & mask) == flags:
                oldest = age
                cand = s
        if cand is not None:
            self.free(cand)

    def allocate(self) -> CacheSlot | None:
        for s in self.slots:
            if not s.used:
                s.used = True
                s.last_access = self.last_access
                self.n_used += 1
                return s
        return None

    def drop_page(self, pix: int) -> None:
        s = self.get(pix)
        if s is not None:
            self.free(s)

    def clear(self) -> None:
        for s in self.slots:
            s.used = False
            s.flags = 0
            s.last_access = 0
        self.last_access = 0
        self.n_used = 0
        self.by_pix.clear()

    # ---- write slots --------------------------------------------------------------------
    def get_by_obj(self, obj_id: int) -> CacheSlot | None:
        for s in self.slots:
            if s.used and s.flags & F_TYPE_WR and s.obj_id == obj_id:
                return s
        return None

    def allocate_for_obj(self, obj_id: int) -> CacheSlot | None:
        self.remove_oldest(F_TYPE_WR, 0)
        s = self.allocate()
        if s is None:
            return None
        s.flags = F_TYPE_WR
        s.obj_id = obj_id
        return s
