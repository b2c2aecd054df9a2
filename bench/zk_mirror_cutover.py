"""Cutover under load: a ZooKeeper 3.8 ensemble replaced by zabd through ``zabd mirror`` (issue 40).

    python3 bench/zk_mirror_cutover.py                         # 10,000 znodes, 4 writers, 1 run
    python3 bench/zk_mirror_cutover.py --runs 3 --zk-restart   # medians, and ZooKeeper's own restart beside it
    python3 bench/zk_mirror_cutover.py --znodes 1000000 --zk-heap 2g --json /tmp/cut.json

One run of the cutover, in order (every process started here is stopped by PID, every wait
has a deadline):

1. a 3-node ZooKeeper 3.8 ensemble (``tests.zk.migration_harness.ZooKeeperEnsemble``, with
   ZooKeeper's default snapCount and preAllocSize instead of the harness's tiny ones), and
   ``bench/ZkTreeLoad.java`` (4 Java sessions x 200 outstanding async creates) preloading
   ``--znodes`` leaves of 100 bytes under /m;
2. ``zabd mirror --quorum ... --out OUT --nodes 3 --cutover --cutover-grace G --finish-from
   <each ZooKeeper dataDir>`` attached, until it says "in sync at";
3. ``--writers`` kazoo clients (threads of this process), each with BOTH ensembles in its
   connect string (ZooKeeper's three servers and the three zabd will have, which do not
   listen yet), each in a loop alternating ``setData`` of one of its own 50 keys and a
   ``create`` (create2: the Stat, hence the zxid) of a new node, every op's send and
   completion time, zxid or error recorded; one op outstanding per writer;
4. while they write (``--load-seconds``): every ``--sample-ms`` the ZooKeeper leader's
   ``srvr`` Zxid and the last zxid in the mirror's own log (read from the end of
   ``OUT/data1/log``): the mirror's lag, in txns and in seconds (how long before the
   sample ZooKeeper's leader had reached the zxid the mirror holds, at sample resolution);
5. T0: SIGTERM to all three ZooKeeper servers at once; the mirror exits by itself once
   nobody has led for G s (then takes what the stopped servers logged after its last txn:
   --finish-from); the moment it exits, a zabd cluster starts on OUT
   (``LocalCluster(3, storage="disk", base_dir=OUT)``), until every node agrees on a leader;
6. the writers go on until each has ``--after-ops`` successes on zabd (or ``--after-seconds``
   pass), then stop; every write a writer saw succeed is checked against zabd's tree (the
   value a path holds is the last acknowledged one, or one of a write whose outcome the
   writer could not know, sent after it; every acknowledged create is there with its data).

Per writer: its last success on ZooKeeper and its first on zabd, measured from T0; the gap
between them (the unavailability it saw); whether its session survived (same session id,
never LOST). An op is ZooKeeper's or zabd's by its zxid's epoch: zabd's first epoch is above
ZooKeeper's last. Per run: T0 -> mirror exit, mirror exit -> zabd leader, the lag.

``--zk-restart``: the reference. The same ensemble, preload and writers (ZooKeeper's servers
only in the connect string), then SIGTERM to all three (T0), all three started again on
their data; the same per-writer gap. The summary gives the cutover's gap over this one.

Kazoo's reconnect policy is the migration harness's (retry forever, 0.1 s doubling by 1.5 to
1 s at most between rounds of the host list), session timeout 30 s, in both scenarios: part of
every gap is that backoff, the same on both sides.

Output: progress on stderr; per run a table of writers, then the medians over the runs
(markdown) and one JSON line on stdout (--json PATH writes it too). Needs ``apt-get install
zookeeper libslf4j-java default-jdk-headless`` and kazoo.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import crc32c  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import KazooException  # noqa: E402
from kazoo.handlers.threading import KazooTimeoutError  # noqa: E402
from kazoo.protocol.states import KazooState  # noqa: E402
from zk_memory import compile_loader  # noqa: E402
from zk_scale import run_loader  # noqa: E402
from zkcluster import available, four_letter  # noqa: E402

from tests.zk.migration_harness import ZooKeeperEnsemble  # noqa: E402
from zabd import compiled  # noqa: E402
from zabd.client.spawn import LocalCluster  # noqa: E402
from zabd.protocol import zxid as zx  # noqa: E402
from zabd.storage.txnlog import REC_HEADER, REC_HEADER_SIZE, SEG_HEADER_SIZE, list_segments  # noqa: E402

SESSION_TIMEOUT_S = 30.0
OP_TIMEOUT_S = 60.0  # one op, sent while both ensembles are down, waits for zabd
START_TIMEOUT_S = 180.0
KEYS = 50  # setData targets per writer
DATA_BYTES = 100
ZK_CFG = ["snapCount=100000", "preAllocSize=65536"]  # ZooKeeper's defaults, over the harness's test values


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------- writers

@dataclass(slots=True)
class Op:
    kind: str  # "set" or "create"
    path: str
    value: bytes
    sent: float  # monotonic
    done: float
    zxid: int  # of the write; 0 when it failed
    error: str  # "" when it succeeded, else the exception's name (the outcome is then unknown)


@dataclass
class Writer:
    """One kazoo client writing under /cut/w<i>, one op at a time."""
    index: int
    hosts: str
    max_ops: int
    deadline: float  # monotonic: no op is sent after it
    ops: list[Op] = field(default_factory=list)
    states: list[tuple[float, str]] = field(default_factory=list)
    session_start: int = 0
    session_end: int = 0
    failure: str = ""

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.client = KazooClient(hosts=self.hosts, timeout=SESSION_TIMEOUT_S, connection_retry={
            "max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0})
        # until finish(): stopping the client says LOST too
        self.client.add_listener(lambda state: None if self.stop.is_set() else
                                 self.states.append((time.monotonic(), str(state))))
        self.thread = threading.Thread(target=self._run, name=f"writer{self.index}", daemon=True)

    @property
    def base(self) -> str:
        return f"/cut/w{self.index}"

    def start(self) -> None:
        self.client.start(timeout=60)
        self.session_start = self.client.client_id[0]
        self.client.ensure_path(self.base)
        for k in range(KEYS):
            self.client.create(f"{self.base}/k{k:02d}", b"init")
        self.thread.start()

    def _run(self) -> None:
        seq = 0
        try:
            while not self.stop.is_set() and seq < self.max_ops and time.monotonic() < self.deadline:
                seq += 1
                value = f"{self.index}:{seq}:".encode().ljust(DATA_BYTES, b".")
                if seq % 2:
                    kind, path = "set", f"{self.base}/k{(seq // 2) % KEYS:02d}"
                else:
                    kind, path = "create", f"{self.base}/c{seq:08d}"
                sent = time.monotonic()
                zxid, error = 0, ""
                try:
                    if kind == "set":
                        zxid = self.client.set_async(path, value).get(timeout=OP_TIMEOUT_S).mzxid
                    else:
                        _, stat = self.client.create_async(path, value, include_data=True).get(timeout=OP_TIMEOUT_S)
                        zxid = stat.czxid
                except (KazooException, KazooTimeoutError) as exc:
                    error = type(exc).__name__
                self.ops.append(Op(kind, path, value, sent, time.monotonic(), zxid, error))
        except Exception as exc:  # a bug here must show in the report, not end the thread silently
            self.failure = f"{type(exc).__name__}: {exc}"

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(OP_TIMEOUT_S + 10)
        self.session_end = self.client.client_id[0] if self.client.client_id else 0
        with contextlib.suppress(Exception):
            self.client.stop()
            self.client.close()

    def ok(self) -> list[Op]:
        return [o for o in self.ops if not o.error]


# ---------------------------------------------------------------- the mirror and its log

class LogTail:
    """The last zxid in a zabd data directory's log, read from where the
    previous call stopped (the mirror appends; its segments roll)."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / "log"
        self.seq = -1
        self.pos = 0
        self.last = 0

    def poll(self) -> int:
        with contextlib.suppress(OSError):
            for seq, path in list_segments(str(self.dir)):
                if seq < self.seq:
                    continue
                if seq > self.seq:
                    self.seq, self.pos = seq, SEG_HEADER_SIZE
                self._read(path)
        return self.last

    def _read(self, path: str) -> None:
        with open(path, "rb") as f:
            f.seek(self.pos)
            buf = f.read(16 << 20)
        pos = 0
        while pos + REC_HEADER_SIZE <= len(buf):
            crc, n, z = REC_HEADER.unpack_from(buf, pos)
            end = pos + REC_HEADER_SIZE + n
            if z == 0 or end > len(buf) or crc32c.crc32c(buf[pos + 4:end]) != crc:
                break  # the preallocated zeros, or a record still being written: read it next time
            self.last = z
            pos = end
        self.pos += pos


class MirrorProcess:
    """``zabd mirror`` as a child: its progress lines kept with their times, its exit time."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self.proc = subprocess.Popen([sys.executable, "-m", "zabd", "mirror", *argv], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[tuple[float, str]] = []
        self.changed = threading.Condition()
        self.exited_at = 0.0
        self.stdout = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None and self.proc.stdout is not None
        with open(self.log_path, "a") as out:
            for line in self.proc.stderr:
                out.write(line)
                with self.changed:
                    self.lines.append((time.monotonic(), line.rstrip("\n")))
                    self.changed.notify_all()
        self.stdout = self.proc.stdout.read()
        self.proc.wait()
        with self.changed:
            self.exited_at = time.monotonic()
            self.changed.notify_all()

    def wait_line(self, text: str, timeout: float) -> float:
        """When a progress line containing ``text`` came."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for t, line in self.lines:
                    if text in line:
                        return t
                left = deadline - time.monotonic()
                if left <= 0 or self.exited_at:
                    tail = [s for _, s in self.lines[-5:]]
                    raise RuntimeError(f"no {text!r} from the mirror (exited: {bool(self.exited_at)}): {tail}")
                self.changed.wait(left)

    def wait_exit(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not self.exited_at:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"the mirror did not exit in {timeout} s")
                self.changed.wait(left)
        return self.exited_at

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# ---------------------------------------------------------------- measuring

def srvr_zxid(port: int) -> int:
    for line in four_letter("127.0.0.1", port).splitlines():
        if line.startswith("Zxid: "):
            return int(line[6:].strip(), 16)
    return 0


@dataclass
class Sampler:
    """ZooKeeper's leader's zxid and the mirror's log end, every ``every`` s."""
    leader_port: int
    tail: LogTail | None
    every: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # t, leader zxid, mirror zxid

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            z = srvr_zxid(self.leader_port)
            m = self.tail.poll() if self.tail is not None else 0
            if z:
                self.samples.append((time.monotonic(), z, m))

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)

    def lag(self) -> dict[str, Any]:
        """Txns the mirror's log was behind the leader at each sample, and how
        long before each sample the leader had reached what the mirror held."""
        txns: list[int] = []
        secs: list[float] = []
        for t, z, m in self.samples:
            if not m:
                continue
            txns.append(z - m if zx.epoch_of(z) == zx.epoch_of(m) else 0)
            reached = next((t2 for t2, z2, _ in self.samples if z2 >= m), t)
            secs.append(max(0.0, t - reached))
        if not txns:
            return {}
        return {"samples": len(txns), "txns_p50": statistics.median(txns), "txns_max": max(txns),
                "s_p50": round(statistics.median(secs), 3), "s_max": round(max(secs), 3)}


def cpu_busy() -> tuple[int, int]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def verify(hosts: str, writers: list[Writer]) -> dict[str, Any]:
    """Every acknowledged write against the tree at ``hosts``."""
    c = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S)
    c.start(timeout=60)
    lost: list[str] = []
    checked = 0
    try:
        c.sync("/cut")
        for w in writers:
            # per path, in send order: the last acknowledged value, and every value of an
            # unknown outcome sent after it (any of those may be what the path holds)
            may: dict[str, set[bytes]] = {}
            acked: dict[str, bytes] = {}
            for o in w.ops:
                if o.error:
                    may.setdefault(o.path, set()).add(o.value)
                else:
                    acked[o.path] = o.value
                    may[o.path] = {o.value}
            paths = sorted(acked)
            for lo in range(0, len(paths), 200):
                chunk = paths[lo:lo + 200]
                for p, ar in [(p, c.get_async(p)) for p in chunk]:
                    checked += 1
                    try:
                        data, _ = ar.get(timeout=60)
                    except KazooException as exc:
                        lost.append(f"{p}: {type(exc).__name__} (acknowledged {acked[p][:16]!r})")
                        continue
                    if data not in may[p]:
                        lost.append(f"{p}: holds {data[:16]!r}, acknowledged {acked[p][:16]!r}")
    finally:
        c.stop()
        c.close()
    return {"paths_checked": checked, "lost": len(lost), "lost_first": lost[:5]}


def writer_row(w: Writer, t0: float, epoch_before: int) -> dict[str, Any]:
    ok = w.ok()
    before = [o for o in ok if zx.epoch_of(o.zxid) <= epoch_before]
    after = [o for o in ok if zx.epoch_of(o.zxid) > epoch_before]
    last = max((o.done for o in before), default=None)
    first = min((o.done for o in after), default=None)
    errors: dict[str, int] = {}
    for o in w.ops:
        if o.error:
            errors[o.error] = errors.get(o.error, 0) + 1
    lost_state = any(s == KazooState.LOST for _, s in w.states)
    return {
        "writer": w.index, "ops_before": len(before), "ops_after": len(after), "errors": errors,
        "last_before_s": None if last is None else round(last - t0, 3),
        "first_after_s": None if first is None else round(first - t0, 3),
        "gap_s": None if last is None or first is None else round(first - last, 3),
        "session_kept": bool(w.session_start) and w.session_end == w.session_start and not lost_state,
        "failure": w.failure,
    }


def wait_after(writers: list[Writer], epoch_before: int, want: int, timeout: float) -> None:
    """Until every writer has ``want`` successes in an epoch above ``epoch_before``
    (polling the writers' lists: they are threads of this process)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(sum(zx.epoch_of(o.zxid) > epoch_before for o in w.ok()) >= want or not w.thread.is_alive()
               for w in writers):
            return
        time.sleep(0.2)


# ---------------------------------------------------------------- one run

def ensemble_with_tree(base: Path, args: argparse.Namespace, build: Path) -> tuple[ZooKeeperEnsemble, float]:
    zk = ZooKeeperEnsemble(base / "zk", 3, cfg=ZK_CFG, heap=args.zk_heap)
    zk.start(timeout=START_TIMEOUT_S)
    started = time.monotonic()
    run_loader(build, zk.hosts, args.znodes, DATA_BYTES, args.preload_max_seconds)
    return zk, time.monotonic() - started


def run_cutover(work: Path, args: argparse.Namespace, build: Path) -> dict[str, Any]:
    out = work / "zabd"
    zk: ZooKeeperEnsemble | None = None
    zabd = LocalCluster(3, storage="disk", base_dir=out)  # its ports now; its files once the mirror is done
    mirror: MirrorProcess | None = None
    writers: list[Writer] = []
    sampler: Sampler | None = None
    res: dict[str, Any] = {"scenario": "cutover", "znodes": args.znodes, "writers": args.writers,
                           "cutover_grace_s": args.cutover_grace, "load1_start": os.getloadavg()[0]}
    busy0 = cpu_busy()
    try:
        zk, res["preload_s"] = ensemble_with_tree(work, args, build)
        log(f"cutover: {args.znodes:,} znodes preloaded in {res['preload_s']:.1f} s")
        quorum = ",".join(f"127.0.0.1:{zk.quorum_ports[i]}" for i in zk.ids)
        margv = ["--quorum", quorum, "--out", str(out), "--nodes", "3", "--cutover",
                 "--cutover-grace", str(args.cutover_grace)]
        if not args.no_finish_from:
            for i in zk.ids:
                margv += ["--finish-from", str(zk.data_dir(i))]
        t = time.monotonic()
        mirror = MirrorProcess(margv, work / "mirror.log")
        res["mirror_sync_s"] = round(mirror.wait_line("in sync at", START_TIMEOUT_S) - t, 2)
        log(f"cutover: the mirror is in sync after {res['mirror_sync_s']} s")
        hosts = f"{zk.hosts},{zabd.zk_hosts}"
        deadline = time.monotonic() + args.load_seconds + args.after_seconds + START_TIMEOUT_S
        writers = [Writer(i, hosts, args.max_ops, deadline) for i in range(args.writers)]
        for w in writers:
            w.start()
        leader = zk.leader()
        sampler = Sampler(zk.client_ports[leader], LogTail(out / "data1"), args.sample_ms / 1000)
        time.sleep(args.load_seconds)  # the load's window: the writers and the sampler run meanwhile
        sampler.finish()
        epoch_before = zx.epoch_of(srvr_zxid(zk.client_ports[leader]))

        t0 = time.monotonic()
        stopper = threading.Thread(target=zk.stop, daemon=True)  # SIGTERM to all three at once, then waits
        stopper.start()
        exited = mirror.wait_exit(START_TIMEOUT_S)
        zabd.start()
        asyncio.run(zabd.wait_leader(timeout=START_TIMEOUT_S))
        leading = time.monotonic()
        stopper.join(60)
        epoch_before = max([epoch_before] + [zx.epoch_of(o.zxid) for w in writers for o in w.ok() if o.done < t0])
        wait_after(writers, epoch_before, args.after_ops, args.after_seconds)
        for w in writers:
            w.finish()
        rows = [writer_row(w, t0, epoch_before) for w in writers]
        res |= {
            "lag": sampler.lag(),
            "t0_to_mirror_exit_s": round(exited - t0, 3),
            "mirror_exit_to_zabd_leader_s": round(leading - exited, 3),
            "t0_to_zabd_leader_s": round(leading - t0, 3),
            "mirror_summary": mirror.stdout.strip().splitlines()[:2],
            "mirror_warnings": [s for _, s in mirror.lines if "warning" in s],
            "writers_rows": rows,
            "ops_total": sum(len(w.ops) for w in writers),
            "verify": verify(zabd.zk_hosts, writers),
        }
        if mirror.proc.returncode != 0:
            res["error"] = f"the mirror exited {mirror.proc.returncode}: {[s for _, s in mirror.lines[-3:]]}"
        return res
    finally:
        if sampler is not None:
            sampler.finish()
        for w in writers:
            if w.thread.is_alive() or w.client.connected:
                w.finish()
        if mirror is not None:
            mirror.stop()
        if zk is not None:
            zk.stop()
        zabd.stop()
        b1 = cpu_busy()
        res["machine_busy_pct"] = round(100 * (b1[0] - busy0[0]) / max(1, b1[1] - busy0[1]), 1)
        res["load1_end"] = os.getloadavg()[0]


def run_zk_restart(work: Path, args: argparse.Namespace, build: Path) -> dict[str, Any]:
    zk: ZooKeeperEnsemble | None = None
    writers: list[Writer] = []
    res: dict[str, Any] = {"scenario": "zk-restart", "znodes": args.znodes, "writers": args.writers,
                           "load1_start": os.getloadavg()[0]}
    busy0 = cpu_busy()
    try:
        zk, res["preload_s"] = ensemble_with_tree(work, args, build)
        log(f"zk-restart: {args.znodes:,} znodes preloaded in {res['preload_s']:.1f} s")
        deadline = time.monotonic() + args.load_seconds + args.after_seconds + START_TIMEOUT_S
        writers = [Writer(i, zk.hosts, args.max_ops, deadline) for i in range(args.writers)]
        for w in writers:
            w.start()
        leader = zk.leader()
        time.sleep(args.load_seconds)  # the load's window, as in the cutover
        epoch_before = zx.epoch_of(srvr_zxid(zk.client_ports[leader]))
        t0 = time.monotonic()
        zk.stop()
        stopped = time.monotonic()
        zk.start(wipe=False, timeout=START_TIMEOUT_S)
        serving = time.monotonic()
        epoch_before = max([epoch_before] + [zx.epoch_of(o.zxid) for w in writers for o in w.ok() if o.done < t0])
        wait_after(writers, epoch_before, args.after_ops, args.after_seconds)
        for w in writers:
            w.finish()
        res |= {
            "t0_to_zk_exit_s": round(stopped - t0, 3),
            "zk_start_to_serving_s": round(serving - stopped, 3),
            "writers_rows": [writer_row(w, t0, epoch_before) for w in writers],
            "ops_total": sum(len(w.ops) for w in writers),
            "verify": verify(zk.hosts, writers),
        }
        return res
    finally:
        for w in writers:
            if w.thread.is_alive() or w.client.connected:
                w.finish()
        if zk is not None:
            zk.stop()
        b1 = cpu_busy()
        res["machine_busy_pct"] = round(100 * (b1[0] - busy0[0]) / max(1, b1[1] - busy0[1]), 1)
        res["load1_end"] = os.getloadavg()[0]


# ---------------------------------------------------------------- report

def _med(values: list[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return round(statistics.median(vs), 3) if vs else None


def summary(r: dict[str, Any]) -> dict[str, Any]:
    rows = r.get("writers_rows", [])
    gaps = [w["gap_s"] for w in rows]
    return {
        "gap_median_s": _med(gaps), "gap_max_s": max((g for g in gaps if g is not None), default=None),
        "sessions_kept": sum(w["session_kept"] for w in rows), "writers": len(rows),
        "lost": r.get("verify", {}).get("lost"), "checked": r.get("verify", {}).get("paths_checked"),
    }


def writer_table(r: dict[str, Any]) -> list[str]:
    after = "zabd" if r["scenario"] == "cutover" else "ZooKeeper again"
    lines = [f"| writer | ops on ZooKeeper | ops on {after} | last ok before (s from T0) | first ok after (s) "
             "| gap (s) | session kept | errors |", "|---|---|---|---|---|---|---|---|"]
    for w in r["writers_rows"]:
        lines.append(f"| {w['writer']} | {w['ops_before']} | {w['ops_after']} | {w['last_before_s']} | "
                     f"{w['first_after_s']} | {w['gap_s']} | {'yes' if w['session_kept'] else 'NO'} | "
                     f"{w['errors'] or '-'}{' ' + w['failure'] if w['failure'] else ''} |")
    return lines


def report(runs: list[dict[str, Any]], refs: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for k, r in enumerate(runs, 1):
        s = summary(r)
        lag = r.get("lag", {})
        out += ["", f"### cutover run {k}: {r['znodes']:,} znodes, {r['writers']} writers, grace "
                f"{r['cutover_grace_s']} s; machine {r['machine_busy_pct']} % busy, load1 {r['load1_start']:.2f} -> "
                f"{r['load1_end']:.2f}", ""]
        out += writer_table(r)
        out += ["", f"preload {r['preload_s']:.1f} s; mirror in sync {r['mirror_sync_s']} s after it started; "
                f"lag while writing: p50 {lag.get('txns_p50')} / max {lag.get('txns_max')} txns, "
                f"p50 {lag.get('s_p50')} / max {lag.get('s_max')} s ({lag.get('samples')} samples); "
                f"T0 -> mirror exit {r['t0_to_mirror_exit_s']} s, mirror exit -> zabd leader "
                f"{r['mirror_exit_to_zabd_leader_s']} s; {r['ops_total']:,} ops; acknowledged writes checked "
                f"{s['checked']}, lost {s['lost']} {r['verify']['lost_first'] or ''}; mirror: "
                f"{' '.join(x.strip() for x in r['mirror_summary'])}"
                f"{' ' + str(r['mirror_warnings']) if r['mirror_warnings'] else ''}"
                f"{' ERROR ' + r['error'] if r.get('error') else ''}"]
    for k, r in enumerate(refs, 1):
        s = summary(r)
        out += ["", f"### ZooKeeper full restart, run {k}: machine {r['machine_busy_pct']} % busy, load1 "
                f"{r['load1_start']:.2f} -> {r['load1_end']:.2f}", ""]
        out += writer_table(r)
        out += ["", f"preload {r['preload_s']:.1f} s; T0 -> all exited {r['t0_to_zk_exit_s']} s, start -> "
                f"serving {r['zk_start_to_serving_s']} s; {r['ops_total']:,} ops; acknowledged writes checked "
                f"{s['checked']}, lost {s['lost']}"]
    cut = [summary(r) for r in runs]
    ref = [summary(r) for r in refs]
    out += ["", f"### medians over {len(runs)} cutover run(s)" + (f" and {len(refs)} restart(s)" if refs else ""), "",
            "| metric | cutover (mirror -> zabd) | ZooKeeper full restart | ratio |", "|---|---|---|---|"]

    def row(name: str, a: float | None, b: float | None) -> None:
        ratio = f"{a / b:.2f}" if a is not None and b else "-"
        out.append(f"| {name} | {a if a is not None else '-'} | {b if b is not None else '-'} | {ratio} |")

    row("writer gap, median (s)", _med([c["gap_median_s"] for c in cut]), _med([c["gap_median_s"] for c in ref]))
    row("writer gap, max (s)", _med([c["gap_max_s"] for c in cut]), _med([c["gap_max_s"] for c in ref]))
    row("T0 -> mirror exit (s)", _med([r["t0_to_mirror_exit_s"] for r in runs]), None)
    row("mirror exit -> zabd leader (s)", _med([r["mirror_exit_to_zabd_leader_s"] for r in runs]), None)
    row("ZooKeeper start -> serving (s)", None, _med([r["zk_start_to_serving_s"] for r in refs]))
    row("mirror lag max (txns)", _med([r.get("lag", {}).get("txns_max") for r in runs]), None)
    row("mirror lag max (s)", _med([r.get("lag", {}).get("s_max") for r in runs]), None)
    out.append(f"| sessions kept | {sum(c['sessions_kept'] for c in cut)}/{sum(c['writers'] for c in cut)} | "
               f"{sum(c['sessions_kept'] for c in ref)}/{sum(c['writers'] for c in ref)} | |")
    out.append(f"| acknowledged writes lost | {sum(c['lost'] or 0 for c in cut)} of "
               f"{sum(c['checked'] or 0 for c in cut)} paths | {sum(c['lost'] or 0 for c in ref)} of "
               f"{sum(c['checked'] or 0 for c in ref)} paths | |")
    return out


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # the finally blocks stop what was started


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--znodes", type=int, default=10_000, help="leaves preloaded under /m (10,000)")
    p.add_argument("--writers", type=int, default=4, help="kazoo writer clients, threads (4)")
    p.add_argument("--cutover-grace", type=float, default=1.0, help="the mirror's --cutover-grace (1 s)")
    p.add_argument("--runs", type=int, default=1, help="cutover runs (and restarts with --zk-restart); medians")
    p.add_argument("--zk-restart", action="store_true", help="also ZooKeeper's own full-ensemble restart")
    p.add_argument("--load-seconds", type=float, default=10.0, help="writing before T0 (10 s)")
    p.add_argument("--after-ops", type=int, default=100, help="successes each writer needs after T0 (100)")
    p.add_argument("--after-seconds", type=float, default=60.0, help="at most this long after T0 for them (60 s)")
    p.add_argument("--max-ops", type=int, default=200_000, help="ops per writer at most (200,000)")
    p.add_argument("--sample-ms", type=float, default=200.0, help="lag sampling interval (200 ms)")
    p.add_argument("--zk-heap", default="1g", help="ZooKeeper -Xmx (1g; 2g for a million znodes)")
    p.add_argument("--preload-max-seconds", type=float, default=600.0, help="ZkTreeLoad's bound (600 s)")
    p.add_argument("--no-finish-from", action="store_true",
                   help="run the mirror without --finish-from (the stopping leader's window stays open)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", help="write the JSON result here too")
    args = p.parse_args(argv)
    for name in ("znodes", "writers", "runs", "after_ops", "max_ops"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected 1 or more")
    for name in ("cutover_grace", "load_seconds", "after_seconds", "sample_ms", "preload_max_seconds"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected a number > 0")
    ok, why = available()
    if not ok:
        print(f"zk_mirror_cutover: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # a line per refused connection while both are down
    work = Path(tempfile.mkdtemp(prefix="zk_mirror_cutover.", dir="/tmp"))
    build = work / "build"
    compile_loader(build)
    log(f"work dir {work}; zabd {compiled.describe()}")
    runs: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    try:
        for k in range(args.runs):
            runs.append(run_cutover(work / f"cut{k}", args, build))
            log(f"cutover run {k + 1}: {summary(runs[-1])}")
            if args.zk_restart:
                refs.append(run_zk_restart(work / f"restart{k}", args, build))
                log(f"restart run {k + 1}: {summary(refs[-1])}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(report(runs, refs)))
    result = {"args": vars(args), "zabd": compiled.describe(), "cutover": runs, "zk_restart": refs}
    line = json.dumps(result, default=str)
    print(line)
    if args.json:
        Path(args.json).write_text(line + "\n")
    bad = any(r.get("error") or summary(r)["lost"] for r in runs + refs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
