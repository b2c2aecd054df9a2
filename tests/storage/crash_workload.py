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

# one flush: ("append", [txns]) or ("replace", history, epoch)
Step = tuple[str, list[Txn], int]


def steps(seed: int) -> Iterator[tuple[Step, list[Txn], int]]:
    """Yields (step, history after it, current epoch after it)."""
    rng = random.Random(seed)
    history: list[Txn] = []
    epoch, counter = 1, 0
    while True:
        if history and rng.randrange(12) == 0:
            # a new leader: drop a few uncommitted txns, then its own
            keep = max(0, len(history) - rng.randrange(6))
            epoch += 1
            counter = 0
            new = history[:keep]
            for _ in range(rng.randrange(4)):
                counter += 1
                new.append(Txn(epoch << 32 | counter, rng.randbytes(rng.randrange(8, 300))))
            history = new
            yield ("replace", list(history), epoch), list(history), epoch
        else:
            txns = []
            for _ in range(1 + rng.randrange(20)):
                counter += 1
                txns.append(Txn(epoch << 32 | counter, rng.randbytes(rng.randrange(8, 300))))
            history = history + txns
            yield ("append", txns, epoch), history, epoch


async def main(data_dir: str, seed: int, max_flushes: int, max_seconds: float) -> None:
    s = DiskStorage(data_dir, **SEG)  # type: ignore[arg-type]
    s.load()
    deadline = time.monotonic() + max_seconds
    for k, (step, _, _) in enumerate(steps(seed)):
        if k >= max_flushes or time.monotonic() > deadline:
            break
        kind, txns, epoch = step
        if kind == "append":
            for t in txns:
                s.append(t)
        else:
            s.replace_history(txns)
            s.persist_epochs(epoch, 1, epoch)
        await s.flush()
        sys.stdout.write(f"{k}\n")
        sys.stdout.flush()
    s.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
