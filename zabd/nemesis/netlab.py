"""A network lab: real hosts in Linux network namespaces, and partitions.

Each host is a network namespace with a veth pair to one bridge in the root
namespace; the root namespace has an address on the bridge too, so clients
(and tests) running there reach every host. A partition is a packet DROP in
the hosts' own netfilter tables: no RST, the connections just go quiet, as
with a cut cable. Everything is torn down at the end, also on failure; a lab
left behind by a process that died is cleaned up by the next one.

    with NetLab(3) as lab:
        proc = lab.spawn(1, ["zabd", "serve", ...])
        lab.isolate(1)          # host 1 cannot reach hosts 2 and 3 (clients still can)
        lab.heal()

Naming: every namespace and interface name is ``z<PID>_<N>`` and a suffix,
with the creating PID and a per-process counter, so leftovers can be traced to
their (dead) creator. Addresses: ``10.213.X.i/24`` for host ``i`` and
``10.213.X.254`` for the root namespace, X chosen per lab. The root
namespace also gets a blackhole route for all of 10.213.0.0/16 (left in
place): a packet for a lab that is already gone (a client still retrying
after the teardown) is dropped here instead of following the default route
off the machine. The hosts' namespaces have no default route at all.

On machines where Docker runs, the root namespace's iptables FORWARD policy
is DROP with ``bridge-nf-call-iptables`` on, so bridged traffic between the
hosts is filtered there: the lab inserts an ACCEPT rule for its own bridge,
and removes exactly that rule at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable, Sequence
from typing import IO, Any

PREFIX = "z"
CHAIN = "ZABDLAB"
LAB_RANGE = "10.213.0.0/16"  # every lab's addresses; see the module doc for the blackhole route
_counter = itertools.count(1)
_NAME = re.compile(rf"{PREFIX}(\d+)_(\d+)")


class NetLabError(Exception):
    """A command that sets up or changes the lab failed (one line: the command and its error)."""


def _run(argv: Sequence[str], check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, input=stdin, check=False)
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().replace("\n", "; ")
        raise NetLabError(f"{' '.join(argv)}: {err or f'exit status {proc.returncode}'}")
    return proc


def available() -> tuple[bool, str]:
    """Whether this machine can run a lab, and why not."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "iptables", "iptables-restore"):
        if shutil.which(tool) is None:
            return False, f"{tool} is not installed (bash scripts/install.sh installs iptables)"
    name = f"{PREFIX}{os.getpid()}probe"
    if _run(["ip", "netns", "add", name], check=False).returncode != 0:
        return False, "cannot create a network namespace here"
    _run(["ip", "netns", "del", name], check=False)
    return True, ""


def _free_subnet(first: int) -> int:
    """A 10.213.X.0/24 no interface here uses yet (labs of other processes
    run at the same time), trying X = first, first+1, ... within 100..249."""
    used = set(re.findall(r"inet 10\.213\.(\d+)\.", _run(["ip", "-o", "-4", "addr"], check=False).stdout))
    for k in range(150):
        x = 100 + (first - 100 + k) % 150
        if str(x) not in used:
            return x
    raise NetLabError("no free 10.213.X.0/24 for another lab (150 labs at once?)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale() -> int:
    """Remove namespaces, bridges and FORWARD rules of labs whose creating
    process is gone. Returns how many objects were removed."""
    removed = 0
    for name in _run(["ip", "netns", "list"], check=False).stdout.split():
        m = _NAME.match(name)
        if m and not _alive(int(m.group(1))):
            removed += _run(["ip", "netns", "del", name], check=False).returncode == 0
    for line in _run(["ip", "-o", "link", "show"], check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            dev = parts[1].strip().split("@")[0]
            m = _NAME.match(dev)
            if m and not _alive(int(m.group(1))):
                removed += _run(["ip", "link", "del", dev], check=False).returncode == 0
    for rule in _run(["iptables", "-S", "FORWARD"], check=False).stdout.splitlines():
        m = re.search(rf"-i {PREFIX}(\d+)_\d+br\b", rule)
        if m and rule.startswith("-A") and not _alive(int(m.group(1))):
            removed += _run(["iptables", "-D", *rule.split()[1:]], check=False).returncode == 0
    return removed


class NetLab:
    def __init__(self, hosts: int, *, name: str | None = None) -> None:
        if not 1 <= hosts <= 250:
            raise ValueError(f"hosts {hosts}: expected 1..250")
        self.n = hosts
        count = next(_counter)
        self.tag = name or f"{PREFIX}{os.getpid()}_{count}"
        if len(self.tag) > 11:  # + "br" / "h12p": Linux interface names hold 15 characters
            raise ValueError(f"lab name {self.tag!r} is too long (at most 11 characters)")
        self.bridge = f"{self.tag}br"
        self.subnet = _free_subnet(100 + (os.getpid() * 7 + count) % 150)
        self.root_addr = f"10.213.{self.subnet}.254"
        self.procs: list[subprocess.Popen[bytes]] = []
        self._forward_rule: list[str] | None = None
        self._made: list[str] = []  # namespaces created
        self._closed = False
        self.cuts: set[tuple[int, int]] = set()  # (src, dst): packets from src to dst dropped
        cleanup_stale()
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- setup

    def ns(self, host: int) -> str:
        return f"{self.tag}h{host}"

    def addr(self, host: int) -> str:
        if not 1 <= host <= self.n:
            raise ValueError(f"host {host}: expected 1..{self.n}")
        return f"10.213.{self.subnet}.{host}"

    def _build(self) -> None:
        _run(["ip", "route", "replace", "blackhole", LAB_RANGE])
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.root_addr}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        self._forward_rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]
        _run(["iptables", "-I", self._forward_rule[0], "1", *self._forward_rule[1:]])
        for h in range(1, self.n + 1):
            ns = self.ns(h)
            _run(["ip", "netns", "add", ns])
            self._made.append(ns)
            outside, inside = f"{self.tag}h{h}p", f"{self.tag}h{h}i"
            _run(["ip", "link", "add", outside, "type", "veth", "peer", "name", inside])
            _run(["ip", "link", "set", inside, "netns", ns])
            _run(["ip", "link", "set", outside, "master", self.bridge])
            _run(["ip", "link", "set", outside, "up"])
            for cmd in (
                ["ip", "addr", "add", f"{self.addr(h)}/24", "dev", inside],
                ["ip", "link", "set", inside, "up"],
                ["ip", "link", "set", "lo", "up"],
            ):
                _run(["ip", "netns", "exec", ns, *cmd])
            # the lab's own chain, jumped to from INPUT and OUTPUT: heal() flushes only it
            _run(
                ["ip", "netns", "exec", ns, "iptables-restore", "--noflush"],
                stdin=f"*filter\n:{CHAIN} - [0:0]\n-A INPUT -j {CHAIN}\n-A OUTPUT -j {CHAIN}\nCOMMIT\n",
            )

    # ------------------------------------------------------------- processes

    def spawn(
        self,
        host: int,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        stdout: IO[Any] | int | None = None,
        stderr: IO[Any] | int | None = None,
        cwd: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Run ``argv`` inside the host's namespace (``ip netns exec`` execs it,
        so the PID is the process's own and it can be signalled by PID)."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(self._check(host)), *argv],
            env=env, stdout=stdout, stderr=stderr, cwd=cwd, stdin=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        return proc

    def _check(self, host: int) -> int:
        self.addr(host)
        return host

    # ------------------------------------------------------------ partitions

    def _apply(self) -> None:
        """Write every host's chain from ``self.cuts``: one iptables-restore a host."""
        for h in range(1, self.n + 1):
            lines = ["*filter", f":{CHAIN} - [0:0]", f"-F {CHAIN}"]
            for src, dst in sorted(self.cuts):
                # A cut src->dst drops at src (OUTPUT) what it sends to dst, and
                # at dst (INPUT) what arrives from src: one direction only.
                if src == h:
                    peer = self.root_addr if dst == 0 else self.addr(dst)
                    lines.append(f"-A {CHAIN} -d {peer}/32 -j DROP")
                if dst == h:
                    peer = self.root_addr if src == 0 else self.addr(src)
                    lines.append(f"-A {CHAIN} -s {peer}/32 -j DROP")
            lines.append("COMMIT")
            _run(["ip", "netns", "exec", self.ns(h), "iptables-restore", "--noflush"], stdin="\n".join(lines) + "\n")

    def cut_one_way(self, src: int, dst: int) -> None:
        """Packets from ``src`` to ``dst`` are dropped (0: the root namespace)."""
        if src == dst:
            raise ValueError(f"cut {src}->{dst}: a host is never cut from itself")
        self.cuts.add((src, dst))
        self._apply()

    def cut(self, a: int, b: int) -> None:
        self.cuts |= {(a, b), (b, a)}
        self._apply()

    def cut_pairs(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Cut each pair of hosts, both ways, in one change."""
        for a, b in pairs:
            self.cuts |= {(a, b), (b, a)}
        self._apply()

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Cut every pair of hosts in different groups (both ways)."""
        sets = [set(g) for g in groups]
        for i, g1 in enumerate(sets):
            for g2 in sets[i + 1 :]:
                for a in g1:
                    for b in g2:
                        self.cuts |= {(a, b), (b, a)}
        self._apply()

    def isolate(self, host: int, *, clients: bool = True) -> None:
        """Cut ``host`` from every other host; ``clients=False`` also from the
        root namespace, where the clients run."""
        others = [h for h in range(1, self.n + 1) if h != host]
        if not clients:
            others.append(0)
        for other in others:
            self.cuts |= {(host, other), (other, host)}
        self._apply()

    def heal(self) -> None:
        self.cuts.clear()
        if not self._closed:
            self._apply()

    # -------------------------------------------------------------- teardown

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for ns in self._made:
            _run(["ip", "netns", "del", ns], check=False)
        for h in range(1, self.n + 1):
            _run(["ip", "link", "del", f"{self.tag}h{h}p"], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        if self._forward_rule is not None:
            _run(["iptables", "-D", *self._forward_rule], check=False)

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
