"""fs/: the FileSystem interface and its implementations (FAT, LittleFS, SPIFFS, raw)."""
from .base import File, FileStat, FileSystem
from .raw import RawVolume

__all__ = ["File", "FileStat", "FileSystem", "RawVolume"]
