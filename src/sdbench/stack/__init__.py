"""stack/: from a scenario's description to a built stack (one builder, the media kinds it knows)."""
from .builder import Built, build
from .media import MEDIA
from .target import Target

__all__ = ["Built", "MEDIA", "Target", "build"]
