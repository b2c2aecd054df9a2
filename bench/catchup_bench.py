"""A follower that was down while millions of txns were committed catches up
through SNAP + DIFF, and every server stays within its memory bound.

    python3 bench/catchup_bench.py [--txns 2000000] [--kv-keys 100000] [--payload 256]

Three servers on disk with fsync and the defaults (history_window, snapshots,
autopurge). One follower is SIGKILLed; ``zabd bench`` writes KV puts through
the two others until ``--txns`` more txns are committed; the follower
restarts. Reported: each server's peak RSS while writing and while catching
up, the time from the restart to the follower applying the leader's commit
point, the sync it received, and ``zabd pipeline audit`` of the three data
directories (the logs agree where they overlap).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zabd.client.spawn import LocalCluster
from zabd.protocol import zxid as zx

MiB = 1 << 20


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def written(start: int, last: int) -> int:
    """Txns committed from zxid ``start`` to ``last`` (packed zxids: the
    counter restarts at each epoch; the leader does not change here, but the
    first writes may open its epoch)."""
    if zx.epoch_of(last) != zx.epoch_of(start):
        return zx.counter_of(last)
    return zx.counter_of(last) - zx.counter_of(start)


async def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    cluster = LocalCluster(3, storage="disk", fsync=True, base_dir=base, log_level="info")
    cluster.start()
    peak: dict[str, dict[int, float]] = {"writing": {}, "catching_up": {}}

    def sample(phase: str) -> None:
        for i, proc in cluster.procs.items():
            if proc.poll() is None:
                peak[phase][i] = max(peak[phase].get(i, 0.0), rss(proc.pid) / MiB)

    try:
        leader = await cluster.wait_leader(timeout=60)
        follower = next(i for i in (1, 2, 3) if i != leader)
        cluster.kill(follower)
        others = [i for i in (1, 2, 3) if i != follower]
        st = await cluster.status(leader)
        assert st is not None
        start = st["last_committed"]
        load = subprocess.Popen(
            [sys.executable, "-m", "zabd", "bench", "--servers", ",".join(cluster.client_addr(i) for i in others),
             "--clients", "8", "--window", "32", "--payload", str(args.payload), "--kv-keys", str(args.kv_keys),
             "--duration", "3600", "--warmup", "0", "--json", "--no-progress"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        t0 = time.monotonic()
        try:
            while True:
                await asyncio.sleep(2)
                sample("writing")
                st = await cluster.status(leader)
                done = written(start, st["last_committed"]) if st else 0
                print(f"{time.monotonic() - t0:6.0f} s  {done:,} txns written", flush=True)
                if done >= args.txns:
                    break
        finally:
            load.terminate()
            load.wait(60)
        target = (await cluster.status(leader) or {})["last_committed"]
        t1 = time.monotonic()
        cluster.start_node(follower)
        while True:
            sample("catching_up")
            st = await cluster.status(follower)
            if st is not None and st["last_committed"] >= target:
                break
            assert time.monotonic() - t1 < 600, "no catch-up within 10 minutes"
            await asyncio.sleep(0.2)
        caught_up_s = time.monotonic() - t1
        sample("catching_up")
        fst = await cluster.status(follower) or {}
        sts = await cluster.statuses()
        digests = {i: s["kv_digest"] for i, s in sts.items() if s}
    finally:
        cluster.stop()
    audit = subprocess.run(
        [sys.executable, "-m", "zabd", "pipeline", "audit", *(str(base / f"data{i}") for i in (1, 2, 3))],
        capture_output=True, text=True, timeout=900,
    )
    return {
        "txns": args.txns, "caught_up_s": round(caught_up_s, 2), "sync_received": fst.get("sync_received"),
        "peak_rss_mib": {k: {i: round(v, 1) for i, v in d.items()} for k, d in peak.items()},
        "kv_digests_equal": len(set(digests.values())) == 1, "audit_rc": audit.returncode,
        "audit_tail": audit.stdout.strip().splitlines()[-3:] + audit.stderr.strip().splitlines()[-2:],
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--txns", type=int, default=2_000_000)
    p.add_argument("--kv-keys", type=int, default=100_000)
    p.add_argument("--payload", type=int, default=256)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zabd-catchup-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    for key, value in result.items():
        print(f"{key}: {value}")
    return 0 if result["audit_rc"] == 0 and result["kv_digests_equal"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
