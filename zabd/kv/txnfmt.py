"""A committed payload, decoded for people and for JSON, the one place that
does it: ``zabd log`` (a live server, ``zabd.client.cli``) and ``zabd log
dump DIR`` (``zabd.storage.tools``, handed :func:`txn_text` by the CLI).

Four kinds share the log (``zabd.kv.kinds``): KV txns, ZooKeeper txns,
membership changes and raw proposals. A ZooKeeper txn is one line, like ZooKeeper's
``LogFormatter`` but readable::

    zk session 0x1 create /app/lock-0000000003 "me" (ephemeral, parent cversion 4)
    zk session 0x1 setData /cfg <300 bytes 0a0b0c0d0e0f...> (version 2)
    zk session 0x1 multi [create /a "" (persistent); delete /b]
    zk session 0x1 closeSession (deletes /app/lock-0000000003)

Data is shown as text when it is short printable UTF-8, else as its length
and first bytes in hex; passwords never (``zk_txn.describe`` leaves them
out); ACLs only when they are not ``world:anyone`` with every permission.
"""

from __future__ import annotations

import json
from typing import Any

from zabd.kv.kinds import MEMBERSHIP, kind_of
from zabd.kv.kvmachine import KV_MAGIC
from zabd.kv.store import decode_txn
from zabd.protocol.membership import decode as decode_membership
from zabd.zk import txn as zk_txn
from zabd.zk.errors import Code
from zabd.zk.records import CONTAINER_OWNER, ttl_of

TEXT_SHOWN = 64  # characters of printable data shown in full
HEX_SHOWN = 16  # bytes of other data shown
_PERMS = ((4, "c"), (8, "d"), (1, "r"), (2, "w"), (16, "a"))  # ZooKeeper's getAcl order
_OPEN = [[31, "world", "anyone"]]


def json_bytes(b: bytes) -> Any:
    """UTF-8 text as a string, anything else as ``{"hex": ...}``."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": b.hex()}


# ------------------------------------------------------------------- KV txns


def kv_op(payload: bytes) -> dict[str, Any] | None:
    """A KV txn's fields (``zabd.kv.store.decode_txn``, value JSON-ready), or
    None if the payload is not one (a malformed one too: every replica
    ignored it)."""
    if payload[: len(KV_MAGIC)] != KV_MAGIC:
        return None
    try:
        op = decode_txn(payload[len(KV_MAGIC) :])
    except Exception:
        return None
    if isinstance(op.get("value"), bytes):
        op["value"] = json_bytes(op["value"])
    return op


def kv_text(op: dict[str, Any]) -> str:
    value = op.get("value")
    shown = value if isinstance(value, str) else f"<hex {value['hex']}>" if isinstance(value, dict) else value
    if op["op"] == "set":
        return f"put {op['key']}={shown} (version {op['version']})"
    if op["op"] == "delete":
        return f"delete {op['key']}"
    return f"failed {op['code']} {op['key']} (version {op['version']})"


# ------------------------------------------------------------ ZooKeeper txns


def zk_describe(payload: bytes) -> dict[str, Any] | None:
    """``zk_txn.describe`` of a ZooKeeper txn (data as bytes), ``{"error":
    ...}`` for a malformed one, None if the payload is not one."""
    if payload[: len(zk_txn.ZK_MAGIC)] != zk_txn.ZK_MAGIC:
        return None
    try:
        return zk_txn.describe(payload)
    except Exception as exc:  # any malformed body: shown, never fatal to a reader
        return {"error": f"malformed ZooKeeper txn ({type(exc).__name__}: {exc})"}


def zk_json(desc: dict[str, Any]) -> dict[str, Any]:
    """A ``zk_describe`` dict with its data JSON-ready (text, or ``{"hex"}``)."""
    out = dict(desc)
    if isinstance(out.get("data"), bytes):
        out["data"] = json_bytes(out["data"])
    if isinstance(out.get("ops"), list):
        out["ops"] = [zk_json(op) if isinstance(op, dict) else op for op in out["ops"]]
    return out


def data_text(data: object) -> str:
    if data is None:
        return "null"  # null data, not empty (ZooKeeper keeps them apart)
    if not isinstance(data, bytes):
        return repr(data)
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable():
        if len(text) <= TEXT_SHOWN:
            return json.dumps(text, ensure_ascii=False)
        return f"<{len(data)} bytes {json.dumps(text[:TEXT_SHOWN], ensure_ascii=False)}...>"
    more = "..." if len(data) > HEX_SHOWN else ""
    return f"<{len(data)} bytes {data[:HEX_SHOWN].hex()}{more}>"


def acl_text(acl: object) -> str:
    if not isinstance(acl, list):
        return repr(acl)
    parts = []
    for entry in acl:
        try:
            perms, scheme, ident = entry
            letters = "".join(c for bit, c in _PERMS if int(perms) & bit) or "none"
            parts.append(f"{scheme}:{ident}={letters}")
        except (TypeError, ValueError):
            parts.append(repr(entry))
    return ",".join(parts)


def _mode(owner: object, session: str | None) -> str:
    if not isinstance(owner, int) or owner == 0:
        return "persistent"
    if owner == CONTAINER_OWNER:
        return "container"
    ttl = ttl_of(owner)
    if ttl:
        return f"ttl {ttl} ms"
    sid = f"0x{owner & 0xFFFFFFFFFFFFFFFF:x}"
    return "ephemeral" if sid == session else f"ephemeral of {sid}"


def _op_text(d: dict[str, Any], session: str | None) -> str:
    op = d.get("op", "?")
    path = d.get("path")
    extra: list[str] = []
    head = f"{op} {path}" if path is not None else str(op)
    if op == "create":
        head += " " + data_text(d.get("data"))
        extra.append(_mode(d.get("ephemeralOwner"), session))
        if d.get("acl") != _OPEN:
            extra.append(f"acl {acl_text(d.get('acl'))}")
        extra.append(f"parent cversion {d.get('parentCVersion')}")
    elif op == "setData":
        head += " " + data_text(d.get("data"))
        extra.append(f"version {d.get('version')}")
    elif op == "setACL":
        extra += [f"acl {acl_text(d.get('acl'))}", f"aversion {d.get('aversion')}"]
    elif op == "error":
        err = d.get("err")
        try:
            head += f" {Code(int(err or 0)).name} ({err})"
        except (TypeError, ValueError):
            head += f" {err!r}"
    elif op == "createSession":
        extra.append(f"timeout {d.get('timeout')} ms")
    elif op == "closeSession":
        deletes = d.get("deletes") or []
        if deletes:
            extra.append("deletes " + ", ".join(map(str, deletes)))
    elif op == "multi":
        head += " [" + "; ".join(_op_text(o, session) for o in d.get("ops", [])) + "]"
    return head + (f" ({', '.join(extra)})" if extra else "")


def zk_text(desc: dict[str, Any]) -> str:
    """One line for a ``zk_describe`` dict."""
    if "error" in desc and "op" not in desc:
        return f"zk {desc['error']}"
    session = desc.get("session")
    return f"zk session {session} {_op_text(desc, session)}"


# --------------------------------------------------------------- any payload


def membership_text(payload: bytes) -> str | None:
    """``membership voters 1,2,3; observers -``, None if not a membership change."""
    if kind_of(payload) != MEMBERSHIP:
        return None
    m = decode_membership(payload)
    return "membership (malformed)" if m is None else f"membership {m.describe()}"


def txn_text(payload: bytes) -> str | None:
    """The decoded line of a KV, ZooKeeper or membership txn (as the log
    holds it), None for a raw proposal."""
    member = membership_text(payload)
    if member is not None:
        return member
    op = kv_op(payload)
    if op is not None:
        return kv_text(op)
    desc = zk_describe(payload)
    if desc is not None:
        try:
            return zk_text(desc)
        except Exception as exc:  # a well-formed msgpack body with odd fields
            return f"zk undecodable fields ({type(exc).__name__}: {exc})"
    return None


def txn_json(payload: bytes) -> dict[str, Any]:
    """``{"kv": ...}``, ``{"zk": ...}`` or ``{"membership": ...}`` for a decoded
    txn, ``{}`` for a raw one."""
    member = membership_text(payload)
    if member is not None:
        return {"membership": member.removeprefix("membership ")}
    op = kv_op(payload)
    if op is not None:
        return {"kv": op}
    desc = zk_describe(payload)
    if desc is not None:
        return {"zk": zk_json(desc)}
    return {}
