"""The append checker: each of lost, duplicated, unexpected, misplaced,
divergent and disordered is found; clean histories pass, including ones
simulated with random outcomes and lagging nodes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.nemesis.appends import (
    Divergent,
    Duplicated,
    Entry,
    Lost,
    Misplaced,
    Unexpected,
    check_appends,
    write_append_report,
)
from zabd.nemesis.history import APPEND, FAIL, OK, UNKNOWN, History, Op

E1 = 1 << 32  # zxids of epoch 1


def app(i: int, value: bytes, outcome: str = OK, zxid: int | None = None, code: str = "") -> Op:
    return Op(id=i, client=i % 3, kind=APPEND, key="log", value=value, invoke=i * 10,
              complete=None if outcome == UNKNOWN else i * 10 + 5, outcome=outcome, zxid=zxid, code=code)


# a acknowledged at 1, b at 2; c unknown (it made it, at 3); d refused; e unknown (lost with a leader)
OPS = [app(0, b"a", zxid=E1 + 1), app(1, b"b", zxid=E1 + 2), app(2, b"c", UNKNOWN),
       app(3, b"d", FAIL, code="no_leader"), app(4, b"e", UNKNOWN)]
LOG: list[Entry] = [(E1 + 1, b"a"), (E1 + 2, b"b"), (E1 + 3, b"c")]


def test_a_clean_history_passes() -> None:
    # node 3 is behind: its log is a prefix of the others'
    report = check_appends(OPS, {1: LOG, 2: LOG, 3: LOG[:2]})
    assert report.ok, report.format()
    assert (report.acknowledged, report.unknown_applied, report.unknown_absent, report.failed) == (2, 1, 1, 1)
    assert report.reference == 1 and report.final_length == 3
    assert report.summary().startswith("ok: 2 acknowledged appends")


def test_an_acknowledged_append_missing_is_lost() -> None:
    # b was acknowledged at zxid 2, but the log moved on without it: zxid 2 holds c
    report = check_appends(OPS, {1: [(E1 + 1, b"a"), (E1 + 2, b"c")]})
    assert [x.op.value for x in report.lost] == [b"b"]
    assert report.lost == [Lost(OPS[1], b"c")]
    assert "1 lost" in report.summary() and "the final log has b'c' there" in report.format()


def test_an_append_twice_in_the_log_is_duplicated() -> None:
    report = check_appends(OPS, {1: [*LOG, (E1 + 4, b"a")]})
    assert report.duplicated == [Duplicated(b"a", [E1 + 1, E1 + 4])]
    assert not report.lost and not report.unexpected


def test_a_payload_never_attempted_or_certainly_failed_is_unexpected() -> None:
    report = check_appends(OPS, {1: [*LOG, (E1 + 4, b"zz"), (E1 + 5, b"d")]})
    assert report.unexpected == [Unexpected(E1 + 4, b"zz", "never attempted"),
                                 Unexpected(E1 + 5, b"d", "op 3 certainly failed (no_leader)")]


def test_an_acknowledgement_naming_another_zxid_is_misplaced() -> None:
    # a and b are both there once, but each where the other was acknowledged
    report = check_appends(OPS, {1: [(E1 + 1, b"b"), (E1 + 2, b"a")]})
    assert report.misplaced == [Misplaced(OPS[0], [E1 + 2]), Misplaced(OPS[1], [E1 + 1])]
    # an acknowledgement without a zxid is only checked for presence
    assert check_appends([app(0, b"a")], {1: [(E1 + 7, b"a")]}).ok


def test_logs_that_disagree_are_divergent() -> None:
    # node 2 committed c where node 1 (the longest log) committed b: two orders
    report = check_appends(OPS, {1: LOG, 2: [(E1 + 1, b"a"), (E1 + 2, b"c")], 3: LOG[:1]})
    assert report.divergent == [Divergent(2, 1, 1, (E1 + 2, b"c"), (E1 + 2, b"b"))]
    assert "1 divergent" in report.summary()
    # two logs of one length that differ: the lowest node id is the reference, the other diverges
    report = check_appends(OPS, {5: LOG, 4: [*LOG[:2], (E1 + 3, b"e")]})
    assert [(d.node, d.reference, d.index) for d in report.divergent] == [(5, 4, 2)]


def test_zxids_out_of_order_are_disordered() -> None:
    report = check_appends(OPS, {1: [(E1 + 2, b"b"), (E1 + 1, b"a")]})
    assert [(d.node, d.index, d.previous, d.zxid) for d in report.disordered] == [(1, 1, E1 + 2, E1 + 1)]


def test_other_workloads_payloads_are_left_aside_but_still_compared() -> None:
    def ours(p: bytes) -> bool:
        return not p.startswith(b"kv:")

    mixed: list[Entry] = [(E1 + 1, b"a"), (E1 + 2, b"kv:x"), (E1 + 3, b"b")]
    ops = [app(0, b"a", zxid=E1 + 1), app(1, b"b", zxid=E1 + 3)]
    assert check_appends(ops, {1: mixed}, keep=ours).ok
    assert check_appends(ops, {1: mixed}).unexpected == [Unexpected(E1 + 2, b"kv:x", "never attempted")]
    other: list[Entry] = [(E1 + 1, b"a"), (E1 + 2, b"kv:y"), (E1 + 3, b"b")]
    assert len(check_appends(ops, {1: mixed, 2: other}, keep=ours).divergent) == 1


def test_bad_input_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"^op 1: appends b'a' like op 0; expected unique values$"):
        check_appends([app(0, b"a"), app(1, b"a")], {})
    with pytest.raises(ValueError, match=r"^node 2 log position 0: .*expected \(zxid, payload bytes\)$"):
        check_appends(OPS, {2: [("1", b"a")]})  # type: ignore[list-item]


def test_the_report_file_lists_every_kind(tmp_path: Path) -> None:
    report = check_appends(OPS, {1: [(E1 + 1, b"a"), (E1 + 2, b"d"), (E1 + 3, b"d")], 2: [(E1 + 1, b"x")]})
    path = tmp_path / "appends.txt"
    write_append_report(report, path)
    text = path.read_text()
    assert text == report.format()
    for title in ("lost: acknowledged", "duplicated: in the final log", "unexpected: in the final log",
                  "divergent: not a prefix of node 1's log"):
        assert title in text
    assert "op 1 (client 1) appended b'b', acknowledged at zxid 0x100000002" in text


# ---------------------------------------------------- simulated runs

CORRUPTIONS = ("lose", "duplicate", "foreign", "failed", "swap", "diverge", "disorder")


def simulate(seed: int, n: int, nodes: int) -> tuple[list[Op], dict[int, list[Entry]]]:
    """Appends through a leader: refused ones never enter the log, unknown
    ones enter it or not, acknowledged ones enter it at the zxid they are
    told; followers hold a prefix of the leader's log."""
    rng = random.Random(seed)
    history = History()
    log: list[Entry] = []
    zxid = E1
    for i in range(n):
        op = history.invoke(i % 4, APPEND, "log", i * 100, value=b"v%d" % i)
        fate = rng.random()
        if fate < 0.1:
            history.complete(op, i * 100 + 50, FAIL, code="no_leader")
            continue
        applied = fate >= 0.2 or rng.random() < 0.5
        if applied:
            zxid += 1
            log.append((zxid, b"v%d" % i))
        if fate < 0.2:
            history.complete(op, None, UNKNOWN)
        else:
            history.complete(op, i * 100 + 50, OK, zxid=zxid)
    logs = {node: log[: len(log) - rng.randrange(3) if node else len(log)] for node in range(nodes)}
    return history.ops, logs


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 40), st.integers(1, 4))
def test_simulated_runs_pass(seed: int, n: int, nodes: int) -> None:
    ops, logs = simulate(seed, n, nodes)
    report = check_appends(ops, logs)
    assert report.ok, report.format()
    assert report.acknowledged == sum(o.outcome == OK for o in ops)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(4, 40), st.sampled_from(CORRUPTIONS))
def test_each_corruption_of_a_simulated_run_is_found(seed: int, n: int, corruption: str) -> None:
    ops, logs = simulate(seed, n, 3)
    final = logs[0]
    acked = [i for i, (_, p) in enumerate(final) if any(o.value == p and o.outcome == OK for o in ops)]
    failed = [o for o in ops if o.outcome == FAIL]
    rng = random.Random(seed)
    if corruption == "lose" and acked:
        del final[rng.choice(acked)]  # the later entries keep their zxids: only this one is gone
        expect = "lost"
    elif corruption == "duplicate" and final:
        final.append((final[-1][0] + 1, rng.choice(final)[1]))
        expect = "duplicated"
    elif corruption == "foreign":
        final.append(((final[-1][0] if final else E1) + 1, b"never-sent"))
        expect = "unexpected"
    elif corruption == "failed" and failed:
        final.append(((final[-1][0] if final else E1) + 1, rng.choice(failed).value or b""))
        expect = "unexpected"
    elif corruption == "swap" and len(acked) >= 2:
        i, j = rng.sample(acked, 2)
        (zi, pi), (zj, pj) = final[i], final[j]
        final[i], final[j] = (zi, pj), (zj, pi)
        expect = "misplaced"
    elif corruption == "diverge" and len(final) >= 2:
        logs[1] = [*logs[1][:1], (final[1][0], b"other")]  # node 1 committed something else at position 1
        expect = "divergent"
    elif corruption == "disorder" and len(final) >= 2:
        final[0], final[1] = final[1], final[0]
        expect = "disordered"
    else:
        return  # this run has nothing to corrupt that way
    if expect != "divergent":
        # every node has the damage (it is in what was committed), the followers a prefix of it
        for node in (1, 2):
            logs[node] = final[: min(len(logs[node]), len(final))]
    report = check_appends(ops, logs)
    assert not report.ok
    assert getattr(report, expect), report.format()
