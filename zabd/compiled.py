"""Which implementation of the core runs: mypyc-compiled or pure Python.

``scripts/build_compiled.py`` compiles :data:`MODULES` in place and records
each source's hash in :data:`MANIFEST`. At ``import zabd``, :func:`select`
keeps the compiled modules only while every source still has its recorded
hash: an edited source (or ``ZABD_PURE=1``) makes the whole set load from
the ``.py`` files, never a mix (compiled modules call each other natively,
so one stale module would mean running code that is not in the tree).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, SourceFileLoader
from types import ModuleType

# the simulator's hot path, and what it calls: the core, and the drivers' sim
# modules; then a server's write path: the peer and ZooKeeper codecs, the tree
# and its prepare, the log, the effect pipeline, the applier, the sessions,
# proposals, links and transport (ZkBench setData: ~113 -> ~95 us of servers'
# CPU per write with the rest of this session's changes). Not the replica:
# compiling it gained nothing measurable.
MODULES = (
    "zabd.protocol.zxid",
    "zabd.protocol.rand",
    "zabd.protocol.options",
    "zabd.protocol.messages",
    "zabd.protocol.membership",
    "zabd.protocol.effects",
    "zabd.protocol.window",
    "zabd.protocol.node",
    "zabd.sim.faults",
    "zabd.sim.disks",
    "zabd.sim.simulator",
    "zabd.sim.dump",
    "zabd.sim.checker",
    "zabd.sim.run",
    "zabd.codec.framing",
    "zabd.server.peer_wire",
    "zabd.zk.jute",
    "zabd.zk.txn",
    "zabd.zk.msgpack_wire",
    "zabd.zk.tree",
    "zabd.zk.txn_check",
    "zabd.kv.kinds",
    "zabd.zk.prep",
    "zabd.zk.acl",
    "zabd.zk.paths",
    "zabd.kv.kvmachine",
    "zabd.storage.txnlog",
    "zabd.storage.effect_pipeline",
    "zabd.server.payloads",
    "zabd.server.applier",
    "zabd.server.peer_session",
    "zabd.server.outbound",
    "zabd.server.proposals",
    "zabd.server.zk.sessions",
    "zabd.server.zk.conn",
    "zabd.storage.disk",
    "zabd.zk.records",
    "zabd.zk.events",
    "zabd.zk.reads",
    "zabd.zk.watches",
    "zabd.codec.members",
    "zabd.server.zk.stats",
    "zabd.server.client_session",
    "zabd.server.zk.port",
    "zabd.server.link",
    "zabd.server.transport",
)
GROUP = "zabd.native"  # the shared library: zabd/native__mypyc.*.so
MANIFEST = "zabd/compiled.txt"

# os.path, not pathlib: this runs at every ``import zabd`` and pathlib costs milliseconds to import
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_state = "pure Python (not built)"


def _source(name: str) -> str:
    return os.path.join(_ROOT, *name.split(".")) + ".py"


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _check() -> tuple[bool, str]:
    """(use the compiled modules?, why not). A source whose size and mtime
    are as recorded is the one compiled; another (a checkout rewrites files)
    is hashed, and only a different hash means a change."""
    if os.environ.get("ZABD_PURE", "") not in ("", "0"):
        return False, "ZABD_PURE is set"
    try:
        lines = _read(os.path.join(_ROOT, MANIFEST)).decode().splitlines()
    except OSError:
        return False, "not built: scripts/build_compiled.py builds it"
    recorded: dict[str, tuple[int, int, str]] = {}
    try:
        for line in lines[1:]:
            fields = line.split()
            recorded[fields[0]] = (int(fields[1]), int(fields[2]), fields[3])
    except (IndexError, ValueError):
        return False, f"{MANIFEST} is not what scripts/build_compiled.py writes: run it again"
    for name in MODULES:
        if name not in recorded:
            return False, f"{name} was not compiled: run scripts/build_compiled.py"
        stat, digest = recorded[name][:2], recorded[name][2]
        path = _source(name)
        try:
            st = os.stat(path)
            if (st.st_size, st.st_mtime_ns) != stat and _sha256(path) != digest:
                return False, f"{name} changed since the build: run scripts/build_compiled.py"
        except OSError:
            return False, f"{name}: no source"
    return True, ""


def _sha256(path: str) -> str:
    from hashlib import sha256  # only when a file's stat differs: OpenSSL takes milliseconds to load

    return sha256(_read(path)).hexdigest()


class _PureFinder:
    """Loads :data:`MODULES` from their sources even where an extension sits beside them."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in MODULES:
            return None
        file = _source(name)
        spec = ModuleSpec(name, SourceFileLoader(name, file), origin=file)
        spec.has_location = True  # __file__, and cached bytecode where there is some
        return spec


def select() -> None:
    """Called once by ``zabd/__init__``, before any module of the set is imported."""
    global _state
    use, why = _check()
    if use:
        _state = "compiled with mypyc"
        return
    _state = f"pure Python ({why})"
    if not any(isinstance(f, _PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PureFinder())


def describe() -> str:
    """For ``zabd --version`` and benchmarks: which core is in use, and why."""
    return _state


def in_use() -> bool:
    return _state.startswith("compiled")
