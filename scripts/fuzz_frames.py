#!/usr/bin/env python3
"""Fuzz zabd's own msgpack protocols (client port, peer port, ZooKeeper
requests over msgpack): every decoder the server applies to network bytes
must return a value or refuse the input with the exception the server
catches around it (FrameError, pydantic ValidationError, ValueError), never
raise anything else, never hang.

The property is tests/codec/test_frame_fuzz.py's ``decode_everything`` (its
hypothesis tests check it with a few thousand inputs); this runs it as long
as asked, on mutated valid frames (byte and structure mutations, deep
nestings), random bytes and splices, streams cut at random points:

    python3 scripts/fuzz_frames.py --inputs 1000000 [--seed 1] [--hang-seconds 2]

A crash is printed with its protocol, cut points and input (hex), and the
run ends with a non-zero status. Reproduce one with
``decode_everything(protocol, bytes.fromhex(hex), cuts)``.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.codec.test_frame_fuzz import corpus, decode_everything, one_input


class Hang(BaseException):
    """An input over --hang-seconds (a BaseException: the decoders' own
    ``except Exception`` must not take it for bad input)."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


def _run(protocol: str, raw: bytes, cuts: list[int], seconds: float) -> BaseException | None:
    """None when decode_everything returned within ``seconds``; else what it
    raised (Hang: it took longer)."""
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            decode_everything(protocol, raw, cuts)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # RecursionError, MemoryError, ...: all crashes
        return exc
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hang-seconds", type=float, default=2.0, help="an input taking longer counts as a hang")
    ap.add_argument("--progress", type=int, default=100_000, help="print a line every this many inputs")
    ap.add_argument("--max-reports", type=int, default=5, help="crashes and hangs printed in full")
    ap.add_argument("--max-seconds", type=float, default=0.0, help="stop after this long (0: no limit)")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    seeds = corpus()
    signal.signal(signal.SIGALRM, _alarm)
    # pydantic_core reports a repr() that fails (a discriminator nested ~1000
    # deep) as unraisable and goes on to raise ValidationError: counted, not
    # printed (not a crash: nothing escapes)
    unraisable = Counter[str]()
    sys.unraisablehook = lambda u: unraisable.update([f"{u.exc_type.__name__}: {u.err_msg or 'Exception ignored'}"])
    crashes = hangs = stalls = 0
    kinds: Counter[str] = Counter()  # crash signatures: protocol, exception type, where it was raised
    start = time.monotonic()
    done = 0
    for i in range(1, args.inputs + 1):
        protocol, raw, cuts = one_input(rng, seeds)
        exc = _run(protocol, raw, cuts, args.hang_seconds)
        if isinstance(exc, Hang):
            if _run(protocol, raw, cuts, args.hang_seconds) is not None:
                hangs += 1
                if crashes + hangs <= args.max_reports:
                    print(f"HANG on input {i} ({protocol}, cuts {cuts}): {raw.hex()}", flush=True)
            else:  # the box stalled (a busy machine), not the decoder
                stalls += 1
                print(f"stall on input {i} ({protocol}): over {args.hang_seconds} s once, fast when run again",
                      flush=True)
        elif exc is not None:
            crashes += 1
            tb = traceback.extract_tb(exc.__traceback__)
            where = next((f for f in reversed(tb) if "/zabd/" in f.filename), tb[-1])
            sig = f"{protocol} {type(exc).__name__} at {Path(where.filename).name}:{where.lineno}"
            kinds[sig] += 1
            if crashes + hangs <= args.max_reports or kinds[sig] == 1:
                trace = "".join(traceback.format_exception(exc))
                print(f"CRASH on input {i} ({sig}, cuts {cuts}): {raw.hex()}\n{trace}", flush=True)
        done = i
        if i % args.progress == 0:
            rate = i / (time.monotonic() - start)
            print(f"{i} inputs, {crashes} crashes, {hangs} hangs ({rate:,.0f}/s)", flush=True)
        if args.max_seconds and time.monotonic() - start > args.max_seconds:
            break
    elapsed = time.monotonic() - start
    for sig, n in kinds.most_common():
        print(f"  {n} crashes: {sig}")
    for what, n in unraisable.most_common():
        print(f"  {n} unraisable exceptions reported (not crashes): {what}")
    stalled = f" ({stalls} inputs slow once, not on a rerun: machine stalls)" if stalls else ""
    print(f"done: {done} inputs, {crashes} crashes, {hangs} hangs in {elapsed:.0f} s (seed {args.seed}){stalled}")
    return 1 if crashes or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
