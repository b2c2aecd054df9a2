"""``zabd mirror``: follow a live ZooKeeper ensemble as one of its observers.

The mirror connects to the ZooKeeper leader's quorum port as an observer
(``zabd.zk.quorum_wire``), takes the leader's database (SNAP) or the txns
it lacks (DIFF), and from then on every committed txn the leader informs
observers of. Each is applied to a zabd tree with ZooKeeper's zxid and
appended, in zabd's txn form, to the log of every new data directory
(``--out``, one per node as ``import-zookeeper --nodes`` writes them), with
the fsync batched; the snapshot the sync ended with is installed in each
first, and the epoch files follow ZooKeeper's. If the leader changes, the
mirror finds the new one and syncs again from the zxid it holds.

Cutover: stop ZooKeeper. The mirror notices that no server leads any more;
with ``--cutover`` it then waits ``--cutover-grace`` seconds (a ZooKeeper
election is shorter) and exits with its directories complete up to the last
txn ZooKeeper's leader informed it of, ready for ``zabd serve`` on each (or
``zabd cluster --dir OUT``). Sessions come along with ZooKeeper's passwords,
so clients whose connect string lists the zabd servers move over with their
sessions, ephemerals and watches re-registered. SIGINT or SIGTERM ends the
mirror the same way at any time.

The mirror writes nothing to ZooKeeper and proposes nothing: it is one more
observer, which ZooKeeper's leader admits without configuration (an unknown
server id is logged, not refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from typing import NamedTuple

from zabd.kv.kvmachine import KVMachine
from zabd.migrate.zk_import import ZooKeeperImportError, apply_txn, empty_tree, follows, tree_from
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.storage.disk import DiskStorage
from zabd.zk import datadir as zd
from zabd.zk import quorum_wire as qw

Progress = Callable[[str], None]
CONNECT_TIMEOUT_S = 2.0
# A leader PINGs its learners every tickTime / 2, and a ZooKeeper learner drops a link
# silent for syncLimit ticks (10 s with the usual 2000 ms x 5): a frozen or cut-off leader
# never closes its links, and its kernel still completes new connections to its port.
LINK_TIMEOUT_S = 20.0
READ_SIZE = 1 << 20
REFUSALS = 5


class MirrorError(ValueError):
    """The mirror cannot go on: one line saying why."""


class MirrorResult(NamedTuple):
    zxid: int  # the last txn held
    epoch: int
    leader_proposed: int  # the last zxid a leader's PING said it had proposed
    finished: int  # txns taken from ZooKeeper's own logs after the leader was gone (--finish-from)
    txns: int  # txns applied since the start
    syncs: int  # times the mirror synced with a leader
    znodes: int
    sessions: int
    out: list[str]


def servers_from_zoo_cfg(path: str) -> list[tuple[str, int]]:
    """``server.N=host:quorumPort:electionPort[:role][;client]`` lines of a
    zoo.cfg and of the dynamic file it names: where a leader may listen."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise MirrorError(f"{path}: {exc.strerror}") from None
    dynamic = re.search(r"^\s*dynamicConfigFile\s*=\s*(\S+)", text, re.M)
    if dynamic:
        with contextlib.suppress(OSError), open(dynamic.group(1)) as f:
            text += "\n" + f.read()
    out = []
    for m in re.finditer(r"^\s*server\.(\d+)\s*=\s*([^:;\s]+|\[[^\]]+\]):(\d+)", text, re.M):
        out.append((m.group(2).strip("[]"), int(m.group(3))))
    if not out:
        raise MirrorError(f"{path}: no server.N=host:quorumPort:electionPort line (a standalone ZooKeeper has no "
                          "quorum port to observe; run it as an ensemble, even of one)")
    return out


def parse_quorum(spec: str) -> list[tuple[str, int]]:
    out = []
    for item in spec.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise MirrorError(f"--quorum {item!r}: expected host:quorumPort")
        out.append((host.strip("[]"), int(port)))
    return out


class Stores:
    """The new data directories, written alike."""

    def __init__(self, dirs: list[str]) -> None:
        self.storages = []
        for d in dirs:
            s = DiskStorage(d)
            s.load()
            self.storages.append(s)
        self.dirty = False

    def install(self, zxid: int, state: bytes, epoch: int) -> None:
        for s in self.storages:
            s.install_snapshot(zxid, state, zxid)
            s.persist_epochs(epoch, 0, epoch)
        self.dirty = True

    def epoch(self, epoch: int) -> None:
        for s in self.storages:
            s.persist_epochs(epoch, 0, epoch)
        self.dirty = True

    def append(self, zxid: int, payload: bytes) -> None:
        txn = Txn(zxid, payload)
        for s in self.storages:
            s.append(txn)
            s.commit_to(zxid)
        self.dirty = True

    async def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            await asyncio.gather(*(s.flush() for s in self.storages))

    def close(self) -> None:
        for s in self.storages:
            s.close()


class Mirror:
    def __init__(self, servers: list[tuple[str, int]], stores: Stores, observer_id: int,
                 progress: Progress, link_timeout: float = LINK_TIMEOUT_S) -> None:
        self.servers = servers
        self.link_timeout = link_timeout
        self.next_server = 0  # where the next search for a leader starts: after the last one tried
        self.stores = stores
        self.observer_id = observer_id
        self.progress = progress
        # a leader without a txn yet syncs with an empty DIFF, not a SNAP: this is then the state
        self.tree = empty_tree()
        self.last_zxid = 0
        self.accepted_epoch = 0
        self.current_epoch = 0
        self.installed = False  # a snapshot is in the directories: txns go to the logs
        self.txns = 0
        self.syncs = 0
        self.leader = ""
        self._said = 0.0
        self.refusals = 0  # links closed before LEADERINFO, in a row
        self.leader_proposed = 0  # a leader's PING carries the last zxid it proposed
        self.finished = 0
        self.led_at = 0.0  # monotonic: when a leader (past LEADERINFO) was last heard from

    def _apply(self, t: zd.ZkTxn, logged: bool) -> None:
        if t.zxid <= self.last_zxid:
            return  # the sync's packets may repeat what a SNAP already held
        try:
            payload = apply_txn(self.tree, t)
        except ZooKeeperImportError as exc:
            raise MirrorError(str(exc)) from None
        self.last_zxid = t.zxid
        self.txns += 1
        if logged:
            self.stores.append(t.zxid, payload)

    def _database(self, db: qw.Database, zxid: int) -> None:
        try:
            self.tree = tree_from(db.rows, db.sessions, zxid)
        except ValueError as exc:
            raise MirrorError(f"{self.leader}: the leader's database: {exc}") from None
        self.last_zxid = zxid
        self.installed = False

    def install(self, epoch: int) -> None:
        """The tree as it stands, as every directory's snapshot."""
        machine = KVMachine()
        machine.zk = self.tree
        machine.store.applied = self.last_zxid
        self.tree.applied = self.last_zxid
        self.stores.install(self.last_zxid, machine.snapshot(), epoch)
        self.installed = True

    async def find_leader(self, deadline: float | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The server that accepts on its quorum port (only a leader listens
        there), tried in turn until ``deadline`` (monotonic; None: forever)."""
        while deadline is None or time.monotonic() < deadline:
            for k in range(len(self.servers)):
                # round the list from after the last server tried: one that accepts and then says
                # nothing (frozen) must not hide the others
                at = (self.next_server + k) % len(self.servers)
                host, port = self.servers[at]
                try:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
                except (TimeoutError, OSError):
                    continue
                self.next_server = (at + 1) % len(self.servers)
                self.leader = f"{host}:{port}"
                return reader, writer
            await asyncio.sleep(0.2)  # nobody leads yet: an election, or ZooKeeper is down
        return None

    async def follow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     deadline: float | None = None) -> None:
        """One link to a leader, until it closes or falls silent (returns) or
        the stream is not a leader's (MirrorError). ``deadline`` (monotonic):
        a link that has not said LEADERINFO by then is given up (the cutover's)."""
        wire = qw.ObserverWire(self.leader)
        writer.write(qw.observer_info(self.observer_id, self.accepted_epoch))
        pending: dict[int, zd.ZkTxn] = {}
        snap_zxid = 0
        new_epoch = 0
        serving = False
        while True:
            wait = self.link_timeout
            if deadline is not None and not new_epoch:
                # a server hung in its shutdown accepts and says nothing; a new leader says
                # LEADERINFO as soon as a quorum of followers is back: within the grace
                wait = min(wait, max(CONNECT_TIMEOUT_S, deadline - time.monotonic()))
            try:
                await writer.drain()
                data = await asyncio.wait_for(reader.read(READ_SIZE), wait)
            except TimeoutError:
                # silent: a frozen or cut-off leader (a ZooKeeper learner gives up the same
                # way); not a refusal, which a leader says by closing
                self.progress(f"{self.leader}: nothing for {wait:.1f} s: leaving the link")
                return
            except OSError:
                # a reset is a closed link: a stopping or crashing leader resets the links
                # whose bytes it never read (the mirror's OBSERVERINFO or PING replies)
                data = b""
            if new_epoch:
                self.led_at = time.monotonic()
            if not data:
                if new_epoch:
                    self.refusals = 0
                    return
                # closed before it said LEADERINFO: not taken as an observer
                self.refusals += 1
                if self.refusals >= REFUSALS:
                    raise MirrorError(f"{self.leader}: the leader closed the link {REFUSALS} times before its "
                                      "LEADERINFO: quorum SASL or TLS (sslQuorum) in use? the mirror speaks neither")
                return
            try:
                events = wire.feed(data)
            except zd.ZkFormatError as exc:
                raise MirrorError(str(exc)) from None
            for ev in events:
                if isinstance(ev, qw.Database):
                    self.progress(f"{self.leader}: SNAP of {len(ev.rows):,} znodes at {zx.fmt(snap_zxid)}")
                    self._database(ev, snap_zxid)
                    continue
                kind, zxid, body = ev
                if kind == qw.PING:
                    self.leader_proposed = max(self.leader_proposed, zxid)
                    writer.write(qw.packet(qw.PING, zxid, b""))  # no sessions of its own to report
                elif kind in (qw.INFORM, qw.INFORM_AND_ACTIVATE):
                    raw = body or b""
                    self._apply(zd.parse_txn(raw[8:] if kind == qw.INFORM_AND_ACTIVATE else raw, self.leader,
                                             wire.offset), self.installed)
                elif kind == qw.PROPOSAL:
                    t = zd.parse_txn(body or b"", self.leader, wire.offset)
                    pending[t.zxid] = t
                elif kind in (qw.COMMIT, qw.COMMIT_AND_ACTIVATE):
                    t2 = pending.pop(zxid, None)
                    if t2 is not None:
                        self._apply(t2, self.installed)
                elif kind == qw.LEADERINFO:
                    new_epoch = zx.epoch_of(zxid)
                    if new_epoch < self.accepted_epoch:
                        raise MirrorError(f"{self.leader}: leader's epoch {new_epoch} is below the mirror's "
                                          f"{self.accepted_epoch}")
                    current = self.current_epoch if new_epoch > self.accepted_epoch else -1
                    self.accepted_epoch = new_epoch
                    writer.write(qw.ack_epoch(self.last_zxid, current))
                elif kind == qw.SNAP:
                    snap_zxid = zxid
                elif kind == qw.DIFF:
                    self.progress(f"{self.leader}: DIFF from {zx.fmt(self.last_zxid)}")
                elif kind == qw.TRUNC:
                    if zxid < self.last_zxid:
                        raise MirrorError(f"{self.leader}: the leader truncates to {zx.fmt(zxid)}, below the "
                                          f"{zx.fmt(self.last_zxid)} the mirror holds: it only ever holds "
                                          "committed txns, so this is not the ensemble it followed")
                elif kind == qw.NEWLEADER:
                    writer.write(qw.packet(qw.ACK, zxid))
                elif kind == qw.UPTODATE:
                    # the sync is over: the state is durable before the leader hears so
                    self.current_epoch = new_epoch
                    if not self.installed:
                        self.install(new_epoch)
                    else:
                        self.stores.epoch(new_epoch)
                    await self.stores.flush()
                    writer.write(qw.packet(qw.ACK, zx.make(new_epoch, 0)))
                    serving = True
                    self.syncs += 1
                    self.progress(f"{self.leader}: in sync at {zx.fmt(self.last_zxid)} (epoch {new_epoch}), "
                                  f"{len(self.tree.nodes):,} znodes")
            if serving:
                await self.stores.flush()
            now = time.monotonic()
            if now - self._said >= 5.0:
                self._said = now
                self.progress(f"mirroring {self.leader}: at {zx.fmt(self.last_zxid)}, {self.txns:,} txns, "
                              f"{len(self.tree.nodes):,} znodes")

    async def run(self, cutover_grace: float | None, stop: asyncio.Event) -> None:
        """Follow leaders until ``stop`` is set, or (``cutover_grace``) until
        nobody has led for that long after a leader was followed."""
        while not stop.is_set():
            # counted from when a leader was last heard from: links that connect and say nothing
            # (a server hung in its shutdown) do not put the cutover off
            deadline = self.led_at + cutover_grace if self.led_at and cutover_grace is not None else None
            found = asyncio.ensure_future(self.find_leader(deadline))
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({found, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                found.cancel()
                return
            stopped.cancel()
            link = found.result()
            if link is None:
                self.progress(f"no ZooKeeper server has led for {cutover_grace} s: cutover at "
                              f"{zx.fmt(self.last_zxid)}")
                return
            reader, writer = link
            self.progress(f"following the leader at {self.leader}")
            task = asyncio.ensure_future(self.follow(reader, writer, deadline))
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            writer.close()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return
            task.result()  # a MirrorError (or the disk's OSError) ends the mirror
            self.progress(f"the link to {self.leader} closed at {zx.fmt(self.last_zxid)}")

    def finish_from(self, data_dirs: list[str]) -> None:
        """After ZooKeeper stopped: the txns its servers logged after the
        last one the mirror holds, from the dataDir that logged the most,
        appended as ZooKeeper's own restart would replay them. A leader
        stopped with a txn committed (its client answered) whose INFORM it
        had not yet sent would otherwise be missing here."""
        best: list[zd.ZkTxn] = []
        for d in data_dirs:
            version_dir = zd.find_version_dir(d)
            if not os.path.isdir(version_dir):
                raise MirrorError(f"--finish-from {d}: not a directory")
            txns = [t for path in zd.logs_after(version_dir, self.last_zxid) for t in zd.read_log(path, self.last_zxid)]
            if txns and (not best or txns[-1].zxid > best[-1].zxid):
                best = txns
        last = self.last_zxid
        for t in best:
            if t.zxid <= last:
                continue
            if not follows(last, t.zxid):
                raise MirrorError(f"{t.file}: at byte {t.offset}: txn {zx.fmt(t.zxid)} follows {zx.fmt(last)}: "
                                  "this dataDir lacks the txns between them")
            self._apply(t, True)
            last = t.zxid
            self.finished += 1
        if self.finished:
            self.progress(f"took {self.finished} txn(s) after the leader's last INFORM from ZooKeeper's logs, "
                          f"up to {zx.fmt(self.last_zxid)}")


async def _main(servers: list[tuple[str, int]], dirs: list[str], observer_id: int, cutover_grace: float | None,
                finish_from: list[str], progress: Progress, link_timeout: float) -> Mirror:
    stores = Stores(dirs)
    mirror = Mirror(servers, stores, observer_id, progress, link_timeout)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await mirror.run(cutover_grace, stop)
        if finish_from and mirror.installed:
            mirror.finish_from(finish_from)
        await stores.flush()
    finally:
        stores.close()
    return mirror


def mirror_zookeeper(servers: list[tuple[str, int]], out: str, nodes: int | None, observer_id: int,
                     cutover_grace: float | None, finish_from: list[str] | None = None,
                     progress: Progress = lambda _: None, link_timeout: float = LINK_TIMEOUT_S) -> MirrorResult:
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise MirrorError(f"{out}: already exists and is not an empty directory (the mirror writes a new one)")
    names = [f"data{i}" for i in range(1, nodes + 1)] if nodes else [""]
    dirs = [os.path.join(out, n) if n else out for n in names]
    mirror = asyncio.run(_main(servers, dirs, observer_id, cutover_grace, finish_from or [], progress, link_timeout))
    if not mirror.installed:
        raise MirrorError(f"{out}: the mirror never completed a sync with a ZooKeeper leader; the directories are "
                          "not a usable state (remove them)")
    return MirrorResult(mirror.last_zxid, mirror.current_epoch, mirror.leader_proposed, mirror.finished,
                        mirror.txns, mirror.syncs, len(mirror.tree.nodes),
                        len(mirror.tree.sessions), dirs)
