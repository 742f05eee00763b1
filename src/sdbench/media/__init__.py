"""media/: the BlockDevice interface and its implementations."""
from .base import (AlignmentError, BlockDevice, BlockDeviceError, BlockDeviceWrapper, DeviceStats, Geometry,
                   OutOfRangeError, ReadOnlyError, bottom)
from .image import ImageFileDevice
from .memory import MemoryDevice
from .trace import TraceDevice, TraceEntry

__all__ = [
    "AlignmentError", "BlockDevice", "BlockDeviceError", "BlockDeviceWrapper", "DeviceStats", "Geometry",
    "ImageFileDevice", "MemoryDevice", "OutOfRangeError", "ReadOnlyError", "TraceDevice", "TraceEntry", "bottom",
]
