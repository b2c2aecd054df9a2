"""ZooKeeper's four-letter words on real server processes: the numbers of
``mntr``, ``srvr``, ``stat`` and ``cons`` are counted (packets, latencies,
connections), in ZooKeeper 3.8's format, and ``/metrics`` shows the same
numbers for the same quantities. Only whitelisted words are answered, the
others get ZooKeeper's refusal, byte for byte as Debian's ZooKeeper 3.8
sends it."""

from __future__ import annotations

import asyncio
import re
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from tests.server import real_zk
from tests.server.real_zk import StandaloneZooKeeper, needs_zookeeper, zookeepers
from tests.server.zk_driver import four_letter
from zabd.client.spawn import LocalCluster
from zabd.config import FOUR_LETTER_WORDS, ZK_WORDS
from zabd.server.zk.metrics import NOT_MEASURED
from zabd.zk import jute
from zabd.zk.records import GetData

Factory = Callable[..., LocalCluster]
REQUESTS = 60
ALL = {"zk_4lw_whitelist": "*"}
# lines of ZooKeeper's mntr that are no metric of its ServerMetrics (docs/zookeeper.md)
MNTR_ONLY_ZOOKEEPER: dict[str, str] = {}


def first(text: str) -> str:
    """An answer's first word: ``Zookeeper``, ``imok``, ``zk_version``, ``datadir_size``, ..."""
    return re.split(r"[\s:=]", text, maxsplit=1)[0]


def refused(word: str) -> str:
    """What ZooKeeper 3.8.0 (Debian's, on this machine) answers a word it does not run."""
    return f"{word} is not executed because it is not in the whitelist.\n"


def mntr(addr: str) -> dict[str, str]:
    text = four_letter(addr, "mntr")
    assert text.endswith("\n")
    rows = [line.split("\t") for line in text.splitlines()]
    assert all(len(r) == 2 for r in rows), text
    return dict((k, v) for k, v in rows)


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        body = r.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples}


def test_mntr_counts_packets_and_latency_as_metrics_does(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, admin=True, storage="disk", extra={"zk_tick_ms": 200, **ALL})
    leader = asyncio.run(cluster.wait_leader())
    node = next(i for i in (1, 2, 3) if i != leader)  # a follower: its writes go to the leader and back
    zk = KazooClient(hosts=cluster.zk_addr(node), timeout=4.0)
    zk.start(timeout=15)
    try:
        zk.create("/w", b"")
        zk.create("/w/eph", b"", ephemeral=True)
        for k in range(REQUESTS // 2):
            zk.set("/w", str(k).encode())
            zk.get("/w", watch=lambda event: None)
        stat = four_letter(cluster.zk_addr(node), "stat")
        cons = four_letter(cluster.zk_addr(node), "cons")
        wchs = four_letter(cluster.zk_addr(node), "wchs")
    finally:
        zk.stop()
        zk.close()

    # while the session was open: ZooKeeper's per-connection lines
    assert stat.startswith("Zookeeper version: 3.8.0-zabd-") and "\nClients:\n /127.0.0.1:" in stat
    assert re.search(r"\n /127\.0\.0\.1:\d+\[1\]\(queued=0,recved=\d+,sent=\d+\)\n", stat), stat
    assert "Mode: follower\n" in stat and "Node count: " in stat
    line = next(ln for ln in cons.splitlines() if ",sid=0x" in ln)
    m = re.fullmatch(r" /127\.0\.0\.1:\d+\[1\]\(queued=0,recved=(\d+),sent=(\d+),sid=0x[0-9a-f]+,lop=(\w+),"
                     r"est=\d{13},to=4000,lcxid=0x[0-9a-f]+,lzxid=0x[0-9a-f]+,lresp=\d+,llat=\d+,minlat=\d+,"
                     r"avglat=\d+,maxlat=\d+\)", line)
    assert m, line
    assert int(m.group(1)) >= REQUESTS + 2 and int(m.group(2)) >= REQUESTS + 2 and m.group(3) in ("GETD", "PING")
    assert re.search(r" /127\.0\.0\.1:\d+\[0\]\(queued=0,recved=1,sent=0\)\n", cons), cons  # the cons connection
    assert cons.endswith(")\n\n")
    assert wchs == "1 connections watching 1 paths\nTotal watches:1\n"

    # the load stopped: mntr and /metrics read the same counters
    mntr_text = four_letter(cluster.zk_addr(node), "mntr")
    words = dict(line.split("\t") for line in mntr_text.splitlines())
    answer_packets = -(-len(mntr_text.encode()) // 8192)  # mntr's own answer, counted once written
    exported = metrics(cluster.admin_ports[node])
    assert words["zk_server_state"] == "follower" and words["zk_peer_state"] == "following - broadcast"
    assert int(words["zk_packets_received"]) >= REQUESTS + 2
    assert int(words["zk_packets_sent"]) >= REQUESTS + 2 + REQUESTS // 2 - 1  # answers, and the watches' events
    assert float(words["zk_avg_latency"]) > 0
    assert int(words["zk_min_latency"]) <= float(words["zk_avg_latency"]) <= int(words["zk_max_latency"])
    assert int(words["zk_znode_count"]) >= 3 and int(words["zk_ephemerals_count"]) == 0  # closed with its session
    assert int(words["zk_approximate_data_size"]) > len("/w/zookeeper")
    assert int(words["zk_open_file_descriptor_count"]) > 0 and int(words["zk_max_file_descriptor_count"]) > 0
    assert words["zk_num_alive_connections"] == "1"  # mntr's own, as ZooKeeper counts it
    assert exported["zabd_zk_packets_received_total"] == float(words["zk_packets_received"])
    assert exported["zabd_zk_packets_sent_total"] == float(words["zk_packets_sent"]) + answer_packets
    for key in ("zk_avg_latency", "zk_min_latency", "zk_max_latency", "zk_outstanding_requests", "zk_znode_count",
                "zk_watch_count", "zk_ephemerals_count", "zk_approximate_data_size", "zk_global_sessions",
                "zk_quorum_size"):
        assert exported[f"zabd_{key}"] == float(words[key]), key

    srvr = four_letter(cluster.zk_addr(node), "srvr")
    lat = re.search(r"\nLatency min/avg/max: (\d+)/([\d.]+)/(\d+)\nReceived: (\d+)\nSent: (\d+)\n", srvr)
    assert lat, srvr
    assert float(lat.group(2)) == float(words["zk_avg_latency"])
    assert int(lat.group(4)) == int(words["zk_packets_received"]) + 1  # and srvr's own word
    # and mntr's answer: a packet per 8 KiB, as ZooKeeper counts a word's answer
    assert int(lat.group(5)) == int(words["zk_packets_sent"]) + answer_packets

    leader_words = mntr(cluster.zk_addr(leader))
    assert leader_words["zk_server_state"] == "leader" and leader_words["zk_synced_followers"] == "2"
    assert leader_words["zk_learners"] == "2" and leader_words["zk_quorum_size"] == "3"

    dirs = four_letter(cluster.zk_addr(node), "dirs")
    sizes = re.fullmatch(r"datadir_size: (\d+)\nlogdir_size: (\d+)\n", dirs)
    assert sizes and int(sizes.group(2)) > 0, dirs
    assert float(sizes.group(2)) == metrics(cluster.admin_ports[node])["zabd_log_bytes"]


def test_requests_on_a_bare_connection_are_counted(cluster_factory: Factory) -> None:
    """Every request read is a packet received, every answer one sent; a
    pipelined batch's latencies count from when it was read."""
    cluster = cluster_factory(3, extra={"zk_tick_ms": 200, **ALL})
    asyncio.run(cluster.wait_leader())
    addr = cluster.zk_addr(1)
    before = mntr(addr)
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        reader = jute.FrameReader(1 << 20)
        batch = b"".join(jute.encode_request(x, jute.OP_GET_DATA, GetData("/zookeeper")) for x in range(1, 41))
        s.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, 0, b"", False)) + batch)
        bodies: list[bytes] = []
        while len(bodies) < 41:
            data = s.recv(65536)
            assert data
            bodies += reader.feed(data)
    after = mntr(addr)
    assert int(after["zk_packets_received"]) - int(before["zk_packets_received"]) == 41 + 1  # + mntr's own word
    assert int(after["zk_packets_sent"]) - int(before["zk_packets_sent"]) == 41 + 1  # + the first mntr's answer


def test_a_node_without_a_quorum_is_not_serving(cluster_factory: Factory) -> None:
    """As ZooKeeper: the words that need a serving server say it is not."""
    cluster = cluster_factory(3, extra={"zk_tick_ms": 200, **ALL})
    leader = asyncio.run(cluster.wait_leader())
    alone = next(i for i in (1, 2, 3) if i != leader)
    for i in (1, 2, 3):
        if i != alone:
            cluster.kill(i)

    async def wait_not_serving() -> None:
        async with asyncio.timeout(30):
            while four_letter(cluster.zk_addr(alone), "isro") != "null":
                await asyncio.sleep(0.05)  # polling the node, not a time window

    asyncio.run(wait_not_serving())
    for word in ("srvr", "stat", "mntr", "cons", "wchs", "dirs", "conf"):
        assert four_letter(cluster.zk_addr(alone), word) == "This ZooKeeper instance is not currently serving " \
                                                           "requests\n", word
    assert four_letter(cluster.zk_addr(alone), "ruok") == "imok"


def test_only_whitelisted_words_are_answered(cluster_factory: Factory) -> None:
    """ZooKeeper's default whitelist is srvr alone: every other word it knows,
    ruok and isro too, gets its refusal (the counters still count it); a list
    adds its words; isro is on in read-only mode; srvr always is."""
    default = cluster_factory(1)
    listed = cluster_factory(1, extra={"zk_4lw_whitelist": " ruok, cons ,,"})
    read_only = cluster_factory(1, extra={"zk_read_only": True, "zk_4lw_whitelist": "mntr"})
    for c in (default, listed, read_only):
        asyncio.run(c.wait_leader())
    addr = default.zk_addr(1)
    assert four_letter(addr, "srvr").startswith("Zookeeper version: 3.8.0-zabd-")
    for word in sorted(ZK_WORDS - {"srvr"}):
        assert four_letter(addr, word) == refused(word), word
    received = re.search(r"\nReceived: (\d+)\n", four_letter(addr, "srvr"))
    assert received and int(received.group(1)) == len(ZK_WORDS) + 1  # every word counted, refused or not

    addr = listed.zk_addr(1)
    assert four_letter(addr, "ruok") == "imok" and "Mode: standalone\n" in four_letter(addr, "srvr")
    assert four_letter(addr, "cons").endswith(")\n\n")
    for word in ("stat", "conf", "mntr", "envi", "isro", "dump"):
        assert four_letter(addr, word) == refused(word), word

    addr = read_only.zk_addr(1)
    assert four_letter(addr, "isro") == "rw" and "zk_server_state\tstandalone\n" in four_letter(addr, "mntr")
    assert four_letter(addr, "ruok") == refused("ruok")


@needs_zookeeper
def test_the_same_words_answered_and_refused_as_zookeeper(tmp_path: Path, cluster_factory: Factory) -> None:
    """Debian's ZooKeeper 3.8 and zabd with the same whitelist, every word
    ZooKeeper knows: a refusal is the same bytes, an answered word is answered
    by both."""
    cases = [  # (zoo.cfg lines, JVM flags, zabd's settings)
        ([], [], {}),
        (["4lw.commands.whitelist=mntr, ruok ,,"], [], {"zk_4lw_whitelist": "mntr, ruok ,,"}),
        (["4lw.commands.whitelist=conf"], ["-Dreadonlymode.enabled=true"], {"zk_4lw_whitelist": "conf",
                                                                          "zk_read_only": True}),
        (["4lw.commands.whitelist=*"], [], {"zk_4lw_whitelist": "*"}),
    ]
    ours = []
    for _, _, extra in cases:
        # one up before the next picks its ports: a port picked free is free only until someone binds it
        ours.append(cluster_factory(1, extra=extra))
        asyncio.run(ours[-1].wait_leader())
    zks = [StandaloneZooKeeper(tmp_path / f"zk{i}", cfg, jvm) for i, (cfg, jvm, _) in enumerate(cases)]
    with zookeepers(*zks):
        for zk, c, (cfg, _, _) in zip(zks, ours, cases, strict=True):
            answered = []
            for word in sorted(ZK_WORDS):
                theirs = real_zk.four_letter(zk.addr, word.encode()).decode()
                mine = four_letter(c.zk_addr(1), word)
                if theirs == refused(word):
                    assert mine == theirs, (cfg, word, mine)
                elif word in FOUR_LETTER_WORDS:  # the others zabd never runs: refused under '*' too
                    answered.append(word)
                    assert mine != refused(word) and mine, (cfg, word, theirs)
                    if word != "conf":  # zabd's own settings, not ZooKeeper's keys
                        assert first(mine) == first(theirs), (cfg, word, mine, theirs)
            assert "srvr" in answered, cfg


def bare_reads(addr: str, n: int) -> None:
    """A ConnectRequest and ``n`` getData of /zookeeper on one connection, every answer read."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        reader = jute.FrameReader(1 << 20)
        batch = b"".join(jute.encode_request(x, jute.OP_GET_DATA, GetData("/zookeeper")) for x in range(1, n + 1))
        s.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 30_000, 0, b"", False)))
        bodies: list[bytes] = []
        while not bodies:  # the session first: ZooKeeper reads nothing else until it exists
            data = s.recv(65536)
            assert data
            bodies += reader.feed(data)
        s.sendall(batch)
        while len(bodies) < n + 1:
            data = s.recv(65536)
            assert data
            bodies += reader.feed(data)


@needs_zookeeper
def test_mntr_row_by_row_as_zookeeper(tmp_path: Path, cluster_factory: Factory) -> None:
    """Debian's ZooKeeper 3.8 and zabd, standalone, the same tree, watches and
    sessions: every key ZooKeeper's mntr prints is printed by zabd, or named
    with its reason in zk_metrics.NOT_MEASURED; the ones with the same
    meaning have the same value, and the counters grow by the same amount
    for the same requests."""
    ours = cluster_factory(1, extra=ALL)
    asyncio.run(ours.wait_leader())
    theirs = StandaloneZooKeeper(tmp_path / "zk", ["4lw.commands.whitelist=*"])
    with zookeepers(theirs):
        addrs = {"zk": theirs.addr, "zabd": ours.zk_addr(1)}
        clients = {}
        config = {}
        for side, addr in addrs.items():
            zk = clients[side] = KazooClient(hosts=addr, timeout=10.0)
            zk.start(timeout=30)
            zk.create("/app", b"")
            zk.create("/app/data", b"x" * 100)
            zk.create("/app/e1", b"eph", ephemeral=True)
            zk.create("/app/e2", b"", ephemeral=True)
            zk.get("/app/data", watch=lambda event: None)
            zk.get_children("/app", watch=lambda event: None)
            zk.exists("/app/none", watch=lambda event: None)
            config[side] = len(zk.get("/zookeeper/config")[0])
        try:
            texts = {side: four_letter(addr, "mntr") for side, addr in addrs.items()}
            rows = before = {side: dict(line.split("\t") for line in text.splitlines()) for side, text in texts.items()}
            for addr in addrs.values():
                bare_reads(addr, 10)
            after = {side: mntr(addr) for side, addr in addrs.items()}
        finally:
            for zk in clients.values():
                zk.stop()
                zk.close()

    theirs_rows, mine = rows["zk"], rows["zabd"]
    missing = []
    for key in theirs_rows:
        # a gauge or counter, a summary's part (zk_avg_<name>, zk_p99_<name>), a summary set's (zk_avg_<key>_<name>)
        name = key.removeprefix("zk_")
        part = re.sub(r"^(avg|min|max|cnt|sum|p50|p95|p99|p999)_", "", name)
        explained = name in NOT_MEASURED or part in NOT_MEASURED or any(part.endswith("_" + n) for n in NOT_MEASURED)
        if key not in mine and not explained and key not in MNTR_ONLY_ZOOKEEPER:
            missing.append(key)
    assert not missing, f"ZooKeeper's mntr prints these and zabd neither prints nor explains them: {missing}"
    for key in ("zk_server_state", "zk_znode_count", "zk_watch_count", "zk_ephemerals_count", "zk_global_sessions",
                "zk_local_sessions", "zk_num_alive_connections", "zk_outstanding_requests"):
        assert mine[key] == theirs_rows[key], (key, mine[key], theirs_rows[key])
    assert mine["zk_znode_count"] == "9"  # the root twice, /zookeeper, its quota and config, /app and its 3
    # ZooKeeper counts every znode's path and data; the config nodes differ (zabd's lists its servers)
    assert (int(mine["zk_approximate_data_size"]) - config["zabd"]
            == int(theirs_rows["zk_approximate_data_size"]) - config["zk"])
    # a standalone ZooKeeper has run no election: zabd elected itself once
    assert theirs_rows["zk_cnt_dbinittime"] == mine["zk_cnt_dbinittime"] == "1"
    # the same requests on the same kind of connection: the counters move alike
    for key in ("zk_packets_received", "zk_packets_sent", "zk_bytes_received_count", "zk_connection_request_count",
                "zk_cnt_readlatency", "zk_cnt_updatelatency"):
        grew = {side: int(after[side][key]) - int(before[side][key]) for side in addrs}
        if key == "zk_packets_sent":  # less the first mntr's answer: a packet per 8 KiB, and ZooKeeper's is longer
            grew = {side: n - -(-len(texts[side].encode()) // 8192) for side, n in grew.items()}
        assert grew["zabd"] == grew["zk"], (key, grew)
    assert int(after["zabd"]["zk_cnt_readlatency"]) - int(before["zabd"]["zk_cnt_readlatency"]) >= 10
