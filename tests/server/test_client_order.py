"""FIFO client order on a real cluster: requests pipelined on one connection
commit in the order sent, raw proposals and KV writes mixed, to the leader
and through a follower (ZooKeeper's guarantee)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

import msgpack
import pytest

from zabd.client.spawn import LocalCluster
from zabd.codec.framing import FrameReader

Factory = Callable[..., LocalCluster]


def request(i: int) -> dict[str, object]:
    # every fourth request a put: they used to skip the admission queue
    if i % 4 == 3:
        return {"v": 1, "type": "put", "id": i, "key": f"k{i}", "value": b"v"}
    return {"v": 1, "type": "propose", "id": i, "payload": b"p%d" % i}


async def pipelined(addr: str, count: int) -> list[dict[str, object]]:
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    data = b""
    for i in range(count):
        body = msgpack.packb(request(i))
        data += struct.pack(">I", len(body)) + body
    writer.write(data)  # one write: the server reads them together
    frames = FrameReader(1 << 20, use_list=True)
    answers: list[dict[str, object]] = []
    async with asyncio.timeout(30):
        while len(answers) < count:
            chunk = await reader.read(65536)
            assert chunk, "the server closed the connection"
            answers.extend(frames.feed(chunk))
    writer.close()
    return answers


@pytest.mark.parametrize("via", ["leader", "follower"])
async def test_a_pipelined_mix_commits_in_the_order_sent(cluster_factory: Factory, via: str) -> None:
    # a small admission window, so that requests queue in front of the core
    cluster = cluster_factory(3, extra={"max_inflight": 2})
    leader = await cluster.wait_leader()
    node = leader if via == "leader" else next(i for i in (1, 2, 3) if i != leader)
    answers = await pipelined(cluster.client_addr(node), 60)
    assert [a["id"] for a in answers] == list(range(60))  # answered in order
    assert all(a["ok"] for a in answers), answers
    zxids = [a["zxid"] for a in answers]
    assert zxids == sorted(zxids), f"committed out of the order sent: {zxids}"
