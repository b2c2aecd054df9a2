"""Faults against real processes: network namespaces and partitions, workloads
that record histories, and checkers (linearizability, appends) for them."""
