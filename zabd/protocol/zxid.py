"""Zxids packed into one integer, as ZooKeeper does: epoch in the high 32 bits.

Packing makes ordering, hashing and comparison single integer operations on the
hot path, and the lexicographic order of ``(epoch, counter)`` is preserved.
"""

from __future__ import annotations

from typing import Final

U32_MAX: Final = 0xFFFF_FFFF
ZERO: Final = 0


class CounterOverflow(Exception):
    """An epoch or counter would pass 2^32-1 (spec section 3)."""


def make(epoch: int, counter: int) -> int:
    if epoch > U32_MAX or counter > U32_MAX:
        raise CounterOverflow(f"zxid ({epoch}, {counter}) does not fit in u32 fields")
    return (epoch << 32) | counter


def epoch_of(zxid: int) -> int:
    return zxid >> 32


def counter_of(zxid: int) -> int:
    return zxid & U32_MAX


def fmt(zxid: int) -> str:
    """Human form used in logs and error messages: ``epoch:counter``."""
    return f"{zxid >> 32}:{zxid & U32_MAX}"
