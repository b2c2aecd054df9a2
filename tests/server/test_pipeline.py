"""Persist before you speak, driven without a socket.

A real core (``Node``) and the server's ``EffectPipeline`` over a real
``DiskStorage`` (real files, real fdatasync). The test plays the network:
it hands the core messages, and decides when a flush runs. Nothing the core
says after a persist effect may reach the speaker before the flush that
covers it returned (ZOOKEEPER-3911, -4643, -4646).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zabd.protocol import zxid as zx
from zabd.protocol.effects import PHASE_BROADCAST, MembershipChanged, RoleChanged, SendSync
from zabd.protocol.messages import (
    DIFF,
    Ack,
    AckEpoch,
    AckLeader,
    Commit,
    Message,
    NewEpoch,
    Propose,
    Sync,
    SyncInfo,
    Txn,
    Vote,
)
from zabd.protocol.node import LEADING, Node
from zabd.protocol.options import for_server
from zabd.storage.disk import DiskStorage
from zabd.storage.effect_pipeline import EffectPipeline
from zabd.storage.epochs import read_epochs
from zabd.storage.txnlog import iter_records


class Recorder:
    """The pipeline's speaker: what would have gone out, in order."""

    def __init__(self) -> None:
        self.said: list[tuple[str, Any]] = []

    def send(self, peer: int, msg: Message) -> None:
        self.said.append(("send", (peer, msg)))

    def broadcast(self, msg: Message) -> None:
        self.said.append(("broadcast", msg))

    def send_sync(self, plan: SendSync) -> None:
        self.said.append(("sync", plan))

    def commit_decided(self, zxid: int) -> None:
        self.said.append(("decided", zxid))

    def committed(self, zxid: int) -> None:
        self.said.append(("committed", zxid))

    def role_changed(self, change: RoleChanged) -> None:
        self.said.append(("role", change))

    def membership_changed(self, change: MembershipChanged) -> None:
        self.said.append(("membership", change))

    def take(self) -> list[tuple[str, Any]]:
        out, self.said = self.said, []
        return out


class Rig:
    def __init__(self, path: Path, node_id: int, early: bool = False, cumulative: bool = False) -> None:
        self.disk = DiskStorage(str(path))
        self.disk.load()
        self.node = Node(node_id, [p for p in (1, 2, 3) if p != node_id], 7, for_server(100, 1000, 500))
        self.out = Recorder()
        self.pipe = EffectPipeline(self.disk, self.out, early_propose=early, cumulative_acks=cumulative)

    def deliver(self, src: int, msg: Message, t: int = 10) -> list[tuple[str, Any]]:
        self.node.on_message(src, msg, t)
        self.pipe.run(self.node.take_effects())
        return self.out.take()

    async def flush(self) -> list[tuple[str, Any]]:
        target = self.pipe.written
        syncs = self.disk.stats.syncs
        pending = self.pipe.unflushed
        await self.disk.flush()
        assert self.disk.stats.syncs > syncs or not pending, "the flush did not fdatasync"
        self.pipe.flushed(target)
        return self.out.take()


def messages(said: list[tuple[str, Any]]) -> list[Message]:
    return [x[1] if kind == "send" else x for kind, x in said if kind in ("send", "broadcast")]


async def test_a_follower_acknowledges_only_what_is_on_disk(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "d2", 2)
    # NewEpoch -> PersistEpochs, then AckEpoch: held until the epochs are durable
    said = rig.deliver(1, NewEpoch(5))
    assert messages(said) == [] and rig.pipe.unflushed
    assert messages(await rig.flush()) == [SyncInfo(0, ()), AckEpoch(5, 0, 0)]
    ep = read_epochs(str(tmp_path / "d2" / "epochs"))
    assert ep is not None and ep.accepted_epoch == 5

    # a sync plan (the NewLeader of the server's variant) -> TruncateAppend + PersistEpochs, then AckLeader
    z1, z2 = zx.make(4, 1), zx.make(4, 2)
    said = rig.deliver(1, Sync(5, DIFF, 0, (Txn(z1, b"a"), Txn(z2, b"b"))))
    assert messages(said) == []
    assert messages(await rig.flush()) == [AckLeader(5)]
    assert [(r.zxid, r.payload) for r in iter_records(str(tmp_path / "d2"))] == [(z1, b"a"), (z2, b"b")]
    ep = read_epochs(str(tmp_path / "d2" / "epochs"))
    assert ep is not None and ep.current_epoch == 5

    # Propose -> AppendTxn, then Ack only after the record is synced
    z = zx.make(5, 1)
    assert messages(rig.deliver(1, Propose(Txn(z, b"payload")))) == []
    assert messages(await rig.flush()) == [Ack(z)]
    assert [r.zxid for r in iter_records(str(tmp_path / "d2"))][-1] == z


@pytest.mark.parametrize("cumulative", [False, True], ids=["every-ack", "cumulative-acks"])
async def test_the_acks_one_flush_releases_go_out_as_the_last_one(tmp_path: Path, cumulative: bool) -> None:
    rig = Rig(tmp_path / "d2", 2, cumulative=cumulative)
    rig.deliver(1, NewEpoch(5))
    await rig.flush()
    rig.deliver(1, Sync(5, DIFF, 0, ()))
    await rig.flush()
    zs = [zx.make(5, c) for c in (1, 2, 3)]
    for z in zs:
        assert messages(rig.deliver(1, Propose(Txn(z, b"p")))) == []
    acks = messages(await rig.flush())
    # with cumulative acks the leader counts Ack(z3) for z1 and z2 too
    assert acks == ([Ack(zs[-1])] if cumulative else [Ack(z) for z in zs])
    assert [r.zxid for r in iter_records(str(tmp_path / "d2"))] == zs


async def leader_rig(path: Path, early: bool) -> Rig:
    """Node 3 leads epoch 1 with node 1's support, synced."""
    rig = Rig(path, 3, early)
    rig.node.start_election(0)
    rig.node.on_message(1, Vote(0, 0, 0, 3), 1)
    assert rig.node.role == LEADING
    rig.pipe.run(rig.node.take_effects())
    await rig.flush()
    rig.deliver(1, SyncInfo(0, ()))
    rig.deliver(1, AckEpoch(1, 0, 0))
    said = await rig.flush()
    assert [x.dst for kind, x in said if kind == "sync"] == [1, 2]  # the NewLeader as a plan, to every peer
    rig.deliver(1, AckLeader(1))
    await rig.flush()
    assert rig.node.synced
    return rig


@pytest.mark.parametrize("early", [False, True], ids=["strict-default", "early-propose"])
async def test_a_commit_waits_for_the_leaders_own_fsync(tmp_path: Path, early: bool) -> None:
    rig = await leader_rig(tmp_path / "d3", early)
    z = rig.node.propose(b"new", 20)
    rig.pipe.run(rig.node.take_effects())
    said = rig.out.take()
    if early:
        # leader_early_propose: the Propose leaves while the leader's append syncs
        assert messages(said) == [Propose(Txn(z, b"new"))]
    else:
        assert messages(said) == []
    # node 1 acknowledges: a quorum, but the leader's own copy is not durable yet
    said = rig.deliver(1, Ack(z), 21)
    assert messages(said) == [] and ("committed", z) not in said
    assert [r.zxid for r in iter_records(str(tmp_path / "d3"))] == []  # written, not even flushed to the file
    said = await rig.flush()
    assert [r.zxid for r in iter_records(str(tmp_path / "d3"))] == [z]
    expected = [Commit(z)] if early else [Propose(Txn(z, b"new")), Commit(z)]
    assert messages(said) == expected
    assert ("committed", z) in said  # the client's answer, after the fsync


async def test_only_the_last_commit_of_a_batch_is_carried_out(tmp_path: Path) -> None:
    rig = await leader_rig(tmp_path / "d3", early=False)
    zs = [rig.node.propose(b"p%d" % k, 20) for k in range(5)]
    rig.pipe.run(rig.node.take_effects())
    await rig.flush()
    rig.out.take()
    for z in zs:  # five acks in one batch: five commits decided
        rig.node.on_message(1, Ack(z), 21)
    effects = rig.node.take_effects()
    assert sum(1 for e in effects if getattr(e, "msg", None) == Commit(zs[-1])) == 1
    assert sum(1 for e in effects if isinstance(getattr(e, "msg", None), Commit)) == 5
    rig.pipe.run(effects)
    said = rig.out.take()
    assert messages(said) == [Commit(zs[-1])]
    assert [x for kind, x in said if kind == "committed"] == [zs[-1]]


async def test_role_changes_wait_in_the_same_queue(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "d2", 2)
    said = rig.deliver(1, Sync(5, DIFF, 0, ()))
    assert not [x for kind, x in said if kind == "role"]  # the change follows the persist: held too
    said = await rig.flush()
    roles = [x for kind, x in said if kind == "role"]
    assert roles and roles[-1].phase == PHASE_BROADCAST


async def test_a_commit_of_durable_txns_leaves_ahead_of_later_proposals(tmp_path: Path) -> None:
    # Under load a leader's turn appends new proposals and commits older
    # ones: the commit covers only txns already durable here, so it does not
    # wait for the flush of the new appends.
    rig = await leader_rig(tmp_path / "d3", early=False)
    z1 = rig.node.propose(b"one", 20)
    rig.pipe.run(rig.node.take_effects())
    assert messages(await rig.flush()) == [Propose(Txn(z1, b"one"))]
    z2 = rig.node.propose(b"two", 21)
    said = rig.deliver(1, Ack(z1), 21)  # one turn: the append of z2, then the commit of z1
    assert messages(said) == [Commit(z1)] and ("committed", z1) in said
    assert messages(await rig.flush()) == [Propose(Txn(z2, b"two"))]


async def test_a_commit_never_passes_its_own_append(tmp_path: Path) -> None:
    rig = await leader_rig(tmp_path / "d3", early=False)
    z1 = rig.node.propose(b"one", 20)
    rig.pipe.run(rig.node.take_effects())
    z2 = rig.node.propose(b"two", 21)
    said = rig.deliver(1, Ack(z1), 21)
    assert messages(said) == [] and not [x for kind, x in said if kind == "committed"]
    said = await rig.flush()
    assert messages(said) == [Propose(Txn(z1, b"one")), Propose(Txn(z2, b"two")), Commit(z1)]
    assert ("committed", z1) in said


async def test_a_followers_commit_passes_its_held_acks(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "d2", 2)
    rig.deliver(1, NewEpoch(5))
    await rig.flush()
    rig.deliver(1, Sync(5, DIFF, 0, ()))
    await rig.flush()
    z1, z2 = zx.make(5, 1), zx.make(5, 2)
    rig.deliver(1, Propose(Txn(z1, b"a")))
    assert messages(await rig.flush()) == [Ack(z1)]
    said = rig.deliver(1, Propose(Txn(z2, b"b")))
    said += rig.deliver(1, Commit(z1))
    assert messages(said) == [] and ("committed", z1) in said  # applied now; Ack(z2) waits for its fsync
    assert messages(await rig.flush()) == [Ack(z2)]


async def test_a_commit_never_passes_a_sync_not_yet_durable(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "d2", 2)
    rig.deliver(1, NewEpoch(5))
    await rig.flush()
    z1 = zx.make(4, 1)
    said = rig.deliver(1, Sync(5, DIFF, 0, (Txn(z1, b"a"),)))
    said += rig.deliver(1, Commit(z1))
    assert not [x for kind, x in said if kind in ("committed", "role")]
    said = await rig.flush()
    kinds = [kind for kind, _ in said]
    assert ("committed", z1) in said and kinds.index("role") < kinds.index("committed")


async def test_a_leader_announces_a_commit_before_it_applies_it(tmp_path: Path) -> None:
    # the followers apply while the leader does; the answers to their
    # forwarded writes (commit_decided) go ahead of the Commit
    rig = await leader_rig(tmp_path / "d3", early=False)
    z = rig.node.propose(b"one", 20)
    rig.pipe.run(rig.node.take_effects())
    await rig.flush()
    said = rig.deliver(1, Ack(z), 21)
    assert said == [("decided", z), ("broadcast", Commit(z)), ("committed", z)]
    z2 = rig.node.propose(b"two", 22)
    rig.deliver(1, Ack(z2), 22)  # held: its append is not durable yet
    said = await rig.flush()
    assert said == [("broadcast", Propose(Txn(z2, b"two"))), ("decided", z2), ("broadcast", Commit(z2)),
                    ("committed", z2)]
