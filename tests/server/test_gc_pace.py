"""The pace of the GC freeze (zabd.server.status): fast while survivors pile
up, slow when idle, whatever the pace of the freeze that measured them."""

from __future__ import annotations

from zabd.server.status import FREEZE_BUSY_S, FREEZE_IDLE_S, next_freeze_period


def test_a_busy_server_stays_at_the_fast_pace() -> None:
    # measured under setData load: ~10,000 survivors in 250 ms, ~1,200 in 20 ms
    assert next_freeze_period(FREEZE_IDLE_S, 10_000, 0) == FREEZE_BUSY_S
    assert next_freeze_period(FREEZE_BUSY_S, 1_200, 0) == FREEZE_BUSY_S


def test_an_idle_server_goes_back_to_the_slow_pace() -> None:
    # an idle server: a handful of survivors per freeze (pings, timers)
    assert next_freeze_period(FREEZE_BUSY_S, 5, 0) == FREEZE_IDLE_S
    assert next_freeze_period(FREEZE_IDLE_S, 5, 0) == FREEZE_IDLE_S


def test_a_collection_of_the_young_generation_means_busy() -> None:
    assert next_freeze_period(FREEZE_IDLE_S, 0, 1) == FREEZE_BUSY_S


def test_the_freeze_keeps_the_pace_it_measured_under_load() -> None:
    """The survivors of one pace decide the next: alternating paces (the bug
    a fixed count had) would show as a change of period under steady load."""
    period = FREEZE_IDLE_S
    seen = []
    for _ in range(6):
        young = round(60_000 * period)  # a steady 60,000 survivors a second
        period = next_freeze_period(period, young, 0)
        seen.append(period)
    assert seen == [FREEZE_BUSY_S] * 6
