"""Failures are loud: a broken tick stops the node with an error (never a
half-alive node with open sockets and no timers), a failing shutdown step is
logged, and a closed stdout pipe is not a traceback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from zabd.client.spawn import LocalCluster, free_ports
from zabd.config import ServerConfig
from zabd.protocol.node import Node
from zabd.server.replica import Replica
from zabd.storage.base import MemoryStorage


class BrokenTick(Node):
    __slots__ = ()

    def on_tick(self, t: int) -> None:
        raise RuntimeError("injected fault in on_tick")


def one_node(tmp_path: Path) -> ServerConfig:
    p1, c1 = free_ports(2)
    return ServerConfig(id=1, peers={1: f"127.0.0.1:{p1}"}, client=f"127.0.0.1:{c1}", connect_grace_ms=0,
                        storage="memory", data_dir=str(tmp_path))


async def test_an_exception_in_a_tick_stops_the_node_loudly(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    replica = Replica(one_node(tmp_path), MemoryStorage())
    await replica.start()
    replica.node.__class__ = BrokenTick  # the same node, from now on with a faulty on_tick
    replica.node.wake = 0
    await asyncio.wait_for(replica.wait_stopped(), 10)
    assert isinstance(replica.fatal, RuntimeError)
    err = "".join(capfd.readouterr())
    assert "error in the tick timer" in err and "injected fault in on_tick" in err
    assert "fatal error; stopping" in err


class FailingFlush(MemoryStorage):
    async def flush(self) -> None:
        raise OSError(5, "injected I/O error")


async def test_a_failing_shutdown_step_is_logged(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    storage = FailingFlush()
    replica = Replica(one_node(tmp_path), storage)
    await replica.start()
    storage.persist_epochs(1, 1, 1)  # something to flush at shutdown
    replica.pipeline.written += 1
    await replica.shutdown()
    err = "".join(capfd.readouterr())
    assert "shutdown step failed" in err and "injected I/O error" in err


def test_status_into_a_closed_pipe_is_not_a_traceback() -> None:
    with LocalCluster(3) as cluster:
        asyncio.run(cluster.wait_leader())  # every server listens and answers
        servers = ",".join(cluster.servers)
        cmd = f"{sys.executable} -m zabd status --servers {servers} | head -c 1"
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr


class FailingClose(MemoryStorage):
    def close(self) -> None:
        raise OSError(5, "injected: the log writer had failed")


async def test_a_storage_that_fails_to_close_still_lets_the_node_stop(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # DiskStorage.close raises again what its writer thread failed with: the
    # shutdown that followed such a failure never set "stopped", and the process
    # sat in its event loop, half dead, until someone killed it
    replica = Replica(one_node(tmp_path), FailingClose())
    await replica.start()
    await replica.shutdown()
    await asyncio.wait_for(replica.wait_stopped(), 10)
    err = "".join(capfd.readouterr())
    assert "storage close failed" in err and "the log writer had failed" in err
