"""Peer frame codec: every core message round-trips; bad bodies are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.client import schema
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
    Txn,
    Vote,
)
from zabd.server import wire

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
)


@given(st.lists(messages, max_size=12), st.integers(1, 50))
@settings(max_examples=200, deadline=None)
def test_round_trip_in_any_chunking(msgs: list[Message], chunk: int) -> None:
    data = b"".join(wire.encode_message(m) for m in msgs)
    reader = wire.FrameReader(1 << 20)
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
    reader = wire.FrameReader(64 * 1024)
    asm = wire.NewLeaderAssembler()
    out = [asm.add(b) for b in reader.feed(b"".join(frames))]
    assert out[:-1] == [None] * (len(frames) - 1)
    assert out[-1] == msg
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
    with pytest.raises(wire.FrameError):
        wire.decode_message(body)


def test_oversized_header_refused_before_body() -> None:
    reader = wire.FrameReader(1024)
    with pytest.raises(wire.FrameError, match="exceeds"):
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
        body = msgpack.unpackb(wire.ok_zxid_frame(12345, z)[4:])
        assert body == {"v": 1, "id": 12345, "ok": True, "zxid": z}
        assert schema.ProposeResult.model_validate(body).zxid == z
