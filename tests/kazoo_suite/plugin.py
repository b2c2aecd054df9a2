"""pytest plugin: kazoo's own test suite (kazoo 2.11.0, ``kazoo/tests`` as shipped
in the wheel, unmodified) against a zabd cluster instead of Java ZooKeeper.

Run from the repo root (so ``tests.kazoo_suite`` imports), e.g.::

    scripts/kazoo_suite.sh                       # the whole suite, see the script
    python3 -m pytest -q -p tests.kazoo_suite.plugin -p no:cacheprovider \
        --timeout 180 -o addopts="" --pyargs kazoo.tests
    python3 -m pytest -q -p tests.kazoo_suite.plugin --timeout 180 -o addopts="" \
        --pyargs kazoo.tests.test_lock          # one file

Needs (as for ZooKeeper): kazoo==2.11.0 pytest pytest-timeout objgraph pyjks
"pyOpenSSL<24.3" "cryptography<44" gevent eventlet pure_sasl.
``-o addopts=""`` drops the repo's ``-m 'not soak'`` (harmless, but not kazoo's);
the repo's ``asyncio_mode = "auto"`` does not touch kazoo's (synchronous) tests.

What it does: kazoo's harness asks ``kazoo.testing.harness.get_global_cluster()``
for its cluster; this plugin replaces that function (before collection) with
one returning a single ``ZabdCluster`` (``zabd_cluster.py``: real ``zabd serve``
processes from ``zabd.client.spawn.LocalCluster``, each server's ``address`` its
ZooKeeper port) and stops those processes, by PID, when the session ends.
Configuration, data and ``node<i>.log`` go to ``$KAZOO_SUITE_DIR`` (kept);
``events.log`` there has a timestamped line per test and per start/stop.
"""

from __future__ import annotations

import atexit
import logging
import os

import pytest

from tests.kazoo_suite.zabd_cluster import ZabdCluster

log = logging.getLogger("kazoo_suite")

_CLUSTER: ZabdCluster | None = None


def get_zabd_cluster() -> ZabdCluster:
    global _CLUSTER
    if _CLUSTER is None:
        _CLUSTER = ZabdCluster()
        atexit.register(_close)
    return _CLUSTER


def _close() -> None:
    global _CLUSTER
    if _CLUSTER is not None:
        cluster, _CLUSTER = _CLUSTER, None
        cluster.close()


def pytest_configure(config: pytest.Config) -> None:
    import kazoo.testing.harness as harness

    harness.get_global_cluster = get_zabd_cluster
    # a ZOOKEEPER_* variable must not make anything look for Java
    os.environ.setdefault("ZOOKEEPER_VERSION", "3.8.0")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    cluster = get_zabd_cluster()
    cluster.current_test = item.nodeid
    cluster.mark(f"test {item.nodeid}")


def pytest_runtest_teardown(item: pytest.Item) -> None:
    if _CLUSTER is not None:
        for server in _CLUSTER:
            _ = server.running  # records a node that died on its own


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if _CLUSTER is None:
        return
    tr = terminalreporter
    tr.section("zabd cluster")
    tr.write_line(f"base dir: {_CLUSTER.local.base} (node<i>.log, events.log)")
    tr.write_line(f"zk tick ms: {_CLUSTER.local.extra.get('zk_tick_ms')}, storage: {_CLUSTER.local.storage}, "
                  f"cluster starts: {_CLUSTER.starts}")
    if _CLUSTER.deaths:
        for _t, node, rc, test in _CLUSTER.deaths:
            tr.write_line(f"node {node} died on its own (rc={rc}) during {test}")
    else:
        tr.write_line("no node died on its own")


def pytest_unconfigure(config: pytest.Config) -> None:
    _close()
