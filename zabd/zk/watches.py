"""One server's watches: who hears of which applied change (ZooKeeper's
``WatchManager``, two of them, as its ``DataTree`` keeps them).

The data table holds data and exist watches (one-shot), persistent watches
and persistent-recursive ones; the child table holds child watches
(one-shot) and persistent ones. A change fires, on the exact path, every
watch there (one-shot ones are then gone); a persistent-recursive watch also
fires for changes below its path, except children-changed events, which only
the child table serves. A delete fires the data table and then the child
table, and nobody hears of it twice. Owners are opaque (a connection): the
order in which they hear of one change is the order their watches were set,
so every run of the same history notifies the same way.

An event goes only to an owner whose ids have READ on the ACL the change
carries (the node's own, as it was when changed: a deleted node's last one;
the parent's for children-changed), as ZooKeeper's connections check since
3.8.4 (CVE-2024-23944: a watch on a path would otherwise tell who may not
read a node that it changed, and a persistent-recursive one the paths of
every node below it). A one-shot watch whose event is withheld is used up
all the same, as in ZooKeeper, whose WatchManager removes it before the
check. Events of ``set_watches`` are not checked (ZooKeeper's setWatches
delivers them without an ACL).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from enum import IntEnum
from typing import Any

from zabd.zk.acl import READ, Id, allowed
from zabd.zk.events import EventType, Trigger
from zabd.zk.paths import parent_of

Owner = Hashable
Event = tuple[Any, EventType, str]

STANDARD = 1
PERSISTENT = 2
RECURSIVE = 4


class WatchKind(IntEnum):
    DATA = 1  # getData, or exists on an existing node
    EXIST = 2  # exists on a missing node (kept with the data watches, as ZooKeeper does)
    CHILD = 3  # getChildren
    PERSISTENT = 4  # addWatch(PERSISTENT)
    PERSISTENT_RECURSIVE = 5  # addWatch(PERSISTENT_RECURSIVE)


# removeWatches/checkWatches watcher types (ZooKeeper's WatcherType numbers)
CHILDREN = 1
DATA = 2
ANY = 3
PERSISTENT_TYPE = 4
PERSISTENT_RECURSIVE_TYPE = 5


class _Table:
    __slots__ = ("by_path", "by_owner", "recursive")

    def __init__(self) -> None:
        self.by_path: dict[str, dict[Owner, int]] = {}
        self.by_owner: dict[Owner, dict[str, int]] = {}
        self.recursive = 0  # watches with the RECURSIVE mode: parents are walked only when > 0

    def add(self, owner: Owner, path: str, mode: int) -> None:
        owners = self.by_path.setdefault(path, {})
        old = owners.get(owner, 0)
        if old & mode:
            return
        owners[owner] = old | mode
        self.by_owner.setdefault(owner, {})[path] = old | mode
        if mode == RECURSIVE:
            self.recursive += 1

    def _set(self, owner: Owner, path: str, old: int, new: int) -> None:
        if old & RECURSIVE and not new & RECURSIVE:
            self.recursive -= 1
        owners = self.by_path[path]
        paths = self.by_owner[owner]
        if new:
            owners[owner] = new
            paths[path] = new
            return
        del owners[owner]
        if not owners:
            del self.by_path[path]
        del paths[path]
        if not paths:
            del self.by_owner[owner]

    def remove(self, owner: Owner, path: str, mode: int | None) -> bool:
        """Remove ``mode`` (None: every mode) of ``owner`` on ``path``."""
        old = self.by_path.get(path, {}).get(owner, 0)
        if not old or (mode is not None and not old & mode):
            return False
        self._set(owner, path, old, 0 if mode is None else old & ~mode)
        return True

    def has(self, owner: Owner, path: str, mode: int | None) -> bool:
        got = self.by_path.get(path, {}).get(owner, 0)
        return bool(got) if mode is None else bool(got & mode)

    def drop(self, owner: Owner) -> None:
        for path, mode in list(self.by_owner.get(owner, {}).items()):
            self._set(owner, path, mode, 0)

    def trigger(self, path: str, suppress: set[Owner] | None = None) -> list[Owner]:
        """Who hears of a change at ``path`` (one-shot watches there are used up)."""
        fired: dict[Owner, None] = {}
        owners = self.by_path.get(path)
        if owners:
            for owner, mode in list(owners.items()):
                fired[owner] = None
                if mode & STANDARD:
                    self._set(owner, path, mode, mode & ~STANDARD)
        if self.recursive and path != "/":
            p = path
            while p != "/":
                p = parent_of(p)
                for owner, mode in self.by_path.get(p, {}).items():
                    if mode & RECURSIVE:
                        fired[owner] = None
        if suppress:
            return [o for o in fired if o not in suppress]
        return list(fired)

    def count(self) -> int:
        return sum(len(owners) for owners in self.by_path.values())


class WatchManager:
    def __init__(self) -> None:
        self.data = _Table()
        self.child = _Table()

    # ---------------------------------------------------------------- setting

    def add(self, owner: Owner, path: str, kind: WatchKind) -> None:
        if kind in (WatchKind.DATA, WatchKind.EXIST):
            self.data.add(owner, path, STANDARD)
        elif kind == WatchKind.CHILD:
            self.child.add(owner, path, STANDARD)
        elif kind == WatchKind.PERSISTENT:
            self.data.add(owner, path, PERSISTENT)
            self.child.add(owner, path, PERSISTENT)
        else:
            self.data.add(owner, path, RECURSIVE)

    def remove(self, owner: Owner, path: str, watcher_type: int) -> bool:
        """ZooKeeper's removeWatches: False if there was no such watch."""
        if watcher_type == CHILDREN:
            return self.child.remove(owner, path, STANDARD)
        if watcher_type == DATA:
            return self.data.remove(owner, path, STANDARD)
        if watcher_type == PERSISTENT_TYPE:
            removed = self.child.remove(owner, path, PERSISTENT)
            return self.data.remove(owner, path, PERSISTENT) or removed
        if watcher_type == PERSISTENT_RECURSIVE_TYPE:
            return self.data.remove(owner, path, RECURSIVE)
        if watcher_type == ANY:
            removed = self.child.remove(owner, path, None)
            return self.data.remove(owner, path, None) or removed
        return False

    def contains(self, owner: Owner, path: str, watcher_type: int) -> bool:
        """ZooKeeper's checkWatches."""
        if watcher_type == CHILDREN:
            return self.child.has(owner, path, STANDARD)
        if watcher_type == DATA:
            return self.data.has(owner, path, STANDARD)
        if watcher_type == PERSISTENT_TYPE:
            return self.data.has(owner, path, PERSISTENT)
        if watcher_type == PERSISTENT_RECURSIVE_TYPE:
            return self.data.has(owner, path, RECURSIVE)
        if watcher_type == ANY:
            return self.child.has(owner, path, None) or self.data.has(owner, path, None)
        return False

    def drop(self, owner: Owner) -> None:
        """The owner's connection is gone: all its watches with it."""
        self.data.drop(owner)
        self.child.drop(owner)

    # ---------------------------------------------------------------- firing

    def trigger(self, triggers: Iterable[Trigger], auth_of: Callable[[Any], Sequence[Id]]) -> list[Event]:
        """The events of applied changes; ``auth_of(owner)``: the ids an owner
        proved (an ip, digests, super), checked for READ on each change's ACL."""
        data, child = self.data, self.child
        if not (data.by_path or child.by_path):
            return []  # every write asks: most often nobody watches
        out: list[Event] = []
        for kind, path, acl in triggers:
            if kind == EventType.NODE_CHILDREN_CHANGED:
                owners = child.trigger(path) if child.by_path else []
            elif kind == EventType.NODE_DELETED:
                owners = data.trigger(path) if data.by_path else []
                if child.by_path:
                    owners += child.trigger(path, set(owners))
            else:
                owners = data.trigger(path) if data.by_path else []
            # the watches fired are used up above, whoever may read: withheld events are not put back
            out.extend((owner, kind, path) for owner in owners if allowed(acl, READ, auth_of(owner)))
        return out

    def set_watches(self, owner: Owner, relative_zxid: int, data: Sequence[str], exist: Sequence[str],
                    child: Sequence[str], persistent: Sequence[str], persistent_recursive: Sequence[str],
                    stat_of: Callable[[str], Any]) -> list[Event]:
        """Watches a client re-registers after a reconnect, with the last zxid
        it saw: what changed since fires now instead (ZooKeeper's setWatches)."""
        out: list[Event] = []
        for path in data:
            st = stat_of(path)
            if st is None:
                out.append((owner, EventType.NODE_DELETED, path))
            elif st.mzxid > relative_zxid:
                out.append((owner, EventType.NODE_DATA_CHANGED, path))
            else:
                self.data.add(owner, path, STANDARD)
        for path in exist:
            if stat_of(path) is not None:
                out.append((owner, EventType.NODE_CREATED, path))
            else:
                self.data.add(owner, path, STANDARD)
        for path in child:
            st = stat_of(path)
            if st is None:
                out.append((owner, EventType.NODE_DELETED, path))
            elif st.pzxid > relative_zxid:
                out.append((owner, EventType.NODE_CHILDREN_CHANGED, path))
            else:
                self.child.add(owner, path, STANDARD)
        for path in persistent:
            self.add(owner, path, WatchKind.PERSISTENT)
        for path in persistent_recursive:
            self.add(owner, path, WatchKind.PERSISTENT_RECURSIVE)
        return out

    # ------------------------------------------------------------ monitoring

    def __len__(self) -> int:
        return self.data.count() + self.child.count()

    @property
    def paths(self) -> int:
        return len(self.data.by_path.keys() | self.child.by_path.keys())

    def by_owner(self) -> dict[Owner, list[str]]:
        """Each owner's watched paths (ZooKeeper's ``wchc``)."""
        out: dict[Owner, set[str]] = {}
        for table in (self.data, self.child):
            for owner, paths in table.by_owner.items():
                out.setdefault(owner, set()).update(paths)
        return {o: sorted(p) for o, p in out.items()}

    def by_path(self) -> dict[str, list[Owner]]:
        """Each watched path's owners (ZooKeeper's ``wchp``)."""
        out: dict[str, dict[Owner, None]] = {}
        for table in (self.data, self.child):
            for path, owners in table.by_path.items():
                out.setdefault(path, {}).update(dict.fromkeys(owners))
        return {p: list(o) for p, o in sorted(out.items())}
