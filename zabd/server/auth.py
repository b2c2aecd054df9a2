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
