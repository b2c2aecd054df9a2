"""ZooKeeper's ``reconfig`` on its client port, as a zabd membership change.

As ZooKeeper 3.8 answers it, in its order: what does not parse is
``BadArguments``, a ``cur_config_id`` other than -1 must be the version in
effect (``BadVersion``), and only a superuser may (``NoAuth``). ``joining``
takes ``server.N=host:quorum:election[:role][;client]`` specs and ``leaving``
ids (comma-separated), ``new_members`` a whole list of specs; a change the
core refuses (two voters at once) is ``BadArguments`` too, and one asked for
before the previous change committed ``ReconfigInProgress``. The answer is
``/zookeeper/config`` once the change is applied here, holding the joining
specs as given. A change whose fate this server cannot tell (no leader, the
leader lost, this server removed by it before applying it) is never an
error code: the connection closes, as ZooKeeper's does.
"""

from __future__ import annotations

from zabd.codec import client as schema
from zabd.codec.members import decode_specs
from zabd.kv.kvmachine import KVMachine
from zabd.protocol.membership import ONE_AT_A_TIME, Membership
from zabd.server.client_session import ClientSession
from zabd.server.proposals import ZK_RECONFIG, ProposalPath, Request
from zabd.server.reconfig import ReconfigError, requested
from zabd.server.zk.conn import ZKConn, ZKWire
from zabd.zk.errors import Code
from zabd.zk.records import DataResult, Reconfig

CONFIG = "/zookeeper/config"


class ZKReconfig:
    def __init__(self, machine: KVMachine, proposals: ProposalPath) -> None:
        self.machine = machine
        self.proposals = proposals
        self.waiting: dict[tuple[int, int], ZKWire] = {}  # (connection, xid) -> its wire

    def request(self, conn: ZKConn, io: ClientSession, xid: int, req: Reconfig) -> None:
        # ZooKeeper 3.8's order (kazoo's TestReconfig relies on it): the
        # request must read, then be of the version in effect, then be a superuser's
        node = self.proposals.node
        try:
            specs, leaving = _parse(req)
        except ValueError:
            io.answer(conn.wire.reply(xid, 0, Code.BAD_ARGUMENTS, None))
            return
        if req.cur_config_id not in (-1, node.membership_zxid):
            io.answer(conn.wire.reply(xid, 0, Code.BAD_VERSION, None))
            return
        if not any(a.scheme == "super" for a in conn.auth):
            io.answer(conn.wire.reply(xid, 0, Code.NO_AUTH, None))
            return
        try:
            new = _membership(node.membership, specs, leaving, whole=bool(req.new_members))
        except ValueError:  # an id out of range, a new member without an address, no change
            io.answer(conn.wire.reply(xid, 0, Code.BAD_ARGUMENTS, None))
            return
        self.waiting[(id(io), xid)] = conn.wire
        self.proposals.submit_membership(io, xid, new, ZK_RECONFIG, self)

    def ok(self, reply: Request, zxid: int, result: object) -> bytes:
        wire = self.waiting.pop((id(reply.session), reply.rid), None)
        tree = self.machine.zk
        node, stat = tree.nodes.get(CONFIG), tree.stat(CONFIG)
        if wire is None or node is None or stat is None:
            return b""
        return wire.reply(reply.rid, zxid, Code.OK, DataResult(node.data, stat))

    def fail(self, reply: Request, code: str, message: str, leader: int = 0) -> bytes:
        wire = self.waiting.pop((id(reply.session), reply.rid), None)
        if wire is None:
            return b""
        if code == schema.BAD_REQUEST:  # refused by the core: nothing was proposed
            err = Code.RECONFIG_IN_PROGRESS if ONE_AT_A_TIME in message else Code.BAD_ARGUMENTS
            return wire.reply(reply.rid, 0, err, None)
        # No leader to take it, or a leader lost (or this server removed) before
        # it applied the change here: the change may have committed or may
        # still be made, so no error code may say it was not. ZooKeeper's
        # client sees its server drop the connection and asks again elsewhere.
        if reply.session is not None:
            reply.session.hang_up()
        return b""


def _parse(req: Reconfig) -> tuple[dict[int, str], list[int]]:
    """The specs named (``new_members`` or ``joining``) and the ids ``leaving``;
    ValueError if they do not read (ids of any size: that is checked later)."""
    specs: dict[int, str] = {}
    for item in (req.new_members or req.joining or "").replace("\n", ",").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, spec = item.partition("=")
        if not sep or not key.startswith("server.") or not key[7:].isdigit():
            raise ValueError(f"not a server spec: {item!r}")
        decode_specs(f"{key[7:]}={spec}".encode())  # its quorum host:port must read
        specs[int(key[7:])] = spec
    return specs, [int(x) for x in (req.leaving or "").split(",") if x.strip()]


def _membership(current: Membership, specs: dict[int, str], leaving: list[int], whole: bool) -> Membership:
    if whole:  # new_members: everything else leaves
        leaving = [n for n in sorted(current.members) if n not in specs]
    add: dict[int, str] = {}
    observe: dict[int, str] = {}
    for node, spec in specs.items():
        role = spec.split(";")[0].split(":")[3:4]
        (observe if role == ["observer"] else add)[node] = spec
    if not (add or observe or leaving):
        raise ReconfigError("no change")
    return requested(current, add, observe, leaving)
