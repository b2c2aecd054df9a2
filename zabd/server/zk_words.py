"""ZooKeeper's four-letter words, answered from this server's status.

Sent in place of a connect on ZooKeeper's client port; the answer is text in
ZooKeeper 3.8's format, then the connection closes. Monitoring tools read
``mntr``, kazoo's ``server_version()`` reads ``envi``; the numbers are the
ones ``zabd status`` and ``/metrics`` show.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

# what ZooKeeper's clients parse a version from; zabd speaks its 3.8 protocol
COMPAT_VERSION = "3.8.0"
FOUR_LETTER_WORDS = frozenset({"ruok", "srvr", "stat", "mntr", "conf", "envi", "cons", "wchs", "dirs", "isro"})
_MODES = {"leading": "leader", "following": "follower"}


def _mode(st: dict[str, Any]) -> str:
    return _MODES.get(str(st.get("role", "")), "looking")


def _zk(st: dict[str, Any]) -> dict[str, Any]:
    zk = st.get("zk")
    return zk if isinstance(zk, dict) else {}


def _version(st: dict[str, Any]) -> str:
    return f"{COMPAT_VERSION}-zabd-{st.get('version', '?')}"


def _srvr(st: dict[str, Any]) -> str:
    zk = _zk(st)
    return (
        f"Zookeeper version: {_version(st)}, built on zabd\n"
        "Latency min/avg/max: 0/0.0/0\n"
        "Received: 0\nSent: 0\n"
        f"Connections: {zk.get('connections', 0)}\n"
        f"Outstanding: {st.get('outstanding', 0)}\n"
        f"Zxid: 0x{int(st.get('last_zxid', 0)):x}\n"
        f"Mode: {_mode(st)}\n"
        f"Node count: {zk.get('znodes', 0)}\n"
    )


def _mntr(st: dict[str, Any]) -> str:
    zk = _zk(st)
    rows: list[tuple[str, object]] = [
        ("zk_version", _version(st)),
        ("zk_server_state", _mode(st)),
        ("zk_avg_latency", 0),
        ("zk_max_latency", 0),
        ("zk_min_latency", 0),
        ("zk_packets_received", 0),
        ("zk_packets_sent", 0),
        ("zk_num_alive_connections", zk.get("connections", 0)),
        ("zk_outstanding_requests", st.get("outstanding", 0)),
        ("zk_znode_count", zk.get("znodes", 0)),
        ("zk_watch_count", zk.get("watches", 0)),
        ("zk_ephemerals_count", zk.get("ephemerals", 0)),
        ("zk_global_sessions", zk.get("sessions", 0)),
        ("zk_digest", zk.get("digest", "")),
    ]
    if _mode(st) == "leader":
        rows += [("zk_followers", len(st.get("peers_connected", []))),
                 ("zk_synced_followers", st.get("followers_synced", 0))]
    return "".join(f"{k}\t{v}\n" for k, v in rows)


def _envi() -> str:
    rows = [
        ("zookeeper.version", f"{COMPAT_VERSION}-zabd"),
        ("host.name", socket.gethostname()),
        ("python.version", platform.python_version()),
        ("os.name", platform.system()),
        ("os.arch", platform.machine()),
        ("user.dir", os.getcwd()),
    ]
    return "Environment:\n" + "".join(f"{k}={v}\n" for k, v in rows)


def answer(word: str, st: dict[str, Any], conf: dict[str, Any]) -> str:
    """The text ZooKeeper answers ``word`` with; ``st`` is ``zabd status``'s
    answer, ``conf`` the server's configuration."""
    if word == "ruok":
        return "imok"
    if word == "isro":
        if _mode(st) in ("leader", "follower"):
            return "rw"
        return "ro" if conf.get("zk_read_only") else "null"
    if word == "srvr":
        return _srvr(st)
    if word == "stat":
        return _srvr(st).replace("Latency", "Clients:\n\nLatency", 1)
    if word == "mntr":
        return _mntr(st)
    if word == "envi":
        return _envi()
    if word == "conf":
        return "".join(f"{k}={v}\n" for k, v in sorted(conf.items()))
    if word == "cons":
        return "\n"
    if word == "wchs":
        zk = _zk(st)
        return f"{zk.get('connections', 0)} connections watching paths\nTotal watches:{zk.get('watches', 0)}\n"
    if word == "dirs":
        return "datadir_size: 0\nlogdir_size: 0\n"
    return ""
