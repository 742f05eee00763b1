"""workloads/: the protocols (what is measured) and their registry (workloads.registry)."""
