"""fs/: the FileSystem interface and its implementations (FAT, LittleFS, SPIFFS, raw)."""
from .base import OPTIONAL_OPS, File, FileStat, FileSystem, UnsupportedOperation
from .raw import RawVolume

__all__ = ["OPTIONAL_OPS", "File", "FileStat", "FileSystem", "RawVolume", "UnsupportedOperation"]
