"""The members' peer addresses, as a membership change carries them.

``Membership.extra`` (``zabd.protocol.membership``) is the driver's part of a
change; the server puts every member's quorum ``host:port`` there, so that
each node learns where a new member listens from the change itself:
``id=SPEC`` entries, comma-separated, ASCII, where SPEC is the quorum
``host:port`` or ZooKeeper's ``host:quorum:election:role;client`` (kept as
given, since ZooKeeper's clients read ``/zookeeper/config`` back).
"""

from __future__ import annotations


def encode_addresses(addresses: dict[int, str]) -> bytes:
    return ",".join(f"{i}={addresses[i]}" for i in sorted(addresses)).encode()


def decode_specs(data: bytes) -> dict[int, str]:
    """The members' specs in ``data``; ValueError if it is not such a list."""
    out: dict[int, str] = {}
    if not data:
        return out
    for item in data.decode("ascii").split(","):
        node, sep, spec = item.partition("=")
        if not sep or not node.isdigit() or spec.split(";")[0].count(":") < 1:
            raise ValueError(f"not a member address: {item!r}")
        out[int(node)] = spec
    return out


def quorum_address(spec: str) -> str:
    """``host:port`` of a spec (ZooKeeper's: its quorum port)."""
    return ":".join(spec.split(";")[0].split(":")[:2])


def decode_addresses(data: bytes) -> dict[int, str]:
    """The members' quorum ``host:port``; ValueError if ``data`` is not a list."""
    return {node: quorum_address(spec) for node, spec in decode_specs(data).items()}


def zookeeper_config_text(
    voters: frozenset[int], observers: frozenset[int], specs: dict[int, str], version: int
) -> bytes:
    """``/zookeeper/config`` as ZooKeeper writes it: ``server.N=host:quorum:
    election:role[;client]`` a member (a ZooKeeper spec as given; a bare
    ``host:port`` as its one peer port twice), then ``version=`` in hex."""
    lines = []
    for node in sorted(voters | observers):
        spec = specs.get(node, "")
        role = "observer" if node in observers else "participant"
        if spec.split(";")[0].count(":") >= 3:
            lines.append(f"server.{node}={spec}")
        else:
            host, _, port = quorum_address(spec).rpartition(":")
            lines.append(f"server.{node}={host}:{port}:{port}:{role}")
    lines.append(f"version={version:x}")
    return "\n".join(lines).encode()
