"""The launchers write configs through the model: every field round-trips
through the loader (TOML and ``ZABD_*``), LocalCluster's files read back as
the config it checked, and the compose environments are the model's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zabd.certs import make_cluster
from zabd.client.compose import services
from zabd.client.spawn import LocalCluster
from zabd.config import (
    FIELDS,
    HIDDEN,
    OFFERED,
    SHOWN_FIELDS,
    ConfigError,
    ServerConfig,
    env_name,
    load_config,
    to_env,
)

JAAS = 'Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_bob="secret";\n};\n'


def every_field(tmp_path: Path) -> dict[str, Any]:
    """A value for every field, none its default (the files they name exist)."""
    make_cluster(tmp_path / "tls", 3)
    (tmp_path / "tokens").write_text("abcdefgh1 rw\n")
    (tmp_path / "jaas.conf").write_text(JAAS)
    tls = tmp_path / "tls"
    return {
        "id": 2,
        "peers": {1: "127.0.0.1:7201", 2: "127.0.0.1:7202:7302:participant;127.0.0.1:2182", 3: "127.0.0.1:7203"},
        "observers": [3],
        "join": True,
        "client": "127.0.0.1:7102",
        "data_dir": str(tmp_path / "data"),
        "tick_ms": 7,
        "seed": 2**64 - 1,
        "storage": "memory",
        "fsync": False,
        "leader_early_propose": True,
        "state_machine": "none",
        "snap_count": 5000,
        "snap_retain": 4,
        "autopurge": False,
        "history_window": 500,
        "diff_limit": 300,
        "sync_retry_ms": 700,
        "log_segment_bytes": 1 << 20,
        "max_frame": 1 << 22,
        "max_link_buffer": 1 << 25,
        "max_client_cnxns": 9,
        "max_cnxns": 99,
        "client_backlog": 1024,
        "client_max_frame": 1 << 21,
        "client_frame_timeout_ms": 900,
        "client_max_queued": 1 << 20,
        "client_max_queued_total": 1 << 27,
        "client_max_buffered_total": 1 << 27,
        "max_inflight": 17,
        "connect_grace_ms": 300,
        "peer_ping_ms": 100,
        "peer_silence_ms": 900,
        "peer_connect_timeout_ms": 400,
        "admin": "127.0.0.1:8102",
        "zookeeper": "0.0.0.0:2182",
        "zookeeper_secure": "127.0.0.1:3182",
        "zk_read_only": True,
        "tls_ca": str(tls / "ca.pem"),
        "tls_cert": str(tls / "node2.pem"),
        "tls_key": str(tls / "node2.key"),
        "tls_peer": True,
        "tls_client": True,
        "tls_client_certs": "optional",
        "auth_tokens_file": str(tmp_path / "tokens"),
        "tls_admin_names": ["zabd-client-1", "ops"],
        "slow_fsync_ms": 50,
        "zk_tick_ms": 300,
        "zk_max_data": 4096,
        "zk_super_digest": "super:D/InIHSb7yEEbrWz8b9l71RjZJU=",
        "zk_sasl_jaas": str(tmp_path / "jaas.conf"),
        "zk_sasl_super_user": "bob",
        "zk_4lw_whitelist": ["mntr", "conf"],
        "log_format": "console",
        "log_level": "debug",
        "test_crash_after": "ack_leader",
    }


def test_every_field_round_trips_through_toml_and_the_environment(tmp_path: Path) -> None:
    values = every_field(tmp_path)
    # a new field is added here too, or this test says which one is missing
    assert list(values) == list(FIELDS)
    cfg = ServerConfig.model_validate(values)
    for name, info in FIELDS.items():
        assert getattr(cfg, name) != info.get_default(call_default_factory=True), f"{name} left at its default"
    path = tmp_path / "node.toml"
    path.write_text(cfg.to_toml())
    assert load_config(path, {}) == cfg
    env = cfg.to_env()
    assert list(env) == [env_name(name) for name in FIELDS]
    assert all(isinstance(v, str) for v in env.values())
    assert load_config(None, env) == cfg
    # what is left at its default is left out, and still reads back the same
    plain = ServerConfig.model_validate({k: values[k] for k in ("id", "peers", "client")})
    assert plain.to_toml().splitlines()[:2] == ["id = 2", 'client = "127.0.0.1:7102"']
    path.write_text(plain.to_toml())
    assert load_config(path, {}) == plain == load_config(None, plain.to_env())


def test_marks_on_fields_say_what_conf_shows_and_what_is_offered() -> None:
    # conf shows nothing that is a secret or a path to a key
    assert "zk_super_digest" not in SHOWN_FIELDS and not any(f.startswith("tls_") for f in SHOWN_FIELDS)
    assert {"id", "peers", "client", "zookeeper", "zk_4lw_whitelist", "zk_read_only"} <= set(SHOWN_FIELDS)
    hidden = [name for name in FIELDS if name not in OFFERED]
    assert hidden == ["test_crash_after"] and FIELDS["test_crash_after"].json_schema_extra == HIDDEN
    with pytest.raises(ConfigError) as err:
        load_config(None, {"ZABD_COLOUR": "red"})
    assert "ZABD_TICK_MS" in str(err.value) and "TEST_CRASH_AFTER" not in str(err.value)


@pytest.mark.parametrize("kind", ["plain", "secure", "growing"])
def test_local_cluster_files_read_back_as_the_config_it_checked(tmp_path: Path, kind: str) -> None:
    kw: dict[str, Any] = {
        "plain": {"extra": {"zk_4lw_whitelist": " ruok, cons ,,", "snap_count": 20, "leader_early_propose": True}},
        "secure": {"tls": True, "zk_secure": True, "tokens": {"abcdefgh1": "rw"}, "admin": True},
        "growing": {"members": 3, "extra": {"observers": [3]}, "storage": "disk", "fsync": False},
    }[kind]
    c = LocalCluster(4, base_dir=tmp_path, **kw)
    c.write_configs()  # starts nothing
    for i in range(1, c.n + 1):
        cfg = load_config(c.config_path(i), {})
        assert cfg == c.node_config(i)
        # what the cluster's helpers dial is what the node listens on
        assert cfg.client == c.client_addr(i) and cfg.zookeeper_listen == c.zk_addr(i)
        assert cfg.join == (i > c.members)
    if kind == "plain":
        assert load_config(c.config_path(1), {}).zk_4lw_whitelist == ["ruok", "cons"]
    # one start's overrides go to a file of their own
    once = c.write_config(2, tmp_path / "once.toml", test_crash_after="ack_leader")
    assert load_config(once, {}).test_crash_after == "ack_leader"
    assert load_config(c.config_path(2), {}).test_crash_after == ""


def test_a_bad_extra_field_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    c = LocalCluster(1, base_dir=tmp_path, extra={"tick_ms": "fast"})
    with pytest.raises(ConfigError, match=r"^config error: field 'tick_ms' = 'fast': .*an integer$"):
        c.start()
    assert not c.procs


@pytest.mark.parametrize("kw", [{}, {"members": 3}, {"tls": True}])
def test_compose_environments_are_the_models_own(tmp_path: Path, kw: dict[str, Any]) -> None:
    make_cluster(tmp_path, 5)
    for svc in services(5, **kw)["services"].values():
        env: dict[str, str] = svc["environment"]
        # the container's /tls is tmp_path here
        local = {k: v.replace("/tls/", f"{tmp_path}/") for k, v in env.items()}
        cfg = load_config(None, local)
        # every variable is a field's, spelled as the model spells it: nothing written by hand
        assert to_env(cfg.model_dump(exclude_unset=True)) == local
