"""The compose files: every service's environment is a valid server config,
and the services agree with each other (ids, peer lists, ports, volumes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from zabd.client.compose import CLIENT_PORT, ELECTION_PORT, PEER_PORT, ZK_PORT, render, services
from zabd.config import load_config

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    3: ROOT / "docker-compose.yml",
    5: ROOT / "deploy/docker-compose.5.yml",
    7: ROOT / "deploy/docker-compose.7.yml",
}


def _context(n: int) -> str:
    # the build context is the repository root, as seen from the file's folder
    return os.path.relpath(ROOT, FILES[n].parent)


def _load(n: int) -> dict[str, Any]:
    text = FILES[n].read_text()
    assert text == render(n, context=_context(n)), f"{FILES[n]} is stale: run python3 deploy/compose.py"
    try:
        import yaml
    except ImportError:  # the generator's data is what the file was rendered from
        return services(n, context=_context(n))
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


@pytest.mark.parametrize("n", [3, 5, 7])
def test_compose_services_match_the_config_model(n: int) -> None:
    doc = _load(n)
    svcs = doc["services"]
    assert sorted(svcs) == sorted(f"zabd{i}" for i in range(1, n + 1))
    configs = {}
    for name, svc in svcs.items():
        env = svc["environment"]
        assert all(isinstance(v, str) for v in env.values()), "compose environment values must be strings"
        cfg = load_config(None, env)
        configs[name] = cfg
        assert name == f"zabd{cfg.id}" and svc["hostname"] == name
        # its own peer entry is its own hostname on the peer port, a ZooKeeper spec with an
        # election port and its ZooKeeper client port (so that /zookeeper/config parses)
        assert cfg.peer_addr(cfg.id) == (name, PEER_PORT) and cfg.election_addr == (name, ELECTION_PORT)
        assert cfg.peer_spec(cfg.id).client_addr == f"0.0.0.0:{ZK_PORT}"
        assert cfg.client_addr[1] == CLIENT_PORT
        volume = svc["volumes"][0].split(":")
        assert volume[1] == cfg.data_dir and volume[0] in doc["volumes"]
    ids = sorted(c.id for c in configs.values())
    assert ids == list(range(1, n + 1))
    peer_maps = {tuple(sorted(c.peers.items())) for c in configs.values()}
    assert len(peer_maps) == 1, "services disagree on the peer list"
    for node_id, addr in configs["zabd1"].quorum_addresses.items():
        host, port = addr.rsplit(":", 1)
        assert host in svcs and int(port) == PEER_PORT and svcs[host]["environment"]["ZABD_ID"] == str(node_id)
    # client ports on the host's loopback only, zabd's and ZooKeeper's, two per node
    published = [p.rsplit(":", 2) for svc in svcs.values() for p in svc["ports"]]
    assert all(addr == "127.0.0.1" for addr, _, _ in published)
    assert len({port for _, port, _ in published}) == len(published) == 2 * n
    assert sorted(int(port) for _, port, inside in published if inside == "2181") == list(range(2181, 2181 + n))
    for svc in svcs.values():
        assert load_config(None, svc["environment"]).zookeeper_addr == ("0.0.0.0", 2181)
    assert "name" not in doc, "Compose v1 rejects a top-level name: key (use -p NAME)"
    for svc in svcs.values():
        # the log is on disk in the volume, so it survives down + up
        assert svc["environment"]["ZABD_STORAGE"] == "disk"
        assert (Path(FILES[n].parent) / svc["build"] / "Dockerfile").is_file()
        admin = load_config(None, svc["environment"]).admin_addr
        assert admin is not None and f"{admin[1]}/health" in svc["healthcheck"]["test"][-1]
    volumes = [svc["volumes"][0].split(":")[0] for svc in svcs.values()]
    assert len(set(volumes)) == n


def test_dockerfile_runs_serve() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["zabd"]' in text and 'CMD ["serve"]' in text and "VOLUME" in text


def test_compose_command_writes_n_nodes(tmp_path: Path) -> None:
    from zabd.cli import main

    out = tmp_path / "c.yml"
    assert main(["compose", "--nodes", "5", "-o", str(out), "--build-context", "."]) == 0
    assert out.read_text() == render(5)


def test_compose_default_build_context_is_the_current_directory(tmp_path: Path, monkeypatch: Any) -> None:
    from zabd.cli import main

    (tmp_path / "deploy").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["compose", "--nodes", "3", "-o", "deploy/c.yml"]) == 0
    assert (tmp_path / "deploy/c.yml").read_text() == render(3, context="..")


def test_health_probe_is_valid_python() -> None:
    from zabd.client.compose import HEALTH_PROBE

    compile(HEALTH_PROBE, "<healthcheck>", "exec")


def test_the_tls_variant_turns_tls_on_with_the_certs_zabd_certs_writes(tmp_path: Path) -> None:
    from zabd.certs import make_cluster
    from zabd.client.compose import TLS_MOUNT

    path = ROOT / "deploy/docker-compose.tls.yml"
    context = os.path.relpath(ROOT, path.parent)
    assert path.read_text() == render(3, context=context, tls=True), f"{path} is stale: run python3 deploy/compose.py"
    make_cluster(tmp_path, 3)
    for i, svc in services(3, context=context, tls=True)["services"].items():
        assert TLS_MOUNT in svc["volumes"]
        # the container sees the certificates at /tls: here they are in tmp_path
        env = {k: v.replace("/tls/", f"{tmp_path}/") for k, v in svc["environment"].items()}
        cfg = load_config(None, env)
        assert cfg.tls_peer and cfg.tls_client and cfg.tls_cert == f"{tmp_path}/node{cfg.id}.pem"
        assert i == f"zabd{cfg.id}"
