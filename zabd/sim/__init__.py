"""The deterministic simulator driver around the protocol core."""

from zabd.sim.dump import digest, dump
from zabd.sim.faults import FaultSpecError, format_faults, parse_faults, random_faults
from zabd.sim.simulator import SimConfig, SimStats, Simulator

__all__ = [
    "digest",
    "dump",
    "FaultSpecError",
    "format_faults",
    "parse_faults",
    "random_faults",
    "SimConfig",
    "Simulator",
    "SimStats",
]
