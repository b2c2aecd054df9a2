"""ZooKeeper's client connection state machine under the in-process fuzzer
(tests/server/zk_conn_fuzz.py; issue 18): a short seeded run keeps the
fuzzer and its invariants alive in CI, every input that ever broke the
server is replayed (tests/data/zk_conn_fuzz/, each file's note says what it
broke and where it was fixed), and each of those bugs has a small test of
its own that says what the client must see instead."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.zk_conn_fuzz import (
    Conn,
    ConnRun,
    Fuzzer,
    Harness,
    Scenario,
    _Capture,
    captured_logs,
    load_inputs,
    replay,
)
from zabd.server.client_session import MAX_OUTSTANDING
from zabd.zk import jute
from zabd.zk.errors import Code
from zabd.zk.records import (
    CONTAINER,
    AddWatch,
    CloseSession,
    CountResult,
    Create,
    CreateResult,
    DataResult,
    GetAllChildrenNumber,
    GetData,
    SetData,
)

CASES = Path(__file__).resolve().parents[1] / "data" / "zk_conn_fuzz"
NEW: dict[str, Any] = {"kind": "connect", "session": "new"}


@pytest.fixture
def logs() -> Iterator[_Capture]:
    with captured_logs() as cap:
        yield cap


@pytest.fixture
def harness(logs: _Capture) -> Iterator[Callable[[], Harness]]:
    """Fresh one-node replicas, each closed afterwards."""
    made: list[Harness] = []

    def make() -> Harness:
        made.append(Harness(logs))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_a_short_fuzz_run_breaks_nothing(logs: _Capture) -> None:
    fz = Fuzzer(18, logs, hang_seconds=10.0)
    try:
        for _ in range(2000):
            crash = fz.one()
            assert crash is None, f"{crash.signature}\n{crash.detail}"
    finally:
        fz.harness.close()
    assert len(fz.outcomes) > 100, "the fuzzer explored too little to mean anything"


@pytest.mark.parametrize("case", sorted(CASES.glob("*.json")), ids=lambda p: p.stem)
def test_an_input_that_broke_the_server_replays_clean(case: Path, logs: _Capture) -> None:
    inputs, note = load_inputs(case)
    assert replay(inputs, logs, 10.0, bool(note.get("wait_connect"))) is None, note["bug"]


# ----------------------------------------------- one test per bug it found


def one_connection(h: Harness, opening: dict[str, Any], *requests: tuple[int, int, object],
                   plan: list[list[Any]] | None = None) -> ConnRun:
    """One connection that sends everything in one chunk."""
    frames = [jute.encode_request(xid, op, rec) for xid, op, rec in requests]
    h.run(Scenario([Conn(opening, frames)], (plan or []) + [["send", 0, -1, "b"]]))
    h.check_tree()
    return h.last[0]


def replies(c: ConnRun) -> list[bytes]:
    """The bodies of the frames after the ConnectResponse."""
    out, bodies = bytes(c.t.out), []
    while out:
        (n,) = struct.unpack_from(">i", out)
        bodies.append(out[4 : 4 + n])
        out = out[4 + n :]
    _, timeout, _, _, _ = jute.decode_connect_response(bodies[0])
    assert timeout > 0
    return bodies[1:]


def test_get_all_children_number_of_the_empty_path_is_the_roots(harness: Callable[[], Harness]) -> None:
    """It raised KeyError out of the replica's loop: the server stopped."""
    h = harness()
    c = one_connection(h, NEW, (1, jute.OP_GET_ALL_CHILDREN_NUMBER, GetAllChildrenNumber("")),
                       (2, jute.OP_GET_ALL_CHILDREN_NUMBER, GetAllChildrenNumber("/")))
    empty, root = (jute.decode_reply(r, jute.OP_GET_ALL_CHILDREN_NUMBER) for r in replies(c))
    assert empty[:3:2] == (1, 0) and root[:3:2] == (2, 0)
    assert empty[3] == root[3] == CountResult(3)  # /zookeeper, /zookeeper/quota, /zookeeper/config


def test_requests_sent_before_the_connect_response_wait_for_the_session(harness: Callable[[], Harness]) -> None:
    h = harness()
    c = one_connection(h, NEW, (1, jute.OP_CREATE, Create("/p", b"v")), (2, jute.OP_GET_DATA, GetData("/p")))
    create, get = replies(c)
    assert jute.decode_reply(create, jute.OP_CREATE)[2:] == (0, CreateResult("/p", jute.NO_STAT))
    xid, _, err, data = jute.decode_reply(get, jute.OP_GET_DATA)
    assert (xid, err) == (2, 0) and isinstance(data, DataResult) and data.data == b"v"
    assert not c.t.closed


def test_a_reused_xid_gets_each_request_its_own_reply(harness: Callable[[], Harness]) -> None:
    """The second request's reply was encoded with the first's opcode."""
    h = harness()
    c = one_connection(h, NEW, (7, jute.OP_CREATE_CONTAINER, Create("/c", b"", mode=CONTAINER)),
                       (7, jute.OP_DELETE_CONTAINER, None))
    create, unknown = replies(c)
    xid, _, err, made = jute.decode_reply(create, jute.OP_CREATE_CONTAINER)
    assert (xid, err) == (7, 0) and isinstance(made, CreateResult) and made.path == "/c"
    assert jute.decode_reply(unknown, jute.OP_DELETE_CONTAINER)[::2] == (7, Code.UNIMPLEMENTED)


def test_nothing_is_answered_after_a_write_lost_to_a_close_session(harness: Callable[[], Harness]) -> None:
    """The write behind a closeSession got no answer, the read behind it did:
    replies out of order. Now the answers stop where one is missing."""
    h = harness()
    c = one_connection(h, NEW, (1, jute.OP_CLOSE_SESSION, CloseSession()),
                       (2, jute.OP_CREATE, Create("/x", b"")), (3, jute.OP_GET_DATA, GetData("/")))
    assert [jute.decode_reply(r, jute.OP_CLOSE_SESSION)[0] for r in replies(c)] == [1]
    assert c.t.closed


def test_watches_set_behind_a_close_session_are_not_kept(harness: Callable[[], Harness]) -> None:
    """Served after the close hung the connection up, they were never dropped."""
    h = harness()
    c = one_connection(h, NEW, (1, jute.OP_CLOSE_SESSION, CloseSession()),
                       (2, jute.OP_ADD_WATCH, AddWatch("/a", 0)), (3, jute.OP_GET_DATA, GetData("/", True)))
    assert c.t.closed and len(h.zk.watches) == 0


def test_a_read_only_connection_reads_nothing_after_its_close_session(harness: Callable[[], Harness]) -> None:
    """The read behind it was answered with a msgpack error frame on the jute port."""
    h = harness()
    c = one_connection(h, {**NEW, "ro": True}, (1, jute.OP_CLOSE_SESSION, CloseSession()),
                       (2, jute.OP_GET_DATA, GetData("/")), plan=[["serving", False]])
    (close,) = replies(c)
    assert jute.decode_reply(close, jute.OP_CLOSE_SESSION)[:3:2] == (1, 0)
    assert c.t.closed


def test_a_connection_paused_for_too_many_requests_in_flight_is_read_again(harness: Callable[[], Harness]) -> None:
    """Past MAX_OUTSTANDING requests in flight the server stops reading the
    connection; it never started again, so the requests sent after those
    were never read (found by the fuzzer's flood input; its file would be
    a quarter of a megabyte, so it lives here as code)."""
    n = MAX_OUTSTANDING + 100
    frames = [jute.encode_request(i + 1, jute.OP_SET_DATA, SetData("/", b"x")) for i in range(n + 10)]
    h = harness()
    h.run(Scenario([Conn(NEW, frames)], [["send", 0, 1, "f"], ["send", 0, n, "f"], ["send", 0, 10, "f"]]))
    c = h.last[0]
    assert [jute.decode_reply(r, jute.OP_SET_DATA)[::2] for r in replies(c)] == [(i + 1, 0) for i in range(n + 10)]
    assert not c.t.paused and not c.t.closed


def test_writes_past_max_inflight_are_all_answered_without_a_timer(harness: Callable[[], Harness]) -> None:
    """A one-node leader commits as it proposes: the writes admitted from the
    queue as earlier ones applied waited for an unrelated kick (the
    keepalive's, up to peer_ping_ms / 2 later; here: forever), whenever the
    answers that came with them did not kick (their link was marked already:
    here by the ConnectResponse of a re-attach, in the same chunk)."""
    h = harness()
    h.run(Scenario([Conn(NEW)], [["send", 0, -1, "b"]]))  # a session, left to re-attach
    n = 3 * h.cfg.max_inflight
    frames = [jute.encode_request(i + 1, jute.OP_SET_DATA, SetData("/", b"x")) for i in range(n)]
    h.run(Scenario([Conn({"kind": "connect", "session": "pool", "pw": "right"}, frames)], [["send", 0, -1, "b"]]))
    assert len(replies(h.last[0])) == n and not h.replica.node.effects
