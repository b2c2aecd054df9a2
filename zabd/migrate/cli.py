"""``zabd import-zookeeper`` and ``zabd export-zookeeper``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from zabd.migrate.zk_export import ZooKeeperExportError, export_zookeeper
from zabd.migrate.zk_import import ZooKeeperImportError, import_zookeeper
from zabd.migrate.zk_mirror import (
    LINK_TIMEOUT_S,
    MirrorError,
    MirrorResult,
    mirror_zookeeper,
    parse_quorum,
    servers_from_zoo_cfg,
)
from zabd.protocol import zxid as zx
from zabd.zk.datadir import ZkFormatError

T = TypeVar("T")


def _progress(quiet: bool) -> Callable[[str], None]:
    """One line rewritten in place on a terminal; a line each otherwise."""
    tty = sys.stderr.isatty()
    width = [0]

    def say(msg: str) -> None:
        if quiet:
            return
        if tty:
            sys.stderr.write("\r" + msg.ljust(width[0]))
            width[0] = len(msg)
        else:
            sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    return say


def _done(quiet: bool) -> None:
    if not quiet and sys.stderr.isatty():
        sys.stderr.write("\n")


def _attempt(prog: str, quiet: bool, errors: tuple[type[Exception], ...], call: Callable[[], T]) -> T | None:
    """``call()``, or None with one line on stderr for a user's mistake or a
    damaged input (``errors``) and for what the file system refused."""
    try:
        return call()
    except errors as exc:
        print(("\n" if not quiet and sys.stderr.isatty() else "") + f"{prog}: {exc}", file=sys.stderr)
    except OSError as exc:
        print(("\n" if not quiet and sys.stderr.isatty() else "") + f"{prog}: {exc.filename or ''}: "
              f"{exc.strerror or exc}", file=sys.stderr)
    return None


def import_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="zabd import-zookeeper",
        description="read a ZooKeeper 3.5-3.9 data directory (its newest snapshot and the logs after it) into new "
                    "zabd data directories, with every znode's data, Stat fields and ACL, and the sessions")
    p.add_argument("data_dir", metavar="DATA_DIR", help="ZooKeeper's dataDir (or the version-2 folder inside it)")
    p.add_argument("--out", required=True, help="the zabd data directory to write (must not exist, or be empty)")
    p.add_argument("--nodes", type=int, default=None,
                   help="write OUT/data1..dataN, one per node of a new N-node cluster (zabd cluster --dir OUT)")
    p.add_argument("--log-dir", default=None, help="ZooKeeper's dataLogDir, when it is not DATA_DIR")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    if args.nodes is not None and not 1 <= args.nodes <= 7:
        print(f"zabd import-zookeeper: --nodes {args.nodes}: expected 1 to 7", file=sys.stderr)
        return 2
    started = time.monotonic()
    r = _attempt("zabd import-zookeeper", args.quiet, (ZooKeeperImportError, ZkFormatError),
                 lambda: import_zookeeper(args.data_dir, args.out, args.nodes, args.log_dir, _progress(args.quiet)))
    if r is None:
        return 1
    _done(args.quiet)
    for s in r.skipped_snapshots:
        print(f"skipped a damaged snapshot: {s}", file=sys.stderr)
    print(f"imported {r.znodes:,} znodes and {r.sessions:,} sessions from {r.snapshot} "
          f"and {r.txns:,} txns of {r.logs} log file(s), in {time.monotonic() - started:.1f} s; "
          f"zabd's state is at zxid {r.zxid:#x} ({zx.fmt(r.zxid)}), its next epoch above {r.epoch}")
    for d in r.out:
        print(f"  {d}")
    return 0


def export_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="zabd export-zookeeper",
        description="write a zabd data directory's state as a ZooKeeper dataDir (version-2/snapshot.<zxid>, an "
                    "empty log, the epoch files) that ZooKeeper 3.8 loads as its own")
    p.add_argument("data_dir", metavar="ZABD_DATA_DIR", help="a stopped zabd server's data directory")
    p.add_argument("--out", required=True, help="the ZooKeeper dataDir to write (must not exist, or be empty)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    started = time.monotonic()
    r = _attempt("zabd export-zookeeper", args.quiet, (ZooKeeperExportError,),
                 lambda: export_zookeeper(args.data_dir, args.out, _progress(args.quiet)))
    if r is None:
        return 1
    _done(args.quiet)
    print(f"exported {r.znodes:,} znodes and {r.sessions:,} sessions at zxid {r.zxid:#x} ({zx.fmt(r.zxid)}), "
          f"epoch {r.epoch}, to {r.snapshot} in {time.monotonic() - started:.1f} s"
          + (f"; {r.above_commit:,} of the {r.txns:,} logged txns replayed were above the commit point on record"
             if r.above_commit else ""))
    return 0


def mirror_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="zabd mirror",
        description="follow a live ZooKeeper ensemble as an observer, writing every committed txn with ZooKeeper's "
                    "zxid into new zabd data directories; stop ZooKeeper to cut over (with --cutover the mirror "
                    "then exits by itself), and start zabd on the directories")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zoo-cfg", help="a zoo.cfg of the ensemble: its server.N lines say where a leader listens")
    where.add_argument("--quorum", help="host:quorumPort of each ZooKeeper server, comma-separated")
    p.add_argument("--out", required=True, help="the zabd data directory to write (must not exist, or be empty)")
    p.add_argument("--nodes", type=int, default=None, help="write OUT/data1..dataN, one per node of a new cluster")
    p.add_argument("--observer-id", type=int, default=4242,
                   help="the server id the mirror gives ZooKeeper's leader (default 4242; not one of the ensemble's)")
    p.add_argument("--cutover", action="store_true",
                   help="exit once ZooKeeper has had no leader for --cutover-grace seconds after being followed")
    p.add_argument("--cutover-grace", type=float, default=5.0, help="seconds without a leader that mean ZooKeeper "
                   "was stopped, not electing (default 5)")
    p.add_argument("--finish-from", action="append", default=[], metavar="ZK_DATA_DIR",
                   help="after ZooKeeper stopped, take the txns its servers logged after the mirror's last from "
                        "these dataDirs (repeatable; the one that logged most is used): closes the window of a "
                        "txn committed as the leader stopped, before it informed the mirror")
    p.add_argument("--link-timeout", type=float, default=LINK_TIMEOUT_S,
                   help="seconds a link to a leader may stay silent before the mirror leaves it and looks for the "
                        f"leader again (default {LINK_TIMEOUT_S:g}; ZooKeeper's learners: syncLimit x tickTime)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    if args.link_timeout <= 0:
        print(f"zabd mirror: --link-timeout {args.link_timeout}: expected seconds > 0", file=sys.stderr)
        return 2
    if args.nodes is not None and not 1 <= args.nodes <= 7:
        print(f"zabd mirror: --nodes {args.nodes}: expected 1 to 7", file=sys.stderr)
        return 2
    if args.cutover_grace <= 0:
        print(f"zabd mirror: --cutover-grace {args.cutover_grace}: expected seconds > 0", file=sys.stderr)
        return 2
    def run() -> MirrorResult:
        servers = servers_from_zoo_cfg(args.zoo_cfg) if args.zoo_cfg else parse_quorum(args.quorum)
        return mirror_zookeeper(servers, args.out, args.nodes, args.observer_id,
                                args.cutover_grace if args.cutover else None, args.finish_from,
                                _progress(args.quiet), args.link_timeout)

    r = _attempt("zabd mirror", args.quiet, (MirrorError, ZkFormatError), run)
    if r is None:
        return 1
    _done(args.quiet)
    print(f"mirrored up to zxid {r.zxid:#x} ({zx.fmt(r.zxid)}), epoch {r.epoch}: {r.znodes:,} znodes, "
          f"{r.sessions:,} sessions, {r.txns:,} txns in {r.syncs} sync(s)")
    if r.finished:
        print(f"  {r.finished} txn(s) were taken from ZooKeeper's logs (--finish-from)")
    if r.leader_proposed > r.zxid:
        print(f"zabd mirror: warning: ZooKeeper's leader had proposed up to {r.leader_proposed:#x} "
              f"({zx.fmt(r.leader_proposed)}); the mirror holds {r.zxid:#x}. Txns after it may have committed "
              "without reaching the mirror; the stopped servers' logs hold them: import-zookeeper a server's "
              "dataDir instead, or mirror with --finish-from", file=sys.stderr)
    for d in r.out:
        print(f"  {d}")
    return 0
