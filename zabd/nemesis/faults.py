"""The nemeses: faults injected into a cluster of real servers, and healed.

Each nemesis starts a fault (``start``) and ends it (``heal``); a run calls
them alternately every few seconds. Partitions are packet drops in network
namespaces (``netlab``); processes get real signals; the slow disk is a
frozen filesystem (``fsfreeze`` on the node's own loop-mounted ext4: every
write and fsync of that node blocks until it thaws).
"""

from __future__ import annotations

import random
import subprocess
from typing import Protocol

from zabd.nemesis.netlab import NetLab


class Target(Protocol):
    """What a nemesis can do to the cluster (the runner provides it)."""

    lab: NetLab
    n: int

    def leader(self) -> int | None: ...

    def kill(self, node: int) -> None: ...

    def restart(self, node: int) -> None: ...

    def pause(self, node: int) -> None: ...

    def resume(self, node: int) -> None: ...

    def data_mount(self, node: int) -> str | None: ...


class Nemesis:
    name = "none"

    def start(self, t: Target, rng: random.Random) -> str:
        """Begin the fault; returns what was done, for the log."""
        return "nothing"

    def heal(self, t: Target) -> str:
        return "nothing"


class KillRandom(Nemesis):
    name = "kill"

    def __init__(self) -> None:
        self.down: int | None = None

    def pick(self, t: Target, rng: random.Random) -> int:
        return rng.randint(1, t.n)

    def start(self, t: Target, rng: random.Random) -> str:
        self.down = self.pick(t, rng)
        t.kill(self.down)
        return f"SIGKILL node {self.down}"

    def heal(self, t: Target) -> str:
        if self.down is None:
            return "nothing"
        node, self.down = self.down, None
        t.restart(node)
        return f"restart node {node}"


class KillLeader(KillRandom):
    name = "kill-leader"

    def pick(self, t: Target, rng: random.Random) -> int:
        return t.leader() or rng.randint(1, t.n)


class Pause(Nemesis):
    name = "pause"

    def __init__(self) -> None:
        self.paused: int | None = None

    def start(self, t: Target, rng: random.Random) -> str:
        self.paused = t.leader() if rng.random() < 0.5 else rng.randint(1, t.n)
        self.paused = self.paused or 1
        t.pause(self.paused)
        return f"SIGSTOP node {self.paused}"

    def heal(self, t: Target) -> str:
        if self.paused is None:
            return "nothing"
        node, self.paused = self.paused, None
        t.resume(node)
        return f"SIGCONT node {node}"


class Partition(Nemesis):
    def heal(self, t: Target) -> str:
        t.lab.heal()
        return "heal the network"


class RandomHalves(Partition):
    name = "partition-halves"

    def start(self, t: Target, rng: random.Random) -> str:
        nodes = list(range(1, t.n + 1))
        rng.shuffle(nodes)
        half = set(nodes[: t.n // 2])
        t.lab.partition([half, set(nodes) - half])
        return f"partition {sorted(half)} | {sorted(set(nodes) - half)}"


class IsolateLeader(Partition):
    name = "isolate-leader"

    def start(self, t: Target, rng: random.Random) -> str:
        leader = t.leader() or rng.randint(1, t.n)
        t.lab.isolate(leader, clients=rng.random() < 0.5)
        return f"isolate node {leader}"


class Bridge(Partition):
    """Two majorities that share one node (Jepsen's bridge)."""

    name = "bridge"

    def start(self, t: Target, rng: random.Random) -> str:
        nodes = list(range(1, t.n + 1))
        rng.shuffle(nodes)
        bridge, rest = nodes[0], nodes[1:]
        left, right = set(rest[: len(rest) // 2]), set(rest[len(rest) // 2 :])
        t.lab.cut_pairs((a, b) for a in left for b in right)
        return f"bridge {sorted(left)} - {bridge} - {sorted(right)}"


class OneWay(Partition):
    name = "one-way"

    def start(self, t: Target, rng: random.Random) -> str:
        a, b = rng.sample(range(1, t.n + 1), 2)
        if rng.random() < 0.5 and t.leader():
            a = t.leader() or a
            b = rng.choice([x for x in range(1, t.n + 1) if x != a])
        t.lab.cut_one_way(a, b)
        return f"drop {a} -> {b}"


class SlowDisk(Nemesis):
    name = "slow-disk"

    def __init__(self) -> None:
        self.frozen: str | None = None

    def start(self, t: Target, rng: random.Random) -> str:
        node = t.leader() if rng.random() < 0.5 else rng.randint(1, t.n)
        node = node or 1
        mount = t.data_mount(node)
        if mount is None:
            return "no loop filesystem for this node: skipped"
        subprocess.run(["fsfreeze", "-f", mount], check=True, capture_output=True)
        self.frozen = mount
        return f"freeze the disk of node {node}"

    def heal(self, t: Target) -> str:
        if self.frozen is None:
            return "nothing"
        mount, self.frozen = self.frozen, None
        subprocess.run(["fsfreeze", "-u", mount], check=True, capture_output=True)
        return f"thaw {mount}"


class Mixed(Nemesis):
    """A different nemesis each time, drawn from the others."""

    name = "mixed"

    def __init__(self) -> None:
        self.choices = [cls() for cls in ALL.values() if cls is not Mixed]
        self.current: Nemesis | None = None

    def start(self, t: Target, rng: random.Random) -> str:
        self.current = rng.choice(self.choices)
        return f"{self.current.name}: {self.current.start(t, rng)}"

    def heal(self, t: Target) -> str:
        if self.current is None:
            return "nothing"
        current, self.current = self.current, None
        return current.heal(t)


ALL: dict[str, type[Nemesis]] = {
    cls.name: cls
    for cls in (KillRandom, KillLeader, Pause, RandomHalves, IsolateLeader, Bridge, OneWay, SlowDisk, Mixed)
}
