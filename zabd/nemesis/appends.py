"""The append workload's checker: unique payloads proposed to the log.

Clients propose unique values (raw ``propose`` payloads); the history says
which were acknowledged (with the zxid the server answered, when it did),
which certainly failed and which have an unknown outcome. After the run,
every node's committed log is read. Then:

* every acknowledged append is in the final log exactly once (else *lost*
  or *duplicated*), at the zxid its acknowledgement named (else *misplaced*);
* nothing is in the log that was never attempted or whose append certainly
  failed (*unexpected*);
* every node's log is a prefix of the longest one (*divergent*: two nodes
  disagree on what is committed at some position), with zxids in order
  (*disordered*).

An append of unknown outcome may be there once, or not at all. "The final
log" is the longest node's; a shorter one that is a prefix of it is a node
that is behind, which is allowed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zabd.nemesis.history import APPEND, FAIL, OK, UNKNOWN, Op

Entry = tuple[int, bytes]  # (zxid, payload)
_SHOW = 20  # findings listed per kind in a report


@dataclass(slots=True)
class Lost:
    op: Op  # acknowledged, not in the final log
    at_ack: bytes | None  # what the final log holds at the acknowledged zxid, if anything


@dataclass(slots=True)
class Duplicated:
    payload: bytes
    zxids: list[int]  # every place it is in the final log


@dataclass(slots=True)
class Unexpected:
    zxid: int
    payload: bytes
    why: str  # "never attempted", or which op certainly failed


@dataclass(slots=True)
class Misplaced:
    op: Op  # acknowledged at op.zxid
    zxids: list[int]  # where the final log has it instead


@dataclass(slots=True)
class Divergent:
    node: int
    reference: int  # the node with the longest log
    index: int  # the first position where they differ
    mine: Entry
    theirs: Entry  # what the reference has there


@dataclass(slots=True)
class Disordered:
    node: int
    index: int
    previous: int  # the zxid before it
    zxid: int  # not above it


@dataclass(slots=True)
class AppendReport:
    nodes: int = 0
    reference: int | None = None  # the node whose log is the final one (the longest; lowest id on a tie)
    final_length: int = 0  # appends of this workload in the final log
    acknowledged: int = 0
    failed: int = 0
    unknown_applied: int = 0  # appends of unknown outcome found in the final log
    unknown_absent: int = 0
    lost: list[Lost] = field(default_factory=list)
    duplicated: list[Duplicated] = field(default_factory=list)
    unexpected: list[Unexpected] = field(default_factory=list)
    misplaced: list[Misplaced] = field(default_factory=list)
    divergent: list[Divergent] = field(default_factory=list)
    disordered: list[Disordered] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.misplaced or self.divergent
                    or self.disordered)

    def summary(self) -> str:
        if self.ok:
            return (f"ok: {self.acknowledged} acknowledged appends each once at its zxid; of the unknown ones "
                    f"{self.unknown_applied} applied, {self.unknown_absent} not; {self.failed} failed and absent; "
                    f"{self.nodes} nodes on one order (final log: {self.final_length} appends)")
        parts = [f"{len(v)} {name}" for name, v in (
            ("lost", self.lost), ("duplicated", self.duplicated), ("unexpected", self.unexpected),
            ("misplaced", self.misplaced), ("divergent", self.divergent), ("disordered", self.disordered)) if v]
        return f"NOT ok: {', '.join(parts)} (of {self.acknowledged} acknowledged appends, {self.nodes} nodes)"

    def format(self) -> str:
        """The summary, then each finding (at most a few per kind)."""
        lines = [self.summary()]

        def section(title: str, items: Sequence[object], show: Callable[[object], str]) -> None:
            if not items:
                return
            lines.append("")
            lines.append(f"{title} ({len(items)}):")
            lines.extend("  " + show(x) for x in items[:_SHOW])
            if len(items) > _SHOW:
                lines.append(f"  ... {len(items) - _SHOW} more")

        section("lost: acknowledged, not in the final log", self.lost, _show)
        section("duplicated: in the final log more than once", self.duplicated, _show)
        section("unexpected: in the final log, never attempted or certainly failed", self.unexpected, _show)
        section("misplaced: acknowledged at a zxid that does not hold it", self.misplaced, _show)
        section(f"divergent: not a prefix of node {self.reference}'s log", self.divergent, _show)
        section("disordered: zxids not increasing", self.disordered, _show)
        return "\n".join(lines) + "\n"


def _z(zxid: int | None) -> str:
    return "?" if zxid is None else f"{zxid:#x}"


def _show(x: object) -> str:
    if isinstance(x, Lost):
        there = "nothing" if x.at_ack is None else repr(x.at_ack)
        return (f"op {x.op.id} (client {x.op.client}) appended {x.op.value!r}, acknowledged at zxid {_z(x.op.zxid)}; "
                f"the final log has {there} there")
    if isinstance(x, Duplicated):
        return f"{x.payload!r} at zxids {', '.join(_z(z) for z in x.zxids)}"
    if isinstance(x, Unexpected):
        return f"{x.payload!r} at zxid {_z(x.zxid)}: {x.why}"
    if isinstance(x, Misplaced):
        return (f"op {x.op.id} appended {x.op.value!r}, acknowledged at zxid {_z(x.op.zxid)}, but it is at "
                f"{', '.join(_z(z) for z in x.zxids)}")
    if isinstance(x, Divergent):
        return (f"node {x.node} at position {x.index} has zxid {_z(x.mine[0])} {x.mine[1]!r}; "
                f"node {x.reference} has zxid {_z(x.theirs[0])} {x.theirs[1]!r}")
    if isinstance(x, Disordered):
        return f"node {x.node} at position {x.index}: zxid {_z(x.zxid)} after {_z(x.previous)}"
    return repr(x)


def check_appends(history: Iterable[Op], logs: Mapping[int, Sequence[Entry]], *,
                  keep: Callable[[bytes], bool] | None = None) -> AppendReport:
    """``history``: the run's ops (only appends are looked at); ``logs``:
    each node's committed log, (zxid, payload) in log order. ``keep``
    selects the payloads of this workload when the log holds others too
    (they still count for the comparison of logs between nodes)."""
    appends: dict[bytes, Op] = {}
    for op in history:
        if op.kind != APPEND:
            continue
        problem = op.problem()
        if problem:
            raise ValueError(problem)
        assert op.value is not None
        if op.value in appends:
            raise ValueError(f"op {op.id}: appends {op.value!r} like op {appends[op.value].id}; "
                             "expected unique values")
        appends[op.value] = op
    for node, log in logs.items():
        for i, entry in enumerate(log):
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], int)
                    and isinstance(entry[1], bytes)):
                raise ValueError(f"node {node} log position {i}: {entry!r}; expected (zxid, payload bytes)")

    report = AppendReport(nodes=len(logs))
    # one order: every log a prefix of the longest (ties: the lowest node id is the reference)
    if logs:
        reference = min(logs, key=lambda n: (-len(logs[n]), n))
        report.reference = reference
        final = logs[reference]
        for node in sorted(logs):
            log = logs[node]
            for i in range(1, len(log)):
                if log[i][0] <= log[i - 1][0]:
                    report.disordered.append(Disordered(node, i, log[i - 1][0], log[i][0]))
                    break
            if node == reference:
                continue
            for i, entry in enumerate(log):
                if entry != final[i]:
                    report.divergent.append(Divergent(node, reference, i, entry, final[i]))
                    break
    else:
        final = []

    ours = [(z, p) for z, p in final if keep is None or keep(p)]
    report.final_length = len(ours)
    where: dict[bytes, list[int]] = defaultdict(list)
    for z, p in ours:
        where[p].append(z)
    payload_at = dict(final)

    for payload, zxids in where.items():
        if len(zxids) > 1:
            report.duplicated.append(Duplicated(payload, zxids))
    for z, p in ours:
        attempt = appends.get(p)
        if attempt is None:
            report.unexpected.append(Unexpected(z, p, "never attempted"))
        elif attempt.outcome == FAIL:
            code = f" ({attempt.code})" if attempt.code else ""
            report.unexpected.append(Unexpected(z, p, f"op {attempt.id} certainly failed{code}"))

    for value, op in appends.items():
        present = value in where
        if op.outcome == FAIL:
            report.failed += 1
        elif op.outcome == UNKNOWN:
            if present:
                report.unknown_applied += 1
            else:
                report.unknown_absent += 1
        elif op.outcome == OK:
            report.acknowledged += 1
            if not present:
                report.lost.append(Lost(op, None if op.zxid is None else payload_at.get(op.zxid)))
            elif op.zxid is not None and op.zxid not in where[value]:
                report.misplaced.append(Misplaced(op, where[value]))
    return report


def write_append_report(report: AppendReport, path: str | Path) -> None:
    Path(path).write_text(report.format())
