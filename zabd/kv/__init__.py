"""State machines: the interface and the built-in key-value store."""

from zabd.kv.machine import StateMachine
from zabd.kv.store import (
    BAD_VERSION,
    NO_NODE,
    OK,
    Cas,
    Delete,
    Get,
    KVLeader,
    KVStore,
    Put,
    Request,
    Result,
    decode_txn,
    prepare,
)

__all__ = [
    "BAD_VERSION",
    "NO_NODE",
    "OK",
    "Cas",
    "Delete",
    "Get",
    "KVLeader",
    "KVStore",
    "Put",
    "Request",
    "Result",
    "StateMachine",
    "decode_txn",
    "prepare",
]
