"""Durable state of a replica: epochs, the transaction log, snapshots."""

from zabd.storage.base import MemoryStorage, PersistentState, Storage, StorageStats

__all__ = ["MemoryStorage", "PersistentState", "Storage", "StorageStats"]
