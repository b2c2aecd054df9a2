"""The append workload's checker: unique values proposed to the log.

Every acknowledged append must be in the final log exactly once, at the zxid
the server answered; nothing may appear that was never attempted or that
certainly failed; and every node's log must be a prefix of the longest one
(one order everywhere). Appends of unknown outcome may be there once, or not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from zabd.nemesis.history import APPEND, FAIL, OK, Op


@dataclass(slots=True)
class AppendReport:
    acknowledged: int = 0
    lost: list[bytes] = field(default_factory=list)  # acknowledged, not in the log
    duplicated: list[bytes] = field(default_factory=list)  # in the log more than once
    unexpected: list[bytes] = field(default_factory=list)  # never attempted, or certainly failed
    misplaced: list[bytes] = field(default_factory=list)  # acknowledged at a zxid that holds something else
    divergent: list[str] = field(default_factory=list)  # nodes whose log is not a prefix of the longest

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.misplaced or self.divergent)

    def summary(self) -> str:
        if self.ok:
            return f"ok: {self.acknowledged} acknowledged appends, each once, one order on every node"
        parts = [f"{name} {len(v)} (e.g. {v[:3]!r})" for name, v in (
            ("lost", self.lost), ("duplicated", self.duplicated), ("unexpected", self.unexpected),
            ("misplaced", self.misplaced), ("divergent", self.divergent)) if v]
        return "NOT ok: " + "; ".join(parts)


def check_appends(ops: Iterable[Op], logs: dict[int, list[tuple[int, bytes]]]) -> AppendReport:
    """``logs``: each node's committed log, (zxid, payload) in order; payloads
    that are not appends of this history (other workloads) must not be given."""
    report = AppendReport()
    appends = [op for op in ops if op.kind == APPEND]
    longest = max(logs.values(), key=len, default=[])
    for node, log in sorted(logs.items()):
        if log != longest[: len(log)]:
            report.divergent.append(f"node {node}")
    counts = Counter(p for _, p in longest)
    at = {p: z for z, p in longest}
    attempted = {op.value for op in appends}
    failed = {op.value for op in appends if op.outcome == FAIL}
    for op in appends:
        if op.outcome != OK:
            continue
        report.acknowledged += 1
        assert op.value is not None
        if counts[op.value] == 0:
            report.lost.append(op.value)
        elif op.zxid and at[op.value] != op.zxid:
            report.misplaced.append(op.value)
    report.duplicated = sorted(p for p, n in counts.items() if n > 1)
    report.unexpected = sorted(p for p in counts if p not in attempted or p in failed)
    return report
