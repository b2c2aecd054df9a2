"""The one place a server's storage backend and state machine are chosen.

``disk`` (the default) is ``DiskStorage``; ``memory`` keeps nothing across restarts.
"""

from __future__ import annotations

import time

from zabd.codec.members import decode_specs, encode_addresses, zookeeper_config_text
from zabd.config import ServerConfig, StorageOptions
from zabd.kv.kvmachine import KVMachine
from zabd.machine import NullMachine, StateMachine
from zabd.protocol.membership import Membership
from zabd.storage.base import MemoryStorage, Storage
from zabd.storage.disk import DiskStorage


def open_storage(options: StorageOptions) -> Storage:
    """``DiskStorage`` in ``options.data_dir`` (its ``load()`` is the server's
    recovery and raises ``StorageError`` with one line naming file, offset
    and problem) or ``MemoryStorage`` (``ServerConfig.storage_options()``)."""
    if options.kind == "memory":
        return MemoryStorage()
    seg = options.segment_bytes
    return DiskStorage(
        options.data_dir,
        fsync=options.fsync,
        segment_bytes=seg,
        prealloc_bytes=min(seg, 16 << 20),
        window=options.window,
    )


def open_state_machine(config: ServerConfig) -> StateMachine:
    if config.state_machine == "none":
        return NullMachine()
    return KVMachine(config.zk_max_data, zookeeper_config(config), lambda: int(time.time() * 1000))


def initial_membership(config: ServerConfig) -> Membership:
    """The membership a node starts with (its log's changes override it)."""
    observers = config.observer_ids
    members = frozenset(config.peers) - ({config.id} if config.join else set())
    return Membership(members - observers, observers & members, encode_addresses(config.peers))


def zookeeper_config(config: ServerConfig) -> bytes:
    """ZooKeeper's ``/zookeeper/config`` of the configured ensemble, as a static
    ZooKeeper 3.8 ensemble shows it (``version=0``)."""
    m = initial_membership(config)
    return zookeeper_config_text(m.voters, m.observers, decode_specs(m.extra), 0)
