"""Config errors stop ``zabd serve`` at start with one line naming the field,
the value and what was expected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zabd.config import ConfigError, load_config, parse_env

GOOD = """id = 1
client = "127.0.0.1:7101"
[peers]
1 = "127.0.0.1:7201"
2 = "127.0.0.1:7202"
3 = "127.0.0.1:7203"
"""

BAD = {
    "unknown field": (
        'id = 1\ncolour = "red"\nclient = "127.0.0.1:7101"\n[peers]\n1 = "127.0.0.1:7201"\n',
        ["colour", "red", "unknown field"],
    ),
    "peer id out of range": (
        'id = 1\nclient = "127.0.0.1:7101"\n[peers]\n1 = "127.0.0.1:7201"\n300 = "127.0.0.1:7203"\n',
        ["peers", "peer id 300 out of range", "1..255"],
    ),
    "duplicate port": (
        'id = 1\nclient = "127.0.0.1:7101"\n[peers]\n1 = "127.0.0.1:7201"\n2 = "127.0.0.1:7201"\n',
        ["peers", "127.0.0.1:7201", "duplicate"],
    ),
    "client port clash": (
        'id = 1\nclient = "127.0.0.1:7201"\n[peers]\n1 = "127.0.0.1:7201"\n',
        ["client", "127.0.0.1:7201", "duplicate port"],
    ),
    "own id absent": (
        'id = 4\nclient = "127.0.0.1:7101"\n[peers]\n1 = "127.0.0.1:7201"\n2 = "127.0.0.1:7202"\n',
        ["'id' = 4", "absent", "[1, 2]"],
    ),
    "wrong type": (GOOD.replace("id = 1", 'id = 1\ntick_ms = "fast"'), ["tick_ms", "fast", "integer"]),
    "wrong literal": (GOOD.replace("id = 1", 'id = 1\nstorage = "tape"'), ["storage", "tape", "'memory' or 'disk'"]),
    "missing field": (GOOD.replace('client = "127.0.0.1:7101"\n', ""), ["client", "missing"]),
    "bad address": (GOOD.replace('"127.0.0.1:7202"', '"127.0.0.1:99999"'), ["peers", "99999", "1..65535"]),
    "not toml": ("id = = 1\n", ["not valid TOML"]),
    "unknown four-letter word": (
        GOOD.replace("id = 1", 'id = 1\nzk_4lw_whitelist = ["srvr", "kill"]'),
        ["zk_4lw_whitelist", "'kill' is not a four-letter word", "mntr", "'*'"],
    ),
    "a ZooKeeper word zabd does not answer": (
        GOOD.replace("id = 1", 'id = 1\nzk_4lw_whitelist = "mntr, dump"'),
        ["zk_4lw_whitelist", "mntr, dump", "'dump' is a ZooKeeper word zabd does not answer"],
    ),
    "one port as quorum and election port": (
        GOOD.replace('"127.0.0.1:7202"', '"127.0.0.1:7202:7202:participant"'),
        ["peers.2", "127.0.0.1:7202:7202:participant", "the quorum and election ports are the same"],
    ),
    "an election port taken": (
        GOOD.replace('"127.0.0.1:7202"', '"127.0.0.1:7202:7201"'),
        ["peers.2", "duplicate address 127.0.0.1:7201", "node 1"],
    ),
    "a bad role": (GOOD.replace('"127.0.0.1:7202"', '"127.0.0.1:7202:7302:voter"'), ["peers.2", "'voter'"]),
    "a bad client address": (
        GOOD.replace('"127.0.0.1:7202"', '"127.0.0.1:7202:7302;h:x"'), ["peers.2", "client port 'x'"],
    ),
    "a bare spec with a client address": (
        GOOD.replace('"127.0.0.1:7202"', '"127.0.0.1:7202;2181"'), ["peers.2", "expected host:port or"],
    ),
    "own client address not the zookeeper port": (
        GOOD.replace('"127.0.0.1:7201"', '"127.0.0.1:7201:7301;127.0.0.1:2181"')
        .replace("id = 1", 'id = 1\nzookeeper = "127.0.0.1:2182"'),
        ["'zookeeper' = '127.0.0.1:2182'", "peers.1", "127.0.0.1:2181"],
    ),
    "observer and participant at once": (
        GOOD.replace('"127.0.0.1:7203"', '"127.0.0.1:7203:7303:participant"')
        .replace("id = 1", "id = 1\nobservers = [3]"),
        ["observers", "peers.3", "participant"],
    ),
    "silence below two pings": (
        GOOD.replace("id = 1", "id = 1\npeer_ping_ms = 500\npeer_silence_ms = 600"),
        ["peer_silence_ms", "600", "twice", "500"],
    ),
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_config_one_line(tmp_path: Path, name: str) -> None:
    text, needles = BAD[name]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_zookeeper_server_specs(tmp_path: Path) -> None:
    """ZooKeeper's spec form beside the bare one: the quorum port is dialed, the election
    port listened on too, the role counts, and this node's client address is its ZooKeeper
    port (from the spec when 'zookeeper' is empty, as ZooKeeper takes clientPort)."""
    path = tmp_path / "spec.toml"
    path.write_text('id = 1\nclient = "127.0.0.1:7101"\n[peers]\n1 = "127.0.0.1:7201:7301;2181"\n'
                    '2 = "127.0.0.1:7202"\n3 = "[::1]:7203:7303:observer;[::1]:2183"\n')
    cfg = load_config(path, {})
    assert cfg.quorum_addresses == {1: "127.0.0.1:7201", 2: "127.0.0.1:7202", 3: "[::1]:7203"}
    assert cfg.election_addr == ("127.0.0.1", 7301) and cfg.observer_ids == {3}
    assert cfg.zookeeper_listen == "0.0.0.0:2181" and cfg.zookeeper_addr == ("0.0.0.0", 2181)
    # a wildcard 'zookeeper' agrees with any host on the same port; a spec without one takes 'zookeeper'
    both = load_config(path, {"ZABD_ZOOKEEPER": "0.0.0.0:2181"})
    assert both.zookeeper_listen == "0.0.0.0:2181"
    env = {"ZABD_ID": "2", "ZABD_ZOOKEEPER": "127.0.0.1:2182"}
    assert load_config(path, env).zookeeper_listen == "127.0.0.1:2182" and load_config(path, env).election_addr is None
    environ = {"ZABD_ID": "1", "ZABD_CLIENT": "127.0.0.1:7101",
               "ZABD_PEERS": "1=h1:2888:3888:participant;2181,2=h2:2888:3888;h2:2181"}
    assert load_config(None, environ).peer_spec(2).client_addr == "h2:2181"


def test_serve_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BAD["own id absent"][0])
    proc = subprocess.run(
        [sys.executable, "-m", "zabd", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "'id' = 4" in lines[0] and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_environment_overrides_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    cfg = load_config(path, {"ZABD_ID": "2", "ZABD_TICK_MS": "20", "ZABD_FSYNC": "false"})
    assert (cfg.id, cfg.tick_ms, cfg.fsync) == (2, 20, False)
    cfg = load_config(None, {"ZABD_ID": "1", "ZABD_PEERS": "1=a:1,2=b:2,3=c:3", "ZABD_CLIENT": "a:2"})
    assert cfg.peers == {1: "a:1", 2: "b:2", 3: "c:3"} and cfg.peer_ids == [2, 3]
    # the variables of the process around the server, not its config: no refusal
    cfg = load_config(path, {"ZABD_PURE": "1", "ZABD_PYTHON": "/usr/bin/python3", "ZABD_TOKEN": "t" * 8,
                             "ZABD_TLS_DIR": "tls"})
    assert cfg.id == 1
    assert parse_env({"ZABD_TLS_ADMIN_NAMES": "ops, zabd-client-1"}) == {"tls_admin_names": ["ops", "zabd-client-1"]}
    for env, needles in [
        ({"ZABD_TICK_MS": "soon"}, ["ZABD_TICK_MS", "soon", "integer"]),
        ({"ZABD_COLOUR": "red"}, ["ZABD_COLOUR", "unknown field"]),
        ({"ZABD_PEERS": "1=a:1,2"}, ["ZABD_PEERS", "1=a:1,2"]),
        ({"ZABD_FSYNC": "maybe"}, ["ZABD_FSYNC", "maybe", "true or false"]),
        ({"ZABD_ZK_4LW_WHITELIST": "srvr,cnos"}, ["zk_4lw_whitelist", "'cnos' is not a four-letter word"]),
    ]:
        with pytest.raises(ConfigError) as info:
            load_config(path, env)
        for needle in needles:
            assert needle in str(info.value), str(info.value)


def test_four_letter_whitelist_forms(tmp_path: Path) -> None:
    """ZooKeeper's default (srvr), its comma string with blanks (in TOML or
    the environment), a TOML list, and '*'."""
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    assert load_config(path, {}).zk_4lw_whitelist == ["srvr"]
    assert load_config(path, {"ZABD_ZK_4LW_WHITELIST": " mntr, ruok ,,"}).zk_4lw_whitelist == ["mntr", "ruok"]
    assert load_config(path, {"ZABD_ZK_4LW_WHITELIST": "*"}).zk_4lw_whitelist == ["*"]
    path.write_text(GOOD.replace("id = 1", 'id = 1\nzk_4lw_whitelist = ["cons", "stat"]'))
    assert load_config(path, {}).zk_4lw_whitelist == ["cons", "stat"]


def test_storage_factory(tmp_path: Path) -> None:
    from zabd.server.storage_factory import open_storage
    from zabd.storage.base import MemoryStorage

    path = tmp_path / "good.toml"
    path.write_text(GOOD.replace("id = 1", f'id = 1\ndata_dir = "{tmp_path / "data"}"'))
    from zabd.storage.disk import DiskStorage

    assert isinstance(open_storage(load_config(path, {"ZABD_STORAGE": "memory"}).storage_options()), MemoryStorage)
    disk = open_storage(load_config(path, {}).storage_options())  # disk is the default
    assert isinstance(disk, DiskStorage) and disk.fsync
    disk.load()
    disk.close()
    assert os.path.isdir(tmp_path / "data" / "log")
    nosync = open_storage(load_config(path, {"ZABD_FSYNC": "false"}).storage_options())
    assert isinstance(nosync, DiskStorage) and not nosync.fsync


def test_sasl_jaas_file_errors_are_one_line(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text('Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                    '  user_bob="secret"\n};\n')
    path = tmp_path / "node.toml"
    path.write_text(GOOD.replace("id = 1", f'id = 1\nzk_sasl_jaas = "{jaas}"'))
    proc = subprocess.run([sys.executable, "-m", "zabd", "serve", "--config", str(path)], capture_output=True,
                          text=True, timeout=60, env=_env(), check=False)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"zabd serve: config error: field 'zk_sasl_jaas': {jaas}: line 4: expected an "
                                   "option name or ';', got '}'"), proc.stderr
    assert "secret" not in proc.stderr
    cases = {
        f'zk_sasl_jaas = "{tmp_path / "none.conf"}"': ["zk_sasl_jaas", "none.conf: cannot read"],
        'zk_sasl_super_user = "bob"': ["zk_sasl_super_user", "'bob'", "needs zk_sasl_jaas"],
    }
    jaas_ok = tmp_path / "ok.conf"
    jaas_ok.write_text('Server { m required user_bob="secret"; };')
    cases[f'zk_sasl_jaas = "{jaas_ok}"\nzk_sasl_super_user = "alice"'] = [
        "zk_sasl_super_user", "'alice'", "no such user", "expected one of bob"]
    for lines, needles in cases.items():
        path.write_text(GOOD.replace("id = 1", f"id = 1\n{lines}"))
        with pytest.raises(ConfigError) as info:
            load_config(path, {})
        message = str(info.value)
        assert "\n" not in message and "secret" not in message
        for needle in needles:
            assert needle in message, message
    path.write_text(GOOD.replace("id = 1", f'id = 1\nzk_sasl_jaas = "{jaas_ok}"\nzk_sasl_super_user = "bob"'))
    assert load_config(path, {}).zk_sasl_super_user == "bob"
