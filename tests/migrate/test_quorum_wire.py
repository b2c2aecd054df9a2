"""The observer's side of ZooKeeper's quorum protocol, driven with bytes
(zabd.zk.quorum_wire), and the mirror's answer to a leader that will not
take it (a real listener that closes every link, as a ZooKeeper with quorum
SASL does to a learner that does not authenticate)."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from zabd.zk import quorum_wire as qw
from zabd.zk.acl import READ_ACL_UNSAFE
from zabd.zk.datadir import ZkFormatError

ROOT = Path(__file__).resolve().parents[2]


def jstr(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">i", len(raw)) + raw


def database() -> bytes:
    """A leader's database after SNAP: one session, one ACL, /, /zookeeper, /a (null data), the signature."""
    out = struct.pack(">i", 1) + struct.pack(">qi", 0x100, 30000)
    out += struct.pack(">i", 1) + struct.pack(">q", 1) + struct.pack(">i", 1) + struct.pack(">i", 1) + jstr("world")
    out += jstr("anyone")
    stat = struct.pack(">qqqqiiiqq", 0, 0, 0, 0, 0, 0, 0, 0, 0)
    out += jstr("") + struct.pack(">i", 0) + struct.pack(">q", -1) + stat
    out += jstr("/zookeeper") + struct.pack(">i", 0) + struct.pack(">q", -1) + stat
    out += jstr("/a") + struct.pack(">i", -1) + struct.pack(">q", 1) + struct.pack(">qqqqiiiqq", 5, 5, 7, 7, 0, 0, 0,
                                                                                   0x100, 5)
    return out + jstr("/") + jstr("BenWasHere")


def stream() -> bytes:
    inform_txn = struct.pack(">qiqqi", 0x100, 1, (1 << 32) | 6, 9, 2) + jstr("/a")  # a delete
    return (qw.packet(qw.LEADERINFO, 1 << 32, struct.pack(">i", 0x10000))
            + qw.packet(qw.SNAP, (1 << 32) | 5) + database()
            + qw.packet(qw.NEWLEADER, 1 << 32, b"server.1=x:1:2")
            + qw.packet(qw.UPTODATE, 0)
            + qw.packet(qw.INFORM, (1 << 32) | 6, inform_txn)
            + qw.packet(qw.PING, 7, None))


@pytest.mark.parametrize("piece", [1, 7, 64, 1000, 1 << 20])
def test_any_piece_size_gives_the_same_events(piece: int) -> None:
    data = stream()
    wire = qw.ObserverWire()
    events: list[object] = []
    for i in range(0, len(data), piece):
        events += wire.feed(data[i : i + piece])
    kinds = [e.type if isinstance(e, qw.Packet) else "db" for e in events]
    assert kinds == [qw.LEADERINFO, qw.SNAP, "db", qw.NEWLEADER, qw.UPTODATE, qw.INFORM, qw.PING]
    db = events[2]
    assert isinstance(db, qw.Database)
    assert db.sessions == {0x100: 30000}
    assert [(p, null) for p, _, _, null in db.rows] == [("/", False), ("/zookeeper", False), ("/a", True)]
    assert db.rows[2][2] == READ_ACL_UNSAFE and db.rows[0][2] != READ_ACL_UNSAFE  # ACL id -1: world:anyone ALL
    assert qw.leader_protocol(events[0].data) == 0x10000  # type: ignore[union-attr]
    assert wire.offset == len(data)


def test_a_stream_that_is_not_a_leaders_is_refused_with_its_offset() -> None:
    wire = qw.ObserverWire("127.0.0.1:1")
    with pytest.raises(ZkFormatError, match=r"127.0.0.1:1: at byte 16: packet data length"):
        wire.feed(struct.pack(">iqi", qw.INFORM, 1, 1 << 30))
    bad_sig = qw.packet(qw.SNAP, 5) + database()[:-len(jstr("BenWasHere"))] + jstr("NotHere")
    with pytest.raises(ZkFormatError, match="not ZooKeeper's signature"):
        qw.ObserverWire().feed(bad_sig)


def test_the_mirror_says_why_when_no_leader_takes_it(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def refuse() -> None:  # reads the OBSERVERINFO, then closes, as a leader that wants quorum auth
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(4096)

    t = threading.Thread(target=refuse, daemon=True)
    t.start()
    try:
        r = subprocess.run([sys.executable, "-m", "zabd", "mirror", "--quorum", f"127.0.0.1:{port}", "--out",
                            str(tmp_path / "out"), "-q"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    finally:
        stop.set()
        t.join()
        listener.close()
    assert r.returncode == 1
    assert "before its LEADERINFO: quorum SASL or TLS" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "zabd", "mirror", "--quorum", "nohost", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 1 and r.stderr.strip() == "zabd mirror: --quorum 'nohost': expected host:quorumPort"
