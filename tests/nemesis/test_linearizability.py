"""The linearizability checker on hand-made histories, each with why it is or
is not linearizable, and on histories generated from a real register."""

from __future__ import annotations

import random
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.nemesis.history import CAS, DELETE, FAIL, OK, PUT, READ, UNKNOWN, History, Op
from zabd.nemesis.linearizability import check, write_report

MS = 1_000_000
_ids = iter(range(10**9))


def op(kind: str, start: float, end: float | None, *, client: int = 1, key: str = "k", value: bytes | None = None,
       version: int = -1, expect: int = 0, outcome: str = OK, code: str = "") -> Op:
    return Op(next(_ids), client, kind, key, value, expect, version, int(start * MS),
              None if end is None else int(end * MS), outcome if end is not None else UNKNOWN, code)


def put(start: float, end: float | None, value: bytes, version: int = -1, **kw: object) -> Op:
    return op(PUT, start, end, value=value, version=version, **kw)  # type: ignore[arg-type]


def read(start: float, end: float, value: bytes | None, version: int, **kw: object) -> Op:
    return op(READ, start, end, value=value, version=version, **kw)  # type: ignore[arg-type]


def test_sequential_writes_and_reads() -> None:
    assert check([put(0, 1, b"a", 1), read(2, 3, b"a", 1), put(4, 5, b"b", 2), read(6, 7, b"b", 2)]).ok


def test_a_read_concurrent_with_a_write_may_see_either() -> None:
    # the read overlaps the second put: old or new value are both fine
    for seen in ((b"a", 1), (b"b", 2)):
        assert check([put(0, 1, b"a", 1), put(2, 10, b"b", 2), read(3, 4, *seen)]).ok


def test_a_stale_read_after_a_completed_write_fails() -> None:
    # b was written (completed at 3) before the read began (4): a is stale
    result = check([put(0, 1, b"a", 1), put(2, 3, b"b", 2), read(4, 5, b"a", 1)])
    assert result.ok is False
    (verdict,) = result.failing
    assert verdict.culprit is not None and verdict.culprit.kind == READ
    assert [o.kind for o in verdict.window] == [PUT, PUT, READ]  # just the writes and the stale read


def test_a_read_of_a_value_never_written_fails() -> None:
    assert check([put(0, 1, b"a", 1), read(2, 3, b"z", 1)]).ok is False


def test_a_read_that_sees_a_later_write_fails() -> None:
    # the read completed (2) before the put was even called (3)
    assert check([read(0, 2, b"a", 1), put(3, 4, b"a", 1)]).ok is False


def test_cas_orders() -> None:
    ok_cas = op(CAS, 2, 3, value=b"b", expect=1, version=2)
    assert check([put(0, 1, b"a", 1), ok_cas, read(4, 5, b"b", 2)]).ok
    # a cas that failed its condition saw another version: fine if it ran before the put
    failed = op(CAS, 0, 5, value=b"x", expect=1, version=0, code="bad_version")
    assert check([failed, put(1, 2, b"a", 1)]).ok
    # ... but not when it started after the put completed
    late = op(CAS, 3, 4, value=b"x", expect=1, version=0, code="bad_version")
    assert check([put(1, 2, b"a", 1), late]).ok is False


def test_a_lost_update_two_cas_on_one_version_both_ok_fails() -> None:
    a = op(CAS, 2, 4, value=b"x", expect=1, version=2, client=1)
    b = op(CAS, 2, 4, value=b"y", expect=1, version=2, client=2)
    assert check([put(0, 1, b"a", 1), a, b]).ok is False


def test_unknown_writes() -> None:
    # an unknown write that must have happened to explain a later read
    assert check([put(0, None, b"a"), read(5, 6, b"a", 1)]).ok
    # one that never happened
    assert check([put(0, None, b"a"), read(5, 6, None, 0)]).ok
    # one whose value would be needed twice (versions 1 and 2): impossible
    assert check([put(0, None, b"a"), read(5, 6, b"a", 1), read(7, 8, b"a", 2)]).ok is False


def test_failed_writes_and_unknown_reads_say_nothing() -> None:
    assert check([put(0, 1, b"a", outcome=FAIL), read(2, 3, None, 0), op(READ, 4, None)]).ok


def test_delete_semantics() -> None:
    d = op(DELETE, 2, 3, expect=-1, version=0)
    assert check([put(0, 1, b"a", 1), d, read(4, 5, None, 0), put(6, 7, b"b", 1)]).ok
    absent = op(DELETE, 0, 1, expect=-1, version=0, code="no_node")
    assert check([absent]).ok
    assert check([put(0, 1, b"a", 1), op(DELETE, 2, 3, expect=-1, version=0, code="no_node")]).ok is False


def test_real_time_order_across_clients() -> None:
    # client 2 read b after client 1's put of b completed; client 3 then reads a: stale
    h = [put(0, 1, b"a", 1), put(2, 3, b"b", 2, client=1), read(4, 5, b"b", 2, client=2),
         read(6, 7, b"a", 1, client=3)]
    assert check(h).ok is False


def test_only_the_failing_key_is_named_and_the_report_explains_it(tmp_path: Path) -> None:
    good = [put(0, 1, b"a", 1, key="good"), read(2, 3, b"a", 1, key="good")]
    bad = [put(0, 1, b"a", 1, key="bad"), put(2, 3, b"b", 2, key="bad"), read(4, 5, b"a", 1, key="bad")]
    result = check(good + bad)
    assert result.ok is False and [v.key for v in result.failing] == ["bad"]
    path = tmp_path / "report.txt"
    write_report(result, path)
    text = path.read_text()
    assert "key 'bad': NOT linearizable" in text and "key 'good': ok" in text
    assert "no order of the operations above" in text and "read -> b'a'" in text


def test_history_round_trips_through_jsonl(tmp_path: Path) -> None:
    h = History()
    a = h.invoke(1, PUT, "k", 10, b"\x00a")
    h.complete(a, 20, OK, version=1, zxid=5)
    h.invoke(2, READ, "k", 30)  # unknown
    h.save(tmp_path / "h.jsonl")
    back = History.load(tmp_path / "h.jsonl")
    assert [o.to_json() for o in back] == [o.to_json() for o in h]


# ------------------------------------------------- generated from a register


def simulate(seed: int, n_ops: int, clients: int, keys: int, unknown_rate: float) -> list[Op]:
    """Run a real sequential register; each op takes effect at a random point
    inside a random interval, so the true order is a linearization."""
    rng = random.Random(seed)
    state: dict[str, tuple[bytes | None, int]] = {}
    ops: list[Op] = []
    t = 0.0
    for i in range(n_ops):
        t += rng.random()
        key = f"k{rng.randrange(keys)}"
        value, version = state.get(key, (None, 0))
        start = t - rng.random() * 3
        end = t + rng.random() * 3
        client = rng.randrange(clients)
        kind = rng.choice([PUT, READ, READ, CAS])
        if kind == PUT:
            state[key] = (b"v%d" % i, version + 1)
            o = put(start, end, b"v%d" % i, version + 1, client=client, key=key)
        elif kind == READ:
            o = read(start, end, value, version, client=client, key=key)
        else:
            expect = version if rng.random() < 0.7 else version + 1
            if expect == version:
                state[key] = (b"c%d" % i, version + 1)
                o = op(CAS, start, end, client=client, key=key, value=b"c%d" % i, expect=expect, version=version + 1)
            else:
                o = op(CAS, start, end, client=client, key=key, value=b"c%d" % i, expect=expect, version=version,
                       code="bad_version")
        if kind != READ and rng.random() < unknown_rate:
            o.complete, o.outcome, o.version = None, UNKNOWN, -1
        ops.append(o)
    return ops


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(5, 60), st.integers(1, 5), st.sampled_from([0.0, 0.2]))
def test_histories_of_a_real_register_are_accepted(seed: int, n: int, clients: int, unknown: float) -> None:
    assert check(simulate(seed, n, clients, 2, unknown)).ok is True


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(10, 60))
def test_a_read_changed_to_a_never_current_value_is_rejected(seed: int, n: int) -> None:
    ops = simulate(seed, n, 3, 1, 0.0)
    reads = [o for o in ops if o.kind == READ]
    if not reads:
        return
    victim = random.Random(seed).choice(reads)
    victim.value, victim.version = b"never-written", 10**6
    assert check(ops).ok is False


def test_a_large_history_checks_in_seconds() -> None:
    ops = simulate(7, 20_000, 10, 10, 0.05)
    t0 = time.monotonic()
    assert check(ops).ok is True
    assert time.monotonic() - t0 < 60  # measured ~2 s here; a generous bound
