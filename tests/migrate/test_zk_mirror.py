"""``zabd mirror`` follows a live ZooKeeper 3.8 ensemble as an observer and
cuts over (issue 40's moonshot), on real processes: a 3-node ZooKeeper under
the harness's workload, the mirror joining after it (a SNAP or DIFF of what
is there), writes while it follows (INFORMs), a SIGKILL of ZooKeeper's leader
(the mirror finds the new one and syncs again), then ZooKeeper stopped: the
mirror exits by itself, a zabd cluster starts on its directories and serves
ZooKeeper's tree field for field, and a client whose connect string lists
both ensembles is on zabd with the session it had on ZooKeeper."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kazoo.client import KazooState

from tests.server.real_zk import needs_zookeeper
from tests.zk.migration_harness import (
    SUPER_PASSWORD,
    SUPER_USER,
    WorkloadFacts,
    ZooKeeperEnsemble,
    close,
    connect,
    diff_trees,
    read_tree,
    run_workload,
)
from zabd.client.spawn import LocalCluster
from zabd.kv.replay import Replay
from zabd.migrate.zk_import import build_tree
from zabd.migrate.zk_mirror import Mirror, Stores
from zabd.storage.snapshot import newest_snapshot
from zabd.storage.txnlog import iter_records
from zabd.zk.acl import digest_id
from zabd.zk.tree import DataTree

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120.0


def zabd_on(out: Path, n: int) -> LocalCluster:
    """A zabd cluster on the mirror's directories (not started), read as ZooKeeper's superuser."""
    return LocalCluster(n, storage="disk", base_dir=out,
                        extra={"zk_super_digest": digest_id(SUPER_USER, SUPER_PASSWORD)})


def mirrored_tree(data_dir: Path, upto: int) -> tuple[DataTree, int]:
    """The mirror's tree at ``upto`` from its own directory, as a zabd node
    restarts: its snapshot, then its log; and the snapshot's zxid."""
    snap = newest_snapshot(str(data_dir / "snap"))
    assert snap is not None
    replay = Replay(snap.data)
    for r in iter_records(str(data_dir)):
        if snap.zxid < r.zxid <= upto:
            assert replay.apply(r.zxid, r.payload) is None
    return replay.tree, snap.zxid


class MirrorProcess:
    """``zabd mirror`` as a child, its progress lines read as they come."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "zabd", "mirror", *args], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, count: int = 1) -> None:
        """Until ``count`` progress lines contain ``text``."""
        while sum(text in s for s in self.seen) < count:
            try:
                self.seen.append(self.lines.get(timeout=WAIT_S))
            except queue.Empty:
                raise AssertionError(f"no {text!r} from the mirror in {WAIT_S} s: {self.seen[-10:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@needs_zookeeper
@pytest.mark.parametrize("sync", ["diff", "snap"])
def test_mirror_follows_zookeeper_through_a_leader_kill_and_cuts_over(sync: str, tmp_path: Path) -> None:
    """``snap``: ZooKeeper's leaders send every learner a SNAP (its test switch
    ``zookeeper.forceSnapshotSync``), so the mirror's second sync replaces the
    snapshot in its directories instead of appending a DIFF to their logs."""
    jvm = ["-Dzookeeper.forceSnapshotSync=true"] if sync == "snap" else []
    zk = ZooKeeperEnsemble(tmp_path / "zk", 3, jvm=jvm)
    out = tmp_path / "zabd"
    zabd = zabd_on(out, 3)  # ports only, for now
    facts: WorkloadFacts | None = None
    mirror: MirrorProcess | None = None
    try:
        zk.start()
        facts = run_workload(zk.hosts, bulk=60)  # before the mirror: it gets them in its first sync
        quorum = ",".join(f"127.0.0.1:{zk.quorum_ports[i]}" for i in zk.ids)
        mirror = MirrorProcess(["--quorum", quorum, "--out", str(out), "--nodes", "3", "--cutover",
                                "--cutover-grace", "3"])
        mirror.wait_for("in sync at")
        # a client that will move: ZooKeeper's servers and zabd's in one connect string
        mover = connect(f"{zk.hosts},{zabd.zk_hosts}")
        session = mover.client_id[0]
        mover.create("/moving/eph", b"mine", ephemeral=True, makepath=True)
        writer = connect(zk.hosts)
        for i in range(50):  # informed one by one
            writer.create(f"/after/n{i}", str(i).encode(), makepath=True)
            writer.set(f"/after/n{i}", b"v2")
        t = writer.transaction()
        t.create("/after/multi", b"m")
        t.delete("/after/n0")
        t.commit()

        old = zk.leader()
        zk.kill(old)  # the mirror loses its leader mid-stream and syncs with the next one
        mirror.wait_for("in sync at", 2)
        assert sum(f": {sync.upper()}" in line for line in mirror.seen) == (2 if sync == "snap" else 1)
        for i in range(50, 80):
            writer.set(f"/after/n{i - 40}", b"v3")
            writer.create(f"/after/n{i}", b"late")
        close(writer)
        before = read_tree(zk.hosts)

        moved = threading.Event()
        mover.add_listener(lambda state: moved.set() if state == KazooState.CONNECTED else None)
        zk.stop()
        assert mirror.proc.wait(timeout=WAIT_S) == 0, mirror.seen[-5:]
        assert mirror.proc.stdout is not None
        summary = mirror.proc.stdout.read()
        assert "mirrored up to zxid" in summary
        # the mirror's own log against ZooKeeper's at every snapshot ZooKeeper took while it followed.
        # A ZooKeeper snapshot is fuzzy (taken while txns apply, it may hold some after its zxid), so
        # each is replayed with ZooKeeper's logs up to the next snapshot's zxid (the last one's: to the
        # end), and the mirror's directory at that zxid has the same digest (data, Stat, ACLs, sessions)
        survivor = next(i for i in zk.ids if i != old)
        points = [int(p.name.split(".")[1], 16) for p in zk.files(survivor, "snapshot")]
        _, first = mirrored_tree(out / "data1", 0)
        checked = 0
        for z, upto in zip(points, [*points[1:], None], strict=True):
            if z < first:
                continue
            theirs, _ = build_tree(str(zk.data_dir(survivor)), None, lambda _: None, snapshot_at=z, upto=upto)
            ours, _ = mirrored_tree(out / "data1", theirs.applied)
            assert (ours.digest, ours.applied) == (theirs.digest, theirs.applied), hex(z)
            checked += 1
        assert checked >= (2 if sync == "diff" else 1)
        moved.clear()
        zabd.start()
        asyncio.run(zabd.wait_leader(timeout=60))
        assert diff_trees(before, read_tree(zabd.zk_hosts)) == []
        assert moved.wait(WAIT_S) and mover.client_id[0] == session  # the same session, now on zabd
        stat = mover.exists("/moving/eph")
        assert stat is not None and stat.ephemeralOwner == session
        mover.set("/moving/eph", b"written on zabd")  # and zabd takes writes as an ensemble of its own
        assert mover.get("/moving/eph")[0] == b"written on zabd"
        close(mover)
    finally:
        if mirror is not None:
            mirror.stop()
        if facts is not None:
            for s in facts.live:
                s.client.stop()
                s.client.close()
        zk.stop()
        zabd.stop()


@needs_zookeeper
def test_a_leader_that_resets_the_link_is_a_closed_link(tmp_path: Path) -> None:
    """A stopping or crashing leader resets the links whose bytes it never read
    (the bench's cutover met it: the mirror reconnected to a leader shutting
    down). Made here for certain: a frozen leader's kernel still completes the
    mirror's handshake on its quorum port, and its SIGKILL resets that
    connection, OBSERVERINFO unread. The mirror goes on to the next leader, as
    after a close, and ends with ZooKeeper's tree."""
    zk = ZooKeeperEnsemble(tmp_path / "zk", 3)
    out = tmp_path / "zabd"
    zabd = zabd_on(out, 1)
    mirror: MirrorProcess | None = None
    try:
        zk.start()
        c = connect(zk.hosts)
        c.create("/before/reset", b"1", makepath=True)
        close(c)
        old = zk.leader()
        os.kill(zk.procs[old].pid, signal.SIGSTOP)
        quorum = ",".join(f"127.0.0.1:{zk.quorum_ports[i]}" for i in zk.ids)
        mirror = MirrorProcess(["--quorum", quorum, "--out", str(out), "--nodes", "1"])
        mirror.wait_for(f"following the leader at 127.0.0.1:{zk.quorum_ports[old]}")
        zk.kill(old)  # the connection it never accepted is reset
        mirror.wait_for("in sync at")  # with the leader the other two elect
        c = connect(zk.hosts)
        c.create("/after/reset", b"2", makepath=True)
        close(c)
        before = read_tree(zk.hosts)
        zk.stop()
        mirror.proc.send_signal(signal.SIGTERM)  # no --cutover: SIGTERM ends it the same way
        assert mirror.proc.wait(timeout=WAIT_S) == 0, mirror.seen[-5:]
        zabd.start()
        asyncio.run(zabd.wait_leader(timeout=60))
        assert diff_trees(before, read_tree(zabd.zk_hosts)) == []
    finally:
        if mirror is not None:
            mirror.stop()
        zk.stop()
        zabd.stop()


@needs_zookeeper
def test_a_silent_leader_is_left_and_a_hung_ensemble_still_cuts_over(tmp_path: Path) -> None:
    """A frozen leader (SIGSTOP here: a long GC pause, a stalled VM, a
    partition that resets nothing) never closes its links, and its kernel
    still completes new connections to its quorum port. The mirror leaves a
    link silent for --link-timeout, as a ZooKeeper learner leaves one after
    syncLimit ticks, and follows the leader the other two elect; and once
    every server is frozen (a shutdown that hangs) it still cuts over after
    the grace, which links that connect and say nothing do not put off.
    tickTime=500: ZooKeeper's followers give up on the frozen leader in 2.5 s."""
    zk = ZooKeeperEnsemble(tmp_path / "zk", 3, cfg=["tickTime=500"])
    out = tmp_path / "zabd"
    zabd = zabd_on(out, 1)
    mirror: MirrorProcess | None = None
    try:
        zk.start()
        quorum = ",".join(f"127.0.0.1:{zk.quorum_ports[i]}" for i in zk.ids)
        mirror = MirrorProcess(["--quorum", quorum, "--out", str(out), "--nodes", "1", "--cutover",
                                "--cutover-grace", "8", "--link-timeout", "1"])
        mirror.wait_for("in sync at")
        c = connect(zk.hosts)
        c.create("/frozen/before", b"1", makepath=True)
        close(c)
        old = zk.leader()
        os.kill(zk.procs[old].pid, signal.SIGSTOP)
        mirror.wait_for("in sync at", 2)  # with the leader the other two elect
        assert any("leaving the link" in s for s in mirror.seen)
        c = connect(",".join(zk.addr(i) for i in zk.ids if i != old))
        c.create("/frozen/after", b"2", makepath=True)
        close(c)
        before = read_tree(",".join(zk.addr(i) for i in zk.ids if i != old))
        for i in zk.ids:
            if i != old:
                os.kill(zk.procs[i].pid, signal.SIGSTOP)
        assert mirror.proc.wait(timeout=WAIT_S) == 0, mirror.seen[-5:]
        mirror.wait_for("no ZooKeeper server has led for 8.0 s")
        zabd.start()
        asyncio.run(zabd.wait_leader(timeout=60))
        assert diff_trees(before, read_tree(zabd.zk_hosts)) == []
    finally:
        if mirror is not None:
            mirror.stop()
        for i in list(zk.procs):
            zk.kill(i)  # SIGKILL ends a stopped process; SIGTERM would wait for a SIGCONT
        zabd.stop()


def test_finish_from_takes_what_zookeeper_logged_after_the_mirrors_last_txn(tmp_path: Path) -> None:
    """The window a stopped leader leaves (a txn committed, its INFORM never
    sent), closed from a ZooKeeper dataDir written by ZooKeeper 3.8 itself."""
    src = str(Path(__file__).resolve().parents[1] / "data" / "zk38_datadirs" / "plain")
    whole, _ = build_tree(src, None, lambda _: None)
    held, _ = build_tree(src, None, lambda _: None, upto=whole.applied - 5)
    stores = Stores([str(tmp_path / "d")])
    try:
        mirror = Mirror([], stores, 4242, lambda _: None)
        mirror.tree, mirror.last_zxid = held, held.applied
        mirror.install(0)
        mirror.finish_from([src])
        asyncio.run(stores.flush())
    finally:
        stores.close()
    assert mirror.finished == 5 and mirror.last_zxid == whole.applied
    assert mirror.tree.digest == whole.digest
    ours, _ = mirrored_tree(tmp_path / "d", whole.applied)  # and the directory holds them, as a restart reads it
    assert ours.digest == whole.digest


def test_a_mirror_synced_from_nothing_holds_what_an_import_of_nothing_holds(tmp_path: Path) -> None:
    """A leader that has no txn yet syncs the mirror with an empty DIFF, not a
    SNAP (kazoo's suite met it: a mirror attached while the ensemble formed),
    so the mirror's first state is its own starting tree. It must be what an
    import of ZooKeeper's empty database builds (a snapshot.0 ZooKeeper 3.8
    wrote): zabd's fresh tree differs in /zookeeper/config's Stat."""
    src = str(Path(__file__).resolve().parents[1] / "data" / "zk38_datadirs" / "plain")
    nothing, _ = build_tree(src, None, lambda _: None, snapshot_at=0, upto=0)
    stores = Stores([str(tmp_path / "d")])
    try:
        mirror = Mirror([], stores, 4242, lambda _: None)
        mirror.install(1)  # as UPTODATE after the empty DIFF does
        asyncio.run(stores.flush())
    finally:
        stores.close()
    ours, _ = mirrored_tree(tmp_path / "d", 0)
    assert (nothing.applied, mirror.tree.digest, ours.digest) == (0, nothing.digest, nothing.digest)
