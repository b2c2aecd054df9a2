"""Watch event types and keeper states, numbered as ZooKeeper numbers them
(``Watcher.Event.EventType`` / ``KeeperState``), so a wire codec sends them
unchanged."""

from __future__ import annotations

from enum import IntEnum


class EventType(IntEnum):
    NONE = -1
    NODE_CREATED = 1
    NODE_DELETED = 2
    NODE_DATA_CHANGED = 3
    NODE_CHILDREN_CHANGED = 4
    DATA_WATCH_REMOVED = 5
    CHILD_WATCH_REMOVED = 6
    PERSISTENT_WATCH_REMOVED = 7


class KeeperState(IntEnum):
    DISCONNECTED = 0
    SYNC_CONNECTED = 3
    AUTH_FAILED = 4
    CONNECTED_READ_ONLY = 5
    SASL_AUTHENTICATED = 6
    EXPIRED = -112
    CLOSED = 7


# What applying a txn changed, as the tree reports it: (event type, path), in
# ZooKeeper's order. NODE_CHILDREN_CHANGED names the parent whose children
# changed; NODE_DELETED also ends child watches on that path.
Trigger = tuple[EventType, str]
