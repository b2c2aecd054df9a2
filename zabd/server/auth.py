"""Who a client is: a token or a verified client certificate, checked before
anything is served when the server asks for it, and what its role lets it do.

| role | may |
| --- | --- |
| ``ro`` | read: status, the log read and watch (raw, KV and membership txns), KV gets, sync |
| ``rw`` | also write: propose, KV writes; ZooKeeper sessions (their ACLs decide the rest) |
| ``admin`` | also read ZooKeeper txns in the log and change the membership (``reconfig``) |

ZooKeeper's data is ZooKeeper's to guard: a ZooKeeper txn in the log may
hold a znode that its ACL lets only some sessions read, so only ``admin``,
the operator's role (as one with the data directory), reads those. With
authentication off every client is ``rw``.
"""

from __future__ import annotations

import hmac
from pathlib import Path

RW = "rw"
RO = "ro"
ADMIN = "admin"
ROLES = (RO, RW, ADMIN)


class TokenFileError(ValueError):
    """A bad tokens file: one line naming the file, the line and the problem."""


def load_tokens(path: str) -> dict[str, str]:
    """``TOKEN ro|rw|admin`` a line; blank lines and ``#`` comments are skipped."""
    tokens: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        role = parts[1] if len(parts) == 2 else ""
        if role not in ROLES or len(parts[0]) < 8:
            raise TokenFileError(
                f"{path}: line {n}: expected 'TOKEN ro', 'TOKEN rw' or 'TOKEN admin' with a token of at least "
                "8 characters"
            )
        tokens[parts[0]] = role
    return tokens


class Authenticator:
    def __init__(self, tokens: dict[str, str] | None) -> None:
        self.tokens = tokens
        self.required = tokens is not None

    def role_of(self, token: str) -> str | None:
        # compare every token in constant time: no timing hint at a valid prefix
        found = None
        for known, role in (self.tokens or {}).items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = role
        return found
