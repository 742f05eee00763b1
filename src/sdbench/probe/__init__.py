"""``sdbench probe``: what a card does (allocation unit, open units, page, latencies, erase) and a card
profile made of it (docs/probe.md)."""
from .measure import Latency, Prober, ProbeResult

__all__ = ["Latency", "ProbeResult", "Prober"]
