"""``zabd kv put|get|cas|delete|sync``: the key-value calls from a shell."""

from __future__ import annotations

import json
import sys
from typing import Any

from zabd.client.cli import _parser, _retry_option, _run, connect_options
from zabd.kv.txnfmt import json_bytes
from zabd.protocol import zxid as zx

USAGE = "usage: zabd kv {put KEY VALUE | get KEY [--sync] | cas KEY VERSION VALUE | delete KEY [--version N] | sync}"


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if not argv or argv[0] not in ("put", "get", "cas", "delete", "sync"):
        print(f"zabd kv: {USAGE}", file=sys.stderr)
        return 2 if argv and argv[0] not in ("-h", "--help") else (0 if argv else 2)
    op = argv[0]
    p = _parser(f"zabd kv {op}", f"key-value {op}")
    if op in ("put", "cas", "delete"):
        _retry_option(p)
    if op != "sync":
        # not dest "key": that is the connection flags' --key (the client certificate's key)
        p.add_argument("kv_key", metavar="key")
    if op == "cas":
        p.add_argument("version", type=int, help="expected version (0: create only if absent)")
    if op in ("put", "cas"):
        p.add_argument("value", help="UTF-8 text")
    if op == "delete":
        p.add_argument("--version", type=int, default=-1, help="delete only at this version (default: any)")
    if op == "get":
        p.add_argument("--sync", action="store_true", help="sync with the leader first (read-your-writes)")
    args = p.parse_args(argv[1:])

    async def go() -> int:
        from zabd.client.client import Client

        async with await Client.connect(
            args.servers, timeout=args.timeout, read_retry=args.retry_reads, **connect_options(args)
        ) as c:
            out: dict[str, Any]
            if op == "sync":
                z = await c.sync()
                out = {"zxid": z, "zxid_str": zx.fmt(z)}
            elif op == "get":
                if args.sync:
                    await c.sync()
                g = await c.get(args.kv_key)
                if args.json:
                    out = {"key": args.kv_key, "value": None if g.value is None else json_bytes(g.value)}
                    out |= {"version": g.version, "zxid": g.zxid}
                    print(json.dumps(out))
                elif g.value is None:
                    print(f"{args.kv_key}: (absent)", file=sys.stderr)
                else:
                    print(g.value.decode("utf-8", "backslashreplace"))
                return 0 if g.value is not None else 1
            else:
                if op == "put":
                    w = await c.put(args.kv_key, args.value.encode(), retry_for=args.retry_for)
                elif op == "cas":
                    w = await c.cas(args.kv_key, args.version, args.value.encode(), retry_for=args.retry_for)
                else:
                    w = await c.delete(args.kv_key, args.version, retry_for=args.retry_for)
                out = {"zxid": w.zxid, "zxid_str": zx.fmt(w.zxid), "version": w.version}
            if args.json:
                print(json.dumps(out))
            else:
                # zxid as epoch:counter, under the name --json uses for the integer
                print(" ".join(f"{k}={zx.fmt(v) if k == 'zxid' else v}" for k, v in out.items() if k != "zxid_str"))
        return 0

    return _run(f"zabd kv {op}", go)
