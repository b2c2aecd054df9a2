"""Peer frame codec: every core message and driver frame round-trips; bad bodies are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.codec import client as schema
from zabd.codec.framing import FrameError, FrameReader
from zabd.protocol.messages import (
    Ack,
    AckEpoch,
    AckLeader,
    Commit,
    LookForLeader,
    Message,
    NewEpoch,
    NewLeader,
    Propose,
    ProposeMany,
    Txn,
    Vote,
)
from zabd.server import peer_wire as wire

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
zx = st.integers(1, 2**64 - 1)
txn = st.builds(Txn, zx, st.binary(max_size=64))
history = st.lists(txn, max_size=20).map(lambda ts: tuple(sorted({t.zxid: t for t in ts}.values())))
messages = st.one_of(
    st.builds(LookForLeader, u32, u64, u32),
    st.builds(Vote, u32, u64, u32, st.integers(0, 255)),
    st.builds(NewEpoch, u32),
    st.builds(AckEpoch, u32, u32, u64),
    st.builds(NewLeader, u32, history),
    st.builds(AckLeader, u32),
    st.builds(Propose, txn),
    st.builds(Ack, u64),
    st.builds(Commit, u64),
    st.builds(ProposeMany, history.filter(bool)),
)


@given(st.lists(messages, max_size=12), st.integers(1, 50))
@settings(max_examples=200, deadline=None)
def test_round_trip_in_any_chunking(msgs: list[Message], chunk: int) -> None:
    data = b"".join(wire.encode_message(m) for m in msgs)
    reader = FrameReader(1 << 20)
    bodies = []
    for i in range(0, len(data), chunk):
        bodies.extend(reader.feed(data[i : i + chunk]))
    assert [wire.decode_message(b) for b in bodies] == msgs
    assert reader.buffered == 0


def test_new_leader_split_and_reassembled() -> None:
    hist = tuple(Txn((1 << 32) | i, bytes([i % 256]) * 300) for i in range(1, 2001))
    msg = NewLeader(7, hist)
    frames = wire.encode_new_leader(msg, max_frame=64 * 1024)
    assert len(frames) > 10
    assert all(len(f) <= 64 * 1024 for f in frames)
    reader = FrameReader(64 * 1024)
    parts = [wire.decode_frame(b) for b in reader.feed(b"".join(frames))]
    assert all(isinstance(p, wire.NewLeaderPart) for p in parts)
    assert [p.final for p in parts] == [False] * (len(parts) - 1) + [True]  # type: ignore[union-attr]
    assert tuple(t for p in parts for t in p.txns) == msg.history  # type: ignore[union-attr]
    # small histories stay one ordinary frame
    assert wire.encode_new_leader(NewLeader(1, hist[:3]), 64 * 1024) == [wire.encode_message(NewLeader(1, hist[:3]))]


@pytest.mark.parametrize(
    "body",
    [
        (7,),
        (7, -1),
        (7, True),
        (7, "1"),
        (6, (0, b"x")),
        (6, (1, "text")),
        (4, 1, ((2, b"a"), (1, b"b"))),
        (1, 1, 1, 1, 256),
        (99, 1),
        (True, 1),
        [7, 1],
        {"a": 1},
    ],
)
def test_bad_bodies_refused(body: object) -> None:
    with pytest.raises(FrameError):
        wire.decode_message(body)


def test_oversized_header_refused_before_body() -> None:
    reader = FrameReader(1024)
    with pytest.raises(FrameError, match="exceeds"):
        reader.feed(b"\x00\x00\x04\x01")


@given(
    st.dictionaries(
        st.sampled_from(["v", "type", "id", "payload", "extra"]),
        st.one_of(st.integers(-2, 2**64), st.binary(max_size=4), st.sampled_from(["propose", "status"]), st.booleans()),
    )
)
@settings(max_examples=300, deadline=None)
def test_fast_propose_accepts_exactly_what_the_model_accepts(body: dict[str, object]) -> None:
    fast = schema.fast_propose(body)
    try:
        req = schema.REQUEST_ADAPTER.validate_python(body)
        model = (req.id, req.payload) if isinstance(req, schema.ProposeRequest) else None
    except Exception:
        model = None
    if body.keys() == {"v", "type", "id", "payload"} or fast is not None:
        assert fast == model


def test_hand_encoded_frames_match_msgpack() -> None:
    import msgpack

    for z in (0, 1, 2**32 + 5, 2**64 - 1):
        assert msgpack.unpackb(wire.encode_message(Ack(z))[4:]) == [7, z]
        assert msgpack.unpackb(wire.encode_message(Commit(z))[4:]) == [8, z]
        body = msgpack.unpackb(schema.ok_zxid_frame(12345, z)[4:])
        assert body == {"v": 1, "id": 12345, "ok": True, "zxid": z}
        assert schema.ProposeResult.model_validate(body).zxid == z


DRIVER_FRAMES = [
    wire.Hello(wire.WIRE_VERSION, 3),
    wire.Forward(7, b"raw payload"),
    wire.Forward(8, ("put", "k", b"v", 0)),
    wire.Forward(9, ("cas", "k", b"v", 4)),
    wire.Forward(10, ("delete", "k", b"", -1)),
    wire.ForwardOk(7, 2**40),
    wire.ForwardErr(7, "no_leader", "retry"),
    wire.SyncInfoFrame(0, (2**32 + 5, 2**33 + 1)),
    wire.SyncPlanFrame(3, "SNAP", 0, 2**32 + 9, 2**32 + 9, b"snapshot"),
    wire.SyncPlanFrame(3, "DIFF", 2**32 + 9, 0, 0, None),
    wire.SyncTxns(3, True, (Txn(2**32 + 10, b"a"),)),
    wire.SyncReq(11),
    wire.SnapData(3, b"more"),
    wire.Ping(),
]
TAGS = {
    wire.Hello: wire.TAG_HELLO, wire.Forward: wire.TAG_FORWARD, wire.ForwardOk: wire.TAG_FORWARD_OK,
    wire.ForwardErr: wire.TAG_FORWARD_ERR, wire.SyncInfoFrame: wire.TAG_SYNC_INFO,
    wire.SyncPlanFrame: wire.TAG_SYNC_PLAN, wire.SyncTxns: wire.TAG_SYNC_TXNS, wire.SyncReq: wire.TAG_SYNC_REQ,
    wire.SnapData: wire.TAG_SNAP_DATA, wire.Ping: wire.TAG_PING,
}


@pytest.mark.parametrize("got", DRIVER_FRAMES, ids=[type(f).__name__ for f in DRIVER_FRAMES])
def test_driver_frames_round_trip(got: wire.DriverFrame) -> None:
    fields = [int(x) if isinstance(x, bool) else x for x in got]
    (body,) = FrameReader(1 << 20).feed(wire.frame((TAGS[type(got)], *fields)))
    assert wire.decode_frame(body) == got


@pytest.mark.parametrize(
    "body",
    [
        (wire.TAG_HELLO, 2, 256),  # node id out of range
        (wire.TAG_FORWARD, 1, ("put", "k", b"v", 3)),  # a put names no version
        (wire.TAG_FORWARD, 1, ("rename", "k", b"v", 0)),
        (wire.TAG_FORWARD, -1, b"x"),
        (wire.TAG_SYNC_PLAN, 1, "COPY", 0, 0, 0, None),
        (wire.TAG_SYNC_TXNS, 1, 1, ((2, b"a"), (1, b"b"))),  # not ascending
        (wire.TAG_SYNC_INFO, 0, (-1,)),
        (wire.TAG_PING, 1),
        (72, 1, 2),  # a tag nobody speaks
    ],
)
def test_bad_driver_frames_refused(body: tuple[object, ...]) -> None:
    with pytest.raises(FrameError):
        wire.decode_frame(body)


def test_a_zookeeper_record_is_encoded_when_its_write_is_forwarded() -> None:
    from zabd.zk.msgpack_wire import decode_request, encode_request
    from zabd.zk.records import SetData

    req = SetData("/n", b"x" * 10, 3)
    local = wire.ZKWrite(5, (("digest", "u:h"),), req)  # as a session of this node submits it
    (body,) = FrameReader(1 << 20).feed(wire.forward_frame(9, local))
    got = wire.decode_frame(body)
    assert got == wire.Forward(9, wire.ZKWrite(5, (("digest", "u:h"),), encode_request(req)))
    assert decode_request(got.write.request) == req  # type: ignore[union-attr,arg-type]
    assert wire.forward_frame(4, b"raw") == wire.frame((wire.TAG_FORWARD, 4, b"raw"))
