"""Bytes per znode: ZooKeeper 3.8's heap against zabd's in-Python data tree (issue 17).

    python3 bench/zk_memory.py [--znodes 1000000] [--data-bytes 100] [--side zookeeper|zabd|both]
                               [--fanout 1000] [--heap 4g] [--no-restart] [--keep]

Both sides hold the same deterministic tree (``tree_items``)::

    /m                    no data
    /m/p0000 .. /m/pPPPP  P = ceil(znodes / fanout) parents, no data
    /m/p0123/n000456      leaf k = parent * fanout + child (k < znodes), --data-bytes bytes each,
                          byte j = (((k * 31) & 0xFF) + j) & 0xFF: distinct per znode, nothing to share

With the defaults that is 1000 parents x 1000 leaves of 100 B, paths of 16 characters.
Two levels instead of one flat parent: a 1M-child parent is not a realistic tree
(its ``getChildren`` reply alone is ~10 MB, ten times ZooKeeper's default jute.maxbuffer)
and would measure one giant child set. 1000 children per parent keeps every child set
ordinary, and the 1001 structural znodes are 0.1 % of the total.

ZooKeeper side: ONE standalone ZooKeeper 3.8 server (Debian jars, ``-Xmx`` from --heap, G1,
temporary dataDir under /tmp, free port on 127.0.0.1, admin server off, 4lw ``*``, other
settings default: forceSync=yes, snapCount=100000). ``bench/ZkTreeLoad.java`` (compiled with
``javac -implicit:none``) loads the tree with async creates, 4 sessions x 200 outstanding.
Heap is read on the empty server and again after the load (sessions closed, snapshot
writes finished), each time after three ``jcmd PID GC.run`` (full GCs):

* live bytes (the primary number): ``jmap -histo:live PID``'s total, the exact byte sum of
  all reachable objects (it forces another full GC). It does not depend on G1 region
  accounting, and it is the Java analogue of tracemalloc's traced bytes.
* used heap (cross-check): ``jcmd PID GC.heap_info`` "used" after the GCs (KiB resolution).

bytes/znode = (after - empty) / znodes created (leaves + parents + /m). With restart on
(the default) the server is then restarted on the same dataDir; ZooKeeper loads the
snapshot and the log, writes a snapshot of the whole tree, and the heap is measured
again: the same tree without anything left over from the load. Reported as well: RSS,
the size of the newest snapshot file (after the restart: the whole tree), the txn
log size, ``mntr``'s znode count and the load time.

zabd side: ``measure_zabd`` builds the same tree in this process through
``tests.zk.standalone.Standalone`` and measures tracemalloc's traced bytes (Python heap)
and the RSS delta (less tracemalloc's own bookkeeping), both from an empty tree with one
session, after ``gc.collect()``. Its load time includes tracemalloc's slowdown. The
snapshot column is ``len(DataTree.snapshot())``, zabd's own encoding of the whole tree.

Output: human-readable lines and a Markdown table on stdout, then one JSON line (last line).
Exit status 1 if a requested side could not be measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HERE = Path(__file__).resolve().parent
LOADER_SRC = HERE / "ZkTreeLoad.java"
ZK_JAR = Path("/usr/share/java/zookeeper.jar")
SERVER_CP = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
CLIENT_CP = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
MiB = 1 << 20
DEFAULT_FANOUT = 1000
LOADER_SESSIONS = 4
LOADER_WINDOW = 200


# ---------------------------------------------------------------- the tree (both sides)

def tree_shape(znodes: int, fanout: int) -> tuple[int, int]:
    """(parents, znodes created = leaves + parents + /m)."""
    parents = -(-znodes // fanout)
    if parents > 10_000 or fanout > 1_000_000:
        raise ValueError("path widths are p%04d / n%06d: need parents <= 10000 and fanout <= 1000000")
    return parents, znodes + parents + 1


def tree_items(znodes: int, fanout: int, data_bytes: int) -> Iterator[tuple[str, bytes]]:
    """(path, data) in creation order; the same tree and bytes as ``ZkTreeLoad.java``.

    Every leaf gets its own ``bytes`` object (a slice of a 256 + n byte ramp), as a
    server gets its own buffer per request.
    """
    parents, _ = tree_shape(znodes, fanout)
    ramp = bytes(i & 0xFF for i in range(256 + data_bytes))
    yield "/m", b""
    for p in range(parents):
        yield f"/m/p{p:04d}", b""
    for p in range(parents):
        for c in range(fanout):
            k = p * fanout + c
            if k >= znodes:
                return
            off = (k * 31) & 0xFF
            yield f"/m/p{p:04d}/n{c:06d}", ramp[off:off + data_bytes]


# ---------------------------------------------------------------- process helpers

def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(argv: list[str], timeout: float) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return r.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter(port: int, cmd: str, timeout: float = 3.0) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(cmd.encode())
            chunks = []
            while data := s.recv(65536):
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def mntr(port: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in four_letter(port, "mntr").splitlines():
        k, _, v = line.partition("\t")
        out[k] = v
    return out


def check_tools() -> None:
    missing = [t for t in ("java", "javac", "jcmd", "jmap") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: apt-get install -y openjdk-17-jdk-headless")
    if not ZK_JAR.exists():
        raise SystemExit("ZooKeeper is not installed: apt-get install -y zookeeper")


# ---------------------------------------------------------------- ZooKeeper server

class ZkServer:
    """One standalone ZooKeeper server; started and stopped by PID."""

    def __init__(self, base: Path, heap: str) -> None:
        self.base = base
        self.heap = heap
        self.data_dir = base / "data"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (base / "zoo.cfg").write_text(
            "tickTime=2000\n"
            f"dataDir={self.data_dir}\n"
            "clientPortAddress=127.0.0.1\n"
            f"clientPort={self.port}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=*\n"
            "autopurge.purgeInterval=0\n"
        )
        (base / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, F\n"
            "log4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={base}/zookeeper.log\n"
            "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n"
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 120.0) -> float:
        """Start and wait until it serves; returns the seconds that took."""
        self.starts += 1
        argv = ["java", f"-Xmx{self.heap}", f"-Xlog:gc:file={self.base}/gc{self.starts}.log",
                f"-Dlog4j.configuration=file:{self.base}/log4j.properties", f"-Dzookeeper.log.dir={self.base}",
                "-cp", SERVER_CP, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.base / "zoo.cfg")]
        t0 = time.monotonic()
        with open(self.base / f"stdout{self.starts}.log", "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.base}/zookeeper.log")
            if "Mode: standalone" in four_letter(self.port, "srvr", 1.0):
                return time.monotonic() - t0
            time.sleep(0.2)
        raise RuntimeError(f"ZooKeeper not serving after {timeout:.0f} s; see {self.base}/zookeeper.log")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)

    def snapshots(self) -> list[Path]:
        """Snapshot files, oldest first (by the zxid in the name)."""
        snaps = list((self.data_dir / "version-2").glob("snapshot.*"))
        return sorted(snaps, key=lambda p: int(p.name.split(".")[1], 16))

    def dir_bytes(self, prefix: str) -> int:
        return sum(p.stat().st_size for p in (self.data_dir / "version-2").glob(prefix + ".*"))

    def wait_files_quiet(self, stable_s: float = 3.0, timeout: float = 120.0) -> None:
        """Wait (bounded) until no file in dataDir changes size: a snapshot being written has finished."""
        def sizes() -> dict[str, int]:
            return {str(p): p.stat().st_size for p in self.data_dir.rglob("*") if p.is_file()}
        t0, last, since = time.monotonic(), sizes(), time.monotonic()
        while time.monotonic() - t0 < timeout:
            time.sleep(0.5)
            cur = sizes()
            if cur != last:
                last, since = cur, time.monotonic()
            elif time.monotonic() - since >= stable_s:
                return


HISTO_ROW = re.compile(r"^\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)")


def java_heap(pid: int, full_gcs: int = 3) -> dict[str, Any]:
    """Heap of a JVM after ``full_gcs`` x ``jcmd GC.run``: used (GC.heap_info) and live bytes (histo:live)."""
    for _ in range(full_gcs):
        run(["jcmd", str(pid), "GC.run"], 120)
    info = run(["jcmd", str(pid), "GC.heap_info"], 60)
    m = re.search(r"heap\s+total (\d+)K, used (\d+)K", info)
    if not m:
        raise RuntimeError(f"cannot parse GC.heap_info:\n{info}")
    committed, used = int(m.group(1)) * 1024, int(m.group(2)) * 1024
    histo = run(["jmap", "-histo:live", str(pid)], 300)
    classes: dict[str, tuple[int, int]] = {}
    for line in histo.splitlines():
        if hm := HISTO_ROW.match(line):
            classes[hm.group(3)] = (int(hm.group(1)), int(hm.group(2)))
    tm = re.search(r"^Total\s+(\d+)\s+(\d+)", histo, re.M)
    if not tm:
        raise RuntimeError("cannot parse jmap -histo:live total")
    return {"used_bytes": used, "committed_bytes": committed, "live_bytes": int(tm.group(2)),
            "live_objects": int(tm.group(1)), "rss_bytes": rss_bytes(pid), "classes": classes}


def class_delta(before: dict[str, Any], after: dict[str, Any], created: int, top: int = 10) -> list[dict[str, Any]]:
    rows = []
    for name, (n, b) in after["classes"].items():
        n0, b0 = before["classes"].get(name, (0, 0))
        rows.append({"class": name, "instances": n - n0, "bytes": b - b0,
                     "bytes_per_znode": round((b - b0) / created, 1)})
    rows.sort(key=lambda r: -r["bytes"])
    return rows[:top]


def heap_summary(h: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in h.items() if k != "classes"}


def per_znode(empty: dict[str, Any], after: dict[str, Any], created: int) -> dict[str, float]:
    return {"live": (after["live_bytes"] - empty["live_bytes"]) / created,
            "used": (after["used_bytes"] - empty["used_bytes"]) / created,
            "rss": (after["rss_bytes"] - empty["rss_bytes"]) / created}


def compile_loader(build: Path) -> None:
    build.mkdir(parents=True, exist_ok=True)
    run(["javac", "-implicit:none", "-cp", str(ZK_JAR), "-d", str(build), str(LOADER_SRC)], 180)


def measure_zookeeper(znodes: int, data_bytes: int, fanout: int, heap: str, restart: bool, keep: bool,
                      max_seconds: float) -> dict[str, Any]:
    check_tools()
    parents, created = tree_shape(znodes, fanout)
    base = Path(tempfile.mkdtemp(prefix="zk_memory.", dir="/tmp"))
    srv = ZkServer(base, heap)
    res: dict[str, Any] = {"dir": str(base), "heap_flag": f"-Xmx{heap}", "znodes_created": created,
                           "leaves": znodes, "parents": parents}
    try:
        compile_loader(base / "build")
        res["start_s"] = round(srv.start(), 2)
        time.sleep(2)
        flags = run(["jcmd", str(srv.pid), "VM.flags"], 60)
        res["vm_flags"] = " ".join(f for f in flags.split() if f.startswith("-XX:") and any(
            k in f for k in ("GC", "CompressedOops", "CompressedClassPointers", "HeapSize", "ObjectAlignment")))
        empty = java_heap(srv.pid)
        res["empty"] = heap_summary(empty) | {"znode_count": int(mntr(srv.port).get("zk_znode_count", "-1"))}
        print(f"zookeeper: empty server pid {srv.pid} port {srv.port}: live {empty['live_bytes'] / MiB:.1f} MiB, "
              f"used {empty['used_bytes'] / MiB:.1f} MiB, RSS {empty['rss_bytes'] / MiB:.1f} MiB", flush=True)

        argv = ["java", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error",
                "-cp", f"{base / 'build'}:{CLIENT_CP}", "ZkTreeLoad", "--connect", f"127.0.0.1:{srv.port}",
                "--znodes", str(znodes), "--fanout", str(fanout), "--data-bytes", str(data_bytes),
                "--sessions", str(LOADER_SESSIONS), "--window", str(LOADER_WINDOW), "--max-seconds", str(max_seconds)]
        print(f"zookeeper: loading {created:,} znodes ...", flush=True)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=max_seconds + 120)
        lines = r.stdout.strip().splitlines()
        load = json.loads(lines[-1]) if lines else {}
        if r.returncode != 0 or not load.get("complete"):
            raise RuntimeError(f"loader failed ({r.returncode}): {r.stdout.strip()} {r.stderr.strip()[-1000:]}")
        res["load"] = load
        print(f"zookeeper: loaded in {load['seconds']:.1f} s ({load['creates_per_s']:,.0f} creates/s)", flush=True)

        srv.wait_files_quiet()
        after = java_heap(srv.pid)
        stat = mntr(srv.port)
        res["after_load"] = heap_summary(after) | {
            "znode_count": int(stat.get("zk_znode_count", "-1")),
            "approximate_data_size": int(stat.get("zk_approximate_data_size", "-1"))}
        res["per_znode_after_load"] = per_znode(empty, after, created)
        res["top_classes"] = class_delta(empty, after, created)
        snaps = srv.snapshots()
        res["snapshots_after_load"] = len(snaps)
        res["newest_snapshot_after_load"] = (
            {"file": snaps[-1].name, "bytes": snaps[-1].stat().st_size} if snaps else None)
        res["txn_log_bytes"] = srv.dir_bytes("log")
        print(f"zookeeper: after load: live {after['live_bytes'] / MiB:.1f} MiB, used {after['used_bytes'] / MiB:.1f}"
              f" MiB, RSS {after['rss_bytes'] / MiB:.1f} MiB, znode_count {res['after_load']['znode_count']:,}",
              flush=True)

        if restart:
            srv.stop()
            res["restart_s"] = round(srv.start(timeout=max_seconds), 2)
            srv.wait_files_quiet()
            again = java_heap(srv.pid)
            res["after_restart"] = heap_summary(again) | {
                "znode_count": int(mntr(srv.port).get("zk_znode_count", "-1"))}
            res["per_znode_after_restart"] = per_znode(empty, again, created)
            snaps = srv.snapshots()
            res["snapshot_full_tree"] = {"file": snaps[-1].name, "bytes": snaps[-1].stat().st_size}
            print(f"zookeeper: after restart ({res['restart_s']} s): live {again['live_bytes'] / MiB:.1f} MiB, used "
                  f"{again['used_bytes'] / MiB:.1f} MiB, RSS {again['rss_bytes'] / MiB:.1f} MiB, snapshot "
                  f"{snaps[-1].name} {snaps[-1].stat().st_size / MiB:.1f} MiB", flush=True)
        return res
    finally:
        srv.stop()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- zabd side

class ZabdSideUnavailable(RuntimeError):
    pass


def measure_zabd(znodes: int, data_bytes: int, fanout: int = DEFAULT_FANOUT,
                 max_seconds: float = 1800.0) -> dict[str, Any]:
    """zabd's side: the same tree in zabd's in-process DataTree, measured with tracemalloc and RSS.

    Bytes per znode = (traced bytes after - traced bytes with an empty tree and one session)
    / znodes created, after ``gc.collect()`` each time. RSS delta is corrected for
    tracemalloc's own bookkeeping (``tracemalloc.get_tracemalloc_memory``).
    """
    # ======== ZABD SIDE (issue 17): needs tests/zk/standalone.py ========
    try:
        from zabd.zk import records, standalone
    except ImportError as e:
        raise ZabdSideUnavailable(
            f"zabd side not available yet ({e}): needs tests.zk.standalone.Standalone and "
            "zabd.zk.records.Create") from e
    parents, created = tree_shape(znodes, fanout)
    pid = os.getpid()
    create, error_result = records.Create, records.ErrorResult
    gc.collect()
    tracemalloc.start()
    sa = standalone.Standalone()
    sid = sa.session(30000)
    gc.collect()
    count0 = len(sa.tree)
    traced0, rss0, tm0 = tracemalloc.get_traced_memory()[0], rss_bytes(pid), tracemalloc.get_tracemalloc_memory()
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    n = 0
    for path, data in tree_items(znodes, fanout, data_bytes):
        result = sa.write(sid, create(path, data))
        if type(result) is error_result:
            raise RuntimeError(f"zabd create {path} failed: {result}")
        n += 1
        if n % 65536 == 0 and time.monotonic() > deadline:
            raise RuntimeError(f"zabd load passed --max-seconds after {n:,} creates")
    load_s = time.monotonic() - t0
    gc.collect()
    traced1, rss1, tm1 = tracemalloc.get_traced_memory()[0], rss_bytes(pid), tracemalloc.get_tracemalloc_memory()
    # allocation sites of what is still alive; the paths and data bytes are attributed to this
    # file (tree_items makes them), whatever in zabd keeps them
    top = tracemalloc.take_snapshot().statistics("filename")[:8]
    tracemalloc.stop()
    count1 = len(sa.tree)
    if count1 - count0 != created:
        raise RuntimeError(f"zabd tree grew by {count1 - count0:,} nodes, expected {created:,}")
    snap_bytes = len(sa.tree.snapshot())  # zabd's own snapshot encoding (msgpack), for the on-disk column
    res: dict[str, Any] = {
        "znodes_created": n, "leaves": znodes, "parents": parents, "node_count": count1,
        "load_s": round(load_s, 2), "creates_per_s": round(n / load_s, 1),
        "traced_bytes_empty": traced0, "traced_bytes_after": traced1,
        "rss_bytes_empty": rss0, "rss_bytes_after": rss1, "tracemalloc_overhead_bytes": tm1 - tm0,
        "per_znode": {"traced": (traced1 - traced0) / created,
                      "rss": (rss1 - rss0 - (tm1 - tm0)) / created},
        "snapshot_bytes": snap_bytes,
        "top_files": [{"file": str(s.traceback[0].filename), "bytes": s.size, "blocks": s.count} for s in top],
    }
    del sa
    gc.collect()
    return res
    # ======== end ZABD SIDE ========


# ---------------------------------------------------------------- report

def report(args: argparse.Namespace, zk: dict[str, Any] | None, zb: dict[str, Any] | None,
           errors: dict[str, str]) -> None:
    zk_bpz = zk["per_znode_after_load"]["live"] if zk else None
    zb_bpz = zb["per_znode"]["traced"] if zb else None
    ratio = zb_bpz / zk_bpz if zk_bpz and zb_bpz else None
    print()
    print(f"tree: {args.znodes:,} leaves of {args.data_bytes} B under {-(-args.znodes // args.fanout):,} parents"
          f" (fanout {args.fanout}), paths like /m/p0123/n000456")
    if zk:
        pz = zk["per_znode_after_load"]
        print(f"ZooKeeper bytes/znode: {pz['live']:.1f} live (jmap -histo:live), {pz['used']:.1f} used heap "
              f"(GC.heap_info), {pz['rss']:.1f} RSS")
        if "per_znode_after_restart" in zk:
            pr = zk["per_znode_after_restart"]
            print(f"ZooKeeper bytes/znode after restart from snapshot: {pr['live']:.1f} live, {pr['used']:.1f} used")
    if zb:
        print(f"zabd bytes/znode: {zb['per_znode']['traced']:.1f} traced (tracemalloc), "
              f"{zb['per_znode']['rss']:.1f} RSS")
    for side, err in errors.items():
        print(f"{side}: NOT MEASURED: {err}")
    if ratio:
        print(f"ratio zabd / ZooKeeper: {ratio:.2f}")
    print()
    print("| side | znodes | bytes/znode (live heap) | bytes/znode (used heap / RSS) | heap delta MiB "
          "| RSS after MiB | load s | creates/s | snapshot MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    if zk:
        e, a, pz = zk["empty"], zk["after_load"], zk["per_znode_after_load"]
        snap = zk.get("snapshot_full_tree") or zk.get("newest_snapshot_after_load") or {"bytes": 0}
        print(f"| ZooKeeper 3.8.0 ({zk['heap_flag']}) | {zk['znodes_created']:,} | {pz['live']:.1f} "
              f"| {pz['used']:.1f} / {pz['rss']:.1f} | {(a['live_bytes'] - e['live_bytes']) / MiB:.1f} "
              f"| {a['rss_bytes'] / MiB:.1f} | {zk['load']['seconds']:.1f} | {zk['load']['creates_per_s']:,.0f} "
              f"| {snap['bytes'] / MiB:.1f} |")
        if "after_restart" in zk:
            r, pr = zk["after_restart"], zk["per_znode_after_restart"]
            print(f"| ZooKeeper, restarted from snapshot | {r['znode_count'] - e['znode_count']:,} | {pr['live']:.1f} "
                  f"| {pr['used']:.1f} / {pr['rss']:.1f} | {(r['live_bytes'] - e['live_bytes']) / MiB:.1f} "
                  f"| {r['rss_bytes'] / MiB:.1f} | {zk['restart_s']:.1f} (restart) | | |")
    if zb:
        pz = zb["per_znode"]
        print(f"| zabd (Python {sys.version.split()[0]}) | {zb['znodes_created']:,} | {pz['traced']:.1f} "
              f"| n/a / {pz['rss']:.1f} | {(zb['traced_bytes_after'] - zb['traced_bytes_empty']) / MiB:.1f} "
              f"| {zb['rss_bytes_after'] / MiB:.1f} | {zb['load_s']:.1f} | {zb['creates_per_s']:,.0f} "
              f"| {zb['snapshot_bytes'] / MiB:.1f} |")
    if zk:
        print()
        print("ZooKeeper heap growth by class (jmap -histo:live, after load minus empty):")
        print()
        print("| class | instances | MiB | bytes/znode |")
        print("|---|---|---|---|")
        for row in zk["top_classes"]:
            print(f"| `{row['class']}` | {row['instances']:,} | {row['bytes'] / MiB:.1f} | {row['bytes_per_znode']} |")
    if zb:
        print()
        print("zabd live Python heap by allocating file (tracemalloc, after load, empty tree included):")
        print()
        print("| file | blocks | MiB |")
        print("|---|---|---|")
        root = str(Path(__file__).resolve().parents[1]) + "/"
        for row in zb["top_files"]:
            print(f"| `{row['file'].removeprefix(root)}` | {row['blocks']:,} | {row['bytes'] / MiB:.1f} |")
    out = {"bench": "zk_memory", "znodes": args.znodes, "data_bytes": args.data_bytes, "fanout": args.fanout,
           "side": args.side, "zookeeper": zk, "zabd": zb, "errors": errors,
           "zookeeper_bytes_per_znode": zk_bpz, "zabd_bytes_per_znode": zb_bpz, "ratio_zabd_over_zookeeper": ratio,
           "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print()
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--znodes", type=int, default=1_000_000, help="leaf znodes with data (default 1000000)")
    ap.add_argument("--data-bytes", type=int, default=100, help="data bytes per leaf (default 100)")
    ap.add_argument("--side", choices=("zookeeper", "zabd", "both"), default="both")
    ap.add_argument("--fanout", type=int, default=DEFAULT_FANOUT, help="leaves per parent (default 1000)")
    ap.add_argument("--heap", default="4g", help="ZooKeeper -Xmx (default 4g)")
    ap.add_argument("--no-restart", dest="restart", action="store_false",
                    help="skip the restart (full-tree snapshot, heap of the reloaded tree)")
    ap.add_argument("--keep", action="store_true", help="keep the ZooKeeper temp dir (logs, snapshots)")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="cap on each side's load (default 900)")
    args = ap.parse_args()
    if args.znodes < 1 or args.data_bytes < 0 or args.fanout < 1:
        ap.error("--znodes and --fanout must be >= 1, --data-bytes >= 0")
    tree_shape(args.znodes, args.fanout)

    zk: dict[str, Any] | None = None
    zb: dict[str, Any] | None = None
    errors: dict[str, str] = {}
    if args.side in ("zookeeper", "both"):
        try:
            zk = measure_zookeeper(args.znodes, args.data_bytes, args.fanout, args.heap, args.restart, args.keep,
                                   args.max_seconds)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            errors["zookeeper"] = str(e)
    if args.side in ("zabd", "both"):
        try:
            zb = measure_zabd(args.znodes, args.data_bytes, args.fanout, args.max_seconds)
        except ZabdSideUnavailable as e:
            errors["zabd"] = str(e)
    report(args, zk, zb, errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
