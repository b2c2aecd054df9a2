"""The members' peer addresses, as a membership change carries them.

``Membership.extra`` (``zabd.protocol.membership``) is the driver's part of a
change; the server puts every member's quorum ``host:port`` there, so that
each node learns where a new member listens from the change itself:
``id=host:port`` entries, comma-separated, ASCII.
"""

from __future__ import annotations


def encode_addresses(addresses: dict[int, str]) -> bytes:
    return ",".join(f"{i}={addresses[i]}" for i in sorted(addresses)).encode()


def decode_addresses(data: bytes) -> dict[int, str]:
    """The addresses in ``data``; ValueError if it is not such a list."""
    out: dict[int, str] = {}
    if not data:
        return out
    for item in data.decode("ascii").split(","):
        node, sep, addr = item.partition("=")
        if not sep or not node.isdigit() or not addr or addr.count(":") < 1:
            raise ValueError(f"not a member address: {item!r}")
        out[int(node)] = addr
    return out
