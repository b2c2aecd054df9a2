"""A deterministic append/replace workload, run by a child process that is
SIGKILLed mid-way, and replayed by the test to know what each flush held.

Run as ``python -m tests.storage.crash_workload DIR SEED MAX_FLUSHES MAX_SECONDS``:
prints the flush number after every flush that returned (durable).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Iterator

from zabd.protocol.messages import Txn
from zabd.storage.disk import DiskStorage

SEG = {"segment_bytes": 1 << 16, "prealloc_bytes": 1 << 15}

# one flush: ("append", txns, epoch), ("replace", history, epoch) or
# ("snap", history after the log base, epoch, snapshot zxid, log base)
Step = tuple[str, list[Txn], int, int, int]


def steps(seed: int) -> Iterator[tuple[Step, list[Txn], int]]:
    """Yields (step, retained history after it, current epoch after it)."""
    rng = random.Random(seed)
    history: list[Txn] = []
    floor = 0  # retained txns at or below the installed snapshot: never cut
    epoch, counter = 1, 0
    while True:
        roll = rng.randrange(40)
        if history and roll < 3:
            # a new leader: drop a few uncommitted txns, then its own
            keep = max(floor, len(history) - rng.randrange(6))
            epoch += 1
            counter = rng.randrange(4)
            history = history[:keep] + [
                Txn(epoch << 32 | c, rng.randbytes(rng.randrange(8, 300))) for c in range(1, counter + 1)
            ]
            yield ("replace", list(history), epoch, 0, 0), list(history), epoch
        elif history and roll == 3:
            # SNAP from a leader that is ahead: it has our history plus a new
            # epoch, a snapshot inside it and a log starting before that
            epoch += 1
            leader = history + [
                Txn(epoch << 32 | c, rng.randbytes(rng.randrange(8, 300))) for c in range(1, 30 + rng.randrange(30))
            ]
            s_i = len(history) + rng.randrange(1, 25)
            b_i = rng.randrange(max(0, s_i - 20), s_i + 1)
            snap_z, base_z = leader[s_i - 1].zxid, (leader[b_i - 1].zxid if b_i else 0)
            history = leader[b_i:]
            floor = s_i - b_i
            counter = history[-1].zxid & 0xFFFFFFFF
            yield ("snap", list(history), epoch, snap_z, base_z), list(history), epoch
        else:
            txns = []
            for _ in range(1 + rng.randrange(20)):
                counter += 1
                txns.append(Txn(epoch << 32 | counter, rng.randbytes(rng.randrange(8, 300))))
            history = history + txns
            yield ("append", txns, epoch, 0, 0), history, epoch


async def main(data_dir: str, seed: int, max_flushes: int, max_seconds: float) -> None:
    s = DiskStorage(data_dir, **SEG)  # type: ignore[arg-type]
    s.load()
    deadline = time.monotonic() + max_seconds
    for k, (step, _, _) in enumerate(steps(seed)):
        if k >= max_flushes or time.monotonic() > deadline:
            break
        kind, txns, epoch, snap_z, base_z = step
        if kind == "append":
            for t in txns:
                s.append(t)
        else:
            if kind == "snap":
                s.install_snapshot(snap_z, b"snapshot-%d" % snap_z, base_z)
            s.replace_history(txns)
            s.persist_epochs(epoch, 1, epoch)
        await s.flush()
        sys.stdout.write(f"{k}\n")
        sys.stdout.flush()
    s.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
