"""Protocol variants the core can run: the canonical spec, and the server's.

The canonical simulator (spec ``canonical-sim.md`` v1.4) runs ``CANONICAL``;
every vector digest depends on it. The server runs ``SERVER``, which adds
rules the spec does not have. Each rule here is the core's, never a driver's,
and the simulator can run ``SERVER`` too (``zabd sim --variant server``), so
the safety checker and the Spark sweeps cover what the server really does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Options:
    # A Looking node that decides to follow ``v`` on v's LookForLeader, with
    # its vote already on ``v``, tells ``v`` so. Spec v1.4 answers a
    # LookForLeader only while the receiver still looks afterwards, so when
    # two followers of a dead leader start looking a few milliseconds apart
    # the earlier one can follow the later one without telling it, and the
    # later one waits for a quorum until a timer fires (1.5-3 s; seen in 2 of
    # 12 leader kills on three servers). The extra Vote is an election
    # message only: it cannot change what is committed.
    vote_on_follow: bool = False

    @property
    def name(self) -> str:
        return "canonical" if self == CANONICAL else "server"


CANONICAL = Options()
SERVER = Options(vote_on_follow=True)
VARIANTS = {"canonical": CANONICAL, "server": SERVER}
