"""SPIFFS configuration: the compile-time and mount-time settings of the C library.

The defaults are ESP-IDF's (``components/spiffs`` with its default Kconfig):
256-byte pages, 4096-byte blocks (one flash sector), 32-byte names, 4 bytes of
metadata (the VFS keeps the modification time there), magic with length,
16-bit ids, 5 cache pages (``max_files``) with write caching, page checks on,
at most 10 garbage-collection runs per request.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ...options import opt


class SpiffsConfigError(ConfigError, ValueError):
    """An inconsistent SPIFFS configuration (also a ValueError, so option loading reports it)."""


_WIDTHS = (1, 2, 4)


@dataclass(frozen=True)
class SpiffsConfig:
    page_size_bytes: int = opt(256, unit="B", min=32, max=65536,
                               help="logical page size (CONFIG_SPIFFS_PAGE_SIZE); divides block_size_bytes")
    block_size_bytes: int = opt(4096, unit="B", min=256,
                                help="logical block size, the unit SPIFFS erases; ESP-IDF uses the flash "
                                     "sector size. A multiple of the device erase size")
    obj_name_len: int = opt(32, unit="B", min=2, max=255,
                            help="object name field including the terminating NUL (CONFIG_SPIFFS_OBJ_NAME_LEN); "
                                 "the longest path is one byte shorter")
    meta_len: int = opt(4, unit="B", min=0, max=255,
                        help="user metadata bytes in each object index header (CONFIG_SPIFFS_META_LENGTH)")
    use_magic: bool = opt(True, help="write and check a per-block magic in the lookup pages (CONFIG_SPIFFS_USE_MAGIC)")
    use_magic_len: bool = opt(True, help="mix the block count into the magic (CONFIG_SPIFFS_USE_MAGIC_LENGTH)")
    obj_id_len: int = opt(2, unit="B", choices=_WIDTHS, help="sizeof(spiffs_obj_id): lookup entries, erase count, magic")
    span_ix_len: int = opt(2, unit="B", choices=_WIDTHS, help="sizeof(spiffs_span_ix) in page headers")
    page_ix_len: int = opt(2, unit="B", choices=_WIDTHS, help="sizeof(spiffs_page_ix): object index entries")
    block_ix_len: int = opt(2, unit="B", choices=_WIDTHS,
                            help="sizeof(spiffs_block_ix): sizes the garbage collector's candidate table")
    aligned_obj_ix_tables: bool = opt(False, help="SPIFFS_ALIGNED_OBJECT_INDEX_TABLES: align the index table in "
                                                  "index header pages to page_ix_len")
    cache_pages: int = opt(5, unit="pages", min=0, max=31,
                           help="read/write cache pages (ESP-IDF: max_files); 0 = no cache (SPIFFS_CACHE 0)")
    write_cache: bool = opt(True, help="SPIFFS_CACHE_WR: writes shorter than a page collect in a cache page until "
                                       "the file is flushed, closed, sought or read")
    page_checks: bool = opt(True, help="SPIFFS_PAGE_CHECK: read and validate each page header before use")
    gc_max_runs: int = opt(10, unit="runs", min=1, max=1000,
                           help="SPIFFS_GC_MAX_RUNS: blocks garbage-collected at most per space request")
    gc_weight_deleted: int = opt(5, unit="points/page", help="GC score per deleted page (SPIFFS_GC_HEUR_W_DELET)")
    gc_weight_used: int = opt(-1, unit="points/page", help="GC score per used page (SPIFFS_GC_HEUR_W_USED)")
    gc_weight_erase_age: int = opt(50, unit="points/erase",
                                   help="GC score per erase the block is behind the newest (SPIFFS_GC_HEUR_W_ERASE_AGE)")
    max_open_files: int = opt(5, unit="files", min=1, max=255,
                              help="file descriptors (ESP-IDF: max_files)")
    temporal_fd_cache: bool = opt(True, help="SPIFFS_TEMPORAL_FD_CACHE: closed descriptors remember where a file "
                                             "was, so reopening it by name starts the search there")
    use_mtime: bool = opt(True, help="CONFIG_SPIFFS_USE_MTIME: each open for writing rewrites the index header "
                                     "with the time; needs meta_len >= 4")

    def __post_init__(self) -> None:
        ps, bs = self.page_size_bytes, self.block_size_bytes
        if ps & (ps - 1):
            raise SpiffsConfigError(f"page_size_bytes {ps} B is not a power of two")
        if bs % ps or bs // ps < 4:
            raise SpiffsConfigError(f"block_size_bytes {bs} B must be a multiple of page_size_bytes {ps} B "
                                    "holding at least 4 pages")
        if ps < 5 * self.obj_id_len:
            raise SpiffsConfigError("page_size_bytes too small for the object id width")
        # the index header (page header, padding, size, type, name, meta) must leave room for entries
        ph = self.obj_id_len + self.span_ix_len + 1
        pad = (4 - ph % 4) % 4
        hdr = ph + pad + 4 + 1 + self.obj_name_len + self.meta_len
        if hdr + self.page_ix_len > ps:
            raise SpiffsConfigError(f"obj_name_len + meta_len leave no room for index entries in a {ps} B page")
