"""A Jepsen-style run: real servers in network namespaces, clients in the root
namespace recording every operation, a nemesis every few seconds, then a
quiet period, and the checks.

Workloads, run together: a per-key register (``put``, ``sync`` + ``get``,
``cas``) checked for linearizability, and unique appends (raw proposals)
checked for loss, duplication and order. ``workload="zk"`` runs the same
through kazoo on the servers' ZooKeeper ports instead, with ephemerals that
must be gone once their sessions end (``zabd.nemesis.zk``). An operation that fails certainly
(refused before it was proposed) is a failure; one whose fate is unknown
(timeout, connection or leader lost) is recorded as unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from zabd.client import Client, ZabdError
from zabd.client.spawn import LocalCluster
from zabd.nemesis.appends import AppendReport, check_appends
from zabd.nemesis.faults import ALL, Nemesis
from zabd.nemesis.history import APPEND, CAS, FAIL, OK, PUT, READ, UNKNOWN, History, Op
from zabd.nemesis.linearizability import check, write_report
from zabd.nemesis.membership import Membership, MembershipChanger
from zabd.nemesis.netlab import NetLab

if TYPE_CHECKING:
    from zabd.nemesis.zk import ZkResult, ZkWorkload

APPEND_PREFIX = b"ap-"
WORKLOADS = ("zabd", "zk")


@dataclass(slots=True)
class RunConfig:
    nemesis: str
    nodes: int = 3
    seconds: float = 60.0
    interval: float = 5.0  # a fault lasts this long, then the same time healed
    quiet: float = 5.0
    clients_per_node: int = 2
    keys: int = 5
    seed: int = 1
    out: Path = field(default_factory=lambda: Path("out/nemesis"))
    audit: bool = False  # also ``zabd pipeline audit`` of the data directories (Spark)
    workload: str = "zabd"  # "zabd": zabd's own client port; "zk": kazoo on the ZooKeeper port
    spares: int = 0  # > 0: membership changes among nodes + spares servers (zabd.nemesis.membership)


@dataclass(slots=True)
class Summary:
    nemesis: str
    nodes: int
    seconds: float
    faults: int
    register_ops: dict[str, int]
    append_ops: dict[str, int]
    linearizable: bool | None
    lost_appends: int
    append_problems: str
    longest_no_write_s: float
    logs_agree: bool
    verify_ok: bool
    notes: list[str]
    workload: str = "zabd"
    ephemerals_left: int = 0  # zk: ephemerals still there after their sessions ended (and the wait)
    ephemerals: str = ""  # zk: what the ephemeral check found
    membership: str = ""  # --membership: the changes made, and the membership restored at the end
    membership_restored: bool = True

    @property
    def ok(self) -> bool:
        return (self.linearizable is True and self.lost_appends == 0 and self.append_problems.startswith("ok")
                and self.logs_agree and self.verify_ok and self.ephemerals_left == 0 and self.membership_restored)


class LabCluster:
    """The nemesis's target: servers in a NetLab, each data dir on its own
    loop-mounted ext4 when the slow-disk nemesis needs one."""

    def __init__(self, n: int, base: Path, loop_disks: bool, members: int = 0) -> None:
        """``members``: nodes 1..members form the ensemble, the rest join later (0: all)."""
        self.n = n
        self.base = base
        self.lab = NetLab(n)
        self.mounts: dict[int, Path] = {}
        self.known_leader: int | None = None
        try:
            if loop_disks:
                for i in range(1, n + 1):
                    self.mounts[i] = self._loop_fs(i)
            hosts = {i: self.lab.addr(i) for i in range(1, n + 1)}
            # Snapshots go on as usual, but no log is purged: the append check
            # needs every node's whole log (a purge would hide a lost append).
            # With members joining and leaving, a member far behind would get
            # a snapshot and a log that starts there: a sync reads the log instead.
            extra: dict[str, Any] = {"autopurge": False}
            if members and members < n:
                extra["diff_limit"] = 100_000_000
            self.cluster = LocalCluster(n, storage="disk", base_dir=base, hosts=hosts, spawn=self._spawn,
                                        extra=extra, members=members)
            self.cluster.start()
        except BaseException:
            self.close()
            raise

    def _loop_fs(self, i: int) -> Path:
        img, mnt = self.base / f"disk{i}.img", self.base / f"mnt{i}"
        mnt.mkdir(parents=True)
        with open(img, "wb") as f:
            f.truncate(1 << 30)  # sparse
        subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True, capture_output=True)
        (mnt / "data").mkdir()
        (self.base / f"data{i}").symlink_to(mnt / "data")
        return mnt

    def _spawn(self, i: int, argv: list[str], env: dict[str, str], out: BinaryIO) -> subprocess.Popen[bytes]:
        return self.lab.spawn(i, argv, env=env, stdout=out, stderr=out)

    # Target
    def leader(self) -> int | None:
        return self.known_leader

    def kill(self, node: int) -> None:
        self.cluster.kill(node)

    def restart(self, node: int) -> None:
        if not self.cluster.alive(node):
            self.cluster.start_node(node)

    def pause(self, node: int) -> None:
        self.cluster.signal(node, 19)  # SIGSTOP

    def resume(self, node: int) -> None:
        self.cluster.signal(node, 18)  # SIGCONT

    def data_mount(self, node: int) -> str | None:
        m = self.mounts.get(node)
        return str(m) if m is not None else None

    def stop(self) -> None:
        """Stop the servers and tear the network down; the data stays mounted
        for the checks that read it (``unmount`` after them)."""
        for mnt in self.mounts.values():
            subprocess.run(["fsfreeze", "-u", str(mnt)], capture_output=True)
        if hasattr(self, "cluster"):
            for i in range(1, self.n + 1):
                with contextlib.suppress(KeyError):
                    self.resume(i)
            self.cluster.stop()
        self.lab.close()

    def unmount(self) -> None:
        for mnt in self.mounts.values():
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        self.mounts.clear()

    def close(self) -> None:
        self.stop()
        self.unmount()


class Workload:
    def __init__(self, cluster: LocalCluster, cfg: RunConfig, history: History) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.history = history
        self.stop = asyncio.Event()
        self.rng = random.Random(cfg.seed)
        self.write_oks: list[int] = []  # completion times of successful writes

    async def register_client(self, cid: int, node: int) -> None:
        rng = random.Random(self.cfg.seed * 1000 + cid)
        seen: dict[str, int] = {}

        def next_op(n: int) -> Op:
            key = f"k{rng.randrange(self.cfg.keys)}"
            kind = rng.choice([PUT, READ, READ, CAS])
            value = None if kind == READ else b"c%d-%d" % (cid, n)
            return self.history.invoke(cid, kind, key, time.monotonic_ns(), value,
                                       seen.get(key, 0) if kind == CAS else 0)

        async def perform(client: Client, op: Op) -> None:
            try:
                if op.kind == PUT:
                    r = await client.put(op.key, op.value or b"")
                    self._done(op, OK, version=r.version, zxid=r.zxid)
                elif op.kind == CAS:
                    r = await client.cas(op.key, op.expect, op.value or b"")
                    self._done(op, OK, version=r.version, zxid=r.zxid)
                else:
                    await client.sync()
                    g = await client.get(op.key)
                    History.complete(op, time.monotonic_ns(), OK, value=g.value, version=g.version)
            except ZabdError as exc:
                if exc.code not in ("bad_version", "no_node"):
                    raise
                # a failed condition was ordered like a write: it saw another version
                History.complete(op, time.monotonic_ns(), OK, code=exc.code, version=exc.version, zxid=exc.zxid)
                seen[op.key] = exc.version
                return
            seen[op.key] = op.version

        await self._client_loop(node, next_op, perform)

    async def append_client(self, cid: int, node: int) -> None:
        def next_op(n: int) -> Op:
            return self.history.invoke(cid, APPEND, "log", time.monotonic_ns(), APPEND_PREFIX + b"%d-%d" % (cid, n))

        async def perform(client: Client, op: Op) -> None:
            self._done(op, OK, zxid=await client.propose(op.value or b""))

        await self._client_loop(node, next_op, perform)

    async def _client_loop(self, node: int, next_op: Callable[[int], Op],
                           perform: Callable[[Client, Op], Awaitable[None]]) -> None:
        """Operations one after another on one node until told to stop; an
        error closes the connection and the next operation reconnects."""
        client: Client | None = None
        n = 0
        while not self.stop.is_set():
            n += 1
            op = next_op(n)
            try:
                if client is None:
                    client = await Client.connect(self.cluster.client_addr(node), timeout=1.0, read_retry=1.0)
                await perform(client, op)
            except ZabdError as exc:
                self._failed(op, exc)
                client = await self._reset(client)
            except (OSError, TimeoutError):
                History.complete(op, 0, UNKNOWN)
                client = await self._reset(client)
        if client is not None:
            await client.close()

    def _done(self, op: Op, outcome: str, **result: Any) -> None:
        now = time.monotonic_ns()
        History.complete(op, now, outcome, **result)
        self.write_oks.append(now)

    @staticmethod
    def _failed(op: Op, exc: ZabdError) -> None:
        History.complete(op, time.monotonic_ns(), FAIL if exc.applied is False else UNKNOWN, code=exc.code)

    @staticmethod
    async def _reset(client: Client | None) -> Client | None:
        """Close ``client`` after an error; the next operation reconnects."""
        if client is not None:
            await client.close()
        await asyncio.sleep(0.02)  # a short pause before trying again, not a synchronisation
        return None


async def _track_leader(target: LabCluster, stop: asyncio.Event) -> None:
    while not stop.is_set():
        sts = await target.cluster.statuses()
        leaders = [i for i, st in sts.items() if st and st["role"] == "leading" and st["phase"] == "broadcast"]
        if len(leaders) == 1:
            target.known_leader = leaders[0]
        await asyncio.sleep(0.3)


def _membership_summary(changer: MembershipChanger | None, restored: Membership | None) -> str:
    if changer is None:
        return ""
    end = f"voters {sorted(restored.voters)} at the end" if restored else "NOT restored"
    return f"{changer.summary()}; {end}"


def _longest_gap(times: list[int], start: int, end: int) -> float:
    points = [start, *sorted(t for t in times if start <= t <= end), end]
    return max(b - a for a, b in itertools.pairwise(points)) / 1e9


async def run(cfg: RunConfig, log: Any = print) -> Summary:
    if cfg.workload not in WORKLOADS:
        raise ValueError(f"workload {cfg.workload!r}: expected one of {', '.join(WORKLOADS)}")
    zk_run = cfg.workload == "zk"
    out = cfg.out / (f"{cfg.nemesis}-n{cfg.nodes}" + ("-zk" if zk_run else "") + ("-members" if cfg.spares else ""))
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    nemesis: Nemesis = ALL[cfg.nemesis]()
    rng = random.Random(cfg.seed)
    history = History()
    notes: list[str] = []
    base = out / "cluster"
    hosts = cfg.nodes + cfg.spares
    target = LabCluster(hosts, base, loop_disks=cfg.nemesis in ("slow-disk", "mixed"), members=cfg.nodes)
    changer = MembershipChanger(target.cluster, cfg.nodes, random.Random(cfg.seed * 7919), log) if cfg.spares else None
    restored: Membership | None = None
    faults = 0
    zwork: ZkWorkload | None = None
    zres: ZkResult | None = None
    try:
        await target.cluster.wait_leader(list(range(1, cfg.nodes + 1)), timeout=60)
        work: Workload | ZkWorkload
        if zk_run:
            from zabd.nemesis.zk import ZkWorkload  # kazoo: only for this workload

            work = zwork = ZkWorkload(target.cluster, cfg.keys, cfg.seed, history)
            await zwork.setup()
        else:
            work = Workload(target.cluster, cfg, history)
        tracker_stop = asyncio.Event()
        tracker = asyncio.create_task(_track_leader(target, tracker_stop))
        tasks = []
        cid = 0
        for node in range(1, hosts + 1):  # spares too: a non-member must refuse, or answer as a member would
            for _ in range(cfg.clients_per_node):
                cid += 1
                tasks.append(asyncio.create_task(work.register_client(cid, node)))
            cid += 1
            tasks.append(asyncio.create_task(work.append_client(cid, node)))
            if zwork is not None:
                cid += 1
                tasks.append(asyncio.create_task(zwork.ephemeral_client(cid, node)))
        t_start = time.monotonic_ns()
        changes_stop = asyncio.Event()
        if changer is not None:
            changer.t0 = t_start / 1e9  # its log's times count from the start of the faults, as the runner's
        # a change half way through each fault and each healed spell
        changes = asyncio.create_task(changer.run(cfg.interval, changes_stop)) if changer is not None else None
        deadline = time.monotonic() + cfg.seconds
        while time.monotonic() + 2 * cfg.interval <= deadline:
            did = nemesis.start(target, rng)
            faults += 1
            log(f"{(time.monotonic_ns() - t_start) / 1e9:7.1f} s  {cfg.nemesis}: {did}")
            await asyncio.sleep(cfg.interval)  # the fault lasts this long: a schedule, not a wait for an event
            log(f"{(time.monotonic_ns() - t_start) / 1e9:7.1f} s  {cfg.nemesis}: {nemesis.heal(target)}")
            await asyncio.sleep(cfg.interval)
        changes_stop.set()
        if changes is not None:
            await changes
        target.lab.heal()
        for i in range(1, hosts + 1):
            target.resume(i)
            target.restart(i)
        if changer is not None:
            restored = await changer.restore()
            log(f"{(time.monotonic_ns() - t_start) / 1e9:7.1f} s  membership restored: "
                + (f"voters {sorted(restored.voters)}" if restored else "NOT within 90 s"))
        await asyncio.sleep(cfg.quiet)  # the quiet period: clients go on, everything healed
        work.stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        t_end = time.monotonic_ns()
        if zwork is not None:
            await zwork.close()
            zres = await asyncio.wait_for(zwork.read_back(cfg.nodes, log), 180)
        tracker_stop.set()
        await tracker
        history.save(out / "history.jsonl")
        # convergence: every node at one commit point, the same log where they overlap
        last = await target.cluster.wait_caught_up(list(range(1, cfg.nodes + 1)), timeout=60)
        sts = await target.cluster.statuses(list(range(1, cfg.nodes + 1)))
        start = max(st["log_base"] for st in sts.values() if st) + 1
        logs: dict[int, list[tuple[int, bytes]]] = {}
        for i in range(1, cfg.nodes + 1):
            async with await Client.connect(target.cluster.client_addr(i), read_retry=5) as c:
                logs[i] = [(t.zxid, t.payload) for t in await c.read_all(start) if t.zxid <= last]
        logs_agree = all(log_ == logs[1] for log_ in logs.values())
        if start > 1:
            notes.append(f"logs compared after {start - 1:#x} (purged below)")
    except BaseException:
        if zwork is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(zwork.close(), 30)
        target.close()
        raise
    target.stop()
    try:
        dirs = [str(base / f"data{i}") for i in range(1, hosts + 1)]
        verify_ok = all(
            subprocess.run([sys.executable, "-m", "zabd", "log", "verify", d], capture_output=True).returncode == 0
            for d in dirs
        )
        if cfg.audit:
            audit = subprocess.run([sys.executable, "-m", "zabd", "pipeline", "audit", *dirs], capture_output=True,
                                   text=True, timeout=900)
            verify_ok = verify_ok and audit.returncode == 0
            notes.append("audit: " + (audit.stdout.strip().splitlines() or ["no output"])[-1]
                         if audit.returncode == 0 else f"audit failed: {audit.stderr.strip()[-300:]}")
    finally:
        target.unmount()  # the loop disks of slow-disk: the checks above read them
    register = [op for op in history if op.kind != APPEND]
    appends = [op for op in history if op.kind == APPEND]
    result = check(register)
    if result.ok is not True:
        write_report(result, out / "linearizability.txt")
    ephemerals_left, ephemerals = 0, ""
    report: AppendReport | None
    if zres is not None and zwork is not None:
        # the ZooKeeper run: the children of /appends by sequence number are the log
        from zabd.nemesis.zk import check_zk_appends

        zreport, reordered = check_zk_appends(appends, zres.logs)
        report = zreport
        append_problems = zreport.summary()
        bad = [f"{len(reordered)} reordered"] if reordered else []
        bad += [f"{len(zres.data_mismatch)} with data not their value"] if zres.data_mismatch else []
        if bad:
            append_problems = f"NOT ok: {', '.join(bad)}; {append_problems}"
        if not append_problems.startswith("ok"):
            (out / "appends.txt").write_text(zreport.format() + "".join(
                f"reordered: {x}\n" for x in reordered[:50]) + "".join(f"data: {x}\n" for x in zres.data_mismatch[:50]))
        ephemerals_left = len({p for paths in zres.left.values() for p in paths})
        ephemerals = zres.ephemeral_summary()
        notes.append(f"ephemerals: {ephemerals}")
        if zwork.end_retries:
            notes.append("reads at the end tried again: " + ", ".join(
                f"{k} x{v}" for k, v in sorted(zwork.end_retries.items())))
        if zwork.errors:
            notes.append("unexpected errors: " + ", ".join(f"{k} x{v}" for k, v in sorted(zwork.errors.items())))
    else:
        append_logs = {i: [(z, p) for z, p in log_ if p.startswith(APPEND_PREFIX)] for i, log_ in logs.items()}
        report = check_appends(appends, append_logs) if start <= 1 else None
        append_problems = report.summary() if report else "not checked"
        if report is None:
            notes.append("appends not checked: part of the log was purged")
    membership = _membership_summary(changer, restored)
    if changer is not None:
        notes.append(f"membership: {membership}")
        (out / "membership.jsonl").write_text("".join(json.dumps(asdict(c)) + "\n" for c in changer.changes))
    summary = Summary(
        nemesis=cfg.nemesis, nodes=cfg.nodes, seconds=cfg.seconds, faults=faults,
        register_ops=History.of(register).counts(), append_ops=History.of(appends).counts(),
        linearizable=result.ok, lost_appends=len(report.lost) if report else 0,
        append_problems=append_problems,
        longest_no_write_s=round(_longest_gap(work.write_oks, t_start, t_end), 2),
        logs_agree=logs_agree, verify_ok=verify_ok, notes=notes,
        workload=cfg.workload, ephemerals_left=ephemerals_left, ephemerals=ephemerals,
        membership=membership, membership_restored=changer is None or restored is not None,
    )
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=1))
    return summary
