"""Giving freed memory back to the system after a burst of client buffers.

Frames that stall, answers nobody reads and TLS records come and go in
pieces of up to a few MiB, in glibc's main heap beside everything else; when
they are freed the heap keeps the pages unless they are at its top, so after
an abuse of the client ports RSS stayed 15-170 % above where it began (the
abuse suite, ``bench/abuse.py``). ``malloc_trim`` hands back every free page
of the heap, wherever it is. It walks the heap, so the server calls it only
after many bytes of client buffers went away, and at most every
``TRIM_EVERY_S``. Elsewhere than glibc it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable

TRIM_AFTER_BYTES = 16 << 20  # client buffers freed since the last trim
TRIM_EVERY_S = 5.0


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


class Trimmer:
    """Counts client buffer bytes freed; trims once enough went, not too often."""

    def __init__(self, trim: Callable[[int], int] | None = None, now: Callable[[], float] = time.monotonic) -> None:
        self.trim = trim if trim is not None else _malloc_trim()
        self.now = now
        self.freed = 0
        self.trims = 0
        self._last = -TRIM_EVERY_S

    def freed_bytes(self, n: int) -> None:
        self.freed += n

    def maybe_trim(self) -> bool:
        """Trim if enough was freed since the last one and it is not too soon; True if it did."""
        if self.freed < TRIM_AFTER_BYTES or self.trim is None:
            return False
        t = self.now()
        if t - self._last < TRIM_EVERY_S:
            return False
        self._last = t
        self.freed = 0
        self.trims += 1
        self.trim(0)
        return True
