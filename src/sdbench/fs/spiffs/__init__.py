"""SPIFFS (SPI Flash File System), an independent Python implementation of the on-flash
format and of the algorithms of the C library as ESP-IDF configures it."""
from .config import SpiffsConfig, SpiffsConfigError
from .errors import SpiffsError
from .fs import SpiffsFile, SpiffsFileSystem
from .protocol import ProtocolStepComparison, protocol_trace_compare, replay_espidf_protocol

__all__ = [
    "ProtocolStepComparison",
    "SpiffsConfig",
    "SpiffsConfigError",
    "SpiffsError",
    "SpiffsFile",
    "SpiffsFileSystem",
    "protocol_trace_compare",
    "replay_espidf_protocol",
]
