"""Client load and checks shared by the crash tests."""

from __future__ import annotations

import random
import time
from collections import Counter

from tests.loadgen import Load
from zabd.client import Client
from zabd.client.spawn import LocalCluster
from zabd.protocol.messages import Txn

__all__ = ["Load", "check_consistent", "kill_restart_cycle", "read_history"]


async def read_history(cluster: LocalCluster, i: int, from_zxid: int = 0) -> list[Txn]:
    async with await Client.connect(cluster.client_addr(i)) as c:
        return await c.read_all(from_zxid)


async def kill_restart_cycle(
    cluster: LocalCluster, load: Load, rng: random.Random, kills: int, deadline: float
) -> list[str]:
    """SIGKILL a random node (the leader about half the time) after a random
    amount of acknowledged load, restart it on the same data dir once some
    more load went through; ``kills`` times, bounded by ``deadline``
    (monotonic). Progress, not time, paces the faults."""
    done: list[str] = []
    for _ in range(kills):
        if time.monotonic() > deadline:
            break
        await load.wait_acked(load.total + rng.randint(20, 300))
        sts = await cluster.statuses()
        leaders = [i for i, st in sts.items() if st and st["role"] == "leading"]
        victim = leaders[0] if leaders and rng.random() < 0.5 else rng.randint(1, cluster.n)
        cluster.kill(victim)
        done.append(f"kill {victim}{' (leader)' if victim in leaders else ''}")
        await load.wait_acked(load.total + rng.randint(10, 200))  # the others go on without it
        cluster.start_node(victim)
        await cluster.wait_leader(timeout=30)
    return done


async def check_consistent(cluster: LocalCluster, load: Load) -> list[Txn]:
    """Every acknowledged proposal present once, at its zxid, in the same
    order on every node; the KV state machines agree and hold every
    acknowledged put."""
    nodes = list(range(1, cluster.n + 1))
    await cluster.wait_leader(timeout=30)
    # one more write so that every node learns the final commit point
    async with await Client.connect(cluster.servers) as c:
        await c.propose(b"final", retry_for=20)
    await cluster.wait_caught_up(nodes, timeout=30)
    sts = await cluster.statuses()
    # A node restarted after a purge (or given a SNAP) holds the log after its
    # base only; below it, the snapshot (checked through the KV digest) holds the state.
    start = max(int(st["log_base"]) for st in sts.values() if st)
    logs = {i: [t for t in await read_history(cluster, i) if t.zxid > start] for i in nodes}
    ref = logs[1]
    for i in nodes:
        assert logs[i] == ref, f"node {i} differs from node 1"
    by_zxid = {t.zxid: t.payload for t in ref}
    for z, payload in load.acked.items():
        if z > start:
            assert by_zxid.get(z) == payload, f"acknowledged {payload!r} at {z:#x} missing"
    counts = Counter(t.payload for t in ref)
    dup = [p for p, n in counts.items() if n > 1 and not p.startswith(b"\xc1kv1")]
    assert not dup, f"duplicated payloads {dup[:5]}"
    zs = [t.zxid for t in ref]
    assert zs == sorted(zs)
    sts = await cluster.statuses()
    digests = {i: st["kv_digest"] for i, st in sts.items() if st}
    assert len(set(digests.values())) == 1, digests
    async with await Client.connect(cluster.client_addr(nodes[-1])) as c:
        await c.sync()
        for key, value in load.kv_acked.items():
            assert (await c.get(key)).value == value, key
    return ref
