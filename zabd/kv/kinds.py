"""What a committed payload is: a tag the server put in front of it, never a
client's bytes.

Four kinds of txn share the log, each made by one path of the server:

| tag | kind | made by |
| --- | --- | --- |
| ``RAW_MAGIC`` | raw | ``ProposalPath``, around the bytes of a client's ``propose`` |
| ``KV_MAGIC`` | kv | ``ProposalPath``, from the KV leader's txn |
| ``ZK_MAGIC`` | zk | ``ProposalPath``, from the ZooKeeper leader's txn (after its ACL checks) |
| ``MEMBERSHIP_MAGIC`` | membership | the core's ``propose_membership`` |

A raw proposal is opaque: whatever its bytes, they sit behind ``RAW_MAGIC``
and can never read as another kind. Before version 2 of the log segments
(``zabd.storage.txnlog``) raw proposals were stored bare, and a payload with
none of the tags is one of those; one that begins with a tag is read as what
every replica applied it as when it was committed, whoever made it.
"""

from __future__ import annotations

from typing import Final

from zabd.kv.kvmachine import KV_MAGIC
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.zk.txn import ZK_MAGIC

# 0xc1 is never the first byte of a msgpack value, as with KV_MAGIC and ZK_MAGIC
RAW_MAGIC: Final = b"\xc1rw1"

RAW: Final = "raw"
KV: Final = "kv"
ZK: Final = "zk"
MEMBERSHIP: Final = "membership"
KINDS: Final = (RAW, KV, ZK, MEMBERSHIP)


def tag_raw(body: bytes) -> bytes:
    """A client's raw proposal as the log holds it."""
    return RAW_MAGIC + body


def kind_of(payload: bytes) -> str:
    head = payload[:4]
    if head == RAW_MAGIC:
        return RAW
    if head == KV_MAGIC:
        return KV
    if head == ZK_MAGIC:
        return ZK
    if payload.startswith(MEMBERSHIP_MAGIC):
        return MEMBERSHIP
    return RAW  # a log of version 1 stored raw proposals bare


def raw_body(payload: bytes) -> bytes:
    """The client's bytes of a raw txn (``kind_of(payload) == RAW``)."""
    return payload[4:] if payload[:4] == RAW_MAGIC else payload
