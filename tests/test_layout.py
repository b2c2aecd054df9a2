"""The layout the architecture promises: no import cycles in ``zabd``, no
private attribute reached across modules, no imports inside functions in the
server."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "zabd"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every zabd module this file imports, at any depth (also inside
    functions and TYPE_CHECKING blocks: a cycle broken that way is still a cycle)."""
    tree = ast.parse(path.read_text())
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("zabd"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if base.startswith("zabd"):
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names)
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    g: dict[str, set[str]] = {}
    for name, path in files.items():
        g[name] = {m for m in imports_of(path) if m in files and m != name}
    return g


def test_no_import_cycles() -> None:
    g = graph()
    # a package's __init__ re-exporting its own modules is not a cycle of meaning
    for name in g:
        g[name] = {m for m in g[name] if not (m + ".").startswith(name + ".") and not name.startswith(m + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g[n]):
            if state.get(m) == 1:
                cycles.append([*stack[stack.index(m) :], m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


# Which package may import which: the layers, lowest first. A package (or a
# top-level module) imports only what its row names; anything new gets a row.
LAYERS: dict[str, frozenset[str]] = {
    # the pure core: events in, effects out
    "zabd.protocol": frozenset(),
    # byte formats shared by the server and its clients (framing, the KV client schema, membership payloads)
    "zabd.codec": frozenset({"zabd.protocol"}),
    # the interface committed txns are applied to
    "zabd.machine": frozenset({"zabd.protocol"}),
    # the log and snapshots on disk
    "zabd.storage": frozenset({"zabd.protocol"}),
    # ZooKeeper: records, ACLs, errors, events, the jute codec, the txn format, the tree and prepare
    "zabd.zk": frozenset({"zabd.protocol", "zabd.codec", "zabd.machine"}),
    # the replicated state machines (the KV store, and the ZooKeeper tree beside it)
    "zabd.kv": frozenset({"zabd.protocol", "zabd.codec", "zabd.machine", "zabd.zk"}),
    # the deterministic simulator: never the server (its drivers' shared parts live below both)
    "zabd.sim": frozenset({"zabd.protocol", "zabd.codec", "zabd.machine", "zabd.storage", "zabd.zk", "zabd.kv"}),
    "zabd.tls": frozenset(),
    "zabd.certs": frozenset({"zabd.tls"}),
    "zabd.tokens": frozenset(),
    # the config model: read by the server, written through by the launchers (zabd.client)
    "zabd.config": frozenset({"zabd.protocol", "zabd.codec", "zabd.zk", "zabd.tls", "zabd.tokens"}),
    "zabd.compiled": frozenset(),
    "zabd": frozenset({"zabd.compiled"}),
    "zabd.server": frozenset(
        {"zabd", "zabd.protocol", "zabd.codec", "zabd.machine", "zabd.storage", "zabd.zk", "zabd.kv", "zabd.tls",
         "zabd.certs", "zabd.tokens", "zabd.config"}
    ),
    # tools that run clusters and talk to them: never the server's code, only its processes
    "zabd.client": frozenset(
        {"zabd.protocol", "zabd.codec", "zabd.machine", "zabd.storage", "zabd.zk", "zabd.kv", "zabd.tls", "zabd.certs",
         "zabd.tokens", "zabd.config"}
    ),
    "zabd.nemesis": frozenset(
        {"zabd.protocol", "zabd.codec", "zabd.machine", "zabd.storage", "zabd.zk", "zabd.kv", "zabd.tls",
         "zabd.certs", "zabd.tokens", "zabd.config", "zabd.client"}
    ),
    "zabd.pipeline": frozenset(
        {"zabd", "zabd.protocol", "zabd.codec", "zabd.machine", "zabd.storage", "zabd.zk", "zabd.kv", "zabd.sim"}
    ),
    # coming over from ZooKeeper and going back: its data directory in, zabd's out, and back
    "zabd.migrate": frozenset({"zabd.protocol", "zabd.codec", "zabd.machine", "zabd.storage", "zabd.zk", "zabd.kv"}),
    # the command line: dispatches to every tool
    "zabd.cli": frozenset({"zabd.compiled"}),
    "zabd.__main__": frozenset({"zabd.cli"}),
}


def unit_of(module: str) -> str:
    """The layer a module belongs to: its package under zabd, or a top-level module itself."""
    parts = module.split(".")
    if len(parts) >= 2 and (PKG / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def unit_graph() -> dict[str, set[str]]:
    units: dict[str, set[str]] = {}
    for name, deps in graph().items():
        me = unit_of(name)
        units.setdefault(me, set()).update(unit_of(d) for d in deps if unit_of(d) != me)
    return units


def test_every_package_has_a_layer() -> None:
    missing = sorted(set(unit_graph()) - set(LAYERS))
    assert not missing, f"packages or top-level modules without a row in LAYERS: {missing}"


def test_packages_import_only_the_layers_below_them() -> None:
    bad = []
    for name, deps in graph().items():
        me = unit_of(name)
        allowed = LAYERS.get(me, frozenset())
        bad += [f"{name} imports {d}" for d in sorted(deps) if unit_of(d) != me and unit_of(d) not in allowed]
    assert not bad, bad


def test_no_cycles_between_packages() -> None:
    # the rows above could allow a cycle by mistake: check the imports themselves
    g = unit_graph()
    cycles = [f"{a} <-> {b}" for a in sorted(g) for b in sorted(g[a]) if a < b and a in g.get(b, set())]
    seen: set[str] = set()

    def reach(start: str) -> set[str]:
        out: set[str] = set()
        todo = list(g.get(start, ()))
        while todo:
            n = todo.pop()
            if n not in out:
                out.add(n)
                todo.extend(g.get(n, ()))
        return out

    for a in sorted(g):
        if a in reach(a) and a not in seen:
            seen.add(a)
            cycles.append(f"{a} reaches itself")
    assert not cycles, cycles


def test_server_modules_are_clean() -> None:
    # no line cap: a file is as long as its one job needs (CONTRIBUTING.md, "Layering rules")
    problems = []
    for path in sorted((PKG / "server").rglob("*.py")):
        text = path.read_text()
        if "type: ignore" in text:
            problems.append(f"{path.name}: a type: ignore")
        # a private attribute of another object (not self/cls) reached from here
        for m in re.finditer(r"\b(?!self\b|cls\b)([a-z_][a-z0-9_]*)\._[a-z]\w*", text):
            line = text[: m.start()].count("\n") + 1
            problems.append(f"{path.name}:{line}: {m.group(0)}")
        if path.name != "cli.py":
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    for inner in ast.walk(node):
                        if isinstance(inner, ast.Import | ast.ImportFrom):
                            problems.append(f"{path.name}:{inner.lineno}: import inside {node.name}()")
    assert not problems, problems
