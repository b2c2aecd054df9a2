"""go-zookeeper/zk v1.0.4's own integration tests against ZooKeeper 3.8 and zabd.

``bench/gozk_suite.py`` runs the suite, unmodified but for the one start-check
patch it applies to a copy of the source (identical for both targets), with
``scripts/gozk_server.py`` as the harness's ``zkServer.sh``. The acceptance
(issue 37): for the three failover and reconfig tests, ``-count=5``, every test
that passes on ZooKeeper passes on zabd, 5 of 5. It needs go, the source
(``GOZK_SRC``, default /work/gozk-src: the Go module proxy does not answer
here, see docs/zookeeper.md) and Debian's zookeeper package, so it is a soak
test; the translation of the harness's zoo.cfg into zabd's config is checked
in the default run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.gozk_suite import THREE, available, run_suite, table, worse_on_zabd, zookeeper_available
from scripts.gozk_server import read_cfg, zabd_toml
from zabd.config import load_config

SRC = Path(os.environ.get("GOZK_SRC", "/work/gozk-src"))
JVMFLAGS = (
    "-Dzookeeper.DigestAuthenticationProvider.superDigest=super:D/InIHSb7yEEbrWz8b9l71RjZJU="
    " -Dzookeeper.extendedTypesEnabled=true -Dzookeeper.emulate353TTLNodes=true"
)


def _zoo_cfg(d: Path, myid: int, client_port: int, servers: list[tuple[int, int]]) -> Path:
    """A zoo.cfg as go-zookeeper's ServerConfig.Marshall writes it (server_java_test.go)."""
    d.mkdir(parents=True)
    text = (f"admin.enableServer=false\ndataDir={d}\ntickTime=500\ninitLimit=10\nsyncLimit=5\n"
            f"clientPort={client_port}\nreconfigEnabled=true\n4lw.commands.whitelist=*\n")
    if len(servers) > 1:
        text += "standaloneEnabled=false\n"
        text += "".join(f"server.{n}=127.0.0.1:{p + 1}:{p + 2}\n" for n, p in servers)
    (d / "zoo.cfg").write_text(text)
    (d / "myid").write_text(f"{myid}\n")
    return d / "zoo.cfg"


def test_the_harness_zoo_cfg_becomes_a_zabd_config_zabd_accepts(tmp_path: Path) -> None:
    servers = [(1, 12000), (2, 12003), (3, 12006)]
    cfg_path = _zoo_cfg(tmp_path / "srv2", 2, 12003, servers)
    toml = tmp_path / "node.toml"
    toml.write_text(zabd_toml(read_cfg(cfg_path), JVMFLAGS))
    config = load_config(toml, environ={})
    assert config.id == 2
    assert config.zookeeper == "127.0.0.1:12003"
    # each server's spec as ZooKeeper's (zabd listens on both its ports); zabd's own client port apart
    assert config.peers == {1: "127.0.0.1:12001:12002", 2: "127.0.0.1:12004:12005", 3: "127.0.0.1:12007:12008"}
    assert config.client.startswith("127.0.0.1:") and config.client not in ("127.0.0.1:12004", "127.0.0.1:12005")
    assert config.zk_tick_ms == 500
    assert config.zk_super_digest == "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
    assert config.data_dir == str(tmp_path / "srv2" / "zabd")
    assert config.zk_4lw_whitelist == ["*"]


def test_a_standalone_zoo_cfg_becomes_a_one_node_zabd(tmp_path: Path) -> None:
    # TestIntegration_IncrementalReconfig's fourth server: no server.N lines at all
    cfg_path = _zoo_cfg(tmp_path / "srv4", 4, 13000, [(4, 13000)])
    toml = tmp_path / "node.toml"
    toml.write_text(zabd_toml(read_cfg(cfg_path), JVMFLAGS))
    config = load_config(toml, environ={})
    assert config.id == 4 and list(config.peers) == [4]
    assert config.zookeeper == "127.0.0.1:13000"


@pytest.mark.soak
def test_failover_and_reconfig_tests_pass_on_zabd_as_on_zookeeper(tmp_path: Path) -> None:
    for ok, why in (available(SRC), zookeeper_available()):
        if not ok:
            pytest.skip(why)
    results = run_suite(["zookeeper", "zabd"], 5, THREE, SRC, tmp_path / "gozk")
    report = table(results) + f"(failures and server logs in {tmp_path / 'gozk'})"
    zk = results["zookeeper"]
    assert sorted(zk) == ["TestIntegration_ClientClusterFailover", "TestIntegration_IncrementalReconfig",
                          "TestIntegration_Reconfig"], report
    assert not worse_on_zabd(results), report
