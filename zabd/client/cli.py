"""``zabd propose``, ``zabd status``, ``zabd log`` (each with ``--json``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from zabd.protocol import zxid as zx

DEFAULT_SERVERS = "127.0.0.1:7001"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


EXIT_UNKNOWN = 3  # a write was sent and its outcome is unknown
_EPILOG = (
    "Calls that change nothing are retried on the next server for --retry-reads seconds. A write is retried "
    "only while it certainly did nothing (no leader, overloaded, no server reachable), for --retry-for seconds. "
    "Exit status: 0 ok, 1 error, 2 usage, 3 a write whose outcome is unknown (it may or may not have been applied)."
)


def _parser(prog: str, desc: str) -> _Parser:
    p = _Parser(prog=prog, description=desc, epilog=_EPILOG)
    p.add_argument("--servers", "--server", default=DEFAULT_SERVERS, help="host:port[,host:port...] (client ports)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")
    p.add_argument(
        "--retry-reads", type=float, default=10.0, help="seconds to retry calls that change nothing (default 10)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    security_options(p)
    return p


def security_options(p: argparse.ArgumentParser) -> None:
    """``--ca --cert --key --token`` (zabd status/propose/log/kv/bench)."""
    g = p.add_argument_group("TLS and authentication")
    g.add_argument("--ca", help="CA bundle (PEM) to verify the servers with; turns TLS on")
    g.add_argument("--cert", help="client certificate (PEM), for servers that ask for one; turns TLS on")
    g.add_argument("--key", help="the client certificate's key (PEM)")
    g.add_argument("--token", default=os.environ.get("ZABD_TOKEN"), help="auth token (default: $ZABD_TOKEN)")


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """``Client.connect`` keywords from the options above (ValueError: a bad file)."""
    from zabd.tls import client_tls

    return {"tls": client_tls(args.ca, args.cert, args.key), "token": args.token or None}


def _retry_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--retry-for",
        "--retry",
        dest="retry_for",
        type=float,
        default=10.0,
        help="seconds to retry a write that certainly did nothing, e.g. during an election (default 10; 0: fail fast)",
    )


async def _as_coro(fn: Callable[[], Awaitable[int]]) -> int:
    return await fn()


def _run(prog: str, coro_fn: Callable[[], Awaitable[int]]) -> int:
    from zabd.client.client import OutcomeUnknown, ZabdError

    try:
        import uvloop

        return uvloop.run(_as_coro(coro_fn))
    except OutcomeUnknown as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except ZabdError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except TimeoutError:
        print(f"{prog}: timed out", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C (``zabd log --follow``): the user's way to stop, not an error
        return 130


# zxid fields of the status answer, shown epoch:counter like everywhere else in the CLI
_STATUS_ZXIDS = ("last_zxid", "last_committed", "log_base")


def _status_json(st: dict[str, Any]) -> dict[str, Any]:
    out = dict(st)
    for k in _STATUS_ZXIDS:
        if isinstance(out.get(k), int):
            out[k] = zx.fmt(out[k])
    snaps = out.get("snapshots")
    if isinstance(snaps, dict) and isinstance(snaps.get("last_zxid"), int):
        out["snapshots"] = snaps | {"last_zxid": zx.fmt(snaps["last_zxid"])}
    if out.get("leader") == 0:  # 0 is no node id: there is no leader
        out["leader"] = None
    tree = out.get("zk")
    if isinstance(tree, dict) and isinstance(tree.get("digest_zxid"), int):
        out["zk"] = tree | {"digest_zxid": zx.fmt(tree["digest_zxid"])}
    return out


def _tree_text(st: dict[str, Any]) -> str:
    """`` zk=...``: the ZooKeeper tree's size and its digest at a zxid (two
    replicas showing the same zxid must show the same digest)."""
    tree = st.get("zk")
    if not isinstance(tree, dict):
        return ""
    return (f" zk={tree['znodes']} znodes/{tree['sessions']} sessions "
            f"digest={tree['digest']}@{zx.fmt(tree['digest_zxid'])}")


def propose_main(argv: list[str]) -> int:
    p = _parser("zabd propose", "submit proposals; prints the committed zxid of each")
    p.add_argument("payload", nargs="*", help="payloads (UTF-8 text); with none, one per line from stdin")
    _retry_option(p)
    args = p.parse_args(argv)

    async def go() -> int:
        from zabd.client.client import Client

        payloads = [s.encode() for s in args.payload] or [line.rstrip("\n").encode() for line in sys.stdin]
        async with await Client.connect(
            args.servers, timeout=args.timeout, read_retry=args.retry_reads, **connect_options(args)
        ) as client:
            zxids = await asyncio.gather(*(client.propose(pl, retry_for=args.retry_for) for pl in payloads))
        for pl, z in zip(payloads, zxids, strict=True):
            if args.json:
                print(json.dumps({"zxid": z, "zxid_str": zx.fmt(z), "size": len(pl)}))
            else:
                print(zx.fmt(z))
        return 0

    return _run("zabd propose", go)


def _member(text: str) -> tuple[int, str]:
    from zabd.codec.members import parse_spec

    node, sep, addr = text.partition("=")
    if not node.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected ID or ID=HOST:PEER_PORT (or ID=ZooKeeper's "
                                         "HOST:QUORUM:ELECTION[:ROLE][;CLIENT])")
    if sep:
        try:
            parse_spec(addr)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return int(node), addr


def _members(text: str) -> dict[int, str]:
    return dict(_member(item) for item in text.split(",") if item)


def reconfig_main(argv: list[str]) -> int:
    p = _parser("zabd reconfig", "change the membership (one voter more or fewer per change; observers freely)")
    p.add_argument("--add", action="append", type=_member, default=[], metavar="ID=HOST:PEER_PORT",
                   help="make a node a voter (a new node needs its quorum address, or its whole ZooKeeper spec "
                   "host:quorum:election;client as its peers entry has it; start it with join = true)")
    p.add_argument("--observe", action="append", type=_member, default=[], metavar="ID[=HOST:PEER_PORT]",
                   help="make a node an observer (a member that never votes)")
    p.add_argument("--remove", action="append", type=int, default=[], metavar="ID", help="take a node out")
    p.add_argument("--voters", type=_members, metavar="ID[=HOST:PORT],...",
                   help="the whole membership instead: these voters (with --observers, those observers; "
                   "made one voter at a time)")
    p.add_argument("--observers", type=_members, default={}, metavar="ID[=HOST:PORT],...")
    args = p.parse_args(argv)
    if args.voters is not None and (args.add or args.observe or args.remove):
        p.error("--voters (a whole membership) excludes --add, --observe and --remove")
    if args.voters is None and not (args.add or args.observe or args.remove):
        p.error("nothing to change: give --add, --observe, --remove, or --voters")

    async def go() -> int:
        from zabd.client.client import Client
        from zabd.client.membership_steps import steps

        async with await Client.connect(
            args.servers, timeout=args.timeout, read_retry=args.retry_reads, **connect_options(args)
        ) as client:
            if args.voters is None:
                plan: list[dict[str, Any]] = [{"add": dict(args.add), "observe": dict(args.observe),
                                                "remove": args.remove}]  # fmt: skip
            else:
                m = (await client.status()).model_dump()["membership"]
                plan = steps(set(m["voters"]), set(m["observers"]), args.voters, args.observers)
            for kw in plan:
                z = await client.reconfig(**kw)
                st = (await client.status()).model_dump()
                out = {"zxid": zx.fmt(z), "membership": st.get("membership")}
                print(json.dumps(out) if args.json else f"membership changed at {zx.fmt(z)}: {out['membership']}")
            if not plan:
                print("nothing to change: the membership is already that one", file=sys.stderr)
        return 0

    return _run("zabd reconfig", go)


def status_main(argv: list[str]) -> int:
    p = _parser("zabd status", "show each listed server's status")
    args = p.parse_args(argv)

    async def go() -> int:
        from zabd.client.client import Client, ZabdError, parse_servers

        rc = 0
        rows: list[dict[str, Any]] = []
        for host, port in parse_servers(args.servers):
            addr = f"{host}:{port}"
            try:
                # one server each: a retry could only ask the same one again
                async with await Client.connect(
                    addr, timeout=args.timeout, read_retry=0, **connect_options(args)
                ) as client:
                    st = (await client.status()).model_dump()
                st["server"] = addr
            except (ZabdError, OSError, TimeoutError) as exc:
                st = {"server": addr, "error": str(exc)}
                rc = 1
            rows.append(st)
        for st in rows:
            if args.json:
                print(json.dumps(_status_json(st)))
            elif "error" in st:
                print(f"{st['server']}: unreachable ({st['error']})")
            else:
                print(
                    f"{st['server']}: node {st['id']} {st['role']} ({st['phase']}) leader={st['leader'] or 'none'} "
                    f"epoch={st['current_epoch']}/{st['accepted_epoch']} last_zxid={zx.fmt(st['last_zxid'])} "
                    f"committed={zx.fmt(st['last_committed'])} peers_connected={st['peers_connected']}"
                    + _tree_text(st)
                )
        return rc

    return _run("zabd status", go)


def log_main(argv: list[str]) -> int:
    from zabd.kv import txnfmt  # the one decoder of committed payloads (KV, ZooKeeper, raw)

    if argv and argv[0] in ("dump", "verify"):
        from zabd.kv.replay import replay_log
        from zabd.storage.tools import dump_main, verify_main

        # the storage layer reads the files; what the payloads mean is told to it from here
        if argv[0] == "dump":
            result: int = dump_main(argv[1:], describe=txnfmt.txn_text)
        else:
            result = verify_main(argv[1:], replay=replay_log)
        return result
    p = _parser("zabd log", "print committed transactions in order ('zabd log dump|verify DIR' reads a data dir)")
    p.add_argument("--from", dest="from_zxid", default="0", help="first zxid (integer or epoch:counter)")
    p.add_argument("--limit", type=int, default=0, help="at most this many (default: all)")
    p.add_argument("--follow", action="store_true", help="keep printing commits as they happen")
    args = p.parse_args(argv)
    if args.limit < 0:
        print(f"zabd log: --limit {args.limit}: expected a count >= 0 (0: all)", file=sys.stderr)
        return 2
    try:
        if ":" in args.from_zxid:
            e, c = args.from_zxid.split(":", 1)
            start = zx.make(int(e), int(c))
        else:
            start = int(args.from_zxid)
    except ValueError:
        print(f"zabd log: --from {args.from_zxid!r}: expected an integer or epoch:counter", file=sys.stderr)
        return 2

    def show(z: int, payload: bytes, kind: str) -> None:
        raw = kind == "raw"  # a raw proposal's bytes as proposed, whatever they look like
        if args.json:
            row: dict[str, Any] = {"zxid": z, "zxid_str": zx.fmt(z), "kind": kind}
            decoded = {} if raw else txnfmt.txn_json(payload)  # {"kv": ...}, {"zk": ...}: and the bytes as hex
            row |= decoded | {"payload": txnfmt.json_bytes(payload) if raw else {"hex": payload.hex()}}
            print(json.dumps(row), flush=True)
            return
        text = None if raw else txnfmt.txn_text(payload)
        if text is None:
            text = payload.decode("utf-8", "backslashreplace")
        print(f"{zx.fmt(z)}\t{text}", flush=True)

    async def go() -> int:
        from zabd.client.client import Client

        async with await Client.connect(
            args.servers, timeout=args.timeout, read_retry=args.retry_reads, **connect_options(args)
        ) as client:
            if args.follow:
                n = 0
                async for txn in client.watch(start):
                    show(*txn)
                    n += 1
                    if args.limit and n >= args.limit:
                        break
                return 0
            if args.limit:
                txns = await client.read(start, args.limit)
            else:
                txns = await client.read_all(start)
            for txn in txns:
                show(*txn)
        return 0

    return _run("zabd log", go)
