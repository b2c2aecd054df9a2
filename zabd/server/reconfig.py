"""What a reconfig request asks, as the membership it leads to.

The request names changes relative to the membership in effect at the leader
(``add``: voters, ``observe``: observers, ``remove``); the addresses travel in
the change (``zabd.codec.members``). Whether the change may be made is the
core's decision (``Node.propose_membership``), not this module's.
"""

from __future__ import annotations

from zabd.codec.members import decode_specs, encode_addresses, parse_spec
from zabd.protocol.membership import Membership


class ReconfigError(ValueError):
    """A request that names no address for a new member, or a bad one."""


def requested(current: Membership, add: dict[int, str], observe: dict[int, str], remove: list[int]) -> Membership:
    """``add`` voters and ``observe`` observers (id -> spec, "" for a
    member's own), ``remove`` ids: the membership that leads to."""
    addresses = decode_specs(current.extra)  # as given: ZooKeeper's clients read them back
    voters, observers = set(current.voters), set(current.observers)
    for node, addr in (*add.items(), *observe.items()):
        if not 1 <= node <= 255:
            raise ReconfigError(f"node id {node} is not one of 1..255")
        if addr:
            try:
                role = parse_spec(addr).role
            except ValueError as exc:
                raise ReconfigError(f"node {node}: {addr!r}: {exc}") from None
            if role is not None and role != ("observer" if node in observe else "participant"):
                raise ReconfigError(f"node {node}: {addr!r} says {role}, but the request makes it "
                                    f"{'an observer' if node in observe else 'a voter'}")
            addresses[node] = addr
        elif node not in addresses:
            raise ReconfigError(f"node {node} is not a member: its quorum host:port is needed")
    for node in remove:
        voters.discard(node)
        observers.discard(node)
        addresses.pop(node, None)
    for node in add:
        observers.discard(node)
        voters.add(node)
    for node in observe:
        voters.discard(node)
        observers.add(node)
    return Membership(frozenset(voters), frozenset(observers), encode_addresses(addresses))


def node_ids(nodes: dict[str, str]) -> dict[int, str]:
    """A request's ``add``/``observe`` keys (decimal strings) as node ids."""
    out = {}
    for key, addr in nodes.items():
        if not key.isdigit():
            raise ReconfigError(f"node id {key!r} is not one of 1..255")
        out[int(key)] = addr
    return out
