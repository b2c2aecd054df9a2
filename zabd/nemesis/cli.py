"""``zabd nemesis``: Jepsen-style runs against real servers (root, Linux).

    zabd nemesis --nemesis kill,isolate-leader [--nodes 3,5] [--seconds 60] [--interval 5]
                 [--quiet 5] [--seed 1] [--out out/nemesis] [--workload zabd|zk]

Each nemesis runs alone for ``--seconds`` on a fresh cluster of each size, a
fault every ``--interval`` seconds (lasting that long), then a quiet period;
``--nemesis all`` runs every one, ``mixed`` draws a different one each time.
A table of the results is printed; histories, summaries and (when a history
is not linearizable) an explanation are written under ``--out``. Exit status
1 when any run found a problem, 2 for a usage error. ``--workload zk`` drives
the servers' ZooKeeper ports with kazoo (registers as znodes, sequential
creates as appends, ephemerals that must go with their sessions) instead of
zabd's own client port. ``--membership`` also changes the membership while
the faults go on: voters added, removed (the leader too) and demoted, and
observers added and removed, among the nodes and ``--spares`` more servers
started with ``join = true``; the voters are put back at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import NoReturn

from zabd.nemesis.faults import ALL


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"zabd nemesis: {message}", file=sys.stderr)
        raise SystemExit(2)


def _names(text: str) -> list[str]:
    names = list(ALL) if text == "all" else [x.strip() for x in text.split(",") if x.strip()]
    for name in names:
        if name not in ALL:
            raise ValueError(f"--nemesis: {name!r} is not a nemesis; expected all or some of {', '.join(ALL)}")
    return names


def main(argv: list[str]) -> int:
    p = _Parser(prog="zabd nemesis", description=__doc__.split("\n\n")[0])
    p.add_argument("--nemesis", default="all", help=f"comma-separated: {', '.join(ALL)}, or all")
    p.add_argument("--nodes", default="3", help="cluster sizes, comma-separated (3..7)")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--quiet", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="out/nemesis")
    p.add_argument("--workload", choices=("zabd", "zk"), default="zabd",
                   help="zabd: zabd's client port (default); zk: kazoo clients on the ZooKeeper port")
    p.add_argument("--membership", action="store_true",
                   help="also make a random membership change every --interval seconds, between the faults")
    p.add_argument("--spares", type=int, default=2,
                   help="with --membership: servers beyond --nodes that start outside the ensemble (default 2)")
    p.add_argument("--no-audit", action="store_true",
                   help="skip `zabd pipeline audit` of the data directories after each run (it needs Spark)")
    args = p.parse_args(argv)
    try:
        names = _names(args.nemesis)
        sizes = [int(x) for x in args.nodes.split(",")]
    except ValueError as exc:
        p.error(str(exc).removeprefix("invalid literal for int() with base 10: "))
    if any(not 3 <= n <= 7 for n in sizes):
        p.error(f"--nodes {args.nodes}: expected sizes in 3..7")
    if args.membership and not 1 <= args.spares <= 4:
        p.error(f"--spares {args.spares}: expected 1..4")
    if args.seconds < 2 * args.interval or args.interval <= 0:
        p.error(f"--seconds {args.seconds} must be at least twice --interval {args.interval}")
    from zabd.nemesis.netlab import available
    from zabd.nemesis.runner import RunConfig, run

    ok, why = available()
    if not ok:
        print(f"zabd nemesis: cannot run here: {why}", file=sys.stderr)
        return 2
    summaries = []
    for n in sizes:
        for name in names:
            cfg = RunConfig(name, n, args.seconds, args.interval, args.quiet, seed=args.seed, out=Path(args.out),
                            audit=not args.no_audit, workload=args.workload,
                            spares=args.spares if args.membership else 0)
            extra = f", membership changes with {args.spares} spares" if args.membership else ""
            print(f"== {name}, {n} nodes, {args.seconds:g} s, workload {args.workload}{extra}", flush=True)
            summaries.append(asyncio.run(run(cfg, lambda line: print(line, flush=True))))
    zk = args.workload == "zk"
    print()
    print("| nemesis | nodes | faults | register ok/fail/unknown | appends ok/fail/unknown | linearizable "
          "| lost appends | longest gap | logs agree | verify |" + (" ephemerals left |" if zk else ""))
    print("| --- | ---: | ---: | --- | --- | --- | ---: | ---: | --- | --- |" + (" ---: |" if zk else ""))
    for s in summaries:
        r, a = s.register_ops, s.append_ops
        print(f"| {s.nemesis} | {s.nodes} | {s.faults} | {r['ok']}/{r['fail']}/{r['unknown']} | "
              f"{a['ok']}/{a['fail']}/{a['unknown']} | {s.linearizable} | {s.lost_appends} | "
              f"{s.longest_no_write_s:.1f} s | {s.logs_agree} | {s.verify_ok} |"
              + (f" {s.ephemerals_left} |" if zk else ""))
    for s in summaries:
        for note in s.notes:
            print(f"{s.nemesis} n={s.nodes}: {note}")
        if not s.append_problems.startswith("ok"):
            print(f"{s.nemesis} n={s.nodes}: appends: {s.append_problems}")
    return 0 if all(s.ok for s in summaries) else 1
