"""The ensemble's membership: who votes, who observes, and how it changes.

A membership change is a txn like any other, told apart by its payload's
prefix, and a node's membership is the one of the last such txn in its
history (or the one it started with). So a change takes effect at a node as
soon as the node holds it, committed or not, and a history cut back (TRUNC,
a new leader's history) takes the change back with it. This is Raft's
single-server change (Ongaro's thesis, section 4.1) in ZAB's terms, and its
two rules are what keep two disjoint quorums from ever deciding:

* consecutive memberships differ by at most one voter (added, removed,
  promoted from observer or demoted to one), so a majority of the voters of
  one and a majority of the voters of the next always share a node;
* a leader proposes a change only once it is established (its epoch's
  NewLeader acknowledged, so its whole history committed) and no earlier
  change in its history is uncommitted (``Node.propose_membership``).

Observers may come and go freely: they count in no quorum.
"""

from __future__ import annotations

from typing import Final, NamedTuple

# A payload that starts with this is a membership change (never a client's:
# raw proposals are client bytes, but the server's client paths prefix their
# payloads with their own magic and refuse this one).
MAGIC: Final = b"\x00\xffzabd-membership\x00"


class Membership(NamedTuple):
    voters: frozenset[int]
    observers: frozenset[int]
    # the driver's own part (addresses): carried in the txn, opaque here
    extra: bytes = b""

    @property
    def members(self) -> frozenset[int]:
        return self.voters | self.observers

    @property
    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def describe(self) -> str:
        voters = ",".join(map(str, sorted(self.voters)))
        observers = ",".join(map(str, sorted(self.observers)))
        return f"voters {voters or '-'}; observers {observers or '-'}"


ONE_AT_A_TIME = "one change at a time"  # in the error of a change asked for before the previous one committed


class MembershipError(ValueError):
    """A change the rules above do not allow."""


def encode(m: Membership) -> bytes:
    voters = ",".join(map(str, sorted(m.voters)))
    observers = ",".join(map(str, sorted(m.observers)))
    return MAGIC + f"{voters};{observers};".encode() + m.extra


def decode(payload: bytes) -> Membership | None:
    """The membership a txn's payload sets; None if it sets none (or is not
    well formed: a txn nobody could have proposed sets nothing)."""
    if not payload.startswith(MAGIC):
        return None
    body = payload[len(MAGIC) :]
    parts = body.split(b";", 2)
    if len(parts) != 3:
        return None
    try:
        voters = frozenset(int(x) for x in parts[0].split(b",") if x)
        observers = frozenset(int(x) for x in parts[1].split(b",") if x)
    except ValueError:
        return None
    if not voters or voters & observers:
        return None
    return Membership(voters, observers, parts[2])


def check_change(old: Membership, new: Membership) -> None:
    """Raise MembershipError unless ``new`` may follow ``old``."""
    if not new.voters:
        raise MembershipError("a membership needs at least one voter")
    if new.voters & new.observers:
        both = sorted(new.voters & new.observers)
        raise MembershipError(f"nodes {both} would be voters and observers at once")
    if any(not 1 <= i <= 255 for i in new.members):
        raise MembershipError(f"node ids must be 1..255, got {sorted(new.members)}")
    changed = old.voters ^ new.voters
    if len(changed) > 1:
        raise MembershipError(
            f"voters {sorted(old.voters)} -> {sorted(new.voters)} changes {len(changed)} voters at once; "
            "a change adds or removes one voter (observers any number): make it in steps"
        )
