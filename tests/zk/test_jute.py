"""ZooKeeper's jute wire codec: kazoo's bytes decode to zabd's records, kazoo
parses zabd's answers, every opcode round-trips, and no bytes make a decoder
raise anything but JuteError."""

from __future__ import annotations

import contextlib
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.exceptions import NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.protocol import serialization as kz
from kazoo.security import ACL as KzACL
from kazoo.security import Id as KzId

from zabd.zk import jute
from zabd.zk.acl import ACL, OPEN_ACL_UNSAFE, Id
from zabd.zk.errors import Code
from zabd.zk.records import (
    CONTAINER,
    EPHEMERAL_SEQUENTIAL,
    PERSISTENT,
    PERSISTENT_WITH_TTL,
    TTL_MODES,
    ACLResult,
    AddAuth,
    AddWatch,
    Check,
    CheckResult,
    CheckWatches,
    ChildrenResult,
    CloseSession,
    CountResult,
    Create,
    CreateResult,
    DataResult,
    Delete,
    DeleteResult,
    ErrorResult,
    Exists,
    ExistsResult,
    GetACL,
    GetAllChildrenNumber,
    GetChildren,
    GetData,
    GetEphemerals,
    Multi,
    MultiRead,
    MultiResult,
    OkResult,
    PathsResult,
    Ping,
    Reconfig,
    RemoveWatches,
    Sasl,
    SaslResult,
    SetACL,
    SetData,
    SetWatches,
    Stat,
    StatResult,
    Sync,
    SyncResult,
    WhoAmI,
    WhoAmIResult,
)

STAT = Stat(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


def body(framed: bytes) -> bytes:
    (n,) = struct.unpack_from(">i", framed)
    assert n == len(framed) - 4
    return framed[4:]


def kazoo_request(xid: int, req: Any) -> bytes:
    """The body kazoo's connection sends for ``req`` (``_submit``)."""
    return struct.pack(">ii", xid, req.type) + bytes(req.serialize())


# ------------------------------------------------------------- golden bytes

KZ_ACL = [KzACL(31, KzId("world", "anyone")), KzACL(1, KzId("digest", "u:h"))]
ZB_ACL = (ACL(31, Id("world", "anyone")), ACL(1, Id("digest", "u:h")))


@pytest.mark.parametrize(
    ("kazoo_req", "expected"),
    [
        (kz.Create("/a", b"v", KZ_ACL, 3), Create("/a", b"v", ZB_ACL, EPHEMERAL_SEQUENTIAL)),
        (kz.Create2("/a", None, KZ_ACL, 0), Create("/a", None, ZB_ACL, PERSISTENT)),  # null data stays null
        (kz.Create("", b"", [], 0), Create("", b"", (), PERSISTENT)),  # kazoo sends "" as null
        (kz.Delete("/a", 7), Delete("/a", 7)),
        (kz.Exists("/a", True), Exists("/a", True)),
        (kz.GetData("/a", False), GetData("/a", False)),
        (kz.GetData("/zookeeper/config", True), GetData("/zookeeper/config", True)),  # getConfig
        (kz.SetData("/a", b"\x00\xff", -1), SetData("/a", b"\x00\xff", -1)),
        (kz.GetACL("/a"), GetACL("/a")),
        (kz.SetACL("/a", KZ_ACL, 2), SetACL("/a", ZB_ACL, 2)),
        (kz.GetChildren("/a", True), GetChildren("/a", True, False)),
        (kz.GetChildren2("/a", False), GetChildren("/a", False, True)),
        (kz.Sync("/a"), Sync("/a")),
        (kz.CheckVersion("/a", 3), Check("/a", 3)),
        (kz.Close(), CloseSession()),
        (kz.Reconfig("server.4=h:2888:3888;2181", "", None, -1), Reconfig("server.4=h:2888:3888;2181", None, None, -1)),
        (kz.SASL(b"token"), Sasl(b"token")),
        (kz.SASL(b""), Sasl(b"")),
    ],
)
def test_kazoo_requests_decode_to_records(kazoo_req: Any, expected: object) -> None:
    req = jute.decode_request(kazoo_request(42, kazoo_req))
    assert (req.xid, req.op, req.record) == (42, kazoo_req.type, expected)


def test_kazoo_session_layer_requests() -> None:
    assert jute.decode_request(kazoo_request(-2, kz.Ping())) == jute.Request(-2, jute.OP_PING, Ping())
    auth = jute.decode_request(kazoo_request(-4, kz.Auth(0, "digest", "user:pw")))
    assert auth == jute.Request(-4, jute.OP_AUTH, AddAuth("digest", b"user:pw"))


def test_kazoo_transaction_decodes_to_multi() -> None:
    tx = kz.Transaction([
        kz.Create("/t", b"1", KZ_ACL, 0),
        kz.Delete("/u", -1),
        kz.SetData("/v", b"2", 4),
        kz.CheckVersion("/w", 5),
    ])
    req = jute.decode_request(kazoo_request(9, tx))
    assert req.op == jute.OP_MULTI
    ops = (Create("/t", b"1", ZB_ACL, 0), Delete("/u", -1), SetData("/v", b"2", 4), Check("/w", 5))
    assert req.record == Multi(ops)
    assert req.multi_ops == (jute.OP_CREATE, jute.OP_DELETE, jute.OP_SET_DATA, jute.OP_CHECK)


def test_kazoo_connect_decodes() -> None:
    c = jute.decode_connect(bytes(kz.Connect(0, 0x1_0000_0005, 30000, 0, b"\x00" * 16, True).serialize()))
    assert c == jute.ConnectRequest(0, 0x1_0000_0005, 30000, 0, b"\x00" * 16, True)
    # no password (null) and an old client's missing readOnly byte
    old = bytes(kz.Connect(0, 0, 5000, 77, None, False).serialize())[:-1]
    assert jute.decode_connect(old) == jute.ConnectRequest(0, 0, 5000, 77, b"", False, legacy=True)


def kazoo_reply(framed: bytes, req: Any) -> tuple[Any, Any]:
    b = body(framed)
    header, offset = kz.ReplyHeader.deserialize(b, 0)
    return header, req.deserialize(b, offset)


@pytest.mark.parametrize(
    ("op", "kazoo_req", "result", "expected"),
    [
        (jute.OP_CREATE, kz.Create, CreateResult("/a0000000001", STAT), "/a0000000001"),
        (jute.OP_CREATE2, kz.Create2, CreateResult("/a", STAT), ("/a", STAT)),
        (jute.OP_EXISTS, kz.Exists, ExistsResult(STAT), STAT),
        (jute.OP_GET_DATA, kz.GetData, DataResult(b"\x01\x02", STAT), (b"\x01\x02", STAT)),
        (jute.OP_SET_DATA, kz.SetData, StatResult(STAT), STAT),
        (jute.OP_SET_ACL, kz.SetACL, StatResult(STAT), STAT),
        (jute.OP_GET_ACL, kz.GetACL, ACLResult(ZB_ACL, STAT), (KZ_ACL, STAT)),
        (jute.OP_GET_CHILDREN, kz.GetChildren, ChildrenResult(["x", "é"], None), ["x", "é"]),
        (jute.OP_GET_CHILDREN2, kz.GetChildren2, ChildrenResult(["x"], STAT), (["x"], STAT)),
        (jute.OP_SYNC, kz.Sync, SyncResult("/a"), "/a"),
        (jute.OP_RECONFIG, kz.Reconfig, DataResult(b"server.1=h:1:2", STAT), (b"server.1=h:1:2", STAT)),
    ],
)
def test_kazoo_parses_replies(op: int, kazoo_req: Any, result: object, expected: Any) -> None:
    header, parsed = kazoo_reply(jute.encode_reply(5, 0x2_0000_0001, 0, op, result), kazoo_req)
    assert tuple(header) == (5, 0x2_0000_0001, 0)
    assert parsed == expected  # kazoo's ZnodeStat is a namedtuple of the same fields, in order


@pytest.mark.parametrize("zxid", [1, 0x2_0000_0001, (1 << 63) - 1, (1 << 64) - 1])
def test_a_set_data_answer_is_the_general_writers_bytes(zxid: int) -> None:
    # setData's one-pack answer against setACL's, which takes the general writer with the same body
    stat = STAT._replace(mzxid=zxid, pzxid=zxid)
    fast = jute.encode_reply(-7, zxid, 0, jute.OP_SET_DATA, StatResult(stat))
    assert fast == jute.encode_reply(-7, zxid, 0, jute.OP_SET_ACL, StatResult(stat))
    assert kazoo_reply(fast, kz.SetData)[0].zxid == zxid - (1 << 64 if zxid >= 1 << 63 else 0)


def test_exists_of_a_missing_node_is_no_node_without_a_body() -> None:
    for err in (Code.NO_NODE, 0):
        b = body(jute.encode_reply(3, 10, int(err), jute.OP_EXISTS, ExistsResult(None)))
        assert len(b) == 16
        assert tuple(kz.ReplyHeader.deserialize(b, 0)[0]) == (3, 10, Code.NO_NODE)


def test_errors_carry_no_body() -> None:
    b = body(jute.encode_reply(3, 10, int(Code.NO_NODE), jute.OP_GET_DATA, DataResult(b"x", STAT)))
    assert b == struct.pack(">iqi", 3, 10, Code.NO_NODE)
    assert body(jute.encode_reply(3, 10, int(Code.UNIMPLEMENTED), jute.OP_DELETE_CONTAINER, None)) == struct.pack(
        ">iqi", 3, 10, Code.UNIMPLEMENTED)


def test_a_failed_sasl_answer_carries_a_null_token_as_zookeepers() -> None:
    # ZooKeeper's processSasl: ReplyHeader(xid, 0, AUTHFAILED) and SetSASLResponse(null)
    b = body(jute.encode_reply(3, 0, int(Code.AUTH_FAILED), jute.OP_SASL, SaslResult(None)))
    assert b == struct.pack(">iqii", 3, 0, Code.AUTH_FAILED, -1)


def test_kazoo_reads_a_sasl_challenge() -> None:
    header, (token, _) = kazoo_reply(jute.encode_reply(1, 0, 0, jute.OP_SASL, SaslResult(b'realm="r"')), kz.SASL)
    assert header.err == 0 and token == b'realm="r"'


def test_kazoo_parses_a_transaction() -> None:
    ok = MultiResult((CreateResult("/t", STAT), DeleteResult(), StatResult(STAT), CheckResult()))
    header, parsed = kazoo_reply(jute.encode_reply(8, 99, 0, jute.OP_MULTI, ok), kz.Transaction)
    assert header.err == 0
    assert parsed == ["/t", True, STAT, True]


def test_failed_transaction_has_err_zero_and_per_op_errors() -> None:
    failed = MultiResult((ErrorResult(Code.OK), ErrorResult(Code.NO_NODE), ErrorResult(Code.RUNTIME_INCONSISTENCY)))
    # the session layer may pass the first error; ZooKeeper's header says 0 all the same
    header, parsed = kazoo_reply(jute.encode_reply(8, 99, int(Code.NO_NODE), jute.OP_MULTI, failed), kz.Transaction)
    assert header.err == 0
    assert [type(p) for p in parsed] == [RolledBackError, NoNodeError, RuntimeInconsistency]


def test_multi_create_results_follow_zookeeper() -> None:
    res = MultiResult((CreateResult("/a", STAT), CreateResult("/b", STAT), CreateResult("/c", STAT)))
    types = (jute.OP_CREATE, jute.OP_CREATE_CONTAINER, jute.OP_CREATE_TTL)
    b = body(jute.encode_reply(1, 2, 0, jute.OP_MULTI, res, multi_ops=types))
    expected = (struct.pack(">iqi", 1, 2, 0)
                + struct.pack(">iBi", 1, 0, 0) + struct.pack(">i", 2) + b"/a"
                + struct.pack(">iBi", 15, 0, 0) + struct.pack(">i", 2) + b"/b" + struct.pack(">qqqqiiiqiiq", *STAT)
                + struct.pack(">iBi", 15, 0, 0) + struct.pack(">i", 2) + b"/c" + struct.pack(">qqqqiiiqiiq", *STAT)
                + struct.pack(">iBi", -1, 1, -1))
    assert b == expected


def test_multi_ops_of_container_and_ttl_creates() -> None:
    multi = Multi((Create("/c", mode=CONTAINER), Create("/t", mode=PERSISTENT_WITH_TTL, ttl=5000)))
    req = jute.decode_request(body(jute.encode_request(1, jute.OP_MULTI, multi)))
    assert req.record == multi
    assert req.multi_ops == (jute.OP_CREATE_CONTAINER, jute.OP_CREATE_TTL)


def test_kazoo_parses_connect_response_and_events() -> None:
    b = body(jute.encode_connect_response(4000, -(1 << 62), b"p" * 16, False))
    conn, _ = kz.Connect.deserialize(b, 0)
    assert (conn.time_out, conn.session_id, conn.passwd, conn.read_only) == (4000, -(1 << 62), b"p" * 16, False)
    refused, _ = kz.Connect.deserialize(body(jute.encode_connect_refused()), 0)
    assert (refused.time_out, refused.session_id, refused.passwd) == (0, 0, bytes(16))
    assert len(body(jute.encode_connect_response(1, 2, b"", False, legacy=True))) == 4 + 4 + 8 + 4
    ev = body(jute.encode_event(3, 3, "/a", 77))
    header, offset = kz.ReplyHeader.deserialize(ev, 0)
    assert tuple(header) == (-1, 77, 0)
    assert tuple(kz.Watch.deserialize(ev, offset)[0]) == (3, 3, "/a")


def test_add_watch_answers_an_error_response_of_zero() -> None:
    assert body(jute.encode_reply(4, 5, 0, jute.OP_ADD_WATCH, OkResult())) == struct.pack(">iqii", 4, 5, 0, 0)


def test_zxids_are_unsigned_and_longs_wrap() -> None:
    b = body(jute.encode_reply(1, (1 << 64) - 1, 0, jute.OP_PING, None))
    assert b[4:12] == b"\xff" * 8
    assert jute.decode_reply(b, jute.OP_PING)[1] == (1 << 64) - 1
    assert body(jute.encode_reply(1, -1, 0, jute.OP_PING, None)) == b
    with pytest.raises(jute.JuteError):
        jute.encode_reply(1, 1 << 64, 0, jute.OP_PING, None)
    with pytest.raises(jute.JuteError):
        jute.encode_reply(1 << 31, 0, 0, jute.OP_PING, None)


def test_frame_reader_splits_and_limits() -> None:
    r = jute.FrameReader(10)
    data = jute.frame(b"abc") + jute.frame(b"") + jute.frame(b"0123456789")
    out = []
    for i in range(len(data)):
        out += r.feed(data[i : i + 1])
    assert out == [b"abc", b"", b"0123456789"]
    assert r.buffered == 0
    assert r.feed(b"\x00\x00\x00\x05ab") == []
    assert r.buffered == 6
    with pytest.raises(jute.JuteError):
        jute.FrameReader(10).feed(struct.pack(">i", 11))
    with pytest.raises(jute.JuteError):
        jute.FrameReader(10).feed(struct.pack(">i", -1))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x00\x00",
        struct.pack(">ii", 1, jute.OP_GET_DATA) + struct.pack(">i", 10) + b"/a",  # path longer than the body
        struct.pack(">ii", 1, jute.OP_GET_DATA) + struct.pack(">i", -2) + b"\x00",  # length below -1
        struct.pack(">ii", 1, jute.OP_GET_DATA) + struct.pack(">i", 2) + b"/a",  # no watch byte
        struct.pack(">ii", 1, jute.OP_SET_ACL) + struct.pack(">i", 0) + struct.pack(">i", 1 << 30),  # huge vector
        struct.pack(">ii", 1, jute.OP_MULTI) + struct.pack(">iBi", jute.OP_GET_DATA, 0, -1),  # a read in a multi
        struct.pack(">ii", 1, jute.OP_MULTI_READ) + struct.pack(">iBi", jute.OP_DELETE, 0, -1),  # a write in one
        struct.pack(">ii", 1, jute.OP_MULTI),  # no done header
    ],
)
def test_malformed_requests_are_refused(raw: bytes) -> None:
    with pytest.raises(jute.JuteError):
        jute.decode_request(raw)


def test_null_strings_and_trailing_bytes() -> None:
    null_path = struct.pack(">ii", 1, jute.OP_GET_DATA) + struct.pack(">i", -1) + b"\x01"
    assert jute.decode_request(null_path).record == GetData("", True)
    assert jute.decode_request(null_path + b"junk").record == GetData("", True)
    assert jute.decode_request(struct.pack(">iii", 1, jute.OP_GET_EPHEMERALS, -1)).record == GetEphemerals("/")
    bad_utf8 = struct.pack(">ii", 1, jute.OP_SYNC) + struct.pack(">i", 2) + b"/\xff"
    assert jute.decode_request(bad_utf8).record == Sync("/\ufffd")
    assert jute.decode_request(struct.pack(">ii", 1, 999)).record == jute.Unknown(999)


# ---------------------------------------------------------------- strategies

i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u64 = st.integers(0, (1 << 64) - 1)
text = st.text(max_size=12)
data = st.binary(max_size=24)
paths = st.lists(text, max_size=4).map(tuple)
stats = st.builds(Stat, i64, i64, i64, i64, i32, i32, i32, i64, i32, i32, i64)
acls = st.lists(st.builds(ACL, i32, st.builds(Id, text, text)), max_size=3).map(tuple)
codes = st.sampled_from(list(Code))


@st.composite
def creates(draw: st.DrawFn, op: int | None = None) -> Create:
    """A Create as ``op`` carries it (None: inside a multi, where the mode decides the opcode)."""
    mode = draw(st.one_of(st.sampled_from(range(7)), i32))
    ttl_op = op == jute.OP_CREATE_TTL or (op is None and mode in TTL_MODES)
    return Create(draw(text), draw(data), draw(acls), mode, draw(i64) if ttl_op else -1)


multi_ops = st.one_of(
    creates(),
    st.builds(Delete, text, i32),
    st.builds(SetData, text, data, i32),
    st.builds(Check, text, i32),
)
read_ops = st.one_of(st.builds(GetData, text, st.just(False)), st.builds(GetChildren, text, st.just(False)))

REQUESTS: dict[int, st.SearchStrategy[Any]] = {
    jute.OP_CREATE: creates(jute.OP_CREATE),
    jute.OP_CREATE2: creates(jute.OP_CREATE2),
    jute.OP_CREATE_CONTAINER: creates(jute.OP_CREATE_CONTAINER),
    jute.OP_CREATE_TTL: creates(jute.OP_CREATE_TTL),
    jute.OP_DELETE: st.builds(Delete, text, i32),
    jute.OP_EXISTS: st.builds(Exists, text, st.booleans()),
    jute.OP_GET_DATA: st.builds(GetData, text, st.booleans()),
    jute.OP_SET_DATA: st.builds(SetData, text, data, i32),
    jute.OP_GET_ACL: st.builds(GetACL, text),
    jute.OP_SET_ACL: st.builds(SetACL, text, acls, i32),
    jute.OP_GET_CHILDREN: st.builds(GetChildren, text, st.booleans(), st.just(False)),
    jute.OP_GET_CHILDREN2: st.builds(GetChildren, text, st.booleans(), st.just(True)),
    jute.OP_SYNC: st.builds(Sync, text),
    jute.OP_PING: st.just(Ping()),
    jute.OP_CHECK: st.builds(Check, text, i32),
    jute.OP_MULTI: st.lists(multi_ops, max_size=5).map(lambda ops: Multi(tuple(ops))),
    jute.OP_MULTI_READ: st.lists(read_ops, max_size=5).map(lambda ops: MultiRead(tuple(ops))),
    jute.OP_RECONFIG: st.builds(Reconfig, st.none() | text, st.none() | text, st.none() | text, i64),
    jute.OP_AUTH: st.builds(AddAuth, text, data),
    jute.OP_SET_WATCHES: st.builds(SetWatches, u64, paths, paths, paths),
    jute.OP_SET_WATCHES2: st.builds(SetWatches, u64, paths, paths, paths, paths, paths),
    jute.OP_ADD_WATCH: st.builds(AddWatch, text, i32),
    jute.OP_REMOVE_WATCHES: st.builds(RemoveWatches, text, i32),
    jute.OP_CHECK_WATCHES: st.builds(CheckWatches, text, i32),
    jute.OP_GET_EPHEMERALS: st.builds(GetEphemerals, st.text(min_size=1, max_size=12)),
    jute.OP_GET_ALL_CHILDREN_NUMBER: st.builds(GetAllChildrenNumber, text),
    jute.OP_WHO_AM_I: st.just(WhoAmI()),
    jute.OP_CLOSE_SESSION: st.just(CloseSession()),
    jute.OP_SASL: st.builds(Sasl, st.none() | data),
}
UNKNOWN_OPS = (jute.OP_NOTIFICATION, jute.OP_DELETE_CONTAINER, jute.OP_CREATE_SESSION, jute.OP_ERROR, 10, 108, 9999)


def test_opcodes_are_zookeepers() -> None:
    expected = {
        "NOTIFICATION": 0, "CREATE": 1, "DELETE": 2, "EXISTS": 3, "GET_DATA": 4, "SET_DATA": 5, "GET_ACL": 6,
        "SET_ACL": 7, "GET_CHILDREN": 8, "SYNC": 9, "PING": 11, "GET_CHILDREN2": 12, "CHECK": 13, "MULTI": 14,
        "CREATE2": 15, "RECONFIG": 16, "CHECK_WATCHES": 17, "REMOVE_WATCHES": 18, "CREATE_CONTAINER": 19,
        "DELETE_CONTAINER": 20, "CREATE_TTL": 21, "MULTI_READ": 22, "AUTH": 100, "SET_WATCHES": 101, "SASL": 102,
        "GET_EPHEMERALS": 103, "GET_ALL_CHILDREN_NUMBER": 104, "SET_WATCHES2": 105, "ADD_WATCH": 106,
        "WHO_AM_I": 107, "CREATE_SESSION": -10, "CLOSE_SESSION": -11, "ERROR": -1,
    }
    assert {k: getattr(jute, "OP_" + k) for k in expected} == expected
    assert (jute.XID_NOTIFICATION, jute.XID_PING, jute.XID_AUTH, jute.XID_SET_WATCHES) == (-1, -2, -4, -8)
    assert set(REQUESTS) | set(UNKNOWN_OPS) >= {v for v in expected.values()}


def multi_types(record: object) -> tuple[int, ...]:
    if isinstance(record, MultiRead):
        return tuple(jute.OP_GET_DATA if isinstance(o, GetData) else jute.OP_GET_CHILDREN for o in record.ops)
    if not isinstance(record, Multi):
        return ()
    out = []
    for o in record.ops:
        if isinstance(o, Create):
            out.append(jute.OP_CREATE_TTL if o.mode in TTL_MODES else
                       jute.OP_CREATE_CONTAINER if o.mode == CONTAINER else jute.OP_CREATE)
        else:
            out.append({Delete: jute.OP_DELETE, SetData: jute.OP_SET_DATA, Check: jute.OP_CHECK}[type(o)])
    return tuple(out)


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, int, object]:
    op = draw(st.sampled_from(sorted(REQUESTS)))
    return draw(i32), op, draw(REQUESTS[op])


@given(requests())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_request_round_trips(case: tuple[int, int, object]) -> None:
    xid, op, record = case
    req = jute.decode_request(body(jute.encode_request(xid, op, record)))
    assert req == jute.Request(xid, op, record, multi_types(record))


@given(i32, st.sampled_from(UNKNOWN_OPS))
def test_unknown_opcodes_decode_to_unknown(xid: int, op: int) -> None:
    assert jute.decode_request(body(jute.encode_request(xid, op, jute.Unknown(op)))) == jute.Request(
        xid, op, jute.Unknown(op))


@given(st.builds(jute.ConnectRequest, i32, u64, i32, i64, data, st.booleans(), st.booleans()))
def test_connect_round_trips(req: jute.ConnectRequest) -> None:
    got = jute.decode_connect(body(jute.encode_connect(req)))
    assert got == (jute.ConnectRequest(req.protocol_version, req.last_zxid_seen, req.timeout_ms, req.session_id,
                                       req.password, False, legacy=True) if req.legacy else req)


@given(i32, i32, i64, data, st.booleans())
def test_connect_response_round_trips(version: int, timeout: int, session: int, pw: bytes, ro: bool) -> None:
    got = jute.decode_connect_response(body(jute.encode_connect_response(timeout, session, pw, ro, version)))
    assert got == (version, timeout, session, pw, ro)


@given(i32, i32, text, i64)
def test_event_round_trips(kind: int, state: int, path: str, zxid: int) -> None:
    assert jute.decode_event(body(jute.encode_event(kind, state, path, zxid))) == (kind, state, path)


# results: (strategy of what the server passes, what decode_reply gives back)
Canon = Callable[[Any], Any]
create_path_only: Canon = lambda r: CreateResult(r.path, jute.NO_STAT)  # noqa: E731
same: Canon = lambda r: r  # noqa: E731
children_only: Canon = lambda r: ChildrenResult(r.children, None)  # noqa: E731
ok: Canon = lambda r: OkResult()  # noqa: E731

create_results = st.builds(CreateResult, text, stats)
children = st.lists(text, max_size=4)
multi_results = st.one_of(create_results, st.just(DeleteResult()), st.just(CheckResult()),
                          st.builds(StatResult, stats), st.builds(ErrorResult, codes))
multi_read_results = st.one_of(st.builds(DataResult, data, stats), st.builds(ChildrenResult, children, st.none()),
                               st.builds(ErrorResult, codes))
REPLIES: dict[int, tuple[st.SearchStrategy[Any], Canon]] = {
    jute.OP_CREATE: (create_results, create_path_only),
    jute.OP_CREATE2: (create_results, same),
    jute.OP_CREATE_CONTAINER: (create_results, same),
    jute.OP_CREATE_TTL: (create_results, same),
    jute.OP_DELETE: (st.just(DeleteResult()), same),
    jute.OP_EXISTS: (st.builds(ExistsResult, stats), same),
    jute.OP_GET_DATA: (st.builds(DataResult, data, stats), same),
    jute.OP_SET_DATA: (st.builds(StatResult, stats), same),
    jute.OP_GET_ACL: (st.builds(ACLResult, acls, stats), same),
    jute.OP_SET_ACL: (st.builds(StatResult, stats), same),
    jute.OP_GET_CHILDREN: (st.builds(ChildrenResult, children, st.none() | stats), children_only),
    jute.OP_GET_CHILDREN2: (st.builds(ChildrenResult, children, stats), same),
    jute.OP_SYNC: (st.builds(SyncResult, text), same),
    jute.OP_PING: (st.none(), ok),
    jute.OP_CHECK: (st.just(CheckResult()), same),
    jute.OP_RECONFIG: (st.builds(DataResult, data, stats), same),
    jute.OP_AUTH: (st.just(OkResult()), ok),
    jute.OP_SET_WATCHES: (st.just(OkResult()), ok),
    jute.OP_SET_WATCHES2: (st.just(OkResult()), ok),
    jute.OP_ADD_WATCH: (st.just(OkResult()), ok),
    jute.OP_REMOVE_WATCHES: (st.just(OkResult()), ok),
    jute.OP_CHECK_WATCHES: (st.just(OkResult()), ok),
    jute.OP_GET_EPHEMERALS: (st.builds(PathsResult, children), same),
    jute.OP_GET_ALL_CHILDREN_NUMBER: (st.builds(CountResult, i32), same),
    jute.OP_WHO_AM_I: (st.builds(WhoAmIResult, st.lists(st.tuples(text, text), max_size=3)), same),
    jute.OP_CLOSE_SESSION: (st.just(OkResult()), ok),
    jute.OP_SASL: (st.builds(SaslResult, st.none() | data), same),
}


def test_every_opcode_has_a_reply_case() -> None:
    assert set(REPLIES) | {jute.OP_MULTI, jute.OP_MULTI_READ} == set(REQUESTS)


@given(st.sampled_from(sorted(REPLIES)).flatmap(lambda op: st.tuples(st.just(op), REPLIES[op][0])), i32, u64)
@settings(max_examples=400, deadline=None)
def test_every_reply_round_trips(case: tuple[int, Any], xid: int, zxid: int) -> None:
    op, result = case
    got = jute.decode_reply(body(jute.encode_reply(xid, zxid, 0, op, result)), op)
    assert got == (xid, zxid, 0, REPLIES[op][1](result))


@given(st.sampled_from(sorted(REPLIES)), codes.filter(lambda c: c != Code.OK), i32, u64)
def test_error_replies_round_trip(op: int, err: Code, xid: int, zxid: int) -> None:
    b = body(jute.encode_reply(xid, zxid, int(err), op, None))
    assert jute.decode_reply(b, op) == (xid, zxid, int(err), None)


@st.composite
def multis(draw: st.DrawFn) -> tuple[MultiResult, tuple[int, ...]]:
    results = draw(st.lists(multi_results, max_size=6))
    types = tuple(draw(st.sampled_from([jute.OP_CREATE, jute.OP_CREATE2, jute.OP_CREATE_TTL, jute.OP_CREATE_CONTAINER]))
                  if isinstance(r, CreateResult) else 0 for r in results)
    return MultiResult(tuple(results)), types


@given(multis(), codes, i32, u64)
def test_multi_replies_round_trip(case: tuple[MultiResult, tuple[int, ...]], err: Code, xid: int, zxid: int) -> None:
    res, types = case
    got = jute.decode_reply(body(jute.encode_reply(xid, zxid, int(err), jute.OP_MULTI, res, multi_ops=types)),
                            jute.OP_MULTI)
    expected = tuple(CreateResult(r.path, jute.NO_STAT) if isinstance(r, CreateResult) and t == jute.OP_CREATE else r
                     for r, t in zip(res.results, types, strict=True))
    assert got == (xid, zxid, 0, MultiResult(expected))


@given(st.lists(multi_read_results, max_size=6), i32, u64)
def test_multi_read_replies_round_trip(results: list[Any], xid: int, zxid: int) -> None:
    res = MultiResult(tuple(results))
    assert jute.decode_reply(body(jute.encode_reply(xid, zxid, 0, jute.OP_MULTI_READ, res)), jute.OP_MULTI_READ) == (
        xid, zxid, 0, res)


# ---------------------------------------------------------------------- fuzz

REPLY_OPS = sorted(set(REPLIES) | {jute.OP_MULTI, jute.OP_MULTI_READ, 9999})


def decode_everything(raw: bytes, op: int = jute.OP_MULTI) -> None:
    """The fuzz property: every decoder takes ``raw`` or refuses it with
    JuteError, and nothing else (``op``: the opcode its reply is read as)."""
    for decode in (jute.decode_request, jute.decode_connect, jute.decode_event, jute.decode_connect_response,
                   lambda b: jute.decode_reply(b, op)):
        with contextlib.suppress(jute.JuteError):
            decode(raw)
    reader = jute.FrameReader(64)
    with contextlib.suppress(jute.JuteError):
        cut = len(raw) // 2
        reader.feed(raw[:cut])
        reader.feed(raw[cut:])


READ_RESULTS: tuple[Any, ...] = (DataResult(b"x", STAT), ChildrenResult(["c"], None))


def corpus() -> list[tuple[bytes, int]]:
    """Valid bodies, requests and replies, each with the opcode its reply
    decoder reads it as: the seeds to mutate."""
    rng = random.Random(1)
    out = [(body(jute.encode_connect(jute.ConnectRequest(0, 5, 30000, 7, b"p" * 16, False))), jute.OP_MULTI)]
    fixed: list[tuple[int, object]] = [
        (jute.OP_CREATE, Create("/a/b", b"data", OPEN_ACL_UNSAFE, 3)),
        (jute.OP_CREATE_TTL, Create("/t", b"", OPEN_ACL_UNSAFE, PERSISTENT_WITH_TTL, 100)),
        (jute.OP_DELETE, Delete("/a", 3)),
        (jute.OP_EXISTS, Exists("/a", True)),
        (jute.OP_GET_DATA, GetData("/a", True)),
        (jute.OP_SET_DATA, SetData("/a", b"x", 1)),
        (jute.OP_GET_ACL, GetACL("/a")),
        (jute.OP_SET_ACL, SetACL("/a", (ACL(31, Id("digest", "u:p")), ACL(1, Id("ip", "10.0.0.0/8"))), -1)),
        (jute.OP_GET_CHILDREN2, GetChildren("/a", True, True)),
        (jute.OP_SYNC, Sync("/")),
        (jute.OP_PING, Ping()),
        (jute.OP_CHECK, Check("/a", 1)),
        (jute.OP_MULTI, Multi((Create("/m", b"1"), Delete("/n"), SetData("/o", b"2"), Check("/p", 0),
                               Create("/q", mode=PERSISTENT_WITH_TTL, ttl=9)))),
        (jute.OP_MULTI_READ, MultiRead((GetData("/a"), GetChildren("/b")))),
        (jute.OP_RECONFIG, Reconfig("server.1=a:1:2", None, None, -1)),
        (jute.OP_AUTH, AddAuth("digest", b"u:p")),
        (jute.OP_SET_WATCHES2, SetWatches(10, ("/a",), ("/b",), ("/c", "/d"), ("/e",), ("/f",))),
        (jute.OP_ADD_WATCH, AddWatch("/a", 1)),
        (jute.OP_REMOVE_WATCHES, RemoveWatches("/a", 3)),
        (jute.OP_GET_EPHEMERALS, GetEphemerals("/e")),
        (jute.OP_GET_ALL_CHILDREN_NUMBER, GetAllChildrenNumber("/a")),
        (jute.OP_WHO_AM_I, WhoAmI()),
        (jute.OP_CLOSE_SESSION, CloseSession()),
    ]
    out += [(body(jute.encode_request(rng.randrange(1 << 20), op, rec)), op) for op, rec in fixed]
    replies: list[tuple[int, object]] = [
        (jute.OP_CREATE, CreateResult("/a", STAT)),
        (jute.OP_CREATE2, CreateResult("/a", STAT)),
        (jute.OP_EXISTS, ExistsResult(STAT)),
        (jute.OP_GET_DATA, DataResult(b"abc", STAT)),
        (jute.OP_GET_ACL, ACLResult(OPEN_ACL_UNSAFE, STAT)),
        (jute.OP_GET_CHILDREN2, ChildrenResult(["a", "b"], STAT)),
        (jute.OP_SYNC, SyncResult("/a")),
        (jute.OP_GET_EPHEMERALS, PathsResult(["/a", "/b"])),
        (jute.OP_GET_ALL_CHILDREN_NUMBER, CountResult(3)),
        (jute.OP_ADD_WATCH, OkResult()),
        (jute.OP_WHO_AM_I, WhoAmIResult([("ip", "127.0.0.1")])),
        (jute.OP_MULTI, MultiResult((CreateResult("/a", STAT), DeleteResult(), StatResult(STAT),
                                     ErrorResult(Code.NO_NODE)))),
        (jute.OP_MULTI_READ, MultiResult(READ_RESULTS)),
    ]
    out += [(body(jute.encode_reply(1, 2, 0, op, res, multi_ops=(jute.OP_CREATE2,))), op) for op, res in replies]
    out.append((body(jute.encode_event(3, 3, "/a", 5)), jute.OP_MULTI))
    out.append((body(jute.encode_connect_response(30000, 7, b"p" * 16, False)), jute.OP_MULTI))
    return out


INTERESTING = [struct.pack(">i", v) for v in (-1, -2, 0, 1, 0x7FFFFFFF, -(1 << 31), 0x10000, 255)]


def mutate(rng: random.Random, seed: bytes) -> bytes:
    """One to four byte-level mutations of ``seed`` (flip, set, insert an
    interesting int, delete, duplicate, truncate)."""
    b = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        pos = rng.randrange(len(b) + 1)
        if kind == 0 and b:
            b[min(pos, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1 and b:
            b[min(pos, len(b) - 1)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF))
        elif kind == 2:
            b[pos:pos] = rng.choice(INTERESTING)
        elif kind == 3:
            del b[pos : pos + rng.randint(1, 8)]
        elif kind == 4:
            b[pos:pos] = b[pos : pos + rng.randint(1, 16)]
        else:
            del b[pos:]
    return bytes(b)


CORPUS = corpus()


@given(st.binary(max_size=200), st.sampled_from(REPLY_OPS))
@settings(max_examples=1000, deadline=None)
def test_fuzz_arbitrary_bytes(raw: bytes, op: int) -> None:
    decode_everything(raw, op)


@given(st.sampled_from(CORPUS), st.integers(0, 2**32), st.none() | st.sampled_from(REPLY_OPS))
@settings(max_examples=1000, deadline=None)
def test_fuzz_mutated_frames(seed: tuple[bytes, int], rng_seed: int, op: int | None) -> None:
    raw, seed_op = seed
    decode_everything(mutate(random.Random(rng_seed), raw), seed_op if op is None else op)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["set", "get"]), st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=40)),
       st.integers(-3, 3), st.integers(0, 60), st.binary(max_size=6), st.booleans())
def test_hot_path_reads_setdata_and_getdata_as_the_general_reader(
        op: str, path: str, data: bytes | None, version: int, cut: int, noise: bytes, watch: bool) -> None:
    # the cursor-less reader of the two commonest requests must agree with the
    # general one on every body it accepts, cut short or padded
    record = SetData(path, data, version) if op == "set" else GetData(path, watch)
    opcode = jute.OP_SET_DATA if op == "set" else jute.OP_GET_DATA
    body = jute.encode_request(7, opcode, record)[4:]
    for b in (body, body[: min(cut, len(body))], body + noise, body[:12] + noise):
        hot = jute._hot(b)
        if hot is None:
            continue
        assert hot == jute._general(b)
