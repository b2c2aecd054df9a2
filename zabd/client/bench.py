"""``zabd bench``: closed-loop load generator.

C connections, each with W proposals outstanding. Everything runs in
callbacks on uvloop (no task or future per request); the requests issued
while handling one read leave in one write, and responses are decoded many
per read. Latency is client issue -> response, in an HdrHistogram (us).

    zabd bench --servers h:p,h:p --clients 8 --window 256 --payload 1024 --duration 10 [--json]
    zabd bench --spawn 3 [--storage memory | --no-fsync] ...   # starts and stops a local cluster (default: disk, fsync)
    zabd bench --spawn 3 --tls ...   # the same with TLS on both ports (certificates made in a temp dir)
    zabd bench --servers h:p --ca ca.pem --cert c.pem --key c.key [--token T] ...   # a TLS cluster
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import ssl
import sys
import time
from collections import deque
from typing import Any, NoReturn, cast

import msgpack
from hdrh.histogram import HdrHistogram

from zabd.client.cli import connect_options, security_options
from zabd.client.zk_bench import OPS, ZKBenchConn
from zabd.codec.framing import FrameError, FrameReader, frame, no_delay

_packb = msgpack.packb


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"zabd bench: {message}", file=sys.stderr)
        raise SystemExit(2)


class Stats:
    def __init__(self) -> None:
        self.hist = HdrHistogram(1, 120_000_000, 3)
        self.ops = 0
        self.errors = 0
        self.error_codes: dict[str, int] = {}
        self.measuring = False


class BenchConn(asyncio.Protocol):
    def __init__(
        self, stats: Stats, payload: bytes, window: int, stop_at: list[float], kv_keys: int = 0,
        token: str | None = None,
    ) -> None:
        self.stats = stats
        self.token = token  # sent first; the window opens when it is accepted
        self.payload = payload
        self.window = window
        self.stop_at = stop_at
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(64 * 1024 * 1024, use_list=True)
        self.sent: deque[int] = deque()  # issue times (ns), in request order
        self.next_id = 0
        self.closed = asyncio.get_running_loop().create_future()
        self.done = False
        self.retry_scheduled = False
        # map header + constant fields, then the id and the payload
        self._prefix = b"\x84" + _packb("v") + _packb(1) + _packb("type") + _packb("propose") + _packb("id")
        self._payload_part = _packb("payload") + _packb(payload)
        # --kv-keys: KV puts over that many keys instead of raw proposals
        self.kv_keys = kv_keys
        if kv_keys:
            self._prefix = b"\x85" + _packb("v") + _packb(1) + _packb("type") + _packb("put") + _packb("id")
            self._payload_part = _packb("value") + _packb(payload)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        no_delay(transport)
        if self.token is not None:
            self.transport.write(frame({"v": 1, "type": "auth", "id": 0, "token": self.token}))
            return
        self._issue(self.window)

    def _authenticated(self, body: Any) -> None:
        self.token = None
        if isinstance(body, dict) and body.get("ok"):
            self._issue(self.window)
            return
        code = str(body.get("error")) if isinstance(body, dict) else "bad_response"
        self.stats.error_codes[code] = self.stats.error_codes.get(code, 0) + 1
        self.done = True
        if self.transport is not None:
            self.transport.close()

    def _issue(self, n: int) -> None:
        if n <= 0 or self.done or self.transport is None:
            return
        now = time.perf_counter_ns()
        prefix = self._prefix
        tail = self._payload_part
        out = []
        sent = self.sent
        keys = self.kv_keys
        for _ in range(n):
            self.next_id += 1
            if keys:
                key = _packb("key") + _packb(f"k{self.next_id * 7919 % keys}")
                body = prefix + _packb(self.next_id) + key + tail
            else:
                body = prefix + _packb(self.next_id) + tail
            out.append(len(body).to_bytes(4, "big"))
            out.append(body)
            sent.append(now)
        self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self.reader.feed(data)
        except FrameError:
            if self.transport is not None:
                self.transport.abort()
            return
        if self.token is not None and bodies:
            self._authenticated(bodies.pop(0))
        now = time.perf_counter_ns()
        stats = self.stats
        sent = self.sent
        record = stats.hist.record_value
        measuring = stats.measuring
        ok = 0
        failed = 0
        for body in bodies:
            t0 = sent.popleft()
            if body.get("ok"):
                ok += 1
                if measuring:
                    record((now - t0) // 1000 or 1)
            else:
                failed += 1
                code = str(body.get("error"))
                stats.error_codes[code] = stats.error_codes.get(code, 0) + 1
        if measuring:
            stats.ops += ok
            stats.errors += failed
        if time.monotonic() >= self.stop_at[0]:
            self.done = True
            if not sent and self.transport is not None:
                self.transport.close()
            return
        self._issue(ok)
        if failed:
            # e.g. no leader during an election: back off instead of spinning
            asyncio.get_running_loop().call_later(0.05, self._issue, failed)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.sent and self.stats.measuring and not self.done:
            self.stats.errors += len(self.sent)
            self.stats.error_codes["connection_lost"] = self.stats.error_codes.get("connection_lost", 0) + len(
                self.sent
            )
        self.done = True
        if not self.closed.done():
            self.closed.set_result(None)


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _box_busy_seconds() -> float:
    """Busy CPU time of the whole machine (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


async def _leader_of(servers: list[str], **conn: Any) -> tuple[str, dict[str, Any]]:
    from zabd.client.client import Client

    last: dict[str, Any] = {}
    for addr in servers:
        with contextlib.suppress(Exception):
            async with await Client.connect(addr, timeout=2, **conn) as c:
                st = (await c.status()).model_dump()
                last = st
                if st["role"] == "leading":
                    return addr, st
    return "", last


async def _zk_addrs(servers: list[str], **conn: Any) -> dict[str, str]:
    """zabd client address -> that node's ZooKeeper port (host as reached)."""
    from zabd.client.client import Client

    out: dict[str, str] = {}
    for addr in servers:
        with contextlib.suppress(Exception):
            async with await Client.connect(addr, timeout=2, **conn) as c:
                zk = (await c.status()).model_dump().get("zookeeper_port")
            if isinstance(zk, str) and zk:
                out[addr] = f"{addr.rsplit(':', 1)[0]}:{zk.rsplit(':', 1)[1]}"
    return out


async def _storage_stats(addr: str, **conn: Any) -> dict[str, int] | None:
    from zabd.client.client import Client

    if not addr:
        return None
    with contextlib.suppress(Exception):
        async with await Client.connect(addr, timeout=2, **conn) as c:
            st = (await c.status()).model_dump()
            io = st.get("storage_stats")
            return dict(io) if isinstance(io, dict) else None
    return None


def _io_rates(a: dict[str, int] | None, b: dict[str, int] | None, elapsed: float) -> dict[str, Any]:
    if a is None or b is None or elapsed <= 0:
        return {"fsyncs_per_s": None, "txns_per_fsync": None, "flushes_per_s": None}
    syncs = b["syncs"] - a["syncs"]
    records = b["records_synced"] - a["records_synced"]
    return {
        "fsyncs_per_s": round(syncs / elapsed, 1),
        "txns_per_fsync": round(records / syncs, 2) if syncs else None,
        "flushes_per_s": round((b["flushes"] - a["flushes"]) / elapsed, 1),
    }


async def run_bench(
    servers: list[str],
    *,
    clients: int,
    window: int,
    payload_size: int,
    duration: float,
    warmup: float,
    target: str,
    progress: bool,
    server_pids: list[int] | None = None,
    kv_keys: int = 0,
    tls: ssl.SSLContext | None = None,
    token: str | None = None,
    zookeeper: str | None = None,
) -> dict[str, Any]:
    from zabd.client.client import parse_servers

    addrs = parse_servers(servers)
    conn: dict[str, Any] = {"tls": tls, "token": token}
    leader_addr, st = await _leader_of([f"{h}:{p}" for h, p in addrs], **conn)
    if target == "leader":
        if not leader_addr:
            raise RuntimeError("no leader found among the servers")
        lh, lp = leader_addr.rsplit(":", 1)
        chosen = [(lh, int(lp))] * clients
    else:
        chosen = [addrs[i % len(addrs)] for i in range(clients)]
    loop = asyncio.get_running_loop()
    stats = Stats()
    payload = os.urandom(payload_size)
    stop_at = [time.monotonic() + warmup + duration + 3600.0]
    conns: list[BenchConn | ZKBenchConn] = []
    zk_of = await _zk_addrs([f"{h}:{p}" for h, p in set(chosen)], **conn) if zookeeper else {}
    for i, (host, port) in enumerate(chosen):
        if zookeeper is None:
            _, proto = await loop.create_connection(
                lambda: BenchConn(stats, payload, window, stop_at, kv_keys, token), host, port, ssl=tls
            )
        else:  # the same node's ZooKeeper port
            zaddr = zk_of.get(f"{host}:{port}")
            if zaddr is None:
                raise RuntimeError(f"{host}:{port} has no ZooKeeper port (its config sets no 'zookeeper')")
            zhost, zport = zaddr.rsplit(":", 1)
            _, zk_proto = await loop.create_connection(
                functools.partial(ZKBenchConn, i, zookeeper, stats, payload, window, stop_at), zhost, int(zport),
                ssl=tls,
            )
            conns.append(zk_proto)
            continue
        conns.append(proto)
    if warmup > 0:
        await asyncio.sleep(warmup)
    pids = server_pids or []
    io0 = await _storage_stats(leader_addr, **conn)
    cpu0 = {pid: _cpu_seconds(pid) for pid in [os.getpid(), *pids]}
    box0 = _box_busy_seconds()
    stats.measuring = True
    t0 = time.monotonic()
    stop_at[0] = t0 + duration
    last_ops, last_t = 0, t0
    while True:
        now = time.monotonic()
        if now >= stop_at[0]:
            break
        await asyncio.sleep(min(1.0, stop_at[0] - now))
        if progress:
            now = time.monotonic()
            rate = (stats.ops - last_ops) / max(1e-9, now - last_t)
            last_ops, last_t = stats.ops, now
            p99 = stats.hist.get_value_at_percentile(99) / 1000 if stats.ops else 0.0
            print(
                f"bench: {now - t0:5.1f}s  {rate:9.0f} ops/s  total {stats.ops}  "
                f"p99 {p99:.2f} ms  errors {stats.errors}",
                file=sys.stderr,
                flush=True,
            )
    stats.measuring = False
    elapsed = time.monotonic() - t0
    cpu1 = {pid: _cpu_seconds(pid) for pid in cpu0}
    box1 = _box_busy_seconds()
    io1 = await _storage_stats(leader_addr, **conn)
    ours = sum(cpu1[pid] - cpu0[pid] for pid in cpu0)
    for c in conns:
        c.done = True
    await asyncio.sleep(0)
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    h = stats.hist
    ops = stats.ops
    return {
        "ops": ops,
        "ops_per_s": round(ops / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": h.get_value_at_percentile(50) / 1000 if ops else None,
        "p99_ms": h.get_value_at_percentile(99) / 1000 if ops else None,
        "p999_ms": h.get_value_at_percentile(99.9) / 1000 if ops else None,
        "max_ms": h.get_max_value() / 1000 if ops else None,
        "mean_ms": round(h.get_mean_value() / 1000, 3) if ops else None,
        "errors": stats.errors,
        "error_codes": stats.error_codes,
        "nodes": len(addrs),
        "payload": payload_size,
        "clients": clients,
        "window": window,
        "duration_s": round(elapsed, 3),
        "warmup_s": warmup,
        "target": target,
        "tls": tls is not None,
        "zookeeper": zookeeper,
        "leader": leader_addr,
        "storage": st.get("storage", "unknown"),
        "fsync": st.get("fsync"),
        # the leader's group commit during the window (status storage_stats)
        **_io_rates(io0, io1, elapsed),
        "cpu_pct": {
            ("client" if pid == os.getpid() else f"server_pid_{pid}"): round(100 * (cpu1[pid] - cpu0[pid]) / elapsed, 1)
            for pid in cpu0
        },
        # CPU used by everything else on the box during the window (% of one
        # core): above ~10 the run shared the machine and its numbers are low.
        "other_cpu_pct": round(100 * max(0.0, (box1 - box0) - ours) / elapsed, 1) if pids else None,
    }


def main(argv: list[str]) -> int:
    p = _Parser(prog="zabd bench", description="closed-loop proposal load generator")
    p.add_argument("--servers", help="client host:port list of a running cluster")
    p.add_argument("--spawn", type=int, metavar="N", help="start a local N-node cluster, run, stop it")
    p.add_argument(
        "--storage", choices=("memory", "disk"), default="disk", help="with --spawn (default disk, fsync on)"
    )
    p.add_argument("--no-fsync", action="store_true", help="with --spawn --storage disk: fsync = false")
    p.add_argument("--observers", type=int, default=0, metavar="K", help="with --spawn: the last K nodes never vote")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--window", type=int, default=32, help="outstanding proposals per client")
    p.add_argument("--payload", type=int, default=1024, help="payload bytes")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    p.add_argument(
        "--target",
        choices=("spread", "leader"),
        default="spread",
        help="client i on server i mod n, or all on the leader",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="with --spawn: a server config field"
    )
    p.add_argument("--kv-keys", type=int, default=0, help="KV puts over this many keys instead of raw proposals")
    p.add_argument("--zookeeper", choices=OPS, metavar="|".join(OPS),
                   help="load ZooKeeper's port of each node instead: setData/getData of a znode per client, "
                        "or sequential creates")
    p.add_argument(
        "--tls", action="store_true",
        help="with --spawn: TLS on both ports (certificates made in the cluster's temp dir by zabd.certs)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--no-progress", action="store_true")
    security_options(p)
    args = p.parse_args(argv)
    if args.zookeeper and args.kv_keys:
        p.error("--zookeeper and --kv-keys exclude each other")
    if args.kv_keys < 0:
        p.error(f"--kv-keys {args.kv_keys}: expected 0 (raw proposals) or a number of keys")
    if (args.servers is None) == (args.spawn is None):
        p.error("give exactly one of --servers and --spawn")
    for name in ("clients", "window", "payload"):
        if getattr(args, name) < (0 if name == "payload" else 1):
            p.error(f"--{name} {getattr(args, name)}: expected a positive integer")
    if not 0 < args.duration <= 3600 or not 0 <= args.warmup <= 600:
        p.error("--duration must be in (0, 3600] and --warmup in [0, 600] seconds")
    if args.spawn is not None and not 1 <= args.spawn <= 15:
        p.error(f"--spawn {args.spawn}: expected 1..15 nodes")
    if args.observers and (args.spawn is None or not 0 < args.observers < args.spawn):
        p.error(f"--observers {args.observers}: only with --spawn N, and 0..N-1 of its nodes")
    if args.tls and args.spawn is None:
        p.error("--tls: only with --spawn (for --servers, give --ca/--cert/--key)")
    if args.spawn is not None and (args.ca or args.cert or args.key or args.token):
        p.error("--ca/--cert/--key/--token: only with --servers (--spawn --tls makes its own certificates)")

    import uvloop

    async def go() -> dict[str, Any]:
        kw = dict(
            clients=args.clients,
            window=args.window,
            payload_size=args.payload,
            duration=args.duration,
            warmup=args.warmup,
            target=args.target,
            progress=not args.no_progress,
            kv_keys=args.kv_keys,
            zookeeper=args.zookeeper,
        )
        if args.servers:
            return await run_bench(args.servers.split(","), **kw, **connect_options(args))
        from zabd.client.spawn import LocalCluster

        extra: dict[str, Any] = {}
        for item in args.set:
            key, _, value = item.partition("=")
            extra[key] = int(value) if value.isdigit() else {"true": True, "false": False}.get(value, value)
        if args.observers:
            extra["observers"] = list(range(args.spawn - args.observers + 1, args.spawn + 1))
        cluster = LocalCluster(
            args.spawn, storage=args.storage, fsync=not args.no_fsync, log_level="warning", extra=extra, tls=args.tls
        )
        try:
            cluster.start()
            try:
                await cluster.wait_leader(timeout=30)
            except (TimeoutError, RuntimeError) as exc:
                raise RuntimeError(f"the spawned cluster did not come up: {exc}") from None
            pids = [proc.pid for proc in cluster.procs.values()]
            return await run_bench(cluster.servers, server_pids=pids, tls=cluster.client_tls(), **kw)
        finally:
            cluster.stop()

    try:
        result = uvloop.run(go())
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"zabd bench: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['ops']} ops in {result['duration_s']} s: {result['ops_per_s']:.0f} ops/s, "
            f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, p99.9 {result['p999_ms']} ms, "
            f"errors {result['errors']} ({result['nodes']} nodes, {result['payload']} B, "
            f"{result['clients']}x{result['window']}, storage {result['storage']}, fsync {result['fsync']}, "
            f"tls {result['tls']}, zookeeper {result['zookeeper']}, "
            f"{result['fsyncs_per_s']} fsyncs/s, {result['txns_per_fsync']} txns/fsync, cpu {result['cpu_pct']})"
        )
    return 0
