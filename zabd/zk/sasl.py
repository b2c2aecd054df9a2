"""The server side of SASL DIGEST-MD5 (RFC 2831) as ZooKeeper 3.8 serves it
on its client port. Socket-free: tokens in, tokens out.

ZooKeeper creates Java's DIGEST-MD5 ``SaslServer`` with protocol
``zookeeper`` and server name ``zk-sasl-md5`` (``ZooKeeperSaslServer``), and
no properties: the realm is the server name, qop ``auth`` only, UTF-8. So the
exchange, one ``DigestMD5Server`` per connection, is:

1. the client's first token (empty from kazoo and ZooKeeper's client; Java's
   server ignores what it holds, up to 4096 bytes) is answered with the
   challenge ``realm="zk-sasl-md5",nonce="...",charset=utf-8,algorithm=md5-sess``;
2. the client's digest-response must name a known user, that realm, the
   nonce, ``nc`` 1, qop ``auth`` (or none), a ``digest-uri`` of
   ``zookeeper/zk-sasl-md5`` (any case, as Java compares it) and the right
   ``response``; it is answered with ``rspauth=...``, and the exchange is
   complete.

Anything else fails the exchange (``SaslError``); so does any token after
it completed or failed: one response per challenge, no second try on the
same nonce (ZooKeeper closes the connection on a failure; its client
starts over on a new connection, with a new nonce). Every token is at most
4096 bytes, Java's limit. The identity gained is the authenticated user name
(ZooKeeper's callback handler authorizes any ``authzid`` a client asks for,
then replaces it with the authentication id): a client cannot claim
another's name. A ``SaslError``'s message says what was wrong, never a
password or a digest, and is meant for the server's log, not the client.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping

REALM = b"zk-sasl-md5"
SERVICE = "zookeeper"
HOST = "zk-sasl-md5"  # ZooKeeper's server name for DIGEST-MD5, whatever the host is
QOP = b"auth"
MAX_TOKEN = 4096  # Java's DigestMD5Server: a longer response is refused
NONCE_BYTES = 30  # Java's: 40 base64 characters

# exchange states
_START, _SENT, _DONE, _FAILED = 0, 1, 2, 3
# directives of a digest-response that may appear at most once (RFC 2831 2.1.2)
_ONCE = frozenset({"username", "realm", "nonce", "cnonce", "nc", "qop", "digest-uri", "response", "maxbuf",
                   "charset", "cipher", "authzid"})
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SPACE = frozenset(b" \t\r\n")
_HEX = frozenset(b"0123456789abcdefABCDEF")


class SaslError(ValueError):
    """The exchange failed; the message is for the server's log (no secret in it)."""


def parse_directives(data: bytes) -> dict[str, bytes]:
    """``name=value`` pairs separated by commas (RFC 2831's ``1#directive``),
    a value a token or a quoted string with ``\\`` escapes; names lowercased.
    SaslError on anything else, and on a directive of ``_ONCE`` given twice."""
    out: dict[str, bytes] = {}
    i, n = 0, len(data)
    while True:
        while i < n and (data[i] in _SPACE or data[i] == 0x2C):  # blanks and empty list elements
            i += 1
        if i >= n:
            return out
        start = i
        while i < n and data[i] in _TOKEN_CHARS:
            i += 1
        if i == start:
            raise SaslError(f"malformed digest-response: a directive name expected at byte {i}")
        name = data[start:i].decode("ascii").lower()
        while i < n and data[i] in _SPACE:
            i += 1
        if i >= n or data[i] != 0x3D:  # '='
            raise SaslError(f"malformed digest-response: '=' expected after {name!r}")
        i += 1
        while i < n and data[i] in _SPACE:
            i += 1
        if i < n and data[i] == 0x22:  # '"'
            i += 1
            value = bytearray()
            while True:
                if i >= n:
                    raise SaslError(f"malformed digest-response: the quoted value of {name!r} is not closed")
                c = data[i]
                if c == 0x22:
                    i += 1
                    break
                if c == 0x5C and i + 1 < n:  # '\\' quotes the next byte
                    i += 1
                    c = data[i]
                value.append(c)
                i += 1
            got = bytes(value)
        else:
            start = i
            while i < n and data[i] in _TOKEN_CHARS:
                i += 1
            got = data[start:i]
        if name in out and name in _ONCE:
            raise SaslError(f"malformed digest-response: {name!r} given twice")
        out[name] = got
        while i < n and data[i] in _SPACE:
            i += 1
        if i < n and data[i] != 0x2C:
            raise SaslError(f"malformed digest-response: ',' expected after {name!r} at byte {i}")


def _latin1_or_utf8(s: str) -> bytes:
    # RFC 2831 2.1.2.1 (and Java's stringToByte_8859_1): with charset=utf-8,
    # user, realm and password are hashed as ISO 8859-1 when they fit it
    try:
        return s.encode("latin-1")
    except UnicodeEncodeError:
        return s.encode("utf-8")


def _hex_md5(data: bytes) -> bytes:
    return hashlib.md5(data).hexdigest().encode()  # RFC 2831's H, not a choice


def response_value(user: str, realm: str, password: str, nonce: bytes, cnonce: bytes, authzid: bytes | None,
                   digest_uri: bytes, *, client: bool) -> bytes:
    """RFC 2831's response-value for qop auth and nc 1: the client's
    ``response`` (``client``), or the server's ``rspauth``."""
    secret = hashlib.md5(b":".join(_latin1_or_utf8(x) for x in (user, realm, password))).digest()
    a1 = secret + b":" + nonce + b":" + cnonce + (b":" + authzid if authzid else b"")
    a2 = (b"AUTHENTICATE:" if client else b":") + digest_uri
    return _hex_md5(_hex_md5(a1) + b":" + nonce + b":00000001:" + cnonce + b":" + QOP + b":" + _hex_md5(a2))


class DigestMD5Server:
    """One connection's DIGEST-MD5 exchange (``evaluate`` each token in turn)."""

    __slots__ = ("users", "nonce", "state", "user")

    def __init__(self, users: Mapping[str, str], nonce: bytes | None = None) -> None:
        self.users = users
        self.nonce = nonce if nonce is not None else base64.b64encode(os.urandom(NONCE_BYTES))
        self.state = _START
        self.user = ""  # the authenticated user, once complete

    @property
    def complete(self) -> bool:
        return self.state == _DONE

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token; SaslError ends the exchange."""
        state = self.state
        self.state = _FAILED  # until this token is through: an exception leaves it failed
        if state == _DONE:
            raise SaslError("a token after the exchange completed")
        if state == _FAILED:
            raise SaslError("a token after the exchange failed")
        if len(token) > MAX_TOKEN:
            raise SaslError(f"a token of {len(token)} bytes; at most {MAX_TOKEN}")
        if state == _START:
            self.state = _SENT
            return b'realm="' + REALM + b'",nonce="' + self.nonce + b'",charset=utf-8,algorithm=md5-sess'
        rspauth = self._verify(token)
        self.state = _DONE
        return b"rspauth=" + rspauth

    def _verify(self, token: bytes) -> bytes:
        d = parse_directives(token)
        for name in ("username", "nonce", "cnonce", "response", "digest-uri"):
            if name not in d:
                raise SaslError(f"the digest-response has no {name}")
        try:
            user = d["username"].decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("the user name is not UTF-8") from None
        if d.get("realm") != REALM:
            raise SaslError(f"realm {d.get('realm', b'(none)')[:64]!r}; expected {REALM!r}")
        if not hmac.compare_digest(d["nonce"], self.nonce):
            raise SaslError("not the nonce of this connection's challenge")
        nc = d.get("nc", b"")
        if not (0 < len(nc) <= 8 and all(c in _HEX for c in nc) and int(nc, 16) == 1):
            raise SaslError(f"nonce count {nc[:16]!r}; expected 00000001")
        if d.get("qop", QOP) != QOP:
            raise SaslError(f"qop {d['qop'][:32]!r}; only auth is offered")
        charset = d.get("charset")
        if charset is not None and charset.lower() != b"utf-8":
            raise SaslError(f"charset {charset[:32]!r}; expected utf-8")
        uri = d["digest-uri"]
        if uri.lower() != f"{SERVICE}/{HOST}".encode():
            raise SaslError(f"digest-uri {uri[:64]!r}; expected {SERVICE}/{HOST}")
        password = self.users.get(user)
        # an unknown user costs the same work as a wrong password: no timing hint at who exists
        secret = password if password is not None else base64.b64encode(os.urandom(16)).decode()
        authzid = d.get("authzid")
        realm = REALM.decode()
        expected = response_value(user, realm, secret, self.nonce, d["cnonce"], authzid, uri, client=True)
        if not hmac.compare_digest(expected, d["response"]) or password is None:
            raise SaslError(f"wrong password or unknown user {user[:64]!r}")
        self.user = user
        return response_value(user, realm, secret, self.nonce, d["cnonce"], authzid, uri, client=False)
