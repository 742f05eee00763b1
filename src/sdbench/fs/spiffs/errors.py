"""SPIFFS result codes as exceptions (one clear line each)."""
from __future__ import annotations

from ...errors import FileSystemError

_TEXT = {
    "NOT_MOUNTED": "not mounted",
    "FULL": "file system full",
    "NOT_FOUND": "no such file",
    "END_OF_OBJECT": "end of file",
    "DELETED": "page is deleted",
    "NOT_FINALIZED": "page is not finalized",
    "NOT_INDEX": "page is not an index page",
    "OUT_OF_FILE_DESCS": "too many open files",
    "FILE_CLOSED": "file is closed (or was removed)",
    "FILE_DELETED": "file was deleted",
    "IS_INDEX": "page is an index page, expected data",
    "IS_FREE": "page is free",
    "INDEX_SPAN_MISMATCH": "index page has the wrong span index",
    "DATA_SPAN_MISMATCH": "data page has the wrong span index",
    "INDEX_REF_FREE": "index refers to a free page",
    "INDEX_REF_LU": "index refers to a lookup page",
    "INDEX_REF_INVALID": "index refers to a page outside the file system",
    "INDEX_FREE": "index page is free",
    "INDEX_LU": "index page number is a lookup page",
    "INDEX_INVALID": "index page number outside the file system",
    "NOT_WRITABLE": "file not opened for writing",
    "NOT_READABLE": "file not opened for reading",
    "CONFLICTING_NAME": "name already exists",
    "NOT_A_FS": "no SPIFFS file system found (magic missing; format it first)",
    "MAGIC_NOT_POSSIBLE": "no room for the magic in the lookup pages with this page/block size",
    "NO_DELETED_BLOCKS": "no fully deleted block",
    "NAME_TOO_LONG": "name too long",
    "FILE_EXISTS": "file exists",
    "BAD_DESCRIPTOR": "bad file descriptor",
    "SEEK_BOUNDS": "seek before the start of the file",
    "CORRUPT": "corrupt file system",
}


class SpiffsError(FileSystemError):
    """A SPIFFS operation failed; ``code`` is the SPIFFS_ERR_* name without the prefix."""

    def __init__(self, code: str, detail: str = "") -> None:
        self.code = code
        text = _TEXT.get(code, code.lower().replace("_", " "))
        super().__init__(f"spiffs: {text}" + (f" ({detail})" if detail else ""))
