"""Is a history of register operations linearizable? (Wing & Gong, Lowe)

Each key is a register with a value and a version (0 while absent, +1 per
write, back to 0 on delete), as ``zabd.kv.store`` keeps it. Keys are
independent (P-compositionality), so each is checked alone.

The search is Lowe's improvement of Wing & Gong's (as in Porcupine): the
operations' call and return events in time order form a linked list; the
search linearizes a call whose effect the model accepts, removes it, and
backtracks when it meets the return of an operation it has not linearized
yet. A cache of (set of linearized operations, model state) prunes paths
already explored. An operation whose outcome is unknown may take effect at
any time after its call, or never: it has no return event, so nothing
forces it in. A failed one (certainly not applied) and a read of unknown
outcome say nothing and are left out.

A failing key is explained by its smallest failing prefix: the operations
completed by some moment, the ones still running then counted as unknown.
Every such prefix of a linearizable history is linearizable, so the first
failing prefix is found by bisection, and its last completed operation is
the one no order can explain.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from zabd.nemesis.history import CAS, DELETE, FAIL, OK, PUT, READ, UNKNOWN, History, Op

State = tuple[bytes | None, int]  # (value, version)
ABSENT: State = (None, 0)
DEFAULT_BUDGET = 2_000_000  # search steps per key before giving up with "too hard"


def step(state: State, op: Op) -> State | None:
    """The register after ``op``, or None if ``op`` cannot happen in ``state``."""
    version = state[1]
    unknown = op.outcome == UNKNOWN
    if op.kind == READ:
        return state if (op.value, op.version) == state else None
    if op.kind == PUT:
        if not unknown and op.version != version + 1:
            return None
        return (op.value, version + 1)
    if op.kind == CAS:
        applies = version == op.expect
        if unknown:
            return (op.value, version + 1) if applies else state
        if op.code:  # the condition failed: it saw another version
            return state if not applies and op.version == version else None
        return (op.value, version + 1) if applies and op.version == version + 1 else None
    if op.kind == DELETE:
        applies = version > 0 and (op.expect == -1 or op.expect == version)
        if unknown:
            return ABSENT if applies else state
        if op.code == "no_node":
            return state if version == 0 else None
        if op.code:
            return state if version > 0 and not applies else None
        return ABSENT if applies else None
    raise ValueError(f"op {op.id}: {op.kind!r} is not a register operation")


@dataclass(slots=True)
class KeyVerdict:
    key: str
    ok: bool | None  # None: the search budget ran out ("too hard")
    ops: int
    steps: int
    window: list[Op] = field(default_factory=list)  # failing: the smallest failing prefix's newest ops
    culprit: Op | None = None  # failing: the completed op no order explains


@dataclass(slots=True)
class Result:
    keys: dict[str, KeyVerdict]

    @property
    def ok(self) -> bool | None:
        """True, False, or None when a key was too hard to decide."""
        if any(v.ok is False for v in self.keys.values()):
            return False
        return None if any(v.ok is None for v in self.keys.values()) else True

    @property
    def failing(self) -> list[KeyVerdict]:
        return [v for v in self.keys.values() if v.ok is False]


class _Entry:
    __slots__ = ("op", "call", "match", "prev", "next")

    def __init__(self, op: Op | None, call: bool) -> None:
        self.op = op
        self.call = call
        self.match: _Entry | None = None  # a call's return entry (None: unknown outcome)
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


def _check_ops(ops: list[Op], budget: int) -> tuple[bool | None, int]:
    """WGL search over one key's ops; (verdict, steps)."""
    events: list[tuple[int, int, _Entry]] = []
    index = {op.id: i for i, op in enumerate(ops)}
    for op in ops:
        call = _Entry(op, True)
        events.append((op.invoke, 0, call))
        if op.outcome != UNKNOWN:
            assert op.complete is not None
            ret = _Entry(op, False)
            call.match = ret
            events.append((op.complete, 1, ret))  # a return after a call at the same instant
    events.sort(key=lambda e: (e[0], e[1]))
    head = _Entry(None, False)
    prev = head
    for _, _, ev in events:
        prev.next = ev
        ev.prev = prev
        prev = ev
    returns_left = sum(1 for op in ops if op.outcome != UNKNOWN)
    state: State = ABSENT
    linearized = 0
    cache: set[tuple[int, State]] = set()
    stack: list[tuple[_Entry, State]] = []
    entry: _Entry | None = head.next
    steps = 0
    while returns_left:
        steps += 1
        if steps > budget:
            return None, steps
        if entry is not None and entry.call:
            assert entry.op is not None
            new = step(state, entry.op)
            if new is not None:
                bit = 1 << index[entry.op.id]
                key = (linearized | bit, new)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state = new
                    linearized |= bit
                    _lift(entry)
                    if entry.match is not None:
                        returns_left -= 1
                    entry = head.next
                    continue
            entry = entry.next
            continue
        # a return of an op not linearized yet (or the end): undo the last choice
        if not stack:
            return False, steps
        undone, state = stack.pop()
        assert undone.op is not None
        linearized &= ~(1 << index[undone.op.id])
        _unlift(undone)
        if undone.match is not None:
            returns_left += 1
        entry = undone.next
    return True, steps


def _lift(call: _Entry) -> None:
    for e in (call, call.match):
        if e is not None:
            assert e.prev is not None
            e.prev.next = e.next
            if e.next is not None:
                e.next.prev = e.prev


def _unlift(call: _Entry) -> None:
    for e in (call.match, call):
        if e is not None:
            assert e.prev is not None
            e.prev.next = e
            if e.next is not None:
                e.next.prev = e


def _prefix(ops: list[Op], until: int) -> list[Op]:
    """The ops called by ``until``; those not completed by then become unknown."""
    out = []
    for op in ops:
        if op.invoke > until:
            continue
        if op.complete is not None and op.complete > until:
            op = Op(op.id, op.client, op.kind, op.key, op.value, op.expect, op.version, op.invoke, None, UNKNOWN,
                    op.code, op.zxid)
            if op.kind == READ:
                continue  # an unknown read says nothing
        out.append(op)
    return out


def _explain(ops: list[Op], budget: int) -> tuple[list[Op], Op | None]:
    ends = sorted({op.complete for op in ops if op.complete is not None})
    lo, hi = 0, len(ends) - 1  # ends[hi] is the whole history: it fails
    while lo < hi:
        mid = (lo + hi) // 2
        verdict, _ = _check_ops(_prefix(ops, ends[mid]), budget)
        if verdict is False:
            hi = mid
        else:
            lo = mid + 1
    until = ends[hi]
    prefix = _prefix(ops, until)
    culprit = next((op for op in ops if op.complete == until), None)
    # the window: the culprit, the ops running with it, and the writes just before it
    assert culprit is not None
    running = [op for op in prefix if op.complete is None or op.complete >= culprit.invoke]
    before = [op for op in prefix if op not in running and op.kind != READ][-3:]
    window = sorted({op.id: op for op in [*before, *running]}.values(), key=lambda o: o.invoke)
    return window, culprit


def check(history: History | list[Op], budget: int = DEFAULT_BUDGET, explain: bool = True) -> Result:
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.outcome == FAIL or (op.kind == READ and op.outcome != OK):
            continue
        if op.kind in (PUT, READ, CAS, DELETE):
            by_key[op.key].append(op)
    verdicts: dict[str, KeyVerdict] = {}
    for key, ops in sorted(by_key.items()):
        ops.sort(key=lambda o: o.invoke)
        ok, steps = _check_ops(ops, budget)
        verdict = KeyVerdict(key, ok, len(ops), steps)
        if ok is False and explain:
            verdict.window, verdict.culprit = _explain(ops, budget)
        verdicts[key] = verdict
    return Result(verdicts)


def _describe(op: Op, t0: int) -> str:
    at = f"{(op.invoke - t0) / 1e6:9.3f} ms"
    took = f"{(op.complete - op.invoke) / 1e6:8.3f} ms" if op.complete is not None else "     ? ms"
    what = {
        PUT: f"put {op.value!r}",
        READ: f"read -> {op.value!r}",
        CAS: f"cas {op.value!r} if version {op.expect}",
        DELETE: f"delete if version {op.expect}",
    }.get(op.kind, op.kind)
    res = f"version {op.version}" if op.version >= 0 else ""
    if op.code:
        res = f"{op.code} ({res})"
    return f"{at} +{took}  client {op.client:3d}  op {op.id:6d}  {what:40s} {op.outcome:8s} {res}"


def write_report(result: Result, path: str | Path) -> None:
    """A readable account of every failing key: its smallest failing window."""
    lines = [f"linearizable: {result.ok}", ""]
    for v in result.keys.values():
        lines.append(f"key {v.key!r}: {'ok' if v.ok else ('NOT linearizable' if v.ok is False else 'too hard')}, "
                     f"{v.ops} ops, {v.steps} search steps")
    for v in result.failing:
        if not v.window or v.culprit is None:
            continue
        t0 = v.window[0].invoke
        lines += ["", f"key {v.key!r}: the smallest failing window (times from its first call):"]
        lines += ["  " + _describe(op, t0) for op in v.window]
        c = v.culprit
        lines += ["", f"  op {c.id} ({c.kind}, {c.outcome}) completed at {((c.complete or 0) - t0) / 1e6:.3f} ms: "
                      "no order of the operations above, each taking effect between its call and its "
                      "return (or never, if its outcome is unknown), explains its result."]
    Path(path).write_text("\n".join(lines) + "\n")
