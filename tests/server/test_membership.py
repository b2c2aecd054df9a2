"""Live membership changes on real processes (``zabd reconfig``): nodes
started with ``join = true`` are added one voter at a time (3 -> 7), the
leader is removed, then three more (7 -> 3), and writes go on throughout
with no acknowledged write lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pytest

from zabd.client.client import Client, ZabdError
from zabd.client.spawn import LocalCluster


async def until(what: str, check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(what)


async def membership_of(cluster: LocalCluster, node: int) -> dict[str, object] | None:
    st = await cluster.status(node)
    return st["membership"] if st is not None else None  # type: ignore[no-any-return]


async def test_three_to_seven_to_three_voters_under_writes_removing_the_leader(tmp_path: Path) -> None:
    with LocalCluster(7, base_dir=tmp_path, storage="disk", members=3) as cluster:
        leader = await cluster.wait_leader([1, 2, 3], timeout=30)
        acked: list[str] = []
        gaps: list[float] = []
        stop = asyncio.Event()

        async def writer() -> None:
            async with await Client.connect(cluster.servers, timeout=5) as c:
                last = time.monotonic()
                i = 0
                while not stop.is_set():
                    try:
                        await c.put(f"k{i}", b"v", retry_for=20)
                    except ZabdError:
                        continue  # an outcome not known: not counted as acknowledged
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now
                    acked.append(f"k{i}")
                    i += 1

        task = asyncio.create_task(writer())
        try:
            left = await _changes(cluster, leader, acked)
        finally:
            stop.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        async with await Client.connect([cluster.client_addr(i) for i in left], timeout=10) as reader:
            await reader.sync()
            missing = [k for k in acked if (await reader.get(k)).value != b"v"]
        assert missing == []
        print(f"acknowledged {len(acked)} writes; longest gap {max(gaps) * 1000:.0f} ms")
        # a member SIGKILLed and restarted comes back with the membership its log holds, not its
        # configuration's (a joined node's file still says join = true and lists the first three)
        restarted = max(left)
        cluster.kill(restarted)
        cluster.start_node(restarted)
        want = {"voters": left, "observers": []}
        await until("the restarted node's membership", lambda: _has(cluster, restarted, want))
        await until("the restarted node follows again", lambda: _serving(cluster, restarted))


async def _changes(cluster: LocalCluster, leader: int, acked: list[str]) -> list[int]:
    """The changes, 3 -> 7 -> 3 voters; the voters left at the end."""
    async with await Client.connect(cluster.servers, timeout=10) as admin:

        async def change(**kw: object) -> None:
            await admin.reconfig(**kw)  # type: ignore[arg-type]
            # progress, not a rate: a write sent after each change is acknowledged (the
            # writer waits for each answer: the first one now may be of a write sent before)
            start = len(acked)
            await until(f"a write acknowledged after {kw}", lambda: _at_least(acked, start + 2), timeout=30)

        for node in (4, 5, 6, 7):
            await change(add={node: cluster.spec(node)})
            await until(f"node {node} follows", lambda n=node: _follows(cluster, n))
        want = {"voters": [1, 2, 3, 4, 5, 6, 7], "observers": []}
        for node in range(1, 8):
            await until(f"node {node} has 7 voters", lambda n=node: _has(cluster, n, want))
        # the leader goes first: it commits its removal, then hands over
        await change(remove=[leader])
        left = [i for i in range(1, 8) if i != leader]
        new_leader = await cluster.wait_leader(left, timeout=30)
        assert new_leader != leader
        for gone in [i for i in left if i != new_leader][:3]:
            await change(remove=[gone])
            left.remove(gone)
        want = {"voters": left, "observers": []}
        for node in left:
            await until(f"node {node} has voters {left}", lambda n=node: _has(cluster, n, want))
        with pytest.raises(ZabdError, match="2 voters at once"):
            await admin.reconfig(remove=left[:2])
    return left


async def _follows(cluster: LocalCluster, node: int) -> bool:
    st = await cluster.status(node)
    return st is not None and st["role"] == "following" and st["phase"] == "broadcast"


async def _serving(cluster: LocalCluster, node: int) -> bool:
    st = await cluster.status(node)
    return st is not None and st["phase"] == "broadcast"


async def _has(cluster: LocalCluster, node: int, want: dict[str, object]) -> bool:
    m = await membership_of(cluster, node)
    return m is not None and {"voters": m["voters"], "observers": m["observers"]} == want


async def _at_least(acked: list[str], n: int) -> bool:
    return len(acked) >= n


async def test_an_observer_is_added_promoted_demoted_and_removed_with_a_voter_killed(tmp_path: Path) -> None:
    """etcd's learner pattern: node 4 joins as an observer, catches up, is
    promoted; voter 2 is SIGKILLed and removed while down (3 of 4 voters
    answer); 4 is demoted and removed. Writes commit at every step."""
    with LocalCluster(4, base_dir=tmp_path, storage="disk", members=3) as cluster:
        await cluster.wait_leader([1, 2, 3], timeout=30)
        addr4 = cluster.spec(4)
        # one client per step: one on a node killed below must not carry on
        steps: list[tuple[dict[str, object], dict[str, object], str | None]] = [
            ({"observe": {4: addr4}}, {"voters": [1, 2, 3], "observers": [4]}, "observing"),
            ({"add": {4: ""}}, {"voters": [1, 2, 3, 4], "observers": []}, "following"),
            ({"remove": [2]}, {"voters": [1, 3, 4], "observers": []}, None),
            ({"observe": {4: ""}}, {"voters": [1, 3], "observers": [4]}, "observing"),
            ({"remove": [4]}, {"voters": [1, 3], "observers": []}, None),
        ]
        for i, (kw, want, role4) in enumerate(steps):
            if i == 2:
                cluster.kill(2)  # removed while down: the three others are a majority of four
                # if 2 led, the change must wait for the next leader: asked
                # before, every server answers no_leader and it is not retried
                await cluster.wait_leader([1, 3, 4], timeout=30, exclude=2)
            live = [cluster.client_addr(n) for n in (1, 2, 3, 4) if cluster.alive(n)]
            async with await Client.connect(live, timeout=10) as c:
                await c.reconfig(**kw)  # type: ignore[arg-type]
                # a change that takes the leader's vote (4 demoted while it
                # leads) elects another; a write sent meanwhile is answered
                # leader_lost, rightly not retried: write once one leads
                voters = [n for n in want["voters"] if cluster.alive(n)]  # type: ignore[attr-defined]
                await cluster.wait_leader(voters, timeout=30)
                await c.put(f"after-{i}", b"v", retry_for=20)
            for node in want["voters"]:  # type: ignore[attr-defined]
                await until(f"step {i}: node {node}", lambda n=node, w=want: _has(cluster, n, w))
            if role4 is not None:
                await until(f"step {i}: node 4 {role4}", lambda r=role4: _role(cluster, 4, r))
        st = await cluster.status(4)
        assert st is not None and 4 not in st["membership"]["voters"] + st["membership"]["observers"]


async def _role(cluster: LocalCluster, node: int, role: str) -> bool:
    st = await cluster.status(node)
    return st is not None and st["role"] == role and st["phase"] == "broadcast"


async def test_zabd_reconfig_takes_a_whole_membership_in_steps(tmp_path: Path) -> None:
    """``zabd reconfig --voters 1,2,4=...``: node 4 added, then node 3
    removed, each a change of its own; the command prints both."""
    import subprocess
    import sys

    with LocalCluster(4, base_dir=tmp_path, members=3) as cluster:
        await cluster.wait_leader([1, 2, 3], timeout=30)
        argv = [sys.executable, "-m", "zabd", "reconfig", "--servers", ",".join(cluster.servers[:3]), "--json",
                "--voters", f"1,2,4={cluster.spec(4)}"]  # fmt: skip
        out = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert [line["membership"]["voters"] for line in lines] == [[1, 2, 3, 4], [1, 2, 4]]
        want = {"voters": [1, 2, 4], "observers": []}
        for node in (1, 2, 4):
            await until(f"node {node}", lambda n=node: _has(cluster, n, want))


async def test_a_removed_node_added_back_reaches_a_leader_it_never_heard_of(tmp_path: Path) -> None:
    """Node 2 is removed while the ensemble is 1..3; nodes 4 and 5 join and
    1 leaves; 5 leads. Added back, node 2 knows only the addresses its log
    and configuration hold (1, 2, 3), and the lower id dials: it learns 4's
    and 5's from node 3, which accepts its link, and follows 5."""
    with LocalCluster(5, base_dir=tmp_path, storage="disk", members=3) as cluster:
        await cluster.wait_leader([1, 2, 3], timeout=30)

        def addr(n: int) -> str:
            return cluster.spec(n)

        await _change(cluster, [1, 3], remove=[2])
        await _change(cluster, [1, 3, 4], add={4: addr(4)})
        await _change(cluster, [1, 3, 4, 5], add={5: addr(5)})
        leader = await _change(cluster, [3, 4, 5], remove=[1])
        if leader != 5:  # the highest id wins an election among equals: 5, once the leader is killed
            killed = leader
            cluster.kill(killed)
            leader = await cluster.wait_leader([n for n in (3, 4, 5) if n != killed], timeout=30)
            cluster.start_node(killed)
        assert leader == 5
        await until("3, 4, 5 follow 5", lambda: _all_follow(cluster, [3, 4, 5], 5), timeout=30)
        await _change(cluster, [3, 4, 5], add={2: addr(2)})  # 3, 4 and 5 commit without 2
        await until("node 2 follows 5", lambda: _all_follow(cluster, [2], 5), timeout=20)
        want = {"voters": [2, 3, 4, 5], "observers": []}
        await until("node 2 has the membership", lambda: _has(cluster, 2, want))


async def test_a_removed_node_hears_of_new_members_on_a_link_that_stays_up(tmp_path: Path) -> None:
    """Node 2's link to node 3 is up from the start and stays up while 2 is
    removed, 4 and 5 join, and 1 and 3 leave: 3 is the only node that 2
    dials and that knows 4 and 5. Added back, node 2 reaches the leader only
    if 3 told it of each change on that link, not just at its handshake."""
    with LocalCluster(5, base_dir=tmp_path, storage="disk", members=3) as cluster:
        await cluster.wait_leader([1, 2, 3], timeout=30)

        def addr(n: int) -> str:
            return cluster.spec(n)

        await _change(cluster, [1, 3], remove=[2])
        await _change(cluster, [1, 3, 4], add={4: addr(4)})
        await _change(cluster, [1, 3, 4, 5], add={5: addr(5)})
        await _change(cluster, [3, 4, 5], remove=[1])
        leader = await _change(cluster, [4, 5], remove=[3])
        await _change(cluster, [4, 5], add={2: addr(2)})  # 4 and 5 commit without 2
        await until("node 2 follows the leader", lambda: _all_follow(cluster, [2], leader), timeout=20)
        want = {"voters": [2, 4, 5], "observers": []}
        await until("node 2 has the membership", lambda: _has(cluster, 2, want))


async def _change(cluster: LocalCluster, leaders: list[int], **kw: object) -> int:
    """A membership change, then a write once ``leaders`` (voters it leaves)
    agree on a leader, which is returned. A change that removes the leader
    (any of the first voters can win the first election) elects another; a
    write sent meanwhile is answered leader_lost, rightly not retried."""
    live = [cluster.client_addr(n) for n in range(1, cluster.n + 1) if cluster.alive(n)]
    async with await Client.connect(live, timeout=10) as c:
        await c.reconfig(**kw)  # type: ignore[arg-type]
        leader = await cluster.wait_leader(leaders, timeout=30)
        await c.put("after", b"v", retry_for=20)
    return leader


async def _all_follow(cluster: LocalCluster, nodes: list[int], leader: int) -> bool:
    sts = await cluster.statuses(nodes)
    return all(st is not None and st["leader"] == leader and st["phase"] == "broadcast" for st in sts.values())
