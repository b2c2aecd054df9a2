"""``zabd reconfig --voters/--observers``: a whole membership as the
single-voter changes that reach it (grow first, then shrink)."""

from __future__ import annotations

import pytest

from zabd.client.membership_steps import steps


def test_a_whole_membership_becomes_one_voter_per_change() -> None:
    wanted = {1: "", 2: "", 3: "", 4: "h:4", 5: "h:5"}
    assert steps({1, 2, 3}, set(), wanted, {}) == [{"add": {4: "h:4"}}, {"add": {5: "h:5"}}]
    # 7 -> 3: four removals, one at a time
    assert steps(set(range(1, 8)), set(), {5: "", 6: "", 7: ""}, {}) == [{"remove": [n]} for n in (1, 2, 3, 4)]
    # a swap is an add, then a removal; a demotion keeps the node as an observer; observers last, together
    assert steps({1, 2, 3}, {9}, {1: "", 2: "", 4: "h:4"}, {3: "", 8: "h:8"}) == [
        {"add": {4: "h:4"}},
        {"observe": {3: ""}},
        {"observe": {8: "h:8"}, "remove": [9]},
    ]
    assert steps({1, 2, 3}, set(), {1: "", 2: "", 3: ""}, {}) == []


def test_impossible_memberships_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one voter"):
        steps({1}, set(), {}, {2: "h:2"})
    with pytest.raises(ValueError, match="voters and as observers"):
        steps({1}, set(), {1: "", 2: "h:2"}, {2: "h:2"})
