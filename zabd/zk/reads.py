"""Reads, served by the replica that holds the session's connection, from
its own tree (ZooKeeper's ``FinalRequestProcessor`` for the read opcodes):
the ACL checks and the answers, no watches (the session layer sets those)."""

from __future__ import annotations

from collections.abc import Sequence

from zabd.zk import acl as acls
from zabd.zk.acl import ACL, Id
from zabd.zk.errors import Code, ZKError
from zabd.zk.records import (
    ACLResult,
    ChildrenResult,
    CountResult,
    DataResult,
    ErrorResult,
    Exists,
    ExistsResult,
    GetACL,
    GetAllChildrenNumber,
    GetChildren,
    GetData,
    GetEphemerals,
    PathsResult,
    Read,
    ReadResult,
)
from zabd.zk.tree import DataTree, ZNode


def _node(tree: DataTree, path: str, perm: int, auth: Sequence[Id]) -> ZNode:
    # ZooKeeper's tree also keeps the root under "": a read of "" is one of "/"
    node = tree.nodes.get(path or "/")
    if node is None:
        raise ZKError(Code.NO_NODE, path)
    acls.check(node.acl, perm, auth, path)
    return node


def _redacted(acl: tuple[ACL, ...]) -> tuple[ACL, ...]:
    # without ADMIN a client sees who may do what, not the digests
    return tuple(ACL(a.perms, acls.Id(a.id.scheme, a.id.id.split(":", 1)[0] + ":x")) if a.id.scheme == "digest"
                 else a for a in acl)


def serve(tree: DataTree, req: Read, auth: Sequence[Id], session: int) -> ReadResult:
    """The answer to ``req`` from this tree (an ErrorResult on failure)."""
    try:
        if isinstance(req, GetData):
            node = _node(tree, req.path, acls.READ, auth)
            return DataResult(node.data, node.stat())
        if isinstance(req, Exists):
            if "\0" in req.path:
                raise ZKError(Code.BAD_ARGUMENTS, req.path)
            found = tree.nodes.get(req.path or "/")
            if found is None:
                return ExistsResult(None)
            # ZOOKEEPER-2590 (3.8.4+): the stat of an existing node needs READ
            acls.check(found.acl, acls.READ, auth, req.path)
            return ExistsResult(found.stat())
        if isinstance(req, GetChildren):
            node = _node(tree, req.path, acls.READ, auth)
            return ChildrenResult(tree.children_of(req.path or "/"), node.stat() if req.with_stat else None)
        if isinstance(req, GetACL):
            node = _node(tree, req.path, acls.READ | acls.ADMIN, auth)
            acl = node.acl if acls.allowed(node.acl, acls.ADMIN, auth) else _redacted(node.acl)
            return ACLResult(acl, node.stat())
        if isinstance(req, GetEphemerals):
            mine = tree.ephemerals_of(session)
            prefix = req.prefix.strip()
            if prefix and prefix != "/":
                mine = [p for p in mine if p.startswith(req.prefix)]
            return PathsResult(mine)
        if isinstance(req, GetAllChildrenNumber):
            _node(tree, req.path, acls.READ, auth)
            return CountResult(tree.descendants(req.path or "/"))
    except ZKError as exc:
        return ErrorResult(exc.code)
    raise TypeError(f"{req!r} is not a ZooKeeper read")
