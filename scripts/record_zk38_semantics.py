#!/usr/bin/env python3
"""Record ZooKeeper 3.8's answers to a fixed list of scripted cases, for
``tests/zk/test_zk38_semantics.py`` to replay against zabd's in-process
``Standalone`` (so the default test run needs no Java).

It starts a standalone ZooKeeper from the Debian package (a fresh dataDir in
a temp dir, a free port, TTL nodes enabled, the container/TTL reaper pushed
out of the way so it never writes during the run), runs every case through
kazoo's connection with raw jute requests (so kazoo neither rewrites paths
nor checks anything on the client side) and writes what came back,
normalised, to ``tests/data/zk38_semantics.json``. Then it stops the server
by its PID. Every wait is bounded.

    python3 scripts/record_zk38_semantics.py [--out PATH] [--keep-logs]

Normalisation (the test does the same to zabd's answers): times are
dropped; zxids are relative to the case's base (the zxid of its first
session's createSession, read from a reply header), 0 stays "zero" and
older ones are "pre"; ephemeralOwner is {"session": k} for the case's k-th
session; data longer than 64 bytes is its length and sha256; children are
sorted. Every txn gets a zxid in both ZooKeeper and zabd (createSession,
closeSession, failed writes, multis), so relative zxids compare as long as
sessions open and close at the same points, which the steps say.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "zk38_semantics.json"
CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
START_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 30.0
SESSION_TIMEOUT_S = 20.0
SILENCE_S = 5.0  # how long a reply ZooKeeper never sends is waited for

# ------------------------------------------------------------ jute on the wire

_INT = struct.Struct("!i")
_LONG = struct.Struct("!q")
_STAT = struct.Struct("!qqqqiiiqiiq")
_MULTI_HEADER = struct.Struct("!iBi")


def _wstr(s: str) -> bytes:
    """A jute ustring; unlike kazoo's, "" is sent as "" (length 0), not null."""
    b = s.encode("utf-8", "surrogatepass")
    return _INT.pack(len(b)) + b


def _wbuf(b: bytes) -> bytes:
    return _INT.pack(len(b)) + b


def _wacl(acl: list[list[Any]]) -> bytes:
    out = bytearray(_INT.pack(len(acl)))
    for perms, scheme, id_ in acl:
        out += _INT.pack(perms) + _wstr(scheme) + _wstr(id_)
    return bytes(out)


def _rstr(buf: bytes, off: int) -> tuple[str | None, int]:
    n = _INT.unpack_from(buf, off)[0]
    off += 4
    if n < 0:
        return None, off
    return bytes(buf[off:off + n]).decode("utf-8", "surrogatepass"), off + n


def _rbuf(buf: bytes, off: int) -> tuple[bytes | None, int]:
    n = _INT.unpack_from(buf, off)[0]
    off += 4
    if n < 0:
        return None, off
    return bytes(buf[off:off + n]), off + n


def _rstat(buf: bytes, off: int) -> tuple[ZnodeStat, int]:
    return ZnodeStat._make(_STAT.unpack_from(buf, off)), off + _STAT.size


OPEN_ACL = [[31, "world", "anyone"]]


def _create_body(path: str, data: bytes, acl: list[list[Any]], flags: int, ttl: int | None) -> bytes:
    body = _wstr(path) + _wbuf(data) + _wacl(acl) + _INT.pack(flags)
    if ttl is not None:
        body += _LONG.pack(ttl)
    return body


def create_opcode(mode: int, ttl: int | None) -> int:
    """How ZooKeeper's Java client sends a create: createTTL with a ttl,
    createContainer for a container, else create2 (the one with a Stat)."""
    if ttl is not None:
        return 21
    if mode == 4:
        return 19
    return 15


class Raw(namedtuple("Raw", "type body kind")):
    """A request kazoo's connection sends as is; ``kind`` says how to read the reply."""

    def serialize(self) -> bytes:
        return self.body

    def deserialize(self, buf: bytes, off: int) -> Any:
        kind = self.kind
        if kind in ("create2",):
            path, off = _rstr(buf, off)
            stat, off = _rstat(buf, off)
            return {"path": path, "stat": stat}
        if kind == "create":
            return {"path": _rstr(buf, off)[0]}
        if kind in ("none", "check"):
            return {}
        if kind == "stat":
            return {"stat": _rstat(buf, off)[0]}
        if kind == "exists":
            stat = _rstat(buf, off)[0]
            return {"stat": stat if stat.czxid != -1 else None}
        if kind == "data":
            data, off = _rbuf(buf, off)
            return {"data": data or b"", "stat": _rstat(buf, off)[0]}
        if kind in ("children", "children2"):
            n = _INT.unpack_from(buf, off)[0]
            off += 4
            kids = []
            for _ in range(max(n, 0)):
                k, off = _rstr(buf, off)
                kids.append(k)
            out: dict[str, Any] = {"children": kids}
            if kind == "children2":
                out["stat"] = _rstat(buf, off)[0]
            return out
        if kind == "acl":
            n = _INT.unpack_from(buf, off)[0]
            off += 4
            acl = []
            for _ in range(max(n, 0)):
                perms = _INT.unpack_from(buf, off)[0]
                scheme, off = _rstr(buf, off + 4)
                id_, off = _rstr(buf, off)
                acl.append([perms, scheme, id_])
            return {"acl": acl, "stat": _rstat(buf, off)[0]}
        if kind == "sync":
            return {"path": _rstr(buf, off)[0]}
        if kind == "paths":
            n = _INT.unpack_from(buf, off)[0]
            off += 4
            out_paths = []
            for _ in range(max(n, 0)):
                p, off = _rstr(buf, off)
                out_paths.append(p)
            return {"paths": out_paths}
        if kind == "count":
            return {"number": _INT.unpack_from(buf, off)[0]}
        if kind == "multi":
            results = []
            while True:
                typ, done, _err = _MULTI_HEADER.unpack_from(buf, off)
                off += _MULTI_HEADER.size
                if done:
                    break
                if typ == 1:
                    p, off = _rstr(buf, off)
                    results.append({"type": "create", "path": p})
                elif typ == 15:
                    p, off = _rstr(buf, off)
                    st, off = _rstat(buf, off)
                    results.append({"type": "create", "path": p, "stat": st})
                elif typ == 2:
                    results.append({"type": "delete"})
                elif typ == 5:
                    st, off = _rstat(buf, off)
                    results.append({"type": "set", "stat": st})
                elif typ == 13:
                    results.append({"type": "check"})
                elif typ == -1:
                    code = _INT.unpack_from(buf, off)[0]
                    off += 4
                    results.append({"type": "error", "code": code})
                else:
                    raise ValueError(f"unexpected multi result type {typ}")
            # kazoo "unchroots" a multi's answer item by item: a list of one dict passes through
            return [{"results": results}]
        raise ValueError(kind)


_MULTI_OPCODES = {"create": 1, "create2": 15, "delete": 2, "set": 5, "check": 13}


def build_request(step: dict[str, Any]) -> Raw:
    op = step["op"]
    if op == "create":
        code = create_opcode(step["mode"], step.get("ttl"))
        acl = OPEN_ACL if step["acl"] is None else step["acl"]
        body = _create_body(step["path"], data_of(step), acl, step["mode"], step.get("ttl"))
        return Raw(code, body, "create2")
    if op == "delete":
        return Raw(2, _wstr(step["path"]) + _INT.pack(step["version"]), "none")
    if op == "set":
        return Raw(5, _wstr(step["path"]) + _wbuf(data_of(step)) + _INT.pack(step["version"]), "stat")
    if op == "set_acl":
        return Raw(7, _wstr(step["path"]) + _wacl(step["acl"]) + _INT.pack(step["version"]), "stat")
    if op == "get":
        return Raw(4, _wstr(step["path"]) + b"\0", "data")
    if op == "exists":
        return Raw(3, _wstr(step["path"]) + b"\0", "exists")
    if op == "children":
        if step["stat"]:
            return Raw(12, _wstr(step["path"]) + b"\0", "children2")
        return Raw(8, _wstr(step["path"]) + b"\0", "children")
    if op == "get_acl":
        return Raw(6, _wstr(step["path"]), "acl")
    if op == "sync":
        return Raw(9, _wstr(step["path"]), "sync")
    if op == "check":
        return Raw(13, _wstr(step["path"]) + _INT.pack(step["version"]), "check")
    if op == "ephemerals":
        return Raw(103, _wstr(step["prefix"]), "paths")
    if op == "count":
        return Raw(104, _wstr(step["path"]), "count")
    if op == "multi":
        body = bytearray()
        for sub in step["ops"]:
            kind = sub["op"]
            if kind == "create":
                code = 1 if sub["opcode"] == "create" else create_opcode(sub["mode"], sub.get("ttl"))
                acl = OPEN_ACL if sub["acl"] is None else sub["acl"]
                payload = _create_body(sub["path"], data_of(sub), acl, sub["mode"], sub.get("ttl"))
            elif kind == "delete":
                code, payload = 2, _wstr(sub["path"]) + _INT.pack(sub["version"])
            elif kind == "set":
                code, payload = 5, _wstr(sub["path"]) + _wbuf(data_of(sub)) + _INT.pack(sub["version"])
            elif kind == "check":
                code, payload = 13, _wstr(sub["path"]) + _INT.pack(sub["version"])
            else:
                raise ValueError(kind)
            body += _MULTI_HEADER.pack(code, 0, -1) + payload
        body += _MULTI_HEADER.pack(-1, 1, -1)
        return Raw(14, bytes(body), "multi")
    raise ValueError(op)


# ------------------------------------------------------------------- cases

def data_of(step: dict[str, Any]) -> bytes:
    d = step.get("data")
    if d is None:
        return b""
    if isinstance(d, dict):
        return bytes.fromhex(d["fill"]) * d["n"]
    return bytes.fromhex(d)


def _data(value: bytes | str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        value = value.encode()
    return value.hex()


def _acl(acl: list[tuple[int, str, str]] | None) -> list[list[Any]] | None:
    return None if acl is None else [list(a) for a in acl]


# step builders: ``s`` is the case's session index that sends it, ``label``
# names a step the test refers to (known differences)

def create(path: str, data: bytes | str | dict[str, Any] = b"", acl: list[tuple[int, str, str]] | None = None,
           mode: int = 0, ttl: int | None = None, s: int = 0, label: str | None = None) -> dict[str, Any]:
    st: dict[str, Any] = {"op": "create", "s": s, "path": path, "data": _data(data), "acl": _acl(acl), "mode": mode}
    if ttl is not None:
        st["ttl"] = ttl
    if label:
        st["label"] = label
    return st


def _step(op: str, s: int, label: str | None, **kw: Any) -> dict[str, Any]:
    st = {"op": op, "s": s, **kw}
    if label:
        st["label"] = label
    return st


def delete(path: str, version: int = -1, s: int = 0, label: str | None = None) -> dict[str, Any]:
    return _step("delete", s, label, path=path, version=version)


def set_(path: str, data: bytes | str | dict[str, Any], version: int = -1, s: int = 0,
         label: str | None = None) -> dict[str, Any]:
    return _step("set", s, label, path=path, data=_data(data), version=version)


def get(path: str, s: int = 0, label: str | None = None) -> dict[str, Any]:
    return _step("get", s, label, path=path)


def exists(path: str, s: int = 0, label: str | None = None) -> dict[str, Any]:
    return _step("exists", s, label, path=path)


def children(path: str, stat: bool = False, s: int = 0, label: str | None = None) -> dict[str, Any]:
    return _step("children", s, label, path=path, stat=stat)


def get_acl(path: str, s: int = 0, label: str | None = None) -> dict[str, Any]:
    return _step("get_acl", s, label, path=path)


def set_acl(path: str, acl: list[tuple[int, str, str]], version: int = -1, s: int = 0,
            label: str | None = None) -> dict[str, Any]:
    return _step("set_acl", s, label, path=path, acl=_acl(acl), version=version)


def sync(path: str, s: int = 0) -> dict[str, Any]:
    return _step("sync", s, None, path=path)


def check(path: str, version: int, s: int = 0, label: str | None = None) -> dict[str, Any]:
    return _step("check", s, label, path=path, version=version)


def ephemerals(prefix: str, s: int = 0) -> dict[str, Any]:
    return _step("ephemerals", s, None, prefix=prefix)


def count(path: str, s: int = 0) -> dict[str, Any]:
    return _step("count", s, None, path=path)


def multi(*ops: dict[str, Any], s: int = 0, label: str | None = None) -> dict[str, Any]:
    return _step("multi", s, label, ops=[{k: v for k, v in op.items() if k not in ("s", "label")} for op in ops])


def mcreate(path: str, data: bytes | str = b"", acl: list[tuple[int, str, str]] | None = None, mode: int = 0,
            ttl: int | None = None, opcode: str = "create") -> dict[str, Any]:
    st = create(path, data, acl, mode, ttl)
    st["opcode"] = "create" if opcode == "create" and ttl is None and mode != 4 else "create2"
    return st


def mcheck(path: str, version: int) -> dict[str, Any]:
    return {"op": "check", "path": path, "version": version}


def session() -> dict[str, Any]:
    return {"op": "session"}


def close(s: int) -> dict[str, Any]:
    return {"op": "close", "s": s}


def auth(s: int, credentials: str) -> dict[str, Any]:
    return {"op": "auth", "s": s, "scheme": "digest", "credentials": credentials}


ALL, READ, WRITE, CREATE, DELETE, ADMIN = 31, 1, 2, 4, 8, 16
PERSISTENT, EPHEMERAL, PSEQ, ESEQ, CONTAINER, PTTL, PSEQTTL = range(7)
OPEN = [(ALL, "world", "anyone")]
CREATOR_ALL = [(ALL, "auth", "")]
READ_ONLY = [(READ, "world", "anyone")]
MAX_TTL = (1 << 40) - 1


def _digest(user: str, pw: str) -> str:
    import base64
    return f"{user}:{base64.b64encode(hashlib.sha1(f'{user}:{pw}'.encode()).digest()).decode()}"


ALICE = _digest("alice", "pw")
BOB = _digest("bob", "pw2")


def cases() -> list[dict[str, Any]]:
    """Each case: a name and steps; session 0 is opened before the first step."""
    out: list[dict[str, Any]] = []

    def case(name: str, *steps: dict[str, Any]) -> None:
        out.append({"name": name, "steps": list(steps)})

    # Must stay the first case: it reads "/" and writes under /zookeeper,
    # whose stats every later case would otherwise see changed.
    case("fixed_nodes",
         get("/"), get_acl("/"), children("/", stat=True),
         get("/zookeeper"), get_acl("/zookeeper"), children("/zookeeper", stat=True),
         get("/zookeeper/quota"), get_acl("/zookeeper/quota"), children("/zookeeper/quota"),
         get("/zookeeper/config"), get_acl("/zookeeper/config"),
         count("/"), count("/zookeeper"),
         create("/"), create("/zookeeper"), create("/zookeeper/config"),
         delete("/"), delete("/zookeeper"), delete("/zookeeper/quota"), delete("/zookeeper/config"),
         set_("/zookeeper/config", b"x"), set_acl("/zookeeper/config", OPEN),
         set_("/zookeeper", b"z"), get("/zookeeper"),
         create("/zookeeper/x", b"in"), get("/zookeeper/x"), children("/zookeeper", stat=True),
         delete("/zookeeper/x"), get("/zookeeper"),
         get("", label="empty_path_get"), exists("", label="empty_path_exists"),
         children("", label="empty_path_children"),
         create("/c0", b"root-child"), get("/"), children("/", stat=True), delete("/c0"), exists("/"))

    case("create_persistent_stat",
         create("/c1", b"hello"), get("/c1"), exists("/c1"), children("/c1", stat=True),
         create("/c1/a", b"A"), create("/c1/b"), get("/c1"), children("/c1"), children("/c1", stat=True),
         create("/c1/a"), create("/c1/none/x"), get("/c1/none"), exists("/c1/none"), children("/c1/none"))

    case("set_data_versions",
         create("/c2", b"v0"), set_("/c2", b"v1"), set_("/c2", b"v2", version=1), set_("/c2", b"bad", version=1),
         set_("/c2", b"v3", version=2), set_("/c2", b"", version=-1), get("/c2"), set_("/c2/none", b"x"),
         set_("/c2", b"v5", version=5), set_("/c2", b"v6", version=-2), get("/c2"))

    case("delete_versions_and_errors",
         create("/c3"), create("/c3/a", b"1"), create("/c3/a/b"),
         delete("/c3/a"), delete("/c3/a", version=7), delete("/c3/a/b", version=1), delete("/c3/a/b", version=0),
         get("/c3"), delete("/c3/a/b"), delete("/c3/none"), delete("/c3/none/x"),
         set_("/c3/a", b"2"), delete("/c3/a", version=0), delete("/c3/a", version=1), get("/c3"), children("/c3"))

    case("cversion_pzxid_numchildren",
         create("/c4"), create("/c4/a"), create("/c4/b"), create("/c4/c"), get("/c4"),
         delete("/c4/b"), get("/c4"), set_("/c4", b"d"), get("/c4"), create("/c4/b"), get("/c4"),
         delete("/c4/a"), delete("/c4/b"), delete("/c4/c"), get("/c4"), children("/c4", stat=True),
         create("/c4/a/x"), get("/c4"), delete("/c4/zz"), get("/c4"))

    case("sequential_naming",
         create("/c5"), create("/c5/s-", mode=PSEQ), create("/c5/s-", mode=PSEQ), create("/c5/p"),
         create("/c5/s-", mode=PSEQ), delete("/c5/s-0000000001"), create("/c5/s-", mode=PSEQ),
         delete("/c5/p"), delete("/c5/s-0000000000"), create("/c5/", mode=PSEQ), create("/c5/", mode=PSEQ),
         children("/c5", stat=True), create("/c5/x/", mode=PSEQ), create("/c5/s-0000000007"),
         create("/c5/s-", mode=PSEQ), get("/c5"))

    case("sequential_collision",
         create("/c6"), create("/c6/n0000000001"), create("/c6/n", mode=PSEQ), create("/c6/n", mode=PSEQ),
         create("/c6/n", mode=PSEQ), children("/c6", stat=True))

    case("ephemeral_and_session_close",
         create("/c7"), session(), create("/c7/e", b"eph", mode=EPHEMERAL, s=1),
         create("/c7/q-", mode=ESEQ, s=1), create("/c7/q-", mode=ESEQ, s=0), create("/c7/p", s=1),
         get("/c7/e"), get("/c7/q-0000000001", s=1), get("/c7"),
         create("/c7/e/child", s=1), create("/c7/e/child", mode=EPHEMERAL, s=0), create("/c7/e/", mode=PSEQ),
         ephemerals("/", s=1), ephemerals("/c7/q", s=1), ephemerals("/c7/q", s=0), ephemerals("/nothing", s=1),
         ephemerals("", s=1),
         close(1), exists("/c7/e"), exists("/c7/q-0000000001"), exists("/c7/q-0000000002"), exists("/c7/p"),
         get("/c7"), children("/c7", stat=True), create("/c7/x"), get("/c7/x"))

    case("ephemeral_sessions_interleaved",
         create("/c8"), session(), session(), create("/c8/a", mode=EPHEMERAL, s=1),
         create("/c8/b", mode=EPHEMERAL, s=2), create("/c8/c", mode=EPHEMERAL, s=1), get("/c8/a", s=2),
         get("/c8/b"), close(2), get("/c8"), close(1), get("/c8"), children("/c8"), session(),
         create("/c8/d", mode=EPHEMERAL, s=3), get("/c8/d"), delete("/c8/d"), get("/c8"), ephemerals("/", s=3))

    case("container_nodes",
         create("/c9"), create("/c9/k", b"kont", mode=CONTAINER), get("/c9/k"), exists("/c9/k"),
         create("/c9/k/child", mode=EPHEMERAL), create("/c9/k/p"), get("/c9/k"), children("/c9/k", stat=True),
         create("/c9/k2/", mode=CONTAINER), create("/c9/ks", mode=CONTAINER | 0), get_acl("/c9/k"),
         delete("/c9/k/p"), get("/c9/k"), ephemerals("/"))

    case("ttl_nodes",
         create("/c10"), create("/c10/t", b"ttl", mode=PTTL, ttl=100_000), get("/c10/t"),
         create("/c10/ts-", mode=PSEQTTL, ttl=5_000), children("/c10", stat=True), create("/c10/t/c"),
         create("/c10/t/e", mode=EPHEMERAL), get("/c10/t"),
         create("/c10/t0", mode=PTTL, ttl=0), create("/c10/tn", mode=PTTL, ttl=-1),
         create("/c10/tmax", mode=PTTL, ttl=MAX_TTL), get("/c10/tmax"),
         create("/c10/tover", mode=PTTL, ttl=MAX_TTL + 1), create("/c10/tp", mode=PERSISTENT, ttl=1000),
         # not here: createTTL with a non-TTL mode and ttl -1 passes 3.8.0's checks and then kills the
         # server (CreateTTLTxn applied with ttl -1: IllegalArgumentException in SyncThread, JVM exits)
         create("/c10/te", mode=EPHEMERAL, ttl=1000),
         create("/c10/tnottl", mode=PTTL), create("/c10/tseqnottl", mode=PSEQTTL), get("/c10"))

    case("bad_create_modes",
         create("/c11"), create("/c11/m7", mode=7), create("/c11/mneg", mode=-1), create("/c11/m99", mode=99),
         get("/c11"), create("/c11/ok"), get("/c11/ok"))

    case("bad_paths",
         create("/c12"), create("c12x"), create("/c12/"), create("/c12//b"), create("/c12/a/"),
         create("/c12/."), create("/c12/.."), create("/c12/.x"), create("/c12/..y"), create("/c12/a.b"),
         create("/c12/nul\x00x"), create("/c12/ctl\x01"), create("/c12/del\x7f"), create("/c12/c1\x9f"),
         create("/c12/é"), create("/c12/\u00a0nbsp"), create("/c12/pua\ue000"), create("/c12/hi\ufff0"),
         create("/c12/bmp\uffef"), create("/c12/emoji\U0001f600"), create("/c12/cjk中"),
         get("/c12"), children("/c12"), get("c12"), get("/c12/"), exists("/c12/"), exists("c12"),
         exists("/c12/\x00"), get("/c12/\x00"), children("/c12/"), get_acl("/c12/"),
         set_("c12", b"x"), set_("/c12/", b"x"), set_("/c12//x", b"x"), set_("/c12/.", b"x"),
         delete("c12"), delete("/c12/"), delete("/c12//x"), delete("/c12/.."), delete("/c12/.x"),
         delete("/c12/\x00"), set_acl("/c12/", OPEN), set_acl("c12", OPEN), get("/c12"))

    case("acl_read_only_node",
         create("/c13"), create("/c13/r", b"secret", acl=READ_ONLY), get("/c13/r"), set_("/c13/r", b"x"),
         create("/c13/r/kid"), get_acl("/c13/r"), set_acl("/c13/r", OPEN), delete("/c13/r"), get("/c13"))

    case("acl_no_read",
         create("/c14"), create("/c14/w", b"hidden", acl=[(WRITE | CREATE, "world", "anyone")]),
         get("/c14/w"), children("/c14/w"), children("/c14/w", stat=True), get_acl("/c14/w"),
         exists("/c14/w", label="exists_no_read"), set_("/c14/w", b"new"), create("/c14/w/k"),
         count("/c14/w"), delete("/c14/w/k"), delete("/c14/w"), create("/c14/nope", acl=[(0, "world", "anyone")]),
         get("/c14/nope"), exists("/c14/nope", label="exists_no_perms"), set_("/c14/nope", b"x"),
         get_acl("/c14/nope"), delete("/c14/nope"), get("/c14"))

    case("acl_delete_needs_parent_delete",
         create("/c15"), create("/c15/p", acl=[(READ | CREATE | WRITE | ADMIN, "world", "anyone")]),
         create("/c15/p/kid"), delete("/c15/p/kid"), delete("/c15/p/none"), delete("/c15/p/kid", version=9),
         set_acl("/c15/p", OPEN, version=0), delete("/c15/p/kid", version=9), delete("/c15/p/kid"),
         delete("/c15/p"), get("/c15"))

    case("acl_digest_auth_scheme",
         create("/c16"), create("/c16/noauth", acl=CREATOR_ALL), auth(0, "alice:pw"),
         create("/c16/mine", b"a", acl=CREATOR_ALL), get_acl("/c16/mine"), get("/c16/mine"),
         session(), get("/c16/mine", s=1), get_acl("/c16/mine", s=1), set_("/c16/mine", b"x", s=1),
         exists("/c16/mine", s=1, label="exists_other_digest"),
         auth(1, "bob:pw2"), get("/c16/mine", s=1), get_acl("/c16/mine", s=1), auth(1, "alice:pw"),
         get("/c16/mine", s=1), get_acl("/c16/mine", s=1), set_("/c16/mine", b"y", s=1),
         create("/c16/both", acl=CREATOR_ALL, s=1), get_acl("/c16/both", s=1),
         create("/c16/mix", acl=[(READ, "world", "anyone"), (ALL, "auth", "ignored"), (READ, "world", "anyone")],
                s=1),
         get_acl("/c16/mix"), set_acl("/c16/mine", [(READ | ADMIN, "auth", "")], s=1), get_acl("/c16/mine", s=1),
         get_acl("/c16/mine"), get("/c16/mine"), set_("/c16/mine", b"z"), close(1), get("/c16"))

    case("acl_digest_explicit",
         create("/c17"), create("/c17/d", acl=[(ALL, "digest", ALICE)]), get("/c17/d"), get_acl("/c17/d"),
         auth(0, "alice:wrong"), get("/c17/d"), auth(0, "alice:pw"), get("/c17/d"), get_acl("/c17/d"),
         create("/c17/r", acl=[(READ, "digest", ALICE), (ADMIN, "digest", BOB)]), session(),
         get_acl("/c17/r", s=1), auth(1, "bob:pw2"), get_acl("/c17/r", s=1), get("/c17/r", s=1),
         set_acl("/c17/r", [(ALL, "digest", BOB)], s=1), get("/c17/r", s=1), get("/c17/r"), close(1))

    case("acl_invalid",
         create("/c18"), create("/c18/e", acl=[]), create("/c18/none/x", acl=[]),
         create("/c18/wf", acl=[(ALL, "world", "foo")]), create("/c18/d1", acl=[(ALL, "digest", "nocolon")]),
         create("/c18/d2", acl=[(ALL, "digest", "a:b:c")]), create("/c18/d3", acl=[(ALL, "digest", "a:")]),
         create("/c18/d4", acl=[(ALL, "digest", ":b")]), create("/c18/u", acl=[(ALL, "unknown", "x")]),
         create("/c18/s", acl=[(ALL, "super", "")]), create("/c18/au", acl=CREATOR_ALL),
         create("/c18/dup", acl=[(ALL, "world", "anyone"), (ALL, "world", "anyone")]), get_acl("/c18/dup"),
         create("/c18/perm0", acl=[(0, "world", "anyone")]), get_acl("/c18/perm0"),
         create("/c18/permbig", acl=[(255, "world", "anyone")]), get_acl("/c18/permbig"),
         set_acl("/c18/none", []), set_acl("/c18/none", OPEN), set_acl("/c18", [(ALL, "world", "foo")]),
         set_acl("/c18", CREATOR_ALL), get("/c18"))

    case("acl_ip",
         create("/c19"), create("/c19/ip", b"i", acl=[(ALL, "ip", "127.0.0.1")]), get("/c19/ip"),
         create("/c19/net", acl=[(ALL, "ip", "127.0.0.0/8")]), get("/c19/net"),
         create("/c19/other", acl=[(ALL, "ip", "10.1.2.3")]), get("/c19/other"),
         create("/c19/bits33", acl=[(ALL, "ip", "127.0.0.1/33")]), create("/c19/bad", acl=[(ALL, "ip", "1.2.3")]),
         create("/c19/word", acl=[(ALL, "ip", "localhost")]), create("/c19/bits0", acl=[(ALL, "ip", "8.8.8.8/0")]),
         get("/c19/bits0"), create("/c19/ipauth", acl=CREATOR_ALL), get_acl("/c19/ip"), get("/c19"))

    # Java's Integer.parseInt and 3.8.0's IPv4-only parser decide these; each
    # is the last write of its case so a difference does not cascade
    case("acl_ip_leading_zeros",
         create("/c20"), get_acl("/c20"),
         create("/c20/lead0", acl=[(ALL, "ip", "127.000.0.1")], label="ip_leading_zeros"),
         get("/c20/lead0", label="ip_leading_zeros_get"))

    case("acl_ip_v6",
         create("/c40"), create("/c40/v6", acl=[(ALL, "ip", "::1")], label="ip_v6"))

    case("acl_ip_plus_bits",
         create("/c41"), create("/c41/plus", acl=[(ALL, "ip", "127.0.0.1/+8")], label="ip_plus_bits"),
         get("/c41/plus", label="ip_plus_bits_get"))

    case("set_acl_aversion",
         create("/c21", b"x"), set_acl("/c21", [*READ_ONLY, (ALL, "world", "anyone")]), get_acl("/c21"),
         set_acl("/c21", OPEN, version=0), set_acl("/c21", OPEN, version=1), set_acl("/c21", OPEN, version=-1),
         get("/c21"), set_acl("/c21", READ_ONLY, version=3), get_acl("/c21"), set_acl("/c21", OPEN),
         set_acl("/c21/none", OPEN), set_("/c21", b"y"), get("/c21"))

    case("multi_success",
         create("/c22"), multi(mcreate("/c22/a", b"A"), mcreate("/c22/a/b"), set_("/c22/a", b"A2"),
                               mcheck("/c22/a", 1), set_("/c22/a", b"A3", version=1), delete("/c22/a/b"),
                               mcreate("/c22/s-", mode=PSEQ), mcreate("/c22/s-", mode=PSEQ)),
         get("/c22"), get("/c22/a"), children("/c22"),
         multi(mcreate("/c22/x"), delete("/c22/x"), mcreate("/c22/x", b"again")), get("/c22/x"), get("/c22"))

    case("multi_failures",
         create("/c23", b"d"),
         multi(mcreate("/c23/a"), mcreate("/c23/a"), set_("/c23", b"no")),
         multi(mcheck("/c23", 5), mcreate("/c23/b")),
         multi(mcreate("/c23/c"), set_("/c23/none", b"x"), delete("/c23/c")),
         multi(mcreate("/c23/d"), delete("/c23", version=0)),
         multi(mcreate("/c23/e"), mcreate("bad")),
         multi(mcreate("/c23/f"), mcreate("/c23/f/", mode=PSEQ), mcreate("/c23/g", acl=[])),
         get("/c23"), children("/c23"), multi(mcheck("/c23/none", -1)), multi(mcheck("/c23", 0)),
         multi(mcheck("/c23", -1), set_("/c23", b"ok", version=0)), get("/c23"))

    case("multi_ephemeral_and_sessions",
         create("/c24"), session(),
         multi(mcreate("/c24/e", mode=EPHEMERAL), mcreate("/c24/e/kid"), s=1),
         multi(mcreate("/c24/e", mode=EPHEMERAL), mcreate("/c24/q", mode=ESEQ), s=1), get("/c24/e"),
         ephemerals("/", s=1), close(1), get("/c24"), children("/c24"))

    case("multi_empty_and_create2",
         create("/c25"), multi(), get("/c25"),
         multi(mcreate("/c25/a", b"two", opcode="create2"), mcreate("/c25/k", mode=CONTAINER),
               mcreate("/c25/t", mode=PTTL, ttl=60_000), mcreate("/c25/plain")),
         get("/c25/a"), get("/c25/k"), get("/c25/t"), get("/c25"),
         multi(mcreate("/c25/t2", mode=PTTL, ttl=0), mcreate("/c25/z")), get("/c25"))

    case("multi_acl",
         create("/c26"), create("/c26/ro", acl=READ_ONLY),
         multi(mcreate("/c26/ok"), mcreate("/c26/ro/k")),
         multi(mcheck("/c26/ro", 0), mcreate("/c26/ok2")),
         create("/c26/nr", acl=[(WRITE, "world", "anyone")]),
         multi(mcheck("/c26/nr", 0)), multi(set_("/c26/nr", b"w")),
         auth(0, "alice:pw"), multi(mcreate("/c26/mine", acl=CREATOR_ALL)), get_acl("/c26/mine"),
         get("/c26"))

    case("check_outside_multi",
         create("/c27"), check("/c27", 0, label="check_ok"), get("/c27"), check("/c27", 3, label="check_bad"),
         get("/c27"), create("/c27/after"), get("/c27/after"))

    case("sync_and_misc_reads",
         create("/c28", b"s"), sync("/c28"), sync("/c28/none"), sync("/"), create("/c28/a"), create("/c28/a/b"),
         create("/c28/a/b/c"), count("/c28"), count("/c28/a/b/c"), count("/c28/none"), children("/c28", stat=True),
         children("/c28/none", stat=True), get_acl("/c28/none"), exists("/c28/none"))

    case("large_data",
         create("/c29"), create("/c29/big", {"fill": "ab", "n": 1_000_000}), get("/c29/big"),
         set_("/c29/big", {"fill": "cd", "n": 1_000_001}), get("/c29/big"), get("/c29"),
         create("/c29/over", {"fill": "ef", "n": (1 << 20) + 1}, label="data_over_limit"))

    case("set_data_over_limit",
         create("/c30"), set_("/c30", {"fill": "01", "n": (1 << 20) + 1}, label="set_over_limit"))

    case("data_bytes",
         create("/c31", b"\x00\x01\xff binary"), get("/c31"), set_("/c31", b""), get("/c31"),
         create("/c31/u", "ünïcödé"), get("/c31/u"), set_("/c31/u", {"fill": "7a", "n": 100}), get("/c31/u"))

    case("deep_tree_and_deletes",
         create("/c32"), create("/c32/a"), create("/c32/a/b"), create("/c32/a/b/c"), create("/c32/a/b/c/d", b"leaf"),
         delete("/c32/a/b"), delete("/c32/a/b/c/d"), delete("/c32/a/b/c"), delete("/c32/a/b"), get("/c32/a"),
         delete("/c32/a"), get("/c32"), children("/c32", stat=True))

    case("session_close_order",
         create("/c33"), session(), session(), create("/c33/x", mode=EPHEMERAL, s=2),
         create("/c33/y", mode=EPHEMERAL, s=1), close(1), create("/c33/z", s=2), get("/c33"), close(2),
         get("/c33"), children("/c33", stat=True))

    case("ephemeral_under_container_and_ttl",
         create("/c34"), create("/c34/k", mode=CONTAINER), create("/c34/t", mode=PTTL, ttl=30_000), session(),
         create("/c34/k/e", mode=EPHEMERAL, s=1), create("/c34/t/e", mode=EPHEMERAL, s=1), get("/c34/k"),
         get("/c34/t"), close(1), get("/c34/k"), get("/c34/t"), children("/c34/k", stat=True))

    case("delete_then_sequential_suffix",
         create("/c35"), create("/c35/a"), delete("/c35/a"), create("/c35/b"), delete("/c35/b"),
         create("/c35/s", mode=PSEQ), create("/c35/e", mode=ESEQ), get("/c35"))

    case("auth_twice_same_user",
         create("/c36"), auth(0, "alice:pw"), auth(0, "alice:pw"), create("/c36/a", acl=CREATOR_ALL),
         get_acl("/c36/a"), auth(0, "carol"), create("/c36/b", acl=CREATOR_ALL, label="auth_order_create"),
         get_acl("/c36/b", label="auth_order_get"))

    case("version_checks_on_children",
         create("/c37"), create("/c37/a"), set_("/c37/a", b"1"), set_("/c37/a", b"2"),
         multi(set_("/c37/a", b"3", version=2), set_("/c37/a", b"4", version=3), mcheck("/c37/a", 4)),
         get("/c37/a"), multi(set_("/c37/a", b"bad", version=4), mcheck("/c37/a", 4)), get("/c37/a"))

    case("exists_variants",
         create("/c38", b"e"), exists("/c38"), exists("/c38/none"), exists("/none/none"), set_("/c38", b"ee"),
         exists("/c38"), create("/c38/eph", mode=EPHEMERAL), exists("/c38/eph"))

    case("create_under_nocreate_parent",
         create("/c39", acl=[(READ | WRITE | DELETE | ADMIN, "world", "anyone")]), create("/c39/x"),
         create("/c39/x", mode=PSEQ), create("/c39/none/x"), create("/c39/", mode=PSEQ), get("/c39"),
         create("/c39/bad", acl=[]), create("/c39/", acl=OPEN))

    return out


# ---------------------------------------------------------------- normalise

def norm_data(data: bytes) -> str | dict[str, Any]:
    if len(data) <= 64:
        return data.hex()
    return {"len": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class Norm:
    """Turns a case's raw answers into what compares across implementations."""

    def __init__(self, base: int, sessions: list[int]) -> None:
        self.base = base
        self.sessions = sessions

    def zxid(self, z: int) -> int | str:
        if z == 0:
            return "zero"
        if z < self.base:
            return "pre"
        return z - self.base

    def owner(self, o: int) -> int | dict[str, int]:
        if o in self.sessions:
            return {"session": self.sessions.index(o)}
        return o

    def stat(self, s: Any) -> dict[str, Any] | None:
        if s is None:
            return None
        return {"czxid": self.zxid(s.czxid), "mzxid": self.zxid(s.mzxid), "pzxid": self.zxid(s.pzxid),
                "version": s.version, "cversion": s.cversion, "aversion": s.aversion,
                "ephemeralOwner": self.owner(s.ephemeralOwner), "dataLength": s.dataLength,
                "numChildren": s.numChildren}

    def result(self, r: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in r.items():
            if k == "stat":
                out[k] = self.stat(v)
            elif k == "data":
                out[k] = norm_data(v)
            elif k in ("children", "paths"):
                out[k] = sorted(v)
            elif k == "results":
                out[k] = [self.result(x) for x in v]
            else:
                out[k] = v
        return out


# ---------------------------------------------------------------- the server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter(port: int, cmd: str, timeout: float = 3.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(cmd.encode())
        chunks = []
        while True:
            b = s.recv(4096)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeper:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        d = self.dir
        (d / "data").mkdir()
        (d / "zoo.cfg").write_text(
            f"tickTime=2000\ndataDir={d / 'data'}\nclientPortAddress=127.0.0.1\nclientPort={self.port}\n"
            "admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\nautopurge.purgeInterval=0\n"
            "maxClientCnxns=0\n")
        (d / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={d / 'zookeeper.log'}\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n")
        cmd = ["java", "-Xms128m", "-Xmx256m",
               f"-Dlog4j.configuration=file:{d / 'log4j.properties'}", f"-Dzookeeper.log.dir={d}",
               "-Dzookeeper.extendedTypesEnabled=true",
               # the container/TTL reaper would write deleteContainer txns at
               # its own times and shift every later zxid: keep it asleep
               "-Dznode.container.checkIntervalMs=86400000",
               "-Dzookeeper.admin.enableServer=false",
               "-cp", CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain", str(d / "zoo.cfg")]
        with open(d / "stdout.log", "wb") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited ({self.proc.returncode}); see {d / 'stdout.log'}")
            try:
                out = four_letter(self.port, "srvr")
                if "Mode: standalone" in out:
                    for line in out.splitlines():
                        if line.startswith("Zookeeper version:"):
                            return line.split(":", 1)[1].strip()
                    return out.splitlines()[0]
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"ZooKeeper did not serve within {START_TIMEOUT_S}s; see {d}")

    def stop(self) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


# ------------------------------------------------------------------ running

class Runner:
    def __init__(self, port: int) -> None:
        self.hosts = f"127.0.0.1:{port}"

    def _client(self) -> KazooClient:
        c = KazooClient(hosts=self.hosts, timeout=SESSION_TIMEOUT_S)
        c.start(timeout=CALL_TIMEOUT_S)
        return c

    @staticmethod
    def _call(client: KazooClient, req: Raw) -> Any:
        ar = client.handler.async_result()
        client._call(req, ar)
        return ar.get(timeout=CALL_TIMEOUT_S)

    @staticmethod
    def _call_or_silence(client: KazooClient, req: Raw) -> Any:
        """A request ZooKeeper may never answer (3.8.0's check outside a multi:
        the server fails to serialize the reply and sends nothing): after a
        bounded wait its entry leaves kazoo's queue of pending replies, so the
        next reply is matched with the next request again."""
        ar = client.handler.async_result()
        client._call(req, ar)
        try:
            return ar.get(timeout=SILENCE_S)
        except KazooTimeoutError:
            for entry in list(client._pending):
                if entry[0] is req:
                    client._pending.remove(entry)
                    return {"no_reply": True}
            raise

    def run_case(self, case: dict[str, Any]) -> dict[str, Any]:
        clients: list[KazooClient | None] = [self._client()]
        sids: list[int] = [clients[0].client_id[0]]
        # the base: the zxid of session 0's createSession, the last txn now
        self._call(clients[0], Raw(3, _wstr("/") + b"\0", "exists"))
        base = clients[0].last_zxid
        norm = Norm(base, sids)
        steps_out = []
        try:
            for step in case["steps"]:
                steps_out.append({**step, "outcome": self._step(step, clients, sids, norm)})
        finally:
            for c in clients:
                if c is not None:
                    c.stop()
                    c.close()
        return {"name": case["name"], "steps": steps_out}

    def _step(self, step: dict[str, Any], clients: list[KazooClient | None], sids: list[int],
              norm: Norm) -> dict[str, Any]:
        op = step["op"]
        if op == "session":
            c = self._client()
            clients.append(c)
            sids.append(c.client_id[0])
            return {"ok": {"session": len(sids) - 1}}
        client = clients[step["s"]]
        assert client is not None, f"session {step['s']} is closed"
        if op == "close":
            client.stop()
            client.close()
            clients[step["s"]] = None
            return {"ok": {}}
        if op == "auth":
            try:
                client.add_auth(step["scheme"], step["credentials"])
            except KazooException as exc:
                return {"error": getattr(exc, "code", None), "name": type(exc).__name__}
            return {"ok": {}}
        req = build_request(step)
        try:
            raw = self._call_or_silence(client, req) if op == "check" else self._call(client, req)
        except KazooException as exc:
            code = getattr(exc, "code", None)
            out = {"error": code if isinstance(code, int) else None, "name": type(exc).__name__}
            if not client.connected:  # ZooKeeper dropped the connection: wait for kazoo's reconnect
                deadline = time.monotonic() + CALL_TIMEOUT_S
                while not client.connected and time.monotonic() < deadline:
                    time.sleep(0.1)
            return out
        if isinstance(raw, list):  # a multi's answer (see Raw.deserialize)
            raw = raw[0]
        if raw is None:  # kazoo answers an exists' NoNode with None
            raw = {"stat": None}
        return {"ok": norm.result(raw)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--keep-logs", action="store_true", help="keep the temp dir with ZooKeeper's logs")
    args = ap.parse_args()
    if shutil.which("java") is None or not os.path.exists("/usr/share/java/zookeeper.jar"):
        print("needs java and /usr/share/java/zookeeper.jar (apt-get install zookeeper)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="zk38-semantics-"))
    zk = ZooKeeper(tmp)
    try:
        version = zk.start()
        print(f"ZooKeeper {version} on port {zk.port} (pid {zk.proc.pid if zk.proc else '?'})", file=sys.stderr)
        runner = Runner(zk.port)
        recorded = []
        for case in cases():
            recorded.append(runner.run_case(case))
            print(f"  {case['name']}: {len(case['steps'])} steps", file=sys.stderr)
    finally:
        zk.stop()
        if args.keep_logs:
            print(f"logs kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    doc = {"zookeeper": version, "recorded": dt.date.today().isoformat(),
           "recorder": "scripts/record_zk38_semantics.py", "cases": recorded}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=True) + "\n")
    n = sum(len(c["steps"]) for c in recorded)
    print(f"wrote {args.out}: {len(recorded)} cases, {n} steps", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
