"""State machines: the interface and the built-in key-value store."""

from zabd.kv.kvmachine import KV_MAGIC, KVMachine
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
from zabd.machine import NullMachine, StateMachine

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
    "NullMachine",
    "KVMachine",
    "KV_MAGIC",
    "decode_txn",
    "prepare",
]
