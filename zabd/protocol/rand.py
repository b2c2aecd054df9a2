"""The spec's splitmix64 mixer (section 3) and the election-deadline formula.

The core computes its own election jitter from the configured seed so that the
server and the simulator share one rule; only the simulator uses the delivery
delay.
"""

from __future__ import annotations

from typing import Final

MASK64: Final = 0xFFFF_FFFF_FFFF_FFFF
ELECTION_TIMEOUT: Final = 150
ELECTION_JITTER: Final = 150


def mix(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E7B5) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def deadline_after(seed: int, node_id: int, t: int) -> int:
    return t + ELECTION_TIMEOUT + mix(seed ^ node_id ^ t) % ELECTION_JITTER


def delivery_delay(seed: int, src: int, dst: int, t: int) -> int:
    return 1 + mix(seed ^ src ^ dst ^ t) % 3
