"""Which write results a replica keeps (KVMachine.result): what answers look
up after the apply, for the newest RESULTS_KEPT txns at most."""

from __future__ import annotations

from zabd.kv import KVLeader, KVStore, Put
from zabd.kv.kvmachine import KV_MAGIC, RESULTS_GENERATIONS, RESULTS_KEPT, KVMachine
from zabd.protocol.messages import Txn


def test_the_newest_results_are_kept_and_old_ones_leave_a_generation_at_a_time() -> None:
    m = KVMachine()
    payload = KV_MAGIC + KVLeader(KVStore()).prepare(Put("k", b"v"))
    gen = RESULTS_KEPT // RESULTS_GENERATIONS
    total = RESULTS_KEPT + gen + 7
    for z in range(1, total + 1):
        m.apply(Txn(z, payload))
    kept = [z for z in range(1, total + 1) if m.result(z) is not None]
    # every txn from the oldest kept one on, a whole number of generations plus the filling one
    assert kept == list(range(kept[0], total + 1))
    assert RESULTS_KEPT - gen < len(kept) <= RESULTS_KEPT
    assert (len(kept) - 7) % gen == 0
    assert m.result(total) is not None and m.result(kept[0] - 1) is None


def test_a_snapshot_install_forgets_every_result() -> None:
    m = KVMachine()
    payload = KV_MAGIC + KVLeader(KVStore()).prepare(Put("k", b"v"))
    m.apply(Txn(1, payload))
    m.restore(m.snapshot())
    assert m.result(1) is None
