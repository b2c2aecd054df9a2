#!/usr/bin/env python3
"""Fuzz ZooKeeper's client connection state machine in-process: the bytes of
client connections into ``ZKClientLink``/``ZKPort``/``ZKSessions`` of a real
one-node replica, no sockets (tests/server/zk_conn_fuzz.py says what is real,
what is stood in, what an input is and what is checked after each):

    python3 scripts/fuzz_zk_conn.py --inputs 1000000 [--seed 1] [--hang-seconds 2]
    python3 scripts/fuzz_zk_conn.py --replay /tmp/zabd-fuzz-zk-conn/zk-conn-crash-1-123.json

Why in-process: scripts/fuzz_zk_port.py does the same over TCP to live
servers at a few hundred inputs a second; this runs about a thousand a
second on one core, so a million inputs take minutes, not days.

Progress goes to stderr every few seconds; the last line gives the totals.
Each distinct crash or hang is written to a JSON file (named on stderr) that
``--replay`` runs again. Exit status 1 if anything crashed or hung.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.server.zk_conn_fuzz import Fuzzer, captured_logs, load_inputs, replay, save_inputs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hang-seconds", type=float, default=2.0, help="an input taking longer counts as a hang")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "zabd-fuzz-zk-conn",
                    help="where crashing inputs are written")
    ap.add_argument("--max-crashes", type=int, default=50, help="stop after this many crashes and hangs")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between progress lines")
    ap.add_argument("--replay", type=Path, help="run the inputs of a crash file again, then exit")
    ap.add_argument("--wait-for-connect", action="store_true",
                    help="clients send nothing after their connect request until it is answered (as kazoo and "
                         "ZooKeeper's own client do); by default they pipeline")
    args = ap.parse_args()

    if args.replay is not None:
        inputs, note = load_inputs(args.replay)
        with captured_logs() as logs:
            again = replay(inputs, logs, args.hang_seconds, bool(note.get("wait_connect", args.wait_for_connect)))
        if again is None:
            print(f"{args.replay}: {len(inputs)} input(s) replayed, no crash", file=sys.stderr)
            return 0
        print(f"{args.replay}: crashed again: {again[0]}\n{again[1]}", file=sys.stderr)
        return 1

    start = last = time.monotonic()
    with captured_logs() as logs:
        fz = Fuzzer(args.seed, logs, args.hang_seconds, wait_connect=args.wait_for_connect)

        def line(final: bool = False) -> str:
            took = time.monotonic() - start
            return (f"{'done' if final else 'progress'}: inputs {fz.inputs} in {took:.1f}s "
                    f"({fz.inputs / max(took, 1e-9):.0f}/s), crashes {fz.crash_count}, hangs {fz.hangs}, "
                    f"distinct outcomes {len(fz.outcomes)}, corpus {len(fz.corpus)}, seed {args.seed}")

        while fz.inputs < args.inputs:
            crash = fz.one()
            if crash is not None:
                key = f"{crash.kind}: {crash.signature}"
                if fz.crashes.get(key) is crash:  # the first of its kind: keep it
                    args.out.mkdir(parents=True, exist_ok=True)
                    name = args.out / f"zk-conn-{crash.kind}-{args.seed}-{fz.inputs}.json"
                    save_inputs(name, crash.inputs, {"kind": crash.kind, "signature": crash.signature,
                                                     "seed": args.seed, "input": fz.inputs,
                                                     "wait_connect": args.wait_for_connect,
                                                     "traceback": crash.detail.splitlines()})
                    print(f"{key} (input {fz.inputs}): written to {name}; replay with --replay {name}\n"
                          f"{crash.detail}", file=sys.stderr)
                if fz.crash_count + fz.hangs >= args.max_crashes:
                    print("too many crashes: stopping", file=sys.stderr)
                    break
            now = time.monotonic()
            if now - last >= args.every:
                last = now
                print(line(), file=sys.stderr, flush=True)
        print(line(final=True), file=sys.stderr, flush=True)
        for key in fz.crashes:
            print(f"  distinct: {key}", file=sys.stderr)
    return 1 if fz.crash_count or fz.hangs else 0


if __name__ == "__main__":
    sys.exit(main())
