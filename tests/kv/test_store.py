"""The KV state machine: semantics, leader-side conditional -> idempotent
txns, determinism and snapshot/restore."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.kv import BAD_VERSION, NO_NODE, OK, Cas, Delete, KVLeader, KVStore, Put, decode_txn
from zabd.protocol.messages import Txn


class Cluster:
    """One leader view and its store, proposing into a list (the log)."""

    def __init__(self) -> None:
        self.store = KVStore()
        self.leader = KVLeader(self.store)
        self.log: list[Txn] = []
        self.results: list[object] = []

    def write(self, req: Put | Cas | Delete, commit: bool = True) -> int:
        def propose(payload: bytes) -> int:
            self.log.append(Txn((1 << 32) | (len(self.log) + 1), payload))
            return self.log[-1].zxid

        zxid = self.leader.propose(req, propose)
        if commit:
            self.commit_all()
        return zxid

    def commit_all(self) -> None:
        for t in self.log[len(self.results) :]:
            self.results.append(self.store.apply(t))
            self.leader.committed(t.zxid)


def test_put_get_delete_cas_semantics() -> None:
    c = Cluster()
    assert c.store.get("a").code == NO_NODE
    c.write(Put("a", b"1"))
    assert c.store.get("a") == (OK, 1, b"1")
    c.write(Put("a", b"2"))
    assert c.store.get("a") == (OK, 2, b"2")
    c.write(Cas("a", 1, b"stale"))
    assert c.results[-1] == (BAD_VERSION, 2, None)
    assert c.store.get("a").value == b"2"
    c.write(Cas("a", 2, b"3"))
    assert c.results[-1] == (OK, 3, None) and c.store.get("a").value == b"3"
    c.write(Cas("new", 0, b"created"))  # version 0: create if absent
    assert c.store.get("new") == (OK, 1, b"created")
    c.write(Cas("new", 0, b"again"))
    assert c.results[-1].code == BAD_VERSION  # type: ignore[attr-defined]
    c.write(Delete("a", 2))
    assert c.results[-1] == (BAD_VERSION, 3, None)
    c.write(Delete("a", 3))
    assert c.results[-1].code == OK and c.store.get("a").code == NO_NODE  # type: ignore[attr-defined]
    c.write(Delete("a"))
    assert c.results[-1].code == NO_NODE  # type: ignore[attr-defined]
    assert decode_txn(c.log[0].payload) == {"op": "set", "key": "a", "value": b"1", "version": 1}


def test_leader_sees_uncommitted_proposals() -> None:
    c = Cluster()
    c.write(Put("k", b"v1"), commit=False)
    c.write(Cas("k", 1, b"v2"), commit=False)  # conditions on the uncommitted put
    c.write(Cas("k", 1, b"lost"), commit=False)  # a racing client: rejected
    assert c.store.get("k").code == NO_NODE  # nothing committed yet
    c.commit_all()
    assert [r.code for r in c.results] == [OK, OK, BAD_VERSION]  # type: ignore[attr-defined]
    assert c.store.get("k") == (OK, 2, b"v2")


def test_leader_reset_forgets_lost_proposals() -> None:
    c = Cluster()
    c.write(Put("k", b"v1"), commit=False)
    assert c.leader.version("k") == 1
    c.leader.reset()  # leadership lost: the proposal may never commit
    assert c.leader.version("k") == 0


def test_txns_are_idempotent() -> None:
    c = Cluster()
    for req in (Put("a", b"1"), Cas("a", 1, b"2"), Put("b", b"x"), Delete("b"), Cas("a", 9, b"no")):
        c.write(req)
    once = c.store.snapshot()
    for t in c.log:  # a fuzzy snapshot replays txns it already holds
        c.store.apply(t)
    assert c.store.snapshot() == once


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from("abcd"), st.integers(-1, 4)), max_size=60))
def test_replicas_agree_and_snapshot_restores(ops: list[tuple[int, str, int]]) -> None:
    c = Cluster()
    for i, (kind, key, ver) in enumerate(ops):
        req: Put | Cas | Delete
        if kind == 0:
            req = Put(key, b"%d" % i)
        elif kind == 1:
            req = Cas(key, max(ver, 0), b"%d" % i)
        else:
            req = Delete(key, ver)
        c.write(req, commit=i % 3 == 0)
    c.commit_all()
    replica = KVStore()
    for t in c.log:
        replica.apply(t)
    assert replica.data == c.store.data
    snap = c.store.snapshot()
    restored = KVStore()
    restored.restore(snap)
    assert restored.data == c.store.data and restored.snapshot() == snap
    # a snapshot taken mid-way plus the rest of the log equals the whole log
    k = random.Random(len(ops)).randrange(len(c.log) + 1)
    partial = KVStore()
    for t in c.log[:k]:
        partial.apply(t)
    again = KVStore()
    again.restore(partial.snapshot())
    for t in c.log[max(0, k - 3) :]:  # overlap: idempotent
        again.apply(t)
    assert again.data == c.store.data
