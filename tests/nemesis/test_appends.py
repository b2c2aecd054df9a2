"""The append checker: each of lost, duplicated, unexpected, misplaced and
divergent is found; a clean history passes."""

from __future__ import annotations

from zabd.nemesis.appends import check_appends
from zabd.nemesis.history import APPEND, FAIL, OK, UNKNOWN, Op


def app(i: int, value: bytes, outcome: str = OK, zxid: int = 0) -> Op:
    return Op(i, 1, APPEND, "log", value, 0, -1, i, i + 1 if outcome != UNKNOWN else None, outcome, "", zxid)


OPS = [app(0, b"a", zxid=1), app(1, b"b", zxid=2), app(2, b"c", UNKNOWN), app(3, b"d", FAIL)]


def test_a_clean_history_passes() -> None:
    log = [(1, b"a"), (2, b"b"), (3, b"c")]  # the unknown append made it: allowed
    report = check_appends(OPS, {1: log, 2: log, 3: log[:2]})  # a node behind holds a prefix
    assert report.ok and report.acknowledged == 2, report.summary()


def test_each_kind_of_problem_is_found() -> None:
    assert check_appends(OPS, {1: [(1, b"a")]}).lost == [b"b"]
    assert check_appends(OPS, {1: [(1, b"a"), (2, b"b"), (3, b"a")]}).duplicated == [b"a"]
    assert check_appends(OPS, {1: [(1, b"a"), (2, b"b"), (3, b"d")]}).unexpected == [b"d"]  # it certainly failed
    assert check_appends(OPS, {1: [(1, b"a"), (2, b"b"), (3, b"zz")]}).unexpected == [b"zz"]  # never attempted
    assert check_appends(OPS, {1: [(1, b"b"), (2, b"a")]}).misplaced == [b"a", b"b"]
    report = check_appends(OPS, {1: [(1, b"a"), (2, b"b")], 2: [(1, b"a"), (2, b"c")]})
    assert report.divergent == ["node 2"] and not report.ok
    assert "divergent 1" in report.summary()
