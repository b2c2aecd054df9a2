"""``zabd cluster``: one command, a local cluster in the foreground, its
addresses printed, everything stopped on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kazoo.client import KazooClient


def _default_sigint() -> None:
    # Ctrl-C must reach the command whoever started the suite (a background
    # shell starts jobs with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_local_cluster_runs_in_the_foreground_and_stops_on_ctrl_c() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")}
    proc = subprocess.Popen([sys.executable, "-m", "zabd", "cluster", "--nodes", "3", "--storage", "memory"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_default_sigint)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        lines = {}
        for line in proc.stdout:  # the event: the banner, ending in the Ctrl-C line
            if ":" in line:
                key, _, value = line.strip().partition(":")
                lines[key.strip()] = value.strip()
            if line.startswith("Ctrl-C"):
                break
        pids = [int(p) for p in lines["server pids"].split()]
        assert len(pids) == 3 and all(os.path.exists(f"/proc/{p}") for p in pids)
        zk = KazooClient(hosts=lines["ZooKeeper"])
        zk.start(timeout=15)
        try:
            zk.create("/hello", b"world")
            assert zk.get("/hello")[0] == b"world"
        finally:
            zk.stop()
            zk.close()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip().endswith("zabd cluster: stopped") and err == ""
    assert not [p for p in pids if _is_zabd(p)]


def _is_zabd(pid: int) -> bool:
    try:
        return "zabd" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:  # gone
        return False


def test_bad_arguments_are_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "zabd", "cluster", "--nodes", "9"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "zabd cluster: --nodes 9: expected 1..7\n"
