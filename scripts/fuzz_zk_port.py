#!/usr/bin/env python3
"""Fuzz ZooKeeper's port of real zabd servers: the connection state machine
and the session layer behind it, over TCP.

Workers open connections to every node's ZooKeeper port, re-attach one of a
few sessions (so a connection costs no txn), and send a burst of frames:
mutated and spliced requests from the codec tests' corpus (valid ones too,
which run), random bodies, now and then a broken frame length. A server may
answer, answer an error, or close the connection; it must never die, never
log a traceback, and must serve a plain client afterwards:

    python3 scripts/fuzz_zk_port.py --inputs 1000000 [--nodes 3] [--seed 1] [--burst 32]

Progress goes to stderr; the last line says inputs, connections, servers
alive, tracebacks. Exit 1 if a server died or logged a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.zk.test_jute import corpus, mutate
from zabd.client.spawn import LocalCluster
from zabd.zk import jute
from zabd.zk.records import GetChildren


def _inputs(rng: random.Random, seeds: list[bytes], n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.05:
            body = rng.randbytes(rng.randrange(48))
        elif kind < 0.15:
            a, b = rng.choice(seeds), rng.choice(seeds)
            body = a[: rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1):]
        elif kind < 0.35:
            body = rng.choice(seeds)  # valid: it runs
        else:
            body = mutate(rng, rng.choice(seeds))
        framed = jute.frame(body)
        if rng.random() < 0.01:  # a broken length now and then
            framed = rng.randbytes(4) + body
        out.append(framed)
    return out


async def _session(host: str, port: int) -> tuple[int, bytes]:
    r, w = await asyncio.open_connection(host, port)
    w.write(jute.encode_connect(jute.ConnectRequest(0, 0, 30_000, 0, b"", False)))
    reader = jute.FrameReader(1 << 20)
    while True:
        data = await asyncio.wait_for(r.read(65536), 10)
        bodies = reader.feed(data)
        if bodies:
            _, _, sid, pw, _ = jute.decode_connect_response(bodies[0])
            w.close()
            return sid, pw


async def _worker(wid: int, addrs: list[tuple[int, str, int]], seeds: list[bytes], budget: list[int], burst: int,
                  seed: int, counts: dict[str, int]) -> None:
    rng = random.Random(seed * 1000 + wid)
    _, host, port = addrs[wid % len(addrs)]
    sid, pw = await _session(host, port)
    while budget[0] > 0:
        n = min(burst, budget[0])
        budget[0] -= n
        frames = _inputs(rng, seeds, n)
        try:
            r, w = await asyncio.open_connection(host, port)
        except OSError:
            counts["refused"] += 1
            await asyncio.sleep(0.05)
            continue
        try:
            # sometimes a fresh or mangled connect instead of the re-attach
            if rng.random() < 0.05:
                w.write(jute.frame(mutate(rng, jute.encode_connect(jute.ConnectRequest(0, 0, 30_000, sid, pw,
                                                                                         False))[4:])))
            else:
                w.write(jute.encode_connect(jute.ConnectRequest(0, 0, 30_000, sid, pw, False)))
            w.write(b"".join(frames))
            await w.drain()
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                data = await asyncio.wait_for(r.read(1 << 16), deadline - time.monotonic())
                if not data:
                    break
            counts["inputs"] += n
            counts["connections"] += 1
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            counts["inputs"] += n
            counts["connections"] += 1
        finally:
            w.close()


async def _plain_client_works(host: str, port: int) -> bool:
    r, w = await asyncio.open_connection(host, port)
    try:
        # as clients do: the request only after the ConnectResponse
        w.write(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, 0, b"", False)))
        reader = jute.FrameReader(1 << 20)
        bodies: list[bytes] = []
        while len(bodies) < 2:
            data = await asyncio.wait_for(r.read(65536), 10)
            if not data:
                return False
            bodies += reader.feed(data)
            if len(bodies) == 1:
                w.write(jute.encode_request(1, jute.OP_GET_CHILDREN, GetChildren("/")))
        return jute.decode_reply(bodies[1], jute.OP_GET_CHILDREN)[2] == 0
    finally:
        w.close()


async def main_async(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.nodes, storage="memory", log_level="warning")
    seeds = [b for b, _ in corpus() if b]
    counts = {"inputs": 0, "connections": 0, "refused": 0}
    try:
        cluster.start()
        await cluster.wait_leader(timeout=30)
        addrs = [(i, "127.0.0.1", cluster.zk_ports[i]) for i in range(1, args.nodes + 1)]
        budget = [args.inputs]
        t0 = time.monotonic()
        tasks = [asyncio.create_task(_worker(w, addrs, seeds, budget, args.burst, args.seed, counts))
                 for w in range(args.workers)]
        while not all(t.done() for t in tasks):
            await asyncio.sleep(5)
            print(f"fuzz: {counts['inputs']:,} inputs, {counts['connections']:,} connections, "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        for t in tasks:
            t.result()
        alive = [i for i in range(1, args.nodes + 1) if cluster.alive(i)]
        tracebacks = sum(cluster.log_text(i).count("Traceback") for i in range(1, args.nodes + 1))
        serving = all([await _plain_client_works(h, p) for i, h, p in addrs if i in alive])
        print(f"{counts['inputs']:,} inputs in {counts['connections']:,} connections, {time.monotonic() - t0:.0f} s; "
              f"servers alive {len(alive)}/{args.nodes}, tracebacks {tracebacks}, a plain client served: {serving}")
        return 0 if len(alive) == args.nodes and tracebacks == 0 and serving else 1
    finally:
        cluster.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--burst", type=int, default=32, help="frames per connection")
    ap.add_argument("--workers", type=int, default=16, help="connections at once")
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
