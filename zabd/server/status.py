"""The ``status`` answer: what a node is and how it is doing, as one dict."""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import time
from collections.abc import Callable
from typing import Any, Protocol

from zabd import __version__
from zabd.config import ServerConfig
from zabd.kv.kvmachine import KVMachine
from zabd.machine import StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.effects import PHASE_BROADCAST
from zabd.protocol.node import LEADING, Node, role_name
from zabd.server.applier import Applier, Watches
from zabd.server.metrics import Counters, dir_bytes
from zabd.server.proposals import ProposalPath
from zabd.server.roles import PHASE_NAMES, RoleTracker
from zabd.server.snapshots import Snapshotter
from zabd.server.sync import SyncService
from zabd.server.transport import Transport
from zabd.server.zk.metrics import status_part
from zabd.storage.base import Storage
from zabd.storage.disk import DiskStorage
from zabd.zk.tree import DataTree

# a tree this small is measured at every status; a larger one at most once a second
DATA_SIZE_EXACT = 10_000


class PortNumbers(Protocol):
    """ZooKeeper's client port's counters (``zabd.server.zk.port.ZKPort``)."""

    def numbers(self) -> dict[str, int | float]: ...

    def sasl_numbers(self) -> dict[str, int]: ...


class DataSize:
    """ZooKeeper's ``approximate_data_size``: every znode's path and data
    length. A walk of the tree: redone only when the tree changed, and on a
    large tree at most once a second (the walk is not free)."""

    def __init__(self) -> None:
        self.key: tuple[int, int] = (0, -1)
        self.at = 0.0
        self.size = 0

    def __call__(self, tree: DataTree) -> int:
        key, now = (id(tree), tree.applied), time.monotonic()
        if key != self.key and (len(tree) <= DATA_SIZE_EXACT or now - self.at >= 1.0):
            nodes = tree.nodes
            self.size = sum(map(len, nodes)) + sum(n.data_length for n in nodes.values())
            self.key, self.at = key, now
        return self.size


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


class GcTimer:
    """Time spent in the cyclic garbage collector (a gc callback)."""

    def __init__(self) -> None:
        self.ns = 0
        self._t0 = 0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
        else:
            self.ns += time.perf_counter_ns() - self._t0

    def close(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


# How often survivors are frozen. A collection walks what survived since the
# last freeze: under ZooKeeper setData load (~30k/s) every 250 ms each one
# held the loop 4-17 ms (wall clock), four times a second on every server;
# every 20 ms, ~95 % of them under 1 ms (a few up to 14, when the thread
# lost its core mid-collection). An idle server goes back to
# the slow pace so that it does not wake fifty times a second for nothing.
FREEZE_BUSY_S = 0.02
FREEZE_IDLE_S = 0.25
# A server whose survivors pile up faster than this is busy. A rate, not a
# count: under setData load ~1,200 survive 20 ms and ~10,000 survive 250 ms,
# so a fixed count between the two sent every busy server back to the slow
# pace after each fast freeze (half its collections were the long ones);
# an idle server leaves ~10 a second.
BUSY_SURVIVORS_PER_S = 2_000


async def freeze_survivors(observe_lag: Callable[[float], None] | None = None) -> None:
    """The history is a long list of Txn NamedTuples, which the cyclic GC
    never untracks (only exact tuples are), so every full collection walked
    all of it: over half of a follower's CPU at 12k commits/s. Collect the
    young generations, then move the survivors to the permanent generation,
    where collections no longer visit them (reference counting still frees
    them when the window lets them go).

    Between two freezes the young generation fills with a write's tuples and
    frames, nearly all freed by reference counting a moment later: collected
    every 700 allocations (CPython's default) they cost 2-3 % of a server's
    wall time under ZooKeeper setData load, every 50,000 about half that.

    ``observe_lag`` gets how late each wake-up came: the loop's long turns
    and its waits for a core, which every request in flight waits through."""
    gc.set_threshold(50_000, 20, 100)
    period = FREEZE_IDLE_S
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period
        await asyncio.sleep(period)
        if observe_lag is not None:
            observe_lag(max(0.0, loop.time() - due))
        young, collections, _ = gc.get_count()
        gc.collect(1)
        gc.freeze()
        period = next_freeze_period(period, young, collections)


def freeze_now() -> None:
    """What ``freeze_survivors`` does, at once: after a step that made many
    long-lived objects (a piece of a snapshot being restored), so that no
    collection walks them before the next periodic freeze (at 1M znodes a
    generation-1 collection of a restore's nodes took 190 ms of the loop)."""
    gc.collect(1)
    gc.freeze()


def next_freeze_period(period: float, young: int, collections: int) -> float:
    """The pace of the next freeze, from what piled up in the last ``period``:
    ``young`` objects in the youngest generation, ``collections`` of it."""
    busy = collections > 0 or young > BUSY_SURVIVORS_PER_S * period
    return FREEZE_BUSY_S if busy else FREEZE_IDLE_S


class StatusReport:
    def __init__(
        self,
        config: ServerConfig,
        node: Node,
        applier: Applier,
        transport: Transport,
        storage: Storage,
        sync: SyncService,
        machine: StateMachine,
        snapshotter: Snapshotter | None,
        gc_timer: GcTimer,
        proposals: ProposalPath,
        watches: Watches,
        roles: RoleTracker,
    ) -> None:
        self.proposals = proposals
        self.watches = watches
        self.roles = roles
        self.config = config
        self.node = node
        self.applier = applier
        self.transport = transport
        self.storage = storage
        self.sync = sync
        self.kv = machine if isinstance(machine, KVMachine) else None
        self.snapshotter = snapshotter
        self.gc_timer = gc_timer
        self.started = time.monotonic()
        self.zk: Any = None  # the ZooKeeper session layer (zabd.server.zk.sessions), when there is a machine
        self.zk_port: PortNumbers | None = None  # ZooKeeper's client port, when it is on
        self.counters: Counters | None = None  # the replica's event counts (ZooKeeper's own metrics among them)
        self.keeper: Any = None  # the leader's session expirer (zabd.server.zk.expiry), when there is a tree
        self.data_size = DataSize()
        self.dirs = {"log": storage.log_dir, "snapshot": storage.snap_dir} if isinstance(storage, DiskStorage) else {}

    def __call__(self) -> dict[str, Any]:
        node = self.node
        role, leader, _, phase = self.roles.announced
        st = self.storage.stats
        out: dict[str, Any] = {
            "id": self.config.id,
            "version": __version__,
            "role": role_name(role, node.observing),
            "phase": PHASE_NAMES[phase],
            "leader": leader,
            "current_epoch": node.current_epoch,
            "accepted_epoch": node.accepted_epoch,
            "last_zxid": node.last_zxid(),
            "last_committed": self.applier.applied,
            "peers": list(self.config.peer_ids),
            "observers": sorted(node.membership.observers),
            # who votes and who observes now, and the change that made it so (0:0: the configured one)
            "membership": {"voters": sorted(node.membership.voters), "observers": sorted(node.membership.observers),
                           "version": zx.fmt(node.membership_zxid), "zxid": node.membership_zxid},
            "peers_connected": sorted(p for p in self.transport.peers if self.transport.connected(p)),
            "storage": self.config.storage,
            "zookeeper_port": self.config.zookeeper_listen or None,  # host:port of ZooKeeper's client port, if on
            "fsync": self.config.fsync,
            "client_connections": len(self.transport.clients),
            # zabd.server.limits: connections refused and cut by reason, bytes held for clients now
            "client_limits": {
                "refused": dict(self.transport.guard.refused), "cut": dict(self.transport.guard.cut),
                "queued_bytes": sum(c.queued() for c in self.transport.unread),
                "buffered_bytes": sum(c.mid_frame for c in self.transport.partial),
            },
            "watches": len(self.watches.sessions),
            "outstanding": self.proposals.in_flight,
            "syncs_pending": len(self.proposals.reads),  # sync requests waiting for the leader's read barrier
            "followers_synced": len(node.leader_acks) - 1 if node.role == LEADING and node.synced else 0,
            # observers linked to this leader and not being synced: in its broadcast phase
            "observers_synced": sum(1 for o in node.membership.observers
                                    if self.transport.connected(o) and o not in node.syncing
                                    and o not in node.needs_sync) if node.role == LEADING and node.synced else 0,
            "uptime_s": round(time.monotonic() - self.started, 3),
            "open_fds": open_fds(),
            "max_fds": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            "gc_ms": round(self.gc_timer.ns / 1e6, 1),
            "gc_collections": [s["collections"] for s in gc.get_stats()],
            "storage_stats": {"flushes": st.flushes, "syncs": st.syncs, "records_synced": st.records_synced},
            **self.sync.status(),
        }
        if self.snapshotter is not None:
            s = self.snapshotter.stats
            out["snapshots"] = {
                "taken": s.taken,
                "last_zxid": s.last_zxid,
                "snapshots_purged": s.snapshots_purged,
                "segments_purged": s.segments_purged,
            }
        now = time.monotonic()
        # ZooKeeper's uptime and leader_uptime: its server objects are made anew at each election
        out["role_uptime_ms"] = int((now - self.roles.role_since) * 1000)
        if self.roles.serving_since is not None and role == LEADING and phase == PHASE_BROADCAST:
            out["leader_uptime_ms"] = int((now - self.roles.serving_since) * 1000)
        if self.counters is not None:
            sent = self.sync.sent
            out["zk_metrics"] = status_part(self.counters.zk, {
                "looking_count": self.counters.elections,
                "diff_count": sent["DIFF"] + sent["TRUNC"],
                "snap_count": sent["SNAP"],
                "connection_rejected": sum(self.transport.guard.refused.values()),
                "stale_sessions_expired": self.keeper.expired if self.keeper is not None else 0,
            })
        if self.kv is not None:
            out["kv_keys"] = len(self.kv.store.data)
            out["kv_digest"] = self.kv.digest()
            tree = self.kv.zk
            out["zk"] = {
                "znodes": len(tree) + 1,  # as ZooKeeper counts them: its DataTree holds the root twice ("" and "/")
                "sessions": len(tree.sessions),
                "ephemerals": sum(len(e) for e in tree.ephemerals.values()),
                # the tree's digest as of its last applied ZooKeeper txn: two
                # replicas with the same digest_zxid must show the same digest
                "digest_zxid": tree.applied,
                "digest": f"{tree.digest:016x}",
                "connections": len(self.zk.conns) if self.zk is not None else 0,
                "watches": len(self.zk.watches) if self.zk is not None else 0,
                "data_bytes": self.data_size(tree),
            }
            if self.zk_port is not None:
                out["zk"].update(self.zk_port.numbers())
                out["zk"].update(self.zk_port.sasl_numbers())
        return out

    def dir_bytes(self) -> dict[str, int]:
        """Bytes in the log and snapshot directories (ZooKeeper's ``dirs``, ``/metrics``' ``zabd_*_bytes``)."""
        return {kind: dir_bytes(path) for kind, path in self.dirs.items()}
