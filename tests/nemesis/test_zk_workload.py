"""The ZooKeeper workload of the nemesis (``--workload zk``): its append
order check on hand-made histories, the workload against three local servers
with no fault (no root needed), and a short run with a nemesis in network
namespaces in the default suite (every nemesis for five minutes: soak)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("kazoo")

from zabd.client.spawn import LocalCluster
from zabd.nemesis.history import APPEND, OK, UNKNOWN, History, Op
from zabd.nemesis.linearizability import check
from zabd.nemesis.netlab import available
from zabd.nemesis.runner import RunConfig, run
from zabd.nemesis.zk import ZkWorkload, check_zk_appends, order_violations

lab_ok, why = available()


def _append(h: History, client: int, value: bytes, at: int, done: int | None, seq: int | None) -> Op:
    op = h.invoke(client, APPEND, "log", at, value)
    if done is None:
        History.complete(op, None, UNKNOWN)
    else:
        History.complete(op, done, OK, zxid=seq)
    return op


def test_appends_in_real_time_order_pass() -> None:
    h = History()
    _append(h, 1, b"a", 0, 10, 0)
    _append(h, 2, b"b", 5, 20, 2)  # concurrent with a
    _append(h, 1, b"c", 11, 15, 1)  # after a, concurrent with b: after a only
    _append(h, 3, b"d", 30, None, None)  # unknown, found after everything
    log = [(0, b"a"), (1, b"c"), (2, b"b"), (3, b"d")]
    report, reordered = check_zk_appends(list(h), {1: log, 2: log[:3]})
    assert report.ok and not reordered, (report.format(), reordered)
    assert report.unknown_applied == 1


def test_an_append_placed_before_one_acknowledged_earlier_is_reordered() -> None:
    h = History()
    _append(h, 1, b"a", 0, 10, 2)
    late = _append(h, 2, b"b", 11, 20, 1)  # called after a was acknowledged, yet numbered before it
    unknown = _append(h, 3, b"c", 25, None, None)  # unknown, numbered first: before its call
    log = [(0, b"c"), (1, b"b"), (2, b"a")]
    found = order_violations(list(h), log)
    assert len(found) == 2 and f"op {late.id} " in found[0] and f"op {unknown.id} " in found[1], found


def test_a_lost_append_is_reported() -> None:
    h = History()
    _append(h, 1, b"a", 0, 10, 0)
    _append(h, 1, b"b", 11, 12, 1)
    report, _ = check_zk_appends(list(h), {1: [(0, b"a")], 2: [(0, b"a")]})
    assert [x.op.value for x in report.lost] == [b"b"]


async def test_the_workload_on_three_local_servers_is_linearizable(tmp_path: Path) -> None:
    with LocalCluster(3, base_dir=tmp_path) as cluster:
        await cluster.wait_leader(timeout=30)
        history = History()
        work = ZkWorkload(cluster, keys=3, seed=7, history=history)
        await work.setup()
        tasks = []
        cid = 0
        for node in (1, 2, 3):
            for make in (work.register_client, work.register_client, work.append_client, work.ephemeral_client):
                cid += 1
                tasks.append(asyncio.create_task(make(cid, node)))
        await asyncio.sleep(4)  # the workload's length, not a synchronisation
        # and on until it did what the checks below need: progress, however long a loaded
        # machine takes (the deadline only guards against a hang)
        async with asyncio.timeout(120):
            while not _did_enough(history, work):
                await asyncio.sleep(0.05)  # polling the history, not a time window
        work.stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        await work.close()
        res = await work.read_back(3, lambda _: None)
    register = [op for op in history if op.kind != APPEND]
    appends = [op for op in history if op.kind == APPEND]
    assert History.of(register).counts()["ok"] > 0 and History.of(appends).counts()["ok"] > 0
    assert any(op.code == "bad_version" for op in register)  # some cas found another version
    result = check(register)
    assert result.ok is True, result
    report, reordered = check_zk_appends(appends, res.logs)
    assert report.ok and not reordered and not res.data_mismatch, report.format()
    assert report.acknowledged == History.of(appends).counts()["ok"]
    made = [s for s in res.sessions if s.created == OK]
    assert any(s.ending == "close" for s in made) and any(s.ending == "expire" for s in made), res.sessions
    assert not res.left, res.ephemeral_summary()


def _did_enough(history: History, work: ZkWorkload) -> bool:
    """Registers and appends acknowledged, a cas that found another version,
    and ephemeral sessions made that end each way (close, expiry)."""
    ops = list(history)
    return (any(op.kind != APPEND and op.outcome == OK for op in ops)
            and any(op.kind == APPEND and op.outcome == OK for op in ops)
            and any(op.code == "bad_version" for op in ops)
            and {s.ending for s in work.sessions if s.created == OK} >= {"close", "expire"})


@pytest.mark.skipif(not lab_ok, reason=why)
async def test_a_short_zk_nemesis_run_finds_nothing(tmp_path: Path) -> None:
    summary = await run(RunConfig("kill-leader", nodes=3, seconds=20, interval=3, quiet=3, out=tmp_path,
                                  workload="zk"), lambda _: None)
    assert summary.faults >= 3
    # progress: ops of both kinds acknowledged (how many, in a run of fixed length, is the machine's speed)
    assert summary.register_ops["ok"] > 0 and summary.append_ops["ok"] > 0
    assert summary.ephemerals.startswith("ok"), summary.ephemerals
    assert summary.ok, summary


@pytest.mark.soak
@pytest.mark.skipif(not lab_ok, reason=why)
@pytest.mark.parametrize("nodes", [3, 5])
@pytest.mark.parametrize("nemesis", ["kill", "kill-leader", "pause", "partition-halves", "isolate-leader", "bridge",
                                     "one-way", "slow-disk", "mixed"])
async def test_every_nemesis_with_the_zk_workload_for_five_minutes(tmp_path: Path, nemesis: str, nodes: int) -> None:
    summary = await run(RunConfig(nemesis, nodes=nodes, seconds=300, interval=5, quiet=10, out=tmp_path,
                                  workload="zk"), lambda _: None)
    assert summary.ok, summary
