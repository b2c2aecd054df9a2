"""The nemesis's membership changer picks only changes the core accepts:
one voter more or fewer at a time, voters kept within max(3, N - 1)..N + 1."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from zabd.client.spawn import LocalCluster
from zabd.nemesis.membership import Membership, MembershipChanger
from zabd.protocol.membership import Membership as CoreMembership
from zabd.protocol.membership import check_change


@pytest.mark.parametrize("voters_wanted", [3, 5])
def test_every_pick_is_a_change_the_core_accepts_and_stays_in_bounds(tmp_path: Path, voters_wanted: int) -> None:
    cluster = LocalCluster(voters_wanted + 2, base_dir=tmp_path)  # ports and addresses only: nothing starts
    changer = MembershipChanger(cluster, voters_wanted, random.Random(5), log=lambda _: None)
    m = Membership(frozenset(range(1, voters_wanted + 1)), frozenset(), 0)
    kinds: set[str] = set()
    for _ in range(2000):
        leader = min(m.voters)
        picked = changer.pick(m, leader)
        assert picked is not None
        what, kw = picked
        kinds.add(what.split()[0] + (" leader" if "(leader)" in what else ""))
        voters, observers = set(m.voters), set(m.observers)
        for node in kw.get("add", {}):
            voters.add(node)
            observers.discard(node)
        for node in kw.get("observe", {}):
            voters.discard(node)
            observers.add(node)
        for node in kw.get("remove", []):
            voters.discard(node)
            observers.discard(node)
        check_change(CoreMembership(frozenset(m.voters), frozenset(m.observers)),
                     CoreMembership(frozenset(voters), frozenset(observers)))
        assert max(3, voters_wanted - 1) <= len(voters) <= voters_wanted + 1
        m = Membership(frozenset(voters), frozenset(observers), m.version + 1)
    assert kinds >= {"add", "remove", "remove leader", "demote", "demote leader", "observe"}
