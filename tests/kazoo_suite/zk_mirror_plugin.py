"""pytest plugin: kazoo's own test suite against Java ZooKeeper (kazoo's harness,
unmodified) with a ``zabd mirror`` attached to every ensemble the harness starts.

The claim it checks (issue 40): a mirror following a ZooKeeper ensemble affects no
test, and what it wrote equals ZooKeeper's tree. ``scripts/kazoo_suite_mirrored.sh``
runs the suite twice, without and with this plugin, and compares the counts.

kazoo's harness (``kazoo.testing.common.ZookeeperCluster``) starts a fresh 3-server
ensemble, and after every test class ``terminate()`` stops and wipes it, so the suite
runs on dozens of short-lived ensembles (each a new history from zxid 0). This plugin
wraps the two methods:

* after ``start()``: ``zabd mirror --quorum <each server's quorum port> --out DIR
  --nodes 1 --finish-from <each server's dataDir>``, without ``--cutover`` (tests stop
  and restart single servers; the mirror follows the next leader through those), and
  it waits (bounded) until the mirror says "in sync at", so every ensemble is followed
  from its first minutes of life;
* before ``terminate()``: the tree read from ZooKeeper as kazoo's super user
  (``tests.zk.migration_harness.read_tree``), then every server stopped (SIGTERM, as
  kazoo's own ``stop``), then the mirror ended with SIGTERM (it takes what the stopped
  servers logged after its last txn: --finish-from), and two comparisons:

  1. digests: ZooKeeper's own restore of the most advanced server's dataDir
     (``zabd.migrate.zk_import.build_tree``) against the mirror's directory replayed as
     a zabd node restarts (snapshot, then log): data, every Stat field, ACLs, sessions;
  2. cut over: a one-node zabd (``LocalCluster(1, storage="disk")``) started on the
     mirror's directory serves a tree that ``diff_trees`` finds equal to the one read
     from ZooKeeper (every path, data, Stat field and ACL but ``/zookeeper/config``).

Each ensemble's result is a line in ``$KAZOO_SUITE_DIR/mirror-results.jsonl`` and the
terminal summary; ``mirror<N>.log`` holds each mirror's progress. A directory whose
comparisons pass is removed (each preallocates log segments); a failing one is kept.
The plugin never fails a test: a difference is reported, and the script fails on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.kazoo_suite.zabd_cluster import SUPER_DIGEST
from tests.zk.migration_harness import diff_trees, read_tree
from zabd.client.spawn import LocalCluster
from zabd.kv.replay import Replay
from zabd.migrate.zk_import import ZooKeeperImportError, build_tree
from zabd.storage.snapshot import newest_snapshot
from zabd.storage.txnlog import iter_records
from zabd.zk.tree import DataTree

log = logging.getLogger("kazoo_suite.mirror")

ROOT = Path(__file__).resolve().parents[2]
SUPER_AUTH = ("digest", "super:test")  # the superDigest kazoo's harness gives ZooKeeper
SYNC_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 120.0


def mirrored_tree(data_dir: Path) -> DataTree:
    """The mirror's tree from its own directory, as a zabd node restarts."""
    snap = newest_snapshot(str(data_dir / "snap"))
    if snap is None:
        raise RuntimeError(f"{data_dir}: no snapshot")
    replay = Replay(snap.data)
    for r in iter_records(str(data_dir)):
        if r.zxid > snap.zxid:
            problem = replay.apply(r.zxid, r.payload)
            if problem is not None:
                raise RuntimeError(f"{data_dir}: txn {r.zxid:#x}: {problem}")
    return replay.tree


class Attached:
    """One mirror, for one ensemble's life."""

    def __init__(self, index: int, base: Path, cluster: Any, test: str) -> None:
        self.index = index
        self.out = base / f"mirror{index}"
        self.log_path = base / f"mirror{index}.log"
        self.test = test
        self.data_dirs = [Path(s.working_path) / "data" for s in cluster]
        quorum = ",".join(f"127.0.0.1:{s.server_info.leader_port}" for s in cluster)
        argv = [sys.executable, "-m", "zabd", "mirror", "--quorum", quorum, "--out", str(self.out), "--nodes", "1"]
        for d in self.data_dirs:
            argv += ["--finish-from", str(d)]
        self.lines: list[str] = []
        self.synced = threading.Event()
        self.proc = subprocess.Popen(argv, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        (base / f"mirror{index}.pid").write_text(f"{self.proc.pid}\n")  # for the script, if pytest dies
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with open(self.log_path, "a") as out:
            for line in self.proc.stderr:
                out.write(line)
                out.flush()
                self.lines.append(line.rstrip("\n"))
                if "in sync at" in line:
                    self.synced.set()

    def end(self) -> tuple[int, str]:
        """SIGTERM (ZooKeeper is stopped by then): the mirror finishes from the
        servers' logs and exits; its return code and summary."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            stdout, _ = self.proc.communicate(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            stdout, _ = self.proc.communicate(timeout=10)
        self.reader.join(10)
        with contextlib.suppress(OSError):
            (self.out.parent / f"mirror{self.index}.pid").unlink()
        return self.proc.returncode, stdout.strip()


class MirrorState:
    def __init__(self) -> None:
        self.base = Path(os.environ.get("KAZOO_SUITE_DIR") or tempfile.mkdtemp(prefix="kazoo-suite-mirror-"))
        self.base.mkdir(parents=True, exist_ok=True)
        self.results_path = self.base / "mirror-results.jsonl"
        self.attached: Attached | None = None
        self.count = 0
        self.results: list[dict[str, Any]] = []
        self.current_test = ""

    def attach(self, cluster: Any) -> None:
        if self.attached is not None:
            return  # a start() of an ensemble already followed (a server stopped by a test, run again)
        self.count += 1
        self.attached = Attached(self.count, self.base, cluster, self.current_test)
        if not self.attached.synced.wait(SYNC_TIMEOUT_S):
            log.error("mirror %d: not in sync after %s s: %s", self.count, SYNC_TIMEOUT_S, self.attached.lines[-3:])

    def detach(self, cluster: Any) -> None:
        a, self.attached = self.attached, None
        if a is None:
            return
        res: dict[str, Any] = {"mirror": a.index, "started_in": a.test, "ended_in": self.current_test,
                               "synced": a.synced.is_set()}
        running = [s for s in cluster if s.running]
        zk_tree = None
        if running:
            try:
                zk_tree = read_tree(",".join(s.address for s in running), auth=SUPER_AUTH)
            except Exception as exc:  # no quorum left by the test, say: the digests still compare
                res["zk_read"] = f"{type(exc).__name__}: {exc}"
        for s in cluster:
            s.stop()
        rc, summary = a.end()
        res |= {"rc": rc, "summary": summary.splitlines()[:2], "last_lines": a.lines[-2:] if rc else []}
        ok = rc == 0
        if ok:
            ok = self._compare(a, res, zk_tree)
        res["ok"] = ok
        self.results.append(res)
        with open(self.results_path, "a") as f:
            f.write(json.dumps(res) + "\n")
        if ok:
            shutil.rmtree(a.out, ignore_errors=True)
        else:  # ZooKeeper's dataDirs too, before terminate() wipes them: what differs is to be found
            for i, d in enumerate(a.data_dirs, 1):
                shutil.copytree(d, a.out / f"zk{i}", dirs_exist_ok=True)
            log.error("mirror %d: %s", a.index, res)

    def _compare(self, a: Attached, res: dict[str, Any], zk_tree: dict[str, Any] | None) -> bool:
        theirs: DataTree | None = None
        for d in a.data_dirs:
            try:
                t, _ = build_tree(str(d), None, lambda _: None)
            except ZooKeeperImportError as exc:
                res.setdefault("zk_dirs", []).append(f"{d}: {exc}")
                continue
            if theirs is None or t.applied > theirs.applied:
                theirs = t
        ours = mirrored_tree(a.out / "data1")
        if theirs is None:
            res["digest"] = "no ZooKeeper dataDir read"
            return False
        res |= {"zk_zxid": hex(theirs.applied), "mirror_zxid": hex(ours.applied), "znodes": len(ours.nodes),
                "sessions": len(ours.sessions), "digest_equal": (ours.digest, ours.applied) == (
                    theirs.digest, theirs.applied)}
        ok = bool(res["digest_equal"])
        if zk_tree is not None:
            zabd = LocalCluster(1, storage="disk", base_dir=a.out, extra={"zk_super_digest": SUPER_DIGEST})
            try:
                zabd.start()
                asyncio.run(zabd.wait_leader(timeout=60))
                diff = diff_trees(zk_tree, read_tree(zabd.zk_hosts, auth=SUPER_AUTH))
            finally:
                zabd.stop()
            res |= {"served_paths": len(zk_tree), "served_diff": len(diff), "served_diff_first": diff[:5]}
            ok = ok and not diff
        return ok


STATE: MirrorState | None = None


def pytest_configure(config: pytest.Config) -> None:
    global STATE
    from kazoo.testing import common

    STATE = MirrorState()
    state = STATE
    start, terminate = common.ZookeeperCluster.start, common.ZookeeperCluster.terminate

    def start_mirrored(self: Any) -> None:
        start(self)
        state.attach(self)

    def terminate_mirrored(self: Any) -> None:
        state.detach(self)
        terminate(self)

    common.ZookeeperCluster.start = start_mirrored
    common.ZookeeperCluster.terminate = terminate_mirrored


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if STATE is not None:
        STATE.current_test = item.nodeid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The last ensemble (terminated only at exit otherwise), before the summary."""
    import kazoo.testing.harness as harness

    if STATE is not None and STATE.attached is not None and harness.CLUSTER is not None:
        harness.CLUSTER.terminate()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if STATE is None:
        return
    tr = terminalreporter
    tr.section("zabd mirror")
    res = STATE.results
    good = [r for r in res if r["ok"]]
    served = [r for r in res if "served_diff" in r]
    tr.write_line(f"results: {STATE.results_path}")
    tr.write_line(f"mirror: {len(res)} ensembles followed, {len(good)} equal; digests equal "
                  f"{sum(bool(r.get('digest_equal')) for r in res)}/{len(res)}; served trees equal "
                  f"{sum(r['served_diff'] == 0 for r in served)}/{len(served)} "
                  f"({sum(r['served_paths'] for r in served)} paths); syncs missed "
                  f"{sum(not r['synced'] for r in res)}")
    for r in res:
        if not r["ok"]:
            tr.write_line(f"mirror {r['mirror']} DIFFERS ({r['started_in']} .. {r['ended_in']}): "
                          f"{ {k: v for k, v in r.items() if k not in ('mirror', 'started_in', 'ended_in')} }")
