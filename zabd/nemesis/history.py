"""Histories of client operations, as a nemesis run records them.

Each operation has a call time and, unless its outcome is unknown, a return
time: monotonic nanoseconds from one clock, given by the recorder. Outcomes:

* ``ok``: it took effect once, and its result is known;
* ``fail``: it certainly did not change anything: refused before it was
  proposed (``no_leader``, ``overloaded``...), or a condition the leader
  ordered and found false (``bad_version``, ``no_node``: the ``code`` says
  which, and the checker still uses what such a failure saw; recorded as
  ``ok`` or ``fail`` with that code, both are read alike);
* ``unknown``: a timeout, a lost connection or leader: it may have taken
  effect, at any time after its call, or never. Its return time is left
  None (Jepsen's "infinity").

A result the server did not give stays at its default (``version`` -1,
``zxid`` None): a committed write answered after a snapshot install carries
no version, and a ``bad_version`` may not say which version it saw.
"""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zabd.kv.store import BAD_VERSION, NO_NODE

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"
OUTCOMES = (OK, FAIL, UNKNOWN)

PUT = "put"
READ = "read"  # sync then get, recorded as one op: a linearizable read
CAS = "cas"
DELETE = "delete"
APPEND = "append"  # a raw proposal of a unique payload (the append workload)
KINDS = (PUT, READ, CAS, DELETE, APPEND)

# Failures the leader decided in log order: the op saw the key, so it was
# linearized like any write, only without an effect.
CONDITION_CODES = frozenset({BAD_VERSION, NO_NODE})


class _Unset(enum.Enum):
    UNSET = "unset"


UNSET = _Unset.UNSET


@dataclass(slots=True, kw_only=True)
class Op:
    id: int
    client: int
    kind: str  # PUT, READ, CAS, DELETE or APPEND
    key: str  # the append workload uses one key for its log
    value: bytes | None = None  # put/cas/append: the value written; read: the value read (None: absent)
    expect: int = -1  # cas: the version it requires (0: absent); delete: likewise, -1: any version
    invoke: int  # ns
    complete: int | None = None  # ns; None while running and when the outcome is unknown
    outcome: str = UNKNOWN
    version: int = -1  # read: the version seen; writes: the version set (delete: 0); bad_version: the one seen
    code: str = ""  # the error code of a fail ("bad_version", "no_node", "no_leader", ...)
    zxid: int | None = None  # the zxid the server named (writes: where it was committed)

    @property
    def condition_failed(self) -> bool:
        """A cas/delete whose condition the leader ordered and found false."""
        return self.code in CONDITION_CODES and self.outcome != UNKNOWN

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        d["value"] = None if self.value is None else self.value.hex()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str = "op") -> Op:
        """The inverse of :meth:`to_json`; a ValueError names the bad field."""
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown field {unknown[0]!r}; expected some of {', '.join(_FIELDS)}")
        args: dict[str, Any] = {}
        for name in _FIELDS:
            if name not in d:
                if name in _REQUIRED:
                    raise ValueError(f"{where}: field {name!r} is missing")
                continue
            args[name] = _field(name, d[name], where)
        op = cls(**args)
        problem = op.problem()
        if problem:
            raise ValueError(f"{where}: {problem}")
        return op

    def problem(self) -> str:
        """What makes this op unusable by the checkers ("" if nothing)."""
        if self.kind not in KINDS:
            return f"op {self.id}: kind {self.kind!r}; expected one of {', '.join(KINDS)}"
        if self.outcome not in OUTCOMES:
            return f"op {self.id}: outcome {self.outcome!r}; expected one of {', '.join(OUTCOMES)}"
        if self.outcome == UNKNOWN:
            if self.complete is not None:
                return f"op {self.id}: outcome unknown with a return time {self.complete}; expected None"
        elif self.complete is None:
            return f"op {self.id}: outcome {self.outcome} without a return time"
        elif self.complete < self.invoke:
            return f"op {self.id}: returned at {self.complete} ns, before its call at {self.invoke} ns"
        if self.kind == CAS and self.expect < 0:
            return f"op {self.id}: cas expects version {self.expect}; expected 0 (absent) or more"
        if self.kind == DELETE and self.expect < -1:
            return f"op {self.id}: delete expects version {self.expect}; expected -1 (any) or more"
        if self.kind in (PUT, CAS, APPEND) and self.value is None:
            return f"op {self.id}: {self.kind} without a value"
        return ""


_FIELDS = ("id", "client", "kind", "key", "value", "expect", "invoke", "complete", "outcome", "version", "code", "zxid")
_REQUIRED = ("id", "client", "kind", "key", "invoke")
_INTS = ("id", "client", "expect", "invoke", "version")
_OPTIONAL_INTS = ("complete", "zxid")


def _field(name: str, raw: Any, where: str) -> Any:
    if name in _INTS or (name in _OPTIONAL_INTS and raw is not None):
        if type(raw) is not int:
            raise ValueError(f"{where}: field {name!r} is {raw!r}; expected an integer")
        return raw
    if name == "value":
        if raw is None:
            return None
        try:
            return bytes.fromhex(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: field 'value' is {raw!r}; expected hex digits or null") from None
    if name in ("kind", "key", "outcome", "code") and type(raw) is not str:
        raise ValueError(f"{where}: field {name!r} is {raw!r}; expected a string")
    return raw


class History:
    """Ops in call order, as recorded. Meant for the tasks of one asyncio
    loop: ``invoke`` and ``complete`` do not await, so no lock is needed
    (not for threads)."""

    __slots__ = ("ops",)

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self.ops: list[Op] = list(ops)

    def invoke(self, client: int, kind: str, key: str, at: int, value: bytes | None = None,
               expect: int | None = None) -> Op:
        """Record a call at ``at`` ns. ``value``: what a put/cas/append writes;
        ``expect``: the version a cas (required) or delete (default -1, any)
        names; other kinds ignore it."""
        if kind == CAS and expect is None:
            raise ValueError(f"cas on {key!r}: expect (the required version) is missing")
        op = Op(id=len(self.ops), client=client, kind=kind, key=key, value=value,
                expect=-1 if expect is None else expect, invoke=at)
        problem = op.problem()
        if problem:
            raise ValueError(problem)
        self.ops.append(op)
        return op

    @staticmethod
    def complete(op: Op, at: int | None, outcome: str, *, value: bytes | _Unset | None = UNSET, version: int = -1,
                 code: str = "", zxid: int | None = None) -> None:
        """Record how ``op`` ended. ``at`` is ignored when the outcome is
        unknown (it may still take effect later). ``value`` is what a read
        returned (None: absent) and only a read takes it."""
        if op.outcome != UNKNOWN or op.complete is not None:
            raise ValueError(f"op {op.id}: completed twice (was {op.outcome})")
        if outcome not in OUTCOMES:
            raise ValueError(f"op {op.id}: outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
        if value is not UNSET:
            if op.kind != READ:
                raise ValueError(f"op {op.id}: a {op.kind} is given a result value; only a read returns one")
            op.value = value
        elif op.kind == READ and outcome == OK:
            raise ValueError(f"op {op.id}: a read completed ok without the value it read")
        if outcome != UNKNOWN:
            if at is None or at < op.invoke:
                raise ValueError(f"op {op.id}: return time {at} is missing or before its call at {op.invoke}")
            op.complete = at
        op.outcome = outcome
        op.version = version
        op.code = code
        op.zxid = zxid

    @classmethod
    def of(cls, ops: Iterable[Op]) -> History:
        return cls(ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def counts(self) -> dict[str, int]:
        """Ops per outcome."""
        c = Counter(op.outcome for op in self.ops)
        return {o: c[o] for o in OUTCOMES}

    def save(self, path: str | Path) -> None:
        """One JSON object per line; values as hex."""
        with open(path, "w") as f:
            for op in self.ops:
                f.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> History:
        ops = []
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path} line {n}"
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{where}: not JSON ({exc.msg})") from None
                if not isinstance(d, dict):
                    raise ValueError(f"{where}: {type(d).__name__}; expected a JSON object")
                ops.append(Op.from_json(d, where))
        return cls(ops)
