"""Watch event types and keeper states, numbered as ZooKeeper numbers them
(``Watcher.Event.EventType`` / ``KeeperState``), so a wire codec sends them
unchanged."""

from __future__ import annotations

from enum import IntEnum

from zabd.zk.acl import ACL


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


# What applying a txn changed, as the tree reports it: (event type, path, the
# ACL an event needs READ on), in ZooKeeper's order. NODE_CHILDREN_CHANGED
# names the parent whose children changed and carries the parent's ACL; the
# others carry the node's own, as it was when the change was applied (a
# deleted node's last one), as ZooKeeper's DataTree hands them to
# WatchManager.triggerWatch since 3.8.4 (CVE-2024-23944). NODE_DELETED also
# ends child watches on that path.
Trigger = tuple[EventType, str, tuple[ACL, ...]]
