"""Write tests/data/zk38_datadirs: data directories Debian's ZooKeeper 3.8
wrote itself, one per snapshot compression (none, gz, snappy), and the tree
each served before it stopped (``tree.json``: what an import must rebuild).

    python scripts/make_zk_datadir_fixtures.py

Needs ZooKeeper 3.8 (``zookeeper``) and snappy-java (``libsnappy-java``) from
Debian. The tests read the committed files; this only remakes them."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from zabd.zk.acl import digest_id

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "zk38_datadirs"
JARS = ("/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar:"
        "/usr/share/java/snappy-java.jar")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tree_of(c: KazooClient) -> dict[str, object]:
    out: dict[str, object] = {}
    stack = ["/"]
    while stack:
        path = stack.pop()
        data, st = c.get(path)
        acl, _ = c.get_acls(path)
        out[path] = {"data": None if data is None else base64.b64encode(data).decode(), "stat": list(st),
                     "acl": [[a.perms, a.id.scheme, a.id.id] for a in acl]}
        stack.extend(f"{path.rstrip('/')}/{ch}" for ch in c.get_children(path))
    return out


def workload(c: KazooClient) -> None:
    c.create("/app", b"root")
    for i in range(40):
        c.create(f"/app/n{i}", bytes(range(i % 7)) * i)
        c.set(f"/app/n{i}", b"v" * i)
    for i in range(0, 40, 4):
        c.delete(f"/app/n{i}")
    for _ in range(3):
        c.create("/app/seq-", b"s", sequence=True)
    c.create("/null", None)
    c.create("/locked", b"secret", acl=[make_digest_acl("u", "p", all=True)])
    c.set_acls("/app/n1", [make_digest_acl("u", "p", read=True)])
    t = c.transaction()
    t.create("/app/m", b"m")
    t.set_data("/app/n2", b"multi")
    t.delete("/app/n3")
    t.commit()
    t = c.transaction()  # fails: nothing of it applies
    t.create("/app/m2", b"m")
    t.delete("/app/none")
    t.commit()


def make(mode: str) -> None:
    base = Path(tempfile.mkdtemp(prefix=f"zkfix-{mode}-"))
    port = free_port()
    (base / "data").mkdir()
    (base / "zoo.cfg").write_text(
        f"tickTime=2000\ndataDir={base / 'data'}\nclientPortAddress=127.0.0.1\nclientPort={port}\n"
        "admin.enableServer=false\nsnapCount=20\npreAllocSize=16\n")
    # read back as the superuser: ZooKeeper shows a digest ACL's hash only to who may ADMIN the node
    jvm = [f"-Dzookeeper.DigestAuthenticationProvider.superDigest={digest_id('super', 'pw')}"]
    if mode != "plain":
        jvm.append(f"-Dzookeeper.snapshot.compression.method={mode}")
    with open(base / "out.log", "wb") as log:
        proc = subprocess.Popen(["java", "-Xmx128m", *jvm, "-cp", JARS,
                                 "org.apache.zookeeper.server.ZooKeeperServerMain", str(base / "zoo.cfg")],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        c = KazooClient(hosts=f"127.0.0.1:{port}")
        c.start(timeout=60)
        workload(c)
        live = KazooClient(hosts=f"127.0.0.1:{port}")  # its session and ephemeral stay in the data
        live.start()
        live.create("/app/eph", b"e", ephemeral=True)
        c.add_auth("digest", "super:pw")
        tree = tree_of(c)
        session = {"id": live.client_id[0], "password": base64.b64encode(live.client_id[1]).decode()}
        c.stop()
    finally:
        proc.terminate()
        proc.wait(30)
    dest = OUT / mode
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(base / "data" / "version-2", dest / "version-2")
    (dest / "tree.json").write_text(json.dumps({"tree": tree, "live_session": session}, indent=1, sort_keys=True))
    shutil.rmtree(base)
    print(f"{dest}: {sorted(p.name for p in (dest / 'version-2').iterdir())}", file=sys.stderr)


if __name__ == "__main__":
    for m in ("plain", "gz", "snappy"):
        make(m)
        time.sleep(0)
