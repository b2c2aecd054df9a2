"""A short Jepsen-style run in the default suite: two nemeses against three
real servers in network namespaces, checked for linearizability, lost
appends and log agreement (longer runs: ``zabd nemesis``, and the soak set)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zabd.nemesis.netlab import available
from zabd.nemesis.runner import RunConfig, run

ok, why = available()
pytestmark = pytest.mark.skipif(not ok, reason=why)


@pytest.mark.parametrize("nemesis", ["kill-leader", "partition-halves"])
async def test_a_short_nemesis_run_finds_nothing(tmp_path: Path, nemesis: str) -> None:
    summary = await run(RunConfig(nemesis, nodes=3, seconds=24, interval=3, quiet=3, out=tmp_path), lambda _: None)
    assert summary.faults >= 3
    # progress: ops of both kinds acknowledged (how many, in a run of fixed length, is the machine's speed)
    assert summary.register_ops["ok"] > 0 and summary.append_ops["ok"] > 0
    assert summary.ok, summary


@pytest.mark.soak
@pytest.mark.parametrize("nodes", [3, 5])
@pytest.mark.parametrize("nemesis", ["kill", "kill-leader", "pause", "partition-halves", "isolate-leader", "bridge",
                                     "one-way", "slow-disk", "mixed"])
async def test_every_nemesis_for_five_minutes(tmp_path: Path, nemesis: str, nodes: int) -> None:
    summary = await run(RunConfig(nemesis, nodes=nodes, seconds=300, interval=5, quiet=10, out=tmp_path),
                        lambda _: None)
    assert summary.ok, summary


async def test_membership_changes_during_a_short_run_find_nothing(tmp_path: Path) -> None:
    """Voters added, removed and demoted among 3 + 2 servers while the leader
    is killed; the voters are 1..3 again at the end and every check passes."""
    summary = await run(RunConfig("kill-leader", nodes=3, seconds=24, interval=3, quiet=3, out=tmp_path, spares=2),
                        lambda _: None)
    changes = (tmp_path / "kill-leader-n3-members" / "membership.jsonl").read_text().splitlines()
    assert sum('"outcome": "ok"' in line for line in changes) >= 3, changes
    assert summary.membership_restored and "at the end" in summary.membership
    # progress: ops of both kinds acknowledged (how many, in a run of fixed length, is the machine's speed)
    assert summary.register_ops["ok"] > 0 and summary.append_ops["ok"] > 0
    assert summary.ok, summary


@pytest.mark.soak
@pytest.mark.parametrize("nodes", [3, 5])
async def test_membership_changes_with_mixed_faults_for_five_minutes(tmp_path: Path, nodes: int) -> None:
    summary = await run(RunConfig("mixed", nodes=nodes, seconds=300, interval=5, quiet=10, out=tmp_path, spares=2),
                        lambda _: None)
    assert summary.ok, summary
