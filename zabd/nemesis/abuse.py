"""The abuse suite of issue 36 ("trust boundary"): what a client that does
not play by the rules can do to a server, side by side with ZooKeeper 3.8.

Every probe is bounded in count and time and reports what the server did,
the RSS of the server under attack (the leader) before, at its largest
during, and after the probe, and how a well-behaved client fared meanwhile:
its p99 against an idle run of the same client, and its errors
(``zabd.nemesis.abuse_target``). ``run_suite`` runs probes against a target;
``bench/abuse.py`` starts the targets and prints the table.

Probes (``ZooKeeper``: whether it runs against ZooKeeper too), and what is acceptable:

* **forged-propose** (a, zabd only): a raw ``propose`` of a ZooKeeper setData
  txn (version 2^40), of a KV-tagged and of a membership-tagged payload. All
  nodes up, nothing applied, each read back as a raw entry.
* **forged-acl** (b, zabd only): forged setData, setACL and delete txns for a
  znode only one digest user may touch. Its data and ACL unchanged on every replica.
* **log-read** (c, zabd only): a client without a token (ro with tokens)
  reads and watches the whole log. No ZooKeeper txn, no session password, digest or secret data.
* **hijack** (d): ConnectRequests carrying the victim's session id (any
  client reads it as an ephemeral's owner) with every password-like value the
  attacker can find (the log) or derive (ZooKeeper's ``Random(id ^ superSecret)``),
  to every node. No live session; the victim and its ephemeral still there.
* **conns-per-address** (e): thousands of connections from one address to
  each client port. At most ``maxClientCnxns`` (60) kept.
* **slow-readers** (f): 7 connections that never read pipeline getData of a
  ~1 MiB znode. Nothing crashes; the RSS and the well-behaved client say the rest.
* **stalled-frames** (g): hundreds of connections send most of a ~1 MiB frame
  and stall. All closed by the frame deadline (10 s by default on both).
* **churn** (h): rounds of connections opened and closed, and of closed
  half-frames. RSS after each round.
* **four-letter-words** (i): ruok srvr stat mntr conf envi cons wchs dirs isro,
  against ZooKeeper with its DEFAULT whitelist. As ZooKeeper's default: srvr only.
* **watch-acl** (j): a data, a persistent and a persistent-recursive watch on a
  node whose ACL then goes digest-only before it changes and is deleted. No
  event for it reaches the watcher (CVE-2024-23944).
* **tls-tokens** (k, zabd only, ``--tls``): ro reads no ZooKeeper txn and cannot
  propose; rw proposes and reads none; admin reads them; no or a wrong token,
  or no certificate on ZooKeeper's port, is refused.
* **sasl** (l): SASL DIGEST-MD5 password guessing on ZooKeeper's port, one
  session reconnecting after each AUTH_FAILED, mixed with oversized tokens,
  second challenges, null tokens and a replayed response; then a name not in
  the JAAS file with the real user's password right after the real user got
  in (ZooKeeper 3.8's ZOOKEEPER-4839). No guess, replay or stranger gets in;
  every failure closes its connection; the real password still works.

A row's verdict is ``pass`` when the probe's outcome is acceptable, every
node is up, the attacked server's RSS is back within 10 % of where it was
before, and the well-behaved client had no error and a p99 within 3x its
idle one; otherwise it names what failed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import re
import secrets
import socket
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from zabd.client.client import Client, LogEntry, ZabdError
from zabd.kv.kinds import ZK
from zabd.kv.kvmachine import KV_MAGIC
from zabd.kv.store import encode_set
from zabd.nemesis.abuse_target import (
    SASL_USER,
    ClientRun,
    KazooClient,
    Log,
    MiB,
    RawZk,
    RssSampler,
    Target,
    ZabdTarget,
    ZkEnsemble,
    ZooKeeperTarget,
    closed_by_peer,
    count_closed,
    four_letter,
    held_by,
    jute_connect,
    kazoo_connected,
    listen_overflows,
    open_many,
    pump,
    quiet,
    rss_mib,
    run_async,
    settle_rss,
    stop_kazoo,
)
from zabd.protocol.membership import Membership
from zabd.protocol.membership import encode as encode_membership
from zabd.zk import jute
from zabd.zk import txn as zk_txn
from zabd.zk.records import AddWatch, GetData, Sasl, SaslResult, Sync
from zabd.zk.sasl import parse_directives, response_value
from zabd.zk.sessions import password_digest

WORDS = ("ruok", "srvr", "stat", "mntr", "conf", "envi", "cons", "wchs", "dirs", "isro")
# what ZooKeeper 3.8 answers to a word outside its whitelist
NOT_WHITELISTED = "is not executed because it is not in the whitelist"
# ZooKeeperServer.superSecret: a session's password is new Random(id ^ this).nextBytes(16)
ZK_SUPER_SECRET = 0xB3415C00
DIGEST_USER = ("abuse", "s3cret-abuse")
RSS_TOLERANCE = 0.10
P99_FACTOR = 3.0


@dataclass
class Params:
    """Counts and times of the probes (the bench's defaults; ``cheap`` for the test run)."""

    idle_s: float = 6.0  # the well-behaved client alone, before the probes
    settle_s: float = 10.0  # at most, for RSS to come back after a probe
    conns: int = 5000  # conns-per-address, on each port
    conns_settle_s: float = 2.0  # before counting what the server kept (under its 10 s frame deadline)
    slow_readers: int = 7
    slow_requests: int = 100  # getData pipelined by each
    big: int = MiB - 4096  # the znode they read: ~1 MiB, under jute.maxbuffer with its request
    slow_hold_s: float = 8.0
    stalled: int = 300
    stalled_frame: int = 1_000_000  # the length announced (under both servers' 1 MiB limits)
    stalled_sent: int = 900_000  # of which sent before the stall
    stalled_grace_s: float = 5.0  # waited past the deadline before counting what is still open
    churn_rounds: int = 3
    churn_conns: int = 2500
    half_rounds: int = 3
    half_frames: int = 100
    hijack_candidates: int = 300  # password-like values tried, at most
    watch_wait_s: float = 2.0
    sasl_tries: int = 1000  # SASL exchanges an attacker tries
    sasl_s: float = 60.0  # and for at most this long

    @classmethod
    def cheap(cls) -> Params:
        return cls(idle_s=1.5, settle_s=3.0, conns=200, conns_settle_s=0.5, slow_readers=3, slow_requests=10,
                   big=64 << 10, slow_hold_s=1.0, stalled=20, stalled_frame=200_000, stalled_sent=150_000,
                   stalled_grace_s=3.0, churn_rounds=1, churn_conns=100, half_rounds=1, half_frames=10,
                   hijack_candidates=50, watch_wait_s=1.0, sasl_tries=40, sasl_s=20.0)


@dataclass
class Outcome:
    """What a probe saw: ``did`` one line; ``ok`` its own acceptance
    (nothing forged, crashed, read, hijacked...); ``details`` for --json."""

    did: str
    ok: bool
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    probe: str
    target: str
    applies: bool
    did: str = ""
    ok: bool | None = None
    up: bool | None = None
    rss_before: float | None = None
    rss_during: float | None = None
    rss_after: float | None = None
    client: dict[str, Any] | None = None
    idle_p99_ms: float | None = None
    seconds: float = 0.0
    verdict: str = "n/a"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Probe:
    name: str
    letter: str
    zookeeper: bool  # runs against ZooKeeper too
    run: Callable[[Target, Params, Log], Outcome]
    tls: bool = False  # one of those re-run on a TLS cluster with tokens (--tls)
    only_tls: bool = False  # needs that cluster


def _fmt(n: int) -> str:
    return f"{n:,}"


def _zabd(t: Target) -> ZabdTarget:
    assert isinstance(t, ZabdTarget), "a zabd-only probe"
    return t


def _now_ms() -> int:
    return int(time.time() * 1000)


def _addr(a: tuple[str, int]) -> str:
    return f"{a[0]}:{a[1]}"


def _synced_get(zk: KazooClient, path: str) -> tuple[bytes, Any]:
    zk.sync(path)
    data, stat = zk.get(path)
    return bytes(data or b""), stat


async def _read_log(t: ZabdTarget, role: str | None, node: int) -> tuple[list[LogEntry], bytes]:
    async with await t.client(node, role) as c:
        entries = await c.read_all(0)
    return entries, b"".join(e.payload for e in entries)


# --------------------------------------------------------------- a. propose


def forged_propose(t: Target, p: Params, log: Log) -> Outcome:
    z = _zabd(t)
    path, key = "/abuse-forged", "abuse-forged"
    owner = z.kazoo(z.victim)
    try:
        if owner.exists(path) is None:
            owner.create(path, b"original")
        before, stat0 = _synced_get(owner, path)
    finally:
        stop_kazoo(owner)
    forged = {
        "zk setData v2^40": zk_txn.encode(zk_txn.T_SET_DATA, _now_ms(), 0, path, b"forged", 2**40),
        "kv put": KV_MAGIC + encode_set(key, b"forged", 1),
        "membership {1}": encode_membership(Membership(frozenset({1}), frozenset())),
    }

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {"proposed": {}, "kinds": {}, "kv": None, "voters": {}}
        async with await z.client(z.victim, "rw") as c:
            for name, payload in forged.items():
                try:
                    out["proposed"][name] = await c.propose(payload)
                except ZabdError as exc:
                    out["proposed"][name] = f"refused: {exc.code}"
            zxids = [v for v in out["proposed"].values() if isinstance(v, int)]
            if zxids:
                back = {e.zxid: e for e in await c.read(min(zxids), limit=1000)}
                for name, zx in out["proposed"].items():
                    e = back.get(zx) if isinstance(zx, int) else None
                    out["kinds"][name] = None if e is None else [e.kind, e.payload == forged[name]]
            await c.sync()
            out["kv"] = (await c.get(key)).value
        for i in range(1, z.n + 1):
            st = await z.c.status(i)
            out["voters"][i] = st["membership"]["voters"] if st else None
        return out

    got = run_async(go())
    after = {}
    for i in range(1, z.n + 1):
        zk = z.kazoo(i)
        try:
            data, stat = _synced_get(zk, path)
            after[i] = [data.decode(errors="replace"), stat.version]
        finally:
            stop_kazoo(zk)
    committed = sum(isinstance(v, int) for v in got["proposed"].values())
    raw = sum(1 for k in got["kinds"].values() if k == ["raw", True])
    unchanged = all(v == [before.decode(), stat0.version] for v in after.values())
    members_same = all(v == [1, 2, 3] for v in got["voters"].values())
    applied = [name for name, ok in (("znode", not unchanged), ("kv key", got["kv"] is not None),
                                     ("membership", not members_same)) if ok]
    ok = not applied and raw == committed and not z.dead()
    did = (f"committed {committed} of {len(forged)}, read back {raw} as raw; "
           + (f"APPLIED: {', '.join(applied)}" if applied else "nothing applied"))
    return Outcome(did, ok, {**got, "znode_after": after, "znode_before": [before.decode(), stat0.version]})


# ------------------------------------------------------------------ b. acl


def forged_acl(t: Target, p: Params, log: Log) -> Outcome:
    z = _zabd(t)
    path = f"/abuse-acl-{secrets.token_hex(3)}"
    acl = [make_digest_acl(*DIGEST_USER, all=True)]
    owner = z.kazoo(z.victim, auth=DIGEST_USER)
    try:
        owner.create(path, b"secret-v1", acl=acl)
        _, stat0 = _synced_get(owner, path)
        acl0, _ = owner.get_acls(path)
    finally:
        stop_kazoo(owner)
    world = [[31, "world", "anyone"]]
    forged = {
        "setData": zk_txn.encode(zk_txn.T_SET_DATA, _now_ms(), 0, path, b"forged", stat0.version + 1),
        "setData v2^40": zk_txn.encode(zk_txn.T_SET_DATA, _now_ms(), 0, path, b"forged", 2**40),
        "setACL world": zk_txn.encode(zk_txn.T_SET_ACL, _now_ms(), 0, path, world, stat0.aversion + 1),
        "delete": zk_txn.encode(zk_txn.T_DELETE, _now_ms(), 0, path),
    }

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with await z.client(z.victim, "rw") as c:
            for name, payload in forged.items():
                try:
                    out[name] = await c.propose(payload)
                except ZabdError as exc:
                    out[name] = f"refused: {exc.code}"
        return out

    proposed = run_async(go())
    replicas: dict[int, Any] = {}
    for i in range(1, z.n + 1):
        zk = z.kazoo(i, auth=DIGEST_USER)
        anon = z.kazoo(i)
        try:
            data, stat = _synced_get(zk, path)
            acl_now, _ = zk.get_acls(path)
            try:
                anon.get(path)
                anon_read = "READ"
            except NoAuthError:
                anon_read = "NoAuth"
            replicas[i] = {"data": data.decode(errors="replace"), "version": stat.version,
                           "acl_same": list(acl_now) == list(acl0), "anonymous": anon_read}
        except NoNodeError:
            replicas[i] = {"data": None, "version": None, "acl_same": False, "anonymous": "gone"}
        finally:
            stop_kazoo(zk)
            stop_kazoo(anon)
    intact = all(r["data"] == "secret-v1" and r["version"] == stat0.version and r["acl_same"]
                 and r["anonymous"] == "NoAuth" for r in replicas.values())
    committed = sum(isinstance(v, int) for v in proposed.values())
    did = (f"committed {committed} of {len(forged)} forged txns as raw; on all 3 replicas "
           + ("data, version and ACL unchanged" if intact else "the znode CHANGED"))
    return Outcome(did, intact and not z.dead(), {"proposed": proposed, "replicas": replicas})


# ---------------------------------------------------------------- c. read


def _secrets_made(z: ZabdTarget) -> tuple[list[KazooClient], dict[str, bytes]]:
    """Sessions on every node and a digest-only znode with secret data: what must not leak."""
    marker = f"TOP-SECRET-{secrets.token_hex(8)}".encode()
    sessions = [z.kazoo(i) for i in range(1, z.n + 1)]
    owner = z.kazoo(z.victim, auth=DIGEST_USER)
    sessions.append(owner)
    owner.create(f"/abuse-secret-{secrets.token_hex(3)}", marker, acl=[make_digest_acl(*DIGEST_USER, all=True)])
    owner.sync("/")
    found: dict[str, bytes] = {"secret data": marker, "digest password": DIGEST_USER[1].encode()}
    for k, zk in enumerate(sessions):
        _, pw = zk.client_id
        found[f"password {k}"] = bytes(pw)
        found[f"password digest {k}"] = password_digest(bytes(pw))
    return sessions, found


def log_read(t: Target, p: Params, log: Log) -> Outcome:
    z = _zabd(t)
    sessions, hidden = _secrets_made(z)
    # with tokens the weakest identity that may read is ro; no token is refused outright
    role = "ro" if z.tokens else None
    try:
        async def go() -> dict[str, Any]:
            out: dict[str, Any] = {}
            if z.tokens:
                try:
                    async with await z.client(z.victim, None) as c:
                        await c.read(0, 10)
                    out["no token"] = "READ"
                except ZabdError as exc:
                    out["no token"] = f"refused: {exc.code}"
            async with await z.client(z.victim, role) as c:
                entries = await c.read_all(0)
                # the watch replays the same log: up to the last txn the read showed (3 s at most)
                last = entries[-1].zxid if entries else 0
                watched: list[LogEntry] = []
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(3.0):
                        async for e in c.watch(0):
                            watched.append(e)
                            if e.zxid >= last:
                                break
            out["entries"] = entries
            out["watched"] = watched
            if z.tokens:
                admin, _ = await _read_log(z, "admin", z.victim)
                out["admin zk txns"] = sum(e.kind == ZK for e in admin)
            return out

        got = run_async(go())
    finally:
        for zk in sessions:
            stop_kazoo(zk)
    entries: list[LogEntry] = got.pop("entries")
    watched: list[LogEntry] = got.pop("watched")
    blob = b"".join(e.payload for e in [*entries, *watched])
    kinds = collections.Counter(e.kind for e in entries)
    zk_seen = sum(e.kind == ZK for e in [*entries, *watched])
    leaked = sorted(name for name, value in hidden.items() if value in blob)
    ok = zk_seen == 0 and not leaked and got.get("no token", "refused").startswith("refused")
    who = "an ro token" if role else "no token"
    did = (f"{who} read {_fmt(len(entries))} txns ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}) "
           f"and watched {_fmt(len(watched))}: {zk_seen} ZooKeeper txns, "
           + (f"LEAKED: {', '.join(leaked)}" if leaked else "no password, digest or secret in the bytes"))
    return Outcome(did, ok, {**got, "kinds": dict(kinds), "bytes": len(blob), "leaked": leaked})


# -------------------------------------------------------------- d. hijack


def java_random_bytes(seed: int, n: int) -> bytes:
    """``new java.util.Random(seed).nextBytes(new byte[n])``: the 48-bit LCG."""
    mask = (1 << 48) - 1
    s = (seed ^ 0x5DEECE66D) & mask
    out = bytearray()
    while len(out) < n:
        s = (s * 0x5DEECE66D + 0xB) & mask
        r = s >> 16  # next(32)
        for _ in range(min(n - len(out), 4)):
            out.append(r & 0xFF)
            r >>= 8
    return bytes(out)


def zookeeper_password(session_id: int) -> bytes:
    """The password ZooKeeper 3.8 gives session ``session_id`` (ZooKeeperServer.generatePasswd)."""
    return java_random_bytes((session_id ^ ZK_SUPER_SECRET) & (2**64 - 1), 16)


def password_like(blob: bytes, limit: int) -> list[bytes]:
    """16- and 32-byte values an attacker would try from bytes it read: those
    behind a msgpack bin header of that length (how zabd's txns hold
    passwords and digests) and behind a jute length prefix of 16."""
    out: dict[bytes, None] = {}
    for head, n in ((b"\xc4\x10", 16), (b"\xc4\x20", 32), (b"\x00\x00\x00\x10", 16)):
        for m in re.finditer(re.escape(head), blob):
            v = blob[m.end():m.end() + n]
            if len(v) == n:
                out[v] = None
            if len(out) >= limit:
                return list(out)
    return list(out)


def hijack(t: Target, p: Params, log: Log) -> Outcome:
    victim_node = t.victim % t.n + 1  # the victim's session lives on a follower; the attacker tries every node
    victim = t.kazoo(victim_node)
    lock = f"/abuse-lock-{secrets.token_hex(3)}"
    details: dict[str, Any] = {}
    try:
        victim.create(lock, b"held", ephemeral=True)
        sid, real = victim.client_id
        # what any client learns: an ephemeral's owner is its session id
        spy = t.kazoo(t.victim)
        try:
            spy.sync(lock)
            stat = spy.exists(lock)
            owner = stat.ephemeralOwner if stat else 0
        finally:
            stop_kazoo(spy)
        candidates: dict[str, bytes] = {"zero": bytes(16), "java-derived": zookeeper_password(owner)}
        if isinstance(t, ZabdTarget):
            _, blob = run_async(_read_log(t, "ro" if t.tls else None, t.victim))
            for k, v in enumerate(password_like(blob, p.hijack_candidates)):
                candidates[f"log {k}"] = v
            details["log_bytes"] = len(blob)
        details["owner_is_session"] = owner == sid
        details["derived_is_password"] = candidates["java-derived"] == bytes(real)
        tries, live, refused, closed = 0, [], 0, 0
        sources = [f"127.0.5.{k}" for k in range(1, 21)]
        for i in range(1, t.n + 1):
            for name, pw in candidates.items():
                tries += 1
                try:
                    rz = RawZk(t.zk_addr(i), session=owner, password=pw, source=sources[tries % len(sources)])
                except OSError:
                    closed += 1
                    continue
                if rz.live:
                    live.append(f"{name}@{i}")
                elif rz.connected is not None:
                    refused += 1
                else:
                    closed += 1
                rz.close()  # never a closeSession: that would end the victim's session
        time.sleep(1.0)
        still = kazoo_connected(victim, 15.0)
        present = []
        for i in range(1, t.n + 1):
            zk = t.kazoo(i)
            try:
                zk.sync(lock)
                present.append(zk.exists(lock) is not None)
            finally:
                stop_kazoo(zk)
        try:
            victim.set(lock, b"still mine")  # the victim can still act on its lock
            acts = True
        except Exception as exc:  # whatever stops it, the victim lost its session's use
            acts = False
            details["victim_error"] = repr(exc)
        ok = not live and still and acts and all(present)
        details.update({"session": f"0x{sid:x}", "tries": tries, "live": live, "refused": refused,
                        "closed_without_answer": closed, "victim_connected": still, "ephemeral_on": present})
        how = ("the java-derived password" if any(x.startswith("java") for x in live) else "a found value")
        did = (f"{tries} tries on {t.n} nodes ({len(candidates)} passwords: zero, java-derived"
               + (f", {len(candidates) - 2} from the log" if isinstance(t, ZabdTarget) else "")
               + f"): {'HIJACKED by ' + how + ' on ' + str(len(live)) + ' connect(s)' if live else 'no live session'}"
               + f"; victim {'connected' if still else 'LOST'}, ephemeral on {sum(present)}/{t.n}")
        return Outcome(did, ok, details)
    finally:
        stop_kazoo(victim)


# --------------------------------------------------------- e. connections


def conns_per_address(t: Target, p: Params, log: Log) -> Outcome:
    parts, details, ok = [], {}, True
    pid = t.pid(t.victim)
    for k, (port, addr) in enumerate(t.attack_ports().items()):
        source = f"127.0.{10 + k}.2"
        drops = listen_overflows()
        opened = open_many(p.conns, addr, [source], timeout=60.0)
        if port.startswith("zookeeper"):
            # a session on each: a connection without one is closed at the frame deadline
            # (zabd's, and ZooKeeper's sessionless timeout), which is the stalled-frames probe's business
            pump([(s, jute_connect()) for s in opened.socks], timeout=10.0)
        time.sleep(p.conns_settle_s)
        # counted where the server holds them: the attacker's side also sees
        # as connected what waits in (or was dropped from) the listen backlog
        held, queued = held_by(pid, addr[1], source)
        seen_open = len(opened.socks) - count_closed(opened.socks)
        opened.close()
        details[port] = {"tried": p.conns, "connected": len(opened.socks), "held_by_server": held,
                         "in_accept_queue": queued, "open_as_the_client_sees": seen_open,
                         "reset_while_connecting": opened.failed, "errors": opened.errors,
                         "kernel_listen_overflows": listen_overflows() - drops}
        parts.append(f"{port}: held {_fmt(held)} of {_fmt(p.conns)}"
                     + (f" (+{_fmt(queued)} in its accept queue)" if queued else "")
                     + (f", {_fmt(opened.failed)} reset while connecting" if opened.failed else ""))
        ok = ok and held <= t.per_address
        time.sleep(0.5)  # the server's closes before the next port's count
    return Outcome("; ".join(parts), ok and not t.dead(), details)


# -------------------------------------------------------- f. slow readers


def slow_readers(t: Target, p: Params, log: Log) -> Outcome:
    path = "/abuse-big"
    zk = t.kazoo(t.victim)
    try:
        if zk.exists(path) is None:
            zk.create(path, b"x" * p.big)
        else:
            zk.set(path, b"x" * p.big)
    finally:
        stop_kazoo(zk)
    addr = t.zk_addr(t.victim)
    opened = open_many(p.slow_readers, addr, ["127.0.0.3"], rcvbuf=4096)
    requests = b"".join(jute.encode_request(x + 1, jute.OP_GET_DATA, GetData(path)) for x in range(p.slow_requests))
    sent = pump([(s, jute_connect() + requests) for s in opened.socks], timeout=10.0)
    queued: list[int] = []
    deadline = time.monotonic() + p.slow_hold_s
    while time.monotonic() < deadline:
        if isinstance(t, ZabdTarget):
            st = t.status(t.victim)
            if st:
                queued.append(st["client_limits"]["queued_bytes"])
        time.sleep(0.5)
    closed = count_closed(opened.socks)
    cut = None
    if isinstance(t, ZabdTarget):
        st = t.status(t.victim)
        cut = st["client_limits"]["cut"] if st else None
    opened.close()
    answers = p.slow_readers * p.slow_requests * p.big
    did = (f"{len(opened.socks)} readers asked {_fmt(p.slow_readers * p.slow_requests)} reads "
           f"({answers / MiB:,.0f} MiB of answers): {closed} closed by the server"
           + (f", at most {max(queued) / MiB:.1f} MiB queued, cut {cut or 'none'}" if queued else ""))
    return Outcome(did, not t.dead(), {"sent": sent, "closed": closed, "queued_bytes": queued, "cut": cut})


# ------------------------------------------------------ g. stalled frames


def stalled_frames(t: Target, p: Params, log: Log) -> Outcome:
    parts, details, ok = [], {}, True
    sources = [f"127.0.{20 + k}.{j}" for k in range(2) for j in range(1, 11)]
    for k, (port, addr) in enumerate(t.attack_ports().items()):
        mine = sources[k * 10:(k + 1) * 10]  # 10 addresses: each under the per-address limit
        cut_before = None
        if isinstance(t, ZabdTarget):
            st = t.status(t.victim)
            cut_before = dict(st["client_limits"]["cut"]) if st else {}
        drops = listen_overflows()
        opened = open_many(p.stalled, addr, mine)
        socks: list[socket.socket] = list(opened.socks)
        handshake_failed = 0
        if t.tls and isinstance(t, ZabdTarget):
            ctx = t.client_tls(cert=False)
            assert ctx is not None
            wrapped: list[socket.socket] = []
            for s in socks:
                s.setblocking(True)
                s.settimeout(5.0)
                try:
                    wrapped.append(ctx.wrap_socket(s))
                except (OSError, ssl.SSLError):
                    handshake_failed += 1
                    s.close()
            socks = wrapped
        frame = struct.pack(">I", p.stalled_frame) + b"\x81" * p.stalled_sent
        t0 = time.monotonic()
        sent = pump([(s, frame) for s in socks], timeout=30.0)
        pumped = time.monotonic()
        first_close: list[float | None] = [None] * len(socks)
        # ZooKeeper's ExpiryQueue rounds a deadline up to the next multiple of
        # its interval (the timeout itself): its close comes 1 to 2 timeouts late
        limit = t0 + 2 * t.frame_timeout_s + p.stalled_grace_s
        while time.monotonic() < limit:
            now = time.monotonic()
            for j, s in enumerate(socks):
                if first_close[j] is None and closed_by_peer(s):
                    first_close[j] = now - t0
            if all(c is not None for c in first_close):
                break
            time.sleep(0.1)
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()
        closes = [c for c in first_close if c is not None]
        early = sum(1 for c in closes if c < t.frame_timeout_s - 1.0)
        at_deadline = len(closes) - early
        still = len(socks) - len(closes)
        cut = None
        if isinstance(t, ZabdTarget):
            st = t.status(t.victim)
            now_cut = dict(st["client_limits"]["cut"]) if st else {}
            cut = {r: v - (cut_before or {}).get(r, 0) for r, v in now_cut.items() if v - (cut_before or {}).get(r, 0)}
        details[port] = {"connected": len(opened.socks), "tls_handshakes_failed": handshake_failed,
                         "bytes_sent": sum(sent), "closed_early": early, "closed_by_deadline": at_deadline,
                         "still_open": still, "refused_at_connect": opened.failed, "cut": cut,
                         "last_close_s": round(max(closes), 1) if closes else None,
                         "early_close_s": sorted(round(c, 2) for c in closes if c < t.frame_timeout_s - 1.0)[:20],
                         "pump_s": round(pumped - t0, 2), "kernel_listen_overflows": listen_overflows() - drops}
        last = f", the last {max(closes):.1f} s after the stall began" if closes else ""
        parts.append(f"{port}: closed {len(closes)} of {len(socks)} ({early} early, {at_deadline} at the "
                     f"{t.frame_timeout_s:g} s deadline{last}){', ' + str(still) + ' STILL OPEN' if still else ''}"
                     + (f", {handshake_failed} TLS refused" if handshake_failed else "")
                     + (f", cut {cut}" if cut else ""))
        ok = ok and still == 0
    return Outcome("; ".join(parts), ok and not t.dead(), details)


# ---------------------------------------------------------------- h. churn


def churn(t: Target, p: Params, log: Log) -> Outcome:
    pid = t.pid(t.victim)
    rounds: dict[str, list[float | None]] = {}
    sources = [f"127.0.30.{j}" for j in range(1, 51)]
    for port, addr in t.attack_ports().items():
        after: list[float | None] = []
        for _ in range(p.churn_rounds):
            for _ in range(p.churn_conns // 50):
                opened = open_many(50, addr, sources)
                opened.close()
            time.sleep(1.0)
            after.append(rss_mib(pid))
        for _ in range(p.half_rounds):
            opened = open_many(p.half_frames, addr, sources)
            pump([(s, struct.pack(">I", 1_000_000) + b"\x81" * 500_000) for s in opened.socks], timeout=20.0)
            opened.close()
            time.sleep(1.0)
            after.append(rss_mib(pid))
        rounds[port] = after
    mib = "; ".join(f"{port}: " + " ".join(f"{v:.0f}" if v is not None else "-" for v in vs)
                    for port, vs in rounds.items())
    did = (f"{p.churn_rounds}x{_fmt(p.churn_conns)} opened+closed, {p.half_rounds}x{p.half_frames} half-frames "
           f"closed, per port; RSS MiB after each round: {mib}")
    return Outcome(did, not t.dead(), {"rss_after_rounds": rounds})


# ------------------------------------------------------ i. four-letter words


def _answered(word: str, text: str) -> bool:
    return bool(text) and NOT_WHITELISTED not in text


def four_letter_words(t: Target, p: Params, log: Log) -> Outcome:
    """Against zabd: its ZooKeeper port. Against ZooKeeper: a standalone
    server of its own with the DEFAULT whitelist (the ensemble allows ``*``)."""
    standalone: ZkEnsemble | None = None
    if isinstance(t, ZooKeeperTarget):
        standalone = ZkEnsemble(1, t.base / "default-4lw", whitelist=None, heap="256m")
        standalone.start()
        addr = ("127.0.0.1", standalone.client_ports[1])
    else:
        addr = t.zk_addr(t.victim)
    try:
        answers = {w: four_letter(addr, w) for w in WORDS}
    finally:
        if standalone is not None:
            standalone.stop()
    shown = {w: {"first_line": (a.splitlines() or [""])[0][:80], "bytes": len(a), "answered": _answered(w, a)}
             for w, a in answers.items()}
    answered = [w for w in WORDS if shown[w]["answered"]]
    refused = [w for w in WORDS if NOT_WHITELISTED in answers[w]]
    silent = [w for w in WORDS if not answers[w]]
    # ZooKeeper 3.8's default whitelist is srvr alone
    ok = answered == ["srvr"]
    where = "standalone, default whitelist" if standalone else "ZooKeeper port"
    did = (f"({where}) answered {len(answered)} of {len(WORDS)}: {' '.join(answered) or '-'}"
           + (f"; {len(refused)} 'not in the whitelist'" if refused else "")
           + (f"; {len(silent)} closed silently" if silent else ""))
    return Outcome(did, ok, {"words": shown})


# ----------------------------------------------------------- j. watch-acl


WATCH_NAMES = {0: "None", 1: "NodeCreated", 2: "NodeDeleted", 3: "NodeDataChanged", 4: "NodeChildrenChanged"}


def watch_acl(t: Target, p: Params, log: Log) -> Outcome:
    owner_node = t.victim % t.n + 1
    owner = t.kazoo(owner_node, auth=DIGEST_USER)
    secret_acl = [make_digest_acl(*DIGEST_USER, all=True)]
    results: dict[str, Any] = {}
    leaks = []
    try:
        for kind in ("data", "persistent", "recursive"):
            base = f"/abuse-watch-{kind}-{secrets.token_hex(3)}"
            node = f"{base}/n"
            owner.create(base, b"", acl=OPEN_ACL_UNSAFE)
            owner.create(node, b"v0", acl=OPEN_ACL_UNSAFE)
            owner.sync(node)
            w = RawZk(t.zk_addr(t.victim), source="127.0.0.7")
            try:
                if not w.live:
                    raise ConnectionError("the watcher got no session")
                w.call(jute.OP_SYNC, Sync(node))  # the owner wrote through another server
                if kind == "data":
                    err, _ = w.call(jute.OP_GET_DATA, GetData(node, watch=True))
                elif kind == "persistent":
                    err, _ = w.call(jute.OP_ADD_WATCH, AddWatch(node, 0))
                else:
                    err, _ = w.call(jute.OP_ADD_WATCH, AddWatch(base, 1))
                control: list[tuple[int, int, str]] = []
                if kind != "data":  # the watch works while the node is world-readable
                    owner.set(node, b"v1")
                    control = [e for e in w.wait_events(p.watch_wait_s) if e[2] == node]
                    w.events.clear()
                owner.set_acls(node, secret_acl)
                owner.set(node, b"v2")
                owner.delete(node)
                owner.delete(base)
                got = [e for e in w.wait_events(p.watch_wait_s) if e[2] == node]
            finally:
                w.close()
            results[kind] = {"watch_err": err, "control": [(WATCH_NAMES.get(e[0], e[0]), e[2]) for e in control],
                             "after_acl": [(WATCH_NAMES.get(e[0], e[0]), e[2]) for e in got]}
            if got:
                leaks.append(f"{kind}: {'+'.join(str(WATCH_NAMES.get(e[0], e[0])) for e in got)}")
    finally:
        stop_kazoo(owner)
    did = ("after the ACL went digest-only: " + ("; ".join(f"DELIVERED {x}" for x in leaks) if leaks
                                                  else "nothing delivered to data, persistent or recursive watches")
           + "; before it: " + ", ".join(f"{k} {'+'.join(str(e[0]) for e in v['control']) or '-'}"
                                        for k, v in results.items() if k != "data"))
    return Outcome(did, not leaks, results)


# ------------------------------------------------------------ k. tls-tokens


def tls_tokens(t: Target, p: Params, log: Log) -> Outcome:
    z = _zabd(t)
    if not z.tls or not z.tokens:
        raise ValueError("needs a TLS cluster with tokens (ZabdTarget(tls=True))")
    zk = z.kazoo(z.victim)  # client1's certificate: rw on ZooKeeper's port
    try:
        zk.create(f"/abuse-tls-{secrets.token_hex(3)}", b"zk txn")
        zk.sync("/")
    finally:
        stop_kazoo(zk)

    async def role_checks() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for role in ("ro", "rw", "admin"):
            r: dict[str, Any] = {}
            async with await z.client(z.victim, role) as c:
                try:
                    r["propose"] = f"zxid {await c.propose(b'abuse ' + role.encode())}"
                except ZabdError as exc:
                    r["propose"] = f"refused: {exc.code}"
                entries = await c.read_all(0)
                r["zk_txns"] = sum(e.kind == ZK for e in entries)
                r["read"] = len(entries)
            out[role] = r
        for name, token in (("none", None), ("wrong", "wrong-token-0123456789")):
            try:
                c = await Client.connect(z.client_addr(z.victim), timeout=5, read_retry=0,
                                         tls=z.client_tls(False), token=token)
                try:
                    await c.read(0, 10)
                    out[name] = "READ"
                finally:
                    await c.close()
            except ZabdError as exc:
                out[name] = f"refused: {exc.code}"
        # ZooKeeper's port: tokens cannot travel there, so no certificate, no session
        try:
            rz = RawZk(z.zk_addr(z.victim), tls=z.client_tls(False), source="127.0.0.8")
            out["zk port without certificate"] = "SESSION" if rz.live else "refused"
            rz.close()
        except OSError:
            out["zk port without certificate"] = "refused"
        return out

    got = run_async(role_checks())
    ok = (got["ro"]["propose"].startswith("refused") and got["ro"]["zk_txns"] == 0
          and got["rw"]["propose"].startswith("zxid") and got["rw"]["zk_txns"] == 0
          and got["admin"]["zk_txns"] > 0 and got["none"].startswith("refused") and got["wrong"].startswith("refused")
          and got["zk port without certificate"] == "refused")
    did = (f"ro: propose {got['ro']['propose']}, {got['ro']['zk_txns']} zk txns read; "
           f"rw: propose ok, {got['rw']['zk_txns']} zk txns; admin: {got['admin']['zk_txns']} zk txns; "
           f"no token: {got['none']}; wrong: {got['wrong']}; zk port w/o cert: {got['zk port without certificate']}")
    return Outcome(did, ok, got)


# ------------------------------------------------------------------ l. SASL


def _sasl_response(challenge: bytes, user: str, password: str) -> bytes:
    nonce = parse_directives(challenge)["nonce"]
    uri = b"zookeeper/zk-sasl-md5"
    value = response_value(user, "zk-sasl-md5", password, nonce, b"abuse", None, uri, client=True)
    return (b'username="' + user.encode() + b'",realm="zk-sasl-md5",nonce="' + nonce + b'",cnonce="abuse",'
            b'nc=00000001,qop=auth,digest-uri="zookeeper/zk-sasl-md5",response=' + value)


def _sasl_step(raw: RawZk, token: bytes | None) -> tuple[str, bytes]:
    """("ok", the server's token), ("AUTH_FAILED", b"") or ("closed", b"")."""
    try:
        err, result = raw.call(jute.OP_SASL, Sasl(token))
    except (ConnectionError, TimeoutError, OSError):
        return "closed", b""
    if err:
        return ("AUTH_FAILED" if err == -115 else f"error {err}"), b""
    return "ok", (result.token or b"") if isinstance(result, SaslResult) else b""


def sasl_guessing(t: Target, p: Params, log: Log) -> Outcome:
    addr = t.zk_addr(t.victim)
    user, password = SASL_USER
    first = RawZk(addr)
    assert first.connected is not None, "no session"
    session, session_pw = first.connected[2], first.connected[3]
    first.close()
    counts: collections.Counter[str] = collections.Counter()
    got_in: list[str] = []  # what got in that should not have
    replay = b""
    deadline = time.monotonic() + p.sasl_s
    tries = 0
    while tries < p.sasl_tries and time.monotonic() < deadline:
        tries += 1
        raw = RawZk(addr, session, session_pw)  # the same session each time: only connections are spent
        try:
            if not raw.live:
                counts["session lost"] += 1
                break
            kind = ("guess", "guess", "guess", "oversized", "second challenge", "null", "replay")[tries % 7]
            step, challenge = _sasl_step(raw, b"")
            if step != "ok":
                counts[f"challenge {step}"] += 1
                continue
            if kind == "guess":
                token: bytes | None = _sasl_response(challenge, user, secrets.token_hex(6))
            elif kind == "oversized":
                token = b"a" * 65536
            elif kind == "second challenge":
                token = b""
            elif kind == "null":
                token = None
            else:
                token = replay or _sasl_response(challenge, user, "wrong")
            step, _ = _sasl_step(raw, token)
            replay = _sasl_response(challenge, user, password)  # right for this nonce only: replayed later
            counts[f"{kind}: {step}"] += 1
            if step == "ok":
                got_in.append(kind)
            elif not raw.closed_within(5.0):  # the server must close after a failure
                counts[f"{kind}: not closed"] += 1
        finally:
            raw.close()
    # the stranger right after the real user (ZooKeeper 3.8's callback handler keeps the last name)
    stranger = "ok?"
    real = "ok?"
    for who in (user, "nobody-" + secrets.token_hex(3)):
        raw = RawZk(addr, session, session_pw)
        try:
            step, challenge = _sasl_step(raw, b"")
            if step == "ok":
                step, _ = _sasl_step(raw, _sasl_response(challenge, who, password))
        finally:
            raw.close()
        if who == user:
            real = step
        else:
            stranger = step
            if step == "ok":
                got_in.append("an unknown user with another's password")
    not_closed = sum(v for k, v in counts.items() if k.endswith("not closed"))
    ok = not got_in and real == "ok" and not_closed == 0 and counts["session lost"] == 0 and not t.dead()
    did = (f"{tries} exchanges and a stranger, {len(got_in)} let in"
           f"{' (' + ', '.join(sorted(set(got_in))) + ')' if got_in else ''}; "
           f"{not_closed} failures left open; the real password: {real}; an unknown user with it: {stranger}")
    return Outcome(did, ok, {"counts": dict(counts), "got_in": got_in, "real": real, "stranger": stranger})


PROBES: dict[str, Probe] = {pr.name: pr for pr in (
    Probe("forged-propose", "a", False, forged_propose, tls=True),
    Probe("forged-acl", "b", False, forged_acl),
    Probe("log-read", "c", False, log_read, tls=True),
    Probe("hijack", "d", True, hijack),
    Probe("conns-per-address", "e", True, conns_per_address, tls=True),
    Probe("slow-readers", "f", True, slow_readers),
    Probe("stalled-frames", "g", True, stalled_frames, tls=True),
    Probe("churn", "h", True, churn),
    Probe("four-letter-words", "i", True, four_letter_words),
    Probe("watch-acl", "j", True, watch_acl),
    Probe("tls-tokens", "k", False, tls_tokens, tls=True, only_tls=True),
    Probe("sasl", "l", True, sasl_guessing),
)}


def select(names: str | None, tls: bool = False) -> list[Probe]:
    """Probes by name or letter, comma separated (None: all; with ``tls``: those re-run on a TLS cluster)."""
    if not names:
        chosen = [pr for pr in PROBES.values() if pr.tls or not tls]
        # on a TLS cluster the role checks come first: the others lean on them
        return sorted(chosen, key=lambda pr: pr.name != "tls-tokens") if tls else chosen
    by_letter = {pr.letter: pr for pr in PROBES.values()}
    out = []
    for x in (s.strip() for s in names.split(",") if s.strip()):
        pr = PROBES.get(x) or by_letter.get(x)
        if pr is None:
            raise ValueError(f"unknown probe {x!r}; expected one of {', '.join(PROBES)} (or a..l)")
        out.append(pr)
    return out


# ----------------------------------------------------------------- running


def idle_run(t: Target, p: Params) -> ClientRun:
    wb = t.well_behaved("idle")
    wb.open()
    try:
        wb.run_for(p.idle_s)  # a warm-up: the first ops pay for caches and JITs
        return wb.run_for(p.idle_s)
    finally:
        wb.close()


def run_probe(t: Target, probe: Probe, p: Params, idle: ClientRun, log: Log = quiet) -> Row:
    row = Row(probe.name, t.name, (probe.zookeeper or t.kind == "zabd") and (t.tls or not probe.only_tls))
    if not row.applies:
        row.did = "n/a (zabd only)" if t.kind != "zabd" else "n/a (a TLS cluster with tokens: --tls)"
        return row
    pid = t.pid(t.victim)
    row.idle_p99_ms = idle.p99_ms
    wb = t.well_behaved(probe.name)
    wb.open()
    t0 = time.monotonic()
    row.rss_before = rss_mib(pid)
    try:
        with RssSampler(pid) as sampler:
            wb.start()
            try:
                out = probe.run(t, p, log)
            except Exception as exc:  # a probe that could not finish is a row too, with what stopped it
                out = Outcome(f"PROBE FAILED: {type(exc).__name__}: {exc}"[:300], False, {"error": repr(exc)})
            finally:
                run = wb.stop()
        row.rss_during = sampler.peak
    finally:
        wb.close()
    row.rss_after = settle_rss(pid, row.rss_before, 0.5, p.settle_s, RSS_TOLERANCE)
    row.seconds = round(time.monotonic() - t0, 1)
    row.did, row.ok, row.details = out.did, out.ok, out.details
    row.client = run.to_json()
    row.up = t.up()
    row.verdict = verdict(row, run)
    log(f"  {probe.name}: {row.did} [{row.verdict}]")
    return row


def verdict(row: Row, run: ClientRun) -> str:
    fails = []
    if not row.ok:
        fails.append("outcome")
    if not row.up:
        fails.append("node down")
    if row.rss_before and row.rss_after and row.rss_after > row.rss_before * (1 + RSS_TOLERANCE):
        fails.append("rss")
    if not run.ok:
        fails.append("client errors" if run.errors else "client idle")
    if run.p99_ms is not None and row.idle_p99_ms and run.p99_ms > P99_FACTOR * row.idle_p99_ms:
        fails.append("p99")
    return "pass" if not fails else "FAIL: " + ", ".join(fails)


def run_suite(t: Target, probes: list[Probe], p: Params, log: Log = quiet) -> list[Row]:
    """Every probe against a started target, each with the well-behaved
    client and the RSS sampler; a target with a node down is restarted before
    the next probe (its row says so)."""
    idle = idle_run(t, p)
    log(f"{t.name}: idle well-behaved client: {idle.ops} ops, p99 {idle.p99_ms} ms")
    rows = []
    for probe in probes:
        row = run_probe(t, probe, p, idle, log)
        rows.append(row)
        if row.applies and not row.up:
            log(f"{t.name}: a node is down after {probe.name}; restarting the target")
            row.details["restarted"] = True
            t.stop()
            t.start()
    return rows


# ------------------------------------------------------------------ output


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def table(rows: list[Row]) -> str:
    """One line per probe per target, side by side (grouped by probe)."""
    head = ("probe", "target", "what the server did", "RSS MiB b/d/a", "client ok", "p99 ms probe/idle", "verdict")
    lines = []
    order = list(dict.fromkeys(r.probe for r in rows))
    for name in order:
        for r in (r for r in rows if r.probe == name):
            if not r.applies:
                lines.append((r.probe, r.target, r.did, "n/a", "n/a", "n/a", "n/a"))
                continue
            c = r.client or {}
            ok = "yes" if c.get("errors") == 0 and c.get("ops") else f"NO ({c.get('errors')} errors)"
            lines.append((r.probe, r.target, r.did, f"{_mib(r.rss_before)}/{_mib(r.rss_during)}/{_mib(r.rss_after)}",
                          ok, f"{_ms(c.get('p99_ms'))}/{_ms(r.idle_p99_ms)}", r.verdict))
    widths = [max(len(str(x[k])) for x in [head, *lines]) for k in range(len(head))]
    widths[2] = min(widths[2], 110)

    def fmt(x: tuple[str, ...]) -> list[str]:
        # a long "what the server did" wraps under its column
        did = str(x[2])
        chunks = [did[i:i + widths[2]] for i in range(0, len(did), widths[2])] or [""]
        out = [" | ".join([str(x[0]).ljust(widths[0]), str(x[1]).ljust(widths[1]), chunks[0].ljust(widths[2]),
                           *(str(x[k]).ljust(widths[k]) for k in range(3, len(x)))])]
        pad = " | ".join([" " * widths[0], " " * widths[1], "{}"])
        out += [pad.format(ch) for ch in chunks[1:]]
        return out

    sep = "-+-".join("-" * w for w in widths)
    text = [*fmt(head), sep]
    for x in lines:
        text += fmt(x)
    return "\n".join(text)


def to_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(asdict(r), default=_jsonable)) for r in rows]


def _jsonable(v: object) -> object:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, LogEntry):
        return {"zxid": v.zxid, "kind": v.kind}
    return repr(v)


def env_line() -> str:
    load = os.getloadavg()
    return f"host {os.uname().nodename}, {os.cpu_count()} cpus, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
