"""zkCli.sh, ZooKeeper's own shell, against a zabd cluster and a ZooKeeper
3.8 ensemble in one run: the same scripted session prints the same output,
apart from zxids, times and session ids."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.zkcluster import ZkCluster, available
from zabd.client.spawn import LocalCluster

ZKCLI = Path("/usr/share/zookeeper/bin/zkCli.sh")
SESSION = """\
create /app hello
create -s /app/seq- x
create -s /app/seq- y
create -e /app/eph e
ls /app
ls -s /app
get -s /app
set -v 0 /app world
set -v 0 /app again
get /app
stat /app/eph
getAcl /app
addauth digest alice:secret
setAcl /app auth:alice:secret:cdrwa
getAcl /app
create /app/child c
sync /app
delete -v 7 /app/eph
delete /app/eph
delete /app
get /nope
ls /
quit
"""
pytestmark = pytest.mark.skipif(not ZKCLI.exists() or not available()[0],
                                reason="needs Debian's zookeeper package (bash scripts/install.sh installs it)")


def zkcli(server: str) -> str:
    proc = subprocess.run([str(ZKCLI), "-server", server], input=SESSION, capture_output=True, text=True,
                          timeout=120)
    return proc.stdout + proc.stderr


def normalised(out: str) -> list[str]:
    """What may differ between two servers: zxids, times, session ids, the address."""
    lines = []
    for line in out.splitlines():
        if line.startswith(("SLF4J:", "Connecting to", "JLine")) or not line.strip():
            continue
        line = re.sub(r"0x[0-9a-f]+", "0x_", line)
        line = re.sub(r"^(ctime|mtime) = .*", r"\1 = _", line)
        lines.append(line)
    return lines


def test_a_zkcli_session_prints_the_same_against_zabd_and_zookeeper(
    tmp_path: Path, cluster_factory: Callable[..., LocalCluster]
) -> None:
    zk = ZkCluster(3, tmp_path / "zookeeper")
    try:
        zk.start()
        reference = zkcli(zk.client_addr(1))
    finally:
        zk.stop()
    cluster = cluster_factory(3)
    asyncio.run(cluster.wait_leader())
    ours = zkcli(cluster.zk_addr(1))
    expected = normalised(reference)
    assert "Created /app/seq-0000000001" in expected and "Node does not exist: /nope" in expected, reference
    assert normalised(ours) == expected
