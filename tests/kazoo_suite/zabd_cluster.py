"""A zabd cluster shaped like kazoo's ``kazoo.testing.common.ZookeeperCluster``.

kazoo's harness (``kazoo.testing.harness``) uses, of the cluster object it gets
from ``get_global_cluster()``: iteration and indexing over servers, ``start()``,
``terminate()`` (after every test class), ``get_logs()`` (on a failure, from
kazoo's conftest) and ``get_ssl_client_configuration()`` (test_client's SSL
test); of each server: ``address``, ``secure_address``, ``running``, ``run()``
and ``stop()`` (test_client's ``test_update_host_list``, test_connection's
read-only test stop and restart single servers).

Here every server is one ``zabd serve`` process of a ``LocalCluster``:

* ``address`` is its ZooKeeper port (``LocalCluster.zk_addr``);
* ``run()`` starts the process (same ports, same data dir) and waits until the
  ZooKeeper port accepts TCP; ``stop()`` sends SIGTERM and waits, as
  ``ManagedZooKeeper.stop`` does with the JVM; ``running`` is "started by us
  and still alive";
* ``terminate()`` stops every process and wipes the data dirs, as
  ``ManagedZooKeeper.destroy`` does (kazoo's next ``setup_zookeeper`` then
  calls ``start()`` again on a fresh cluster);
* ``start()`` starts the stopped nodes (highest id first, as kazoo does) and
  waits for an elected leader instead of kazoo's fixed 2 s sleep.

Settings (environment, read when the cluster is made):

* ``KAZOO_SUITE_DIR``: where configs, data dirs and ``node<i>.log`` go (kept
  after the run; default a fresh ``/tmp/kazoo-suite-*``);
* ``KAZOO_SUITE_STORAGE``: ``disk`` (default: a stopped node keeps its state,
  like ZooKeeper's dataDir) or ``memory``;
* ``KAZOO_SUITE_ZK_TICK_MS``: zabd's ``zk_tick_ms``, default 2000, the
  ``tickTime=2000`` of kazoo's ZooKeeper harness (sessions negotiate 4 s..40 s);
* ``KAZOO_SUITE_SIZE``: number of nodes, default 3 (kazoo's default);
* ``KAZOO_SUITE_LOG_LEVEL``: the servers' ``log_level``, default info.

The superuser digest is the one kazoo's harness gives ZooKeeper
(``super:test``), through zabd's ``zk_super_digest``; the SASL DIGEST-MD5
users are the ones of the JAAS file it writes for its SASL tests
(``ZOOKEEPER_JAAS_AUTH=digest``), through ``zk_sasl_jaas``, on every run:
kazoo restarts its ZooKeeper to add them, this cluster always has them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

from zabd.client.spawn import LocalCluster

log = logging.getLogger("kazoo_suite")

# -Dzookeeper.DigestAuthenticationProvider.superDigest in kazoo.testing.harness
SUPER_DIGEST = "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
# the JAAS file of kazoo.testing.harness for ZOOKEEPER_JAAS_AUTH=digest, as it writes it
JAAS_DIGEST = """
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="super_secret"
    user_jaasuser="jaas_password";
};"""


def _wait_tcp(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class ZabdServer:
    """One node, with the interface of kazoo's ``ManagedZooKeeper``."""

    def __init__(self, cluster: ZabdCluster, node_id: int) -> None:
        self._cluster = cluster
        self.node_id = node_id
        self._started = False
        self._lock = threading.Lock()
        host, port = cluster.local.zk_addr(node_id).rsplit(":", 1)
        self.host = host
        self.client_port = int(port)

    @property
    def local(self) -> LocalCluster:
        return self._cluster.local

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def secure_address(self) -> str:
        # the node's TLS ZooKeeper port (zookeeper_secure, ZooKeeper's secureClientPort)
        return self._cluster.local.zk_secure_addr(self.node_id)

    @property
    def secure_client_port(self) -> int:
        return self._cluster.local.zk_secure_ports[self.node_id]

    @property
    def running(self) -> bool:
        if not self._started:
            return False
        proc = self.local.procs.get(self.node_id)
        if proc is None or proc.poll() is not None:
            # died without stop(): remember it, the report lists these
            self._cluster.note_death(self.node_id, None if proc is None else proc.returncode)
            self._started = False
            return False
        return True

    def run(self, wait: bool = True) -> None:
        with self._lock:
            if self.running:
                return
            self._cluster.mark(f"run node {self.node_id}")
            self.local.start_node(self.node_id)
            self._started = True
            # for scripts/kazoo_suite.sh, which ends leftovers by PID if pytest dies
            pid = self.local.procs[self.node_id].pid
            (self.local.base / f"node{self.node_id}.pid").write_text(f"{pid}\n")
        if wait and not _wait_tcp(self.host, self.client_port, 15):
            log.warning("node %s: ZooKeeper port %s not listening after 15 s", self.node_id, self.address)

    def stop(self) -> None:
        with self._lock:
            if not self.running:
                return
            self._cluster.mark(f"stop node {self.node_id}")
            rc = self.local.terminate(self.node_id, timeout=10)
            self._started = False
            if rc not in (0, -15):
                log.warning("node %s exited with %s on SIGTERM", self.node_id, rc)

    def reset(self) -> None:
        """Stop and wipe the data dir (``ManagedZooKeeper.reset``)."""
        self.stop()
        shutil.rmtree(self.local.base / f"data{self.node_id}", ignore_errors=True)

    def destroy(self) -> None:
        self.reset()

    def get_logs(self, num_lines: int = 100) -> list[str]:
        return self.local.log_text(self.node_id).splitlines(keepends=True)[-num_lines:]


class ZabdCluster:
    """A zabd cluster with the interface of kazoo's ``ZookeeperCluster``."""

    def __init__(self, size: int | None = None, base_dir: str | Path | None = None) -> None:
        size = size or int(os.environ.get("KAZOO_SUITE_SIZE", "3"))
        base = base_dir or os.environ.get("KAZOO_SUITE_DIR") or tempfile.mkdtemp(prefix="kazoo-suite-")
        tick = int(os.environ.get("KAZOO_SUITE_ZK_TICK_MS", "2000"))
        storage = os.environ.get("KAZOO_SUITE_STORAGE", "disk")
        Path(base).mkdir(parents=True, exist_ok=True)
        jaas = Path(base) / "jaas.conf"
        jaas.write_text(JAAS_DIGEST)
        self.local = LocalCluster(
            size,
            base_dir=base,
            storage=storage,
            fsync=False,
            # read-only mode on, as kazoo's harness turns it on for ZooKeeper (readonlymode.enabled),
            # and every four-letter word, as its 4lw.commands.whitelist=* (test_client asks envi, ruok, ...)
            extra={"zk_tick_ms": tick, "zk_super_digest": SUPER_DIGEST, "zk_read_only": True, "zk_4lw_whitelist": "*",
                   "zk_sasl_jaas": str(jaas)},
            log_level=os.environ.get("KAZOO_SUITE_LOG_LEVEL", "info"),
            zk_secure=True,
        )
        self.local.write_configs()
        self._servers = [ZabdServer(self, i) for i in range(1, size + 1)]
        self.deaths: list[tuple[float, int, int | None, str]] = []
        self.starts = 0
        self._ssl_configuration: dict = {}
        self._marks = open(self.local.base / "events.log", "a", buffering=1)  # noqa: SIM115
        self.current_test = ""
        log.info("zabd cluster for kazoo's tests in %s (zk ports %s)", base, self.local.zk_hosts)

    # ------------------------------------------------------------ bookkeeping
    def mark(self, what: str) -> None:
        self._marks.write(f"{time.time():.3f} {what}\n")

    def note_death(self, node_id: int, rc: int | None) -> None:
        tail = "".join(self.local.log_text(node_id).splitlines(keepends=True)[-5:])
        self.deaths.append((time.time(), node_id, rc, self.current_test))
        self.mark(f"node {node_id} found dead rc={rc} during {self.current_test}")
        log.error("zabd node %s died (rc=%s) during %s:\n%s", node_id, rc, self.current_test, tail)

    # ---------------------------------------------------- ZookeeperCluster API
    def __getitem__(self, k: int) -> ZabdServer:
        return self._servers[k]

    def __iter__(self):
        return iter(self._servers)

    def __len__(self) -> int:
        return len(self._servers)

    def start(self) -> None:
        self.starts += 1
        self.mark("cluster start")
        for server in reversed(self._servers):
            server.run(wait=False)
        for server in self._servers:
            _wait_tcp(server.host, server.client_port, 15)
        try:
            asyncio.run(self.local.wait_leader(timeout=30))
        except Exception as exc:  # kazoo's setup_zookeeper retries and restarts
            log.warning("zabd cluster: no leader after start: %s", exc)

    def stop(self) -> None:
        for server in self._servers:
            server.stop()

    def terminate(self) -> None:
        self.mark("cluster terminate")
        for server in self._servers:
            server.destroy()

    def reset(self) -> None:
        for server in self._servers:
            server.reset()

    def close(self) -> None:
        """Stop every process (by PID) and keep the logs."""
        self.stop()
        self.local.stop()
        self._marks.close()

    def get_logs(self) -> list[str]:
        logs: list[str] = []
        for server in self._servers:
            logs += server.get_logs()
        return logs

    def get_ssl_client_configuration(self) -> dict:
        # zabd's own certificates (zabd certs: a CA, node and client certificates),
        # made by LocalCluster for the TLS port: client1's, and the CA
        d = self.local.tls_dir
        assert d is not None
        return {
            "client_key": (d / "client1.key").read_bytes(),
            "client_cert": (d / "client1.pem").read_bytes(),
            "ca_cert": (d / "ca.pem").read_bytes(),
        }
