"""Histories of client operations, as a nemesis run records them.

Every operation has an invocation time and, unless its outcome is unknown, a
completion time (monotonic nanoseconds from the recorder's clock). Outcomes:

* ``ok``: it took effect once, and its result is known;
* ``fail``: it certainly did not take effect (refused before it was proposed);
  a ``cas`` or ``delete`` whose condition failed is *not* a fail: it was
  ordered like any write and saw the key, so it is ``ok`` with its result;
* ``unknown``: a timeout, a lost connection or leader: it may or may not have
  taken effect, at any time after its invocation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"

PUT = "put"
READ = "read"  # sync + get: a linearizable read
CAS = "cas"
DELETE = "delete"
APPEND = "append"  # a raw proposal of a unique value (the append workload)


@dataclass(slots=True)
class Op:
    id: int
    client: int
    kind: str
    key: str
    value: bytes | None = None  # put/cas/append: written; read: the value read (None: absent)
    expect: int = 0  # cas: the expected version (0: absent); delete: the expected version (-1: any)
    version: int = -1  # the result: read: version seen; put/cas: version set; failed condition: version seen
    invoke: int = 0  # ns
    complete: int | None = None  # ns; None while pending or when unknown
    outcome: str = UNKNOWN
    code: str = ""  # the error code of a failed or conditional result (bad_version, no_node)
    zxid: int = 0  # the commit zxid, when the server said

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in Op.__slots__}
        d["value"] = None if self.value is None else self.value.hex()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Op:
        d = dict(d)
        d["value"] = None if d.get("value") is None else bytes.fromhex(d["value"])
        return cls(**d)


@dataclass(slots=True)
class History:
    ops: list[Op] = field(default_factory=list)

    def invoke(self, client: int, kind: str, key: str, at: int, value: bytes | None = None, expect: int = 0) -> Op:
        op = Op(len(self.ops), client, kind, key, value, expect, -1, at)
        self.ops.append(op)
        return op

    @staticmethod
    def complete(op: Op, at: int, outcome: str, **result: Any) -> None:
        """``outcome`` ok or fail with ``at``; unknown leaves no completion."""
        op.outcome = outcome
        op.complete = at if outcome != UNKNOWN else None
        for k, v in result.items():
            setattr(op, k, v)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def counts(self) -> dict[str, int]:
        out = {OK: 0, FAIL: 0, UNKNOWN: 0}
        for op in self.ops:
            out[op.outcome] += 1
        return out

    def save(self, path: str | Path) -> None:
        with open(path, "w") as f:
            for op in self.ops:
                f.write(json.dumps(op.to_json()) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> History:
        with open(path) as f:
            return cls([Op.from_json(json.loads(line)) for line in f if line.strip()])

    @classmethod
    def of(cls, ops: Iterable[Op]) -> History:
        return cls(list(ops))
