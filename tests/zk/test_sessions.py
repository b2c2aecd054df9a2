"""Session ids, timeout negotiation and the leader's expiry tracker
(ZooKeeper's ``SessionTrackerImpl`` and ``ZooKeeperServer.processConnectRequest``)."""

from __future__ import annotations

import pytest

from zabd.zk.records import CONTAINER_OWNER
from zabd.zk.sessions import ExpiryTracker, SessionIds, negotiate_timeout

TICK = 2000
NOW = 1_700_000_000_000


# ------------------------------------------------------------- negotiation


@pytest.mark.parametrize(("requested", "expected"), [
    (0, 2 * TICK),
    (1, 2 * TICK),
    (2 * TICK - 1, 2 * TICK),
    (2 * TICK, 2 * TICK),
    (2 * TICK + 1, 2 * TICK + 1),
    (30_000, 30_000),
    (20 * TICK, 20 * TICK),
    (20 * TICK + 1, 20 * TICK),
    (10**9, 20 * TICK),
    (-5, 2 * TICK),
])
def test_negotiate_timeout_is_bounded_by_2_and_20_ticks(requested: int, expected: int) -> None:
    assert negotiate_timeout(requested, TICK) == expected


def test_negotiate_timeout_follows_the_tick() -> None:
    assert negotiate_timeout(100, 50) == 100
    assert negotiate_timeout(99, 50) == 100
    assert negotiate_timeout(1001, 50) == 1000


# --------------------------------------------------------------------- ids


def expected_first_id(server_id: int, now_ms: int) -> int:
    # SessionTrackerImpl.initializeNextSessionId: ((now << 24) >>> 8) | (id << 56), as a Java long
    v = (((now_ms << 24) & (2**64 - 1)) >> 8) | (server_id << 56)
    return v - 2**64 if v >= 2**63 else v


@pytest.mark.parametrize("server_id", [1, 2, 7, 127, 128, 200, 254])
def test_first_id_is_zookeepers(server_id: int) -> None:
    assert SessionIds(server_id, NOW).next() == expected_first_id(server_id, NOW)


@pytest.mark.parametrize("server_id", [1, 5, 127, 128, 254])
def test_server_id_is_the_top_byte(server_id: int) -> None:
    ids = SessionIds(server_id, NOW)
    for _ in range(5):
        sid = ids.next()
        assert (sid & 0xFFFFFFFFFFFFFFFF) >> 56 == server_id


def test_time_fills_the_40_bits_below_the_server_id() -> None:
    sid = SessionIds(3, NOW).next()
    assert (sid >> 16) & (2**40 - 1) == NOW & (2**40 - 1)
    assert sid & 0xFFFF == 0


@pytest.mark.parametrize("server_id", [1, 127, 128, 254])
def test_ids_are_signed_64_bit(server_id: int) -> None:
    ids = SessionIds(server_id, NOW)
    for _ in range(3):
        sid = ids.next()
        assert -(2**63) <= sid < 2**63
        assert (sid < 0) == (server_id >= 128)


def test_ids_are_unique_and_consecutive() -> None:
    ids = SessionIds(1, NOW)
    got = [ids.next() for _ in range(1000)]
    assert len(set(got)) == 1000
    assert got == list(range(got[0], got[0] + 1000))


def test_servers_never_collide() -> None:
    a, b = SessionIds(1, NOW), SessionIds(2, NOW)
    assert not {a.next() for _ in range(100)} & {b.next() for _ in range(100)}


def test_a_restart_later_starts_past_the_old_ids() -> None:
    before = SessionIds(1, NOW)
    old = [before.next() for _ in range(100)]
    after = SessionIds(1, NOW + 1)
    assert after.next() > max(old)


@pytest.mark.parametrize("server_id", [0, 255, 256, -1])
def test_server_id_must_fit_the_top_byte(server_id: int) -> None:
    with pytest.raises(ValueError):
        SessionIds(server_id, NOW)


# SessionTrackerImpl.initializeNextSessionId skips CONTAINER_EPHEMERAL_OWNER (-2**63), which server id 128
# yields when the low 40 bits of the time are 0 (SessionTrackerImpl.java 102-104). (Found by these tests;
# fixed in fe81526.)
def test_first_id_is_never_the_container_owner() -> None:
    assert SessionIds(128, 2**41).next() != CONTAINER_OWNER


# ------------------------------------------------------------------ expiry


def test_untracked_tracker_is_empty() -> None:
    t = ExpiryTracker()
    assert len(t) == 0
    assert t.expired(10**15) == []


def test_tracked_session_expires_at_its_deadline() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, now_ms=100)
    assert len(t) == 1
    assert t.expired(1099) == []
    assert t.expired(1100) == [7]


def test_expired_reports_once_and_forgets() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, 0)
    assert t.expired(5000) == [7]
    assert t.expired(5000) == []
    assert t.expired(10**9) == []
    assert len(t) == 0


def test_touch_extends() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, 0)
    t.touch(7, 800)
    assert t.expired(1000) == []
    assert t.expired(1799) == []
    assert t.expired(1800) == [7]


def test_touch_never_shortens() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, 500)
    t.touch(7, 100)  # an older touch arriving late
    assert t.expired(1100) == []
    assert t.expired(1500) == [7]


def test_touch_of_untracked_session_is_ignored() -> None:
    t = ExpiryTracker()
    t.touch(9, 0)
    assert len(t) == 0
    assert t.expired(10**9) == []


def test_touch_after_expiry_is_ignored() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, 0)
    assert t.expired(1000) == [7]
    t.touch(7, 1000)
    assert len(t) == 0
    assert t.expired(10**9) == []


def test_forget_stops_tracking() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, 0)
    t.track(8, 1000, 0)
    t.forget(7)
    t.forget(99)  # unknown: no-op
    assert len(t) == 1
    assert t.expired(5000) == [8]


def test_retrack_after_forget_uses_the_new_deadline() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, 0)
    t.forget(7)
    t.track(7, 1000, 5000)
    assert t.expired(5999) == []
    assert t.expired(6000) == [7]


def test_track_again_changes_the_timeout() -> None:
    t = ExpiryTracker()
    t.track(7, 1000, 0)
    t.track(7, 5000, 0)
    assert t.expired(4999) == []
    assert t.expired(5000) == [7]


def test_expired_oldest_first_and_only_those_due() -> None:
    t = ExpiryTracker()
    t.track(1, 3000, 0)
    t.track(2, 1000, 0)
    t.track(3, 2000, 0)
    t.track(4, 9000, 0)
    assert t.expired(3000) == [2, 3, 1]
    assert len(t) == 1
    assert t.expired(9000) == [4]


def test_clear_forgets_everything() -> None:
    t = ExpiryTracker()
    for sid in range(5):
        t.track(sid, 100, 0)
    t.clear()
    assert len(t) == 0
    assert t.expired(10**9) == []
    t.touch(1, 0)
    assert len(t) == 0
