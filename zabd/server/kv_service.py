"""Client KV calls on a replica: ``put``, ``cas``, ``delete``, ``get``, ``sync``.

Writes go through the leader, which turns each conditional request into an
idempotent txn against its state including proposed, uncommitted txns
(:class:`~zabd.kv.store.KVLeader`); a follower forwards the request (not a
prepared txn: only the leader knows the pending versions). The answer is the
result the state machine computed when it applied the txn, on the replica
the client talks to.

``get`` is served from the local replica after every earlier request of the
same connection was answered (FIFO client order: a get pipelined after a put
sees the put). ``sync`` asks the leader for its commit point and answers
once this replica has applied it, so a ``get`` after ``sync`` reflects every
write acknowledged anywhere before the ``sync`` was issued.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from zabd.client import schema
from zabd.kv.store import OK, Cas, Delete, Put
from zabd.protocol import zxid as zx
from zabd.protocol.node import FOLLOWING, LEADING, NotLeader
from zabd.server import wire
from zabd.server.durable import KV_MAGIC, TAG_KV_FORWARD, TAG_SYNC_REQ, KVMachine
from zabd.server.replica import ClientConn, Slot

if TYPE_CHECKING:
    from zabd.server.replica import Replica

WriteRequest = Put | Cas | Delete
_GET_POLL_S = 0.0005


class KVReply(ClientConn):
    """Stands in for the client connection in the runtime's pending and
    forwarding queues: the runtime completes it with the committed zxid; the
    KV result for that zxid is looked up here and sent to the real client."""

    def __init__(self, replica: Replica, conn: ClientConn, rid: int) -> None:  # no super(): not a connection
        self.replica = replica
        self.conn = conn
        self.rid = rid
        self.closed = False

    def complete(self, slot: Slot, body: dict[str, Any]) -> None:
        self.conn.complete(slot, body)

    def complete_frame(self, slot: Slot, data: bytes) -> None:
        z = int.from_bytes(data[-8:], "big")  # wire.ok_zxid_frame ends with the zxid as uint64
        m = self.replica.ext.machine
        res = m.results.get(z) if m is not None else None
        body: dict[str, Any]
        if res is None:
            # applied before a snapshot install replaced the state here: committed, result not known
            body = {"v": 1, "id": self.rid, "ok": True, "zxid": z, "version": -1}
        elif res.code == OK:
            body = {"v": 1, "id": self.rid, "ok": True, "zxid": z, "version": res.version}
        else:
            body = schema.error_body(self.rid, res.code, f"condition failed: {res.code} (version {res.version})")
            body["zxid"] = z
            body["version"] = res.version
        self.conn.complete(slot, body)


def handle(r: Replica, conn: ClientConn, req: Any) -> None:
    slot = conn.new_slot()
    m = r.ext.machine
    if m is None:
        msg = "this server runs without a KV state machine"
        conn.complete(slot, schema.error_body(req.id, schema.UNSUPPORTED, msg))
        return
    if isinstance(req, schema.GetRequest):
        _get(r, m, conn, slot, req.id, req.key)
        return
    if isinstance(req, schema.SyncRequest):
        _sync(r, conn, slot, req.id)
        return
    kreq: WriteRequest
    if isinstance(req, schema.PutRequest):
        kreq = Put(req.key, req.value)
    elif isinstance(req, schema.CasRequest):
        kreq = Cas(req.key, req.version, req.value)
    else:
        kreq = Delete(req.key, req.version)
    if r._stopping:
        conn.complete(slot, schema.error_body(req.id, schema.SHUTTING_DOWN, "server shutting down"))
        return
    node = r.node
    reply = KVReply(r, conn, req.id)
    if node.role == LEADING:
        leader_write(r, kreq, reply, slot, req.id)
        return
    leader = node.leader
    if node.role == FOLLOWING and leader in r._conns:
        r._fwd_next += 1
        fid = r._fwd_next
        r._fwd[fid] = (reply, slot, req.id)
        r._send_extra(leader, wire.frame((TAG_KV_FORWARD, fid, _encode(kreq))))
        return
    conn.complete(slot, schema.error_body(req.id, schema.NO_LEADER, "no leader at the moment; retry", leader))


def _encode(k: WriteRequest) -> tuple[Any, ...]:
    if type(k) is Put:
        return ("put", k.key, k.value, 0)
    if type(k) is Cas:
        return ("cas", k.key, k.value, k.version)
    return ("delete", k.key, b"", k.version)  # type: ignore[union-attr]


def _decode(x: Any) -> WriteRequest:
    if type(x) is tuple and len(x) == 4 and type(x[1]) is str and type(x[2]) is bytes and type(x[3]) is int:
        op, key, value, version = x
        if op == "put":
            return Put(key, value)
        if op == "cas" and 0 <= version <= wire.U64:
            return Cas(key, version, value)
        if op == "delete" and -1 <= version <= wire.U64:
            return Delete(key, version)
    raise wire.FrameError(f"malformed KV_FORWARD request {wire._short(x)}")


def on_forward(r: Replica, peer: int, body: tuple[Any, ...]) -> None:
    if len(body) != 3 or not wire._u64(body[1]):
        raise wire.FrameError(f"malformed KV_FORWARD frame {wire._short(body)}")
    leader_write(r, _decode(body[2]), peer, body[1], 0)


def leader_write(r: Replica, kreq: WriteRequest, target: ClientConn | int, slot: Slot | int, rid: int) -> None:
    ext = r.ext
    m = ext.machine
    node = r.node
    if m is None:
        r._refuse(target, slot, rid, schema.UNSUPPORTED, "this server runs without a KV state machine")
        return
    if node.role != LEADING or not node.synced:
        r._refuse(target, slot, rid, schema.NO_LEADER, "the leader is not ready; retry")
        return
    epoch = node.current_epoch
    if ext.kv_epoch != epoch:
        # A new leadership: forget the pending view of an earlier one, and
        # decide nothing before every txn of earlier epochs is applied here
        # (the versions they set are what conditions are checked against).
        m.leader.reset()
        ext.kv_epoch = epoch
        h = node.history
        i = bisect_left(h, zx.make(epoch, 1), key=_zxid_key)
        ext.kv_barrier = h[i - 1].zxid if i else 0
    if r._applied < ext.kv_barrier:
        r._refuse(target, slot, rid, schema.NO_LEADER, "the leader is applying the previous epoch; retry")
        return
    payload = m.leader.prepare(kreq)
    try:
        z = node.propose(KV_MAGIC + payload, r.now())
    except NotLeader:
        r._refuse(target, slot, rid, schema.NO_LEADER, "the leader is not ready; retry")
        return
    m.leader.proposed(z, payload)
    r._pending.append((z, target, slot, rid))
    r._kick()


def _get(r: Replica, m: KVMachine, conn: ClientConn, slot: Slot, rid: int, key: str) -> None:
    if conn.closed:
        return
    if conn.slots and conn.slots[0] is not slot:
        # earlier requests of this connection are not answered yet: read after them
        asyncio.get_running_loop().call_later(_GET_POLL_S, _get, r, m, conn, slot, rid, key)
        return
    m = r.ext.machine or m
    res = m.store.get(key)
    conn.complete(slot, {"v": 1, "id": rid, "ok": True, "value": res.value, "version": res.version, "zxid": r._applied})
    r._kick()


def _sync(r: Replica, conn: ClientConn, slot: Slot, rid: int) -> None:
    node = r.node
    if node.role == LEADING and node.synced:
        conn.complete_frame(slot, wire.ok_zxid_frame(rid, r._applied))
        return
    leader = node.leader
    if node.role == FOLLOWING and leader in r._conns:
        r._fwd_next += 1
        fid = r._fwd_next
        # answered through the forwarding path: FORWARD_OK(fid, leader's
        # commit point), completed once this replica has applied it
        r._fwd[fid] = (conn, slot, rid)
        r._send_extra(leader, wire.frame((TAG_SYNC_REQ, fid)))
        return
    conn.complete(slot, schema.error_body(rid, schema.NO_LEADER, "no leader at the moment; retry", leader))


def _zxid_key(txn: Any) -> int:
    z: int = txn.zxid
    return z
