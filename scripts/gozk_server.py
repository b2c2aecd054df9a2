#!/usr/bin/env python3
"""go-zookeeper/zk's ``zkServer.sh``, for its integration tests, against zabd or ZooKeeper.

go-zookeeper/zk's harness (``server_java_test.go``) runs
``$ZOOKEEPER_BIN_PATH/zkServer.sh start-foreground <zoo.cfg>`` with
``SERVER_JVMFLAGS`` (the superuser digest, TTL nodes) added to the environment,
and stops a server by SIGKILL to the PID it started. ``bench/gozk_suite.py``
makes that ``zkServer.sh`` a two-line shell that execs this script, which
execs the server (so the harness's PID is the server's and its SIGKILL lands
there, as with ``zkServer.sh``'s own ``exec java``). ``GOZK_TARGET`` chooses:

* ``zookeeper``: Debian's ``/usr/share/zookeeper/bin/zkServer.sh``, unchanged
  (``JVMFLAGS`` adds the log4j binding Debian's jar lacks so its log is kept);
* ``zabd``: ``python -m zabd serve`` with the zoo.cfg turned into zabd's TOML:

  =========================== ==============================================
  zoo.cfg                      zabd
  =========================== ==============================================
  ``dataDir``/``myid``         ``id``; ``data_dir`` = ``<dataDir>/zabd``
  ``clientPort``               ``zookeeper`` (127.0.0.1, the harness's host)
  ``server.N=h:quorum:elect``  ``peers`` N = the same spec (zabd listens on
                               both ports, so ``/zookeeper/config`` reads as
                               ZooKeeper's); zabd's own ``client`` port is a
                               free one
  no ``server.N`` (standalone) ``peers`` = this node on a free port (a
                               ZooKeeper standalone server listens on no
                               quorum port either), ``client`` a free port
  ``tickTime``                 ``zk_tick_ms`` (sessions 2..20 ticks)
  ``4lw.commands.whitelist``   ``zk_4lw_whitelist``
  ``superDigest`` (JVM flag)   ``zk_super_digest``
  =========================== ==============================================

  ``reconfigEnabled``, ``extendedTypesEnabled``/``emulate353TTLNodes`` (TTL),
  ``admin.enableServer=false``, ``initLimit``/``syncLimit`` and
  ``standaloneEnabled`` need nothing: zabd always allows a superuser's
  reconfig and TTL nodes, has no admin port unless asked, and its own failure
  detection.

``GOZK_ZABD_LOG_LEVEL`` (default info) is zabd's ``--log-level``.
Either way the server's output goes to ``$GOZK_LOG_DIR/<ms>-<test dir>-srvN.log``
(the harness's data dirs are removed after each test), and a line naming that
file to stderr, which the harness logs with the test.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from pathlib import Path

ZK_SERVER_SH = "/usr/share/zookeeper/bin/zkServer.sh"
# Debian's zookeeper.jar has no slf4j binding on its Class-Path: without these the
# server logs nothing. zkServer.sh puts JVMFLAGS after its own -cp, and java takes the last.
ZK_LOG_JVMFLAGS = (
    "-cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar"
    ":/usr/share/java/log4j-1.2.jar -Dzookeeper.root.logger=INFO,CONSOLE"
)
# ZABD_* variables zabd does not take as config (zabd.config.NOT_CONFIG)
KEEP_ZABD_ENV = ("ZABD_PURE", "ZABD_PYTHON")


class UsageError(Exception):
    pass


def read_cfg(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def super_digest(jvmflags: str) -> str:
    m = re.search(r"-Dzookeeper\.DigestAuthenticationProvider\.superDigest=(\S+)", jvmflags)
    return m.group(1) if m else ""


def zabd_toml(cfg: dict[str, str], jvmflags: str) -> str:
    """zabd's config for the ZooKeeper server ``cfg`` describes."""
    data_dir = Path(cfg["dataDir"])
    myid = int((data_dir / "myid").read_text().strip())
    servers: dict[int, tuple[str, int, int]] = {}
    for key, value in cfg.items():
        m = re.fullmatch(r"server\.(\d+)", key)
        if m:
            # host:quorum:election[:role][;[clientHost:]clientPort]
            parts = value.split(";")[0].split(":")
            servers[int(m.group(1))] = (parts[0], int(parts[1]), int(parts[2]))
    host = cfg.get("clientPortAddress", "127.0.0.1")
    if servers:
        if myid not in servers:
            raise UsageError(f"myid {myid} is not among the server.N lines of the config")
        peers = {n: f"{h}:{q}:{e}" for n, (h, q, e) in sorted(servers.items())}
        client_port = free_port()
    else:
        peers = {myid: f"127.0.0.1:{free_port()}"}
        client_port = free_port()
    lines = [
        f"id = {myid}",
        f'client = "127.0.0.1:{client_port}"',
        f'zookeeper = "{host}:{int(cfg["clientPort"])}"',
        f'data_dir = "{data_dir / "zabd"}"',
        'storage = "disk"',
        f"zk_tick_ms = {int(cfg.get('tickTime', '2000'))}",
    ]
    whitelist = cfg.get("4lw.commands.whitelist", "")
    if whitelist:
        lines.append(f'zk_4lw_whitelist = "{whitelist}"')  # ZooKeeper's comma-separated form, as zabd takes it
    digest = super_digest(jvmflags)
    if digest:
        lines.append(f'zk_super_digest = "{digest}"')
    lines.append("[peers]")
    lines += [f'{n} = "{addr}"' for n, addr in peers.items()]
    return "\n".join(lines) + "\n"


def log_file(cfg_path: Path) -> Path:
    base = Path(os.environ.get("GOZK_LOG_DIR") or cfg_path.parent)
    base.mkdir(parents=True, exist_ok=True)
    # <tmp>/TestIntegration_Reconfig123/001/srv1/zoo.cfg -> TestIntegration_Reconfig123-001-srv1
    name = "-".join(cfg_path.parent.parts[-3:])
    return base / f"{int(time.time() * 1000)}-{name}.log"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "start-foreground":
        raise UsageError(f"usage: zkServer.sh start-foreground <zoo.cfg> (got {' '.join(argv) or 'nothing'})")
    cfg_path = Path(argv[1]).resolve()
    try:
        cfg = read_cfg(cfg_path)
    except OSError as exc:
        raise UsageError(f"cannot read {cfg_path}: {exc.strerror}") from None
    target = os.environ.get("GOZK_TARGET", "zabd")
    log = log_file(cfg_path)
    if target == "zookeeper":
        env = dict(os.environ)
        env["JVMFLAGS"] = (ZK_LOG_JVMFLAGS + " " + env.get("JVMFLAGS", "")).strip()
        argv_out = ["/bin/bash", ZK_SERVER_SH, "start-foreground", str(cfg_path)]
    elif target == "zabd":
        try:
            toml = zabd_toml(cfg, os.environ.get("SERVER_JVMFLAGS", ""))
        except (KeyError, ValueError) as exc:
            raise UsageError(f"{cfg_path}: cannot turn into a zabd config: {exc!r}") from None
        toml_path = cfg_path.parent / "zabd.toml"
        toml_path.write_text(toml)
        (log.parent / (log.stem + ".toml")).write_text(toml)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_") or k in KEEP_ZABD_ENV}
        python = os.environ.get("GOZK_PYTHON", sys.executable)
        level = os.environ.get("GOZK_ZABD_LOG_LEVEL", "info")
        argv_out = [python, "-m", "zabd", "serve", "--config", str(toml_path), "--log-format", "console",
                    "--log-level", level]
    else:
        raise UsageError(f"GOZK_TARGET={target!r}: expected zookeeper or zabd")
    sys.stderr.write(f"gozk_server: {target} pid {os.getpid()} for {cfg_path}, log {log}\n")
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.execve(argv_out[0], argv_out, env)
    return 1  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as exc:
        sys.stderr.write(f"gozk_server: {exc}\n")
        sys.exit(2)
