"""ACLs as ZooKeeper defines them: ids, permissions and the checks.

An ACL entry grants ``perms`` to an ``Id(scheme, id)``. Schemes: ``world``
(only ``anyone``), ``auth`` (at create or setACL, expanded to every
authenticated id of the requester), ``digest`` (``user:base64(sha1(user:pw))``),
``ip`` (an address, or a network as ``addr/bits``) and ``sasl`` (a user name;
ZooKeeper's ``SASLAuthenticationProvider``: the SASL user ``super`` matches
every ``sasl`` entry). A connection holds the ids it proved: ``ip:<its
address>`` always, ``digest:...`` after ``addauth``, ``sasl:<user>`` after a
SASL exchange (``zabd.zk.sasl``), and ``super`` when that digest, or that
SASL user, is the configured superuser.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Sequence
from typing import Any, NamedTuple

from zabd.zk.errors import Code, ZKError

READ = 1
WRITE = 2
CREATE = 4
DELETE = 8
ADMIN = 16
ALL = READ | WRITE | CREATE | DELETE | ADMIN


class Id(NamedTuple):
    scheme: str
    id: str


class ACL(NamedTuple):
    perms: int
    id: Id


ANYONE = Id("world", "anyone")
SUPER = Id("super", "")
OPEN_ACL_UNSAFE: tuple[ACL, ...] = (ACL(ALL, ANYONE),)
CREATOR_ALL_ACL: tuple[ACL, ...] = (ACL(ALL, Id("auth", "")),)
READ_ACL_UNSAFE: tuple[ACL, ...] = (ACL(READ, ANYONE),)

# Schemes whose ids prove who a client is (``auth`` expands to these only):
# an ip address is not an identity in ZooKeeper's sense.
AUTHENTICATED_SCHEMES = frozenset({"digest", "sasl"})
# the SASL user whose id matches every sasl ACL entry (SASLAuthenticationProvider.matches)
SASL_SUPER = "super"


def to_wire(acl: Sequence[ACL]) -> list[list[Any]]:
    """``[[perms, scheme, id], ...]``: an ACL in txns, snapshots and frames."""
    return [[a.perms, a.id.scheme, a.id.id] for a in acl]


def from_wire(raw: Sequence[Sequence[Any]]) -> tuple[ACL, ...]:
    return tuple(ACL(int(p), Id(str(s), str(i))) for p, s, i in raw)


def digest_id(user: str, password: str) -> str:
    """ZooKeeper's digest id: ``user:base64(sha1("user:password"))``."""
    raw = hashlib.sha1(f"{user}:{password}".encode()).digest()  # ZooKeeper's format, not a choice
    return f"{user}:{base64.b64encode(raw).decode()}"


def digest_auth(credentials: str, super_digest: str | None = None) -> tuple[Id, ...]:
    """The ids an ``addauth digest user:password`` proves (``super`` too when
    it matches the configured ``super_digest``, as ZooKeeper's provider does).
    Like ZooKeeper's ``generateDigest``, the id is the part before the first
    colon and the hash is of the whole string, so this never fails."""
    user = credentials.split(":", 1)[0]
    raw = hashlib.sha1(credentials.encode()).digest()  # ZooKeeper's format, not a choice
    did = f"{user}:{base64.b64encode(raw).decode()}"
    return (Id("digest", did), SUPER) if super_digest is not None and did == super_digest else (Id("digest", did),)


def _java_split(s: str, sep: str) -> list[str]:
    # Java's String.split drops trailing empty strings; ZooKeeper's checks count on it
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _java_int(text: str) -> int | None:
    """Java's ``Integer.parseInt``: a sign, decimal digits (leading zeros
    too), nothing else; None where it throws."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isdecimal():
        return None
    v = int(text)
    return v if -(1 << 31) <= v < (1 << 31) else None


def _ip_bytes(addr: str) -> bytes | None:
    """ZooKeeper's ``IPAuthenticationProvider.addr2Bytes``: four dot-separated
    Java ints of 0..255 (so ``127.000.0.1`` is 127.0.0.1); beyond 3.8, an
    IPv6 address as well (ZOOKEEPER-4240)."""
    parts = addr.split(".")
    if len(parts) == 4:
        out = []
        for part in parts:
            v = _java_int(part)
            if v is None or not 0 <= v <= 255:
                return None
            out.append(v)
        return bytes(out)
    if ":" in addr:
        try:
            return ipaddress.IPv6Address(addr).packed
        except ValueError:
            return None
    return None


def _ip_spec(spec: str) -> tuple[bytes, int] | None:
    """An ip ACL's address and prefix length (``/+8`` is 8, as Java reads it)."""
    addr, sep, bits_text = spec.partition("/")
    packed = _ip_bytes(addr)
    if packed is None:
        return None
    bits = len(packed) * 8
    if sep:
        b = _java_int(bits_text)
        if b is None or not 0 <= b <= bits:
            return None
        bits = b
    return packed, bits


def _valid_ip(spec: str) -> bool:
    return _ip_spec(spec) is not None


def _valid_sasl(name: str) -> bool:
    # SASLAuthenticationProvider.isValid: what Kerberos' name parser takes,
    # a name without '@', or name[/host]@realm (no other '/' or '@')
    if "@" not in name:
        return True
    head, _, realm = name.rpartition("@")
    return "@" not in head and head.count("/") <= 1 and "/" not in realm


def _valid(id_: Id) -> bool:
    if id_.scheme == "digest":
        return len(_java_split(id_.id, ":")) == 2
    if id_.scheme == "ip":
        return _valid_ip(id_.id)
    if id_.scheme == "sasl":
        return _valid_sasl(id_.id)
    return False


def fixup(path: str, auth: Sequence[Id], acl: Sequence[ACL]) -> tuple[ACL, ...]:
    """ZooKeeper's ``fixupACL``: drop duplicates, refuse malformed or unknown
    entries, expand ``auth`` to the requester's authenticated ids."""
    unique: list[ACL] = []
    for entry in acl:
        if entry not in unique:
            unique.append(entry)
    if not unique:
        raise ZKError(Code.INVALID_ACL, path)
    out: list[ACL] = []
    for entry in unique:
        id_ = entry.id
        if id_ == ANYONE:
            out.append(entry)
        elif id_.scheme == "auth":
            mine = [ACL(entry.perms, a) for a in auth if a.scheme in AUTHENTICATED_SCHEMES]
            if not mine:
                raise ZKError(Code.INVALID_ACL, path)
            out.extend(mine)
        elif _valid(id_):
            out.append(entry)
        else:
            raise ZKError(Code.INVALID_ACL, path)
    return tuple(out)


def _ip_matches(client: str, spec: str) -> bool:
    parsed = _ip_spec(spec)
    remote = _ip_bytes(client)
    if parsed is None or remote is None or len(remote) != len(parsed[0]):
        return False
    packed, bits = parsed
    width = len(packed) * 8
    mask = ((1 << bits) - 1) << (width - bits)
    return int.from_bytes(remote, "big") & mask == int.from_bytes(packed, "big") & mask


def allowed(acl: Sequence[ACL], perm: int, auth: Sequence[Id]) -> bool:
    """ZooKeeper's ``checkACL``: an empty ACL or any ``super`` id allows all;
    otherwise an entry that grants any bit of ``perm`` to one of ``auth``."""
    if not acl or any(a.scheme == "super" for a in auth):
        return True
    for entry in acl:
        if not entry.perms & perm:
            continue
        id_ = entry.id
        if id_ == ANYONE:
            return True
        for mine in auth:
            if mine.scheme != id_.scheme:
                continue
            if mine.scheme == "ip":
                if _ip_matches(mine.id, id_.id):
                    return True
            elif mine.id == id_.id or (mine.scheme == "sasl" and mine.id == SASL_SUPER):
                return True
    return False


def check(acl: Sequence[ACL], perm: int, auth: Sequence[Id], path: str = "") -> None:
    """ZKError(NO_AUTH) unless ``auth`` may do ``perm`` on a node with ``acl``."""
    if not allowed(acl, perm, auth):
        raise ZKError(Code.NO_AUTH, path)
