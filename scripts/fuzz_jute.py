#!/usr/bin/env python3
"""Fuzz zabd's jute codec: every decoder must take any bytes or refuse them
with JuteError, never raise anything else, never hang.

The property is tests/zk/test_jute.py's ``decode_everything`` (the one its
hypothesis fuzz tests check with a few thousand inputs); this runs it as long
as asked, on random bytes, mutated valid bodies (requests, replies, connect
messages, events) and splices of two of them:

    python3 scripts/fuzz_jute.py --inputs 1000000 [--seed 1] [--hang-seconds 2]

A crash is printed with its input (hex) and the run ends with a non-zero status.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.zk.test_jute import REPLY_OPS, corpus, decode_everything, mutate


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


def one_input(rng: random.Random, seeds: list[tuple[bytes, int]]) -> tuple[bytes, int]:
    """An input and the opcode its reply decoder reads it as: mostly a mutated
    seed with the seed's own opcode, else random bytes or a splice of two."""
    kind = rng.random()
    op = rng.choice(REPLY_OPS)
    if kind < 0.1:
        return rng.randbytes(rng.randrange(64)), op
    if kind < 0.2:
        (a, _), (b, op) = rng.choice(seeds), rng.choice(seeds)
        return a[: rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1) :], op
    seed, seed_op = rng.choice(seeds)
    out = mutate(rng, seed)
    if kind > 0.9:
        out = mutate(rng, out)
    return out, (seed_op if rng.random() < 0.8 else op)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hang-seconds", type=float, default=2.0, help="an input taking longer counts as a hang")
    ap.add_argument("--progress", type=int, default=100_000, help="print a line every this many inputs")
    ap.add_argument("--max-reports", type=int, default=5, help="crashes and hangs printed in full")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    seeds = corpus()
    signal.signal(signal.SIGALRM, _alarm)
    crashes = hangs = 0
    start = time.monotonic()
    for i in range(1, args.inputs + 1):
        raw, op = one_input(rng, seeds)
        signal.setitimer(signal.ITIMER_REAL, args.hang_seconds)
        try:
            decode_everything(raw, op)
        except Hang:
            hangs += 1
            if crashes + hangs <= args.max_reports:
                print(f"HANG on input {i} (op {op}): {raw.hex()}", flush=True)
        except Exception:
            crashes += 1
            if crashes + hangs <= args.max_reports:
                print(f"CRASH on input {i} (op {op}): {raw.hex()}\n{traceback.format_exc()}", flush=True)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if i % args.progress == 0:
            rate = i / (time.monotonic() - start)
            print(f"{i} inputs, {crashes} crashes, {hangs} hangs ({rate:,.0f}/s)", flush=True)
    elapsed = time.monotonic() - start
    print(f"done: {args.inputs} inputs, {crashes} crashes, {hangs} hangs in {elapsed:.0f}s (seed {args.seed})")
    return 1 if crashes or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
