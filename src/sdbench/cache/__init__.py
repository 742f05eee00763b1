"""cache/: block caches that are BlockDevices wrapping a BlockDevice.

Build one from a TOML table with ``from_mapping(CacheConfig, table, "cache")``
and wrap the device: ``BlockCache(device, config)``.  See docs/cache.md.
"""
from .block_cache import EVICT_FLUSH_MODES, WRITE_MODES, BlockCache, CacheConfig, CacheStats
from .policies import POLICIES, ArcPolicy, LrucPolicy, LruPolicy, Policy, TwoQPolicy

__all__ = [
    "EVICT_FLUSH_MODES", "POLICIES", "WRITE_MODES", "ArcPolicy", "BlockCache", "CacheConfig", "CacheStats",
    "LrucPolicy", "LruPolicy", "Policy", "TwoQPolicy",
]
