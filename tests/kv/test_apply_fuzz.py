"""Applying a committed txn is total: the apply fuzzer (tests/kv/apply_fuzz.py)
with a fixed seed, and every input that once broke a replica, each applied
to three replicas that must agree, count no fault, and snapshot to a state a
fresh machine restores (``Replicas``).

The long run is ``-m soak`` here, or as long as asked:
``python bench/apply_fuzz.py --inputs 1000000 --seed S``.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from tests.kv.apply_fuzz import ApplyFuzz, indexes, state_print, tree_problems
from zabd.kv.kinds import RAW_MAGIC
from zabd.kv.kvmachine import KV_MAGIC, KVMachine
from zabd.kv.store import BAD_VERSION, MALFORMED, OK, Cas, Put, Result
from zabd.kv.store import Delete as KVDelete
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.membership import Membership
from zabd.protocol.membership import encode as encode_membership
from zabd.protocol.messages import Txn
from zabd.zk import txn as tx
from zabd.zk.errors import Code
from zabd.zk.records import CONTAINER_OWNER, DeleteResult, ErrorResult, MultiResult, SessionResult
from zabd.zk.tree import Applied, DataTree

T0 = 1_700_000_000_000
OPEN = [[31, "world", "anyone"]]
REFUSED = ErrorResult(Code.MARSHALLING_ERROR)


class Replicas:
    """Three KVMachines fed the same txns; after each: no fault, the same
    state and result everywhere."""

    def __init__(self) -> None:
        self.machines = [KVMachine() for _ in range(3)]
        self.zxid = 1 << 32

    @property
    def m(self) -> KVMachine:
        return self.machines[0]

    def apply(self, payload: bytes) -> Any:
        self.zxid += 1
        results = [m.apply(Txn(self.zxid, payload)) for m in self.machines]
        assert all(m.faults == 0 for m in self.machines)
        assert results[1] == results[0] and results[2] == results[0]
        prints = [state_print(m) for m in self.machines]
        assert prints[1] == prints[0] and prints[2] == prints[0]
        # a ZooKeeper txn returns its Applied (result and triggers): the result is what a client is told
        return results[0].result if isinstance(results[0], Applied) else results[0]

    def zk(self, kind: int, *fields: Any, session: int = 0) -> Any:
        return self.apply(tx.encode(kind, T0, session, *fields))

    def refused(self, payload: bytes) -> None:
        """``payload`` is refused whole: an error answer, nothing changed but
        the error count."""
        m = self.m
        before = (state_print(m)[:4], m.zk.snapshot(), m.errors)
        result = self.apply(payload)
        assert result == (REFUSED if payload[:4] == tx.ZK_MAGIC else Result(MALFORMED, 0))
        assert m.errors == before[2] + 1
        assert m.zk.snapshot() == before[1]
        self.restart()

    def restart(self) -> None:
        """Each replica's snapshot restores to the same state; one replica is
        replaced by its restore (a restart), so any difference a restore makes
        shows in the txns that follow."""
        for m in self.machines:
            assert tree_problems(m.zk) == []
        snap = self.m.snapshot()
        fresh = KVMachine()
        fresh.restore(snap)
        assert state_print(fresh) == state_print(self.m)
        assert indexes(fresh.zk) == indexes(self.m.zk)
        assert fresh.snapshot() == snap
        self.machines[2] = fresh


# ------------------------------------------- inputs the fuzzer once broke


def test_membership_change_keeps_the_children_of_zookeeper_config() -> None:
    """A superuser may create under /zookeeper/config; a membership change
    then replaced the node without its children: an orphan, a snapshot
    whose digest did not match on restore. Found by the apply fuzzer (seed
    1, index 308: a membership change after a create of /zookeeper/config/..a)."""
    r = Replicas()
    assert r.zk(tx.T_CREATE, "/zookeeper/config/n0", b"", OPEN, 0, 1).path == "/zookeeper/config/n0"
    r.apply(encode_membership(Membership(frozenset({1, 2}), frozenset({3}), b"1=h1:2888,2=h2:2888,3=h3:2888")))
    assert r.m.zk.children_of("/zookeeper/config") == ["n0"]
    assert (r.m.zk.nodes["/zookeeper/config"].data or b"").startswith(b"server.1=h1:2888:2888:participant")
    r.restart()
    assert r.zk(tx.T_DELETE, "/zookeeper/config/n0") == DeleteResult()
    assert r.m.zk.children_of("/zookeeper/config") == []
    r.restart()


def test_close_session_keeps_indexed_the_ephemerals_it_cannot_delete() -> None:
    """A child under an ephemeral (no leader makes one) keeps the ephemeral
    from being deleted when its session closes. closeSession then dropped
    the session's whole ephemerals index, though the node stayed; a restore
    indexes it again, so a restarted replica deleted it at the next close of
    that session and the others did not: diverged. Found by the apply
    fuzzer (seed 1, index 597: a closeSession of /zookeeper/z, an ephemeral
    an odd txn had given a child)."""
    r = Replicas()
    r.zk(tx.T_CREATE_SESSION, 30_000, b"p" * 16, session=7)
    r.zk(tx.T_CREATE, "/e", b"", OPEN, 7, 1, session=7)
    r.zk(tx.T_CREATE, "/e/c", b"", OPEN, 0, 1, session=7)
    r.zk(tx.T_CLOSE_SESSION, ["/e"], session=7)
    assert "/e" in r.m.zk.nodes and r.m.zk.ephemerals == {7: {"/e"}}
    r.restart()  # replica 2 now runs from a snapshot
    assert r.zk(tx.T_DELETE, "/e/c") == DeleteResult()
    r.zk(tx.T_CLOSE_SESSION, [], session=7)  # every replica deletes /e now, the restored one too
    assert "/e" not in r.m.zk.nodes and r.m.zk.ephemerals == {}
    r.restart()


@pytest.mark.parametrize("session", [1 << 63, (1 << 64) - 1, True])
def test_set_data_of_a_session_out_of_int64_is_refused_as_check_refuses_it(session: Any) -> None:
    """The setData fast path checked its fields inline but not the session,
    so it applied a setData of session 2^63 (or True) that ``txn_check``
    refuses, as any other txn of that session. Found by the apply fuzzer
    (seed 1, index 56943: a setData of session 2^64 - 1)."""
    r = Replicas()
    r.zk(tx.T_CREATE, "/n", b"", OPEN, 0, 1)
    # packed by hand: the compiled encoder takes session as an int, and turns True into 1
    r.refused(tx.ZK_MAGIC + msgpack.packb([tx.T_SET_DATA, T0, session, "/n", b"x", 1]))
    r.refused(tx.ZK_MAGIC + msgpack.packb([tx.T_CHECK, T0, session, "/n"]))
    assert r.m.zk.nodes["/n"].data == b""


def test_kv_leader_answers_a_write_to_a_key_at_the_last_version() -> None:
    """A committed SET may carry any u64 version; at 2^64 - 1 there is no
    next one, and the leader's prepare of a put or cas of that key raised
    (msgpack cannot pack 2^64), a request that broke the leader's proposal
    path. It now answers bad_version. Found by the apply fuzzer (seed 1,
    index 33165: a legit put after a mutated SET of version 2^64 - 1)."""
    r = Replicas()
    top = (1 << 64) - 1
    assert r.apply(KV_MAGIC + msgpack.packb([1, "k", b"v", top])) == Result(OK, top)
    for req in (Put("k", b"w"), Cas("k", top, b"w")):
        assert r.apply(KV_MAGIC + r.m.leader.prepare(req)) == Result(BAD_VERSION, top)
    assert r.m.store.get("k") == Result(OK, top, b"v")
    assert r.apply(KV_MAGIC + r.m.leader.prepare(KVDelete("k"))) == Result(OK, 0)
    assert r.apply(KV_MAGIC + r.m.leader.prepare(Put("k", b"w"))) == Result(OK, 1)
    r.restart()


# ------------------------------------------------- inputs no leader makes


@pytest.mark.parametrize("version", [2**40, 2**31, -(2**31) - 1, 2**63, 2**64 - 1, -(2**63), True, 1.0, None, "1"])
def test_set_data_with_a_version_out_of_int32_is_refused_by_every_replica(version: Any) -> None:
    """The input that once stopped every replica (and stopped it again at each
    restart): a setData whose version does not fit the znode's int32 raised
    half way through the apply. Now refused whole, the same everywhere, alone
    or in a multi."""
    r = Replicas()
    r.zk(tx.T_CREATE, "/n", b"v", OPEN, 0, 1)
    r.refused(tx.encode(tx.T_SET_DATA, T0, 0, "/n", b"x", version))
    r.refused(tx.encode(tx.T_MULTI, T0, 0, [[tx.T_SET_DATA, "/n", b"x", 1], [tx.T_SET_DATA, "/n", b"x", version]]))
    st = r.m.zk.stat("/n")
    assert r.m.zk.nodes["/n"].data == b"v" and st is not None and st.version == 0


@pytest.mark.parametrize("owner", [2**64 - 1, 2**63, True, None, "7", -1.0])
def test_create_with_an_ephemeral_owner_out_of_int64_is_refused(owner: Any) -> None:
    r = Replicas()
    r.zk(tx.T_CREATE_SESSION, 30_000, b"p" * 16, session=7)
    r.refused(tx.encode(tx.T_CREATE, T0, 7, "/e", b"", OPEN, owner, 1))
    r.refused(tx.encode(tx.T_MULTI, T0, 7, [[tx.T_CREATE, "/f", b"", OPEN, 0, 1],
                                            [tx.T_CREATE, "/e", b"", OPEN, owner, 2]]))
    assert "/e" not in r.m.zk.nodes and "/f" not in r.m.zk.nodes and r.m.zk.ephemerals == {}


def test_delete_of_a_node_with_children_is_not_empty_and_changes_nothing() -> None:
    """Deleting a node that has children left its children orphans: a tree
    whose snapshot does not restore. It is NotEmpty now, whichever txn
    deletes (delete, deleteContainer, a multi's delete, a closeSession)."""
    r = Replicas()
    r.zk(tx.T_CREATE_SESSION, 30_000, b"p" * 16, session=7)
    r.zk(tx.T_CREATE, "/p", b"", OPEN, 7, 1, session=7)  # an ephemeral parent: no leader's, but well formed
    r.zk(tx.T_CREATE, "/p/c", b"", OPEN, 0, 1)
    r.zk(tx.T_CREATE, "/p/c/d", b"", OPEN, CONTAINER_OWNER, 1)
    tree = r.m.zk.snapshot()
    not_empty = ErrorResult(Code.NOT_EMPTY)
    assert r.zk(tx.T_DELETE, "/p") == not_empty
    assert r.zk(tx.T_DELETE_CONTAINER, "/p/c") == not_empty
    assert r.zk(tx.T_MULTI, [[tx.T_DELETE, "/p"]]) == MultiResult((not_empty,))
    assert r.zk(tx.T_CLOSE_SESSION, ["/p"], session=7) == SessionResult(7)
    assert r.m.zk.children_of("/p") == ["c"] and r.m.zk.ephemerals == {7: {"/p"}}
    assert DataTree.restore(r.m.zk.snapshot()).nodes.keys() == DataTree.restore(tree).nodes.keys()
    r.restart()
    for path in ("/p/c/d", "/p/c", "/p"):
        assert r.zk(tx.T_DELETE, path) == DeleteResult()
    assert r.m.zk.ephemerals == {} and r.m.zk.containers == set()
    r.restart()


LEGIT = [
    pytest.param(tx.encode(tx.T_CREATE, T0, 7, "/n", b"data", OPEN, 7, 1), id="create"),
    pytest.param(tx.encode(tx.T_SET_DATA, T0, 7, "/n", b"x" * 40, 3), id="setData"),
    pytest.param(tx.encode(tx.T_MULTI, T0, 7, [[tx.T_CREATE, "/m", None, OPEN, 0, 2], [tx.T_CHECK, "/m"],
                                               [tx.T_DELETE, "/m"]]), id="multi"),
    pytest.param(tx.encode(tx.T_CREATE_SESSION, T0, 9, 30_000, b"p" * 32), id="createSession"),
    pytest.param(tx.encode(tx.T_CLOSE_SESSION, T0, 7, ["/n"]), id="closeSession"),
    pytest.param(KV_MAGIC + msgpack.packb([1, "k", b"value", 3]), id="kv-set"),
    pytest.param(KV_MAGIC + msgpack.packb([3, "bad_version", "k", 3]), id="kv-error"),
]


@pytest.mark.parametrize("payload", LEGIT)
def test_every_truncation_of_a_txn_body_is_refused(payload: bytes) -> None:
    """A body cut anywhere (a torn write, a bad copy) is not msgpack: refused
    whole by every replica, nothing changed."""
    r = Replicas()
    r.zk(tx.T_CREATE_SESSION, 30_000, b"p" * 16, session=7)
    r.zk(tx.T_CREATE, "/n", b"", OPEN, 0, 1)
    for cut in range(4, len(payload)):
        r.refused(payload[:cut])
    r.apply(payload)  # whole, it applies
    r.restart()


@pytest.mark.parametrize("body", [b"", b"\xc1", b"\x91" * 5000 + b"\xc0", b"\xdd\xff\xff\xff\xff", b"\x81\x01\x02",
                                  b"\xa3\xed\xa0\x80", b"\xd6\xff\x00\x00\x00\x01", b"\x95\x05\x00\x00\xa2/n\xc0"])
def test_msgpack_oddities_behind_each_tag(body: bytes) -> None:
    """Bodies msgpack refuses or reads as no txn: refused (ZK, KV), or
    applied as nothing (raw) or as no change (a membership payload that does
    not decode)."""
    r = Replicas()
    r.refused(tx.ZK_MAGIC + body)
    r.refused(KV_MAGIC + body)
    assert r.apply(RAW_MAGIC + body) is None
    assert r.apply(MEMBERSHIP_MAGIC + body) is None
    assert r.m.zk.nodes["/zookeeper/config"].data == b""
    r.restart()


# -------------------------------------------------------------- the fuzzer


@pytest.mark.parametrize("seed", [1, 2026])
def test_apply_fuzz(seed: int) -> None:
    """20,000 inputs: about 2 s here (pure Python)."""
    fuzz = ApplyFuzz(seed)
    stats = fuzz.run(20_000)
    fuzz.final_check()
    assert stats.inputs == 20_000 and stats.snapshots == 20
    assert sum(m.faults for m in fuzz.machines) == 0
    assert 0.2 < stats.refused / stats.inputs < 0.7  # both sides of the checks are reached
    assert stats.by_source is not None and len(stats.by_source) == 13


@pytest.mark.soak
def test_apply_fuzz_soak() -> None:
    """A million inputs (a few minutes): ``python bench/apply_fuzz.py`` runs
    any seed as long as asked."""
    fuzz = ApplyFuzz(20261128)
    stats = fuzz.run(1_000_000)
    fuzz.final_check()
    assert stats.inputs == 1_000_000 and sum(m.faults for m in fuzz.machines) == 0
