"""ZooKeeper's four-letter words, answered from this server's status.

Sent in place of a connect on ZooKeeper's client port; the answer is text in
ZooKeeper 3.8's format, then the connection closes. Monitoring tools read
``mntr``, kazoo's ``server_version()`` reads ``envi``. The numbers are the
status report's (``zabd status``), and ``mntr_rows`` is also what
``/metrics`` exports as ``zabd_zk_*``: one source for both.

Only the words of ``zk_4lw_whitelist`` are answered, as ZooKeeper 3.8 answers
only those of ``4lw.commands.whitelist`` (its ``FourLetterCommands.isEnabled``):
``cons`` and ``stat`` list client addresses and session ids, ``conf`` and
``envi`` the data directory and the host, so by default anyone who can reach
the port gets ``srvr`` alone. Any other word ZooKeeper knows is answered with
its one-line refusal, byte for byte.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Iterable
from typing import Any, Protocol

# the words' names are the config's (zk_4lw_whitelist is checked against them)
from zabd.config import DEFAULT_WHITELIST, FOUR_LETTER_WORDS
from zabd.server.zk import metrics as zk_metrics
from zabd.server.zk.stats import Client

# what ZooKeeper's clients parse a version from; zabd speaks its 3.8 protocol
COMPAT_VERSION = "3.8.0"
# ZooKeeper's answer to these words while it serves no clients
NEEDS_SERVING = frozenset({"srvr", "stat", "mntr", "conf", "cons", "wchs", "dirs"})
NOT_SERVING = "This ZooKeeper instance is not currently serving requests\n"
_ZAB_STATES = {"none": "discovery", "sync": "synchronization", "broadcast": "broadcast"}
# the mntr lines that are counters (``/metrics`` exports them as such; the others are gauges)
COUNTERS = frozenset({"zk_packets_received", "zk_packets_sent", *(f"zk_{n}" for n in zk_metrics.COUNTERS)})
# the mntr lines that are not ZooKeeper's gauges: text, its counters, or a summary's parts (zk_metrics)
NOT_GAUGES = frozenset({"zk_version", "zk_server_state", "zk_peer_state", "zk_digest",
                        *(f"zk_{n}" for n in zk_metrics.COUNTERS),
                        *zk_metrics.SUMMARY_PARTS})


class Status(Protocol):
    """The server's status report (``zabd.server.status.StatusReport``)."""

    def __call__(self) -> dict[str, Any]: ...

    def dir_bytes(self) -> dict[str, int]: ...


class Server(Protocol):
    """What the words are answered from (``zabd.server.zk.port.ZKPort``)."""

    status: Status
    conf: dict[str, Any]

    def clients(self) -> list[Client]: ...

    def watching(self) -> tuple[int, int, int]: ...


def mode(st: dict[str, Any], read_only: bool = False) -> str | None:
    """ZooKeeper's name of what this server is now; None while it serves no one."""
    if st.get("phase") == "broadcast":
        if st.get("role") == "leading":
            return "leader" if st.get("peers") else "standalone"  # peers: the other nodes
        if st.get("role") == "following":
            return "follower"
        if st.get("role") == "observing":
            return "observer"
    # a node without a quorum: in read-only mode it serves read-only sessions
    return "read-only" if read_only else None


def _zk(st: dict[str, Any]) -> dict[str, Any]:
    zk = st.get("zk")
    return zk if isinstance(zk, dict) else {}


def _version(st: dict[str, Any]) -> str:
    return f"{COMPAT_VERSION}-zabd-{st.get('version', '?')}, built on zabd"


def mntr_rows(st: dict[str, Any], read_only: bool = False) -> list[tuple[str, str | int | float]]:
    """``mntr``'s lines, (key, value), in ZooKeeper 3.8's names."""
    zk = _zk(st)
    m = mode(st, read_only)
    role = str(st.get("role", "looking"))
    zab = _ZAB_STATES.get(str(st.get("phase")), "election") if role != "looking" else "election"
    rows: list[tuple[str, str | int | float]] = [
        ("zk_version", _version(st)),
        ("zk_server_state", m or "looking"),
        ("zk_peer_state", f"{role} - {zab}"),
        ("zk_avg_latency", zk.get("avg_latency", 0.0)),
        ("zk_max_latency", zk.get("max_latency", 0)),
        ("zk_min_latency", zk.get("min_latency", 0)),
        ("zk_packets_received", zk.get("packets_received", 0)),
        ("zk_packets_sent", zk.get("packets_sent", 0)),
        ("zk_num_alive_connections", zk.get("alive_connections", 0)),
        ("zk_outstanding_requests", zk.get("outstanding_requests", 0)),
        ("zk_znode_count", zk.get("znodes", 0)),
        ("zk_watch_count", zk.get("watches", 0)),
        ("zk_ephemerals_count", zk.get("ephemerals", 0)),
        ("zk_approximate_data_size", zk.get("data_bytes", 0)),
        ("zk_open_file_descriptor_count", st.get("open_fds", 0)),
        ("zk_max_file_descriptor_count", st.get("max_fds", 0)),
        ("zk_global_sessions", zk.get("sessions", 0)),
        ("zk_local_sessions", 0),
        ("zk_uptime", int(st.get("role_uptime_ms", 0))),  # ZooKeeper's server object is made anew each election
        ("zk_quorum_size", len(st.get("peers", ())) + 1 - len(st.get("observers", ()))),
        ("zk_digest", zk.get("digest", "")),
    ]
    if m == "leader":
        learners = len(st.get("peers_connected", ()))
        synced = int(st.get("followers_synced", 0))
        observers = int(st.get("observers_synced", 0))
        # a learner that does not vote is an observer here: no non-voting followers
        rows += [("zk_learners", learners), ("zk_synced_followers", synced),
                 ("zk_synced_non_voting_followers", 0), ("zk_synced_observers", observers),
                 ("zk_pending_syncs", int(st.get("syncs_pending", 0)))]  # sync requests, as ZooKeeper's Leader
        if "leader_uptime_ms" in st:
            rows.append(("zk_leader_uptime", int(st["leader_uptime_ms"])))
    return rows + zk_metrics.mntr_rows(st.get("zk_metrics", {}))


def zk_gauges(st: dict[str, Any], read_only: bool = False) -> list[tuple[str, float]]:
    """ZooKeeper's gauges, under its Prometheus names: the numeric lines of
    ``mntr`` that are neither counters nor parts of a summary, less ``zk_``."""
    return [(key[3:], float(value)) for key, value in mntr_rows(st, read_only)
            if key not in NOT_GAUGES and not isinstance(value, str)]


def _latency(zk: dict[str, Any]) -> str:
    return f"Latency min/avg/max: {zk.get('min_latency', 0)}/{zk.get('avg_latency', 0.0)}/{zk.get('max_latency', 0)}\n"


def _srvr(st: dict[str, Any], m: str, clients: list[Client] | None = None) -> str:
    zk = _zk(st)
    head = f"Zookeeper version: {_version(st)}\n"
    if m == "read-only":
        head += "READ-ONLY mode; serving only read-only clients\n"
    if clients is not None:
        head += "Clients:\n" + "".join(_client(c, brief=True) for c in clients) + "\n"
    return (
        head + _latency(zk)
        + f"Received: {zk.get('packets_received', 0)}\n"
        f"Sent: {zk.get('packets_sent', 0)}\n"
        f"Connections: {zk.get('alive_connections', 0)}\n"
        f"Outstanding: {zk.get('outstanding_requests', 0)}\n"
        f"Zxid: 0x{int(st.get('last_committed', 0)):x}\n"
        f"Mode: {m}\n"
        f"Node count: {zk.get('znodes', 0)}\n"
    )


def _client(c: Client, brief: bool) -> str:
    """A line of ``cons`` (``brief``: of ``stat``), as ZooKeeper's dumpConnectionInfo prints it."""
    out = f" {c.addr}[{1 if c.reading else 0}](queued={c.queued},recved={c.received},sent={c.sent}"
    if not brief and c.session:
        out += (f",sid=0x{c.session & (2**64 - 1):x},lop={c.op},est={c.est_ms},to={c.timeout_ms},"
                f"lcxid=0x{c.cxid:x},lzxid=0x{c.zxid:x},lresp={c.last_resp_ms},llat={c.last_ms},"
                f"minlat={c.min_ms},avglat={c.avg_ms},maxlat={c.max_ms}")
    return out + ")\n"


def _envi() -> str:
    rows = [
        ("zookeeper.version", f"{COMPAT_VERSION}-zabd"),
        ("host.name", socket.gethostname()),
        ("python.version", platform.python_version()),
        ("os.name", platform.system()),
        ("os.arch", platform.machine()),
        ("os.version", platform.release()),
        ("user.dir", os.getcwd()),
    ]
    return "Environment:\n" + "".join(f"{k}={v}\n" for k, v in rows)


def enabled_words(whitelist: Iterable[str], read_only: bool) -> frozenset[str]:
    """The words answered, as ZooKeeper's ``FourLetterCommands.isEnabled`` makes
    its set from ``4lw.commands.whitelist``: ``*`` is every word (here: every
    word zabd answers); ``srvr`` is always on (ZooKeeper's zkServer.sh reads
    it); ``isro`` is on in read-only mode, where clients ask it to find a
    read-write server."""
    words = set(FOUR_LETTER_WORDS) if "*" in whitelist else set(whitelist)
    words.add("srvr")
    if read_only:
        words.add("isro")
    return frozenset(words & FOUR_LETTER_WORDS)


def refusal(word: str) -> str:
    """ZooKeeper's answer to a word it knows and does not run (its NopCommand's line)."""
    return f"{word} is not executed because it is not in the whitelist.\n"


def answer(word: str, server: Server) -> str:
    """The text ZooKeeper answers ``word`` with."""
    conf = server.conf
    if word not in enabled_words(conf.get("zk_4lw_whitelist", DEFAULT_WHITELIST), bool(conf.get("zk_read_only"))):
        # before anything else: ZooKeeper checks the whitelist first, serving or not
        return refusal(word)
    if word == "ruok":
        return "imok"
    if word == "envi":
        return _envi()
    st = server.status()
    m = mode(st, bool(server.conf.get("zk_read_only")))
    if word == "isro":
        return "null" if m is None else "ro" if m == "read-only" else "rw"
    if m is None:
        return NOT_SERVING if word in NEEDS_SERVING else ""
    if word == "srvr":
        return _srvr(st, m)
    if word == "stat":
        return _srvr(st, m, server.clients())
    if word == "mntr":
        return "".join(f"{k}\t{v}\n" for k, v in mntr_rows(st, m == "read-only"))
    if word == "conf":
        return "".join(f"{k}={v}\n" for k, v in sorted(server.conf.items()))
    if word == "cons":
        return "".join(_client(c, brief=False) for c in server.clients()) + "\n"
    if word == "wchs":
        conns, paths, total = server.watching()
        return f"{conns} connections watching {paths} paths\nTotal watches:{total}\n"
    if word == "dirs":
        sizes = server.status.dir_bytes()
        return f"datadir_size: {sizes.get('snapshot', 0)}\nlogdir_size: {sizes.get('log', 0)}\n"
    return ""
