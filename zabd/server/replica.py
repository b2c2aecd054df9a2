"""The asyncio driver around the protocol core.

Mechanics only, every decision is ``zabd.protocol.Node``'s:

* inputs (peer frames, ticks, client proposals, link failures) are handed to
  the core as they arrive; its effects accumulate in ``node.effects``;
* once per loop iteration ``_process`` takes the effects and carries them out
  in order. Persist effects go to storage at once (buffered); every other
  effect that follows an unflushed persist waits in ``_held`` until the
  flusher has awaited ``storage.flush()`` (persist before you speak). Client
  answers (``CommitTo``) and role changes wait in the same queue, so nothing
  leaves the node ahead of what it depends on;
* outgoing frames are appended to per-connection buffers and written once per
  iteration (one ``write`` per link), a broadcast encoded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
from bisect import bisect_left, bisect_right
from collections import deque
from typing import Any, cast

from pydantic import ValidationError

from zabd.client import schema
from zabd.protocol import zxid as zx
from zabd.protocol.effects import (
    PHASE_BROADCAST,
    AppendTxn,
    Broadcast,
    CommitTo,
    Effect,
    PersistEpochs,
    ReplaceHistory,
    RoleChanged,
    Send,
)
from zabd.protocol.messages import AckEpoch, AckLeader, LookForLeader, NewLeader, Propose, Txn
from zabd.protocol.node import FOLLOWING, LEADING, ROLE_NAMES, Node, NotLeader
from zabd.protocol.options import SERVER
from zabd.server import wire
from zabd.server.config import ServerConfig
from zabd.server.durable import Durable
from zabd.server.state_machine import NullStateMachine, StateMachine
from zabd.server.zlog import get_logger, set_context
from zabd.storage.base import MemoryStorage, Storage

PHASE_NAMES = ("none", "sync", "broadcast")
MAX_OUTSTANDING = 4096  # per client connection; reading pauses beyond it
WATCH_PAGE = 1000
BACKOFF_MIN = 0.02
# Redials of a peer that is down are cheap (refused at once, or abandoned at
# peer_connect_timeout_ms); a short cap rejoins a healed partition quickly.
BACKOFF_MAX = 0.25
_PING = wire.frame((wire.TAG_PING,))

_frame = wire.frame


def _zxid_key(txn: Txn) -> int:
    return txn.zxid


class _Conn(asyncio.Protocol):
    """Shared output buffering: frames are appended, written once per iteration."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.transport: asyncio.Transport | None = None
        self.out: list[bytes] = []
        self.dirty = False
        self.closed = False
        self.peername = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peername = f"{peer[0]}:{peer[1]}"

    def push(self, data: bytes) -> None:
        self.out.append(data)
        if not self.dirty:
            self.dirty = True
            self.replica._dirty.append(self)

    def write_out(self) -> None:
        self.dirty = False
        out = self.out
        if not out:
            return
        self.out = []
        t = self.transport
        if t is None or self.closed:
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()


class PeerConn(_Conn):
    """One TCP stream to a peer. The lower id dials; the dialer's first frame
    is HELLO naming it."""

    def __init__(self, replica: Replica, peer: int | None) -> None:
        super().__init__(replica)
        self.peer = peer  # None until an accepted connection says HELLO
        self.dialed = peer is not None
        self.reader = wire.FrameReader(replica.config.max_frame)
        self.assembler = wire.NewLeaderAssembler()
        self.lost = asyncio.get_running_loop().create_future()
        self.last_rx = self.last_tx = time.monotonic()

    def write_out(self) -> None:
        if self.out:
            self.last_tx = time.monotonic()
        super().write_out()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.dialed:
            assert self.transport is not None and self.peer is not None
            self.transport.write(_frame((wire.TAG_HELLO, wire.WIRE_VERSION, self.replica.id)))
            self.replica._peer_up(self)

    def data_received(self, data: bytes) -> None:
        replica = self.replica
        self.last_rx = time.monotonic()
        try:
            bodies = self.reader.feed(data)
            for body in bodies:
                if self.closed:
                    break
                replica._on_peer_frame(self, body)
        except zx.CounterOverflow as exc:
            replica._die(exc)
            return
        except wire.FrameError as exc:
            replica.log.error(
                "peer frame rejected; closing connection", peer=self.peer, addr=self.peername, error=str(exc)
            )
            self.abort()
        replica._kick()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reader.buffered and not self.closed:
            self.replica.log.error(
                "peer connection closed mid-frame (truncated frame)",
                peer=self.peer,
                addr=self.peername,
                buffered=self.reader.buffered,
            )
        self.closed = True
        if not self.lost.done():
            self.lost.set_result(None)
        self.replica._peer_down(self)


class Slot:
    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: bytes | None = None


class ClientConn(_Conn):
    """A client connection: many requests in flight, answered in order."""

    def __init__(self, replica: Replica) -> None:
        super().__init__(replica)
        self.reader = wire.FrameReader(replica.config.max_frame, use_list=True)
        self.slots: deque[Slot] = deque()
        self.paused = False
        self.watch_id: int | None = None
        self.watch_next = 0  # first zxid the watcher has not been sent

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.replica._clients.add(self)

    def data_received(self, data: bytes) -> None:
        replica = self.replica
        try:
            bodies = self.reader.feed(data)
        except wire.FrameError as exc:
            replica.log.error("client frame rejected; closing connection", addr=self.peername, error=str(exc))
            self.abort()
            return
        for body in bodies:
            if self.closed:
                break
            replica._on_client_request(self, body)
        if len(self.slots) > MAX_OUTSTANDING and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        replica._kick()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reader.buffered and not self.closed:
            self.replica.log.error(
                "client connection closed mid-frame (truncated frame)",
                addr=self.peername,
                buffered=self.reader.buffered,
            )
        self.closed = True
        self.slots.clear()
        self.replica._clients.discard(self)
        self.replica._watchers.discard(self)

    def new_slot(self) -> Slot:
        slot = Slot()
        self.slots.append(slot)
        return slot

    def complete(self, slot: Slot, body: dict[str, Any]) -> None:
        self.complete_frame(slot, _frame(body))

    def complete_frame(self, slot: Slot, data: bytes) -> None:
        if self.closed:
            return
        slot.data = data
        slots = self.slots
        if slots and slots[0] is slot:
            while slots and slots[0].data is not None:
                ready = slots.popleft().data
                assert ready is not None
                self.push(ready)
            if self.paused and len(slots) <= MAX_OUTSTANDING // 2 and self.transport is not None:
                self.paused = False
                self.transport.resume_reading()


# A proposal waiting for its commit: (zxid, client conn | forwarding peer id, slot | fwd id, request id)
_Pending = tuple[int, "ClientConn | int", "Slot | int", int]


class Replica:
    def __init__(
        self,
        config: ServerConfig,
        storage: Storage,
        state_machine: StateMachine | None = None,
    ) -> None:
        self.config = config
        self.id = config.id
        self.storage = storage
        self.state_machine: StateMachine = state_machine or NullStateMachine()
        self.peer_ids = config.peer_ids
        self.node = Node(config.id, self.peer_ids, config.seed, SERVER)
        self.tick_s = config.tick_ms / 1000.0
        self.log = get_logger("zabd.server")
        set_context(self._log_context)

        self.ext = Durable(self)  # recovery, snapshots, sync plans, KV (zabd/server/durable.py)
        state = storage.load()
        if state.history or state.current_epoch or state.accepted_epoch:
            self.node.restore(
                current_epoch=state.current_epoch,
                accepted_epoch=state.accepted_epoch,
                epoch_leader=state.epoch_leader,
                history=state.history,
                last_committed=state.last_committed,
            )
        self._applied = self.ext.recover(state)  # highest zxid delivered to the state machine / clients
        self._applied_idx = 0  # its position in _applied_list
        self._applied_list: list[Txn] = []
        self._role = (0, 0, 0, 0)  # role, leader, epoch, phase as last announced and executed
        self._started = time.monotonic()

        self._conns: dict[int, PeerConn] = {}
        self._clients: set[ClientConn] = set()
        self._watchers: set[ClientConn] = set()
        self._dirty: list[_Conn] = []
        self._scheduled = False
        # persist-before-speak bookkeeping
        self._wseq = 0  # persist effects handed to storage
        self._fseq = 0  # persist effects known durable
        self._held: deque[tuple[int, Effect]] = deque()
        self._flush_wanted: asyncio.Event | None = None
        self._inline_flush = type(storage) is MemoryStorage
        # client proposals
        self._pending: deque[_Pending] = deque()  # leader: waiting for CommitTo, zxid order
        self._admit: deque[tuple[bytes, ClientConn | int, Slot | int, int]] = deque()  # leader: not yet proposed
        self.max_inflight = config.max_inflight
        self._fwd_next = 0
        self._fwd: dict[int, tuple[ClientConn, Slot, int]] = {}  # follower: forwarded, unanswered
        self._fwd_done: deque[tuple[int, ClientConn, Slot, int]] = deque()  # committed at leader, not yet here

        self._tasks: list[asyncio.Task[None]] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._ticking = False
        self._tick_handle: asyncio.TimerHandle | None = None
        self._ping_s = config.peer_ping_ms / 1000.0
        self._silence_s = config.peer_silence_ms / 1000.0
        self._links_checked = 0.0
        self._stopping = False
        self._stopped: asyncio.Event | None = None
        self.fatal: BaseException | None = None
        self._gc_ns = 0
        self._gc_t0 = 0
        gc.callbacks.append(self._gc_timer)

    def _gc_timer(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter_ns()
        else:
            self._gc_ns += time.perf_counter_ns() - self._gc_t0

    # ------------------------------------------------------------------ misc

    def _log_context(self) -> dict[str, Any]:
        node = self.node
        return {
            "node": self.id,
            "role": ROLE_NAMES[node.role],
            "epoch": node.current_epoch,
            "zxid": zx.fmt(node.last_zxid()),
        }

    def now(self) -> int:
        return int(time.monotonic() * 1000.0 // self.config.tick_ms)

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._flush_wanted = asyncio.Event()
        self._stopped = asyncio.Event()
        self.ext.started()
        host, port = self.config.peer_addr(self.id)
        self._servers.append(await loop.create_server(lambda: PeerConn(self, None), host, port, reuse_address=True))
        chost, cport = self.config.client_addr
        self._servers.append(await loop.create_server(lambda: ClientConn(self), chost, cport, reuse_address=True))
        self._tasks.append(asyncio.create_task(self._flusher(), name="flusher"))
        for peer in self.peer_ids:
            if peer > self.id:
                self._tasks.append(asyncio.create_task(self._dialer(peer), name=f"dial-{peer}"))
        self._tasks.append(asyncio.create_task(self._start_ticking(), name="grace"))
        self._tasks.append(asyncio.create_task(self._gc_freezer(), name="gc"))
        self.log.info(
            "server started",
            peer_port=f"{host}:{port}",
            client_port=f"{chost}:{cport}",
            peers=self.config.peers,
            storage=self.config.storage,
            tick_ms=self.config.tick_ms,
        )

    async def _gc_freezer(self) -> None:
        # The history is a long list of Txn NamedTuples, which the cyclic GC
        # never untracks (only exact tuples are), so every full collection
        # walked all of it: over half of a follower's CPU at 12k commits/s.
        # Collect the young generations, then move the survivors to the
        # permanent generation, where collections no longer visit them. The
        # history has no reference cycles; a cycle that lives through a young
        # collection and then becomes garbage is kept (rare, small).
        while True:
            await asyncio.sleep(0.25)
            gc.collect(1)
            gc.freeze()

    async def _start_ticking(self) -> None:
        # Give the links a moment to come up: an election started before any
        # peer is connected loses every vote and waits a full timeout.
        deadline = time.monotonic() + self.config.connect_grace_ms / 1000.0
        while time.monotonic() < deadline and len(self._conns) < len(self.peer_ids):
            await asyncio.sleep(0.01)
        self._ticking = True
        self._on_tick_timer()

    def _on_tick_timer(self) -> None:
        if self._stopping:
            return
        t = self.now()
        self._tick(t)
        if self.fatal is not None:
            return
        mono = time.monotonic()
        if mono >= self._links_checked + self._ping_s / 2:
            self._links_checked = mono
            self._keep_links(mono)
        loop = asyncio.get_running_loop()
        next_at = (t + 1) * self.config.tick_ms / 1000.0
        self._tick_handle = loop.call_at(loop.time() + max(0.0, next_at - time.monotonic()), self._on_tick_timer)

    def _tick(self, t: int) -> None:
        node = self.node
        if t >= node.wake:
            try:
                node.on_tick(t)
            except zx.CounterOverflow as exc:
                self._die(exc)
                return
            if node.effects:
                self._kick()

    def _keep_links(self, mono: float) -> None:
        """Ping idle peer links; close silent ones (see ``peer_silence_ms``)."""
        for conn in list(self._conns.values()):
            if conn.closed:
                continue
            if mono - conn.last_rx > self._silence_s:
                self.log.warning(
                    "peer link silent; closing it to redial",
                    peer=conn.peer,
                    addr=conn.peername,
                    silent_ms=round((mono - conn.last_rx) * 1000),
                )
                conn.abort()
            elif mono - conn.last_tx >= self._ping_s and not conn.out:
                conn.push(_PING)
        self._write_all()

    async def wait_stopped(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    async def shutdown(self) -> None:
        """Stop accepting, let what is in progress reach storage, flush, close."""
        if self._stopping:
            return
        self._stopping = True
        self.log.info("shutting down")
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        for srv in self._servers:
            srv.close()
        # Carry out what the core already decided, then make it durable.
        if self.fatal is None:
            with contextlib.suppress(Exception):
                self._process()
        with contextlib.suppress(Exception):
            while self._fseq < self._wseq:
                target = self._wseq
                await self.storage.flush()
                self._fseq = target
                self._release()
        self._fail_all(schema.LEADER_LOST, "server shutting down; the outcome is unknown")
        self._write_all()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for conn in list(self._conns.values()):
            if conn.transport is not None:
                conn.transport.close()
        for client in list(self._clients):
            if client.transport is not None:
                client.transport.close()
        for srv in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 1.0)
        self.ext.close()
        self.storage.close()
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._gc_timer)
        self.log.info("stopped")
        assert self._stopped is not None
        self._stopped.set()

    def _die(self, exc: BaseException) -> None:
        if self.fatal is not None or self._stopping:
            return
        self.log.error("fatal error; stopping", error=f"{type(exc).__name__}: {exc}")
        self.fatal = exc
        asyncio.get_running_loop().create_task(self.shutdown())

    # ------------------------------------------------------- effect pipeline

    def _kick(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._process)

    def _process(self) -> None:
        self._scheduled = False
        effects = self.node.take_effects()
        try:
            if effects:
                self._apply(effects)
            self._write_all()
        except Exception as exc:
            # An effect half carried out leaves storage and the core out of
            # step: stop rather than go on with a state nobody decided.
            self.log.exception("error while carrying out effects")
            self._die(exc)

    def _apply(self, effects: list[Effect]) -> None:
        storage = self.storage
        held = self._held
        early_propose = self.config.leader_early_propose
        for e in effects:
            cls = type(e)
            if cls is AppendTxn:
                storage.append(e.txn)  # type: ignore[union-attr]
                self._wseq += 1
            elif cls is PersistEpochs:
                storage.persist_epochs(e.accepted_epoch, e.epoch_leader, e.current_epoch)  # type: ignore[union-attr]
                self._wseq += 1
            elif cls is ReplaceHistory:
                storage.replace_history(e.history)  # type: ignore[union-attr]
                self._wseq += 1
            elif held or self._wseq > self._fseq:
                if early_propose and not held and cls is Broadcast and type(e.msg) is Propose:  # type: ignore[union-attr]
                    # Opt-in (leader_early_propose). A proposal is not an
                    # acknowledgement: like ZooKeeper, the leader sends it while its own log write syncs, so the
                    # leader's and the followers' fsyncs overlap. What makes a
                    # commit visible (Commit, CommitTo: client answers) still
                    # waits for the leader's flush, and nothing emitted earlier
                    # is waiting (held is empty), so link order is unchanged.
                    self._execute(e)
                else:
                    held.append((self._wseq, e))
            else:
                self._execute(e)
        if self._wseq > self._fseq:
            if self._inline_flush:
                self._flush_now()
            elif self._flush_wanted is not None:
                self._flush_wanted.set()

    def _flush_now(self) -> None:
        # MemoryStorage.flush() never suspends: run it to completion here and
        # release what waited on it, instead of a hop through the flusher task
        # (one loop iteration and one more write per link per batch).
        target = self._wseq
        coro = self.storage.flush()
        try:
            coro.send(None)
        except StopIteration:
            self._fseq = target
            self._release()
            return
        coro.close()
        raise RuntimeError("an inline storage flush suspended")

    async def _flusher(self) -> None:
        assert self._flush_wanted is not None
        wanted = self._flush_wanted
        while True:
            await wanted.wait()
            wanted.clear()
            while self._fseq < self._wseq:
                target = self._wseq
                try:
                    await self.storage.flush()
                except Exception as exc:
                    # Nothing after this persist may be said: stop the node.
                    self._die(exc)
                    return
                self._fseq = target
                self._release()
                # effects the core emitted while we waited
                self._process()

    def _release(self) -> None:
        held = self._held
        fseq = self._fseq
        while held and held[0][0] <= fseq:
            self._execute(held.popleft()[1])

    def _execute(self, e: Effect) -> None:
        cls = type(e)
        if cls is Broadcast:
            msg = e.msg  # type: ignore[union-attr]
            if type(msg) is NewLeader:
                for peer in self.peer_ids:
                    self._send_core(peer, self.ext.new_leader_frames(peer, msg))
                return
            frames = [wire.encode_message(msg)]
            for peer in self.peer_ids:
                if type(msg) is LookForLeader:
                    self.ext.before_send(peer, msg)
                self._send_core(peer, frames)
        elif cls is Send:
            msg = e.msg  # type: ignore[union-attr]
            dst = e.dst  # type: ignore[union-attr]
            mcls = type(msg)
            if mcls is NewLeader:
                self._send_core(dst, self.ext.new_leader_frames(dst, cast(NewLeader, msg)))
            elif mcls is AckEpoch or mcls is AckLeader:
                self.ext.before_send(dst, msg)
                self._send_core(dst, [wire.encode_message(msg)])
                self.ext.after_send(dst, msg)
            else:
                self._send_core(dst, [wire.encode_message(msg)])
        elif cls is CommitTo:
            self._committed(e.zxid)  # type: ignore[union-attr]
        elif cls is RoleChanged:
            self._role_changed(e)  # type: ignore[arg-type]

    def _send_core(self, peer: int, frames: list[bytes]) -> None:
        conn = self._conns.get(peer)
        if conn is None or conn.closed:
            # The message is lost: the link counts as broken (spec section 5).
            self.node.link_failed(peer, self.now())
            return
        for f in frames:
            conn.push(f)

    def _send_extra(self, peer: int, data: bytes) -> bool:
        conn = self._conns.get(peer)
        if conn is None or conn.closed:
            return False
        conn.push(data)
        return True

    def _write_all(self) -> None:
        dirty = self._dirty
        if not dirty:
            return
        self._dirty = []
        limit = self.config.max_link_buffer
        for conn in dirty:
            conn.write_out()
            t = conn.transport
            if t is not None and not conn.closed and t.get_write_buffer_size() > limit:
                self.log.warning(
                    "connection write buffer over the limit; closing it",
                    addr=conn.peername,
                    peer=getattr(conn, "peer", None),
                    buffered=t.get_write_buffer_size(),
                )
                conn.abort()

    # ------------------------------------------------------------ peer links

    async def _dialer(self, peer: int) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.config.peer_addr(peer)
        backoff = BACKOFF_MIN
        while not self._stopping:
            conn = PeerConn(self, peer)
            try:
                await asyncio.wait_for(
                    loop.create_connection(lambda c=conn: c, host, port),  # type: ignore[misc]
                    self.config.peer_connect_timeout_ms / 1000.0,
                )
            except (OSError, TimeoutError):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            up_at = time.monotonic()
            await conn.lost
            if time.monotonic() - up_at > 1.0:
                backoff = BACKOFF_MIN
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _peer_up(self, conn: PeerConn) -> None:
        assert conn.peer is not None
        old = self._conns.get(conn.peer)
        self._conns[conn.peer] = conn
        if old is not None and old is not conn:
            old.abort()
            self.node.link_failed(conn.peer, self.now())
        self.log.info("peer connected", peer=conn.peer, addr=conn.peername)
        self.ext.peer_up(conn)
        if self._ticking:
            # A Looking node tells the peer its vote: a node cut off by a healed
            # partition rejoins now, not at its next election timeout.
            self.node.link_up(conn.peer, self.now())
            self._kick()

    def _peer_down(self, conn: PeerConn) -> None:
        peer = conn.peer
        if peer is None or self._conns.get(peer) is not conn:
            return
        del self._conns[peer]
        if self._stopping:
            return
        self.log.info("peer disconnected", peer=peer)
        t = self.now()
        lost_leader = self.node.leader == peer
        self.node.link_failed(peer, t)
        if lost_leader:
            self._fail_forwards("lost the connection to the leader; the outcome is unknown")
        if self._ticking and self.node.wake <= t:
            # A follower that lost its leader elects at its next tick (spec
            # v1.4): run it now rather than at the next timer.
            asyncio.get_running_loop().call_soon(self._tick_now)
        self._kick()

    def _tick_now(self) -> None:
        if not self._stopping:
            self._tick(self.now())

    def _on_peer_frame(self, conn: PeerConn, body: Any) -> None:
        peer = conn.peer
        if peer is None:
            if (
                type(body) is tuple
                and len(body) == 3
                and body[0] == wire.TAG_HELLO
                and body[1] == wire.WIRE_VERSION
                and type(body[2]) is int
                and body[2] in self.peer_ids
                and body[2] < self.id
            ):
                conn.peer = body[2]
                self._peer_up(conn)
                return
            raise wire.FrameError(f"expected HELLO from a lower-id peer, got {wire._short(body)}")
        if type(body) is not tuple or not body or type(body[0]) is not int:
            raise wire.FrameError(f"peer frame is not a tagged array: {wire._short(body)}")
        tag = body[0]
        if tag < 64:
            msg = wire.decode_message(body)
            self.node.on_message(peer, msg, self.now())
        elif tag == wire.TAG_PING:
            return  # data_received noted the link alive
        elif tag == wire.TAG_NEWLEADER_PART:
            nl = conn.assembler.add(body)
            if nl is not None:
                self.node.on_message(peer, nl, self.now())
        elif tag == wire.TAG_FORWARD:
            if len(body) != 3 or not wire._u64(body[1]) or type(body[2]) is not bytes:
                raise wire.FrameError(f"malformed FORWARD frame {wire._short(body)}")
            self._on_forward(peer, body[1], body[2])
        elif tag == wire.TAG_FORWARD_OK:
            if len(body) != 3 or not wire._u64(body[1]) or not wire._u64(body[2]):
                raise wire.FrameError(f"malformed FORWARD_OK frame {wire._short(body)}")
            self._on_forward_ok(body[1], body[2])
        elif tag == wire.TAG_FORWARD_ERR:
            if len(body) != 4 or not wire._u64(body[1]) or type(body[2]) is not str or type(body[3]) is not str:
                raise wire.FrameError(f"malformed FORWARD_ERR frame {wire._short(body)}")
            self._on_forward_err(body[1], body[2], body[3])
        elif not self.ext.on_frame(conn, peer, tag, body):
            raise wire.FrameError(f"unknown peer frame tag {tag}")

    # ------------------------------------------------------- commits / roles

    def _committed(self, z: int) -> None:
        self.storage.commit_to(z)
        applied = self._applied
        if z <= applied:
            return
        history = self.node.history
        # The history list only grows until a NewLeader replaces it: keep the
        # applied position instead of a bisect (with a Python key) per commit.
        i = self._applied_idx
        if history is not self._applied_list or i > len(history) or (i and history[i - 1].zxid != applied):
            i = bisect_right(history, applied, key=_zxid_key)
            self._applied_list = history
        j = i
        n = len(history)
        while j < n and history[j].zxid <= z:
            j += 1
        new = history[i:j]
        self._applied_idx = j
        self._applied = z
        sm = self.state_machine
        if type(sm) is not NullStateMachine:
            for txn in new:
                sm.apply(txn)
        pending = self._pending
        while pending and pending[0][0] <= z:
            pz, target, slot, rid = pending.popleft()
            if type(target) is int:
                self._send_extra(target, _frame((wire.TAG_FORWARD_OK, slot, pz)))
            else:
                target.complete_frame(slot, wire.ok_zxid_frame(rid, pz))  # type: ignore[union-attr, arg-type]
        if self._admit:
            self._drain_admit()
        done = self._fwd_done
        while done and done[0][0] <= z:
            pz, conn, fslot, rid = done.popleft()
            conn.complete_frame(fslot, wire.ok_zxid_frame(rid, pz))
        if self._watchers and new:
            events = [(t.zxid, t.payload) for t in new]
            for w in list(self._watchers):
                self._watch_send(w, events)

    def _role_changed(self, e: RoleChanged) -> None:
        old_role, old_leader, old_epoch, old_phase = self._role
        self._role = (e.role, e.leader, e.epoch, e.phase)
        self.log.info(
            "role changed",
            new_role=ROLE_NAMES[e.role],
            leader=e.leader,
            phase=PHASE_NAMES[e.phase],
            epoch=e.epoch,
        )
        was_serving = old_role == LEADING and old_phase == PHASE_BROADCAST
        if was_serving and (e.role != LEADING or e.epoch != old_epoch or e.phase != PHASE_BROADCAST):
            self._fail_pending(schema.LEADER_LOST, "leadership lost before the commit; the outcome is unknown")
        if old_role == FOLLOWING and (e.role != FOLLOWING or e.leader != old_leader):
            self._fail_forwards("the leader changed before the commit; the outcome is unknown")

    def _fail_pending(self, code: str, message: str) -> None:
        pending = self._pending
        self._pending = deque()
        for _, target, slot, rid in pending:
            self._refuse(target, slot, rid, code, message)
        # queued in front of the core, never proposed: safe to retry
        admit = self._admit
        self._admit = deque()
        for _, target, slot, rid in admit:
            self._refuse(target, slot, rid, schema.NO_LEADER, "leadership lost before this was proposed; retry")

    def _fail_forwards(self, message: str) -> None:
        fwd = self._fwd
        self._fwd = {}
        for conn, slot, rid in fwd.values():
            conn.complete(slot, schema.error_body(rid, schema.LEADER_LOST, message))
        # committed at the leader already: durable on a quorum, so a success
        done = self._fwd_done
        self._fwd_done = deque()
        for z, conn, slot, rid in done:
            conn.complete_frame(slot, wire.ok_zxid_frame(rid, z))

    def _fail_all(self, code: str, message: str) -> None:
        self._fail_pending(code, message)
        self._fail_forwards(message)

    # --------------------------------------------------------------- clients

    def _on_client_request(self, conn: ClientConn, body: Any) -> None:
        fast = schema.fast_propose(body)
        if fast is not None:
            self._client_propose(conn, fast[0], fast[1])
            return
        try:
            req = schema.REQUEST_ADAPTER.validate_python(body)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in err["loc"]) or "request"
            text = f"{where}: {err['msg']}"
            rid = body.get("id", 0) if isinstance(body, dict) else 0
            self.log.error("bad client request; closing connection", addr=conn.peername, error=text)
            slot = conn.new_slot()
            conn.complete(slot, schema.error_body(rid if isinstance(rid, int) else 0, schema.BAD_REQUEST, text))
            conn.write_out()
            conn.closed = True
            if conn.transport is not None:
                conn.transport.close()
            return
        if conn.watch_id is not None:
            slot = conn.new_slot()
            conn.complete(slot, schema.error_body(req.id, schema.BAD_REQUEST, "this connection is a watch stream"))
            return
        if isinstance(req, schema.ProposeRequest):
            self._client_propose(conn, req.id, req.payload)
        elif isinstance(req, schema.StatusRequest):
            slot = conn.new_slot()
            conn.complete(slot, {"v": 1, "id": req.id, "ok": True, "status": self.status()})
        elif isinstance(req, schema.ReadRequest):
            slot = conn.new_slot()
            txns = self.read(req.from_zxid, req.limit)
            conn.complete(slot, {"v": 1, "id": req.id, "ok": True, "txns": txns, "last_committed": self._applied})
        elif isinstance(req, schema.KV_REQUEST_TYPES):
            from zabd.server import kv_service

            kv_service.handle(self, conn, req)
        elif isinstance(req, schema.WatchRequest):
            if conn.slots:
                slot = conn.new_slot()
                conn.complete(
                    slot, schema.error_body(req.id, schema.BAD_REQUEST, "watch on a connection with requests in flight")
                )
                return
            conn.watch_id = req.id
            conn.watch_next = req.from_zxid
            self._watchers.add(conn)
            # backlog, page by page, then live events from _committed
            while not conn.closed:
                page = self.read(conn.watch_next, WATCH_PAGE)
                if not page:
                    break
                self._watch_send(conn, page)

    def _watch_send(self, conn: ClientConn, txns: list[tuple[int, bytes]]) -> None:
        if conn.closed or conn.watch_id is None:
            return
        start = bisect_left(txns, conn.watch_next, key=lambda t: t[0])
        if start >= len(txns):
            return
        if start:
            txns = txns[start:]
        conn.push(_frame({"v": 1, "id": conn.watch_id, "ok": True, "txns": txns}))
        conn.watch_next = txns[-1][0] + 1

    def _client_propose(self, conn: ClientConn, rid: int, payload: bytes) -> None:
        slot = conn.new_slot()
        if self._stopping:
            conn.complete(slot, schema.error_body(rid, schema.SHUTTING_DOWN, "server shutting down"))
            return
        node = self.node
        if node.role == LEADING:
            self._leader_propose(payload, conn, slot, rid)
            return
        leader = node.leader
        if node.role == FOLLOWING and leader in self._conns:
            self._fwd_next += 1
            fid = self._fwd_next
            self._fwd[fid] = (conn, slot, rid)
            self._send_extra(leader, _frame((wire.TAG_FORWARD, fid, payload)))
            return
        conn.complete(slot, schema.error_body(rid, schema.NO_LEADER, "no leader at the moment; retry", leader))

    def _on_forward(self, peer: int, fid: int, payload: bytes) -> None:
        self._leader_propose(payload, peer, fid, 0)

    def _leader_propose(self, payload: bytes, target: ClientConn | int, slot: Slot | int, rid: int) -> None:
        if self._admit or len(self._pending) >= self.max_inflight:
            self._admit.append((payload, target, slot, rid))
            return
        self._do_propose(payload, target, slot, rid)

    def _do_propose(self, payload: bytes, target: ClientConn | int, slot: Slot | int, rid: int) -> None:
        try:
            z = self.node.propose(payload, self.now())
        except NotLeader:
            self._refuse(target, slot, rid, schema.NO_LEADER, "the leader is not ready; retry")
            return
        self._pending.append((z, target, slot, rid))

    def _refuse(self, target: ClientConn | int, slot: Slot | int, rid: int, code: str, message: str) -> None:
        if type(target) is int:
            self._send_extra(target, _frame((wire.TAG_FORWARD_ERR, slot, code, message)))
        else:
            target.complete(slot, schema.error_body(rid, code, message))  # type: ignore[union-attr, arg-type]

    def _drain_admit(self) -> None:
        admit = self._admit
        if not admit:
            return
        room = self.max_inflight - len(self._pending)
        while admit and room > 0:
            self._do_propose(*admit.popleft())
            room -= 1
        self._kick()

    def _on_forward_ok(self, fid: int, z: int) -> None:
        entry = self._fwd.pop(fid, None)
        if entry is None:
            return
        conn, slot, rid = entry
        if z <= self._applied:
            conn.complete_frame(slot, wire.ok_zxid_frame(rid, z))
        else:
            # Answer once it is committed here too: a client that proposes
            # through this node then reads from it sees its own write.
            self._fwd_done.append((z, conn, slot, rid))

    def _on_forward_err(self, fid: int, code: str, message: str) -> None:
        entry = self._fwd.pop(fid, None)
        if entry is None:
            return
        conn, slot, rid = entry
        if code not in schema.RETRYABLE:
            code = schema.LEADER_LOST
        conn.complete(slot, schema.error_body(rid, code, message))

    # --------------------------------------------------------- reads, status

    def read(self, from_zxid: int, limit: int) -> list[tuple[int, bytes]]:
        history = self.node.history
        i = bisect_left(history, from_zxid, key=_zxid_key)
        j = bisect_right(history, self._applied, key=_zxid_key)
        j = min(j, i + limit)
        # Keep the answer well inside one frame: a client pages on with the
        # next zxid (at least one txn always fits: payloads fit in a frame).
        budget = self.config.max_frame // 2
        out: list[tuple[int, bytes]] = []
        for t in history[i:j]:
            budget -= len(t.payload) + 16
            if budget < 0 and out:
                break
            out.append((t.zxid, t.payload))
        return out

    def status(self) -> dict[str, Any]:
        node = self.node
        role, leader, _, phase = self._role
        return {
            "id": self.id,
            "role": ROLE_NAMES[role],
            "phase": PHASE_NAMES[phase],
            "leader": leader,
            "current_epoch": node.current_epoch,
            "accepted_epoch": node.accepted_epoch,
            "last_zxid": node.last_zxid(),
            "last_committed": self._applied,
            "peers": list(self.peer_ids),
            "peers_connected": sorted(self._conns),
            "storage": self.config.storage,
            "fsync": self.config.fsync,
            "client_connections": len(self._clients),
            "uptime_s": round(time.monotonic() - self._started, 3),
            "gc_ms": round(self._gc_ns / 1e6, 1),
            "gc_collections": [s["collections"] for s in gc.get_stats()],
            **self.ext.status(),
        }
