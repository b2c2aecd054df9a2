"""zabd's ZooKeeper data model against the real ZooKeeper 3.8.0 (Debian).

``scripts/record_zk38_semantics.py`` ran scripted cases against a standalone
ZooKeeper and stored every step with ZooKeeper's answer in
``tests/data/zk38_semantics.json``; here the same steps go through zabd's
in-process ``Standalone`` (one per case, its first session opened before
the first step, as the recorder does) and every answer, normalised the same
way, must be ZooKeeper's. No Java is needed to run this.

Normalisation (as in the recorder): times are dropped; zxids are relative to
the zxid of the case's first createSession ("zero" for 0, "pre" for older);
ephemeralOwner is ``{"session": k}`` for the case's k-th session; data over
64 bytes is its length and sha256; children and ephemeral paths are sorted
(zabd answers getChildren sorted, ZooKeeper in hash order). Errors compare
by code only.

The session layer is not under test here; the replay stands in for it as
``zabd.server.zk.sessions`` does: a session's ids are ``ip:127.0.0.1``
(the recorder's address) then each digest added, without duplicates; sync
answers its path and is no txn.

Differences are in ``KNOWN``, each with its reason: for those steps the
recording must still show 3.8.0's answer and zabd must give the stated one.
Chosen ones (zabd follows later 3.8.x fixes, or refuses oversized data)
pass; ones this test found and nobody decided yet are ``open``: every other
step of the case is still checked, then the case is an xfail naming them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.zk.standalone import Standalone
from zabd.zk.acl import ACL, Id, digest_auth
from zabd.zk.errors import Code
from zabd.zk.records import (
    ACLResult,
    Check,
    CheckResult,
    ChildrenResult,
    CountResult,
    Create,
    CreateResult,
    DataResult,
    Delete,
    DeleteResult,
    ErrorResult,
    Exists,
    ExistsResult,
    GetACL,
    GetAllChildrenNumber,
    GetChildren,
    GetData,
    GetEphemerals,
    Multi,
    MultiOp,
    MultiResult,
    PathsResult,
    SetACL,
    SetData,
    Stat,
    StatResult,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "zk38_semantics.json"
RECORDING: dict[str, Any] = json.loads(DATA.read_text())
CASES: list[dict[str, Any]] = RECORDING["cases"]
CLIENT_IP = Id("ip", "127.0.0.1")  # the recorder's clients connect from here
SESSION_TIMEOUT_MS = 20_000

class Diff(NamedTuple):
    """A step where zabd answers differently, on purpose (``open`` False) or
    found by this test and not decided yet (``open`` True: the case is
    reported as xfail, after every other step of it was checked)."""

    reason: str
    zookeeper: dict[str, Any]  # 3.8.0's recorded outcome ("<any>" matches anything)
    zabd: dict[str, Any]  # zabd's outcome
    open: bool = False


ANY_STAT = {"ok": {"stat": "<any>"}}
ZK_2590 = "ZOOKEEPER-2590 (fixed in 3.8.4): exists on a node without READ is NoAuth; 3.8.0 returns the stat"
OVER_LIMIT = ("data over the 1 MiB limit: zabd refuses the request (BadArguments, an error txn); ZooKeeper's "
              "server drops the connection (the packet is over jute.maxbuffer) and the session reconnects")
ALICE = "alice:V55/p2T0OpjQ+low3NVAH4aLvm0="
CAROL = "carol:KLkrVu5kuS67cthl8XLvAMcI34M="

# (case, step label) -> Diff
KNOWN: dict[tuple[str, str], Diff] = {
    ("acl_no_read", "exists_no_read"): Diff(ZK_2590, ANY_STAT, {"error": int(Code.NO_AUTH)}),
    ("acl_no_read", "exists_no_perms"): Diff(ZK_2590, ANY_STAT, {"error": int(Code.NO_AUTH)}),
    ("acl_digest_auth_scheme", "exists_other_digest"): Diff(ZK_2590, ANY_STAT, {"error": int(Code.NO_AUTH)}),
    ("check_outside_multi", "check_ok"): Diff(
        "ZOOKEEPER-2623 (fixed in 3.8.5): check is a multi op only, alone it is Unimplemented; 3.8.0 applies "
        "it and then never answers (NullPointerException serializing the reply). Both take a zxid.",
        {"ok": {"no_reply": True}}, {"error": int(Code.UNIMPLEMENTED)}),
    ("check_outside_multi", "check_bad"): Diff(
        "ZOOKEEPER-2623 (fixed in 3.8.5): check is a multi op only; 3.8.0 answers a failed check's error. "
        "Both take a zxid.",
        {"error": int(Code.BAD_VERSION)}, {"error": int(Code.UNIMPLEMENTED)}),
    ("large_data", "data_over_limit"): Diff(
        OVER_LIMIT, {"error": int(Code.CONNECTION_LOSS)}, {"error": int(Code.BAD_ARGUMENTS)}),
    ("set_data_over_limit", "set_over_limit"): Diff(
        OVER_LIMIT, {"error": int(Code.CONNECTION_LOSS)}, {"error": int(Code.BAD_ARGUMENTS)}),
    ("acl_ip_v6", "ip_v6"): Diff(
        "an IPv6 ip ACL: zabd accepts it as ZooKeeper does since ZOOKEEPER-4240; 3.8.0 knew IPv4 only",
        {"error": int(Code.INVALID_ACL)}, {"ok": "<any>"}),
    ("auth_twice_same_user", "auth_order_get"): Diff(
        "an 'auth' ACL expands to the session's ids in ZooKeeper 3.8.0's ConcurrentHashMap order (by hash); "
        "zabd keeps the order of addauth. The same entries either way.",
        {"ok": {"acl": [[31, "digest", CAROL], [31, "digest", ALICE]], "stat": "<any>"}},
        {"ok": {"acl": [[31, "digest", ALICE], [31, "digest", CAROL]], "stat": "<any>"}}),
}


def _data(step: dict[str, Any]) -> bytes:
    d = step.get("data")
    if d is None:
        return b""
    if isinstance(d, dict):
        return bytes.fromhex(d["fill"]) * int(d["n"])
    return bytes.fromhex(str(d))


def _acl(raw: list[list[Any]] | None) -> tuple[ACL, ...] | None:
    return None if raw is None else tuple(ACL(p, Id(s, i)) for p, s, i in raw)


def _create(step: dict[str, Any]) -> Create:
    acl = _acl(step["acl"])
    kw: dict[str, Any] = {} if acl is None else {"acl": acl}
    return Create(step["path"], _data(step), mode=step["mode"], ttl=step.get("ttl", -1), **kw)


def _multi_op(op: dict[str, Any]) -> MultiOp:
    kind = op["op"]
    if kind == "create":
        return _create(op)
    if kind == "delete":
        return Delete(op["path"], op["version"])
    if kind == "set":
        return SetData(op["path"], _data(op), op["version"])
    if kind == "check":
        return Check(op["path"], op["version"])
    raise ValueError(kind)


class Replay:
    """One case's steps through a fresh Standalone, answers normalised."""

    def __init__(self) -> None:
        self.st = Standalone()
        self.sids = [self.st.session(SESSION_TIMEOUT_MS)]
        self.auth: list[list[Id]] = [[CLIENT_IP]]
        self.base = self.st.zxid  # the first createSession's zxid

    # ---------------------------------------------------------- normalise

    def zxid(self, z: int) -> int | str:
        if z == 0:
            return "zero"
        if z < self.base:
            return "pre"
        return z - self.base

    def owner(self, o: int) -> int | dict[str, int]:
        return {"session": self.sids.index(o)} if o in self.sids else o

    def stat(self, s: Stat | None) -> dict[str, Any] | None:
        if s is None:
            return None
        return {"czxid": self.zxid(s.czxid), "mzxid": self.zxid(s.mzxid), "pzxid": self.zxid(s.pzxid),
                "version": s.version, "cversion": s.cversion, "aversion": s.aversion,
                "ephemeralOwner": self.owner(s.ephemeralOwner), "dataLength": s.dataLength,
                "numChildren": s.numChildren}

    @staticmethod
    def data(d: bytes) -> str | dict[str, Any]:
        return d.hex() if len(d) <= 64 else {"len": len(d), "sha256": hashlib.sha256(d).hexdigest()}

    def result(self, r: Any, step: dict[str, Any]) -> dict[str, Any]:
        if isinstance(r, ErrorResult):
            return {"error": int(r.code)}
        if isinstance(r, CreateResult):
            return {"ok": {"path": r.path, "stat": self.stat(r.stat)}}
        if isinstance(r, (DeleteResult, CheckResult)):
            return {"ok": {}}
        if isinstance(r, StatResult):
            return {"ok": {"stat": self.stat(r.stat)}}
        if isinstance(r, DataResult):
            return {"ok": {"data": self.data(r.data), "stat": self.stat(r.stat)}}
        if isinstance(r, ExistsResult):
            return {"ok": {"stat": self.stat(r.stat)}}
        if isinstance(r, ChildrenResult):
            out: dict[str, Any] = {"children": sorted(r.children)}
            if step["stat"]:
                out["stat"] = self.stat(r.stat)
            return {"ok": out}
        if isinstance(r, ACLResult):
            return {"ok": {"acl": [[a.perms, a.id.scheme, a.id.id] for a in r.acl], "stat": self.stat(r.stat)}}
        if isinstance(r, PathsResult):
            return {"ok": {"paths": sorted(r.paths)}}
        if isinstance(r, CountResult):
            return {"ok": {"number": r.number}}
        if isinstance(r, MultiResult):
            return {"ok": {"results": [self.sub_result(x, op) for x, op in zip(r.results, step["ops"], strict=True)]}}
        raise AssertionError(f"unexpected result {r!r}")

    def sub_result(self, r: Any, op: dict[str, Any]) -> dict[str, Any]:
        if isinstance(r, ErrorResult):
            return {"type": "error", "code": int(r.code)}
        if isinstance(r, CreateResult):
            # ZooKeeper's wire format: in a multi, create and create2 answer the path only, createTTL and
            # createContainer the path and the stat (zabd's result always has both; a codec picks)
            out: dict[str, Any] = {"type": "create", "path": r.path}
            if op.get("ttl") is not None or op["mode"] == 4:
                out["stat"] = self.stat(r.stat)
            return out
        if isinstance(r, DeleteResult):
            return {"type": "delete"}
        if isinstance(r, StatResult):
            return {"type": "set", "stat": self.stat(r.stat)}
        if isinstance(r, CheckResult):
            return {"type": "check"}
        raise AssertionError(f"unexpected multi result {r!r}")

    # ---------------------------------------------------------------- run

    def step(self, step: dict[str, Any]) -> dict[str, Any]:
        op = step["op"]
        st = self.st
        if op == "session":
            self.sids.append(st.session(SESSION_TIMEOUT_MS))
            self.auth.append([CLIENT_IP])
            return {"ok": {"session": len(self.sids) - 1}}
        sid, auth = self.sids[step["s"]], self.auth[step["s"]]
        if op == "close":
            st.close(sid)
            return {"ok": {}}
        if op == "auth":
            assert step["scheme"] == "digest"
            for i in digest_auth(step["credentials"]):
                if i not in auth:
                    auth.append(i)
            return {"ok": {}}
        if op == "sync":
            return {"ok": {"path": step["path"]}}
        if op == "create":
            return self.result(st.write(sid, _create(step), auth), step)
        if op == "delete":
            return self.result(st.write(sid, Delete(step["path"], step["version"]), auth), step)
        if op == "set":
            return self.result(st.write(sid, SetData(step["path"], _data(step), step["version"]), auth), step)
        if op == "set_acl":
            acl = _acl(step["acl"])
            assert acl is not None
            return self.result(st.write(sid, SetACL(step["path"], acl, step["version"]), auth), step)
        if op == "check":
            return self.result(st.write(sid, Check(step["path"], step["version"]), auth), step)
        if op == "multi":
            return self.result(st.write(sid, Multi(tuple(_multi_op(o) for o in step["ops"])), auth), step)
        if op == "get":
            return self.result(st.read(sid, GetData(step["path"]), auth), step)
        if op == "exists":
            return self.result(st.read(sid, Exists(step["path"]), auth), step)
        if op == "children":
            return self.result(st.read(sid, GetChildren(step["path"], with_stat=step["stat"]), auth), step)
        if op == "get_acl":
            return self.result(st.read(sid, GetACL(step["path"]), auth), step)
        if op == "ephemerals":
            return self.result(st.read(sid, GetEphemerals(step["prefix"]), auth), step)
        if op == "count":
            return self.result(st.read(sid, GetAllChildrenNumber(step["path"]), auth), step)
        raise ValueError(op)


def _expected(outcome: dict[str, Any]) -> dict[str, Any]:
    """The recorded outcome as it compares: errors by code alone."""
    if "error" in outcome:
        return {"error": outcome["error"]}
    return outcome


def _matches(pattern: Any, value: Any) -> bool:
    if pattern == "<any>":
        return True
    if isinstance(pattern, dict) and isinstance(value, dict):
        return pattern.keys() == value.keys() and all(_matches(pattern[k], value[k]) for k in pattern)
    return bool(pattern == value)


def _describe(step: dict[str, Any]) -> str:
    args = {k: v for k, v in step.items() if k not in ("outcome", "op")}
    text = json.dumps(args, ensure_ascii=True)
    return f"{step['op']} {text if len(text) < 300 else text[:300] + '...'}"


def test_recording_is_a_zookeeper_38_one() -> None:
    assert RECORDING["zookeeper"].startswith("3.8.0"), RECORDING["zookeeper"]
    assert len(CASES) >= 30
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names))
    labels = {(c["name"], s["label"]) for c in CASES for s in c["steps"] if "label" in s}
    assert set(KNOWN) <= labels, f"KNOWN names steps the recording lacks: {set(KNOWN) - labels}"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_zk38_case(case: dict[str, Any]) -> None:
    replay = Replay()
    open_diffs: list[str] = []
    for i, step in enumerate(case["steps"]):
        got = replay.step(step)
        diff = KNOWN.get((case["name"], step.get("label", "")))
        where = f"{case['name']} step {i}: {_describe(step)}"
        if diff is not None:
            assert _matches(diff.zookeeper, _expected(step["outcome"])), (
                f"{where}\nthe recording no longer shows the difference ({diff.reason}): {step['outcome']}")
            assert _matches(diff.zabd, got), f"{where}\nzabd's answer changed ({diff.reason}): {got}"
            if diff.open:
                open_diffs.append(f"step {i} ({step['label']}): {diff.reason}")
            continue
        assert got == _expected(step["outcome"]), (
            f"{where}\nZooKeeper 3.8.0: {json.dumps(step['outcome'])}\nzabd:           {json.dumps(got)}")
    if open_diffs:
        pytest.xfail("differs from ZooKeeper 3.8.0, reported and not decided: " + "; ".join(open_diffs))
