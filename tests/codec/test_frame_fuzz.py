"""Fuzz zabd's own msgpack protocols: every decoder the server applies to
network bytes returns a value or refuses the input with the exception the
server catches around it, never anything else (which would escape the
connection handler).

- client port: ``FrameReader(use_list=True).feed`` (FrameError);
  ``fast_propose``, ``REQUEST_ADAPTER`` and the error answer built from its
  error, as ``ClientService.handle`` does (pydantic ValidationError);
  ``zk_msgpack.decode_request`` of a ``zk`` request (ValueError).
- peer port: ``FrameReader.feed``, ``peer.decode_frame``, ``decode_message``
  and ``PeerSession.feed`` (handshake, part assembly), all FrameError; the
  leader's ``decode_request`` of a forwarded ZooKeeper write (ValueError,
  ``payloads.zk_prepare``).
- ZooKeeper requests over msgpack: ``zk_msgpack.decode_request`` (ValueError).

``decode_everything`` is the property; the hypothesis tests below check it
with a few hundred inputs each, ``scripts/fuzz_frames.py`` with as many as
asked (seed corpus of valid frames, byte and structure mutations, random
bytes, splices, streams cut at random points).
"""

from __future__ import annotations

import itertools
import random
import struct
from collections.abc import Sequence
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from zabd.codec import client as schema
from zabd.codec.framing import FrameError, FrameReader, frame, pack_header
from zabd.protocol.messages import (
    Ack,
    AckEpoch,
    AckLeader,
    Commit,
    LookForLeader,
    NewEpoch,
    NewLeader,
    Propose,
    ProposeMany,
    ReadPing,
    ReadPong,
    Txn,
    Vote,
)
from zabd.server import peer_wire as wire
from zabd.server.peer_session import PeerSession
from zabd.zk import msgpack_wire as zk_msgpack
from zabd.zk.acl import ACL, OPEN_ACL_UNSAFE, Id
from zabd.zk.records import (
    PERSISTENT_WITH_TTL,
    AddAuth,
    AddWatch,
    Check,
    CheckWatches,
    CloseSession,
    Create,
    CreateSession,
    Delete,
    DeleteContainer,
    Exists,
    GetACL,
    GetAllChildrenNumber,
    GetChildren,
    GetData,
    GetEphemerals,
    Multi,
    Ping,
    RemoveWatches,
    SetACL,
    SetData,
    SetWatches,
    Sync,
)

MAX_FRAME = 1 << 16
PROTOCOLS = ("client", "peer", "zk")
OWN_ID = 3
MEMBERS = frozenset({1, 2, 3})

# ------------------------------------------------------------------ property


def _zk_request(raw: bytes) -> None:
    """As ClientService._zk_request and payloads.zk_prepare do."""
    try:
        zk_msgpack.decode_request(raw)
    except ValueError as exc:
        str(exc)  # the error answer and the log carry it


def _client_body(body: Any) -> None:
    """As ClientService.handle does with one request body."""
    fast = schema.fast_propose(body)
    try:
        req = schema.REQUEST_ADAPTER.validate_python(body)
    except ValidationError as exc:
        assert fast is None, f"fast_propose accepted what the schema refuses: {exc}"
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "request"
        text = f"{where}: {err['msg']}"
        rid = body.get("id", 0) if isinstance(body, dict) else 0
        schema.error_frame(rid if isinstance(rid, int) else 0, schema.BAD_REQUEST, text)
        return
    if fast is not None:
        assert isinstance(req, schema.ProposeRequest) and (req.id, req.payload) == fast
    if isinstance(req, schema.ZKRequest):
        _zk_request(req.req)


def _peer_body(body: Any) -> None:
    """decode_frame (what PeerSession.feed calls) and decode_message."""
    try:
        got = wire.decode_frame(body)
    except FrameError as exc:
        str(exc)  # the transport logs it
    else:
        if isinstance(got, wire.Forward) and isinstance(got.write, wire.ZKWrite):
            _zk_request(got.write.request)  # the leader decodes it
    try:
        wire.decode_message(body)
    except FrameError as exc:
        str(exc)


def chunks(raw: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``raw`` cut at the (sorted, clamped) points ``cuts``."""
    points = sorted({min(max(c, 0), len(raw)) for c in cuts} | {0, len(raw)})
    return [raw[a:b] for a, b in itertools.pairwise(points)] or [b""]


def feed_split(raw: bytes, cuts: Sequence[int], *, use_list: bool) -> list[Any]:
    """FrameReader.feed on the whole stream and on it cut at ``cuts``: both
    refuse it (FrameError) or neither; the same frames come out. Returns the
    bodies read before any refusal."""
    whole = FrameReader(MAX_FRAME, use_list=use_list)
    try:
        n_whole: int | None = len(whole.feed(raw))
    except FrameError as exc:
        str(exc)
        n_whole = None
    split = FrameReader(MAX_FRAME, use_list=use_list)
    bodies: list[Any] = []
    refused = False
    for part in chunks(raw, cuts):
        try:
            bodies.extend(split.feed(part))
        except FrameError as exc:
            str(exc)
            refused = True
            break
    assert refused == (n_whole is None), "a frame refused in one chunking and not in another"
    if n_whole is not None:
        assert len(bodies) == n_whole and split.buffered == whole.buffered, "chunking changed the frames read"
    return bodies


def _peer_sessions(raw: bytes, cuts: Sequence[int]) -> None:
    """PeerSession.feed on an accepted link (Hello first) and a dialed one."""
    for peer in (None, 1):
        session = PeerSession(OWN_ID, MEMBERS, peer, MAX_FRAME, 0.0)
        for part in chunks(raw, cuts):
            try:
                session.feed(part, 0.0)
            except FrameError as exc:
                str(exc)
                break


def decode_everything(protocol: str, raw: bytes, cuts: Sequence[int] = ()) -> None:
    """The fuzz property for ``raw`` read as ``protocol``: a stream of frames
    (``client``, ``peer``; cut at ``cuts``) or a ZooKeeper request body
    (``zk``). Anything escaping but the server's caught exceptions is a crash."""
    if protocol == "zk":
        _zk_request(raw)
        return
    bodies = feed_split(raw, cuts, use_list=protocol == "client")
    if protocol == "client":
        for body in bodies:
            _client_body(body)
    else:
        for body in bodies:
            _peer_body(body)
        _peer_sessions(raw, cuts)


# -------------------------------------------------------------- seed corpus


def _body(framed: bytes) -> bytes:
    return framed[4:]


ZK_SEEDS: tuple[Any, ...] = (
    Create("/a/b", b"data", (ACL(31, Id("world", "anyone")), ACL(1, Id("digest", "u:h"))), 3),
    Create("/t", b"", OPEN_ACL_UNSAFE, PERSISTENT_WITH_TTL, 100),
    Delete("/a", 3),
    SetData("/a", b"x", 1),
    SetACL("/a", (ACL(31, Id("ip", "10.0.0.0/8")),), -1),
    Check("/a", 1),
    Multi((Create("/m", b"1"), Delete("/n"), SetData("/o", b"2"), Check("/p", 0))),
    CreateSession(0, 30000, b"p" * 16),
    CloseSession(),
    DeleteContainer("/c"),
    GetData("/a", True),
    Exists("/a", False),
    GetChildren("/a", True, True),
    GetACL("/a"),
    GetEphemerals("/e"),
    GetAllChildrenNumber("/a"),
    Sync("/"),
    Ping(),
    AddAuth("digest", b"u:p"),
    AddWatch("/a", 1),
    SetWatches(10, ("/a",), ("/b",), ("/c", "/d"), ("/e",), ("/f",)),
    RemoveWatches("/a", 3),
    CheckWatches("/a", 1),
)


def zk_corpus() -> list[bytes]:
    return [zk_msgpack.encode_request(r) for r in ZK_SEEDS]


def client_corpus() -> list[bytes]:
    zk = zk_corpus()
    bodies: list[dict[str, Any]] = [
        {"v": 1, "type": "propose", "id": 1, "payload": b"hello"},
        {"v": 1, "type": "propose", "id": 2**64 - 1, "payload": b""},
        {"v": 1, "type": "auth", "id": 2, "token": "secret"},
        {"v": 1, "type": "status", "id": 3},
        {"v": 1, "type": "read", "id": 4, "from_zxid": 5, "limit": 10},
        {"v": 1, "type": "watch", "id": 5, "from_zxid": 0},
        {"v": 1, "type": "put", "id": 6, "key": "k", "value": b"v"},
        {"v": 1, "type": "cas", "id": 7, "key": "k", "version": 3, "value": b"v"},
        {"v": 1, "type": "delete", "id": 8, "key": "k", "version": -1},
        {"v": 1, "type": "get", "id": 9, "key": "k"},
        {"v": 1, "type": "sync", "id": 10},
        {"v": 1, "type": "zk_connect", "id": 11, "session": 0, "password": b"", "timeout": 30000, "last_zxid": 0},
    ]
    bodies += [{"v": 1, "type": "zk", "id": 12 + i, "req": req} for i, req in enumerate(zk)]
    return [msgpack.packb(b) for b in bodies]


def peer_corpus() -> list[bytes]:
    txns = (Txn(1 << 32 | 1, b"a"), Txn(1 << 32 | 2, b"bc"))
    messages = [
        LookForLeader(1, 5, 2), Vote(1, 5, 2, 3), NewEpoch(2), AckEpoch(2, 1, 5), NewLeader(2, txns), AckLeader(2),
        Propose(Txn(1 << 32 | 3, b"x")), Ack(1 << 32 | 3), Commit(1 << 32 | 3), ReadPing(7), ReadPong(7),
        ProposeMany(txns),
    ]
    out = [_body(wire.encode_message(m)) for m in messages]
    zk_write = (-5, (("digest", "u:h"),), zk_msgpack.encode_request(ZK_SEEDS[0]))
    driver: list[tuple[Any, ...]] = [
        (wire.TAG_HELLO, wire.WIRE_VERSION, 1),
        (wire.TAG_FORWARD, 1, b"raw payload"),
        (wire.TAG_FORWARD, 2, ("put", "k", b"v", 0)),
        (wire.TAG_FORWARD, 3, ("cas", "k", b"v", 4)),
        (wire.TAG_FORWARD, 4, ("delete", "k", b"", -1)),
        (wire.TAG_FORWARD, 5, zk_write),
        (wire.TAG_FORWARD_OK, 1, 1 << 32 | 3),
        (wire.TAG_FORWARD_ERR, 1, "no_leader", "try again"),
        (wire.TAG_NEWLEADER_PART, 2, 0, txns[:1]),
        (wire.TAG_NEWLEADER_PART, 2, 1, txns[1:]),
        (wire.TAG_SYNC_INFO, 1 << 32, (2 << 32 | 5, 3 << 32 | 1)),
        (wire.TAG_SYNC_PLAN, 2, "DIFF", 0, 0, 1 << 32, None),
        (wire.TAG_SYNC_PLAN, 2, "SNAP", 0, 1 << 32 | 9, 1 << 32 | 9, b"snapshot"),
        (wire.TAG_SNAP_DATA, 2, b"more"),
        (wire.TAG_SYNC_TXNS, 2, 0, txns[:1]),
        (wire.TAG_SYNC_TXNS, 2, 1, txns[1:]),
        (wire.TAG_SYNC_REQ, 9),
        (wire.TAG_PING,),
        (wire.TAG_ZK_TOUCH, (1, -2, 3)),
    ]
    out += [_body(frame(d)) for d in driver]
    return out


HELLO = _body(frame((wire.TAG_HELLO, wire.WIRE_VERSION, 1)))


def corpus() -> dict[str, list[bytes]]:
    """Valid bodies of each protocol: the seeds to mutate."""
    return {"client": client_corpus(), "peer": peer_corpus(), "zk": zk_corpus()}


# ---------------------------------------------------------------- mutations

INTERESTING = [
    *(struct.pack(">I", v) for v in (0, 1, 0xFFFF, MAX_FRAME, MAX_FRAME + 1, 0x7FFFFFFF, 0xFFFFFFFF)),
    b"\xc0", b"\xc2", b"\xc3", b"\xc1", b"\xff", b"\xe0", b"\xf3", b"\xd0\x80", b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff", b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00", b"\x90", b"\x80", b"\xa0",
    b"\xc4\x00", b"\xdc\xff\xff", b"\xdd\xff\xff\xff\xff", b"\xdf\x00\x00\x00\x10", b"\xd4\x01\x00", b"\xc7\x00\xff",
    b"\xd9\x01\xff", b"\xa2\xed\xa0",  # a str8 cut short; a str holding a lone surrogate (not UTF-8)
    b"\xd6\xff\x00\x00\x00\x01", b"\xd5\xff\x00\x00",  # ext -1: a Timestamp, one of a bad size
]


def mutate(rng: random.Random, seed: bytes) -> bytes:
    """One to four byte-level mutations of ``seed`` (flip, set, insert an
    interesting token, delete, duplicate, truncate)."""
    b = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        pos = rng.randrange(len(b) + 1)
        if kind == 0 and b:
            b[min(pos, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1 and b:
            b[min(pos, len(b) - 1)] = rng.randrange(256)
        elif kind == 2:
            b[pos:pos] = rng.choice(INTERESTING)
        elif kind == 3:
            del b[pos : pos + rng.randint(1, 8)]
        elif kind == 4:
            b[pos:pos] = b[pos : pos + rng.randint(1, 16)]
        else:
            del b[pos:]
    return bytes(b)


_DEEP = "\x00deep\x00"  # stands for a deep nesting, spliced in after packing
_DEEP_PACKED = msgpack.packb(_DEEP)
DEPTHS = (50, 300, 900, 990, 1000, 1010, 1023, 1024, 1025, 3000)
NAMES = (
    "multi", "create", "delete", "setData", "check", "setWatches", "getData", "ping", "propose", "zk", "zk_connect",
    "put", "cas", "auth", "type", "id", "v", "req", "payload", "DIFF", "SNAP", "TRUNC", "digest", "", "x" * 300,
)
INTS = (0, 1, -1, 2, 7, 64, 75, 76, 77, 255, 256, -12, -32, -33, -128, -129, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
        2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**31))


def deep_bytes(rng: random.Random) -> bytes:
    """A nesting ``DEPTHS`` deep: arrays, maps, or ZooKeeper multis in multis."""
    depth = rng.choice(DEPTHS)
    leaf = msgpack.packb(rng.choice((0, "x", b"x", None, ["check", "/a", 1])))
    kind = rng.randrange(3)
    if kind == 0:
        return b"\x91" * depth + leaf
    if kind == 1:
        return b"\x81\xa1k" * depth + leaf
    return b"\x92\xa5multi\x91" * (depth // 2) + msgpack.packb(["check", "/a", 1])


def weird(rng: random.Random, depth: int = 0) -> Any:
    """A value of any msgpack type, biased to edges: extreme integers, op
    names, empty and long strings, nested containers, deep nestings."""
    kind = rng.randrange(12 if depth < 3 else 8)
    if kind == 0:
        return rng.choice(INTS)
    if kind == 1:
        return rng.choice(NAMES)
    if kind == 2:
        return rng.choice((None, True, False, 0.5, float("nan"), float("inf"), -0.0))
    if kind == 3:
        return rng.randbytes(rng.choice((0, 1, 8, 300)))
    if kind == 4:
        return msgpack.ExtType(rng.randrange(128), rng.randbytes(rng.randrange(4)))
    if kind == 5:
        return rng.randrange(-(2**63), 2**64)
    if kind == 6:
        return _DEEP
    if kind == 7:
        return rng.choice(("/", "/a", "a", "/a/", "\u0000", "\U0010ffff"))
    if kind in (8, 9):
        return [weird(rng, depth + 1) for _ in range(rng.randrange(5))]
    if kind == 10:
        return {rng.choice(NAMES): weird(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [rng.choice(("multi", "create", "check")), [weird(rng, depth + 1) for _ in range(rng.randrange(3))]]


def _slots(obj: Any, out: list[tuple[Any, Any]]) -> None:
    """Every (container, key) under ``obj``."""
    if isinstance(obj, list):
        for i, x in enumerate(obj):
            out.append((obj, i))
            _slots(x, out)
    elif isinstance(obj, dict):
        for k, x in obj.items():
            out.append((obj, k))
            _slots(x, out)


def _pack(obj: Any, rng: random.Random) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    while _DEEP_PACKED in data:
        data = data.replace(_DEEP_PACKED, deep_bytes(rng), 1)
    return data


def restructure(rng: random.Random, seed: bytes) -> bytes:
    """``seed`` (a valid msgpack body) with one to three of its values
    replaced by :func:`weird` ones, an element added or dropped, or a map key
    added; packed again (the ``_DEEP`` marker becomes a deep nesting)."""
    obj = [msgpack.unpackb(seed, raw=False, strict_map_key=False)]
    for _ in range(rng.randint(1, 3)):
        slots: list[tuple[Any, Any]] = []
        _slots(obj, slots)
        container, key = rng.choice(slots)
        kind = rng.randrange(5) if container is not obj else 4  # the body itself: replaced only
        if kind == 0 and isinstance(container, list):
            container.insert(key, weird(rng))
        elif kind == 1 and isinstance(container, list):
            del container[key]
        elif kind == 2 and isinstance(container, dict):
            container[rng.choice(NAMES)] = weird(rng)
        else:
            container[key] = weird(rng)
    try:
        return _pack(obj[0], rng)
    except (ValueError, TypeError, OverflowError):  # too deep for the packer
        return mutate(rng, seed)


def _framed(bodies: list[bytes]) -> bytes:
    return b"".join(pack_header(len(b)) + b for b in bodies)


def one_body(rng: random.Random, seeds: list[bytes]) -> bytes:
    """A body: mostly a seed mutated by bytes or structure, else random bytes
    or a splice of two seeds."""
    kind = rng.random()
    if kind < 0.08:
        return rng.randbytes(rng.randrange(64))
    if kind < 0.16:
        a, b = rng.choice(seeds), rng.choice(seeds)
        return a[: rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1) :]
    seed = rng.choice(seeds)
    out = restructure(rng, seed) if kind < 0.6 else mutate(rng, seed)
    if kind > 0.92:
        out = mutate(rng, out)
    return out


def one_input(rng: random.Random, seeds: dict[str, list[bytes]]) -> tuple[str, bytes, list[int]]:
    """``(protocol, bytes, cut points)``: a ZooKeeper body, or a stream of one
    to four frames (a peer stream starts with a Hello mostly), mostly with
    correct headers, else mutated as bytes too (headers included)."""
    protocol = rng.choice(PROTOCOLS)
    if protocol == "zk":
        return protocol, one_body(rng, seeds["zk"]), []
    bodies = [one_body(rng, seeds[protocol]) if rng.random() < 0.7 else rng.choice(seeds[protocol])
              for _ in range(rng.randint(1, 4))]
    if protocol == "peer" and rng.random() < 0.7:
        bodies.insert(0, HELLO)
    raw = _framed(bodies)
    if rng.random() < 0.2:
        raw = mutate(rng, raw)
    cuts = [rng.randrange(len(raw) + 1) for _ in range(rng.randrange(4))]
    return protocol, raw, cuts


# -------------------------------------------------------- hypothesis checks

CORPUS = corpus()
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_corpus_is_valid() -> None:
    """The seeds are accepted: mutations start from real frames."""
    for body in CORPUS["zk"]:
        zk_msgpack.decode_request(body)
    for body in CORPUS["client"]:
        schema.REQUEST_ADAPTER.validate_python(msgpack.unpackb(body))
    session = PeerSession(OWN_ID, MEMBERS, None, MAX_FRAME, 0.0)
    events = session.feed(_framed([HELLO, *CORPUS["peer"][:11]]), 0.0)  # the core messages
    assert len(events) == 1 + 11
    for body in CORPUS["peer"]:
        wire.decode_frame(msgpack.unpackb(body, use_list=False))


@given(st.sampled_from(PROTOCOLS), st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=4))
@FUZZ
def test_fuzz_arbitrary_bytes(protocol: str, raw: bytes, cuts: list[int]) -> None:
    decode_everything(protocol, raw, cuts)


@given(st.randoms(use_true_random=False))
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_mutated_seeds(rng: random.Random) -> None:
    decode_everything(*one_input(rng, CORPUS))


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=8)
    | st.binary(max_size=8) | st.sampled_from(NAMES),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
    max_leaves=10,
)


@given(st.sampled_from(PROTOCOLS), st.lists(msgpack_values, min_size=1, max_size=3))
@FUZZ
def test_fuzz_any_msgpack_bodies(protocol: str, values: list[Any]) -> None:
    bodies = [msgpack.packb(v) for v in values]
    decode_everything(protocol, bodies[0] if protocol == "zk" else _framed(bodies))


@given(st.sampled_from(sorted(n for n in NAMES if n)), st.lists(msgpack_values, max_size=7))
@FUZZ
def test_fuzz_zk_requests_of_any_fields(op: str, fields: list[Any]) -> None:
    decode_everything("zk", msgpack.packb([op, *fields]))


@given(st.integers(-(2**63), 2**64 - 1) | st.sampled_from(INTS), st.lists(msgpack_values, max_size=6))
@FUZZ
def test_fuzz_peer_frames_of_any_tag_and_fields(tag: int, fields: list[Any]) -> None:
    body = msgpack.packb([tag, *fields])
    decode_everything("peer", _framed([body]))
    decode_everything("peer", _framed([HELLO, body]))


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=8))
@FUZZ
def test_frame_reader_reads_any_chunking_alike(raw: bytes, cuts: list[int]) -> None:
    stream = _framed([raw[: len(raw) // 2], *CORPUS["client"][:2]]) + raw
    for use_list in (False, True):
        feed_split(stream, cuts, use_list=use_list)


# ----------------------------------------------------- regression inputs

# Inputs that once escaped a decoder (see scripts/fuzz_frames.py); each must
# now be refused with the exception the server catches.


def _nest(depth: int, leaf: bytes = b"\x00") -> bytes:
    return b"\x91" * depth + leaf


@pytest.mark.parametrize("tag", [-12, -32, -33, -128, -(2**63)])
def test_negative_peer_tag_is_refused(tag: int) -> None:
    """Was IndexError: a tag below -len(EXTENDED_TYPES) indexed the core
    message names from the end."""
    body = msgpack.unpackb(msgpack.packb([tag]), use_list=False)
    with pytest.raises(FrameError, match="unknown peer frame tag"):
        wire.decode_frame(body)
    with pytest.raises(FrameError, match="unknown peer frame tag"):
        wire.decode_message(body)
    session = PeerSession(OWN_ID, MEMBERS, 1, MAX_FRAME, 0.0)
    with pytest.raises(FrameError):
        session.feed(frame((tag,)), 0.0)


DEEP_PEER_BODIES = {
    "core": b"\x92\x00" + _nest(1020),  # LookForLeader, one deep field
    "driver": b"\x93\x40" + _nest(1020) + b"\x01",  # Hello
    "tag": b"\x91" + _nest(1022),  # a deep tag
    "body": _nest(1023),  # not a [tag, ...] array
}


@pytest.mark.parametrize("what", sorted(DEEP_PEER_BODIES))
def test_deeply_nested_peer_frame_is_refused(what: str) -> None:
    """Was RecursionError: the error message's repr of a body nested ~1000
    deep (msgpack decodes up to 1024 levels)."""
    body = DEEP_PEER_BODIES[what]
    with pytest.raises(FrameError):
        wire.decode_frame(msgpack.unpackb(body, use_list=False))
    for peer in (None, 1):
        with pytest.raises(FrameError):
            PeerSession(OWN_ID, MEMBERS, peer, MAX_FRAME, 0.0).feed(pack_header(len(body)) + body, 0.0)


DEEP_ZK_REQUESTS = {
    "op": b"\x91" + _nest(1022),  # [deep]
    "top": _nest(1023),
    "int field": b"\x93\xa6delete\xa2/a" + _nest(1020),
    "bool field": b"\x93\xa7getData\xa2/a" + _nest(1020),
    "zxid field": b"\x97\xaasetWatches" + _nest(1020) + b"\x90" * 5,
    "multi of multis": b"\x92\xa5multi\x91" * 300 + msgpack.packb(["check", "/a", 1]),
    "multi of multis, max depth": b"\x92\xa5multi\x91" * 511 + b"\x90",
}


@pytest.mark.parametrize("what", sorted(DEEP_ZK_REQUESTS))
def test_deeply_nested_zk_request_is_refused(what: str) -> None:
    """Was RecursionError: the error message's repr of a value nested ~1000
    deep, or decoding a multi nested in multis (one Python call per level)."""
    raw = DEEP_ZK_REQUESTS[what]
    with pytest.raises(ValueError):
        zk_msgpack.decode_request(raw)
    body = msgpack.packb({"v": 1, "type": "zk", "id": 1, "req": raw})
    decode_everything("client", pack_header(len(body)) + body)  # as the client port reads it
    forward = msgpack.packb([wire.TAG_FORWARD, 1, [1, [], raw]])
    decode_everything("peer", _framed([HELLO, forward]))  # as the leader reads a forwarded write


def test_multi_in_a_multi_is_still_refused_by_name() -> None:
    raw = msgpack.packb(["multi", [["multi", []]]])
    with pytest.raises(ValueError, match="a multi holds create, delete, setData and check ops only"):
        zk_msgpack.decode_request(raw)
    ok = zk_msgpack.decode_request(msgpack.packb(["multi", [["check", "/a", 1]]]))
    assert ok == Multi((Check("/a", 1),))


def test_error_messages_stay_short() -> None:
    """Refusals name the bad value in at most one short line."""
    with pytest.raises(ValueError) as info:
        zk_msgpack.decode_request(msgpack.packb(["delete", "/a", ["x" * 1000]]))
    assert len(str(info.value)) < 200

