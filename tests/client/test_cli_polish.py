"""The CLI's rough edges (issue 12), each through the real ``zabd`` command in
a subprocess, against real server processes where a server is involved."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.cli_support import zabd
from zabd.cli import COMMANDS
from zabd.client.spawn import LocalCluster

ZXID = re.compile(r"[0-9]+:[0-9]+")






def test_version() -> None:
    from importlib.metadata import version

    r = zabd("--version")
    assert r.returncode == 0 and r.stderr == ""
    # which core runs: "compiled with mypyc", or "pure Python (why)"
    assert re.fullmatch(rf"zabd {re.escape(version('zabd'))}; core: (compiled with mypyc|pure Python \(.+\))",
                        r.stdout.strip()), r.stdout


@pytest.mark.parametrize(
    "argv",
    [
        *([name, "--help"] for name in COMMANDS),
        ["pipeline", "sweep", "--help"],
        ["pipeline", "audit", "--help"],
        ["pipeline", "handmade", "-h"],
        ["kv", "put", "--help"],
        ["log", "verify", "--help"],
    ],
    ids=lambda a: " ".join(a),
)
def test_every_command_has_help_on_stdout(argv: list[str]) -> None:
    r = zabd(*argv)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "Traceback" not in r.stderr and "unknown option" not in r.stderr


def test_log_limit_below_zero_is_a_usage_error_before_any_connection() -> None:
    # nothing listens on port 1: a connection attempt would be exit 1, not 2
    r = zabd("log", "--servers", "127.0.0.1:1", "--limit", "-3", "--retry-reads", "0")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "zabd log: --limit -3: expected a count >= 0 (0: all)"


@pytest.mark.parametrize("where", ["file", "under-file", "proc"])
def test_an_unusable_data_dir_is_one_line_and_exit_2(tmp_path: Path, where: str) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    data_dir = {"file": str(afile), "under-file": str(afile / "sub"), "proc": "/proc/zabd-data"}[where]
    from zabd.client.spawn import free_ports

    peer, client = free_ports(2)
    env = {
        "ZABD_ID": "1",
        "ZABD_PEERS": f"1=127.0.0.1:{peer}",
        "ZABD_CLIENT": f"127.0.0.1:{client}",
        "ZABD_DATA_DIR": data_dir,
    }
    r = zabd("serve", env=env)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"zabd serve: config error: field 'data_dir' = {data_dir!r}: expected a directory")


def test_kv_put_output_and_log_decode_kv_operations(cluster: LocalCluster) -> None:
    r = zabd("kv", "put", "--servers", cluster.client_addr(1), "colour", "blue")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"zxid=[0-9]+:[0-9]+ version=1", r.stdout.strip()), r.stdout
    zxid_str = r.stdout.split()[0].removeprefix("zxid=")
    r = zabd("kv", "delete", "--servers", cluster.client_addr(2), "colour")
    assert r.returncode == 0 and "zxid_str" not in r.stdout

    r = zabd("log", "--servers", cluster.client_addr(3), "--from", zxid_str, "--limit", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"{zxid_str}\tput colour=blue (version 1)"
    assert r.stdout.splitlines()[1].endswith("\tdelete colour")

    r = zabd("log", "--servers", cluster.client_addr(3), "--from", zxid_str, "--limit", "1", "--json")
    row = json.loads(r.stdout)
    assert row["zxid_str"] == zxid_str
    assert row["kv"] == {"op": "set", "key": "colour", "value": "blue", "version": 1}
    payload = bytes.fromhex(row["payload"]["hex"])
    from zabd.kv import KV_MAGIC, decode_txn

    assert payload.startswith(KV_MAGIC) and decode_txn(payload[len(KV_MAGIC) :])["value"] == b"blue"


def test_status_json_zxids_are_epoch_counter(cluster: LocalCluster) -> None:
    assert zabd("propose", "--servers", cluster.client_addr(1), "x").returncode == 0
    r = zabd("status", "--servers", ",".join(cluster.servers), "--json")
    assert r.returncode == 0, r.stderr
    for st in map(json.loads, r.stdout.splitlines()):
        assert ZXID.fullmatch(st["last_zxid"]) and ZXID.fullmatch(st["last_committed"]), st
        assert ZXID.fullmatch(st["log_base"]) and isinstance(st["leader"], int)
        assert int(st["last_committed"].split(":")[0]) >= 1
        assert ZXID.fullmatch(st["zk"]["digest_zxid"]) and len(st["zk"]["digest"]) == 16, st["zk"]
    text = zabd("status", "--servers", cluster.client_addr(1))
    assert re.search(r" zk=\d+ znodes/\d+ sessions digest=[0-9a-f]{16}@\d+:\d+$", text.stdout.strip()), text.stdout


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_log_follow_ends_quietly_on_ctrl_c(cluster: LocalCluster) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zabd", "log", "--servers", cluster.client_addr(2), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Ctrl-C reaches a process only if it does not ignore SIGINT, and a shell
        # without job control starts background jobs (a CI script's `cmd &`) with
        # SIGINT ignored, inherited by this test and by the child: give the child
        # the disposition of a foreground command, whoever started the suite.
        preexec_fn=_default_sigint,
    )
    try:
        assert zabd("propose", "--servers", cluster.client_addr(1), "ping").returncode == 0
        assert proc.stdout is not None
        # the event: the follower printed a committed txn, so it is inside its watch loop
        assert proc.stdout.readline().strip()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err == "", err


def test_status_of_a_node_without_a_leader_says_none(tmp_path: Path) -> None:
    c = LocalCluster(3, base_dir=tmp_path / "c")
    try:
        c.write_configs()
        c.start_node(1)  # alone: it can never find a quorum

        async def answered() -> None:
            while await c.status(1) is None:
                await asyncio.sleep(0.05)

        asyncio.run(asyncio.wait_for(answered(), 20))
        r = zabd("status", "--servers", c.client_addr(1))
        assert r.returncode == 0, r.stderr
        assert " leader=none " in r.stdout and "leader=0" not in r.stdout
        r = zabd("status", "--servers", c.client_addr(1), "--json")
        assert json.loads(r.stdout)["leader"] is None
    finally:
        c.stop()
