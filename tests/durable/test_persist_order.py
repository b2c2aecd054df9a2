"""Persistence order during sync (ZOOKEEPER-3911, -4643, -4646), crash
recovery errors, and the log tools on a real node's data dir."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable

from tests.durable.crashload import read_history
from zabd.client import Client
from zabd.client.spawn import LocalCluster
from zabd.kv.kinds import raw_body
from zabd.storage.epochs import read_epochs
from zabd.storage.txnlog import iter_records

Factory = Callable[..., LocalCluster]


def _on_disk(cluster: LocalCluster, i: int) -> dict[int, bytes]:
    """Raw proposals on the node's disk, as proposed (the log holds them tagged raw)."""
    return {r.zxid: raw_body(r.payload) for r in iter_records(str(cluster.base / f"data{i}")) if r.crc_ok}


async def test_every_node_crashes_right_after_acking_new_leader(disk_cluster: Factory) -> None:
    c = disk_cluster(3)
    leader = await c.wait_leader()
    stale = next(i for i in (1, 2, 3) if i != leader)
    c.kill(stale)
    async with await Client.connect(c.client_addr(leader)) as cl:
        acked = await asyncio.gather(*(cl.propose(b"t%d" % k) for k in range(200)))
    assert len(set(acked)) == 200
    for i in (1, 2, 3):
        if c.alive(i):
            c.kill(i)
    epoch_before = max(read_epochs(str(c.base / f"data{i}" / "epochs")).current_epoch for i in (1, 2, 3))
    # Every node now SIGKILLs itself right after it writes an AckLeader (the config's test
    # hook, in a file of this start's own: the restarts below run on the plain one).
    for i in (1, 2, 3):
        c.start_node(i, c.write_config(i, c.base / f"node{i}-crash.toml", test_crash_after="ack_leader"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(c.alive(i) for i in (1, 2, 3)) > 1:
        await asyncio.sleep(0.02)
    followers = [i for i in (1, 2, 3) if not c.alive(i)]
    assert len(followers) == 2 and stale in followers, followers
    for i in followers:
        assert "SIGKILL after AckLeader" in c.log_text(i)
    # the new leader: killed as soon as it is synced (or at once if it is not yet)
    new_leader = next(i for i in (1, 2, 3) if c.alive(i))
    c.kill(new_leader)
    # What each follower acknowledged is on its disk: the whole history, then the new epoch.
    for i in followers:
        disk = _on_disk(c, i)
        for k, z in enumerate(acked):
            assert disk.get(z) == b"t%d" % k, f"node {i} acknowledged NewLeader without txn {z:#x} on disk"
        ep = read_epochs(str(c.base / f"data{i}" / "epochs"))
        assert ep is not None and ep.current_epoch > epoch_before
    # The two followers alone (a quorum) still hold every committed txn.
    for i in followers:
        c.start_node(i)
    await c.wait_leader(nodes=followers, timeout=30)
    async with await Client.connect(c.client_addr(followers[0])) as cl:
        await cl.propose(b"after", retry_for=20)
    await c.wait_caught_up(followers)
    for i in followers:
        log = {t.zxid: t.payload for t in await read_history(c, i)}
        assert all(log.get(z) == b"t%d" % k for k, z in enumerate(acked))


async def test_corrupt_data_dir_stops_the_server_with_one_line(disk_cluster: Factory) -> None:
    c = disk_cluster(1)
    await c.wait_leader()
    async with await Client.connect(c.client_addr(1)) as cl:
        await asyncio.gather(*(cl.propose(b"x" * 200) for _ in range(100)))
    assert c.terminate(1) == 0
    seg = sorted((c.base / "data1" / "log").glob("*.log"))[0]
    with open(seg, "r+b") as f:  # a record in the middle: data follows it, so not a torn tail
        f.seek(32 + 40 * 216 + 20)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    before = len(c.log_text(1))
    c.start_node(1)
    rc = c.procs[1].wait(30)
    out = c.log_text(1)[before:].strip().splitlines()
    assert rc == 1
    assert "Traceback" not in "\n".join(out)
    last = out[-1]
    assert last.startswith("zabd serve: cannot recover") and str(seg) in last and "offset" in last, last


async def test_log_dump_and_verify_on_a_real_data_dir(disk_cluster: Factory) -> None:
    c = disk_cluster(3, extra={"snap_count": 100})
    await c.wait_leader()
    async with await Client.connect(c.client_addr(2)) as cl:
        for k in range(300):
            await cl.put(f"k{k % 20}", b"v%d" % k) if k % 2 else await cl.propose(b"p%d" % k)
    await c.wait_caught_up([1, 2, 3])
    history = await read_history(c, 1)
    for i in (1, 2, 3):
        assert c.terminate(i) == 0
    data = str(c.base / "data1")
    v = subprocess.run([sys.executable, "-m", "zabd", "log", "verify", data], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    d = subprocess.run([sys.executable, "-m", "zabd", "log", "dump", data], capture_output=True, text=True)
    assert d.returncode == 0, d.stderr
    records = [line for line in d.stdout.splitlines() if line.startswith("zxid=")]
    assert len(records) >= len(history) and all("checksum=ok" in r for r in records)
    assert "snap" in d.stdout  # the background snapshots are listed
    assert os.path.exists(os.path.join(data, "snap"))
