"""The trim after a burst of freed client buffers (zabd.server.memory)."""

from __future__ import annotations

from zabd.server.memory import TRIM_AFTER_BYTES, TRIM_EVERY_S, Trimmer


def test_a_trim_follows_enough_freed_bytes_and_not_too_often() -> None:
    calls: list[int] = []
    clock = [100.0]

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    t = Trimmer(trim, lambda: clock[0])
    t.freed_bytes(TRIM_AFTER_BYTES - 1)
    assert not t.maybe_trim() and calls == []
    t.freed_bytes(1)
    assert t.maybe_trim() and calls == [0]
    t.freed_bytes(TRIM_AFTER_BYTES)
    clock[0] += TRIM_EVERY_S / 2
    assert not t.maybe_trim()  # too soon: the bytes wait for the next chance
    clock[0] += TRIM_EVERY_S / 2
    assert t.maybe_trim() and calls == [0, 0] and t.trims == 2


def test_the_real_malloc_trim_is_found_here() -> None:
    # glibc on this machine (Debian): the server's trims are real ones
    t = Trimmer()
    assert t.trim is not None
    t.freed_bytes(TRIM_AFTER_BYTES)
    assert t.maybe_trim()
