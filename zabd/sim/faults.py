"""The fault schedule of spec section 12: parsing, validation, and a seeded
generator of random schedules that prints back as a replayable SPEC."""

from __future__ import annotations

import re
from dataclasses import dataclass

from zabd.protocol.rand import MASK64, mix

U64_MAX = MASK64


class FaultSpecError(ValueError):
    """A ``--faults`` SPEC that section 12 rejects (a usage error)."""


@dataclass(frozen=True, slots=True)
class Crash:
    node: int
    at: int

    def __str__(self) -> str:
        return f"crash:{self.node}@{self.at}"


@dataclass(frozen=True, slots=True)
class Restart:
    node: int
    at: int

    def __str__(self) -> str:
        return f"restart:{self.node}@{self.at}"


@dataclass(frozen=True, slots=True)
class Cut:
    src: int
    dst: int
    start: int
    end: int  # exclusive
    both: bool

    def __str__(self) -> str:
        return f"cut:{self.src}{'-' if self.both else '>'}{self.dst}@{self.start}-{self.end}"


@dataclass(frozen=True, slots=True)
class Change:
    """A membership change the leader is asked for at ``at`` (not in the spec):
    ``add`` makes ``node`` a voter, ``observe`` an observer, ``remove`` takes
    it out. Skipped when nobody leads or the rules refuse it (one voter at a
    time, one change at a time: zabd.protocol.membership)."""

    kind: str  # add | observe | remove
    node: int
    at: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.node}@{self.at}"


FaultEvent = Crash | Restart | Cut | Change
CHANGE_KINDS = ("add", "observe", "remove")

_DEC = r"([0-9]+)"
_NODE_EVENT = re.compile(rf"(crash|restart):{_DEC}@{_DEC}")
_CHANGE_EVENT = re.compile(rf"(add|observe|remove):{_DEC}@{_DEC}")
# ``to`` is ``>`` spelled so that no shell needs quotes around it (beyond the
# spec; it parses to the same Cut, so digests do not change)
_CUT_EVENT = re.compile(rf"cut:{_DEC}(>|-|to){_DEC}@{_DEC}-{_DEC}")


def _number(text: str, what: str, limit: int) -> int:
    value = int(text)
    if value > limit:
        raise FaultSpecError(f"{what} {text} is out of range (at most {limit})")
    return value


def _node_id(text: str, nodes: int) -> int:
    value = int(text)
    if not 1 <= value <= nodes:
        raise FaultSpecError(f"node id {text} is outside 1..={nodes}")
    return value


def parse_faults(spec: str, nodes: int) -> list[FaultEvent]:
    """Parse and validate SPEC for a cluster of ``nodes``. Raises FaultSpecError."""
    if spec == "":
        return []
    events: list[FaultEvent] = []
    for item in spec.split(","):
        m = _NODE_EVENT.fullmatch(item)
        if m:
            node = _node_id(m.group(2), nodes)
            at = _number(m.group(3), "tick", U64_MAX)
            events.append(Crash(node, at) if m.group(1) == "crash" else Restart(node, at))
            continue
        m = _CHANGE_EVENT.fullmatch(item)
        if m:
            events.append(Change(m.group(1), _node_id(m.group(2), nodes), _number(m.group(3), "tick", U64_MAX)))
            continue
        m = _CUT_EVENT.fullmatch(item)
        if m:
            src = _node_id(m.group(1), nodes)
            dst = _node_id(m.group(3), nodes)
            if src == dst:
                raise FaultSpecError(f"cut {item!r} has the same node on both ends")
            start = _number(m.group(4), "tick", U64_MAX)
            end = _number(m.group(5), "tick", U64_MAX)
            if start >= end:
                raise FaultSpecError(f"cut {item!r} needs T1 < T2")
            events.append(Cut(src, dst, start, end, m.group(2) == "-"))
            continue
        raise FaultSpecError(
            f"fault event {item!r} is not crash:N@T, restart:N@T, cut:S>D@T1-T2 (or cut:StoD@T1-T2), cut:S-D@T1-T2, "
            "add:N@T, observe:N@T or remove:N@T"
        )
    check_up_down(events, nodes)
    return events


def node_events_in_order(events: list[FaultEvent]) -> list[Crash | Restart]:
    """Crash/restart events by tick, equal ticks in listed order (stable sort)."""
    node_events = [e for e in events if isinstance(e, (Crash, Restart))]
    return sorted(node_events, key=lambda e: e.at)


def check_up_down(events: list[FaultEvent], nodes: int) -> None:
    up = [True] * (nodes + 1)
    for e in node_events_in_order(events):
        if isinstance(e, Crash):
            if not up[e.node]:
                raise FaultSpecError(f"{e} crashes node {e.node}, which is already down")
            up[e.node] = False
        else:
            if up[e.node]:
                raise FaultSpecError(f"{e} restarts node {e.node}, which is already up")
            up[e.node] = True


def format_faults(events: list[FaultEvent]) -> str:
    return ",".join(str(e) for e in events)


class _Rng:
    """splitmix64 stream: the generator is seeded like everything else here."""

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        return mix(self.state - 0x9E3779B97F4A7C15 & MASK64)

    def below(self, n: int) -> int:
        return self.next() % n if n > 0 else 0


def random_faults(seed: int, nodes: int, rounds: int, count: int, max_down: int | None = None) -> list[FaultEvent]:
    """A seeded random schedule of up to ``count`` events within ``rounds``.

    Crashes come with a later restart (7 times in 8; otherwise the node stays
    down), at most ``max_down`` nodes are down at any moment (default: a
    minority, so the cluster can still make progress), and cuts last
    1..rounds/4 ticks, one-way or two-way. The result always passes
    :func:`check_up_down`, so its text replays with ``--faults``.
    """
    rng = _Rng(seed ^ 0x5A17F00D)
    if max_down is None:
        max_down = (nodes - 1) // 2
    span = max(rounds, 1)
    forever = 1 << 65
    downs: list[tuple[int, int, int]] = []  # (node, crash tick, restart tick or forever)
    cuts: list[Cut] = []
    budget = count
    for _ in range(count * 20):
        if budget <= 0:
            break
        if rng.below(2) == 0 and nodes >= 2:
            src = 1 + rng.below(nodes)
            dst = 1 + rng.below(nodes - 1)
            if dst >= src:
                dst += 1
            start = rng.below(span)
            cuts.append(Cut(src, dst, start, start + 1 + rng.below(max(span // 4, 1)), rng.below(2) == 0))
            budget -= 1
            continue
        if max_down <= 0 or budget < 1:
            continue
        node = 1 + rng.below(nodes)
        start = rng.below(span)
        end = start + 1 + rng.below(max(span // 3, 1))
        if rng.below(8) == 0 or budget < 2:
            end = forever
        # strictly apart from this node's other outages, so events never share a tick
        if any(n == node and not (end < a or start > b) for n, a, b in downs):
            continue
        if sum(1 for n, a, b in downs if n != node and a <= end and start <= b) >= max_down:
            continue
        downs.append((node, start, end))
        budget -= 1 if end == forever else 2
    timed: list[tuple[int, int, FaultEvent]] = []
    for node, start, end in downs:
        timed.append((start, 1, Crash(node, start)))
        if end != forever:
            timed.append((end, 0, Restart(node, end)))
    for cut in cuts:
        timed.append((cut.start, 2, cut))
    timed.sort(key=lambda e: (e[0], e[1], str(e[2])))
    events = [e for _, _, e in timed]
    check_up_down(events, nodes)
    return events


def random_changes(seed: int, nodes: int, rounds: int, count: int) -> list[Change]:
    """A seeded schedule of ``count`` membership changes within ``rounds``
    (any node, any kind: the simulator skips what the rules refuse)."""
    rng = _Rng(seed ^ 0xC0F16)
    span = max(rounds, 1)
    changes = [Change(CHANGE_KINDS[rng.below(3)], 1 + rng.below(nodes), rng.below(span)) for _ in range(count)]
    return sorted(changes, key=lambda c: c.at)


def with_power_losses(events: list[FaultEvent], seed: int, nodes: int, rounds: int, losses: int) -> list[FaultEvent]:
    """``events`` plus ``losses`` seeded power losses: at a drawn tick every node
    that is up crashes, and each comes back 1..rounds/8 ticks later (sooner if
    its own next crash is due). The pipeline variant's durability is what this
    tests: a majority (or everyone) restarting from disk must still hold what
    a client was told. Returns a schedule that passes :func:`check_up_down`."""
    rng = _Rng(seed ^ 0x90E7_105E)
    span = max(rounds, 1)
    out = list(events)
    for _ in range(losses):
        at = rng.below(span)
        timed = node_events_in_order(out)
        added: list[FaultEvent] = []
        for node in range(1, nodes + 1):
            back = at + 1 + rng.below(max(span // 8, 1))
            mine = [e for e in timed if e.node == node]
            if any(e.at == at for e in mine):
                continue
            before = [e for e in mine if e.at < at]
            if before and isinstance(before[-1], Crash):
                continue  # down already
            after = [e for e in mine if e.at > at]
            if after:
                back = min(back, after[0].at - 1)
            if back <= at:
                continue
            added += [Crash(node, at), Restart(node, back)]
        try:
            check_up_down([*out, *added], nodes)
        except FaultSpecError:
            continue
        out += added
    return sorted(out, key=lambda e: e.start if isinstance(e, Cut) else e.at)


def pipeline_faults(seed: int, nodes: int, rounds: int, count: int) -> list[FaultEvent]:
    """The pipeline variant's random schedule: ``random_faults`` plus a power
    loss for every three events asked for (rounded up)."""
    return with_power_losses(random_faults(seed, nodes, rounds, count), seed, nodes, rounds, (count + 2) // 3)
