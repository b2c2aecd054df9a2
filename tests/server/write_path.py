"""The path of one ZooKeeper ``setData`` through a leader, traced: which
modules of ``zabd`` it enters, in order, from the bytes read on ZooKeeper's
port to the reply queued on the connection. CONTRIBUTING.md lists this path;
``test_write_path`` checks that list against this trace.

Run as ``ZABD_PURE=1 python -m tests.server.write_path`` (the compiled
modules make no Python calls a profiler sees): prints the modules entered,
one per line, ``in`` before the txn is proposed, ``out`` after it commits.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from tests.server.zk_conn_fuzz import FakeTransport, Harness, _Capture
from zabd.server.zk.port import ZKClientLink
from zabd.zk import jute
from zabd.zk.acl import OPEN_ACL_UNSAFE
from zabd.zk.records import Create, SetData

OP_CREATE, OP_SET_DATA = 1, 5


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def trace_set_data() -> list[tuple[str, str, str]]:
    """(phase, module, function) of every entry into a zabd module (a call
    from another module) while one setData is read, proposed, committed and
    answered: ``in`` up to the core's ``propose``, ``core`` until the replica
    applies the commit, ``out`` from there to the reply."""
    h = Harness(_Capture())
    t = FakeTransport(("127.0.0.1", 5000))
    link = ZKClientLink(h.replica.transport, h.port)
    h.call(link.connection_made, t)
    h.call(link.data_received, jute.encode_connect(jute.ConnectRequest(0, 0, 30_000, 0, b"", False)))
    h.settle([])
    h.call(link.data_received, jute.encode_request(1, OP_CREATE, Create("/n", b"", list(OPEN_ACL_UNSAFE), 0)))
    h.settle([])
    entries: list[tuple[str, str, str]] = []
    phase = ["in"]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        caller = frame.f_back
        if not callee.startswith("zabd.") or caller is None or _module(caller) == callee:
            return
        name = frame.f_code.co_qualname
        if callee == "zabd.protocol.node" and name == "Node.propose":
            entries.append(("in", callee, name))
            phase[0] = "core"
            return
        if callee == "zabd.server.replica" and name == "Replica.committed":
            phase[0] = "out"
        entries.append((phase[0], callee, name))

    sys.setprofile(profile)
    try:
        h.call(link.data_received, jute.encode_request(2, OP_SET_DATA, SetData("/n", b"x", -1)))
        h.settle([])
    finally:
        sys.setprofile(None)
    h.close()
    frames = jute.FrameReader(1 << 20).feed(bytes(t.out))
    xid, _, err, _ = jute.decode_reply(frames[-1], OP_SET_DATA)
    assert (xid, err) == (2, 0), f"the setData was not answered OK: xid {xid}, error {err}"
    return entries


def main() -> None:
    for phase, module, name in trace_set_data():
        print(phase, module, name)


if __name__ == "__main__":
    main()
