"""Sync plans (DIFF / TRUNC / SNAP) leave the follower with exactly the
history the spec's full-history NewLeader gives, on histories produced by the
simulator under random faults and on hypothesis-generated ZAB histories."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.storage.helpers import run, z
from zabd.protocol.messages import Txn
from zabd.protocol.node import Node
from zabd.sim.faults import random_faults
from zabd.sim.simulator import SimConfig, Simulator
from zabd.storage.disk import DiskStorage
from zabd.storage.sync import DIFF, SNAP, TRUNC, SyncError, SyncInfo, apply_plan, plan_sync, sync_info


def true_shared(a: Sequence[Txn], b: Sequence[Txn]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def check_pair(
    leader: Sequence[Txn], follower: Sequence[Txn], lb_index: int, fb_index: int, modes: Counter[str]
) -> None:
    """``lb_index``: the leader's log starts after leader[lb_index - 1]
    (0: complete); ``fb_index``: the follower's snapshot covers
    follower[:fb_index] (0: none). Both must be committed (shared) txns."""
    lb = leader[lb_index - 1].zxid if lb_index else 0
    fb = follower[fb_index - 1].zxid if fb_index else 0
    snap = leader[-1].zxid if leader else 0  # the leader's snapshot: at or above its log base
    info = sync_info(follower, fb)
    plan = plan_sync(leader[lb_index:], info, log_base=lb, snapshot_zxid=max(snap, lb))
    modes[plan.mode] += 1
    shared = true_shared(leader, follower)
    if plan.mode == SNAP:
        assert shared < lb_index or (shared == lb_index == 0)
        assert plan.log_base == lb and plan.snapshot_zxid >= lb
        # the snapshot holds leader[:lb_index]; the log after it is plan.txns
        assert list(leader[:lb_index]) + apply_plan(follower, plan, fb) == list(leader)
        return
    assert plan.truncate_to == (leader[shared - 1].zxid if shared else 0) or plan.truncate_to == fb
    assert (plan.mode == DIFF) == (shared == len(follower))
    assert apply_plan(follower, plan, fb) == list(leader)


def shares(leader: Sequence[Txn], follower: Sequence[Txn]) -> int:
    return true_shared(leader, follower)


def pairs_from_sim(seed: int, nodes: int, rounds: int, proposals: int, samples: int) -> list[tuple[list[Txn], ...]]:
    rng = random.Random(seed)
    ticks = set(rng.sample(range(rounds), samples))
    out: list[tuple[list[Txn], ...]] = []

    def after_tick(t: int, ns: list[Node]) -> None:
        if t in ticks:
            for a in ns:
                for b in ns:
                    if a is not b:
                        out.append((list(a.history), list(b.history)))

    cfg = SimConfig(seed, nodes, rounds, proposals, faults=tuple(random_faults(seed, nodes, rounds, 8)))
    Simulator(cfg, after_tick=after_tick).run()
    return out


def check_with_bases(leader: list[Txn], follower: list[Txn], rng: random.Random, modes: Counter[str]) -> None:
    shared = shares(leader, follower)
    check_pair(leader, follower, 0, 0, modes)
    # purged leader log and a follower snapshot, both at shared (committed) txns
    lb = rng.randrange(len(leader) + 1) if leader else 0
    fb = rng.randrange(shared + 1)
    check_pair(leader, follower, lb, fb, modes)


def test_sim_histories_plans_equal_full_newleader() -> None:
    modes: Counter[str] = Counter()
    rng = random.Random(7)
    n = 0
    for seed in range(1, 13):
        for leader, follower in pairs_from_sim(seed, 3 + 2 * (seed % 2), 4000, 300, 25):
            check_with_bases(leader, follower, rng, modes)
            n += 1
    assert n > 1000
    assert modes[DIFF] and modes[TRUNC] and modes[SNAP], modes


# ------------------------------------------------------------ hypothesis


@st.composite
def zab_pair(draw: st.DrawFn) -> tuple[list[Txn], list[Txn]]:
    """Histories with ZAB's structure: each epoch's leader starts from a
    prefix of an earlier epoch leader's history and appends (e,1), (e,2)...;
    every node's history is a prefix of some epoch leader's history."""
    n_epochs = draw(st.integers(1, 6))
    leaders: list[list[Txn]] = [[]]
    for e in range(1, n_epochs + 1):
        parent = leaders[draw(st.integers(0, len(leaders) - 1))]
        keep = draw(st.integers(0, len(parent)))
        leaders.append(parent[:keep] + run(e, 1, draw(st.integers(0, 5)), b"h"))
    la = leaders[draw(st.integers(0, len(leaders) - 1))]
    fa = leaders[draw(st.integers(0, len(leaders) - 1))]
    return la[: draw(st.integers(0, len(la)))], fa[: draw(st.integers(0, len(fa)))]


@settings(max_examples=400, deadline=None)
@given(zab_pair(), st.randoms(use_true_random=False))
def test_hypothesis_plans_equal_full_newleader(pair: tuple[list[Txn], list[Txn]], rng: random.Random) -> None:
    leader, follower = pair
    check_with_bases(leader, follower, rng, Counter())


def test_the_brief_example_needs_epoch_ends() -> None:
    leader = [Txn(z(1, 1), b"a"), Txn(z(1, 2), b"b"), Txn(z(3, 1), b"c")]
    follower = [Txn(z(1, 1), b"a"), Txn(z(2, 1), b"x"), Txn(z(2, 2), b"y")]
    info = sync_info(follower)
    assert info == SyncInfo(0, (z(1, 1), z(2, 2)))
    plan = plan_sync(leader, info)
    assert plan.mode == TRUNC and plan.truncate_to == z(1, 1)
    assert plan.txns == (leader[1], leader[2])
    assert apply_plan(follower, plan) == leader


def test_each_mode_by_hand() -> None:
    leader = run(1, 1, 10) + run(2, 1, 5)
    assert plan_sync(leader, sync_info(leader[:7])).mode == DIFF
    assert plan_sync(leader, sync_info(leader)).txns == ()
    trunc = plan_sync(leader, sync_info(run(1, 1, 12)))
    assert trunc.mode == TRUNC and trunc.truncate_to == z(1, 10)
    snap = plan_sync(leader[12:], sync_info(leader[:3]), log_base=z(2, 2), snapshot_zxid=z(2, 4))
    assert snap.mode == SNAP and snap.txns == tuple(leader[12:]) and snap.log_base == z(2, 2)
    with pytest.raises(SyncError):
        plan_sync(leader[12:], sync_info(leader[:3]), log_base=z(2, 2))
    with pytest.raises(SyncError, match="stale"):
        apply_plan(run(1, 1, 3), plan_sync(leader, sync_info(run(1, 1, 9))))


def test_plan_applied_through_disk_storage(tmp_path: object) -> None:
    """The follower's DiskStorage ends with the leader's history after a
    TRUNC plan, and after a SNAP plan (snapshot + retained log)."""
    leader = run(1, 1, 50, b"L") + run(3, 1, 30, b"L")
    follower = run(1, 1, 40, b"L") + run(2, 1, 20, b"F")
    s = DiskStorage(str(tmp_path), segment_bytes=4096, prealloc_bytes=4096)
    s.load()
    for t in follower:
        s.append(t)
    s.commit_to(z(1, 30))
    s.flush_sync()
    plan = plan_sync(leader, sync_info(follower))
    assert plan.mode == TRUNC
    s.replace_history(apply_plan(follower, plan))
    s.flush_sync()
    s.close()
    s = DiskStorage(str(tmp_path), segment_bytes=4096, prealloc_bytes=4096)
    assert s.load().history == leader
    # SNAP: a leader whose log starts after (3,10), snapshot at (3,20)
    longer = leader + run(3, 31, 60, b"L")
    plan = plan_sync(longer[60:], SyncInfo(0, ()), log_base=z(3, 10), snapshot_zxid=z(3, 20))
    assert plan.mode == SNAP
    s.install_snapshot(plan.snapshot_zxid, b"state", plan.log_base)
    s.replace_history(apply_plan(leader, plan))
    s.flush_sync()
    s.close()
    s = DiskStorage(str(tmp_path), segment_bytes=4096, prealloc_bytes=4096)
    st2 = s.load()
    s.close()
    assert st2.history == longer[60:] and st2.snapshot_zxid == z(3, 20) and st2.log_base == z(3, 10)
    assert st2.history[0].zxid == z(3, 11)
