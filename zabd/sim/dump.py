"""The canonical cluster dump of spec section 10 and its digest."""

from __future__ import annotations

import importlib
import struct
from collections.abc import Sequence
from typing import Final

from zabd.protocol.messages import Txn
from zabd.protocol.node import Node

MAGIC: Final = b"DSEZAB01"
_NODE = struct.Struct("<IBIIIIIII")
_TXN = struct.Struct("<III")
_U32 = struct.Struct("<I")


def dump(nodes: Sequence[Node], histories: Sequence[Sequence[Txn]] | None = None) -> bytes:
    """``histories``: each node's full history by id, when the core keeps
    only a window (the windowed variant); the canonical dump omits it."""
    out = [MAGIC, _U32.pack(len(nodes))]
    for node in sorted(nodes, key=lambda n: n.id):
        history = node.history if histories is None else histories[node.id]
        last = node.last_zxid()
        lc = node.last_committed
        out.append(
            _NODE.pack(
                node.id,
                node.role,
                node.current_epoch,
                node.accepted_epoch,
                last >> 32,
                last & 0xFFFFFFFF,
                lc >> 32,
                lc & 0xFFFFFFFF,
                len(history),
            )
        )
        for z, payload in history:
            out.append(_TXN.pack(z >> 32, z & 0xFFFFFFFF, len(payload)))
            out.append(payload)
    return b"".join(out)


def digest(data: bytes) -> str:
    try:  # CPython's own SHA-256: hashlib's OpenSSL binding takes milliseconds to load, for one digest
        sha = importlib.import_module("_sha256")
    except ImportError:  # another Python (3.12 calls it _sha2): what hashlib has
        sha = importlib.import_module("hashlib")
    return str(sha.sha256(data).hexdigest())
