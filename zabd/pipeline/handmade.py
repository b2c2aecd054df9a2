"""Hand-made checker inputs: known histories fed through ``SafetyChecker.record_*``.

A sweep can include them as *canaries* (``canaries = ["lost-commit"]`` in a
grid file): they run on the executors like any scenario and land in the same
Parquet rows, so a sweep can show, end to end, that a violation reaches the
summary, the reproducer list and the exit status. The simulator itself cannot
be asked to misbehave, so this is how the reporting path is tested for real.

Each one replays with ``zabd pipeline handmade NAME``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.sim.checker import SafetyChecker, Violation


class Recorder:
    """Drives a checker and keeps a text trace of the calls (the row's digest)."""

    def __init__(self, checker: SafetyChecker) -> None:
        self.checker = checker
        self.trace: list[str] = []
        self.histories: dict[int, list[Txn]] = {}

    def established(self, tick: int, node: int, epoch: int) -> None:
        self.trace.append(f"{tick} established node={node} epoch={epoch}")
        self.checker.record_established(tick, node, epoch, list(self.histories.get(node, [])))

    def propose(self, tick: int, node: int, txn: Txn) -> None:
        self.trace.append(f"{tick} propose node={node} zxid={zx.fmt(txn.zxid)} payload={txn.payload!r}")
        self.checker.record_proposal(tick, node, txn)

    def append(self, tick: int, node: int, txn: Txn) -> None:
        self.trace.append(f"{tick} append node={node} zxid={zx.fmt(txn.zxid)}")
        history = self.histories.setdefault(node, [])
        history.append(txn)
        self.checker.record_history(tick, node, list(history), False)

    def replace(self, tick: int, node: int, history: list[Txn]) -> None:
        self.trace.append(f"{tick} replace node={node} len={len(history)}")
        self.histories[node] = list(history)
        self.checker.record_history(tick, node, list(history), True)

    def commit(self, tick: int, node: int, zxid: int) -> None:
        self.trace.append(f"{tick} commit node={node} zxid={zx.fmt(zxid)}")
        self.checker.record_commit(tick, node, zxid, list(self.histories.get(node, [])))

    def crash(self, tick: int, node: int) -> None:
        self.trace.append(f"{tick} crash node={node}")
        self.checker.record_crash(node)


def _lost_commit(r: Recorder) -> None:
    """Node 1 leads epoch 1 and commits a txn with node 2; then node 3, which
    never saw it, is established leader of epoch 2 without it."""
    t1 = Txn(zx.make(1, 1), b"zab-0")
    r.established(10, 1, 1)
    r.propose(20, 1, t1)
    r.append(20, 1, t1)
    r.append(22, 2, t1)
    r.commit(24, 1, t1.zxid)
    r.crash(30, 1)
    r.established(200, 3, 2)  # history empty: the committed zxid (1, 1) is lost


def _agreement(r: Recorder) -> None:
    """Node 3 commits, at position 0, a txn other than the one node 1 committed there."""
    a = Txn(zx.make(1, 1), b"zab-0")
    b = Txn(zx.make(2, 1), b"zab-0")
    r.established(10, 1, 1)
    r.propose(20, 1, a)
    r.append(20, 1, a)
    r.commit(24, 1, a.zxid)
    r.append(220, 3, b)
    r.commit(224, 3, b.zxid)


def _clean(r: Recorder) -> None:
    """A correct run: commit, leader change with the txn carried over, commit again."""
    t1 = Txn(zx.make(1, 1), b"zab-0")
    t2 = Txn(zx.make(2, 1), b"zab-1")
    r.established(10, 1, 1)
    r.propose(20, 1, t1)
    r.append(20, 1, t1)
    r.append(22, 2, t1)
    r.commit(24, 1, t1.zxid)
    r.commit(26, 2, t1.zxid)
    r.crash(30, 1)
    r.established(200, 2, 2)
    r.replace(205, 3, [t1])
    r.propose(220, 2, t2)
    r.append(220, 2, t2)
    r.append(222, 3, t2)
    r.commit(224, 2, t2.zxid)


@dataclass(frozen=True, slots=True)
class Handmade:
    name: str
    nodes: int
    script: Callable[[Recorder], None]
    expect: str | None  # the violation kind it must produce, or None

    @property
    def command(self) -> str:
        return f"zabd pipeline handmade {self.name}"


HANDMADE: dict[str, Handmade] = {
    h.name: h
    for h in (
        Handmade("lost-commit", 3, _lost_commit, "lost-commit"),
        Handmade("agreement", 3, _agreement, "agreement"),
        Handmade("clean", 3, _clean, None),
    )
}


@dataclass(frozen=True, slots=True)
class HandmadeResult:
    digest: str
    violation: Violation | None
    committed: int
    elections: int


def run_handmade(name: str) -> HandmadeResult:
    h = HANDMADE[name]
    checker = SafetyChecker(h.command)
    rec = Recorder(checker)
    h.script(rec)
    digest = hashlib.sha256("\n".join(rec.trace).encode()).hexdigest()
    elections = sum(1 for line in rec.trace if " established " in line)
    return HandmadeResult(digest, checker.violation, len(checker.committed), elections)


def main(argv: list[str]) -> int:
    """``zabd pipeline handmade NAME``: replay one hand-made history through the checker."""
    import sys

    if len(argv) != 1 or argv[0] not in HANDMADE:
        print(f"zabd pipeline handmade: expected one NAME of {', '.join(HANDMADE)}", file=sys.stderr)
        return 2
    result = run_handmade(argv[0])
    if result.violation is not None:
        print(f"zabd pipeline handmade: safety violation: {result.violation.describe()}", file=sys.stderr)
        print(f"zabd pipeline handmade: reproduce with: {result.violation.reproducer}", file=sys.stderr)
    sys.stdout.write(result.digest)
    sys.stdout.flush()
    return 1 if result.violation is not None else 0
