"""A whole membership, as the single-voter changes that reach it.

``zabd reconfig --voters ... [--observers ...]`` names the membership wanted;
the core takes one voter more or fewer per change (zabd.protocol.membership),
so the way there is a sequence: voters added first (the ensemble grows),
then voters removed or demoted, then the observers in one last change.
"""

from __future__ import annotations

from typing import Any


def steps(
    voters_now: set[int], observers_now: set[int], voters: dict[int, str], observers: dict[int, str]
) -> list[dict[str, Any]]:
    """The ``Client.reconfig`` keyword sets, in order. ``voters`` and
    ``observers``: node id -> quorum host:port ("" for a member's own)."""
    if not voters:
        raise ValueError("a membership needs at least one voter")
    both = sorted(voters.keys() & observers.keys())
    if both:
        raise ValueError(f"nodes {both} are named as voters and as observers")
    out: list[dict[str, Any]] = []
    for node in sorted(voters.keys() - voters_now):
        out.append({"add": {node: voters[node]}})
    for node in sorted(voters_now - voters.keys()):
        out.append({"observe": {node: observers[node]}} if node in observers else {"remove": [node]})
    new_observers = {n: a for n, a in observers.items() if n not in voters_now and n not in observers_now}
    gone = sorted(observers_now - observers.keys() - voters.keys())
    if new_observers or gone:
        out.append({"observe": new_observers, "remove": gone})
    return out
