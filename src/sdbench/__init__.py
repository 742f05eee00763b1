"""sdbench: measure and predict storage performance of SD cards and flash."""
from __future__ import annotations

__version__ = "0.1.0"
#: version of the JSON results format (docs/results-format.md)
RESULTS_FORMAT_VERSION = 2
