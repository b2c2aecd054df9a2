"""Membership changes during a nemesis run (``zabd nemesis --membership``).

The cluster has spare servers beside its N voters, started with
``join = true``. While the nemesis kills and partitions, a changer makes one
random single-voter change every few seconds through ``Client.reconfig``:
a voter added (a spare, or an observer promoted), a voter removed or demoted
(the leader a third of the time), an observer added or removed. The voters
stay between ``max(3, N - 1)`` and ``N + 1``. After the faults the voters
are put back to 1..N with no observer, so the run's checks compare the
same nodes as a run without changes.

A change is recorded like a workload operation: ok, refused (certainly not
made: no leader, a change still pending, a view of the membership that was
out of date) or unknown (a timeout or a lost connection after it was sent).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zabd.client import Client, ZabdError
from zabd.client.membership_steps import steps
from zabd.client.spawn import LocalCluster

OK, REFUSED, UNKNOWN = "ok", "refused", "unknown"


@dataclass(slots=True)
class Change:
    at: float  # seconds since the changer started
    what: str  # "add 4", "remove 2 (leader)", ...
    outcome: str
    detail: str = ""


@dataclass(slots=True)
class Membership:
    voters: frozenset[int]
    observers: frozenset[int]
    version: int  # zxid of the change in effect (0: the configured one)


@dataclass(slots=True)
class MembershipChanger:
    cluster: LocalCluster
    voters_wanted: int  # N: the voters at the start and at the end
    rng: random.Random
    log: Callable[[str], object] = print
    changes: list[Change] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    @property
    def hosts(self) -> list[int]:
        return list(range(1, self.cluster.n + 1))

    def address(self, node: int) -> str:
        # the whole spec, so that /zookeeper/config keeps every member's client address
        return self.cluster.spec(node)

    async def current(self) -> tuple[Membership | None, int | None]:
        """The newest membership any server reports (a change takes effect
        where it is held, committed or not), and the leader in broadcast."""
        newest: Membership | None = None
        leader: int | None = None
        answers = await asyncio.gather(*(self.cluster.status(i, timeout=0.5) for i in self.hosts))
        for node, st in zip(self.hosts, answers, strict=True):
            if st is None:
                continue
            m = st["membership"]
            if newest is None or m["zxid"] > newest.version:
                newest = Membership(frozenset(m["voters"]), frozenset(m["observers"]), m["zxid"])
            if st["role"] == "leading" and st["phase"] == "broadcast":
                leader = node
        return newest, leader

    def pick(self, m: Membership, leader: int | None) -> tuple[str, dict[str, Any]] | None:
        """A random change that keeps the voters within bounds, or None."""
        low, high = max(3, self.voters_wanted - 1), self.voters_wanted + 1
        outside = [x for x in self.hosts if x not in m.voters and x not in m.observers]
        kinds: list[str] = []
        if len(m.voters) < high:
            kinds.append("add")
        if len(m.voters) > low:
            kinds += ["remove", "demote"]
        if outside:
            kinds.append("observe")
        if m.observers:
            kinds.append("drop-observer")
        if not kinds:
            return None
        kind = self.rng.choice(kinds)
        if kind == "add":
            node = self.rng.choice(sorted(set(self.hosts) - m.voters))
            return f"add {node}" + (" (observer promoted)" if node in m.observers else ""), {
                "add": {node: self.address(node)}}
        if kind in ("remove", "demote"):
            voters = sorted(m.voters)
            node = leader if leader in m.voters and self.rng.random() < 1 / 3 else self.rng.choice(voters)
            tag = " (leader)" if node == leader else ""
            if kind == "remove":
                return f"remove {node}{tag}", {"remove": [node]}
            return f"demote {node}{tag}", {"observe": {node: self.address(node)}}
        if kind == "observe":
            node = self.rng.choice(outside)
            return f"observe {node}", {"observe": {node: self.address(node)}}
        node = self.rng.choice(sorted(m.observers))
        return f"remove observer {node}", {"remove": [node]}

    async def change_once(self) -> Change | None:
        m, leader = await self.current()
        if m is None:
            return None
        picked = self.pick(m, leader)
        if picked is None:
            return None
        what, kw = picked
        return await self._make(what, kw)

    async def _make(self, what: str, kw: dict[str, Any]) -> Change:
        at = time.monotonic() - self.t0
        servers = [self.cluster.client_addr(i) for i in self.hosts]
        self.rng.shuffle(servers)
        try:
            async with await Client.connect(servers, timeout=3.0) as client:
                await client.reconfig(**kw)
            change = Change(at, what, OK)
        except ZabdError as exc:
            change = Change(at, what, REFUSED if exc.applied is False else UNKNOWN, exc.code)
        except (OSError, TimeoutError) as exc:
            change = Change(at, what, UNKNOWN, type(exc).__name__)
        self.changes.append(change)
        detail = f" ({change.detail})" if change.detail else ""
        self.log(f"{at:7.1f} s  membership: {what}: {change.outcome}{detail}")
        return change

    async def run(self, every: float, stop: asyncio.Event) -> None:
        """A change every ``every`` seconds, the first after half of that,
        until ``stop``: with faults every ``every`` seconds, each change
        lands in the middle of a fault or of a healed spell."""
        k = 0
        while not stop.is_set():
            # on a fixed schedule: a status call to a paused server takes its timeout
            wait = self.t0 + every / 2 + k * every - time.monotonic()
            k += 1
            if wait <= 0:
                continue
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except TimeoutError:
                await self.change_once()

    async def restore(self, timeout: float = 90.0) -> Membership | None:
        """Voters 1..N again and no observer; the membership reached (None:
        not within ``timeout``). Every node 1..N must hold it too."""
        wanted = frozenset(range(1, self.voters_wanted + 1))
        addresses = {node: self.address(node) for node in wanted}
        deadline = time.monotonic() + timeout
        seen = "no server answered"
        while time.monotonic() < deadline:
            m, _ = await self.current()
            if m is not None and m.voters == wanted and not m.observers:
                held = await self.cluster.statuses(sorted(wanted))
                if all(st is not None and st["membership"]["zxid"] == m.version for st in held.values()):
                    return m
                seen = f"version {m.version:#x}; nodes 1..{self.voters_wanted} hold " + ", ".join(
                    f"{st['membership']['zxid']:#x}" if st else "?" for st in held.values())
            elif m is not None:
                plan = steps(set(m.voters), set(m.observers), addresses, {})
                await self._make("restore: " + ", ".join(f"{k} {v}" for k, v in plan[0].items()), plan[0])
                continue
            await asyncio.sleep(0.2)  # a poll of the servers' status, bounded by the deadline
        self.log(f"membership not restored within {timeout:g} s: {seen}")
        return None

    def summary(self) -> str:
        counts = Counter(c.outcome for c in self.changes)
        return f"{len(self.changes)} changes: {counts[OK]} ok, {counts[REFUSED]} refused, {counts[UNKNOWN]} unknown"
