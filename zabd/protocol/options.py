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
    # The history kept in memory is a window: at most ``window`` committed
    # txns (plus every uncommitted one); older ones stay on the driver's disk.
    # A NewLeader can then no longer carry the whole history: followers report
    # what they hold (SyncInfo), and the leader sends each one a sync plan
    # (DIFF, TRUNC or SNAP, see zabd.protocol.window), one at a time per
    # follower, retried once if not acknowledged within ``sync_retry`` ticks.
    # A DIFF that would read more than ``diff_limit`` txns from disk becomes
    # a SNAP, as ZooKeeper prefers a snapshot to a very long diff.
    windowed: bool = False
    # A follower's Ack(z) counts for every proposal at or below z: it appends
    # in zxid order over a FIFO link and acknowledges only what is durable, so
    # Ack(z) implies it holds everything of this leader's up to z. The server
    # then sends only the last of the Acks one flush releases (one per batch
    # instead of one per txn); the spec's leader counts Ack(z) for z alone.
    cumulative_acks: bool = False
    # (needs cumulative_acks) The proposals a leader makes between two
    # take_effects travel as one ProposeMany, and a follower answers it with
    # one Ack for its last txn: one message and one core event per batch
    # instead of per txn, the same txns in the same order on the same FIFO link.
    batch_proposals: bool = False
    # A leader keeps the nodes its membership changes remove as guests, as
    # ZooKeeper keeps a removed server following as a non-voting learner:
    # they get what observers get (proposals, commits, heartbeats, syncs),
    # count in no quorum, are taken back in on their LookForLeader, and are
    # members again once a change adds them back. Only this leader remembers
    # them: a new leader (or this one restarted) knows no guests, and a
    # removed node then looks for a leader that never answers, as in the spec.
    keep_removed: bool = False
    window: int = 10_000
    diff_limit: int = 100_000
    sync_retry: int = 500

    @property
    def name(self) -> str:
        return "canonical" if self == CANONICAL else "server"


CANONICAL = Options()
# What the simulator runs as ``--variant server``: the server's rules with a
# tiny window, so that syncs read from disk, cut and snapshot all the time.
SERVER = Options(vote_on_follow=True, windowed=True, cumulative_acks=True, batch_proposals=True, keep_removed=True,
                 window=8, diff_limit=24, sync_retry=300)
VARIANTS = {"canonical": CANONICAL, "server": SERVER}


def for_server(window: int, diff_limit: int, sync_retry: int) -> Options:
    """The server's variant with its configured window and limits."""
    return Options(vote_on_follow=True, windowed=True, cumulative_acks=True, batch_proposals=True, keep_removed=True,
                   window=window, diff_limit=diff_limit, sync_retry=sync_retry)
