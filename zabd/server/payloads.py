"""What a client's write becomes in the log: a KV request the KV leader
decides, or a ZooKeeper request the ZooKeeper leader prepares (stamped with
the leader's wall clock, as ZooKeeper does)."""

from __future__ import annotations

from functools import lru_cache
from time import time

from zabd.kv.kvmachine import KVMachine
from zabd.kv.store import Cas, Delete, Put, Request
from zabd.server import peer_wire as wire
from zabd.zk import txn as zk_txn
from zabd.zk.acl import Id
from zabd.zk.errors import Code
from zabd.zk.msgpack_wire import decode_request
from zabd.zk.prep import Prepared
from zabd.zk.records import Write as ZKRequest


def kv_request(w: wire.KVWrite) -> Request:
    op, key, value, version = w
    if op == "put":
        return Put(key, value)
    if op == "cas":
        return Cas(key, version, value)
    return Delete(key, version)


def zk_prepare(kv: KVMachine, write: wire.ZKWrite) -> Prepared:
    now_ms = int(time() * 1000)  # ZooKeeper stamps ctime/mtime with the leader's wall clock
    raw = write.request
    req: object = raw
    if type(raw) is bytes:  # a follower's, forwarded; a session of this node gives its record
        try:
            req = decode_request(raw)
        except ValueError:
            req = None
    if req is None or not isinstance(req, ZKRequest):
        # as ZooKeeper does: a request it cannot read is an error txn, answered in order
        return Prepared(zk_txn.encode(zk_txn.T_ERROR, now_ms, write.session, int(Code.MARSHALLING_ERROR)), [], [])
    return kv.zk_leader.prepare(write.session, _ids(write.auth), req, now_ms)


@lru_cache(maxsize=1024)
def _ids(auth: tuple[tuple[str, str], ...]) -> tuple[Id, ...]:
    # a connection's ids are the same on each of its writes
    return tuple(Id(scheme, ident) for scheme, ident in auth)
