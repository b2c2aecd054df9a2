"""``zabd compose``: docker-compose files for an N-node cluster.

Every node is configured only through ``ZABD_*`` environment variables (the
same fields as the TOML file, named and spelled by the config model's
``to_env``), keeps its log on disk in a named volume at
/data (so it survives ``down`` and ``up``; ``down -v`` deletes it), publishes
its client port on the host's loopback only as 127.0.0.1:7000+i and
ZooKeeper's client port as 127.0.0.1:2180+i (2181, 2182, ...), and has a
healthcheck on the admin port's ``/health`` (200 while the node serves).

The files carry no top-level ``name:``: Compose v1 (Debian's docker-compose
1.29) rejects it, so the project name is given with ``-p NAME``.

``--tls`` writes the secure variant: mutual TLS between the nodes and TLS on
the client port (client certificates optional), with the PEM files of
``zabd certs`` mounted read-only at /tls from ``$ZABD_TLS_DIR`` (default
``./tls`` beside the compose file). The image runs as uid 10001, so the keys
must be readable by it: ``zabd certs --owner 10001`` sees to that.

    zabd compose --nodes 5 -o deploy/docker-compose.5.yml
    zabd compose --nodes 3 --tls -o deploy/docker-compose.tls.yml
    zabd compose --nodes 5 --members 3 -o deploy/docker-compose.grow5.yml

``--members M`` writes the services of a cluster that grows: nodes 1..M are
the ones of the M-node file, the others start with ``ZABD_JOIN=true`` (outside
the membership) until ``zabd reconfig`` adds them. Run in the same project as
the M-node file (same ``-p``) with ``up -d`` of the new services only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from zabd.config import to_env

PEER_PORT = 2888
ELECTION_PORT = 3888  # ZooKeeper's election port: zabd takes the same peer links there (docs/zookeeper.md)
CLIENT_PORT = 7000
HOST_CLIENT_BASE = 7000
ADMIN_PORT = 8080
ZK_PORT = 2181  # ZooKeeper's client port, as in ZooKeeper
HOST_ZK_BASE = 2180
IMAGE_UID = 10001  # the Dockerfile's user: TLS keys mounted into the container must be readable by it
TLS_MOUNT = "${ZABD_TLS_DIR:-./tls}:/tls:ro"
# The image is python:3.11-slim (no curl): ask /health with Python itself.
# Any failure (refused, timeout, 503 while there is no quorum) exits 1 with one line.
HEALTH_PROBE = (
    "import sys, urllib.request as u\n"
    "try:\n"
    f"    u.urlopen('http://127.0.0.1:{ADMIN_PORT}/health', timeout=2)\n"
    "except Exception as e:\n"
    "    sys.exit(f'unhealthy: {e}')"
)


def spec(i: int) -> str:
    """Node ``i``'s ZooKeeper server spec, as ZooKeeper's own images write it:
    /zookeeper/config then shows ``zabdI:2888:3888:participant;0.0.0.0:2181``,
    which ZooKeeper's clients (Curator's EnsembleTracker, zkCli ``config``)
    read as ``zabdI:2181``."""
    return f"zabd{i}:{PEER_PORT}:{ELECTION_PORT};{ZK_PORT}"


def services(
    n: int,
    *,
    storage: str = "disk",
    image: str = "zabd:latest",
    tick_ms: int = 10,
    context: str = ".",
    tls: bool = False,
    members: int = 0,
) -> dict[str, Any]:
    """The compose document as plain data (also what the tests check).

    ``context`` is the build context (the folder with the Dockerfile)
    relative to the compose file's folder: Compose resolves it from there."""
    members = members or n
    peers = {i: spec(i) for i in range(1, members + 1)}
    doc: dict[str, Any] = {"services": {}, "volumes": {}}
    for i in range(1, n + 1):
        fields: dict[str, Any] = {
            "id": i,
            # a node that joins later lists the first members and itself
            "peers": peers if i <= members else peers | {i: spec(i)},
            "client": f"0.0.0.0:{CLIENT_PORT}",
            "data_dir": "/data",
            "storage": storage,
            "tick_ms": tick_ms,
            # the same on every node (the core mixes in the id itself)
            "seed": 1,
            "admin": f"0.0.0.0:{ADMIN_PORT}",
            "zookeeper": f"0.0.0.0:{ZK_PORT}",
        }
        if i > members:
            fields["join"] = True
        if tls:
            fields |= {"tls_ca": "/tls/ca.pem", "tls_cert": f"/tls/node{i}.pem", "tls_key": f"/tls/node{i}.key",
                       "tls_peer": True, "tls_client": True, "tls_client_certs": "optional"}
        doc["services"][f"zabd{i}"] = {
            "image": image,
            "build": context,
            "hostname": f"zabd{i}",
            "command": ["serve"],
            # the certificates are the container's (/tls), so the model cannot read them here:
            # the fields are written, not checked (tests/client/test_compose.py loads them)
            "environment": to_env(fields),
            # loopback only: the client ports have no authentication by default
            "ports": [f"127.0.0.1:{HOST_CLIENT_BASE + i}:{CLIENT_PORT}", f"127.0.0.1:{HOST_ZK_BASE + i}:{ZK_PORT}"],
            "volumes": [f"zabd{i}-data:/data"] + ([TLS_MOUNT] if tls else []),
            "healthcheck": {
                "test": ["CMD", "python3", "-c", HEALTH_PROBE],
                "interval": "5s",
                "timeout": "3s",
                "retries": 3,
                "start_period": "10s",
            },
            "stop_signal": "SIGTERM",
            "stop_grace_period": "10s",
            # brings a node back after a crash or a daemon restart, not after
            # `docker kill` or `stop` (those count as stopped by hand): then
            # `docker-compose -p NAME start zabdI` (or `up -d`)
            "restart": "unless-stopped",
        }
        doc["volumes"][f"zabd{i}-data"] = {}
    return doc


def _scalar(v: Any) -> str:
    # JSON strings are valid YAML double-quoted scalars
    return json.dumps(v) if isinstance(v, str) else str(v)


def _emit(value: Any, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict) and v:
                out.append(f"{pad}{k}:")
                _emit(v, indent + 1, out)
            elif isinstance(v, dict):
                out.append(f"{pad}{k}: {{}}")
            elif isinstance(v, list):
                out.append(f"{pad}{k}:")
                for item in v:
                    out.append(f"{pad}  - {_scalar(item)}")
            else:
                out.append(f"{pad}{k}: {_scalar(v)}")
    else:
        raise TypeError(value)


def render(n: int, **kw: Any) -> str:
    ports = ", ".join(str(HOST_CLIENT_BASE + i) for i in range(1, n + 1))
    zk_ports = ",".join(f"127.0.0.1:{HOST_ZK_BASE + i}" for i in range(1, n + 1))
    tls = kw.get("tls", False)
    members = kw.get("members", 0)
    flags = (" --tls" if tls else "") + (f" --members {members}" if members else "")
    lines = [
        f"# {n}-node zabd cluster; generated by `zabd compose --nodes {n}{flags}` (deploy/compose.py). "
        "Do not edit by hand.",
        f"# Client ports on the host (127.0.0.1 only): {ports}; ZooKeeper's: {zk_ports}",
        f"#   (zkCli.sh -server 127.0.0.1:{HOST_ZK_BASE + 1}; kazoo: KazooClient(hosts=\"{zk_ports}\")).",
        f"# Run: docker-compose -p zabd{n} -f FILE up -d --build   (no `name:` key: Compose v1 rejects it)"
        if not members else
        f"# Grow a running {members}-node project: docker-compose -p PROJECT -f FILE up -d --build "
        + " ".join(f"zabd{i}" for i in range(members + 1, n + 1)) + ", then\n"
        "#   docker-compose -p PROJECT -f FILE exec -T zabd1 zabd reconfig --servers "
        + ",".join(f"zabd{i}:{CLIENT_PORT}" for i in range(1, members + 1)) + " "
        "--voters '" + ",".join(str(i) if i <= members else f"{i}={spec(i)}" for i in range(1, n + 1)) + "'",
        f"# A node stopped by hand (docker kill/stop) stays down: docker-compose -p zabd{n} -f FILE start zabdI",
    ]
    if tls:
        lines += [
            f"# TLS on both ports. First: zabd certs --out tls --nodes {n} --owner {IMAGE_UID}   (beside this file,",
            "# or anywhere with ZABD_TLS_DIR=DIR); clients: --ca tls/ca.pem [--cert tls/client1.pem --key ...]",
        ]
    _emit(services(n, **kw), 0, lines)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="zabd compose", description="write a docker-compose file for N nodes")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--storage", choices=("memory", "disk"), default="disk")
    p.add_argument("--image", default="zabd:latest")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p.add_argument("--tls", action="store_true", help="TLS on both ports, certificates from zabd certs at /tls")
    p.add_argument("--members", type=int, default=0,
                   help="nodes 1..M form the ensemble; the others join later (zabd reconfig)")
    p.add_argument(
        "--build-context",
        help="folder with the Dockerfile, relative to the output file's folder "
        "(default: the current directory, as seen from there)",
    )
    args = p.parse_args(argv)
    if not 1 <= args.nodes <= 255:
        print(f"zabd compose: --nodes {args.nodes}: expected 1..255", file=sys.stderr)
        return 2
    context = args.build_context
    if context is None:
        out_dir = os.path.dirname(os.path.abspath(args.output)) if args.output else os.getcwd()
        context = os.path.relpath(os.getcwd(), out_dir)
    if not 0 <= args.members <= args.nodes:
        print(f"zabd compose: --members {args.members}: expected 0..{args.nodes}", file=sys.stderr)
        return 2
    text = render(args.nodes, storage=args.storage, image=args.image, context=context, tls=args.tls,
                  members=args.members)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
