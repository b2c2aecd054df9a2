"""Is a history of register operations linearizable? (Wing & Gong, Lowe)

The model is ``zabd.kv.store``'s register: per key a value and a version (0
while absent, +1 per put or successful cas, back to 0 on delete); a cas
applies if the version equals the one it names (0: absent), a delete if the
key exists and, unless it names -1, has the version it names. A failed
condition (``bad_version``, ``no_node``) changed nothing but was ordered by
the leader like a write, so it is checked: at some moment during the call
the condition was false. A result the server left out (version -1) is not
checked. Keys are independent (P-compositionality): each is checked alone.

The search is Lowe's improvement of Wing & Gong's, as in Porcupine. The
calls and returns of the operations with a known outcome form a linked list
in time order; the search linearizes a call the model accepts, unlinks it
with its return and starts again at the head; meeting a return means every
known candidate was tried. Operations of unknown outcome have no return:
nothing forces them in, and one may be linearized wherever its call is
before the first pending return; they are tried when the scan meets that
return, and when none helps the search undoes its last choice. A cache of
(linearized operations, register state) cuts every configuration already
explored. What keeps the search small, each safe by a swap argument given
where it is used:

* the linearized known operations are kept as (frontier, bits above it):
  they are linearized nearly in call order, so cache keys stay small;
* a written value no read returns is one token: states that differ only by
  a value nobody saw are one state;
* an operation that changes nothing (a read, a failed condition) and fits
  the state is linearized at once with no alternative tried;
* unknown operations nobody read with the same effect are interchangeable:
  only the earliest-called unused one is tried (k of them cost k+1 states,
  not 2**k subsets); the one that fits fewer moments (a cas naming the
  current version) is used before an unconditional one; one that would
  change nothing is left out;
* at a dead end, unknown operations are only used to climb to a version
  the next known operation needs (``_cap``), not through every unknown
  write of the history;
* a configuration reached with a superset of the unknown operations used
  by one already explored is not explored again.

A search that looks at more candidates than its budget ends with the
verdict ``too_hard``.

A failing key is explained by a small window. The first failing prefix is
found by bisection over return times (the ops completed by then; those
still running count as unknown; every prefix of a linearizable history is
linearizable, so failing prefixes are a suffix of the list). Then the window
is cut from the front: only ops that return after the cut are kept, the
state at the cut is left open (a wildcard that the first op to see it pins
down), and an op called before the cut may also have taken effect before
it, so it is optional there; unknown ops called before the cut stay (they
may take effect after it). A window that fails that way fails in every
history that contains it: it is a self-contained proof.
"""

from __future__ import annotations

import math
from bisect import insort
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from zabd.kv.store import BAD_VERSION, NO_NODE
from zabd.nemesis.history import APPEND, CAS, CONDITION_CODES, DELETE, OK, PUT, READ, UNKNOWN, Op

DEFAULT_BUDGET = 5_000_000  # candidates looked at per check (~0.5-2 M a second); bounds time and memory

LINEARIZABLE = "linearizable"
NOT_LINEARIZABLE = "not_linearizable"
TOO_HARD = "too_hard"

# value tokens: 0 absent, > 0 a value some read returned
ANY = -2  # the open state at a window's cut: any value
NOT_READ = -1  # a value no read returns
State = tuple[int, int]  # (value token, version); version -1: open (windows only)
ABSENT: State = (0, 0)
OPEN: State = (ANY, -1)

_READ, _PUT, _CAS, _DEL, _NEVER = range(5)
_KINDS = {READ: _READ, PUT: _PUT, CAS: _CAS, DELETE: _DEL}
_APPLY, _BAD, _NONODE = range(3)

# how an op takes part in a check
_FULL = 0  # known outcome: linearized between its call and its return
_UNKNOWN = 1  # may take effect any time after its call, or never; its result is not known
_OPTIONAL = 2  # a window's op called before the cut: any time after its call, or before the cut; result known


class _Spec(NamedTuple):
    op: Op
    mode: int
    cond: int


class _COp:
    """An op compiled for the search."""

    __slots__ = ("spec", "kind", "token", "expect", "version", "cond", "invoke", "complete", "idx", "mask", "cls")

    def __init__(self, spec: _Spec, kind: int, token: int, version: int, complete: int | None) -> None:
        op = spec.op
        self.spec = spec
        self.kind = kind
        self.token = token
        self.expect = op.expect
        self.version = version  # -1: not known
        self.cond = spec.cond
        self.invoke = op.invoke
        self.complete = complete  # None: no return (unknown or optional)
        self.idx = 0  # known ops: position in call order
        self.mask = 0  # ops without a return: their bit
        # unknown ops nobody read with the same effect are interchangeable: one class; the rest are alone
        self.cls: object = (kind, token, op.expect) if spec.mode == _UNKNOWN and token <= 0 else op.id


# ---------------------------------------------------------------- the model


def _with_version(state: State, n: int) -> State | None:
    """``state`` if it can have version ``n``, pinned down to it."""
    tok, ver = state
    if ver >= 0:
        return state if ver == n else None
    if n == 0:
        return ABSENT if tok == ANY else None  # an open version with a known value is a present key
    return (tok, n)


def _with_token(state: State, t: int) -> State | None:
    tok, ver = state
    if tok != ANY:
        return state if tok == t else None
    if t == 0:
        return ABSENT if ver <= 0 else None
    return (t, ver) if ver != 0 else None


def _covers(state: State, new: State) -> bool:
    """Whether every register ``new`` stands for is one ``state`` stands for."""
    if new == state:
        return True
    tok, ver = state
    if tok == ANY:
        return ver < 0 or (new[1] == ver)
    return ver < 0 and new[0] == tok and new[1] != 0


def _step(state: State, c: _COp) -> State | None:
    """The register after ``c`` takes effect in ``state``, or None if it
    cannot (its result does not fit). Unknown writes that would not apply
    return None too: linearizing them changes nothing, which is the same as
    leaving them out, and leaving them out keeps the cache smaller."""
    tok, ver = state
    kind = c.kind
    if kind == _READ:
        if tok == c.token and ver >= 0 and (ver == c.version or c.version < 0):
            return state
        if tok != ANY and ver >= 0:
            return None
        s = _with_token(state, c.token)
        if s is not None and c.version >= 0:
            s = _with_version(s, c.version)
        return s
    if kind == _PUT:
        n = c.version
        if n >= 0:
            if ver != n - 1 and (ver >= 0 or _with_version(state, n - 1) is None):
                return None
            return (c.token, n)
        return (c.token, ver + 1 if ver >= 0 else -1)
    if kind == _CAS:
        e = c.expect
        if c.cond == _APPLY:
            if ver != e and (ver >= 0 or _with_version(state, e) is None):
                return None
            return (c.token, e + 1)
        if c.version >= 0:  # bad_version, and the leader said which version it saw
            return _with_version(state, c.version)
        if ver >= 0:
            return state if ver != e else None
        return state
    if kind == _DEL:
        e = c.expect
        if c.cond == _APPLY:
            if e == -1:
                if ver == 0 or tok == 0:
                    return None
            elif ver != e and (ver >= 0 or _with_version(state, e) is None):
                return None
            return ABSENT
        if c.cond == _NONODE:
            return _with_version(state, 0)
        if c.version >= 0:
            return _with_version(state, c.version)
        if ver >= 0:
            return state if ver > 0 and ver != e else None
        return state if tok != 0 else None
    return None  # _NEVER: a result the store cannot give


# ------------------------------------------------------------ preparation


def _specs(ops: Iterable[Op]) -> list[_Spec]:
    """The ops that say something, in call order. Reads that did not return
    ok say nothing, nor do writes refused before they were proposed."""
    out = []
    for op in ops:
        problem = op.problem()
        if problem:
            raise ValueError(problem)
        if op.kind not in _KINDS:
            raise ValueError(f"op {op.id}: {op.kind!r} is not a register operation")
        if op.kind == READ:
            if op.outcome == OK:
                out.append(_Spec(op, _FULL, _APPLY))
            continue
        if op.outcome == UNKNOWN:
            out.append(_Spec(op, _UNKNOWN, _APPLY))
            continue
        if op.code in CONDITION_CODES:
            allowed = {CAS: (BAD_VERSION,), DELETE: (BAD_VERSION, NO_NODE)}.get(op.kind, ())
            if op.code not in allowed:
                raise ValueError(f"op {op.id}: a {op.kind} cannot fail with {op.code}")
            if op.kind == DELETE and op.code == BAD_VERSION and op.expect == -1:
                raise ValueError(f"op {op.id}: a delete of any version cannot fail with bad_version")
            out.append(_Spec(op, _FULL, _BAD if op.code == BAD_VERSION else _NONODE))
        elif op.outcome == OK:
            out.append(_Spec(op, _FULL, _APPLY))
    out.sort(key=lambda s: (s.op.invoke, s.op.id))
    return out


class _Tokens:
    """Value <-> token: a token for each value a read returned (and each
    value of ``named``, for reports), NOT_READ for the rest."""

    def __init__(self, specs: Sequence[_Spec], named: Sequence[_Spec] = ()) -> None:
        self.of: dict[bytes | None, int] = {None: 0}
        for s in specs:
            if s.op.kind == READ:
                self.of.setdefault(s.op.value, len(self.of))
        for s in named:
            self.of.setdefault(s.op.value, len(self.of))
        self.value = {t: v for v, t in self.of.items()}

    def __call__(self, value: bytes | None) -> int:
        return self.of.get(value, NOT_READ)


def _compile(specs: Iterable[_Spec], tokens: _Tokens) -> list[_COp]:
    out = []
    for s in specs:
        op, mode = s.op, s.mode
        kind = _KINDS[op.kind]
        version = op.version if mode != _UNKNOWN else -1
        if mode != _FULL and (kind == _READ or s.cond != _APPLY):
            continue  # optional and without an effect: it can always be left out
        # results the store never gives: no state explains them
        if (kind == _PUT and version == 0) or (kind == _CAS and s.cond == _APPLY and version >= 0
                                                and version != op.expect + 1) \
                or (kind == _CAS and s.cond == _BAD and version == op.expect) \
                or (kind == _DEL and s.cond == _APPLY and op.expect == 0) \
                or (kind == _DEL and s.cond != _BAD and version > 0) \
                or (kind == _DEL and s.cond == _BAD and version >= 0 and version in (0, op.expect)) \
                or (kind == _READ and version >= 0 and (version == 0) != (op.value is None)):
            if mode != _FULL:
                continue  # an optional op that can never apply: leave it out
            kind = _NEVER
        out.append(_COp(s, kind, tokens(op.value), version, op.complete if mode == _FULL else None))
    return out


# ------------------------------------------------------------- the search


class _Node:
    __slots__ = ("cop", "call", "time", "match", "prev", "next")

    def __init__(self, cop: _COp | None, call: bool, time: int) -> None:
        self.cop = cop
        self.call = call
        self.time = time
        self.match: _Node | None = None
        self.prev: _Node | None = None
        self.next: _Node | None = None


def _link(nodes: Iterable[_Node]) -> _Node:
    head = _Node(None, False, -1)
    prev = head
    for e in nodes:
        prev.next = e
        e.prev = prev
        prev = e
    return head


def _lift(call: _Node) -> None:
    """Unlink a call and its return, if it has one (dancing links)."""
    for e in (call, call.match):
        if e is not None:
            assert e.prev is not None
            e.prev.next = e.next
            if e.next is not None:
                e.next.prev = e.prev


def _unlift(call: _Node) -> None:
    for e in (call.match, call):
        if e is not None:
            assert e.prev is not None
            e.prev.next = e
            if e.next is not None:
                e.next.prev = e


_KNOWN, _FORCED, _SINGLE = -1, -2, -3  # a frame's choice (else: a position in the candidate classes)


def _search(cops: list[_COp], init: State, budget: int) -> tuple[bool | None, int]:
    """Lowe's WGL search; (True/False, or None when the budget ran out; steps).

    Known ops are in a linked list of calls and returns. Ops without a return
    are tried when the scan meets a return (every known candidate was tried):
    first the classes of interchangeable unknown ops (their first unused
    member), then the ops alone in their class, kept in a linked list by
    call time so that used ones drop out and the scan stops at the bound."""
    known = [c for c in cops if c.complete is not None]
    events: list[tuple[int, int, int, _Node]] = []
    for i, c in enumerate(known):
        assert c.complete is not None
        c.idx = i
        call = _Node(c, True, c.invoke)
        ret = _Node(c, False, c.complete)
        call.match = ret
        events.append((c.invoke, 0, i, call))
        events.append((c.complete, 1, i, ret))  # a call at the instant of a return is concurrent with it
    events.sort(key=lambda e: e[:3])
    head = _link(e for *_, e in events)

    groups: dict[object, list[_COp]] = {}
    singles: list[_COp] = []
    for c in cops:
        if c.complete is None:
            if c.cls == c.spec.op.id:
                singles.append(c)
            else:
                groups.setdefault(c.cls, []).append(c)
    shead = _link(_Node(c, True, c.invoke) for c in singles)
    # each class in call order (as cops are); those that apply at one version only first
    classes = sorted(groups.values(), key=lambda cl: (cl[0].expect < 0, cl[0].invoke))
    for j, c in enumerate([c for cl in classes for c in cl] + singles):
        c.mask = 1 << j
    nclasses = len(classes)
    used = [0] * nclasses
    # the version a class needs to apply at all (an unknown cas or delete naming one), else -1
    needs = [cl[0].expect if cl[0].kind in (_CAS, _DEL) else -1 for cl in classes]
    anywhere = [i for i in range(nclasses) if needs[i] < 0]
    cands_of: dict[int, list[int]] = {-1: list(range(nclasses))}  # version -> the classes that may apply
    for i in range(nclasses):
        if needs[i] >= 0:
            cands_of.setdefault(needs[i], list(anywhere)).append(i)
    # An unknown put nobody read and an unknown cas nobody read that expects the current version have
    # the same effect; the cas fits fewer moments, so it is used and the put kept (likewise a delete of
    # any version and one of the current version). Swapping the two in any order shows nothing is lost.
    blank_put = next((i for i, cl in enumerate(classes) if cl[0].kind == _PUT), -1)
    blank_cas = {cl[0].expect: i for i, cl in enumerate(classes) if cl[0].kind == _CAS}
    any_deletes = [i for i, cl in enumerate(classes) if cl[0].kind == _DEL and cl[0].expect < 0]
    named_deletes = [(i, cl[0].expect) for i, cl in enumerate(classes) if cl[0].kind == _DEL and cl[0].expect >= 0]
    blank_del = any_deletes[0] if any_deletes else -1
    named_del = dict((e, i) for i, e in named_deletes)
    # a window's optional deletes that name a version (their use is not tracked: counted as available)
    single_named = max((c.expect for c in singles if c.kind == _DEL), default=-1)

    state = init
    lo = rel = ub = 0  # linearized known ops: all below lo, and rel's bits above it; ub: the others
    left = len(known)
    # (known ops linearized, state) -> the sets of optional ops linearized with them so far
    cache: dict[tuple[int, int, State], int | _Seen] = {}
    stack: list[tuple[_Node | None, int, State, int, int, int, int, int]] = []
    node = head.next  # the known scan
    phase = 0  # 0: known calls, 1: classes of optional ops, 2: single optional ops
    ci = 0  # phase 1: the position in the candidate classes
    sn = shead.next  # phase 2
    bound = 0  # the first pending return: optional ops called after it cannot go next
    cap = _NO_CAP  # the highest version a chain of optional ops may usefully reach (see _cap)
    steps = 0
    while left:
        if steps > budget:
            return None, steps
        steps += 1  # a step is a candidate looked at: the budget bounds the time
        if phase == 0:
            assert node is not None  # the return of an op not linearized yet lies ahead
            if node.call:
                kc = node.cop
                assert kc is not None
                new = _step(state, kc)
                if new is not None:
                    r = rel | (1 << (kc.idx - lo))
                    nlo = lo
                    if r & 1:
                        shift = (~r & (r + 1)).bit_length() - 1
                        r >>= shift
                        nlo += shift
                    # An op that changes nothing (a read, a failed condition) and fits the state can go
                    # first: moving it earlier breaks no real-time order and changes what no other op
                    # sees. So it is forced: if the search fails after it, it fails here too.
                    forced = new == state
                    if _fresh(cache, (nlo, r, new), ub):
                        stack.append((node, _FORCED if forced else _KNOWN, state, lo, rel, ub, bound, cap))
                        _lift(node)
                        state, lo, rel = new, nlo, r
                        left -= 1
                        node = head.next
                        continue
                    if not forced:
                        node = node.next
                        continue
                else:
                    node = node.next
                    continue
            else:
                bound = node.time
                phase, ci, sn = 1, 0, shead.next
                # a chain of optional ops keeps the cap of the dead end it started from
                if not stack or stack[-1][1] in (_KNOWN, _FORCED):
                    cap = _cap(head, state, classes, used, any_deletes, named_deletes, single_named, bound)
                continue
        elif phase == 1:
            cands = cands_of.get(state[1], anywhere)
            if ci < len(cands):
                k = cands[ci]
                u = used[k]
                cl = classes[k]
                if u < len(cl) and cl[u].invoke <= bound:
                    c = cl[u]
                    if k in (blank_put, blank_del) and state[1] >= 0:
                        j = (blank_cas if k == blank_put else named_del).get(state[1], -1)
                        if j >= 0 and used[j] < len(classes[j]) and classes[j][used[j]].invoke <= bound:
                            ci += 1
                            continue
                    new = _step(state, c)
                    # linearizing an op of unknown outcome that changes nothing is leaving it out (and
                    # from an open state, one whose result the open state already stands for)
                    if new is not None and not _covers(state, new) and new[1] <= cap \
                            and _fresh(cache, (lo, rel, new), ub | c.mask):
                        stack.append((None, ci, state, lo, rel, ub, bound, cap))
                        used[k] = u + 1
                        state = new
                        ub |= c.mask
                        node, phase = head.next, 0
                        continue
                ci += 1
                continue
            phase = 2
            continue
        else:
            if sn is not None and sn.time <= bound:
                sc = sn.cop
                assert sc is not None
                new = _step(state, sc)
                if new is not None and not _covers(state, new) and new[1] <= cap \
                        and _fresh(cache, (lo, rel, new), ub | sc.mask):
                    stack.append((sn, _SINGLE, state, lo, rel, ub, bound, cap))
                    _lift(sn)
                    state = new
                    ub |= sc.mask
                    node, phase = head.next, 0
                    continue
                sn = sn.next
                continue
        # every candidate of this configuration was tried: undo the last choice
        while True:
            if not stack:
                return False, steps
            undo, code, state, lo, rel, ub, bound, cap = stack.pop()
            if code == _SINGLE:
                assert undo is not None
                _unlift(undo)
                phase, sn = 2, undo.next
                break
            if undo is None:
                used[cands_of.get(state[1], anywhere)[code]] -= 1
                phase, ci, sn = 1, code + 1, shead.next
                break
            _unlift(undo)
            left += 1
            if code != _FORCED:
                phase, node = 0, undo.next
                break
    return True, steps


_NO_CAP = 1 << 62
_LIST_BUDGET = 2_000  # configurations explored to list the states a failing op could see


_DOMINATORS = 16  # per (known ops, state): the smallest sets of optional ops kept to prune supersets


class _Seen:
    """The sets of optional ops a configuration was reached with: all of
    them, to skip a repeat, and the few smallest, to skip a superset."""

    __slots__ = ("all", "small")

    def __init__(self, first: int) -> None:
        self.all = {first}
        self.small = [(first.bit_count(), first)]  # by size


def _fresh(cache: dict[tuple[int, int, State], int | _Seen], key: tuple[int, int, State], ub: int) -> bool:
    """Record a configuration; False if it or a better one was explored.
    With the same known ops linearized and the same state, fewer optional
    ops used is better: whatever order completes the history from the other
    one completes it from there (the extra ones just never happen). Only a
    few of the smallest sets are compared, so a lookup stays cheap; missing
    a superset costs time, never a wrong verdict."""
    seen = cache.get(key)
    if seen is None:
        cache[key] = ub  # the common case: one set only, kept as a plain int
        return True
    if isinstance(seen, int):
        if seen & ~ub == 0:
            return False
        seen = cache[key] = _Seen(seen)
    if ub in seen.all:
        return False
    small = seen.small
    for _, m in small:
        if m & ~ub == 0:
            return False
    seen.all.add(ub)
    n = ub.bit_count()
    if len(small) < _DOMINATORS:
        insort(small, (n, ub))
    elif n < small[-1][0]:
        small.pop()
        insort(small, (n, ub))
    return True


def _cap(head: _Node, state: State, classes: list[list[_COp]], used: list[int], any_deletes: list[int],
         named_deletes: list[tuple[int, int]], single_named: int, bound: int) -> int:
    """At a dead end (no known op can go next), the highest version worth
    reaching with ops of unknown outcome before the next known op.

    The next known op is one of the calls before the first pending return,
    and most of them need one version (a read's, a put's new one minus 1, a
    cas's expected one...). Without a delete, versions only grow, so a chain
    above the highest of those is useless. Only a delete brings a version
    down, and after the chain's last delete it climbs from 0 again; what
    came before that delete can be replaced by a delete at once (if one of
    any version is available and the key is present) or dropped (if it is
    absent). Otherwise a delete that names a version may need a climb to it.
    Ops that take any version (a read or write whose version is not known)
    lift the cap, as does an open state (windows).
    Without this, every dead end climbs through every unknown write nobody
    read, and those accumulate over a whole history."""
    if state[1] < 0:
        return _NO_CAP
    top = -1
    node = head.next
    while node is not None and node.call:
        c = node.cop
        assert c is not None
        kind = c.kind
        if kind == _NEVER:
            need = -1
        elif kind in (_READ, _PUT) or c.cond == _BAD:
            need = c.version if kind != _PUT else (c.version - 1 if c.version >= 0 else -1)
        elif kind == _CAS:
            need = c.expect
        elif c.cond == _NONODE:
            need = 0
        else:  # a delete that applies
            need = c.expect if c.expect >= 0 else max(state[1], 1)
        if need < 0 and kind != _NEVER:
            return _NO_CAP
        top = max(top, need)
        node = node.next
    def available(i: int) -> bool:
        return used[i] < len(classes[i]) and classes[i][used[i]].invoke <= bound

    if state[1] > 0 and not any(available(i) for i in any_deletes):
        for i, expect in named_deletes:
            if expect > top and available(i):
                top = expect
        top = max(top, single_named)
    return top


# ---------------------------------------------------------------- results


class WindowOp(NamedTuple):
    op: Op
    note: str  # how the window counts it ("" for an op checked with its result)


@dataclass(slots=True)
class Window:
    """The smallest failing window found for a key: its ops fail on their own."""

    key: str
    start: int  # ns: times in the report are relative to this
    from_initial: bool  # True: from the history's start (the key absent); False: the state at the start is open
    ops: list[WindowOp]  # by call time
    culprit: Op  # the op whose return made the history fail
    why: str  # a sentence of what could not be explained


@dataclass(slots=True)
class KeyVerdict:
    key: str
    verdict: str  # LINEARIZABLE, NOT_LINEARIZABLE or TOO_HARD
    ops: int  # ops checked (reads that did not return and refused writes say nothing)
    steps: int  # search steps of the check
    window: Window | None = None  # for a failing key, if explained

    @property
    def ok(self) -> bool | None:
        return {LINEARIZABLE: True, NOT_LINEARIZABLE: False}.get(self.verdict)


@dataclass(slots=True)
class CheckResult:
    keys: dict[str, KeyVerdict] = field(default_factory=dict)
    budget: int = DEFAULT_BUDGET

    @property
    def ok(self) -> bool | None:
        """True, False, or None when no key fails but one was too hard."""
        if self.failing:
            return False
        return None if self.too_hard else True

    @property
    def failing(self) -> list[KeyVerdict]:
        return [v for v in self.keys.values() if v.verdict == NOT_LINEARIZABLE]

    @property
    def too_hard(self) -> list[KeyVerdict]:
        return [v for v in self.keys.values() if v.verdict == TOO_HARD]

    def summary(self) -> str:
        n = len(self.keys)
        if self.ok:
            return f"linearizable: {n} keys, {sum(v.ops for v in self.keys.values())} ops"
        parts = []
        if self.failing:
            parts.append(f"{len(self.failing)} of {n} keys NOT linearizable: "
                         + ", ".join(repr(v.key) for v in self.failing))
        if self.too_hard:
            parts.append(f"{len(self.too_hard)} too hard to decide within {self.budget} steps: "
                         + ", ".join(repr(v.key) for v in self.too_hard))
        return "; ".join(parts)


# ------------------------------------------------------------------ check


def check(history: Iterable[Op], *, budget: int = DEFAULT_BUDGET, explain: bool = True) -> CheckResult:
    """Check every key's register history; appends (another workload) are
    skipped. ``budget``: search steps per check before a key is too hard."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.kind != APPEND:
            by_key[op.key].append(op)
    result = CheckResult(budget=budget)
    for key in sorted(by_key):
        result.keys[key] = check_key(key, by_key[key], budget=budget, explain=explain)
    return result


def check_key(key: str, ops: Iterable[Op], *, budget: int = DEFAULT_BUDGET, explain: bool = True) -> KeyVerdict:
    """One key's verdict; ``ops`` must all be register ops of ``key``."""
    specs = _specs(ops)
    for s in specs:
        if s.op.key != key:
            raise ValueError(f"op {s.op.id}: key {s.op.key!r} in the history of key {key!r}")
    tokens = _Tokens(specs)
    ok, steps = _search(_compile(specs, tokens), ABSENT, budget)
    verdict = KeyVerdict(key, {True: LINEARIZABLE, False: NOT_LINEARIZABLE, None: TOO_HARD}[ok], len(specs), steps)
    if ok is False and explain:
        verdict.window = _explain(key, specs, tokens, budget)
    return verdict


# ------------------------------------------------------------ explanation


def _prefix(specs: Sequence[_Spec], until: int) -> list[_Spec]:
    """The ops called by ``until``; those that had not returned by then are unknown."""
    out = []
    for s in specs:
        if s.op.invoke > until:
            continue
        if s.mode == _FULL and s.op.complete is not None and s.op.complete > until:
            if s.op.kind == READ or s.cond != _APPLY:
                continue  # no effect: as an unknown op it says nothing
            s = _Spec(s.op, _UNKNOWN, _APPLY)
        out.append(s)
    return out


def _window(prefix: Sequence[_Spec], cut: int) -> list[_Spec]:
    """The ops that may take effect after ``cut``: returned after it, or unknown.
    A known op called before the cut may have taken effect before it, too."""
    out = []
    for s in prefix:
        if s.mode == _FULL:
            assert s.op.complete is not None
            if s.op.complete < cut:
                continue
            if s.op.invoke < cut:
                s = _Spec(s.op, _OPTIONAL, s.cond)
        out.append(s)
    return out



def _first_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The smallest i in [lo, hi] with pred(i), for a pred that is false
    then true over the range and true at hi (a bisection)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo

def _explain(key: str, specs: list[_Spec], tokens: _Tokens, budget: int) -> Window | None:
    def fails(sub: Sequence[_Spec], init: State) -> bool:
        # a probe out of budget proves nothing: the window just stays larger
        return _search(_compile(sub, tokens), init, budget if init == ABSENT else budget // 10)[0] is False

    ends = sorted({s.op.complete for s in specs if s.mode == _FULL and s.op.complete is not None})
    if not ends:
        return None
    # the whole history fails, so ends[-1]'s prefix does
    until = ends[_first_true(0, len(ends) - 1, lambda i: fails(_prefix(specs, ends[i]), ABSENT))]
    prefix = _prefix(specs, until)
    ending = [s for s in prefix if s.mode == _FULL and s.op.complete == until]
    culprit = max(ending, key=lambda s: (s.op.invoke, s.op.kind == READ))

    # cut from the front: the latest cut whose window still fails
    cuts = sorted({s.op.invoke for s in prefix if s.op.invoke <= culprit.op.invoke}, reverse=True)
    probes: list[int] = []
    k, stride = 0, 1
    while k < len(cuts) - 1:
        probes.append(k)
        k += stride
        stride *= 2
    probes.append(len(cuts) - 1)
    found, passed = -1, -1
    for k in probes:
        if fails(_window(prefix, cuts[k]), OPEN):
            found = k
            break
        passed = k
    if found >= 0:
        b = _first_true(passed + 1, found, lambda i: fails(_window(prefix, cuts[i]), OPEN))
        cut, window, init = cuts[b], _window(prefix, cuts[b]), OPEN
    else:
        cut, window, init = prefix[0].op.invoke, prefix, ABSENT
    return _describe_window(key, window, culprit, cut, init, budget, specs)


def _notes(s: _Spec, until: int) -> str:
    if s.op.outcome == UNKNOWN:
        return "unknown: any time after its call, or never"
    if s.mode == _UNKNOWN:
        return f"still running at {_ms(until)} ms: counted as unknown"
    if s.mode == _OPTIONAL:
        return "called before the window: may have taken effect before it"
    return ""


def _describe_window(key: str, window: list[_Spec], culprit: _Spec, cut: int, init: State, budget: int,
                     specs: list[_Spec]) -> Window:
    checked = [s for s in window if not (s.mode != _FULL and (s.op.kind == READ or s.cond != _APPLY))]
    tokens = _Tokens(specs, named=[s for s in checked if s.mode != _UNKNOWN])
    cops = _compile(checked, tokens)
    target = next(c for c in cops if c.spec.op is culprit.op)
    states = _states_before(cops, target, init, _LIST_BUDGET)
    until = culprit.op.complete
    assert until is not None
    wops = [WindowOp(s.op, _notes(s, until)) for s in checked]
    optional = sum(1 for c in cops if c.complete is None)
    why = _why(culprit.op, target, states, tokens, cut, init, optional) + _writers(culprit.op, specs, cut)
    return Window(key, cut, init == ABSENT, wops, culprit.op, why)


def _states_before(cops: list[_COp], target: _COp, init: State, budget: int) -> set[State] | None:
    """Every state in which ``target`` could take effect: reached by some
    order of the other ops that real time allows before it (None: too many
    to enumerate). Optional ops are used as the search uses them: the first
    unused one of a class, and not when the state already covers the result."""
    limit = target.complete if target.complete is not None else math.inf
    others = [c for c in cops if c is not target and c.invoke <= limit]
    known = [c for c in others if c.complete is not None]
    groups: dict[object, list[_COp]] = {}
    for c in others:
        if c.complete is None:
            groups.setdefault(c.cls, []).append(c)
    classes = list(groups.values())
    explored: dict[tuple[int, State], list[tuple[int, ...]]] = {}
    size = 0
    todo: list[tuple[int, tuple[int, ...], State]] = [(0, (0,) * len(classes), init)]
    out: set[State] = set()
    while todo:
        bits, used, state = todo.pop()
        horizon = min((c.complete for i, c in enumerate(known) if not bits >> i & 1 and c.complete is not None),
                      default=math.inf)
        if target.invoke <= horizon:
            out.add(state)
        nexts: list[tuple[int, tuple[int, ...], State]] = []
        for i, c in enumerate(known):
            if not bits >> i & 1 and c.invoke <= horizon:
                new = _step(state, c)
                if new is not None:
                    nexts.append((bits | 1 << i, used, new))
        for j, cl in enumerate(classes):
            if used[j] < len(cl) and cl[used[j]].invoke <= horizon:
                new = _step(state, cl[used[j]])
                if new is not None and not _covers(state, new):
                    nexts.append((bits, (*used[:j], used[j] + 1, *used[j + 1:]), new))
        for nbits, nused, new in nexts:
            seen = explored.setdefault((nbits, new), [])
            if any(all(a <= b for a, b in zip(u, nused, strict=True)) for u in seen):
                continue  # reached with fewer optional ops already
            size += 1
            if size > budget:
                return None
            seen.append(nused)
            todo.append((nbits, nused, new))
    return out


# ----------------------------------------------------------------- report


def _ms(ns: int | float) -> str:
    return f"{ns / 1e6:.3f}"


def _value(v: bytes | None) -> str:
    if v is None:
        return "absent"
    text = repr(v)
    return text if len(text) <= 42 else text[:39] + "..."


def _state(state: State, tokens: _Tokens) -> str:
    tok, ver = state
    if state == OPEN:
        return "whatever it held at the window's start"
    if tok == 0:
        return "absent"
    value = {ANY: "some value", NOT_READ: "a value no read returned"}.get(tok) or _value(tokens.value[tok])
    return f"{value} at {'some version' if ver < 0 else f'version {ver}'}"


def _what(op: Op) -> str:
    if op.kind == READ:
        return "read"
    if op.kind == PUT:
        return f"put {_value(op.value)}"
    if op.kind == CAS:
        return f"cas {_value(op.value)} if version {op.expect}"
    return "delete" + (f" if version {op.expect}" if op.expect >= 0 else "")


def _result(op: Op) -> str:
    if op.outcome == UNKNOWN:
        return "?"
    if op.code:
        seen = f" (saw version {op.version})" if op.version >= 0 else ""
        return f"{op.code}{seen}"
    if op.outcome != OK:
        return op.outcome
    if op.kind == READ:
        return f"{_value(op.value)}" + (f" at version {op.version}" if op.value is not None else "")
    if op.kind == DELETE:
        return "deleted"
    return f"version {op.version}" if op.version >= 0 else "ok (version not given)"


def _why(op: Op, target: _COp, states: set[State] | None, tokens: _Tokens, cut: int, init: State,
         optional: int) -> str:
    assert op.complete is not None
    subject = {READ: "read of", PUT: f"put of {_value(op.value)} to", CAS: f"cas of {_value(op.value)} to",
               DELETE: "delete of"}[op.kind]
    result = _result(op)
    head = (f"The {subject} {op.key!r} by client {op.client} (op {op.id}), called at {_ms(op.invoke - cut)} ms "
            f"and returned at {_ms(op.complete - cut)} ms, gave {result}")
    if op.kind == CAS and not op.code:
        head += f" (it required version {op.expect})"
    if states is None:
        body = (f"; the states the key could be in before it are too many to list ({optional} operations of the "
                "window may each take effect at many moments, or not at all)")
    elif not states:
        body = "; no order of the window's other operations reaches a moment when it could take effect"
    else:
        shown = sorted(states, key=lambda s: (s[1], s[0]))
        listed = ", ".join(_state(s, tokens) for s in shown[:8]) + (" ..." if len(shown) > 8 else "")
        fits = [s for s in shown if _step(s, target) is not None]
        body = f"; when it could have taken effect the key could only be: {listed}"
        if not fits:
            body += ", and none of these gives that result"
        else:
            body += (f"; from {_state(fits[0], tokens)} it fits, but then the window's other operations "
                     "cannot all take effect with their results")
    start = "the key absent at the history's start" if init == ABSENT else \
        "whatever state the key had at the window's start"
    return (f"{head}{body}. No order of the window's operations explains it (from {start}; each operation "
            "taking effect once between its call and its return, an unknown one at any time after its call "
            "or never).")


def _writers(op: Op, specs: list[_Spec], cut: int) -> str:
    """For a read of a value: who wrote it, if that alone rules the read out."""
    if op.kind != READ or op.value is None or op.complete is None:
        return ""
    writers = [s.op for s in specs if s.op.kind in (PUT, CAS) and s.op.value == op.value and s.cond == _APPLY]
    if not writers:
        return f" (No write of this key that could have taken effect writes {_value(op.value)}.)"
    if all(w.invoke > op.complete for w in writers):
        w = writers[0]
        return (f" ({_value(op.value)} is written only by op {w.id}, called at {_ms(w.invoke - cut)} ms, "
                "after this read returned.)")
    return ""


_MAX_ROWS = 200
_MAX_EARLY = 12


def format_report(result: CheckResult) -> str:
    """A readable account: a line per key, then each failing key's window."""
    verdict = {True: "linearizable", False: "NOT linearizable", None: "undecided (too hard)"}[result.ok]
    lines = [f"linearizability check: {verdict}: {result.summary()}", ""]
    width = max((len(repr(k)) for k in result.keys), default=3)
    for v in result.keys.values():
        lines.append(f"  key {v.key!r:<{width}}  {v.verdict:<17} {v.ops:7d} ops {v.steps:10d} search steps")
    for v in result.failing:
        w = v.window
        lines.append("")
        if w is None:
            lines.append(f"key {v.key!r}: not explained (run the check with explain=True)")
            continue
        start = "from the start of the history, the key absent" if w.from_initial else \
            "whatever the key held at its start"
        early = [o for o in w.ops if o.op.outcome == UNKNOWN and o.op.invoke < w.start]
        shown = [o for o in w.ops if not (o.op.outcome == UNKNOWN and o.op.invoke < w.start)]
        more = f" (and {len(early)} of unknown outcome called before it)" if early else ""
        lines.append(f"key {v.key!r}: the smallest failing window found: {len(shown)} "
                     f"op{'s' if len(shown) != 1 else ''}{more}, {start}; "
                     "times in ms from the window's start")
        lines.append(f"  {'call':>10} {'return':>10}  {'client':>6} {'op':>7}  {'operation':<40} "
                     f"{'outcome':<8} result")
        rows = shown if len(shown) <= _MAX_ROWS else shown[-_MAX_ROWS:]
        if len(rows) < len(shown):
            lines.append(f"  ... {len(shown) - len(rows)} earlier ops not shown")
        for wop in rows:
            op = wop.op
            ret = _ms(op.complete - w.start) if op.complete is not None else "?"
            mark = "  <-" if op is w.culprit else ""
            note = f"  [{wop.note}]" if wop.note else ""
            lines.append(f"  {_ms(op.invoke - w.start):>10} {ret:>10}  {op.client:>6} {op.id:>7}  {_what(op):<40} "
                         f"{op.outcome:<8} {_result(op)}{note}{mark}")
        if early:
            listed = ", ".join(f"op {o.op.id} {_what(o.op)} at {_ms(o.op.invoke - w.start)}"
                               for o in early[-_MAX_EARLY:])
            lines.append(f"  of unknown outcome, called before the window (any may take effect in it, or none): "
                         f"{'... ' if len(early) > _MAX_EARLY else ''}{listed}")
        lines.append("")
        lines.append("  " + w.why)
    for v in result.too_hard:
        lines.append("")
        lines.append(f"key {v.key!r}: too hard: the search ran out of its budget of {result.budget} steps "
                     "(a larger budget, or fewer unknown outcomes on one key, may decide it)")
    return "\n".join(lines) + "\n"


def write_report(result: CheckResult, path: str | Path) -> None:
    Path(path).write_text(format_report(result))
