#!/usr/bin/env python3
"""Fuzz the apply path as long as asked: every committed payload, whatever
it holds, is applied by three KVMachine replicas without an exception or a
fault, they agree after every txn, and their snapshots restore (the
property and the inputs: tests/kv/apply_fuzz.py).

    python bench/apply_fuzz.py --inputs 1000000 [--seed 1]

Prints a line every --progress inputs and a summary (inputs, refused,
faults, whether the digests are equal, inputs/s). At the first broken
property it prints what broke, the seed and index of the input and how to
reproduce it, and exits with status 1:

    python bench/apply_fuzz.py --seed S --replay I   # input I, applied to the state before it
    python bench/apply_fuzz.py --seed S --locate I   # the input that broke what the check after I found
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.kv.apply_fuzz import (
    SNAPSHOT_EVERY,
    ApplyFuzz,
    FuzzFailure,
    describe_payload,
    locate,
    quiet_logs,
    replay,
    state_print,
)
from zabd import compiled
from zabd.protocol.messages import Txn


def _progress(start: float) -> object:
    def show(fuzz: ApplyFuzz) -> None:
        s = fuzz.stats
        m = fuzz.machines[0]
        rate = s.inputs / max(time.perf_counter() - start, 1e-9)
        print(f"{s.inputs:>10,} inputs  {s.refused:>9,} refused  {s.snapshots:>5} snapshots  "
              f"tree {len(m.zk.nodes):>5} nodes {len(m.zk.sessions):>3} sessions  {rate:>7,.0f} inputs/s", flush=True)
    return show


def _replay(seed: int, index: int, every: int) -> int:
    fuzz, source, payload, zxid = replay(seed, index, every)
    print(f"seed {seed} index {index} ({source}, zxid {zxid:#x}): {describe_payload(payload, 4000)}")
    with quiet_logs() as logged:
        for i, m in enumerate(fuzz.machines):
            try:
                result = m.apply(Txn(zxid, payload))
            except Exception:
                print(f"replica {i} raised:\n{traceback.format_exc()}")
                return 1
            print(f"replica {i}: result {result!r}, faults {m.faults}, state {state_print(m)}")
    for line in logged:
        print(line)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--progress", type=int, default=100_000, help="a line every this many inputs")
    ap.add_argument("--snapshot-every", type=int, default=SNAPSHOT_EVERY,
                    help="inputs between snapshot round trips (each restarts a replica from its snapshot)")
    ap.add_argument("--replay", type=int, metavar="I", help="print input I of --seed and apply it; no run")
    ap.add_argument("--locate", type=int, metavar="I",
                    help="find the input that broke what the snapshot check after input I found broken")
    args = ap.parse_args()
    if args.replay is not None:
        return _replay(args.seed, args.replay, args.snapshot_every)
    if args.locate is not None:
        failure = locate(args.seed, args.locate, args.snapshot_every)
        print(failure if failure is not None else f"nothing broke up to input {args.locate} of seed {args.seed}")
        return 1 if failure is not None else 0

    print(f"apply fuzz: seed {args.seed}, {args.inputs:,} inputs, 3 replicas, snapshot round trip every "
          f"{args.snapshot_every} inputs; core: {compiled.describe()}", flush=True)
    fuzz = ApplyFuzz(args.seed, args.snapshot_every)
    start = time.perf_counter()
    failure: FuzzFailure | None = None
    try:
        fuzz.run(args.inputs, _progress(start), args.progress)  # type: ignore[arg-type]
        fuzz.final_check()
    except FuzzFailure as exc:
        failure = exc
    elapsed = time.perf_counter() - start
    s = fuzz.stats
    faults = sum(m.faults for m in fuzz.machines)
    prints = [state_print(m) for m in fuzz.machines]
    equal = failure is None and prints[1] == prints[0] and prints[2] == prints[0]
    m = fuzz.machines[0]
    print(f"\nseed {args.seed}: {s.inputs:,} inputs in {elapsed:.1f} s ({s.inputs / max(elapsed, 1e-9):,.0f} inputs/s)")
    print(f"  refused (MalformedTxn): {s.refused:,}   faults: {faults}   snapshot round trips: {s.snapshots}")
    print(f"  digests equal: {'yes' if equal else 'NO'} (tree {m.zk.digest:#018x}, kv {m.digest()}, "
          f"zk applied {m.zk.applied:#x}, {len(m.zk.sessions)} sessions, {len(m.zk.nodes)} nodes)")
    assert s.by_source is not None
    print("  inputs by source: " + ", ".join(f"{k} {v:,}" for k, v in sorted(s.by_source.items())))
    if failure is not None:
        print(f"\nFAILED: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
