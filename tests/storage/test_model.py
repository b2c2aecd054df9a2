"""DiskStorage against an in-memory model: random appends, history
replacements, epoch writes, commits and reopenings; after every reopen the
recovered PersistentState equals the model's."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.protocol.messages import Txn
from zabd.storage.base import PersistentState
from zabd.storage.disk import DiskStorage

SMALL = {"segment_bytes": 4096, "prealloc_bytes": 4096}

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 60), st.integers(0, 200)),
        st.tuples(st.just("replace"), st.integers(0, 100), st.integers(0, 30)),
        st.tuples(st.just("commit"), st.integers(0, 100), st.just(0)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(ops)
def test_disk_storage_matches_model(steps: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
        s.load()
        history: list[Txn] = []
        epoch, counter, committed = 1, 0, 0  # committed: count of committed txns
        accepted = current = leader = 0
        for kind, a, b in steps:
            if kind == "append":
                for _ in range(a):
                    counter += 1
                    t = Txn(epoch << 32 | counter, bytes([counter % 251]) * b)
                    history.append(t)
                    s.append(t)
            elif kind == "replace":
                keep = committed + (a * (len(history) - committed)) // 100
                epoch += 1
                history = history[:keep] + [Txn(epoch << 32 | c, b"r%d" % c) for c in range(1, b + 1)]
                counter = b
                s.replace_history(history)
                accepted, leader, current = epoch, epoch % 5, epoch
                s.persist_epochs(accepted, leader, current)
            elif kind == "commit" and history:
                committed = max(committed, (a * len(history)) // 100)
                if committed:
                    s.commit_to(history[committed - 1].zxid)
            elif kind == "flush":
                s.flush_sync()
            elif kind == "reopen":
                s.close()
                s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
                st_ = s.load()
                want = PersistentState(current, accepted, leader, history, st_.last_committed)
                assert st_ == want
                # the commit point is at most the model's, and a txn of the history
                assert st_.last_committed <= (history[committed - 1].zxid if committed else 0)
                assert st_.last_committed == 0 or any(t.zxid == st_.last_committed for t in history)
        s.close()
        s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
        final = s.load()
        s.close()
        assert final.history == history
        assert (final.accepted_epoch, final.epoch_leader, final.current_epoch) == (accepted, leader, current)
        assert final.last_committed == (history[committed - 1].zxid if committed else 0)
