"""The server's key-value state machine: the KV store, plus raw entries.

Committed txns tagged ``KV_MAGIC`` change the store; any other payload is a
raw log entry (a client ``propose``) and leaves the store alone, so raw
proposals and KV writes share one log. Recent results are kept for the
clients waiting on them.
"""

from __future__ import annotations

import zlib
from collections import deque

from zabd.kv.store import KVLeader, KVStore, Result
from zabd.protocol.messages import Txn

# 0xc1 is never the first byte of a msgpack value, so no KV payload is mistaken
# for a raw one that happens to be msgpack.
KV_MAGIC = b"\xc1kv1"
RESULTS_KEPT = 65536
DIGEST_MAX_KEYS = 200_000


class KVMachine:
    def __init__(self) -> None:
        self.store = KVStore()
        self.leader = KVLeader(self.store)
        self.results: dict[int, Result] = {}
        self._result_order: deque[int] = deque()
        self.errors = 0

    def apply(self, txn: Txn) -> object:
        p = txn.payload
        result: Result | None = None
        if p[:4] == KV_MAGIC:
            try:
                result = self.store.apply(Txn(txn.zxid, p[4:]))
            except Exception:
                # Deterministic on every replica (same bytes): a malformed
                # tagged payload changes nothing anywhere.
                self.errors += 1
            else:
                self.results[txn.zxid] = result
                order = self._result_order
                order.append(txn.zxid)
                if len(order) > RESULTS_KEPT:
                    self.results.pop(order.popleft(), None)
                self.leader.committed(txn.zxid)
        self.store.applied = txn.zxid
        return result

    def result(self, zxid: int) -> Result | None:
        """The result of the KV txn at ``zxid``, if still kept here."""
        return self.results.get(zxid)

    def snapshot(self) -> bytes:
        return self.store.snapshot()

    def restore(self, data: bytes) -> None:
        self.store = KVStore()
        if data:
            self.store.restore(data)
        self.leader = KVLeader(self.store)
        self.results.clear()
        self._result_order.clear()

    def snapshot_view(self) -> object:
        return self.store.snapshot_view()

    def encode_view(self, view: object) -> bytes:
        return self.store.encode_view(view)

    def digest(self) -> int | None:
        """CRC-32 of the encoded state (equal states, equal digests), for
        tests and audits; None above DIGEST_MAX_KEYS keys (too slow for a
        status call)."""
        if len(self.store.data) > DIGEST_MAX_KEYS:
            return None
        return zlib.crc32(self.store.snapshot())
