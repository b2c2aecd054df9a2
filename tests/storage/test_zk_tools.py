"""``zabd log dump`` and ``zabd log verify`` of a data directory that holds
ZooKeeper txns: decoded lines, and a replay of the snapshot + committed log
through the state machine (KV + ZooKeeper tree), written the way the server
writes them (``DiskStorage``)."""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import cast

import pytest

from tests.client.cli_support import zabd
from tests.storage.zk_log import Recording, workload, write_dir
from zabd.client.cli import log_main
from zabd.kv import KV_MAGIC, KVMachine
from zabd.kv.kvmachine import SNAP_MAGIC
from zabd.kv.replay import Replay, replay_log
from zabd.kv.store import KVLeader, KVStore, Put
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.storage.tools import verify
from zabd.zk import txn as tx
from zabd.zk.tree import DataTree

OPEN = [[31, "world", "anyone"]]


def mixed_log() -> tuple[Recording, list[Txn]]:
    """ZooKeeper txns, then a KV put and a raw proposal after them."""
    zk = Recording()
    workload(zk, 3)
    txns = list(zk.txns)
    z = zk.zxid
    txns.append(Txn(z + 1, KV_MAGIC + KVLeader(KVStore()).prepare(Put("colour", b"blue"))))
    txns.append(Txn(z + 2, b"just bytes"))
    return zk, txns


def test_dump_shows_zookeeper_txns_decoded_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zk, txns = mixed_log()
    write_dir(tmp_path, txns, commit=txns[-1].zxid)
    assert log_main(["dump", str(tmp_path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("zxid=")]
    assert len(lines) == len(txns)
    by_zxid = {ln.split()[0].removeprefix("zxid="): ln.split("\t", 1)[1] if "\t" in ln else "" for ln in lines}
    (s1,) = zk.tree.sessions  # the session left open
    assert re.fullmatch(r"zk session 0x[0-9a-f]+ createSession \(timeout 5000 ms\)", by_zxid["1:1"])
    assert by_zxid["1:3"] == f'zk session 0x{s1:x} create /app "config v1" (persistent, parent cversion 1)'
    assert re.fullmatch(
        r'zk session (0x[0-9a-f]+) create /app/lock-0000000000 "me" \(ephemeral, parent cversion 1\)', by_zxid["1:4"]
    )
    # binary data: its length and first bytes in hex
    assert by_zxid["1:5"].endswith(
        f"setData /app <40 bytes {bytes(range(16)).hex()}...> (version 1)"
    ), by_zxid["1:5"]
    assert by_zxid["1:10"].endswith('multi [create /m "" (persistent, parent cversion 2); '
                                    'create /m/x "x" (persistent, parent cversion 1)]')
    assert by_zxid["1:11"].endswith("delete /m/x")
    assert by_zxid["1:12"].endswith("error NODE_EXISTS (-110)")
    assert by_zxid["1:13"].endswith(
        "closeSession (deletes /app/lock-0000000000, /app/lock-0000000001, /app/lock-0000000002)"
    )
    assert by_zxid["1:14"] == "put colour=blue (version 1)"
    assert by_zxid["1:15"] == ""  # a raw proposal: nothing to decode
    # the real command, in a subprocess: the same lines
    r = zabd("log", "dump", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("zxid=")] == lines


def test_verify_replays_snapshot_and_log_to_the_tree_digest(tmp_path: Path) -> None:
    zk, txns = mixed_log()
    write_dir(tmp_path, txns, commit=txns[-1].zxid, snap_at=zx.make(1, 6))
    problems, notes = verify(str(tmp_path), replay_log)
    assert problems == []
    tree = zk.tree
    assert f"replay: snapshot 1:6 + {len(txns) - 6} committed txns to 1:{len(txns)}" in notes
    assert (
        f"tree: {len(tree)} znodes, {len(tree.sessions)} sessions, digest {tree.digest:016x} "
        f"at zxid {zx.fmt(tree.applied)}; kv: 1 keys" in notes
    )
    r = zabd("log", "verify", "-v", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"digest {tree.digest:016x} at zxid 1:13" in r.stdout and r.stdout.endswith(f"{tmp_path}: ok\n")
    # without the replay (the storage layer alone), the checks of the files only
    problems, notes = verify(str(tmp_path))
    assert problems == [] and not any(n.startswith("tree:") for n in notes)


def test_verify_replays_past_committed_txns_no_replica_can_apply(tmp_path: Path) -> None:
    _, txns = mixed_log()
    z = txns[-1].zxid
    # an ephemeral owner beyond 64 signed bits (the tree cannot store it: once, a
    # struct.error that stopped every replica) and a truncated body: both refused
    # whole, alike on every replica, and the replay goes on past them
    unstorable = tx.encode(tx.T_CREATE, 1, 5, "/bad", b"", OPEN, 2**64 - 1, 9)
    truncated = tx.ZK_MAGIC + b"\x93\x01"
    later = tx.encode(tx.T_CREATE, 1, 5, "/after", b"", OPEN, 0, 1)
    txns += [Txn(z + 1, truncated), Txn(z + 2, unstorable), Txn(z + 3, later), Txn(z + 4, b"uncommitted")]
    write_dir(tmp_path, txns, commit=z + 3)
    problems, notes = verify(str(tmp_path), replay_log)
    assert problems == []
    assert f"replay: 2 malformed txns skipped as every replica skips them (first at {zx.fmt(z + 1)})" in notes
    assert any(n.startswith(f"replay: snapshot 0:0 + {len(txns) - 1} committed txns") and "1 above the commit" in n
               for n in notes), notes
    replay = Replay()
    for t in txns[:-1]:
        replay.apply(t.zxid, t.payload)
    assert "/after" in replay.tree.nodes and "/bad" not in replay.tree.nodes
    r = zabd("log", "verify", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr


def _tree_with_wrong_digest(tree: DataTree) -> bytes:
    applied, digest, nodes, sessions = cast(tuple[int, int, object, object], tree.snapshot_view())
    return DataTree.encode_view((applied, digest ^ 1, nodes, sessions))


def test_verify_flags_a_snapshot_whose_tree_is_inconsistent(tmp_path: Path) -> None:
    _, txns = mixed_log()
    m = KVMachine()
    for t in txns[:6]:
        m.apply(t)
    kv = m.store.snapshot()
    bad = SNAP_MAGIC + struct.pack("<Q", len(kv)) + kv + _tree_with_wrong_digest(m.zk)
    write_dir(tmp_path, txns, commit=txns[-1].zxid, snap_at=zx.make(1, 6), snap_data=bad)
    problems, notes = verify(str(tmp_path), replay_log)
    snap = os.path.join(str(tmp_path), "snap", "snap.0000000100000006")
    assert len(problems) == 1 and problems[0].startswith(
        f"{snap}: snapshot 1:6: does not restore (KV + ZooKeeper tree): ValueError: ZooKeeper tree snapshot digest"
    ), problems
    # a snapshot of another kind of machine (not KV + tree) is not this check's to judge
    other = tmp_path / "other"
    write_dir(other, txns, commit=txns[-1].zxid, snap_at=zx.make(1, 6), snap_data=b"some other machine's state")
    problems, notes = verify(str(other), replay_log)
    assert problems == [] and any(n.startswith("replay: skipped, snapshot 1:6 is not a KV machine's") for n in notes)
