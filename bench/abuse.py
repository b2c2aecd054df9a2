"""The abuse suite of issue 36, side by side: zabd and ZooKeeper 3.8.

    python bench/abuse.py --target zabd|zookeeper|both [--probes a,b,...] [--tls] [--quick] [--json]

Starts each target itself (zabd: ``LocalCluster`` of 3 nodes, disk storage,
the default config; ``--tls``: TLS on the client ports, client certificates
optional, a tokens file with an ro, an rw and an admin token, and the probes
that apply there: k, a, c, e, g. ZooKeeper: 3 servers with ``cluster.sh``'s
settings on free ports, plus a standalone server with the default
four-letter-word whitelist for that probe), runs the probes
(``zabd.nemesis.abuse``), stops it by PID, and prints one row per probe per
target: what the server did, the attacked server's RSS before/during/after,
whether the well-behaved client kept working, and its p99 during the probe
against an idle run. ``--json`` prints the rows as JSON instead (the table
then goes to stderr). Progress goes to stderr. Exit status 1 when a row fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zabd.nemesis.abuse import Params, Row, env_line, run_suite, select, table, to_json
from zabd.nemesis.abuse_target import Target, ZabdTarget, ZooKeeperTarget


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # the finally blocks stop what was started


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("zabd", "zookeeper", "both"), default="both")
    ap.add_argument("--probes", help="names or letters, comma separated (default: all; with --tls: k,a,c,e,g)")
    ap.add_argument("--tls", action="store_true", help="zabd with TLS client ports, client certificates and tokens")
    ap.add_argument("--quick", action="store_true", help="the test run's small counts")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON (the table goes to stderr)")
    ap.add_argument("--keep", action="store_true", help="keep the data directories and server logs")
    ap.add_argument("--zk-heap", default="1g", help="ZooKeeper's -Xms/-Xmx per server (cluster.sh: 1g)")
    ap.add_argument("--extra", action="append", default=[], metavar="KEY=VALUE",
                    help="a zabd config field (int or string), e.g. client_frame_timeout_ms=2000")
    args = ap.parse_args(argv)
    if args.tls and args.target != "zabd":
        ap.error("--tls is zabd's mode: use it with --target zabd")
    try:
        probes = select(args.probes, tls=args.tls)
    except ValueError as exc:
        ap.error(str(exc))
    extra: dict[str, Any] = {}
    for kv in args.extra:
        k, _, v = kv.partition("=")
        extra[k] = int(v) if v.lstrip("-").isdigit() else v
    params = Params.cheap() if args.quick else Params()
    # thousands of sockets held at once, by the attacker in this process
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    logging.basicConfig(level=logging.CRITICAL)  # kazoo's reconnect chatter is not the result
    signal.signal(signal.SIGTERM, _stop)

    targets: list[Target] = []
    if args.target in ("zabd", "both"):
        targets.append(ZabdTarget(extra=extra, tls=args.tls, log=log, keep=args.keep))
    if args.target in ("zookeeper", "both"):
        targets.append(ZooKeeperTarget(heap=args.zk_heap, log=log, keep=args.keep))
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    log(f"abuse suite: {' '.join(argv) or '(defaults)'}; {env_line()}")
    rows: list[Row] = []
    described = []
    for t in targets:
        log(f"starting {t.name}")
        t0 = time.monotonic()
        try:
            t.start()
            described.append(t.describe())
            rows += run_suite(t, probes, params, log)
        finally:
            t.stop()
        log(f"{t.name}: done in {time.monotonic() - t0:.0f} s")
    finished = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    text = "\n".join([f"abuse suite, {started} .. {finished}; {env_line()}", *described, "", table(rows)])
    if args.json:
        print(text, file=sys.stderr)
        print(json.dumps({"started": started, "finished": finished, "targets": described, "rows": to_json(rows)},
                         indent=1))
    else:
        print(text)
    return 1 if any(r.applies and r.verdict != "pass" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
